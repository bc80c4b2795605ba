// halfconv.c - see halfconv.h
#include "io/halfconv.h"

#include <string.h>

static uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float float_of(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t hc_f32_to_bf16(float f) {
    uint32_t u = bits_of(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float hc_bf16_to_f32(uint16_t h) {
    return float_of((uint32_t)h << 16);
}

uint16_t hc_f32_to_f16(float f) {
    uint32_t u = bits_of(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);  // NaN
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); // overflow (after rounding) -> inf
    if (a < 0x38800000u) {                                   // subnormal or zero in f16
        if (a < 0x33000000u) return (uint16_t)sign;          // rounds to 0
        uint32_t e = a >> 23;
        uint32_t m = (a & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e; // 14 + (113 - e) ... value = m * 2^(e-150); f16 sub unit 2^-24
        uint32_t r = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1u))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = a - 0x38000000u; // rebias exponent 127 -> 15
    r += 0xfffu + ((r >> 13) & 1u);
    return (uint16_t)(sign | (r >> 13));
}

float hc_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) {
        if (m == 0) return float_of(sign);
        float v = (float)m * float_of(0x33800000u); // m * 2^-24
        return sign ? -v : v;
    }
    if (e == 31) return float_of(sign | 0x7f800000u | (m << 13));
    return float_of(sign | ((e + 112) << 23) | (m << 13));
}

void hc_f32_to_f16_n(uint16_t *out, const float *in, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        out[i] = hc_f32_to_f16(in[i]);
}

void hc_f32_to_bf16_n(uint16_t *out, const float *in, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        out[i] = hc_f32_to_bf16(in[i]);
}
