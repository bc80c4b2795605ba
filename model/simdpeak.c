// simdpeak.c - the vector units' peaks on registers (simdpeak.h).
#include "model/simdpeak.h"

#include "model/region.h" // defines: op_wall

#include <stdbool.h>

#define SIMD_PEAK_ITERS 1000000L // per accumulator and round: 0.5 / 1 GFLOP a thread (zmm)

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

static volatile float sink; // the accumulators' sum goes here, so the loops are not dropped

// twelve independent chains: more than an FMA's latency x its throughput on current cores
#define TWELVE(op) \
    op(a0), op(a1), op(a2), op(a3), op(a4), op(a5), op(a6), op(a7), op(a8), op(a9), op(a10), op(a11)
// each accumulator its own read of the volatile zero: equal ones would be one chain to the compiler
#define ZSET(v) _mm512_set1_ps(v)
#define YSET(v) _mm256_set1_ps(v)

__attribute__((target("avx512f"))) static long fma_zmm(long iters) {
    volatile float zero = 0.0f;
    __m512 x = _mm512_set1_ps(zero), a0 = ZSET(zero), a1 = ZSET(zero), a2 = ZSET(zero),
           a3 = ZSET(zero), a4 = ZSET(zero), a5 = ZSET(zero), a6 = ZSET(zero), a7 = ZSET(zero),
           a8 = ZSET(zero), a9 = ZSET(zero), a10 = ZSET(zero), a11 = ZSET(zero);
#define FMA_Z(a) (a = _mm512_fmadd_ps(x, x, a))
    for (long i = 0; i < iters; i++)
        TWELVE(FMA_Z);
    __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                             _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
    s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)));
    sink = _mm512_reduce_add_ps(s);
    return iters * 12 * 16 * 2;
}

__attribute__((target("avx2,fma"))) static long fma_ymm(long iters) {
    volatile float zero = 0.0f;
    __m256 x = _mm256_set1_ps(zero), a0 = YSET(zero), a1 = YSET(zero), a2 = YSET(zero),
           a3 = YSET(zero), a4 = YSET(zero), a5 = YSET(zero), a6 = YSET(zero), a7 = YSET(zero),
           a8 = YSET(zero), a9 = YSET(zero), a10 = YSET(zero), a11 = YSET(zero);
#define FMA_Y(a) (a = _mm256_fmadd_ps(x, x, a))
    for (long i = 0; i < iters; i++)
        TWELVE(FMA_Y);
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                             _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
    s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
    float v[8];
    _mm256_storeu_ps(v, s);
    sink = v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
    return iters * 12 * 8 * 2;
}

__attribute__((target("avx512f,avx512bf16"))) static long dpbf16_zmm(long iters) {
    volatile float zero = 0.0f;
    __m512 x = _mm512_set1_ps(zero), a0 = ZSET(zero), a1 = ZSET(zero), a2 = ZSET(zero),
           a3 = ZSET(zero), a4 = ZSET(zero), a5 = ZSET(zero), a6 = ZSET(zero), a7 = ZSET(zero),
           a8 = ZSET(zero), a9 = ZSET(zero), a10 = ZSET(zero), a11 = ZSET(zero);
    __m512bh b = (__m512bh)_mm512_castps_si512(x);
#define DP_Z(a) (a = _mm512_dpbf16_ps(a, b, b))
    for (long i = 0; i < iters; i++)
        TWELVE(DP_Z);
    __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                             _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
    s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)));
    sink = _mm512_reduce_add_ps(s);
    return iters * 12 * 16 * 2 * 2;
}

// the loop measured for kind, or NULL where the CPU lacks it (the OS's xsave state included:
// __builtin_cpu_supports checks it)
static long (*loop_of(enum simd_peak kind, const char **name))(long) {
    __builtin_cpu_init();
    bool avx512 = __builtin_cpu_supports("avx512f");
    *name = "none";
    if (kind == SIMD_FMA32 && avx512) return *name = "vfmadd231ps zmm", fma_zmm;
    if (kind == SIMD_FMA32 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return *name = "vfmadd231ps ymm", fma_ymm;
    if (kind == SIMD_DPBF16 && avx512 && __builtin_cpu_supports("avx512bf16"))
        return *name = "vdpbf16ps zmm", dpbf16_zmm;
    return NULL;
}
#else
static long (*loop_of(enum simd_peak kind, const char **name))(long) {
    (void)kind;
    *name = "none";
    return NULL;
}
#endif

const char *simd_peak_name(enum simd_peak kind) {
    const char *name;
    loop_of(kind, &name);
    return name;
}

double simd_peak_gflops(enum simd_peak kind, int threads, int reps) {
    const char *name;
    long (*loop)(long) = loop_of(kind, &name);
    if (!loop) return 0.0;
    double best = 0.0;
    for (int r = 0; r <= reps; r++) { // the first round warms up
        double t0 = 0.0, t1 = 0.0, flops = 0.0;
#pragma omp parallel num_threads(threads) reduction(+ : flops)
        {
#pragma omp barrier
#pragma omp single
            t0 = op_wall();
            flops = (double)loop(SIMD_PEAK_ITERS);
#pragma omp barrier
#pragma omp single
            t1 = op_wall();
        }
        double g = t1 > t0 ? flops / (t1 - t0) * 1e-9 : 0.0;
        if (r > 0 && g > best) best = g;
    }
    return best;
}
