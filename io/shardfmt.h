// shardfmt.h - a training shard in a file format other than HDF5, behind one small interface:
// create a shard, add its named arrays and its string attributes, then finish (written whole
// through a temporary, fsynced, renamed) or abort (the temporary removed). The formats:
// io/npyout.c (a folder of .npy files and a JSON sidecar), io/stshard.c (one .safetensors file),
// io/h5shard.c (one HDF5 file of contiguous datasets: README "Training shards").
// Reading back (sf_open) is for checking a finished shard: arrays and attributes as written.
#ifndef AH_SHARDFMT_H
#define AH_SHARDFMT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ah_error;

enum sf_dtype { SF_F32, SF_F16, SF_BF16, SF_I64, SF_F64 };

#define SF_MAX_DIMS 9

struct sf_array {
    char *name; // owned
    enum sf_dtype t;
    int ndim;
    int64_t shape[SF_MAX_DIMS];
    const void *data; // writing: borrowed until sf_finish / sf_abort; reading: into a mapping
    size_t nbytes;
};

struct sf_format;

// an attribute's type: the text formats store every one as its string; HDF5 as this type
enum sf_atype { SF_ASTR, SF_AI64, SF_AU64, SF_AF64 };

// One shard being written (sf_create) or read (sf_open).
struct sf_shard {
    const struct sf_format *fmt;
    char path[4200], tmp[4210]; // the finished shard, its temporary (path.tmp)
    struct sf_array *a;         // (n) owned
    int n, cap;
    char **key, **val;     // (n_attr) owned
    enum sf_atype *attr_t; // (n_attr) owned
    int n_attr, cap_attr;
    const char *source; // the HDF5 output the shard comes from (borrowed; sf_set_source)
    void **map;         // (n_map) read-only mappings of the files read; owned
    size_t *map_len;
    int n_map;
};

struct sf_format {
    const char *name; // "npy", "safetensors", "hdf5"
    const char *ext;  // appended to the shard's name: "" (a folder), ".safetensors", ".h5"
    // true: the format copies the source's /stats/NAME of the names in attribute stats_names
    // whole from w->source (the caller adds no stats.NAME.KEY arrays or attributes)
    bool copies_stats;
    // writes w's arrays and attributes to w->tmp and renames it to w->path
    int (*finish)(struct sf_shard *w, struct ah_error *err);
    // fills r's arrays (data into mappings) and attributes from r->path: 0, or -1
    int (*open)(struct sf_shard *r);
    void (*remove)(const char *path); // removes a shard or a temporary of this format, if there
};

extern const struct sf_format sf_npy, sf_safetensors, sf_hdf5;

size_t sf_dtype_size(enum sf_dtype t);
const char *sf_npy_descr(enum sf_dtype t); // "<f4", "<f2", "<u2" (bfloat16's raw bits), ...
const char *sf_st_dtype(enum sf_dtype t);  // "F32", "F16", "BF16", "I64", "F64"

void sf_create(struct sf_shard *w, const struct sf_format *f, const char *path);
// Adds an array of prod(shape) elements (data borrowed until finish). 0, or -1: out of memory.
int sf_put(struct sf_shard *w, const char *name, enum sf_dtype t, int ndim, const int64_t *shape,
           const void *data);
int sf_attr(struct sf_shard *w, const char *key, const char *val); // 0, or -1 (out of memory)
// Numeric attributes: stored as strings (decimal; a double "%.17g"), typed where the format can.
int sf_attr_i64(struct sf_shard *w, const char *key, int64_t v);
int sf_attr_u64(struct sf_shard *w, const char *key, uint64_t v);
int sf_attr_f64(struct sf_shard *w, const char *key, double v);
// The HDF5 output the shard is exported from (borrowed until sf_finish / sf_abort).
void sf_set_source(struct sf_shard *w, const char *path);
// Writes the shard; on failure (-AH_EIO naming the file, or -AH_ENOMEM) the temporary is removed.
// Frees w either way.
int sf_finish(struct sf_shard *w, struct ah_error *err);
void sf_abort(struct sf_shard *w); // removes the temporary; frees w

int sf_open(struct sf_shard *r, const struct sf_format *f, const char *path); // 0, or -1
const struct sf_array *sf_find(const struct sf_shard *r, const char *name);   // NULL if absent
const char *sf_get(const struct sf_shard *r, const char *key);                // NULL if absent
void sf_close(struct sf_shard *r); // frees r (reading or writing); safe on a zeroed struct

// helpers of the formats
int sf_write_all(int fd, const void *p, size_t n); // 0, or -1 with errno
int sf_map(struct sf_shard *r, const char *path, const unsigned char **p, size_t *n); // 0 / -1

#endif
