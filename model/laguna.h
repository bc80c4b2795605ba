// laguna.h - the Laguna family (LagunaForCausalLM, poolside): its configuration, as
// shared/docs/laguna-forward.md sections 2 and 3 define it, and its parameter and byte counts.
// The forward pass and the activation catalogue are not written yet; the planner uses this much.
//
// L = layers, D = hidden, H_i = query heads of layer i, KV = key/value heads, Dh = head_dim,
// E = routed experts, I_d / I_e / I_s = dense / expert / shared-expert widths
#ifndef AH_LAGUNA_H
#define AH_LAGUNA_H

#include "model/tap.h"

#include <stdbool.h>
#include <stdint.h>

enum laguna_rope_type { LAGUNA_ROPE_DEFAULT, LAGUNA_ROPE_YARN };

struct laguna_rope {
    enum laguna_rope_type type;
    double theta;            // rope_theta
    double partial;          // partial_rotary_factor: rotated dims = int(Dh * partial)
    double factor;           // yarn: s
    double attention_factor; // yarn: A (default 0.1 ln(s) + 1)
    double beta_fast, beta_slow;
    int original_max_pos; // yarn: L0
};

struct laguna_config {
    int n_layer, hidden, vocab, n_kv_head, head_dim;
    int dense_ffn, expert_ffn, shared_ffn; // intermediate_size, moe_intermediate_size, shared_...
    int n_expert, top_k;
    int sliding_window;
    double eps, routed_scaling, router_softcap;
    bool gate_per_element; // g_proj has H_i*Dh rows (else H_i: one gate a head)
    int *n_head;           // (n_layer) query heads of each layer; owned
    bool *sliding;         // (n_layer) sliding-window attention (else full); owned
    bool *dense;           // (n_layer) dense MLP (else mixture of experts); owned
    struct laguna_rope rope_full, rope_sliding;
};

void laguna_config_free(struct laguna_config *c); // safe on a zeroed struct

// Parameters of layer i without (experts = false) or only (experts = true) its routed experts.
int64_t laguna_layer_params(const struct laguna_config *c, int i, bool experts);
int64_t laguna_params(const struct laguna_config *c);
// Bytes as published: BF16, except the F32 selection bias of each MoE layer.
int64_t laguna_layer_bytes(const struct laguna_config *c, int i, bool experts);
int64_t laguna_bytes(const struct laguna_config *c);
// Multiply-adds x 2 of one token through layer i (attention projections, gate, MLP or the top-k
// experts + shared expert + router); the work a pipeline stage balances on.
double laguna_layer_flops(const struct laguna_config *c, int i);

// ---- the activation catalogue: the nnterp values of seeds/laguna-nnterp.txt ----
// Root values are bare names; block values are `layers.{i}.{value}`. Every block has the residual
// and attention values; dense blocks add mlp_activation, mlp_neurons, mlp_output, mixture blocks
// mlp_output and the router/expert values. Catalogue order is forward order.
int laguna_n_taps(const struct laguna_config *c);
// Fills out[0..laguna_n_taps): name, dtype, semantic shape (the seed's axis names), meaning, block.
void laguna_catalogue(const struct laguna_config *c, struct tap_desc *out);

// Length of a fixed axis of a value of `block` (-1 / n_layer for root values): num_heads is the
// block's own query-head count, intermediate_size the dense width. -1 for an unknown axis name.
int64_t laguna_axis_size(const struct laguna_config *c, int block, const char *axis);

// RoPE of one layer type (laguna-forward.md 3.2, 3.3): inv_freq[j] for j < n_rot / 2 in float32
// as HF computes it, and the factor A that multiplies cos and sin (1 for default RoPE). Returns
// n_rot = int(head_dim * partial); *low / *high receive YaRN's ramp bounds (0 for default).
int laguna_rope_inv_freq(const struct laguna_rope *r, int head_dim, float *inv_freq, float *scale,
                         double *low, double *high);

// The router of one token (laguna-forward.md 4, LagunaTopKRouter): p = sigmoid(z); the k experts
// with the largest p + bias (bias may be NULL), largest first, ties to the lower index; weights =
// their unbiased p renormalised to sum 1. The routed scaling factor applies to the routed sum.
void laguna_route(int64_t *idx, float *w, const float *z, const float *bias, int E, int k);
void laguna_route_ref(int64_t *idx, float *w, const float *z, const float *bias, int E, int k);

#endif
