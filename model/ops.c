// ops.c - float32 kernels (see ops.h). Naive twins accumulate in double.
#include "model/ops.h"

#include "model/ah.h"
#include "model/dnnl.h"
#include "model/region.h"
#include "model/vexp.h"

#ifdef __SSE__
#include <xmmintrin.h> // defines: _mm_max_ps, _mm_loadu_ps, _mm_storeu_ps, _mm_set1_ps
#endif
#include <cblas.h> // defines: cblas_sgemm, openblas_get_num_threads, openblas_set_num_threads
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h> // defines: omp_get_max_threads, omp_get_thread_num
#endif

#define PAR_MIN OP_PAR_MIN

static int n_threads; // set by the first op_threads() (kernels are called from one thread)

void op_set_threads(int n) {
    AH_ASSERT(n >= 1);
    n_threads = n;
}

int op_threads(void) {
    int n = n_threads;
    if (n == 0) {
#ifdef _OPENMP
        const char *e = getenv("OMP_NUM_THREADS");
        int t = e && *e ? omp_get_max_threads() : openblas_get_num_threads();
#else
        int t = 1;
#endif
        n = n_threads = t > 0 ? t : 1;
    }
    return n;
}

int op_blas_serial(int nt) {
    int was = openblas_get_num_threads();
    if (nt > 1) openblas_set_num_threads(1);
    return was;
}

void op_blas_restore(int nt, int was) {
    if (nt > 1) openblas_set_num_threads(was);
}

int op_thread_id(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

// ----------------------------------------------------------------------------
// matmul

// out (M, N; rows ldo apart) = in (M, K) . w^T, w (N, K) (trans) or (K, N): with op_threads() > 1
// the rows are split over the OpenMP threads, each part one sgemm on one OpenBLAS thread (one pool
// of threads, not OpenMP's and OpenBLAS's taking turns on the same cores). Inside a parallel
// region (experts, heads): one sgemm on the calling thread.
static void gemm_rows(float *out, int ldo, const float *in, const float *w, bool trans, int M,
                      int K, int N) {
    int nt = op_in_region() ? 1 : op_threads(), parts = M / OP_SPLIT_ROWS;
    parts = parts < nt ? parts : nt;
    int blas = op_blas_serial(nt);
#pragma omp parallel for num_threads(parts) if (parts > 1) schedule(static)
    for (int p = 0; p < (parts > 1 ? parts : 1); p++) {
        int m0 = p ? (int)((int64_t)M * p / parts) / 16 * 16 : 0;
        int m1 = p + 1 < parts ? (int)((int64_t)M * (p + 1) / parts) / 16 * 16 : M;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, trans ? CblasTrans : CblasNoTrans, m1 - m0, N, K,
                    1.0f, in + (int64_t)m0 * K, K, w, trans ? K : N, 0.0f, out + (int64_t)m0 * ldo,
                    ldo);
    }
    op_blas_restore(nt, blas);
}

void op_matmul(float *out, const float *in, const float *w, int M, int K, int N) {
    AH_ASSERT(M >= 0 && K > 0 && N > 0);
    if (M == 0) return;
    gemm_rows(out, N, in, w, true, M, K, N);
}

void op_matmul_ld(float *out, int ldo, const float *in, const float *w, int M, int K, int N) {
    AH_ASSERT(M >= 0 && K > 0 && N > 0 && ldo >= N);
    if (M == 0) return;
    gemm_rows(out, ldo, in, w, true, M, K, N);
}

void op_matmul_kn(float *out, const float *in, const float *w, int M, int K, int N) {
    AH_ASSERT(M >= 0 && K > 0 && N > 0);
    if (M == 0) return;
    gemm_rows(out, N, in, w, false, M, K, N);
}

// Rows of the largest panel: every row when N*K <= OP_PANEL_FLOATS, else about
// max(OP_PANEL_MIN_ROWS, OP_PANEL_FLOATS / K) - the N rows split evenly, so that no panel is a
// small remainder (a small call may take OpenBLAS's small-matrix path, which rounds differently).
static int64_t panel_rows(int64_t K, int64_t N) {
    int64_t most =
        OP_PANEL_FLOATS / K > OP_PANEL_MIN_ROWS ? OP_PANEL_FLOATS / K : OP_PANEL_MIN_ROWS;
    int64_t n_panels = (N + most - 1) / most;
    return (N + n_panels - 1) / n_panels;
}

int64_t op_bf16_panel_floats(int K, int N) {
    AH_ASSERT(K > 0 && N > 0);
    int64_t big = (int64_t)OP_PANEL_MIN_ROWS * K > OP_PANEL_FLOATS ? (int64_t)OP_PANEL_MIN_ROWS * K
                                                                   : OP_PANEL_FLOATS;
    return (int64_t)K * N < big ? (int64_t)K * N : big; // >= panel_rows(K, N) * K
}

// One sgemm per panel of whole weight rows (see ops.h): a 4096 x 8192 x 2048 product is one or two
// calls, not hundreds each repacking `in`.
static enum op_compute compute_mode;

int op_set_compute(enum op_compute c, char *msg, int msg_size) {
    if (c == OP_COMPUTE_BF16 && mm16_init(msg, msg_size) < 0) return -1;
    compute_mode = c;
    return 0;
}

enum op_compute op_compute(void) {
    return compute_mode;
}

void op_matmul_bf16(float *out, const float *in, const uint16_t *w16, int M, int K, int N,
                    float *panel) {
    AH_ASSERT(M >= 0 && K > 0 && N > 0);
    if (M == 0) return;
    if (compute_mode == OP_COMPUTE_BF16) {
        mm16_matmul(out, in, w16, M, K, N, op_threads());
        return;
    }
    int64_t rows = panel_rows(K, N);
    for (int64_t n0 = 0; n0 < N; n0 += rows) {
        int64_t nr = N - n0 < rows ? N - n0 : rows;
        const uint16_t *src = w16 + n0 * K;
#pragma omp parallel for num_threads(op_threads()) if (nr * K >= PAR_MIN) schedule(static)
        for (int64_t r = 0; r < nr; r++)
            for (int64_t k = 0; k < K; k++)
                panel[r * K + k] = op_bf16(src[r * K + k]);
        gemm_rows(out + n0, N, in, panel, true, M, K, (int)nr);
    }
}

void op_matmul_bf16_kn(float *out, const float *in, const uint16_t *w16, int M, int K, int N) {
    AH_ASSERT(compute_mode == OP_COMPUTE_BF16 && M >= 0 && K > 0 && N > 0);
    mm16_matmul_kn(out, in, w16, M, K, N, op_threads());
}

void op_matmul_ref(float *out, const float *in, const float *w, int M, int K, int N) {
    for (int m = 0; m < M; m++) {
        for (int n = 0; n < N; n++) {
            double acc = 0.0;
            for (int k = 0; k < K; k++)
                acc += (double)in[(int64_t)m * K + k] * (double)w[(int64_t)n * K + k];
            out[(int64_t)m * N + n] = (float)acc;
        }
    }
}

// ----------------------------------------------------------------------------
// rmsnorm

// 1 / sqrt(mean(x^2) + eps) of rows [0, n) (n <= NORM_ROWS, C apart) into r, each row's sum of
// squares in double in feature order, rounded once; the rows' chains side by side (lanes past n
// repeat the last row, their results dropped), so that their additions overlap
#define NORM_ROWS 8
static void rms_inv_rows(float *r, const float *x, int n, int C, double eps) {
    const float *row[NORM_ROWS];
    double ss[NORM_ROWS] = {0.0};
    for (int i = 0; i < NORM_ROWS; i++)
        row[i] = x + (int64_t)(i < n ? i : n - 1) * C;
    for (int c = 0; c < C; c++)
        for (int i = 0; i < NORM_ROWS; i++) {
            double v = row[i][c];
            ss[i] += v * v;
        }
    for (int i = 0; i < n; i++)
        r[i] = (float)(1.0 / sqrt(ss[i] / C + eps));
}

// rows [t0, t0 + NORM_ROWS) of T, those that exist
static int group_rows(int64_t t0, int T) {
    return T - t0 < NORM_ROWS ? (int)(T - t0) : NORM_ROWS;
}

static int64_t norm_groups(int T) {
    return ((int64_t)T + NORM_ROWS - 1) / NORM_ROWS;
}

void op_rmsnorm(float *out, const float *in, const float *w, int T, int C, float eps) {
#pragma omp parallel for num_threads(op_threads()) if ((int64_t)T * C >= PAR_MIN) schedule(static)
    for (int64_t g = 0; g < norm_groups(T); g++) {
        float r[NORM_ROWS];
        int64_t t0 = g * NORM_ROWS;
        rms_inv_rows(r, in + t0 * C, group_rows(t0, T), C, (double)eps);
        for (int64_t t = t0; t < t0 + group_rows(t0, T); t++) {
            const float *x = in + t * C;
            float *o = out + t * C;
            for (int c = 0; c < C; c++)
                o[c] = x[c] * r[t - t0] * w[c];
        }
    }
}

void op_rmsnorm_ref(float *out, const float *in, const float *w, int T, int C, float eps) {
    for (int t = 0; t < T; t++) {
        double ss = 0.0;
        for (int c = 0; c < C; c++)
            ss += (double)in[(int64_t)t * C + c] * (double)in[(int64_t)t * C + c];
        double r = 1.0 / sqrt(ss / C + (double)eps);
        for (int c = 0; c < C; c++)
            out[(int64_t)t * C + c] = (float)((double)in[(int64_t)t * C + c] * r * (double)w[c]);
    }
}

void op_rmsnorm_1p(float *out, const float *in, const float *w, int T, int C, double eps) {
#pragma omp parallel for num_threads(op_threads()) if ((int64_t)T * C >= PAR_MIN) schedule(static)
    for (int64_t g = 0; g < norm_groups(T); g++) {
        float r[NORM_ROWS];
        int64_t t0 = g * NORM_ROWS;
        rms_inv_rows(r, in + t0 * C, group_rows(t0, T), C, eps);
        for (int64_t t = t0; t < t0 + group_rows(t0, T); t++) {
            const float *x = in + t * C;
            float *o = out + t * C;
            for (int c = 0; c < C; c++)
                o[c] = x[c] * r[t - t0] * (1.0f + w[c]);
        }
    }
}

void op_rmsnorm_1p_ref(float *out, const float *in, const float *w, int T, int C, double eps) {
    for (int t = 0; t < T; t++) {
        const float *x = in + (int64_t)t * C;
        double ss = 0.0;
        for (int c = 0; c < C; c++)
            ss += (double)x[c] * (double)x[c];
        double r = 1.0 / sqrt(ss / C + eps);
        for (int c = 0; c < C; c++)
            out[(int64_t)t * C + c] = (float)((double)x[c] * r * (1.0 + (double)w[c]));
    }
}

// ----------------------------------------------------------------------------
// layernorm

// the mean and 1 / sqrt(var + eps) of rows [0, n) (n <= NORM_ROWS, C apart), each summed in
// double in feature order, the rows' chains side by side as rms_inv_rows's
static void ln_stats_rows(double *mu, float *r, const float *x, int n, int C, float eps) {
    const float *row[NORM_ROWS];
    double m[NORM_ROWS] = {0.0}, var[NORM_ROWS] = {0.0};
    for (int i = 0; i < NORM_ROWS; i++)
        row[i] = x + (int64_t)(i < n ? i : n - 1) * C;
    for (int c = 0; c < C; c++)
        for (int i = 0; i < NORM_ROWS; i++)
            m[i] += (double)row[i][c];
    for (int i = 0; i < NORM_ROWS; i++)
        m[i] /= C;
    for (int c = 0; c < C; c++)
        for (int i = 0; i < NORM_ROWS; i++) {
            double d = (double)row[i][c] - m[i];
            var[i] += d * d;
        }
    for (int i = 0; i < n; i++) {
        mu[i] = m[i];
        r[i] = (float)(1.0 / sqrt(var[i] / C + (double)eps));
    }
}

void op_layernorm(float *out, const float *in, const float *w, const float *b, int T, int C,
                  float eps) {
#pragma omp parallel for num_threads(op_threads()) if ((int64_t)T * C >= PAR_MIN) schedule(static)
    for (int64_t g = 0; g < norm_groups(T); g++) {
        double mu[NORM_ROWS];
        float r[NORM_ROWS];
        int64_t t0 = g * NORM_ROWS;
        ln_stats_rows(mu, r, in + t0 * C, group_rows(t0, T), C, eps);
        for (int64_t t = t0; t < t0 + group_rows(t0, T); t++) {
            const float *x = in + t * C;
            float *o = out + t * C;
            for (int c = 0; c < C; c++)
                o[c] = (float)((double)x[c] - mu[t - t0]) * r[t - t0] * w[c] + b[c];
        }
    }
}

void op_layernorm_ref(float *out, const float *in, const float *w, const float *b, int T, int C,
                      float eps) {
    for (int t = 0; t < T; t++) {
        const float *x = in + (int64_t)t * C;
        double mu = 0.0, var = 0.0;
        for (int c = 0; c < C; c++)
            mu += (double)x[c];
        mu /= C;
        for (int c = 0; c < C; c++)
            var += ((double)x[c] - mu) * ((double)x[c] - mu);
        double r = 1.0 / sqrt(var / C + (double)eps);
        for (int c = 0; c < C; c++)
            out[(int64_t)t * C + c] =
                (float)(((double)x[c] - mu) * r * (double)w[c] + (double)b[c]);
    }
}

// ----------------------------------------------------------------------------
// rope (rotate-half)

void op_rope_table(float *cos_t, float *sin_t, int T, int head_dim, int n_rot, double theta) {
    AH_ASSERT(n_rot % 2 == 0 && n_rot <= head_dim);
    int half = n_rot / 2;
    for (int j = 0; j < half; j++) {
        double inv_freq = pow(theta, -2.0 * j / head_dim);
        for (int t = 0; t < T; t++) {
            double a = t * inv_freq;
            cos_t[(int64_t)t * half + j] = (float)cos(a);
            sin_t[(int64_t)t * half + j] = (float)sin(a);
        }
    }
}

void op_rope_table_f32(float *cos_t, float *sin_t, int T, int n_rot, const float *inv_freq,
                       float A) {
    int half = n_rot / 2;
    for (int t = T - 1; t >= 0; t--) // row 0 last: inv_freq may live there
        for (int j = 0; j < half; j++) {
            float ang = (float)t * inv_freq[j];
            cos_t[(int64_t)t * half + j] = (float)cos((double)ang) * A;
            sin_t[(int64_t)t * half + j] = (float)sin((double)ang) * A;
        }
}

void op_rope(float *x, const float *cos_t, const float *sin_t, int T, int H, int head_dim,
             int n_rot, int stride) {
    int half = n_rot / 2;
#pragma omp parallel for num_threads(op_threads()) if ((int64_t)T * H * n_rot >= PAR_MIN) \
    schedule(static)
    for (int t = 0; t < T; t++) {
        const float *c = cos_t + (int64_t)t * half;
        const float *s = sin_t + (int64_t)t * half;
        for (int h = 0; h < H; h++) {
            float *v = x + (int64_t)t * stride + (int64_t)h * head_dim;
            for (int j = 0; j < half; j++) {
                float a = v[j], b = v[j + half];
                v[j] = a * c[j] - b * s[j];
                v[j + half] = b * c[j] + a * s[j];
            }
        }
    }
}

void op_rope_ref(float *x, int T, int H, int head_dim, int n_rot, int stride, double theta) {
    int half = n_rot / 2;
    for (int t = 0; t < T; t++) {
        for (int h = 0; h < H; h++) {
            float *v = x + (int64_t)t * stride + (int64_t)h * head_dim;
            for (int j = 0; j < half; j++) {
                double ang = t * pow(theta, -2.0 * j / head_dim);
                double a = v[j], b = v[j + half];
                v[j] = (float)(a * cos(ang) - b * sin(ang));
                v[j + half] = (float)(b * cos(ang) + a * sin(ang));
            }
        }
    }
}

// ----------------------------------------------------------------------------
// softmax

float op_max_from(const float *x, int n, float mx) {
    int i = 0;
#ifdef __SSE__
    __m128 m[4] = {_mm_set1_ps(mx), _mm_set1_ps(mx), _mm_set1_ps(mx), _mm_set1_ps(mx)};
    for (; i + 16 <= n; i += 16)
        for (int l = 0; l < 4; l++) // maxps(v, m): v > m ? v : m, lane by lane
            m[l] = _mm_max_ps(_mm_loadu_ps(x + i + 4 * l), m[l]);
    float lane[16];
    for (int l = 0; l < 4; l++)
        _mm_storeu_ps(lane + 4 * l, m[l]);
    for (int l = 0; l < 16; l++)
        mx = lane[l] > mx ? lane[l] : mx;
#endif
    for (; i < n; i++)
        mx = x[i] > mx ? x[i] : mx;
    return mx;
}

void op_exp_minus(float *x, int n, float m) {
    for (int i = 0; i < n; i++)
        x[i] -= m;
    vexp_expf(x, x, n);
}

void op_softmax_within_rows(float *x, int64_t ld, int n, const int *a0, const int *a1,
                            const int *b0, const int *b1) {
    AH_ASSERT(n >= 1 && n <= OP_SOFTMAX_ROWS);
    int na[OP_SOFTMAX_ROWS] = {0}, len[OP_SOFTMAX_ROWS] = {0}, most = 0;
    int64_t oa[OP_SOFTMAX_ROWS] = {0},
            ob[OP_SOFTMAX_ROWS] = {0}; // entry p of row k: at oa or ob + p
    float sum[OP_SOFTMAX_ROWS] = {0.0f};
    for (int k = 0; k < n; k++) {
        float *r = x + k * ld;
        AH_ASSERT(0 <= a0[k] && a0[k] <= a1[k] && 0 <= b0[k] && b0[k] <= b1[k]);
        AH_ASSERT(a1[k] <= b0[k] || b1[k] <= a0[k]);
        AH_ASSERT(a1[k] > a0[k] || b1[k] > b0[k]);
        float mx =
            op_max_from(r + b0[k], b1[k] - b0[k], op_max_from(r + a0[k], a1[k] - a0[k], -INFINITY));
        op_exp_minus(r + a0[k], a1[k] - a0[k], mx);
        op_exp_minus(r + b0[k], b1[k] - b0[k], mx);
        na[k] = a1[k] - a0[k], len[k] = na[k] + b1[k] - b0[k];
        oa[k] = k * ld + a0[k], ob[k] = k * ld + b0[k] - na[k];
        most = len[k] > most ? len[k] : most;
    }
    // each row's sum in its own order (its a range, then its b range), all OP_SOFTMAX_ROWS lanes
    // side by side in registers; a lane past its row's entries (or past n) adds +0, which leaves
    // a sum of exponentials (>= +0, or NaN) as it is. One row: its chain alone.
    if (n == 1)
        for (int p = 0; p < most; p++)
            sum[0] += x[(p < na[0] ? oa[0] : ob[0]) + p];
    else
        for (int p = 0; p < most; p++)
            for (int k = 0; k < OP_SOFTMAX_ROWS; k++)
                sum[k] += p < len[k] ? x[(p < na[k] ? oa[k] : ob[k]) + p] : 0.0f;
    for (int k = 0; k < n; k++) {
        float *r = x + k * ld, inv = 1.0f / sum[k];
        for (int i = a0[k]; i < a1[k]; i++)
            r[i] *= inv;
        for (int i = b0[k]; i < b1[k]; i++)
            r[i] *= inv;
    }
}

void op_softmax_within(float *x, int a0, int a1, int b0, int b1) {
    op_softmax_within_rows(x, 0, 1, &a0, &a1, &b0, &b1);
}

void op_softmax_ranges(float *x, int n, int a0, int a1, int b0, int b1) {
    AH_ASSERT(a1 <= n && b1 <= n);
    op_softmax_within(x, a0, a1, b0, b1);
    // zero what lies outside both: order the ranges, an empty one collapsing onto the other's end
    if (a1 == a0) a0 = a1 = b1;
    if (b1 == b0) b0 = b1 = a1;
    if (b0 < a0) {
        int t0 = a0, t1 = a1;
        a0 = b0, a1 = b1, b0 = t0, b1 = t1;
    }
    memset(x, 0, (size_t)a0 * sizeof(float));
    memset(x + a1, 0, (size_t)(b0 - a1) * sizeof(float));
    memset(x + b1, 0, (size_t)(n - b1) * sizeof(float));
}

void op_softmax_rows_ref(float *x, int rows, int n) {
    for (int r = 0; r < rows; r++) {
        float *v = x + (int64_t)r * n;
        double mx = -INFINITY, sum = 0.0;
        for (int i = 0; i < n; i++)
            mx = (double)v[i] > mx ? (double)v[i] : mx;
        for (int i = 0; i < n; i++)
            sum += exp((double)v[i] - mx);
        for (int i = 0; i < n; i++)
            v[i] = (float)(exp((double)v[i] - mx) / sum);
    }
}

// ----------------------------------------------------------------------------
// elementwise

// e[0..m) = expf(-x[0..m)), m <= EXP_BLOCK: SiLU's and the sigmoid's exponentials a block at a
// time through vexp.h (libm's bits, so each value is what op_act1 gives)
#define EXP_BLOCK 256
static void exp_neg(float *e, const float *x, int m) {
    for (int i = 0; i < m; i++)
        e[i] = -x[i];
    vexp_expf(e, e, m);
}
static int64_t exp_blocks(int64_t n) {
    return (n + EXP_BLOCK - 1) / EXP_BLOCK;
}
static int block_len(int64_t b, int64_t n) {
    return n - b * EXP_BLOCK < EXP_BLOCK ? (int)(n - b * EXP_BLOCK) : EXP_BLOCK;
}

void op_swiglu(float *out, const float *gate, const float *up, int64_t n) {
#pragma omp parallel for num_threads(op_threads()) if (n >= PAR_MIN) schedule(static)
    for (int64_t b = 0; b < exp_blocks(n); b++) {
        int64_t i0 = b * EXP_BLOCK;
        int m = block_len(b, n);
        float e[EXP_BLOCK];
        exp_neg(e, gate + i0, m);
        for (int i = 0; i < m; i++)
            out[i0 + i] = gate[i0 + i] / (1.0f + e[i]) * up[i0 + i];
    }
}

void op_swiglu_ref(float *out, const float *gate, const float *up, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        double g = gate[i];
        out[i] = (float)(g / (1.0 + exp(-g)) * (double)up[i]);
    }
}

// (the sigmoid's exponentials a block at a time: act_sigmoid's bits)
void op_swiglu_clamp(float *up, const float *gate, int64_t n, float alpha, float limit) {
#pragma omp parallel for num_threads(op_threads()) if (n >= PAR_MIN) schedule(static)
    for (int64_t b = 0; b < exp_blocks(n); b++) {
        int64_t i0 = b * EXP_BLOCK;
        int m = block_len(b, n);
        float g[EXP_BLOCK], e[EXP_BLOCK];
        for (int i = 0; i < m; i++) {
            g[i] = gate[i0 + i] > limit ? limit : gate[i0 + i]; // NaN stays NaN, as torch.clamp
            e[i] = g[i] * alpha;
        }
        exp_neg(e, e, m);
        for (int i = 0; i < m; i++) {
            float y = up[i0 + i], u = y > limit ? limit : y < -limit ? -limit : y;
            up[i0 + i] = (u + 1.0f) * (g[i] * (1.0f / (1.0f + e[i])));
        }
    }
}

void op_swiglu_clamp_ref(float *up, const float *gate, int64_t n, float alpha, float limit) {
    for (int64_t i = 0; i < n; i++) {
        double l = limit, x = gate[i], y = up[i], g = x > l ? l : x;
        double u = y > l ? l : y < -l ? -l : y;
        up[i] = (float)((u + 1.0) * g / (1.0 + exp(-g * (double)alpha)));
    }
}

void op_add(float *out, const float *a, const float *b, int64_t n) {
#pragma omp parallel for num_threads(op_threads()) if (n >= PAR_MIN) schedule(static)
    for (int64_t i = 0; i < n; i++)
        out[i] = a[i] + b[i];
}

void op_add_bias(float *x, const float *b, int64_t rows, int64_t n) {
#pragma omp parallel for num_threads(op_threads()) if (rows * n >= PAR_MIN) schedule(static)
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < n; j++)
            x[r * n + j] += b[j];
}

// (a group's factor read once: no division an element)
void op_mul(float *x, const float *s, int64_t n, int64_t group) {
    if (group == 1) {
#pragma omp parallel for num_threads(op_threads()) if (n >= PAR_MIN) schedule(static)
        for (int64_t i = 0; i < n; i++)
            x[i] *= s[i];
        return;
    }
    int64_t n_groups = (n + group - 1) / group;
#pragma omp parallel for num_threads(op_threads()) if (n >= PAR_MIN) schedule(static)
    for (int64_t g = 0; g < n_groups; g++) {
        int64_t end = (g + 1) * group < n ? (g + 1) * group : n;
        for (int64_t i = g * group; i < end; i++)
            x[i] *= s[g];
    }
}

void op_scale(float *x, float s, int64_t n) {
#pragma omp parallel for num_threads(op_threads()) if (n >= PAR_MIN) schedule(static)
    for (int64_t i = 0; i < n; i++)
        x[i] *= s;
}

// ----------------------------------------------------------------------------
// activations

int op_act_parse(const char *name) {
    static const struct {
        const char *name;
        enum op_act_kind act;
    } known[] = {{"silu", OP_ACT_SILU},
                 {"swish", OP_ACT_SILU},
                 {"gelu_pytorch_tanh", OP_ACT_GELU_TANH},
                 {"gelu_new", OP_ACT_GELU_TANH},
                 {"gelu_fast", OP_ACT_GELU_TANH},
                 {"gelu", OP_ACT_GELU},
                 {"relu", OP_ACT_RELU}};
    for (size_t i = 0; name && i < sizeof known / sizeof known[0]; i++)
        if (!strcmp(name, known[i].name)) return (int)known[i].act;
    return -1;
}

// SiLU (x / (1 + e^-x)) or the sigmoid (1 / (1 + e^-x)) in place, a block of exponentials at a time
static void act_exp(float *x, int64_t n, bool silu) {
#pragma omp parallel for num_threads(op_threads()) if (n >= PAR_MIN) schedule(static)
    for (int64_t b = 0; b < exp_blocks(n); b++) {
        float *v = x + b * EXP_BLOCK, e[EXP_BLOCK];
        int m = block_len(b, n);
        exp_neg(e, v, m);
        for (int i = 0; i < m; i++)
            v[i] = (silu ? v[i] : 1.0f) / (1.0f + e[i]);
    }
}

void op_act_mul(float *up, const float *gate, int64_t n, enum op_act_kind act) {
    if (act == OP_ACT_SILU) { // silu(g) * up: multiplication commutes, the same bits
        op_swiglu(up, gate, up, n);
        return;
    }
#pragma omp parallel for num_threads(op_threads()) if (n >= PAR_MIN) schedule(static)
    for (int64_t i = 0; i < n; i++)
        up[i] *= op_act1(act, gate[i]);
}

void op_act(float *x, int64_t n, enum op_act_kind act) {
    if (act == OP_ACT_SILU || act == OP_ACT_SIGMOID) {
        act_exp(x, n, act == OP_ACT_SILU);
        return;
    }
#pragma omp parallel for num_threads(op_threads()) if (n >= PAR_MIN) schedule(static)
    for (int64_t i = 0; i < n; i++)
        x[i] = op_act1(act, x[i]);
}

static double act_ref(enum op_act_kind act, double x) {
    switch (act) {
        case OP_ACT_GELU_TANH:
            return 0.5 * x *
                   (1.0 + tanh(sqrt(2.0 / 3.14159265358979323846) * (x + 0.044715 * x * x * x)));
        case OP_ACT_GELU:
            return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
        case OP_ACT_RELU:
            return x > 0.0 ? x : 0.0;
        case OP_ACT_SOFTPLUS:
            return x > 20.0 ? x : log1p(exp(x));
        case OP_ACT_SIGMOID:
            return 1.0 / (1.0 + exp(-x));
        default:
            return x / (1.0 + exp(-x));
    }
}

void op_act_ref(float *x, int64_t n, enum op_act_kind act) {
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)act_ref(act, (double)x[i]);
}
