// identity.c - a test-only family ("architectures": ["IdentityForTest"]) whose every value is
// known in closed form: two blocks that add nothing, so with E the (V, D) embedding,
//   token_embeddings = layers.{0,1}.layer_output = E[ids],   logits = E[ids] E^T.
// It shows what adding a family touches: this file, its line in model/families.c and
// tests/test_identity.py.
//
// T = sequence, N = tokens of a batch, D = hidden, V = vocab
#include "model/ah.h"
#include "model/family.h"

#include <cblas.h> // defines: cblas_sgemm

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IDENTITY_LAYERS 2

struct identity {
    int hidden, vocab;  // D, V
    const float *embed; // (V, D), also the tied head; borrowed
};

struct identity_state {
    float *x;      // (N, D) the residual stream
    float *logits; // (T, V) one prompt's logits
    void *arena;   // owned: everything above
};

// the catalogue, in forward order
enum { ID_INPUT_IDS, ID_EMBED, ID_LAYER0, ID_LAYER1, ID_LOGITS, ID_N };

static int id_open(void **fm, const struct config *cf, const struct model_dims *dims,
                   struct model_tensor **list, struct ah_error *err) {
    (void)dims;
    struct identity *m = calloc(1, sizeof *m);
    if (!(*fm = m)) return -AH_ENOMEM;
    int rc, which;
    if ((rc = cfg_int_in(cf, "hidden_size", true, &m->hidden, 1, 1 << 20, err)) < 0 ||
        (rc = cfg_int_in(cf, "vocab_size", true, &m->vocab, 1, 1 << 20, err)) < 0 ||
        (rc = cfg_check_unused(cf, err)) < 0 ||
        (rc = model_quant_method(cf, NULL, &which, err)) < 0)
        return rc;
    if (!list) return 0;
    if (!(*list = calloc(1, sizeof **list))) return -AH_ENOMEM;
    int n = 0;
    model_tensor_add(*list, &n, NULL, &m->embed, m->vocab, m->hidden, NULL, 0,
                     "embed_tokens.weight");
    return n;
}

static void id_close(void *fm) {
    free(fm); // the embedding is borrowed
}

static void id_info(const void *fm, struct model_info *out) {
    const struct identity *m = fm;
    *out = (struct model_info){
        .n_blocks = IDENTITY_LAYERS, .max_pos = 1 << 20, .vocab = m->vocab, .hidden = m->hidden};
}

static int id_n_taps(const void *fm) {
    (void)fm;
    return ID_N;
}

static void id_catalogue(const void *fm, struct tap_desc *out) {
    (void)fm;
    static const char *const meaning = "the embedding row of the token (every block adds nothing)";
    tap_desc_set(&out[ID_INPUT_IDS], "input_ids", TAP_I64, "batch,seq", "the token ids", -1);
    tap_desc_set(&out[ID_EMBED], "token_embeddings", TAP_F32, "batch,seq,hidden_size", meaning, -1);
    for (int l = 0; l < IDENTITY_LAYERS; l++) {
        char name[32];
        snprintf(name, sizeof name, "layers.%d.layer_output", l);
        tap_desc_set(&out[ID_LAYER0 + l], name, TAP_F32, "batch,seq,hidden_size", meaning, l);
    }
    tap_desc_set(&out[ID_LOGITS], "logits", TAP_F32, "batch,seq,vocab_size",
                 "the stream times the embedding, transposed (tied head)", IDENTITY_LAYERS);
}

static int64_t id_axis_size(const void *fm, int block, const char *axis) {
    (void)block;
    const struct identity *m = fm;
    if (!strcmp(axis, "hidden_size")) return m->hidden;
    if (!strcmp(axis, "vocab_size")) return m->vocab;
    return -1;
}

static int id_state_init(void **fs, const void *fm, int max_T, int64_t max_tokens,
                         const uint8_t *want, const struct expert_shard *shard) {
    (void)want, (void)shard;
    const struct identity *m = fm;
    struct identity_state *s = calloc(1, sizeof *s);
    if (!(*fs = s)) return -AH_ENOMEM;
    struct arena_piece f[] = {{(void **)&s->x, max_tokens * m->hidden},
                              {(void **)&s->logits, (int64_t)max_T * m->vocab}};
    s->arena = arena_alloc(f, 2);
    return s->arena ? 0 : -AH_ENOMEM;
}

static void id_state_free(void *fs) {
    if (fs) free(((struct identity_state *)fs)->arena);
    free(fs);
}

static void id_forward(const void *fm, void *fs, const struct mbatch *bt, const struct tap *tp,
                       int blk_begin, int blk_end) {
    const struct identity *m = fm;
    struct identity_state *s = fs;
    int64_t D = m->hidden, V = m->vocab;
    if (blk_begin == 0) {
        for (int b = 0; b < bt->n; b++) {
            struct tview vi = {bt->ids + bt->off[b], TAP_I64, 2, {1, bt->len[b]}};
            tap_emit(tp, ID_INPUT_IDS, b, &vi);
        }
        for (int64_t i = 0; i < bt->n_tokens; i++)
            memcpy(s->x + i * D, m->embed + bt->ids[i] * D, (size_t)D * sizeof(float));
        tap_emit_rows(tp, ID_EMBED, bt, s->x, (int)D);
    }
    for (int l = blk_begin; l < blk_end; l++) // the block adds nothing
        tap_emit_rows(tp, ID_LAYER0 + l, bt, s->x, (int)D);
    if (blk_end < IDENTITY_LAYERS || !tap_wants(tp, ID_LOGITS)) return;
    for (int b = 0; b < bt->n; b++) {
        int T = bt->len[b];
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, (int)V, (int)D, 1.0f,
                    s->x + bt->off[b] * D, (int)D, m->embed, (int)D, 0.0f, s->logits, (int)V);
        struct tview v = {s->logits, TAP_F32, 3, {1, T, V}};
        tap_emit(tp, ID_LOGITS, b, &v);
    }
}

static int id_handoff(void *fs, float **arrays) {
    arrays[0] = ((struct identity_state *)fs)->x;
    return 1;
}

static double id_block_flops(const void *fm, int b, int T) {
    const struct identity *m = fm;
    return b < IDENTITY_LAYERS ? 1.0 : 2.0 * T * m->hidden * (double)m->vocab;
}

static int64_t id_stage_bytes(const void *fm, int b0, int b1, bool head, int shard, int n_shards,
                              const char **kind) {
    (void)b1, (void)shard, (void)n_shards;
    const struct identity *m = fm;
    *kind = "float32";
    return b0 == 0 || head ? 4 * (int64_t)m->vocab * m->hidden : 0;
}

static const char *const id_ids[] = {"IdentityForTest", NULL};

const struct model_family identity_family = {
    .name = "identity",
    .ids = id_ids,
    .open = id_open,
    .close = id_close,
    .info = id_info,
    .n_taps = id_n_taps,
    .catalogue = id_catalogue,
    .axis_size = id_axis_size,
    .state_init = id_state_init,
    .state_free = id_state_free,
    .forward = id_forward,
    .handoff = id_handoff,
    .block_flops = id_block_flops,
    .stage_bytes = id_stage_bytes,
};
