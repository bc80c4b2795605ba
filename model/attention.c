// attention.c - the attention path of attention.h
#include "model/attention.h"

#include "model/ah.h"
#include "model/ops.h"

#include <cblas.h> // defines: cblas_sgemm
#include <math.h>
#include <string.h>

void attn_range(const struct attn_keys *k, int T, int i, int *lo, int *hi) {
    *lo = 0;
    *hi = k->mask == ATTN_FULL ? T : i + 1;
    if (k->mask == ATTN_SLIDING && i - k->window + 1 > 0) *lo = i - k->window + 1;
}

int64_t attn_scores_floats(int H, int T, int n_sets, bool taps_wanted) {
    int n = op_threads() < H ? op_threads() : H;
    return (taps_wanted ? (int64_t)H : n) * T * n_sets * T;
}

bool attn_taps_wanted(const struct attn_taps *t) {
    return t && (tap_wants(t->tp, t->scores) || tap_wants(t->tp, t->masked) ||
                 tap_wants(t->tp, t->probs));
}

// Queries go in blocks of QB rows; a block multiplies only the keys from its first row's first
// allowed key to its last row's last (the allowed range of every mask moves right with the row),
// so causal attention computes about half of the T x T scores and a window about T x (W + QB).
#define QB 64

// keys [*k0, *k1) of set k that rows [i0, i1) read
static void span(const struct attn_keys *k, int T, int i0, int i1, int *k0, int *k1) {
    int lo, hi;
    attn_range(k, T, i0, k0, &hi);
    attn_range(k, T, i1 - 1, &lo, k1);
}

// scores of head h, set s, rows [i0, i1), keys [k0, k1) into att (h - h0, T, S*T)
static void score_block(const struct attn *a, int h, int h0, int s, int i0, int i1, int k0, int k1,
                        float *att) {
    if (k1 <= k0) return;
    int T = a->T, D = a->D, ST = a->n_sets * T, g = h / (a->H / a->KV);
    const struct attn_keys *ks = &a->set[s];
    float *c = att + ((int64_t)(h - h0) * T + i0) * ST + s * T + k0, cap = a->softcap;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, i1 - i0, k1 - k0, D, a->scale,
                a->q + (int64_t)i0 * a->ldq + h * D, a->ldq, ks->k + (int64_t)k0 * ks->ld + g * D,
                ks->ld, 0.0f, c, ST);
    for (int r = 0; cap > 0.0f && r < i1 - i0; r++)
        for (int j = 0; j < k1 - k0; j++)
            c[(int64_t)r * ST + j] = cap * tanhf(c[(int64_t)r * ST + j] / cap);
}

// scores of heads [h0, h1): att (h1 - h0, T, S*T) = scale * q_h . k_{set, h / rep}^T on each
// query block's key span; the keys outside it (blocked for every row of the block) only if
// `full`, in calls of their own, so that the allowed scores are the same bits either way
static void scores(const struct attn *a, int h0, int h1, bool full, float *att, int nt) {
    int T = a->T;
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(dynamic, 1)
    for (int h = h0; h < h1; h++)
        for (int s = 0; s < a->n_sets; s++)
            for (int i0 = 0; i0 < T; i0 += QB) {
                int i1 = i0 + QB < T ? i0 + QB : T, k0, k1;
                span(&a->set[s], T, i0, i1, &k0, &k1);
                score_block(a, h, h0, s, i0, i1, k0, k1, att);
                if (!full) continue;
                score_block(a, h, h0, s, i0, i1, 0, k0, att);
                score_block(a, h, h0, s, i0, i1, k1, T, att);
            }
}

// blocked keys of `rows` rows (T, S*T) each become -inf (the softmax reads only
// allowed keys)
static void mask_rows(const struct attn *a, float *att, int64_t rows, int nt) {
    int T = a->T, ST = a->n_sets * T;
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
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

// one softmax a row over the allowed keys of every set; blocked keys become 0: all of them if
// `whole` (the probabilities' view), else only those in the query block's key spans (what mix()
// reads). Rows go OP_SOFTMAX_ROWS at a time (their sums side by side: the same bits).
static void softmax_rows(const struct attn *a, float *att, int64_t rows, bool whole, int nt) {
    int T = a->T, ST = a->n_sets * T;
    int64_t groups = (rows + OP_SOFTMAX_ROWS - 1) / OP_SOFTMAX_ROWS;
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (int64_t g = 0; g < groups; g++) {
        int64_t r0 = g * OP_SOFTMAX_ROWS;
        int n = rows - r0 < OP_SOFTMAX_ROWS ? (int)(rows - r0) : OP_SOFTMAX_ROWS;
        int lo[2][OP_SOFTMAX_ROWS] = {{0}}, hi[2][OP_SOFTMAX_ROWS] = {{0}};
        for (int k = 0; k < n; k++)
            for (int s = 0; s < a->n_sets; s++) {
                attn_range(&a->set[s], T, (int)((r0 + k) % T), &lo[s][k], &hi[s][k]);
                lo[s][k] += s * T, hi[s][k] += s * T;
            }
        if (whole) {
            for (int k = 0; k < n; k++)
                op_softmax_ranges(att + (r0 + k) * ST, ST, lo[0][k], hi[0][k], lo[1][k], hi[1][k]);
            continue;
        }
        op_softmax_within_rows(att + r0 * ST, ST, n, lo[0], hi[0], lo[1], hi[1]);
        for (int k = 0; k < n; k++) {
            int i = (int)((r0 + k) % T), i0 = i / QB * QB, i1 = i0 + QB < T ? i0 + QB : T, k0, k1;
            float *row = att + (r0 + k) * ST;
            for (int s = 0; s < a->n_sets; s++) {
                span(&a->set[s], T, i0, i1, &k0, &k1);
                memset(row + s * T + k0, 0, (size_t)(lo[s][k] - s * T - k0) * sizeof(float));
                memset(row + hi[s][k], 0, (size_t)(s * T + k1 - hi[s][k]) * sizeof(float));
            }
        }
    }
}

// softmax of one row over the allowed entries [lo[s], hi[s]) and the sink logit: the row's
// probabilities (the sink's column dropped); returns the sink's share
static float sink_row(float *row, const int *lo, const int *hi, int S, float sink) {
    float mx = sink, sum = 0.0f;
    for (int s = 0; s < S; s++)
        mx = op_max_from(row + lo[s], hi[s] - lo[s], mx);
    for (int s = 0; s < S; s++)
        op_exp_minus(row + lo[s], hi[s] - lo[s], mx);
    for (int s = 0; s < S; s++)
        for (int j = lo[s]; j < hi[s]; j++)
            sum += row[j];
    float es = expf(sink - mx), inv = 1.0f / (sum + es);
    for (int s = 0; s < S; s++)
        for (int j = lo[s]; j < hi[s]; j++)
            row[j] *= inv;
    return es * inv;
}

// softmax_rows with the sinks: rows of heads from h0 on; blocked keys become 0 (all of them if
// `whole`, else those in the query block's key spans), each row's sink share into a->sink_p
static void sink_rows(const struct attn *a, float *att, int h0, int64_t rows, bool whole, int nt) {
    int T = a->T, ST = a->n_sets * T;
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        int i = (int)(r % T), h = h0 + (int)(r / T), i0 = i / QB * QB;
        int i1 = i0 + QB < T ? i0 + QB : T, lo[2] = {0, 0}, hi[2] = {0, 0}, k0 = 0, k1 = ST;
        float *row = att + r * ST;
        for (int s = 0; s < a->n_sets; s++) {
            attn_range(&a->set[s], T, i, &lo[s], &hi[s]);
            lo[s] += s * T, hi[s] += s * T;
        }
        float share = sink_row(row, lo, hi, a->n_sets, a->sinks[h]);
        if (a->sink_p) a->sink_p[(int64_t)h * T + i] = share;
        for (int s = 0; s < a->n_sets; s++) {
            if (!whole) span(&a->set[s], T, i0, i1, &k0, &k1);
            int b0 = whole ? s * T : s * T + k0, b1 = whole ? (s + 1) * T : s * T + k1;
            memset(row + b0, 0, (size_t)(lo[s] - b0) * sizeof(float));
            memset(row + hi[s], 0, (size_t)(b1 - hi[s]) * sizeof(float));
        }
    }
}

// the softmax of rows of heads from h0 on: with the sinks if the attention has them
static void softmax_heads(const struct attn *a, float *att, int h0, int64_t rows, bool whole,
                          int nt) {
    if (a->sinks)
        sink_rows(a, att, h0, rows, whole, nt);
    else
        softmax_rows(a, att, rows, whole, nt);
}

// out_h = sum over sets of P_{h, set} . v_{set, h / rep}, over each query
// block's key span (P is 0 outside it)
static void mix(const struct attn *a, int h0, int h1, const float *att, int nt) {
    int T = a->T, D = a->Dv ? a->Dv : a->D, S = a->n_sets, rep = a->H / a->KV, ST = S * T;
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(dynamic, 1)
    for (int h = h0; h < h1; h++)
        for (int s = 0; s < S; s++)
            for (int i0 = 0; i0 < T; i0 += QB) {
                const struct attn_keys *ks = &a->set[s];
                int i1 = i0 + QB < T ? i0 + QB : T, k0, k1, ldv = a->ldv ? a->ldv : ks->ld;
                span(ks, T, i0, i1, &k0, &k1);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, i1 - i0, D, k1 - k0, 1.0f,
                            att + ((int64_t)(h - h0) * T + i0) * ST + s * T + k0, ST,
                            ks->v + (int64_t)k0 * ldv + (h / rep) * D, ldv, s ? 1.0f : 0.0f,
                            a->out + (int64_t)i0 * a->ldo + h * D, a->ldo);
            }
}

// all heads at once into att (H, T, S*T), each stage handed to the taps that want it
static void all_heads(const struct attn *a, const struct attn_taps *taps, float *att, int nt) {
    const struct tap *tp = taps->tp;
    int T = a->T, H = a->H;
    struct tview v = {att, TAP_F32, 4, {1, H, T, (int64_t)a->n_sets * T}};
    scores(a, 0, H, tap_wants(tp, taps->scores), att, nt);
    tap_emit(tp, taps->scores, taps->b, &v);
    if (tap_wants(tp, taps->masked)) {
        mask_rows(a, att, (int64_t)H * T, nt);
        tap_emit(tp, taps->masked, taps->b, &v);
    }
    softmax_heads(a, att, 0, (int64_t)H * T, tap_wants(tp, taps->probs), nt);
    tap_emit(tp, taps->probs, taps->b, &v);
    mix(a, 0, H, att, nt);
}

void attn_forward(const struct attn *a, const struct attn_taps *taps, float *att) {
    AH_ASSERT(a->n_sets >= 1 && a->n_sets <= 2 && a->KV >= 1 && a->H % a->KV == 0);
    bool keep = attn_taps_wanted(taps);
    int64_t slice = (int64_t)a->T * a->n_sets * a->T;                       // one head's scores
    int64_t room = a->att_floats ? a->att_floats / slice : keep ? a->H : 1; // slices att holds
    AH_ASSERT(room >= (keep ? a->H : 1));
    int nt = op_threads() < a->H ? op_threads() : a->H, blas;
    if (keep) {
        blas = op_blas_serial(nt);
        all_heads(a, taps, att, nt);
        op_blas_restore(nt, blas);
        return;
    }
    nt = nt < room ? nt : (int)room; // one head at a time on each thread, in its own slice
    blas = op_blas_serial(nt);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(dynamic, 1)
    for (int h = 0; h < a->H; h++) {
        float *mine = att + op_thread_id() * slice;
        scores(a, h, h + 1, false, mine, 1);
        softmax_heads(a, mine, h, a->T, false, 1);
        mix(a, h, h + 1, mine, 1);
    }
    op_blas_restore(nt, blas);
}
