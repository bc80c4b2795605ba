// test_sae_kernel.c - model/sae.c against its naive twins (double accumulation, the TopK selection
// by a full sort of the row) on seeded random SAEs of odd shapes: every architecture, every input
// normalisation, b_dec subtracted or not, W_enc in either layout, TopK on pre or relu(pre).
//   sae_pre     within 1e-4 of sae_pre_ref (one sgemm against a double sum)
//   sae_count   and sae_fill on the same pre: the same counts, indices and values exactly
//   sae_decode  within 1e-4 of sae_decode_ref
// Ties: a row of equal values keeps the k smallest indices, and relu_first ranks every negative
// as 0 (the smallest indices among them win); a NaN ranks last. The fill and the decode give the
// same bits at 1 and 3 threads.
#include "model/ops.h"
#include "model/sae.h"
#include "tests/check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct case_sae {
    struct sae s;
    float *w; // owned: every tensor of s
};

static struct case_sae make_sae(int64_t C, int64_t L, uint64_t seed) {
    struct case_sae c = {0};
    int64_t n = 2 * C * L + 2 * L + C;
    c.w = malloc((size_t)n * sizeof *c.w);
    check_fill(c.w, n, seed);
    c.s.d_in = C, c.s.d_sae = L;
    c.s.W_enc = c.w, c.s.W_dec = c.w + C * L, c.s.b_enc = c.w + 2 * C * L;
    c.s.threshold = c.s.b_enc + L, c.s.b_dec = c.s.threshold + L;
    // shift the biases down and the thresholds into [0, 0.5): some latents fire, some do not
    for (int64_t j = 0; j < L; j++)
        c.w[2 * C * L + j] -= 0.5f, c.w[2 * C * L + L + j] = fabsf(c.s.threshold[j]) * 0.5f;
    return c;
}

static void check_one(const struct sae *s, int64_t N, uint64_t seed, const char *what) {
    int64_t C = s->d_in, L = s->d_sae;
    float *x = malloc((size_t)(N * C) * sizeof *x), *u = malloc((size_t)(N * C) * sizeof *u);
    float *pre = malloc((size_t)(N * L) * sizeof *pre), *pre_r = malloc((size_t)(N * L) * 4);
    float *no = malloc((size_t)(2 * N) * sizeof *no), *no_r = malloc((size_t)(2 * N) * 4);
    int64_t *ip = malloc((size_t)(N + 1) * sizeof *ip);
    int32_t *idx = malloc((size_t)(N * L) * 4), *idx_r = malloc((size_t)(N * L) * 4);
    float *val = malloc((size_t)(N * L) * 4), *val_r = malloc((size_t)(N * L) * 4);
    float *y = malloc((size_t)(N * C) * 4), *y_r = malloc((size_t)(N * C) * 4);
    check_fill(x, N * C, seed);
    for (int64_t i = 0; i < N * C; i++)
        x[i] = x[i] * 3.0f + 0.25f; // a mean and a scale for the normalisations to remove
    sae_pre(pre, u, no, x, s, N);
    sae_pre_ref(pre_r, no_r, x, s, N);
    fprintf(stderr, "%s\n", what);
    check_close("pre", pre, pre_r, N * L, 1e-4f, 1e-4f);
    if (s->norm != SAE_NORM_NONE) check_close("norm_out", no, no_r, 2 * N, 1e-5f, 1e-5f);
    sae_count(ip, pre_r, s, N);
    int64_t nnz = ip[N];
    for (int64_t r = 0; r < N; r++) {
        int64_t want = 0;
        for (int64_t j = 0; j < L; j++)
            want += pre_r[r * L + j] > 0.0f &&
                    (s->arch != SAE_JUMPRELU || pre_r[r * L + j] > s->threshold[j]);
        CHECK_EQ(ip[r + 1] - ip[r], s->arch == SAE_TOPK ? s->k : want);
    }
    sae_fill(idx, val, ip, pre_r, s, N);
    sae_fill_ref(idx_r, val_r, ip, pre_r, s, N);
    CHECK(memcmp(idx, idx_r, (size_t)nnz * 4) == 0);
    CHECK(memcmp(val, val_r, (size_t)nnz * 4) == 0);
    for (int64_t r = 0; r < N; r++)
        for (int64_t e = ip[r] + 1; e < ip[r + 1]; e++)
            CHECK(idx[e - 1] < idx[e]); // increasing index within a row
    sae_decode(y, ip, idx, val, no_r, s, N);
    sae_decode_ref(y_r, ip, idx, val, no_r, s, N);
    check_close("decode", y, y_r, N * C, 1e-4f, 1e-4f);
    // the same bits at another thread count
    op_set_threads(3);
    int32_t *idx3 = malloc((size_t)(nnz + 1) * 4);
    float *val3 = malloc((size_t)(nnz + 1) * 4), *y3 = malloc((size_t)(N * C) * 4);
    sae_fill(idx3, val3, ip, pre_r, s, N);
    sae_decode(y3, ip, idx3, val3, no_r, s, N);
    CHECK(memcmp(idx3, idx, (size_t)nnz * 4) == 0 && memcmp(y3, y, (size_t)(N * C) * 4) == 0);
    op_set_threads(1);
    free(idx3), free(val3), free(y3);
    free(x), free(u), free(pre), free(pre_r), free(no), free(no_r), free(ip);
    free(idx), free(idx_r), free(val), free(val_r), free(y), free(y_r);
}

static void test_sae_matches_ref(void) {
    static const char *const arch_names[] = {"relu", "jumprelu", "topk"};
    static const char *const norm_names[] = {"none", "constant", "layer"};
    struct case_sae c = make_sae(37, 301, 7);
    uint64_t seed = 100;
    for (int a = 0; a < 3; a++)
        for (int nm = 0; nm < 3; nm++)
            for (int v = 0; v < 4; v++) {
                struct sae s = c.s;
                s.arch = (enum sae_arch)a, s.norm = (enum sae_norm)nm;
                s.b_dec_in = v & 1, s.enc_t = (v >> 1) & 1;
                s.relu_first = s.enc_t; // sparsify's layout and its selection together
                s.k = a == SAE_TOPK ? (v == 3 ? 290 : 5) : 0; // 290: many ties at zero
                char what[160];
                snprintf(what, sizeof what, "arch %s norm %s b_dec_in %d enc_t %d k %d",
                         arch_names[a], norm_names[nm], s.b_dec_in, s.enc_t, s.k);
                check_one(&s, 19, seed++, what);
                check_one(&s, 301, seed++, what); // enough rows to split over threads
            }
    free(c.w);
}

static void test_sae_topk_ties(void) {
    struct sae s = {.arch = SAE_TOPK, .d_in = 1, .d_sae = 8, .k = 3};
    int64_t ip[3];
    int32_t idx[6];
    float val[6];
    float pre[16] = {1,  2,  2,  2,  2,   0,  2,  1,   // row 0: four 2s
                     -3, -1, -2, -1, NAN, -5, -1, -4}; // row 1: negatives, a NaN
    sae_count(ip, pre, &s, 2);
    sae_fill(idx, val, ip, pre, &s, 2);
    CHECK(idx[0] == 1 && idx[1] == 2 && idx[2] == 3); // the smallest indices of the tie
    CHECK(val[0] == 2.0f && val[2] == 2.0f);
    CHECK(idx[3] == 1 && idx[4] == 3 && idx[5] == 6); // the three -1s (relu'd to 0)
    CHECK(val[3] == 0.0f && val[5] == 0.0f);
    s.relu_first = true; // every negative and the NaN rank as 0: indices 0, 1, 2
    sae_fill(idx, val, ip, pre, &s, 2);
    CHECK(idx[3] == 0 && idx[4] == 1 && idx[5] == 2);
    int32_t idx_r[6];
    float val_r[6];
    sae_fill_ref(idx_r, val_r, ip, pre, &s, 2);
    CHECK(memcmp(idx, idx_r, sizeof idx) == 0);
}

int main(void) {
    op_set_threads(1);
    test_sae_matches_ref();
    test_sae_topk_ties();
    return check_failures ? EXIT_FAILURE : EXIT_SUCCESS;
}
