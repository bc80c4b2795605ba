// h5probe.h - the HDF5 file of `harvest export --probe DIR` (DIR/probe.h5, README "Probe
// datasets"), or a master's copy the job key "pool" adds /pooled to: one row a prompt. The
// export's logic (harvest/export_probe.c: which prompts, the pooling) writes it only through this.
#ifndef AH_H5PROBE_H
#define AH_H5PROBE_H

#include "io/h5src.h"

#include <stdint.h>

struct h5probe; // an HDF5 file open for writing (opaque: hides the HDF5 handles)

// Creates path (truncated): the handle, or NULL.
struct h5probe *h5probe_create(const char *path);
// Opens the existing file path read-write: the handle, or NULL.
struct h5probe *h5probe_open(const char *path);
// Closes every dataset and group it holds, then the file: 0, or -1 if the file failed to close
// (a full disk: HDF5 then still holds it, h5src_set_stuck). Frees p (NULL is fine: 0).
int h5probe_close(struct h5probe *p);

// Every call below: 0, or -1 on an HDF5 failure.
int h5probe_attr_str(struct h5probe *p, const char *name, const char *value); // a root attribute
int h5probe_attr_i64(struct h5probe *p, const char *name, int64_t value);     // stored int64
// The group /prompts (kept open until h5probe_close), then its int64 datasets NAME of n values.
int h5probe_prompts(struct h5probe *p);
int h5probe_table(struct h5probe *p, const char *name, const int64_t *v, int64_t n);
// Every dataset /prompts/NAME of src with the attribute field_type (its data.fields, in name
// order): its entries keep[0..n) as /prompts/NAME of p, the same type, with its field_type.
int h5probe_fields(struct h5probe *p, const struct h5src *src, const int64_t *keep, int64_t n);

// /pooled: h5probe_pooled(p, n_slots) creates the group; h5probe_pool_name then its group NAME
// and, for each bit w of pools (0: "last", 1: "mean"), the float32 dataset NAME/POOL of n_rows
// rows of shape dims (ndim axes), kept open as slot 2 * i + w; h5probe_pooled_end closes /pooled.
int h5probe_pooled(struct h5probe *p, int n_slots);
int h5probe_pool_name(struct h5probe *p, int i, const char *name, unsigned pools, int64_t n_rows,
                      int ndim, const int64_t *dims);
void h5probe_pooled_end(struct h5probe *p);
// Rows [r, r + n) of slot's dataset from buf (n rows of e floats).
int h5probe_rows(struct h5probe *p, int slot, int64_t r, int64_t n, int64_t e, const float *buf);

#endif
