// wstats.h - write-time statistics of `harvest run` (README "Statistics"): a tap consumer after
// the HDF5 collector takes, per batch, the float64 partial of each activation with statistics
// over the batch's chosen tokens (io/stats.h: prompt order, then position order; float32 values
// before storage rounding). The partials of a segment's batches go into that segment file (group
// /stats: `batch` [n] int64, `partials` [n, L] float64, L doubles a batch) after it closes and
// before the master lists it, so a checkpoint holds exactly the partials of the batches it holds
// and a resume recomputes exactly the others. At the end rank 0 folds every listed batch's
// partials in batch order (Chan's formulas, stats_merge) and stores /stats in the master: the same
// bits on every grid, after any resume, and as `harvest stats` (io/h5stats.c) for float32 storage.
#ifndef AH_WSTATS_H
#define AH_WSTATS_H

#include "harvest/run.h"
#include "io/output.h"

struct wstats;

// The statistics of the datasets [i0, i1) of the plan that have them (pl->stats.want); takes:
// this rank computes them (a stage's expert shard 0; the others only join wstats_flush). *out is
// NULL when there are none. Returns 0 or -AH_ENOMEM.
int wstats_init(struct wstats **out, const struct plan *pl, int i0, int i1, bool takes,
                struct ah_error *err);
void wstats_free(struct wstats *w); // safe on NULL
// The tap consumer is the kind wstats_kind (harvest.h): its want is empty unless takes; a batch's
// end packs its partials, a segment's close is wstats_flush and the kind's final wstats_final.
// Collective over comm (the ranks of the stage, the segment's writers): the partials held since
// the last flush go into the closed segment `file` of the output at out_path (format out),
// written and made durable by comm's rank 0.
int wstats_flush(struct wstats *w, const struct out_ops *out, MPI_Comm comm, const char *out_path,
                 const char *file, struct ah_error *err);
// Rank 0, every batch in: folds the partials of the listed segments (rec, n_rec) in batch order
// and stores /stats in the master (out->stats_store). An error names a batch whose partials no
// listed segment holds.
int wstats_final(const struct plan *pl, const struct out_ops *out, const struct h5out_record *rec,
                 int n_rec, struct ah_error *err);

#endif
