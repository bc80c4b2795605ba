// test_mxfp4.c - model/mxfp4.h against the definition (transformers' integrations/mxfp4.py
// convert_moe_packed_tensors): the FP4 table, the nibble order (the low nibble is the even value),
// the scale's exponent bias (2^(s - 127)) and the rows' layout, on hand-made bytes; then
// mxfp4_matmul against the naive decode of mxfp4_matmul_ref on random bytes, odd sizes, every
// other stored row (gpt-oss's interleaved gate / up) and a matrix of several panels.
#include "model/mxfp4.h"
#include "model/ops.h"
#include "tests/check.h"

#include <stdlib.h>
#include <string.h>

static unsigned rnd(unsigned *s) {
    *s = *s * 1103515245u + 12345u;
    return *s >> 8;
}

// two rows of K = 64: bytes and scales chosen by hand
static void test_mxfp4_decode_by_hand(void) {
    uint8_t blocks[2][2][16] = {{{0}}}, scales[2][2] = {{127, 128}, {126, 127 + 3}};
    blocks[0][0][0] = 0x21;  // value 0 = code 1 (0.5), value 1 = code 2 (1.0)
    blocks[0][0][15] = 0xF7; // value 30 = code 7 (6.0), value 31 = code 15 (-6.0)
    blocks[0][1][0] = 0x93;  // group 1 (scale 2^1): value 32 = code 3 (1.5 * 2), 33 = 9 (-0.5 * 2)
    blocks[1][0][1] = 0x5C;  // row 1, scale 2^-1: value 2 = code 12 (-2 / 2), 3 = code 5 (3 / 2)
    blocks[1][1][2] = 0x84;  // scale 2^3: value 36 = code 4 (2 * 8), value 37 = code 8 (-0)
    struct mxfp4_mat w = {&blocks[0][0][0], &scales[0][0], 1};
    float out[2][64];
    mxfp4_rows(&out[0][0], &w, 0, 2, 64);
    CHECK(out[0][0] == 0.5f && out[0][1] == 1.0f && out[0][30] == 6.0f && out[0][31] == -6.0f);
    CHECK(out[0][32] == 3.0f && out[0][33] == -1.0f && out[0][2] == 0.0f);
    CHECK(out[1][2] == -1.0f && out[1][3] == 1.5f && out[1][36] == 16.0f);
    CHECK(out[1][37] == 0.0f && signbit(out[1][37])); // code 8 is -0
    int nonzero = 0;
    for (int r = 0; r < 2; r++)
        for (int k = 0; k < 64; k++)
            nonzero += out[r][k] != 0.0f;
    CHECK_EQ(nonzero, 9);
    static const float table[16] = {0,     0.5f,  1,  1.5f,  2,  3,  4,  6,
                                    -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
    for (unsigned c = 0; c < 16; c++) {
        CHECK(mxfp4_value(c, 127) == table[c]);
        CHECK(mxfp4_value(c, 127 - 10) == ldexpf(table[c], -10));
    }
    // step 2: the second logical row is stored row 2 (gpt-oss's gate rows 0, 2, 4, ...)
    uint8_t b3[3][16] = {{0x22}, {0x33}, {0x44}}, s3[3] = {127, 127, 127};
    struct mxfp4_mat w2 = {&b3[0][0], s3, 2};
    float o2[2][32];
    mxfp4_rows(&o2[0][0], &w2, 0, 2, 32);
    CHECK(o2[0][0] == 1.0f && o2[1][0] == 2.0f && o2[1][1] == 2.0f);
}

// mxfp4_matmul against mxfp4_matmul_ref: M x K . (N x K)^T on random codes and scales 120..130
static void matmul_case(int M, int K, int N, int step, unsigned seed) {
    int64_t G = K / 32, rows = (int64_t)N * (step > 1 ? step : 1);
    uint8_t *blocks = malloc((size_t)(rows * G * 16)), *scales = malloc((size_t)(rows * G));
    float *in = malloc(sizeof(float) * (size_t)M * K), *got = malloc(sizeof(float) * (size_t)M * N);
    float *want = malloc(sizeof(float) * (size_t)M * N);
    float *panel = malloc(sizeof(float) * (size_t)mxfp4_panel_floats(K, N));
    for (int64_t i = 0; i < rows * G * 16; i++)
        blocks[i] = (uint8_t)rnd(&seed);
    for (int64_t i = 0; i < rows * G; i++)
        scales[i] = (uint8_t)(120 + rnd(&seed) % 11);
    for (int64_t i = 0; i < (int64_t)M * K; i++)
        in[i] = (float)(rnd(&seed) % 2001) / 1000.0f - 1.0f;
    struct mxfp4_mat w = {blocks, scales, step};
    mxfp4_matmul(got, in, &w, M, K, N, panel);
    mxfp4_matmul_ref(want, in, &w, M, K, N);
    // float32 sums of K products: the bound scales with sum_k |in_k w_k|, not with the result
    // (a result near zero after cancellation is as far off as the terms are large)
    float *rows_f = malloc(sizeof(float) * (size_t)N * K);
    mxfp4_rows(rows_f, &w, 0, N, K);
    int bad = 0;
    double worst = 0;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double mag = 0;
            for (int k = 0; k < K; k++)
                mag += fabs((double)in[(int64_t)m * K + k] * (double)rows_f[(int64_t)n * K + k]);
            double d = fabs((double)got[(int64_t)m * N + n] - (double)want[(int64_t)m * N + n]);
            double bound = 1e-6 + 8.0 * 0x1p-24 * sqrt((double)K) * mag;
            if (d / bound > worst) worst = d / bound;
            if (!(d <= bound) && bad++ < 5)
                fprintf(stderr, "mxfp4 %dx%dx%d step %d [%d,%d]: got %.9g want %.9g (bound %.3g)\n",
                        M, K, N, step, m, n, (double)got[(int64_t)m * N + n],
                        (double)want[(int64_t)m * N + n], bound);
        }
    if (bad) check_failures++;
    printf("mxfp4 %dx%dx%d step %d: worst error %.3f of the bound\n", M, K, N, step, worst);
    free(rows_f), free(blocks), free(scales), free(in), free(got), free(want), free(panel);
}

int main(void) {
    test_mxfp4_decode_by_hand();
    matmul_case(5, 64, 37, 1, 1);
    matmul_case(3, 96, 11, 2, 2);     // every other stored row
    matmul_case(1, 32, 1, 1, 3);      // one value group
    matmul_case(2, 4096, 2100, 1, 4); // three panels of 700 rows
    return check_failures ? EXIT_FAILURE : EXIT_SUCCESS;
}
