// test_halfconv.c - float16/bfloat16 conversions: every 16-bit pattern round-trips, and rounding
// of float32 is to nearest even (checked against the neighbours of each result).
#include "io/halfconv.h"
#include "tests/check.h"

#include <stdlib.h>
#include <string.h>

static void test_all_f16_patterns_round_trip(void) {
    for (uint32_t h = 0; h < 65536; h++) {
        float f = hc_f16_to_f32((uint16_t)h);
        if (isnan(f)) {
            CHECK(isnan(hc_f16_to_f32(hc_f32_to_f16(f))));
            continue;
        }
        if (hc_f32_to_f16(f) != h) {
            CHECK_EQ(hc_f32_to_f16(f), h);
            return;
        }
    }
}

static void test_all_bf16_patterns_round_trip(void) {
    for (uint32_t h = 0; h < 65536; h++) {
        float f = hc_bf16_to_f32((uint16_t)h);
        if (isnan(f)) continue;
        if (hc_f32_to_bf16(f) != h) {
            CHECK_EQ(hc_f32_to_bf16(f), h);
            return;
        }
    }
}

// the result is the nearest representable value; ties go to the even pattern
static void check_nearest(float x, uint16_t (*to)(float), float (*from)(uint16_t),
                          const char *what) {
    uint16_t h = to(x);
    double v = (double)from(h), d = fabs(v - (double)x);
    if (isinf(v)) return;
    for (int k = -1; k <= 1; k += 2) {
        uint16_t n = (uint16_t)(h + k);
        double vn = (double)from(n);
        if (isnan(vn) || isinf(vn) || ((n ^ h) & 0x8000)) continue;
        double dn = fabs(vn - (double)x);
        if (dn < d || (dn == d && (h & 1))) {
            fprintf(stderr, "%s(%.9g) = %#x (%.9g), neighbour %#x (%.9g) is nearer or even\n", what,
                    (double)x, h, v, n, vn);
            check_failures++;
            return;
        }
    }
}

static void test_rounding_is_nearest_even(void) {
    uint64_t s = 12345;
    for (int i = 0; i < 200000; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t u = (uint32_t)(s >> 32);
        float x;
        memcpy(&x, &u, 4);
        if (isnan(x)) continue;
        if (fabsf(x) < 65504.0f) check_nearest(x, hc_f32_to_f16, hc_f16_to_f32, "f16");
        check_nearest(x, hc_f32_to_bf16, hc_bf16_to_f32, "bf16");
    }
    CHECK(hc_f32_to_f16(1e6f) == 0x7c00);   // overflow -> +inf
    CHECK(hc_f32_to_f16(-1e-9f) == 0x8000); // underflow -> -0
    CHECK(isnan(hc_f16_to_f32(hc_f32_to_f16(NAN))));
    CHECK(isnan(hc_bf16_to_f32(hc_f32_to_bf16(NAN))));
    CHECK(hc_f32_to_f16(-INFINITY) == 0xfc00);
}

int main(void) {
    test_all_f16_patterns_round_trip();
    test_all_bf16_patterns_round_trip();
    test_rounding_is_nearest_even();
    return check_failures ? EXIT_FAILURE : EXIT_SUCCESS;
}
