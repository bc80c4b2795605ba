// mla.h - multi-head latent attention, DeepSeek-V3's attention (DeepseekV3Attention of
// transformers' modeling_deepseek_v3.py; float64 reference tests/ref/deepseek_v3_ref.py): the
// attention step of model/decoder_forward.c when the block description says so (dec_config's
// mla.on). The queries come from a low-rank latent (q_a_proj, q_a_layernorm, q_b_proj; q_proj
// when q_lora_rank is null), the keys' and values' from one compressed latent (kv_a_proj_with_mqa
// -> the latent + one rotary key shared by every head, kv_a_layernorm, kv_b_proj -> each head's
// k_nope and v). A query / key head is [nope | rope] (d_nope + d_rope), a value head d_v; RoPE
// (YaRN, times its attention factor) on the rope part only, its pairs de-interleaved first when
// rope_interleave (apply_rotary_pos_emb_interleave). The attention itself is model/attention.h's.
//
// N = tokens of a batch, T = a prompt's tokens, H = heads, ql = q_lora_rank, kvl = kv_lora_rank,
// dn / dr / dv = qk_nope_head_dim / qk_rope_head_dim / v_head_dim, dqk = dn + dr
#ifndef AH_MLA_H
#define AH_MLA_H

#include "model/batch.h"
#include "model/decoder.h"
#include "model/tap.h"

#include <stdint.h>

// The run state's MLA buffers, carved from one block of mla_floats() floats (mla_carve).
struct mla_buf {
    float *cq;      // (N, ql) the q latent, then normed
    float *ckv;     // (N, kvl + dr) kv_a_proj_with_mqa's output
    float *c;       // (N, kvl) the kv latent, then normed
    float *kr;      // (N, dr) the rotary key
    float *kvb;     // (N, H (dn + dv)) kv_b_proj's output
    float *q, *k;   // (N, H dqk)
    float *v, *o;   // (N, H dv) values, head outputs
    float *scratch; // (H dqk T) head-major copies for the head taps
};

// Floats of the buffers for batches of N tokens, prompts of at most T (0 when mla is off).
int64_t mla_floats(const struct dec_config *c, int64_t N, int64_t T);
void mla_carve(struct mla_buf *b, float *base, const struct dec_config *c, int64_t N, int64_t T);
// The largest K and N of MLA's matrices into *k, *n (left alone where they are larger).
void mla_panel_dims(const struct dec_config *c, int64_t *k, int64_t *n);
// Parameters of layer l's attention (projections, their norms), as transformers counts them.
int64_t mla_params(const struct dec_config *c);

// Layer l's attention on the batch: out (N, D) = o_proj(attention(xn)). cos_t / sin_t: (T, dr/2)
// RoPE tables of positions 0..T-1 (times YaRN's attention factor); panel: a BF16 panel
// (op_matmul_bf16) if any matrix is BF16; att: the scores buffer of n_att floats
// (attn_scores_floats of H heads, with room for every head when a score tap is wanted).
void mla_attention(const struct decoder *m, int l, const struct mbatch *bt, const struct tap *tp,
                   const struct mla_buf *b, const float *xn, float *out, const float *cos_t,
                   const float *sin_t, float *panel, float *att, int64_t n_att);

#endif
