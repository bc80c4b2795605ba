// normguard.c - the norm guard's pass (job key select.max_norm_multiple, README "Statistics").
//
// The drops change which rows the token layout stores, so they must be known before any row is
// placed: ahead of the run, every chosen token's norm of the guarded activation comes from a
// forward pass through blocks [0, its block] of the run's own batches (prompts [kB, kB + B),
// harvest/rounds.h), batch k on world rank k % size, each rank running every block of it alone
// (no stages, no expert shards: a batch's numbers do not depend on the grid, README "Output").
// The norm is the one io/stats.c takes (float64 squares of the float32 values, summed in feature
// order). The median is an order statistic of the first max_norm_sample chosen tokens' finite
// norms (a set: the ranks' shares are gathered in any order), and every chosen token whose norm
// is above max_norm_multiple x median (or NaN) is dropped. Every rank gets the same sorted drop
// list, and a --resume recomputes it alike. Cost: one more forward through those blocks.
#include "harvest/run.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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
        g->n_mine += pl->st_off[r.p1] - pl->st_off[r.p0]; // chosen, without the guard
    }
    g->cap_sample = g->n_mine < pl->j.sel.max_norm_sample ? g->n_mine : pl->j.sel.max_norm_sample;
    g->want = calloc((size_t)pl->m.n_cat, 1);
    g->keep = malloc((size_t)max_tokens);
    g->boff = malloc((size_t)pl->B * sizeof *g->boff);
    g->lens = malloc((size_t)pl->B * sizeof *g->lens);
    g->bnorm = malloc((size_t)max_tokens * sizeof *g->bnorm);
    g->norm = malloc((size_t)(g->n_mine + 1) * sizeof *g->norm);
    g->sample = malloc((size_t)(g->cap_sample + 1) * sizeof *g->sample);
    if (!g->want || !g->keep || !g->boff || !g->lens || !g->bnorm || !g->norm || !g->sample)
        return -AH_ENOMEM;
    g->want[g->id] = 1;
    return model_state_init(&pl->m, &g->st, (int)pl->S, max_tokens, g->want, NULL);
}

// this rank's batches through blocks [0, b1): the norms of their chosen tokens, in order
static int ng_forward(struct ng_pass *g) {
    const struct plan *pl = g->pl;
    struct tap tp = {g->want, ng_take, g};
    int64_t K = place_batches(&g->pc), at = 0;
    for (int64_t k = g->rank; k < K; k += g->size) {
        struct h5out_run r;
        int64_t n = ng_batch(g, k, &r);
        if (n < 0) return (int)n;
        if (n == 0) continue; // nothing of it is judged
        struct mbatch bt = {(int)(r.p1 - r.p0), r.t1 - r.t0, pl->ds.ids + r.t0, g->lens, g->boff};
        model_forward(&pl->m, &g->st, &bt, &tp, 0, g->b1);
        int64_t c = pl->st_off[r.p0]; // the first chosen token's index in the corpus's choice
        for (int64_t t = 0; t < bt.n_tokens; t++) {
            if (!g->keep[t]) continue;
            if (c++ < pl->j.sel.max_norm_sample) g->sample[g->n_sample++] = g->bnorm[t];
            g->norm[at++] = g->bnorm[t];
        }
    }
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

// the median of the gathered sample, then this rank's drops (corpus token indices) gathered
static int ng_drops(struct ng_pass *g, struct ah_error *err) {
    struct plan *pl = g->pl;
    void *all = NULL;
    int64_t n_all = 0, at = 0, n_mine = 0;
    int rc = gather_all(g->sample, g->n_sample, MPI_DOUBLE, sizeof(double), &all, &n_all, err);
    struct norm_median md = {0};
    if (rc == 0) rc = run_agree(norm_median_init(&md, n_all + 1), err);
    if (rc < 0) return free(all), rc;
    for (int64_t i = 0; i < n_all; i++)
        norm_median_push(&md, ((double *)all)[i]);
    pl->ng_median = norm_median_value(&md); // the same set on every rank: the same bits
    norm_median_free(&md);
    free(all);
    int64_t *mine = (int64_t *)(void *)g->norm; // the drops overwrite the norms they follow
    for (int64_t k = g->rank, K = place_batches(&g->pc); k < K; k += g->size) {
        struct h5out_run r;
        if (ng_batch(g, k, &r) < 0) rc = -AH_ENOMEM;
        for (int64_t t = 0; rc == 0 && t < r.t1 - r.t0; t++)
            if (g->keep[t] &&
                !select_norm_keep(g->norm[at++], pl->ng_median, pl->j.sel.max_norm_multiple))
                mine[n_mine++] = r.t0 + t;
    }
    if ((rc = run_agree(rc, err)) < 0) return rc;
    rc = gather_all(mine, n_mine, MPI_INT64_T, sizeof(int64_t), &all, &pl->n_ng_drop, err);
    pl->ng_drop = all;
    if (rc == 0) qsort(pl->ng_drop, (size_t)pl->n_ng_drop, sizeof *pl->ng_drop, cmp_i64);
    return rc;
}

int normguard_run(struct plan *pl, struct ah_error *err) {
    struct ng_pass g = {.pl = pl, .id = pl->ng_id};
    CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &g.rank));
    CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &g.size));
    g.pc = (struct placement){pl->ds.n, pl->ds.n_tokens, pl->ds.off, pl->B};
    int block = pl->m.cat[pl->ng_id].block; // -1: the embeddings (stage 0 computes them)
    g.b1 = block + 1 < pl->m.n_blocks ? block + 1 : pl->m.n_blocks;
    int rc = ng_setup(&g);
    if (rc < 0) rc = ah_fail(err, AH_ENOMEM, "out of memory: the norm guard's pass");
    if ((rc = run_agree(rc, err)) == 0) rc = ng_forward(&g);
    if (rc < 0) rc = ah_fail(err, AH_ENOMEM, "out of memory: the norm guard's pass");
    if ((rc = run_agree(rc, err)) == 0) rc = ng_drops(&g, err);
    ng_free(&g);
    if (rc == 0) rc = run_agree(plan_place(pl, err), err); // the drops folded in
    return rc;
}
