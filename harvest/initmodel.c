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
// N(0, 0.1^2).
static void fill(float *w, const struct wspec *t, uint64_t seed) {
    uint64_t s = seed * 0x9e3779b97f4a7c15ull ^ name_hash(t->name);
    int64_t n = t->shape[0] * (t->ndim == 2 ? t->shape[1] : 1);
    bool bias = strstr(t->name, "bias") != NULL, norm = t->ndim == 1 && !bias;
    bool emb = strstr(t->name, "embed") != NULL;
    double sd = norm || bias ? 0.1 : emb ? 1.0 : 1.0 / sqrt((double)t->shape[1]);
    for (int64_t i = 0; i < n; i++)
        w[i] = (float)((norm ? 1.0 : 0.0) + sd * gauss(&s));
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

static int write_weights(const char *dir, const struct wspec *list, int n, uint64_t seed,
                         int shards, struct ah_error *err) {
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
        enum st_dtype dt = list[i].dt;
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
    if (rc == 0)
        rc = write_json(dir, "model.safetensors.index.json", idx, err);
    else
        cJSON_Delete(idx);
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

static int init_model_laguna(const char *dir, const char *preset, uint64_t seed, int shards,
                             struct ah_error *err) {
    const struct laguna_preset *p = NULL;
    char names[128] = "";
    for (size_t i = 0; i < sizeof laguna_presets / sizeof laguna_presets[0]; i++) {
        if (!strcmp(preset, laguna_presets[i].name)) p = &laguna_presets[i];
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "",
                 laguna_presets[i].name);
    }
    if (!p)
        return ah_fail(err, AH_EINVAL, "init-model: unknown preset \"%s\" for laguna (expected %s)",
                       preset, names);
    if (make_dirs(dir) != 0)
        return ah_fail(err, AH_EIO, "init-model: cannot create %s: %s", dir, strerror(errno));
    int rc = write_json(dir, "config.json", laguna_config_json(p), err);
    struct modeldir md = {0};
    struct laguna_config c;
    struct laguna m = {0};
    struct model_tensor *list = NULL;
    struct wspec *ws = NULL;
    int n = 0;
    if (rc == 0 && (rc = md_open(&md, dir, true, err)) == 0 &&
        (rc = laguna_config_read(&md, &c, err)) == 0 && (n = rc = laguna_init(&m, &c, &list)) > 0)
        rc = (ws = calloc((size_t)n, sizeof *ws)) ? 0 : -AH_ENOMEM;
    for (int i = 0; rc == 0 && i < n; i++) // published dtypes: BF16, the selection bias F32
        ws[i] = (struct wspec){list[i].name,
                               list[i].ndim,
                               {list[i].shape[0], list[i].shape[1]},
                               strstr(list[i].name, "e_score_correction_bias") ? ST_F32 : ST_BF16};
    if (rc == 0) rc = write_weights(dir, ws, n, seed, shards, err);
    free(ws);
    free(list);
    laguna_free(&m);
    md_close(&md);
    return rc;
}

static int usage(void) {
    fprintf(stderr, "usage: harvest init-model --family encdec [--preset spec] [--seed N] "
                    "[--dtype f32|f16|bf16] [--shards N] OUT_DIR\n"
                    "       harvest init-model --family laguna --preset XS-2.1|XS.2|S-2.1|M.1 "
                    "[--seed N] [--shards N] OUT_DIR\n");
    return 1;
}

int cmd_init_model(int argc, char **argv) {
    const char *family = NULL, *preset = NULL, *dir = NULL, *dts = "f32";
    unsigned long long seed = 0;
    int shards = 0;
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
    if (!family || !dir || shards < 0) return usage();
    struct ah_error err = {0};
    if (!strcmp(family, "laguna")) {
        if (!preset) return usage();
        int rc = init_model_laguna(dir, preset, seed, shards ? shards : 3, &err);
        if (rc == 0)
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
