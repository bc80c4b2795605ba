// normguard.c - the norm guard's pass (job key select.max_norm_multiple, README "Statistics").
//
// The drops change which rows the token layout stores, so they must be known before any row is
// placed: ahead of the run, every chosen token's norm of the guarded activation comes from a
// forward pass through blocks [0, its block] of the run's own batches (prompts [kB, kB + B),
// harvest/rounds.h), batch k on world rank k % size, each rank running every block of it alone
// (no stages, no expert shards: a batch's numbers do not depend on the grid, README "Output").
// The ranks go in rounds of one batch each, agreeing after every round on a stop signal. The
// norm is the one io/stats.c takes (float64 squares of the float32 values, summed in feature
// order). The median is an order statistic of the finite norms among the first max_norm_sample
// chosen tokens (a set: the ranks' shares are gathered in any order), and every chosen token
// whose norm is above max_norm_multiple x median (or NaN) is dropped. Every rank gets the same
// sorted drop list. Rank 0 keeps it with the output (OUT.parts/normguard.bin: a header naming
// the job, data and model it was found for, the drops, an FNV-1a checksum), and a --resume reads
// it back instead of running the pass again. Cost: one more forward through those blocks.
#define _POSIX_C_SOURCE 200809L // defines: fileno, isatty
#include "harvest/normguard.h"

#include "io/fsutil.h"
#include "io/output.h" // defines: out_parts_path

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct ng_pass {
    struct plan *pl;
    struct placement pc; // the run's batches over the corpus (every token)
    int id, rank, size, b1;
    uint8_t *want;  // (n_cat) the guarded activation only
    uint8_t *keep;  // (max_tokens) the batch's chosen positions, without the guard
    int64_t *boff;  // (B) prompt b's first token in the batch
    int *lens;      // (B)
    double *bnorm;  // (max_tokens) the batch's norms
    double *norm;   // (n_mine) this rank's chosen tokens' norms, batch after batch
    double *sample; // (n_sample) those among the first max_norm_sample chosen tokens
    int64_t n_mine, n_sample, cap_sample;
    int64_t bad[2]; // this rank's chosen tokens with a non-finite norm: in all, in the sample
    bool quiet, tty;
    bool (*stopped)(void); // run.c's: a stop signal on this rank
    double t0, last;       // progress: start, last line
    struct model_state st;
};

// the tap: prompt b's norms into bnorm
static void ng_take(void *u, int id, int b, const struct tview *v) {
    struct ng_pass *g = u;
    int k = tview_seq_axis(&g->pl->m.cat[id], v);
    int64_t T = v->dims[k], outer = 1, inner = 1;
    for (int i = 1; i < k; i++)
        outer *= v->dims[i];
    for (int i = k + 1; i < v->ndim; i++)
        inner *= v->dims[i];
    const float *x = v->data;
    for (int64_t t = 0; t < T; t++) {
        double ss = 0.0;
        for (int64_t o = 0; o < outer; o++)
            for (int64_t i = 0; i < inner; i++) {
                double e = (double)x[(o * T + t) * inner + i];
                ss += e * e;
            }
        g->bnorm[g->boff[b] + t] = sqrt(ss);
    }
}

// batch k's prompts, lengths and chosen positions; returns the chosen count (< 0: no memory)
static int64_t ng_batch(struct ng_pass *g, int64_t k, struct h5out_run *r) {
    *r = place_batch(&g->pc, k);
    int64_t n = 0;
    for (int64_t p = r->p0; p < r->p1; p++) {
        int b = (int)(p - r->p0);
        g->lens[b] = (int)g->pl->ds.len[p];
        g->boff[b] = g->pl->ds.off[p] - r->t0;
        int64_t c = plan_keep(g->pl, p, g->keep + g->boff[b]);
        if (c < 0) return c;
        n += c;
    }
    return n;
}

static void ng_free(struct ng_pass *g) {
    model_state_free(&g->st);
    free(g->want), free(g->keep), free(g->boff), free(g->lens);
    free(g->bnorm), free(g->norm), free(g->sample);
}

// the buffers and the model's state for the largest batch; 0 or -AH_ENOMEM
static int ng_setup(struct ng_pass *g) {
    const struct plan *pl = g->pl;
    int64_t max_tokens = 1, K = place_batches(&g->pc);
    for (int64_t k = g->rank; k < K; k += g->size) {
        struct h5out_run r = place_batch(&g->pc, k);
        max_tokens = r.t1 - r.t0 > max_tokens ? r.t1 - r.t0 : max_tokens;
        g->n_mine += pl->sel.st_off[r.p1] - pl->sel.st_off[r.p0]; // chosen, without the guard
    }
    g->cap_sample = g->n_mine < pl->j.sel.max_norm_sample ? g->n_mine : pl->j.sel.max_norm_sample;
    g->want = calloc((size_t)pl->m.n_cat, 1);
    g->keep = malloc((size_t)max_tokens);
    g->boff = malloc((size_t)pl->place.B * sizeof *g->boff);
    g->lens = malloc((size_t)pl->place.B * sizeof *g->lens);
    g->bnorm = malloc((size_t)max_tokens * sizeof *g->bnorm);
    g->norm = malloc((size_t)(g->n_mine + 1) * sizeof *g->norm);
    g->sample = malloc((size_t)(g->cap_sample + 1) * sizeof *g->sample);
    if (!g->want || !g->keep || !g->boff || !g->lens || !g->bnorm || !g->norm || !g->sample)
        return -AH_ENOMEM;
    g->want[g->id] = 1;
    return model_state_init(&pl->m, &g->st, (int)pl->place.S, max_tokens, g->want, NULL);
}

// rank 0, unless --quiet: the batches of the rounds done, their tokens, the rate and the ETA
static void ng_progress(struct ng_pass *g, int64_t done, int64_t K, int64_t tokens, bool final) {
    if (g->quiet || g->rank != 0) return;
    double t = now_seconds();
    if (!final && t - g->last < (g->tty ? 0.5 : 10.0)) return;
    g->last = t;
    int64_t total = g->pl->ds.n_tokens;
    double rate = t > g->t0 ? (double)tokens / (t - g->t0) : 0.0;
    int eta = rate > 0 ? (int)((double)(total - tokens) / rate + 0.5) : 0;
    fprintf(stderr,
            "%s[harvest] norm guard: %lld/%lld batches  %lld/%lld tokens  %.0f tok/s  ETA "
            "%d:%02d:%02d%s",
            g->tty ? "\r" : "", (long long)done, (long long)K, (long long)tokens, (long long)total,
            rate, eta / 3600, eta / 60 % 60, eta % 60, g->tty && !final ? "   " : "\n");
    fflush(stderr);
}

// batch k through blocks [0, b1): the norms of its chosen tokens at norm[*at...]
static int ng_one(struct ng_pass *g, int64_t k, const struct tap *tp, int64_t *at) {
    const struct plan *pl = g->pl;
    struct h5out_run r;
    int64_t n = ng_batch(g, k, &r);
    if (n <= 0) return (int)n; // 0: nothing of it is judged
    struct mbatch bt = {(int)(r.p1 - r.p0), r.t1 - r.t0, pl->ds.ids + r.t0, g->lens, g->boff};
    model_forward(&pl->m, &g->st, &bt, tp, 0, g->b1);
    int64_t c = pl->sel.st_off[r.p0]; // the first chosen token's index in the corpus's choice
    for (int64_t t = 0; t < bt.n_tokens; t++) {
        if (!g->keep[t]) continue;
        bool in_sample = c++ < pl->j.sel.max_norm_sample, bad = !isfinite(g->bnorm[t]);
        if (in_sample) g->sample[g->n_sample++] = g->bnorm[t];
        g->bad[0] += bad;
        g->bad[1] += bad && in_sample;
        g->norm[(*at)++] = g->bnorm[t];
    }
    return 0;
}

// This rank's batches, in rounds of one batch a rank; after each round the ranks agree on a
// failure and on a stop signal (any rank's: every rank stops, -AH_ESTOP).
static int ng_forward(struct ng_pass *g, struct ah_error *err) {
    struct tap tp = {g->want, ng_take, g, NULL, NULL, false};
    int64_t K = place_batches(&g->pc), at = 0, tokens = 0;
    int rc = 0;
    g->t0 = g->last = now_seconds();
    for (int64_t k0 = 0; k0 < K; k0 += g->size) {
        if (k0 + g->rank < K && (rc = ng_one(g, k0 + g->rank, &tp, &at)) < 0)
            rc = ah_fail(err, AH_ENOMEM, "out of memory: the norm guard's pass");
        int flags[2] = {rc < 0, g->stopped()};
        CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, flags, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
        int64_t k1 = k0 + g->size < K ? k0 + g->size : K;
        tokens = place_batch(&g->pc, k1 - 1).t1;
        if (flags[0]) return rc; // run_agree gives every rank the failing rank's message
        if (flags[1])
            return ah_fail(err, AH_ESTOP,
                           "stopped by a signal during the norm guard's pass "
                           "(select.max_norm_multiple), after %lld of %lld batches, before the "
                           "output was touched; run the same command with --resume to go on",
                           (long long)k1, (long long)K);
        ng_progress(g, k1, K, tokens, false);
    }
    ng_progress(g, K, K, tokens, true);
    AH_ASSERT(at == g->n_mine);
    return 0;
}

// Every rank's n doubles (or int64s) of v, gathered on every rank into *all (malloc'd, *n_all
// of them), rank after rank. 0, or -AH_ENOMEM / -AH_EINVAL (more than an MPI count holds), agreed.
static int gather_all(const void *v, int64_t n, MPI_Datatype type, size_t es, void **all,
                      int64_t *n_all, struct ah_error *err) {
    int size = 1;
    CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &size));
    int64_t *cnt64 = malloc((size_t)size * sizeof *cnt64);
    int *cnt = malloc((size_t)size * sizeof *cnt), *dsp = malloc((size_t)size * sizeof *dsp);
    int rc = cnt64 && cnt && dsp ? 0 : -AH_ENOMEM;
    if ((rc = run_agree(rc, err)) == 0)
        CHECK_MPI(MPI_Allgather(&n, 1, MPI_INT64_T, cnt64, 1, MPI_INT64_T, MPI_COMM_WORLD));
    int64_t total = 0;
    for (int r = 0; rc == 0 && r < size; r++) {
        dsp[r] = (int)total;
        cnt[r] = (int)cnt64[r];
        total += cnt64[r];
    }
    if (rc == 0 && total > (int64_t)1 << 30)
        rc = ah_fail(err, AH_EINVAL,
                     "\"select.max_norm_multiple\": %lld tokens to gather on every rank (at most "
                     "2^30: lower select.max_norm_sample, or raise the multiple)",
                     (long long)total);
    if (rc == 0 && !(*all = malloc((size_t)(total + 1) * es))) rc = -AH_ENOMEM;
    if ((rc = run_agree(rc, err)) == 0)
        CHECK_MPI(MPI_Allgatherv(v, (int)n, type, *all, cnt, dsp, type, MPI_COMM_WORLD));
    *n_all = total;
    free(cnt64), free(cnt), free(dsp);
    return rc;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

// The median of the gathered sample (its finite norms; the non-finite ones counted), the same
// bits on every rank; -AH_EINVAL naming the key when the sample has no finite norm.
static int ng_median(struct ng_pass *g, struct ah_error *err) {
    struct plan *pl = g->pl;
    void *all = NULL;
    int64_t n_all = 0;
    int rc = gather_all(g->sample, g->n_sample, MPI_DOUBLE, sizeof(double), &all, &n_all, err);
    struct norm_median md = {0};
    if (rc == 0) rc = run_agree(norm_median_init(&md, n_all + 1), err);
    if (rc < 0) return free(all), rc;
    for (int64_t i = 0; i < n_all; i++)
        norm_median_push(&md, ((double *)all)[i]); // a non-finite norm is no sample
    pl->ng.median = norm_median_value(&md);        // the same set on every rank: the same bits
    norm_median_free(&md);
    free(all);
    CHECK_MPI(MPI_Allreduce(g->bad, pl->ng.bad, 2, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD));
    if (!isnan(pl->ng.median)) return 0;
    return ah_fail(err, AH_EINVAL,
                   "%s: \"select.max_norm_multiple\": none of the %lld tokens of the median's "
                   "sample (the first \"select.max_norm_sample\" = %lld chosen tokens) has a "
                   "finite norm of \"%s\" (%lld are NaN or infinite): there is no median to "
                   "judge by; the model's values overflow (check its weights)",
                   pl->j.path, (long long)n_all, (long long)pl->j.sel.max_norm_sample,
                   pl->j.sel.max_norm_activation, (long long)pl->ng.bad[1]);
}

// this rank's drops (corpus token indices), gathered and sorted on every rank
static int ng_drops(struct ng_pass *g, struct ah_error *err) {
    struct plan *pl = g->pl;
    void *all = NULL;
    int64_t at = 0, n_mine = 0;
    int rc = 0;
    int64_t *mine = (int64_t *)(void *)g->norm; // the drops overwrite the norms they follow
    for (int64_t k = g->rank, K = place_batches(&g->pc); k < K; k += g->size) {
        struct h5out_run r;
        if (ng_batch(g, k, &r) < 0) rc = -AH_ENOMEM;
        for (int64_t t = 0; rc == 0 && t < r.t1 - r.t0; t++)
            if (g->keep[t] &&
                !select_norm_keep(g->norm[at++], pl->ng.median, pl->j.sel.max_norm_multiple))
                mine[n_mine++] = r.t0 + t;
    }
    if ((rc = run_agree(rc, err)) < 0) return rc;
    rc = gather_all(mine, n_mine, MPI_INT64_T, sizeof(int64_t), &all, &pl->ng.n_drop, err);
    pl->ng.drop = all;
    if (rc == 0) qsort(pl->ng.drop, (size_t)pl->ng.n_drop, sizeof *pl->ng.drop, cmp_i64);
    return rc;
}

// the pass: every chosen token's norm, the median, the drops
static int ng_pass(struct plan *pl, bool quiet, bool (*stopped)(void), struct ah_error *err) {
    struct ng_pass g = {.pl = pl, .id = pl->ng.id, .quiet = quiet, .stopped = stopped};
    CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &g.rank));
    CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &g.size));
    g.tty = isatty(fileno(stderr));
    g.pc = (struct placement){pl->ds.n, pl->ds.n_tokens, pl->ds.off, pl->place.B};
    int block = pl->m.cat[pl->ng.id].block; // -1: the embeddings (stage 0 computes them)
    g.b1 = block + 1 < pl->m.n_blocks ? block + 1 : pl->m.n_blocks;
    char blocks[64] = "the embeddings";
    if (g.b1 > 0) snprintf(blocks, sizeof blocks, "blocks 0-%d", g.b1 - 1);
    if (!quiet && g.rank == 0)
        fprintf(stderr,
                "harvest: norm guard: a pass through %s over %lld batches, every rank running "
                "whole batches, before the run\n",
                blocks, (long long)place_batches(&g.pc));
    struct model_part part = {0, g.b1, true, block >= pl->m.n_blocks, 0, 1}; // every expert
    int rc = run_agree(model_check(&pl->m, &part, err), err);
    if (rc == 0 && (rc = ng_setup(&g)) < 0)
        rc = ah_fail(err, AH_ENOMEM, "out of memory: the norm guard's pass");
    if ((rc = run_agree(rc, err)) == 0) rc = ng_forward(&g, err);
    if ((rc = run_agree(rc, err)) == 0) rc = ng_median(&g, err);
    if ((rc = run_agree(rc, err)) == 0) rc = ng_drops(&g, err);
    ng_free(&g);
    return rc;
}

// ----------------------------------------------------------------------------
// the pass's record: OUT.parts/normguard.bin

#define NG_MAGIC "AHNGRD01"

// the record's header: what it was found for (FNV-1a of the job's text and of the model's
// fingerprint, the data's plan_checksum) and what was found; then n_drop int64 drops, then the
// FNV-1a of all that
struct ng_head {
    char magic[8];
    uint64_t job, data, model;
    double median;
    int64_t n_drop, bad[2];
};

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ c[i]) * 1099511628211ull;
    return h;
}
#define FNV0 1469598103934665603ull

static void record_path(const struct plan *pl, char *buf, size_t n, const char *ext) {
    char leaf[32];
    snprintf(leaf, sizeof leaf, "normguard.bin%s", ext);
    out_parts_path(buf, n, pl->j.out_path, leaf);
}

// the header this plan's record has (drops and counts as the plan holds them)
static int head_of(const struct plan *pl, struct ng_head *h, struct ah_error *err) {
    char *fp = NULL;
    int rc = plan_fingerprint(pl, &fp, err);
    if (rc < 0) return rc;
    memset(h, 0, sizeof *h);
    memcpy(h->magic, NG_MAGIC, sizeof h->magic);
    h->job = fnv(FNV0, pl->j.text, strlen(pl->j.text));
    h->data = plan_checksum(pl);
    h->model = fnv(FNV0, fp, strlen(fp));
    free(fp);
    h->median = pl->ng.median;
    h->n_drop = pl->ng.n_drop;
    memcpy(h->bad, pl->ng.bad, sizeof h->bad);
    return 0;
}

void normguard_save(const struct plan *pl) {
    char path[4200], tmp[4300];
    record_path(pl, path, sizeof path, "");
    if (!pl->ng.on) { // a record of an earlier job's output would only be in the way
        unlink(path);
        return;
    }
    if (pl->ng.reused) return;
    record_path(pl, tmp, sizeof tmp, ".tmp");
    struct ng_head h;
    struct ah_error e = {0};
    int rc = head_of(pl, &h, &e);
    FILE *f = rc == 0 ? fopen(tmp, "wb") : NULL;
    size_t n = (size_t)h.n_drop;
    uint64_t sum = f ? fnv(fnv(FNV0, &h, sizeof h), pl->ng.drop, n * sizeof *pl->ng.drop) : 0;
    bool ok = f && fwrite(&h, sizeof h, 1, f) == 1 &&
              (n == 0 || fwrite(pl->ng.drop, sizeof *pl->ng.drop, n, f) == n) &&
              fwrite(&sum, sizeof sum, 1, f) == 1;
    if (f && fclose(f) != 0) ok = false;
    if (ok && fs_replace(tmp, path) == 0) return;
    unlink(tmp);
    fprintf(stderr,
            "harvest: warning: %s: cannot write the norm guard's record (%s): a --resume will "
            "run the pass again\n",
            path, e.msg[0] ? e.msg : strerror(errno));
}

// rank 0: the record, if it is whole and was made for this job, data and model (*drops malloc'd)
static bool record_read(const struct plan *pl, struct ng_head *h, int64_t **drops) {
    char path[4200];
    record_path(pl, path, sizeof path, "");
    struct ng_head want;
    struct ah_error e = {0};
    FILE *f = fopen(path, "rb");
    bool ok = f && head_of(pl, &want, &e) == 0 && fread(h, sizeof *h, 1, f) == 1 &&
              !memcmp(h->magic, want.magic, sizeof h->magic) && h->job == want.job &&
              h->data == want.data && h->model == want.model && h->n_drop >= 0 &&
              h->n_drop <= pl->ds.n_tokens;
    size_t n = ok ? (size_t)h->n_drop : 0;
    uint64_t sum = 0;
    ok = ok && (*drops = malloc((n + 1) * sizeof **drops)) &&
         (n == 0 || fread(*drops, sizeof **drops, n, f) == n) &&
         fread(&sum, sizeof sum, 1, f) == 1 && fgetc(f) == EOF &&
         sum == fnv(fnv(FNV0, h, sizeof *h), *drops, n * sizeof **drops);
    for (size_t i = 0; ok && i < n; i++) // sorted corpus token indices
        ok = (*drops)[i] >= 0 && (*drops)[i] < pl->ds.n_tokens &&
             (!i || (*drops)[i - 1] < (*drops)[i]);
    if (f) fclose(f);
    if (!ok) free(*drops), *drops = NULL;
    return ok;
}

// Collective: rank 0 reads the record; every rank gets it (pl->ng.reused) or nothing.
static int ng_reuse(struct plan *pl, bool quiet, struct ah_error *err) {
    int rank = 0;
    CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    struct ng_head h = {0};
    int64_t *drops = NULL;
    int found = rank == 0 && record_read(pl, &h, &drops);
    CHECK_MPI(MPI_Bcast(&found, 1, MPI_INT, 0, MPI_COMM_WORLD));
    if (!found) return 0;
    CHECK_MPI(MPI_Bcast(&h, (int)sizeof h, MPI_BYTE, 0, MPI_COMM_WORLD));
    if (rank != 0 && !(drops = malloc(((size_t)h.n_drop + 1) * sizeof *drops)))
        return run_agree(ah_fail(err, AH_ENOMEM, "out of memory: %lld drops of the norm guard",
                                 (long long)h.n_drop),
                         err);
    int rc = run_agree(0, err);
    if (rc < 0) return free(drops), rc;
    for (int64_t at = 0; at < h.n_drop; at += 1 << 26) { // MPI counts are ints
        int cnt = (int)(h.n_drop - at < (1 << 26) ? h.n_drop - at : 1 << 26);
        CHECK_MPI(MPI_Bcast(drops + at, cnt, MPI_INT64_T, 0, MPI_COMM_WORLD));
    }
    pl->ng.median = h.median;
    pl->ng.drop = drops;
    pl->ng.n_drop = h.n_drop;
    memcpy(pl->ng.bad, h.bad, sizeof h.bad);
    pl->ng.reused = true;
    char path[4200];
    record_path(pl, path, sizeof path, "");
    if (!quiet && rank == 0)
        fprintf(stderr,
                "harvest: norm guard: the pass's record %s (same job, data and model) is reused: "
                "no pass\n",
                path);
    return 0;
}

int normguard_run(struct plan *pl, const struct run_opts *o, bool (*stopped)(void),
                  struct ah_error *err) {
    int rank = 0;
    CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    int rc = o->resume ? ng_reuse(pl, o->quiet, err) : 0;
    if (rc == 0 && !pl->ng.reused) rc = ng_pass(pl, o->quiet, stopped, err);
    if (rc == 0 && rank == 0 && pl->ng.bad[0]) // even with --quiet
        fprintf(stderr,
                "harvest: warning: norm guard (select.max_norm_multiple): %lld chosen tokens "
                "have a NaN or infinite norm of \"%s\" (the model's values overflow there): "
                "they are dropped (the %lld of them among the median's sample are left out of "
                "it)\n",
                (long long)pl->ng.bad[0], pl->j.sel.max_norm_activation, (long long)pl->ng.bad[1]);
    if (rc == 0) rc = run_agree(plan_place(pl, err), err); // the drops folded in
    return rc;
}
