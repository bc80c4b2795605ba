// amx.c - the AMX bf16 kernel (see amx.h): the weights' and the input's tile layouts, the
// 32 x 32 micro-kernel, the cache blocks, and the tdpbf16ps peak. Compiled with -mamx-tile
// -mamx-bf16 -mavx512f -mavx512bf16 (CMakeLists.txt): called only after dnnl.c found AMX.
// M = rows of in and out, K = the shared dimension, N = columns of out (rows of w)
#include "model/amx.h"
#include "model/hugemem.h"
#include "model/region.h"

#include <immintrin.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h> // defines: omp_get_thread_num, omp_get_num_threads
#endif

#define TILE 512 // bf16 a tile (16 rows x 32)

static void die(const char *what) {
    fprintf(stderr, "harvest: AMX kernel: %s failed\n", what);
    exit(2);
}

static int64_t steps_of(int K) {
    return ((int64_t)K + 31) / 32;
}

static int64_t pad32(int64_t n) {
    return (n + 31) / 32 * 32;
}

int64_t amx_packed_bytes(int K, int N) {
    return pad32(N) * steps_of(K) * 32 * (int64_t)sizeof(uint16_t);
}

// the tile configuration: palette 1, all 8 tiles 16 rows x 64 bytes (0-3 C, 4-5 A, 6-7 B)
struct tilecfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};

static void tiles_on(void) {
    struct tilecfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int i = 0; i < 8; i++) {
        c.colsb[i] = 64;
        c.rows[i] = 16;
    }
    // not _tile_loadconfig: GCC 12's declares a read of 8 bytes only (a pointer's worth), so the
    // stores to the rest of c may be dropped as dead and ldtilecfg faults on stack garbage
    __asm__ volatile("ldtilecfg %0" : : "m"(c));
}

// ----------------------------------------------------------------------------
// packing the weights: element (n, k) of w at w[n * sn + k * sk]

// tile (j, t) of the packed weights: K blocks of AMX_KC steps outermost, in each the strips one
// after another, a strip's steps of the block contiguous
static int64_t b_tile(int64_t j, int64_t t, int64_t n_strips, int64_t nk) {
    int64_t k0 = t / AMX_KC * AMX_KC, steps = nk - k0 < AMX_KC ? nk - k0 : AMX_KC;
    return (k0 * n_strips + j * steps + (t - k0)) * TILE;
}

// tile (j, t) element by element: the edges (past N or K), and the reference of the others
static void pack_tile_scalar(uint16_t *d, const uint16_t *w, int64_t j, int64_t t, int K, int N,
                             int64_t sn, int64_t sk) {
    for (int64_t c = 0; c < 16; c++) {
        int64_t n = 16 * j + c;
        for (int64_t r = 0; r < 32; r++) { // r here: the K offset 0..31 in the step
            int64_t k = 32 * t + r;
            d[(r / 2) * 32 + (r % 2) + 2 * c] = n < N && k < K ? w[n * sn + k * sk] : 0;
        }
    }
}

// 16 x 16 32-bit elements transposed in place: x[i] lane l <- x[l] lane i
static void transpose16(__m512i x[16]) {
    __m512i t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(x[i], x[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(x[i], x[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        x[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        x[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        x[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        x[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    for (int h = 0; h < 16; h += 8)
        for (int i = 0; i < 4; i++) {
            t[h + i] = _mm512_shuffle_i32x4(x[h + i], x[h + i + 4], 0x88);
            t[h + i + 4] = _mm512_shuffle_i32x4(x[h + i], x[h + i + 4], 0xdd);
        }
    for (int i = 0; i < 8; i++) {
        x[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
        x[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xdd);
    }
}

// a whole tile of w [N, K]: column c's 32 K values (16 pairs) are 64 bytes at w + n K; the tile
// is their 16 x 16 transpose as pairs
static void pack_tile_nk(uint16_t *d, const uint16_t *w, int64_t j, int64_t t, int K) {
    __m512i x[16];
    for (int c = 0; c < 16; c++)
        x[c] = _mm512_loadu_si512(w + (16 * j + c) * (int64_t)K + 32 * t);
    transpose16(x);
    for (int r = 0; r < 16; r++)
        _mm512_store_si512(d + 32 * r, x[r]);
}

// a whole tile of w (K, N): row r interleaves K rows 2 r and 2 r + 1 of the strip's 16 columns
static void pack_tile_kn(uint16_t *d, const uint16_t *w, int64_t j, int64_t t, int N) {
    const uint16_t *p = w + 32 * t * (int64_t)N + 16 * j;
    for (int r = 0; r < 16; r++) {
        __m512i e = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(p + 2 * r * N)));
        __m512i o =
            _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(p + (2 * r + 1) * N)));
        _mm512_store_si512(d + 32 * r, _mm512_or_si512(e, _mm512_slli_epi32(o, 16)));
    }
}

static void pack_strip(uint16_t *dst, const uint16_t *w, int64_t j, int K, int N, bool kn) {
    int64_t nk = steps_of(K), n_strips = pad32(N) / 16;
    int64_t sn = kn ? 1 : K, sk = kn ? N : 1;
    for (int64_t t = 0; t < nk; t++) {
        uint16_t *d = dst + b_tile(j, t, n_strips, nk);
        if (16 * j + 16 > N || 32 * t + 32 > K)
            pack_tile_scalar(d, w, j, t, K, N, sn, sk);
        else if (kn)
            pack_tile_kn(d, w, j, t, N);
        else
            pack_tile_nk(d, w, j, t, K);
    }
}

void amx_pack(uint16_t *dst, const uint16_t *w, int K, int N, bool kn, int threads) {
    int64_t n_strips = pad32(N) / 16;
    int nt = op_in_region() ? 1 : threads;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t j = 0; j < n_strips; j++)
        pack_strip(dst, w, j, K, N, kn);
}

// ----------------------------------------------------------------------------
// the input: rounded to bf16 (mm16_round's rule, 16 at a time) into strips of 16 rows

// 16 floats at p (the lanes of m; 0 elsewhere) to bf16, round to nearest even, NaN quiet
static __m256i round16(const float *p, __mmask16 m) {
    __m512i u = _mm512_maskz_loadu_epi32(m, p);
    __m512i hi = _mm512_srli_epi32(u, 16);
    __m512i bias =
        _mm512_add_epi32(_mm512_and_si512(hi, _mm512_set1_epi32(1)), _mm512_set1_epi32(0x7fff));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, bias), 16);
    __m512i mag = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
    __mmask16 nan = _mm512_cmpgt_epu32_mask(mag, _mm512_set1_epi32(0x7f800000));
    r = _mm512_mask_blend_epi32(nan, r, _mm512_or_si512(hi, _mm512_set1_epi32(0x40)));
    return _mm512_cvtepi32_epi16(r);
}

static __mmask16 lanes(int64_t n) { // the first n of 16 (n may be <= 0 or > 16)
    return n >= 16 ? (__mmask16)0xffff : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
}

// row m of in (K floats) into its strip's tiles (row r of each), zeros past K
static void pack_row(uint16_t *strip, const float *row, int64_t r, int K) {
    int64_t nk = steps_of(K);
    for (int64_t t = 0; t < nk; t++) {
        int64_t k = 32 * t;
        uint16_t *d = strip + t * TILE + r * 32;
        _mm256_storeu_si256((__m256i *)d, round16(row + k, lanes(K - k)));
        _mm256_storeu_si256((__m256i *)(d + 16), round16(row + k + 16, lanes(K - k - 16)));
    }
}

static void pack_input(uint16_t *a, const float *in, int M, int K, int nt) {
    int64_t n_strips = pad32(M) / 16, nk = steps_of(K);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t s = 0; s < n_strips; s++)
        for (int64_t r = 0; r < 16; r++) {
            int64_t m = 16 * s + r;
            if (m < M)
                pack_row(a + s * nk * TILE, in + m * K, r, K);
            else
                for (int64_t t = 0; t < nk; t++)
                    memset(a + (s * nk + t) * TILE + r * 32, 0, 64);
        }
}

// ----------------------------------------------------------------------------
// the micro-kernel: C (32 x 32 floats at c as 4 tiles of 16 x 16, one after another: rows 0-15
// columns 0-15, rows 0-15 columns 16-31, rows 16-31 columns 0-15, the last) = (zero ? 0 : C) +
// A . B over `steps` K steps, A the tiles a0 (rows 0-15) and a1 (rows 16-31), B b0 (columns
// 0-15) and b1; stored back into c, or when dst is not NULL into the 32 x 32 floats at dst
// (row stride ldd bytes)

// one K step: C tiles 0-3 += A (tiles a0: rows 0-15, a1: rows 16-31) . B (b0: columns 0-15, b1),
// each tile loaded just before its first use
static inline void step(const uint16_t *a0, const uint16_t *a1, const uint16_t *b0,
                        const uint16_t *b1) {
    _tile_loadd(4, a0, 64);
    _tile_loadd(6, b0, 64);
    _tile_dpbf16ps(0, 4, 6);
    _tile_loadd(7, b1, 64);
    _tile_dpbf16ps(1, 4, 7);
    _tile_loadd(5, a1, 64);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
}

static void kernel(float *c, const uint16_t *a0, const uint16_t *a1, const uint16_t *b0,
                   const uint16_t *b1, int64_t steps, bool zero, float *dst, int64_t ldd) {
    if (zero) {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
    } else {
        _tile_loadd(0, c, 64);
        _tile_loadd(1, c + 256, 64);
        _tile_loadd(2, c + 512, 64);
        _tile_loadd(3, c + 768, 64);
    }
    for (int64_t t = 0; t < steps; t++)
        step(a0 + t * TILE, a1 + t * TILE, b0 + t * TILE, b1 + t * TILE);
    if (dst) {
        float *d2 = (float *)(void *)((char *)dst + 16 * ldd);
        _tile_stored(0, dst, ldd);
        _tile_stored(1, dst + 16, ldd);
        _tile_stored(2, d2, ldd);
        _tile_stored(3, d2 + 16, ldd);
        return;
    }
    _tile_stored(0, c, 64);
    _tile_stored(1, c + 256, 64);
    _tile_stored(2, c + 512, 64);
    _tile_stored(3, c + 768, 64);
}

// ----------------------------------------------------------------------------
// a block: rows [m0, m0 + AMX_MB) x columns [n0, n0 + AMX_NB) (padded), its sums in cb (AMX_MB x
// AMX_NB floats, 32 x 32 at a time as the kernel lays them out, rows of them AMX_NB / 32 long), K
// in blocks of AMX_KC steps; the last K block stores the 32 x 32 pieces inside out into out, the
// others' valid parts are copied there from cb

struct job {
    float *out;
    const uint16_t *a, *b; // the input's and the weights' tiles
    int64_t M, N, nk, m_pad, n_pad;
};

// the sums of the 32 x 32 piece at rows mb, columns nb of the block (at m0, n0) into out, those
// inside it
static void copy_out(const struct job *j, const float *cb, int64_t m0, int64_t n0, int64_t mb,
                     int64_t nb) {
    int64_t rows = j->M - m0 - mb, cols = j->N - n0 - nb;
    rows = rows < 32 ? rows : 32;
    for (int64_t r = 0; r < rows; r++) {
        const float *src = cb + mb * AMX_NB + nb * 32 + r / 16 * 512 + r % 16 * 16;
        float *dst = j->out + (m0 + mb + r) * j->N + n0 + nb;
        _mm512_mask_storeu_ps(dst, lanes(cols), _mm512_load_ps(src));
        _mm512_mask_storeu_ps(dst + 16, lanes(cols - 16), _mm512_load_ps(src + 256));
    }
}

// tiles fetched ahead: bytes [0, n) at p, a share at each kernel call of a sequence, so that the
// next sequence finds them in the cache (prefetches never fault: p may be NULL with n 0)
struct ahead {
    const char *p;
    int64_t n, share, done;
};

static struct ahead ahead_of(const uint16_t *p, int64_t n, int64_t calls) {
    struct ahead a = {(const char *)(const void *)p, p ? n : 0, 0, 0};
    a.share = calls > 1 ? (a.n / calls + 63) / 64 * 64 : a.n;
    return a;
}

static void ahead_step(struct ahead *a, bool l1) {
    int64_t end = a->done + a->share < a->n ? a->done + a->share : a->n;
    for (; a->done < end; a->done += 64)
        if (l1)
            _mm_prefetch(a->p + a->done, _MM_HINT_T0);
        else
            _mm_prefetch(a->p + a->done, _MM_HINT_T1);
}

// the 32 x 32 partial sums at c (4 KiB; a block's sums are contiguous, and one past them is the
// end) into L1
static void sums_ahead(const float *c) {
    const char *p = (const char *)(const void *)c;
    for (int o = 0; o < 4096; o += 64)
        _mm_prefetch(p + o, _MM_HINT_T0);
}

static int64_t steps_at(const struct job *j, int64_t k0) {
    return j->nk - k0 < AMX_KC ? j->nk - k0 : AMX_KC;
}

static int64_t cols_at(const struct job *j, int64_t n0) {
    return j->n_pad - n0 < AMX_NB ? j->n_pad - n0 : AMX_NB;
}

// the weights the K block after k0 reads: this block's next, or after its last the next block's
// first (at column nn; none when nn < 0), fetched into L2 over the calls of this K block
static struct ahead weights_ahead(const struct job *j, int64_t n0, int64_t k0, int64_t nn,
                                  int64_t calls) {
    int64_t k1 = k0 + AMX_KC, ns = j->n_pad / 16;
    if (k1 >= j->nk && nn < 0) return ahead_of(NULL, 0, calls);
    if (k1 >= j->nk) n0 = nn, k1 = 0;
    return ahead_of(j->b + b_tile(n0 / 16, k1, ns, j->nk),
                    cols_at(j, n0) / 16 * steps_at(j, k1) * TILE * 2, calls);
}

// the input tiles the row pair after (m, k0) reads (one strip's: the other's follow at +strip
// tiles): the next pair's of this K block, after the block's last row pair the first pair's of
// the next K block or of the next block (at row mn; none when mn < 0), into L1
static struct ahead input_ahead(const struct job *j, int64_t m0, int64_t rows, int64_t m,
                                int64_t k0, int64_t mn, int64_t calls) {
    int64_t strip = j->nk * TILE, k1 = k0;
    if (m + 32 < m0 + rows)
        m += 32;
    else if (k0 + AMX_KC < j->nk)
        m = m0, k1 = k0 + AMX_KC;
    else if (mn >= 0)
        m = mn, k1 = 0;
    else
        return ahead_of(NULL, 0, calls);
    return ahead_of(j->a + m / 16 * strip + k1 * TILE, steps_at(j, k1) * TILE * 2, calls);
}

// a block at (m0, n0) whose thread does the block at (mn, nn) next (mn < 0: none)
static void block(const struct job *j, int64_t m0, int64_t n0, int64_t mn, int64_t nn, float *cb) {
    int64_t rows = j->m_pad - m0 < AMX_MB ? j->m_pad - m0 : AMX_MB, cols = cols_at(j, n0);
    int64_t strip = j->nk * TILE, bytes = strip * 2;
    for (int64_t k0 = 0; k0 < j->nk; k0 += AMX_KC) {
        int64_t steps = steps_at(j, k0);
        bool last = k0 + steps == j->nk;
        struct ahead w = weights_ahead(j, n0, k0, nn, rows / 32 * (cols / 32));
        for (int64_t mb = 0; mb < rows; mb += 32) {
            const uint16_t *a0 = j->a + (m0 + mb) / 16 * strip + k0 * TILE;
            struct ahead x0 = input_ahead(j, m0, rows, m0 + mb, k0, mn, cols / 32), x1 = x0;
            x1.p = x0.n ? x0.p + bytes : NULL;
            for (int64_t nb = 0; nb < cols; nb += 32) {
                const uint16_t *b0 = j->b + b_tile((n0 + nb) / 16, k0, j->n_pad / 16, j->nk);
                bool inside = m0 + mb + 32 <= j->M && n0 + nb + 32 <= j->N;
                float *c = cb + mb * AMX_NB + nb * 32;
                float *dst = last && inside ? j->out + (m0 + mb) * j->N + n0 + nb : NULL;
                ahead_step(&w, false);
                ahead_step(&x0, true);
                ahead_step(&x1, true);
                if (k0 > 0) sums_ahead(c + 1024); // the next call's partial sums
                kernel(c, a0, a0 + strip, b0, b0 + steps * TILE, steps, k0 == 0, dst,
                       j->N * (int64_t)sizeof(float));
                if (last && !inside) copy_out(j, cb, m0, n0, mb, nb);
            }
        }
    }
}

// blocks [i0, i1) of the row-block-inner order (n_mb row blocks a column block), each told the
// next one so that it fetches that one's first tiles ahead
static void blocks(const struct job *j, int64_t i0, int64_t i1, int64_t n_mb, float *cb) {
    for (int64_t i = i0; i < i1; i++) {
        int64_t mn = i + 1 < i1 ? (i + 1) % n_mb * AMX_MB : -1;
        int64_t nn = i + 1 < i1 ? (i + 1) / n_mb * AMX_NB : -1;
        block(j, i % n_mb * AMX_MB, i / n_mb * AMX_NB, mn, nn, cb);
    }
}

static _Thread_local float *cbuf; // AMX_MB x AMX_NB floats, a thread's
static uint16_t *a_buf;           // the input's tiles, calls outside parallel regions
static int64_t a_cap;
static _Thread_local uint16_t *a_nested; // of calls inside one, a thread each
static _Thread_local int64_t a_nested_cap;

static float *sums(void) {
    if (!cbuf && !(cbuf = aligned_alloc(64, sizeof(float) * AMX_MB * AMX_NB)))
        die("malloc of a block's sums");
    return cbuf;
}

static uint16_t *input_buf(int64_t n, bool nested) {
    uint16_t **p = nested ? &a_nested : &a_buf;
    int64_t *cap = nested ? &a_nested_cap : &a_cap;
    if (n > *cap) {
        free(*p);
        if (!(*p = huge_alloc(sizeof(uint16_t) * (size_t)n))) die("malloc of the input");
        *cap = n;
    }
    return *p;
}

void amx_matmul(float *out, const float *in, const uint16_t *packed, int M, int K, int N,
                int threads) {
    if (M <= 0) return;
    bool nested = op_in_region();
    int nt = nested ? 1 : threads;
    struct job j = {out, NULL, packed, M, N, steps_of(K), pad32(M), pad32(N)};
    uint16_t *a = input_buf(j.m_pad * j.nk * TILE / 16, nested);
    pack_input(a, in, M, K, nt);
    j.a = a;
    int64_t n_mb = (j.m_pad + AMX_MB - 1) / AMX_MB, n_nb = (j.n_pad + AMX_NB - 1) / AMX_NB;
    int64_t n = n_mb * n_nb;
    if (nested) {
        tiles_on();
        blocks(&j, 0, n, n_mb, sums());
        _tile_release();
        return;
    }
#pragma omp parallel num_threads(nt)
    {
        tiles_on();
        int t = 0, nth = 1;
#ifdef _OPENMP
        t = omp_get_thread_num(), nth = omp_get_num_threads();
#endif
        // a thread's blocks one run of them, column blocks outer: they share their weights
        blocks(&j, n * t / nth, n * (t + 1) / nth, n_mb, sums());
        _tile_release();
    }
}

// ----------------------------------------------------------------------------
// the feed: the micro-kernel's K-step loop alone (its step(), the C tiles never stored) over
// operands of a given size: what the kernel reaches when its tiles come from L1, L2 or beyond

int64_t amx_feed_flops(const uint16_t *a, int64_t a_steps, const uint16_t *b, int64_t b_steps,
                       int64_t steps) {
    const uint16_t *a1 = a + a_steps * TILE, *b1 = b + b_steps * TILE;
    tiles_on();
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int64_t t = 0; t < steps; t++) {
        int64_t ta = t % a_steps * TILE, tb = t % b_steps * TILE;
        step(a + ta, a1 + ta, b + tb, b1 + tb);
    }
    _tile_release();
    return steps * 4 * 16 * 16 * 32 * 2;
}

// ----------------------------------------------------------------------------
// the peak: 6 independent accumulators, tdpbf16ps only

#define PEAK_ITERS 100000 // 9.8 GFLOP a thread a round

static void peak_loop(void) {
    for (int i = 0; i < PEAK_ITERS; i++) {
        _tile_dpbf16ps(0, 6, 7);
        _tile_dpbf16ps(1, 6, 7);
        _tile_dpbf16ps(2, 6, 7);
        _tile_dpbf16ps(3, 6, 7);
        _tile_dpbf16ps(4, 6, 7);
        _tile_dpbf16ps(5, 6, 7);
    }
}

// one round of peak_loop on every thread of a region of `threads`; *ran the threads it had, and
// with t0 / t1 set the wall times around the loops (after every thread's tiles are set up)
static void peak_round(int threads, int *ran, double *t0, double *t1) {
    static const uint16_t zeros[TILE] = {0}; // the operands' values do not change the rate
    *ran = 1;
#pragma omp parallel num_threads(threads)
    {
#ifdef _OPENMP
#pragma omp single
        *ran = omp_get_num_threads();
#endif
        tiles_on();
        _tile_loadd(6, zeros, 64);
        _tile_loadd(7, zeros, 64);
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        _tile_zero(4);
        _tile_zero(5);
        if (t0) {
#pragma omp barrier
#pragma omp single
            *t0 = op_wall();
        }
        peak_loop();
        if (t1) {
#pragma omp barrier
#pragma omp single
            *t1 = op_wall();
        }
        _tile_release();
    }
}

int64_t amx_peak_flops(int threads) {
    int ran;
    peak_round(threads, &ran, NULL, NULL);
    return (int64_t)6 * PEAK_ITERS * 16 * 16 * 32 * 2 * ran;
}

double amx_peak_gflops(int threads, int reps) {
    double best = 0.0;
    for (int r = 0; r <= reps; r++) { // the first round warms up
        double t0 = 0.0, t1 = 0.0;
        int ran;
        peak_round(threads, &ran, &t0, &t1);
        double g = 6.0 * PEAK_ITERS * 16 * 16 * 32 * 2 * ran / (t1 - t0) * 1e-9;
        if (r > 0 && g > best) best = g;
    }
    return best;
}
