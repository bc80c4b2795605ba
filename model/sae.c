// sae.c - a sparse autoencoder's encoding and decoding (see sae.h).
//   N = tokens, C = d_in, L = d_sae, K = latents a row (TopK)
#include "model/sae.h"

#include "model/ah.h"
#include "model/ops.h" // defines: op_matmul, op_matmul_kn, op_threads, OP_PAR_MIN

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

// threads for a loop over n rows of `work` floats each: one below OP_PAR_MIN in all
static int rows_threads(int64_t n, int64_t work) {
    return n * work >= OP_PAR_MIN ? op_threads() : 1;
}

// ----------------------------------------------------------------------------
// the input: normalised (SAELens run_time_activation_norm_fn_in), then b_dec subtracted

// u (C) from x (C); *mean, *scale: what decode applies (y * scale + mean)
static void norm_row(float *u, float *mean, float *scale, const float *x, const struct sae *s) {
    int64_t C = s->d_in;
    double mu = 0.0, sd = 1.0, f = 1.0; // u = (x - mu) * f
    if (s->norm == SAE_NORM_CONSTANT) {
        double ss = 0.0;
        for (int64_t c = 0; c < C; c++)
            ss += (double)x[c] * (double)x[c];
        f = sqrt((double)C) / sqrt(ss); // x_norm_coeff
        sd = 1.0 / f;
    } else if (s->norm == SAE_NORM_LAYER) {
        double sum = 0.0, ss = 0.0;
        for (int64_t c = 0; c < C; c++)
            sum += (double)x[c];
        mu = sum / (double)C;
        for (int64_t c = 0; c < C; c++)
            ss += ((double)x[c] - mu) * ((double)x[c] - mu);
        sd = sqrt(ss / (double)(C - 1)); // torch .std(): unbiased
        f = 1.0 / (sd + SAE_LN_EPS);
    }
    for (int64_t c = 0; c < C; c++) {
        double v = ((double)x[c] - mu) * f;
        u[c] = (float)(s->b_dec_in ? v - (double)s->b_dec[c] : v);
    }
    if (mean) *mean = (float)mu, *scale = (float)sd;
}

void sae_pre(float *pre, float *u, float *norm_out, const float *x, const struct sae *s,
             int64_t N) {
    int64_t C = s->d_in, L = s->d_sae;
    AH_ASSERT(N >= 0 && N <= INT_MAX && C > 0 && C <= INT_MAX && L > 0 && L <= INT_MAX);
    AH_ASSERT(s->norm == SAE_NORM_NONE || norm_out);
    if (N == 0) return;
    const float *in = x;
    if (s->norm != SAE_NORM_NONE || s->b_dec_in) {
        int nt = rows_threads(N, C);
#pragma omp parallel for num_threads(nt) schedule(static)
        for (int64_t r = 0; r < N; r++)
            norm_row(u + r * C, norm_out ? norm_out + 2 * r : NULL,
                     norm_out ? norm_out + 2 * r + 1 : NULL, x + r * C, s);
        in = u;
    }
    if (s->enc_t)
        op_matmul(pre, in, s->W_enc, (int)N, (int)C, (int)L); // W_enc (L, C)
    else
        op_matmul_kn(pre, in, s->W_enc, (int)N, (int)C, (int)L); // W_enc (C, L)
    int nt = rows_threads(N, L);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t r = 0; r < N; r++) {
        float *p = pre + r * L;
        for (int64_t j = 0; j < L; j++)
            p[j] += s->b_enc[j];
    }
}

// ----------------------------------------------------------------------------
// the nonlinearity: which latents a row stores

// RELU / JUMPRELU: latent j of a row is stored (with value pre) when this holds
static inline int fires(const struct sae *s, float p, int64_t j) {
    return p > 0.0f && (s->arch != SAE_JUMPRELU || p > s->threshold[j]);
}

// TOPK: the value rows are ranked by (a NaN ranks last, so the order is total)
static inline float topk_key(const struct sae *s, float p) {
    if (s->relu_first) return p > 0.0f ? p : 0.0f;
    return isnan(p) ? -INFINITY : p;
}

// (a, ia) ranks before (b, ib): larger value, then smaller index
static inline int ranks_before(float a, int64_t ia, float b, int64_t ib) {
    return a > b || (a == b && ia < ib);
}

void sae_count(int64_t *indptr, const float *pre, const struct sae *s, int64_t N) {
    int64_t L = s->d_sae;
    AH_ASSERT(N >= 0);
    indptr[0] = 0;
    if (s->arch == SAE_TOPK) {
        AH_ASSERT(s->k >= 1 && s->k <= L);
        for (int64_t r = 0; r < N; r++)
            indptr[r + 1] = indptr[r] + s->k;
        return;
    }
    int nt = rows_threads(N, L);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t r = 0; r < N; r++) {
        const float *p = pre + r * L;
        int64_t n = 0;
        for (int64_t j = 0; j < L; j++)
            n += fires(s, p[j], j);
        indptr[r + 1] = n;
    }
    for (int64_t r = 0; r < N; r++)
        indptr[r + 1] += indptr[r];
}

// h[0, n) a heap whose root ranks last of its members; sift h[i] down
static void sift_down(int32_t *h, int n, int i, const float *p, const struct sae *s) {
    for (;;) {
        int w = i, a = 2 * i + 1, b = 2 * i + 2;
        if (a < n && ranks_before(topk_key(s, p[h[w]]), h[w], topk_key(s, p[h[a]]), h[a])) w = a;
        if (b < n && ranks_before(topk_key(s, p[h[w]]), h[w], topk_key(s, p[h[b]]), h[b])) w = b;
        if (w == i) return;
        int32_t t = h[i];
        h[i] = h[w], h[w] = t;
        i = w;
    }
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

// the k latents of row p ranking first into idx (k), in increasing index: a heap of the best k
// so far, built in the output itself
static void topk_row(int32_t *idx, float *val, const float *p, const struct sae *s) {
    int k = s->k;
    int64_t L = s->d_sae;
    for (int i = 0; i < k; i++)
        idx[i] = i;
    for (int i = k / 2 - 1; i >= 0; i--)
        sift_down(idx, k, i, p, s);
    for (int64_t j = k; j < L; j++) {
        if (!ranks_before(topk_key(s, p[j]), j, topk_key(s, p[idx[0]]), idx[0])) continue;
        idx[0] = (int32_t)j;
        sift_down(idx, k, 0, p, s);
    }
    qsort(idx, (size_t)k, sizeof *idx, cmp_i32);
    for (int i = 0; i < k; i++)
        val[i] = p[idx[i]] > 0.0f ? p[idx[i]] : 0.0f; // relu of the selected
}

void sae_fill(int32_t *idx, float *val, const int64_t *indptr, const float *pre,
              const struct sae *s, int64_t N) {
    int64_t L = s->d_sae;
    AH_ASSERT(N >= 0 && (s->arch != SAE_TOPK || (s->k >= 1 && s->k <= L)));
    int nt = rows_threads(N, L);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t r = 0; r < N; r++) {
        const float *p = pre + r * L;
        int64_t o = indptr[r];
        if (s->arch == SAE_TOPK) {
            topk_row(idx + o, val + o, p, s);
            continue;
        }
        for (int64_t j = 0; j < L; j++)
            if (fires(s, p[j], j)) idx[o] = (int32_t)j, val[o++] = p[j];
        AH_ASSERT(o == indptr[r + 1]);
    }
}

// ----------------------------------------------------------------------------
// decode

void sae_decode(float *y, const int64_t *indptr, const int32_t *idx, const float *val,
                const float *norm_out, const struct sae *s, int64_t N) {
    int64_t C = s->d_in;
    AH_ASSERT(s->norm == SAE_NORM_NONE || norm_out);
    int nt = rows_threads(N, C);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t r = 0; r < N; r++) {
        float *o = y + r * C;
        memset(o, 0, (size_t)C * sizeof *o);
        for (int64_t e = indptr[r]; e < indptr[r + 1]; e++) {
            const float *w = s->W_dec + (int64_t)idx[e] * C;
            float z = val[e];
            for (int64_t c = 0; c < C; c++)
                o[c] += z * w[c];
        }
        for (int64_t c = 0; c < C; c++)
            o[c] += s->b_dec[c];
        if (s->norm == SAE_NORM_NONE) continue;
        float mean = norm_out[2 * r], scale = norm_out[2 * r + 1];
        for (int64_t c = 0; c < C; c++)
            o[c] = o[c] * scale + mean;
    }
}

// ----------------------------------------------------------------------------
// naive twins

void sae_pre_ref(float *pre, float *norm_out, const float *x, const struct sae *s, int64_t N) {
    int64_t C = s->d_in, L = s->d_sae;
    double *u = malloc((size_t)C * sizeof *u);
    AH_ASSERT(u);
    for (int64_t r = 0; r < N; r++) {
        const float *xr = x + r * C;
        double mu = 0.0, sd = 1.0, f = 1.0, ss = 0.0;
        if (s->norm == SAE_NORM_LAYER) {
            for (int64_t c = 0; c < C; c++)
                mu += (double)xr[c];
            mu /= (double)C;
        }
        for (int64_t c = 0; c < C; c++)
            ss += ((double)xr[c] - mu) * ((double)xr[c] - mu);
        if (s->norm == SAE_NORM_CONSTANT) f = sqrt((double)C / ss), sd = 1.0 / f;
        if (s->norm == SAE_NORM_LAYER) sd = sqrt(ss / (double)(C - 1)), f = 1.0 / (sd + SAE_LN_EPS);
        for (int64_t c = 0; c < C; c++)
            u[c] = ((double)xr[c] - mu) * f - (s->b_dec_in ? (double)s->b_dec[c] : 0.0);
        for (int64_t j = 0; j < L; j++) {
            double acc = (double)s->b_enc[j];
            for (int64_t c = 0; c < C; c++)
                acc += u[c] * (double)(s->enc_t ? s->W_enc[j * C + c] : s->W_enc[c * L + j]);
            pre[r * L + j] = (float)acc;
        }
        if (norm_out) norm_out[2 * r] = (float)mu, norm_out[2 * r + 1] = (float)sd;
    }
    free(u);
}

struct ranked {
    float key;
    int32_t j;
};

static int cmp_ranked(const void *a, const void *b) {
    const struct ranked *x = a, *y = b;
    if (ranks_before(x->key, x->j, y->key, y->j)) return -1;
    return ranks_before(y->key, y->j, x->key, x->j) ? 1 : 0;
}

void sae_fill_ref(int32_t *idx, float *val, const int64_t *indptr, const float *pre,
                  const struct sae *s, int64_t N) {
    int64_t L = s->d_sae;
    struct ranked *rk = malloc((size_t)L * sizeof *rk);
    AH_ASSERT(rk);
    for (int64_t r = 0; r < N; r++) {
        const float *p = pre + r * L;
        int64_t o = indptr[r];
        if (s->arch != SAE_TOPK) {
            for (int64_t j = 0; j < L; j++)
                if (fires(s, p[j], j)) idx[o] = (int32_t)j, val[o++] = p[j];
            continue;
        }
        for (int64_t j = 0; j < L; j++)
            rk[j] = (struct ranked){topk_key(s, p[j]), (int32_t)j};
        qsort(rk, (size_t)L, sizeof *rk, cmp_ranked); // the whole row, best first
        for (int i = 0; i < s->k; i++)
            idx[o + i] = rk[i].j;
        qsort(idx + o, (size_t)s->k, sizeof *idx, cmp_i32);
        for (int i = 0; i < s->k; i++)
            val[o + i] = fmaxf(p[idx[o + i]], 0.0f);
    }
    free(rk);
}

void sae_decode_ref(float *y, const int64_t *indptr, const int32_t *idx, const float *val,
                    const float *norm_out, const struct sae *s, int64_t N) {
    int64_t C = s->d_in;
    for (int64_t r = 0; r < N; r++) {
        for (int64_t c = 0; c < C; c++) {
            double acc = (double)s->b_dec[c];
            for (int64_t e = indptr[r]; e < indptr[r + 1]; e++)
                acc += (double)val[e] * (double)s->W_dec[(int64_t)idx[e] * C + c];
            if (s->norm != SAE_NORM_NONE)
                acc = acc * (double)norm_out[2 * r + 1] + (double)norm_out[2 * r];
            y[r * C + c] = (float)acc;
        }
    }
}
