// blocks.c - the tensor list, the arena and the activation parser of blocks.h
#include "model/blocks.h"

#include "model/ah.h"
#include "model/hugemem.h"
#include "model/ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    e->fp8 = NULL;
    e->u8 = NULL;
    e->block = prefix ? layer : MT_EVERY;
    e->expert = -1;
}

void model_tensor_mark(struct model_tensor *t, int from, int to, int block, int expert) {
    for (int i = from; t && i < to; i++) {
        t[i].block = block;
        t[i].expert = expert;
    }
}

void model_tensor_add_u8(struct model_tensor *t, int *n, const uint8_t **dst, int ndim,
                         const int64_t *shape, const char *name) {
    if (!t) {
        (*n)++;
        return;
    }
    struct model_tensor *e = &t[(*n)++];
    memset(e, 0, sizeof *e);
    snprintf(e->name, sizeof e->name, "%s", name);
    e->ndim = ndim;
    for (int i = 0; i < ndim && i < 4; i++)
        e->shape[i] = shape[i];
    e->u8 = dst;
    e->block = MT_EVERY;
    e->expert = -1;
}

static int64_t allocated;

int64_t arena_bytes_allocated(void) {
    return allocated;
}

void *arena_alloc(const struct arena_piece *f, size_t nf) {
    int64_t total = 0;
    for (size_t i = 0; i < nf; i++)
        total += (f[i].n + 15) / 16 * 16;
    // C11: the size of an aligned_alloc is a multiple of the alignment
    size_t bytes = ((size_t)total * 4 + 64 + 63) / 64 * 64;
    float *arena = huge_alloc(bytes), *p = arena;
    if (!arena) return NULL;
    allocated += (int64_t)bytes;
    for (size_t i = 0; i < nf; i++) {
        *f[i].p = p;
        p += (f[i].n + 15) / 16 * 16;
    }
    return arena;
}

void forward_check(const struct mbatch *bt, int64_t max_tokens, int max_T, int blk_begin,
                   int blk_end, int n_layer) {
    AH_ASSERT(bt->n_tokens <= max_tokens && blk_begin >= 0 && blk_end <= n_layer);
    for (int b = 0; b < bt->n; b++)
        AH_ASSERT(bt->len[b] >= 1 && bt->len[b] <= max_T);
}

void head_emit(const struct tap *tp, int b, float *logits, int T, int64_t V, int id_h, int id_l,
               int id_p, float cap) {
    struct tview v = {logits, TAP_F32, 3, {1, T, V}};
    tap_emit(tp, id_h, b, &v);
    for (int64_t i = 0; cap > 0.0f && i < (int64_t)T * V; i++)
        logits[i] = cap * tanhf(logits[i] / cap);
    tap_emit(tp, id_l, b, &v);
    if (!tap_wants(tp, id_p)) return;
    float *p = logits + (int64_t)T * V;
    memcpy(p, logits + (int64_t)(T - 1) * V, (size_t)V * sizeof(float));
    op_softmax_ranges(p, (int)V, 0, (int)V, 0, 0);
    struct tview vp = {p, TAP_F32, 2, {1, V}};
    tap_emit(tp, id_p, b, &vp); // a copy: a writer of it is refused
}

void emit_ids_mask(const struct tap *tp, const struct mbatch *bt, const int64_t *ones, int id_ids,
                   int id_mask) {
    for (int b = 0; b < bt->n; b++) {
        struct tview vi = {bt->ids + bt->off[b], TAP_I64, 2, {1, bt->len[b]}};
        tap_emit(tp, id_ids, b, &vi);
        struct tview vm = {ones, TAP_I64, 2, {1, bt->len[b]}};
        tap_emit(tp, id_mask, b, &vm);
    }
}

void *arena_alloc_ones(const struct arena_piece *f, size_t nf, int64_t **ones, int64_t T) {
    void *arena = arena_alloc(f, nf);
    for (int64_t t = 0; arena && t < T; t++)
        (*ones)[t] = 1;
    return arena;
}

int block_cfg_act(const char *path, const char *key, const char *s, enum op_act_kind *out,
                  struct ah_error *err) {
    int act = op_act_parse(s);
    if (act >= 0) {
        *out = (enum op_act_kind)act;
        return 0;
    }
    return ah_fail(err, AH_EINVAL,
                   "%s: \"%s\": %s%s%s is not supported (expected " OP_ACT_NAMES ")", path, key,
                   s ? "\"" : "", s ? s : "that value", s ? "\"" : "");
}
