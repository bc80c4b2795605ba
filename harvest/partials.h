// partials.h - the per-batch partials of a tap consumer (wstats.c, normprofile.c, saes.c): held
// batch after batch on the rank that made them, gathered to the stage's rank 0 when a segment
// closes (which writes them into that segment file), and at the end, on rank 0, listed from
// every listed segment and folded in batch order. Each batch's partial is made by one rank, and
// the partials are added batch 0, 1, 2, ... whatever segment holds them, so a result is the same
// bits on any grid and after any resume. Internal to harvest/.
#ifndef AH_PARTIALS_H
#define AH_PARTIALS_H

#include "io/h5out.h" // struct h5out_record
#include "model/ah.h" // struct ah_error

#include <mpi.h>
#include <stdint.h>

// ---------------------------------------------------------------------------------------------
// held: a rank's partials since the last flush

struct parts_held {
    int64_t L; // doubles a batch
    int64_t n, cap;
    int64_t *batch; // (n) the batches, in the order held; owned
    double *v;      // (n, L) their partials; owned
};

// h empty, holding batches of L doubles.
void parts_held_init(struct parts_held *h, int64_t L);
// Frees what h holds; safe on a zeroed h.
void parts_held_free(struct parts_held *h);
// Room for batch k's partial after the held ones: its L doubles (the caller fills them), or
// NULL with err "out of memory: WHAT of N batches".
double *parts_hold(struct parts_held *h, int64_t k, const char *what, struct ah_error *err);

// Collective over comm: every member's held batches and partials to comm's rank 0, member after
// member: *batch (*total) and *v (*total, L), malloc'd there (NULL elsewhere; *total 0). 0, or
// -AH_ENOMEM on every rank (err on rank 0: "out of memory: N batches' WHAT"), nothing sent. The
// caller empties h (h->n = 0) after the flush.
int parts_gather(const struct parts_held *h, MPI_Comm comm, int64_t **batch, double **v, int *total,
                 const char *what, struct ah_error *err);

// ---------------------------------------------------------------------------------------------
// the final fold (rank 0, every batch in)

// One listed batch partial: row `row` of the partials in the segment of record `rec`.
struct part_entry {
    int64_t batch, row;
    int rec;
};

// The batches whose partials the segment of record r holds, in its rows' order: *b malloc'd (*m
// of them; *m 0 when it holds none). 0, or a negative AH_E* with err set.
typedef int (*parts_batches_fn)(void *u, const struct h5out_record *r, int64_t **b, int64_t *m,
                                struct ah_error *err);

// Every listed batch partial of the records rec (n_rec): each batch a record's segment holds
// (fn) whose first prompt (batch x B) the record lists (a batch trimmed on resume is not), sorted
// by (batch, record): (*e, *n) malloc'd (the caller frees *e, also on failure). 0, fn's error,
// or -AH_ENOMEM ("out of memory: WHAT").
int parts_entries(const struct h5out_record *rec, int n_rec, int64_t B, parts_batches_fn fn,
                  void *u, const char *what, struct part_entry **e, int64_t *n,
                  struct ah_error *err);

// One entry's partial read and merged into the consumer's total. 0, or a negative AH_E* with err.
typedef int (*parts_row_fn)(void *u, const struct part_entry *x, struct ah_error *err);

// Batch after batch (0, 1, ..., K - 1), fn(u, x) with the first entry x of e (sorted) that holds
// it (a batch listed twice: its first listing). *missing is the first batch below K that no entry
// holds (nothing after it is folded), or -1 when every one was. 0, or fn's error.
int parts_fold(const struct part_entry *e, int64_t n, int64_t K, parts_row_fn fn, void *u,
               int64_t *missing, struct ah_error *err);

// parts_entries of the records (batches of B prompts), then parts_fold of batches 0 .. K - 1
// over them with row: what a consumer's final does with its partials of one value.
int parts_fold_listed(const struct h5out_record *rec, int n_rec, int64_t B, int64_t K,
                      parts_batches_fn batches, parts_row_fn row, void *u, const char *what,
                      int64_t *missing, struct ah_error *err);

#endif
