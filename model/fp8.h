// fp8.h - float8_e4m3fn weights with block scales, as transformers' fine-grained FP8 integration
// (integrations/finegrained_fp8.py) publishes and reads them: an (N, K) matrix of FP8 bytes and
// its weight_scale_inv of (ceil(N / bn), ceil(K / bk)) float32 block scales, the weight being
//   W[n, k] = e4m3(q[n, k]) * weight_scale_inv[n / bn, k / bk]      (Fp8Dequantize: float32)
// The float64 definition is tests/ref/fp8.py. Kernels do not fail (AH_ASSERT preconditions).
//
// N = output rows, K = inputs, bn x bk = a block (weight_block_size, [128, 128] in releases)
#ifndef AH_FP8_H
#define AH_FP8_H

#include <stdint.h>

// float8_e4m3fn: sign, 4 exponent bits (bias 7), 3 mantissa bits; exponent 0 is subnormal
// (m / 8 * 2^-6); S.1111.111 is NaN; no infinities; largest finite 448 (byte 0x7e).
extern const float fp8_e4m3_table[256];
static inline float fp8_e4m3(uint8_t b) {
    return fp8_e4m3_table[b];
}
float fp8_e4m3_ref(uint8_t b); // the same from the bits, by ldexp (for tests)

// float32 -> float8_e4m3fn, round to nearest, ties to even, the sign kept (-0 for tiny
// negatives), as torch's cast; |x| >= 480 (or NaN) gives NaN (0x7f | sign): clamp first.
uint8_t fp8_e4m3_encode(float x);

// out (nr, K) = rows [r0, r0 + nr) of the (N, K) matrix q dequantized with its scales
// (ceil(N / bn), ceil(K / bk)); blocks at the edges may be partial.
void fp8_dequant_rows(float *out, const uint8_t *q, const float *scale, int64_t K, int64_t r0,
                      int64_t nr, int bn, int bk);
void fp8_dequant_rows_ref(float *out, const uint8_t *q, const float *scale, int64_t K, int64_t r0,
                          int64_t nr, int bn, int bk);

// out (M, N) = in (M, K) . W^T, W dequantized a panel of rows at a time into `panel`
// (op_bf16_panel_floats(K, N) floats, model/ops.h), each panel one sgemm over the full K: a
// rank holds one byte a weight (plus the scales) and a panel, never the whole float32 matrix.
// Inside a parallel region (experts) it runs on the calling thread.
void fp8_matmul(float *out, const float *in, const uint8_t *q, const float *scale, int M, int K,
                int N, int bn, int bk, float *panel);

// Fp8Quantize.convert in float32 (transformers' quantizer, with partial edge blocks as
// FP8Linear's ceil-divided scale shape allows): per block m = max |w|, s = 448 / m (1 when m is
// 0), q = e4m3(clamp(w * s, -448, 448)), scale_inv = 1 / s. w (N, K); q (N, K); scale_inv
// (ceil(N / bn), ceil(K / bk)).
void fp8_quantize(uint8_t *q, float *scale_inv, const float *w, int64_t N, int64_t K, int bn,
                  int bk);

#endif
