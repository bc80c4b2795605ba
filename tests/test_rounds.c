// test_rounds.c - the round and row-placement logic of harvest/rounds.c without MPI or HDF5:
// a fake writer plays the lockstep rounds of one stage's ranks (replicas x expert shards) over
// every batch, as io/h5out.c's segments take them, and the test checks that every prompt row and
// token row is written exactly once, where place_prompt_row says, in member order, with resume
// masks, stops and checkpoints (as llm.c tests its data loader on its own).
#include "harvest/rounds.h"
#include "tests/check.h"

#include <stdlib.h>
#include <string.h>

// a fake writer: one segment's runs, as h5seg_begin_round appends them
struct fake_seg {
    struct h5out_run runs[4096];
    int n;
    int64_t rows, rows_t;
};

static void fake_round(struct fake_seg *s, const struct h5out_run *rows, int members) {
    for (int m = 0; m < members; m++) {
        struct h5out_run r = rows[m];
        if (r.p1 == r.p0) continue;
        r.q = s->rows;
        r.qt = s->rows_t;
        s->runs[s->n++] = r;
        s->rows += r.p1 - r.p0;
        s->rows_t += r.t1 - r.t0;
    }
}

struct setup {
    int64_t N, B;
    int R, E; // replicas, expert shards
    int64_t *len, *off, n_tokens;
    struct placement pc;
};

static void setup_make(struct setup *su, int64_t N, int64_t B, int R, int E, unsigned seed) {
    su->N = N, su->B = B, su->R = R, su->E = E;
    su->len = malloc((size_t)(N + 1) * sizeof *su->len);
    su->off = malloc((size_t)(N + 1) * sizeof *su->off);
    srand(seed);
    su->n_tokens = 0;
    for (int64_t p = 0; p < N; p++) {
        su->len[p] = 1 + rand() % 9;
        su->off[p] = su->n_tokens;
        su->n_tokens += su->len[p];
    }
    su->pc = (struct placement){N, su->n_tokens, su->off, B};
}

static void setup_free(struct setup *su) {
    free(su->len);
    free(su->off);
}

// Plays every round of one stage; done: batches already in (NULL: none); stop_after: a stop is
// seen at that round (-1: never). Returns how many prompt rows were written; prompt_seen and
// token_seen count each row's writes.
static int64_t play(const struct setup *su, const uint8_t *done, int stop_after, int *prompt_seen,
                    int *token_seen, int *rounds) {
    int64_t K = place_batches(&su->pc), written = 0;
    int members = su->R * su->E;
    int64_t **mine = calloc((size_t)su->R, sizeof *mine), *n_mine = calloc((size_t)su->R, 8);
    uint8_t *none = calloc((size_t)K + 1, 1);
    for (int r = 0; r < su->R; r++) {
        mine[r] = malloc(((size_t)K + 1) * sizeof **mine);
        n_mine[r] = rounds_share(K, done ? done : none, r, su->R, mine[r]);
    }
    struct round_say *say = calloc((size_t)members, sizeof *say);
    struct h5out_run *rows = calloc((size_t)members, sizeof *rows);
    struct fake_seg *seg = calloc(1, sizeof *seg);
    for (int i = 0;; i++) {
        for (int m = 0; m < members; m++) {
            int r = m / su->E;
            say[m] = (struct round_say){i < n_mine[r] ? mine[r][i] : -1, i == stop_after, m == 0};
        }
        bool go = false, ckpt = false;
        rounds_agree(&su->pc, say, members, su->E, true, &go, &ckpt, rows);
        if (!go) break;
        CHECK(ckpt); // member 0's clock says due
        for (int m = 0; m < members; m++) {
            if (m % su->E) CHECK_EQ(rows[m].p1 - rows[m].p0, 0); // only shard 0 writes
            if (say[m].batch < 0) CHECK_EQ(rows[m].p1 - rows[m].p0, 0);
        }
        fake_round(seg, rows, members);
        (*rounds)++;
    }
    int64_t q = 0, qt = 0; // the segment holds its runs back to back, in round and member order
    for (int j = 0; j < seg->n; j++) {
        const struct h5out_run *u = &seg->runs[j];
        CHECK_EQ(u->q, q);
        CHECK_EQ(u->qt, qt);
        q += u->p1 - u->p0;
        qt += u->t1 - u->t0;
        int64_t k = u->p0 / su->B;
        for (int64_t p = u->p0; p < u->p1; p++) {
            prompt_seen[p]++;
            CHECK_EQ(place_prompt_row(&su->pc, k, (int)(p - u->p0), false), p);
            int64_t t = place_prompt_row(&su->pc, k, (int)(p - u->p0), true);
            CHECK_EQ(t, su->off[p]);
            for (int64_t x = t; x < t + su->len[p]; x++)
                token_seen[x]++;
        }
        CHECK_EQ(u->t0, su->off[u->p0]);
        CHECK_EQ(u->t1, u->p1 < su->N ? su->off[u->p1] : su->n_tokens);
        written += u->p1 - u->p0;
    }
    for (int r = 0; r < su->R; r++)
        free(mine[r]);
    free(mine);
    free(n_mine);
    free(none);
    free(say);
    free(rows);
    free(seg);
    return written;
}

static void test_rounds_write_every_row_once(void) {
    static const int64_t Ns[] = {1, 7, 24, 25, 61};
    static const int64_t Bs[] = {1, 3, 8};
    static const int Rs[] = {1, 2, 3, 5};
    static const int Es[] = {1, 2, 3};
    unsigned seed = 1;
    for (int a = 0; a < 5; a++)
        for (int b = 0; b < 3; b++)
            for (int c = 0; c < 4; c++)
                for (int e = 0; e < 3; e++) {
                    struct setup su;
                    setup_make(&su, Ns[a], Bs[b], Rs[c], Es[e], seed++);
                    int *ps = calloc((size_t)su.N, sizeof *ps);
                    int *ts = calloc((size_t)su.n_tokens + 1, sizeof *ts), rounds = 0;
                    CHECK_EQ(play(&su, NULL, -1, ps, ts, &rounds), su.N);
                    for (int64_t p = 0; p < su.N; p++)
                        CHECK_EQ(ps[p], 1);
                    for (int64_t t = 0; t < su.n_tokens; t++)
                        CHECK_EQ(ts[t], 1);
                    int64_t K = place_batches(&su.pc); // rounds: the largest replica's share
                    CHECK_EQ(rounds, (K + su.R - 1) / su.R);
                    free(ps);
                    free(ts);
                    setup_free(&su);
                }
}

// resume: the batches not done are written once, the done ones not at all
static void test_rounds_resume_writes_the_rest(void) {
    struct setup su;
    setup_make(&su, 40, 3, 3, 2, 7);
    int64_t K = place_batches(&su.pc);
    uint8_t *done = calloc((size_t)K, 1);
    for (int64_t k = 0; k < K; k++)
        done[k] = k % 3 == 1 || k == K - 1;
    int *ps = calloc((size_t)su.N, sizeof *ps), *ts = calloc((size_t)su.n_tokens, sizeof *ts);
    int rounds = 0;
    play(&su, done, -1, ps, ts, &rounds);
    for (int64_t p = 0; p < su.N; p++)
        CHECK_EQ(ps[p], done[p / su.B] ? 0 : 1);
    free(ps);
    free(ts);
    free(done);
    setup_free(&su);
}

// a stop seen by any member ends a first stage's rounds before that round's rows
static void test_rounds_stop_ends_the_first_stage(void) {
    struct setup su;
    setup_make(&su, 30, 2, 2, 1, 3);
    int *ps = calloc((size_t)su.N, sizeof *ps), *ts = calloc((size_t)su.n_tokens, sizeof *ts);
    int rounds = 0;
    play(&su, NULL, 3, ps, ts, &rounds);
    CHECK_EQ(rounds, 3);
    int64_t n = 0;
    for (int64_t p = 0; p < su.N; p++)
        n += ps[p];
    CHECK_EQ(n, 3 * 2 * 2); // 3 rounds, 2 replicas, 2 prompts a batch
    // a later stage drains: the stop does not end its rounds
    struct round_say say[2] = {{4, 1, 0}, {-1, 0, 1}};
    struct h5out_run rows[2];
    bool go = false, ckpt = true;
    rounds_agree(&su.pc, say, 2, 1, false, &go, &ckpt, rows);
    CHECK(go);
    CHECK(!ckpt); // only the first member's clock counts
    CHECK_EQ(rows[0].p0, 8);
    CHECK_EQ(rows[1].p1 - rows[1].p0, 0);
    struct round_say idle[2] = {{-1, 0, 1}, {-1, 0, 1}};
    rounds_agree(&su.pc, idle, 2, 1, false, &go, &ckpt, rows);
    CHECK(!go && !ckpt); // nobody has a batch
    free(ps);
    free(ts);
    setup_free(&su);
}

int main(void) {
    test_rounds_write_every_row_once();
    test_rounds_resume_writes_the_rest();
    test_rounds_stop_ends_the_first_stage();
    if (!check_failures) printf("test_rounds: all checks passed\n");
    return check_failures ? EXIT_FAILURE : EXIT_SUCCESS;
}
