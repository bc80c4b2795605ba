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
//   - amx_pack (vectorised whole tiles, element by element at the edges) byte for byte an
//     element-by-element packer written from amx.h's layout, both layouts, 1 and 2 threads;
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

// amx.h's weight layout element by element: tile (j, t) at (k0 n_strips + j steps + t - k0)
// tiles, k0 its K block's first step, steps the block's
static void ref_pack(uint16_t *dst, const uint16_t *w, int K, int N) {
    int64_t nk = (K + 31) / 32, n_strips = (N + 31) / 32 * 2;
    for (int64_t j = 0; j < n_strips; j++)
        for (int64_t t = 0; t < nk; t++) {
            int64_t k0 = t / AMX_KC * AMX_KC, steps = nk - k0 < AMX_KC ? nk - k0 : AMX_KC;
            uint16_t *d = dst + (k0 * n_strips + j * steps + t - k0) * 512;
            for (int64_t r = 0; r < 16; r++)
                for (int64_t c = 0; c < 16; c++)
                    for (int64_t e = 0; e < 2; e++) {
                        int64_t n = 16 * j + c, k = 32 * t + 2 * r + e;
                        d[32 * r + 2 * c + e] = n < N && k < K ? w[n * K + k] : 0;
                    }
        }
}

// amx_pack's bytes (both layouts, 1 and 2 threads) against ref_pack's
static void test_pack(void) {
    const int shapes[][2] = {{1, 1},    {31, 17},  {32, 16},   {64, 32},   {95, 48},
                             {256, 64}, {257, 33}, {520, 530}, {1057, 96}, {2048, 80}};
    for (int i = 0; i < 10; i++) {
        int K = shapes[i][0], N = shapes[i][1];
        uint16_t *w = bf16_matrix((int64_t)N * K, (uint64_t)i + 3);
        uint16_t *wt = malloc(sizeof(uint16_t) * (size_t)K * N);
        for (int64_t n = 0; n < N; n++)
            for (int64_t k = 0; k < K; k++)
                wt[k * N + n] = w[n * K + k];
        size_t bytes = (size_t)amx_packed_bytes(K, N);
        uint16_t *want = aligned_alloc(64, bytes), *got = aligned_alloc(64, bytes);
        ref_pack(want, w, K, N);
        for (int kn = 0; kn < 2; kn++)
            for (int threads = 1; threads <= 2; threads++) {
                memset(got, 0xa5, bytes);
                amx_pack(got, kn ? wt : w, K, N, kn, threads);
                if (memcmp(got, want, bytes))
                    fprintf(stderr, "pack K %d N %d kn %d threads %d: bytes differ\n", K, N, kn,
                            threads);
                CHECK(memcmp(got, want, bytes) == 0);
            }
        free(w), free(wt), free(want), free(got);
    }
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
    test_pack();
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
