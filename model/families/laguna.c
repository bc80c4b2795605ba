// laguna.c - Laguna configuration counts (see laguna.h; tests/ref/laguna-forward.md section 6:
//   params = 2 V D + D
//          + sum_i [ D H_i Dh + 2 D KV Dh + H_i Dh D + G_i D + 2 Dh + 2 D ]   G_i = H_i or H_i Dh
//          + sum_dense 3 D I_d + sum_moe [ E D + E + 3 E D I_e + 3 D I_s ] )
#include "model/laguna.h"

#include "model/ah.h"
#include "model/attention.h"
#include "model/catalogue.h"
#include "model/moe.h"
#include "model/ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void laguna_config_free(struct laguna_config *c) {
    free(c->n_head);
    free(c->sliding);
    free(c->dense);
    memset(c, 0, sizeof *c);
}

static int64_t attn_params(const struct laguna_config *c, int i) {
    int64_t D = c->hidden, Dh = c->head_dim, H = c->n_head[i], KV = c->n_kv_head;
    int64_t gate_rows = c->gate_per_element ? H * Dh : H;
    return D * H * Dh + 2 * D * KV * Dh + H * Dh * D + gate_rows * D + 2 * Dh + 2 * D;
}

int64_t laguna_layer_params(const struct laguna_config *c, int i, bool experts) {
    int64_t D = c->hidden, E = c->n_expert;
    if (experts) return c->dense[i] ? 0 : 3 * E * D * c->expert_ffn;
    if (c->dense[i]) return attn_params(c, i) + 3 * D * c->dense_ffn;
    return attn_params(c, i) + E * D + E + 3 * D * c->shared_ffn; // router, bias, shared expert
}

// embed_tokens, lm_head, the final norm
static int64_t laguna_outer_params(const struct laguna_config *c) {
    return 2 * (int64_t)c->vocab * c->hidden + c->hidden;
}

int64_t laguna_params(const struct laguna_config *c) {
    int64_t n = laguna_outer_params(c);
    for (int i = 0; i < c->n_layer; i++)
        n += laguna_layer_params(c, i, false) + laguna_layer_params(c, i, true);
    return n;
}

int64_t laguna_layer_bytes(const struct laguna_config *c, int i, bool experts) {
    int64_t b = 2 * laguna_layer_params(c, i, experts);
    if (!experts && !c->dense[i]) b += 2 * (int64_t)c->n_expert; // the F32 bias: 4 bytes, not 2
    return b;
}

int64_t laguna_bytes(const struct laguna_config *c) {
    int64_t b = 2 * laguna_outer_params(c);
    for (int i = 0; i < c->n_layer; i++)
        b += laguna_layer_bytes(c, i, false) + laguna_layer_bytes(c, i, true);
    return b;
}

double laguna_layer_flops(const struct laguna_config *c, int i) {
    double D = c->hidden, active = (double)attn_params(c, i);
    if (c->dense[i])
        active += 3 * D * c->dense_ffn;
    else
        active += D * c->n_expert + 3 * D * c->expert_ffn * c->top_k + 3 * D * c->shared_ffn;
    return 2.0 * active;
}

// ----------------------------------------------------------------------------
// RoPE tables

int laguna_rope_inv_freq(const struct laguna_rope *r, int head_dim, float *inv_freq, float *scale,
                         double *low, double *high) {
    int d = (int)(head_dim * r->partial), half = d / 2;
    AH_ASSERT(d >= 2 && d % 2 == 0 && d <= head_dim);
    // pos_f[i] = theta ** (arange(0, d, 2) / d), float32 as torch computes it
    for (int i = 0; i < half; i++)
        inv_freq[i] = 1.0f / powf((float)r->theta, (float)(2 * i) / (float)d);
    *scale = 1.0f;
    *low = *high = 0.0;
    if (r->type == LAGUNA_ROPE_DEFAULT) return d;
    // YaRN: frequencies below `low` keep their value, above `high` are divided by the factor
    double two_pi = 6.283185307179586, ln_theta = log(r->theta);
    double cf = d * log(r->original_max_pos / (two_pi * r->beta_fast)) / (2.0 * ln_theta);
    double cs = d * log(r->original_max_pos / (two_pi * r->beta_slow)) / (2.0 * ln_theta);
    if (!r->no_truncate) cf = floor(cf), cs = ceil(cs);
    double lo = cf > 0.0 ? cf : 0.0, hi = cs < d - 1 ? cs : d - 1;
    if (lo == hi) hi += 0.001;
    for (int i = 0; i < half; i++) {
        float ext = inv_freq[i];                               // 1 / pos_f
        float intp = 1.0f / ((float)r->factor * (1.0f / ext)); // 1 / (s * pos_f)
        float ramp = ((float)i - (float)lo) / (float)(hi - lo);
        ramp = ramp < 0.0f ? 0.0f : ramp > 1.0f ? 1.0f : ramp;
        float e = 1.0f - ramp;
        inv_freq[i] = intp * (1.0f - e) + ext * e;
    }
    *scale = (float)r->attention_factor;
    *low = lo;
    *high = hi;
    return d;
}

// ----------------------------------------------------------------------------
// router

void laguna_route(int64_t *idx, float *w, const float *z, const float *bias, int E, int k) {
    AH_ASSERT(k >= 1 && k <= E);
    float *sel = w; // biased scores of the k chosen so far, descending (w is written after)
    for (int j = 0; j < k; j++)
        idx[j] = -1;
    int n = 0;
    for (int e = 0; e < E; e++) { // insertion into the top k: ties keep the lower index first
        float s = act_sigmoid(z[e]) + (bias ? bias[e] : 0.0f);
        if (n == k && !(s > sel[k - 1])) continue;
        int pos = n < k ? n++ : k - 1;
        while (pos > 0 && s > sel[pos - 1]) {
            sel[pos] = sel[pos - 1];
            idx[pos] = idx[pos - 1];
            pos--;
        }
        sel[pos] = s;
        idx[pos] = e;
    }
    float sum = 0.0f;
    for (int j = 0; j < k; j++)
        sum += w[j] = act_sigmoid(z[idx[j]]);
    for (int j = 0; j < k; j++)
        w[j] /= sum;
}

void laguna_route_ref(int64_t *idx, float *w, const float *z, const float *bias, int E, int k) {
    // selection sort on the biased scores in double, lower index first on ties
    uint8_t *taken = calloc((size_t)E, 1);
    AH_ASSERT(taken);
    double sum = 0.0;
    for (int j = 0; j < k; j++) {
        int best = -1;
        double bs = -INFINITY;
        for (int e = 0; e < E; e++) {
            double s = 1.0 / (1.0 + exp(-(double)z[e])) + (bias ? (double)bias[e] : 0.0);
            if (!taken[e] && (best < 0 || s > bs)) best = e, bs = s;
        }
        taken[best] = 1;
        idx[j] = best;
        sum += 1.0 / (1.0 + exp(-(double)z[best]));
    }
    for (int j = 0; j < k; j++)
        w[j] = (float)(1.0 / (1.0 + exp(-(double)z[idx[j]])) / sum);
    free(taken);
}

// ----------------------------------------------------------------------------
// catalogue (model/catalogue.h; the names, layouts and meanings of tests/ref/laguna-nnterp.txt)

// pre-norm blocks with gated attention; a dense MLP, or a mixture with its shared expert
static unsigned block_options(const void *u, int l) {
    const struct laguna_config *c = u;
    return CAT_PRE_NORM | CAT_GATE | (c->dense[l] ? CAT_DENSE : CAT_MOE | CAT_SHARED);
}

static int walk(const struct laguna_config *c, int *id, struct tap_desc *out) {
    struct cat_family f = {
        .n_layer = c->n_layer, .texts = CAT_TEXT_LAGUNA, .block = block_options, .u = c};
    return cat_walk(&f, id, out);
}

int laguna_n_taps(const struct laguna_config *c) {
    return walk(c, NULL, NULL);
}

void laguna_catalogue(const struct laguna_config *c, struct tap_desc *out) {
    walk(c, NULL, out);
}

int64_t laguna_axis_size(const struct laguna_config *c, int block, const char *axis) {
    if (!strcmp(axis, "num_heads")) return block >= 0 && block < c->n_layer ? c->n_head[block] : -1;
    if (!strcmp(axis, "num_kv_heads")) return c->n_kv_head;
    if (!strcmp(axis, "qk_head_dim") || !strcmp(axis, "head_dim")) return c->head_dim;
    if (!strcmp(axis, "hidden_size")) return c->hidden;
    if (!strcmp(axis, "intermediate_size")) return c->dense_ffn;
    if (!strcmp(axis, "num_experts")) return c->n_expert;
    if (!strcmp(axis, "top_k")) return c->top_k;
    if (!strcmp(axis, "vocab_size")) return c->vocab;
    return -1;
}

// ----------------------------------------------------------------------------
// weights

int laguna_init(struct laguna *m, struct laguna_config *c, struct model_tensor **list) {
    memset(m, 0, sizeof *m);
    m->cfg = *c;
    memset(c, 0, sizeof *c);
    c = &m->cfg;
    int L = c->n_layer, E = c->n_expert, n_moe = 0;
    for (int i = 0; i < L; i++)
        n_moe += !c->dense[i];
    int64_t D = c->hidden, Dh = c->head_dim, KVD = (int64_t)c->n_kv_head * Dh;
    m->blk = calloc((size_t)L, sizeof *m->blk);
    m->experts = calloc(list ? 3 * (size_t)E * (size_t)n_moe + 1 : 1, sizeof *m->experts);
    m->id = malloc((size_t)(L + 2) * CAT_N * sizeof *m->id);
    struct model_tensor *t =
        list ? calloc(3 + 16 * (size_t)L + 3 * (size_t)E * n_moe, sizeof *t) : NULL;
    if (!m->blk || !m->experts || !m->id || (list && !t)) {
        free(t);
        laguna_free(m);
        return -AH_ENOMEM;
    }
    walk(c, m->id, NULL); // catalogue ids: CAT_ID

    int n = 0;
    model_tensor_add(t, &n, &m->embed, NULL, c->vocab, D, NULL, 0, "model.embed_tokens.weight");
    model_tensor_mark(t, 0, n, MT_EMBED, -1);
    for (int i = 0, moe = 0; i < L; i++) {
        struct laguna_block_w *w = &m->blk[i];
        int64_t HD = (int64_t)c->n_head[i] * Dh, G = c->gate_per_element ? HD : c->n_head[i];
#define BF(dst, d0, d1, leaf) model_tensor_add(t, &n, dst, NULL, d0, d1, "model.layers", i, leaf)
#define FV(dst, d0, leaf)     model_tensor_add(t, &n, NULL, dst, d0, 0, "model.layers", i, leaf)
        FV(&w->attn_norm, D, "input_layernorm.weight");
        FV(&w->mlp_norm, D, "post_attention_layernorm.weight");
        BF(&w->wq, HD, D, "self_attn.q_proj.weight");
        BF(&w->wk, KVD, D, "self_attn.k_proj.weight");
        BF(&w->wv, KVD, D, "self_attn.v_proj.weight");
        BF(&w->wo, D, HD, "self_attn.o_proj.weight");
        FV(&w->q_norm, Dh, "self_attn.q_norm.weight");
        FV(&w->k_norm, Dh, "self_attn.k_norm.weight");
        BF(&w->wg, G, D, "self_attn.g_proj.weight");
        if (c->dense[i]) {
            BF(&w->gate, c->dense_ffn, D, "mlp.gate_proj.weight");
            BF(&w->up, c->dense_ffn, D, "mlp.up_proj.weight");
            BF(&w->down, D, c->dense_ffn, "mlp.down_proj.weight");
            continue;
        }
        BF(&w->router, E, D, "mlp.gate.weight");
        FV(&w->bias, E, "mlp.experts.e_score_correction_bias");
        BF(&w->sg, c->shared_ffn, D, "mlp.shared_expert.gate_proj.weight");
        BF(&w->su, c->shared_ffn, D, "mlp.shared_expert.up_proj.weight");
        BF(&w->sd, D, c->shared_ffn, "mlp.shared_expert.down_proj.weight");
        if (!list) continue; // no expert table to point into
        w->eg = m->experts + (size_t)3 * E * moe;
        w->eu = w->eg + E;
        w->ed = w->eu + E;
        moe++;
        for (int e = 0; e < E; e++) {
            char leaf[64];
            snprintf(leaf, sizeof leaf, "mlp.experts.%d.gate_proj.weight", e);
            BF(&w->eg[e], c->expert_ffn, D, leaf);
            snprintf(leaf, sizeof leaf, "mlp.experts.%d.up_proj.weight", e);
            BF(&w->eu[e], c->expert_ffn, D, leaf);
            snprintf(leaf, sizeof leaf, "mlp.experts.%d.down_proj.weight", e);
            BF(&w->ed[e], D, c->expert_ffn, leaf);
            model_tensor_mark(t, n - 3, n, i, e); // expert e's: its shard's alone
        }
#undef BF
#undef FV
    }
    model_tensor_add(t, &n, NULL, &m->norm, D, 0, NULL, 0, "model.norm.weight");
    model_tensor_add(t, &n, &m->lm_head, NULL, c->vocab, D, NULL, 0, "lm_head.weight");
    model_tensor_mark(t, n - 2, n, MT_HEAD, -1);
    if (list) *list = t;
    return n;
}

void laguna_free(struct laguna *m) {
    laguna_config_free(&m->cfg);
    free(m->blk);
    free(m->experts);
    free(m->id);
    memset(m, 0, sizeof *m);
}

static int max_heads(const struct laguna_config *c) {
    int h = 1;
    for (int i = 0; i < c->n_layer; i++)
        h = c->n_head[i] > h ? c->n_head[i] : h;
    return h;
}

static int64_t max3(int64_t a, int64_t b, int64_t c) {
    int64_t m = a > b ? a : b;
    return m > c ? m : c;
}

// cos and sin of every position times A (tests/ref/laguna-forward.md 3.4): float32 angles as HF
// forms them
static int rope_tables(float *cos_t, float *sin_t, const struct laguna_rope *r, int head_dim,
                       int T) {
    float *inv = sin_t, A; // sin_t's row 0 holds inv_freq until it is written, last
    double lo, hi;
    int rot = laguna_rope_inv_freq(r, head_dim, inv, &A, &lo, &hi);
    op_rope_table_f32(cos_t, sin_t, T, rot, inv, A);
    return rot;
}

int laguna_state_init(struct laguna_state *s, const struct laguna *m, int max_T, int64_t max_tokens,
                      const uint8_t *want, const struct expert_shard *shard) {
    const struct laguna_config *c = &m->cfg;
    memset(s, 0, sizeof *s);
    int64_t N = max_tokens, T = max_T, D = c->hidden, Dh = c->head_dim, H = max_heads(c);
    int64_t HD = H * Dh, KVD = (int64_t)c->n_kv_head * Dh, E = c->n_expert, k = c->top_k;
    int64_t F = c->dense_ffn > c->shared_ffn ? c->dense_ffn : c->shared_ffn, Ie = c->expert_ffn;
    s->keep_scores = cat_wants_kind(m->id, c->n_layer, want, CAT_SCORES) ||
                     cat_wants_kind(m->id, c->n_layer, want, CAT_PROBABILITIES);
    s->keep_experts = shard || cat_wants_kind(m->id, c->n_layer, want, CAT_EXPERT_OUTPUTS);
    s->shard = shard;
    s->n_xpanels = E > 0 ? op_threads() : 0;
    int64_t tile = op_bf16_panel_floats((int)max3(D, HD, max3(F, Ie, E)),
                                        (int)max3(c->vocab, HD, max3(F, Ie, E)));
    struct arena_piece f[] = {
        // 4-byte elements
        ARENA_ATTN(s, N, D, HD, KVD),
        {(void **)&s->g, N * HD},
        {(void **)&s->a, N * D},
        {(void **)&s->m, N * D},
        {(void **)&s->f_gate, N * F},
        {(void **)&s->f_up, N * F},
        ARENA_MOE(s, N, E, k, D, Ie, s->keep_experts), // Laguna's E > 0
        {(void **)&s->att, s->n_att = attn_scores_floats((int)H, (int)T, 1, s->keep_scores)},
        {(void **)&s->logits, T * c->vocab + c->vocab},
        {(void **)&s->scratch, HD * T},
        {(void **)&s->tile, tile},
        {(void **)&s->xpanels, E > 0 ? s->n_xpanels * moe_panel_floats(D, Ie) : 0},
        {(void **)&s->cos_f, T * Dh / 2},
        {(void **)&s->sin_f, T * Dh / 2},
        {(void **)&s->cos_s, T * Dh / 2},
        {(void **)&s->sin_s, T * Dh / 2},
        {(void **)&s->idx, 2 * N * k},
        {(void **)&s->ones, 2 * T},
        {(void **)&s->order, N * k},
        {(void **)&s->start, 2 * E + 1},
    };
    s->arena = arena_alloc(f, sizeof f / sizeof f[0]);
    if (!s->arena) return -AH_ENOMEM;
    for (int64_t t = 0; t < T; t++)
        s->ones[t] = 1;
    bool any_full = false, any_sliding = false; // a type no layer has is not configured
    for (int i = 0; i < c->n_layer; i++) {
        any_full |= !c->sliding[i];
        any_sliding |= c->sliding[i];
    }
    if (any_full) s->rot_f = rope_tables(s->cos_f, s->sin_f, &c->rope_full, c->head_dim, max_T);
    if (any_sliding)
        s->rot_s = rope_tables(s->cos_s, s->sin_s, &c->rope_sliding, c->head_dim, max_T);
    s->max_T = max_T;
    s->max_tokens = max_tokens;
    return 0;
}

void laguna_state_free(struct laguna_state *s) {
    free(s->arena);
    memset(s, 0, sizeof *s);
}

// ----------------------------------------------------------------------------
// forward

struct laguna_expert_call {
    const struct laguna_block_w *w;
    int64_t D, Ie;
};

static void mm(struct laguna_state *s, float *out, const float *in, const uint16_t *w, int64_t M,
               int64_t K, int64_t N) {
    op_matmul_bf16(out, in, w, (int)M, (int)K, (int)N, s->tile);
}

// One prompt's attention for layer l: q (T, H*Dh), k and v (T, KV*Dh) rows -> o (T, H*Dh) head
// outputs. Allowed keys: j <= i, and i - j < W on sliding layers. Scores for all heads are kept
// only if a tap wants them.
static void attention(const struct laguna *m, struct laguna_state *s, const struct tap *tp, int l,
                      int b, int T, const float *q, const float *k, const float *v, float *o) {
    const struct laguna_config *c = &m->cfg;
    int H = c->n_head[l], Dh = c->head_dim, KVD = c->n_kv_head * Dh;
    struct attn a = {.T = T,
                     .H = H,
                     .KV = c->n_kv_head,
                     .D = Dh,
                     .scale = 1.0f / sqrtf((float)Dh),
                     .n_sets = 1,
                     .q = q,
                     .ldq = H * Dh,
                     .out = o,
                     .ldo = H * Dh,
                     .att_floats = s->n_att};
    a.set[0] = (struct attn_keys){k, v, KVD, c->sliding[l] ? ATTN_SLIDING : ATTN_CAUSAL,
                                  c->sliding_window};
    // attention_scores are the masked scores entering the softmax (tests/ref/laguna-nnterp.txt)
    struct attn_taps at = {tp, b, -1, CAT_ID(m, l, CAT_SCORES), CAT_ID(m, l, CAT_PROBABILITIES)};
    AH_ASSERT(!attn_taps_wanted(&at) || s->keep_scores);
    attn_forward(&a, &at, s->att);
}

// expert e's SwiGLU on its n rows (moe.h): one thread each, on that thread's panel
static void expert_ffn(const void *u, int64_t e, int64_t n, const float *xe, float *ge, float *ue,
                       float *ye, float *panel) {
    const struct laguna_expert_call *c = u;
    int64_t D = c->D, Ie = c->Ie;
    op_matmul_bf16(ge, xe, c->w->eg[e], (int)n, (int)D, (int)Ie, panel);
    op_matmul_bf16(ue, xe, c->w->eu[e], (int)n, (int)D, (int)Ie, panel);
    op_swiglu(ue, ge, ue, n * Ie);
    op_matmul_bf16(ye, ue, c->w->ed[e], (int)n, (int)Ie, (int)D, panel);
}

// The mixture of experts of layer l on the normed stream xn; leaves the MLP output in s->m.
static void moe(const struct laguna *m, struct laguna_state *s, const struct mbatch *bt,
                const struct tap *tp, int l) {
    const struct laguna_config *c = &m->cfg;
    const struct laguna_block_w *w = &m->blk[l];
    int64_t N = bt->n_tokens, D = c->hidden, E = c->n_expert, k = c->top_k, Ie = c->expert_ffn;
    int64_t Is = c->shared_ffn;

    // shared expert, on every token
    mm(s, s->f_gate, s->xn, w->sg, N, D, Is);
    mm(s, s->f_up, s->xn, w->su, N, D, Is);
    op_swiglu(s->f_up, s->f_gate, s->f_up, N * Is);
    mm(s, s->m, s->f_up, w->sd, N, Is, D);
    tap_emit_rows(tp, CAT_ID(m, l, CAT_SHARED_EXPERT_OUTPUT), bt, s->m, (int)D);

    // router: logits, then top-k of sigmoid + bias and the renormalised unbiased weights
    mm(s, s->z, s->xn, w->router, N, D, E);
    tap_emit_rows(tp, CAT_ID(m, l, CAT_ROUTER_LOGITS), bt, s->z, (int)E);
    // each token on one thread; the logits are capped in place (their tap is emitted)
    double cap = c->router_softcap;
#pragma omp parallel for num_threads(op_threads()) if (N * E >= OP_PAR_MIN) schedule(static)
    for (int64_t t = 0; t < N; t++) {
        float *zt = s->z + t * E;
        for (int64_t e = 0; cap > 0 && e < E; e++)
            zt[e] = (float)(tanh((double)zt[e] / cap) * cap);
        laguna_route(s->idx + t * k, s->w + t * k, zt, w->bias, (int)E, (int)k);
    }
    tap_emit_rows_i64(tp, CAT_ID(m, l, CAT_EXPERT_INDICES), bt, s->idx, (int)k);
    tap_emit_rows(tp, CAT_ID(m, l, CAT_EXPERT_WEIGHTS), bt, s->w, (int)k);

    // each expert on its tokens, over threads; the weighted outputs add up in expert order
    int id_o = CAT_ID(m, l, CAT_EXPERT_OUTPUTS);
    const struct expert_shard *sh = s->shard;
    bool keep = tap_wants(tp, id_o) || sh;
    AH_ASSERT(!keep || s->keep_experts);
    struct laguna_expert_call call = {w, D, Ie};
    struct moe_experts x = MOE_EXPERTS(s, N, k, D, Ie, E, s->xpanels, expert_ffn, &call);
    moe_forward(&x, sh, s->routed, keep ? s->eo : NULL);
    tap_emit_token_heads(tp, id_o, bt, s->eo, (int)k, (int)D); // (1, T, k, D) slots
    op_scale(s->routed, (float)c->routed_scaling, N * D);
    tap_emit_rows(tp, CAT_ID(m, l, CAT_ROUTED_OUTPUT), bt, s->routed, (int)D);
    op_add(s->m, s->routed, s->m, N * D);
}

// block l up to its value `reach` (cat_block_reach)
static void block_forward(const struct laguna *m, struct laguna_state *s, const struct mbatch *bt,
                          const struct tap *tp, int l, int reach) {
    const struct laguna_config *c = &m->cfg;
    const struct laguna_block_w *w = &m->blk[l];
    int64_t N = bt->n_tokens, D = c->hidden, Dh = c->head_dim, H = c->n_head[l], HD = H * Dh;
    int64_t KV = c->n_kv_head, KVD = KV * Dh, G = c->gate_per_element ? HD : H;
    float eps = (float)c->eps;

    tap_emit_rows(tp, CAT_ID(m, l, CAT_LAYER_INPUT), bt, s->x, (int)D);
    if (reach < CAT_ATTENTION_NORM_OUTPUT) return;
    op_rmsnorm(s->xn, s->x, w->attn_norm, (int)N, (int)D, eps);
    tap_emit_rows(tp, CAT_ID(m, l, CAT_ATTENTION_NORM_OUTPUT), bt, s->xn, (int)D);

    // projections; q and k normed per head, then RoPE of the layer's type on each prompt
    mm(s, s->q, s->xn, w->wq, N, D, HD);
    mm(s, s->k, s->xn, w->wk, N, D, KVD);
    mm(s, s->v, s->xn, w->wv, N, D, KVD);
    op_rmsnorm(s->q, s->q, w->q_norm, (int)(N * H), (int)Dh, eps);
    op_rmsnorm(s->k, s->k, w->k_norm, (int)(N * KV), (int)Dh, eps);
    bool sl = c->sliding[l];
    for (int b = 0; b < bt->n; b++) {
        const float *ct = sl ? s->cos_s : s->cos_f, *st = sl ? s->sin_s : s->sin_f;
        int rot = sl ? s->rot_s : s->rot_f;
        op_rope(s->q + bt->off[b] * HD, ct, st, bt->len[b], (int)H, (int)Dh, rot, (int)HD);
        op_rope(s->k + bt->off[b] * KVD, ct, st, bt->len[b], (int)KV, (int)Dh, rot, (int)KVD);
    }
    tap_emit_heads(tp, CAT_ID(m, l, CAT_QUERIES), bt, s->q, (int)H, (int)Dh, s->scratch);
    tap_emit_heads(tp, CAT_ID(m, l, CAT_KEYS), bt, s->k, (int)KV, (int)Dh, s->scratch);
    tap_emit_heads(tp, CAT_ID(m, l, CAT_VALUES), bt, s->v, (int)KV, (int)Dh, s->scratch);

    for (int b = 0; b < bt->n; b++)
        attention(m, s, tp, l, b, bt->len[b], s->q + bt->off[b] * HD, s->k + bt->off[b] * KVD,
                  s->v + bt->off[b] * KVD, s->o + bt->off[b] * HD);
    tap_emit_token_heads(tp, CAT_ID(m, l, CAT_HEAD_OUTPUTS), bt, s->o, (int)H, (int)Dh);

    // the softplus gate, one a head or one a channel, then the output projection
    mm(s, s->g, s->xn, w->wg, N, D, G);
    op_act(s->g, N * G, OP_ACT_SOFTPLUS);
    op_mul(s->o, s->g, N * HD, G == HD ? 1 : Dh);
    tap_emit_token_heads(tp, CAT_ID(m, l, CAT_ATTENTION_PREMIX), bt, s->o, (int)H, (int)Dh);
    mm(s, s->a, s->o, w->wo, N, HD, D);
    tap_emit_rows(tp, CAT_ID(m, l, CAT_ATTENTION_OUTPUT), bt, s->a, (int)D);
    op_add(s->x, s->x, s->a, N * D);
    tap_emit_rows(tp, CAT_ID(m, l, CAT_LAYER_MID), bt, s->x, (int)D);
    if (reach < CAT_MLP_NORM_OUTPUT) return;

    op_rmsnorm(s->xn, s->x, w->mlp_norm, (int)N, (int)D, eps);
    tap_emit_rows(tp, CAT_ID(m, l, CAT_MLP_NORM_OUTPUT), bt, s->xn, (int)D);
    tap_emit_rows(tp, CAT_ID(m, l, CAT_MLP_INPUT), bt, s->xn, (int)D);
    if (c->dense[l]) { // SwiGLU
        int64_t Id = c->dense_ffn;
        mm(s, s->f_gate, s->xn, w->gate, N, D, Id);
        mm(s, s->f_up, s->xn, w->up, N, D, Id);
        if (!tap_wants(tp, CAT_ID(m, l, CAT_MLP_ACTIVATION))) {
            op_act_mul(s->f_up, s->f_gate, N * Id, OP_ACT_SILU); // the bits of the two below
        } else {
            op_act(s->f_gate, N * Id, OP_ACT_SILU);
            tap_emit_rows(tp, CAT_ID(m, l, CAT_MLP_ACTIVATION), bt, s->f_gate, (int)Id);
            op_mul(s->f_up, s->f_gate, N * Id, 1);
        }
        tap_emit_rows(tp, CAT_ID(m, l, CAT_MLP_NEURONS), bt, s->f_up, (int)Id);
        mm(s, s->m, s->f_up, w->down, N, Id, D);
    } else {
        moe(m, s, bt, tp, l);
    }
    tap_emit_rows(tp, CAT_ID(m, l, CAT_MLP_OUTPUT), bt, s->m, (int)D);
    op_add(s->x, s->x, s->m, N * D);
    tap_emit_rows(tp, CAT_ID(m, l, CAT_LAYER_OUTPUT), bt, s->x, (int)D);
}

void laguna_forward(const struct laguna *m, struct laguna_state *s, const struct mbatch *bt,
                    const struct tap *tp, int blk_begin, int blk_end) {
    const struct laguna_config *c = &m->cfg;
    int L = c->n_layer;
    int64_t D = c->hidden, V = c->vocab;
    forward_check(bt, s->max_tokens, s->max_T, blk_begin, blk_end, L);

    if (blk_begin == 0) {
        int id_ids = CAT_ID(m, -1, CAT_INPUT_IDS), id_mask = CAT_ID(m, -1, CAT_ATTENTION_MASK);
        emit_ids_mask(tp, bt, s->ones, id_ids, id_mask);
#pragma omp parallel for num_threads(op_threads()) if (bt->n_tokens * D >= OP_PAR_MIN) \
    schedule(static)
        for (int64_t i = 0; i < bt->n_tokens; i++)
            for (int64_t d = 0; d < D; d++)
                s->x[i * D + d] = op_bf16(m->embed[bt->ids[i] * D + d]);
        tap_emit_rows(tp, CAT_ID(m, -1, CAT_TOKEN_EMBEDDINGS), bt, s->x, (int)D);
    }
    for (int l = blk_begin; l < blk_end; l++)
        block_forward(m, s, bt, tp, l, cat_block_reach(m->id, L, l, blk_end, tp));
    if (blk_end < L || blk_begin > blk_end) return;

    // final norm and the untied head, only if asked for
    int id_n = CAT_ID(m, L, CAT_FINAL_NORM_OUTPUT), id_h = CAT_ID(m, L, CAT_LM_HEAD_OUTPUT);
    int id_l = CAT_ID(m, L, CAT_LOGITS), id_p = CAT_ID(m, L, CAT_NEXT_TOKEN_PROBS);
    bool head = tap_wants(tp, id_h) || tap_wants(tp, id_l) || tap_wants(tp, id_p);
    if (!head && !tap_wants(tp, id_n)) return;
    op_rmsnorm(s->xn, s->x, m->norm, (int)bt->n_tokens, (int)D, (float)c->eps);
    tap_emit_rows(tp, id_n, bt, s->xn, (int)D);
    for (int b = 0; head && b < bt->n; b++) {
        int T = bt->len[b];
        mm(s, s->logits, s->xn + bt->off[b] * D, m->lm_head, T, D, V); // (T, V)
        head_emit(tp, b, s->logits, T, V, id_h, id_l, id_p,
                  0.0f); // no softcap: logits == lm_head_output
    }
}

double laguna_block_flops(const struct laguna_config *c, int i, int T) {
    if (i >= c->n_layer) return 2.0 * T * c->hidden * (double)c->vocab;
    double att = 2.0 * 2.0 * c->n_head[i] * c->head_dim * (double)T * T; // scores, P v
    return T * laguna_layer_flops(c, i) + att;
}
