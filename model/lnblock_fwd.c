// lnblock_fwd.c - the forward pass of model/lnblock.h, as modeling_gpt2.py and
// modeling_gpt_neox.py compute it (float64 references: tests/ref/hf/gpt2.py, neox.py), in float32:
//   x = wte[ids] (+ wpe[position])
//   per block: a = attn(LN1(x)); h = x + a; m = mlp(LN2(parallel ? x : h)); x = h + m
//   logits = LN_f(x) head^T
// Prompts of a batch are packed token after token; attention runs per prompt.
#include "model/ah.h"
#include "model/attention.h"
#include "model/catalogue.h"
#include "model/lnblock.h"
#include "model/ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct lnb_state {
    int max_T;
    int64_t max_tokens;
    bool keep_scores; // scores of every head of a prompt at once (a tap wants them)
    // N = max_tokens, T = max_T, F = the MLP width
    float *x, *h, *xn;    // (N, D) the stream; the stream after the attention add; a LayerNorm's
    float *qkv;           // (N, 3D) the fused projection
    float *q, *k, *v;     // (N, D) each: token-major heads, head j at column j hd
    float *o, *a, *m;     // (N, D) head outputs; attention output; MLP output
    float *f;             // (N, F) the MLP's activation
    float *att;           // attn_scores_floats(H, T, 1, keep_scores)
    int64_t n_att;        // its floats
    float *logits;        // (T, V) a prompt's logits, then (V) the next-token distribution
    float *scratch;       // (D T) a head-major copy for the head-split taps
    float *cos_t, *sin_t; // (T, n_rot / 2) RoPE tables (rotary families)
    int64_t *ones;        // (T) the attention mask
    void *arena;
};

// RoPE tables as GPTNeoXRotaryEmbedding forms them: inv_freq = 1 / base^(2j / n_rot) in float32,
// divided by a linear rope_scaling factor, angles (float)t * inv_freq
static void rope_tables(const struct lnb_config *c, struct lnb_state *s, int T) {
    int half = c->n_rot / 2;
    float *inv = s->sin_t; // row 0 of sin_t holds inv_freq until op_rope_table_f32 writes it last
    for (int j = 0; j < half; j++)
        inv[j] = 1.0f / powf((float)c->rope_theta, (float)(2 * j) / (float)c->n_rot) /
                 (float)c->rope_linear;
    op_rope_table_f32(s->cos_t, s->sin_t, T, c->n_rot, inv, 1.0f);
}

int lnb_state_init(void **fs, const void *fm, int max_T, int64_t max_tokens, const uint8_t *want,
                   const struct expert_shard *shard) {
    (void)shard; // no experts
    const struct lnb_model *m = fm;
    const struct lnb_config *c = &m->cfg;
    struct lnb_state *s = calloc(1, sizeof *s);
    if (!(*fs = s)) return -AH_ENOMEM;
    int64_t N = max_tokens, T = max_T, D = c->hidden, F = c->inner, V = c->vocab;
    s->keep_scores = cat_wants_kind(m->id, c->n_layer, want, CAT_SCORES) ||
                     cat_wants_kind(m->id, c->n_layer, want, CAT_PROBABILITIES);
    struct arena_piece f[] = {
        {(void **)&s->x, N * D},
        {(void **)&s->h, N * D},
        {(void **)&s->xn, N * D},
        {(void **)&s->qkv, 3 * N * D},
        {(void **)&s->q, N * D},
        {(void **)&s->k, N * D},
        {(void **)&s->v, N * D},
        {(void **)&s->o, N * D},
        {(void **)&s->a, N * D},
        {(void **)&s->m, N * D},
        {(void **)&s->f, N * F},
        {(void **)&s->att, s->n_att = attn_scores_floats(c->n_head, (int)T, 1, s->keep_scores)},
        {(void **)&s->logits, T * V + V},
        {(void **)&s->scratch, D * T},
        {(void **)&s->cos_t, T * (c->n_rot / 2)},
        {(void **)&s->sin_t, T * (c->n_rot / 2) + c->n_rot / 2},
        {(void **)&s->ones, 2 * T},
    };
    if (!(s->arena = arena_alloc_ones(f, sizeof f / sizeof f[0], &s->ones, T))) return -AH_ENOMEM;
    if (c->rotary && c->n_rot > 0) rope_tables(c, s, max_T);
    s->max_T = max_T;
    s->max_tokens = max_tokens;
    return 0;
}

void lnb_state_free(void *fs) {
    if (fs) free(((struct lnb_state *)fs)->arena);
    free(fs);
}

int lnb_handoff(void *fs, float **arrays) {
    arrays[0] = ((struct lnb_state *)fs)->x; // the residual stream
    return 1;
}

// ---- kernels

// out (M, N) = in (M, K) . W + b: W is Conv1D's (K, N) or Linear's (N, K), float32 (w) or, under
// compute bf16, borrowed BF16 (h, when not NULL); b (N) may be NULL
static void project(const struct lnb_config *c, float *out, const float *in, const float *w,
                    const uint16_t *h, const float *b, int64_t M, int K, int N) {
    if (M == 0) return;
    if (h && c->conv1d)
        op_matmul_bf16_kn(out, in, h, (int)M, K, N);
    else if (h)
        op_matmul_bf16(out, in, h, (int)M, K, N, NULL); // compute bf16: no panel
    else if (c->conv1d)
        op_matmul_kn(out, in, w, (int)M, K, N);
    else
        op_matmul(out, in, w, (int)M, K, N);
    if (b) op_add_bias(out, b, M, N);
}

// The fused projection's rows (N, 3D) into q, k, v (N, D) each. GPT-2's c_attn: columns
// [q | k | v] (modeling_gpt2.py: split(D, dim=2)); NeoX's query_key_value: per head
// [q_h k_h v_h] (modeling_gpt_neox.py: view(..., H, 3 hd).chunk(3)).
static void split_qkv(const struct lnb_config *c, struct lnb_state *s, int64_t N) {
    int64_t D = c->hidden, hd = c->head_dim;
    float *dst[3] = {s->q, s->k, s->v};
#pragma omp parallel for num_threads(op_threads()) if (N * 3 * D >= OP_PAR_MIN) schedule(static)
    for (int64_t t = 0; t < N; t++)
        for (int64_t h = 0; h < c->n_head; h++)
            for (int p = 0; p < 3; p++) {
                const float *src =
                    s->qkv + t * 3 * D + (c->conv1d ? p * D + h * hd : h * 3 * hd + p * hd);
                memcpy(dst[p] + t * D + h * hd, src, (size_t)hd * sizeof(float));
            }
}

// q, k, v of the block's input: the fused projection split into heads, RoPE on rotary families
static void qkv(const struct lnb_model *m, struct lnb_state *s, const struct mbatch *bt,
                const struct tap *tp, int l) {
    const struct lnb_config *c = &m->cfg;
    const float *const *w = m->w[l];
    int64_t N = bt->n_tokens, D = c->hidden;
    int H = c->n_head, hd = c->head_dim;
    project(c, s->qkv, s->xn, w[LNB_QKV_W], m->h[l][LNB_QKV_W], w[LNB_QKV_B], N, (int)D,
            (int)(3 * D));
    split_qkv(c, s, N);
    if (c->rotary) {
        tap_emit_heads(tp, CAT_ID(m, l, CAT_QUERIES_PRE_ROPE), bt, s->q, H, hd, s->scratch);
        tap_emit_heads(tp, CAT_ID(m, l, CAT_KEYS_PRE_ROPE), bt, s->k, H, hd, s->scratch);
        for (int b = 0; c->n_rot > 0 && b < bt->n; b++) {
            op_rope(s->q + bt->off[b] * D, s->cos_t, s->sin_t, bt->len[b], H, hd, c->n_rot, (int)D);
            op_rope(s->k + bt->off[b] * D, s->cos_t, s->sin_t, bt->len[b], H, hd, c->n_rot, (int)D);
        }
    }
    tap_emit_heads(tp, CAT_ID(m, l, CAT_QUERIES), bt, s->q, H, hd, s->scratch);
    tap_emit_heads(tp, CAT_ID(m, l, CAT_KEYS), bt, s->k, H, hd, s->scratch);
    tap_emit_heads(tp, CAT_ID(m, l, CAT_VALUES), bt, s->v, H, hd, s->scratch);
}

// Causal attention of each prompt (model/attention.h) into s->o, then the output projection.
static void attend(const struct lnb_model *m, struct lnb_state *s, const struct mbatch *bt,
                   const struct tap *tp, int l) {
    const struct lnb_config *c = &m->cfg;
    int64_t D = c->hidden;
    // GPT-2: / sqrt(hd) if scale_attn_weights, / (l + 1) if scale_attn_by_inverse_layer_idx
    double scale = c->attn_scale / (c->inverse_layer_scale ? l + 1.0 : 1.0);
    for (int b = 0; b < bt->n; b++) {
        int64_t o = bt->off[b] * D;
        struct attn a = {.T = bt->len[b],
                         .H = c->n_head,
                         .KV = c->n_head,
                         .D = c->head_dim,
                         .scale = (float)scale,
                         .n_sets = 1,
                         .q = s->q + o,
                         .ldq = (int)D,
                         .out = s->o + o,
                         .ldo = (int)D,
                         .att_floats = s->n_att};
        a.set[0] = (struct attn_keys){s->k + o, s->v + o, (int)D, ATTN_CAUSAL, 0};
        // attention_scores are the masked scores the softmax reads (tests/ref/hf/NAMES.md)
        struct attn_taps at = {tp, b, -1, CAT_ID(m, l, CAT_SCORES),
                               CAT_ID(m, l, CAT_PROBABILITIES)};
        AH_ASSERT(!attn_taps_wanted(&at) || s->keep_scores);
        attn_forward(&a, &at, s->att);
    }
    tap_emit_token_heads(tp, CAT_ID(m, l, CAT_HEAD_OUTPUTS), bt, s->o, c->n_head, c->head_dim);
    project(c, s->a, s->o, m->w[l][LNB_O_W], m->h[l][LNB_O_W], m->w[l][LNB_O_B], bt->n_tokens,
            (int)D, (int)D);
}

// block l up to its value `reach` (cat_block_reach)
static void block_forward(const struct lnb_model *m, struct lnb_state *s, const struct mbatch *bt,
                          const struct tap *tp, int l, int reach) {
    const struct lnb_config *c = &m->cfg;
    const float *const *w = m->w[l];
    int64_t N = bt->n_tokens, D = c->hidden, F = c->inner;
    float eps = (float)c->eps;
#define EMIT(kind, buf, width) tap_emit_rows(tp, CAT_ID(m, l, kind), bt, buf, (int)(width))
    EMIT(CAT_LAYER_INPUT, s->x, D);
    if (reach < CAT_ATTENTION_NORM_OUTPUT) return;
    op_layernorm(s->xn, s->x, w[LNB_LN1_W], w[LNB_LN1_B], (int)N, (int)D, eps);
    EMIT(CAT_ATTENTION_NORM_OUTPUT, s->xn, D);
    qkv(m, s, bt, tp, l);
    attend(m, s, bt, tp, l);
    EMIT(CAT_ATTENTION_OUTPUT, s->a, D);
    op_add(s->h, s->x, s->a, N * D);
    EMIT(CAT_LAYER_MID, s->h, D);
    if (reach < CAT_MLP_NORM_OUTPUT) return;

    // the MLP reads the block's input in a parallel block, the stream after the attention else
    op_layernorm(s->xn, c->parallel ? s->x : s->h, w[LNB_LN2_W], w[LNB_LN2_B], (int)N, (int)D, eps);
    EMIT(CAT_MLP_NORM_OUTPUT, s->xn, D);
    EMIT(CAT_MLP_INPUT, s->xn, D);
    project(c, s->f, s->xn, w[LNB_FC_W], m->h[l][LNB_FC_W], w[LNB_FC_B], N, (int)D, (int)F);
    op_act(s->f, N * F, c->act);
    EMIT(CAT_MLP_ACTIVATION, s->f, F);
    EMIT(CAT_MLP_NEURONS, s->f, F);
    project(c, s->m, s->f, w[LNB_PROJ_W], m->h[l][LNB_PROJ_W], w[LNB_PROJ_B], N, (int)F, (int)D);
    EMIT(CAT_MLP_OUTPUT, s->m, D);
    op_add(s->x, s->h, s->m, N * D); // (x + a) + m: layer_mid + mlp_output exactly
    EMIT(CAT_LAYER_OUTPUT, s->x, D);
#undef EMIT
}

// token embeddings (and GPT-2's learned positions) of the batch into s->x
static void embed(const struct lnb_model *m, struct lnb_state *s, const struct mbatch *bt,
                  const struct tap *tp) {
    int64_t D = m->cfg.hidden;
    emit_ids_mask(tp, bt, s->ones, CAT_ID(m, -1, CAT_INPUT_IDS), CAT_ID(m, -1, CAT_ATTENTION_MASK));
    for (int64_t i = 0; i < bt->n_tokens; i++)
        if (m->embed16) // borrowed BF16: the row widened, exactly
            for (int64_t d = 0; d < D; d++)
                s->x[i * D + d] = op_bf16(m->embed16[bt->ids[i] * D + d]);
        else
            memcpy(s->x + i * D, m->embed + bt->ids[i] * D, (size_t)D * sizeof(float));
    tap_emit_rows(tp, CAT_ID(m, -1, CAT_TOKEN_EMBEDDINGS), bt, s->x, (int)D);
    for (int b = 0; m->pos && b < bt->n; b++)
        for (int64_t t = 0; t < bt->len[b]; t++)
            op_add(s->x + (bt->off[b] + t) * D, s->x + (bt->off[b] + t) * D, m->pos + t * D, D);
}

// the final LayerNorm and the head, only if a tap wants them
static void head(const struct lnb_model *m, struct lnb_state *s, const struct mbatch *bt,
                 const struct tap *tp) {
    const struct lnb_config *c = &m->cfg;
    int L = c->n_layer;
    int64_t D = c->hidden, V = c->vocab;
    int id_n = CAT_ID(m, L, CAT_FINAL_NORM_OUTPUT), id_h = CAT_ID(m, L, CAT_LM_HEAD_OUTPUT);
    int id_l = CAT_ID(m, L, CAT_LOGITS), id_p = CAT_ID(m, L, CAT_NEXT_TOKEN_PROBS);
    bool logits = tap_wants(tp, id_h) || tap_wants(tp, id_l) || tap_wants(tp, id_p);
    if (!logits && !tap_wants(tp, id_n)) return;
    op_layernorm(s->xn, s->x, m->lnf_w, m->lnf_b, (int)bt->n_tokens, (int)D, (float)c->eps);
    tap_emit_rows(tp, id_n, bt, s->xn, (int)D);
    const float *w = c->tied ? m->embed : m->head;
    const uint16_t *h = c->tied ? m->embed16 : m->head16; // compute bf16
    for (int b = 0; logits && b < bt->n; b++) {
        int T = bt->len[b];
        if (h)
            op_matmul_bf16(s->logits, s->xn + bt->off[b] * D, h, T, (int)D, (int)V, NULL);
        else
            op_matmul(s->logits, s->xn + bt->off[b] * D, w, T, (int)D, (int)V); // (T, V)
        head_emit(tp, b, s->logits, T, V, id_h, id_l, id_p,
                  0.0f); // no softcap: logits == lm_head_output
    }
}

void lnb_forward(const void *fm, void *fs, const struct mbatch *bt, const struct tap *tp,
                 int blk_begin, int blk_end) {
    const struct lnb_model *m = fm;
    struct lnb_state *s = fs;
    int L = m->cfg.n_layer;
    forward_check(bt, s->max_tokens, s->max_T, blk_begin, blk_end, L);
    if (blk_begin == 0) embed(m, s, bt, tp);
    for (int l = blk_begin; l < blk_end; l++)
        block_forward(m, s, bt, tp, l, cat_block_reach(m->id, L, l, blk_end, tp));
    if (blk_end == L && blk_begin <= blk_end) head(m, s, bt, tp);
}
