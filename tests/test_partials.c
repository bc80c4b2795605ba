// test_partials.c - the per-batch partials' listing and fold (harvest/partials.c) without MPI or
// HDF5: segments are faked by a table of the batches each one holds. Checks
//   - parts_hold: batches held past the first growth keep their number and their doubles
//   - parts_entries: only the batches a record lists (batch x B in one of its runs: a batch trimmed
//     on resume is not), sorted by (batch, record), each with its row in its segment; an error
//     of the batches callback comes back as it is
//   - parts_fold: batch after batch, each once (a batch listed twice: its first listing), the
//     fold's order independent of the segments' order; the first missing batch, and nothing
//     folded after it; a callback's error stops the fold
#include "harvest/partials.h"
#include "harvest/run.h" // run_mpi_failed (CHECK_MPI), faked here
#include "tests/check.h"

#include <stdlib.h>
#include <string.h>

void run_mpi_failed(int code, const char *call, const char *file, int line) {
    fprintf(stderr, "%s:%d: %s failed (%d)\n", file, line, call, code);
    abort();
}

#define B 2 // prompts a batch

// the fake segments: record r's segment holds batches held[r][0 .. n_held[r])
struct fake {
    const int64_t *held[4];
    int64_t n_held[4];
    int fail_rec; // the record whose listing fails, or -1
    // the fold's trace
    int64_t seen[16][3]; // (batch, record, row) a folded entry
    int n_seen, fail_batch;
    double total;
};

static int fake_batches(void *u, const struct h5out_record *r, int64_t **b, int64_t *m,
                        struct ah_error *err) {
    struct fake *f = u;
    int k = r->i0; // the fake's record number
    if (k == f->fail_rec) return ah_fail(err, AH_EIO, "segment %d unreadable", k);
    *m = f->n_held[k];
    *b = malloc((size_t)(*m + 1) * sizeof **b);
    if (!*b) return -AH_ENOMEM;
    memcpy(*b, f->held[k], (size_t)*m * sizeof **b);
    return 0;
}

static int fake_row(void *u, const struct part_entry *x, struct ah_error *err) {
    struct fake *f = u;
    if (x->batch == f->fail_batch) return ah_fail(err, AH_EFORMAT, "batch %lld damaged", 0LL);
    int64_t *s = f->seen[f->n_seen++];
    s[0] = x->batch, s[1] = x->rec, s[2] = x->row;
    f->total = f->total * 10 + (double)x->batch; // order-dependent
    return 0;
}

static void test_hold_grows(void) {
    struct parts_held h;
    struct ah_error err = {0};
    parts_held_init(&h, 3);
    for (int64_t k = 0; k < 20; k++) {
        double *at = parts_hold(&h, 100 + k, "the fakes", &err);
        CHECK(at != NULL);
        for (int j = 0; at && j < 3; j++)
            at[j] = (double)(10 * k + j);
    }
    CHECK_EQ(h.n, 20);
    CHECK(h.cap >= 20);
    for (int64_t k = 0; k < h.n; k++) {
        CHECK_EQ(h.batch[k], 100 + k);
        for (int j = 0; j < 3; j++)
            CHECK_EQ(h.v[k * 3 + j], 10 * k + j);
    }
    parts_held_free(&h);
    parts_held_free(&h); // safe twice
    CHECK(h.batch == NULL && h.v == NULL && h.n == 0);
}

int main(void) {
    test_hold_grows();
    // rec 0 lists prompts [0, 6): batches 0, 1, 2; rec 1 lists [6, 8): batch 3, but holds 4 too
    // (trimmed on resume); rec 2 lists [8, 12) and holds 5 then 4; rec 3 lists batch 1 again
    static const int64_t h0[] = {0, 1, 2}, h1[] = {3, 4}, h2[] = {5, 4}, h3[] = {1};
    struct h5out_run r0[] = {{0, 6, 0, 0, 0, 0}}, r1[] = {{6, 8, 0, 0, 0, 0}},
                     r2[] = {{8, 10, 0, 0, 0, 0}, {10, 12, 0, 0, 0, 0}},
                     r3[] = {{2, 4, 0, 0, 0, 0}};
    struct h5out_record rec[4] = {
        {"s0", 0, 0, r0, 1}, {"s1", 1, 0, r1, 1}, {"s2", 2, 0, r2, 2}, {"s3", 3, 0, r3, 1}};
    struct fake f = {{h0, h1, h2, h3}, {3, 2, 2, 1}, -1, {{0}}, 0, -1, 0};
    struct ah_error err = {0};
    struct part_entry *e = NULL;
    int64_t n = 0;
    CHECK_EQ(parts_entries(rec, 4, B, fake_batches, &f, "the fakes", &e, &n, &err), 0);
    static const int64_t want[7][3] = {{0, 0, 0}, {1, 0, 1}, {1, 3, 0}, {2, 0, 2},
                                       {3, 1, 0}, {4, 2, 1}, {5, 2, 0}}; // (batch, rec, row)
    CHECK_EQ(n, 7);
    for (int i = 0; i < n && i < 7; i++) {
        CHECK_EQ(e[i].batch, want[i][0]);
        CHECK_EQ(e[i].rec, want[i][1]);
        CHECK_EQ(e[i].row, want[i][2]);
    }

    // every batch once, in order, its first listing
    int64_t missing = 0;
    CHECK_EQ(parts_fold(e, n, 6, fake_row, &f, &missing, &err), 0);
    CHECK_EQ(missing, -1);
    CHECK_EQ(f.n_seen, 6);
    for (int i = 0; i < f.n_seen; i++)
        CHECK_EQ(f.seen[i][0], i);
    CHECK_EQ(f.seen[1][1], 0); // batch 1 from rec 0, not rec 3
    CHECK_EQ(f.seen[4][1], 2); // batch 4 from rec 2 (rec 1 does not list it), its row 1
    CHECK_EQ(f.seen[4][2], 1);
    CHECK(f.total == 12345.0);

    // a run of 7 batches: batch 6 is missing
    f.n_seen = 0;
    CHECK_EQ(parts_fold(e, n, 7, fake_row, &f, &missing, &err), 0);
    CHECK_EQ(missing, 6);
    CHECK_EQ(f.n_seen, 6);

    // without rec 1 (batch 3's only listing): batch 3 missing, nothing after it folded
    f.n_seen = 0;
    CHECK_EQ(parts_fold_listed((struct h5out_record[]){rec[0], rec[2], rec[3]}, 3, B, 6,
                               fake_batches, fake_row, &f, "the fakes", &missing, &err),
             0);
    CHECK_EQ(missing, 3);
    CHECK_EQ(f.n_seen, 3);

    // a failing row stops the fold with its error
    f.n_seen = 0, f.fail_batch = 2;
    CHECK_EQ(parts_fold(e, n, 6, fake_row, &f, &missing, &err), -AH_EFORMAT);
    CHECK_EQ(f.n_seen, 2);
    CHECK(strstr(err.msg, "damaged") != NULL);
    free(e);

    // a failing listing comes back as it is
    f.fail_rec = 2;
    struct ah_error e2 = {0};
    CHECK_EQ(parts_entries(rec, 4, B, fake_batches, &f, "the fakes", &e, &n, &e2), -AH_EIO);
    CHECK(strstr(e2.msg, "segment 2 unreadable") != NULL);
    free(e);
    return check_failures ? EXIT_FAILURE : EXIT_SUCCESS;
}
