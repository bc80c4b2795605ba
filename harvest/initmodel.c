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

// Norm weights near 1, projections N(0, 1/fan_in), embeddings N(0, 1).
static void fill(float *w, const struct model_tensor *t, uint64_t seed) {
    uint64_t s = seed * 0x9e3779b97f4a7c15ull ^ name_hash(t->name);
    int64_t n = t->shape[0] * (t->ndim == 2 ? t->shape[1] : 1);
    bool norm = t->ndim == 1;
    bool emb = strstr(t->name, "embed") != NULL;
    double sd = norm ? 0.1 : emb ? 1.0 : 1.0 / sqrt((double)t->shape[1]);
    for (int64_t i = 0; i < n; i++)
        w[i] = (float)((norm ? 1.0 : 0.0) + sd * gauss(&s));
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
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *fp = text ? fopen(path, "w") : NULL;
    int ok = fp && fputs(text, fp) >= 0 && fputc('\n', fp) != EOF;
    if (fp && fclose(fp) != 0) ok = 0;
    free(text);
    return ok ? 0 : ah_fail(err, AH_EIO, "%s: cannot write: %s", path, strerror(errno));
}

static int write_weights(const char *dir, const struct model_tensor *list, int n, uint64_t seed,
                         enum st_dtype dt, int shards, struct ah_error *err) {
    int rc = 0;
    struct st_wtensor *w = calloc((size_t)n, sizeof *w);
    void **bufs = calloc((size_t)n, sizeof *bufs);
    if (!w || !bufs) {
        rc = -AH_ENOMEM;
        goto done;
    }
    for (int i = 0; i < n; i++) {
        int64_t cnt = list[i].shape[0] * (list[i].ndim == 2 ? list[i].shape[1] : 1);
        float *f = malloc((size_t)cnt * sizeof(float));
        if (!f) {
            rc = -AH_ENOMEM;
            goto done;
        }
        fill(f, &list[i], seed);
        if (dt != ST_F32) {
            uint16_t *h = (uint16_t *)(void *)f; // narrow in place, front to back
            for (int64_t k = 0; k < cnt; k++)
                h[k] = dt == ST_F16 ? hc_f32_to_f16(f[k]) : hc_f32_to_bf16(f[k]);
        }
        bufs[i] = f;
        w[i] = (struct st_wtensor){
            list[i].name, dt, list[i].ndim, {list[i].shape[0], list[i].shape[1]}, f};
    }
    char path[4096];
    if (shards <= 1) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        rc = st_write(path, w, n, err);
        goto done;
    }
    cJSON *idx = cJSON_CreateObject(), *wm = cJSON_AddObjectToObject(idx, "weight_map");
    cJSON_AddObjectToObject(idx, "metadata");
    for (int s = 0; s < shards && rc == 0; s++) {
        int b = (int)((int64_t)n * s / shards), e = (int)((int64_t)n * (s + 1) / shards);
        char leaf[64];
        snprintf(leaf, sizeof leaf, "model-%05d-of-%05d.safetensors", s + 1, shards);
        snprintf(path, sizeof path, "%s/%s", dir, leaf);
        rc = st_write(path, w + b, e - b, err);
        for (int i = b; i < e; i++)
            cJSON_AddStringToObject(wm, w[i].name, leaf);
    }
    char *text = cJSON_Print(idx);
    cJSON_Delete(idx);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    FILE *fp = rc == 0 && text ? fopen(path, "w") : NULL;
    if (rc == 0 && (!fp || fputs(text, fp) < 0))
        rc = ah_fail(err, AH_EIO, "%s: cannot write", path);
    if (fp && fclose(fp) != 0 && rc == 0) rc = ah_fail(err, AH_EIO, "%s: cannot write", path);
    free(text);
done:
    for (int i = 0; bufs && i < n; i++)
        free(bufs[i]);
    free(bufs);
    free(w);
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
    int rc = n < 0 ? n : write_config(dir, &c, err);
    if (rc == 0) rc = write_weights(dir, list, n, seed, (enum st_dtype)dtype_st, shards, err);
    free(list);
    encdec_free(&m);
    return rc;
}

static int usage(void) {
    fprintf(stderr, "usage: harvest init-model --family encdec [--preset spec] [--seed N] "
                    "[--dtype f32|f16|bf16] [--shards N] OUT_DIR\n");
    return 1;
}

int cmd_init_model(int argc, char **argv) {
    const char *family = NULL, *preset = "spec", *dir = NULL, *dts = "f32";
    unsigned long long seed = 0;
    int shards = 1;
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
        else if (argv[i][0] == '-' || dir)
            return usage();
        else
            dir = argv[i];
    }
    if (!family || !dir || shards < 1) return usage();
    if (strcmp(family, "encdec")) {
        fprintf(stderr,
                "harvest: init-model: family \"%s\" is not available (expected "
                "\"encdec\"; \"laguna\" is not implemented yet)\n",
                family);
        return 1;
    }
    if (strcmp(preset, "spec")) {
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
    struct ah_error err = {0};
    int rc = init_model_encdec(dir, seed, dt, shards, &err);
    if (rc == 0)
        fprintf(stderr, "harvest: wrote the encdec spec model (seed %llu, %s) to %s\n", seed,
                st_dtype_name(dt), dir);
    return report(rc, &err);
}
