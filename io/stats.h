// stats.h - running per-feature statistics of activation rows, in float64, reproducible bit for
// bit.
//
// A row is one token's value of an activation: every element of its trailing shape (per head x
// head_dim for head-split values), n_features floats. Per feature the accumulator keeps count,
// mean, M2 (sum of squared deviations), min and max; per row also the row's L2 norm, of which it
// keeps the mean and M2 (Welford, 1962; merged with Chan, Golub and LeVeque's pairwise formulas).
//
// Determinism. stats_add_rows folds the rows into the accumulator one at a time, in the order
// given, with a fixed sequence of float64 operations: the result depends only on the rows and their
// order, not on how they are split into calls. stats_merge is a fixed sequence of operations on its
// two operands. So a harvest computes one partial per batch (the batch's rows in prompt order,
// positions in order) and merges the partials in batch order, starting from an empty accumulator:
// the result is the same bits on every grid, after any resume, and in `harvest stats`.
//
// Non-finite values: a row holding a NaN or an infinity is left out whole (it changes no
// statistic) and counted in `nonfinite`, so one bad row cannot poison a feature's mean; callers
// report the count. The count is the same for every feature.
//
// Variance is the population variance M2 / count (numpy's var with ddof=0). With count 0 mean,
// var, min and max are NaN.
#ifndef AH_STATS_H
#define AH_STATS_H

#include <stdint.h>

struct stats {
    int64_t n_features;
    int64_t count;             // rows folded in
    int64_t nonfinite;         // rows left out for a NaN or infinity
    double *mean;              // (n_features) owned
    double *m2;                // (n_features) sum of squared deviations from the mean; owned
    double *min, *max;         // (n_features) +inf / -inf while count is 0; owned
    double norm_mean, norm_m2; // of the rows' L2 norms (computed in float64)
};

// Allocates an empty accumulator. Returns 0 or -AH_ENOMEM (then s is freeable).
int stats_init(struct stats *s, int64_t n_features);
void stats_free(struct stats *s);  // safe on a zeroed or half-built struct
void stats_reset(struct stats *s); // back to empty, keeping the buffers

// Folds n_rows rows of n_features floats (row-major) in, in order.
void stats_add_rows(struct stats *s, const float *rows, int64_t n_rows);
// dst = dst (+) src, Chan's formulas; src unchanged. Same n_features (asserted). Merging into an
// empty dst copies src exactly; merging an empty src leaves dst unchanged.
void stats_merge(struct stats *dst, const struct stats *src);

// Finished values: var (n_features) = M2 / count; NaN when count is 0. norm_var likewise.
void stats_var(const struct stats *s, double *var);
double stats_norm_var(const struct stats *s);

// ---- serialisation: a flat float64 buffer (checkpoints, MPI messages) ----
// Layout: [tag, n_features, count, nonfinite, norm_mean, norm_m2, mean[F], m2[F], min[F], max[F]];
// integers are exact below 2^53. The same bits come back.
int64_t stats_buf_len(int64_t n_features); // doubles
void stats_pack(const struct stats *s, double *buf);
// Fills s (initialised with the same n_features) from buf. Returns 0 or -AH_EFORMAT for a buffer
// that is not a partial of n_features features.
int stats_unpack(struct stats *s, const double *buf, int64_t len);

// ---- in-order merging of batch partials (the run's rank 0; checkpointed with the segments) ----
// One batch's partials are those of n_sets activations, packed one after the other (stats_pack).
// Batches arrive in any order (replicas finish when they finish); the fold merges batch k only
// after batches 0 .. k-1, keeping the ones that came early, so the totals are the same bits
// whatever the arrival order. Its state (the totals of batches [0, next) and the early ones,
// stats_fold_pack_state) goes into a checkpoint beside the segments holding those batches.
struct stats_fold {
    int n_sets;
    struct stats *total; // (n_sets) batches [0, next) merged; owned
    struct stats *tmp;   // (n_sets) unpacking room; owned
    int64_t next;        // the next batch to merge
    int64_t batch_len;   // doubles of one batch's packed partials
    int64_t n_early, cap;
    int64_t *early_batch; // (n_early) increasing; owned
    double *early;        // (n_early, batch_len) their packed partials; owned
};
// n_features: (n_sets). Returns 0 or -AH_ENOMEM (then f is freeable).
int stats_fold_init(struct stats_fold *f, int n_sets, const int64_t *n_features);
void stats_fold_free(struct stats_fold *f); // safe on a zeroed or half-built struct
// Packs parts (n_sets of them) as one batch's partials into buf (f->batch_len doubles).
void stats_fold_pack_batch(const struct stats_fold *f, const struct stats *parts, double *buf);
// Takes batch k's partials (copied). -AH_EINVAL for a batch already taken, -AH_EFORMAT for a
// buffer that is not partials of these sets, -AH_ENOMEM.
int stats_fold_add(struct stats_fold *f, int64_t batch, const double *buf);
// Checkpoint state: [next, n_early, early_batch[n_early], totals packed, early packed].
int64_t stats_fold_state_len(const struct stats_fold *f);
void stats_fold_pack_state(const struct stats_fold *f, double *buf);
// Restores a state packed by a fold of the same sets (-AH_EFORMAT otherwise, f then empty).
int stats_fold_unpack_state(struct stats_fold *f, const double *buf, int64_t len);

#endif
