// identity.c - the test-only family of identity.h
#include "model/identity.h"

#include "model/ah.h"

#include <cblas.h> // defines: cblas_sgemm

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ID_INPUT_IDS, ID_EMBED, ID_LAYER0, ID_LAYER1, ID_LOGITS, ID_N };

int identity_n_taps(void) {
    return ID_N;
}

void identity_catalogue(struct tap_desc *out) {
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

int64_t identity_axis_size(const struct identity *m, const char *axis) {
    if (!strcmp(axis, "hidden_size")) return m->hidden;
    if (!strcmp(axis, "vocab_size")) return m->vocab;
    return -1;
}

int identity_tensors(struct identity *m, struct model_tensor *t) {
    int n = 0;
    model_tensor_add(t, &n, NULL, &m->embed, m->vocab, m->hidden, NULL, 0, "embed_tokens.weight");
    return n;
}

int identity_state_init(struct identity_state *s, const struct identity *m, int max_T,
                        int64_t max_tokens) {
    memset(s, 0, sizeof *s);
    struct arena_piece f[] = {{(void **)&s->x, max_tokens * m->hidden},
                              {(void **)&s->logits, (int64_t)max_T * m->vocab}};
    s->arena = arena_alloc(f, 2);
    return s->arena ? 0 : -AH_ENOMEM;
}

void identity_state_free(struct identity_state *s) {
    free(s->arena);
    memset(s, 0, sizeof *s);
}

void identity_forward(const struct identity *m, struct identity_state *s, const struct mbatch *bt,
                      const struct tap *tp, int blk_begin, int blk_end) {
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
        tp->take(tp->u, ID_LOGITS, b, &v);
    }
}
