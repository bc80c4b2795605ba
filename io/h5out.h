// h5out.h - the output (contract.md "Output (HDF5)"), written by many ranks at once and safe
// against a stop or a kill at any moment.
//
// On disk, for output.path OUT.h5:
//   OUT.h5                       the master: root attributes and one dataset per name, all virtual
//                                datasets (VDS) over the files below; h5py reads it as ordinary
//                                datasets. Only rank 0 writes it, and only ever whole (to
//                                OUT.h5.tmp, fsync, rename): it is always a closed, consistent
//                                file, and it is the manifest.
//   OUT.h5.parts/index.h5        /prompts and /tokens, written once at the start
//   OUT.h5.parts/seg-R-K-Q.h5    a segment: the rows of one checkpoint interval written through
//                                MPI-IO by every replica of a pipeline stage (run R, the stage's
//                                first rank K, its Q-th segment), for that stage's datasets;
//                                closed and fsynced by every writer before the master lists it
// Rows no listed segment holds read as NaN (floats) or 0 (integers).
//
// Every rank writes only what it computes (h5seg_*); rank 0 also keeps the master (h5m_*), fed
// with the records of closed segments. Functions return 0 or a negative AH_E* code; failed HDF5 or
// file calls become -AH_EIO with a message naming the file. Only h5seg_* are collective.
//
// Implemented by io/h5out.c (the index, the master), h5out_seg.c (segments), h5out_check.c
// (h5out_check, inspect) and h5out_resume.c (h5m_open's --resume, h5out_remove), which share
// io/h5out_int.h; the run's writer reaches them through io/output.h's table (out_hdf5).
#ifndef AH_H5OUT_H
#define AH_H5OUT_H

#include "model/tap.h"

#include <mpi.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

struct ah_error;
struct ds_field;

enum out_store { OUT_F32, OUT_F16, OUT_BF16 }; // storage of float activations

// One activation dataset as stored.
struct h5out_dset {
    const struct tap_desc *desc;           // name, dtype, semantic shape, meaning; borrowed
    int ndim;                              // stored rank (first axis: prompt or token)
    int64_t dims[TAP_MAX_DIMS];            // stored shape
    char axes[TAP_MAX_DIMS][TAP_AXIS_MAX]; // stored_axes; axes[0] is "prompt" or "token"
    const char *alias; // NULL, or the name the job asked for it by (model/aliases.h): the dataset
                       // is then named so, with attribute canonical_name = desc->name; borrowed
};
// The dataset's name: its alias if it has one, else its catalogue name.
const char *h5out_dset_name(const struct h5out_dset *d);

// Rows [p0, p1) of the prompt datasets and [t0, t1) of the token datasets, held in a segment from
// its row q (prompt datasets) and qt (token datasets) on.
struct h5out_run {
    int64_t p0, p1, t0, t1, q, qt;
};

// What the master needs to list a closed segment.
struct h5out_record {
    char file[64];          // name inside the parts folder
    int i0, i1;             // the datasets [i0, i1) of the output's list that it holds
    struct h5out_run *runs; // (n_runs) owned
    int n_runs;
};
void h5out_record_free(struct h5out_record *r);
// The name of a segment file (at most 64 bytes): run R of the output, the stage's first rank K,
// the stage's Q-th segment of that run. Made here and nowhere else; io/h5out.c recognises it.
void h5out_seg_name(char *file, size_t n, int run, int first_rank, int seq);

// ---- segments: the ranks of one pipeline stage together ----
struct h5seg;

// Collective over comm, every rank passing the same arguments: creates OUT.h5.parts/file through
// MPI-IO, holding datasets d[i0, i1) with no rows yet; prompt rows arrive batch_rows at a time
// from each rank. comm stays borrowed until h5seg_close.
int h5seg_open(struct h5seg **s, MPI_Comm comm, const char *out_path, const char *file,
               enum out_store store, int compression, int64_t batch_rows,
               const struct h5out_dset *d, int i0, int i1, struct ah_error *err);
// Collective: a round of writes. rows[m] (one entry per rank of comm, the same array on every
// rank; q and qt are ignored) holds the prompt rows [p0, p1) and token rows [t0, t1) rank m
// writes in this round, p0 == p1 for none. The segment grows by all of them, in rank order.
int h5seg_begin_round(struct h5seg *s, const struct h5out_run *rows, struct ah_error *err);
// Writes rows [row, row + nrows) (counted over the whole output) of dataset i (i0 <= i < i1) from
// data: float32 (converted to the storage dtype) or int64, laid out as stored rows. The rows must
// be this rank's rows of the round. Without compression they go to the file at once (an
// independent transfer); with it they wait for h5seg_end_round, as filtered datasets take only
// collective transfers (a round of one rank's rows is held in memory).
int h5seg_write(struct h5seg *s, int i, int64_t row, int64_t nrows, const void *data,
                struct ah_error *err);
// Collective: ends the round (with compression: writes every dataset's rows collectively).
int h5seg_end_round(struct h5seg *s, struct ah_error *err);
// Collective: closes, fsyncs, and has the ranks agree that all did; then fills *rec (the caller
// frees it with h5out_record_free). Frees s. A rank that fails mid-round must not call it (the
// others would wait for it); it ends the job instead, and the segment is never listed.
int h5seg_close(struct h5seg *s, struct h5out_record *rec, struct ah_error *err);
int64_t h5seg_bytes(const struct h5seg *s); // activation bytes this rank wrote (storage dtype)

// ---- the master: rank 0 ----
struct h5master;

struct h5out_params {
    const char *path;
    enum out_store store;
    const char *model_family; // root attribute
    const char *model_config; // JSON text
    const char *job;          // JSON text; --resume requires the same text
    uint64_t data_checksum;   // of the prompts; --resume requires the same value
    // root attribute compute_dtype, the job's "compute" ("float32", "bf16"); NULL: none
    const char *compute_dtype;
    int64_t n_prompts;
    const int64_t *source_index, *length, *token_offset; // (n_prompts)
    int64_t n_tokens;
    const int64_t *input_ids; // (n_tokens); /tokens/prompt_index and position follow from length
    int64_t batch_size;       // prompts of batch k: [k*B, k*B + B)
    // extra root attributes (documented in the README)
    int64_t max_seq_len, n_skipped_empty, n_truncated;
    const char *provenance; // JSON text: the ranks and where they ran
    // JSON text (io/fingerprint.h) of the model's files, kept in the provenance as
    // "model_fingerprint"; --resume requires the same (an output without one is taken as is)
    const char *model_fingerprint;
    // data.fields (io/h5fields.h): /prompts/NAME in the index, mapped into the master
    const struct ds_field *fields; // (n_fields) borrowed; rank 0 only
    int n_fields;
    // token selection (job "select"; NULL: none). The token layout lists only the stored tokens:
    // input_ids and token_position (n_tokens) are theirs, token_count (n_prompts) says how many
    // each prompt has (/tokens/prompt_index follows). The prompt layout lists every token and
    // token_selected (n_tokens, 0 or 1) becomes /tokens/selected.
    const int64_t *token_position, *token_count;
    const uint8_t *token_selected;
    // extra int64 root attributes (the selection's counts), n_counts of them
    int n_counts;
    const char *const *count_names;
    const int64_t *count_values;
    // extra float64 root attributes (the norm guard's median), n_reals of them
    int n_reals;
    const char *const *real_names;
    const double *real_values;
};

// Creates a new output (the caller has removed any old one), or with resume takes over the one at
// p->path: its job, data checksum and model fingerprint must match. Resume checks every listed
// file as h5out_check does (in the output's own parts folder): a segment that is missing, does not
// open or lacks listed rows is dropped from the listing (its batches are computed again), and a
// missing or damaged index.h5 is written again; each is said on stderr. batch_done (n_batches
// entries) receives 1 for every batch whose rows of every dataset are in listed segments; segments'
// rows of other batches are dropped from the listing. *run is the number of this run (0 for a new
// output).
int h5m_open(struct h5master **m, const struct h5out_params *p, const struct h5out_dset *d, int n,
             bool resume, uint8_t *batch_done, int *run, bool *complete, struct ah_error *err);
// Replaces the provenance JSON text written from the next h5m_write on (borrowed).
void h5m_set_provenance(struct h5master *m, const char *json);
// Takes over rec (lists it from the next h5m_write on).
int h5m_add(struct h5master *m, struct h5out_record *rec);
// Replaces the master with one that lists every added segment.
int h5m_write(struct h5master *m, bool complete, struct ah_error *err);
int64_t h5m_done_prompts(const struct h5master *m); // prompts whose batches are complete
// The listed segments (*n of them), valid until the next h5m_add or h5m_close.
const struct h5out_record *h5m_records(const struct h5master *m, int *n);
void h5m_close(struct h5master *m); // frees m; the master on disk stays as written

// Removes an output: the master, its temporary and its parts folder (only files harvest names).
int h5out_remove(const char *path, struct ah_error *err);

// What h5out_check found, and which prompts a reader may take (for an export).
struct h5out_health {
    int n_bad;         // out: the listed files missing or damaged
    uint8_t *done;     // in: NULL, or one flag a prompt (n_prompts of them), cleared here for each
    int64_t n_prompts; //     prompt a damaged segment holds (every prompt for a damaged index.h5)
    int64_t n_done;    // out: the flags of done still set
};
// Checks exactly the files an output's virtual datasets read (inspect, stats, export and --resume
// check them alike). Every mapping of the master must name a file of its own parts folder: a
// relative BASE.parts/FILE, BASE the master's own file name (HDF5 looks for it beside the master);
// a master renamed or copied under another name reads another output's folder, and is refused
// (-AH_EINVAL, saying what to do), as is one HDF5_VDS_PREFIX points at files elsewhere. index.h5
// must hold /prompts and /tokens, and each listed segment must exist, open and hold its datasets
// with the rows it lists and the rows, row shape and type the master maps from it; each one that
// does not is a line "LEAD OUT.h5.parts/FILE WHY" on say (if not NULL) and counts in hl->n_bad.
int h5out_check(const char *path, FILE *say, const char *lead, struct h5out_health *hl,
                struct ah_error *err);

// Prints a summary of an output (read-only): completeness, prompts, tokens, segments, each dataset
// with shape, activation dtype and storage dtype. Every listed file is checked (h5out_check): an
// output with one missing or damaged is "complete: no", naming each. -AH_EINVAL if path is not a
// harvest output, or is one read under another name than it was written as.
int h5out_inspect(const char *path, FILE *out, struct ah_error *err);
// The token ids of one prompt of an output (*ids malloc'd, *len of them) and its job attribute
// (*job malloc'd, NULL if absent).
int h5out_prompt_ids(const char *path, int64_t prompt, int64_t **ids, int64_t *len, char **job,
                     struct ah_error *err);

#endif
