// halfconv.h - float32 <-> float16 / bfloat16 bit conversions (round to nearest even, NaN kept).
#ifndef AH_HALFCONV_H
#define AH_HALFCONV_H

#include <stdint.h>

uint16_t hc_f32_to_f16(float f);
uint16_t hc_f32_to_bf16(float f);
float hc_f16_to_f32(uint16_t h);
float hc_bf16_to_f32(uint16_t h);

void hc_f32_to_f16_n(uint16_t *out, const float *in, int64_t n);
void hc_f32_to_bf16_n(uint16_t *out, const float *in, int64_t n);

#endif
