// blocks.c - the tensor list and the arena of blocks.h
#include "model/blocks.h"

#include <stdio.h>
#include <stdlib.h>

void model_tensor_add(struct model_tensor *t, int *n, const uint16_t **bf16, const float **dst,
                      int64_t d0, int64_t d1, const char *prefix, int layer, const char *leaf) {
    if (!t) {
        (*n)++;
        return;
    }
    struct model_tensor *e = &t[(*n)++];
    if (prefix)
        snprintf(e->name, sizeof e->name, "%s.%d.%s", prefix, layer, leaf);
    else
        snprintf(e->name, sizeof e->name, "%s", leaf);
    e->ndim = d1 ? 2 : 1;
    e->shape[0] = d0;
    e->shape[1] = d1;
    e->bf16 = bf16;
    e->dst = dst;
}

void *arena_alloc(const struct arena_piece *f, size_t nf) {
    int64_t total = 0;
    for (size_t i = 0; i < nf; i++)
        total += (f[i].n + 15) / 16 * 16;
    // C11: the size of an aligned_alloc is a multiple of the alignment
    float *arena = aligned_alloc(64, ((size_t)total * 4 + 64 + 63) / 64 * 64), *p = arena;
    if (!arena) return NULL;
    for (size_t i = 0; i < nf; i++) {
        *f[i].p = p;
        p += (f[i].n + 15) / 16 * 16;
    }
    return arena;
}
