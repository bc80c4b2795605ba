// output.h - the output of `harvest run` behind one table of operations (docs/architecture.md):
// the writer (harvest/writer.c, wstats.c) talks to an output only through a `struct out_ops`, so
// that every call into a storage library and every on-disk path convention lives in io/, and a
// second output format is one file there (one more table, chosen by out_format).
//
// The operations and their contracts are those of io/h5out.h, which the HDF5 table (out_hdf5,
// io/out_hdf5.c) implements: segments (collective over the ranks of a stage), the master (rank 0),
// statistics partials kept in closed segments (io/h5stats.h), and a read-only look at an existing
// output for --resume. Functions return 0 or a negative AH_E* code with a message in err, unless
// said otherwise.
#ifndef AH_OUTPUT_H
#define AH_OUTPUT_H

#include "io/h5out.h"   // the format-neutral records: h5out_dset, h5out_run, h5out_record, params
#include "io/h5stats.h" // struct h5stats_item

#include <mpi.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ah_error;

struct out_seg;      // a segment open for writing (opaque: the format's handle)
struct out_master;   // rank 0's master (opaque)
struct out_partials; // a reader of one segment's statistics partials (opaque)

// What the master of an existing output says, read without changing it (--resume's checks).
struct out_peek {
    bool has_stats;         // the master holds write-time statistics
    char *job;              // the job's text it was made by (owned), NULL if absent
    char *compute_dtype;    // its compute_dtype attribute (owned), NULL if absent
    double ng_median;       // its norm_guard_median, NaN if absent
    int64_t n_dropped_norm; // its n_tokens_dropped_norm, -1 if absent
};
void out_peek_free(struct out_peek *pk); // safe on a zeroed struct

struct out_ops {
    const char *name; // the format's name ("hdf5")

    // ---- segments: collective over comm, as h5seg_* (io/h5out.h) ----
    int (*seg_open)(struct out_seg **s, MPI_Comm comm, const char *out_path, const char *file,
                    enum out_store store, int compression, int64_t batch_rows,
                    const struct h5out_dset *d, int i0, int i1, struct ah_error *err);
    int (*seg_begin_round)(struct out_seg *s, const struct h5out_run *rows, struct ah_error *err);
    int (*seg_write)(struct out_seg *s, int i, int64_t row, int64_t nrows, const void *data,
                     struct ah_error *err);
    int (*seg_end_round)(struct out_seg *s, struct ah_error *err);
    // closes and frees s, fills *rec (the caller frees it with h5out_record_free)
    int (*seg_close)(struct out_seg *s, struct h5out_record *rec, struct ah_error *err);
    int64_t (*seg_bytes)(const struct out_seg *s);

    // ---- the master: rank 0, as h5m_* ----
    int (*master_open)(struct out_master **m, const struct h5out_params *p,
                       const struct h5out_dset *d, int n, bool resume, uint8_t *batch_done,
                       int *run, bool *complete, struct ah_error *err);
    void (*master_set_provenance)(struct out_master *m, const char *json);
    int (*master_add)(struct out_master *m, struct h5out_record *rec); // takes over rec
    int (*master_write)(struct out_master *m, bool complete, struct ah_error *err);
    int64_t (*master_done_prompts)(const struct out_master *m);
    const struct h5out_record *(*master_records)(const struct out_master *m, int *n);
    void (*master_close)(struct out_master *m); // safe on NULL
    // removes an output (master, temporary, parts folder)
    int (*remove)(const char *path, struct ah_error *err);
    // fills *pk from the master at path (the caller frees it with out_peek_free); -1 (*pk zeroed
    // but for its absent values) when there is no master or it does not open
    int (*peek)(const char *path, struct out_peek *pk);

    // ---- statistics partials (harvest/wstats.h), kept in closed segments ----
    // one rank: batch (n) and their partials v (n, L) into the closed segment `file` of the
    // output, written and made durable before the master lists it
    int (*partials_put)(const char *out_path, const char *file, const int64_t *batch,
                        const double *v, int64_t n, int64_t L, struct ah_error *err);
    // the batches whose partials segment `file` holds, in its row order (*batch malloc'd, *n of
    // them); -1 if it holds none or does not open
    int (*partials_batches)(const char *out_path, const char *file, int64_t **batch, int64_t *n);
    // a reader of segment `file`'s partials (NULL if it does not open), row `row` (L doubles)
    // into buf (-1 on failure, also for a NULL reader), and its close (safe on NULL)
    struct out_partials *(*partials_open)(const char *out_path, const char *file);
    int (*partials_row)(struct out_partials *r, int64_t row, int64_t L, double *buf);
    void (*partials_close)(struct out_partials *r);
    // the folded statistics into the master, replacing it whole (io/h5stats.h h5stats_store)
    int (*stats_store)(const char *path, const struct h5stats_item *items, int n,
                       struct ah_error *err);
};

extern const struct out_ops out_hdf5; // io/out_hdf5.c

// The format of the output at out_path (today always out_hdf5).
const struct out_ops *out_format(const char *out_path);

// The path of `leaf` inside the parts folder of the output at out_path (OUT.parts/LEAF), or of
// the folder itself for leaf NULL (OUT.parts), into buf (n bytes, cut as snprintf cuts). Every
// parts path is made here.
void out_parts_path(char *buf, size_t n, const char *out_path, const char *leaf);

#endif
