// h5out.h - the output (contract.md "Output (HDF5)"), written so that a stop or a kill at any
// moment loses at most the rows since the last checkpoint.
//
// On disk, for output.path OUT.h5:
//   OUT.h5             the master: root attributes and one dataset per name, all virtual datasets
//                      (VDS) over the files below; h5py reads it as ordinary datasets. It is only
//                      ever replaced whole (written to OUT.h5.tmp, fsynced, renamed), so it is
//                      always a closed, consistent file: it is the manifest.
//   OUT.h5.parts/index.h5         /prompts and /tokens, written once at the start
//   OUT.h5.parts/seg-NNNNNN.h5    the rows of every activation for one checkpoint interval:
//                                 written, closed and fsynced, then listed by the master
// Rows not yet in a listed segment read as NaN (floats) or 0 (integers).
//
// Use: h5out_open, then per batch h5out_begin_batch + h5out_write, h5out_checkpoint when a
// checkpoint is due, h5out_close. Functions return 0 or a negative AH_E* code; failed HDF5 or file
// calls become -AH_EIO with a message naming the file.
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
    char axes[TAP_MAX_DIMS][TAP_AXIS_MAX]; // stored_axes; axes[0] is "prompt" or "token"
};

struct h5out_params {
    const char *path;
    enum h5out_store store;
    int compression;          // gzip level, 0 = none
    const char *model_family; // root attribute
    const char *model_config; // JSON text
    const char *job;          // JSON text; --resume requires the same text
    uint64_t data_checksum;   // of the prompts; --resume requires the same value
    int64_t n_prompts;
    const int64_t *source_index, *length, *token_offset; // (n_prompts)
    int64_t n_tokens;
    const int64_t *input_ids, *prompt_index, *position; // (n_tokens)
    // extra root attributes (documented in the README)
    int64_t max_seq_len, n_skipped_empty, n_truncated;
};

// Creates a new output (the caller has removed any old one), or with resume continues the one at
// p->path: its job and data checksum must match. *done receives the prompts already in, *complete
// whether the output was finished.
int h5out_open(struct h5out **h, const struct h5out_params *p, const struct h5out_dset *d, int n,
               bool resume, int64_t *done, bool *complete, struct ah_error *err);

// Makes prompt rows up to p_end and token rows up to t_end writable (opening a segment if none is).
int h5out_begin_batch(struct h5out *h, int64_t p_end, int64_t t_end, struct ah_error *err);

// Writes rows [row, row + nrows) of dataset i (prompt or token rows, counted over the whole
// output) from data: float32 (converted to the storage dtype) or int64, laid out as stored rows.
int h5out_write(struct h5out *h, int i, int64_t row, int64_t nrows, const void *data,
                struct ah_error *err);

// Closes the open segment and replaces the master so that it lists it: every row written so far
// becomes part of the output.
int h5out_checkpoint(struct h5out *h, struct ah_error *err);

// complete: checkpoint, mark the output complete, close. Not complete: drop any rows since the last
// checkpoint (a failed batch may be half written) and close. Frees h in all cases.
int h5out_close(struct h5out *h, bool complete, struct ah_error *err);

int64_t h5out_bytes(const struct h5out *h); // activation bytes written (storage dtype)
int64_t h5out_done(const struct h5out *h);  // prompts in listed segments

// Removes an output: the master, its temporary and its parts folder (only files harvest names).
int h5out_remove(const char *path, struct ah_error *err);

// Prints a summary of an output (read-only): completeness, prompts, tokens, segments, each dataset
// with shape, activation dtype and storage dtype. -AH_EINVAL if path is not a harvest output.
int h5out_inspect(const char *path, FILE *out, struct ah_error *err);

#endif
