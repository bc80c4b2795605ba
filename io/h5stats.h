// h5stats.h - per-feature statistics in a harvest output: /stats/NAME/{count, mean, var, min, max,
// norm_mean, norm_var} with attributes sae_scale = sqrt(d) / norm_mean and n_rows_nonfinite
// (README "Statistics"). Serial (no MPI): `harvest stats` and rank 0's master writer.
//
// The statistics of a dataset are those of its token rows (every element of the row's trailing
// shape a feature, d of them), one partial per batch of the output's batch_size prompts (the rows
// of the batch in prompt order, then position order), merged in batch order (io/stats.h): the
// same bits as the write-time statistics of a harvest run over float32 values.
#ifndef AH_H5STATS_H
#define AH_H5STATS_H

#include "io/stats.h"
#include "model/tap.h"

#include <hdf5.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

struct ah_error;

// Writes the finished statistics of one activation as loc/NAME (a group; loc is the /stats group)
// with the features' shape dims (ndim axes, their product = s->n_features). Returns 0 or -AH_EIO.
int h5stats_write(hid_t loc, const char *name, int ndim, const int64_t *dims, const struct stats *s,
                  struct ah_error *err);

// One activation's statistics with the features' shape (nf axes), as stored.
struct h5stats_item {
    const char *name;             // borrowed: the dataset's name (an alias if the job asked by one)
    char canonical[TAP_NAME_MAX]; // an aliased dataset's canonical_name (attribute), else ""
    int nf;
    int64_t fdims[TAP_MAX_DIMS];
    struct stats s;
};

// Replaces the master at path whole with a copy holding /stats/NAME for each item (others'
// statistics stay; an aliased dataset's group has its attribute canonical_name too): written to
// PATH.tmp, fsynced, renamed. `harvest stats` and `harvest run`.
int h5stats_store(const char *path, const struct h5stats_item *items, int n, struct ah_error *err);

// The names of a group of f (group "stats", say), in name order; -1 if it does not open.
struct h5stats_names {
    char **v; // (n) owned
    int n, cap;
};
int h5stats_list(hid_t f, const char *group, struct h5stats_names *l);
void h5stats_names_free(struct h5stats_names *l);

// `harvest stats`: recomputes the statistics of the complete output at path, reading its rows in
// blocks (memory flat in the output's size), for every float activation with one sequence axis
// and no key axis whose name matches one of globs (n_globs 0: all of them); then replaces the
// master with a copy holding a new /stats group (written to PATH.tmp, fsynced, renamed: the master
// stays whole at every moment). An incomplete output, or a glob matching no such activation, is
// an error naming it (-AH_EINVAL). log (may be NULL) gets a line per activation; an activation
// with rows holding NaN or infinity (left out, counted) is a warning on stderr whatever log is.
int h5stats_recompute(const char *path, const char *const *globs, int n_globs, FILE *log,
                      struct ah_error *err);

// Prints the /stats of the output at path (names matching glob, NULL: all): a table of each
// activation's rows, d, norm mean and std and sae_scale, in natural name order (layers in order),
// then the top features by mean of each. -AH_EINVAL if the output has no statistics.
int h5stats_print(const char *path, const char *glob, int top, FILE *out, struct ah_error *err);

#endif
