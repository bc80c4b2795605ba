// fp8.c - float8_e4m3fn decode and encode, block-scaled dequantization a panel at a time, the
// quantizer init-model writes with (model/fp8.h; the float64 definition: tests/ref/fp8.py).
#include "model/fp8.h"

#include "model/ah.h"  // defines: AH_ASSERT
#include "model/ops.h" // defines: op_bf16_panel_floats, op_matmul_ld, op_threads, OP_PAR_MIN

#include <math.h>
#include <string.h>

// ----------------------------------------------------------------------------
// the 256 values, by byte (written out from the bit layout; tests/test_fp8.c checks each against
// fp8_e4m3_ref and the hand decode)

const float fp8_e4m3_table[256] = {
    0x0p+0f,  0x1p-9f,    0x1p-8f,    0x1.8p-8f,  0x1p-7f,    0x1.4p-7f,  0x1.8p-7f,  0x1.cp-7f,
    0x1p-6f,  0x1.2p-6f,  0x1.4p-6f,  0x1.6p-6f,  0x1.8p-6f,  0x1.ap-6f,  0x1.cp-6f,  0x1.ep-6f,
    0x1p-5f,  0x1.2p-5f,  0x1.4p-5f,  0x1.6p-5f,  0x1.8p-5f,  0x1.ap-5f,  0x1.cp-5f,  0x1.ep-5f,
    0x1p-4f,  0x1.2p-4f,  0x1.4p-4f,  0x1.6p-4f,  0x1.8p-4f,  0x1.ap-4f,  0x1.cp-4f,  0x1.ep-4f,
    0x1p-3f,  0x1.2p-3f,  0x1.4p-3f,  0x1.6p-3f,  0x1.8p-3f,  0x1.ap-3f,  0x1.cp-3f,  0x1.ep-3f,
    0x1p-2f,  0x1.2p-2f,  0x1.4p-2f,  0x1.6p-2f,  0x1.8p-2f,  0x1.ap-2f,  0x1.cp-2f,  0x1.ep-2f,
    0x1p-1f,  0x1.2p-1f,  0x1.4p-1f,  0x1.6p-1f,  0x1.8p-1f,  0x1.ap-1f,  0x1.cp-1f,  0x1.ep-1f,
    0x1p+0f,  0x1.2p+0f,  0x1.4p+0f,  0x1.6p+0f,  0x1.8p+0f,  0x1.ap+0f,  0x1.cp+0f,  0x1.ep+0f,
    0x1p+1f,  0x1.2p+1f,  0x1.4p+1f,  0x1.6p+1f,  0x1.8p+1f,  0x1.ap+1f,  0x1.cp+1f,  0x1.ep+1f,
    0x1p+2f,  0x1.2p+2f,  0x1.4p+2f,  0x1.6p+2f,  0x1.8p+2f,  0x1.ap+2f,  0x1.cp+2f,  0x1.ep+2f,
    0x1p+3f,  0x1.2p+3f,  0x1.4p+3f,  0x1.6p+3f,  0x1.8p+3f,  0x1.ap+3f,  0x1.cp+3f,  0x1.ep+3f,
    0x1p+4f,  0x1.2p+4f,  0x1.4p+4f,  0x1.6p+4f,  0x1.8p+4f,  0x1.ap+4f,  0x1.cp+4f,  0x1.ep+4f,
    0x1p+5f,  0x1.2p+5f,  0x1.4p+5f,  0x1.6p+5f,  0x1.8p+5f,  0x1.ap+5f,  0x1.cp+5f,  0x1.ep+5f,
    0x1p+6f,  0x1.2p+6f,  0x1.4p+6f,  0x1.6p+6f,  0x1.8p+6f,  0x1.ap+6f,  0x1.cp+6f,  0x1.ep+6f,
    0x1p+7f,  0x1.2p+7f,  0x1.4p+7f,  0x1.6p+7f,  0x1.8p+7f,  0x1.ap+7f,  0x1.cp+7f,  0x1.ep+7f,
    0x1p+8f,  0x1.2p+8f,  0x1.4p+8f,  0x1.6p+8f,  0x1.8p+8f,  0x1.ap+8f,  0x1.cp+8f,  NAN,
    -0x0p+0f, -0x1p-9f,   -0x1p-8f,   -0x1.8p-8f, -0x1p-7f,   -0x1.4p-7f, -0x1.8p-7f, -0x1.cp-7f,
    -0x1p-6f, -0x1.2p-6f, -0x1.4p-6f, -0x1.6p-6f, -0x1.8p-6f, -0x1.ap-6f, -0x1.cp-6f, -0x1.ep-6f,
    -0x1p-5f, -0x1.2p-5f, -0x1.4p-5f, -0x1.6p-5f, -0x1.8p-5f, -0x1.ap-5f, -0x1.cp-5f, -0x1.ep-5f,
    -0x1p-4f, -0x1.2p-4f, -0x1.4p-4f, -0x1.6p-4f, -0x1.8p-4f, -0x1.ap-4f, -0x1.cp-4f, -0x1.ep-4f,
    -0x1p-3f, -0x1.2p-3f, -0x1.4p-3f, -0x1.6p-3f, -0x1.8p-3f, -0x1.ap-3f, -0x1.cp-3f, -0x1.ep-3f,
    -0x1p-2f, -0x1.2p-2f, -0x1.4p-2f, -0x1.6p-2f, -0x1.8p-2f, -0x1.ap-2f, -0x1.cp-2f, -0x1.ep-2f,
    -0x1p-1f, -0x1.2p-1f, -0x1.4p-1f, -0x1.6p-1f, -0x1.8p-1f, -0x1.ap-1f, -0x1.cp-1f, -0x1.ep-1f,
    -0x1p+0f, -0x1.2p+0f, -0x1.4p+0f, -0x1.6p+0f, -0x1.8p+0f, -0x1.ap+0f, -0x1.cp+0f, -0x1.ep+0f,
    -0x1p+1f, -0x1.2p+1f, -0x1.4p+1f, -0x1.6p+1f, -0x1.8p+1f, -0x1.ap+1f, -0x1.cp+1f, -0x1.ep+1f,
    -0x1p+2f, -0x1.2p+2f, -0x1.4p+2f, -0x1.6p+2f, -0x1.8p+2f, -0x1.ap+2f, -0x1.cp+2f, -0x1.ep+2f,
    -0x1p+3f, -0x1.2p+3f, -0x1.4p+3f, -0x1.6p+3f, -0x1.8p+3f, -0x1.ap+3f, -0x1.cp+3f, -0x1.ep+3f,
    -0x1p+4f, -0x1.2p+4f, -0x1.4p+4f, -0x1.6p+4f, -0x1.8p+4f, -0x1.ap+4f, -0x1.cp+4f, -0x1.ep+4f,
    -0x1p+5f, -0x1.2p+5f, -0x1.4p+5f, -0x1.6p+5f, -0x1.8p+5f, -0x1.ap+5f, -0x1.cp+5f, -0x1.ep+5f,
    -0x1p+6f, -0x1.2p+6f, -0x1.4p+6f, -0x1.6p+6f, -0x1.8p+6f, -0x1.ap+6f, -0x1.cp+6f, -0x1.ep+6f,
    -0x1p+7f, -0x1.2p+7f, -0x1.4p+7f, -0x1.6p+7f, -0x1.8p+7f, -0x1.ap+7f, -0x1.cp+7f, -0x1.ep+7f,
    -0x1p+8f, -0x1.2p+8f, -0x1.4p+8f, -0x1.6p+8f, -0x1.8p+8f, -0x1.ap+8f, -0x1.cp+8f, -NAN,
};

float fp8_e4m3_ref(uint8_t b) {
    int s = b >> 7, e = (b >> 3) & 0xF, m = b & 7;
    if (e == 15 && m == 7) return s ? -NAN : NAN;
    double v = e == 0 ? ldexp(m / 8.0, -6) : ldexp(1.0 + m / 8.0, e - 7);
    return (float)(s ? -v : v);
}

static uint32_t bits_of(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static float float_of(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

// torch's (c10) float8_e4m3fn cast: the float32 bits rounded to 3 mantissa bits, ties to even;
// below 2^-6 onto the subnormal grid of 2^-9 units
uint8_t fp8_e4m3_encode(float x) {
    uint32_t u = bits_of(x), sign = u & 0x80000000u, a = u ^ sign;
    uint8_t r;
    if (a >= 0x43F00000u) { // >= 480 (where the NaN code would round to) or NaN
        r = 0x7F;
    } else if (a < (121u << 23)) { // below 2^-6: |x| + 2^14, whose ulp is 2^-9, rounds it (FPU,
        const uint32_t denorm = 141u << 23; // ties to even); its low bits count the 2^-9 units
        r = (uint8_t)(bits_of(float_of(a) + float_of(denorm)) - denorm);
    } else {
        uint32_t odd = (a >> 20) & 1;
        a += ((uint32_t)(7 - 127) << 23) + 0x7FFFFu + odd;
        r = (uint8_t)(a >> 20);
    }
    return (uint8_t)(r | (sign >> 24));
}

// ----------------------------------------------------------------------------
// dequantization

void fp8_dequant_rows(float *out, const uint8_t *q, const float *scale, int64_t K, int64_t r0,
                      int64_t nr, int bn, int bk) {
    AH_ASSERT(K > 0 && r0 >= 0 && nr >= 0 && bn > 0 && bk > 0);
    int64_t SK = (K + bk - 1) / bk;
#pragma omp parallel for num_threads(op_threads()) if (nr * K >= OP_PAR_MIN) schedule(static)
    for (int64_t r = 0; r < nr; r++) {
        const uint8_t *src = q + (r0 + r) * K;
        const float *srow = scale + (r0 + r) / bn * SK;
        float *dst = out + r * K;
        for (int64_t k0 = 0; k0 < K; k0 += bk) {
            float s = srow[k0 / bk];
            int64_t k1 = k0 + bk < K ? k0 + bk : K;
            for (int64_t k = k0; k < k1; k++)
                dst[k] = fp8_e4m3_table[src[k]] * s;
        }
    }
}

void fp8_dequant_rows_ref(float *out, const uint8_t *q, const float *scale, int64_t K, int64_t r0,
                          int64_t nr, int bn, int bk) {
    int64_t SK = (K + bk - 1) / bk;
    for (int64_t r = 0; r < nr; r++)
        for (int64_t k = 0; k < K; k++) {
            double s = scale[(r0 + r) / bn * SK + k / bk];
            out[r * K + k] = (float)((double)fp8_e4m3_ref(q[(r0 + r) * K + k]) * s);
        }
}

// rows of a panel: the N rows split evenly into panels of at most op_bf16_panel_floats(K, N) / K
// rows (as op_matmul_bf16 splits its)
static int64_t panel_rows(int64_t K, int64_t N) {
    int64_t most = op_bf16_panel_floats((int)K, (int)N) / K;
    int64_t n_panels = (N + most - 1) / most;
    return (N + n_panels - 1) / n_panels;
}

void fp8_matmul(float *out, const float *in, const uint8_t *q, const float *scale, int M, int K,
                int N, int bn, int bk, float *panel) {
    AH_ASSERT(M >= 0 && K > 0 && N > 0 && panel);
    if (M == 0) return;
    int64_t rows = panel_rows(K, N);
    for (int64_t n0 = 0; n0 < N; n0 += rows) {
        int64_t nr = N - n0 < rows ? N - n0 : rows;
        fp8_dequant_rows(panel, q, scale, K, n0, nr, bn, bk);
        op_matmul_ld(out + n0, N, in, panel, M, K, (int)nr);
    }
}

// ----------------------------------------------------------------------------
// quantization (init-model): Fp8Quantize.convert in float32

void fp8_quantize(uint8_t *q, float *scale_inv, const float *w, int64_t N, int64_t K, int bn,
                  int bk) {
    AH_ASSERT(N > 0 && K > 0 && bn > 0 && bk > 0);
    int64_t SN = (N + bn - 1) / bn, SK = (K + bk - 1) / bk;
    for (int64_t bi = 0; bi < SN; bi++)
        for (int64_t bj = 0; bj < SK; bj++) {
            int64_t r1 = (bi + 1) * bn < N ? (bi + 1) * bn : N;
            int64_t c1 = (bj + 1) * bk < K ? (bj + 1) * bk : K;
            float m = 0.0f;
            for (int64_t r = bi * bn; r < r1; r++)
                for (int64_t c = bj * bk; c < c1; c++)
                    m = fabsf(w[r * K + c]) > m ? fabsf(w[r * K + c]) : m;
            float s = m > 0.0f ? 448.0f / m : 1.0f;
            for (int64_t r = bi * bn; r < r1; r++)
                for (int64_t c = bj * bk; c < c1; c++) {
                    float v = w[r * K + c] * s;
                    v = v < -448.0f ? -448.0f : v > 448.0f ? 448.0f : v;
                    q[r * K + c] = fp8_e4m3_encode(v);
                }
            scale_inv[bi * SK + bj] = 1.0f / s;
        }
}
