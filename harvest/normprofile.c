// normprofile.c - the per-position norm profile (job key "norm_profile", docs/output.md "Norm
// profile"): a tap consumer that takes, of each profiled (batch, sequence, features) value, the
// L2 norm over the features of every chosen token (float64), and keeps per batch a partial:
//   per position t < T (T = max_seq_len): count, sum, sum of squares, max of the norms
//   a histogram of 130 bins (edges 2^(k/4), k = -32..96), the NaN norms' count apart
//   the K = 32 largest norms with (prompt, position, token id), ties to the smaller (prompt, pos)
// The partials go into the segment files as write-time statistics' do (wstats.h): each closed
// segment gets the partials of its batches before the master lists it (io/h5profile.h); at the
// end rank 0 merges every listed batch's partial in batch order into /norm_profile of the master.
// Counts, the histogram, max and outliers are exact; sums are the same bits at any grid and
// after any resume, because each batch's partial is made by one rank in prompt order and the
// partials are added in batch order.
//
// A partial is L = 4T + H + 2 + 4K doubles: count (T), sum (T), sum_sq (T), max (T; -inf when
// no norm), hist (H = 130), n_nan, n_out, then n_out outliers (prompt, position, token, norm)
// largest first (K slots). Counts are exact as doubles (below 2^53).
#include "harvest/partials.h" // parts_hold, parts_gather, parts_fold_listed
#include "harvest/run.h"
#include "io/h5profile.h"
#include "io/output.h" // out_parts_path

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NP_K    32                // outliers kept
#define NP_H    NORM_PROFILE_BINS // histogram bins
#define NP_KMIN (-32)             // edges 2^(k/4), k = NP_KMIN .. NP_KMIN + NP_H - 2

// ---------------------------------------------------------------------------------------------
// the job's "norm_profile" against the catalogue

struct npnames {
    uint8_t *want;      // (n_cat) profiled
    const char **alias; // (n_cat) the job's alias of it, or NULL
    int n;
};

static void npnames_free(struct npnames *x) {
    free(x->want);
    free(x->alias);
    memset(x, 0, sizeof *x);
}

// whether d is (batch, sequence, features) of floats, with a sequence axis that is not a key axis
static bool profilable(const struct tap_desc *d) {
    return d->dtype == TAP_F32 && d->ndim == 3 && tap_axis_kind(d->axes[0]) == TAP_AXIS_BATCH &&
           tap_axis_kind(d->axes[1]) == TAP_AXIS_SEQ && strcmp(d->axes[1], "key") != 0 &&
           tap_axis_kind(d->axes[2]) == TAP_AXIS_FIXED;
}

// whether the forward pass computes a value of block b (it runs blocks [0, blk_end))
static bool computed(const struct plan *pl, int b) {
    return b < pl->place.blk_end || (b >= pl->m.n_blocks && pl->place.blk_end == pl->m.n_blocks);
}

// the job's names resolved against the catalogue (x->want NULL without the key)
static int npnames_of_job(const struct plan *pl, struct npnames *x, struct ah_error *err) {
    const struct job *j = &pl->j;
    const struct model *m = &pl->m;
    memset(x, 0, sizeof *x);
    if (j->n_norm_profile == 0) return 0;
    x->want = calloc((size_t)m->n_cat + 1, 1);
    x->alias = calloc((size_t)m->n_cat + 1, sizeof *x->alias);
    if (!x->want || !x->alias) return ah_fail(err, AH_ENOMEM, "out of memory: the norm profile");
    return job_select_list(j, "norm_profile", j->norm_profile, j->n_norm_profile, m->cat, m->n_cat,
                           m->family, x->want, x->alias, err);
}

// ... and checked: each a profilable value the job computes
static int npnames_of(const struct plan *pl, struct npnames *x, struct ah_error *err) {
    const struct job *j = &pl->j;
    const struct model *m = &pl->m;
    int rc = npnames_of_job(pl, x, err);
    for (int i = 0; rc == 0 && x->want && i < m->n_cat; i++) {
        if (!x->want[i]) continue;
        const struct tap_desc *d = &m->cat[i];
        char shape[256] = "";
        for (int k = 0; k < d->ndim; k++)
            snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%s", k ? ", " : "",
                     d->axes[k]);
        if (!profilable(d))
            return ah_fail(err, AH_EINVAL,
                           "%s: \"norm_profile\": \"%s\" is %s (%s): a profile takes a float "
                           "activation shaped (batch, sequence, features)",
                           j->path, d->name, tap_dtype_name(d->dtype), shape);
        AH_ASSERT(computed(pl, d->block)); // the plan runs the blocks up to the deepest
        x->n++;
    }
    return rc;
}

int normprofile_deepest(const struct plan *pl) {
    struct npnames x;
    struct ah_error e = {0};
    int deepest = -1;
    if (npnames_of_job(pl, &x, &e) == 0)
        for (int i = 0; x.want && i < pl->m.n_cat; i++)
            if (x.want[i] && pl->m.cat[i].block > deepest) deepest = pl->m.cat[i].block;
    npnames_free(&x);
    return deepest;
}

// whether this rank's stage computes the value of block b (grid.c's owner of a block)
static bool stage_computes(const struct plan *pl, const struct grid *g, int b) {
    int nb = pl->m.n_blocks;
    if (pl->place.blk_end == 0) return true; // the embeddings alone: one stage
    int o = b < 0 ? 0 : b >= nb ? nb - 1 : b;
    return o >= g->b0 && o < g->b1;
}

static int np_check(const struct plan *pl, const struct grid *g, struct ah_error *err) {
    struct npnames x;
    int rc = npnames_of(pl, &x, err);
    for (int i = 0; rc == 0 && x.want && i < pl->m.n_cat; i++)
        if (x.want[i] && stage_computes(pl, g, pl->m.cat[i].block) && g->scomm == MPI_COMM_NULL)
            rc = ah_fail(err, AH_EINVAL,
                         "%s: \"norm_profile\": \"%s\" is computed by pipeline stage %d, which "
                         "stores no value of \"activations\" (its profile goes into that stage's "
                         "segments): store one of its values or use fewer stages",
                         pl->j.path, pl->m.cat[i].name, g->stage);
    npnames_free(&x);
    return rc;
}

// ---------------------------------------------------------------------------------------------
// one partial: accumulate, merge

struct npdims {
    int64_t T, L;
    double edges[NP_H - 1];
};

static void dims_of(struct npdims *z, int64_t T) {
    z->T = T;
    z->L = 4 * T + NP_H + 2 + 4 * NP_K;
    for (int k = 0; k < NP_H - 1; k++)
        z->edges[k] = exp2((double)(NP_KMIN + k) / 4.0);
}

static void part_reset(const struct npdims *z, double *p) {
    memset(p, 0, (size_t)z->L * sizeof *p);
    for (int64_t t = 0; t < z->T; t++)
        p[3 * z->T + t] = -INFINITY;
}

// the bin of a norm (not NaN): how many edges are <= it
static int bin_of(const struct npdims *z, double x) {
    int lo = 0, hi = NP_H - 1; // the answer lies in [lo, hi]
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (z->edges[mid] <= x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

// whether outlier a (prompt, position, token, norm) goes before b
static bool before(const double *a, const double *b) {
    if (a[3] != b[3]) return a[3] > b[3];
    return a[0] != b[0] ? a[0] < b[0] : a[1] < b[1];
}

// o into the sorted outliers of partial p (at most NP_K)
static void outlier_add(const struct npdims *z, double *p, const double *o) {
    double *n_out = p + 4 * z->T + NP_H + 1, *out = n_out + 1;
    int n = (int)*n_out;
    if (n == NP_K && !before(o, out + 4 * (NP_K - 1))) return;
    int at = n < NP_K ? n : NP_K - 1;
    while (at > 0 && before(o, out + 4 * (at - 1))) {
        memcpy(out + 4 * at, out + 4 * (at - 1), 4 * sizeof *out);
        at--;
    }
    memcpy(out + 4 * at, o, 4 * sizeof *out);
    if (n < NP_K) *n_out = n + 1;
}

// one token's norm at position t
static void norm_add(const struct npdims *z, double *p, int64_t t, double norm, const double *o) {
    int64_t T = z->T;
    if (isnan(norm)) {
        p[4 * T + NP_H] += 1;
        return;
    }
    p[t] += 1;
    p[T + t] += norm;
    p[2 * T + t] += norm * norm;
    if (norm > p[3 * T + t]) p[3 * T + t] = norm;
    p[4 * T + bin_of(z, norm)] += 1;
    outlier_add(z, p, o);
}

// total += part, in this order (the merge of batch partials, batch after batch)
static void part_merge(const struct npdims *z, double *total, const double *part) {
    int64_t T = z->T;
    for (int64_t t = 0; t < T; t++) {
        total[t] += part[t];
        total[T + t] += part[T + t];
        total[2 * T + t] += part[2 * T + t];
        if (part[3 * T + t] > total[3 * T + t]) total[3 * T + t] = part[3 * T + t];
    }
    for (int k = 0; k <= NP_H; k++) // the histogram and n_nan
        total[4 * T + k] += part[4 * T + k];
    const double *out = part + 4 * T + NP_H + 2;
    for (int i = 0; i < (int)part[4 * T + NP_H + 1]; i++)
        outlier_add(z, total, out + 4 * i);
}

// ---------------------------------------------------------------------------------------------
// the consumer

struct nprofile {
    const struct plan *pl;
    struct npnames names;
    struct npdims z;
    int *val_of_id; // (n_cat) the value index of a catalogue id, or -1
    int *id_of_val; // (n_vals) its catalogue id
    int n_vals;
    bool takes;             // this rank computes the values (expert shard 0)
    uint8_t *want;          // (n_cat) what it takes; owned
    double *part;           // (n_vals, L) the batch in hand
    struct parts_held held; // batches since the last flush: (n, n_vals, L) their partials
};

static void np_free(void *u) {
    struct nprofile *np = u;
    if (!np) return;
    npnames_free(&np->names);
    free(np->val_of_id);
    free(np->id_of_val);
    free(np->want);
    free(np->part);
    parts_held_free(&np->held);
    free(np);
}

static int np_take(void *u, const struct ctake *t, const struct tview *v, struct ah_error *err) {
    struct nprofile *np = u;
    (void)err;
    const struct cbatch *bt = t->bt;
    double *p = np->part + np->val_of_id[t->id] * np->z.L;
    AH_ASSERT(v->ndim == 3 && v->dtype == TAP_F32 && v->dims[1] <= np->z.T);
    int64_t T = v->dims[1], F = v->dims[2];
    const float *x = v->data;
    for (int64_t s = 0; s < T; s++) {
        if (t->keep && !t->keep[s]) continue;
        const float *row = x + s * F;
        double acc = 0;
        for (int64_t f = 0; f < F; f++)
            acc += (double)row[f] * (double)row[f];
        double o[4] = {(double)(bt->p0 + t->b), (double)s, (double)bt->ids[bt->boff[t->b] + s],
                       sqrt(acc)};
        norm_add(&np->z, p, s, o[3], o);
    }
    return 0;
}

static int np_begin(void *u, const struct cbatch *bt, struct ah_error *err) {
    struct nprofile *np = u;
    (void)bt, (void)err;
    for (int k = 0; k < np->n_vals; k++)
        part_reset(&np->z, np->part + k * np->z.L);
    return 0;
}

static int np_end(void *u, const struct cbatch *bt, struct ah_error *err) {
    struct nprofile *np = u;
    if (!np->takes) return 0;
    double *at = parts_hold(&np->held, bt->k, "the norm profile", err);
    if (!at) return -AH_ENOMEM;
    memcpy(at, np->part, (size_t)np->held.L * sizeof *at);
    return 0;
}

// rank 0 of the stage: the gathered partials v (total, n_vals, L) of batches batch written per
// value, (total, L) each, into seg_path
static int np_write(const struct nprofile *np, const char *seg_path, const int64_t *batch,
                    int total, const double *v, struct ah_error *err) {
    int64_t L = np->z.L;
    const char **names = calloc((size_t)np->n_vals, sizeof *names);
    const double **vals = calloc((size_t)np->n_vals, sizeof *vals);
    double *per = malloc(((size_t)total * (size_t)(np->n_vals * L) + 1) * sizeof *per);
    int rc = 0;
    if (!names || !vals || !per)
        rc = ah_fail(err, AH_ENOMEM, "out of memory: %d batches' norm profiles", total);
    for (int k = 0; rc == 0 && k < np->n_vals; k++) { // (n, n_vals, L) -> n_vals of (n, L)
        for (int i = 0; i < total; i++)
            memcpy(per + ((size_t)k * total + i) * L, v + ((size_t)i * np->n_vals + k) * L,
                   (size_t)L * sizeof *per);
        names[k] = np->pl->m.cat[np->id_of_val[k]].name;
        vals[k] = per + (size_t)k * total * L;
    }
    if (rc == 0)
        rc = h5prof_write_partials(seg_path, batch, total, np->n_vals, names, vals, L, err);
    free(names), free(vals), free(per);
    return rc;
}

// Collective over the stage (comm): the partials held since the last flush go into the closed
// segment `file` of the output at out_path, written by comm's rank 0 (batches member after
// member, as wstats_flush), through the profile's own io/ file (io/h5profile.h)
static int np_segment(void *u, const struct out_ops *out, MPI_Comm comm, const char *out_path,
                      const char *file, struct ah_error *err) {
    (void)out; // one format today; the profile's partials are HDF5 (io/h5profile.c)
    struct nprofile *np = u;
    char seg_path[4400];
    out_parts_path(seg_path, sizeof seg_path, out_path, file);
    int me = 0, total = 0;
    CHECK_MPI(MPI_Comm_rank(comm, &me));
    int64_t *batch = NULL;
    double *v = NULL;
    int rc = parts_gather(&np->held, comm, &batch, &v, &total, "norm profiles", err);
    np->held.n = 0;
    if (rc == 0 && me == 0) rc = np_write(np, seg_path, batch, total, v, err);
    free(batch), free(v);
    return rc;
}

// Every rank of a stage that computes a profiled value has one (to join the segment flushes);
// its expert shard 0 takes the views.
static int np_make(struct consumer *c, const struct consumer_env *env, struct ah_error *err) {
    const struct plan *pl = env->pl;
    const struct grid *g = env->g;
    int n_cat = pl->m.n_cat;
    struct nprofile *np = calloc(1, sizeof *np);
    if (!np) return ah_fail(err, AH_ENOMEM, "out of memory: the norm profile");
    np->pl = pl;
    int rc = npnames_of(pl, &np->names, err);
    np->val_of_id = malloc(((size_t)n_cat + 1) * sizeof *np->val_of_id);
    np->id_of_val = malloc(((size_t)n_cat + 1) * sizeof *np->id_of_val);
    np->want = calloc((size_t)n_cat + 1, 1);
    if (rc == 0 && (!np->val_of_id || !np->id_of_val || !np->want))
        rc = ah_fail(err, AH_ENOMEM, "out of memory: the norm profile");
    for (int i = 0; rc == 0 && i < n_cat; i++) {
        np->val_of_id[i] = -1;
        if (!np->names.want || !np->names.want[i] || !stage_computes(pl, g, pl->m.cat[i].block))
            continue;
        np->val_of_id[i] = np->n_vals;
        np->id_of_val[np->n_vals++] = i;
        np->want[i] = g->shard == 0;
    }
    if (rc < 0 || np->n_vals == 0 || g->scomm == MPI_COMM_NULL) {
        np_free(np);
        return rc;
    }
    np->takes = g->shard == 0;
    dims_of(&np->z, pl->place.S);
    parts_held_init(&np->held, np->n_vals * np->z.L);
    if (!(np->part = malloc((size_t)(np->n_vals * np->z.L) * sizeof *np->part))) {
        np_free(np);
        return ah_fail(err, AH_ENOMEM, "out of memory: the norm profile");
    }
    *c = (struct consumer){.name = "normprofile",
                           .want = np->want,
                           .begin = np_begin,
                           .take = np_take,
                           .end = np_end,
                           .segment = np_segment,
                           .free = np_free,
                           .u = np};
    return 0;
}

// ---------------------------------------------------------------------------------------------
// the final merge (rank 0, every batch in)

// the fold of one value's partials: what np_batches and np_row share
struct npfold {
    const struct plan *pl;
    const struct h5out_record *rec;
    const char *value;
    const struct npdims *z;
    double *total, *buf; // (L) each
    struct h5part_src src;
};

static int np_batches(void *u, const struct h5out_record *r, int64_t **b, int64_t *m,
                      struct ah_error *err) {
    const struct npfold *f = u;
    char path[4400];
    out_parts_path(path, sizeof path, f->pl->j.out_path, r->file);
    if (h5prof_batches(path, f->value, b, m) < 0)
        return ah_fail(err, AH_EIO, "%s: cannot read the norm profile's partials", path);
    return 0;
}

static int np_row(void *u, const struct part_entry *x, struct ah_error *err) {
    struct npfold *f = u;
    char path[4400];
    out_parts_path(path, sizeof path, f->pl->j.out_path, f->rec[x->rec].file);
    if (h5prof_read_row(&f->src, path, f->value, x->row, f->z->L, f->buf) < 0)
        return ah_fail(err, AH_EIO, "%s: cannot read the norm profile's partials", path);
    part_merge(f->z, f->total, f->buf);
    return 0;
}

// every listed batch partial of value `value` merged, batch after batch, into total
static int np_fold(const struct plan *pl, const struct h5out_record *rec, int n_rec,
                   const char *value, const struct npdims *z, double *total, struct ah_error *err) {
    struct npfold f = {.pl = pl, .rec = rec, .value = value, .z = z, .total = total};
    if (!(f.buf = malloc((size_t)z->L * sizeof *f.buf)))
        return ah_fail(err, AH_ENOMEM, "out of memory: the norm profile");
    part_reset(z, total);
    h5part_src_init(&f.src);
    int64_t missing = -1;
    int rc = parts_fold_listed(rec, n_rec, pl->place.B, pl->place.K, np_batches, np_row, &f,
                               "the norm profile's partials", &missing, err);
    if (rc == 0 && missing >= 0)
        rc = ah_fail(err, AH_EIO,
                     "%s: no listed segment holds the norm profile of \"%s\" for batch %lld",
                     pl->j.out_path, value, (long long)missing);
    h5part_src_close(&f.src);
    free(f.buf);
    return rc;
}

// a merged partial as the master stores it (arrays in a, malloc'd: free a[0] and i64[0])
static int np_item(const struct npdims *z, const double *p, struct h5prof_item *it, int64_t **i64,
                   double **f64) {
    int64_t T = z->T;
    int n_out = (int)p[4 * T + NP_H + 1];
    *i64 = malloc(((size_t)T + NP_H + 3 * NP_K + 1) * sizeof **i64);
    *f64 = malloc(((size_t)T * 3 + NP_K + 1) * sizeof **f64);
    if (!*i64 || !*f64) return -AH_ENOMEM;
    int64_t *cnt = *i64, *hist = cnt + T, *op = hist + NP_H, *ot = op + NP_K, *ok = ot + NP_K;
    double *sum = *f64, *sq = sum + T, *mx = sq + T, *on = mx + T;
    for (int64_t t = 0; t < T; t++) {
        cnt[t] = (int64_t)p[t];
        sum[t] = p[T + t];
        sq[t] = p[2 * T + t];
        mx[t] = cnt[t] ? p[3 * T + t] : (double)NAN;
    }
    for (int k = 0; k < NP_H; k++)
        hist[k] = (int64_t)p[4 * T + k];
    const double *out = p + 4 * T + NP_H + 2;
    for (int i = 0; i < n_out; i++) {
        op[i] = (int64_t)out[4 * i], ot[i] = (int64_t)out[4 * i + 1];
        ok[i] = (int64_t)out[4 * i + 2], on[i] = out[4 * i + 3];
    }
    *it = (struct h5prof_item){.T = T,
                               .count = cnt,
                               .sum = sum,
                               .sum_sq = sq,
                               .max = mx,
                               .hist = hist,
                               .edges = z->edges,
                               .n_nan = (int64_t)p[4 * T + NP_H],
                               .n_out = n_out,
                               .o_prompt = op,
                               .o_pos = ot,
                               .o_tok = ok,
                               .o_norm = on};
    return 0;
}

static int np_final(const struct plan *pl, const struct out_ops *out,
                    const struct h5out_record *rec, int n_rec, bool if_missing,
                    struct ah_error *err) {
    (void)out; // the profile is stored through io/h5profile.c
    if (pl->j.n_norm_profile == 0) return 0;
    if (if_missing && h5prof_has_group(pl->j.out_path, "norm_profile")) return 0;
    struct npnames x;
    struct npdims z;
    dims_of(&z, pl->place.S);
    int rc = npnames_of(pl, &x, err), n = 0;
    struct h5prof_item *items = calloc((size_t)x.n + 1, sizeof *items);
    int64_t **i64 = calloc((size_t)x.n + 1, sizeof *i64);
    double **f64 = calloc((size_t)x.n + 1, sizeof *f64), *total = malloc((size_t)z.L * 8);
    if (rc == 0 && (!items || !i64 || !f64 || !total))
        rc = ah_fail(err, AH_ENOMEM, "out of memory: the norm profile");
    for (int i = 0; rc == 0 && i < pl->m.n_cat; i++) {
        if (!x.want[i]) continue;
        const char *value = pl->m.cat[i].name;
        rc = np_fold(pl, rec, n_rec, value, &z, total, err);
        if (rc == 0 && np_item(&z, total, &items[n], &i64[n], &f64[n]) < 0)
            rc = ah_fail(err, AH_ENOMEM, "out of memory: the norm profile");
        if (rc == 0) {
            items[n].value = value;
            items[n++].name = x.alias[i] ? x.alias[i] : value;
        }
    }
    if (rc == 0) rc = h5prof_store(pl->j.out_path, items, n, err);
    for (int k = 0; k <= n && i64 && f64; k++)
        free(i64[k]), free(f64[k]);
    free(items), free(i64), free(f64), free(total);
    npnames_free(&x);
    return rc;
}

const struct consumer_kind normprofile_kind = {"normprofile", np_check, np_make, np_final};
