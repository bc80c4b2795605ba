// partials.c - see partials.h.
#include "harvest/partials.h"

#include "harvest/run.h" // CHECK_MPI

#include <stdlib.h>
#include <string.h>

// ---------------------------------------------------------------------------------------------
// held

void parts_held_init(struct parts_held *h, int64_t L) {
    memset(h, 0, sizeof *h);
    h->L = L;
}

void parts_held_free(struct parts_held *h) {
    free(h->batch);
    free(h->v);
    h->batch = NULL, h->v = NULL;
    h->n = h->cap = 0;
}

double *parts_hold(struct parts_held *h, int64_t k, const char *what, struct ah_error *err) {
    if (h->n == h->cap) {
        int64_t c = h->cap * 2 + 8;
        int64_t *nb = realloc(h->batch, (size_t)c * sizeof *nb);
        if (nb) h->batch = nb;
        double *nv = nb ? realloc(h->v, (size_t)(c * h->L) * sizeof *nv) : NULL;
        if (!nv) {
            ah_fail(err, AH_ENOMEM, "out of memory: %s of %lld batches", what, (long long)c);
            return NULL;
        }
        h->v = nv;
        h->cap = c;
    }
    h->batch[h->n] = k;
    return h->v + h->n++ * h->L;
}

int parts_gather(const struct parts_held *h, MPI_Comm comm, int64_t **batch, double **v, int *total,
                 const char *what, struct ah_error *err) {
    int me = 0, size = 1, rc = 0, mine = (int)h->n, B = (int)h->L;
    *batch = NULL, *v = NULL, *total = 0;
    CHECK_MPI(MPI_Comm_rank(comm, &me));
    CHECK_MPI(MPI_Comm_size(comm, &size));
    int *cnt = NULL, *dsp = NULL, *cntv = NULL, *dspv = NULL;
    if (me == 0) {
        cnt = calloc((size_t)size, sizeof *cnt), dsp = calloc((size_t)size, sizeof *dsp);
        cntv = calloc((size_t)size, sizeof *cntv), dspv = calloc((size_t)size, sizeof *dspv);
        if (!cnt || !dsp || !cntv || !dspv) rc = -AH_ENOMEM;
    }
    CHECK_MPI(MPI_Gather(&mine, 1, MPI_INT, cnt, 1, MPI_INT, 0, comm));
    for (int m = 0; me == 0 && rc == 0 && m < size; m++) { // batches a member, then partials
        dsp[m] = *total, cntv[m] = cnt[m] * B, dspv[m] = *total * B;
        *total += cnt[m];
    }
    if (me == 0 && rc == 0) {
        *batch = malloc(((size_t)*total + 1) * sizeof **batch);
        *v = malloc(((size_t)*total * (size_t)B + 1) * sizeof **v);
        if (!*batch || !*v) rc = -AH_ENOMEM;
    }
    if (rc < 0) ah_fail(err, AH_ENOMEM, "out of memory: %d batches' %s", *total, what);
    CHECK_MPI(MPI_Bcast(&rc, 1, MPI_INT, 0, comm)); // no one sends to a rank 0 without room
    if (rc == 0) {
        CHECK_MPI(MPI_Gatherv(h->batch, mine, MPI_INT64_T, *batch, cnt, dsp, MPI_INT64_T, 0, comm));
        CHECK_MPI(MPI_Gatherv(h->v, mine * B, MPI_DOUBLE, *v, cntv, dspv, MPI_DOUBLE, 0, comm));
    } else {
        free(*batch), free(*v);
        *batch = NULL, *v = NULL, *total = 0;
    }
    free(cnt), free(dsp), free(cntv), free(dspv);
    return rc;
}

// ---------------------------------------------------------------------------------------------
// the final fold

static int cmp_entry(const void *a, const void *b) {
    const struct part_entry *x = a, *y = b;
    return x->batch != y->batch ? (x->batch < y->batch ? -1 : 1) : x->rec - y->rec;
}

// whether record r lists prompt p's rows (a batch trimmed on resume is not listed)
static bool lists_prompt(const struct h5out_record *r, int64_t p) {
    for (int j = 0; j < r->n_runs; j++)
        if (p >= r->runs[j].p0 && p < r->runs[j].p1) return true;
    return false;
}

int parts_entries(const struct h5out_record *rec, int n_rec, int64_t B, parts_batches_fn fn,
                  void *u, const char *what, struct part_entry **e, int64_t *n,
                  struct ah_error *err) {
    int64_t cap = 0;
    *e = NULL;
    *n = 0;
    for (int r = 0; r < n_rec; r++) {
        int64_t *b = NULL, m = 0;
        int rc = fn(u, &rec[r], &b, &m, err);
        if (rc < 0) return rc;
        if (*n + m > cap) {
            struct part_entry *ne = realloc(*e, (size_t)(cap = 2 * cap + m) * sizeof *ne);
            if (!ne) {
                free(b);
                return ah_fail(err, AH_ENOMEM, "out of memory: %s", what);
            }
            *e = ne;
        }
        for (int64_t j = 0; j < m; j++)
            if (lists_prompt(&rec[r], b[j] * B)) (*e)[(*n)++] = (struct part_entry){b[j], j, r};
        free(b);
    }
    if (*n) qsort(*e, (size_t)*n, sizeof **e, cmp_entry);
    return 0;
}

int parts_fold(const struct part_entry *e, int64_t n, int64_t K, parts_row_fn fn, void *u,
               int64_t *missing, struct ah_error *err) {
    int64_t next = 0;
    int rc = 0;
    for (int64_t i = 0; rc == 0 && i < n; i++) {
        if (e[i].batch < next) continue; // a batch listed twice: its first listing
        if (e[i].batch > next) break;
        rc = fn(u, &e[i], err);
        next++;
    }
    *missing = next < K ? next : -1;
    return rc;
}

int parts_fold_listed(const struct h5out_record *rec, int n_rec, int64_t B, int64_t K,
                      parts_batches_fn batches, parts_row_fn row, void *u, const char *what,
                      int64_t *missing, struct ah_error *err) {
    struct part_entry *e = NULL;
    int64_t n = 0;
    *missing = -1;
    int rc = parts_entries(rec, n_rec, B, batches, u, what, &e, &n, err);
    if (rc == 0) rc = parts_fold(e, n, K, row, u, missing, err);
    free(e);
    return rc;
}
