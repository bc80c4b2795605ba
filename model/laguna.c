// laguna.c - Laguna configuration counts (see laguna.h; shared/docs/laguna-forward.md section 6:
//   params = 2 V D + D
//          + sum_i [ D H_i Dh + 2 D KV Dh + H_i Dh D + G_i D + 2 Dh + 2 D ]   G_i = H_i or H_i Dh
//          + sum_dense 3 D I_d + sum_moe [ E D + E + 3 E D I_e + 3 D I_s ] )
#include "model/laguna.h"

#include "model/ah.h"

#include <math.h>
#include <stdio.h>
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

// embed_tokens, lm_head, the final norm
static int64_t laguna_outer_params(const struct laguna_config *c) {
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

// ----------------------------------------------------------------------------
// catalogue (names, layouts and meanings as seeds/laguna-nnterp.txt gives them)

#define BSH "batch,seq,hidden_size"
static const struct laguna_tap {
    const char *name, *shape, *meaning;
    enum tap_dtype dtype;
    char where; // R root before the blocks, E root after them, B every block, D dense, M mixture
} laguna_taps[] = {
    {"input_ids", "batch,seq", "The token ids the model was called with", TAP_I64, 'R'},
    {"attention_mask", "batch,seq",
     "The attention mask the model was called with; zeros are padding", TAP_I64, 'R'},
    {"token_embeddings", BSH,
     "The embedding module's output; layers[0].input is what enters the first block", TAP_F32, 'R'},
    {"layer_input", BSH, "The residual stream entering the block", TAP_F32, 'B'},
    {"attention_norm_output", BSH, "The normed stream entering the attention", TAP_F32, 'B'},
    {"attention_queries", "batch,num_heads,seq,qk_head_dim", "The queries entering attention",
     TAP_F32, 'B'},
    {"attention_keys", "batch,num_kv_heads,seq,qk_head_dim", "The keys entering attention", TAP_F32,
     'B'},
    {"attention_values", "batch,num_kv_heads,seq,head_dim", "The values entering attention",
     TAP_F32, 'B'},
    {"attention_scores", "batch,num_heads,query,key",
     "The attention scores entering the softmax, masked", TAP_F32, 'B'},
    {"attention_probabilities", "batch,num_heads,query,key",
     "The attention pattern the values are mixed with", TAP_F32, 'B'},
    {"attention_head_outputs", "batch,seq,num_heads,head_dim",
     "The per-head outputs before the output projection", TAP_F32, 'B'},
    {"attention_premix", "batch,seq,num_heads,head_dim",
     "Every head's output side by side, as the output projection takes it", TAP_F32, 'B'},
    {"attention_output", BSH, "What the attention adds to the residual stream", TAP_F32, 'B'},
    {"layer_mid", BSH, "The residual stream after the attention add", TAP_F32, 'B'},
    {"mlp_norm_output", BSH, "The normed stream entering the MLP", TAP_F32, 'B'},
    {"mlp_input", BSH, "What the MLP is called with", TAP_F32, 'B'},
    {"mlp_activation", "batch,seq,intermediate_size", "The activation function's output", TAP_F32,
     'D'},
    {"mlp_neurons", "batch,seq,intermediate_size",
     "What the down projection receives: act(gate)\u00b7up on a gated MLP, the activation itself "
     "otherwise",
     TAP_F32, 'D'},
    {"shared_expert_output", BSH, "The shared expert's output", TAP_F32, 'M'},
    {"router_logits", "batch,seq,num_experts",
     "The router's logits, one per expert, before the "
     "scoring",
     TAP_F32, 'M'},
    {"expert_indices", "batch,seq,top_k", "The expert each routing slot sends the token to",
     TAP_I64, 'M'},
    {"expert_weights", "batch,seq,top_k", "The weight each selected expert's output is scaled by",
     TAP_F32, 'M'},
    {"expert_outputs", "batch,seq,top_k,hidden_size", "Each routing slot's weighted expert output",
     TAP_F32, 'M'},
    {"routed_output", BSH, "The routed experts' combined output, times routed_scaling_factor",
     TAP_F32, 'M'},
    {"mlp_output", BSH, "What the MLP adds to the residual stream", TAP_F32, 'B'},
    {"layer_output", BSH,
     "The residual stream leaving the block, a tensor even when the block returns a tuple", TAP_F32,
     'B'},
    {"final_norm_output", BSH, "The residual stream after the final norm, what lm_head reads",
     TAP_F32, 'E'},
    {"lm_head_output", "batch,seq,vocab_size",
     "The head's logits before anything the model does past lm_head (a softcap, a scale)", TAP_F32,
     'E'},
    {"logits", "batch,seq,vocab_size",
     "The logits the model returns, after anything it does past lm_head (a softcap, a scale)",
     TAP_F32, 'E'},
    {"next_token_probs", "batch,vocab_size",
     "The next-token distribution at the last position; derived, read-only", TAP_F32, 'E'},
};
#define LAGUNA_N_TAPS ((int)(sizeof laguna_taps / sizeof laguna_taps[0]))

static bool tap_in(const struct laguna_config *c, int layer, char where) {
    if (layer < 0) return where == 'R';
    if (layer >= c->n_layer) return where == 'E';
    return where == 'B' || where == (c->dense[layer] ? 'D' : 'M');
}

// every (layer, tap) in forward order: roots before (-1), the blocks, roots after (n_layer)
static int walk(const struct laguna_config *c, struct tap_desc *out) {
    int n = 0;
    char name[TAP_NAME_MAX];
    for (int l = -1; l <= c->n_layer; l++)
        for (int t = 0; t < LAGUNA_N_TAPS; t++) {
            const struct laguna_tap *x = &laguna_taps[t];
            if (!tap_in(c, l, x->where)) continue;
            if (out) {
                if (l >= 0 && l < c->n_layer)
                    snprintf(name, sizeof name, "layers.%d.%s", l, x->name);
                else
                    snprintf(name, sizeof name, "%s", x->name);
                int r = tap_desc_set(&out[n], name, x->dtype, x->shape, x->meaning, l);
                AH_ASSERT(r == 0);
            }
            n++;
        }
    return n;
}

int laguna_n_taps(const struct laguna_config *c) {
    return walk(c, NULL);
}

void laguna_catalogue(const struct laguna_config *c, struct tap_desc *out) {
    walk(c, out);
}

int64_t laguna_axis_size(const struct laguna_config *c, int block, const char *axis) {
    if (!strcmp(axis, "num_heads")) return block >= 0 && block < c->n_layer ? c->n_head[block] : -1;
    if (!strcmp(axis, "num_kv_heads")) return c->n_kv_head;
    if (!strcmp(axis, "qk_head_dim") || !strcmp(axis, "head_dim")) return c->head_dim;
    if (!strcmp(axis, "hidden_size")) return c->hidden;
    if (!strcmp(axis, "intermediate_size")) return c->dense_ffn;
    if (!strcmp(axis, "num_experts")) return c->n_expert;
    if (!strcmp(axis, "top_k")) return c->top_k;
    if (!strcmp(axis, "vocab_size")) return c->vocab;
    return -1;
}
