// mxfp4.c - MXFP4 matrices of mxfp4.h
#include "model/mxfp4.h"

#include "model/ah.h"
#include "model/ops.h" // defines: op_bf16_panel_floats, op_threads

#include <cblas.h> // defines: cblas_sgemm
#include <math.h>

const float mxfp4_fp4_values[16] = {+0.0f, +0.5f, +1.0f, +1.5f, +2.0f, +3.0f, +4.0f, +6.0f,
                                    -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

float mxfp4_value(unsigned code, unsigned s) {
    return ldexpf(mxfp4_fp4_values[code & 15u], (int)(s & 255u) - 127); // torch.ldexp
}

// the stored row of row r
static int64_t stored(const struct mxfp4_mat *w, int64_t r) {
    return w->step > 1 ? r * w->step : r;
}

void mxfp4_rows(float *out, const struct mxfp4_mat *w, int64_t r0, int64_t nr, int K) {
    int64_t G = K / 32;
#pragma omp parallel for num_threads(op_threads()) if (nr * K >= OP_PAR_MIN) schedule(static)
    for (int64_t r = 0; r < nr; r++) {
        int64_t p = stored(w, r0 + r);
        const uint8_t *b = w->blocks + p * G * 16, *sc = w->scales + p * G;
        float *o = out + r * K;
        for (int64_t g = 0; g < G; g++) {
            float lut[16];
            for (int c = 0; c < 16; c++)
                lut[c] = mxfp4_value((unsigned)c, sc[g]);
            for (int j = 0; j < 16; j++) {
                uint8_t byte = b[g * 16 + j];
                o[g * 32 + 2 * j] = lut[byte & 0x0F];
                o[g * 32 + 2 * j + 1] = lut[byte >> 4];
            }
        }
    }
}

int64_t mxfp4_panel_floats(int K, int N) {
    return op_bf16_panel_floats(K, N);
}

void mxfp4_matmul(float *out, const float *in, const struct mxfp4_mat *w, int M, int K, int N,
                  float *panel) {
    AH_ASSERT(M >= 0 && K > 0 && K % 32 == 0 && N > 0);
    if (M == 0) return;
    // panels of equal rows (as op_matmul_bf16): no small remainder call
    int64_t most = mxfp4_panel_floats(K, N) / K, n_panels = (N + most - 1) / most;
    int64_t rows = (N + n_panels - 1) / n_panels;
    for (int64_t n0 = 0; n0 < N; n0 += rows) {
        int64_t nr = N - n0 < rows ? N - n0 : rows;
        mxfp4_rows(panel, w, n0, nr, K);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, (int)nr, K, 1.0f, in, K, panel, K,
                    0.0f, out + n0, N);
    }
}

void mxfp4_matmul_ref(float *out, const float *in, const struct mxfp4_mat *w, int M, int K, int N) {
    int64_t G = K / 32;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            int64_t p = stored(w, n);
            double acc = 0.0;
            for (int k = 0; k < K; k++) {
                uint8_t byte = w->blocks[p * G * 16 + k / 2];
                unsigned code = k % 2 ? byte >> 4 : byte & 15u; // low nibble: the even value
                double v =
                    (code & 8u ? -1.0 : 1.0) * // sign, then E2M1: 0, 0.5, 1, 1.5, 2, 3, 4, 6
                    ((code & 7u) < 2 ? 0.5 * (code & 1u)
                                     : ldexp(1.0 + 0.5 * (code & 1u), (int)((code & 7u) >> 1) - 1));
                v = ldexp(v, (int)w->scales[p * G + k / 32] - 127);
                acc += (double)in[(int64_t)m * K + k] * v;
            }
            out[(int64_t)m * N + n] = (float)acc;
        }
}
