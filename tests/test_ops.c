// test_ops.c - kernels against their naive twins on seeded inputs, odd shapes included.
#include "model/blocks.h"
#include "model/ops.h"
#include "model/simdpeak.h"
#include "tests/check.h"

#include <cblas.h> // defines: openblas_get_num_threads
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void test_matmul_matches_naive(void) {
    const int shapes[][3] = {{1, 1, 1}, {3, 5, 7}, {17, 33, 9}, {64, 384, 384}, {65, 100, 1}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int M = shapes[s][0], K = shapes[s][1], N = shapes[s][2];
        float *in = malloc(sizeof(float) * (size_t)(M * K)),
              *w = malloc(sizeof(float) * (size_t)(N * K));
        float *a = malloc(sizeof(float) * (size_t)(M * N)),
              *b = malloc(sizeof(float) * (size_t)(M * N));
        check_fill(in, M * K, 1 + s);
        check_fill(w, N * K, 100 + s);
        op_matmul(a, in, w, M, K, N);
        op_matmul_ref(b, in, w, M, K, N);
        check_close("matmul", a, b, M * N, 1e-5f, 1e-5f);
        free(in), free(w), free(a), free(b);
    }
}

// Whether this BLAS gives each output element the same bits when the weight rows come in two
// calls as in one (c: the one call). OpenBLAS 0.3.21's Zen kernels do not: there a column's sum
// depends on N, so panelling can only be held to the float64 reference, not to one sgemm.
static bool sgemm_splits_exactly(const float *c, const float *in, const float *w, int M, int K,
                                 int N, float *tmp) {
    int h = N / 2;
    op_matmul(tmp, in, w, M, K, h);
    for (int i = 0; i < M; i++)
        if (memcmp(tmp + (size_t)i * h, c + (size_t)i * N, sizeof(float) * (size_t)h)) return false;
    return true;
}

// BF16 weights widened panel by panel, on odd shapes: equal to the naive float64 matmul of the
// widened matrix, and at M >= 64 bitwise equal to one float32 sgemm of the whole widened matrix
// (the result does not depend on the panel size). K = 4099 allows 1024-row panels: N = 2050
// makes three of 684/684/682 rows.
static void test_matmul_bf16_panels(void) {
    const int shapes[][3] = {{1, 1, 1},    {5, 700, 250},    {17, 33, 9},
                             {3, 4099, 5}, {64, 4099, 2050}, {0, 8, 8}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int M = shapes[s][0], K = shapes[s][1], N = shapes[s][2];
        size_t mk = (size_t)M * K + 1, nk = (size_t)N * K, mn = (size_t)M * N + 1;
        float *in = malloc(sizeof(float) * mk), *wf = malloc(sizeof(float) * nk);
        uint16_t *w16 = malloc(sizeof(uint16_t) * nk);
        float *a = malloc(sizeof(float) * mn), *b = malloc(sizeof(float) * mn),
              *c = malloc(sizeof(float) * mn);
        float *panel = malloc(sizeof(float) * (size_t)op_bf16_panel_floats(K, N));
        check_fill(in, (int64_t)mk, 7 + s);
        check_fill(wf, (int64_t)nk, 8 + s);
        for (size_t i = 0; i < nk; i++) { // truncate to bf16: the top 16 bits
            uint32_t u;
            memcpy(&u, &wf[i], 4);
            w16[i] = (uint16_t)(u >> 16);
            wf[i] = op_bf16(w16[i]);
        }
        op_matmul_bf16(a, in, w16, M, K, N, panel);
        op_matmul_ref(b, in, wf, M, K, N);
        check_close("matmul_bf16", a, b, (int64_t)M * N, 1e-6f * sqrtf((float)K), 1e-5f);
        if (M >= 64) {
            op_matmul(c, in, wf, M, K, N);
            if (sgemm_splits_exactly(c, in, wf, M, K, N, b))
                CHECK(memcmp(a, c, sizeof(float) * (size_t)M * N) == 0);
            op_matmul_bf16(b, in, w16, M, K, N, panel); // same call, same bits
            CHECK(memcmp(a, b, sizeof(float) * (size_t)M * N) == 0);
        }
        free(in), free(wf), free(w16), free(a), free(b), free(c), free(panel);
    }
    CHECK(op_bf16(0x3f80) == 1.0f && op_bf16(0xc000) == -2.0f);
}

// At 2 threads the GEMMs split their rows (parts of >= OP_SPLIT_ROWS): every row written (the
// outputs start as NaN) and equal to the float64 product; OpenBLAS's thread count restored.
static void test_matmul_threads(void) {
    const int shapes[][3] = {{600, 70, 33}, {1000, 130, 257}, {511, 9, 5}, {100, 40, 40}};
    int was = op_threads(), blas = openblas_get_num_threads();
    op_set_threads(2);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int M = shapes[s][0], K = shapes[s][1], N = shapes[s][2];
        size_t mk = (size_t)M * K, nk = (size_t)N * K, mn = (size_t)M * N;
        float *in = malloc(sizeof(float) * mk), *w = malloc(sizeof(float) * nk);
        float *wt = malloc(sizeof(float) * nk), *a = malloc(sizeof(float) * mn);
        float *b = malloc(sizeof(float) * mn);
        uint16_t *w16 = malloc(sizeof(uint16_t) * nk);
        float *panel = malloc(sizeof(float) * (size_t)op_bf16_panel_floats(K, N));
        check_fill(in, (int64_t)mk, 31 + s);
        check_fill(w, (int64_t)nk, 32 + s);
        for (size_t i = 0; i < nk; i++) { // bf16 weights; wt: the (K, N) transpose
            uint32_t u;
            memcpy(&u, &w[i], 4);
            w16[i] = (uint16_t)(u >> 16);
            w[i] = op_bf16(w16[i]);
        }
        for (int n = 0; n < N; n++)
            for (int k = 0; k < K; k++)
                wt[(size_t)k * N + n] = w[(size_t)n * K + k];
        op_matmul_ref(b, in, w, M, K, N);
        for (int v = 0; v < 3; v++) {
            for (size_t i = 0; i < mn; i++)
                a[i] = NAN;
            if (v == 0) op_matmul(a, in, w, M, K, N);
            if (v == 1) op_matmul_kn(a, in, wt, M, K, N);
            if (v == 2) op_matmul_bf16(a, in, w16, M, K, N, panel);
            check_close("matmul 2 threads", a, b, (int64_t)mn, 1e-6f * sqrtf((float)K), 1e-5f);
            CHECK(openblas_get_num_threads() == blas);
        }
        free(in), free(w), free(wt), free(a), free(b), free(w16), free(panel);
    }
    op_set_threads(was);
}

// the panel is whole matrices up to OP_PANEL_FLOATS, else blocks of >= OP_PANEL_MIN_ROWS rows,
// and grows with K and with N (callers size one buffer from the largest of each)
static void test_bf16_panel_floats(void) {
    CHECK_EQ(op_bf16_panel_floats(33, 9), 33 * 9);
    CHECK_EQ(op_bf16_panel_floats(2048, 8192), OP_PANEL_FLOATS);
    CHECK_EQ(op_bf16_panel_floats(8192, 2048), (int64_t)OP_PANEL_MIN_ROWS * 8192);
    CHECK_EQ(op_bf16_panel_floats(4099, 2050), (int64_t)OP_PANEL_MIN_ROWS * 4099);
    CHECK_EQ(op_bf16_panel_floats(2048, 100352), OP_PANEL_FLOATS);
    int64_t prev = 0;
    for (int K = 1; K <= 1 << 16; K = K * 3 + 1)
        for (int N = 1; N <= 1 << 18; N = N * 5 + 3) {
            int64_t f = op_bf16_panel_floats(K, N);
            CHECK(f <= (int64_t)K * N && f >= op_bf16_panel_floats(K, N / 2 + 1));
            CHECK(K == 1 || f >= op_bf16_panel_floats(K / 2 + 1, N));
            prev = f;
        }
    CHECK(prev > 0);
}

// T = 7 runs on one thread, T = 70 is split over op_threads()
static void test_rmsnorm_matches_naive(void) {
    static float x[70 * 385], w[385], a[70 * 385], b[70 * 385];
    int C = 385;
    for (int T = 7; T <= 70; T += 63) {
        check_fill(x, T * C, 2);
        check_fill(w, C, 3);
        op_rmsnorm(a, x, w, T, C, 1e-6f);
        op_rmsnorm_ref(b, x, w, T, C, 1e-6f);
        check_close("rmsnorm", a, b, T * C, 1e-6f, 1e-5f);
        memcpy(a, x, sizeof x); // in place
        op_rmsnorm(a, a, w, T, C, 1e-6f);
        check_close("rmsnorm in place", a, b, T * C, 1e-6f, 1e-5f);
    }
}

// RMSNorm and Gemma's (1 + w) one (rows 8 at a time, their sums interleaved) bit for bit the
// formula a row at a time: the sum of squares in double in feature order, rounded once; 21 rows
// (2 groups and 5 left), widths 1 and 385, in place too
static void test_rmsnorm_bits(void) {
    static float x[21 * 385], w[385], a[21 * 385], b[21 * 385];
    const int widths[] = {1, 385}, T = 21;
    for (int k = 0; k < 2; k++)
        for (int one_p = 0; one_p < 2; one_p++) {
            int C = widths[k];
            check_fill(x, T * C, 15);
            check_fill(w, C, 16);
            for (int t = 0; t < T; t++) {
                double ss = 0.0;
                for (int c = 0; c < C; c++)
                    ss += (double)x[t * C + c] * (double)x[t * C + c];
                float r = (float)(1.0 / sqrt(ss / C + (one_p ? 1e-6 : (double)(float)1e-6)));
                for (int c = 0; c < C; c++)
                    b[t * C + c] = x[t * C + c] * r * (one_p ? 1.0f + w[c] : w[c]);
            }
            memcpy(a, x, sizeof x);
            if (one_p)
                op_rmsnorm_1p(a, a, w, T, C, 1e-6);
            else
                op_rmsnorm(a, a, w, T, C, (float)1e-6);
            CHECK(!memcmp(a, b, sizeof(float) * (size_t)(T * C)));
        }
}

// Gemma's (1 + w) RMSNorm and LayerNorm against their float64 twins, out of place and in place,
// on rows of odd widths; LayerNorm's inputs offset by 3 so that the mean matters
static void test_norms_match_naive(void) {
    static float x[70 * 385], w[385], bias[385], a[70 * 385], b[70 * 385];
    const int widths[] = {1, 7, 385};
    for (size_t k = 0; k < sizeof widths / sizeof widths[0]; k++)
        for (int T = 7; T <= 70; T += 63) {
            int C = widths[k], n = T * C;
            check_fill(x, n, 12);
            check_fill(w, C, 13);
            check_fill(bias, C, 14);
            op_rmsnorm_1p(a, x, w, T, C, 1e-6);
            op_rmsnorm_1p_ref(b, x, w, T, C, 1e-6);
            check_close("rmsnorm_1p", a, b, n, 1e-6f, 1e-5f);
            memcpy(a, x, sizeof(float) * (size_t)n);
            op_rmsnorm_1p(a, a, w, T, C, 1e-6);
            check_close("rmsnorm_1p in place", a, b, n, 1e-6f, 1e-5f);
            for (int i = 0; i < n; i++)
                x[i] += 3.0f;
            op_layernorm(a, x, w, bias, T, C, 1e-5f);
            op_layernorm_ref(b, x, w, bias, T, C, 1e-5f);
            check_close("layernorm", a, b, n, 1e-6f, 1e-5f);
            memcpy(a, x, sizeof(float) * (size_t)n);
            op_layernorm(a, a, w, bias, T, C, 1e-5f);
            check_close("layernorm in place", a, b, n, 1e-6f, 1e-5f);
        }
}

// The norms' float32 arithmetic exactly (the forward passes' outputs depend on its every bit):
// sums of squares and moments in double, one float factor r, then x r (1 + w) and
// (float)(x - mean) r w + b in float; on one thread and on two (T C above OP_PAR_MIN), the same
// bits
static void test_norms_exact_threads(void) {
    enum { T = 70, C = 385 };
    static float x[T * C], w[C], bias[C], a[T * C], b[T * C], want[T * C], want_ln[T * C];
    check_fill(x, T * C, 15);
    check_fill(w, C, 16);
    check_fill(bias, C, 17);
    for (int t = 0; t < T; t++) {
        const float *v = x + t * C;
        double ss = 0.0, mu = 0.0, var = 0.0;
        for (int c = 0; c < C; c++)
            ss += (double)v[c] * (double)v[c], mu += (double)v[c];
        mu /= C;
        for (int c = 0; c < C; c++)
            var += ((double)v[c] - mu) * ((double)v[c] - mu);
        float r = (float)(1.0 / sqrt(ss / C + 1e-6)),
              q = (float)(1.0 / sqrt(var / C + (double)1e-5f));
        for (int c = 0; c < C; c++) {
            want[t * C + c] = v[c] * r * (1.0f + w[c]);
            want_ln[t * C + c] = (float)((double)v[c] - mu) * q * w[c] + bias[c];
        }
    }
    int was = op_threads();
    for (int nt = 1; nt <= 2; nt++) {
        op_set_threads(nt);
        op_rmsnorm_1p(a, x, w, T, C, 1e-6);
        CHECK(!memcmp(a, want, sizeof a));
        op_layernorm(b, x, w, bias, T, C, 1e-5f);
        CHECK(!memcmp(b, want_ln, sizeof b));
    }
    op_set_threads(was);
}

// every activation of the enum against the float64 twin, both sides of softplus' threshold
static void test_act_matches_naive(void) {
    enum { N = 801 };
    float x[N], a[N], b[N];
    for (int k = OP_ACT_SILU; k <= OP_ACT_SIGMOID; k++) {
        for (int i = 0; i < N; i++)
            x[i] = (float)(i - 400) / 16.0f; // -25 .. 25
        memcpy(a, x, sizeof x);
        memcpy(b, x, sizeof x);
        op_act(a, N, (enum op_act_kind)k);
        op_act_ref(b, N, (enum op_act_kind)k);
        check_close("act", a, b, N, 1e-6f, 2e-6f);
    }
}

// the config names of transformers' ACT2FN that the MLPs accept, and nothing else
static void test_act_parse(void) {
    CHECK_EQ(op_act_parse("silu"), OP_ACT_SILU);
    CHECK_EQ(op_act_parse("swish"), OP_ACT_SILU);
    CHECK_EQ(op_act_parse("gelu"), OP_ACT_GELU);
    CHECK_EQ(op_act_parse("gelu_new"), OP_ACT_GELU_TANH);
    CHECK_EQ(op_act_parse("gelu_pytorch_tanh"), OP_ACT_GELU_TANH);
    CHECK_EQ(op_act_parse("gelu_fast"), OP_ACT_GELU_TANH);
    CHECK_EQ(op_act_parse("relu"), OP_ACT_RELU);
    CHECK_EQ(op_act_parse("gelu_10"), -1);
    CHECK_EQ(op_act_parse("sigmoid"), -1);
    CHECK_EQ(op_act_parse("SiLU"), -1);
    CHECK_EQ(op_act_parse(""), -1);
    CHECK_EQ(op_act_parse(NULL), -1);
}

static void test_rope_matches_naive(void) {
    int T = 13, H = 3, D = 10, stride = H * D + 4; // padded rows: stride > H*D
    for (int n_rot = 2; n_rot <= D; n_rot += 4) {
        float x[13 * 34], y[13 * 34], cs[13 * 5], sn[13 * 5];
        check_fill(x, T * stride, 4);
        memcpy(y, x, sizeof x);
        op_rope_table(cs, sn, T, D, n_rot, 10000.0);
        op_rope(x, cs, sn, T, H, D, n_rot, stride);
        op_rope_ref(y, T, H, D, n_rot, stride, 10000.0);
        check_close("rope", x, y, T * stride, 1e-6f, 1e-5f);
    }
    // position 0 is the identity
    float z[8], z0[8], c[4], s[4];
    check_fill(z, 8, 5);
    memcpy(z0, z, sizeof z);
    op_rope_table(c, s, 1, 8, 8, 10000.0);
    op_rope(z, c, s, 1, 1, 8, 8, 8);
    check_close("rope at position 0", z, z0, 8, 0.0f, 0.0f);
}

// causal rows as attention makes them: rows sum to 1, blocked keys exactly 0, large scores safe
static void test_softmax_ranges_causal_rows(void) {
    int rows = 5, n = 9;
    float x[45], y[45];
    check_fill(x, rows * n, 6);
    for (int r = 0; r < rows; r++)
        for (int i = r + 1; i < n; i++)
            y[r * n + i] = -INFINITY;
    for (int r = 0; r < rows; r++)
        for (int i = 0; i <= r; i++)
            y[r * n + i] = x[r * n + i];
    for (int r = 0; r < rows; r++)
        op_softmax_ranges(x + r * n, n, 0, r + 1, n, n);
    op_softmax_rows_ref(y, rows, n);
    check_close("causal softmax", x, y, rows * n, 1e-7f, 1e-6f);
    for (int r = 0; r < rows; r++) {
        double sum = 0;
        for (int i = 0; i < n; i++)
            sum += (double)x[r * n + i];
        CHECK(fabs(sum - 1.0) < 1e-6);
        for (int i = r + 1; i < n; i++)
            CHECK(x[r * n + i] == 0.0f); // exactly 0
    }
    float big[3] = {1000.0f, 999.0f, 5.0f}; // no overflow
    op_softmax_ranges(big, 3, 0, 2, 3, 3);
    CHECK(isfinite(big[0]) && big[0] > big[1] && big[2] == 0.0f);
}

// op_softmax_ranges == the naive softmax of the row with -inf outside the ranges
static void test_softmax_ranges_matches_masked_naive(void) {
    const int n = 20;
    const int cases[][4] = {{0, 5, 10, 13},  {0, 1, 10, 11}, {3, 9, 0, 0},  {0, 0, 12, 20},
                            {0, 10, 10, 20}, {15, 20, 2, 4}, {0, 20, 0, 0}, {7, 8, 8, 9}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int *r = cases[c];
        float x[20], y[20];
        check_fill(x, n, 20 + c);
        for (int i = 0; i < n; i++)
            x[i] *= 8.0f;
        for (int i = 0; i < n; i++)
            y[i] = (i >= r[0] && i < r[1]) || (i >= r[2] && i < r[3]) ? x[i] : -INFINITY;
        op_softmax_ranges(x, n, r[0], r[1], r[2], r[3]);
        op_softmax_rows_ref(y, 1, n);
        check_close("softmax_ranges", x, y, n, 1e-7f, 1e-6f);
        for (int i = 0; i < n; i++)
            if (y[i] == 0.0f) CHECK(x[i] == 0.0f);
    }
}

// n = 101 on one thread, n = 40001 split over op_threads(); op_add and op_add_bias likewise
// gpt-oss's clamped SwiGLU against its double twin, values past the limit on both sides
static void test_swiglu_clamp_match_naive(void) {
    enum { n = 1001 };
    static float g[n], a[n], b[n];
    unsigned s = 99;
    for (int i = 0; i < n; i++) {
        s = s * 1103515245u + 12345u;
        g[i] = (float)((int)(s >> 8) % 2000) / 100.0f - 10.0f; // [-10, 10): past limit 7
        s = s * 1103515245u + 12345u;
        a[i] = b[i] = (float)((int)(s >> 8) % 2000) / 100.0f - 10.0f;
    }
    op_swiglu_clamp(a, g, n, 1.702f, 7.0f);
    op_swiglu_clamp_ref(b, g, n, 1.702f, 7.0f);
    check_close("swiglu_clamp", a, b, n, 1e-5f, 1e-5f);
    float x = 20.0f, y = -20.0f; // both clamped: (-7 + 1) * 7 * sigmoid(1.702 * 7)
    op_swiglu_clamp(&y, &x, 1, 1.702f, 7.0f);
    CHECK(fabs((double)y - (-6.0 * 7.0 / (1.0 + exp(-1.702 * 7.0)))) < 1e-4);
}

static void test_swiglu_add_match_naive(void) {
    static float g[40001], u[40001], a[40001], b[40001];
    for (int n = 101; n <= 40001; n += 39900) {
        check_fill(g, n, 7);
        check_fill(u, n, 8);
        for (int i = 0; i < n; i++)
            g[i] *= 20.0f; // saturating tails
        op_swiglu(a, g, u, n);
        op_swiglu_ref(b, g, u, n);
        check_close("swiglu", a, b, n, 1e-6f, 1e-5f);
        for (int i = 0; i < n; i++)
            b[i] = g[i] + u[i];
        op_add(g, g, u, n);
        check_close("add", g, b, n, 0.0f, 0.0f);
        int cols = 97, rows = n / cols; // a bias on every row, the same sum bit for bit
        for (int i = 0; i < rows * cols; i++)
            b[i] = g[i] + u[i % cols];
        op_add_bias(g, u, rows, cols);
        check_close("add_bias", g, b, rows * cols, 0.0f, 0.0f);
    }
    CHECK(op_threads() >= 1);
}

// float32 angles times A, with inv_freq in sin's first row (as model/families/laguna.c keeps it)
static void test_rope_table_f32(void) {
    enum { T = 40, ROT = 6 };
    float c[T * ROT / 2], s[T * ROT / 2], inv[ROT / 2] = {1.0f, 0.1f, 0.01f};
    memcpy(s, inv, sizeof inv);
    op_rope_table_f32(c, s, T, ROT, s, 0.5f);
    for (int t = 0; t < T; t++)
        for (int j = 0; j < ROT / 2; j++) {
            double a = (double)((float)t * inv[j]);
            CHECK(c[t * ROT / 2 + j] == (float)cos(a) * 0.5f);
            CHECK(s[t * ROT / 2 + j] == (float)sin(a) * 0.5f);
        }
}

// op_act (every kind), op_mul, op_scale: the scalar formulas of model/ops.h bit for bit, on one
// thread and on two (each element is computed whole by one thread)
static void test_elementwise_threads(void) {
    enum { N = 3 * OP_PAR_MIN + 5 };
    static float x[N], s[N], y[N], want[N];
    check_fill(x, N, 21);
    check_fill(s, N, 22);
    int was = op_threads();
    for (int t = 1; t <= 2; t++) {
        op_set_threads(t);
        for (int k = OP_ACT_SILU; k <= OP_ACT_SIGMOID; k++) { // 32x: both sides of softplus' 20
            for (int i = 0; i < N; i++)
                y[i] = 32.0f * x[i];
            for (int i = 0; i < N; i++)
                want[i] = op_act1((enum op_act_kind)k, y[i]);
            op_act(y, N, (enum op_act_kind)k);
            CHECK(!memcmp(y, want, sizeof y));
        }
        for (int i = 0; i < N; i++) // the dispatcher's functions
            CHECK(op_act1(OP_ACT_SILU, x[i]) == act_silu(x[i]) &&
                  op_act1(OP_ACT_GELU, x[i]) == act_gelu(x[i]) &&
                  op_act1(OP_ACT_GELU_TANH, x[i]) == act_gelu_tanh(x[i]) &&
                  op_act1(OP_ACT_RELU, x[i]) == act_relu(x[i]) &&
                  op_act1(OP_ACT_SOFTPLUS, 32.0f * x[i]) == act_softplus(32.0f * x[i]) &&
                  op_act1(OP_ACT_SIGMOID, x[i]) == act_sigmoid(x[i]));
        memcpy(y, x, sizeof x);
        op_mul(y, s, N, 7);
        op_scale(y, 0.75f, N);
        for (int i = 0; i < N; i++)
            want[i] = x[i] * s[i / 7] * 0.75f;
        CHECK(!memcmp(y, want, sizeof y));
    }
    op_set_threads(was);
}

// op_softmax_within: op_softmax_ranges' values, and nothing outside the ranges touched
static void test_softmax_within(void) {
    float a[40], b[40], orig[40];
    check_fill(a, 40, 5);
    check_fill(orig, 40, 5);
    memcpy(b, a, sizeof a);
    op_softmax_ranges(a, 40, 3, 9, 20, 31);
    op_softmax_within(b, 3, 9, 20, 31);
    for (int i = 0; i < 40; i++) {
        bool in = (i >= 3 && i < 9) || (i >= 20 && i < 31);
        CHECK(in ? a[i] == b[i] : (a[i] == 0.0f && b[i] == orig[i]));
    }
}

// a row's softmax over [a0, a1) then [b0, b1) a value at a time: in-order max, expf(x - max), the
// sum in that order
static void softmax_two_ranges(float *x, int a0, int a1, int b0, int b1) {
    float mx = -INFINITY, sum = 0.0f;
    for (int i = a0; i < a1; i++)
        mx = x[i] > mx ? x[i] : mx;
    for (int i = b0; i < b1; i++)
        mx = x[i] > mx ? x[i] : mx;
    for (int i = a0; i < a1; i++)
        sum += x[i] = expf(x[i] - mx);
    for (int i = b0; i < b1; i++)
        sum += x[i] = expf(x[i] - mx);
    float inv = 1.0f / sum;
    for (int i = a0; i < a1; i++)
        x[i] *= inv;
    for (int i = b0; i < b1; i++)
        x[i] *= inv;
}

// op_softmax_within_rows: 8 rows (and the first 3 alone), 20 fillings, of different ranges (an
// empty first range, a second before the first, single entries, a -inf among them), bit for bit
// each row a value at a time, the entries outside the ranges untouched
static void test_softmax_within_rows(void) {
    enum { LD = 50, N = 8 };
    static float x[N * LD], y[N * LD];
    const int a0[N] = {0, 0, 5, 0, 10, 3, 0, 7}, a1[N] = {1, 40, 5, 17, 30, 4, 50, 8};
    const int b0[N] = {0, 45, 20, 30, 0, 40, 0, 0}, b1[N] = {0, 50, 41, 31, 10, 49, 0, 6};
    for (int seed = 0; seed < 20; seed++)
        for (int n = N; n >= 3; n -= 5) {
            check_fill(x, N * LD, 21 + (uint64_t)seed);
            for (int i = 0; i < N * LD; i++)
                x[i] *= 9.0f;
            x[2 * LD + 25] = -INFINITY;
            memcpy(y, x, sizeof x);
            op_softmax_within_rows(x, LD, n, a0, a1, b0, b1);
            for (int k = 0; k < n; k++)
                softmax_two_ranges(y + k * LD, a0[k], a1[k], b0[k], b1[k]);
            CHECK(!memcmp(x, y, sizeof x));
        }
}

// the softmax, SiLU, sigmoid and SwiGLU kernels (lanes of max, expf a block at a time through
// vexp.h) give the bits of the formulas a value at a time: in-order max, expf(x - max), the sum
// in order; x / (1 + expf(-x)); rows with ties of +0 and -0 at the max, -inf and huge values
static void softmax_one_at_a_time(float *x, int n) {
    float mx = -INFINITY, sum = 0.0f;
    for (int i = 0; i < n; i++)
        mx = x[i] > mx ? x[i] : mx;
    for (int i = 0; i < n; i++)
        sum += x[i] = expf(x[i] - mx);
    float inv = 1.0f / sum;
    for (int i = 0; i < n; i++)
        x[i] *= inv;
}

static void test_exp_kernels_bits(void) {
    enum { N = 300 };
    float x[N], y[N], g[N], u[N];
    uint32_t seed = 11;
    for (int n = 1; n <= N; n += 7) {
        check_fill(x, n, seed++);
        for (int i = 0; i < n; i++)
            x[i] *= (float)(n % 5) * 20.0f; // up to +-80: exponentials from ~1e-35 up
        if (n > 8) x[n / 2] = -INFINITY, x[n / 3] = -1e30f;
        if (n % 3 == 0) { // the max a tie of +0 and -0 (all else negative)
            for (int i = 0; i < n; i++)
                x[i] = -fabsf(x[i]) - 1.0f;
            x[0] = -0.0f, x[n - 1] = 0.0f;
        }
        memcpy(y, x, sizeof(float) * (size_t)n);
        softmax_one_at_a_time(y, n);
        float ms = -INFINITY;
        for (int i = 0; i < n; i++)
            ms = x[i] > ms ? x[i] : ms;
        CHECK(op_max_from(x, n, -INFINITY) == ms);
        op_softmax_within(x, 0, n, 0, 0);
        if (memcmp(x, y, sizeof(float) * (size_t)n)) {
            fprintf(stderr, "softmax of %d differs from the formula a value at a time\n", n);
            check_failures++;
        }
        check_fill(g, n, seed++);
        check_fill(u, n, seed++);
        for (int i = 0; i < n; i++)
            g[i] *= 30.0f, x[i] = g[i], y[i] = g[i];
        op_act(x, n, OP_ACT_SILU);
        op_act(y, n, OP_ACT_SIGMOID);
        op_swiglu(u, g, u, n);
        for (int i = 0; i < n; i++) {
            float v = g[i], e = expf(-v);
            CHECK(x[i] == v / (1.0f + e) && y[i] == 1.0f / (1.0f + e));
        }
        check_fill(y, n, seed - 1); // u's input again
        for (int i = 0; i < n; i++)
            CHECK(u[i] == g[i] / (1.0f + expf(-g[i])) * y[i]);
    }
    float nan_row[20];
    for (int i = 0; i < 20; i++)
        nan_row[i] = (float)i;
    nan_row[17] = NAN; // never taken as the max, in any lane
    CHECK(op_max_from(nan_row, 20, -INFINITY) == 19.0f);
    CHECK(op_max_from(nan_row, 0, 3.0f) == 3.0f);
}

// op_act_mul == op_act on the gate then op_mul, bit for bit, for every MLP activation
static void test_act_mul_bits(void) {
    enum { N = 1000 };
    static float g[N], u[N], a[N], b[N];
    const enum op_act_kind kinds[] = {OP_ACT_SILU, OP_ACT_GELU, OP_ACT_GELU_TANH, OP_ACT_RELU};
    for (int k = 0; k < 4; k++) {
        check_fill(g, N, 40 + (uint64_t)k);
        check_fill(u, N, 50 + (uint64_t)k);
        for (int i = 0; i < N; i++)
            g[i] *= 12.0f;
        memcpy(a, u, sizeof u);
        memcpy(b, g, sizeof g);
        op_act_mul(a, g, N, kinds[k]);
        op_act(b, N, kinds[k]);
        op_mul(u, b, N, 1);
        CHECK(!memcmp(a, u, sizeof u));
    }
}

// gpt-oss's clamped SwiGLU (exponentials a block at a time) bit for bit the formula a value at a
// time with act_sigmoid, past the limit on both sides, at +-inf and NaN, over several blocks
static void test_swiglu_clamp_bits(void) {
    enum { N = 1000 };
    static float g[N], u[N], a[N];
    check_fill(g, N, 60);
    check_fill(u, N, 61);
    for (int i = 0; i < N; i++)
        g[i] *= 20.0f, u[i] *= 20.0f;
    g[3] = INFINITY, g[4] = -INFINITY, g[5] = NAN, u[6] = INFINITY, u[7] = -INFINITY, u[8] = NAN;
    memcpy(a, u, sizeof u);
    op_swiglu_clamp(a, g, N, 1.702f, 7.0f);
    int bad = 0;
    for (int i = 0; i < N; i++) {
        float x = g[i] > 7.0f ? 7.0f : g[i], y = u[i] > 7.0f ? 7.0f : u[i] < -7.0f ? -7.0f : u[i];
        float want = (y + 1.0f) * (x * act_sigmoid(x * 1.702f));
        bad += memcmp(&want, &a[i], sizeof want) != 0;
    }
    CHECK_EQ(bad, 0);
}

// the register peaks (model/simdpeak.h): the instruction the CPU has is named and measured
// (a rate above zero), one it lacks is "none" at 0
static void test_simd_peaks(void) {
    __builtin_cpu_init();
    bool z = __builtin_cpu_supports("avx512f"),
         y = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"),
         bf = z && __builtin_cpu_supports("avx512bf16");
    const char *fma = simd_peak_name(SIMD_FMA32), *dp = simd_peak_name(SIMD_DPBF16);
    CHECK(!strcmp(fma, z ? "vfmadd231ps zmm" : y ? "vfmadd231ps ymm" : "none"));
    CHECK(!strcmp(dp, bf ? "vdpbf16ps zmm" : "none"));
    for (int threads = 1; threads <= 2; threads++) {
        double f = simd_peak_gflops(SIMD_FMA32, threads, 1),
               d = simd_peak_gflops(SIMD_DPBF16, threads, 1);
        CHECK((z || y) ? f > 1.0 : f == 0.0);
        CHECK(bf ? d > 1.0 : d == 0.0);
    }
}

int main(void) {
    test_matmul_matches_naive();
    test_matmul_bf16_panels();
    test_matmul_threads();
    test_bf16_panel_floats();
    test_rmsnorm_matches_naive();
    test_rmsnorm_bits();
    test_norms_match_naive();
    test_norms_exact_threads();
    test_rope_matches_naive();
    test_rope_table_f32();
    test_softmax_ranges_causal_rows();
    test_softmax_ranges_matches_masked_naive();
    test_swiglu_add_match_naive();
    test_swiglu_clamp_match_naive();
    test_act_matches_naive();
    test_act_parse();
    test_elementwise_threads();
    test_softmax_within();
    test_softmax_within_rows();
    test_exp_kernels_bits();
    test_act_mul_bits();
    test_swiglu_clamp_bits();
    test_simd_peaks();
    return check_failures ? EXIT_FAILURE : EXIT_SUCCESS;
}
