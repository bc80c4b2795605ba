// rounds.h - where rows go and who writes them: the batches, their rows, a replica's share of
// the batches, and the agreement of a lockstep round. Pure functions of plain numbers (no MPI,
// no HDF5), so tests/test_rounds.c checks them with a fake writer.
//
// Batch k holds prompts [k*B, min(k*B + B, N)): the batches one rank would make, whatever the
// grid. Prompt p's rows are row p of the prompt layout and rows [off[p], off[p] + len[p]) of the
// token layout (off: the prompts' first tokens, off[N] taken as n_tokens).
#ifndef AH_ROUNDS_H
#define AH_ROUNDS_H

#include "io/h5out.h"

#include <stdbool.h>
#include <stdint.h>

struct placement {
    int64_t n_prompts, n_tokens;
    const int64_t *off; // (n_prompts) first token row of each prompt; borrowed
    int64_t B;          // batch size
};

int64_t place_batches(const struct placement *pc); // how many batches
// The rows of batch k (q and qt zero: a segment decides where they land inside it).
struct h5out_run place_batch(const struct placement *pc, int64_t k);
// First row of prompt b of batch k: in the prompt layout (token false) or the token layout.
int64_t place_prompt_row(const struct placement *pc, int64_t k, int b, bool token);

// The batches replica r of n works on: a contiguous share of those with done[k] == 0, in order.
// out needs room for place_batches(); returns how many.
int64_t rounds_share(int64_t n_batches, const uint8_t *done, int replica, int n_replicas,
                     int64_t *out);

// What each member of a stage says at the start of a round.
struct round_say {
    int64_t batch;    // the batch it holds, -1 for none
    int64_t stop;     // it saw a stop
    int64_t ckpt_due; // its checkpoint clock is due (only the first member's counts)
};

// The stage's verdict on a round from every member's say (members in stage order; member m is
// expert shard m % n_shards of its replica, and only shard 0 writes): *play false when no member
// holds a batch, or a first stage was asked to stop; *checkpoint when the open segment closes
// first. rows[m]: the rows member m writes this round (p0 == p1 for none).
void rounds_agree(const struct placement *pc, const struct round_say *say, int members,
                  int n_shards, bool first_stage, bool *play, bool *checkpoint,
                  struct h5out_run *rows);

#endif
