// laguna.h - the Laguna family (LagunaForCausalLM, poolside): its configuration, as
// tests/ref/laguna-forward.md sections 2 and 3 define it, its parameter and byte counts, the
// nnterp activation catalogue and the forward pass (section 4) in float32 over BF16 weights.
//
// L = layers, D = hidden, H_i = query heads of layer i, KV = key/value heads, Dh = head_dim,
// E = routed experts, I_d / I_e / I_s = dense / expert / shared-expert widths
#ifndef AH_LAGUNA_H
#define AH_LAGUNA_H

#include "model/batch.h"
#include "model/blocks.h"
#include "model/moe.h" // struct expert_shard
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
    bool no_truncate;     // yarn: "truncate": false keeps the ramp bounds unrounded
};

struct laguna_config {
    int n_layer, hidden, vocab, n_kv_head, head_dim;
    int dense_ffn, expert_ffn, shared_ffn; // intermediate_size, moe_intermediate_size, shared_...
    int n_expert, top_k;
    int sliding_window;
    int max_pos; // max_position_embeddings
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

// ---- the activation catalogue: the nnterp values of tests/ref/laguna-nnterp.txt ----
// Root values are bare names; block values are `layers.{i}.{value}`. Every block has the residual
// and attention values; dense blocks add mlp_activation, mlp_neurons, mlp_output, mixture blocks
// mlp_output and the router/expert values. Catalogue order is forward order.
int laguna_n_taps(const struct laguna_config *c);
// Fills out[0..laguna_n_taps): name, dtype, semantic shape (the seed's axis names), meaning, block.
void laguna_catalogue(const struct laguna_config *c, struct tap_desc *out);

// Length of a fixed axis of a value of `block` (-1 / n_layer for root values): num_heads is the
// block's own query-head count, intermediate_size the dense width. -1 for an unknown axis name.
int64_t laguna_axis_size(const struct laguna_config *c, int block, const char *axis);

// RoPE of one layer type (tests/ref/laguna-forward.md 3.2, 3.3): inv_freq[j] for j < n_rot / 2 in
// float32 as HF computes it, and the factor A that multiplies cos and sin (1 for default RoPE).
// Returns n_rot = int(head_dim * partial); *low / *high receive YaRN's ramp bounds (0 for default).
int laguna_rope_inv_freq(const struct laguna_rope *r, int head_dim, float *inv_freq, float *scale,
                         double *low, double *high);

// The router of one token (tests/ref/laguna-forward.md 4, LagunaTopKRouter): p = sigmoid(z); the k
// experts with the largest p + bias (bias may be NULL), largest first, ties to the lower index;
// weights = their unbiased p renormalised to sum 1. The routed scaling factor applies to the routed
// sum.
void laguna_route(int64_t *idx, float *w, const float *z, const float *bias, int E, int k);
void laguna_route_ref(int64_t *idx, float *w, const float *z, const float *bias, int E, int k);

// ---- weights: BF16 matrices borrowed from the mapping, small vectors widened to float32 ----
struct laguna_block_w {
    const float *attn_norm, *mlp_norm, *q_norm, *k_norm; // (D), (D), (Dh), (Dh)
    const uint16_t *wq, *wk, *wv, *wo, *wg; // (H_i Dh, D) (KV Dh, D) x2 (D, H_i Dh) (G_i, D)
    const uint16_t *gate, *up, *down;       // dense: (I_d, D) x2, (D, I_d)
    const uint16_t *router;                 // mixture: (E, D)
    const float *bias;                      // mixture: (E) selection bias
    const uint16_t **eg, **eu, **ed;        // (E) experts: (I_e, D) x2, (D, I_e)
    const uint16_t *sg, *su, *sd;           // shared expert: (I_s, D) x2, (D, I_s)
};

struct laguna {
    struct laguna_config cfg;        // owned (the per-layer arrays move in)
    const uint16_t *embed, *lm_head; // (V, D)
    const float *norm;               // (D)
    struct laguna_block_w *blk;      // (n_layer) owned
    const uint16_t **experts;        // (3 E n_moe) owned: the blocks' eg/eu/ed point here
    int *id; // ((n_layer + 2) x CAT_N) catalogue ids (model/catalogue.h), -1 if absent
};

// Takes c (the caller's struct is zeroed), allocates m's arrays and returns in *list (caller
// frees) the tensors to bind, in the published names of tests/ref/laguna-forward.md 5.1. Returns
// the count or a negative AH_E* code. list NULL: config only (nothing to bind, no expert table).
int laguna_init(struct laguna *m, struct laguna_config *c, struct model_tensor **list);
void laguna_free(struct laguna *m); // safe on a zeroed struct

// expert shards: struct expert_shard (model/moe.h)

// ---- run state: one arena ----
struct laguna_state {
    int max_T;
    int64_t max_tokens;
    bool keep_scores, keep_experts; // (H, T, T) scores per prompt; (N, k, D) expert outputs
    // N = max_tokens (the batch's tokens, prompts one after another), T = max_T, H = the most
    // query heads of any layer, D = hidden, Dh = head_dim
    float *x, *xn;        // (N, D) the residual stream; its normed copy
    float *q, *k, *v;     // (N, H Dh), (N, KV Dh), (N, KV Dh) token-major heads
    float *o, *g;         // (N, H Dh) head outputs (gated in place); (N, H Dh) the gate's values
    float *a, *m;         // (N, D) attention output; MLP output
    float *f_gate, *f_up; // (N, max(I_d, I_s)) dense / shared-expert gate and up
    float *z;             // (N, E) router logits, capped in place once their tap is out
    float *w;             // (N, k) expert weights
    float *eo;            // (N, k, D) weighted expert outputs (kept for a tap or a shard exchange)
    float *routed;        // (N, D) the routed sum
    int64_t *idx;         // (N, k) chosen experts
    int *order, *start;   // (N k) slots grouped by expert; (E + 1) offsets, then (E) cursors
    float *xe, *ge, *ue, *ye; // a run of experts' tokens: (N, D) (N, I_e) x2 (N, D)
    float *xpanels;           // BF16 panels, one per thread running experts (moe.h)
    int n_xpanels;
    float *att;     // (H, T, T) scores of a prompt (keep_scores), else (T, T) a thread
    int64_t n_att;  // its floats
    float *logits;  // (T, V) a prompt's logits, then (V) the next-token distribution
    float *scratch; // (H Dh T) a head-major copy for the head-split taps
    float *tile;    // the widened rows of a BF16 matmul (op_matmul_bf16)
    float *cos_f, *sin_f, *cos_s, *sin_s; // (max_T, n_rot / 2) full / sliding, times A
    int rot_f, rot_s;
    int64_t *ones;                    // (max_T) the attention mask
    const struct expert_shard *shard; // NULL: every expert here
    void *arena;
};

// want (catalogue-indexed, NULL = everything) sizes the tap-only buffers; shard (NULL: all
// experts here) is borrowed.
int laguna_state_init(struct laguna_state *s, const struct laguna *m, int max_T, int64_t max_tokens,
                      const uint8_t *want, const struct expert_shard *shard);
void laguna_state_free(struct laguna_state *s); // safe on a zeroed struct

// Runs blocks [blk_begin, blk_end) on the batch, emitting wanted taps. blk_begin == 0 embeds the
// tokens; blk_end == n_layer runs the final norm and the head if their taps are wanted.
void laguna_forward(const struct laguna *m, struct laguna_state *s, const struct mbatch *bt,
                    const struct tap *tp, int blk_begin, int blk_end);

// FLOPs of a prompt of T tokens through block i (i == n_layer: the LM head).
double laguna_block_flops(const struct laguna_config *c, int i, int T);

// Reads a LagunaForCausalLM config.json (model/families/laguna_config.c:
// tests/ref/laguna-forward.md section 2, with HF's defaults for absent keys). Errors name
// config.json and the key: an unknown rope_type, a per-layer list of the wrong length, an option
// the family does not have.
struct config;
struct ah_error;
int laguna_config_read(const struct config *cf, struct laguna_config *c, struct ah_error *err);

#endif
