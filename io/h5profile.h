// h5profile.h - the norm profile's files (harvest/normprofile.c; docs/output.md "Norm profile"):
// per-batch partials in the segment files, and the merged profile in the master.
//
// Segment: group /norm_profile_part with `batch` (n,) int64 (the batches, in the order held)
// and one (n, L) float64 dataset a profiled value, named by its catalogue name: row j is batch
// batch[j]'s packed partial (L doubles, normprofile.c says how they are packed).
// Master: group /norm_profile/<stored name> per profiled value (its datasets and attributes are
// struct h5prof_item's).
#ifndef AH_H5PROFILE_H
#define AH_H5PROFILE_H

#include "io/h5part.h" // struct h5part_src

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ah_error;

#define NORM_PROFILE_BINS 130 // histogram bins: 129 edges

// Whether the HDF5 file at path has a link `name` at its root (false if it does not open).
bool h5prof_has_group(const char *path, const char *name);

// Writes /norm_profile_part into the closed segment file seg_path and fsyncs it: batch (n) and
// the n_values datasets names[v] (n, L) with data v[v]. 0 or -AH_EIO naming the file.
int h5prof_write_partials(const char *seg_path, const int64_t *batch, int64_t n, int n_values,
                          const char *const *names, const double *const *v, int64_t L,
                          struct ah_error *err);

// The batches of segment path whose partials of `value` it holds: *batch malloc'd (*n of them).
// Returns 1, 0 when it holds none of that value (no such group or dataset), -1 on a read error.
int h5prof_batches(const char *path, const char *value, int64_t **batch, int64_t *n);
// Row `row` (L doubles) of segment path's partials of value into buf, through reader x (kept
// open between reads of one segment's value; io/h5part.h). 0 or -1.
int h5prof_read_row(struct h5part_src *x, const char *path, const char *value, int64_t row,
                    int64_t L, double *buf);

// One value's merged profile: T positions, K' outliers (largest norm first).
struct h5prof_item {
    const char *name;  // the stored name (the job's alias, else the catalogue name)
    const char *value; // the catalogue name (attribute `value`)
    int64_t T;
    const int64_t *count;                    // (T)
    const double *sum, *sum_sq, *max;        // (T) max NaN where count is 0
    const int64_t *hist;                     // (NORM_PROFILE_BINS)
    const double *edges;                     // (NORM_PROFILE_BINS - 1) attribute hist_edges
    int64_t n_nan;                           // attribute n_nan
    int64_t n_out;                           // K'
    const int64_t *o_prompt, *o_pos, *o_tok; // (n_out)
    const double *o_norm;                    // (n_out)
};
// Replaces the master at path with a copy that has /norm_profile/<name> for each item (other
// groups kept; an item's old group replaced), through path.tmp. 0 or -AH_EIO naming the file.
int h5prof_store(const char *path, const struct h5prof_item *items, int n, struct ah_error *err);
// The stored names under /norm_profile of the file at path, ", "-separated into buf (n bytes;
// "" when none). Returns how many.
int h5prof_list(const char *path, char *buf, size_t n);

#endif
