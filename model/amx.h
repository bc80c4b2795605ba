// amx.h - harvest's own bf16 x bf16 -> float32 matmul on the AMX tiles (tdpbf16ps): the first
// choice of model/dnnl.h's products on a CPU with AMX-BF16 (dnnl.c checks the CPU and asks the
// kernel for the tile state; nothing here may run before that check succeeded: this file is
// compiled for AMX and AVX-512).
//
// out[M,N] = bf16(in)[M,K] . w[N,K]^T, float32 accumulation.
//
// Layouts (a tile is 16 rows x 64 bytes, nk = ceil(K / 32) steps of 32 K):
//   - packed weights (amx_pack): the columns in strips of 16, ceil(N / 32) * 2 strips (the last
//     padded with zero columns), tile (j, t) holding in row r, column c the pair
//     (w[16 j + c][32 t + 2 r], w[16 j + c][32 t + 2 r + 1]) (VNNI: the even K first), zero past
//     K; the tiles in blocks of AMX_KC steps of K, in a block strip after strip, a strip's steps
//     of the block one after another (a block's weights for AMX_NB columns are contiguous);
//   - the input (inside amx_matmul): rounded to bf16 (to nearest, ties to even; a NaN stays a
//     quiet NaN), rows in strips of 16 (ceil(M / 32) * 2 strips, zero rows past M), strip s's nk
//     tiles one after another, row r of tile (s, t) = in[16 s + r][32 t .. 32 t + 31], zero past
//     K.
//
// The product: blocks of 32 x 32 outputs (4 C tiles from 2 A and 2 B tiles), the K steps always
// in order 0 .. nk - 1 (cut into blocks of AMX_KC steps whose partial sums are stored and
// reloaded as float32: exact), so an output element depends only on (K, N), its row of `in` and
// its column of w: not on M, the row's position, the thread count or how the work is split.
// Inputs and weights that are bf16 denormals count as zero (the AMX unit's rule).
#ifndef AH_AMX_H
#define AH_AMX_H

#include <stdbool.h>
#include <stdint.h>

#ifndef AMX_KC
#define AMX_KC 8 // K steps (of 32) a block: the input's 2 strips x 8 tiles (16 KiB) stay in L1
#endif
#ifndef AMX_NB
#define AMX_NB 512 // columns a block: its weights (32 strips x 8 tiles, 256 KiB) stay in L2
#endif
#ifndef AMX_MB
#define AMX_MB 256 // rows a block: its float32 partial sums (MB x NB, 512 KiB) stay in L2
#endif

// bytes of w (K, N) packed
int64_t amx_packed_bytes(int K, int N);

// w packed into dst (amx_packed_bytes(K, N) bytes, 64-byte aligned): w is [N, K] row-major, or
// (K, N) row-major when kn (GPT-2's Conv1D layout); the same matrix packs to the same bytes either
// way. Splits the work over `threads` OpenMP threads (within a parallel region: the caller's).
void amx_pack(uint16_t *dst, const uint16_t *w, int K, int N, bool kn, int threads);

// The product above with w packed (amx_pack), over `threads` OpenMP threads (within a parallel
// region: on the calling thread). Buffers grow on demand and are kept (the input's: one for
// calls outside parallel regions, one a thread inside); a failed allocation ends the process
// with exit code 2 and a message (a system failure: kernels never return errors).
void amx_matmul(float *out, const float *in, const uint16_t *packed, int M, int K, int N,
                int threads);

// GFLOP/s of tdpbf16ps on tile registers only (no memory), on `threads` threads at once (each
// its own tiles; the sum of their FLOPs over the wall time), best of `reps` rounds: the AMX
// peak a benchmark compares with.
double amx_peak_gflops(int threads, int reps);

// The same loop run once on `threads` threads, untimed: the FLOPs it did (all threads'), for a
// caller that times it its own way (CPU time on a loaded machine: tests/bench_amx.c).
int64_t amx_peak_flops(int threads);

// The micro-kernel's K-step loop alone on the calling thread, `steps` steps: its A tiles from
// a (2 strips of a_steps tiles, the second after the first), its B tiles from b (2 strips of
// b_steps), step t reading tile t % a_steps and t % b_steps of each; the C tiles never stored.
// The FLOPs it did. With operands that fit L1, L2 or neither, the rate the kernel's loads allow
// (tests/bench_amx.c); give it written memory: pages never written all read the one zero page.
int64_t amx_feed_flops(const uint16_t *a, int64_t a_steps, const uint16_t *b, int64_t b_steps,
                       int64_t steps);

#endif
