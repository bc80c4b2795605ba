// decoder.c - counts, catalogue and weights of the Llama-style families (model/decoder.h);
// parameters as tests/ref/hf/params.py counts them:
//   V D + D + (untied: V D) + sum_i [ D H hd + 2 D KV hd + H hd D + biases + q/k norms 2 hd
//   + 2 D (Gemma 4 D) + (dense: 3 D I (+ 2 I + D with mlp_bias); mixture: D E + 3 E D Ie) ]
// The forward pass is model/decoder_forward.c.
#include "model/decoder.h"

#include "model/ah.h"
#include "model/decoder_taps.h"
#include "model/family.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int64_t dec_layer_params(const struct dec_config *c, int i, bool experts) {
    int64_t D = c->hidden, H = c->n_head, KV = c->n_kv_head, hd = c->head_dim, I = c->ffn;
    int64_t E = c->n_expert;
    if (experts) return c->moe[i] ? 3 * E * D * c->expert_ffn : 0;
    int64_t n = D * H * hd + 2 * D * KV * hd + H * hd * D;
    n += (H * hd + 2 * KV * hd) * c->qkv_bias + D * c->o_bias + 2 * hd * c->qk_norm;
    n += (c->gemma ? 4 : 2) * D;
    if (c->moe[i]) return n + D * E; // the router
    return n + 3 * D * I + (c->mlp_bias ? 2 * I + D : 0);
}

int64_t dec_params(const struct dec_config *c) {
    int64_t VD = (int64_t)c->vocab * c->hidden, n = VD + c->hidden + (c->tied ? 0 : VD);
    for (int i = 0; i < c->n_layer; i++)
        n += dec_layer_params(c, i, false) + dec_layer_params(c, i, true);
    return n;
}

double dec_block_flops(const struct dec_config *c, int i, int T) {
    if (i >= c->n_layer) return 2.0 * T * c->hidden * (double)c->vocab;
    double active = (double)dec_layer_params(c, i, false);
    if (c->moe[i]) active += 3.0 * c->hidden * c->expert_ffn * c->top_k;
    return 2.0 * T * active + 4.0 * c->n_head * c->head_dim * (double)T * T;
}

// ----------------------------------------------------------------------------
// catalogue: tests/ref/hf/NAMES.md

#define BSH "batch,seq,hidden_size"
static const struct dec_tap_def {
    const char *name, *shape, *meaning;
    enum tap_dtype dtype;
    char where; // R root before the blocks, E after them, B every block, G Gemma blocks,
                // D dense blocks, M mixture blocks
} defs[DT_N] = {
    [DT_INPUT_IDS] = {"input_ids", "batch,seq", "The token ids the model was called with", TAP_I64,
                      'R'},
    [DT_ATTENTION_MASK] = {"attention_mask", "batch,seq",
                           "The attention mask the model was called with (all ones)", TAP_I64, 'R'},
    [DT_TOKEN_EMBEDDINGS] = {"token_embeddings", BSH,
                             "The embedding module's output (Gemma 2: unscaled; Gemma 3: times "
                             "sqrt(hidden_size))",
                             TAP_F32, 'R'},
    [DT_LAYER_INPUT] = {"layer_input", BSH, "The residual stream entering the block", TAP_F32, 'B'},
    [DT_ATTENTION_NORM_OUTPUT] = {"attention_norm_output", BSH,
                                  "input_layernorm's output, what the attention reads", TAP_F32,
                                  'B'},
    [DT_QUERIES_PRE_ROPE] = {"attention_queries_pre_rope", "batch,num_heads,seq,qk_head_dim",
                             "The queries before RoPE (after q_norm where the family has one)",
                             TAP_F32, 'B'},
    [DT_KEYS_PRE_ROPE] = {"attention_keys_pre_rope", "batch,num_kv_heads,seq,qk_head_dim",
                          "The keys before RoPE (after k_norm where the family has one)", TAP_F32,
                          'B'},
    [DT_QUERIES] = {"attention_queries", "batch,num_heads,seq,qk_head_dim",
                    "The queries entering attention (projection, bias, q_norm, RoPE)", TAP_F32,
                    'B'},
    [DT_KEYS] = {"attention_keys", "batch,num_kv_heads,seq,qk_head_dim",
                 "The keys entering attention (projection, bias, k_norm, RoPE)", TAP_F32, 'B'},
    [DT_VALUES] = {"attention_values", "batch,num_kv_heads,seq,head_dim",
                   "The values entering attention", TAP_F32, 'B'},
    [DT_SCORES] = {"attention_scores", "batch,num_heads,query,key",
                   "q.k times the scale, soft-capped (Gemma 2), -inf where masked: what the "
                   "softmax reads",
                   TAP_F32, 'B'},
    [DT_PROBS] = {"attention_probabilities", "batch,num_heads,query,key",
                  "The attention pattern the values are mixed with", TAP_F32, 'B'},
    [DT_HEAD_OUTPUTS] = {"attention_head_outputs", "batch,seq,num_heads,head_dim",
                         "Each head's P.V, what o_proj receives", TAP_F32, 'B'},
    [DT_ATTENTION_OUTPUT] = {"attention_output", BSH,
                             "o_proj's output (Gemma: before post_attention_layernorm)", TAP_F32,
                             'B'},
    [DT_ATTENTION_POST_NORM] = {"attention_post_norm_output", BSH,
                                "post_attention_layernorm(attention_output): what the attention "
                                "adds to the residual stream",
                                TAP_F32, 'G'},
    [DT_LAYER_MID] = {"layer_mid", BSH, "The residual stream after the attention add", TAP_F32,
                      'B'},
    [DT_MLP_NORM_OUTPUT] = {"mlp_norm_output", BSH,
                            "The normed stream the MLP reads (Gemma: pre_feedforward_layernorm)",
                            TAP_F32, 'B'},
    [DT_MLP_INPUT] = {"mlp_input", BSH, "What the MLP is called with", TAP_F32, 'B'},
    [DT_MLP_ACTIVATION] = {"mlp_activation", "batch,seq,intermediate_size", "act(gate_proj(x))",
                           TAP_F32, 'D'},
    [DT_MLP_NEURONS] = {"mlp_neurons", "batch,seq,intermediate_size",
                        "act(gate_proj(x)) * up_proj(x): what down_proj receives", TAP_F32, 'D'},
    [DT_ROUTER_LOGITS] = {"router_logits", "batch,seq,num_experts",
                          "The router's logits, before the softmax", TAP_F32, 'M'},
    [DT_EXPERT_INDICES] = {"expert_indices", "batch,seq,top_k",
                           "The top-k experts of softmax(router_logits), largest first", TAP_I64,
                           'M'},
    [DT_EXPERT_WEIGHTS] = {"expert_weights", "batch,seq,top_k",
                           "Their probabilities (renormalised: Mixtral, norm_topk_prob)", TAP_F32,
                           'M'},
    [DT_EXPERT_OUTPUTS] = {"expert_outputs", "batch,seq,top_k,hidden_size",
                           "Each slot's weighted expert output", TAP_F32, 'M'},
    [DT_ROUTED_OUTPUT] = {"routed_output", BSH, "The sum over slots (equals mlp_output)", TAP_F32,
                          'M'},
    [DT_MLP_OUTPUT] = {"mlp_output", BSH,
                       "The MLP module's output (Gemma: before post_feedforward_layernorm)",
                       TAP_F32, 'B'},
    [DT_MLP_POST_NORM] = {"mlp_post_norm_output", BSH,
                          "post_feedforward_layernorm(mlp_output): what the MLP adds", TAP_F32,
                          'G'},
    [DT_LAYER_OUTPUT] = {"layer_output", BSH, "The residual stream leaving the block", TAP_F32,
                         'B'},
    [DT_FINAL_NORM_OUTPUT] = {"final_norm_output", BSH, "model.norm's output, what the head reads",
                              TAP_F32, 'E'},
    [DT_LM_HEAD_OUTPUT] = {"lm_head_output", "batch,seq,vocab_size",
                           "final_norm_output times the head (the embedding when tied)", TAP_F32,
                           'E'},
    [DT_LOGITS] = {"logits", "batch,seq,vocab_size",
                   "The model's logits: lm_head_output, soft-capped by Gemma 2", TAP_F32, 'E'},
    [DT_NEXT_TOKEN_PROBS] = {"next_token_probs", "batch,vocab_size",
                             "softmax of the logits at the last position", TAP_F32, 'E'},
};

static bool tap_in(const struct dec_config *c, int layer, char where) {
    if (layer < 0) return where == 'R';
    if (layer >= c->n_layer) return where == 'E';
    return where == 'B' || (where == 'G' && c->gemma) || where == (c->moe[layer] ? 'M' : 'D');
}

static int walk(const struct dec_config *c, struct tap_desc *out) {
    int n = 0;
    char name[TAP_NAME_MAX];
    for (int l = -1; l <= c->n_layer; l++)
        for (int t = 0; t < DT_N; t++) {
            if (!tap_in(c, l, defs[t].where)) continue;
            if (out) {
                if (l >= 0 && l < c->n_layer)
                    snprintf(name, sizeof name, "layers.%d.%s", l, defs[t].name);
                else
                    snprintf(name, sizeof name, "%s", defs[t].name);
                int r =
                    tap_desc_set(&out[n], name, defs[t].dtype, defs[t].shape, defs[t].meaning, l);
                AH_ASSERT(r == 0);
            }
            n++;
        }
    return n;
}

int dec_n_taps(const struct decoder *m) {
    return walk(&m->cfg, NULL);
}

void dec_catalogue(const struct decoder *m, struct tap_desc *out) {
    walk(&m->cfg, out);
}

int64_t dec_axis_size(const struct decoder *m, int block, const char *axis) {
    const struct dec_config *c = &m->cfg;
    (void)block;
    static const char *const names[] = {"num_heads",   "num_kv_heads", "head_dim",
                                        "qk_head_dim", "hidden_size",  "intermediate_size",
                                        "num_experts", "top_k",        "vocab_size"};
    const int v[] = {c->n_head, c->n_kv_head, c->head_dim, c->head_dim, c->hidden,
                     c->ffn,    c->n_expert,  c->top_k,    c->vocab};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(axis, names[i])) return v[i];
    return -1;
}

// ----------------------------------------------------------------------------
// weights: tests/ref/hf/NAMES.md "Families and their tensor names"

// Appends matrix "model.layers.{i}.{leaf}" (layer < 0: leaf alone): borrowed if stored BF16
static void mat(struct model_tensor *t, int *n, struct decoder *m, const struct model_dims *dims,
                struct dec_mat *dst, int64_t d0, int64_t d1, int layer, const char *leaf) {
    char name[128];
    if (layer >= 0)
        snprintf(name, sizeof name, "model.layers.%d.%s", layer, leaf);
    else
        snprintf(name, sizeof name, "%s", leaf);
    bool h = t && dims && dims->is_bf16 && dims->is_bf16(dims->u, name);
    m->any_bf16 |= h;
    model_tensor_add(t, n, h ? &dst->h : NULL, h ? NULL : &dst->f, d0, d1, NULL, 0, name);
}

// one mixture block's router and experts (Mixtral: block_sparse_moe.*, w1 / w3 / w2)
static void expert_tensors(struct model_tensor *t, int *n, struct decoder *m,
                           const struct model_dims *dims, int i, struct dec_block_w *w) {
    const struct dec_config *c = &m->cfg;
    bool mx = c->kind == DEC_MIXTRAL;
    int64_t D = c->hidden, Ie = c->expert_ffn;
    char leaf[96];
    const char *blk = mx ? "block_sparse_moe" : "mlp";
    snprintf(leaf, sizeof leaf, "%s.gate.weight", blk);
    mat(t, n, m, dims, &w->router, c->n_expert, D, i, leaf);
    for (int e = 0; e < c->n_expert; e++) {
        const char *g = mx ? "w1" : "gate_proj", *u = mx ? "w3" : "up_proj",
                   *d = mx ? "w2" : "down_proj";
        snprintf(leaf, sizeof leaf, "%s.experts.%d.%s.weight", blk, e, g);
        mat(t, n, m, dims, &w->eg[e], Ie, D, i, leaf);
        snprintf(leaf, sizeof leaf, "%s.experts.%d.%s.weight", blk, e, u);
        mat(t, n, m, dims, &w->eu[e], Ie, D, i, leaf);
        snprintf(leaf, sizeof leaf, "%s.experts.%d.%s.weight", blk, e, d);
        mat(t, n, m, dims, &w->ed[e], D, Ie, i, leaf);
    }
}

static void block_tensors(struct model_tensor *t, int *n, struct decoder *m,
                          const struct model_dims *dims, int i, struct dec_block_w *w) {
    const struct dec_config *c = &m->cfg;
    int64_t D = c->hidden, hd = c->head_dim, HD = c->n_head * hd, KVD = c->n_kv_head * hd;
    int64_t I = c->ffn;
#define FV(dst, d0, d1, leaf)  model_tensor_add(t, n, NULL, dst, d0, d1, "model.layers", i, leaf)
#define MAT(dst, d0, d1, leaf) mat(t, n, m, dims, dst, d0, d1, i, leaf)
    FV(&w->attn_norm, D, 0, "input_layernorm.weight");
    FV(&w->mlp_norm, D, 0,
       c->gemma ? "pre_feedforward_layernorm.weight" : "post_attention_layernorm.weight");
    if (c->gemma) {
        FV(&w->post_attn_norm, D, 0, "post_attention_layernorm.weight");
        FV(&w->post_mlp_norm, D, 0, "post_feedforward_layernorm.weight");
    }
    MAT(&w->wq, HD, D, "self_attn.q_proj.weight");
    MAT(&w->wk, KVD, D, "self_attn.k_proj.weight");
    MAT(&w->wv, KVD, D, "self_attn.v_proj.weight");
    MAT(&w->wo, D, HD, "self_attn.o_proj.weight");
    if (c->qkv_bias) {
        FV(&w->bq, HD, 0, "self_attn.q_proj.bias");
        FV(&w->bk, KVD, 0, "self_attn.k_proj.bias");
        FV(&w->bv, KVD, 0, "self_attn.v_proj.bias");
    }
    if (c->o_bias) FV(&w->bo, D, 0, "self_attn.o_proj.bias");
    if (c->qk_norm) {
        FV(&w->q_norm, hd, 0, "self_attn.q_norm.weight");
        FV(&w->k_norm, hd, 0, "self_attn.k_norm.weight");
    }
    if (c->moe[i]) {
        expert_tensors(t, n, m, dims, i, w);
        return;
    }
    MAT(&w->gate, I, D, "mlp.gate_proj.weight");
    MAT(&w->up, I, D, "mlp.up_proj.weight");
    MAT(&w->down, D, I, "mlp.down_proj.weight");
    if (c->mlp_bias) {
        FV(&w->bg, I, 0, "mlp.gate_proj.bias");
        FV(&w->bu, I, 0, "mlp.up_proj.bias");
        FV(&w->bd, D, 0, "mlp.down_proj.bias");
    }
#undef FV
#undef MAT
}

// every tensor of the checkpoint into t (NULL: counts them)
static int all_tensors(struct decoder *m, const struct model_dims *dims, struct model_tensor *t) {
    const struct dec_config *c = &m->cfg;
    int n = 0;
    mat(t, &n, m, dims, &m->embed, c->vocab, c->hidden, -1, "model.embed_tokens.weight");
    for (int i = 0; i < c->n_layer; i++)
        block_tensors(t, &n, m, dims, i, &m->blk[i]);
    model_tensor_add(t, &n, NULL, &m->norm, c->hidden, 0, NULL, 0, "model.norm.weight");
    if (!c->tied) mat(t, &n, m, dims, &m->head, c->vocab, c->hidden, -1, "lm_head.weight");
    return n;
}

int dec_init(struct decoder *m, struct dec_config *c, const struct model_dims *dims,
             struct model_tensor **list) {
    memset(m, 0, sizeof *m);
    m->cfg = *c;
    memset(c, 0, sizeof *c);
    c = &m->cfg;
    int L = c->n_layer, n_moe = 0;
    AH_ASSERT(L >= 1);
    for (int i = 0; i < L; i++)
        n_moe += c->moe[i];
    m->blk = calloc((size_t)L, sizeof *m->blk);
    m->experts = calloc(3 * (size_t)c->n_expert * (size_t)n_moe + 1, sizeof *m->experts);
    m->id = malloc((size_t)(L + 2) * DT_N * sizeof *m->id);
    if (!m->blk || !m->experts || !m->id) return -AH_ENOMEM;
    int id = 0;
    for (int l = -1; l <= L; l++)
        for (int k = 0; k < DT_N; k++)
            m->id[(l + 1) * DT_N + k] = tap_in(c, l, defs[k].where) ? id++ : -1;
    for (int i = 0, j = 0; i < L; i++)
        if (c->moe[i]) {
            struct dec_block_w *w = &m->blk[i];
            w->eg = m->experts + (size_t)3 * c->n_expert * j++;
            w->eu = w->eg + c->n_expert;
            w->ed = w->eu + c->n_expert;
        }
    m->any_bf16 = c->bf16; // config only (plan, bench): as torch_dtype says
    if (!list) return 0;
    m->any_bf16 = false; // with the files: as they are
    int n = all_tensors(m, dims, NULL);
    if (n < 1 || !(*list = calloc((size_t)n, sizeof **list))) return -AH_ENOMEM;
    return all_tensors(m, dims, *list);
}

void dec_free(struct decoder *m) {
    dec_config_free(&m->cfg);
    free(m->blk);
    free(m->experts);
    free(m->id);
    memset(m, 0, sizeof *m);
}
