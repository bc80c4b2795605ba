// test_attention.c - model/attention.h against a float64 attention written from the definitions:
// masks (causal, sliding, full), GQA head sharing, two key sets under one softmax, the soft-cap,
// and the tap views (-inf exactly where blocked, probabilities 0 there and summing to 1); heads
// over two threads give the one-thread bits; attention sinks (gpt-oss).
#include "model/attention.h"
#include "model/ops.h"
#include "tests/check.h"

#include <cblas.h> // defines: openblas_set_num_threads
#include <stdlib.h>
#include <string.h>

#define TMAX 150 // past two blocks of query rows (model/attention.c's QB)
#define HMAX 4
#define DMAX 8

static float rnd(unsigned *s) {
    *s = *s * 1103515245u + 12345u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

// out (T, H*D) in float64 from the definitions
static void attn_ref(const struct attn *a, float *out) {
    int T = a->T, D = a->D, S = a->n_sets, rep = a->H / a->KV;
    double p[2 * TMAX];
    for (int h = 0; h < a->H; h++)
        for (int i = 0; i < T; i++) {
            double mx = -(double)INFINITY, sum = 0.0;
            for (int s = 0; s < S; s++)
                for (int j = 0; j < T; j++) {
                    const float *k = a->set[s].k + (int64_t)j * a->set[s].ld + (h / rep) * D;
                    double x = 0.0;
                    for (int d = 0; d < D; d++)
                        x += (double)a->q[(int64_t)i * a->ldq + h * D + d] * (double)k[d];
                    double cap = a->softcap;
                    x *= (double)a->scale;
                    if (cap > 0) x = cap * tanh(x / cap);
                    bool ok =
                        a->set[s].mask == ATTN_FULL ||
                        (j <= i && (a->set[s].mask == ATTN_CAUSAL || i - j < a->set[s].window));
                    p[s * T + j] = ok ? x : -(double)INFINITY;
                    mx = p[s * T + j] > mx ? p[s * T + j] : mx;
                }
            double sink = a->sinks ? (double)a->sinks[h] : -(double)INFINITY;
            mx = sink > mx ? sink : mx;
            for (int j = 0; j < S * T; j++)
                sum += p[j] = exp(p[j] - mx);
            sum += exp(sink - mx); // the sink's column, dropped after the softmax (gpt-oss)
            if (a->sink_p) a->sink_p[(int64_t)h * T + i] = (float)(exp(sink - mx) / sum);
            for (int d = 0; d < D; d++) {
                double y = 0.0;
                for (int s = 0; s < S; s++)
                    for (int j = 0; j < T; j++)
                        y += p[s * T + j] / sum *
                             (double)a->set[s].v[(int64_t)j * a->set[s].ld + (h / rep) * D + d];
                out[(int64_t)i * a->ldo + h * D + d] = (float)y;
            }
        }
}

static float seen[3][HMAX * TMAX * 2 * TMAX]; // the views of the scores, masked, probs taps

static void take(void *u, int id, int b, const struct tview *v) {
    (void)u, (void)b;
    CHECK(v->dtype == TAP_F32 && v->ndim == 4 && v->dims[0] == 1);
    memcpy(seen[id], v->data, (size_t)(v->dims[1] * v->dims[2] * v->dims[3]) * sizeof(float));
}

// the masked view is -inf exactly where blocked; probabilities are 0 there and sum to 1 a row
static void check_views(const struct attn *a) {
    int T = a->T, ST = a->n_sets * T;
    for (int64_t r = 0; r < (int64_t)a->H * T; r++) {
        int i = (int)(r % T);
        double sum = 0.0;
        for (int c = 0; c < ST; c++) {
            bool ok = attn_allowed(&a->set[c / T], T, i, c % T);
            float m = seen[1][r * ST + c], p = seen[2][r * ST + c];
            CHECK(ok ? isfinite(m) && m == seen[0][r * ST + c] : m == -INFINITY);
            CHECK(ok ? p > 0.0f : p == 0.0f);
            CHECK(isfinite(seen[0][r * ST + c]));
            sum += (double)p;
        }
        CHECK(fabs(sum - 1.0) < 1e-5);
    }
}

// one configuration, with and without taps: both equal the reference, and to each other bit
// for bit
static void run(int T, int H, int KV, int S, enum attn_mask m0, enum attn_mask m1, int W,
                float softcap) {
    static float q[TMAX * HMAX * DMAX], kv[4][TMAX * HMAX * DMAX], att[HMAX * TMAX * 2 * TMAX];
    static float out[TMAX * HMAX * DMAX], out2[TMAX * HMAX * DMAX], want[TMAX * HMAX * DMAX];
    unsigned seed = (unsigned)(T * 131 + H * 17 + S * 7 + W + (int)m0 * 3 + (int)m1);
    int D = DMAX, ld = KV * D + 3; // a row stride past the heads, as a packed buffer may have
    for (int i = 0; i < TMAX * HMAX * DMAX; i++) {
        q[i] = 2.0f * rnd(&seed);
        for (int s = 0; s < 4; s++)
            kv[s][i] = 2.0f * rnd(&seed);
    }
    struct attn a = {.T = T,
                     .H = H,
                     .KV = KV,
                     .D = D,
                     .scale = 0.35f,
                     .softcap = softcap,
                     .n_sets = S,
                     .q = q,
                     .ldq = H * D,
                     .out = out,
                     .ldo = H * D};
    a.set[0] = (struct attn_keys){kv[0], kv[1], ld, m0, W};
    a.set[1] = (struct attn_keys){kv[2], kv[3], ld, m1, W};
    attn_ref(&a, want);
    attn_forward(&a, NULL, att);
    check_close("attention", out, want, (int64_t)T * H * D, 1e-5f, 1e-4f);

    uint8_t all[3] = {1, 1, 1};
    struct tap tp = {all, take, NULL, NULL, NULL, false};
    struct attn_taps taps = {&tp, 0, 0, 1, 2};
    CHECK(attn_taps_wanted(&taps) && attn_scores_floats(H, T, S, true) == (int64_t)H * T * S * T);
    a.out = out2;
    attn_forward(&a, &taps, att);
    CHECK(!memcmp(out, out2, (size_t)T * H * D * sizeof(float)));
    check_views(&a);

    // heads over 2 threads, each sgemm on one: the same bits (with and without the taps)
    int was = op_threads();
    op_set_threads(2);
    a.att_floats = attn_scores_floats(H, T, S, false);
    CHECK(a.att_floats == (int64_t)(H < 2 ? H : 2) * T * S * T);
    attn_forward(&a, NULL, att);
    CHECK(!memcmp(out, out2, (size_t)T * H * D * sizeof(float)));
    memset(seen, 0, sizeof seen);
    a.att_floats = attn_scores_floats(H, T, S, true);
    attn_forward(&a, &taps, att);
    CHECK(!memcmp(out, out2, (size_t)T * H * D * sizeof(float)));
    check_views(&a);
    op_set_threads(was);
}

// attention sinks (gpt-oss): a logit per head in every row's denominator, its column dropped.
// Against the reference (outputs and sink shares); with the taps the probabilities plus the
// share sum to 1 a row and the outputs are the same bits; 2 threads give the 1-thread bits; the
// sinks change the outputs (a forward that ignored them would fail the first check).
static void test_sinks(int T, int H, int KV, enum attn_mask m, int W) {
    static float q[TMAX * HMAX * DMAX], k[TMAX * HMAX * DMAX], v[TMAX * HMAX * DMAX];
    static float att[HMAX * TMAX * TMAX], out[TMAX * HMAX * DMAX], out2[TMAX * HMAX * DMAX];
    static float want[TMAX * HMAX * DMAX], nosink[TMAX * HMAX * DMAX];
    static float share[HMAX * TMAX], share2[HMAX * TMAX], share_ref[HMAX * TMAX];
    float sinks[HMAX] = {0.3f, 5.0f, -2.0f, 1.0f}; // head 1's sink takes most of each row
    unsigned seed = (unsigned)(T * 7 + H + W);
    int D = DMAX;
    for (int i = 0; i < TMAX * HMAX * DMAX; i++) {
        q[i] = 2.0f * rnd(&seed);
        k[i] = 2.0f * rnd(&seed);
        v[i] = 2.0f * rnd(&seed);
    }
    struct attn a = {.T = T, .H = H, .KV = KV, .D = D, .scale = 0.35f, .n_sets = 1, .q = q};
    a.ldq = a.ldo = H * D;
    a.set[0] = (struct attn_keys){k, v, KV * D, m, W};
    a.out = nosink;
    attn_forward(&a, NULL, att);
    a.sinks = sinks;
    a.sink_p = share_ref;
    attn_ref(&a, want);
    a.out = out;
    a.sink_p = share;
    attn_forward(&a, NULL, att);
    check_close("sink attention", out, want, (int64_t)T * H * D, 1e-5f, 1e-4f);
    check_close("sink shares", share, share_ref, (int64_t)T * H, 1e-6f, 1e-5f);
    double diff = 0.0;
    for (int64_t i = 0; i < (int64_t)T * H * D; i++)
        diff = fmax(diff, fabs((double)out[i] - (double)nosink[i]));
    CHECK(diff > 1e-2); // the sinks matter

    uint8_t all[3] = {1, 1, 1};
    struct tap tp = {all, take, NULL, NULL, NULL, false};
    struct attn_taps taps = {&tp, 0, 0, 1, 2};
    a.out = out2;
    a.sink_p = share2;
    attn_forward(&a, &taps, att);
    CHECK(!memcmp(out, out2, (size_t)T * H * D * sizeof(float)));
    CHECK(!memcmp(share, share2, (size_t)T * H * sizeof(float)));
    for (int64_t r = 0; r < (int64_t)H * T; r++) {
        double sum = share2[r];
        for (int c = 0; c < T; c++) {
            float p = seen[2][r * T + c];
            CHECK(attn_allowed(&a.set[0], T, (int)(r % T), c) ? p > 0.0f : p == 0.0f);
            sum += (double)p;
        }
        CHECK(fabs(sum - 1.0) < 1e-5);
    }
    int was = op_threads();
    op_set_threads(2);
    a.att_floats = attn_scores_floats(H, T, 1, false);
    a.sink_p = share2;
    attn_forward(&a, NULL, att);
    CHECK(!memcmp(out, out2, (size_t)T * H * D * sizeof(float)));
    CHECK(!memcmp(share, share2, (size_t)T * H * sizeof(float)));
    op_set_threads(was);
}

static void test_ranges(void) {
    struct attn_keys c = {.mask = ATTN_CAUSAL}, w = {.mask = ATTN_SLIDING, .window = 3};
    struct attn_keys f = {.mask = ATTN_FULL};
    int lo, hi;
    attn_range(&c, 10, 4, &lo, &hi);
    CHECK(lo == 0 && hi == 5);
    attn_range(&w, 10, 4, &lo, &hi);
    CHECK(lo == 2 && hi == 5);
    attn_range(&w, 10, 1, &lo, &hi);
    CHECK(lo == 0 && hi == 2);
    attn_range(&f, 10, 4, &lo, &hi);
    CHECK(lo == 0 && hi == 10);
    CHECK(attn_allowed(&w, 10, 4, 2) && !attn_allowed(&w, 10, 4, 1) && !attn_allowed(&c, 10, 4, 5));
}

int main(void) {
    openblas_set_num_threads(1); // the one-thread bits the two-thread runs must equal
    test_ranges();
    run(TMAX, 4, 2, 1, ATTN_CAUSAL, ATTN_CAUSAL, 0, 0.0f);   // GQA, causal (Laguna full layers)
    run(13, 4, 2, 1, ATTN_CAUSAL, ATTN_CAUSAL, 0, 0.0f);     // one block of query rows
    run(TMAX, 4, 2, 1, ATTN_SLIDING, ATTN_CAUSAL, 40, 0.0f); // a window of 40
    run(TMAX, 4, 1, 1, ATTN_SLIDING, ATTN_CAUSAL, 4, 0.0f);  // one kv head, sliding window
    run(TMAX, 2, 2, 1, ATTN_FULL, ATTN_CAUSAL, 0, 0.0f);     // bidirectional
    run(TMAX, 3, 3, 2, ATTN_CAUSAL, ATTN_SLIDING, 5, 0.0f);  // the spec model's global + local
    run(TMAX, 4, 2, 1, ATTN_SLIDING, ATTN_CAUSAL, 3, 0.5f);  // soft-capped (Gemma 2)
    run(1, 2, 1, 2, ATTN_CAUSAL, ATTN_SLIDING, 1, 0.0f);     // one token
    test_sinks(TMAX, 4, 2, ATTN_CAUSAL, 0);                  // gpt-oss full layers
    test_sinks(TMAX, 4, 1, ATTN_SLIDING, 16);                // ... and its sliding ones
    test_sinks(1, 2, 2, ATTN_CAUSAL, 0);                     // one token
    return check_failures ? EXIT_FAILURE : EXIT_SUCCESS;
}
