// vexp.h - expf over an array with libm's own bits: softmax and SiLU call it instead of expf a
// value at a time. On a CPU with AVX-512 it runs the algorithm of glibc's expf (the one glibc
// picks where the CPU has FMA: x * 32 / ln 2 = k + r, exp(x) = 2^(k/32) * a cubic in r, in double
// with fused multiply-adds) eight values at a time, and its result is libm's expf bit for bit;
// the first call checks that on a spread of inputs and keeps libm's expf if any differs
// (tests/test_vexp.c checks every float). Elsewhere it is libm's expf a value at a time.
#ifndef AH_VEXP_H
#define AH_VEXP_H

#include <stdbool.h>
#include <stdint.h>

// y[i] = expf(x[i]) for 0 <= i < n; y may be x
void vexp_expf(float *y, const float *x, int64_t n);

// whether vexp_expf runs its vector loop here (after the first call's check), and the loop itself
// for the test, which compares it with libm's expf whatever the check said (false, nothing
// written, where the CPU lacks AVX-512)
bool vexp_vector_used(void);
bool vexp_expf_vector(float *y, const float *x, int64_t n);

#endif
