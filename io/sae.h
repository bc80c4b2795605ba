// sae.h - sparse autoencoders as users have them, read from their published layouts into the
// views model/sae.h encodes with (see docs/saes.md):
//   SAELens     DIR/cfg.json + DIR/sae_weights.safetensors: W_enc (d_in, d_sae), b_enc, W_dec
//               (d_sae, d_in), b_dec, threshold (jumprelu); architecture standard, jumprelu or
//               topk (a BatchTopK SAE is saved by SAELens as jumprelu for inference)
//   sparsify    DIR/cfg.json + DIR/sae.safetensors: encoder.weight (d_sae, d_in), encoder.bias,
//               W_dec (d_sae, d_in), b_dec; activation topk
//   Gemma Scope DIR/params.npz: W_enc, W_dec, b_enc, b_dec, threshold (JumpReLU), as SAELens's
//               gemma_2_sae_huggingface_loader reads it (a zip of .npy, stored or deflated)
// Tensors may be float32, bfloat16 or float16 (npz: float16, float32, float64); the encoding
// runs in float32 (float32 tensors aligned in the file are borrowed from the mapping, the others
// converted once into one owned block).
//
// Every bad input is -AH_EINVAL / -AH_EFORMAT / -AH_ENOENT (exit 1) with a message naming the
// file and the key or tensor: a missing or misshapen tensor, d_in or d_sae disagreeing between
// the config and the tensors, an architecture or an option harvest does not implement (named
// with its value), k <= 0 or > d_sae, a NaN or infinity in a weight. Read errors: -AH_EIO.
#ifndef AH_IO_SAE_H
#define AH_IO_SAE_H

#include "io/safetensors.h"
#include "model/sae.h"

#include <stddef.h>
#include <stdint.h>

struct ah_error;

enum sae_layout { SAE_LAYOUT_SAELENS, SAE_LAYOUT_SPARSIFY, SAE_LAYOUT_GEMMASCOPE };

struct sae_file {
    struct sae s;           // the views; valid until sae_close
    enum sae_layout layout; // which one DIR holds
    struct st_file st;      // the safetensors file (fd -1 for an npz); owned
    float *owned;           // the tensors not borrowed from st, converted to float32; owned
    char dir[4096];
};

// Reads the SAE in dir, choosing the layout by the files it holds (more than one weight file of
// the layouts above is an error naming both). Returns 0 or a negative AH_E* with err set.
int sae_open(struct sae_file *f, const char *dir, struct ah_error *err);
void sae_close(struct sae_file *f); // safe on a zeroed struct with st.fd = -1, or a closed one
const char *sae_layout_name(enum sae_layout l); // "saelens", "sparsify", "gemmascope"

// ---- .npy (format 1.0 to 3.0), for the npz members and the tools that read activations ----
struct sae_npy {
    char descr[8]; // "<f4", "<f2", "<f8", "<i4", "<i8", "|u1" ...
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    const void *data; // borrowed: into the buffer given
    size_t nbytes;    // prod(shape) * element size, checked against the buffer
};
// Parses buf (n bytes) as an .npy file: a C-order array of a little-endian dtype. what names it in
// messages. Returns 0 or -AH_EFORMAT.
int sae_npy_parse(struct sae_npy *a, const void *buf, size_t n, const char *what,
                  struct ah_error *err);
size_t sae_npy_elsize(const char *descr); // 0 when not one of the dtypes above

#endif
