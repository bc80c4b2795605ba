// test_amx.c - harvest's own AMX kernel (model/amx.h) through model/dnnl.h's products.
//
//   - values: odd shapes (K 1 .. 1057 odd and even, M and N not multiples of 16 or 32, blocks
//     of AMX_MB x AMX_NB and AMX_KC steps crossed) against a float64 product of the bf16-rounded
//     operands, |err| <= 1e-5 * sum_k |a_k b_k| + 1e-30 (float32 accumulation of exact products);
//   - the input's rounding: with K = 1 and w = 1 the product is bf16(in) itself, bitwise
//     mm16_round's (ties to even, the carry into the exponent, +-inf, NaN stays NaN);
//   - determinism: a row's result is bitwise the same at M 1, 31, 33, 300, at any position, at 1
//     and 2 threads, and inside a parallel region (the experts' way);
//   - the kn layout (w16 (K, N)): bitwise the [N, K] product, and its packed copy the same bytes;
//   - packing: once a matrix, its bytes in mm16_packing (amx_packed_bytes), mapped pages of a
//     malloc'd matrix not released;
//   - the peak: tdpbf16ps on registers reaches more GFLOP/s than zero (printed, not judged: the
//     machine may be shared).
// Skips (77) where the AMX kernel cannot run (no AMX-BF16, or the OS refuses the tile state).
#include "model/amx.h"
#include "model/dnnl.h"
#include "tests/check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

static float bf(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint16_t *bf16_matrix(int64_t n, uint64_t seed) {
    float *f = malloc(sizeof(float) * (size_t)n);
    uint16_t *h = malloc(sizeof(uint16_t) * (size_t)n);
    check_fill(f, n, seed);
    for (int64_t i = 0; i < n; i++)
        h[i] = mm16_round(f[i]);
    free(f);
    return h;
}

static void set_threads(int n) {
#ifdef _OPENMP
    omp_set_num_threads(n);
#else
    (void)n;
#endif
}

// rows [0, Mr) of got against sum_k bf(in) bf(w) within float32 accumulation of sum |terms|
static void check_ref(const char *label, const float *got, const float *in, const uint16_t *w,
                      int Mr, int K, int N) {
    int bad = 0;
    for (int64_t m = 0; m < Mr; m++)
        for (int64_t n = 0; n < N; n++) {
            double acc = 0.0, mag = 0.0;
            for (int64_t k = 0; k < K; k++) {
                double t = (double)bf(mm16_round(in[m * K + k])) * (double)bf(w[n * K + k]);
                acc += t;
                mag += fabs(t);
            }
            double d = fabs((double)got[m * N + n] - acc);
            if (!(d <= 1e-5 * mag + 1e-30) && bad++ < 5)
                fprintf(stderr, "%s [%lld, %lld]: got %.9g want %.9g\n", label, (long long)m,
                        (long long)n, (double)got[m * N + n], acc);
        }
    if (bad) fprintf(stderr, "%s: %d mismatched (M %d K %d N %d)\n", label, bad, Mr, K, N);
    check_failures += bad > 0;
}

static bool same(const float *a, const float *b, int64_t n) {
    return memcmp(a, b, sizeof(float) * (size_t)n) == 0;
}

// a row alone, rows shifted, other M, 2 threads, inside a parallel region: bitwise o1's rows
static void test_determinism(const float *o1, const float *in, const uint16_t *w, int M, int K,
                             int N) {
    float *o = malloc(sizeof(float) * (size_t)M * N);
    const int ms[] = {1, 31, 33, 300};
    for (int i = 0; i < 4; i++) { // the first ms[i] rows, from row M - ms[i] (clipped)
        int m = ms[i] < M ? ms[i] : M, from = M - m;
        mm16_matmul(o, in + (int64_t)from * K, w, m, K, N, 1);
        CHECK(same(o, o1 + (int64_t)from * N, (int64_t)m * N));
    }
    set_threads(2);
    mm16_matmul(o, in, w, M, K, N, 2);
    set_threads(1);
    CHECK(same(o, o1, (int64_t)M * N));
    int ok = 1;
#pragma omp parallel num_threads(2) reduction(& : ok)
    { // each thread a product of its own, nested (one thread each)
        float *mine = malloc(sizeof(float) * (size_t)M * N);
        mm16_matmul(mine, in, w, M, K, N, 2);
        ok = same(mine, o1, (int64_t)M * N);
        free(mine);
    }
    CHECK(ok);
    free(o);
}

// the kn layout: bitwise the [N, K] product, the packed copies the same bytes
static void test_kn(const float *o1, const float *in, const uint16_t *w, int M, int K, int N) {
    uint16_t *wt = malloc(sizeof(uint16_t) * (size_t)K * N);
    float *o = malloc(sizeof(float) * (size_t)M * N);
    for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < K; k++)
            wt[k * N + n] = w[n * K + k];
    mm16_matmul_kn(o, in, wt, M, K, N, 1);
    CHECK(same(o, o1, (int64_t)M * N));
    int64_t bytes = amx_packed_bytes(K, N);
    uint16_t *p1 = aligned_alloc(64, (size_t)bytes), *p2 = aligned_alloc(64, (size_t)bytes);
    amx_pack(p1, w, K, N, false, 1);
    amx_pack(p2, wt, K, N, true, 2);
    CHECK(memcmp(p1, p2, (size_t)bytes) == 0);
    free(wt), free(o), free(p1), free(p2);
}

static void test_shape(int M, int K, int N) {
    mm16_forget();
    uint16_t *w = bf16_matrix((int64_t)N * K, (uint64_t)K * 131 + (uint64_t)N);
    float *in = malloc(sizeof(float) * (size_t)M * K), *o1 = malloc(sizeof(float) * (size_t)M * N);
    check_fill(in, (int64_t)M * K, (uint64_t)M + 7);
    mm16_matmul(o1, in, w, M, K, N, 1);
    char label[64];
    snprintf(label, sizeof label, "amx M %d K %d N %d", M, K, N);
    int Mr = (int64_t)K * N > 300000 ? 3 : M; // a few rows at the large shapes
    check_ref(label, o1, in, w, Mr, K, N);
    check_ref(label, o1 + (int64_t)(M - 1) * N, in + (int64_t)(M - 1) * K, w, 1, K, N); // the last
    test_determinism(o1, in, w, M, K, N);
    struct mm16_packing p = mm16_packing();
    CHECK_EQ(p.n_packed, 1); // once, however many products
    CHECK_EQ(p.n_plain, 0);
    CHECK_EQ(p.bytes, amx_packed_bytes(K, N));
    CHECK_EQ(p.released, 0); // malloc'd
    test_kn(o1, in, w, M, K, N);
    mm16_forget();
    free(w), free(in), free(o1);
}

// K = 1, w = 1: out = bf16(in), bitwise mm16_round's (not -0: a sum starts at +0, +0 + -0 = +0)
static void test_rounding(void) {
    const float v[] = {1.0f + 1.0f / 256,
                       1.0f + 3.0f / 256,
                       1.0f + 1.0f / 256 + 1e-7f,
                       -1.0f - 1.0f / 256,
                       0x1.fffep+127f,
                       INFINITY,
                       -INFINITY,
                       NAN,
                       -NAN,
                       3.14159f,
                       0.0f,
                       1e-30f,
                       0x1.ff8p0f /* carries */,
                       65504.0f,
                       -2.5e-3f,
                       0.1f,
                       1e38f};
    int M = (int)(sizeof v / sizeof v[0]);
    mm16_forget();
    uint16_t one = mm16_round(1.0f);
    float out[sizeof v / sizeof v[0]];
    mm16_matmul(out, v, &one, M, 1, 1, 1);
    for (int m = 0; m < M; m++) {
        float want = bf(mm16_round(v[m]));
        bool ok = isnan(want) ? isnan(out[m]) : memcmp(&out[m], &want, sizeof want) == 0;
        if (!ok)
            fprintf(stderr, "rounding %.9g: got %.9g want %.9g\n", (double)v[m], (double)out[m],
                    (double)want);
        CHECK(ok);
    }
    mm16_forget();
}

int main(void) {
    char msg[256];
    if (mm16_init(msg, sizeof msg) < 0) {
        fprintf(stderr, "skip: %s\n", msg);
        return 77;
    }
    if (!mm16_set_own_kernel(true)) {
        fprintf(stderr, "skip: %s\n", mm16_kernel());
        return 77;
    }
    set_threads(1);
    printf("bf16 kernel: %s\n", mm16_kernel());
    test_rounding();
    const int shapes[][3] = {{1, 1, 1},       {5, 3, 7},       {17, 31, 15},
                             {33, 33, 33},    {31, 64, 48},    {100, 95, 300},
                             {300, 1057, 17}, {257, 520, 530}, {64, 2048, 96}};
    for (int i = 0; i < 9; i++)
        test_shape(shapes[i][0], shapes[i][1], shapes[i][2]);
    double g1 = mm16_amx_peak_gflops(1, 2);
    printf("AMX peak (tdpbf16ps on registers): %.0f GFLOP/s on 1 thread\n", g1);
    CHECK(g1 > 0.0);
    return check_failures ? EXIT_FAILURE : EXIT_SUCCESS;
}
