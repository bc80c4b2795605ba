// test_vexp.c - model/vexp.c: the vector expf gives libm's expf bit for bit on every float
// pattern (every 97th under a sanitizer, whose build is too slow for all 2^32), in place and
// not, at every tail length; vexp_expf equals libm whether or not it chose the vector loop.
// Exit 77 (skipped) only where the CPU lacks AVX-512, the vector loop's precondition.
#include "model/vexp.h"
#include "tests/check.h"

#include <stdlib.h>
#include <string.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_UNDEFINED__)
#define STRIDE 97u
#else
#define STRIDE 1u
#endif

static bool same(float a, float b) {
    return !memcmp(&a, &b, sizeof a) || (isnan(a) && isnan(b));
}

// every STRIDE-th pattern, a block at a time, against expf
static void test_every_pattern(void) {
    enum { B = 1 << 12 };
    uint64_t bad = 0, n = 0;
    const int64_t blocks = (int64_t)(((1ull << 32) / STRIDE + B - 1) / B);
#pragma omp parallel for schedule(dynamic, 16) reduction(+ : bad, n)
    for (int64_t b = 0; b < blocks; b++) {
        float x[B], y[B];
        int k = 0;
        for (uint64_t p = (uint64_t)b * B * STRIDE; k < B && p < (1ull << 32); k++, p += STRIDE) {
            uint32_t u = (uint32_t)p;
            memcpy(&x[k], &u, sizeof u);
        }
        if (!vexp_expf_vector(y, x, k)) bad++;
        for (int i = 0; i < k; i++, n++) {
            float e = expf(x[i]);
            if (same(e, y[i])) continue;
            if (bad++ < 5)
#pragma omp critical
                fprintf(stderr, "vexp(%a) = %a, expf %a\n", (double)x[i], (double)y[i], (double)e);
        }
    }
    fprintf(stderr, "test_vexp: %llu patterns, %llu differ from libm's expf\n",
            (unsigned long long)n, (unsigned long long)bad);
    CHECK_EQ(bad, 0);
}

// in place, at lengths 0..40 (the 8-lane loop's tails), from an odd offset, specials inside
static void test_in_place_and_tails(void) {
    float buf[48], want[48];
    for (int n = 0; n <= 40; n++) {
        for (int i = 0; i < 48; i++)
            buf[i] = (float)(i * 7 % 23) * 4.5f - 60.0f;
        buf[3] = 100.0f, buf[5] = -INFINITY, buf[9] = NAN, buf[12] = -200.0f;
        for (int i = 0; i < 48; i++)
            want[i] = i >= 1 && i < 1 + n ? expf(buf[i]) : buf[i];
        CHECK(vexp_expf_vector(buf + 1, buf + 1, n));
        for (int i = 0; i < 48; i++)
            if (!same(buf[i], want[i])) {
                fprintf(stderr, "n %d: [%d] = %a, want %a\n", n, i, (double)buf[i],
                        (double)want[i]);
                check_failures++;
                break;
            }
    }
}

// the dispatching entry point: libm's bits, the vector loop chosen on this CPU
static void test_dispatch(void) {
    float x[1000], y[1000];
    for (int i = 0; i < 1000; i++)
        x[i] = -95.0f + 0.19f * (float)i;
    vexp_expf(y, x, 1000);
    for (int i = 0; i < 1000; i++)
        CHECK(same(y[i], expf(x[i])));
    CHECK(vexp_vector_used());
}

int main(void) {
    float probe = 0.0f;
    if (!vexp_expf_vector(&probe, &probe, 0)) {
        fprintf(stderr, "test_vexp: no AVX-512 here: skipped\n");
        return 77;
    }
    test_in_place_and_tails();
    test_dispatch();
    test_every_pattern();
    return check_failures ? EXIT_FAILURE : EXIT_SUCCESS;
}
