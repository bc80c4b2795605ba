// attention.c - the attention path of attention.h
#include "model/attention.h"

#include "model/ah.h"
#include "model/ops.h"

#include <cblas.h> // defines: cblas_sgemm
#include <math.h>

void attn_range(const struct attn_keys *k, int T, int i, int *lo, int *hi) {
    *lo = 0;
    *hi = k->mask == ATTN_FULL ? T : i + 1;
    if (k->mask == ATTN_SLIDING && i - k->window + 1 > 0) *lo = i - k->window + 1;
}

int64_t attn_scores_floats(int H, int T, int n_sets, bool taps_wanted) {
    return (taps_wanted ? (int64_t)H : 1) * T * n_sets * T;
}

bool attn_taps_wanted(const struct attn_taps *t) {
    return t && (tap_wants(t->tp, t->scores) || tap_wants(t->tp, t->masked) ||
                 tap_wants(t->tp, t->probs));
}

// scores of heads [h0, h1): att (h1 - h0, T, S*T) = scale * q_h . k_{set, h / rep}^T
static void scores(const struct attn *a, int h0, int h1, float *att) {
    int T = a->T, D = a->D, S = a->n_sets, rep = a->H / a->KV, ST = S * T;
    for (int h = h0; h < h1; h++)
        for (int s = 0; s < S; s++) {
            const struct attn_keys *ks = &a->set[s];
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, D, a->scale, a->q + h * D,
                        a->ldq, ks->k + (h / rep) * D, ks->ld, 0.0f,
                        att + (int64_t)(h - h0) * T * ST + s * T, ST);
        }
    if (a->softcap > 0.0f)
        for (int64_t i = 0; i < (int64_t)(h1 - h0) * T * ST; i++)
            att[i] = a->softcap * tanhf(att[i] / a->softcap);
}

// blocked keys of `rows` rows (T, S*T) each become -inf (the softmax reads only allowed keys)
static void mask_rows(const struct attn *a, float *att, int64_t rows) {
    int T = a->T, ST = a->n_sets * T;
    for (int64_t r = 0; r < rows; r++) {
        float *row = att + r * ST;
        int i = (int)(r % T), lo, hi;
        for (int s = 0; s < a->n_sets; s++) {
            attn_range(&a->set[s], T, i, &lo, &hi);
            for (int j = 0; j < T; j++)
                if (j < lo || j >= hi) row[s * T + j] = -INFINITY;
        }
    }
}

// one softmax a row over the allowed keys of every set; blocked keys become 0
static void softmax_rows(const struct attn *a, float *att, int64_t rows) {
    int T = a->T, ST = a->n_sets * T, lo0, hi0, lo1 = 0, hi1 = 0;
    for (int64_t r = 0; r < rows; r++) {
        int i = (int)(r % T);
        attn_range(&a->set[0], T, i, &lo0, &hi0);
        if (a->n_sets == 2) {
            attn_range(&a->set[1], T, i, &lo1, &hi1);
            lo1 += T, hi1 += T;
        }
        op_softmax_ranges(att + r * ST, ST, lo0, hi0, lo1, hi1);
    }
}

// out_h = sum over sets of P_{h, set} . v_{set, h / rep}
static void mix(const struct attn *a, int h0, int h1, const float *att) {
    int T = a->T, D = a->D, S = a->n_sets, rep = a->H / a->KV, ST = S * T;
    for (int h = h0; h < h1; h++)
        for (int s = 0; s < S; s++) {
            const struct attn_keys *ks = &a->set[s];
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, D, T, 1.0f,
                        att + (int64_t)(h - h0) * T * ST + s * T, ST, ks->v + (h / rep) * D, ks->ld,
                        s ? 1.0f : 0.0f, a->out + h * D, a->ldo);
        }
}

void attn_forward(const struct attn *a, const struct attn_taps *taps, float *att) {
    AH_ASSERT(a->n_sets >= 1 && a->n_sets <= 2 && a->KV >= 1 && a->H % a->KV == 0);
    bool keep = attn_taps_wanted(taps);
    const struct tap *tp = taps ? taps->tp : NULL;
    int T = a->T, H = a->H;
    struct tview v = {att, TAP_F32, 4, {1, H, T, (int64_t)a->n_sets * T}};
    for (int h0 = 0; h0 < H; h0 += keep ? H : 1) {
        int h1 = keep ? H : h0 + 1;
        scores(a, h0, h1, att);
        if (keep) {
            tap_emit(tp, taps->scores, taps->b, &v);
            if (tap_wants(tp, taps->masked)) {
                mask_rows(a, att, (int64_t)H * T);
                tp->take(tp->u, taps->masked, taps->b, &v);
            }
        }
        softmax_rows(a, att, (int64_t)(h1 - h0) * T);
        if (keep) tap_emit(tp, taps->probs, taps->b, &v);
        mix(a, h0, h1, att);
    }
}
