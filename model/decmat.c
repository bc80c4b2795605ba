// decmat.c - see decoder.h: one product with a decoder matrix, whatever its storage (FP8
// block-scaled, MXFP4, BF16 borrowed from the mapping, or a float32 view), shared by the decoder's
// forward (decoder_forward.c) and its latent attention (mla.c).
#include "model/decoder.h"
#include "model/fp8.h"   // defines: fp8_matmul
#include "model/mxfp4.h" // defines: mxfp4_matmul
#include "model/ops.h"   // defines: op_matmul, op_matmul_bf16

void dec_matmul(float *out, const float *in, const struct dec_mat *w, int64_t M, int64_t K,
                int64_t N, float *panel) {
    if (w->q8)
        fp8_matmul(out, in, w->q8, w->s8, (int)M, (int)K, (int)N, w->bn, w->bk, panel);
    else if (w->q4.blocks)
        mxfp4_matmul(out, in, &w->q4, (int)M, (int)K, (int)N, panel);
    else if (w->h)
        op_matmul_bf16(out, in, w->h, (int)M, (int)K, (int)N, panel);
    else
        op_matmul(out, in, w->f, (int)M, (int)K, (int)N);
}
