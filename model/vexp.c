// vexp.c - expf over arrays (vexp.h): glibc's expf algorithm on eight lanes of AVX-512, checked
// against libm's expf before use.
//
// glibc's expf (sysdeps/ieee754/flt-32/e_expf.c, its FMA build): with xd = x in double,
//   kd = fma(32/ln2, xd, 0x1.8p52)      k = round(x * 32 / ln2) in kd's low bits
//   r  = fma(32/ln2, xd, -(kd - 0x1.8p52))
//   s  = 2^(k/32), its bits: those of 2^((k mod 32) / 32) plus (k / 32) << 52
//   y  = s * fma(fma(C0, r, C1), r * r, fma(C2, r, 1))     then rounded to float
// for |x| < 88 (x's pattern shifted right by 20, sign dropped, at most 0x42a); larger, infinite
// and NaN inputs go to libm itself. The same operations in the same order give the same bits.
#include "model/vexp.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define VEXP_X86 1
#endif

#define VEXP_TOP_MAX 0x42a // larger (x's bits >> 20, sign dropped): libm's special cases

#ifdef VEXP_X86
// 2^(i/32) rounded to nearest, i = 0..31
static const double pow2_32[32] = {
    0x1.0000000000000p+0, 0x1.059b0d3158574p+0, 0x1.0b5586cf9890fp+0, 0x1.11301d0125b51p+0,
    0x1.172b83c7d517bp+0, 0x1.1d4873168b9aap+0, 0x1.2387a6e756238p+0, 0x1.29e9df51fdee1p+0,
    0x1.306fe0a31b715p+0, 0x1.371a7373aa9cbp+0, 0x1.3dea64c123422p+0, 0x1.44e086061892dp+0,
    0x1.4bfdad5362a27p+0, 0x1.5342b569d4f82p+0, 0x1.5ab07dd485429p+0, 0x1.6247eb03a5585p+0,
    0x1.6a09e667f3bcdp+0, 0x1.71f75e8ec5f74p+0, 0x1.7a11473eb0187p+0, 0x1.82589994cce13p+0,
    0x1.8ace5422aa0dbp+0, 0x1.93737b0cdc5e5p+0, 0x1.9c49182a3f090p+0, 0x1.a5503b23e255dp+0,
    0x1.ae89f995ad3adp+0, 0x1.b7f76f2fb5e47p+0, 0x1.c199bdd85529cp+0, 0x1.cb720dcef9069p+0,
    0x1.d5818dcfba487p+0, 0x1.dfc97337b9b5fp+0, 0x1.ea4afa2a490dap+0, 0x1.f50765b6e4540p+0,
};

#define VEXP_TARGET __attribute__((target("avx2,fma,avx512f")))

// eight lanes of xf; *special gets a bit a lane that needs libm (its result is not libm's)
VEXP_TARGET static inline __m256 eight(__m256 xf, unsigned *special) {
    const __m512d inv = _mm512_set1_pd(0x1.71547652b82fep0 * 32), shift = _mm512_set1_pd(0x1.8p52);
    const __m512d c0 = _mm512_set1_pd(0x1.c6af84b912394p-5 / 32 / 32 / 32);
    const __m512d c1 = _mm512_set1_pd(0x1.ebfce50fac4f3p-3 / 32 / 32);
    const __m512d c2 = _mm512_set1_pd(0x1.62e42ff0c52d6p-1 / 32), one = _mm512_set1_pd(1.0);
    __m256i top =
        _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(xf), 20), _mm256_set1_epi32(0x7ff));
    *special = (unsigned)_mm256_movemask_ps(
        _mm256_castsi256_ps(_mm256_cmpgt_epi32(top, _mm256_set1_epi32(VEXP_TOP_MAX))));
    __m512d xd = _mm512_cvtps_pd(xf);
    __m512d kd = _mm512_fmadd_pd(inv, xd, shift);
    __m512i ki = _mm512_castpd_si512(kd);
    kd = _mm512_sub_pd(kd, shift);
    __m512d r = _mm512_fmsub_pd(inv, xd, kd);
    // 2^(j/32), j = ki mod 32: entries 0-15 and 16-31 by j's low 4 bits, then j's bit 4 picks
    __m512i j = _mm512_and_si512(ki, _mm512_set1_epi64(31));
    const __m512i *tab = (const __m512i *)(const void *)pow2_32;
    __m512i lo = _mm512_permutex2var_epi64(_mm512_loadu_si512(tab), j, _mm512_loadu_si512(tab + 1));
    __m512i hi =
        _mm512_permutex2var_epi64(_mm512_loadu_si512(tab + 2), j, _mm512_loadu_si512(tab + 3));
    __m512i t = _mm512_mask_blend_epi64(_mm512_test_epi64_mask(j, _mm512_set1_epi64(16)), lo, hi);
    // glibc's table holds bits(2^(j/32)) - (j << 47) and adds ki << 47: the same sum mod 2^64
    t = _mm512_add_epi64(t, _mm512_slli_epi64(_mm512_sub_epi64(ki, j), 47));
    __m512d sc = _mm512_castsi512_pd(t);
    __m512d z = _mm512_fmadd_pd(c0, r, c1), r2 = _mm512_mul_pd(r, r);
    __m512d p = _mm512_fmadd_pd(c2, r, one);
    p = _mm512_fmadd_pd(z, r2, p);
    return _mm512_cvtpd_ps(_mm512_mul_pd(p, sc));
}

// m <= 8 values at x into y (y may be x)
VEXP_TARGET static inline void lanes(float *y, const float *x, int m) {
    float in[8] = {0}, out[8];
    memcpy(in, x, sizeof(float) * (size_t)m);
    unsigned sp;
    _mm256_storeu_ps(out, eight(_mm256_loadu_ps(in), &sp));
    for (int l = 0; l < m; l++)
        y[l] = sp >> l & 1 ? expf(in[l]) : out[l];
}

VEXP_TARGET static void vector_loop(float *y, const float *x, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        unsigned sp;
        __m256 v = eight(_mm256_loadu_ps(x + i), &sp);
        if (sp) {
            lanes(y + i, x + i, 8);
            continue;
        }
        _mm256_storeu_ps(y + i, v);
    }
    if (i < n) lanes(y + i, x + i, (int)(n - i));
}

bool vexp_expf_vector(float *y, const float *x, int64_t n) {
    static atomic_int cpu; // 0 not yet asked, 1 AVX-512 and FMA, 2 not
    int c = atomic_load_explicit(&cpu, memory_order_relaxed);
    if (c == 0) {
        c = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma") ? 1 : 2;
        atomic_store_explicit(&cpu, c, memory_order_relaxed);
    }
    if (c != 1) return false;
    vector_loop(y, x, n);
    return true;
}
#else
bool vexp_expf_vector(float *y, const float *x, int64_t n) {
    (void)y, (void)x, (void)n;
    return false;
}
#endif

// the first call's check: the vector loop against libm on a spread of inputs over the whole
// range (results from 0 through subnormals to overflow) and the special values
static bool vector_agrees(void) {
    enum { N = 4096 + 8 };
    float x[N], y[N];
    for (int i = 0; i < 4096; i++)
        x[i] = -104.0f + 193.0f * (float)i / 4096.0f + (float)i * 1e-7f;
    const float odd[8] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 88.72f, -87.33f, 0x1p-30f};
    memcpy(x + 4096, odd, sizeof odd);
    if (!vexp_expf_vector(y, x, N)) return false;
    for (int i = 0; i < N; i++) {
        float e = expf(x[i]);
        if (memcmp(&e, &y[i], sizeof e) && !(isnan(e) && isnan(y[i]))) return false;
    }
    return true;
}

static atomic_int state; // 0 not yet checked, 1 the vector loop, 2 libm

bool vexp_vector_used(void) {
    int s = atomic_load_explicit(&state, memory_order_relaxed);
    if (s == 0) {
        s = vector_agrees() ? 1 : 2; // threads racing here all find the same
        atomic_store_explicit(&state, s, memory_order_relaxed);
    }
    return s == 1;
}

void vexp_expf(float *y, const float *x, int64_t n) {
    if (vexp_vector_used() && vexp_expf_vector(y, x, n)) return;
    for (int64_t i = 0; i < n; i++)
        y[i] = expf(x[i]);
}
