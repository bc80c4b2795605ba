// test_consumers.c - the tap consumers' protocol (harvest/consumers.c, harvest.h) without a
// model, MPI or HDF5: this file defines the three registered kinds (collect_kind, wstats_kind,
// normprofile_kind) as recording fakes (saes_kind and saeval_kind as ones that make nothing), and
// checks
//   - make in table order; a kind whose make leaves take NULL is not in the list (its u freed)
//   - the union of wants; a view goes, in order, only to the consumers that want its id, with
//     its catalogue id, entry, prompt and the prompt's keep mask (keep + boff[b]; NULL without)
//   - begin/end around a batch, in order; segment and final hooks reach every consumer / kind
//   - a failing take: its code and message come back from consumers_end, the batch's other
//     takes are skipped (the next consumer's too), end hooks are not called; the next batch
//     starts clean; a failing begin returns at once
#include "harvest/run.h"
#include "tests/check.h"

#include <stdlib.h>
#include <string.h>

double now_seconds(void) {
    return 0;
}

#define N_CAT 4
static char trace[1024]; // what the hooks saw, in order

// appends "<c><a>.<b> " (b < 0: "<c><a> ")
static void say(char c, int a, int b) {
    size_t n = strlen(trace);
    if (b < 0)
        snprintf(trace + n, sizeof trace - n, "%c%d ", c, a);
    else
        snprintf(trace + n, sizeof trace - n, "%c%d.%d ", c, a, b);
}

struct fake {
    int tag;
    uint8_t want[N_CAT];
    int fail_at; // take of id fail_at fails (-1: never)
    const uint8_t *last_keep;
    const struct tap_desc *last_d;
};
static struct fake fakes[3];
static int freed;

static int f_begin(void *u, const struct cbatch *bt, struct ah_error *err) {
    struct fake *f = u;
    (void)err;
    say('B', f->tag, (int)bt->k);
    return bt->k == 99 && f->tag == 0 ? ah_fail(err, AH_EIO, "begin failed") : 0;
}

static int f_take(void *u, const struct ctake *t, const struct tview *v, struct ah_error *err) {
    struct fake *f = u;
    (void)v;
    say('T', f->tag * 100 + t->id, t->b); // T<tag*100+id>.<prompt>
    f->last_keep = t->keep;
    f->last_d = t->d;
    if (t->id == f->fail_at)
        return ah_fail(err, AH_EINVAL, "fake %d failed on id %d", f->tag, t->id);
    return 0;
}

static int f_end(void *u, const struct cbatch *bt, struct ah_error *err) {
    struct fake *f = u;
    (void)err;
    say('E', f->tag, (int)bt->k);
    return 0;
}

static int f_segment(void *u, const struct out_ops *out, MPI_Comm comm, const char *out_path,
                     const char *file, struct ah_error *err) {
    struct fake *f = u;
    (void)out, (void)comm, (void)out_path, (void)file, (void)err;
    say('S', f->tag, -1);
    return 0;
}

static void f_free(void *u) {
    (void)u;
    freed++;
}

static int make_k(struct consumer *c, int k) {
    *c = (struct consumer){.name = c->name,
                           .want = fakes[k].want,
                           .begin = f_begin,
                           .take = f_take,
                           .end = f_end,
                           .segment = f_segment,
                           .free = f_free,
                           .u = &fakes[k]};
    say('M', k, -1);
    return 0;
}

static int make0(struct consumer *c, const struct consumer_env *e, struct ah_error *err) {
    (void)e, (void)err;
    return make_k(c, 0);
}

static int make1(struct consumer *c, const struct consumer_env *e, struct ah_error *err) {
    (void)e, (void)err;
    make_k(c, 1);
    c->take = NULL; // nothing to do on this rank: not listed, u freed
    return 0;
}

static int make2(struct consumer *c, const struct consumer_env *e, struct ah_error *err) {
    (void)e, (void)err;
    return make_k(c, 2);
}

static int final_k(const struct plan *pl, const struct out_ops *out, const struct h5out_record *rec,
                   int n, bool if_missing, struct ah_error *err) {
    (void)pl, (void)out, (void)rec, (void)err;
    say('F', n, if_missing);
    return 0;
}

const struct consumer_kind collect_kind = {"collect", NULL, make0, final_k};
const struct consumer_kind wstats_kind = {"wstats", NULL, make1, NULL};
const struct consumer_kind normprofile_kind = {"normprofile", NULL, make2, final_k};

static int make_none(struct consumer *c, const struct consumer_env *e, struct ah_error *err) {
    (void)c, (void)e, (void)err;
    return 0; // the SAEs' kind (harvest/saes.c) of a job without "saes": no consumer
}
const struct consumer_kind saes_kind = {"saes", NULL, make_none, NULL};
const struct consumer_kind saeval_kind = {"saeval", NULL, make_none, NULL};

int main(void) {
    struct tap_desc cat[N_CAT] = {{.name = "a"}, {.name = "b"}, {.name = "c"}, {.name = "d"}};
    struct plan pl = {0};
    pl.m.cat = cat;
    pl.m.n_cat = N_CAT;
    fakes[0] = (struct fake){0, {1, 1, 0, 0}, -1, NULL, NULL};
    fakes[1] = (struct fake){1, {1, 1, 1, 1}, -1, NULL, NULL};
    fakes[2] = (struct fake){2, {0, 1, 1, 0}, -1, NULL, NULL};
    struct consumer_env env = {&pl, NULL, NULL};
    struct consumers cs;
    struct ah_error err = {0};
    CHECK_EQ(consumers_init(&cs, &env, &err), 0);
    CHECK(!strcmp(trace, "M0 M1 M2 "));
    CHECK_EQ(cs.n, 2);
    CHECK_EQ(freed, 1);
    CHECK(cs.want[0] && cs.want[1] && cs.want[2] && !cs.want[3]);

    // a batch of two prompts of 3 and 2 tokens, under a selection
    int lens[2] = {3, 2};
    int64_t boff[2] = {0, 3}, ids[5] = {7, 8, 9, 10, 11};
    uint8_t keep[5] = {1, 0, 1, 0, 1};
    struct cbatch bt = {5, 10, 2, lens, boff, 100, 5, ids, keep};
    struct tap tp = consumers_tap(&cs);
    struct tview v = {0};
    trace[0] = 0;
    CHECK_EQ(consumers_begin(&cs, &bt, &err), 0);
    tap_emit(&tp, 1, 0, &v);
    tap_emit(&tp, 2, 1, &v);
    tap_emit(&tp, 3, 1, &v); // wanted by no one: not emitted
    CHECK_EQ(consumers_end(&cs, &err), 0);
    CHECK(!strcmp(trace, "B0.5 B2.5 T1.0 T201.0 T202.1 E0.5 E2.5 "));
    CHECK(fakes[2].last_keep == keep + 3 && fakes[0].last_keep == keep);
    CHECK(fakes[2].last_d == &cat[2]);

    // without a selection: no keep mask
    bt.keep = NULL;
    CHECK_EQ(consumers_begin(&cs, &bt, &err), 0);
    tap_emit(&tp, 0, 1, &v);
    CHECK(fakes[0].last_keep == NULL);
    CHECK_EQ(consumers_end(&cs, &err), 0);

    // a failing take: the run gets its code and message; the rest of the batch is skipped
    fakes[0].fail_at = 1;
    bt.k = 6;
    trace[0] = 0;
    CHECK_EQ(consumers_begin(&cs, &bt, &err), 0);
    tap_emit(&tp, 1, 0, &v); // fake 0 fails: fake 2 does not see it
    tap_emit(&tp, 2, 0, &v); // skipped
    struct ah_error e2 = {0};
    CHECK_EQ(consumers_end(&cs, &e2), -AH_EINVAL);
    CHECK(strstr(e2.msg, "fake 0 failed on id 1") != NULL);
    CHECK(!strcmp(trace, "B0.6 B2.6 T1.0 "));
    // the next batch starts clean
    fakes[0].fail_at = -1;
    bt.k = 7;
    trace[0] = 0;
    CHECK_EQ(consumers_begin(&cs, &bt, &err), 0);
    tap_emit(&tp, 2, 0, &v);
    CHECK_EQ(consumers_end(&cs, &err), 0);
    CHECK(!strcmp(trace, "B0.7 B2.7 T202.0 E0.7 E2.7 "));
    // a failing begin returns at once
    bt.k = 99;
    trace[0] = 0;
    CHECK_EQ(consumers_begin(&cs, &bt, &e2), -AH_EIO);
    CHECK(!strcmp(trace, "B0.99 "));

    // segments and finals
    trace[0] = 0;
    CHECK_EQ(consumers_segment(&cs, NULL, MPI_COMM_NULL, "out.h5", "seg", &err), 0);
    CHECK_EQ(consumers_final(&pl, NULL, NULL, 3, true, &err), 0);
    CHECK(!strcmp(trace, "S0 S2 F3.1 F3.1 "));
    CHECK(consumers_seconds(&cs, "collect") == 0 && consumers_seconds(&cs, "none") == 0);
    consumers_free(&cs);
    CHECK_EQ(freed, 3);
    if (check_failures) fprintf(stderr, "trace: %s\n", trace);
    return check_failures ? EXIT_FAILURE : EXIT_SUCCESS;
}
