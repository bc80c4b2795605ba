// decoder.h - the Llama-style decoder families of Hugging Face transformers, one model for all:
// LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM,
// MixtralForCausalLM, Gemma2ForCausalLM, Gemma3ForCausalLM (text), Olmo2ForCausalLM. The float64
// definition is tests/ref/hf/decoder.py (written from transformers' modeling_*.py; OLMo 2's
// tests/ref/olmo2_ref.py); the names and what each means per family are tests/ref/hf/NAMES.md and
// docs/families.md. The differences are options of struct dec_config
// (its block description struct dec_block and its tensor names struct dec_names), set once from
// config.json by the family's reader (model/families/*.c, model/decoder_family.h) with
// transformers' defaults for absent keys (tests/ref/hf/config.py).
//
// L = layers, D = hidden, H = query heads, KV = key/value heads, hd = head_dim, I = MLP width,
// E = routed experts, k = experts a token goes to, Ie = an expert's width, V = vocab
#ifndef AH_DECODER_H
#define AH_DECODER_H

#include "model/batch.h"
#include "model/blocks.h"
#include "model/mxfp4.h"
#include "model/tap.h"

#include <stdbool.h>
#include <stdint.h>

struct config;
struct ah_error;
struct expert_shard;

enum dec_rope_type {
    DEC_ROPE_DEFAULT,
    DEC_ROPE_LINEAR,
    DEC_ROPE_DYNAMIC,
    DEC_ROPE_LLAMA3,
    DEC_ROPE_YARN // _compute_yarn_parameters (gpt-oss; DeepSeek's mscale too)
};

// modeling_rope_utils.py's parameters of one layer type
struct dec_rope {
    enum dec_rope_type type;
    double theta, factor; // rope_theta; linear / dynamic / llama3 factor
    double low, high;     // llama3 low_freq_factor, high_freq_factor
    int original_max_pos; // llama3 original_max_position_embeddings
    // yarn (original_max_pos too): beta_fast, beta_slow (0: transformers' 32 and 1), the
    // correction range rounded outward unless truncate is false, and the attention factor cos and
    // sin are multiplied by (attention_factor, else from mscale / mscale_all_dim: dec_yarn_factor)
    double beta_fast, beta_slow, attn_factor;
    bool truncate;
};

// ---- the block description: what the forward pass reads (model/decoder_forward.c), in the
// spirit of llama.cpp's build_norm / build_attn / build_ffn options. A family's config reader
// (model/families/*.c) fills it; the forward never asks which family it runs. Not options yet
// (no family here has them): fused q/k/v or gate/up projections, sigmoid routing, shared
// experts. The RoPE of each layer type (struct dec_rope), which layers slide and which are
// mixtures (dec_config's sliding, moe) and the experts' counts are dec_config's.
enum dec_norm { DEC_NORM_RMS, DEC_NORM_RMS_1P }; // RMSNorm times w; times (1 + w) (Gemma)
// where a block's norms sit: PRE before attention and MLP (input_layernorm and the MLP's),
// POST on what they add (post_attention / post_feedforward); SANDWICH both (Gemma)
enum dec_norm_at { DEC_NORM_PRE = 1, DEC_NORM_POST = 2, DEC_NORM_SANDWICH = 3 };
// q/k norms: none, over each head's hd (Qwen3, Gemma 3), over the whole projection before the
// heads are split (OLMo 2)
enum dec_qk_norm { DEC_QK_NONE, DEC_QK_HEAD, DEC_QK_PROJ };

struct dec_block {
    enum dec_norm norm;              // every RMSNorm of the model (q/k and final too)
    enum dec_norm_at norm_at;        // where the block's norms sit (PRE and POST are bits)
    enum dec_qk_norm qk_norm;        // q/k norms and their width
    bool qkv_bias, o_bias, mlp_bias; // biases of q/k/v, o_proj, the dense MLP's projections
    enum op_act_kind act;            // the gated MLP (and experts): act(gate(x)) * up(x)
    float scale;                     // attention: head_dim^-0.5, Gemma query_pre_attn_scalar^-0.5
    float attn_cap;                  // soft-cap of the scores (Gemma 2; 0: none)
    bool norm_topk;                  // mixture: renormalise the top-k softmax weights
    // model level
    bool tied;             // the head is the embedding
    float embed_scale;     // the embedding times this (Gemma: sqrt(D) rounded to float32; else 1)
    bool embed_tap_scaled; // token_embeddings after the scale (Gemma 3), else before (Gemma 2)
    float final_cap;       // soft-cap of the logits (Gemma 2; 0: none)
    // gpt-oss (GptOssForCausalLM)
    bool sinks;         // a learned logit per head in each attention softmax ("sinks")
    bool router_bias;   // the router is a Linear with a bias
    bool topk_softmax;  // top-k on the router logits, then a softmax over the k
    bool expert_bias;   // the experts' projections have biases
    bool swiglu_clamp;  // experts: (clamp(up) + 1) * g * sigmoid(alpha g), g = min(gate, limit)
    float swiglu_alpha; // 1.702
    float swiglu_limit; // swiglu_limit
    bool experts_interleaved; // experts' gate_up_proj: gate rows 0, 2, 4..., up rows 1, 3, 5...
};

// ---- a family's tensor names (as llama.cpp's LLM_TENSOR_NAMES): leaves of the checkpoint's
// names, to which ".weight" / ".bias" are added; the block's under "{layers}.{i}.". NULL: the
// family has no such tensor (a description that needs it must not be paired with the table).
struct dec_names {
    const char *embed, *norm, *head, *layers; // "model.embed_tokens", "model.norm", "lm_head", ...
    const char *attn_norm, *mlp_norm;         // the pre norms
    const char *post_attn_norm, *post_mlp_norm;
    const char *q, *k, *v, *o, *q_norm, *k_norm; // "self_attn.q_proj", ...
    const char *gate, *up, *down;                // the dense MLP: "mlp.gate_proj", ...
    const char *router, *experts;                // "mlp.gate", "mlp.experts" (+ ".{e}.")
    const char *egate, *eup, *edown; // an expert's: "gate_proj", ... (Mixtral "w1", ...)
    // gpt-oss: the sinks' tensor ("self_attn.sinks"); the experts' fused tensors under
    // {experts}: gate_up ("gate_up_proj") and edown ("down_proj"), each as "_blocks" + "_scales"
    // (MXFP4) and "_bias"
    const char *sinks, *gate_up;
};

struct dec_config {
    const char *arch;              // the architecture's name (static)
    const struct dec_names *names; // the family's tensor names (static)
    int n_layer, hidden, vocab, n_head, n_kv_head, head_dim, ffn, max_pos;
    int n_expert, top_k, expert_ffn; // 0 experts: dense everywhere
    int window;                      // sliding_window of sliding layers (0: none)
    double eps;
    struct dec_block blk;
    int bytes_per_param; // torch_dtype as published: 2 (bf16/f16) or 4
    bool bf16;           // torch_dtype bfloat16 (without the files: their matrices' guess)
    bool *sliding;       // (L) sliding-window layer; owned
    bool *moe;           // (L) mixture-of-experts layer; owned
    struct dec_rope rope_full, rope_sliding;
    bool rope_yarn; // the family reads rope_type "yarn" (gpt-oss; set before dec_read_rope)
};

void dec_config_free(struct dec_config *c); // safe on a zeroed struct
// A family's reader fills a dec_config from config.json: model/decoder_family.h.

// Parameters as transformers instantiates the model (tests/ref/hf/params.py), of layer i.
int64_t dec_layer_params(const struct dec_config *c, int i, bool experts);
// the RMSNorm weights of a block: its pre and post norms, the q/k norms
int64_t dec_block_norm_params(const struct dec_config *c);
int64_t dec_params(const struct dec_config *c);

// inv_freq (n_rot / 2 = hd / 2 entries, double) of a layer type for a prompt of T tokens
// (dynamic NTK grows the base past max_position_embeddings, as transformers does for a call whose
// longest position is T - 1).
void dec_rope_inv_freq(const struct dec_rope *r, int head_dim, int max_pos, int T, double *inv);
// YaRN (modeling_rope_utils.py _compute_yarn_parameters), for every family that has it: inv_freq
// (dim / 2) of base theta with r's factor, original_max_pos, beta_fast / beta_slow, truncate;
// and the attention factor of factor, mscale and mscale_all_dim (0: absent) as transformers
// computes it when attention_factor is absent: get_mscale(factor, mscale) / get_mscale(factor,
// mscale_all_dim) if both are set, else get_mscale(factor).
void dec_yarn_inv_freq(const struct dec_rope *r, int dim, double *inv);
double dec_yarn_factor(double factor, double mscale, double mscale_all_dim);

// ---- weights: a matrix stored BF16 is borrowed from the mapping as it is (h; each matmul widens
// a panel of rows, model/ops.h op_matmul_bf16), any other float dtype is a float32 view (f; F16
// widened by the loader); vectors are always float32 views.
struct dec_mat {
    const float *f;
    const uint16_t *h;
    struct mxfp4_mat q4; // MXFP4 as published (gpt-oss's experts; model/mxfp4.h), if q4.blocks
};

struct dec_block_w {
    const float *attn_norm, *mlp_norm, *post_attn_norm, *post_mlp_norm; // (D) as norm_at says
    const float *q_norm, *k_norm;   // (hd) per head, or (H hd) and (KV hd) over the projection
    struct dec_mat wq, wk, wv, wo;  // (H hd, D) (KV hd, D) x2 (D, H hd)
    const float *bq, *bk, *bv, *bo; // (H hd) (KV hd) x2 (D)
    struct dec_mat gate, up, down;  // dense: (I, D) x2, (D, I)
    const float *bg, *bu, *bd;      // mlp_bias: (I) x2, (D)
    struct dec_mat router;          // mixture: (E, D)
    struct dec_mat *eg, *eu, *ed;   // (E) experts: (Ie, D) x2, (D, Ie)
    // gpt-oss
    const float *sinks;              // sinks: (H) a logit per head
    const float *brouter;            // router_bias: (E)
    const float *bgu, *bed;          // expert_bias: (E, 2 Ie) gate/up interleaved, (E, D)
    struct mxfp4_mat gu_q4, down_q4; // MXFP4 experts: (E, 2 Ie, D / 32, 16), (E, D, Ie / 32, 16)
};

struct decoder {
    struct dec_config cfg;      // owned
    struct dec_mat embed, head; // (V, D); the head unused when tied
    const float *norm;          // (D)
    struct dec_block_w *blk;    // (L) owned
    struct dec_mat *experts;    // (3 E n_moe) owned
    int *id;                    // ((L + 2) x CAT_N) catalogue ids (model/catalogue.h), -1 if absent
    bool any_bf16;              // some matrix is borrowed BF16 (the state needs a panel)
    bool any_mxfp4;             // some matrix is MXFP4 (the state needs a panel)
};

// Takes c (zeroed after), returns the tensors to bind in *list (NULL: config only); is_bf16 (may
// be NULL: widen everything) tells which matrices to borrow as BF16.
struct model_dims;
int dec_init(struct decoder *m, struct dec_config *c, const struct model_dims *dims,
             struct model_tensor **list);
void dec_free(struct decoder *m);

int dec_n_taps(const struct decoder *m);
void dec_catalogue(const struct decoder *m, struct tap_desc *out);
int64_t dec_axis_size(const struct decoder *m, int block, const char *axis);

struct dec_state; // model/decoder.c
int dec_state_init(struct dec_state **s, const struct decoder *m, int max_T, int64_t max_tokens,
                   const uint8_t *want, const struct expert_shard *shard);
void dec_state_free(struct dec_state *s);
float *dec_state_stream(struct dec_state *s); // (N, D) the residual stream
void dec_forward(const struct decoder *m, struct dec_state *s, const struct mbatch *bt,
                 const struct tap *tp, int blk_begin, int blk_end);
double dec_block_flops(const struct dec_config *c, int i, int T);

#endif
