// mxfp4.h - MXFP4 matrices kept as published (the gpt-oss releases' experts; transformers'
// integrations/mxfp4.py convert_moe_packed_tensors defines the decoding): each row of K values is
// K / 32 groups, a group 16 bytes of two FP4 (E2M1) codes each - the low nibble is the even
// value, the high nibble the odd one - and one scale byte, an E8M0 power of two biased by 127:
// value = FP4_VALUES[code] * 2^(scale - 127). A matmul widens a panel of rows at a time into
// float32 and multiplies it with one sgemm (as op_matmul_bf16 does for BF16).
//
// M = rows of the input, K = the inner size (a multiple of 32), N = rows of the matrix
#ifndef AH_MXFP4_H
#define AH_MXFP4_H

#include <stdint.h>

// A (N, K) matrix y = x W^T reads, borrowed from the mapping (valid until the model closes).
struct mxfp4_mat {
    const uint8_t *blocks; // (rows, K / 32, 16) codes, two a byte, low nibble first
    const uint8_t *scales; // (rows, K / 32) exponents biased by 127
    int64_t step; // stored rows from one row of W to the next (0 or 1: every row; 2: every other
                  // row, as gpt-oss's gate and up rows interleave in gate_up_proj)
};

// integrations/mxfp4.py FP4_VALUES: index = code (bit 3 the sign, 2 exponent bits, 1 mantissa)
extern const float mxfp4_fp4_values[16];

// the value of 4-bit code with scale byte s
float mxfp4_value(unsigned code, unsigned s);

// rows [r0, r0 + nr) of W widened into out (nr, K)
void mxfp4_rows(float *out, const struct mxfp4_mat *w, int64_t r0, int64_t nr, int K);

// Floats of the panel mxfp4_matmul needs for a (N, K) matrix (op_bf16_panel_floats's size).
int64_t mxfp4_panel_floats(int K, int N);

// out (M, N) = in (M, K) . W^T, a panel of rows of W at a time; panel holds
// mxfp4_panel_floats(K, N) floats. Never fails.
void mxfp4_matmul(float *out, const float *in, const struct mxfp4_mat *w, int M, int K, int N,
                  float *panel);
// The naive twin: every value decoded bit by bit from the definition, sums in double.
void mxfp4_matmul_ref(float *out, const float *in, const struct mxfp4_mat *w, int M, int K, int N);

#endif
