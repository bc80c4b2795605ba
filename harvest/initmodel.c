// initmodel.c - `harvest init-model`: a random-weight checkpoint (config.json + safetensors) for
// demos, tests and benchmarks. Weights depend only on the seed and the tensor's name.
#define _POSIX_C_SOURCE 200809L // defines: mkdir
#include "harvest/cliargs.h"
#include "harvest/harvest.h"

#include "io/config_json.h"
#include "io/halfconv.h"
#include "io/outlock.h"
#include "io/safetensors.h"
#include "model/fp8.h" // defines: fp8_quantize (FP8 checkpoints)

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

// splitmix64: a tiny, well-mixed generator
static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double uniform01(uint64_t *s) {
    return ((double)(splitmix(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

static double gauss(uint64_t *s) {
    double u = uniform01(s), v = uniform01(s);
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

static uint64_t name_hash(const char *s) {
    uint64_t h = 1469598103934665603ull;
    while (*s)
        h = (h ^ (unsigned char)*s++) * 1099511628211ull;
    return h;
}

// A tensor to write: name, shape and on-disk dtype. FP8 (q8 1: the F8_E4M3 bytes, 2: the float32
// weight_scale_inv) are those of the random BF16 weight wname (wshape) quantized per bn x bk
// block, as transformers' Fp8Quantize does (model/fp8.h fp8_quantize).
struct wspec {
    const char *name;
    int ndim;
    int64_t shape[4]; // up to 4 dims: U8 (MXFP4 blocks and scales)
    enum st_dtype dt;
    int q8, bn, bk;
    const char *wname;
    int64_t wshape[2];
};

// Norm weights near 1, projections N(0, 1/fan_in), embeddings N(0, 1), a router's selection bias
// N(0, 0.1^2): fill_next gives a tensor's values in order.
struct filler {
    uint64_t s;
    double mean, sd;
};

static struct filler fill_begin(const struct wspec *t, uint64_t seed) {
    bool bias = strstr(t->name, "bias") != NULL, norm = t->ndim == 1 && !bias;
    bool emb = strstr(t->name, "embed") != NULL;
    double sd = norm || bias ? 0.1 : emb ? 1.0 : 1.0 / sqrt((double)t->shape[1]);
    return (struct filler){seed * 0x9e3779b97f4a7c15ull ^ name_hash(t->name), norm ? 1.0 : 0.0, sd};
}

static float fill_next(struct filler *g) {
    return (float)(g->mean + g->sd * gauss(&g->s));
}

static int64_t wspec_count(const struct wspec *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}

// MXFP4 bytes (U8, model/mxfp4.h) of tensor t: "_blocks" uniform random codes, "_scales" the
// power of two that makes the values about N(0, 1/K), K = the row's G * 32 values (shape[2]),
// one step either way at random, so that the scales matter. Uniform FP4 codes have mean square
// 8.5625 (integrations/mxfp4.py FP4_VALUES).
static void fill_mxfp4(uint8_t *out, const struct wspec *t, uint64_t seed) {
    uint64_t s = seed * 0x9e3779b97f4a7c15ull ^ name_hash(t->name);
    bool scales = strstr(t->name, "_scales") != NULL;
    int e = (int)lround(-log2(sqrt(8.5625 * (double)t->shape[2] * 32.0)));
    for (int64_t i = 0; i < wspec_count(t); i++)
        out[i] = scales ? (uint8_t)(127 + e + (int)(splitmix(&s) % 3) - 1) : (uint8_t)splitmix(&s);
}

// an FP8 tensor of t (q8 1 or 2): its BF16 weight made (float32 values rounded to bf16),
// quantized; the bytes or the scales in a new buffer, NULL when out of memory
static void *fill_fp8(const struct wspec *t, uint64_t seed) {
    struct wspec w = {t->wname, 2, {t->wshape[0], t->wshape[1]}, ST_BF16, 0, 0, 0, NULL, {0, 0}};
    int64_t n = wspec_count(&w);
    struct filler g = fill_begin(&w, seed);
    float *f = malloc((size_t)n * sizeof *f), *s = malloc((size_t)wspec_count(t) * sizeof *s + 4);
    uint8_t *q = malloc((size_t)n + 1);
    for (int64_t i = 0; f && s && q && i < n; i++)
        f[i] = hc_bf16_to_f32(hc_f32_to_bf16(fill_next(&g)));
    if (f && s && q) fp8_quantize(q, s, f, w.shape[0], w.shape[1], t->bn, t->bk);
    void *out = t->q8 == 1 ? (void *)q : (void *)s;
    free(f);
    free(t->q8 == 1 ? (void *)s : (void *)q);
    return f ? out : (free(out), NULL);
}

// t's values in its on-disk dtype, in a new buffer (2 bytes a value for F16/BF16: the float32
// values are never held at once); NULL when out of memory
static void *fill(const struct wspec *t, uint64_t seed) {
    if (t->q8) return fill_fp8(t, seed);
    int64_t n = wspec_count(t);
    struct filler g = fill_begin(t, seed);
    void *buf = malloc((size_t)n * st_dtype_size(t->dt) + 1);
    float *f = buf;
    uint16_t *h = buf;
    if (buf && t->dt == ST_U8) {
        fill_mxfp4(buf, t, seed);
        return buf;
    }
    for (int64_t i = 0; buf && i < n; i++) {
        float v = fill_next(&g);
        if (t->dt == ST_F32)
            f[i] = v;
        else
            h[i] = t->dt == ST_F16 ? hc_f32_to_f16(v) : hc_f32_to_bf16(v);
    }
    return buf;
}

// dir/config.json from o (consumed)
static int write_json(const char *dir, const char *leaf, cJSON *o, struct ah_error *err) {
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, leaf);
    FILE *fp = text ? fopen(path, "w") : NULL;
    int ok = fp && fputs(text, fp) >= 0 && fputc('\n', fp) != EOF;
    if (fp && fclose(fp) != 0) ok = 0;
    free(text);
    return ok ? 0 : ah_fail(err, AH_EIO, "%s: cannot write: %s", path, strerror(errno));
}

// A shard holds at least one tensor.
static int shards_fit(int shards, int n, struct ah_error *err) {
    if (shards <= n) return 0;
    return ah_fail(err, AH_EINVAL,
                   "init-model: --shards %d is more than the checkpoint's %d tensors", shards, n);
}

// One safetensors file of the tensors [b, e) of list, made and freed here: init-model holds one
// shard's weights at a time, so a checkpoint of gigabytes is written in flat memory.
static int write_shard(const char *path, const struct wspec *list, int b, int e, uint64_t seed,
                       struct ah_error *err) {
    int rc = 0;
    struct st_wtensor *w = calloc((size_t)(e - b), sizeof *w);
    if (!w) return -AH_ENOMEM;
    for (int i = b; rc == 0 && i < e; i++) {
        void *data = fill(&list[i], seed);
        if (!data) rc = ah_fail(err, AH_ENOMEM, "init-model: no memory for %s", list[i].name);
        w[i - b] = (struct st_wtensor){
            list[i].name,
            list[i].dt,
            list[i].ndim,
            {list[i].shape[0], list[i].shape[1], list[i].shape[2], list[i].shape[3]},
            data};
    }
    if (rc == 0) rc = st_write(path, w, e - b, err);
    for (int i = 0; i < e - b; i++)
        free((void *)(uintptr_t)w[i].data);
    free(w);
    return rc;
}

static int write_weights(const char *dir, const struct wspec *list, int n, uint64_t seed,
                         int shards, struct ah_error *err) {
    char path[4096];
    if (shards <= 1) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        return write_shard(path, list, 0, n, seed, err);
    }
    int rc = 0;
    cJSON *idx = cJSON_CreateObject(), *wm = cJSON_AddObjectToObject(idx, "weight_map");
    cJSON_AddObjectToObject(idx, "metadata");
    for (int s = 0; s < shards && rc == 0; s++) {
        int b = (int)((int64_t)n * s / shards), e = (int)((int64_t)n * (s + 1) / shards);
        char leaf[64];
        snprintf(leaf, sizeof leaf, "model-%05d-of-%05d.safetensors", s + 1, shards);
        snprintf(path, sizeof path, "%s/%s", dir, leaf);
        rc = write_shard(path, list, b, e, seed, err);
        for (int i = b; i < e; i++)
            cJSON_AddStringToObject(wm, list[i].name, leaf);
    }
    if (rc == 0)
        rc = write_json(dir, "model.safetensors.index.json", idx, err);
    else
        cJSON_Delete(idx);
    return rc;
}

// mkdir -p
static int make_dirs(const char *dir) {
    char p[4096];
    snprintf(p, sizeof p, "%s", dir);
    for (char *s = p + 1; *s; s++) {
        if (*s != '/') continue;
        *s = '\0';
        if (mkdir(p, 0777) != 0 && errno != EEXIST) return -1;
        *s = '/';
    }
    return mkdir(p, 0777) != 0 && errno != EEXIST ? -1 : 0;
}

// A release's config.json (FILE) cut to its first `layers` layers: num_hidden_layers and every
// per-layer list (an array as long as num_hidden_layers) cut, mlp_only_layers filtered. Errors
// name FILE and the key.
static int release_config_cut(const char *file, int layers, cJSON **out, struct ah_error *err) {
    FILE *fp = fopen(file, "rb");
    if (!fp)
        return ah_fail(err, AH_EINVAL, "init-model: %s: cannot open: %s", file, strerror(errno));
    char *text = NULL;
    size_t len = 0;
    for (size_t cap = 0, got = 1; got > 0; len += got) {
        if (len + 4096 > cap) {
            char *t = realloc(text, cap = cap * 2 + 65536);
            if (!t) {
                free(text), fclose(fp);
                return ah_fail(err, AH_ENOMEM, "init-model: %s: no memory to read it", file);
            }
            text = t;
        }
        got = fread(text + len, 1, cap - len - 1, fp);
    }
    fclose(fp);
    cJSON *o = text ? (text[len] = '\0', cJSON_Parse(text)) : NULL;
    free(text);
    if (!o) return ah_fail(err, AH_EINVAL, "init-model: %s: not a JSON object", file);
    const cJSON *nl = cJSON_GetObjectItemCaseSensitive(o, "num_hidden_layers");
    int n = cJSON_IsNumber(nl) ? nl->valueint : 0;
    if (n < 1 || !cJSON_IsNumber(nl) || nl->valuedouble != n) {
        cJSON_Delete(o);
        return ah_fail(err, AH_EINVAL, "init-model: %s: num_hidden_layers: expected a count", file);
    }
    if (layers < 1 || layers > n) {
        cJSON_Delete(o);
        return ah_fail(err, AH_EINVAL, "init-model: --layers %d: %s has %d layers", layers, file,
                       n);
    }
    for (cJSON *e = o->child; e; e = e->next) {
        if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == n)
            for (int i = n - 1; i >= layers; i--)
                cJSON_DeleteItemFromArray(e, i);
        if (cJSON_IsArray(e) && !strcmp(e->string, "mlp_only_layers"))
            for (int i = cJSON_GetArraySize(e) - 1; i >= 0; i--)
                if (cJSON_GetArrayItem(e, i)->valuedouble >= layers)
                    cJSON_DeleteItemFromArray(e, i);
    }
    cJSON_ReplaceItemInObjectCaseSensitive(o, "num_hidden_layers", cJSON_CreateNumber(layers));
    *out = o;
    return 0;
}

// *out: config.json of family f's preset `name` (a new object); an unknown name is an error
// naming the presets
static int preset_config(const struct model_family *f, const char *name, cJSON **out,
                         struct ah_error *err) {
    char names[256] = "";
    for (int i = 0; i < f->n_presets; i++) {
        if (!strcmp(name, f->presets[i].name))
            return (*out = cJSON_Parse(f->presets[i].config))
                       ? 0
                       : ah_fail(err, AH_ENOMEM, "init-model: no memory for preset %s", name);
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "",
                 f->presets[i].name);
    }
    return ah_fail(err, AH_EINVAL, "init-model: unknown preset \"%s\" for %s (expected %s)", name,
                   f->name, names);
}

// quantization_config.weight_block_size of config.json (cJSON; absent: [128, 128])
static void fp8_blocks(const void *config, int *bn, int *bk) {
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(config, "quantization_config");
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(q, "weight_block_size");
    *bn = *bk = 128;
    if (cJSON_GetArraySize(b) != 2) return;
    *bn = cJSON_GetArrayItem(b, 0)->valueint;
    *bk = cJSON_GetArrayItem(b, 1)->valueint;
}

// ws[i] of an FP8 weight (t->fp8) or of its scale (the entry after it: *_scale_inv)
static void fp8_spec(struct wspec *ws, int i, const struct model_tensor *t, int bn, int bk) {
    struct wspec *w = &ws[i];
    bool scale = i > 0 && ws[i - 1].q8 == 1 && strstr(t->name, "_scale_inv");
    if (!t->fp8 && !scale) return;
    w->q8 = t->fp8 ? 1 : 2;
    w->dt = t->fp8 ? ST_F8_E4M3 : ST_F32;
    w->bn = bn;
    w->bk = bk;
    w->wname = t->fp8 ? t->name : ws[i - 1].name;
    w->wshape[0] = t->fp8 ? t->shape[0] : ws[i - 1].shape[0];
    w->wshape[1] = t->fp8 ? t->shape[1] : ws[i - 1].shape[1];
}

// The tensors of DIR/config.json as family f lists them (*list, caller frees) and what to write
// of each (*ws, caller frees): the family's published dtype, or dt. Returns the count.
static int tensor_specs(const char *dir, const struct model_family *f, enum st_dtype dt,
                        struct model_tensor **list, struct wspec **ws, struct ah_error *err) {
    struct modeldir md = {0};
    void *fm = NULL;
    int bn = 128, bk = 128;
    int n = md_open(&md, dir, true, err);
    if (n == 0) {
        struct config cf = config_json(md.config, md.config_path);
        n = f->open(&fm, &cf, NULL, list, err);
        f->close(fm);
        fp8_blocks(md.config, &bn, &bk);
    }
    md_close(&md);
    if (n > 0 && !(*ws = calloc((size_t)n, sizeof **ws))) n = -AH_ENOMEM;
    for (int i = 0; n > 0 && i < n; i++) {
        const struct model_tensor *t = &(*list)[i];
        bool f32 = f->init_f32 && strstr(t->name, f->init_f32);
        (*ws)[i] = (struct wspec){.name = t->name,
                                  .ndim = t->ndim,
                                  .shape = {t->shape[0], t->shape[1], t->shape[2], t->shape[3]},
                                  .dt = t->u8 ? ST_U8
                                        : f32 ? ST_F32
                                              : dt}; // U8: MXFP4 as published
        fp8_spec(*ws, i, t, bn, bk);
    }
    return n;
}

// A checkpoint of family f with config.json cfg (consumed): weights in the family's layout, in
// `shards` files (0: the family's default, about 256 MiB a file and at least f->init_shards).
static int init_model(const char *dir, const struct model_family *f, cJSON *cfg, uint64_t seed,
                      enum st_dtype dt, int shards, struct ah_error *err) {
    if (make_dirs(dir) != 0) {
        cJSON_Delete(cfg);
        return ah_fail(err, AH_EIO, "init-model: cannot create %s: %s", dir, strerror(errno));
    }
    struct model_tensor *list = NULL;
    struct wspec *ws = NULL;
    int rc = write_json(dir, "config.json", cfg, err);
    int n = rc == 0 ? tensor_specs(dir, f, dt, &list, &ws, err) : rc;
    rc = n < 0 ? n : 0;
    int64_t bytes = 0;
    for (int i = 0; i < n; i++)
        bytes += wspec_count(&ws[i]) * (int64_t)st_dtype_size(ws[i].dt);
    int fit = (int)(bytes >> 28) + 1;
    if (shards == 0) shards = !f->init_shards ? 1 : fit > f->init_shards ? fit : f->init_shards;
    if (rc == 0 && (rc = shards_fit(shards, n, err)) < 0) { // nothing half-made stays behind
        char path[4096];
        snprintf(path, sizeof path, "%s/config.json", dir);
        remove(path);
    }
    if (rc == 0) rc = write_weights(dir, ws, n, seed, shards, err);
    free(ws);
    free(list);
    return rc;
}

static enum st_dtype dtype_named(const char *s) {
    return !strcmp(s, "f32")    ? ST_F32
           : !strcmp(s, "f16")  ? ST_F16
           : !strcmp(s, "bf16") ? ST_BF16
                                : ST_N_DTYPES;
}

int init_model_preset(const char *dir, const char *family, const char *preset, uint64_t seed,
                      int dtype_st, int shards, struct ah_error *err) {
    const struct model_family *f = model_family_named(family);
    if (!f) return ah_fail(err, AH_EINVAL, "init-model: unknown family \"%s\"", family);
    cJSON *cfg = NULL;
    int rc = preset_config(f, preset, &cfg, err);
    if (rc < 0) return rc;
    enum st_dtype dt = f->init_dtype ? dtype_named(f->init_dtype) : (enum st_dtype)dtype_st;
    return init_model(dir, f, cfg, seed, dt, shards, err);
}

#define INIT_MAX_SHARDS 1000

// The families init-model can write (those with presets), in alphabetical order: "a" or "b".
static void family_names(char *out, size_t n) {
    const char *last = "";
    out[0] = '\0';
    for (int k = 0;; k++) {
        const char *next = NULL;
        for (int f = 0; model_families[f]; f++) {
            const char *s = model_families[f]->name;
            if (model_families[f]->n_presets && strcmp(s, last) > 0 &&
                (!next || strcmp(s, next) < 0))
                next = s;
        }
        if (!next) return;
        snprintf(out + strlen(out), n - strlen(out), "%s\"%s\"", k ? " or " : "", next);
        last = next;
    }
}

static int usage(void) {
    char fams[1024];
    family_names(fams, sizeof fams);
    fprintf(stderr,
            "usage: harvest init-model --family F [--preset NAME] [--seed N] "
            "[--dtype f32|f16|bf16] [--shards N] OUT_DIR\n"
            "       harvest init-model --family F --config CONFIG.json --layers N "
            "[--seed N] [--shards N] OUT_DIR\n"
            "F: %s (harvest activations lists a checkpoint's names; docs/families.md each "
            "family's presets)\n"
            "--shards: 1 to %d, and at most the number of tensors\n",
            fams, INIT_MAX_SHARDS);
    return 1;
}

struct init_args {
    const char *family, *preset, *dir, *dtype, *config; // dtype NULL: not given
    int64_t seed;
    int shards, layers; // shards 0: the family's default; layers -1: no --layers
};

// one flag and its value (moved past); 0, or 1 after a message
static int parse_flag(int argc, char **argv, int *i, struct init_args *a) {
    static const char *const cmd = "init-model";
    const char *f = argv[*i], *v;
    const char **text = !strcmp(f, "--family")   ? &a->family
                        : !strcmp(f, "--preset") ? &a->preset
                        : !strcmp(f, "--dtype")  ? &a->dtype
                        : !strcmp(f, "--config") ? &a->config
                                                 : NULL;
    if (!text && strcmp(f, "--seed") && strcmp(f, "--shards") && strcmp(f, "--layers")) {
        fprintf(stderr, "harvest init-model: unknown option \"%s\"\n", f);
        return usage();
    }
    if (!(v = cli_value(cmd, argc, argv, i))) return 1;
    if (text) return *text = v, 0;
    if (!strcmp(f, "--seed")) return -cli_int(cmd, f, v, 0, INT64_MAX, &a->seed);
    if (!strcmp(f, "--shards")) return -cli_int32(cmd, f, v, 1, INIT_MAX_SHARDS, &a->shards);
    return -cli_int32(cmd, f, v, 1, 1 << 20, &a->layers); // --layers
}

// 0, or 1 after printing the usage
static int parse_args(int argc, char **argv, struct init_args *a) {
    *a = (struct init_args){.layers = -1};
    for (int i = 0; i < argc; i++) {
        if (argv[i][0] == '-') {
            if (parse_flag(argc, argv, &i, a)) return 1;
        } else if (a->dir) {
            return usage();
        } else {
            a->dir = argv[i];
        }
    }
    return !a->family || !a->dir ? usage() : 0;
}

// The flags family f takes: --config with --layers only where it cuts a release's config (then
// instead of --preset), --dtype only where the dtype is not the published one. 0, or 1 after a
// message naming the flag.
static int family_flags(const struct model_family *f, const struct init_args *a) {
    const char *bad = NULL, *why = "";
    if (!f->init_cut && (a->config || a->layers != -1))
        bad = a->config ? "--config" : "--layers", why = " (it is written from a --preset)";
    else if (f->init_dtype && a->dtype)
        bad = "--dtype", why = " (its weights are written in the dtype it is published in)";
    if (bad) {
        fprintf(stderr, "harvest init-model: %s: not an option of family %s%s\n", bad, f->name,
                why);
        return usage();
    }
    if (f->init_cut && (!a->preset == !a->config || (a->config != NULL) != (a->layers != -1))) {
        fprintf(stderr,
                "harvest init-model: family %s takes --preset NAME, or --config CONFIG.json with "
                "--layers N\n",
                f->name);
        return usage();
    }
    return 0;
}

// the files init-model writes into OUT_DIR are not the --config it reads: 0 or -AH_EINVAL
static int check_output(const struct init_args *a, struct ah_error *err) {
    static const char *const written[] = {"config.json", "model*.safetensors",
                                          "model.safetensors.index.json"};
    const char *in[1] = {a->config};
    return a->config ? outlock_check_folder("init-model", a->dir, written, 3, in, 1, err) : 0;
}

int cmd_init_model(int argc, char **argv) {
    struct init_args a;
    if (parse_args(argc, argv, &a)) return 1;
    const struct model_family *f = model_family_named(a.family);
    if (!f || !f->n_presets) {
        char names[256];
        family_names(names, sizeof names);
        fprintf(stderr, "harvest: init-model: family \"%s\" is not available (expected %s)\n",
                a.family, names);
        return 1;
    }
    if (family_flags(f, &a)) return 1;
    if (!a.config && !a.preset) a.preset = f->presets[0].name;
    if (!a.dtype) a.dtype = "f32";
    enum st_dtype dt = dtype_named(f->init_dtype ? f->init_dtype : a.dtype);
    if (dt == ST_N_DTYPES) {
        fprintf(stderr, "harvest init-model: --dtype \"%s\": expected f32, f16 or bf16\n", a.dtype);
        return 1;
    }
    struct ah_error err = {0};
    cJSON *cfg = NULL;
    int rc = check_output(&a, &err);
    if (rc == 0)
        rc = a.config ? release_config_cut(a.config, a.layers, &cfg, &err)
                      : preset_config(f, a.preset, &cfg, &err);
    if (rc == 0) rc = init_model(a.dir, f, cfg, a.seed, dt, a.shards, &err);
    if (rc == 0 && a.config)
        fprintf(stderr, "harvest: wrote %s %s cut to %d layers (seed %llu, %s) to %s\n", f->name,
                a.config, a.layers, (unsigned long long)a.seed, st_dtype_name(dt), a.dir);
    else if (rc == 0)
        fprintf(stderr, "harvest: wrote %s%s%s (seed %llu, %s) to %s\n", f->init_what[0], a.preset,
                f->init_what[1], (unsigned long long)a.seed, st_dtype_name(dt), a.dir);
    return report(rc, &err);
}
