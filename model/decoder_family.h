// decoder_family.h - what a Llama-style family is (model/families/*.c): a config reader that
// fills the block description (struct dec_config, model/decoder.h) with the family's defaults,
// a tensor-name table (struct dec_names), its presets and alias rows, and one registry line in
// model/families.c. The shared decoder (model/decoder*.c) never asks which family it runs.
//
// Adding a family: one file in model/families/ with
//   static const struct dec_reader reader = {...};  // its reader as data (dec_read_std)
//   static const struct dec_names names = {DEC_NAMES_LLAMA, ... its own rows ...};
//   DEC_FAMILY(foo_family, "foo", "FooForCausalLM", "foo", presets, aliases, .names = &names,
//              .reader = &reader, .quant = dec_quant_fp8)
// plus its line in model/families.c and its test. A reader the data cannot say is a function
// (.read) calling the dec_read_* steps below in their order.
#ifndef AH_DECODER_FAMILY_H
#define AH_DECODER_FAMILY_H

#include "model/aliases.h"
#include "model/decoder.h"
#include "model/family.h"

// ---- the readers' shared steps (model/decoder_config.c). Each reads top-level keys of
// config.json with transformers' defaults for absent (or null) keys; errors name config.json and
// the key. A family's reader calls, in this order: dec_read_sizes, dec_read_act, dec_read_window,
// its experts (dec_read_experts), dec_read_flags and its own options, dec_read_rope, then
// dec_read_layers (which also checks the keys harvest does not compute with).

// configuration_*.py's defaults of the sizes
struct dec_defaults {
    int vocab, hidden, ffn, n_layer, n_head, max_pos;
    int n_kv_head; // 0: num_attention_heads (LlamaConfig's None)
    int head_dim;  // 0: hidden_size / num_attention_heads
    double eps;    // rms_norm_eps
};
int dec_read_sizes(const struct config *cf, struct dec_config *c, const struct dec_defaults *d,
                   struct ah_error *err);

// The MLP's activation: key, else (absent or null) alt_key when not NULL, else dflt.
int dec_read_act(const struct config *cf, struct dec_config *c, const char *key,
                 const char *alt_key, const char *dflt, struct ah_error *err);

enum dec_window {
    DEC_WINDOW_NONE,  // the family has none: a nonzero sliding_window is an error
    DEC_WINDOW_GATED, // kept only with use_sliding_window (Qwen; else transformers drops it)
    DEC_WINDOW_ON,    // sliding_window as it is (null: none)
};
// sliding_window (absent: dflt) into c->window
int dec_read_window(const struct config *cf, struct dec_config *c, int dflt, enum dec_window w,
                    struct ah_error *err);

// a mixture's keys: the expert count's key, its default and least value; top-k's default;
// own_ffn: the experts' width is moe_intermediate_size (default 768), else intermediate_size;
// norm_forced: the top-k weights renormalised whatever norm_topk_prob says; only_layers:
// mlp_only_layers is read (Qwen3-MoE); n_alias (not NULL): read instead of n_key when only it is
// present (configuration_olmoe.py's attribute_map: num_local_experts is num_experts)
struct dec_expert_keys {
    const char *n_key, *n_alias;
    int n_dflt, n_min, top_k_dflt;
    bool own_ffn, norm_forced, only_layers;
};
int dec_read_experts(const struct config *cf, struct dec_config *c, const struct dec_expert_keys *k,
                     struct ah_error *err);

// The options every family reads the same way: mlp_bias, tie_word_embeddings (absent:
// tied_dflt), the head_dim^-0.5 scale, no embedding scale, torch_dtype; refuses
// use_bidirectional_attention. *attention_bias: the key (false when absent).
int dec_read_flags(const struct config *cf, struct dec_config *c, bool tied_dflt,
                   bool *attention_bias, struct ah_error *err);

// One layer type's RoPE (tests/ref/hf/decoder.py rope_params): rope_parameters[type] or a flat
// rope_parameters, else rope_theta (absent: theta) + rope_scaling; local_key (not NULL): the
// sliding layers' base without scaling when rope_parameters does not say (Gemma 3's
// rope_local_base_freq).
int dec_read_rope(const struct config *cf, struct dec_config *c, bool sliding, double theta,
                  const char *local_key, struct ah_error *err);

// which layers slide when layer_types does not say (and c->window > 0)
enum dec_sliding {
    DEC_SLIDING_ALL,       // every layer
    DEC_SLIDING_ALTERNATE, // layers 0, 2, 4, ... (Gemma 2)
    DEC_SLIDING_PATTERN,   // all but every sliding_window_pattern-th (Gemma 3)
    DEC_SLIDING_FROM,      // from max_window_layers on (Qwen2, Qwen3)
};
enum dec_moe_layers {
    DEC_MOE_NONE,
    DEC_MOE_ALL,    // every layer a mixture (Mixtral)
    DEC_MOE_SPARSE, // every decoder_sparse_step-th but mlp_only_layers, if experts (Qwen3-MoE)
};
// Checks the keys harvest does not compute with, then fills c->sliding and c->moe.
int dec_read_layers(const struct config *cf, struct dec_config *c, enum dec_sliding sl,
                    enum dec_moe_layers ml, struct ah_error *err);

// ---- a family's reader as data: dec_read_std runs the steps above in their order with the
// family's arguments, so that a family file says only what differs

// the biases of the attention and MLP projections
enum dec_bias {
    DEC_BIAS_KEYS,  // q/k/v and o_proj as attention_bias says, the MLP as mlp_bias (LlamaConfig)
    DEC_BIAS_QWEN2, // q/k/v always, o_proj never, the MLP as mlp_bias (Qwen2)
    DEC_BIAS_ATTN,  // q/k/v and o_proj as attention_bias, the MLP none (OLMo 2, OLMoE: transformers
                    // ignores an mlp_bias key)
    DEC_BIAS_NONE,  // none, whatever the keys say (Phi-3)
};

struct dec_reader {
    struct dec_defaults d;                    // dec_read_sizes'
    const char *act_key, *act_alt, *act_dflt; // dec_read_act's; act_key NULL: "hidden_act", "silu"
    int window;                               // dec_read_window's default and kind
    enum dec_window window_kind;
    const struct dec_expert_keys *experts; // dec_read_experts' (NULL: a dense family)
    bool tied;                             // tie_word_embeddings' default (dec_read_flags)
    // what config.json does not choose of the block (norm kind and place, q/k norms, fused
    // projections): c->blk starts as this, and the steps fill the rest
    struct dec_block blk;
    enum dec_bias bias;
    // the family's own keys, read after the block's biases are set (NULL: none)
    int (*own)(const struct config *cf, struct dec_config *c, struct ah_error *err);
    double theta;            // dec_read_rope's rope_theta default of both layer types
    const char *local_theta; // and its local_key (Gemma 3's rope_local_base_freq)
    // the family's RoPE reader instead of dec_read_rope (NULL: dec_read_rope; Phi-3's longrope)
    int (*rope)(const struct config *cf, struct dec_config *c, struct ah_error *err);
    enum dec_sliding sliding; // dec_read_layers'
    enum dec_moe_layers moe_layers;
};
int dec_read_std(const struct config *cf, struct dec_config *c, const struct dec_reader *r,
                 struct ah_error *err);

// ---- quantization methods: a family declares the quant_method values its reader binds, each
// with the reader of its keys; dec_read_quant refuses any other
struct dec_quant {
    const char *method; // quantization_config.quant_method; NULL ends a family's list
    int (*read)(const struct config *cf, struct dec_config *c, struct ah_error *err);
};
extern const struct dec_quant dec_quant_fp8[]; // "fp8": dec_read_fp8 (model/decoder.h)
// quantization_config (absent or null: none): an object whose quant_method is one of q's (NULL:
// the family binds none), whose reader then reads it; another method is an error naming
// config.json and the key. dec_fam_open calls it after the family's reader.
int dec_read_quant(const struct config *cf, struct dec_config *c, const struct dec_quant *q,
                   struct ah_error *err);

// ---- tensor-name rows the families share: groups of struct dec_names' designated
// initializers (transformers' module paths); a family's table is the groups it has and its own
// rows, as {DEC_NAMES_LLAMA, DEC_NAMES_QK_NORM}
#define DEC_NAMES_MODEL \
    .embed = "model.embed_tokens", .norm = "model.norm", .head = "lm_head", .layers = "model.layers"
#define DEC_NAMES_PRE_NORMS .attn_norm = "input_layernorm", .mlp_norm = "post_attention_layernorm"
#define DEC_NAMES_POST_NORMS \
    .post_attn_norm = "post_attention_layernorm", .post_mlp_norm = "post_feedforward_layernorm"
#define DEC_NAMES_ATTN                                                         \
    .q = "self_attn.q_proj", .k = "self_attn.k_proj", .v = "self_attn.v_proj", \
    .o = "self_attn.o_proj"
#define DEC_NAMES_QK_NORM .q_norm = "self_attn.q_norm", .k_norm = "self_attn.k_norm"
#define DEC_NAMES_MLP     .gate = "mlp.gate_proj", .up = "mlp.up_proj", .down = "mlp.down_proj"
// the routed experts as Qwen3-MoE, OLMoE and DeepSeek-V3 name them: mlp.gate, mlp.experts.{e}.*
#define DEC_NAMES_EXPERTS                                                                   \
    .router = "mlp.gate", .experts = "mlp.experts", .egate = "gate_proj", .eup = "up_proj", \
    .edown = "down_proj"
// modeling_llama.py's: the model's, the pre norms, q/k/v/o and the dense MLP
#define DEC_NAMES_LLAMA DEC_NAMES_MODEL, DEC_NAMES_PRE_NORMS, DEC_NAMES_ATTN, DEC_NAMES_MLP

// alias rows (model/aliases.h) of a block with norms after attention and MLP (Gemma's sandwich,
// OLMo 2): what each adds to the residual stream is after its post norm
#define DEC_ALIASES_POST_NORM                                                                      \
    {.alias = "blocks.{i}.hook_attn_out", .canonical = "layers.{i}.attention_post_norm_output"}, { \
        .alias = "blocks.{i}.hook_mlp_out", .canonical = "layers.{i}.mlp_post_norm_output"         \
    }

// ---- a family and its registry table
struct dec_family {
    const char *arch;              // "architectures" entry, for messages and `plan`
    const struct dec_names *names; // its tensor names
    // its reader: as data (dec_read_std), else a function that fills c (zeroed, c->arch and
    // c->names set) from config.json
    const struct dec_reader *reader;
    int (*read)(const struct config *cf, struct dec_config *c, struct ah_error *err);
    const struct dec_quant *quant; // the quantization methods it binds (NULL: none)
};

// the shared operations of every Llama-style family's table (model/decoder_family.c)
int dec_fam_open(const struct dec_family *f, void **fm, const struct config *cf,
                 const struct model_dims *dims, struct model_tensor **list, struct ah_error *err);
void dec_fam_close(void *fm);
void dec_fam_info(const void *fm, struct model_info *out);
int dec_fam_n_taps(const void *fm);
void dec_fam_catalogue(const void *fm, struct tap_desc *out);
int64_t dec_fam_axis_size(const void *fm, int block, const char *axis);
int dec_fam_state_init(void **fs, const void *fm, int max_T, int64_t max_tokens,
                       const uint8_t *want, const struct expert_shard *shard);
void dec_fam_state_free(void *fs);
void dec_fam_forward(const void *fm, void *fs, const struct mbatch *bt, const struct tap *tp,
                     int blk_begin, int blk_end);
int dec_fam_handoff(void *fs, float **arrays);
double dec_fam_block_flops(const void *fm, int b, int T);
int64_t dec_fam_stage_bytes(const void *fm, int b0, int b1, bool head, int shard, int n_shards,
                            const char **kind);
void dec_fam_describe(const void *fm, char *line, size_t n, int64_t *params, int64_t *bytes,
                      const char **stored);

#define DEC_N(a) (int)(sizeof(a) / sizeof((a)[0]))

// The registry table `var` of a family: harvest's name fname, its "architectures" entry and
// model_type, its preset array and its alias rows (ended by a zeroed row; NULL: none), then the
// rest of its struct dec_family as designated initializers (.names, .reader or .read, .quant).
#define DEC_FAMILY(var, fname, arch_, mtype, presets_, aliases_, ...)                        \
    static const struct dec_family var##_def = {.arch = arch_, __VA_ARGS__};                 \
    static const char *const var##_ids[] = {arch_, mtype, NULL};                             \
    static int var##_open(void **fm, const struct config *cf, const struct model_dims *dims, \
                          struct model_tensor **list, struct ah_error *err) {                \
        return dec_fam_open(&var##_def, fm, cf, dims, list, err);                            \
    }                                                                                        \
    const struct model_family var = {                                                        \
        .name = fname,                                                                       \
        .ids = var##_ids,                                                                    \
        .open = var##_open,                                                                  \
        .close = dec_fam_close,                                                              \
        .info = dec_fam_info,                                                                \
        .n_taps = dec_fam_n_taps,                                                            \
        .catalogue = dec_fam_catalogue,                                                      \
        .axis_size = dec_fam_axis_size,                                                      \
        .state_init = dec_fam_state_init,                                                    \
        .state_free = dec_fam_state_free,                                                    \
        .forward = dec_fam_forward,                                                          \
        .handoff = dec_fam_handoff,                                                          \
        .block_flops = dec_fam_block_flops,                                                  \
        .stage_bytes = dec_fam_stage_bytes,                                                  \
        .describe = dec_fam_describe,                                                        \
        .presets = presets_,                                                                 \
        .n_presets = DEC_N(presets_),                                                        \
        .aliases = aliases_,                                                                 \
        .init_dtype = "bf16",                                                                \
        .init_shards = 2,                                                                    \
        .init_cut = true,                                                                    \
        .init_what = {"a tiny " fname " ", " checkpoint"},                                   \
    };

#endif
