// dnnl.h - bf16 x bf16 -> float32 matmuls (the `compute: "bf16"` mode of model/ops.h
// op_matmul_bf16): on a CPU with AMX-BF16 harvest's own AMX kernel (model/amx.h), elsewhere
// oneDNN (its AVX512-BF16 kernels or its fallback).
//
// out[M,N] = bf16(in)[M,K] . w16[N,K]^T with float32 accumulation: `in` rounded to bf16 (to
// nearest, ties to even) at the input only.
//
// The kernel (chosen once, by mm16_init): harvest's AMX kernel when cpuid has AMX-TILE and
// AMX-BF16, AVX-512 is enabled and the OS grants the tile state (arch_prctl ARCH_REQ_XCOMP_PERM,
// Linux >= 5.16); otherwise oneDNN, and mm16_kernel() says why. The environment variable
// HARVEST_BF16_KERNEL=onednn chooses oneDNN on an AMX machine too (to compare them); "amx" or
// "auto" is the default; another value is an error of mm16_init. With the AMX kernel every
// matrix is packed into its tile layout (amx.h) at its first product, by the rules below; the
// two kernels' results may differ in the last bits, each deterministic as below.
//
// Pre-packed weights: the first product of a matrix w16 (by its address and (K, N)) reorders it,
// one column tile at a time, into the blocked layout oneDNN's matmul primitive chose for the tile
// shape (weights format `any`: for AMX e.g. BA16a64b2a), kept in one allocation a matrix until
// mm16_forget; later products read that copy. When w16 lies in a read-only private file mapping
// (a checkpoint's safetensors), its whole pages are then released (madvise MADV_DONTNEED: they
// come back from the file if read again), so the weights are held once. A shape oneDNN cannot
// reorder to keeps the plain path (counted in mm16_packing). The packed copy is a pure reorder
// (bits moved, none changed), and a packed tile is a function of (K, cols) and its row like a
// plain one, so the determinism below holds for both; a packed and a plain product of the same
// operands may differ in the last bits (another kernel). Within a parallel region (a mixture's
// experts) the threads pack the matrices they meet first at once, each its own; a thread that
// wants a matrix another is packing waits for it. w16 must not change, nor its mapping be
// unmapped, before mm16_forget.
//
// Determinism (oneDNN; the AMX kernel's is amx.h's, the same contract): oneDNN picks its K blocking
// from the whole shape (M too: at K=2048, N=8192 a call of 128 rows rounds differently from one of
// 64 or 256), so every product is cut into tiles of exactly MM16_ROWS rows (the last padded with
// zero rows) by MM16_COLS columns (the last N % MM16_COLS), each tile one oneDNN call on one
// thread, created with one thread. Each output element then depends only on (K, N) and its row of
// `in`: not on M, on the row's position, on the thread count or on the rank grid. tests/test_dnnl.c
// checks it.
#ifndef AH_DNNL_H
#define AH_DNNL_H

#include <stdbool.h>
#include <stdint.h>

#define MM16_ROWS 64
#define MM16_COLS 512

// Creates the CPU engine and chooses the kernel (once; later calls return the first result): 0,
// or -1 with a message in msg (msg_size bytes) when oneDNN has no CPU engine or
// HARVEST_BF16_KERNEL is not a kernel's name.
int mm16_init(char *msg, int msg_size);

// The kernel in use, for a start-up line: "harvest's AMX kernel, ...", or "oneDNN IMPL;
// harvest's AMX kernel off: WHY" (no parentheses; a static string, valid until the next call).
const char *mm16_kernel(void);
// Whether matrices packed from now on use the AMX kernel (for tests; only where AMX runs):
// returns what was set. Call it outside products, right after mm16_forget.
bool mm16_set_own_kernel(bool on);

// The product above (mm16_init done); the first with a given w16 packs it (see above). Splits its
// tiles over `threads` OpenMP threads (within a parallel region: on the calling thread). Buffers
// grow on demand, per thread, and are kept; an allocation that fails or a oneDNN call that fails
// ends the process with exit code 2 and a message (a system failure: the kernels of model/ never
// return errors).
void mm16_matmul(float *out, const float *in, const uint16_t *w16, int M, int K, int N,
                 int threads);
// The same with w16 (K, N) row-major (GPT-2's Conv1D layout): out = bf16(in) . w16, packed from
// that layout (a matrix is packed per layout: w16 given both ways is two matrices).
void mm16_matmul_kn(float *out, const float *in, const uint16_t *w16, int M, int K, int N,
                    int threads);

// Whether a new matrix is packed (default true; false: the plain path for matrices not yet
// packed, for tests). Set it outside products; it clears mm16_packing's figures of the last
// table forgotten.
void mm16_set_packing(bool on);
// Frees every packed matrix (call it before unmapping or changing the weights: a model's close).
// Not during a product.
void mm16_forget(void);
// The table's matrices packed and left plain, the packed copies' bytes, the mapped bytes
// released, and the wall seconds during which a thread was packing (not counted in
// mm16_counters); when the table is empty, the figures it had when last forgotten (a run's, read
// after its model was freed).
struct mm16_packing {
    int n_packed, n_plain;
    int64_t bytes, released;
    double seconds;
};
struct mm16_packing mm16_packing(void);

// float -> bf16, round to nearest even (NaN stays a quiet NaN)
uint16_t mm16_round(float f);

// The implementation oneDNN chose for a tile of K columns of input (e.g.
// "brg:avx512_core_amx_bf16").
const char *mm16_impl(int K);

// FLOPs (2 M K N, M as asked, padding not counted) and wall seconds of the products run outside
// parallel regions since the last reset (an expert's products inside a region are not counted).
void mm16_counters(double *flops, double *seconds);
void mm16_reset_counters(void);

// GFLOP/s of tdpbf16ps on tile registers on `threads` threads (model/amx.h amx_peak_gflops), or 0
// where AMX cannot run (HARVEST_BF16_KERNEL=onednn does not stop it): the AMX peak.
double mm16_amx_peak_gflops(int threads, int reps);

// GFLOP/s of one oneDNN bf16 matmul of n x n x n on `threads` threads (best of `reps`): the peak
// a benchmark compares with.
double mm16_peak_gflops(int n, int threads, int reps);

#endif
