// mla.c - multi-head latent attention (model/mla.h), step for step as DeepseekV3Attention.forward
// (tests/ref/deepseek_v3_ref.py attention()).
//
// N = tokens of a batch, T = a prompt's tokens, H = heads, ql = q_lora_rank, kvl = kv_lora_rank,
// dn / dr / dv = qk_nope_head_dim / qk_rope_head_dim / v_head_dim, dqk = dn + dr
#include "model/mla.h"

#include "model/ah.h"
#include "model/attention.h" // defines: attn_forward
#include "model/catalogue.h" // defines: CAT_ID
#include "model/ops.h"       // defines: op_rmsnorm, op_rope

#include <string.h>

#define MLA_MAX_ROPE 1024 // the widest rotary part (model/families/deepseek_v3.c checks it)

int64_t mla_floats(const struct dec_config *c, int64_t N, int64_t T) {
    const struct dec_mla *a = &c->mla;
    if (!a->on) return 0;
    int64_t H = c->n_head, dqk = a->d_nope + a->d_rope;
    return N * (a->q_lora + 2 * (int64_t)a->kv_lora + 2 * a->d_rope + H * (a->d_nope + a->d_v) +
                2 * H * dqk + 2 * H * a->d_v) +
           H * dqk * T;
}

void mla_carve(struct mla_buf *b, float *p, const struct dec_config *c, int64_t N, int64_t T) {
    const struct dec_mla *a = &c->mla;
    int64_t H = c->n_head, dqk = a->d_nope + a->d_rope;
    (void)T;
    b->cq = p, p += N * a->q_lora;
    b->ckv = p, p += N * (a->kv_lora + a->d_rope);
    b->c = p, p += N * a->kv_lora;
    b->kr = p, p += N * a->d_rope;
    b->kvb = p, p += N * H * (a->d_nope + a->d_v);
    b->q = p, p += N * H * dqk;
    b->k = p, p += N * H * dqk;
    b->v = p, p += N * H * a->d_v;
    b->o = p, p += N * H * a->d_v;
    b->scratch = p;
}

static void grow(int64_t *x, int64_t v) {
    *x = v > *x ? v : *x;
}

void mla_panel_dims(const struct dec_config *c, int64_t *k, int64_t *n) {
    const struct dec_mla *a = &c->mla;
    int64_t H = c->n_head, dqk = a->d_nope + a->d_rope;
    if (!a->on) return;
    grow(k, a->q_lora), grow(k, a->kv_lora), grow(k, H * a->d_v);
    grow(n, a->q_lora), grow(n, H * dqk), grow(n, a->kv_lora + a->d_rope);
    grow(n, H * (a->d_nope + a->d_v));
}

int64_t mla_params(const struct dec_config *c) {
    const struct dec_mla *a = &c->mla;
    int64_t D = c->hidden, H = c->n_head, dqk = a->d_nope + a->d_rope, ql = a->q_lora;
    int64_t n = ql ? D * ql + ql + ql * H * dqk : D * H * dqk;
    n += D * (a->kv_lora + a->d_rope) + a->kv_lora + (int64_t)a->kv_lora * H * (a->d_nope + a->d_v);
    return n + H * a->d_v * D;
}

// columns [c0, c0 + w) of rows (N, ld) into dst (N, w)
static void columns(float *dst, const float *src, int64_t N, int64_t ld, int64_t c0, int64_t w) {
    for (int64_t t = 0; t < N; t++)
        memcpy(dst + t * w, src + t * ld + c0, (size_t)w * sizeof(float));
}

// apply_rotary_pos_emb_interleave's view(d/2, 2).transpose: the pairs' first members, then their
// second, in each of rows x (stride apart, H heads of `head` floats, the dr wide part at 0)
static void deinterleave(float *x, int64_t rows, int64_t stride, int H, int head, int dr) {
    float tmp[MLA_MAX_ROPE];
    AH_ASSERT(dr <= MLA_MAX_ROPE);
    for (int64_t t = 0; t < rows; t++)
        for (int h = 0; h < H; h++) {
            float *v = x + t * stride + (int64_t)h * head;
            for (int j = 0; j < dr / 2; j++) {
                tmp[j] = v[2 * j];
                tmp[dr / 2 + j] = v[2 * j + 1];
            }
            memcpy(v, tmp, (size_t)dr * sizeof(float));
        }
}

// q (N, H dqk) and the latents: q_a -> q_a_layernorm -> q_b (or q_proj); kv_a_proj_with_mqa ->
// the kv latent (normed) and the rotary key; kv_b_proj -> k (nope part; the rope part the shared
// key) and v
static void project(const struct decoder *m, int l, const struct mbatch *bt, const struct tap *tp,
                    const struct mla_buf *b, const float *xn, float *panel) {
    const struct dec_config *c = &m->cfg;
    const struct dec_mla *a = &c->mla;
    const struct dec_block_w *w = &m->blk[l];
    int64_t N = bt->n_tokens, D = c->hidden, H = c->n_head, dn = a->d_nope, dr = a->d_rope;
    int64_t dv = a->d_v, dqk = dn + dr, kvl = a->kv_lora;
    if (a->q_lora) {
        dec_matmul(b->cq, xn, &w->q_a, N, D, a->q_lora, panel);
        tap_emit_rows(tp, CAT_ID(m, l, CAT_Q_LATENT), bt, b->cq, a->q_lora);
        op_rmsnorm(b->cq, b->cq, w->q_a_norm, (int)N, a->q_lora, (float)c->eps);
        tap_emit_rows(tp, CAT_ID(m, l, CAT_Q_LATENT_NORM), bt, b->cq, a->q_lora);
        dec_matmul(b->q, b->cq, &w->q_b, N, a->q_lora, H * dqk, panel);
    } else {
        dec_matmul(b->q, xn, &w->wq, N, D, H * dqk, panel);
    }
    dec_matmul(b->ckv, xn, &w->kv_a, N, D, kvl + dr, panel);
    columns(b->c, b->ckv, N, kvl + dr, 0, kvl);
    columns(b->kr, b->ckv, N, kvl + dr, kvl, dr);
    tap_emit_rows(tp, CAT_ID(m, l, CAT_KV_LATENT), bt, b->c, (int)kvl);
    op_rmsnorm(b->c, b->c, w->kv_a_norm, (int)N, (int)kvl, (float)c->eps);
    tap_emit_rows(tp, CAT_ID(m, l, CAT_KV_LATENT_NORM), bt, b->c, (int)kvl);
    dec_matmul(b->kvb, b->c, &w->kv_b, N, kvl, H * (dn + dv), panel);
    for (int64_t t = 0; t < N; t++)
        for (int64_t h = 0; h < H; h++) {
            const float *src = b->kvb + (t * H + h) * (dn + dv);
            float *k = b->k + (t * H + h) * dqk;
            memcpy(k, src, (size_t)dn * sizeof(float));
            memcpy(k + dn, b->kr + t * dr, (size_t)dr * sizeof(float));
            memcpy(b->v + (t * H + h) * dv, src + dn, (size_t)dv * sizeof(float));
        }
}

void mla_attention(const struct decoder *m, int l, const struct mbatch *bt, const struct tap *tp,
                   const struct mla_buf *b, const float *xn, float *out, const float *cos_t,
                   const float *sin_t, float *panel, float *att, int64_t n_att) {
    const struct dec_config *c = &m->cfg;
    const struct dec_mla *a = &c->mla;
    int64_t N = bt->n_tokens, D = c->hidden, H = c->n_head, dn = a->d_nope, dr = a->d_rope;
    int64_t dv = a->d_v, dqk = dn + dr, HQ = H * dqk, HV = H * dv;
    project(m, l, bt, tp, b, xn, panel);
    tap_emit_heads(tp, CAT_ID(m, l, CAT_QUERIES_PRE_ROPE), bt, b->q, (int)H, (int)dqk, b->scratch);
    tap_emit_heads(tp, CAT_ID(m, l, CAT_KEYS_PRE_ROPE), bt, b->k, (int)H, (int)dqk, b->scratch);
    // RoPE on the rope parts: each query head's, the one shared key's (positions restart a prompt)
    if (a->interleave) {
        deinterleave(b->q + dn, N, HQ, (int)H, (int)dqk, (int)dr);
        deinterleave(b->kr, N, dr, 1, (int)dr, (int)dr);
    }
    for (int i = 0; i < bt->n; i++) {
        int64_t o = bt->off[i];
        op_rope(b->q + o * HQ + dn, cos_t, sin_t, bt->len[i], (int)H, (int)dqk, (int)dr, (int)HQ);
        op_rope(b->kr + o * dr, cos_t, sin_t, bt->len[i], 1, (int)dr, (int)dr, (int)dr);
    }
    for (int64_t t = 0; t < N; t++)
        for (int64_t h = 0; h < H; h++)
            memcpy(b->k + (t * H + h) * dqk + dn, b->kr + t * dr, (size_t)dr * sizeof(float));
    tap_emit_rows(tp, CAT_ID(m, l, CAT_ROPE_KEY), bt, b->kr, (int)dr);
    tap_emit_heads(tp, CAT_ID(m, l, CAT_QUERIES), bt, b->q, (int)H, (int)dqk, b->scratch);
    tap_emit_heads(tp, CAT_ID(m, l, CAT_KEYS), bt, b->k, (int)H, (int)dqk, b->scratch);
    tap_emit_heads(tp, CAT_ID(m, l, CAT_VALUES), bt, b->v, (int)H, (int)dv, b->scratch);
    for (int i = 0; i < bt->n; i++) {
        int64_t o = bt->off[i];
        struct attn at = {.T = bt->len[i],
                          .H = (int)H,
                          .KV = (int)H,
                          .D = (int)dqk,
                          .Dv = (int)dv,
                          .ldv = (int)HV,
                          .scale = c->blk.scale,
                          .n_sets = 1,
                          .q = b->q + o * HQ,
                          .ldq = (int)HQ,
                          .out = b->o + o * HV,
                          .ldo = (int)HV,
                          .att_floats = n_att};
        at.set[0] = (struct attn_keys){b->k + o * HQ, b->v + o * HV, (int)HQ, ATTN_CAUSAL, 0};
        struct attn_taps tt = {tp, i, -1, CAT_ID(m, l, CAT_SCORES),
                               CAT_ID(m, l, CAT_PROBABILITIES)};
        attn_forward(&at, &tt, att);
    }
    tap_emit_token_heads(tp, CAT_ID(m, l, CAT_HEAD_OUTPUTS), bt, b->o, (int)H, (int)dv);
    dec_matmul(out, b->o, &m->blk[l].wo, N, HV, D, panel);
}
