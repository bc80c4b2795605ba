// lnblock.h - what GPT-2 (model/families/gpt2.c) and GPT-NeoX (model/families/neox.c) share:
// decoders of pre-norm blocks with LayerNorm (weight and bias), one fused q/k/v projection,
// multi-head attention (every head its own keys and values) and a plain MLP act(x W1 + b1) W2 + b2,
// with biases everywhere. The two families differ in what the configuration here says: learned
// positions or partial rotary, Conv1D weights [in, out] or Linear [out, in] (and with them the
// fused layout), a sequential or a parallel residual, a tied or an untied head. Each family reads
// its config.json into a struct lnb_config, names its tensors (struct lnb_names) and reuses
// everything else: the tensor list, the catalogue (the nnterp names of tests/ref/hf/NAMES.md), the
// forward pass with its taps, FLOPs, bytes and plan's description, all in float32 over weights
// widened at load - except under compute bf16 (model/ops.h op_compute() set before the load):
// then the matrices stored BF16 (the blocks', the embedding, an untied head) are borrowed from
// the mapping as they are and run bf16 x bf16 -> float32 (model/dnnl.h, pre-packed; Conv1D's
// [in, out] packed from that layout), the embedding rows widened exactly when looked up.
//
// L = layers, D = hidden, H = heads, hd = D / H, I = MLP width, V = vocab, N = tokens of a batch
#ifndef AH_LNBLOCK_H
#define AH_LNBLOCK_H

#include "model/family.h"
#include "model/ops.h"

#include <stdbool.h>
#include <stdint.h>

struct lnb_config {
    const char *arch; // "GPT2LMHeadModel": plan's line
    int n_layer, hidden, n_head, head_dim, inner, vocab;
    int max_pos; // longest prompt
    int n_pos;   // rows of the learned position table (GPT-2 wpe), 0: none
    double eps;  // the LayerNorms' epsilon
    enum op_act_kind act;
    double attn_scale;        // multiplies q . k
    bool inverse_layer_scale; // GPT-2 scale_attn_by_inverse_layer_idx: block i scales by 1/(i+1)
    bool conv1d;              // weights [in, out] and c_attn's columns q | k | v (GPT-2); else
                              // Linear [out, in] and query_key_value's rows [q_h k_h v_h] a head
    bool parallel;            // NeoX use_parallel_residual: the MLP reads the block's input
    bool attn_bias;           // q/k/v and output projection biases (the MLP's always exist)
    bool tied;                // the head is the token embedding
    bool rotary;              // NeoX: RoPE on the first n_rot dims of each head
    int n_rot;                // rotated dims of a head (even, <= hd)
    double rope_theta;        // RoPE base
    double rope_linear;       // linear rope_scaling factor (1: none)
    int param_bytes;          // bytes a parameter as published (torch_dtype): plan
    const char *stored;       // "float16": plan
};

// Tensor names of a family: the model-level ones, and per layer "{layer_prefix}.{i}.{leaf}" with
// the leaves in enum lnb_leaf order (NULL: not in the checkpoint, as NeoX's q/k/v and output
// biases without attention_bias).
enum lnb_leaf {
    LNB_LN1_W,
    LNB_LN1_B,
    LNB_QKV_W,
    LNB_QKV_B,
    LNB_O_W,
    LNB_O_B,
    LNB_LN2_W,
    LNB_LN2_B,
    LNB_FC_W,
    LNB_FC_B,
    LNB_PROJ_W,
    LNB_PROJ_B,
    LNB_N_LEAF
};

struct lnb_names {
    const char *embed, *pos, *lnf_w, *lnf_b, *head; // pos NULL without n_pos, head NULL if tied
    const char *layer_prefix;
    const char *leaf[LNB_N_LEAF];
};

struct lnb_model {
    struct lnb_config cfg;
    const float *embed, *pos;      // (V, D), (n_pos, D)
    const float *lnf_w, *lnf_b;    // (D)
    const float *head;             // (V, D): embed when tied
    const float *(*w)[LNB_N_LEAF]; // (L) per layer, by leaf; shapes in lnb_leaf_shape; owned
    // compute bf16: the matrices borrowed BF16 (their float32 views above then NULL), else NULL
    const uint16_t *(*h)[LNB_N_LEAF]; // (L) per layer, by leaf; owned table
    const uint16_t *embed16, *head16; // (V, D) each; head16 unused when tied
    bool any_bf16;                    // some matrix borrowed BF16
    int *id;                          // ((L + 2) x CAT_N) catalogue ids, -1 if absent; owned
};

// The tensors to bind (*list, caller frees) under the names of nm; the count or -AH_ENOMEM.
// Allocates m's tables (m->cfg set); list NULL: the tables alone. dims (may be NULL) tells which
// tensors are stored BF16: those matrices are borrowed so under compute bf16 (see above).
int lnb_init(struct lnb_model *m, const struct lnb_names *nm, const struct model_dims *dims,
             struct model_tensor **list);
// (d0, d1) of a layer tensor (d1 0 for a vector)
void lnb_leaf_shape(const struct lnb_config *c, enum lnb_leaf k, int64_t *d0, int64_t *d1);
int64_t lnb_params(const struct lnb_config *c);

// config.json helpers: a boolean key with a default; an activation function name (the
// references' list, tests/ref/hf/common.py ACT). Errors name config.json and the key.
int lnb_cfg_bool(const struct config *cf, const char *key, bool dflt, bool *out,
                 struct ah_error *err);
int lnb_cfg_act(const struct config *cf, const char *key, const char *dflt, enum op_act_kind *out,
                struct ah_error *err);
// the positive integer `key`, or the error "KEY: V is out of range"
int lnb_cfg_dim(const struct config *cf, const char *key, int dflt, int *out, struct ah_error *err);

// torch_dtype (or dtype): plan's bytes as published (absent: float32, transformers' default)
int lnb_cfg_dtype(const struct config *cf, struct lnb_config *c, struct ah_error *err);
// The checks every family makes once its keys are read: the layer count, heads dividing the
// hidden size (naming heads_key), the epsilon (eps_key); sets head_dim; refuses any
// quantization_config (model_quant_method: these families read none), then reads the dtype.
int lnb_cfg_check(const struct config *cf, struct lnb_config *c, const char *heads_key,
                  const char *eps_key, struct ah_error *err);

// The family operations both families share (model/family.h); open and the presets are each
// family's own.
void lnb_close(void *fm);
void lnb_info(const void *fm, struct model_info *out);
int lnb_n_taps(const void *fm);
void lnb_catalogue(const void *fm, struct tap_desc *out);
int64_t lnb_axis_size(const void *fm, int block, const char *axis);
int lnb_state_init(void **fs, const void *fm, int max_T, int64_t max_tokens, const uint8_t *want,
                   const struct expert_shard *shard);
void lnb_state_free(void *fs);
void lnb_forward(const void *fm, void *fs, const struct mbatch *bt, const struct tap *tp,
                 int blk_begin, int blk_end);
int lnb_handoff(void *fs, float **arrays);
double lnb_block_flops(const void *fm, int b, int T);
int64_t lnb_stage_bytes(const void *fm, int b0, int b1, bool head, int shard, int n_shards,
                        const char **kind);
void lnb_describe(const void *fm, char *line, size_t n, int64_t *params, int64_t *bytes,
                  const char **stored);

#define LNB_FAMILY_OPS                                                                      \
    .close = lnb_close, .info = lnb_info, .n_taps = lnb_n_taps, .catalogue = lnb_catalogue, \
    .axis_size = lnb_axis_size, .state_init = lnb_state_init, .state_free = lnb_state_free, \
    .forward = lnb_forward, .handoff = lnb_handoff, .block_flops = lnb_block_flops,         \
    .stage_bytes = lnb_stage_bytes, .describe = lnb_describe

#endif
