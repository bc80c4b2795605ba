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
    DEC_ROPE_LONGROPE, // _compute_longrope_parameters (Phi-3)
    DEC_ROPE_YARN      // _compute_yarn_parameters (gpt-oss, DeepSeek-V3): dec_yarn_inv_freq
};

// modeling_rope_utils.py's parameters of one layer type
struct dec_rope {
    enum dec_rope_type type;
    double theta, factor; // rope_theta; linear / dynamic / llama3 factor
    double low, high;     // llama3 low_freq_factor, high_freq_factor
    int original_max_pos; // llama3 original_max_position_embeddings
    // longrope and yarn: cos and sin times attn_factor (longrope's attention_factor; yarn's,
    // else from mscale / mscale_all_dim: dec_yarn_factor)
    double attn_factor;
    // longrope: inv_freq divided by short_factor (prompts up to original_max_pos tokens) or by
    // long_factor (longer ones)
    const double *ext_short, *ext_long; // (n_rot / 2) each; borrowed from dec_config's longrope
    // yarn (original_max_pos too): beta_fast, beta_slow (0: transformers' 32 and 1), the
    // correction range rounded outward unless truncate is false
    double beta_fast, beta_slow;
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
    // fused projections (Phi-3): one [out, in] matrix whose row blocks are the q, k, v (and the
    // gate, up) matrices, used as views of it with no copy
    bool fused_qkv;     // names->qkv: rows [0, H hd) q, then KV hd k, then KV hd v
    bool fused_gate_up; // names->gate_up: rows [0, I) the gate, then I up
    int n_rot;          // RoPE on the first n_rot dims of each head (0: all of head_dim)
    float clip_qkv;     // > 0: q, k (after their norms) and v clamped to [-c, c]
                        // before the heads are split (OLMoE clip_qkv; 0: none)
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

// ---- DeepSeek-V3's options (model/mla.h; tests/ref/deepseek_v3_ref.py)
// multi-head latent attention (DeepseekV3Attention): on replaces q/k/v by q_a -> q_a_layernorm ->
// q_b (q_proj when q_lora is 0), kv_a_proj_with_mqa -> the kv latent (kv_lora) + one rotary key
// (d_rope) shared by every head, kv_a_layernorm, kv_b_proj -> per-head k_nope (d_nope) and v (d_v);
// head_dim is d_rope (the RoPE tables' width), a query/key head is d_nope + d_rope, a value d_v
struct dec_mla {
    bool on;
    int q_lora, kv_lora, d_nope, d_rope, d_v;
    bool interleave; // rope_interleave: RoPE pairs (2j, 2j+1), de-interleaved first
};
// DeepseekV3TopkRouter + DeepseekV3MoE: sigmoid scores; e_score_correction_bias added for the
// choice only; the top topk_group of n_group groups (a group's score: its two best biased scores);
// the weights are the chosen scores (renormalised with norm_topk), times scale; n_shared shared
// experts (one gated MLP of n_shared x expert_ffn) added to the routed sum; layers below
// first_dense are dense
struct dec_route {
    bool sigmoid_group;
    int n_group, topk_group, n_shared, first_dense;
    float scale; // routed_scaling_factor
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
    const char *qkv, *gate_up;       // fused: "self_attn.qkv_proj", "mlp.gate_up_proj" (Phi-3)
    // DeepSeek-V3: MLA's ("self_attn.q_a_proj", ...), the routing bias (the full leaf,
    // "mlp.gate.e_score_correction_bias"), the shared experts' ("mlp.shared_experts.gate_proj")
    const char *q_a, *q_a_norm, *q_b, *kv_a, *kv_a_norm, *kv_b;
    const char *router_bias, *sgate, *sup, *sdown;
    // gpt-oss: the sinks' tensor ("self_attn.sinks"); the experts' fused tensors under
    // {experts}: egate_up ("gate_up_proj") and edown ("down_proj"), each as "_blocks" + "_scales"
    // (MXFP4) and "_bias"
    const char *sinks, *egate_up;
};

// FP8 block-scaled weights (quantization_config.quant_method "fp8": transformers' fine-grained
// FP8 integration; model/fp8.h). Which matrices are FP8: every nn.Linear of the model but those
// modules_to_not_convert names (and lm_head, which transformers always adds), as
// dec_fp8_converts says; the embedding never (an nn.Embedding).
struct dec_fp8 {
    bool on;    // quant_method "fp8"
    int bn, bk; // weight_block_size [bn, bk]: a scale per bn rows x bk inputs
    char *skip; // owned: modules_to_not_convert, each NUL-ended, then an empty string (or NULL)
    bool keep_router; // the router is an nn.Parameter, never FP8 (DeepSeek-V3's; a family's
                      // reader sets it); else an nn.Linear like the rest (Qwen3-MoE, Mixtral)
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
    double *longrope;   // (2, n_rot / 2) longrope's short_factor then long_factor; owned (or NULL)
    struct dec_fp8 fp8; // FP8 weights (off: none)
    struct dec_mla mla; // DeepSeek-V3 (off: the q/k/v projections)
    struct dec_route route; // DeepSeek-V3 (off: the softmax router)
    int n_mtp;      // num_nextn_predict_layers: in the release, not loaded (transformers does not)
    bool rope_yarn; // set by a reader before dec_read_rope: rope_scaling "yarn" is computed
};

// quantization_config (absent or null: none) into c->fp8: quant_method "fp8" with fmt "e4m3",
// activation_scheme "dynamic", weight_block_size two positive integers (absent: [128, 128]),
// modules_to_not_convert null or strings. Another method or value is an error naming
// config.json and the key. Called after the family's reader (model/decoder_family.c).
int dec_read_fp8(const struct config *cf, struct dec_config *c, struct ah_error *err);
// Whether the linear layer whose weight is `name` ("....weight") is FP8: the parameter's name,
// and the same with every run of digits "*" (transformers' match), contain none of the patterns.
bool dec_fp8_converts(const struct dec_config *c, const char *name);

void dec_config_free(struct dec_config *c); // safe on a zeroed struct
// A family's reader fills a dec_config from config.json: model/decoder_family.h.

// Parameters as transformers instantiates the model (tests/ref/hf/params.py), of layer i.
int64_t dec_layer_params(const struct dec_config *c, int i, bool experts);
// the RMSNorm weights of a block: its pre and post norms, the q/k norms
int64_t dec_block_norm_params(const struct dec_config *c);
int64_t dec_params(const struct dec_config *c);
// DeepSeek-V3's multi-token-prediction layers (not loaded): their own parameters (enorm, hnorm,
// eh_proj, a mixture block, a norm; tests/ref/param_count.py mtp_unique) into *unique, with the
// copies of the embedding and the head the release stores with them into *stored.
void dec_mtp_params(const struct dec_config *c, int64_t *unique, int64_t *stored);

// inv_freq (n_rot / 2 entries, double; head_dim is n_rot) of a layer type for a prompt of T
// tokens (dynamic NTK grows the base past max_position_embeddings, as transformers does for a call
// whose longest position is T - 1; longrope takes long_factor past original_max_pos).
void dec_rope_inv_freq(const struct dec_rope *r, int head_dim, int max_pos, int T, double *inv);
// YaRN (modeling_rope_utils.py _compute_yarn_parameters), for every family that has it: inv_freq
// (dim / 2) of base theta with r's factor, original_max_pos, beta_fast / beta_slow, truncate;
// and the attention factor of factor, mscale and mscale_all_dim (0: absent) as transformers
// computes it when attention_factor is absent: get_mscale(factor, mscale) / get_mscale(factor,
// mscale_all_dim) if both are set, else get_mscale(factor).
void dec_yarn_inv_freq(const struct dec_rope *r, int dim, double *inv);
double dec_yarn_factor(double factor, double mscale, double mscale_all_dim);
// get_mscale (yarn_get_mscale of modeling_deepseek_v3.py): 0.1 mscale ln(scale) + 1, 1 at scale <=
// 1
double dec_yarn_mscale(double scale, double mscale);

// ---- weights: a matrix stored BF16 is borrowed from the mapping as it is (h; each matmul widens
// a panel of rows, model/ops.h op_matmul_bf16), any other float dtype is a float32 view (f; F16
// widened by the loader); vectors are always float32 views.
struct dec_mat {
    const float *f;
    const uint16_t *h;
    // FP8 (model/fp8.h): q8 (N, K) bytes borrowed from the mapping, s8 its weight_scale_inv
    // (ceil(N / bn), ceil(K / bk)) as float32 (F32 or BF16 in the file); a panel dequantized at
    // a time (fp8_matmul)
    const uint8_t *q8;
    const float *s8;
    int bn, bk;
    struct mxfp4_mat q4; // MXFP4 as published (gpt-oss's experts; model/mxfp4.h), if q4.blocks
};

// out (M, N) = in (M, K) . w^T for a matrix stored any of the ways above: FP8 and BF16 a panel
// of rows at a time into `panel` (op_bf16_panel_floats(K, N) floats; model/decmat.c)
void dec_matmul(float *out, const float *in, const struct dec_mat *w, int64_t M, int64_t K,
                int64_t N, float *panel);

struct dec_block_w {
    const float *attn_norm, *mlp_norm, *post_attn_norm, *post_mlp_norm; // (D) as norm_at says
    const float *q_norm, *k_norm;   // (hd) per head, or (H hd) and (KV hd) over the projection
    struct dec_mat wq, wk, wv, wo;  // (H hd, D) (KV hd, D) x2 (D, H hd)
    const float *bq, *bk, *bv, *bo; // (H hd) (KV hd) x2 (D)
    struct dec_mat gate, up, down;  // dense: (I, D) x2, (D, I)
    const float *bg, *bu, *bd;      // mlp_bias: (I) x2, (D)
    struct dec_mat router;          // mixture: (E, D)
    struct dec_mat *eg, *eu, *ed;   // (E) experts: (Ie, D) x2, (D, Ie)
    struct dec_mat qkv, gate_up;    // fused: ((H + 2 KV) hd, D), (2 I, D); wq ... up unused
    // DeepSeek-V3 (dec_config mla / route); wo is o_proj (D, H d_v)
    struct dec_mat q_a, q_b, kv_a,
        kv_b; // (ql, D) (H (dn+dr), ql or D) (kvl + dr, D) (H (dn+dv), kvl)
    const float *q_a_norm, *kv_a_norm; // (ql) (kvl)
    const float *e_bias;               // (E) e_score_correction_bias
    struct dec_mat sg, su, sd;         // shared experts: (Is, D) x2, (D, Is)
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
    bool any_fp8;               // some matrix is FP8 (the state needs a panel)
    // FP8 elements per layer (index 0: the model's, 1 + i: layer i's): q8_w[j] weights and
    // q8_w[n + j] scales outside the routed experts, q8_w[2n + j] and q8_w[3n + j] inside them
    // (n = L + 1); owned, NULL without FP8
    int64_t *q8_w;
    bool any_mxfp4; // some matrix is MXFP4 (the state needs a panel)
};

// The FP8 weights and scales a stage running blocks [b0, b1) holds (model/decoder_family.c's
// stage_bytes): as dec_fam_stage_bytes counts, the routed experts' 1 / n_shards of them.
void dec_fp8_stage(const struct decoder *m, int b0, int b1, bool head, int shard, int n_shards,
                   int64_t *weights, int64_t *scales);

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
