// lnblock.c - the tensor list, the counts, the catalogue and the config helpers of
// model/lnblock.h (the forward pass is model/lnblock_fwd.c).
#include "model/lnblock.h"

#include "model/ah.h"
#include "model/catalogue.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void lnb_leaf_shape(const struct lnb_config *c, enum lnb_leaf k, int64_t *d0, int64_t *d1) {
    int64_t D = c->hidden, I = c->inner;
    // (in, out) of each matrix; Conv1D stores it so, Linear transposed
    int64_t io[LNB_N_LEAF][2] = {
        [LNB_QKV_W] = {D, 3 * D}, [LNB_O_W] = {D, D}, [LNB_FC_W] = {D, I}, [LNB_PROJ_W] = {I, D}};
    int64_t vec[LNB_N_LEAF] = {
        [LNB_LN1_W] = D, [LNB_LN1_B] = D, [LNB_QKV_B] = 3 * D, [LNB_O_B] = D,
        [LNB_LN2_W] = D, [LNB_LN2_B] = D, [LNB_FC_B] = I,      [LNB_PROJ_B] = D};
    if (!io[k][0]) {
        *d0 = vec[k], *d1 = 0;
        return;
    }
    *d0 = io[k][c->conv1d ? 0 : 1];
    *d1 = io[k][c->conv1d ? 1 : 0];
}

// the parameters of one block (tests/ref/hf/params.py count_params)
static int64_t layer_params(const struct lnb_config *c) {
    int64_t n = 0;
    for (int k = 0; k < LNB_N_LEAF; k++) {
        if (!c->attn_bias && (k == LNB_QKV_B || k == LNB_O_B)) continue;
        int64_t d0, d1;
        lnb_leaf_shape(c, k, &d0, &d1);
        n += d0 * (d1 ? d1 : 1);
    }
    return n;
}

int64_t lnb_params(const struct lnb_config *c) {
    int64_t D = c->hidden, V = c->vocab;
    return V * D * (c->tied ? 1 : 2) + (int64_t)c->n_pos * D + c->n_layer * layer_params(c) + 2 * D;
}

// ---- the catalogue (model/catalogue.h; tests/ref/hf/NAMES.md)

// pre-norm dense blocks; q/k before RoPE on rotary families
static unsigned block_options(const void *u, int l) {
    const struct lnb_config *c = u;
    (void)l;
    return CAT_PRE_NORM | CAT_DENSE | (c->rotary ? CAT_PRE_ROPE : 0u);
}

// ids into id (CAT_ID) and descriptions into out, either may be NULL (model/catalogue.h)
static int walk(const struct lnb_config *c, int *id, struct tap_desc *out) {
    unsigned texts = CAT_TEXT_LNB | (c->parallel ? CAT_TEXT_LNB_PARALLEL : 0u) |
                     (c->rotary ? CAT_TEXT_LNB_ROTARY : 0u);
    struct cat_family f = {.n_layer = c->n_layer, .texts = texts, .block = block_options, .u = c};
    return cat_walk(&f, id, out);
}

int lnb_n_taps(const void *fm) {
    return walk(&((const struct lnb_model *)fm)->cfg, NULL, NULL);
}

void lnb_catalogue(const void *fm, struct tap_desc *out) {
    walk(&((const struct lnb_model *)fm)->cfg, NULL, out);
}

// ---- the model

// Appends matrix "{prefix}.{layer}.{leaf}" (d0, d1): a float32 view into *f, or, under compute
// bf16 when it is stored BF16, borrowed into *h
static void matrix(struct model_tensor *t, int *n, struct lnb_model *m,
                   const struct model_dims *dims, const float **f, const uint16_t **h, int64_t d0,
                   int64_t d1, const char *prefix, int layer, const char *leaf) {
    model_tensor_add(t, n, NULL, f, d0, d1, prefix, layer, leaf);
    struct model_tensor *e = t ? &t[*n - 1] : NULL;
    if (!e || !dims || !dims->is_bf16 || op_compute() != OP_COMPUTE_BF16 ||
        !dims->is_bf16(dims->u, e->name))
        return;
    e->bf16 = h, e->dst = NULL;
    m->any_bf16 = true;
}

int lnb_init(struct lnb_model *m, const struct lnb_names *nm, const struct model_dims *dims,
             struct model_tensor **list) {
    const struct lnb_config *c = &m->cfg;
    int L = c->n_layer, n = 0;
    int64_t D = c->hidden, V = c->vocab;
    m->w = calloc((size_t)L, sizeof *m->w);
    m->h = calloc((size_t)L, sizeof *m->h);
    m->id = malloc((size_t)(L + 2) * CAT_N * sizeof *m->id);
    struct model_tensor *t = list ? calloc(5 + (size_t)L * LNB_N_LEAF, sizeof *t) : NULL;
    if (!m->w || !m->h || !m->id || (list && !t)) {
        free(t);
        return -AH_ENOMEM;
    }
    walk(c, m->id, NULL);
    // config only (bench, plan): borrowed under bf16 as torch_dtype says
    m->any_bf16 = !list && op_compute() == OP_COMPUTE_BF16 && !strcmp(c->stored, "bfloat16");
    matrix(t, &n, m, dims, &m->embed, &m->embed16, V, D, NULL, 0, nm->embed);
    model_tensor_mark(t, 0, n, c->tied ? MT_EMBED_HEAD : MT_EMBED, -1);
    if (c->n_pos) model_tensor_add(t, &n, NULL, &m->pos, c->n_pos, D, NULL, 0, nm->pos);
    model_tensor_mark(t, n - (c->n_pos > 0), n, MT_EMBED, -1);
    for (int i = 0; i < L; i++)
        for (int k = 0; k < LNB_N_LEAF; k++) {
            int64_t d0, d1;
            lnb_leaf_shape(c, k, &d0, &d1);
            if (nm->leaf[k] && d1)
                matrix(t, &n, m, dims, &m->w[i][k], &m->h[i][k], d0, d1, nm->layer_prefix, i,
                       nm->leaf[k]);
            else if (nm->leaf[k])
                model_tensor_add(t, &n, NULL, &m->w[i][k], d0, d1, nm->layer_prefix, i,
                                 nm->leaf[k]);
        }
    int n0 = n;
    model_tensor_add(t, &n, NULL, &m->lnf_w, D, 0, NULL, 0, nm->lnf_w);
    model_tensor_add(t, &n, NULL, &m->lnf_b, D, 0, NULL, 0, nm->lnf_b);
    if (!c->tied) matrix(t, &n, m, dims, &m->head, &m->head16, V, D, NULL, 0, nm->head);
    model_tensor_mark(t, n0, n, MT_HEAD, -1);
    if (list) *list = t;
    return n;
}

void lnb_close(void *fm) {
    struct lnb_model *m = fm;
    if (m) {
        free(m->w);
        free(m->h);
        free(m->id);
    }
    free(m);
}

void lnb_info(const void *fm, struct model_info *out) {
    const struct lnb_config *c = &((const struct lnb_model *)fm)->cfg;
    *out = (struct model_info){
        .n_blocks = c->n_layer, .max_pos = c->max_pos, .vocab = c->vocab, .hidden = c->hidden};
}

int64_t lnb_axis_size(const void *fm, int block, const char *axis) {
    (void)block;
    const struct lnb_config *c = &((const struct lnb_model *)fm)->cfg;
    if (!strcmp(axis, "num_heads") || !strcmp(axis, "num_kv_heads")) return c->n_head;
    if (!strcmp(axis, "head_dim")) return c->head_dim;
    if (!strcmp(axis, "hidden_size")) return c->hidden;
    if (!strcmp(axis, "intermediate_size")) return c->inner;
    if (!strcmp(axis, "vocab_size")) return c->vocab;
    return -1;
}

// multiply-adds x 2 of one token through a block's matrices
static double layer_flops(const struct lnb_config *c) {
    double D = c->hidden, I = c->inner;
    return 2.0 * (3 * D * D + D * D + 2 * D * I);
}

double lnb_block_flops(const void *fm, int b, int T) {
    const struct lnb_config *c = &((const struct lnb_model *)fm)->cfg;
    if (b >= c->n_layer) return 2.0 * T * c->hidden * (double)c->vocab;
    return T * layer_flops(c) + 4.0 * c->hidden * (double)T * T; // + scores and P v
}

// Weights are float32 in memory (F16/BF16 widened at load): 4 bytes a parameter; under compute
// bf16 the matrices borrowed BF16 take 2 (every matrix of a BF16 checkpoint: the vectors and
// GPT-2's position table stay float32).
int64_t lnb_stage_bytes(const void *fm, int b0, int b1, bool head, int shard, int n_shards,
                        const char **kind) {
    (void)shard, (void)n_shards;
    const struct lnb_model *m = fm;
    const struct lnb_config *c = &m->cfg;
    int64_t D = c->hidden, I = c->inner, VD = (int64_t)c->vocab * D;
    int64_t n = (b1 - b0) * layer_params(c), mats = (b1 - b0) * (4 * D * D + 2 * D * I);
    if (b0 == 0) n += VD + (int64_t)c->n_pos * D, mats += VD;
    if (head) n += 2 * D + (c->tied && b0 == 0 ? 0 : VD), mats += c->tied && b0 == 0 ? 0 : VD;
    *kind = m->any_bf16 ? "BF16 matrices mapped, vectors float32" : "float32";
    return m->any_bf16 ? 4 * n - 2 * mats : 4 * n;
}

void lnb_describe(const void *fm, char *line, size_t n, int64_t *params, int64_t *bytes,
                  const char **stored) {
    const struct lnb_config *c = &((const struct lnb_model *)fm)->cfg;
    snprintf(line, n, "%s, %d layers (%s residual), hidden %d, %d heads, MLP %d, vocab %d, %s, %s",
             c->arch, c->n_layer, c->parallel ? "parallel" : "sequential", c->hidden, c->n_head,
             c->inner, c->vocab, c->rotary ? "rotary positions" : "learned positions",
             c->tied ? "tied head" : "untied head");
    *params = lnb_params(c);
    *bytes = *params * c->param_bytes;
    *stored = c->stored;
}

// ---- config.json

int lnb_cfg_bool(const struct config *cf, const char *key, bool dflt, bool *out,
                 struct ah_error *err) {
    const struct cfg_value *v = cfg_get(cf, NULL, key);
    *out = dflt;
    if (!v || cfg_kind(cf, v) == CFG_NULL) return 0;
    if (cfg_kind(cf, v) != CFG_BOOL)
        return ah_fail(err, AH_EINVAL, "%s: \"%s\": expected true or false", cf->path, key);
    *out = cfg_is_true(cf, v);
    return 0;
}

int lnb_cfg_act(const struct config *cf, const char *key, const char *dflt, enum op_act_kind *out,
                struct ah_error *err) {
    const struct cfg_value *v = cfg_get(cf, NULL, key);
    return block_cfg_act(cf->path, key, v ? cfg_string(cf, v) : dflt, out, err);
}

int lnb_cfg_dim(const struct config *cf, const char *key, int dflt, int *out,
                struct ah_error *err) {
    *out = dflt;
    int rc = cfg_int_in(cf, key, false, out, 1, 1 << 24, err);
    return rc < 0 ? rc : 0;
}

int lnb_cfg_dtype(const struct config *cf, struct lnb_config *c, struct ah_error *err) {
    const char *key = cfg_get(cf, NULL, "torch_dtype") ? "torch_dtype" : "dtype";
    const struct cfg_value *v = cfg_get(cf, NULL, key);
    const char *s = cfg_string(cf, v);
    c->param_bytes = 4, c->stored = "float32"; // transformers' default
    if (!v || cfg_kind(cf, v) == CFG_NULL) return 0;
    if (s && (!strcmp(s, "float16") || !strcmp(s, "bfloat16"))) c->param_bytes = 2;
    if (s && (c->param_bytes == 2 || !strcmp(s, "float32"))) {
        c->stored = c->param_bytes == 2 ? (s[0] == 'b' ? "bfloat16" : "float16") : "float32";
        return 0;
    }
    return ah_fail(err, AH_EINVAL, "%s: \"%s\": expected \"float32\", \"float16\" or \"bfloat16\"",
                   cf->path, key);
}

int lnb_cfg_check(const struct config *cf, struct lnb_config *c, const char *heads_key,
                  const char *eps_key, struct ah_error *err) {
    if (c->n_layer > AH_MAX_LAYERS)
        return ah_fail(err, AH_EINVAL, "%s: %d layers: at most %d", cf->path, c->n_layer,
                       AH_MAX_LAYERS);
    if (c->hidden % c->n_head != 0)
        return ah_fail(err, AH_EINVAL, "%s: \"%s\": %d heads do not divide the hidden size %d",
                       cf->path, heads_key, c->n_head, c->hidden);
    c->head_dim = c->hidden / c->n_head;
    if (!(c->eps > 0.0 && c->eps < 1.0))
        return ah_fail(err, AH_EINVAL, "%s: \"%s\": %g: expected 0 < eps < 1", cf->path, eps_key,
                       c->eps);
    int which, rc = cfg_check_unused(cf, err);
    // GPT-2 and GPT-NeoX read no quantization_config: a quantized checkpoint is refused
    if (rc == 0) rc = model_quant_method(cf, NULL, &which, err);
    return rc < 0 ? rc : lnb_cfg_dtype(cf, c, err);
}
