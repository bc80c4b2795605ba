// h5src.h - a finished harvest output (or any HDF5 file) opened read-only for `harvest export`:
// its attributes, 1-D tables, groups' member names, and datasets read a run of rows at a time in
// their stored type. The export's logic (harvest/export_src.c) reads the output only through
// this; the shard formats (io/h5shard.c) and the probe file (io/h5probe.c) take objects of it.
#ifndef AH_H5SRC_H
#define AH_H5SRC_H

#include "io/shardfmt.h" // enum sf_dtype

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct h5src;  // an open file (opaque: hides the HDF5 handle)
struct h5dset; // one dataset of it (opaque)

// Turns HDF5's own error printing off (harvest names the file in its messages).
void h5src_quiet(void);

// Opens path read-only: the handle, or NULL if it is not an HDF5 file or cannot be opened.
struct h5src *h5src_open(const char *path);
void h5src_close(struct h5src *f); // NULL is fine

// true if every link of path ("a/b/c") exists in f
bool h5src_has(const struct h5src *f, const char *path);
bool h5src_has_attr(const struct h5src *f, const char *name); // a root attribute
// the root attribute name as int64 (converted as HDF5 does): 0, or -1 if absent or unreadable
int h5src_attr_i64(const struct h5src *f, const char *name, int64_t *v);
// the root string attribute name: malloc'd (the caller frees), or NULL if absent or unreadable
char *h5src_attr_str(const struct h5src *f, const char *name);
// The whole 1-D dataset path as int64, malloc'd (the caller frees; n entries, *n its length),
// or NULL if absent, not 1-D, of another length than *n when *n >= 0, or unreadable.
int64_t *h5src_table(const struct h5src *f, const char *path, int64_t *n);
// The names of group path's members in name order: a malloc'd array of *n malloc'd strings
// (h5src_names_free), or NULL if there is no such group (or memory runs out).
char **h5src_names(const struct h5src *f, const char *path, int *n);
void h5src_names_free(char **names, int n);

// The dataset path of f (valid until h5src_dset_close, which must come before h5src_close), or
// NULL if absent or unopenable.
struct h5dset *h5src_dset(const struct h5src *f, const char *path);
void h5src_dset_close(struct h5dset *d); // NULL is fine
// Its shape into dims (at most max axes): the number of axes, or -1.
int h5src_dset_dims(const struct h5dset *d, int64_t *dims, int max);
// Its element storage: SF_F32 (any 4-byte float), SF_BF16 (a 2-byte float with 7 mantissa
// bits), SF_F16 (another float), SF_I64 (any integer); -1 for another class.
int h5src_dset_kind(const struct h5dset *d);
// Its string attribute name (scalar or 1-D, at most max strings) into out[max][len]: the
// number of strings, or -1 (io/h5attr.h h5attr_get_strs).
int h5src_dset_strs(const struct h5dset *d, const char *name, char *out, int len, int max);

// How rows are read: as stored (raw elements of the file type), as int64, or as uint8.
enum h5src_mem { HSRC_STORED, HSRC_INT64, HSRC_UINT8 };
// Rows [r0, r1) of d (every other axis whole) into buf: 0, or -1. Nothing read if r1 <= r0.
int h5src_rows(const struct h5dset *d, enum h5src_mem m, int64_t r0, int64_t r1, void *buf);

// ---- the source's /stats/NAME (written by `harvest stats` or at run time) as shard arrays ----
// Every dataset of group path (in name order) as the array KEYPREFIX.DATASET (int64 when stored
// as integers, else float64) and every numeric attribute as the string attribute
// KEYPREFIX.ATTR (integers in decimal, floats "%.17g"; others left out), added to w. The arrays'
// data are malloc'd blocks kept in *bufs (n_bufs of them) until the caller frees them
// (h5src_bufs_free), after w is finished. 0, or -1 (unreadable, or out of memory).
int h5src_group_to_shard(const struct h5src *f, const char *path, const char *keyprefix,
                         struct sf_shard *w, void ***bufs, int *n_bufs);
void h5src_bufs_free(void **bufs, int n_bufs);

// ---- shared by the HDF5 writers of the export (io/h5shard.c, io/h5probe.c) ----
// true once an HDF5 file of the export failed to close (disk full): HDF5 still holds it, and its
// shutdown would crash on it; the command then leaves without MPI_Finalize.
bool h5src_stuck(void);
void h5src_set_stuck(void);

#endif
