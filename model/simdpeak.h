// simdpeak.h - the vector units' peaks on registers alone (no memory): FP32 FMA and vdpbf16ps
// (AVX512-BF16), the rates a benchmark puts the float32 and bf16 products beside (on a CPU
// without AMX the bf16 products' ceiling is vdpbf16ps's; model/amx.h measures the tiles' own).
//
// Each thread runs SIMD_PEAK_ACC independent accumulators through one instruction a fixed number
// of times; the rate is every thread's FLOPs over the wall time between two barriers, best of
// `reps` rounds after one that warms up. The operands are zeros (the values do not change the
// rate; zeros are never denormal).
#ifndef AH_SIMDPEAK_H
#define AH_SIMDPEAK_H

enum simd_peak {
    SIMD_FMA32,  // vfmadd231ps on the widest vectors the CPU runs: zmm (AVX-512), else ymm (AVX2)
    SIMD_DPBF16, // vdpbf16ps zmm (AVX512-BF16): 16 lanes x 2 products x 2 FLOPs
};

// GFLOP/s of `kind` on `threads` OpenMP threads at once, best of `reps` rounds; 0 where the CPU
// (or the OS's saved vector state) does not have the instruction.
double simd_peak_gflops(enum simd_peak kind, int threads, int reps);

// The instruction measured, for a figure's label: "vfmadd231ps zmm", "vfmadd231ps ymm",
// "vdpbf16ps zmm", or "none" where the CPU lacks it.
const char *simd_peak_name(enum simd_peak kind);

#endif
