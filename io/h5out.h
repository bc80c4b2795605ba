// h5out.h - the output file (contract.md "Output (HDF5)").
//
// h5out_create writes the root attributes, /prompts and /tokens, and creates one chunked dataset
// per activation (all before any activation row is written); rows then go in with h5out_write,
// progress is recorded with h5out_progress (flushed to disk), and h5out_close sets `complete`.
// The handle hides HDF5 ids, so it is opaque. Functions return 0 or a negative AH_E* code; failed
// HDF5 calls become -AH_EIO with a message naming the file.
#ifndef AH_H5OUT_H
#define AH_H5OUT_H

#include "model/tap.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

struct ah_error;
struct h5out;

enum h5out_store { H5OUT_F32, H5OUT_F16, H5OUT_BF16 }; // storage of float activations

// One activation dataset as stored.
struct h5out_dset {
    const struct tap_desc *desc;           // name, dtype, semantic shape, meaning; borrowed
    int ndim;                              // stored rank (first axis: prompt or token)
    int64_t dims[TAP_MAX_DIMS];            // stored shape
    char axes[TAP_MAX_DIMS][TAP_AXIS_MAX]; // stored_axes
};

struct h5out_params {
    const char *path;
    enum h5out_store store;
    int compression;          // gzip level, 0 = none
    const char *model_family; // root attribute
    const char *model_config; // JSON text
    const char *job;          // JSON text
    int64_t n_prompts;
    const int64_t *source_index, *length, *token_offset; // (n_prompts)
    int64_t n_tokens;
    const int64_t *input_ids, *prompt_index, *position; // (n_tokens)
    // extra root attributes (documented in the README)
    int64_t max_seq_len, n_skipped_empty, n_truncated;
};

int h5out_create(struct h5out **h, const struct h5out_params *p, const struct h5out_dset *d, int n,
                 struct ah_error *err);

// Reopens an incomplete output for --resume. The file's `job` attribute must equal `job`, and
// every dataset of d must exist with the same shape. *done receives the prompts already written.
int h5out_reopen(struct h5out **h, const char *path, const char *job, enum h5out_store store,
                 const struct h5out_dset *d, int n, int64_t *done, bool *complete,
                 struct ah_error *err);

// Writes rows [row, row + nrows) of dataset i from data: float32 (converted to the storage dtype)
// or int64, laid out exactly as the stored rows.
int h5out_write(struct h5out *h, int i, int64_t row, int64_t nrows, const void *data,
                struct ah_error *err);

// Records that the first `done` prompts are in, and flushes the file.
int h5out_progress(struct h5out *h, int64_t done, struct ah_error *err);

// Sets `complete` to 1 if complete, then closes. Frees h in all cases.
int h5out_close(struct h5out *h, bool complete, struct ah_error *err);

// Prints a summary of an output (read-only): completeness, prompts, tokens, each dataset with its
// shape, activation dtype and storage dtype. -AH_EINVAL if path is not a harvest output.
int h5out_inspect(const char *path, FILE *out, struct ah_error *err);

// Total bytes written by h5out_write so far (in storage dtype).
int64_t h5out_bytes(const struct h5out *h);

#endif
