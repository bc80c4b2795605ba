// wstats.c - see wstats.h. F = features of a set's row, L = doubles of a batch's packed partials.
#include "harvest/wstats.h"

#include "harvest/partials.h" // parts_hold, parts_gather, parts_fold_listed
#include "io/h5profile.h"     // h5prof_has_group

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// One activation with statistics: its dataset and its features' shape.
struct wset {
    int dset;
    int nf;
    int64_t fdims[TAP_MAX_DIMS];
    int64_t F;
};

struct wstats {
    const struct plan *pl;
    struct wset *set; // (n_sets) in dataset order
    int n_sets;
    int *set_of_id;     // (n_cat) the set of a catalogue id, or -1
    uint8_t *want;      // (n_cat) what this rank takes
    struct stats *part; // (n_sets) the batch in hand
    int64_t L;          // doubles of one batch's packed partials
    bool takes;         // this rank computes them (else it only joins the flushes)
    float *buf;         // (T, F) the chosen rows of a view
    size_t cap;
    struct parts_held held; // the batches since the last flush: (n, L) their packed partials
};

// the catalogue id of dataset i (plan.dset_of_id's inverse)
static int dset_id(const struct plan *pl, int i) {
    for (int id = 0; id < pl->m.n_cat; id++)
        if (pl->names.dset_of_id[id] == i) return id;
    AH_ASSERT(!"a dataset with no catalogue id");
    return -1;
}

// The sets of datasets [i0, i1): every element of a stored row but the sequence axis is a
// feature (as io/h5stats.c's src_describe reads them back).
static int sets_of(const struct plan *pl, int i0, int i1, struct wset *out) {
    int n = 0;
    for (int i = i0; i < i1; i++) {
        const struct h5out_dset *d = &pl->names.dsets[i];
        if (!pl->stats.want[dset_id(pl, i)]) continue;
        struct wset *s = &out[n++];
        *s = (struct wset){.dset = i, .F = 1};
        for (int k = 1; k < d->ndim; k++)
            if (tap_axis_kind(d->axes[k]) != TAP_AXIS_SEQ)
                s->fdims[s->nf++] = d->dims[k], s->F *= d->dims[k];
        if (s->nf == 0) s->fdims[s->nf++] = 1; // a scalar per token: one feature
    }
    return n;
}

int wstats_init(struct wstats **out, const struct plan *pl, int i0, int i1, bool takes,
                struct ah_error *err) {
    *out = NULL;
    struct wstats *w = calloc(1, sizeof *w);
    if (!w || !(w->set = calloc((size_t)(i1 - i0) + 1, sizeof *w->set))) {
        free(w);
        return ah_fail(err, AH_ENOMEM, "out of memory: the statistics of %d names", i1 - i0);
    }
    w->pl = pl;
    w->takes = takes;
    w->n_sets = sets_of(pl, i0, i1, w->set);
    if (w->n_sets == 0) {
        wstats_free(w);
        return 0;
    }
    int n_cat = pl->m.n_cat, rc = 0;
    w->set_of_id = malloc((size_t)n_cat * sizeof *w->set_of_id);
    w->want = calloc((size_t)n_cat + 1, 1);
    w->part = calloc((size_t)w->n_sets, sizeof *w->part);
    rc = w->set_of_id && w->want && w->part ? 0 : -AH_ENOMEM;
    for (int i = 0; rc == 0 && i < n_cat; i++)
        w->set_of_id[i] = -1;
    for (int k = 0; rc == 0 && k < w->n_sets; k++) {
        int id = dset_id(pl, w->set[k].dset);
        w->set_of_id[id] = k;
        w->want[id] = takes;
        rc = stats_init(&w->part[k], w->set[k].F);
        w->L += stats_buf_len(w->set[k].F);
    }
    parts_held_init(&w->held, w->L);
    *out = w;
    return rc < 0 ? ah_fail(err, AH_ENOMEM, "out of memory: statistics accumulators") : 0;
}

void wstats_free(struct wstats *w) {
    if (!w) return;
    for (int k = 0; w->part && k < w->n_sets; k++)
        stats_free(&w->part[k]);
    free(w->part);
    free(w->set);
    free(w->set_of_id);
    free(w->want);
    free(w->buf);
    parts_held_free(&w->held);
    free(w);
}

// the tap consumer: prompt b's chosen rows of one activation into the batch's partial
static int wstats_take(void *u, const struct ctake *t, const struct tview *v,
                       struct ah_error *err) {
    struct wstats *w = u;
    struct wset *s = &w->set[w->set_of_id[t->id]];
    int k = tview_seq_axis(t->d, v);
    if (k == 1 && !t->keep) { // (1, T, F): already the rows, in order
        stats_add_rows(&w->part[w->set_of_id[t->id]], v->data, v->dims[1]);
        return 0;
    }
    size_t need = (size_t)(v->dims[k] * s->F) * sizeof(float);
    if (need > w->cap) {
        free(w->buf);
        w->cap = (w->buf = malloc(need)) ? need : 0;
        if (!w->buf) return ah_fail(err, AH_ENOMEM, "out of memory: %zu bytes of rows", need);
    }
    int64_t n = tview_rows(v, k, t->keep, (char *)w->buf);
    stats_add_rows(&w->part[w->set_of_id[t->id]], w->buf, n);
    return 0;
}

static int wstats_begin(void *u, const struct cbatch *bt, struct ah_error *err) {
    struct wstats *w = u;
    (void)bt, (void)err;
    for (int k = 0; k < w->n_sets; k++)
        stats_reset(&w->part[k]);
    return 0;
}

// batch k's partials packed and held until the segment closes
static int wstats_end(void *u, const struct cbatch *bt, struct ah_error *err) {
    struct wstats *w = u;
    if (!w->takes) return 0; // expert shards other than 0 hold nothing
    double *at = parts_hold(&w->held, bt->k, "the partials", err);
    if (!at) return -AH_ENOMEM;
    for (int s = 0; s < w->n_sets; s++) {
        stats_pack(&w->part[s], at);
        at += stats_buf_len(w->set[s].F);
    }
    return 0;
}

// ---------------------------------------------------------------------------------------------
// partials into the closed segment, and back

int wstats_flush(struct wstats *w, const struct out_ops *out, MPI_Comm comm, const char *out_path,
                 const char *file, struct ah_error *err) {
    int me = 0, total = 0;
    CHECK_MPI(MPI_Comm_rank(comm, &me));
    int64_t *batch = NULL;
    double *v = NULL;
    int rc = parts_gather(&w->held, comm, &batch, &v, &total, "partials", err);
    if (me == 0 && rc == 0) rc = out->partials_put(out_path, file, batch, v, total, w->L, err);
    w->held.n = 0;
    free(batch), free(v);
    return rc;
}

// ---------------------------------------------------------------------------------------------
// the final fold (rank 0)

static void seg_file(const struct plan *pl, const struct h5out_record *r, char *buf, size_t n) {
    out_parts_path(buf, n, pl->j.out_path, r->file);
}

// the fold of one stage's statistics (its datasets [i0, i1)): what w_batches and w_row share
struct wfold {
    const struct plan *pl;
    const struct out_ops *out;
    const struct h5out_record *rec;
    int i0;
    const struct wset *set;
    int n_sets;
    struct stats *tmp;          // (n_sets) a batch's partials, unpacked
    struct h5stats_item *items; // (n_sets) the totals
    int64_t L;
    double *buf; // (L) a batch's packed partials
    // the segment last read from (record `open`, -1: none): batches in order come mostly from
    // one segment after another
    int open;
    struct out_partials *r;
};

// the batches of the stage's partials in record r's segment (none: a record of another stage)
static int w_batches(void *u, const struct h5out_record *r, int64_t **b, int64_t *m,
                     struct ah_error *err) {
    const struct wfold *f = u;
    if (r->i0 != f->i0) return 0;
    if (f->out->partials_batches(f->pl->j.out_path, r->file, b, m) == 0) return 0;
    free(*b);
    *b = NULL;
    char path[4400];
    seg_file(f->pl, r, path, sizeof path);
    return ah_fail(err, AH_EIO,
                   "%s: no statistics' partials (/stats/batch) in this listed segment: take the "
                   "statistics with `harvest stats %s`",
                   path, f->pl->j.out_path);
}

// entry x's packed partials read and merged into the sets' totals
static int w_row(void *u, const struct part_entry *x, struct ah_error *err) {
    struct wfold *f = u;
    char path[4400];
    seg_file(f->pl, &f->rec[x->rec], path, sizeof path);
    if (f->open != x->rec) {
        f->out->partials_close(f->r);
        f->open = x->rec;
        f->r = f->out->partials_open(f->pl->j.out_path, f->rec[x->rec].file);
    }
    if (f->out->partials_row(f->r, x->row, f->L, f->buf) < 0)
        return ah_fail(err, AH_EIO, "%s: cannot read the statistics' partials", path);
    for (int k = 0, at = 0; k < f->n_sets; at += (int)stats_buf_len(f->set[k++].F)) {
        if (stats_unpack(&f->tmp[k], f->buf + at, stats_buf_len(f->set[k].F)) < 0)
            return ah_fail(err, AH_EFORMAT, "%s: damaged statistics' partials", path);
        stats_merge(&f->items[k].s, &f->tmp[k]);
    }
    return 0;
}

// batch after batch, every listed partial of the stage whose datasets begin at i0 merged into
// the sets' totals out
static int fold_stage(const struct plan *pl, const struct out_ops *fmt,
                      const struct h5out_record *rec, int n_rec, int i0, const struct wset *set,
                      int n_sets, struct h5stats_item *out, struct ah_error *err) {
    struct wfold f = {.pl = pl,
                      .out = fmt,
                      .rec = rec,
                      .i0 = i0,
                      .set = set,
                      .n_sets = n_sets,
                      .items = out,
                      .open = -1};
    int rc = 0;
    f.tmp = calloc((size_t)n_sets, sizeof *f.tmp);
    for (int k = 0; f.tmp && k < n_sets; k++) {
        f.L += stats_buf_len(set[k].F);
        if (stats_init(&f.tmp[k], set[k].F) < 0 || stats_init(&out[k].s, set[k].F) < 0) rc = -1;
    }
    f.buf = malloc(((size_t)f.L + 1) * sizeof *f.buf);
    if (!f.tmp || !f.buf || rc < 0) rc = ah_fail(err, AH_ENOMEM, "out of memory: statistics");
    int64_t missing = -1;
    if (rc == 0)
        rc = parts_fold_listed(rec, n_rec, pl->place.B, pl->place.K, w_batches, w_row, &f,
                               "the statistics' partials", &missing, err);
    if (rc == 0 && missing >= 0)
        rc = ah_fail(err, AH_EIO,
                     "%s: no listed segment holds the statistics' partials of batch %lld: take "
                     "the statistics with `harvest stats %s`",
                     pl->j.out_path, (long long)missing, pl->j.out_path);
    fmt->partials_close(f.r);
    for (int k = 0; f.tmp && k < n_sets; k++)
        stats_free(&f.tmp[k]);
    free(f.tmp);
    free(f.buf);
    return rc;
}

// Rows with a NaN or an infinity (a model whose values overflow) are left out of the statistics
// and counted (n_rows_nonfinite); say so even with --quiet, which silences progress only.
static void warn_nonfinite(const char *out, const struct h5stats_item *it, int n) {
    for (int k = 0; k < n; k++)
        if (it[k].s.nonfinite)
            fprintf(stderr,
                    "harvest: warning: %s: %s: %lld rows hold a NaN or an infinity (the model's "
                    "values overflow?) and are left out of its statistics (n_rows_nonfinite)\n",
                    out, it[k].name, (long long)it[k].s.nonfinite);
}

int wstats_final(const struct plan *pl, const struct out_ops *out, const struct h5out_record *rec,
                 int n_rec, struct ah_error *err) {
    struct h5stats_item *items = calloc((size_t)pl->stats.n + 1, sizeof *items);
    struct wset *set = calloc((size_t)pl->names.n_dsets + 1, sizeof *set);
    int n_items = 0, rc = items && set ? 0 : ah_fail(err, AH_ENOMEM, "out of memory: statistics");
    for (int r = 0; rc == 0 && r < n_rec; r++) {
        bool seen = false; // one fold a stage: its records share their datasets [i0, i1)
        for (int q = 0; q < r && !seen; q++)
            seen = rec[q].i0 == rec[r].i0;
        int n_sets = seen ? 0 : sets_of(pl, rec[r].i0, rec[r].i1, set);
        if (n_sets == 0) continue;
        for (int k = 0; k < n_sets; k++) {
            struct h5stats_item *it = &items[n_items + k];
            const struct h5out_dset *d = &pl->names.dsets[set[k].dset];
            it->name = h5out_dset_name(d); // the dataset's name, as asked (README "Aliases")
            if (d->alias) snprintf(it->canonical, sizeof it->canonical, "%s", d->desc->name);
            it->nf = set[k].nf;
            memcpy(it->fdims, set[k].fdims, sizeof it->fdims);
        }
        rc = fold_stage(pl, out, rec, n_rec, rec[r].i0, set, n_sets, items + n_items, err);
        if (rc == 0) warn_nonfinite(pl->j.out_path, items + n_items, n_sets);
        n_items += n_sets;
    }
    if (rc == 0) rc = out->stats_store(pl->j.out_path, items, n_items, err);
    for (int k = 0; items && k < n_items; k++)
        stats_free(&items[k].s);
    free(items);
    free(set);
    return rc;
}

// ---------------------------------------------------------------------------------------------
// the consumer kind (harvest.h): every rank of a stage with statistics joins the segment
// flushes; its expert shard 0 takes the views

static void wstats_free_u(void *u) {
    wstats_free(u);
}

static int wstats_segment(void *u, const struct out_ops *out, MPI_Comm comm, const char *out_path,
                          const char *file, struct ah_error *err) {
    return wstats_flush(u, out, comm, out_path, file, err);
}

static int wstats_make(struct consumer *c, const struct consumer_env *env, struct ah_error *err) {
    const struct plan *pl = env->pl;
    const struct grid *g = env->g;
    struct wstats *w = NULL;
    if (!pl->stats.n || g->scomm == MPI_COMM_NULL) return 0;
    int rc = wstats_init(&w, pl, g->i0, g->i1, g->shard == 0, err);
    if (rc < 0 || !w) {
        wstats_free(w);
        return rc;
    }
    *c = (struct consumer){.name = "wstats",
                           .want = w->want,
                           .begin = wstats_begin,
                           .take = wstats_take,
                           .end = wstats_end,
                           .segment = wstats_segment,
                           .free = wstats_free_u,
                           .u = w};
    return 0;
}

static int wstats_final_kind(const struct plan *pl, const struct out_ops *out,
                             const struct h5out_record *rec, int n_rec, bool if_missing,
                             struct ah_error *err) {
    if (!pl->stats.n) return 0;
    if (if_missing && h5prof_has_group(pl->j.out_path, "stats")) return 0;
    return wstats_final(pl, out, rec, n_rec, err);
}

const struct consumer_kind wstats_kind = {"wstats", NULL, wstats_make, wstats_final_kind};
