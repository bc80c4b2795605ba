// identity.h - a test-only family ("architectures": ["IdentityForTest"]) whose every value is
// known in closed form: two blocks that add nothing, so with E the (V, D) embedding,
//   token_embeddings = layers.{0,1}.layer_output = E[ids],   logits = E[ids] E^T.
// It exists to show what adding a family touches (tests/test_identity.py).
#ifndef AH_IDENTITY_H
#define AH_IDENTITY_H

#include "model/batch.h"
#include "model/blocks.h"
#include "model/tap.h"

#include <stdint.h>

#define IDENTITY_LAYERS 2

struct identity {
    int hidden, vocab;  // D, V
    const float *embed; // (V, D), also the tied head; borrowed
};

struct identity_state {
    float *x;      // (N, D) the residual stream
    float *logits; // (T, V) one prompt's logits
    void *arena;
};

// The catalogue: input_ids, token_embeddings, layers.{0,1}.layer_output, logits (forward order).
int identity_n_taps(void);
void identity_catalogue(struct tap_desc *out);
int64_t identity_axis_size(const struct identity *m, const char *axis);
// The one tensor, "embed_tokens.weight" (V, D), into t (NULL: counts). Returns the count.
int identity_tensors(struct identity *m, struct model_tensor *t);
int identity_state_init(struct identity_state *s, const struct identity *m, int max_T,
                        int64_t max_tokens);
void identity_state_free(struct identity_state *s);
void identity_forward(const struct identity *m, struct identity_state *s, const struct mbatch *bt,
                      const struct tap *tp, int blk_begin, int blk_end);

#endif
