// decoder_forward.c - the forward pass of the Llama-style families (model/decoder.h) in float32,
// step for step as tests/ref/hf/decoder.py forward() (transformers' LlamaDecoderLayer and its
// cousins): norm, q/k/v (+ bias), q/k norm, RoPE, attention (model/attention.h), o_proj; post
// norms; the MLP (gated) or the mixture of experts (softmax router, top-k). Which of these a
// block has is its description, struct dec_block (model/decoder.h): no family is named here.
#include "model/ah.h"
#include "model/attention.h"
#include "model/catalogue.h"
#include "model/decoder.h"
#include "model/mla.h"
#include "model/moe.h"
#include "model/ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

// N = tokens of a batch, T = longest prompt, H hd = HD, KV hd = KVD, h2 = hd / 2
struct dec_state {
    int max_T;
    int64_t max_tokens;
    bool keep_scores, keep_experts;
    float *x, *xn;            // (N, D) the residual stream; a normed copy
    float *q, *k, *v, *o;     // (N, HD) (N, KVD) x2 (N, HD)
    float *a, *m;             // (N, D) attention output; MLP output
    float *fg, *fu;           // (N, I) gate and up
    float *z, *w;             // (N, E) router logits, then probabilities; (N, k) expert weights
    float *eo, *routed;       // (N, k, D) weighted slot outputs (tap or shard); (N, D) their sum
    float *xe, *ge, *ue, *ye; // a run of experts' tokens: (N, D) (N, Ie) x2 (N, D)
    float *xpanels;           // n_xpanels BF16 panels, one per thread running experts (moe.h)
    int n_xpanels;
    float *att;     // scores: (H, T, T) when a tap wants them, else (T, T) a thread
    int64_t n_att;  // its floats
    float *logits;  // (T, V) a prompt's logits, then (V) the next-token distribution
    float *scratch; // (HD T) head-major copy for the head taps
    float *panel;   // widened rows of a BF16 matrix (op_matmul_bf16), if any is BF16
    float *cos_f, *sin_f, *cos_s, *sin_s, *cos_d, *sin_d; // (T, h2): full, sliding, dynamic
    double *inv;                                          // (h2)
    int64_t *idx, *ones; // (N, k) chosen experts; (T) the attention mask
    int *order, *start;  // (N k) slots grouped by expert; (2 E + 1) offsets and cursors
    float *sink_p;       // sinks: (H, T) a prompt's sink shares
    float *sgate, *sup,
        *sneu; // clamped experts: (N, k, Ie) each slot's gate, up, neurons if wanted
    const struct expert_shard *shard;
    void *arena;
    // DeepSeek-V3: MLA's buffers (model/mla.h); the sigmoid router's scores, choice scores (N, E)
    // and group scores (N, n_group); the shared experts' gate and up (N, Is) and output (N, D)
    float *mla_base;
    struct mla_buf mla;
    float *sc, *ch, *gsc;
    float *sg, *su, *sh;
};

float *dec_state_stream(struct dec_state *s) {
    return s->x;
}

// cos / sin (T, hd/2) of a layer type for positions 0..T-1, angles in double; seq_len: the
// prompt length dynamic NTK scales for (within max_position_embeddings: none)
// (longrope: times its attention factor, as transformers scales cos and sin; the first n_rot
// dims of a head, h2 = n_rot / 2)
static void rope_table(float *cos_t, float *sin_t, const struct dec_config *c,
                       const struct dec_rope *r, int T, int seq_len, double *inv) {
    int n_rot = c->blk.n_rot ? c->blk.n_rot : c->head_dim, h2 = n_rot / 2;
    dec_rope_inv_freq(r, n_rot, c->max_pos, seq_len, inv);
    // longrope's and YaRN's attention factor (x * 1.0 is x: the others unchanged)
    bool scaled = r->type == DEC_ROPE_LONGROPE || r->type == DEC_ROPE_YARN;
    double A = scaled ? r->attn_factor : 1.0;
    for (int t = 0; t < T; t++)
        for (int j = 0; j < h2; j++) {
            cos_t[(int64_t)t * h2 + j] = (float)(cos(t * inv[j]) * A);
            sin_t[(int64_t)t * h2 + j] = (float)(sin(t * inv[j]) * A);
        }
}

// the panel of the largest matrix: K up to max(D, HD, I, Ie), N up to max(V, D, HD, I, Ie, E)
static int64_t panel_floats(const struct dec_config *c) {
    int64_t k = c->hidden, n = c->vocab;
    const int64_t dims[] = {(int64_t)c->n_head * c->head_dim, c->ffn, c->expert_ffn, c->hidden};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
        k = dims[i] > k ? dims[i] : k;
        n = dims[i] > n ? dims[i] : n;
    }
    n = c->n_expert > n ? c->n_expert : n;
    mla_panel_dims(c, &k, &n);
    int64_t Is = (int64_t)c->route.n_shared * c->expert_ffn; // DeepSeek-V3's shared experts
    k = Is > k ? Is : k;
    n = Is > n ? Is : n;
    return op_bf16_panel_floats((int)k, (int)n); // >= mxfp4_panel_floats of the same sizes
}

// whether a tap may want a clamped expert's per-slot value `kind` of some block
static bool slots_kept(const struct decoder *m, const uint8_t *want, enum cat_kind kind) {
    return m->cfg.blk.swiglu_clamp && cat_wants_kind(m->id, m->cfg.n_layer, want, kind);
}

int dec_state_init(struct dec_state **out, const struct decoder *m, int max_T, int64_t max_tokens,
                   const uint8_t *want, const struct expert_shard *shard) {
    const struct dec_config *c = &m->cfg;
    struct dec_state *s = calloc(1, sizeof *s);
    if (!(*out = s)) return -AH_ENOMEM;
    int64_t N = max_tokens, T = max_T, D = c->hidden, hd = c->head_dim, HD = c->n_head * hd;
    int64_t KVD = c->n_kv_head * hd, E = c->n_expert, k = c->top_k, I = c->ffn;
    int64_t Ie = c->expert_ffn, h2 = hd / 2;
    s->keep_scores = cat_wants_kind(m->id, c->n_layer, want, CAT_SCORES) ||
                     cat_wants_kind(m->id, c->n_layer, want, CAT_PROBABILITIES);
    s->keep_experts =
        E > 0 && (shard || cat_wants_kind(m->id, c->n_layer, want, CAT_EXPERT_OUTPUTS));
    s->shard = shard;
    s->n_xpanels = E > 0 ? op_threads() : 0;
    struct arena_piece f[] = {
        ARENA_ATTN(s, N, D, HD, KVD),
        {(void **)&s->a, N * D},
        {(void **)&s->m, N * D},
        {(void **)&s->fg, N * I},
        {(void **)&s->fu, N * I},
        ARENA_MOE(s, N, E, k, D, Ie, s->keep_experts),
        {(void **)&s->att, s->n_att = attn_scores_floats(c->n_head, (int)T, 1, s->keep_scores)},
        {(void **)&s->logits, T * c->vocab + c->vocab},
        {(void **)&s->scratch, HD * T},
        {(void **)&s->panel, m->any_bf16 || m->any_fp8 || m->any_mxfp4 ? panel_floats(c) : 0},
        {(void **)&s->xpanels, E > 0 && (m->any_bf16 || m->any_fp8 || m->any_mxfp4)
                                   ? s->n_xpanels * moe_panel_floats(D, Ie)
                                   : 0},
        {(void **)&s->cos_f, T * h2},
        {(void **)&s->sin_f, T * h2},
        {(void **)&s->cos_s, T * h2},
        {(void **)&s->sin_s, T * h2},
        {(void **)&s->cos_d, T * h2},
        {(void **)&s->sin_d, T * h2},
        {(void **)&s->inv, 2 * h2},
        {(void **)&s->idx, 2 * N * k},
        {(void **)&s->ones, 2 * T},
        {(void **)&s->order, N * k},
        {(void **)&s->start, 2 * E + 1},
        {(void **)&s->mla_base, mla_floats(c, N, T)},
        {(void **)&s->sc, c->route.sigmoid_group ? N * E : 0},
        {(void **)&s->ch, c->route.sigmoid_group ? N * E : 0},
        {(void **)&s->gsc, c->route.sigmoid_group ? N * c->route.n_group : 0},
        {(void **)&s->sg, N * c->route.n_shared * Ie},
        {(void **)&s->su, N * c->route.n_shared * Ie},
        {(void **)&s->sh, c->route.n_shared > 0 ? N * D : 0},
        {(void **)&s->sink_p, c->blk.sinks ? c->n_head * T : 0},
        {(void **)&s->sgate, slots_kept(m, want, CAT_EXPERT_GATE) ? N * k * Ie : 0},
        {(void **)&s->sup, slots_kept(m, want, CAT_EXPERT_UP) ? N * k * Ie : 0},
        {(void **)&s->sneu, slots_kept(m, want, CAT_EXPERT_NEURONS) ? N * k * Ie : 0},
    };
    if (!(s->arena = arena_alloc_ones(f, sizeof f / sizeof f[0], &s->ones, T))) return -AH_ENOMEM;
    if (c->mla.on) mla_carve(&s->mla, s->mla_base, c, N, T);
    rope_table(s->cos_f, s->sin_f, c, &c->rope_full, max_T, 1, s->inv);
    rope_table(s->cos_s, s->sin_s, c, &c->rope_sliding, max_T, 1, s->inv);
    s->max_T = max_T;
    s->max_tokens = max_tokens;
    return 0;
}

void dec_state_free(struct dec_state *s) {
    if (s) free(s->arena);
    free(s);
}

// ----------------------------------------------------------------------------
// pieces

// RMSNorm of rows of C: LlamaRMSNorm (times w), Gemma's (times 1 + w); out may equal in
static void norm(const struct dec_config *c, float *out, const float *in, const float *w,
                 int64_t rows, int C) {
    if (c->blk.norm == DEC_NORM_RMS_1P)
        op_rmsnorm_1p(out, in, w, (int)rows, C, c->eps);
    else
        op_rmsnorm(out, in, w, (int)rows, C, (float)c->eps);
}

static void mm(struct dec_state *s, float *out, const float *in, const struct dec_mat *w, int64_t M,
               int64_t K, int64_t N) {
    dec_matmul(out, in, w, M, K, N, s->panel);
}

// out (M, N) = in (M, K) . w^T (+ bias)
static void linear(struct dec_state *s, float *out, const float *in, const struct dec_mat *w,
                   const float *bias, int64_t M, int64_t K, int64_t N) {
    mm(s, out, in, w, M, K, N);
    if (bias) op_add_bias(out, bias, M, N);
}

// the RoPE tables of layer l for a prompt of T tokens (dynamic NTK past max_pos: its own)
static void tables(const struct decoder *m, struct dec_state *s, int l, int T, const float **ct,
                   const float **st) {
    const struct dec_config *c = &m->cfg;
    const struct dec_rope *r = c->sliding[l] ? &c->rope_sliding : &c->rope_full;
    *ct = c->sliding[l] ? s->cos_s : s->cos_f;
    *st = c->sliding[l] ? s->sin_s : s->sin_f;
    if (r->type == DEC_ROPE_LONGROPE && T > r->original_max_pos) { // long_factor: its own
        rope_table(s->cos_d, s->sin_d, c, r, T, T, s->inv);
        *ct = s->cos_d, *st = s->sin_d;
        return;
    }
    if (r->type != DEC_ROPE_DYNAMIC || T <= c->max_pos) return;
    rope_table(s->cos_d, s->sin_d, c, r, T, T, s->inv);
    *ct = s->cos_d, *st = s->sin_d;
}

// ----------------------------------------------------------------------------
// attention

// rows [r0, r0 + n) of a fused (., K) matrix are a matrix themselves: a view, no copy
// (FP8: r0 is a whole number of scale blocks, model/decoder_family.c checks it)
static struct dec_mat rows_of(const struct dec_mat *w, int64_t r0, int64_t K) {
    struct dec_mat v = *w;
    v.f = w->f ? w->f + r0 * K : NULL;
    v.h = w->h ? w->h + r0 * K : NULL;
    v.q8 = w->q8 ? w->q8 + r0 * K : NULL;
    v.s8 = w->s8 ? w->s8 + r0 / w->bn * ((K + w->bk - 1) / w->bk) : NULL;
    return v;
}

// the q, k, v matrices of a block: its own, or the row blocks of its fused qkv
static void qkv_mats(const struct dec_config *c, const struct dec_block_w *w, struct dec_mat *q,
                     struct dec_mat *k, struct dec_mat *v) {
    int64_t D = c->hidden, HD = (int64_t)c->n_head * c->head_dim;
    int64_t KVD = (int64_t)c->n_kv_head * c->head_dim;
    *q = c->blk.fused_qkv ? rows_of(&w->qkv, 0, D) : w->wq;
    *k = c->blk.fused_qkv ? rows_of(&w->qkv, HD, D) : w->wk;
    *v = c->blk.fused_qkv ? rows_of(&w->qkv, HD + KVD, D) : w->wv;
}

// OLMoE's clip_qkv: q, k (after their norms) and v clamped to [-c, c] in place, (N, HD) and
// (N, KVD) rows, as modeling_olmoe.py's clamp_ (a NaN stays NaN, as torch.clamp keeps it)
static void clip_qkv(struct dec_state *s, float c, int64_t N, int64_t HD, int64_t KVD) {
    float *const t[3] = {s->q, s->k, s->v};
    const int64_t n[3] = {N * HD, N * KVD, N * KVD};
    for (int j = 0; j < 3; j++)
        for (int64_t i = 0; i < n[j]; i++)
            t[j][i] = t[j][i] > c ? c : t[j][i] < -c ? -c : t[j][i];
}

// gpt-oss's sinks: the block's logits, and where the sink shares go if a tap wants them
static void sink_options(const struct decoder *m, struct dec_state *s, const struct tap *tp, int l,
                         struct attn *a) {
    if (!m->cfg.blk.sinks) return;
    a->sinks = m->blk[l].sinks;
    a->sink_p = tap_wants(tp, CAT_ID(m, l, CAT_SINK_PROBABILITIES)) ? s->sink_p : NULL;
}

// the sink logits (1, H) and prompt b's sink shares (1, H, T)
static void sink_emit(const struct decoder *m, struct dec_state *s, const struct tap *tp, int l,
                      int b, int T) {
    if (!m->cfg.blk.sinks) return;
    int H = m->cfg.n_head;
    struct tview v = {m->blk[l].sinks, TAP_F32, 2, {1, H}};
    tap_emit(tp, CAT_ID(m, l, CAT_ATTENTION_SINKS), b, &v);
    struct tview p = {s->sink_p, TAP_F32, 3, {1, H, T}};
    tap_emit(tp, CAT_ID(m, l, CAT_SINK_PROBABILITIES), b, &p);
}

static void attention_block(const struct decoder *m, struct dec_state *s, const struct mbatch *bt,
                            const struct tap *tp, int l) {
    const struct dec_config *c = &m->cfg;
    const struct dec_block_w *w = &m->blk[l];
    int64_t N = bt->n_tokens, D = c->hidden, hd = c->head_dim, H = c->n_head, KV = c->n_kv_head;
    int64_t HD = H * hd, KVD = KV * hd, rot = c->blk.n_rot ? c->blk.n_rot : hd;
    if (c->mla.on) { // DeepSeek-V3 (model/mla.h): one RoPE table, no dynamic NTK
        mla_attention(m, l, bt, tp, &s->mla, s->xn, s->a, s->cos_f, s->sin_f, s->panel, s->att,
                      s->n_att);
        return;
    }
    struct dec_mat wq, wk, wv;
    qkv_mats(c, w, &wq, &wk, &wv);
    linear(s, s->q, s->xn, &wq, w->bq, N, D, HD);
    linear(s, s->k, s->xn, &wk, w->bk, N, D, KVD);
    linear(s, s->v, s->xn, &wv, w->bv, N, D, KVD);
    if (c->blk.qk_norm == DEC_QK_HEAD) { // (N H, hd) rows
        norm(c, s->q, s->q, w->q_norm, N * H, (int)hd);
        norm(c, s->k, s->k, w->k_norm, N * KV, (int)hd);
    } else if (c->blk.qk_norm == DEC_QK_PROJ) { // (N, HD) and (N, KVD) rows, before the heads
        norm(c, s->q, s->q, w->q_norm, N, (int)HD);
        norm(c, s->k, s->k, w->k_norm, N, (int)KVD);
    }
    if (c->blk.clip_qkv > 0.0f) clip_qkv(s, c->blk.clip_qkv, N, HD, KVD);
    tap_emit_heads(tp, CAT_ID(m, l, CAT_QUERIES_PRE_ROPE), bt, s->q, (int)H, (int)hd, s->scratch);
    tap_emit_heads(tp, CAT_ID(m, l, CAT_KEYS_PRE_ROPE), bt, s->k, (int)KV, (int)hd, s->scratch);
    for (int b = 0; b < bt->n; b++) {
        const float *ct, *st;
        tables(m, s, l, bt->len[b], &ct, &st);
        op_rope(s->q + bt->off[b] * HD, ct, st, bt->len[b], (int)H, (int)hd, (int)rot, (int)HD);
        op_rope(s->k + bt->off[b] * KVD, ct, st, bt->len[b], (int)KV, (int)hd, (int)rot, (int)KVD);
    }
    tap_emit_heads(tp, CAT_ID(m, l, CAT_QUERIES), bt, s->q, (int)H, (int)hd, s->scratch);
    tap_emit_heads(tp, CAT_ID(m, l, CAT_KEYS), bt, s->k, (int)KV, (int)hd, s->scratch);
    tap_emit_heads(tp, CAT_ID(m, l, CAT_VALUES), bt, s->v, (int)KV, (int)hd, s->scratch);
    for (int b = 0; b < bt->n; b++) {
        int64_t o = bt->off[b];
        struct attn a = {.T = bt->len[b],
                         .H = (int)H,
                         .KV = (int)KV,
                         .D = (int)hd,
                         .scale = c->blk.scale,
                         .softcap = c->blk.attn_cap,
                         .n_sets = 1,
                         .q = s->q + o * HD,
                         .ldq = (int)HD,
                         .out = s->o + o * HD,
                         .ldo = (int)HD,
                         .att_floats = s->n_att};
        sink_options(m, s, tp, l, &a);
        a.set[0] = (struct attn_keys){s->k + o * KVD, s->v + o * KVD, (int)KVD,
                                      c->sliding[l] ? ATTN_SLIDING : ATTN_CAUSAL, c->window};
        // attention_scores: soft-capped, -inf where masked (tests/ref/hf/NAMES.md)
        struct attn_taps at = {tp, b, -1, CAT_ID(m, l, CAT_SCORES),
                               CAT_ID(m, l, CAT_PROBABILITIES)};
        AH_ASSERT(!attn_taps_wanted(&at) || s->keep_scores);
        attn_forward(&a, &at, s->att);
        sink_emit(m, s, tp, l, b, a.T);
    }
    tap_emit_token_heads(tp, CAT_ID(m, l, CAT_HEAD_OUTPUTS), bt, s->o, (int)H, (int)hd);
    linear(s, s->a, s->o, &w->wo, w->bo, N, HD, D);
}

// ----------------------------------------------------------------------------
// mixture of experts (MixtralSparseMoeBlock, Qwen3MoeSparseMoeBlock)

// softmax over the experts (double sums), the k largest (ties: lower index), renormalised
static void route(const struct dec_config *c, float *p, int64_t *idx, float *w) {
    int E = c->n_expert, k = c->top_k;
    double mx = -INFINITY, sum = 0.0;
    for (int e = 0; e < E; e++)
        mx = (double)p[e] > mx ? (double)p[e] : mx;
    for (int e = 0; e < E; e++)
        sum += exp((double)p[e] - mx);
    for (int e = 0; e < E; e++)
        p[e] = (float)(exp((double)p[e] - mx) / sum);
    moe_topk(p, E, k, idx);
    for (int j = 0; j < k; j++)
        w[j] = p[idx[j]];
    float tot = 0.0f;
    for (int j = 0; c->blk.norm_topk && j < k; j++)
        tot += w[j];
    for (int j = 0; c->blk.norm_topk && j < k; j++)
        w[j] /= tot;
}

// DeepSeek-V3's router (model/moe.h moe_route_group), a token a thread: scores, choice scores,
// group scores, the experts and their weights
static void group_route(const struct decoder *m, struct dec_state *s, const struct mbatch *bt,
                        const struct tap *tp, int l) {
    const struct dec_config *c = &m->cfg;
    int64_t N = bt->n_tokens, E = c->n_expert, k = c->top_k, G = c->route.n_group;
    struct moe_group_route r = {
        (int)E,           (int)k,         (int)G,          c->route.topk_group,
        c->blk.norm_topk, c->route.scale, m->blk[l].e_bias};
#pragma omp parallel for num_threads(op_threads()) if (N * E >= OP_PAR_MIN) schedule(static)
    for (int64_t t = 0; t < N; t++)
        moe_route_group(&r, s->z + t * E, s->sc + t * E, s->ch + t * E, s->gsc + t * G,
                        s->idx + t * k, s->w + t * k);
    tap_emit_rows(tp, CAT_ID(m, l, CAT_ROUTER_SCORES), bt, s->sc, (int)E);
    tap_emit_rows(tp, CAT_ID(m, l, CAT_ROUTER_CHOICE_SCORES), bt, s->ch, (int)E);
    tap_emit_rows(tp, CAT_ID(m, l, CAT_ROUTER_GROUP_SCORES), bt, s->gsc, (int)G);
}

// DeepSeek-V3's shared experts: one gated MLP (n_shared x expert_ffn wide) on every token, added
// to the routed sum (DeepseekV3MoE.forward)
static void shared_experts(const struct decoder *m, struct dec_state *s, const struct mbatch *bt,
                           const struct tap *tp, int l) {
    const struct dec_config *c = &m->cfg;
    const struct dec_block_w *w = &m->blk[l];
    int64_t N = bt->n_tokens, D = c->hidden, Is = (int64_t)c->route.n_shared * c->expert_ffn;
    mm(s, s->sg, s->xn, &w->sg, N, D, Is);
    mm(s, s->su, s->xn, &w->su, N, D, Is);
    op_act_mul(s->su, s->sg, N * Is, c->blk.act);
    mm(s, s->sh, s->su, &w->sd, N, Is, D);
    tap_emit_rows(tp, CAT_ID(m, l, CAT_SHARED_EXPERT_OUTPUT), bt, s->sh, (int)D);
    op_add(s->m, s->m, s->sh, N * D);
}

// gpt-oss (GptOssTopKRouter): the k largest logits (ties: lower index), a softmax over them
// (double sums); the logits stay as they are
static void route_topk_softmax(const struct dec_config *c, const float *z, int64_t *idx, float *w) {
    int E = c->n_expert, k = c->top_k;
    moe_topk(z, E, k, idx);
    double mx = z[idx[0]], sum = 0.0; // the largest comes first
    for (int j = 0; j < k; j++)
        sum += exp((double)z[idx[j]] - mx);
    for (int j = 0; j < k; j++)
        w[j] = (float)(exp((double)z[idx[j]] - mx) / sum);
}

struct dec_expert_call {
    const struct decoder *m;
    const struct dec_block_w *w;
    const int *order, *start;  // the slots grouped by expert (moe.h)
    float *sgate, *sup, *sneu; // (N, k, Ie) each slot's gate, up, neurons, or NULL: not wanted
};

// rows [0, n) of expert e's buffer v (n, Ie) into their slots' rows of out (N k, Ie)
static void to_slots(const struct dec_expert_call *x, float *out, int64_t e, int64_t n,
                     const float *v, int64_t Ie) {
    for (int64_t r = 0; out && r < n; r++)
        memcpy(out + (int64_t)x->order[x->start[e] + r] * Ie, v + r * Ie,
               (size_t)Ie * sizeof(float));
}

// expert e's gated MLP on its n rows (moe.h): one thread each, on that thread's panel
static void expert_ffn(const void *u, int64_t e, int64_t n, const float *xe, float *ge, float *ue,
                       float *ye, float *panel) {
    const struct dec_expert_call *x = u;
    const struct dec_config *c = &x->m->cfg;
    int64_t D = c->hidden, Ie = c->expert_ffn;
    dec_matmul(ge, xe, &x->w->eg[e], n, D, Ie, panel);
    dec_matmul(ue, xe, &x->w->eu[e], n, D, Ie, panel);
    op_act_mul(ue, ge, n * Ie, c->blk.act);
    dec_matmul(ye, ue, &x->w->ed[e], n, Ie, D, panel);
}

// gpt-oss's expert e (GptOssExperts): gate and up rows interleaved in gate_up_proj (each a
// matrix view of every other row) plus their interleaved biases, the clamped SwiGLU, the down
// projection plus its bias
static void expert_ffn_clamped(const void *u, int64_t e, int64_t n, const float *xe, float *ge,
                               float *ue, float *ye, float *panel) {
    const struct dec_expert_call *x = u;
    const struct dec_config *c = &x->m->cfg;
    const struct dec_block_w *w = x->w;
    int64_t D = c->hidden, Ie = c->expert_ffn, G = D / 32, Gi = Ie / 32;
    // expert e's rows of gate_up_proj: gate the even ones, up the odd ones
    const uint8_t *gb = w->gu_q4.blocks + e * 2 * Ie * G * 16,
                  *gs = w->gu_q4.scales + e * 2 * Ie * G;
    struct dec_mat gate = {.q4 = {gb, gs, 2}}, up = {.q4 = {gb + G * 16, gs + G, 2}};
    struct dec_mat down = {
        .q4 = {w->down_q4.blocks + e * D * Gi * 16, w->down_q4.scales + e * D * Gi, 1}};
    dec_matmul(ge, xe, &gate, n, D, Ie, panel);
    dec_matmul(ue, xe, &up, n, D, Ie, panel);
    if (c->blk.expert_bias) {
        const float *b = w->bgu + e * 2 * Ie; // (2 Ie): gate at even, up at odd columns
        for (int64_t r = 0; r < n; r++)
            for (int64_t j = 0; j < Ie; j++) {
                ge[r * Ie + j] += b[2 * j];
                ue[r * Ie + j] += b[2 * j + 1];
            }
    }
    to_slots(x, x->sgate, e, n, ge, Ie);
    to_slots(x, x->sup, e, n, ue, Ie);
    op_swiglu_clamp(ue, ge, n * Ie, c->blk.swiglu_alpha, c->blk.swiglu_limit);
    to_slots(x, x->sneu, e, n, ue, Ie);
    dec_matmul(ye, ue, &down, n, Ie, D, panel);
    if (c->blk.expert_bias) op_add_bias(ye, w->bed + e * D, n, D);
}

// the per-slot buffers of the clamped experts' values a tap wants
static void slot_buffers(const struct decoder *m, struct dec_state *s, const struct tap *tp, int l,
                         struct dec_expert_call *call) {
    if (!m->cfg.blk.swiglu_clamp) return;
    call->sgate = tap_wants(tp, CAT_ID(m, l, CAT_EXPERT_GATE)) ? s->sgate : NULL;
    call->sup = tap_wants(tp, CAT_ID(m, l, CAT_EXPERT_UP)) ? s->sup : NULL;
    call->sneu = tap_wants(tp, CAT_ID(m, l, CAT_EXPERT_NEURONS)) ? s->sneu : NULL;
    AH_ASSERT((!call->sgate || s->sgate) && (!call->sup || s->sup) && (!call->sneu || s->sneu));
}

// With expert shards, the slots of the other shards' experts: this rank runs those experts
// itself, tap-only work on a rank whose taps want the values (no collective: the other ranks may
// want nothing), in the calls moe_run makes (an expert's rows in slot order, one thread's panel,
// OpenBLAS on one thread when moe_run would run it so), so the bits are one rank's. It reads
// those experts' mapped weights, which a shard otherwise never touches.
static void remote_slots(const struct decoder *m, struct dec_state *s,
                         const struct dec_expert_call *call) {
    const struct dec_config *c = &m->cfg;
    int64_t D = c->hidden, k = c->top_k;
    int nt = op_threads() < s->n_xpanels ? op_threads() : s->n_xpanels;
    int blas = op_blas_serial(nt);
    for (int64_t e = 0; e < c->n_expert; e++) {
        int64_t r0 = s->start[e], n = s->start[e + 1] - r0;
        if (n == 0 || (e >= s->shard->e0 && e < s->shard->e1)) continue;
        for (int64_t r = 0; r < n; r++)
            memcpy(s->xe + r * D, s->xn + (s->order[r0 + r] / k) * D, (size_t)D * sizeof(float));
        expert_ffn_clamped(call, e, n, s->xe, s->ge, s->ue, s->ye, s->xpanels);
    }
    op_blas_restore(nt, blas);
}

// the slots' gate, up and neurons (1, T, k, Ie)
static void slot_emit(const struct decoder *m, struct dec_state *s, const struct mbatch *bt,
                      const struct tap *tp, int l, const struct dec_expert_call *call) {
    const struct dec_config *c = &m->cfg;
    float *buf[3] = {call->sgate, call->sup, call->sneu};
    const enum cat_kind kind[3] = {CAT_EXPERT_GATE, CAT_EXPERT_UP, CAT_EXPERT_NEURONS};
    if (s->shard && (buf[0] || buf[1] || buf[2])) remote_slots(m, s, call);
    for (int i = 0; i < 3; i++)
        tap_emit_token_heads(tp, CAT_ID(m, l, kind[i]), bt, buf[i], c->top_k, c->expert_ffn);
}

static void moe_block(const struct decoder *m, struct dec_state *s, const struct mbatch *bt,
                      const struct tap *tp, int l) {
    const struct dec_config *c = &m->cfg;
    const struct dec_block_w *w = &m->blk[l];
    int64_t N = bt->n_tokens, D = c->hidden, E = c->n_expert, k = c->top_k;
    linear(s, s->z, s->xn, &w->router, c->blk.router_bias ? w->brouter : NULL, N, D, E);
    tap_emit_rows(tp, CAT_ID(m, l, CAT_ROUTER_LOGITS), bt, s->z, (int)E);
    if (c->route.sigmoid_group) {
        group_route(m, s, bt, tp, l);
    } else {
#pragma omp parallel for num_threads(op_threads()) if (N * E >= OP_PAR_MIN) schedule(static)
        for (int64_t t = 0; t < N; t++)
            if (c->blk.topk_softmax)
                route_topk_softmax(c, s->z + t * E, s->idx + t * k, s->w + t * k);
            else
                route(c, s->z + t * E, s->idx + t * k, s->w + t * k);
    }
    int id_i = CAT_ID(m, l, CAT_EXPERT_INDICES), id_o = CAT_ID(m, l, CAT_EXPERT_OUTPUTS);
    tap_emit_rows_i64(tp, id_i, bt, s->idx, (int)k);
    tap_emit_rows(tp, CAT_ID(m, l, CAT_EXPERT_WEIGHTS), bt, s->w, (int)k);
    bool keep = tap_wants(tp, id_o) || s->shard;
    AH_ASSERT(!keep || s->keep_experts);
    struct dec_expert_call call = {m, w, s->order, s->start, NULL, NULL, NULL};
    slot_buffers(m, s, tp, l, &call);
    struct moe_experts x = MOE_EXPERTS(
        s, N, k, D, c->expert_ffn, E, m->any_bf16 || m->any_fp8 || m->any_mxfp4 ? s->xpanels : NULL,
        c->blk.swiglu_clamp ? expert_ffn_clamped : expert_ffn, &call);
    moe_forward(&x, s->shard, s->routed, keep ? s->eo : NULL);
    slot_emit(m, s, bt, tp, l, &call);
    tap_emit_token_heads(tp, id_o, bt, s->eo, (int)k, (int)D); // (1, T, k, D) slots
    tap_emit_rows(tp, CAT_ID(m, l, CAT_ROUTED_OUTPUT), bt, s->routed, (int)D);
    memcpy(s->m, s->routed, (size_t)(N * D) * sizeof(float));
    if (c->route.n_shared > 0) shared_experts(m, s, bt, tp, l);
}

// ----------------------------------------------------------------------------
// the block and the model

static void mlp_block(const struct decoder *m, struct dec_state *s, const struct mbatch *bt,
                      const struct tap *tp, int l) {
    const struct dec_config *c = &m->cfg;
    const struct dec_block_w *w = &m->blk[l];
    int64_t N = bt->n_tokens, D = c->hidden, I = c->ffn;
    if (c->moe[l]) {
        moe_block(m, s, bt, tp, l);
        return;
    }
    struct dec_mat gate = c->blk.fused_gate_up ? rows_of(&w->gate_up, 0, D) : w->gate;
    struct dec_mat up = c->blk.fused_gate_up ? rows_of(&w->gate_up, I, D) : w->up;
    linear(s, s->fg, s->xn, &gate, w->bg, N, D, I);
    linear(s, s->fu, s->xn, &up, w->bu, N, D, I);
    if (!tap_wants(tp, CAT_ID(m, l, CAT_MLP_ACTIVATION))) {
        op_act_mul(s->fu, s->fg, N * I, c->blk.act); // one pass, the same bits as the two below
    } else {
        op_act(s->fg, N * I, c->blk.act);
        tap_emit_rows(tp, CAT_ID(m, l, CAT_MLP_ACTIVATION), bt, s->fg, (int)I);
        op_mul(s->fu, s->fg, N * I, 1);
    }
    tap_emit_rows(tp, CAT_ID(m, l, CAT_MLP_NEURONS), bt, s->fu, (int)I);
    linear(s, s->m, s->fu, &w->down, w->bd, N, I, D);
}

// block l up to its value `reach` (cat_block_reach)
static void block_forward(const struct decoder *m, struct dec_state *s, const struct mbatch *bt,
                          const struct tap *tp, int l, int reach) {
    const struct dec_config *c = &m->cfg;
    const struct dec_block_w *w = &m->blk[l];
    int64_t N = bt->n_tokens, D = c->hidden;
    bool pre = c->blk.norm_at & DEC_NORM_PRE, post = c->blk.norm_at & DEC_NORM_POST;
    size_t row_bytes = (size_t)(N * D) * sizeof(float);
    tap_emit_rows(tp, CAT_ID(m, l, CAT_LAYER_INPUT), bt, s->x, (int)D);
    if (reach < CAT_ATTENTION_NORM_OUTPUT) return;
    if (pre) {
        norm(c, s->xn, s->x, w->attn_norm, N, (int)D);
        tap_emit_rows(tp, CAT_ID(m, l, CAT_ATTENTION_NORM_OUTPUT), bt, s->xn, (int)D);
    } else { // no pre-norm (OLMo 2): the attention reads the stream itself
        memcpy(s->xn, s->x, row_bytes);
    }
    attention_block(m, s, bt, tp, l);
    tap_emit_rows(tp, CAT_ID(m, l, CAT_ATTENTION_OUTPUT), bt, s->a, (int)D);
    if (post) { // the post-attention norm before the add
        norm(c, s->a, s->a, w->post_attn_norm, N, (int)D);
        tap_emit_rows(tp, CAT_ID(m, l, CAT_ATTENTION_POST_NORM), bt, s->a, (int)D);
    }
    op_add(s->x, s->x, s->a, N * D);
    tap_emit_rows(tp, CAT_ID(m, l, CAT_LAYER_MID), bt, s->x, (int)D);
    if (reach < CAT_MLP_NORM_OUTPUT) return;
    if (pre) {
        norm(c, s->xn, s->x, w->mlp_norm, N, (int)D);
        tap_emit_rows(tp, CAT_ID(m, l, CAT_MLP_NORM_OUTPUT), bt, s->xn, (int)D);
    } else {
        memcpy(s->xn, s->x, row_bytes);
    }
    tap_emit_rows(tp, CAT_ID(m, l, CAT_MLP_INPUT), bt, s->xn, (int)D);
    mlp_block(m, s, bt, tp, l);
    tap_emit_rows(tp, CAT_ID(m, l, CAT_MLP_OUTPUT), bt, s->m, (int)D);
    if (post) {
        norm(c, s->m, s->m, w->post_mlp_norm, N, (int)D);
        tap_emit_rows(tp, CAT_ID(m, l, CAT_MLP_POST_NORM), bt, s->m, (int)D);
    }
    op_add(s->x, s->x, s->m, N * D);
    tap_emit_rows(tp, CAT_ID(m, l, CAT_LAYER_OUTPUT), bt, s->x, (int)D);
}

// input ids, the mask, the embedding rows (times embed_scale; the tap before or after it)
static void embed(const struct decoder *m, struct dec_state *s, const struct mbatch *bt,
                  const struct tap *tp) {
    const struct dec_config *c = &m->cfg;
    int64_t D = c->hidden;
    emit_ids_mask(tp, bt, s->ones, CAT_ID(m, -1, CAT_INPUT_IDS), CAT_ID(m, -1, CAT_ATTENTION_MASK));
#pragma omp parallel for num_threads(op_threads()) if (bt->n_tokens * D >= OP_PAR_MIN) \
    schedule(static)
    for (int64_t i = 0; i < bt->n_tokens; i++)
        for (int64_t d = 0; d < D; d++)
            s->x[i * D + d] = m->embed.h ? op_bf16(m->embed.h[bt->ids[i] * D + d])
                                         : m->embed.f[bt->ids[i] * D + d];
    int id = CAT_ID(m, -1, CAT_TOKEN_EMBEDDINGS);
    if (!c->blk.embed_tap_scaled) tap_emit_rows(tp, id, bt, s->x, (int)D);
    for (int64_t i = 0; c->blk.embed_scale != 1.0f && i < bt->n_tokens * D; i++)
        s->x[i] *= c->blk.embed_scale;
    if (c->blk.embed_tap_scaled) tap_emit_rows(tp, id, bt, s->x, (int)D);
}

// the final norm and the head, only if a tap wants them
static void head(const struct decoder *m, struct dec_state *s, const struct mbatch *bt,
                 const struct tap *tp) {
    const struct dec_config *c = &m->cfg;
    int64_t D = c->hidden, V = c->vocab;
    int L = c->n_layer, id_n = CAT_ID(m, L, CAT_FINAL_NORM_OUTPUT);
    int id_h = CAT_ID(m, L, CAT_LM_HEAD_OUTPUT), id_l = CAT_ID(m, L, CAT_LOGITS);
    int id_p = CAT_ID(m, L, CAT_NEXT_TOKEN_PROBS);
    bool want = tap_wants(tp, id_h) || tap_wants(tp, id_l) || tap_wants(tp, id_p);
    if (!want && !tap_wants(tp, id_n)) return;
    norm(c, s->xn, s->x, m->norm, bt->n_tokens, (int)D);
    tap_emit_rows(tp, id_n, bt, s->xn, (int)D);
    for (int b = 0; want && b < bt->n; b++) {
        int T = bt->len[b];
        mm(s, s->logits, s->xn + bt->off[b] * D, c->blk.tied ? &m->embed : &m->head, T, D, V);
        head_emit(tp, b, s->logits, T, V, id_h, id_l, id_p, c->blk.final_cap);
    }
}

void dec_forward(const struct decoder *m, struct dec_state *s, const struct mbatch *bt,
                 const struct tap *tp, int blk_begin, int blk_end) {
    int L = m->cfg.n_layer;
    forward_check(bt, s->max_tokens, s->max_T, blk_begin, blk_end, L);
    if (blk_begin == 0) embed(m, s, bt, tp);
    for (int l = blk_begin; l < blk_end; l++)
        block_forward(m, s, bt, tp, l, cat_block_reach(m->id, L, l, blk_end, tp));
    if (blk_end == L && blk_begin <= blk_end) head(m, s, bt, tp);
}
