// decoder.c - counts, catalogue and weights of the Llama-style families (model/decoder.h);
// parameters as tests/ref/hf/params.py counts them:
//   V D + D + (untied: V D) + sum_i [ D H hd + 2 D KV hd + H hd D + biases + q/k norms 2 hd
//   + 2 D (Gemma 4 D) + (dense: 3 D I (+ 2 I + D with mlp_bias); mixture: D E + 3 E D Ie) ]
// The forward pass is model/decoder_forward.c.
#include "model/decoder.h"

#include "model/ah.h"
#include "model/catalogue.h"
#include "model/family.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int64_t dec_layer_params(const struct dec_config *c, int i, bool experts) {
    int64_t D = c->hidden, H = c->n_head, KV = c->n_kv_head, hd = c->head_dim, I = c->ffn;
    int64_t E = c->n_expert, Ie = c->expert_ffn;
    if (experts)
        return c->moe[i] ? 3 * E * D * Ie + (c->blk.expert_bias ? E * (2 * Ie + D) : 0) : 0;
    int64_t n = D * H * hd + 2 * D * KV * hd + H * hd * D;
    n += (H * hd + 2 * KV * hd) * c->blk.qkv_bias + D * c->blk.o_bias + dec_block_norm_params(c);
    n += c->blk.sinks ? H : 0;
    if (c->moe[i]) return n + D * E + (c->blk.router_bias ? E : 0); // the router
    return n + 3 * D * I + (c->blk.mlp_bias ? 2 * I + D : 0);
}

int64_t dec_block_norm_params(const struct dec_config *c) {
    const struct dec_block *b = &c->blk;
    int64_t D = c->hidden, hd = c->head_dim;
    int64_t n =
        2 * D * ((b->norm_at & DEC_NORM_PRE) != 0) + 2 * D * ((b->norm_at & DEC_NORM_POST) != 0);
    if (b->qk_norm == DEC_QK_HEAD) n += 2 * hd;
    if (b->qk_norm == DEC_QK_PROJ) n += (int64_t)(c->n_head + c->n_kv_head) * hd;
    return n;
}

int64_t dec_params(const struct dec_config *c) {
    int64_t VD = (int64_t)c->vocab * c->hidden, n = VD + c->hidden + (c->blk.tied ? 0 : VD);
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
// catalogue (model/catalogue.h; tests/ref/hf/NAMES.md)

// every block has the attention's values, q/k before RoPE among them; the norm outputs where its
// norms sit; a dense MLP's or a mixture's values
static unsigned block_options(const void *u, int l) {
    const struct dec_config *c = u;
    unsigned has = CAT_PRE_ROPE | (c->moe[l] ? CAT_MOE : CAT_DENSE);
    if (c->blk.norm_at & DEC_NORM_PRE) has |= CAT_PRE_NORM;
    if (c->blk.norm_at & DEC_NORM_POST) has |= CAT_POST_NORM;
    if (c->blk.sinks) has |= CAT_SINKS;
    if (c->moe[l] && c->blk.swiglu_clamp) has |= CAT_CLAMPED;
    return has;
}

static int walk(const struct dec_config *c, int *id, struct tap_desc *out) {
    struct cat_family f = {
        .n_layer = c->n_layer, .texts = CAT_TEXT_DEC, .block = block_options, .u = c};
    return cat_walk(&f, id, out);
}

int dec_n_taps(const struct decoder *m) {
    return walk(&m->cfg, NULL, NULL);
}

void dec_catalogue(const struct decoder *m, struct tap_desc *out) {
    walk(&m->cfg, NULL, out);
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

// "{layers}.{layer}.{leaf}{suffix}" (layer < 0: leaf alone) into name
static const char *tname(char *name, size_t n, const struct dec_config *c, int layer,
                         const char *leaf, const char *suffix) {
    AH_ASSERT(leaf); // a description paired with a table that lacks the tensor
    if (layer >= 0)
        snprintf(name, n, "%s.%d.%s%s", c->names->layers, layer, leaf, suffix);
    else
        snprintf(name, n, "%s%s", leaf, suffix);
    return name;
}

// Appends matrix leaf.weight of layer (< 0: the model's): borrowed if stored BF16
static void mat(struct model_tensor *t, int *n, struct decoder *m, const struct model_dims *dims,
                struct dec_mat *dst, int64_t d0, int64_t d1, int layer, const char *leaf) {
    char name[128];
    tname(name, sizeof name, &m->cfg, layer, leaf, ".weight");
    bool h = t && dims && dims->is_bf16 && dims->is_bf16(dims->u, name);
    m->any_bf16 |= h;
    model_tensor_add(t, n, h ? &dst->h : NULL, h ? NULL : &dst->f, d0, d1, NULL, 0, name);
}

// Appends float32 vector leaf{suffix} of layer (< 0: the model's), shape (d0)
static void vec(struct model_tensor *t, int *n, const struct dec_config *c, const float **dst,
                int64_t d0, int layer, const char *leaf, const char *suffix) {
    char name[128];
    model_tensor_add(t, n, NULL, dst, d0, 0, NULL, 0,
                     tname(name, sizeof name, c, layer, leaf, suffix));
}

// one mixture block's router and experts ({experts}.{e}.{egate} ...)
static void expert_tensors(struct model_tensor *t, int *n, struct decoder *m,
                           const struct model_dims *dims, int i, struct dec_block_w *w) {
    const struct dec_config *c = &m->cfg;
    const struct dec_names *nm = c->names;
    int64_t D = c->hidden, Ie = c->expert_ffn;
    char leaf[96];
    mat(t, n, m, dims, &w->router, c->n_expert, D, i, nm->router);
    for (int e = 0; e < c->n_expert; e++) {
        snprintf(leaf, sizeof leaf, "%s.%d.%s", nm->experts, e, nm->egate);
        mat(t, n, m, dims, &w->eg[e], Ie, D, i, leaf);
        snprintf(leaf, sizeof leaf, "%s.%d.%s", nm->experts, e, nm->eup);
        mat(t, n, m, dims, &w->eu[e], Ie, D, i, leaf);
        snprintf(leaf, sizeof leaf, "%s.%d.%s", nm->experts, e, nm->edown);
        mat(t, n, m, dims, &w->ed[e], D, Ie, i, leaf);
    }
}

// gpt-oss's mixture block: the router (+ bias) and the experts' fused tensors as published,
// MXFP4 blocks + scales (kept as stored; model/mxfp4.h) and float32 biases
static void expert_tensors_mxfp4(struct model_tensor *t, int *n, struct decoder *m,
                                 const struct model_dims *dims, int i, struct dec_block_w *w) {
    const struct dec_config *c = &m->cfg;
    const struct dec_names *nm = c->names;
    int64_t D = c->hidden, Ie = c->expert_ffn, E = c->n_expert;
    char leaf[96], name[160];
    mat(t, n, m, dims, &w->router, E, D, i, nm->router);
    if (c->blk.router_bias) vec(t, n, c, &w->brouter, E, i, nm->router, ".bias");
    const int64_t gu_b[4] = {E, 2 * Ie, D / 32, 16}, dn_b[4] = {E, D, Ie / 32, 16};
    struct {
        const char *leaf;
        struct mxfp4_mat *q;
        const int64_t *shape;
    } f[2] = {{nm->gate_up, &w->gu_q4, gu_b}, {nm->edown, &w->down_q4, dn_b}};
    for (int k = 0; k < 2; k++) {
        snprintf(leaf, sizeof leaf, "%s.%s_blocks", nm->experts, f[k].leaf);
        model_tensor_add_u8(t, n, &f[k].q->blocks, 4, f[k].shape,
                            tname(name, sizeof name, c, i, leaf, ""));
        snprintf(leaf, sizeof leaf, "%s.%s_scales", nm->experts, f[k].leaf);
        model_tensor_add_u8(t, n, &f[k].q->scales, 3, f[k].shape,
                            tname(name, sizeof name, c, i, leaf, ""));
        snprintf(leaf, sizeof leaf, "%s.%s_bias", nm->experts, f[k].leaf);
        if (c->blk.expert_bias)
            model_tensor_add(t, n, NULL, k ? &w->bed : &w->bgu, E, k ? D : 2 * Ie, NULL, 0,
                             tname(name, sizeof name, c, i, leaf, ""));
    }
    m->any_mxfp4 = true;
}

static void block_tensors(struct model_tensor *t, int *n, struct decoder *m,
                          const struct model_dims *dims, int i, struct dec_block_w *w) {
    const struct dec_config *c = &m->cfg;
    const struct dec_block *b = &c->blk;
    const struct dec_names *nm = c->names;
    int64_t D = c->hidden, hd = c->head_dim, HD = c->n_head * hd, KVD = c->n_kv_head * hd;
    int64_t I = c->ffn;
    bool proj = b->qk_norm == DEC_QK_PROJ;
#define FV(dst, d0, leaf)      vec(t, n, c, dst, d0, i, leaf, ".weight")
#define BIAS(dst, d0, leaf)    vec(t, n, c, dst, d0, i, leaf, ".bias")
#define MAT(dst, d0, d1, leaf) mat(t, n, m, dims, dst, d0, d1, i, leaf)
    if (b->norm_at & DEC_NORM_PRE) {
        FV(&w->attn_norm, D, nm->attn_norm);
        FV(&w->mlp_norm, D, nm->mlp_norm);
    }
    if (b->norm_at & DEC_NORM_POST) {
        FV(&w->post_attn_norm, D, nm->post_attn_norm);
        FV(&w->post_mlp_norm, D, nm->post_mlp_norm);
    }
    MAT(&w->wq, HD, D, nm->q);
    MAT(&w->wk, KVD, D, nm->k);
    MAT(&w->wv, KVD, D, nm->v);
    MAT(&w->wo, D, HD, nm->o);
    if (b->qkv_bias) {
        BIAS(&w->bq, HD, nm->q);
        BIAS(&w->bk, KVD, nm->k);
        BIAS(&w->bv, KVD, nm->v);
    }
    if (b->o_bias) BIAS(&w->bo, D, nm->o);
    if (b->qk_norm != DEC_QK_NONE) {
        FV(&w->q_norm, proj ? HD : hd, nm->q_norm);
        FV(&w->k_norm, proj ? KVD : hd, nm->k_norm);
    }
    if (b->sinks) vec(t, n, c, &w->sinks, c->n_head, i, nm->sinks, "");
    if (c->moe[i] && b->experts_interleaved) {
        expert_tensors_mxfp4(t, n, m, dims, i, w);
        return;
    }
    if (c->moe[i]) {
        expert_tensors(t, n, m, dims, i, w);
        return;
    }
    MAT(&w->gate, I, D, nm->gate);
    MAT(&w->up, I, D, nm->up);
    MAT(&w->down, D, I, nm->down);
    if (b->mlp_bias) {
        BIAS(&w->bg, I, nm->gate);
        BIAS(&w->bu, I, nm->up);
        BIAS(&w->bd, D, nm->down);
    }
#undef FV
#undef BIAS
#undef MAT
}

// every tensor of the checkpoint into t (NULL: counts them)
static int all_tensors(struct decoder *m, const struct model_dims *dims, struct model_tensor *t) {
    const struct dec_config *c = &m->cfg;
    int n = 0;
    mat(t, &n, m, dims, &m->embed, c->vocab, c->hidden, -1, c->names->embed);
    for (int i = 0; i < c->n_layer; i++)
        block_tensors(t, &n, m, dims, i, &m->blk[i]);
    vec(t, &n, c, &m->norm, c->hidden, -1, c->names->norm, ".weight");
    if (!c->blk.tied) mat(t, &n, m, dims, &m->head, c->vocab, c->hidden, -1, c->names->head);
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
    m->id = malloc((size_t)(L + 2) * CAT_N * sizeof *m->id);
    if (!m->blk || !m->experts || !m->id) return -AH_ENOMEM;
    walk(c, m->id, NULL);
    for (int i = 0, j = 0; i < L; i++)
        if (c->moe[i]) {
            struct dec_block_w *w = &m->blk[i];
            w->eg = m->experts + (size_t)3 * c->n_expert * j++;
            w->eu = w->eg + c->n_expert;
            w->ed = w->eu + c->n_expert;
        }
    m->any_bf16 = c->bf16; // config only (plan, bench): as torch_dtype says
    m->any_mxfp4 = c->blk.experts_interleaved;
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
