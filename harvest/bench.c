// bench.c - `harvest bench`: figures, not a timed test. In one run on the same machine it measures
//   1. sgemm GFLOP/s on the shapes the spec model runs (best of 5 each),
//   2. the spec model harvesting the 8 block outputs (T = 512, batch 8): tokens/s and model
//      GFLOP/s, and their ratio to the best sgemm rate,
//   3. an I/O-bound harvest of all 214 names: HDF5 MB/s (time inside the writer, close included)
//      against a plain sequential write() of the same number of bytes into the same folder.
// `harvest bench --model DIR` instead harvests one residual of any checkpoint folder, or the
// value --value names (see bench_model).
#define _DEFAULT_SOURCE        // defines: mkdtemp, sync, realpath
#include "harvest/blascheck.h" // defines: blas_describe
#include "harvest/cliargs.h"
#include "harvest/harvest.h"

#include "model/dnnl.h"     // defines: mm16_counters, mm16_packing, mm16_peak_gflops, ...
#include "model/encdec.h"   // defines: encdec_spec_config, encdec_flops
#include "model/ops.h"      // defines: op_set_threads, op_threads, op_bf16_panel_floats
#include "model/simdpeak.h" // defines: simd_peak_gflops, simd_peak_name, SIMD_FMA32, ...

#include <cblas.h> // defines: cblas_sgemm, openblas_get_num_threads, openblas_set_num_threads
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static double sgemm_gflops(int M, int K, int N) {
    float *a = malloc(sizeof(float) * (size_t)M * K), *b = malloc(sizeof(float) * (size_t)N * K);
    float *c = malloc(sizeof(float) * (size_t)M * N);
    if (!a || !b || !c) {
        free(a), free(b), free(c);
        return 0.0;
    }
    for (size_t i = 0; i < (size_t)M * K; i++)
        a[i] = (float)(i % 7) * 0.1f;
    for (size_t i = 0; i < (size_t)N * K; i++)
        b[i] = (float)(i % 5) * 0.1f;
    double best = 1e30, flops = 2.0 * M * K * N;
    int rounds = flops > 1e11 ? 3 : 6; // large shapes: best of 2
    for (int r = 0; r < rounds; r++) { // the first round warms up
        double t = now_seconds();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, a, K, b, K, 0.0f, c, N);
        t = now_seconds() - t;
        if (r > 0 && t < best) best = t;
    }
    free(a), free(b), free(c);
    return flops / best * 1e-9;
}

static int write_text(const char *path, const char *text) {
    FILE *fp = fopen(path, "w");
    if (!fp) return -1;
    int ok = fputs(text, fp) >= 0;
    return fclose(fp) == 0 && ok ? 0 : -1;
}

static int write_prompts(const char *path, int n, int T, int64_t vocab) {
    FILE *fp = fopen(path, "w");
    if (!fp) return -1;
    uint64_t s = 42;
    for (int p = 0; p < n; p++) {
        fputs("{\"input_ids\": [", fp);
        for (int t = 0; t < T; t++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            fprintf(fp, "%s%llu", t ? ", " : "", (unsigned long long)((s >> 33) % (uint64_t)vocab));
        }
        fputs("]}\n", fp);
    }
    return fclose(fp);
}

// a plain sequential write of `bytes` bytes, 8 MiB at a time, then fdatasync (harvest fsyncs each
// segment at its checkpoint, so the fair baseline is as durable); MB/s
static double plain_write_mbs(const char *path, int64_t bytes) {
    size_t blk = 8u << 20;
    char *buf = malloc(blk);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (!buf || fd < 0) {
        free(buf);
        if (fd >= 0) close(fd);
        return 0.0;
    }
    memset(buf, 0x5a, blk);
    double t = now_seconds();
    for (int64_t left = bytes; left > 0;) {
        size_t n = left < (int64_t)blk ? (size_t)left : blk;
        ssize_t w = write(fd, buf, n);
        if (w <= 0) break;
        left -= w;
    }
    fdatasync(fd);
    close(fd);
    t = now_seconds() - t;
    free(buf);
    unlink(path);
    return (double)bytes / t * 1e-6;
}

static const char *compute = "float32"; // --compute: the jobs' "compute"

static int bench_job(const char *dir, const char *model, const char *name, const char *acts, int T,
                     int batch, struct run_stats *st, struct ah_error *err) {
    char job[16384], path[4096];
    snprintf(path, sizeof path, "%s/%s.json", dir, name);
    snprintf(job, sizeof job,
             "{\"model\": \"%s\", \"data\": \"%s.jsonl\", \"activations\": [%s], "
             "\"max_seq_len\": %d, \"batch_size\": %d, \"output\": {\"path\": \"%s.h5\"}, "
             "\"compute\": \"%s\"}",
             model, name, acts, T, batch, name, compute);
    if (write_text(path, job) != 0) return ah_fail(err, AH_EIO, "%s: cannot write", path);
    struct run_opts o = {.job_path = path, .overwrite = true, .quiet = true};
    return harvest_run(&o, st, err);
}

// ----------------------------------------------------------------------------
// --model DIR

// sgemm at the model's shapes at M = batch * T: hidden x hidden, hidden -> ffn, ffn -> hidden;
// best[i] keeps the best rate of each over calls
static void model_sgemm(int M, int D, int F, double best[3], bool print) {
    const int shapes[3][2] = {{D, D}, {D, F}, {F, D}};
    for (int i = 0; i < 3; i++) {
        double g = sgemm_gflops(M, shapes[i][0], shapes[i][1]);
        best[i] = g > best[i] ? g : best[i];
        if (print)
            printf("  sgemm M=%d K=%d N=%d: %.1f GFLOP/s\n", M, shapes[i][0], shapes[i][1],
                   best[i]);
    }
}

// The residual a benchmark harvests: the last value of the last block with a (batch, sequence,
// hidden) shape - the block's output. The ffn width: the largest fixed axis of block 0.
static int pick_residual(const struct model *m, int *ffn) {
    int pick = -1, D = model_hidden(m);
    *ffn = D;
    for (int i = 0; i < m->n_cat; i++) {
        const struct tap_desc *d = &m->cat[i];
        if (d->block == m->n_blocks - 1 && d->ndim == 3 &&
            model_axis_size(m, d->block, d->axes[2]) == D)
            pick = i;
        for (int a = 0; d->block == 0 && a < d->ndim; a++)
            if (tap_axis_kind(d->axes[a]) == TAP_AXIS_FIXED) {
                int64_t n = model_axis_size(m, 0, d->axes[a]);
                *ffn = n > *ffn && n < m->vocab ? (int)n : *ffn;
            }
    }
    return pick;
}

// the process's peak resident set since the last reset_peak_rss(), bytes (0 if unknown)
static int64_t peak_rss(void) {
    FILE *fp = fopen("/proc/self/status", "r");
    char line[256];
    long long kb = 0;
    while (fp && fgets(line, sizeof line, fp))
        if (sscanf(line, "VmHWM: %lld kB", &kb) == 1) break;
    if (fp) fclose(fp);
    return (int64_t)kb * 1024;
}

static void reset_peak_rss(void) {
    FILE *fp = fopen("/proc/self/clear_refs", "w");
    if (fp) fputs("5", fp), fclose(fp);
}

// compute bf16: the linear layers' rate over the runs (outside expert regions) against the AMX
// peak (tdpbf16ps on registers, on one and on the run's threads; without AMX vdpbf16ps's, where
// the CPU has AVX512-BF16) and a oneDNN bf16 matmul of 4096^3 on the same threads, all measured
// now
static void bf16_rates(double tokens, double seconds, double pack_seconds) {
    double flops, sec, amx1 = mm16_amx_peak_gflops(1, 5),
                       amx = mm16_amx_peak_gflops(op_threads(), 5);
    double dnnl = mm16_peak_gflops(4096, op_threads(), 3);
    double dp1 = amx > 0 ? 0.0 : simd_peak_gflops(SIMD_DPBF16, 1, 5),
           dp = amx > 0 ? 0.0 : simd_peak_gflops(SIMD_DPBF16, op_threads(), 5);
    mm16_counters(&flops, &sec);
    double g = sec > 0 ? flops / sec * 1e-9 : 0.0;
    if (amx > 0)
        printf("  compute bf16 (%s): linear layers %.1f GFLOP/s = %.0f%% of the AMX peak measured "
               "now (%.1f GFLOP/s, tdpbf16ps on registers, %d threads; 1 thread %.1f); oneDNN "
               "4096^3 %.1f GFLOP/s; %.1f s of the runs in them\n",
               mm16_kernel(), g, 100.0 * g / amx, amx, op_threads(), amx1, dnnl, sec);
    else if (dp > 0)
        printf("  compute bf16 (%s): linear layers %.1f GFLOP/s = %.0f%% of the vdpbf16ps peak "
               "measured now (%.1f GFLOP/s on registers, %d threads; 1 thread %.1f); oneDNN "
               "4096^3 %.1f GFLOP/s; %.1f s of the runs in them\n",
               mm16_kernel(), g, 100.0 * g / dp, dp, op_threads(), dp1, dnnl, sec);
    else
        printf("  compute bf16 (%s): linear layers %.1f GFLOP/s = %.0f%% of the bf16 peak "
               "measured now (%.1f GFLOP/s, oneDNN 4096^3, %d threads); %.1f s of the runs in "
               "them\n",
               mm16_kernel(), g, 100.0 * g / dnnl, dnnl, op_threads(), sec);
    struct mm16_packing p = mm16_packing(); // the last run's
    printf("  compute bf16: %d weight matrices packed into the kernel's layout (%.1f MiB), %d left "
           "plain; %.1f MiB of mapped pages released; packing %.2f s of the run\n",
           p.n_packed, (double)p.bytes / 1048576.0, p.n_plain, (double)p.released / 1048576.0,
           p.seconds);
    if (pack_seconds > 0 && seconds > pack_seconds) // (what a corpus run sees: it packs once)
        printf("  compute bf16: %.1f tokens/s without the one-off packing (%.1f s of the best run "
               "less its %.2f s of packing)\n",
               tokens / (seconds - pack_seconds), seconds, pack_seconds);
}

// the FP32 FMA peak on registers, measured now on the run's threads, with the sgemm rate at the
// model's shapes and the model's own as shares of it
static void fma_line(double sgemm, double model) {
    double fma = simd_peak_gflops(SIMD_FMA32, op_threads(), 5);
    printf("  FP32 FMA peak measured now: %.1f GFLOP/s (%s on registers, %d threads): sgemm at "
           "its shapes %.0f%% of it, the model %.0f%%\n",
           fma, simd_peak_name(SIMD_FMA32), op_threads(), fma > 0 ? 100.0 * sgemm / fma : 0.0,
           fma > 0 ? 100.0 * model / fma : 0.0);
}

// --compute bf16 set before the config-only load, so that a family borrowing BF16 matrices only
// under bf16 (model/lnblock.h) states them so; 0, or -1 after a message
static int bench_compute(void) {
    char msg[200] = "";
    if (strcmp(compute, "bf16") || op_set_compute(OP_COMPUTE_BF16, msg, sizeof msg) == 0) return 0;
    fprintf(stderr, "harvest: bench: --compute bf16: %s\n", msg);
    return -1;
}

struct bench_opts {
    int n_prompts, io_prompts, T, batch, threads, runs;
    const char *dir_arg, *model, *value;
};

// The value harvested: --value's catalogue id, else pick_residual's; -1 after an error
static int pick_value(const struct model *m, const char *dir, const char *value, int *ffn,
                      struct ah_error *err) {
    int pick = pick_residual(m, ffn);
    if (value) {
        if ((pick = tap_desc_find(m->cat, m->n_cat, value)) < 0)
            return ah_fail(err, AH_EINVAL,
                           "bench: --value %s: not a value of %s (`harvest "
                           "activations DIR` lists them)",
                           value, dir);
    } else if (pick < 0) {
        return ah_fail(err, AH_EINVAL, "bench: %s: no (batch, sequence, hidden) value to harvest",
                       dir);
    }
    return pick;
}

// The rates of the best run: tokens/s, the FLOPs of its whole blocks against sgemm at the
// model's shapes and the FP32 FMA peak (not for --value: the run stops the value's block at it),
// peak RSS against the weights and the run state
static void model_report(const struct model *m, const struct run_stats *fw, double packing, int T,
                         int runs, bool whole, double best_sgemm, int64_t rss, int ffn) {
    int D = model_hidden(m);
    double exec = 0.0, quad = 0.0; // FLOPs a prompt: all, and the T^2 term (attention)
    for (int b = 0; b < m->n_blocks; b++) {
        double f = model_block_flops(m, b, T);
        exec += f;
        quad += (model_block_flops(m, b, 2 * T) - 2.0 * f) / 2.0;
    }
    double need = exec - quad * (T - 1) / (2.0 * T);
    double tps = (double)fw->tokens / fw->seconds, gf = exec / T * tps * 1e-9;
    printf("  %.1f tokens/s (best of %d: %.1f s for %lld tokens, %.2f s of it writing)\n", tps,
           runs, fw->seconds, (long long)fw->tokens, fw->seconds_write);
    if (!strcmp(compute, "bf16")) bf16_rates((double)fw->tokens, fw->seconds, packing);
    if (whole) {
        printf("  GFLOP a token: %.3f executed, %.3f necessary (causal attention's half)\n",
               exec / T * 1e-9, need / T * 1e-9);
        printf("  model %.1f GFLOP/s executed = %.0f%% of the best sgemm rate at its shapes "
               "(%.1f GFLOP/s)\n",
               gf, 100.0 * gf / best_sgemm, best_sgemm);
        fma_line(best_sgemm, gf);
    }
    const char *kind;
    int64_t wbytes = model_stage_bytes(m, 0, m->n_blocks, false, 0, 1, &kind);
    int64_t panel =
        4 * op_bf16_panel_floats(D > ffn ? D : ffn, (int)(m->vocab > ffn ? m->vocab : ffn));
    printf("  peak RSS %.0f MiB = %.2f x (weights %.0f MiB (%s) + run state %.0f MiB (its BF16 "
           "panel %.0f MiB))\n",
           (double)rss / 1048576.0, (double)rss / (double)(wbytes + fw->state_bytes),
           (double)wbytes / 1048576.0, kind, (double)fw->state_bytes / 1048576.0,
           (double)panel / 1048576.0);
}

// Harvests one value of DIR's checkpoint (--value; else the last block's output) for n prompts
// of T random tokens, best of `runs` runs, between two rounds of sgemm at the model's own shapes
// (the machine may be shared: the ratio is of rates measured in this run). FLOPs per token from
// model_block_flops: executed (the full T x T attention) and necessary (the causal half of its
// T^2 term; sliding windows are not subtracted).
static int bench_model(const struct bench_opts *o, const char *dir) {
    char model_dir[PATH_MAX], path[4200];
    struct model m = {0};
    struct ah_error err = {0};
    if (!realpath(o->model, model_dir)) {
        fprintf(stderr, "harvest: bench: %s: no such folder\n", o->model);
        return 1;
    }
    if (bench_compute() < 0) return 2;
    int rc = model_load(&m, model_dir, false, NULL, &err), ffn = 0, pick = -1;
    if (rc == 0 && o->T > m.max_pos)
        rc = ah_fail(&err, AH_EINVAL, "bench: --T %d: the model takes at most %d tokens", o->T,
                     m.max_pos);
    if (rc == 0 && (pick = pick_value(&m, model_dir, o->value, &ffn, &err)) < 0) rc = pick;
    snprintf(path, sizeof path, "%s/fwd.jsonl", dir);
    if (rc == 0 && write_prompts(path, o->n_prompts, o->T, m.vocab) != 0)
        rc = ah_fail(&err, AH_EIO, "%s: cannot write", path);
    if (rc < 0) {
        model_free(&m);
        return report(rc, &err);
    }
    printf("harvest bench: %s, harvesting %s\n  T = %d, batch %d, %d prompts; threads: OpenBLAS "
           "%d, kernels %d; folder %s\n",
           model_dir, m.cat[pick].name, o->T, o->batch, o->n_prompts, openblas_get_num_threads(),
           op_threads(), dir);
    printf("  BLAS %s\n", blas_describe());
    char acts[300];
    snprintf(acts, sizeof acts, "\"%s\"", m.cat[pick].name);
    double best[3] = {0, 0, 0};
    int M = o->batch * o->T;
    model_sgemm(M, model_hidden(&m), ffn, best, false);
    sync();
    reset_peak_rss();
    struct run_stats fw = {0}, st;
    double fw_packing = 0.0; // the best run's seconds packing bf16 weights (each run packs)
    mm16_reset_counters();
    for (int r = 0; r < o->runs && rc == 0; r++) {
        rc = bench_job(dir, model_dir, "fwd", acts, o->T, o->batch, &st, &err);
        if (r == 0 || st.seconds < fw.seconds) fw = st, fw_packing = mm16_packing().seconds;
    }
    int64_t rss = peak_rss();
    if (rc == 0) model_sgemm(M, model_hidden(&m), ffn, best, true);
    double peak = best[0] > best[1] ? best[0] : best[1];
    if (rc == 0)
        model_report(&m, &fw, fw_packing, o->T, o->runs, !o->value, best[2] > peak ? best[2] : peak,
                     rss, ffn);
    model_free(&m);
    return rc < 0 ? report(rc, &err) : 0;
}

// one flag and its value (moved past); its bit in *seen. 0, or -1 after a message
static int bench_flag(int argc, char **argv, int *i, struct bench_opts *o, unsigned *seen) {
    static const char *const name[] = {"--prompts", "--io-prompts", "--T",   "--batch",
                                       "--threads", "--runs",       "--dir", "--model",
                                       "--compute", "--value"};
    static const int lo[] = {1, 1, 1, 1, 0, 1},
                     hi[] = {1 << 20, 1 << 20, 1 << 18, 1 << 12, 1024, 1000};
    int *num[] = {&o->n_prompts, &o->io_prompts, &o->T, &o->batch, &o->threads, &o->runs};
    const char *f = argv[*i], *v;
    int k = 0;
    while (k < 10 && strcmp(f, name[k]))
        k++;
    if (k == 10) {
        fprintf(stderr, "harvest bench: unknown option \"%s\"\n", f);
        return -1;
    }
    *seen |= 1u << k;
    if (!(v = cli_value("bench", argc, argv, i))) return -1;
    if (k < 6) return cli_int32("bench", f, v, lo[k], hi[k], num[k]);
    if (k == 8) {
        if (!strcmp(v, "float32") || !strcmp(v, "bf16")) return compute = v, 0;
        fprintf(stderr, "harvest bench: --compute %s: expected float32 or bf16\n", v);
        return -1;
    }
    *(k == 6 ? &o->dir_arg : k == 7 ? &o->model : &o->value) = v;
    return 0;
}

// 0, or 1 after printing the usage
static int bench_args(int argc, char **argv, struct bench_opts *o) {
    *o = (struct bench_opts){-1, 4, 512, 8, 0, 2, NULL, NULL, NULL};
    unsigned seen = 0; // bit k: bench_flag's name[k] given
    int rc = 0;
    for (int i = 0; rc == 0 && i < argc; i++)
        rc = bench_flag(argc, argv, &i, o, &seen);
    if (o->n_prompts == -1) o->n_prompts = o->model ? 8 : 32;
    const char *bad = rc < 0       ? NULL
                      : o->model   ? (seen & 2 ? "--io-prompts: not an option of --model" : NULL)
                      : seen & 32  ? "--runs: an option of --model only"
                      : seen & 512 ? "--value: an option of --model only"
                      : o->T > 512 ? "--T: at most 512 for the spec model"
                                   : NULL;
    if (bad) fprintf(stderr, "harvest bench: %s\n", bad);
    if (rc == 0 && !bad) return 0;
    fprintf(stderr,
            "usage: harvest bench [--prompts N] [--io-prompts N] [--T N<=512] "
            "[--batch N] [--threads N] [--dir DIR]\n"
            "       harvest bench --model DIR [--T N] [--batch N] [--prompts N] "
            "[--threads N] [--runs N] [--dir DIR] [--compute float32|bf16] [--value NAME]\n");
    return 1;
}

static void remove_dir(const char *dir) {
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "harvest: bench: could not remove %s\n", dir);
}

// 1. + 2. the spec model's forward pass (best of 2: the machine is shared) against sgemm at its
// shapes, whose best rate goes to *peak
static int spec_forward(const char *dir, const struct bench_opts *o, double *peak,
                        struct ah_error *err) {
    const int shapes[3][3] = {{4096, 384, 384}, {4096, 384, 1024}, {4096, 1024, 384}};
    *peak = 0.0;
    for (int i = 0; i < 3; i++) {
        double g = sgemm_gflops(shapes[i][0], shapes[i][1], shapes[i][2]);
        printf("  sgemm M=%d K=%d N=%d: %.1f GFLOP/s\n", shapes[i][0], shapes[i][1], shapes[i][2],
               g);
        *peak = g > *peak ? g : *peak;
    }
    struct run_stats fw = {0}, st;
    for (int r = 0; r < 2; r++) {
        int rc = bench_job(dir, "model", "fwd", "\"encoder_*_output\", \"decoder_*_output\"", o->T,
                           o->batch, &st, err);
        if (rc < 0) return rc;
        if (r == 0 || st.seconds < fw.seconds) fw = st;
    }
    struct encdec_config cfg = encdec_spec_config();
    double flops = encdec_flops(&cfg, o->T, false) * (double)fw.prompts;
    double gf = flops / fw.seconds * 1e-9, gf_fwd = flops / (fw.seconds - fw.seconds_write) * 1e-9;
    printf("forward, 8 block outputs, %lld prompts:\n", (long long)fw.prompts);
    printf("  %.0f tokens/s, model %.1f GFLOP/s = %.0f%% of the best sgemm rate (%.1f GFLOP/s)\n",
           (double)fw.tokens / fw.seconds, gf, 100.0 * gf / *peak, *peak);
    printf("  forward alone (without the %.2f s of writing): %.1f GFLOP/s = %.0f%%\n",
           fw.seconds_write, gf_fwd, 100.0 * gf_fwd / *peak);
    return 0;
}

// 3. the output of all 214 names, best of 3 alternating with a plain write of as many bytes
static int spec_output(const char *dir, const struct bench_opts *o, struct ah_error *err) {
    char path[4200];
    double plain_mbs = 0.0;
    struct run_stats io = {0}, st;
    snprintf(path, sizeof path, "%s/plain.bin", dir);
    for (int r = 0; r < 3; r++) {
        sync();
        int rc = bench_job(dir, "model", "io", "\"*\"", o->T, o->batch, &st, err);
        if (rc < 0) return rc;
        if (r == 0 || st.seconds_write < io.seconds_write) io = st;
        sync();
        double mbs = plain_write_mbs(path, st.bytes);
        plain_mbs = mbs > plain_mbs ? mbs : plain_mbs;
    }
    double h5_mbs = (double)io.bytes / io.seconds_write * 1e-6;
    printf("output, all 214 names, %lld prompts, %.2f GB:\n", (long long)io.prompts,
           (double)io.bytes * 1e-9);
    printf("  HDF5 %.0f MB/s vs plain write + fdatasync %.0f MB/s = %.0f%%  (whole run %.2f s, "
           "%.2f s writing)\n",
           h5_mbs, plain_mbs, 100.0 * h5_mbs / plain_mbs, io.seconds, io.seconds_write);
    return 0;
}

// the spec model's benchmark in dir: its checkpoint and prompts, then 1.-3.
static int bench_spec(const char *dir, const struct bench_opts *o) {
    char path[4200];
    struct ah_error err = {0};
    snprintf(path, sizeof path, "%s/model", dir);
    int rc = init_model_preset(path, "encdec", "spec", 0, ST_F32, 1, &err);
    snprintf(path, sizeof path, "%s/fwd.jsonl", dir);
    if (rc == 0 && write_prompts(path, o->n_prompts, o->T, 8192) != 0)
        rc = ah_fail(&err, AH_EIO, "%s", path);
    snprintf(path, sizeof path, "%s/io.jsonl", dir);
    if (rc == 0 && write_prompts(path, o->io_prompts, o->T, 8192) != 0)
        rc = ah_fail(&err, AH_EIO, "%s", path);
    if (rc < 0) return report(rc, &err);
    sync(); // the freshly written model must not be flushed on the harvest's time
    printf("harvest bench: spec model, T = %d, batch %d, OpenBLAS threads %d, folder %s\n", o->T,
           o->batch, openblas_get_num_threads(), dir);
    printf("  BLAS %s\n", blas_describe());
    double peak;
    if ((rc = spec_forward(dir, o, &peak, &err)) < 0 || (rc = spec_output(dir, o, &err)) < 0)
        return report(rc, &err);
    remove_dir(dir);
    return 0;
}

int cmd_bench(int argc, char **argv) {
    struct bench_opts o;
    if (bench_args(argc, argv, &o)) return 1;
    if (o.threads > 0) { // both pools: OpenBLAS's GEMMs and the kernels' OpenMP threads
        openblas_set_num_threads(o.threads);
        op_set_threads(o.threads);
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/harvest-bench-XXXXXX", o.dir_arg ? o.dir_arg : "/tmp");
    if (!mkdtemp(dir)) {
        fprintf(stderr, "harvest: bench: cannot make a folder under %s\n",
                o.dir_arg ? o.dir_arg : "/tmp");
        return 2;
    }
    if (!o.model) return bench_spec(dir, &o);
    int ret = bench_model(&o, dir);
    remove_dir(dir);
    return ret;
}
