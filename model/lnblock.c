// lnblock.c - the tensor list, the counts, the catalogue and the config helpers of
// model/lnblock.h (the forward pass is model/lnblock_fwd.c).
#include "model/lnblock.h"

#include "model/ah.h"

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

// ---- the catalogue (tests/ref/hf/NAMES.md)

#define BSH "batch,seq,hidden_size"
#define BHS "batch,num_heads,seq,head_dim"
#define BKS "batch,num_kv_heads,seq,head_dim"
#define BHQ "batch,num_heads,query,key"

static const struct lnb_tap_desc {
    const char *name, *shape, *meaning;
    char where; // R root before the blocks, E root after them, B every block, P rotary blocks
} lnb_taps[LNB_N_TAPS] = {
    [LNB_INPUT_IDS] = {"input_ids", "batch,seq", "The token ids the model was called with", 'R'},
    [LNB_ATTENTION_MASK] = {"attention_mask", "batch,seq",
                            "The attention mask the model was called with; zeros are padding", 'R'},
    [LNB_TOKEN_EMBEDDINGS] = {"token_embeddings", BSH,
                              "The token embedding's output (GPT-2: wte alone, before the learned "
                              "positions that layers.0.layer_input adds)",
                              'R'},
    [LNB_LAYER_INPUT] = {"layer_input", BSH, "The residual stream entering the block", 'B'},
    [LNB_ATTENTION_NORM_OUTPUT] = {"attention_norm_output", BSH,
                                   "The normed stream entering the attention (LayerNorm)", 'B'},
    [LNB_QUERIES_PRE_ROPE] = {"attention_queries_pre_rope", BHS, "The queries before RoPE", 'P'},
    [LNB_KEYS_PRE_ROPE] = {"attention_keys_pre_rope", BKS, "The keys before RoPE", 'P'},
    [LNB_QUERIES] = {"attention_queries", BHS, "The queries entering attention", 'B'},
    [LNB_KEYS] = {"attention_keys", BKS, "The keys entering attention", 'B'},
    [LNB_VALUES] = {"attention_values", BKS, "The values entering attention", 'B'},
    [LNB_SCORES] = {"attention_scores", BHQ, "The attention scores entering the softmax, masked",
                    'B'},
    [LNB_PROBABILITIES] = {"attention_probabilities", BHQ,
                           "The attention pattern the values are mixed with", 'B'},
    [LNB_HEAD_OUTPUTS] = {"attention_head_outputs", "batch,seq,num_heads,head_dim",
                          "The per-head outputs before the output projection", 'B'},
    [LNB_ATTENTION_OUTPUT] = {"attention_output", BSH,
                              "What the attention adds to the residual stream", 'B'},
    [LNB_LAYER_MID] = {"layer_mid", BSH, "layer_input + attention_output", 'B'},
    [LNB_MLP_NORM_OUTPUT] = {"mlp_norm_output", BSH, "The normed stream entering the MLP", 'B'},
    [LNB_MLP_INPUT] = {"mlp_input", BSH, "What the MLP is called with", 'B'},
    [LNB_MLP_ACTIVATION] = {"mlp_activation", "batch,seq,intermediate_size",
                            "The activation function's output", 'B'},
    [LNB_MLP_NEURONS] = {"mlp_neurons", "batch,seq,intermediate_size",
                         "What the down projection receives: the activation itself", 'B'},
    [LNB_MLP_OUTPUT] = {"mlp_output", BSH, "What the MLP adds to the residual stream", 'B'},
    [LNB_LAYER_OUTPUT] = {"layer_output", BSH, "The residual stream leaving the block", 'B'},
    [LNB_FINAL_NORM_OUTPUT] = {"final_norm_output", BSH,
                               "The residual stream after the final norm, what the head reads",
                               'E'},
    [LNB_LM_HEAD_OUTPUT] = {"lm_head_output", "batch,seq,vocab_size", "The head's logits", 'E'},
    [LNB_LOGITS] = {"logits", "batch,seq,vocab_size",
                    "The logits the model returns (the head's: no softcap, no scale)", 'E'},
    [LNB_NEXT_TOKEN_PROBS] = {"next_token_probs", "batch,vocab_size",
                              "The next-token distribution at the last position; derived, "
                              "read-only",
                              'E'},
};

// where the parallel residual changes a name's meaning (tests/ref/hf/NAMES.md, GPT-NeoX)
static const char *meaning(const struct lnb_config *c, int k) {
    if (c->parallel && k == LNB_LAYER_MID)
        return "layer_input + attention_output: in a parallel block nothing reads it (the MLP "
               "reads layer_input), layer_mid + mlp_output == layer_output";
    if (c->parallel && k == LNB_MLP_NORM_OUTPUT)
        return "The normed stream entering the MLP: post_attention_layernorm(layer_input) in a "
               "parallel block";
    if (c->rotary && k == LNB_QUERIES)
        return "The queries entering attention, after RoPE on the first rotary_pct of each head";
    if (c->rotary && k == LNB_KEYS)
        return "The keys entering attention, after RoPE on the first rotary_pct of each head";
    return lnb_taps[k].meaning;
}

static bool tap_in(const struct lnb_config *c, int layer, char where) {
    if (layer < 0) return where == 'R';
    if (layer >= c->n_layer) return where == 'E';
    return where == 'B' || (where == 'P' && c->rotary);
}

// every (layer, tap) in forward order: roots before (-1), the blocks, roots after (L); ids into
// id[(layer + 1) * LNB_N_TAPS + kind] (-1: absent) and descriptions into out (either may be NULL)
static int walk(const struct lnb_config *c, int *id, struct tap_desc *out) {
    int n = 0;
    char name[TAP_NAME_MAX];
    for (int l = -1; l <= c->n_layer; l++)
        for (int k = 0; k < LNB_N_TAPS; k++) {
            const struct lnb_tap_desc *x = &lnb_taps[k];
            bool in = tap_in(c, l, x->where);
            if (id) id[(l + 1) * LNB_N_TAPS + k] = in ? n : -1;
            if (!in) continue;
            if (out) {
                if (l >= 0 && l < c->n_layer)
                    snprintf(name, sizeof name, "layers.%d.%s", l, x->name);
                else
                    snprintf(name, sizeof name, "%s", x->name);
                enum tap_dtype dt = k <= LNB_ATTENTION_MASK ? TAP_I64 : TAP_F32;
                int r = tap_desc_set(&out[n], name, dt, x->shape, meaning(c, k), l);
                AH_ASSERT(r == 0);
            }
            n++;
        }
    return n;
}

int lnb_n_taps(const void *fm) {
    return walk(&((const struct lnb_model *)fm)->cfg, NULL, NULL);
}

void lnb_catalogue(const void *fm, struct tap_desc *out) {
    walk(&((const struct lnb_model *)fm)->cfg, NULL, out);
}

// ---- the model

int lnb_init(struct lnb_model *m, const struct lnb_names *nm, struct model_tensor **list) {
    const struct lnb_config *c = &m->cfg;
    int L = c->n_layer, n = 0;
    int64_t D = c->hidden, V = c->vocab;
    m->w = calloc((size_t)L, sizeof *m->w);
    m->id = malloc((size_t)(L + 2) * LNB_N_TAPS * sizeof *m->id);
    struct model_tensor *t = list ? calloc(5 + (size_t)L * LNB_N_LEAF, sizeof *t) : NULL;
    if (!m->w || !m->id || (list && !t)) {
        free(t);
        return -AH_ENOMEM;
    }
    walk(c, m->id, NULL);
    model_tensor_add(t, &n, NULL, &m->embed, V, D, NULL, 0, nm->embed);
    if (c->n_pos) model_tensor_add(t, &n, NULL, &m->pos, c->n_pos, D, NULL, 0, nm->pos);
    for (int i = 0; i < L; i++)
        for (int k = 0; k < LNB_N_LEAF; k++) {
            int64_t d0, d1;
            lnb_leaf_shape(c, k, &d0, &d1);
            if (nm->leaf[k])
                model_tensor_add(t, &n, NULL, &m->w[i][k], d0, d1, nm->layer_prefix, i,
                                 nm->leaf[k]);
        }
    model_tensor_add(t, &n, NULL, &m->lnf_w, D, 0, NULL, 0, nm->lnf_w);
    model_tensor_add(t, &n, NULL, &m->lnf_b, D, 0, NULL, 0, nm->lnf_b);
    if (!c->tied) model_tensor_add(t, &n, NULL, &m->head, V, D, NULL, 0, nm->head);
    if (list) *list = t;
    return n;
}

void lnb_close(void *fm) {
    struct lnb_model *m = fm;
    if (m) {
        free(m->w);
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

// Weights are float32 in memory (F16/BF16 widened at load): 4 bytes a parameter.
int64_t lnb_stage_bytes(const void *fm, int b0, int b1, bool head, int shard, int n_shards,
                        const char **kind) {
    (void)shard, (void)n_shards;
    const struct lnb_config *c = &((const struct lnb_model *)fm)->cfg;
    int64_t D = c->hidden, VD = (int64_t)c->vocab * D, n = (b1 - b0) * layer_params(c);
    if (b0 == 0) n += VD + (int64_t)c->n_pos * D;
    if (head) n += 2 * D + (c->tied && b0 == 0 ? 0 : VD);
    *kind = "float32";
    return 4 * n;
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
    int rc = cfg_check_unused(cf, err);
    return rc < 0 ? rc : lnb_cfg_dtype(cf, c, err);
}
