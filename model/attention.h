// attention.h - the one attention path of every family: scaled dot-product attention of one
// prompt's token-major queries over one or two key sets (the spec model's global and local keys
// side by side, tests/ref/spec.json; one set for Laguna, tests/ref/laguna-forward.md 4), each set
// with its own mask (causal, sliding window, full), query heads sharing key/value heads (GQA),
// an optional logit soft-cap, and the scores and probabilities handed to taps only when wanted.
//
// T = tokens of the prompt, H = query heads, KV = key/value heads (H % KV == 0; query head h
// reads kv head h / (H / KV)), D = head_dim, S = key sets (1 or 2): the key axis of the scores
// is S*T long, set s at columns [s*T, (s+1)*T), and one softmax runs over all of it.
#ifndef AH_ATTENTION_H
#define AH_ATTENTION_H

#include "model/tap.h"

#include <stdbool.h>
#include <stdint.h>

enum attn_mask {
    ATTN_CAUSAL,  // key j is allowed for query i iff j <= i
    ATTN_SLIDING, // ... iff 0 <= i - j < window (causal, at most `window` keys)
    ATTN_FULL,    // every key (bidirectional)
};

// One key set of the prompt: k and v are (T, ld) token-major rows, kv head g at column g*D.
struct attn_keys {
    const float *k, *v;
    int ld; // row stride of k and v in floats (KV*D when packed)
    enum attn_mask mask;
    int window; // ATTN_SLIDING only, >= 1
};

struct attn {
    int T, H, KV, D;
    int Dv;        // a value head's width when it differs from D (0: D; MLA's d_v): v head g at
                   // column g*Dv, out head h at column h*Dv
    int ldv;       // the values' row stride when it differs from the keys' (0: each set's ld)
    float scale;   // multiplies q . k (1/sqrt(D) as a rule)
    float softcap; // > 0: scores become softcap * tanh(scores / softcap) before the mask (Gemma 2)
    int n_sets;    // S: 1 or 2
    struct attn_keys set[2];
    const float *q; // (T, ldq) rows, query head h at column h*D
    int ldq;
    float *out; // (T, ldo) head outputs, head h at column h*D
    int ldo;
    int64_t att_floats; // the scores buffer's size (attn_scores_floats); 0: the least it can be
    // attention sinks (gpt-oss's eager_attention_forward): a learned logit per head joins every
    // row's softmax as one more column, which is then dropped, so a row's probabilities sum to
    // 1 - its sink share. NULL: none.
    const float *sinks; // (H) borrowed
    float *sink_p;      // (H, T) each row's sink share, written when not NULL (with sinks only)
};

// Where the scores and probabilities go: catalogue ids of one prompt (-1: not in the catalogue).
// Each is a (1, H, T, S*T) view: `scores` as computed (before the mask), `masked` with -inf
// where a key is blocked, `probs` the softmax the values are mixed with (0 where blocked).
struct attn_taps {
    const struct tap *tp; // NULL: no taps
    int b;                // the prompt within the batch
    int scores, masked, probs;
};

// [*lo, *hi): the keys of set k that query i (0 <= i < T) may attend to.
void attn_range(const struct attn_keys *k, int T, int i, int *lo, int *hi);
static inline bool attn_allowed(const struct attn_keys *k, int T, int i, int j) {
    int lo, hi;
    attn_range(k, T, i, &lo, &hi);
    return j >= lo && j < hi;
}

// Floats of the scores buffer attn_forward needs: (H, T, S*T) if any of the taps is wanted (all
// heads at once, so that the view holds them all), else (n, T, S*T): a head at a time on each of
// n = min(H, op_threads()) threads.
int64_t attn_scores_floats(int H, int T, int n_sets, bool taps_wanted);
bool attn_taps_wanted(const struct attn_taps *t);

// Writes a->out's head columns for rows 0..T-1. att holds a->att_floats >= attn_scores_floats(H,
// T, S, attn_taps_wanted(taps)) floats; taps may be NULL. Heads run over op_threads() threads
// (as many as att has room for), each sgemm on one thread, so every value has the same bits
// whatever the thread count. Never allocates, never fails.
void attn_forward(const struct attn *a, const struct attn_taps *taps, float *att);

#endif
