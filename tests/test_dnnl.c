// test_dnnl.c - model/dnnl.h: the bf16 x bf16 -> float32 products, plain and pre-packed; all of
// it with harvest's AMX kernel for the packed matrices where it runs (tests/test_amx.c has its
// own cases), then with oneDNN's.
//
//   - values: packed and plain products of odd and real shapes (K 96 .. 2048, N with a remainder
//     tile, M 1 .. 200) against a float64 product of the bf16-rounded operands (the only rounding
//     left is float32 accumulation: |err| <= 1e-5 * sum |a b| + 1e-30);
//   - determinism: a row's result is bitwise the same whatever M and the row's position (a row
//     moved into a 1-row call and a 130-row call), and at 1 and 2 threads, packed and plain;
//   - the kn layout (w16 (K, N), mm16_matmul_kn): packed, bitwise the [N, K] product (the packed
//     copies are the same bits); plain, the float64 values;
//   - packing: a matrix is packed once (the second product does not pack again) into the bytes
//     the primitives ask for; mm16_set_packing(false) takes the plain path; mm16_forget empties
//     the table (its figures kept for mm16_packing) and the next product packs again;
//   - packing in a parallel region: threads pack their matrices at once, a matrix two threads
//     ask for at once is packed once, and the results are one thread's bits;
//   - release: a matrix in a read-only private file mapping has its pages released after
//     packing (mm16_packing().released > 0), the product after that is unchanged and the
//     mapping still reads its bytes (they come back from the file); a malloc'd matrix is left
//     alone (released 0, its bytes intact).
// Skips (77) when oneDNN has no CPU engine.
#define _DEFAULT_SOURCE // defines: mkstemp, mmap, munmap
#include "model/dnnl.h"
#include "tests/check.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
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

// |got - sum_k bf(in) bf(w)| within float32 accumulation of the sum of |terms|
static int check_ref(const char *label, const float *got, const float *in, const uint16_t *w, int M,
                     int K, int N) {
    int bad = 0;
    for (int64_t m = 0; m < M; m++)
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
    if (bad) fprintf(stderr, "%s: %d mismatched (M %d K %d N %d)\n", label, bad, M, K, N);
    check_failures += bad > 0;
    return bad == 0;
}

static void set_threads(int n) {
#ifdef _OPENMP
    omp_set_num_threads(n);
#else
    (void)n;
#endif
}

// the kn layout: w transposed into (K, N) gives, packed, the same bits as w (the same packed
// copy), and plain the float64 values
static void test_kn(const float *want, const float *in, const uint16_t *w, int M, int K, int N,
                    bool packed) {
    uint16_t *wt = malloc(sizeof(uint16_t) * (size_t)K * N);
    float *o = malloc(sizeof(float) * (size_t)M * N);
    for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < K; k++)
            wt[k * N + n] = w[n * K + k];
    mm16_matmul_kn(o, in, wt, M, K, N, 1);
    if (packed) CHECK(memcmp(o, want, sizeof(float) * (size_t)M * N) == 0);
    char label[64];
    snprintf(label, sizeof label, "%s kn K %d N %d", packed ? "packed" : "plain", K, N);
    check_ref(label, o, in, w, K >= 1024 ? 2 : M, K, N);
    CHECK_EQ(mm16_packing().n_packed, packed ? 2 : 0); // a matrix of its own
    free(wt), free(o);
}

// values, and determinism over M, a row's position and threads, at one shape
static void test_matmul_shape(int K, int N, bool packed) {
    const int M = 130;
    mm16_forget();
    mm16_set_packing(packed);
    uint16_t *w = bf16_matrix((int64_t)N * K, (uint64_t)K * 31 + (uint64_t)N);
    float *in = malloc(sizeof(float) * (size_t)M * K);
    float *o1 = malloc(sizeof(float) * (size_t)M * N), *o2 = malloc(sizeof(float) * (size_t)M * N);
    float *row = malloc(sizeof(float) * (size_t)N);
    check_fill(in, (int64_t)M * K, 5);
    mm16_matmul(o1, in, w, M, K, N, 1);
    int Mr = K >= 1024 ? 2 : M; // the float64 check of a few rows at the large shapes
    char label[64];
    snprintf(label, sizeof label, "%s K %d N %d", packed ? "packed" : "plain", K, N);
    check_ref(label, o1, in, w, Mr, K, N);
    set_threads(2);
    mm16_matmul(o2, in, w, M, K, N, 2);
    set_threads(1);
    CHECK(memcmp(o1, o2, sizeof(float) * (size_t)M * N) == 0); // 2 threads = 1 thread
    const int rows[] = {0, 63, 64, 129};
    for (int i = 0; i < 4; i++) { // a row alone: as in the 130-row call
        mm16_matmul(row, in + (int64_t)rows[i] * K, w, 1, K, N, 1);
        CHECK(memcmp(row, o1 + (int64_t)rows[i] * N, sizeof(float) * (size_t)N) == 0);
    }
    mm16_matmul(o2, in + K, w, M - 1, K, N, 1); // every row one place up
    CHECK(memcmp(o2, o1 + N, sizeof(float) * (size_t)(M - 1) * N) == 0);
    struct mm16_packing p = mm16_packing();
    CHECK_EQ(p.n_packed, packed ? 1 : 0); // once, however many products
    test_kn(o1, in, w, M, K, N, packed);
    CHECK_EQ(p.n_plain, 0);
    CHECK(!packed || p.bytes >= (int64_t)sizeof(uint16_t) * K * N);
    mm16_forget();
    CHECK_EQ(mm16_packing().n_packed, packed ? 2 : 0); // the figures of the table forgotten
    mm16_matmul(row, in, w, 1, K, N, 1);
    CHECK_EQ(mm16_packing().n_packed, packed ? 1 : 0); // packed again
    CHECK(memcmp(row, o1, sizeof(float) * (size_t)N) == 0);
    mm16_forget();
    mm16_set_packing(true);
    free(w), free(in), free(o1), free(o2), free(row);
}

// products inside a parallel region (a mixture's experts): each thread packs its own matrices
// while the other packs its own, a matrix that two threads ask for at once is packed once (the
// second waits for it), and every result is bitwise what one thread alone computes
static void test_packing_in_region(void) {
    enum { NM = 6, M = 70, K = 320, N = 1100, CALLS = 4 * NM };
    const int64_t n = (int64_t)N * K;
    uint16_t *w[NM];
    float *in = malloc(sizeof(float) * (size_t)M * K);
    float *want = malloc(sizeof(float) * (size_t)NM * M * N);
    float *got = malloc(sizeof(float) * (size_t)CALLS * M * N);
    check_fill(in, (int64_t)M * K, 9);
    for (int i = 0; i < NM; i++) {
        w[i] = bf16_matrix(n, 900 + (uint64_t)i);
        mm16_matmul(want + (int64_t)i * M * N, in, w[i], M, K, N, 1); // one thread, one at a time
    }
    mm16_forget();
    set_threads(2);
    // calls 2j and 2j + 1 (one a thread) ask for matrix (j % NM): at once, while neither is packed
#pragma omp parallel for num_threads(2) schedule(static, 1)
    for (int c = 0; c < CALLS; c++)
        mm16_matmul(got + (int64_t)c * M * N, in, w[c / 2 % NM], M, K, N, 2);
    set_threads(1);
    for (int c = 0; c < CALLS; c++)
        CHECK(memcmp(got + (int64_t)c * M * N, want + (int64_t)(c / 2 % NM) * M * N,
                     sizeof(float) * (size_t)M * N) == 0);
    struct mm16_packing p = mm16_packing();
    CHECK_EQ(p.n_packed, NM); // once each
    CHECK_EQ(p.n_plain, 0);
    CHECK(p.bytes >= (int64_t)sizeof(uint16_t) * NM * n);
    CHECK(p.seconds > 0.0);
    mm16_forget();
    for (int i = 0; i < NM; i++)
        free(w[i]);
    free(in), free(want), free(got);
}

// the packed path on a matrix in a file mapping: pages released, results and bytes unchanged
static void test_release_mapped(void) {
    const int K = 1024, N = 1024, M = 64;
    int64_t n = (int64_t)K * N;
    uint16_t *w = bf16_matrix(n, 77);
    char path[] = "/tmp/test_dnnl_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0) return;
    CHECK(write(fd, w, sizeof(uint16_t) * (size_t)n) == (ssize_t)(sizeof(uint16_t) * (size_t)n));
    void *map = mmap(NULL, sizeof(uint16_t) * (size_t)n, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    unlink(path);
    CHECK(map != MAP_FAILED);
    if (map == MAP_FAILED) return;
    float *in = malloc(sizeof(float) * (size_t)M * K);
    float *o1 = malloc(sizeof(float) * (size_t)M * N), *o2 = malloc(sizeof(float) * (size_t)M * N);
    check_fill(in, (int64_t)M * K, 9);
    mm16_forget();
    mm16_matmul(o1, in, w, M, K, N, 1); // malloc'd: packed, not released
    CHECK_EQ(mm16_packing().released, 0);
    uint16_t *again = bf16_matrix(n, 77);
    CHECK(memcmp(w, again, sizeof(uint16_t) * (size_t)n) == 0);
    mm16_matmul(o2, in, map, M, K, N, 1); // mapped: released
    struct mm16_packing p = mm16_packing();
    CHECK_EQ(p.n_packed, 2);
    CHECK(p.released >= (int64_t)sizeof(uint16_t) * n - 2 * 4096);
    CHECK(memcmp(o1, o2, sizeof(float) * (size_t)M * N) == 0);
    CHECK(memcmp(map, w, sizeof(uint16_t) * (size_t)n) == 0); // back from the file
    mm16_matmul(o2, in, map, M, K, N, 1);
    CHECK(memcmp(o1, o2, sizeof(float) * (size_t)M * N) == 0);
    mm16_forget();
    munmap(map, sizeof(uint16_t) * (size_t)n);
    free(w), free(again), free(in), free(o1), free(o2);
}

int main(void) {
    char msg[256];
    if (mm16_init(msg, sizeof msg) < 0) {
        fprintf(stderr, "skip: %s\n", msg);
        return 77;
    }
    set_threads(1);
    printf("oneDNN bf16 at K 2048: %s\n", mm16_impl(2048));
    for (int own = 1; own >= 0; own--) { // the AMX kernel where it runs, then oneDNN's
        mm16_forget();
        if (mm16_set_own_kernel(own) != own) continue;
        printf("packed: %s\n", mm16_kernel());
        const int shapes[][2] = {{96, 700}, {64, 512}, {200, 1100}, {2048, 1536}};
        for (int i = 0; i < 4; i++)
            for (int packed = 0; packed < 2; packed++)
                test_matmul_shape(shapes[i][0], shapes[i][1], packed);
        test_release_mapped();
        test_packing_in_region();
    }
    return check_failures ? EXIT_FAILURE : EXIT_SUCCESS;
}
