// decoder_family.h - what a Llama-style family is (model/families/*.c): a config reader that
// fills the block description (struct dec_config, model/decoder.h) with the family's defaults,
// a tensor-name table (struct dec_names), its presets and alias rows, and one registry line in
// model/families.c. The shared decoder (model/decoder*.c) never asks which family it runs.
//
// Adding a family: one file in model/families/ with
//   static int read(const struct config *cf, struct dec_config *c, struct ah_error *err)
//   { ... the dec_read_* helpers below, in their order ... }
//   static const struct dec_names names = {...};
//   DEC_FAMILY(foo_family, "foo", "FooForCausalLM", "foo", read, &names, presets, aliases)
// plus its line in model/families.c and its test.
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
// mlp_only_layers is read (Qwen3-MoE)
struct dec_expert_keys {
    const char *n_key;
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

// ---- a family and its registry table
struct dec_family {
    const char *arch;              // "architectures" entry, for messages and `plan`
    const struct dec_names *names; // its tensor names
    // fills c (zeroed, c->arch and c->names set) from config.json
    int (*read)(const struct config *cf, struct dec_config *c, struct ah_error *err);
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
// model_type, its reader and names, its preset array and its alias rows (ended by a zeroed
// row; NULL: none).
#define DEC_FAMILY(var, fname, arch_, mtype, read_, names_, presets_, aliases_)              \
    static const struct dec_family var##_def = {arch_, names_, read_};                       \
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
