// blascheck.h - which BLAS kernel this process runs, and the right one when OpenBLAS fell back.
//
// Debian's OpenBLAS 0.3.21 picks its kernels at load time from the CPU model it knows; on a CPU
// newer than the library (a 5th-generation Xeon, say) it falls back to its SSE3 "Prescott"
// kernels and runs 4-5x slower. `run` and `bench` call blas_select() first thing: when OpenBLAS
// chose a core below what the CPU supports (cpuid, and the OS saves the registers) and the user
// has not set OPENBLAS_CORETYPE, harvest re-executes itself with OPENBLAS_CORETYPE set to the
// right core; the new process checks that it got that core and that an sgemm agrees with a naive
// product before it goes on, else it goes back to OpenBLAS's own choice and warns. A user's own
// OPENBLAS_CORETYPE is never overridden; when it names a core below what the CPU runs, the
// start-up line says so (some clusters' and containers' environments set it).
#ifndef AH_BLASCHECK_H
#define AH_BLASCHECK_H

#include <stdbool.h>

// What the CPU can run, from cpuid and xgetbv.
struct cpu_isa {
    bool avx2_fma; // AVX2 + FMA, YMM state saved by the OS
    bool avx512;   // AVX-512 F, CD, BW, DQ, VL, ZMM state saved by the OS
    bool amd;      // vendor AuthenticAMD (Zen kernels) or HygonGenuine
};
struct cpu_isa cpu_isa_detect(void);

// The OpenBLAS core to use instead of `core` on a CPU with `isa`, or NULL when `core` is right
// (or not one harvest knows to replace). Pure: tested in tests/test_blascheck.c.
const char *blas_better_core(const char *core, struct cpu_isa isa);

// Max relative error of sgemm (both transposes, odd sizes) against a double-precision product:
// a working kernel gives about 1e-7; `fault` perturbs one element (the test hook).
double blas_selfcheck(bool fault);

// The re-exec described above; returns when this process keeps its BLAS (a warning on stderr if
// the chosen core failed its check or the re-exec failed). Before MPI_Init.
void blas_select(char **argv);

// "OpenBLAS 0.3.21, core SkylakeX (harvest's choice for this CPU; OpenBLAS chose Prescott)".
const char *blas_describe(void);

#endif
