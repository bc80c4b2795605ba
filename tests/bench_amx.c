// bench_amx.c - harvest's AMX kernel (model/amx.h) against the AMX peak, in one run: the
// register-only tdpbf16ps peak, then amx_pack and amx_matmul at the models' shapes (M 4096; K, N
// in {2048, 8192}) on 1 and 2 threads, each as a share of the peak measured on as many threads;
// last the micro-kernel's step loop alone (amx_feed_flops) on 1 thread with its operands in L1,
// in L2 and beyond, against the same peak: the most the kernel can reach where its tiles live.
// On a CPU without AMX: the vector peaks on registers (vdpbf16ps, FP32 FMA) and oneDNN's bf16
// products (model/dnnl.h) at the same shapes against the vdpbf16ps peak.
// Built, not run by CTest (a benchmark, not a test): build/tests/bench_amx [REPS [M]].
//
// Two clocks side by side: wall time, and CPU time (CLOCK_THREAD_CPUTIME_ID on 1 thread,
// CLOCK_PROCESS_CPUTIME_ID on 2: the threads' sum, so a rate per CPU-second is a thread's). On a
// shared machine the wall figures carry the other processes' share of the cores and move between
// runs; the CPU figures take that out (not the cache sharing). Figures are the best of REPS.
#include "model/amx.h"
#include "model/dnnl.h"
#include "model/simdpeak.h"
#include "tests/check.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

struct clocks {
    double wall, cpu;
};

static double clock_of(clockid_t id) {
    struct timespec t;
    clock_gettime(id, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static struct clocks now(int threads) {
    clockid_t cpu = threads == 1 ? CLOCK_THREAD_CPUTIME_ID : CLOCK_PROCESS_CPUTIME_ID;
    return (struct clocks){clock_of(CLOCK_MONOTONIC), clock_of(cpu)};
}

// best wall and CPU rates of `reps` rounds of the peak loop: GFLOP/s of all threads, and per
// CPU-second (a thread's)
static struct clocks peak(int threads, int reps) {
    struct clocks best = {0, 0};
    amx_peak_flops(threads); // warm-up
    for (int r = 0; r < reps; r++) {
        struct clocks t0 = now(threads);
        double f = 0.0;
        for (int i = 0; i < 40; i++) // 0.1 s or so: the process clock's other threads are exact
            f += (double)amx_peak_flops(threads); // only at their ticks
        struct clocks t1 = now(threads);
        double w = f / (t1.wall - t0.wall) * 1e-9, c = f / (t1.cpu - t0.cpu) * 1e-9;
        best.wall = w > best.wall ? w : best.wall;
        best.cpu = c > best.cpu ? c : best.cpu;
    }
    return best;
}

static uint16_t *weights(int K, int N) {
    float *f = malloc(sizeof(float) * (size_t)K * N);
    uint16_t *w = malloc(sizeof(uint16_t) * (size_t)K * N);
    if (!f || !w) exit(2);
    check_fill(f, (int64_t)K * N, (uint64_t)K + (uint64_t)N);
    for (int64_t i = 0; i < (int64_t)K * N; i++)
        w[i] = mm16_round(f[i]);
    free(f);
    return w;
}

// one product: harvest's AMX kernel on packed p, or (p NULL) model/dnnl.h's (oneDNN's, packing
// w at its first call)
static void product(float *out, const float *in, const uint16_t *p, const uint16_t *w, int M, int K,
                    int N, int threads) {
    if (p)
        amx_matmul(out, in, p, M, K, N, threads);
    else
        mm16_matmul(out, in, w, M, K, N, threads);
}

// one shape on `threads` threads: packing's rate (GB/s of bf16 in) and the product's, with
// harvest's AMX kernel (amx) or oneDNN's (its packing then inside the first, untimed, call)
static void shape(int M, int K, int N, int threads, int reps, struct clocks pk, bool amx) {
    uint16_t *w = weights(K, N);
    uint16_t *p = amx ? aligned_alloc(64, (size_t)amx_packed_bytes(K, N)) : NULL;
    float *in = malloc(sizeof(float) * (size_t)M * K), *out = malloc(sizeof(float) * (size_t)M * N);
    if ((amx && !p) || !in || !out) exit(2);
    check_fill(in, (int64_t)M * K, 1);
    struct clocks t0 = now(threads);
    if (amx) amx_pack(p, w, K, N, false, threads);
    struct clocks t1 = now(threads);
    double gb = 2e-9 * K * (double)N; // GB of bf16 in
    struct clocks best = {0, 0};
    double flops = 2.0 * M * K * (double)N;
    product(out, in, p, w, M, K, N, threads); // warm-up
    for (int r = 0; r < reps; r++) {
        struct clocks a = now(threads);
        product(out, in, p, w, M, K, N, threads);
        struct clocks b = now(threads);
        double wr = flops / (b.wall - a.wall) * 1e-9, cr = flops / (b.cpu - a.cpu) * 1e-9;
        best.wall = wr > best.wall ? wr : best.wall;
        best.cpu = cr > best.cpu ? cr : best.cpu;
    }
    printf("M %d K %5d N %5d, %d thr: product %7.1f GFLOP/s wall = %3.0f%% | %7.1f per CPU-s = "
           "%3.0f%% of the peak",
           M, K, N, threads, best.wall, 100.0 * best.wall / pk.wall, best.cpu,
           100.0 * best.cpu / pk.cpu);
    if (amx)
        printf("; packing %5.2f GB/s wall, %5.2f per CPU-s", gb / (t1.wall - t0.wall),
               gb / (t1.cpu - t0.cpu));
    printf("\n");
    fflush(stdout);
    if (!amx) mm16_forget();
    free(w), free(p), free(in), free(out);
}

// without AMX: the vector peaks on registers, and oneDNN's products at the same shapes against
// the vdpbf16ps peak (measured in wall time; a CPU-second's share is that over the threads)
static int without_amx(const char *why, int reps, int M, const int dims[2]) {
    printf("no AMX kernel here (%s): oneDNN's bf16 products (%s) against vdpbf16ps; best of %d\n",
           why, mm16_kernel(), reps);
    for (int threads = 1; threads <= 2; threads++) {
#ifdef _OPENMP
        omp_set_num_threads(threads);
#endif
        double fma = simd_peak_gflops(SIMD_FMA32, threads, 5),
               dp = simd_peak_gflops(SIMD_DPBF16, threads, 5);
        printf("peak, %d thr: %s on registers %7.1f GFLOP/s wall; %s %7.1f\n", threads,
               simd_peak_name(SIMD_DPBF16), dp, simd_peak_name(SIMD_FMA32), fma);
        if (dp <= 0) continue;
        for (int i = 0; i < 4; i++)
            shape(M, dims[i / 2], dims[i % 2], threads, reps, (struct clocks){dp, dp / threads},
                  false);
    }
    return 0;
}

// the step loop on 1 thread with A of a_steps and B of b_steps tiles a strip (2 strips each:
// 2 KiB a step of each), best of reps, as a share of the 1-thread peak
static void feed(const char *where, int64_t a_steps, int64_t b_steps, int reps, double pk) {
    int64_t na = 2 * a_steps * 512, nb = 2 * b_steps * 512;
    uint16_t *a = aligned_alloc(64, sizeof(uint16_t) * (size_t)na);
    uint16_t *b = aligned_alloc(64, sizeof(uint16_t) * (size_t)nb);
    float *f = malloc(sizeof(float) * (size_t)(na > nb ? na : nb));
    if (!a || !b || !f) exit(2);
    check_fill(f, na > nb ? na : nb, 7); // written values: unwritten pages all read one zero page
    for (int64_t i = 0; i < na || i < nb; i++) {
        if (i < na) a[i] = mm16_round(f[i]);
        if (i < nb) b[i] = mm16_round(f[nb - 1 - i]);
    }
    double best = 0.0, steps = 2e6;
    amx_feed_flops(a, a_steps, b, b_steps, (int64_t)steps); // warm-up: the caches filled
    for (int r = 0; r < reps; r++) {
        struct clocks t0 = now(1);
        double fl = (double)amx_feed_flops(a, a_steps, b, b_steps, (int64_t)steps);
        struct clocks t1 = now(1);
        double g = fl / (t1.cpu - t0.cpu) * 1e-9;
        best = g > best ? g : best;
    }
    printf("step loop, 1 thr, A %5lld KiB, B %5lld KiB (%s): %7.1f GFLOP/s per CPU-s = %3.0f%% of "
           "the peak\n",
           (long long)(na / 512), (long long)(nb / 512), where, best, 100.0 * best / pk);
    fflush(stdout);
    free(a), free(b), free(f);
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 3, M = argc > 2 ? atoi(argv[2]) : 4096;
    char msg[256] = "";
    if (reps < 1 || M < 1) {
        fprintf(stderr, "usage: bench_amx [REPS >= 1 [M >= 1]]\n");
        return 1;
    }
    const int dims[2] = {2048, 8192};
    if (mm16_init(msg, sizeof msg) < 0) {
        fprintf(stderr, "bench_amx: %s\n", msg);
        return 2;
    }
    if (!mm16_set_own_kernel(true)) return without_amx(mm16_kernel(), reps, M, dims);
    printf("AMX kernel (AMX_KC %d, AMX_NB %d, AMX_MB %d); best of %d; wall figures include the "
           "other processes' share of the cores (load), CPU figures do not\n",
           AMX_KC, AMX_NB, AMX_MB, reps);
    double pk1 = 0.0;
    for (int threads = 1; threads <= 2; threads++) {
#ifdef _OPENMP
        omp_set_num_threads(threads);
#endif
        struct clocks pk = peak(threads, 5);
        printf("peak, %d thr: tdpbf16ps on registers %7.1f GFLOP/s wall, %7.1f per CPU-s\n",
               threads, pk.wall, pk.cpu);
        pk1 = threads == 1 ? pk.cpu : pk1;
        for (int i = 0; i < 4; i++)
            shape(M, dims[i / 2], dims[i % 2], threads, reps, pk, true);
    }
#ifdef _OPENMP
    omp_set_num_threads(1);
#endif
    feed("both in L1", 8, 8, reps, pk1);
    feed("A in L1, B in L2", 8, 512, reps, pk1);
    feed("both in L2", 64, 64, reps, pk1);
    feed("A in L1, B beyond L2", 8, 8192, reps, pk1);
    feed("both beyond L2", 8192, 8192, reps, pk1);
    return 0;
}
