// blocks.h - pieces every family builds from: the list of checkpoint tensors it binds, its run
// state's arena, and the activation functions (float32, as torch computes them).
#ifndef AH_BLOCKS_H
#define AH_BLOCKS_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

// A checkpoint tensor a family expects, and where its view goes: a BF16 matrix borrowed from
// the mapping (bf16), or any float dtype widened to float32 (dst).
struct model_tensor {
    char name[96];
    int ndim;
    int64_t shape[2]; // (d0) or (d0, d1)
    const uint16_t **bf16;
    const float **dst;
};

// Appends "{prefix}.{layer}.{leaf}" (prefix set) or leaf alone to t[*n], shape (d0) if d1 == 0
// else (d0, d1), and counts it; t NULL only counts.
void model_tensor_add(struct model_tensor *t, int *n, const uint16_t **bf16, const float **dst,
                      int64_t d0, int64_t d1, const char *prefix, int layer, const char *leaf);

// One 64-byte aligned allocation cut in order into pieces of n 4-byte elements each (rounded up
// to 16, so every piece is 64-byte aligned); *p receives each piece. Returns the block (free()
// it) or NULL.
struct arena_piece {
    void **p;
    int64_t n;
};
void *arena_alloc(const struct arena_piece *f, size_t nf);

// ---- activations ----
static inline float act_silu(float x) {
    return x / (1.0f + expf(-x));
}
static inline float act_sigmoid(float x) {
    return 1.0f / (1.0f + expf(-x));
}
// torch.nn.functional.softplus (beta 1, threshold 20): log1p(exp(x)), x itself above 20
static inline float act_softplus(float x) {
    return x > 20.0f ? x : log1pf(expf(x));
}
// GELU, exact (erf) and the tanh approximation (gelu_new, gelu_pytorch_tanh)
static inline float act_gelu(float x) {
    return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
}
static inline float act_gelu_tanh(float x) {
    return 0.5f * x * (1.0f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
}

#endif
