// safetensors.h - read (mmap) and write .safetensors files.
//
// st_open maps the file read-only and validates the whole header before returning: known dtypes,
// non-negative shapes, data offsets inside the file and matching each tensor's byte size.
// Tensor data pointers borrow the mapping: valid until st_close.
#ifndef AH_SAFETENSORS_H
#define AH_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

struct ah_error;

// ST_F8_E4M3: float8_e4m3fn bytes (model/fp8.h), as FP8 releases store their weights
enum st_dtype { ST_F32, ST_F16, ST_BF16, ST_I64, ST_I32, ST_U8, ST_F8_E4M3, ST_N_DTYPES };

#define ST_MAX_DIMS 8

struct st_tensor {
    char *name; // owned
    enum st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    const void *data; // borrowed: into the mapping
    size_t nbytes;
};

struct st_file {
    char *path; // owned
    int fd;     // -1 when closed
    void *map;  // PROT_READ mapping of the whole file, or NULL
    size_t size;
    struct st_tensor *t; // (n) owned
    int n;
};

// Returns 0, or -AH_ENOENT / -AH_EFORMAT / -AH_ENOMEM with a message naming the file. The file
// must be a regular file (a FIFO would block; it is refused before it is opened). The header
// must name each tensor once, with integer shapes, and no two tensors' data_offsets may overlap.
int st_open(struct st_file *f, const char *path, struct ah_error *err);

// 0 when path is a regular file; else -AH_ENOENT (missing) or -AH_EINVAL ("PATH: not a regular
// file"), without opening it.
int st_regular(const char *path, struct ah_error *err);
const struct st_tensor *st_find(const struct st_file *f, const char *name); // NULL if absent
void st_close(struct st_file *f); // safe on a zeroed struct with fd = -1, or a closed one

const char *st_dtype_name(enum st_dtype t); // "F32", ...
size_t st_dtype_size(enum st_dtype t);

// A tensor to write: data holds prod(shape) elements of dtype.
struct st_wtensor {
    const char *name;
    enum st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    const void *data;
};

// Writes tensors (in the given order) to path. Returns 0 or -AH_EIO / -AH_ENOMEM.
int st_write(const char *path, const struct st_wtensor *t, int n, struct ah_error *err);

#endif
