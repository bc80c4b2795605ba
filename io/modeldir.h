// modeldir.h - a Hugging Face model folder: config.json plus model.safetensors, or shards
// model-0000k-of-0000n.safetensors with model.safetensors.index.json.
//
// md_tensor_f32 hands out float32 views of checkpoint tensors after checking presence, dtype and
// shape; F32 tensors are borrowed from the mapping, F16/BF16 ones are widened once into buffers the
// modeldir owns. Every view is valid until md_close.
#ifndef AH_MODELDIR_H
#define AH_MODELDIR_H

#include "io/safetensors.h"

#include <stdbool.h>
#include <stdint.h>

struct ah_error;

struct modeldir {
    char *dir;             // owned
    char *config_path;     // owned: DIR/config.json
    char *config_text;     // owned: the file's text, for provenance
    void *config;          // owned cJSON object
    void *index;           // owned cJSON weight_map object, or NULL for a single file
    char *index_path;      // owned, or NULL
    struct st_file *files; // (n_files) owned
    int n_files;
    void **owned; // (n_owned) widened or realigned tensors
    int n_owned, cap_owned;
};

// Opens DIR (or a config.json path when config_only, for planning without weights).
int md_open(struct modeldir *md, const char *dir, bool config_only, struct ah_error *err);
void md_close(struct modeldir *md); // safe on a zeroed struct

// Config values. `required` false: returns 1 and leaves *out alone when the key is absent.
// Errors name config.json, the key and the expected type.
int md_config_int(const struct modeldir *md, const char *key, bool required, int *out,
                  struct ah_error *err);
int md_config_double(const struct modeldir *md, const char *key, bool required, double *out,
                     struct ah_error *err);
// Borrowed string (valid until md_close), or NULL when absent or not a string.
const char *md_config_string(const struct modeldir *md, const char *key);

// The dimensions of tensor `name` (the first max_dims into shape): returns ndim, or a negative
// AH_E* code naming the file when the tensor is missing.
int md_tensor_dims(const struct modeldir *md, const char *name, int64_t *shape, int max_dims,
                   struct ah_error *err);

// Whether tensor `name` is there and stored BF16.
bool md_tensor_is_bf16(const struct modeldir *md, const char *name);

// How a tensor is bound: float32 (F32 borrowed, F16/BF16 widened), BF16 as it is, F8_E4M3 as it
// is, U8 raw bytes (MXFP4 blocks and scales).
enum md_as { MD_AS_F32, MD_AS_BF16, MD_AS_FP8, MD_AS_U8 };

// Finds `name` and checks its ndim/shape and dtype from the header (errors name the file and the
// tensor). read false: no data page is touched; *out is the mapping's view where the bytes serve
// as they are, NULL where a copy would be needed (widened, realigned). read true: its values are
// checked too (finite; an FP8 tensor without NaN bytes: an error names the first bad element),
// *out is the view or the copy, and its pages are then released from this process (they come back
// from the page cache or the file when read again). The md_tensor_* below are md_tensor_as with
// read true.
int md_tensor_as(struct modeldir *md, const char *name, int ndim, const int64_t *shape,
                 enum md_as as, bool read, const void **out, struct ah_error *err);

// Finds `name`, checks ndim/shape, and returns a float32 view. Errors name the file and tensor.
int md_tensor_f32(struct modeldir *md, const char *name, int ndim, const int64_t *shape,
                  const float **out, struct ah_error *err);

// The same for a BF16 tensor kept as it is: borrowed from the mapping (copied only if misaligned).
// Another dtype is an error naming the file, the tensor and its dtype.
int md_tensor_bf16(struct modeldir *md, const char *name, int ndim, const int64_t *shape,
                   const uint16_t **out, struct ah_error *err);

// The same for an F8_E4M3 (float8_e4m3fn) tensor, borrowed from the mapping as it is; another
// dtype, or a NaN byte, is an error naming the file and the tensor.
int md_tensor_fp8(struct modeldir *md, const char *name, int ndim, const int64_t *shape,
                  const uint8_t **out, struct ah_error *err);
// The same for a U8 tensor (MXFP4 blocks and scales) kept as it is, borrowed from the mapping.
// Another dtype is an error naming the file, the tensor and its dtype.
int md_tensor_u8(struct modeldir *md, const char *name, int ndim, const int64_t *shape,
                 const uint8_t **out, struct ah_error *err);

#endif
