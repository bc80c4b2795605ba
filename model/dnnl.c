// dnnl.c - bf16 matmuls (see dnnl.h): on a CPU with AMX-BF16 harvest's own kernel (model/amx.h),
// elsewhere oneDNN's C API: one engine, a stream and buffers a thread, the primitives cached by
// (K, columns, packed) in a small table; the packed weight matrices (either layout) in another,
// by (w16, K, N).
#define _DEFAULT_SOURCE // defines: strdup, madvise, MADV_DONTNEED, sysconf, syscall
#include "model/dnnl.h"

#include "model/amx.h"
#include "model/hugemem.h"
#include "model/region.h"

#include <oneapi/dnnl/dnnl.h>

#include <cpuid.h> // defines: __get_cpuid_count
#include <sched.h> // defines: sched_yield
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>    // defines: madvise
#include <sys/syscall.h> // defines: SYS_arch_prctl
#include <unistd.h>      // defines: sysconf, syscall
#ifdef _OPENMP
#include <omp.h> // defines: omp_get_max_threads, omp_set_num_threads
#endif

static dnnl_engine_t engine;
static int init_rc = 1; // 1: not tried yet

// a system failure inside a kernel: the message, exit 2
static void die(const char *what, int status) {
    fprintf(stderr, "harvest: oneDNN: %s failed (status %d)\n", what, status);
    exit(2);
}

#define DN(call)                                       \
    do {                                               \
        dnnl_status_t st_ = (call);                    \
        if (st_ != dnnl_success) die(#call, (int)st_); \
    } while (0)

// ----------------------------------------------------------------------------
// the kernel: harvest's AMX one where the CPU and the OS allow it

#define ARCH_REQ_XCOMP_PERM 0x1023 // Linux >= 5.16 (asm/prctl.h)
#define XFEATURE_XTILEDATA  18

static const char *amx_off = "not checked"; // why AMX cannot run here (NULL: it can)
static bool own;                            // new matrices go to the AMX kernel
static const char *own_off;                 // why not, when AMX could (HARVEST_BF16_KERNEL)

// NULL when this process may run AMX-BF16 (cpuid, AVX-512 enabled, the tile state granted)
static const char *amx_check(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 22)) || !(d & (1u << 24)))
        return "the CPU has no AMX-BF16";
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f")) return "AVX-512 is off";
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0)
        return "the OS refused the AMX tile state: arch_prctl ARCH_REQ_XCOMP_PERM, Linux >= 5.16";
    return NULL;
}

// HARVEST_BF16_KERNEL: unset, "amx" or "auto" (AMX where it runs), "onednn"; 0, or -1 with msg
static int pick_kernel(char *msg, int msg_size) {
    const char *k = getenv("HARVEST_BF16_KERNEL");
    amx_off = amx_check();
    own_off = NULL;
    if (k && *k && strcmp(k, "amx") && strcmp(k, "auto") && strcmp(k, "onednn")) {
        snprintf(msg, (size_t)msg_size,
                 "HARVEST_BF16_KERNEL=%s: not one of amx, auto (the same) or onednn", k);
        return -1;
    }
    if (k && !strcmp(k, "onednn")) own_off = "HARVEST_BF16_KERNEL=onednn";
    own = !amx_off && !own_off;
    return 0;
}

int mm16_init(char *msg, int msg_size) {
#pragma omp critical(mm16_table)
    if (init_rc == 1) {
        dnnl_status_t st = dnnl_engine_create(&engine, dnnl_cpu, 0);
        init_rc = st == dnnl_success ? 0 : -1;
        if (init_rc < 0)
            snprintf(msg, (size_t)msg_size, "oneDNN has no CPU engine (dnnl_engine_create: %d)",
                     (int)st);
        else
            init_rc = pick_kernel(msg, msg_size);
    }
    if (init_rc == -1 && msg_size > 0 && !msg[0])
        snprintf(msg, (size_t)msg_size, "the bf16 kernels did not start (see the first error)");
    return init_rc;
}

bool mm16_set_own_kernel(bool on) {
    own = on && !amx_off;
    own_off = on ? NULL : "switched off by mm16_set_own_kernel";
    return own;
}

const char *mm16_kernel(void) {
    static char buf[300];
    if (own) return "harvest's AMX kernel, tdpbf16ps in 32 x 32 blocks";
    snprintf(buf, sizeof buf, "oneDNN %s; harvest's AMX kernel off: %s", mm16_impl(4096),
             amx_off ? amx_off : own_off);
    return buf;
}

double mm16_amx_peak_gflops(int threads, int reps) {
    return amx_off ? 0.0 : amx_peak_gflops(threads, reps);
}

uint16_t mm16_round(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); // NaN: quiet
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

// ----------------------------------------------------------------------------
// primitives: a tile of MM16_ROWS x cols = bf16 (MM16_ROWS, K) . bf16 (K, cols) into float32
// (MM16_ROWS, cols), the weights either plain - the rows [N, K] read as a column-major (K, cols)
// view (row stride K), or a row-major (K, N) matrix's columns (row stride ld, the kn layout) - or
// packed: in the layout the primitive chose for them (format `any`)

struct prim {
    int K, cols;
    bool packed;
    int64_t ld; // plain kn weights: their row stride N; 0: [N, K] rows (or packed)
    dnnl_primitive_t p;
    size_t scratch;        // bytes of its user scratchpad
    dnnl_memory_desc_t wd; // its weights' layout
    const char *impl;
};

#define MAX_PRIMS 128
static struct prim prims[MAX_PRIMS];
static int n_prims;

// a (K, cols) plain view of weights: [N, K] rows (ld 0) or a (K, ld) row-major matrix's columns
static void weights_view(dnnl_memory_desc_t *b, int K, int cols, int64_t ld) {
    dnnl_dims_t db = {K, cols}, sb = {1, K}, skn = {ld, 1};
    DN(dnnl_memory_desc_init_by_strides(b, 2, db, dnnl_bf16, ld ? skn : sb));
}

static void descs(int K, int cols, bool packed, int64_t ld, dnnl_memory_desc_t *a,
                  dnnl_memory_desc_t *b, dnnl_memory_desc_t *c) {
    dnnl_dims_t da = {MM16_ROWS, K}, db = {K, cols}, dc = {MM16_ROWS, cols};
    dnnl_dims_t sa = {K, 1}, sc = {cols, 1};
    DN(dnnl_memory_desc_init_by_strides(a, 2, da, dnnl_bf16, sa));
    if (packed)
        DN(dnnl_memory_desc_init_by_tag(b, 2, db, dnnl_bf16, dnnl_format_tag_any));
    else
        weights_view(b, K, cols, ld);
    DN(dnnl_memory_desc_init_by_strides(c, 2, dc, dnnl_f32, sc));
}

// made with one OpenMP thread, so that oneDNN plans no split of K over threads
static struct prim make(int K, int cols, bool packed, int64_t ld) {
    struct prim r = {K, cols, packed, ld, NULL, 0, {0}, ""};
    dnnl_memory_desc_t a, b, c;
    descs(K, cols, packed, ld, &a, &b, &c);
    dnnl_matmul_desc_t d;
    dnnl_primitive_attr_t at;
    dnnl_primitive_desc_t pd;
    DN(dnnl_matmul_desc_init(&d, &a, &b, NULL, &c));
    DN(dnnl_primitive_attr_create(&at));
    DN(dnnl_primitive_attr_set_scratchpad_mode(at, dnnl_scratchpad_mode_user));
#ifdef _OPENMP
    int was = omp_get_max_threads();
    omp_set_num_threads(1);
#endif
    DN(dnnl_primitive_desc_create(&pd, &d, at, engine, NULL));
    DN(dnnl_primitive_create(&r.p, pd));
#ifdef _OPENMP
    omp_set_num_threads(was);
#endif
    DN(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &r.impl));
    r.scratch =
        dnnl_memory_desc_get_size(dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0));
    r.wd = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    r.impl = strdup(r.impl); // the descriptor's string dies with it
    if (!r.impl) die("strdup", 0);
    DN(dnnl_primitive_desc_destroy(pd));
    DN(dnnl_primitive_attr_destroy(at));
    return r;
}

static const struct prim *prim_of(int K, int cols, bool packed, int64_t ld) {
    const struct prim *r = NULL;
#pragma omp critical(mm16_table)
    {
        for (int i = 0; i < n_prims && !r; i++)
            if (prims[i].K == K && prims[i].cols == cols && prims[i].packed == packed &&
                prims[i].ld == ld)
                r = &prims[i];
        if (!r) {
            if (n_prims == MAX_PRIMS) die("the primitive table (128 shapes) filling", 0);
            prims[n_prims] = make(K, cols, packed, ld);
            r = &prims[n_prims++];
        }
    }
    return r;
}

const char *mm16_impl(int K) {
    return prim_of(K, MM16_COLS, true, 0)->impl;
}

// ----------------------------------------------------------------------------
// per-thread state: a stream, the tile's output and oneDNN's scratchpad

struct tls {
    dnnl_stream_t stream;
    float *tile;   // MM16_ROWS * MM16_COLS floats
    void *scratch; // scratch_n bytes
    size_t scratch_n;
};
static _Thread_local struct tls me;

static struct tls *mine(size_t scratch) {
    if (!me.stream) {
#pragma omp critical(mm16_table)
        DN(dnnl_stream_create(&me.stream, engine, dnnl_stream_default_flags));
        me.tile = malloc(sizeof(float) * MM16_ROWS * MM16_COLS);
        if (!me.tile) die("malloc of a tile", 0);
    }
    if (scratch > me.scratch_n) {
        free(me.scratch);
        if (!(me.scratch = malloc(scratch))) die("malloc of a scratchpad", 0);
        me.scratch_n = scratch;
    }
    return &me;
}

// ----------------------------------------------------------------------------
// packed matrices: w16 [N, K] reordered once, a column tile at a time, into the layout the packed
// primitive of the tile's shape wants, one allocation a matrix; found again by (w16, K, N)

struct packed {
    const uint16_t *w16;
    int K, N;
    bool kn;           // w16 is (K, N) row-major
    bool amx;          // packed for the AMX kernel (amx.h), not for oneDNN's tiles
    char *data;        // the column tiles one after another; owned (NULL: the plain path)
    size_t full;       // bytes of a full tile's (MM16_COLS columns), a multiple of 64
    atomic_bool ready; // packed (data and full are set): until then only its packer reads them
};

// The table: entries are added within the lock critical(mm16_packs) and packed outside it, by the
// thread that added them, so that the threads of a parallel region (a mixture's experts) pack
// their matrices at once; a thread that wants a matrix another is packing waits for it.
static struct packed **packs; // n_packs (each its own allocation: stays put as the table grows)
static int n_packs, cap_packs;
static bool packing = true;
// within the lock too: the figures of mm16_packing, and the threads packing now (pack_seconds is
// the wall time during which at least one was, since pack_since)
static int n_plain, n_packing;
static int64_t bytes_packed, bytes_released;
static double pack_seconds, pack_since;

// the plain (K, cols) view at w16 (see weights_view) reordered into dst as pr->wd lays it out;
// 0, or -1 when oneDNN has no such reorder
static int reorder_tile(char *dst, const uint16_t *w16, int K, int cols, int64_t ld,
                        const struct prim *pr) {
    dnnl_memory_desc_t from;
    weights_view(&from, K, cols, ld);
    dnnl_primitive_desc_t rpd;
    if (dnnl_reorder_primitive_desc_create(&rpd, &from, engine, &pr->wd, engine, NULL) !=
        dnnl_success)
        return -1;
    dnnl_primitive_t r;
    dnnl_memory_t mf, mt;
    DN(dnnl_primitive_create(&r, rpd));
    DN(dnnl_memory_create(&mf, &from, engine, (void *)(uintptr_t)w16));
    DN(dnnl_memory_create(&mt, &pr->wd, engine, dst));
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, mf}, {DNNL_ARG_TO, mt}};
    struct tls *t = mine(0);
    DN(dnnl_primitive_execute(r, t->stream, 2, args));
    DN(dnnl_stream_wait(t->stream));
    DN(dnnl_memory_destroy(mf));
    DN(dnnl_memory_destroy(mt));
    DN(dnnl_primitive_destroy(r));
    DN(dnnl_primitive_desc_destroy(rpd));
    return 0;
}

// the last such mapping file_mapped found, [seen_lo, seen_hi): a checkpoint's matrices lie in a
// few (one a safetensors file), so /proc/self/maps is read once a file, not once a matrix (a
// Laguna cut has 1,889). Set only when a matrix in it was packed, whose mapping may not be
// unmapped before mm16_forget (dnnl.h), which clears it; read and written within the lock
// critical(mm16_maps).
static uintptr_t seen_lo, seen_hi;

// whether [p, p + n) lies in a read-only private mapping of a file (/proc/self/maps): its pages
// can be dropped, and come back from the file if touched again
static bool file_mapped(const void *p, size_t n) {
    uintptr_t a = (uintptr_t)p;
    if (a >= seen_lo && a + n <= seen_hi) return true;
    FILE *fp = fopen("/proc/self/maps", "r");
    char line[4096];
    bool yes = false;
    while (fp && !yes && fgets(line, sizeof line, fp)) {
        unsigned long lo, hi, ino;
        char perm[8];
        if (sscanf(line, "%lx-%lx %7s %*s %*s %lu", &lo, &hi, perm, &ino) != 4) continue;
        yes = a >= lo && a + n <= hi && ino != 0 && perm[1] != 'w' && perm[3] == 'p';
        if (yes) seen_lo = lo, seen_hi = hi;
    }
    if (fp) fclose(fp);
    return yes;
}

// the bytes of the whole pages of w16's mapping released (a file's: see file_mapped), or 0
static int64_t release(const uint16_t *w16, size_t n) {
    uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE), a = (uintptr_t)w16;
    uintptr_t lo = (a + pg - 1) / pg * pg, hi = (a + n) / pg * pg;
    bool mapped = false;
    if (hi > lo) {
#pragma omp critical(mm16_maps)
        mapped = file_mapped(w16, n);
    }
    if (!mapped || madvise((void *)lo, hi - lo, MADV_DONTNEED) != 0) return 0;
    return (int64_t)(hi - lo);
}

// q's packed copy made (outside the table's lock, on `threads` threads): for the AMX kernel
// (q->amx), or the tiles' layouts are the packed primitives' weights (NULL data where oneDNN has
// no such reorder); its bytes, 0 when left plain
static int64_t pack(struct packed *q, int threads) {
    int K = q->K, N = q->N;
    if (q->amx) {
        int64_t bytes = amx_packed_bytes(K, N);
        if (!(q->data = huge_alloc((size_t)bytes))) die("malloc of packed weights", 0);
        amx_pack((uint16_t *)(void *)q->data, q->w16, K, N, q->kn, threads);
        return bytes;
    }
    int64_t n_nt = ((int64_t)N + MM16_COLS - 1) / MM16_COLS, last = N - (n_nt - 1) * MM16_COLS;
    const struct prim *pf = prim_of(K, MM16_COLS, true, 0), *pl = prim_of(K, (int)last, true, 0);
    q->full = (dnnl_memory_desc_get_size(&pf->wd) + 63) / 64 * 64;
    size_t bytes = q->full * (size_t)(n_nt - 1) + dnnl_memory_desc_get_size(&pl->wd);
    if (!(q->data = huge_alloc(bytes))) die("malloc of packed weights", 0);
    int rc = 0;
    for (int64_t j = 0; j < n_nt && rc == 0; j++)
        rc = reorder_tile(q->data + (size_t)j * q->full, q->w16 + j * MM16_COLS * (q->kn ? 1 : K),
                          K, j < n_nt - 1 ? MM16_COLS : (int)last, q->kn ? N : 0,
                          j < n_nt - 1 ? pf : pl);
    if (rc == 0) return (int64_t)bytes;
    free(q->data);
    q->data = NULL;
    return 0;
}

// w16's packed matrix, packed now if new (NULL: packing off)
static const struct packed *packed_of(const uint16_t *w16, int K, int N, bool kn, int threads) {
    struct packed *r = NULL;
    bool new = false;
    if (!packing) return NULL;
#pragma omp critical(mm16_packs)
    {
        for (int i = n_packs - 1; i >= 0 && !r; i--)
            if (packs[i]->w16 == w16 && packs[i]->K == K && packs[i]->N == N && packs[i]->kn == kn)
                r = packs[i];
        if (!r) {
            if (n_packs == cap_packs) {
                cap_packs = cap_packs ? 2 * cap_packs : 64;
                packs = realloc(packs, sizeof *packs * (size_t)cap_packs);
                if (!packs) die("realloc of the packed matrices' table", 0);
            }
            if (!(r = calloc(1, sizeof *r))) die("calloc of a packed matrix", 0);
            *r = (struct packed){w16, K, N, kn, own, NULL, 0, false};
            packs[n_packs++] = r, new = true;
            if (n_packing++ == 0) pack_since = op_wall();
        }
    }
    if (!new) { // packed, or being packed by another thread
        while (!atomic_load_explicit(&r->ready, memory_order_acquire))
            sched_yield();
        return r;
    }
    int64_t bytes = pack(r, threads);
    int64_t freed = bytes ? release(w16, sizeof(uint16_t) * (size_t)K * (size_t)N) : 0;
#pragma omp critical(mm16_packs)
    {
        bytes_packed += bytes, bytes_released += freed, n_plain += bytes == 0;
        if (--n_packing == 0) pack_seconds += op_wall() - pack_since;
    }
    atomic_store_explicit(&r->ready, true, memory_order_release);
    return r;
}

static struct mm16_packing last; // the table's figures when last forgotten

void mm16_set_packing(bool on) {
    packing = on;
    last = (struct mm16_packing){0};
}

struct mm16_packing mm16_packing(void) {
    if (n_packs == 0) return last;
    return (struct mm16_packing){n_packs - n_plain, n_plain, bytes_packed, bytes_released,
                                 pack_seconds};
}

void mm16_forget(void) {
    if (n_packs) last = mm16_packing();
    for (int i = 0; i < n_packs; i++) {
        free(packs[i]->data);
        free(packs[i]);
    }
    free(packs);
    packs = NULL;
    n_packs = cap_packs = n_plain = 0;
    bytes_packed = bytes_released = 0;
    pack_seconds = 0.0;
    seen_lo = seen_hi = 0;
}

// ----------------------------------------------------------------------------
// tiles

// the tile at rows [m0, m0 + MM16_ROWS) of a16 (padded) and columns [n0, n0 + cols) of out, the
// weights packed (q) or plain ([N, K], or (K, N) when kn)
static void tile(float *out, const uint16_t *a16, const uint16_t *w16, bool kn,
                 const struct packed *q, int64_t m0, int64_t M, int K, int N, int64_t n0,
                 int cols) {
    bool pk = q && q->data;
    int64_t ld = kn && !pk ? N : 0;
    const struct prim *pr = prim_of(K, cols, pk, ld);
    struct tls *t = mine(pr->scratch);
    dnnl_memory_desc_t a, b, c, s;
    descs(K, cols, false, ld, &a, &b, &c);
    dnnl_dims_t ds = {(dnnl_dim_t)(pr->scratch ? pr->scratch : 1)};
    DN(dnnl_memory_desc_init_by_tag(&s, 1, ds, dnnl_u8, dnnl_a));
    void *wp = pk ? (void *)(q->data + (size_t)(n0 / MM16_COLS) * q->full)
                  : (void *)(uintptr_t)(w16 + n0 * (kn ? 1 : K));
    dnnl_memory_t ma, mb, mc, ms;
    DN(dnnl_memory_create(&ma, &a, engine, (void *)(uintptr_t)(a16 + m0 * K)));
    DN(dnnl_memory_create(&mb, pk ? &pr->wd : &b, engine, wp));
    DN(dnnl_memory_create(&mc, &c, engine, t->tile));
    DN(dnnl_memory_create(&ms, &s, engine, t->scratch));
    dnnl_exec_arg_t args[4] = {
        {DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}, {DNNL_ARG_SCRATCHPAD, ms}};
    DN(dnnl_primitive_execute(pr->p, t->stream, pr->scratch ? 4 : 3, args));
    DN(dnnl_stream_wait(t->stream));
    DN(dnnl_memory_destroy(ma));
    DN(dnnl_memory_destroy(mb));
    DN(dnnl_memory_destroy(mc));
    DN(dnnl_memory_destroy(ms));
    int64_t rows = M - m0 < MM16_ROWS ? M - m0 : MM16_ROWS;
    for (int64_t r = 0; r < rows; r++)
        memcpy(out + (m0 + r) * N + n0, t->tile + r * cols, sizeof(float) * (size_t)cols);
}

// ----------------------------------------------------------------------------
// the product

static uint16_t *a_buf; // the rounded input of calls outside parallel regions (grows)
static int64_t a_cap;
static _Thread_local uint16_t *a_nested; // of calls inside one, a thread each
static _Thread_local int64_t a_nested_cap;
static double n_flops, n_seconds;

static uint16_t *input_buf(int64_t n, bool nested) {
    uint16_t **p = nested ? &a_nested : &a_buf;
    int64_t *cap = nested ? &a_nested_cap : &a_cap;
    if (n > *cap) {
        free(*p);
        if (!(*p = huge_alloc(sizeof(uint16_t) * (size_t)n))) die("malloc of the bf16 input", 0);
        *cap = n;
    }
    return *p;
}

// oneDNN's tiles: q packed for them, or NULL (the plain path)
static void onednn_product(float *out, const float *in, const uint16_t *w16, bool kn,
                           const struct packed *q, int M, int K, int N, bool nested, int nt) {
    int64_t n_mt = ((int64_t)M + MM16_ROWS - 1) / MM16_ROWS, padded = n_mt * MM16_ROWS;
    int64_t n_nt = ((int64_t)N + MM16_COLS - 1) / MM16_COLS;
    uint16_t *a16 = input_buf(padded * K, nested);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t r = 0; r < padded; r++)
        for (int64_t k = 0; k < K; k++)
            a16[r * K + k] = r < M ? mm16_round(in[r * K + k]) : 0;
            // column blocks outer: the threads of a block share its weights in cache
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t i = 0; i < n_mt * n_nt; i++) {
        int64_t n0 = i / n_mt * MM16_COLS, m0 = i % n_mt * MM16_ROWS;
        int cols = N - n0 < MM16_COLS ? (int)(N - n0) : MM16_COLS;
        tile(out, a16, w16, kn, q, m0, M, K, N, n0, cols);
    }
}

static void product(float *out, const float *in, const uint16_t *w16, bool kn, int M, int K, int N,
                    int threads) {
    if (M <= 0) return;
    bool nested = op_in_region();
    int nt = nested ? 1 : threads;
    const struct packed *q = packed_of(w16, K, N, kn, nt); // the first product of w16 packs it
    double t0 = nested ? 0.0 : op_wall(); // (not counted: mm16_packing says how long)
    if (q && q->amx)
        amx_matmul(out, in, (const uint16_t *)(const void *)q->data, M, K, N, nt);
    else
        onednn_product(out, in, w16, kn, q, M, K, N, nested, nt);
    if (!nested) {
        n_flops += 2.0 * M * K * N;
        n_seconds += op_wall() - t0;
    }
}

void mm16_matmul(float *out, const float *in, const uint16_t *w16, int M, int K, int N,
                 int threads) {
    product(out, in, w16, false, M, K, N, threads);
}

void mm16_matmul_kn(float *out, const float *in, const uint16_t *w16, int M, int K, int N,
                    int threads) {
    product(out, in, w16, true, M, K, N, threads);
}

void mm16_counters(double *flops, double *seconds) {
    *flops = n_flops;
    *seconds = n_seconds;
}

void mm16_reset_counters(void) {
    n_flops = n_seconds = 0.0;
}

// ----------------------------------------------------------------------------
// the peak: one primitive of n^3 on `threads` threads

double mm16_peak_gflops(int n, int threads, int reps) {
    dnnl_memory_desc_t a, b, c;
    dnnl_dims_t d = {n, n}, s = {n, 1};
    DN(dnnl_memory_desc_init_by_strides(&a, 2, d, dnnl_bf16, s));
    DN(dnnl_memory_desc_init_by_strides(&b, 2, d, dnnl_bf16, s));
    DN(dnnl_memory_desc_init_by_strides(&c, 2, d, dnnl_f32, s));
    dnnl_matmul_desc_t md;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t p;
    DN(dnnl_matmul_desc_init(&md, &a, &b, NULL, &c));
#ifdef _OPENMP
    int was = omp_get_max_threads();
    omp_set_num_threads(threads);
#endif
    DN(dnnl_primitive_desc_create(&pd, &md, NULL, engine, NULL));
    DN(dnnl_primitive_create(&p, pd));
    uint16_t *x = calloc((size_t)n * n, 2), *y = calloc((size_t)n * n, 2);
    float *z = calloc((size_t)n * n, 4);
    if (!x || !y || !z) die("calloc of the peak's matrices", 0);
    for (int64_t i = 0; i < (int64_t)n * n; i++)
        x[i] = y[i] = mm16_round(1.0f + (float)(i % 7) / 8.0f);
    dnnl_memory_t ma, mb, mc;
    dnnl_stream_t st;
    DN(dnnl_stream_create(&st, engine, dnnl_stream_default_flags));
    DN(dnnl_memory_create(&ma, &a, engine, x));
    DN(dnnl_memory_create(&mb, &b, engine, y));
    DN(dnnl_memory_create(&mc, &c, engine, z));
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}};
    double best = 0.0;
    for (int r = 0; r <= reps; r++) { // the first run warms up
        double t0 = op_wall();
        DN(dnnl_primitive_execute(p, st, 3, args));
        DN(dnnl_stream_wait(st));
        double g = 2.0 * n * n * n / (op_wall() - t0) * 1e-9;
        if (r > 0 && g > best) best = g;
    }
#ifdef _OPENMP
    omp_set_num_threads(was);
#endif
    dnnl_memory_destroy(ma);
    dnnl_memory_destroy(mb);
    dnnl_memory_destroy(mc);
    dnnl_stream_destroy(st);
    dnnl_primitive_destroy(p);
    dnnl_primitive_desc_destroy(pd);
    free(x);
    free(y);
    free(z);
    return best;
}
