// encdec.c - the spec model's forward pass (see encdec.h).
//
// T = sequence (one prompt), N = tokens of the packed batch, C = hidden, H = heads,
// D = head_dim, HD = H*D, F = ffn_dim, V = vocab, W = local_window
#include "model/encdec.h"

#include "model/ah.h"
#include "model/attention.h"
#include "model/ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ----------------------------------------------------------------------------
// catalogue

int encdec_n_taps(const struct encdec_config *c) {
    return 6 + ED_N_BLOCK_TAPS * (c->n_layer_enc + c->n_layer_dec);
}

int encdec_tap_id_block(const struct encdec_config *c, bool dec, int layer, int point) {
    int base = dec ? 3 + ED_N_BLOCK_TAPS * c->n_layer_enc : 1;
    return base + layer * ED_N_BLOCK_TAPS + point;
}

int encdec_id_enc_pre_final_norm(const struct encdec_config *c) {
    return 1 + ED_N_BLOCK_TAPS * c->n_layer_enc;
}
int encdec_id_enc_output(const struct encdec_config *c) {
    return 2 + ED_N_BLOCK_TAPS * c->n_layer_enc;
}
int encdec_id_dec_output(const struct encdec_config *c) {
    return encdec_n_taps(c) - 3;
}
int encdec_id_final_hidden(const struct encdec_config *c) {
    return encdec_n_taps(c) - 2;
}
int encdec_id_logits(const struct encdec_config *c) {
    return encdec_n_taps(c) - 1;
}

static const struct {
    const char *suffix, *shape, *m_enc, *m_dec;
    enum tap_dtype dtype;
} block_taps[ED_N_BLOCK_TAPS] = {
#define X(id, suffix, dtype, shape, m_enc, m_dec) {suffix, shape, m_enc, m_dec, dtype},
    ENCDEC_BLOCK_TAPS(X)
#undef X
};

#define BSF "batch,sequence,feature"

void encdec_catalogue(const struct encdec_config *c, struct tap_desc *out) {
    int ne = c->n_layer_enc, nb = c->n_layer_enc + c->n_layer_dec;
    char name[TAP_NAME_MAX];
    int r = tap_desc_set(&out[ED_TOKEN_EMBEDDINGS], "token_embeddings", TAP_F32, BSF,
                         "Learned token embedding before encoder blocks", -1);
    for (int dec = 0; dec <= 1; dec++) {
        int nl = dec ? c->n_layer_dec : c->n_layer_enc;
        for (int l = 0; l < nl; l++) {
            for (int p = 0; p < ED_N_BLOCK_TAPS; p++) {
                snprintf(name, sizeof name, "%s_%d_%s", dec ? "decoder" : "encoder", l,
                         block_taps[p].suffix);
                const char *m =
                    dec && block_taps[p].m_dec[0] ? block_taps[p].m_dec : block_taps[p].m_enc;
                r |= tap_desc_set(&out[encdec_tap_id_block(c, dec, l, p)], name,
                                  block_taps[p].dtype, block_taps[p].shape, m, dec ? ne + l : l);
            }
        }
    }
    r |= tap_desc_set(&out[encdec_id_enc_pre_final_norm(c)], "encoder_pre_final_norm", TAP_F32, BSF,
                      "Encoder hidden state before encoder final RMSNorm", ne - 1);
    r |=
        tap_desc_set(&out[encdec_id_enc_output(c)], "encoder_output", TAP_F32, BSF,
                     "Normalized encoder representation used as decoder global K/V source", ne - 1);
    r |= tap_desc_set(&out[encdec_id_dec_output(c)], "decoder_output", TAP_F32, BSF,
                      "Last decoder block output before final RMSNorm", nb - 1);
    r |= tap_desc_set(&out[encdec_id_final_hidden(c)], "final_hidden", TAP_F32, BSF,
                      "Decoder hidden state after final RMSNorm", nb);
    r |= tap_desc_set(&out[encdec_id_logits(c)], "logits", TAP_F32, "batch,sequence,vocab",
                      "Full-sequence vocabulary logits from tied LM head", nb);
    AH_ASSERT(r == 0);
}

int64_t encdec_axis_size(const struct encdec_config *c, const char *axis) {
    if (!strcmp(axis, "head")) return c->n_head;
    if (!strcmp(axis, "head_dim")) return c->head_dim;
    if (!strcmp(axis, "feature")) return c->hidden;
    if (!strcmp(axis, "ffn_dim")) return c->ffn_dim;
    if (!strcmp(axis, "vocab")) return c->vocab;
    if (!strcmp(axis, "broadcast-head")) return 1;
    return -1;
}

// ----------------------------------------------------------------------------
// weights

int encdec_init(struct encdec *m, const struct encdec_config *c, struct model_tensor **list) {
    memset(m, 0, sizeof *m);
    m->cfg = *c;
    int C = c->hidden, HD = c->n_head * c->head_dim, F = c->ffn_dim;
    int nb = c->n_layer_enc + c->n_layer_dec;
    m->enc = calloc((size_t)c->n_layer_enc + 1, sizeof *m->enc);
    m->dec = calloc((size_t)c->n_layer_dec + 1, sizeof *m->dec);
    struct model_tensor *t = calloc(3 + 11 * (size_t)nb, sizeof *t);
    if (!m->enc || !m->dec || !t) {
        free(t);
        encdec_free(m);
        return -AH_ENOMEM;
    }
    int n = 0;
    model_tensor_add(t, &n, NULL, &m->embed, c->vocab, C, NULL, 0, "embed_tokens.weight");
    for (int dec = 0; dec <= 1; dec++) {
        const char *p = dec ? "decoder.layers" : "encoder.layers";
        for (int l = 0; l < (dec ? c->n_layer_dec : c->n_layer_enc); l++) {
            struct encdec_block_w *b = dec ? &m->dec[l] : &m->enc[l];
            model_tensor_add(t, &n, NULL, &b->norm1, C, 0, p, l, "norm1.weight");
            model_tensor_add(t, &n, NULL, &b->norm2, C, 0, p, l, "norm2.weight");
            model_tensor_add(t, &n, NULL, &b->wq, HD, C, p, l, "attn.q_proj.weight");
            model_tensor_add(t, &n, NULL, &b->wkg, HD, C, p, l, "attn.global_k_proj.weight");
            model_tensor_add(t, &n, NULL, &b->wvg, HD, C, p, l, "attn.global_v_proj.weight");
            model_tensor_add(t, &n, NULL, &b->wkl, HD, C, p, l, "attn.local_k_proj.weight");
            model_tensor_add(t, &n, NULL, &b->wvl, HD, C, p, l, "attn.local_v_proj.weight");
            model_tensor_add(t, &n, NULL, &b->wo, C, HD, p, l, "attn.o_proj.weight");
            model_tensor_add(t, &n, NULL, &b->wgate, F, C, p, l, "ffn.gate_proj.weight");
            model_tensor_add(t, &n, NULL, &b->wup, F, C, p, l, "ffn.up_proj.weight");
            model_tensor_add(t, &n, NULL, &b->wdown, C, F, p, l, "ffn.down_proj.weight");
            if (dec) model_tensor_mark(t, n - 11, n, c->n_layer_enc + l, -1); // blocks enc, dec
        }
    }
    model_tensor_add(t, &n, NULL, &m->enc_norm, C, 0, NULL, 0, "encoder.norm.weight");
    model_tensor_add(t, &n, NULL, &m->dec_norm, C, 0, NULL, 0, "decoder.norm.weight");
    *list = t;
    return n;
}

void encdec_free(struct encdec *m) {
    free(m->enc);
    free(m->dec);
    m->enc = m->dec = NULL;
}

// ----------------------------------------------------------------------------
// run state: one arena

int encdec_state_init(struct encdec_state *s, const struct encdec_config *c, int max_T,
                      int64_t max_tokens) {
    memset(s, 0, sizeof *s);
    int64_t N = max_tokens, T = max_T, C = c->hidden, HD = (int64_t)c->n_head * c->head_dim;
    int64_t F = c->ffn_dim, V = c->vocab, H = c->n_head, D = c->head_dim;
    // 4-byte elements (the int64 mask counts two); kept in the order of struct encdec_state
    // clang-format off
    struct arena_piece f[] = {
        {(void **)&s->x, N * C}, {(void **)&s->xn, N * C}, {(void **)&s->q, N * HD},
        {(void **)&s->kg, N * HD}, {(void **)&s->vg, N * HD}, {(void **)&s->kl, N * HD},
        {(void **)&s->vl, N * HD}, {(void **)&s->y, N * HD}, {(void **)&s->ao, N * C},
        {(void **)&s->fo, N * C}, {(void **)&s->gate, N * F}, {(void **)&s->up, N * F},
        {(void **)&s->act, N * F}, {(void **)&s->enc_out, N * C},
        {(void **)&s->att, s->n_att = attn_scores_floats((int)H, (int)T, 2, true)},
        {(void **)&s->logits, T * V}, {(void **)&s->cos_t, T * D / 2},
        {(void **)&s->sin_t, T * D / 2}, {(void **)&s->scratch, H * 2 * T * D},
        {(void **)&s->mask, 2 * T * 2 * T},
    };
    // clang-format on
    s->arena = arena_alloc(f, sizeof f / sizeof f[0]);
    if (!s->arena) return -AH_ENOMEM;
    s->max_T = max_T;
    s->max_tokens = max_tokens;
    op_rope_table(s->cos_t, s->sin_t, max_T, c->head_dim, c->head_dim, c->rope_theta);
    return 0;
}

void encdec_state_free(struct encdec_state *s) {
    free(s->arena);
    memset(s, 0, sizeof *s);
}

// ----------------------------------------------------------------------------
// tap helpers: views of one prompt

// (1, H, 2T, D): global rows followed by local rows of each head (tap-only work)
static void emit_combined(const struct tap *tp, int id, int b, const float *g, const float *l,
                          int T, int H, int D, float *scratch) {
    if (!tap_wants(tp, id)) return;
#pragma omp parallel for num_threads(op_threads()) if ((int64_t)H * T * D >= OP_PAR_MIN) \
    schedule(static)
    for (int h = 0; h < H; h++) {
        for (int t = 0; t < T; t++) {
            memcpy(scratch + ((int64_t)h * 2 * T + t) * D, g + (int64_t)t * H * D + h * D,
                   (size_t)D * sizeof(float));
            memcpy(scratch + ((int64_t)h * 2 * T + T + t) * D, l + (int64_t)t * H * D + h * D,
                   (size_t)D * sizeof(float));
        }
    }
    struct tview v = {scratch, TAP_F32, 4, {1, H, 2 * T, D}};
    tap_emit(tp, id, b, &v);
}

// the three masks as int64 (tap-only work): g and l are the global and local key sets
static void emit_masks(const struct tap *tp, int base, int b, int T, const struct attn_keys *g,
                       const struct attn_keys *l, int64_t *mask) {
    int ig = base + ED_GLOBAL_MASK, il = base + ED_LOCAL_MASK, ia = base + ED_ATTENTION_MASK;
    if (!tap_wants(tp, ig) && !tap_wants(tp, il) && !tap_wants(tp, ia)) return;
    for (int i = 0; i < T; i++)
        for (int j = 0; j < T; j++) {
            mask[(int64_t)i * 2 * T + j] = attn_allowed(g, T, i, j);
            mask[(int64_t)i * 2 * T + T + j] = attn_allowed(l, T, i, j);
        }
    struct tview va = {mask, TAP_I64, 4, {1, 1, T, 2 * T}};
    tap_emit(tp, ia, b, &va);
    // the (T, T) halves reuse the same buffer, one after the other
    for (int half = 0; half < 2; half++) {
        int id = half ? il : ig;
        if (!tap_wants(tp, id)) continue;
        for (int i = 0; i < T; i++)
            for (int j = 0; j < T; j++)
                mask[(int64_t)i * T + j] = attn_allowed(half ? l : g, T, i, j);
        struct tview v = {mask, TAP_I64, 4, {1, 1, T, T}};
        tap_emit(tp, id, b, &v);
    }
}

// ----------------------------------------------------------------------------
// forward

// token embeddings of the whole batch into x: (N, C)
static void embed(const struct encdec *m, float *x, const struct mbatch *bt) {
    int C = m->cfg.hidden;
#pragma omp parallel for num_threads(op_threads()) if (bt->n_tokens * C >= OP_PAR_MIN) \
    schedule(static)
    for (int64_t i = 0; i < bt->n_tokens; i++)
        memcpy(x + i * C, m->embed + bt->ids[i] * C, (size_t)C * sizeof(float));
}

// attention of one prompt: q, k*, v* are its rows of the (N, H*D) buffers; writes y rows. The
// global keys are causal, the local ones causal within the window, one softmax over both.
static void attention(const struct encdec *m, struct encdec_state *s, const struct tap *tp,
                      int base, int b, int T, const float *q, const float *kg, const float *vg,
                      const float *kl, const float *vl, float *y) {
    const struct encdec_config *c = &m->cfg;
    int H = c->n_head, D = c->head_dim, HD = H * D;
    struct attn a = {.T = T,
                     .H = H,
                     .KV = H,
                     .D = D,
                     .scale = 1.0f / sqrtf((float)D),
                     .n_sets = 2,
                     .q = q,
                     .ldq = HD,
                     .out = y,
                     .ldo = HD,
                     .att_floats = s->n_att};
    a.set[0] = (struct attn_keys){kg, vg, HD, ATTN_CAUSAL, 0};
    a.set[1] = (struct attn_keys){kl, vl, HD, ATTN_SLIDING, c->local_window};

    emit_combined(tp, base + ED_COMBINED_K, b, kg, kl, T, H, D, s->scratch);
    emit_combined(tp, base + ED_COMBINED_V, b, vg, vl, T, H, D, s->scratch);
    emit_masks(tp, base, b, T, &a.set[0], &a.set[1], s->mask);
    struct attn_taps at = {tp, b, base + ED_ATTN_SCORES, base + ED_ATTN_MASKED_SCORES,
                           base + ED_ATTN_PROBS};
    attn_forward(&a, &at, s->att);
}

static void block_forward(const struct encdec *m, struct encdec_state *s, const struct mbatch *bt,
                          const struct tap *tp, bool dec, int l) {
    const struct encdec_config *c = &m->cfg;
    const struct encdec_block_w *w = dec ? &m->dec[l] : &m->enc[l];
    int N = (int)bt->n_tokens, C = c->hidden, H = c->n_head, D = c->head_dim, HD = H * D;
    int F = c->ffn_dim;
    int base = encdec_tap_id_block(c, dec, l, 0);

    tap_emit_rows(tp, base + ED_INPUT, bt, s->x, C);

    // attention rmsnorm
    op_rmsnorm(s->xn, s->x, w->norm1, N, C, c->eps); // (N, C)
    tap_emit_rows(tp, base + ED_NORM1, bt, s->xn, C);

    // projections: queries and local K/V from norm1, global K/V from norm1 or encoder_output
    const float *gsrc = dec ? s->enc_out : s->xn;
    op_matmul(s->q, s->xn, w->wq, N, C, HD);   // (N, HD)
    op_matmul(s->kg, gsrc, w->wkg, N, C, HD);  // (N, HD)
    op_matmul(s->vg, gsrc, w->wvg, N, C, HD);  // (N, HD)
    op_matmul(s->kl, s->xn, w->wkl, N, C, HD); // (N, HD)
    op_matmul(s->vl, s->xn, w->wvl, N, C, HD); // (N, HD)
    tap_emit_heads(tp, base + ED_Q_PRE_ROPE, bt, s->q, H, D, s->scratch);
    tap_emit_heads(tp, base + ED_GK_PRE_ROPE, bt, s->kg, H, D, s->scratch);
    tap_emit_heads(tp, base + ED_LK_PRE_ROPE, bt, s->kl, H, D, s->scratch);

    // rope on q and both key kinds, positions 0..T-1 of each prompt
    for (int b = 0; b < bt->n; b++) {
        int64_t o = bt->off[b] * HD;
        op_rope(s->q + o, s->cos_t, s->sin_t, bt->len[b], H, D, D, HD);
        op_rope(s->kg + o, s->cos_t, s->sin_t, bt->len[b], H, D, D, HD);
        op_rope(s->kl + o, s->cos_t, s->sin_t, bt->len[b], H, D, D, HD);
    }
    tap_emit_heads(tp, base + ED_Q, bt, s->q, H, D, s->scratch);
    tap_emit_heads(tp, base + ED_GK, bt, s->kg, H, D, s->scratch);
    tap_emit_heads(tp, base + ED_GV, bt, s->vg, H, D, s->scratch);
    tap_emit_heads(tp, base + ED_LK, bt, s->kl, H, D, s->scratch);
    tap_emit_heads(tp, base + ED_LV, bt, s->vl, H, D, s->scratch);

    // attention, one prompt at a time
    for (int b = 0; b < bt->n; b++) {
        int64_t o = bt->off[b] * HD;
        attention(m, s, tp, base, b, bt->len[b], s->q + o, s->kg + o, s->vg + o, s->kl + o,
                  s->vl + o, s->y + o);
    }

    // output projection and residual
    op_matmul(s->ao, s->y, w->wo, N, HD, C); // (N, C)
    tap_emit_rows(tp, base + ED_ATTN_OUTPUT, bt, s->ao, C);
    op_add(s->x, s->x, s->ao, (int64_t)N * C);
    tap_emit_rows(tp, base + ED_AFTER_ATTN_RESIDUAL, bt, s->x, C);

    // ffn rmsnorm
    op_rmsnorm(s->xn, s->x, w->norm2, N, C, c->eps);
    tap_emit_rows(tp, base + ED_NORM2, bt, s->xn, C);

    // swiglu ffn
    op_matmul(s->gate, s->xn, w->wgate, N, C, F); // (N, F)
    tap_emit_rows(tp, base + ED_FFN_GATE, bt, s->gate, F);
    op_matmul(s->up, s->xn, w->wup, N, C, F); // (N, F)
    tap_emit_rows(tp, base + ED_FFN_UP, bt, s->up, F);
    op_swiglu(s->act, s->gate, s->up, (int64_t)N * F);
    tap_emit_rows(tp, base + ED_FFN_ACTIVATION, bt, s->act, F);
    op_matmul(s->fo, s->act, w->wdown, N, F, C); // (N, C)
    tap_emit_rows(tp, base + ED_FFN_OUTPUT, bt, s->fo, C);

    // residual
    op_add(s->x, s->x, s->fo, (int64_t)N * C);
    tap_emit_rows(tp, base + ED_OUTPUT, bt, s->x, C);
}

void encdec_forward(const struct encdec *m, struct encdec_state *s, const struct mbatch *bt,
                    const struct tap *tp, int blk_begin, int blk_end) {
    const struct encdec_config *c = &m->cfg;
    int ne = c->n_layer_enc, nb = ne + c->n_layer_dec, C = c->hidden, V = c->vocab;
    AH_ASSERT(bt->n_tokens <= s->max_tokens && blk_begin >= 0 && blk_end <= nb);
    for (int b = 0; b < bt->n; b++)
        AH_ASSERT(bt->len[b] >= 1 && bt->len[b] <= s->max_T);

    if (blk_begin == 0) {
        embed(m, s->x, bt); // (N, C)
        tap_emit_rows(tp, ED_TOKEN_EMBEDDINGS, bt, s->x, C);
    }
    for (int blk = blk_begin; blk < blk_end; blk++) {
        bool dec = blk >= ne;
        if (blk == ne) embed(m, s->x, bt); // decoder_0_input is token_embeddings
        block_forward(m, s, bt, tp, dec, dec ? blk - ne : blk);
        if (blk == ne - 1) {
            // encoder final norm: encoder_output is the decoder's global K/V source
            tap_emit_rows(tp, encdec_id_enc_pre_final_norm(c), bt, s->x, C);
            op_rmsnorm(s->enc_out, s->x, m->enc_norm, (int)bt->n_tokens, C, c->eps);
            tap_emit_rows(tp, encdec_id_enc_output(c), bt, s->enc_out, C);
        }
    }
    if (blk_end < nb || blk_begin > blk_end) return;

    // final norm and tied LM head, only if asked for
    tap_emit_rows(tp, encdec_id_dec_output(c), bt, s->x, C);
    int ih = encdec_id_final_hidden(c), il = encdec_id_logits(c);
    if (!tap_wants(tp, ih) && !tap_wants(tp, il)) return;
    op_rmsnorm(s->xn, s->x, m->dec_norm, (int)bt->n_tokens, C, c->eps);
    tap_emit_rows(tp, ih, bt, s->xn, C);
    if (!tap_wants(tp, il)) return;
    for (int b = 0; b < bt->n; b++) {
        int T = bt->len[b];
        op_matmul(s->logits, s->xn + bt->off[b] * C, m->embed, T, C, V); // (T, V)
        struct tview v = {s->logits, TAP_F32, 3, {1, T, V}};
        tap_emit(tp, il, b, &v);
    }
}

double encdec_flops(const struct encdec_config *c, int T, bool with_head) {
    double C = c->hidden, HD = (double)c->n_head * c->head_dim, F = c->ffn_dim, t = T;
    double proj = 2.0 * t * C * HD * 6;                           // q, kg, vg, kl, vl, o
    double att = 2.0 * c->n_head * t * (2 * t) * c->head_dim * 2; // scores + probs.v
    double ffn = 2.0 * t * C * F * 3;
    double blocks = (c->n_layer_enc + c->n_layer_dec) * (proj + att + ffn);
    return blocks + (with_head ? 2.0 * t * C * c->vocab : 0.0);
}

struct encdec_config encdec_spec_config(void) {
    struct encdec_config c = {.n_layer_enc = 4, .n_layer_dec = 4, .hidden = 384, .n_head = 6};
    c.head_dim = 64, c.ffn_dim = 1024, c.vocab = 8192, c.local_window = 64, c.max_pos = 512;
    c.eps = 1e-6f, c.rope_theta = 10000.0;
    return c;
}
