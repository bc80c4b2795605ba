// initmodel.c - `harvest init-model`: a random-weight checkpoint (config.json + safetensors) for
// demos, tests and benchmarks. Weights depend only on the seed and the tensor's name.
#define _POSIX_C_SOURCE 200809L // defines: mkdir
#include "harvest/harvest.h"

#include "io/halfconv.h"
#include "io/safetensors.h"

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

// A tensor to write: name, shape and on-disk dtype.
struct wspec {
    const char *name;
    int ndim;
    int64_t shape[2];
    enum st_dtype dt;
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
    return t->shape[0] * (t->ndim == 2 ? t->shape[1] : 1);
}

// t's values in its on-disk dtype, in a new buffer (2 bytes a value for F16/BF16: the float32
// values are never held at once); NULL when out of memory
static void *fill(const struct wspec *t, uint64_t seed) {
    int64_t n = wspec_count(t);
    struct filler g = fill_begin(t, seed);
    void *buf = malloc((size_t)n * st_dtype_size(t->dt) + 1);
    float *f = buf;
    uint16_t *h = buf;
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

static int write_config(const char *dir, const struct encdec_config *c, struct ah_error *err) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "architecture", "causal-encoder-decoder");
    cJSON_AddNumberToObject(o, "num_encoder_layers", c->n_layer_enc);
    cJSON_AddNumberToObject(o, "num_decoder_layers", c->n_layer_dec);
    cJSON_AddNumberToObject(o, "hidden_size", c->hidden);
    cJSON_AddNumberToObject(o, "num_attention_heads", c->n_head);
    cJSON_AddNumberToObject(o, "head_dim", c->head_dim);
    cJSON_AddNumberToObject(o, "vocab_size", c->vocab);
    cJSON_AddNumberToObject(o, "local_window", c->local_window);
    cJSON_AddNumberToObject(o, "max_position_embeddings", c->max_pos);
    cJSON_AddStringToObject(o, "position_encoding", "rope");
    cJSON_AddStringToObject(o, "normalization", "rmsnorm");
    cJSON_AddStringToObject(o, "activation", "swiglu");
    cJSON_AddNumberToObject(o, "ffn_dim", c->ffn_dim);
    cJSON_AddNumberToObject(o, "rms_norm_eps", (double)c->eps);
    cJSON_AddNumberToObject(o, "rope_theta", c->rope_theta);
    cJSON_AddBoolToObject(o, "tie_word_embeddings", 1);
    return write_json(dir, "config.json", o, err);
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
            list[i].name, list[i].dt, list[i].ndim, {list[i].shape[0], list[i].shape[1]}, data};
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

int init_model_encdec(const char *dir, uint64_t seed, int dtype_st, int shards,
                      struct ah_error *err) {
    if (make_dirs(dir) != 0)
        return ah_fail(err, AH_EIO, "init-model: cannot create %s: %s", dir, strerror(errno));
    struct encdec m;
    struct model_tensor *list = NULL;
    struct encdec_config c = encdec_spec_config();
    int n = encdec_init(&m, &c, &list);
    int rc = n < 0 ? n : shards_fit(shards, n, err);
    if (rc == 0) rc = write_config(dir, &c, err);
    struct wspec *ws = rc == 0 ? calloc((size_t)n, sizeof *ws) : NULL;
    if (rc == 0 && !ws) rc = -AH_ENOMEM;
    for (int i = 0; rc == 0 && i < n; i++)
        ws[i] = (struct wspec){list[i].name,
                               list[i].ndim,
                               {list[i].shape[0], list[i].shape[1]},
                               (enum st_dtype)dtype_st};
    if (rc == 0) rc = write_weights(dir, ws, n, seed, shards, err);
    free(ws);
    free(list);
    encdec_free(&m);
    return rc;
}

// ----------------------------------------------------------------------------
// Laguna: tiny checkpoints laid out as the releases are (config keys, sharded BF16 safetensors +
// index, per-expert tensors, the F32 selection bias), each mirroring one release's structure.

struct laguna_preset {
    const char *name;
    int layers, heads, kv, n_dense, top_k;
    const int *head_cycle; // per-layer heads repeat this 4-cycle (NULL: no per-layer list)
    bool sliding;          // every fourth layer full, the rest sliding (else: no layer_types)
    const char *gating;    // "per-head", "per-element" or NULL for `true`
    double partial, factor, beta_fast, scaling;
    int orig_max, max_pos;
    bool xs2_keys; // XS.2's top-level partial_rotary_factor and original_max_...
};

static const int xs_heads[4] = {6, 8, 8, 8}, s_heads[4] = {4, 6, 6, 6};
static const struct laguna_preset laguna_presets[] = {
    {"XS-2.1", 5, 6, 2, 1, 4, xs_heads, true, "per-head", 0.5, 32, 64, 2.5, 8192, 262144, false},
    {"XS.2", 5, 6, 2, 1, 4, xs_heads, true, NULL, 0.5, 64, 64, 2.5, 4096, 262144, true},
    {"S-2.1", 5, 4, 2, 1, 5, s_heads, true, "per-head", 0.5, 128, 32, 2.5, 8192, 1048576, false},
    {"M.1", 5, 8, 2, 3, 6, NULL, false, "per-element", 1.0, 64, 64, 1.0, 4096, 262144, false},
};
enum {
    LG_HIDDEN = 64,
    LG_HEAD_DIM = 16,
    LG_VOCAB = 512,
    LG_FFN = 96,
    LG_EXPERT_FFN = 32,
    LG_EXPERTS = 16,
    LG_WINDOW = 8
};

static cJSON *string_list(const char *a, const char *b, int n, bool (*is_a)(int, int), int k) {
    cJSON *l = cJSON_CreateArray();
    for (int i = 0; i < n; i++)
        cJSON_AddItemToArray(l, cJSON_CreateString(is_a(i, k) ? a : b));
    return l;
}
static bool full_at(int i, int k) {
    (void)k;
    return i % 4 == 0;
}
static bool below(int i, int k) {
    return i < k;
}

static cJSON *laguna_config_json(const struct laguna_preset *p) {
    cJSON *o = cJSON_CreateObject(), *a;
    cJSON_AddItemToObject(o, "architectures", a = cJSON_CreateArray());
    cJSON_AddItemToArray(a, cJSON_CreateString("LagunaForCausalLM"));
    cJSON_AddStringToObject(o, "model_type", "laguna");
    cJSON_AddBoolToObject(o, "attention_bias", 0);
    cJSON_AddNumberToObject(o, "bos_token_id", 2);
    int eos[2] = {2, 24};
    cJSON_AddItemToObject(o, "eos_token_id", cJSON_CreateIntArray(eos, 2));
    cJSON_AddNumberToObject(o, "pad_token_id", 9);
    if (p->gating)
        cJSON_AddStringToObject(o, "gating", p->gating);
    else
        cJSON_AddBoolToObject(o, "gating", 1);
    cJSON_AddNumberToObject(o, "head_dim", LG_HEAD_DIM);
    cJSON_AddNumberToObject(o, "hidden_size", LG_HIDDEN);
    cJSON_AddStringToObject(o, "hidden_act", "silu");
    cJSON_AddNumberToObject(o, "intermediate_size", LG_FFN);
    if (p->sliding)
        cJSON_AddItemToObject(
            o, "layer_types",
            string_list("full_attention", "sliding_attention", p->layers, full_at, 0));
    cJSON_AddNumberToObject(o, "max_position_embeddings", p->max_pos);
    cJSON_AddItemToObject(o, "mlp_layer_types",
                          string_list("dense", "sparse", p->layers, below, p->n_dense));
    if (!p->xs2_keys) { // the vendor's keys, which HF does not read
        int only[3] = {0, 1, 2};
        cJSON_AddItemToObject(o, "mlp_only_layers", cJSON_CreateIntArray(only, p->n_dense));
        cJSON_AddNumberToObject(o, "decoder_sparse_step", 1);
        cJSON_AddBoolToObject(o, "norm_topk_prob", 1);
    }
    cJSON_AddFalseToObject(o, "moe_apply_router_weight_on_input");
    cJSON_AddNumberToObject(o, "moe_intermediate_size", LG_EXPERT_FFN);
    cJSON_AddNumberToObject(o, "moe_routed_scaling_factor", p->scaling);
    cJSON_AddNumberToObject(o, "num_attention_heads", p->heads);
    if (p->head_cycle) {
        int h[64];
        for (int i = 0; i < p->layers; i++)
            h[i] = p->head_cycle[i % 4];
        cJSON_AddItemToObject(o, "num_attention_heads_per_layer",
                              cJSON_CreateIntArray(h, p->layers));
    }
    cJSON_AddNumberToObject(o, "num_experts", LG_EXPERTS);
    cJSON_AddNumberToObject(o, "num_experts_per_tok", p->top_k);
    cJSON_AddNumberToObject(o, "num_hidden_layers", p->layers);
    cJSON_AddNumberToObject(o, "num_key_value_heads", p->kv);
    if (p->xs2_keys) cJSON_AddNumberToObject(o, "partial_rotary_factor", p->partial);
    cJSON_AddNumberToObject(o, "rms_norm_eps", 1e-6);
    cJSON *rp = cJSON_AddObjectToObject(o, "rope_parameters");
    cJSON *full = cJSON_AddObjectToObject(rp, "full_attention");
    cJSON_AddNumberToObject(full, "attention_factor", 0.1 * log(p->factor) + 1.0);
    cJSON_AddNumberToObject(full, "beta_fast", p->beta_fast);
    cJSON_AddNumberToObject(full, "beta_slow", 1);
    cJSON_AddNumberToObject(full, "factor", p->factor);
    cJSON_AddNumberToObject(full, "original_max_position_embeddings", p->orig_max);
    cJSON_AddNumberToObject(full, "partial_rotary_factor", p->partial);
    cJSON_AddNumberToObject(full, "rope_theta", 500000);
    cJSON_AddStringToObject(full, "rope_type", "yarn");
    if (p->sliding) {
        cJSON *sl = cJSON_AddObjectToObject(rp, "sliding_attention");
        cJSON_AddNumberToObject(sl, "partial_rotary_factor", 1.0);
        cJSON_AddNumberToObject(sl, "rope_theta", 10000);
        cJSON_AddStringToObject(sl, "rope_type", "default");
    }
    if (p->xs2_keys) cJSON_AddNumberToObject(rp, "original_max_position_embeddings", p->orig_max);
    cJSON_AddNumberToObject(o, "shared_expert_intermediate_size", LG_EXPERT_FFN);
    cJSON_AddNumberToObject(o, "sliding_window", p->sliding ? LG_WINDOW : 0);
    cJSON_AddFalseToObject(o, "tie_word_embeddings");
    cJSON_AddStringToObject(o, "torch_dtype", "bfloat16");
    cJSON_AddNumberToObject(o, "vocab_size", LG_VOCAB);
    return o;
}

// A release's config.json (FILE) cut to its first `layers` layers: num_hidden_layers and every
// per-layer list (an array as long as num_hidden_layers) cut, mlp_only_layers filtered. Errors
// name FILE and the key.
static int laguna_config_cut(const char *file, int layers, cJSON **out, struct ah_error *err) {
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

// A Laguna checkpoint: config from a preset's tiny dimensions, or (config_file) a release's
// config.json cut to `layers` layers at its real dimensions; weights in the published layout.
static int init_model_laguna(const char *dir, const char *preset, const char *config_file,
                             int layers, uint64_t seed, int shards, struct ah_error *err) {
    const struct laguna_preset *p = NULL;
    char names[128] = "";
    for (size_t i = 0; i < sizeof laguna_presets / sizeof laguna_presets[0]; i++) {
        if (preset && !strcmp(preset, laguna_presets[i].name)) p = &laguna_presets[i];
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "",
                 laguna_presets[i].name);
    }
    if (!p && !config_file)
        return ah_fail(err, AH_EINVAL, "init-model: unknown preset \"%s\" for laguna (expected %s)",
                       preset, names);
    cJSON *cfg = NULL;
    int rc = config_file ? laguna_config_cut(config_file, layers, &cfg, err) : 0;
    if (rc < 0) return rc;
    if (make_dirs(dir) != 0) {
        cJSON_Delete(cfg);
        return ah_fail(err, AH_EIO, "init-model: cannot create %s: %s", dir, strerror(errno));
    }
    rc = write_json(dir, "config.json", cfg ? cfg : laguna_config_json(p), err);
    struct modeldir md = {0};
    struct laguna_config c;
    struct laguna m = {0};
    struct model_tensor *list = NULL;
    struct wspec *ws = NULL;
    int n = 0;
    if (rc == 0 && (rc = md_open(&md, dir, true, err)) == 0 &&
        (rc = laguna_config_read(&md, &c, err)) == 0 && (n = rc = laguna_init(&m, &c, &list)) > 0)
        rc = (ws = calloc((size_t)n, sizeof *ws)) ? 0 : -AH_ENOMEM;
    int64_t bytes = 0;
    for (int i = 0; rc == 0 && i < n; i++) { // published dtypes: BF16, the selection bias F32
        ws[i] = (struct wspec){list[i].name,
                               list[i].ndim,
                               {list[i].shape[0], list[i].shape[1]},
                               strstr(list[i].name, "e_score_correction_bias") ? ST_F32 : ST_BF16};
        bytes += wspec_count(&ws[i]) * (int64_t)st_dtype_size(ws[i].dt);
    }
    if (shards == 0) // about 256 MiB a shard, and at least 3 (the releases are sharded)
        shards = (int)(bytes >> 28) + 1 > 3 ? (int)(bytes >> 28) + 1 : 3;
    if (rc == 0 && (rc = shards_fit(shards, n, err)) < 0) { // nothing half-made stays behind
        char path[4096];
        snprintf(path, sizeof path, "%s/config.json", dir);
        remove(path);
    }
    if (rc == 0) rc = write_weights(dir, ws, n, seed, shards, err);
    free(ws);
    free(list);
    laguna_free(&m);
    md_close(&md);
    return rc;
}

#define INIT_MAX_SHARDS 1000

static int usage(void) {
    fprintf(stderr,
            "usage: harvest init-model --family encdec [--preset spec] [--seed N] "
            "[--dtype f32|f16|bf16] [--shards N] OUT_DIR\n"
            "       harvest init-model --family laguna --preset XS-2.1|XS.2|S-2.1|M.1 "
            "[--seed N] [--shards N] OUT_DIR\n"
            "       harvest init-model --family laguna --config CONFIG.json --layers N "
            "[--seed N] [--shards N] OUT_DIR\n"
            "--shards: 1 to %d, and at most the number of tensors\n",
            INIT_MAX_SHARDS);
    return 1;
}

int cmd_init_model(int argc, char **argv) {
    const char *family = NULL, *preset = NULL, *dir = NULL, *dts = "f32", *config = NULL;
    unsigned long long seed = 0;
    int shards = 0, layers = -1; // -1: no --layers
    for (int i = 0; i < argc; i++) {
        bool more = i + 1 < argc;
        if (!strcmp(argv[i], "--family") && more)
            family = argv[++i];
        else if (!strcmp(argv[i], "--preset") && more)
            preset = argv[++i];
        else if (!strcmp(argv[i], "--seed") && more)
            seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--dtype") && more)
            dts = argv[++i];
        else if (!strcmp(argv[i], "--shards") && more)
            shards = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--config") && more)
            config = argv[++i];
        else if (!strcmp(argv[i], "--layers") && more)
            layers = atoi(argv[++i]);
        else if (argv[i][0] == '-' || dir)
            return usage();
        else
            dir = argv[i];
    }
    if (!family || !dir) return usage();
    if (shards < 0 || shards > INIT_MAX_SHARDS) {
        fprintf(stderr, "harvest: init-model: --shards %d: expected 1 to %d\n", shards,
                INIT_MAX_SHARDS);
        return 1;
    }
    struct ah_error err = {0};
    if (!strcmp(family, "laguna")) {
        if (!preset == !config || (config != NULL) != (layers != -1)) return usage();
        int rc = init_model_laguna(dir, preset, config, layers, seed, shards, &err);
        if (rc == 0 && config)
            fprintf(stderr, "harvest: wrote laguna %s cut to %d layers (seed %llu, BF16) to %s\n",
                    config, layers, seed, dir);
        else if (rc == 0)
            fprintf(stderr, "harvest: wrote a tiny laguna %s checkpoint (seed %llu, BF16) to %s\n",
                    preset, seed, dir);
        return report(rc, &err);
    }
    if (strcmp(family, "encdec")) {
        fprintf(stderr,
                "harvest: init-model: family \"%s\" is not available (expected \"encdec\" or "
                "\"laguna\")\n",
                family);
        return 1;
    }
    if (preset && strcmp(preset, "spec")) {
        fprintf(stderr,
                "harvest: init-model: unknown preset \"%s\" for encdec (expected "
                "\"spec\")\n",
                preset);
        return 1;
    }
    enum st_dtype dt = !strcmp(dts, "f32")    ? ST_F32
                       : !strcmp(dts, "f16")  ? ST_F16
                       : !strcmp(dts, "bf16") ? ST_BF16
                                              : ST_N_DTYPES;
    if (dt == ST_N_DTYPES) return usage();
    int rc = init_model_encdec(dir, seed, dt, shards ? shards : 1, &err);
    if (rc == 0)
        fprintf(stderr, "harvest: wrote the encdec spec model (seed %llu, %s) to %s\n", seed,
                st_dtype_name(dt), dir);
    return report(rc, &err);
}
