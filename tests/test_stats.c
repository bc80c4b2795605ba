// test_stats.c - the running per-feature statistics (io/stats.c) against a naive two-pass float64
// computation, and their determinism: splits, merges, serialisation, empty and non-finite rows.
#define _POSIX_C_SOURCE 200809L // defines: clock_gettime
#include "io/stats.h"
#include "model/ah.h"
#include "tests/check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

// |got - want| <= rtol * scale (the tensor's scale, as a relative tolerance must be for a mean
// near 0)
static void close_rel(const char *label, const double *got, const double *want, int64_t n,
                      double scale, double rtol) {
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs(got[i] - want[i]);
        if (!(d <= rtol * scale)) {
            if (bad++ < 5)
                fprintf(stderr, "%s[%lld]: got %.17g want %.17g\n", label, (long long)i, got[i],
                        want[i]);
        }
    }
    if (bad) {
        fprintf(stderr, "%s: %d of %lld beyond %.1e x %.3g\n", label, bad, (long long)n, rtol,
                scale);
        check_failures++;
    }
}

// rows of F floats: offset + spread * uniform[-1, 1), per-feature offsets differ
static float *make_rows(int64_t n, int64_t F, uint64_t seed, float offset, float spread) {
    float *x = malloc((size_t)(n * F) * sizeof(float));
    AH_ASSERT(x);
    check_fill(x, n * F, seed);
    for (int64_t i = 0; i < n * F; i++)
        x[i] = offset * (float)(1 + i % F % 5) + spread * x[i];
    return x;
}

// the naive reference: two passes in float64
struct ref {
    double *mean, *var, *min, *max, norm_mean, norm_var;
};

static void ref_compute(struct ref *r, const float *x, int64_t n, int64_t F) {
    size_t b = (size_t)F * sizeof(double);
    r->mean = calloc(1, b), r->var = calloc(1, b), r->min = malloc(b), r->max = malloc(b);
    double *norm = malloc((size_t)n * sizeof(double));
    AH_ASSERT(r->mean && r->var && r->min && r->max && norm);
    for (int64_t j = 0; j < F; j++)
        r->min[j] = INFINITY, r->max[j] = -INFINITY;
    r->norm_mean = r->norm_var = 0;
    for (int64_t i = 0; i < n; i++) {
        double ss = 0;
        for (int64_t j = 0; j < F; j++) {
            double v = (double)x[i * F + j];
            r->mean[j] += v;
            ss += v * v;
            r->min[j] = v < r->min[j] ? v : r->min[j];
            r->max[j] = v > r->max[j] ? v : r->max[j];
        }
        norm[i] = sqrt(ss);
        r->norm_mean += norm[i];
    }
    for (int64_t j = 0; j < F; j++)
        r->mean[j] /= (double)n;
    r->norm_mean /= (double)n;
    for (int64_t i = 0; i < n; i++) {
        for (int64_t j = 0; j < F; j++) {
            double d = (double)x[i * F + j] - r->mean[j];
            r->var[j] += d * d;
        }
        r->norm_var += (norm[i] - r->norm_mean) * (norm[i] - r->norm_mean);
    }
    for (int64_t j = 0; j < F; j++)
        r->var[j] /= (double)n;
    r->norm_var /= (double)n;
    free(norm);
}

static void ref_free(struct ref *r) {
    free(r->mean), free(r->var), free(r->min), free(r->max);
}

static void check_against_ref(const char *label, const struct stats *s, const struct ref *r,
                              int64_t n, double rtol) {
    const int64_t F = s->n_features;
    double *var = malloc((size_t)F * sizeof(double)), scale = 0, vscale = 0;
    AH_ASSERT(var);
    stats_var(s, var);
    for (int64_t j = 0; j < F; j++) {
        scale = fmax(scale, fmax(fabs(r->mean[j]), sqrt(r->var[j])));
        vscale = fmax(vscale, r->var[j]);
    }
    CHECK_EQ(s->count, n);
    char l[96];
    snprintf(l, sizeof l, "%s mean", label);
    close_rel(l, s->mean, r->mean, F, scale, rtol);
    snprintf(l, sizeof l, "%s var", label);
    close_rel(l, var, r->var, F, vscale, rtol);
    CHECK(!memcmp(s->min, r->min, (size_t)F * sizeof(double))); // exact: a value of the input
    CHECK(!memcmp(s->max, r->max, (size_t)F * sizeof(double)));
    double nv = stats_norm_var(s);
    snprintf(l, sizeof l, "%s norm_mean", label);
    close_rel(l, &s->norm_mean, &r->norm_mean, 1, r->norm_mean, rtol);
    snprintf(l, sizeof l, "%s norm_var", label);
    close_rel(l, &nv, &r->norm_var, 1, r->norm_var, rtol);
    free(var);
}

// packed bytes of s (caller frees)
static double *packed(const struct stats *s) {
    double *b = malloc((size_t)stats_buf_len(s->n_features) * sizeof(double));
    AH_ASSERT(b);
    stats_pack(s, b);
    return b;
}

static int same_bits(const struct stats *a, const struct stats *b) {
    if (a->n_features != b->n_features) return 0;
    double *pa = packed(a), *pb = packed(b);
    int same = !memcmp(pa, pb, (size_t)stats_buf_len(a->n_features) * sizeof(double));
    free(pa), free(pb);
    return same;
}

static void test_stats_one_pass_matches_two_pass(void) {
    const int64_t n = 5000, F = 37;
    // an offset 100x the spread: a naive sum of squares would lose digits here
    float *x = make_rows(n, F, 1, 50.0f, 0.5f);
    struct stats s;
    struct ref r;
    CHECK_EQ(stats_init(&s, F), 0);
    stats_add_rows(&s, x, n);
    ref_compute(&r, x, n, F);
    check_against_ref("one pass", &s, &r, n, 1e-12);
    CHECK_EQ(s.nonfinite, 0);
    ref_free(&r);
    stats_free(&s);
    free(x);
}

// the accumulator depends on the rows and their order, not on how calls split them
static void test_stats_split_calls_same_bits(void) {
    const int64_t n = 777, F = 19;
    float *x = make_rows(n, F, 2, 1.0f, 3.0f);
    struct stats a, b;
    CHECK_EQ(stats_init(&a, F), 0);
    CHECK_EQ(stats_init(&b, F), 0);
    stats_add_rows(&a, x, n);
    for (int64_t r = 0, k = 1; r < n; r += k, k = k * 3 % 17 + 1)
        stats_add_rows(&b, x + r * F, r + k <= n ? k : n - r);
    CHECK(same_bits(&a, &b));
    stats_free(&a), stats_free(&b);
    free(x);
}

// merge of two halves against one pass and the reference; a fold of batch partials, twice
static void test_stats_merge(void) {
    const int64_t n = 3001, F = 64, B = 97;
    float *x = make_rows(n, F, 3, -2.0f, 1.5f);
    struct stats all, h1, h2, part, fold1, fold2;
    CHECK_EQ(stats_init(&all, F) | stats_init(&h1, F) | stats_init(&h2, F), 0);
    CHECK_EQ(stats_init(&part, F) | stats_init(&fold1, F) | stats_init(&fold2, F), 0);
    stats_add_rows(&all, x, n);
    stats_add_rows(&h1, x, 1234);
    stats_add_rows(&h2, x + 1234 * F, n - 1234);
    stats_merge(&h1, &h2);
    struct ref r;
    ref_compute(&r, x, n, F);
    check_against_ref("merged halves", &h1, &r, n, 1e-12);
    check_against_ref("one pass", &all, &r, n, 1e-12);
    // batch partials merged in batch order: the same bytes every time
    for (int rep = 0; rep < 2; rep++) {
        struct stats *fold = rep ? &fold2 : &fold1;
        for (int64_t b0 = 0; b0 < n; b0 += B) {
            stats_reset(&part);
            stats_add_rows(&part, x + b0 * F, b0 + B <= n ? B : n - b0);
            stats_merge(fold, &part);
        }
    }
    CHECK(same_bits(&fold1, &fold2));
    check_against_ref("fold of batches", &fold1, &r, n, 1e-12);
    // the order matters to the bits (which is why the run merges in batch order): a fold in
    // reverse is close but, for this data, not bitwise the same
    stats_reset(&fold2);
    for (int64_t b0 = (n - 1) / B * B; b0 >= 0; b0 -= B) {
        stats_reset(&part);
        stats_add_rows(&part, x + b0 * F, b0 + B <= n ? B : n - b0);
        stats_merge(&fold2, &part);
    }
    check_against_ref("reverse fold", &fold2, &r, n, 1e-12);
    CHECK(!same_bits(&fold1, &fold2));
    ref_free(&r);
    stats_free(&all), stats_free(&h1), stats_free(&h2);
    stats_free(&part), stats_free(&fold1), stats_free(&fold2);
    free(x);
}

static void test_stats_empty_and_single(void) {
    const int64_t F = 5;
    struct stats e, a, m;
    CHECK_EQ(stats_init(&e, F) | stats_init(&a, F) | stats_init(&m, F), 0);
    double var[5];
    stats_var(&e, var);
    CHECK(isnan(var[0]) && isnan(stats_norm_var(&e)));
    stats_merge(&m, &e); // empty + empty = empty
    CHECK(same_bits(&m, &e));
    const float x[5] = {3.0f, -4.0f, 0.0f, 1e-20f, -0.5f};
    stats_add_rows(&a, x, 1);
    CHECK_EQ(a.count, 1);
    for (int j = 0; j < 5; j++)
        CHECK(a.mean[j] == (double)x[j] && a.min[j] == (double)x[j] && a.max[j] == (double)x[j]);
    stats_var(&a, var);
    CHECK(var[0] == 0 && var[4] == 0 && stats_norm_var(&a) == 0);
    double norm = sqrt(9.0 + 16.0 + 1e-40 + 0.25);
    CHECK(fabs(a.norm_mean - norm) <= 1e-15 * norm);
    stats_merge(&m, &a); // empty + a = a, bit for bit
    CHECK(same_bits(&m, &a));
    stats_merge(&m, &e); // a + empty = a
    CHECK(same_bits(&m, &a));
    stats_add_rows(&m, x, 0); // no rows: no change
    CHECK(same_bits(&m, &a));
    stats_free(&e), stats_free(&a), stats_free(&m);
}

// a row with a NaN or an infinity is left out whole and counted
static void test_stats_nonfinite_rows_skipped(void) {
    const int64_t n = 200, F = 11;
    float *x = make_rows(n, F, 4, 0.25f, 1.0f);
    float *y = malloc((size_t)((n + 3) * F) * sizeof(float));
    AH_ASSERT(y);
    // y = x with three bad rows slipped in
    memcpy(y, x, (size_t)(50 * F) * sizeof(float));
    for (int64_t j = 0; j < 3 * F; j++)
        y[50 * F + j] = 1.0f;
    y[50 * F + 3] = NAN;
    y[51 * F + 0] = INFINITY;
    y[52 * F + 10] = -INFINITY;
    memcpy(y + 53 * F, x + 50 * F, (size_t)((n - 50) * F) * sizeof(float));
    struct stats a, b;
    CHECK_EQ(stats_init(&a, F) | stats_init(&b, F), 0);
    stats_add_rows(&a, x, n);
    stats_add_rows(&b, y, n + 3);
    CHECK_EQ(b.nonfinite, 3);
    CHECK_EQ(b.count, n);
    b.nonfinite = 0;
    CHECK(same_bits(&a, &b)); // the bad rows changed nothing else
    for (int64_t j = 0; j < F; j++)
        CHECK(isfinite(b.mean[j]) && isfinite(b.m2[j]));
    b.nonfinite = 3;
    stats_merge(&a, &b);
    CHECK_EQ(a.nonfinite, 3);
    stats_free(&a), stats_free(&b);
    free(x), free(y);
}

static void test_stats_pack_roundtrip(void) {
    const int64_t F = 7;
    float *x = make_rows(40, F, 5, 1.0f, 1.0f);
    struct stats a, b, c;
    CHECK_EQ(stats_init(&a, F) | stats_init(&b, F) | stats_init(&c, 8), 0);
    stats_add_rows(&a, x, 40);
    a.nonfinite = 2;
    double *buf = packed(&a);
    int64_t len = stats_buf_len(F);
    CHECK_EQ(stats_unpack(&b, buf, len), 0);
    CHECK(same_bits(&a, &b));
    CHECK_EQ(stats_unpack(&b, buf, len - 1), -AH_EFORMAT); // wrong length
    CHECK_EQ(stats_unpack(&c, buf, len), -AH_EFORMAT);     // another feature count
    buf[0] = 1.0;
    CHECK_EQ(stats_unpack(&b, buf, len), -AH_EFORMAT); // not a partial
    free(buf);
    buf = packed(&a);
    buf[2] = 0.5; // fractional count
    CHECK_EQ(stats_unpack(&b, buf, len), -AH_EFORMAT);
    free(buf);
    stats_free(&a), stats_free(&b), stats_free(&c);
    free(x);
}

// batch partials of 3 activations arriving in a shuffled order, with a checkpoint and a restore
// half-way: the same totals, bit for bit, as merging them in batch order
static void test_stats_fold_any_arrival_order(void) {
    enum { NB = 23, NS = 3 };
    const int64_t F[NS] = {5, 16, 1}, rows = 9;
    struct stats parts[NB][NS], inorder[NS];
    for (int s = 0; s < NS; s++) {
        CHECK_EQ(stats_init(&inorder[s], F[s]), 0);
        for (int b = 0; b < NB; b++) {
            CHECK_EQ(stats_init(&parts[b][s], F[s]), 0);
            float *x = make_rows(rows, F[s], (uint64_t)(100 * b + s), 0.5f, 2.0f);
            stats_add_rows(&parts[b][s], x, b % 7 == 3 ? 0 : rows - b % 4); // some batches empty
            free(x);
            stats_merge(&inorder[s], &parts[b][s]);
        }
    }
    struct stats_fold f, g;
    CHECK_EQ(stats_fold_init(&f, NS, F), 0);
    CHECK_EQ(stats_fold_init(&g, NS, F), 0);
    int order[NB];
    for (int b = 0; b < NB; b++)
        order[b] = b;
    for (int b = NB - 1; b > 0; b--) { // a fixed shuffle
        int k = (int)((uint64_t)b * 2654435761u % (uint64_t)(b + 1)), t = order[b];
        order[b] = order[k], order[k] = t;
    }
    double *buf = malloc((size_t)f.batch_len * sizeof(double));
    AH_ASSERT(buf);
    for (int i = 0; i < NB; i++) {
        stats_fold_pack_batch(&f, parts[order[i]], buf);
        CHECK_EQ(stats_fold_add(&f, order[i], buf), 0);
        if (i == NB / 2) { // checkpoint, then carry on in another fold as a resume would
            int64_t len = stats_fold_state_len(&f);
            double *st = malloc((size_t)len * sizeof(double)),
                   *st2 = malloc((size_t)len * sizeof(double));
            AH_ASSERT(st && st2);
            stats_fold_pack_state(&f, st);
            CHECK(f.n_early > 0); // the shuffle left some early batches to carry
            CHECK_EQ(stats_fold_unpack_state(&g, st, len), 0);
            stats_fold_pack_state(&g, st2);
            CHECK(!memcmp(st, st2, (size_t)len * sizeof(double)));
            CHECK_EQ(stats_fold_unpack_state(&g, st, len - 1), -AH_EFORMAT);
            CHECK_EQ(stats_fold_unpack_state(&g, st, len), 0);
            stats_fold_free(&f);
            f = g;
            memset(&g, 0, sizeof g);
            free(st), free(st2);
        }
    }
    CHECK_EQ(f.next, NB);
    CHECK_EQ(f.n_early, 0);
    for (int s = 0; s < NS; s++)
        CHECK(same_bits(&f.total[s], &inorder[s]));
    // a batch taken twice, early or merged; a buffer that is no partial
    stats_fold_pack_batch(&f, parts[0], buf);
    CHECK_EQ(stats_fold_add(&f, 3, buf), -AH_EINVAL);
    CHECK_EQ(stats_fold_add(&f, NB + 2, buf), 0);
    CHECK_EQ(stats_fold_add(&f, NB + 2, buf), -AH_EINVAL);
    buf[0] = 0;
    CHECK_EQ(stats_fold_add(&f, NB + 5, buf), -AH_EFORMAT);
    CHECK_EQ(stats_fold_add(&f, NB, buf), -AH_EFORMAT);
    free(buf);
    stats_fold_free(&f);
    stats_fold_free(&g);
    for (int s = 0; s < NS; s++) {
        stats_free(&inorder[s]);
        for (int b = 0; b < NB; b++)
            stats_free(&parts[b][s]);
    }
}

// `test_stats --bench`: the cost of stats_add_rows, ns per element (d = 384, as the spec model's
// block outputs), best of 5
static void bench(void) {
    const int64_t n = 4096, F = 384;
    float *x = make_rows(n, F, 9, 0.1f, 1.0f);
    struct stats s;
    AH_ASSERT(stats_init(&s, F) == 0);
    double best = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        stats_add_rows(&s, x, n);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double sec = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        best = sec < best ? sec : best;
    }
    printf("stats_add_rows: %.3f ns per element, %.0f rows of d=384 per second\n",
           best * 1e9 / (double)(n * F), (double)n / best);
    stats_free(&s);
    free(x);
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--bench")) {
        bench();
        return 0;
    }
    test_stats_one_pass_matches_two_pass();
    test_stats_split_calls_same_bits();
    test_stats_merge();
    test_stats_empty_and_single();
    test_stats_nonfinite_rows_skipped();
    test_stats_pack_roundtrip();
    test_stats_fold_any_arrival_order();
    if (!check_failures) printf("test_stats: all passed\n");
    return check_failures ? EXIT_FAILURE : EXIT_SUCCESS;
}
