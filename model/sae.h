// sae.h - a sparse autoencoder's encoding of a batch of activations, and its decoding: the
// latent code (N, d_in) -> (N, d_sae) by one sgemm and the architecture's nonlinearity, kept as
// CSR (per-row counts, latent indices, values), and the reconstruction from it.
//
// The weights are views (struct sae: borrowed, io/sae.h fills them from the published layouts).
// Kernels never fail and never allocate; preconditions are AH_ASSERTs. Every row is computed
// whole by one thread (OpenMP over rows, op_threads()), so the selection, the counts and the
// decode do not depend on the thread count; the sgemm of sae_pre is op_matmul's (model/ops.h).
//
// The encoding, as SAELens (sae_lens/saes/*.py: process_sae_in, encode) and sparsify
// (sparsify/sparse_coder.py: SparseCoder.encode, fused_encoder.py) compute it:
//   u   = norm(x)                       SAELens normalize_activations (SAE_NORM_*), per row
//   u   = u - b_dec                     when b_dec_in (SAELens apply_b_dec_to_input; sparsify)
//   pre = u . W_enc + b_enc             (N, d_sae)
//   RELU      z = relu(pre)             stored: the latents with z > 0
//   JUMPRELU  z = relu(pre) * (pre > threshold)   stored: z > 0
//   TOPK      the k largest of pre (relu_first: of relu(pre), as sparsify), value relu'd;
//             exactly k stored a row, zeros included; ties go to the smaller latent index
// A row's entries are stored in increasing latent index.
// Decode: y = sum_j z_j W_dec[j, :] + b_dec, then the normalisation undone (norm_out).
//   T = tokens (N), C = d_in, L = d_sae
#ifndef AH_SAE_H
#define AH_SAE_H

#include <stdbool.h>
#include <stdint.h>

enum sae_arch { SAE_RELU, SAE_JUMPRELU, SAE_TOPK };

// SAELens normalize_activations, at inference (sae_lens/saes/sae.py
// _setup_activation_normalization). "none" and "expected_average_only_in" are SAE_NORM_NONE: at
// inference SAELens leaves the input as it is (the factor is folded into the weights).
enum sae_norm {
    SAE_NORM_NONE,
    SAE_NORM_CONSTANT, // constant_norm_rescale: u = x * sqrt(C) / |x|; decode y / that factor
    SAE_NORM_LAYER,    // layer_norm: u = (x - mean) / (std + 1e-5), std unbiased (torch .std);
                       // decode y * std + mean
};

struct sae {
    enum sae_arch arch;
    enum sae_norm norm;
    int64_t d_in, d_sae;    // C, L
    int k;                  // TOPK: latents a row, 1..L
    bool b_dec_in;          // subtract b_dec from the input
    bool relu_first;        // TOPK: select among relu(pre) (sparsify), not pre (SAELens)
    bool enc_t;             // W_enc is stored (L, C) (sparsify encoder.weight), else (C, L)
    const float *W_enc;     // (C, L), or (L, C) when enc_t; borrowed
    const float *b_enc;     // (L) borrowed
    const float *W_dec;     // (L, C) borrowed
    const float *b_dec;     // (C) borrowed
    const float *threshold; // (L) JUMPRELU, else NULL; borrowed
};

#define SAE_LN_EPS 1e-5

// pre (N, L) = the pre-activations of x (N, C). u (N, C) is scratch for the normalised input.
// norm_out (N, 2), when s->norm != SAE_NORM_NONE: per row the (mean, scale) that decode applies
// as y * scale + mean; may be NULL otherwise.
void sae_pre(float *pre, float *u, float *norm_out, const float *x, const struct sae *s, int64_t N);
// indptr (N + 1) of the CSR code of pre: indptr[0] = 0, row r's entries at [indptr[r],
// indptr[r+1]). TOPK: k a row.
void sae_count(int64_t *indptr, const float *pre, const struct sae *s, int64_t N);
// The entries themselves: idx, val (indptr[N]) from pre (N, L) and indptr of sae_count.
void sae_fill(int32_t *idx, float *val, const int64_t *indptr, const float *pre,
              const struct sae *s, int64_t N);
// y (N, C) = the reconstruction of the CSR code (norm_out as sae_pre wrote it, or NULL when
// s->norm is SAE_NORM_NONE).
void sae_decode(float *y, const int64_t *indptr, const int32_t *idx, const float *val,
                const float *norm_out, const struct sae *s, int64_t N);

// Naive twins for tests: double accumulation, every product in order; the TopK selection by a
// full sort of the row.
void sae_pre_ref(float *pre, float *norm_out, const float *x, const struct sae *s, int64_t N);
void sae_fill_ref(int32_t *idx, float *val, const int64_t *indptr, const float *pre,
                  const struct sae *s, int64_t N);
void sae_decode_ref(float *y, const int64_t *indptr, const int32_t *idx, const float *val,
                    const float *norm_out, const struct sae *s, int64_t N);

#endif
