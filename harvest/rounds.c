// rounds.c - see rounds.h. Every decision about a row's place is made here: run.c and the
// collector ask, io/h5out.c only maps a round's rows into its segment.
#include "harvest/rounds.h"

int64_t place_batches(const struct placement *pc) {
    return (pc->n_prompts + pc->B - 1) / pc->B;
}

static int64_t token_at(const struct placement *pc, int64_t p) {
    return p < pc->n_prompts ? pc->off[p] : pc->n_tokens;
}

struct h5out_run place_batch(const struct placement *pc, int64_t k) {
    struct h5out_run r = {0};
    r.p0 = k * pc->B;
    r.p1 = (k + 1) * pc->B < pc->n_prompts ? (k + 1) * pc->B : pc->n_prompts;
    r.t0 = token_at(pc, r.p0);
    r.t1 = token_at(pc, r.p1);
    return r;
}

int64_t place_prompt_row(const struct placement *pc, int64_t k, int b, bool token) {
    int64_t p = k * pc->B + b;
    return token ? token_at(pc, p) : p;
}

int64_t rounds_share(int64_t n_batches, const uint8_t *done, int replica, int n_replicas,
                     int64_t *out) {
    int64_t todo = 0, n = 0;
    for (int64_t k = 0; k < n_batches; k++)
        todo += !done[k];
    int64_t a = todo * replica / n_replicas, b = todo * (replica + 1) / n_replicas;
    for (int64_t k = 0, i = 0; k < n_batches; k++) {
        if (done[k]) continue;
        if (i >= a && i < b) out[n++] = k;
        i++;
    }
    return n;
}

void rounds_agree(const struct placement *pc, const struct round_say *say, int members,
                  int n_shards, bool first_stage, bool *play, bool *checkpoint,
                  struct h5out_run *rows) {
    bool any = false, stop = false;
    for (int m = 0; m < members; m++) {
        any = any || say[m].batch >= 0;
        stop = stop || say[m].stop;
    }
    *play = any && !(first_stage && stop);
    *checkpoint = *play && say[0].ckpt_due;
    for (int m = 0; m < members; m++) {
        rows[m] = (struct h5out_run){0};
        if (*play && say[m].batch >= 0 && m % n_shards == 0)
            rows[m] = place_batch(pc, say[m].batch);
    }
}
