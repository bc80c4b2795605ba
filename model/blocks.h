// blocks.h - pieces every family builds from: the list of checkpoint tensors it binds, its run
// state's arena, the activation a config names (the functions themselves: model/ops.h).
#ifndef AH_BLOCKS_H
#define AH_BLOCKS_H

#include "model/batch.h"
#include "model/ops.h"
#include "model/tap.h"

#include <stddef.h>
#include <stdint.h>

struct ah_error;

// A checkpoint tensor a family expects, and where its view goes: a BF16 matrix borrowed from
// the mapping (bf16), or any float dtype widened to float32 (dst).
struct model_tensor {
    char name[96];
    int ndim;
    int64_t shape[4]; // (d0) or (d0, d1); up to 4 dims for u8
    const uint16_t **bf16;
    const float **dst;
    const uint8_t **fp8; // an FP8 (F8_E4M3) matrix borrowed from the mapping (set after the add)
    const uint8_t **u8;  // raw bytes as stored (MXFP4 blocks and scales: dtype U8), if not NULL
    int block;           // the block that computes with it (>= 0), else one of MT_* below
    int expert;          // the routed expert it belongs to, -1: none (every expert shard's)
};

// A tensor's part of the model (model_tensor.block) when it is no block's: the embedding (the
// stage running block 0 reads it), the final norm and head (the last stage's), a tied embedding
// (both), or a tensor any stage may read (the default where a family does not say)
enum { MT_EMBED = -1, MT_HEAD = -2, MT_EMBED_HEAD = -3, MT_EVERY = -4 };

// Sets block and expert of t[from, to); t NULL (counting): nothing.
void model_tensor_mark(struct model_tensor *t, int from, int to, int block, int expert);

// Appends "{prefix}.{layer}.{leaf}" (prefix set: block `layer`) or leaf alone (MT_EVERY) to
// t[*n], shape (d0) if d1 == 0 else (d0, d1), and counts it; t NULL only counts.
void model_tensor_add(struct model_tensor *t, int *n, const uint16_t **bf16, const float **dst,
                      int64_t d0, int64_t d1, const char *prefix, int layer, const char *leaf);

// Appends a U8 tensor `name` of ndim (<= 4) dims kept as stored (MXFP4's blocks and scales),
// MT_EVERY until marked.
void model_tensor_add_u8(struct model_tensor *t, int *n, const uint8_t **dst, int ndim,
                         const int64_t *shape, const char *name);

// One 64-byte aligned allocation cut in order into pieces of n 4-byte elements each (rounded up
// to 16, so every piece is 64-byte aligned); *p receives each piece. Returns the block (free()
// it) or NULL.
struct arena_piece {
    void **p;
    int64_t n;
};
void *arena_alloc(const struct arena_piece *f, size_t nf);
// Bytes arena_alloc has allocated in this process so far (run states are made by one thread): a
// state's size is the difference across its state_init.
int64_t arena_bytes_allocated(void);
// arena_alloc, then *ones (one of the pieces: (T) int64) filled with 1s, the attention mask every
// prompt's tap shows. NULL if the allocation fails.
void *arena_alloc_ones(const struct arena_piece *f, size_t nf, int64_t **ones, int64_t T);

// Arena pieces of the buffers every attention state names alike: the residual x and its normed
// copy xn (N, D), queries q (N, HD), keys k and values v (N, KVD), head outputs o (N, HD).
#define ARENA_ATTN(s, N, D, HD, KVD)                                                               \
    {(void **)&(s)->x, (N) * (D)}, {(void **)&(s)->xn, (N) * (D)}, {(void **)&(s)->q, (N) * (HD)}, \
        {(void **)&(s)->k, (N) * (KVD)}, {(void **)&(s)->v, (N) * (KVD)}, {                        \
        (void **)&(s)->o, (N) * (HD)                                                               \
    }
// ... and of a mixture block's: router logits z (N, E), expert weights w (N, k), the weighted
// expert outputs eo (N, k, D) when kept, the routed sum (N, D), one expert's tokens xe (N, D), its
// gate and up ge, ue (N, Ie) and output ye (N, D); those past w are empty without experts (E 0).
#define ARENA_MOE(s, N, E, k, D, Ie, keep)                                                      \
    {(void **)&(s)->z, (N) * (E)}, {(void **)&(s)->w, (N) * (k)},                               \
        {(void **)&(s)->eo, (keep) ? (N) * (k) * (D) : 0},                                      \
        {(void **)&(s)->routed, (E) ? (N) * (D) : 0}, {(void **)&(s)->xe, (E) ? (N) * (D) : 0}, \
        {(void **)&(s)->ge, (E) ? (N) * (Ie) : 0}, {(void **)&(s)->ue, (E) ? (N) * (Ie) : 0}, { \
        (void **)&(s)->ye, (E) ? (N) * (D) : 0                                                  \
    }

// A forward pass's preconditions: blocks [blk_begin, blk_end) of n_layer, the batch within the
// state's max_tokens and every prompt 1..max_T tokens (asserted).
void forward_check(const struct mbatch *bt, int64_t max_tokens, int max_T, int blk_begin,
                   int blk_end, int n_layer);

// input_ids (id_ids) and attention_mask (id_mask: ones, (max_T) int64 1s) of every prompt
void emit_ids_mask(const struct tap *tp, const struct mbatch *bt, const int64_t *ones, int id_ids,
                   int id_mask);

// The head's taps of prompt b from its logits (T, V), which the caller computed into `logits`
// (room for (T + 1) V floats): lm_head_output (id_h); the logits (id_l), soft-capped in place
// first if cap > 0 (cap tanh(x / cap), Gemma 2's final_logit_softcapping); next_token_probs
// (id_p), the softmax of the last row, into logits + T V.
void head_emit(const struct tap *tp, int b, float *logits, int T, int64_t V, int id_h, int id_l,
               int id_p, float cap);

// A config's MLP activation string s (NULL: not a string) as the enum of model/ops.h, else the
// error "PATH: "KEY": "s" is not a supported activation (expected ...)".
int block_cfg_act(const char *path, const char *key, const char *s, enum op_act_kind *out,
                  struct ah_error *err);

#endif
