// batch.h - a batch of prompts packed token-major, with no padding between them.
//
// Row-wise steps (norms, projections, FFN) run over all tokens of the batch at once; attention runs
// per prompt, so no prompt ever sees another's tokens and padding cannot change a prompt's numbers.
#ifndef AH_BATCH_H
#define AH_BATCH_H

#include <stdint.h>

struct mbatch {
    int n;              // prompts
    int64_t n_tokens;   // sum of len
    const int64_t *ids; // (n_tokens) token ids, prompt after prompt; borrowed
    const int *len;     // (n) tokens of each prompt, >= 1; borrowed
    const int64_t *off; // (n) first row of each prompt in ids; borrowed
};

#endif
