// laguna.c - Laguna configuration counts (see laguna.h; shared/docs/laguna-forward.md section 6:
//   params = 2 V D + D
//          + sum_i [ D H_i Dh + 2 D KV Dh + H_i Dh D + G_i D + 2 Dh + 2 D ]   G_i = H_i or H_i Dh
//          + sum_dense 3 D I_d + sum_moe [ E D + E + 3 E D I_e + 3 D I_s ] )
#include "model/laguna.h"

#include "model/ah.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void laguna_config_free(struct laguna_config *c) {
    free(c->n_head);
    free(c->sliding);
    free(c->dense);
    memset(c, 0, sizeof *c);
}

static int64_t attn_params(const struct laguna_config *c, int i) {
    int64_t D = c->hidden, Dh = c->head_dim, H = c->n_head[i], KV = c->n_kv_head;
    int64_t gate_rows = c->gate_per_element ? H * Dh : H;
    return D * H * Dh + 2 * D * KV * Dh + H * Dh * D + gate_rows * D + 2 * Dh + 2 * D;
}

int64_t laguna_layer_params(const struct laguna_config *c, int i, bool experts) {
    int64_t D = c->hidden, E = c->n_expert;
    if (experts) return c->dense[i] ? 0 : 3 * E * D * c->expert_ffn;
    if (c->dense[i]) return attn_params(c, i) + 3 * D * c->dense_ffn;
    return attn_params(c, i) + E * D + E + 3 * D * c->shared_ffn; // router, bias, shared expert
}

int64_t laguna_outer_params(const struct laguna_config *c) {
    return 2 * (int64_t)c->vocab * c->hidden + c->hidden;
}

int64_t laguna_params(const struct laguna_config *c) {
    int64_t n = laguna_outer_params(c);
    for (int i = 0; i < c->n_layer; i++)
        n += laguna_layer_params(c, i, false) + laguna_layer_params(c, i, true);
    return n;
}

int64_t laguna_layer_bytes(const struct laguna_config *c, int i, bool experts) {
    int64_t b = 2 * laguna_layer_params(c, i, experts);
    if (!experts && !c->dense[i]) b += 2 * (int64_t)c->n_expert; // the F32 bias: 4 bytes, not 2
    return b;
}

int64_t laguna_bytes(const struct laguna_config *c) {
    int64_t b = 2 * laguna_outer_params(c);
    for (int i = 0; i < c->n_layer; i++)
        b += laguna_layer_bytes(c, i, false) + laguna_layer_bytes(c, i, true);
    return b;
}

double laguna_layer_flops(const struct laguna_config *c, int i) {
    double D = c->hidden, active = (double)attn_params(c, i);
    if (c->dense[i])
        active += 3 * D * c->dense_ffn;
    else
        active += D * c->n_expert + 3 * D * c->expert_ffn * c->top_k + 3 * D * c->shared_ffn;
    return 2.0 * active;
}

// ----------------------------------------------------------------------------
// RoPE tables

int laguna_rope_inv_freq(const struct laguna_rope *r, int head_dim, float *inv_freq, float *scale,
                         double *low, double *high) {
    int d = (int)(head_dim * r->partial), half = d / 2;
    AH_ASSERT(d >= 2 && d % 2 == 0 && d <= head_dim);
    // pos_f[i] = theta ** (arange(0, d, 2) / d), float32 as torch computes it
    for (int i = 0; i < half; i++)
        inv_freq[i] = 1.0f / powf((float)r->theta, (float)(2 * i) / (float)d);
    *scale = 1.0f;
    *low = *high = 0.0;
    if (r->type == LAGUNA_ROPE_DEFAULT) return d;
    // YaRN: frequencies below `low` keep their value, above `high` are divided by the factor
    double two_pi = 6.283185307179586, ln_theta = log(r->theta);
    double cf = d * log(r->original_max_pos / (two_pi * r->beta_fast)) / (2.0 * ln_theta);
    double cs = d * log(r->original_max_pos / (two_pi * r->beta_slow)) / (2.0 * ln_theta);
    double lo = floor(cf) > 0.0 ? floor(cf) : 0.0, hi = ceil(cs) < d - 1 ? ceil(cs) : d - 1;
    if (lo == hi) hi += 0.001;
    for (int i = 0; i < half; i++) {
        float ext = inv_freq[i];                               // 1 / pos_f
        float intp = 1.0f / ((float)r->factor * (1.0f / ext)); // 1 / (s * pos_f)
        float ramp = ((float)i - (float)lo) / (float)(hi - lo);
        ramp = ramp < 0.0f ? 0.0f : ramp > 1.0f ? 1.0f : ramp;
        float e = 1.0f - ramp;
        inv_freq[i] = intp * (1.0f - e) + ext * e;
    }
    *scale = (float)r->attention_factor;
    *low = lo;
    *high = hi;
    return d;
}

// ----------------------------------------------------------------------------
// router

static float sigmoidf_(float z) {
    return 1.0f / (1.0f + expf(-z));
}

void laguna_route(int64_t *idx, float *w, const float *z, const float *bias, int E, int k) {
    AH_ASSERT(k >= 1 && k <= E);
    float sel[64]; // biased scores of the k chosen so far, descending
    for (int j = 0; j < k; j++)
        idx[j] = -1;
    int n = 0;
    for (int e = 0; e < E; e++) { // insertion into the top k: ties keep the lower index first
        float s = sigmoidf_(z[e]) + (bias ? bias[e] : 0.0f);
        if (n == k && !(s > sel[k - 1])) continue;
        int pos = n < k ? n++ : k - 1;
        while (pos > 0 && s > sel[pos - 1]) {
            sel[pos] = sel[pos - 1];
            idx[pos] = idx[pos - 1];
            pos--;
        }
        sel[pos] = s;
        idx[pos] = e;
    }
    float sum = 0.0f;
    for (int j = 0; j < k; j++)
        sum += w[j] = sigmoidf_(z[idx[j]]);
    for (int j = 0; j < k; j++)
        w[j] /= sum;
}

void laguna_route_ref(int64_t *idx, float *w, const float *z, const float *bias, int E, int k) {
    // selection sort on the biased scores in double, lower index first on ties
    uint8_t *taken = calloc((size_t)E, 1);
    AH_ASSERT(taken);
    double sum = 0.0;
    for (int j = 0; j < k; j++) {
        int best = -1;
        double bs = -INFINITY;
        for (int e = 0; e < E; e++) {
            double s = 1.0 / (1.0 + exp(-(double)z[e])) + (bias ? (double)bias[e] : 0.0);
            if (!taken[e] && (best < 0 || s > bs)) best = e, bs = s;
        }
        taken[best] = 1;
        idx[j] = best;
        sum += 1.0 / (1.0 + exp(-(double)z[best]));
    }
    for (int j = 0; j < k; j++)
        w[j] = (float)(1.0 / (1.0 + exp(-(double)z[idx[j]])) / sum);
    free(taken);
}
