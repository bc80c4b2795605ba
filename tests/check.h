// check.h - tiny test helpers: CHECK/CHECK_EQ evaluate once and print file:line with both values;
// check_close prints the first mismatches and the max difference. A test's main returns
// `check_failures ? EXIT_FAILURE : EXIT_SUCCESS`.
#ifndef AH_CHECK_H
#define AH_CHECK_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>

static int check_failures;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
            check_failures++;                                                        \
        }                                                                            \
    } while (0)

#define CHECK_EQ(a, b)                                                                            \
    do {                                                                                          \
        long long va_ = (long long)(a), vb_ = (long long)(b);                                     \
        if (va_ != vb_) {                                                                         \
            fprintf(stderr, "%s:%d: CHECK_EQ(%s, %s) failed: %lld != %lld\n", __FILE__, __LINE__, \
                    #a, #b, va_, vb_);                                                            \
            check_failures++;                                                                     \
        }                                                                                         \
    } while (0)

// |got - want| <= atol + rtol * |want| elementwise
static inline int check_close(const char *label, const float *got, const float *want, int64_t n,
                              float atol, float rtol) {
    int bad = 0;
    double maxdiff = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)want[i]);
        if (d > maxdiff || isnan(d)) maxdiff = isnan(d) ? (double)INFINITY : d;
        if (!(d <= (double)atol + (double)rtol * fabs((double)want[i]))) {
            if (bad < 5)
                fprintf(stderr, "%s[%lld]: got %.9g want %.9g\n", label, (long long)i,
                        (double)got[i], (double)want[i]);
            bad++;
        }
    }
    if (bad) {
        fprintf(stderr, "%s: %d of %lld mismatched, maxdiff %.3g\n", label, bad, (long long)n,
                maxdiff);
        check_failures++;
    }
    return bad == 0;
}

// deterministic inputs in [-1, 1)
static inline void check_fill(float *x, int64_t n, uint64_t seed) {
    uint64_t s = seed * 2654435761u + 1;
    for (int64_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(s >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
    }
}

#endif
