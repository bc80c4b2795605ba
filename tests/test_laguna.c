// test_laguna.c - Laguna pieces before its forward pass: the RoPE tables against the values
// tests/ref/laguna-forward.md 3.3 computes (float64 re-implementation of HF's YaRN), and the router
// against its naive twin and its identities.
#include "model/laguna.h"
#include "tests/check.h"

#include <stdlib.h>
#include <string.h>

static struct laguna_rope yarn(double factor, int l0, double beta_fast, double partial) {
    return (struct laguna_rope){
        LAGUNA_ROPE_YARN, 500000.0, partial, factor, 0.1 * log(factor) + 1.0,
        beta_fast,        1.0,      l0,      false};
}

// |got - want| <= rel * |want|
static void near(const char *what, double got, double want, double rel) {
    if (!(fabs(got - want) <= rel * fabs(want))) {
        fprintf(stderr, "%s: got %.9g, want %.9g\n", what, got, want);
        check_failures++;
    }
}

static void test_rope_tables_match_the_spec(void) {
    struct {
        const char *name;
        struct laguna_rope r;
        double low, high, last;
    } c[] = {
        {"XS-2.1", yarn(32, 8192, 64, 0.5), 7, 18, 9.418e-08},
        {"XS.2", yarn(64, 4096, 64, 0.5), 5, 16, 4.709e-08},
        {"S-2.1", yarn(128, 8192, 32, 0.5), 9, 18, 2.355e-08},
        {"M.1", yarn(64, 4096, 64, 1.0), 11, 32, 3.836e-08},
    };
    float f[64], A;
    double lo, hi;
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        int d = laguna_rope_inv_freq(&c[i].r, 128, f, &A, &lo, &hi);
        CHECK_EQ(d, c[i].r.partial == 1.0 ? 128 : 64);
        CHECK(lo == c[i].low && hi == c[i].high);
        near(c[i].name, f[d / 2 - 1], c[i].last, 2e-3);
        near("A", A, c[i].r.attention_factor, 1e-6);
        if (d == 64) { // XS/S full layers: inv_freq[0..3]
            const double want[4] = {1.0, 0.6636012, 0.4403666, 0.2922278};
            for (int j = 0; j < 4; j++)
                near("inv_freq[0..3]", f[j], want[j], 1e-6);
        } else {
            near("M.1 inv_freq[1]", f[1], 0.8146172, 1e-6);
        }
    }
    // "truncate": false (transformers' find_correction_range): the bounds stay unrounded
    struct laguna_rope u = yarn(32, 8192, 64, 0.5);
    u.no_truncate = true;
    laguna_rope_inv_freq(&u, 128, f, &A, &lo, &hi);
    near("unrounded low", lo, 7.350269120455311, 1e-12);
    near("unrounded high", hi, 17.492059500736204, 1e-12);
    near("inv_freq[8] unrounded", f[8], 0.035272099501666765, 1e-6); // 0.0342941 rounded
    near("inv_freq[12] unrounded", f[12], 0.0040536632219163584, 1e-6);
    struct laguna_rope s = {LAGUNA_ROPE_DEFAULT, 10000.0, 1.0, 1, 1, 32, 1, 0, false};
    int d = laguna_rope_inv_freq(&s, 128, f, &A, &lo, &hi);
    CHECK_EQ(d, 128);
    CHECK(A == 1.0f);
    near("sliding inv_freq[1]", f[1], 0.8659643, 1e-6);
    near("sliding last", f[63], 1.1548e-04, 1e-3);
}

// K = 80: more than the 64 slots the router once had
static void test_router_matches_naive_and_identities(int K) {
    enum { E = 256, KMAX = 96 };
    float z[E], bias[E], w[KMAX], wr[KMAX];
    int64_t idx[KMAX], ir[KMAX];
    for (int round = 0; round < 50; round++) {
        check_fill(z, E, 100 + round);
        check_fill(bias, E, 200 + round);
        for (int e = 0; e < E; e++)
            z[e] *= 6.0f, bias[e] *= 0.05f;
        if (round % 5 == 0) z[17] = z[3]; // a tie
        laguna_route(idx, w, z, round % 2 ? bias : NULL, E, K);
        laguna_route_ref(ir, wr, z, round % 2 ? bias : NULL, E, K);
        double sum = 0;
        for (int j = 0; j < K; j++) {
            CHECK_EQ(idx[j], ir[j]);
            sum += (double)w[j];
        }
        check_close("expert weights", w, wr, K, 1e-6f, 1e-5f);
        CHECK(fabs(sum - 1.0) < 1e-6); // renormalised
        for (int j = 1; j < K; j++) {  // sorted by the biased score, largest first
            double a = 1 / (1 + exp(-(double)z[idx[j - 1]])) +
                       (round % 2 ? (double)bias[idx[j - 1]] : 0.0);
            double b = 1 / (1 + exp(-(double)z[idx[j]])) + (round % 2 ? (double)bias[idx[j]] : 0.0);
            CHECK(a >= b);
        }
    }
    // the bias changes the choice, never the weights of the chosen
    float zb[4] = {0.0f, 1.0f, 2.0f, 3.0f}, bb[4] = {10.0f, 0.0f, 0.0f, 0.0f};
    laguna_route(idx, w, zb, bb, 4, 2);
    CHECK(idx[0] == 0 && idx[1] == 3);
    float p0 = 0.5f, p3 = 1.0f / (1.0f + expf(-3.0f));
    CHECK(fabsf(w[0] - p0 / (p0 + p3)) < 1e-6f && fabsf(w[1] - p3 / (p0 + p3)) < 1e-6f);
}

// XS-2.1's shape: 48 query heads on full blocks (every fourth), 64 on sliding ones; one dense block
static void test_catalogue_axes_are_per_block(void) {
    enum { L = 8 };
    int heads[L];
    bool sliding[L], dense[L];
    for (int i = 0; i < L; i++) {
        sliding[i] = i % 4 != 0;
        heads[i] = sliding[i] ? 64 : 48;
        dense[i] = i == 0;
    }
    struct laguna_config c = {.n_layer = L,
                              .hidden = 2048,
                              .vocab = 100352,
                              .n_kv_head = 8,
                              .head_dim = 128,
                              .dense_ffn = 8192,
                              .expert_ffn = 512,
                              .shared_ffn = 512,
                              .n_expert = 256,
                              .top_k = 8,
                              .n_head = heads,
                              .sliding = sliding,
                              .dense = dense};
    int n = laguna_n_taps(&c);
    CHECK_EQ(n, 7 + 14 * L + 3 + 7 * (L - 1));
    struct tap_desc *d = calloc((size_t)n, sizeof *d);
    laguna_catalogue(&c, d);
    int seen_q = 0;
    for (int i = 0; i < n; i++) {
        CHECK(i == 0 || d[i].block >= d[i - 1].block); // forward order
        for (int k = 1; k < d[i].ndim; k++) {
            enum tap_axis_kind kind = tap_axis_kind(d[i].axes[k]);
            if (kind == TAP_AXIS_FIXED) CHECK(laguna_axis_size(&c, d[i].block, d[i].axes[k]) > 0);
        }
        if (strstr(d[i].name, ".attention_queries")) {
            CHECK_EQ(laguna_axis_size(&c, d[i].block, "num_heads"), d[i].block % 4 ? 64 : 48);
            seen_q++;
        }
    }
    CHECK_EQ(seen_q, L);
    CHECK(!strcmp(d[0].name, "input_ids") && d[0].dtype == TAP_I64);
    CHECK(!strcmp(d[n - 1].name, "next_token_probs"));
    CHECK_EQ(laguna_axis_size(&c, -1, "num_heads"), -1); // no block, no head count
    free(d);
}

int main(void) {
    test_catalogue_axes_are_per_block();
    test_rope_tables_match_the_spec();
    test_router_matches_naive_and_identities(10);
    test_router_matches_naive_and_identities(80);
    return check_failures ? EXIT_FAILURE : EXIT_SUCCESS;
}
