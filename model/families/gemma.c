// gemma.c - Gemma2ForCausalLM and Gemma3ForCausalLM, text (configuration_gemma2.py,
// configuration_gemma3.py): RMSNorm times (1 + w), sandwich norms (pre and post, attention and
// MLP), embeddings times sqrt(D), query_pre_attn_scalar's scale, a gelu_pytorch_tanh gated MLP,
// sliding layers alternating (Gemma 2) or all but every sliding_window_pattern-th (Gemma 3);
// Gemma 2's soft-caps, Gemma 3's per-head q/k norms and rope_local_base_freq.
// L = layers, D = hidden, H = query heads, KV = key/value heads, hd = head_dim, I = MLP width,
// E = routed experts, k = experts a token goes to, Ie = an expert's width, V = vocab
#include "model/decoder_family.h"

#include "model/config.h"

#include <math.h>

// what both Gemmas read beside the shared steps: the embedding scale, query_pre_attn_scalar and
// the soft-caps (Gemma 2's on by default); gemma3 their differences
static int read_gemma(const struct config *cf, struct dec_config *c, bool gemma3,
                      struct ah_error *err) {
    struct dec_block *b = &c->blk;
    b->embed_scale = (float)sqrt((double)c->hidden);
    b->embed_tap_scaled = gemma3; // Gemma 2's token_embeddings tap is unscaled
    double qs, ac, fc, dac = !gemma3 && !cfg_is_null(cf, "attn_logit_softcapping") ? 50.0 : 0.0;
    double dfc = !gemma3 && !cfg_is_null(cf, "final_logit_softcapping") ? 30.0 : 0.0;
    int rc;
    if ((rc = cfg_opt_num(cf, NULL, NULL, "query_pre_attn_scalar", 256, &qs, err)) < 0 ||
        (rc = cfg_opt_num(cf, NULL, NULL, "attn_logit_softcapping", dac, &ac, err)) < 0 ||
        (rc = cfg_opt_num(cf, NULL, NULL, "final_logit_softcapping", dfc, &fc, err)) < 0)
        return rc;
    b->scale = (float)(1.0 / sqrt(qs));
    b->attn_cap = ac > 0 ? (float)ac : 0.0f;
    b->final_cap = fc > 0 ? (float)fc : 0.0f;
    return 0;
}

static int gemma2_own(const struct config *cf, struct dec_config *c, struct ah_error *err) {
    return read_gemma(cf, c, false, err);
}

static int gemma3_own(const struct config *cf, struct dec_config *c, struct ah_error *err) {
    return read_gemma(cf, c, true, err);
}

// RMSNorm times (1 + w), sandwich norms, hidden_activation (else hidden_act), tied embeddings
#define GEMMA_READER                                                                          \
    .act_key = "hidden_activation", .act_alt = "hidden_act", .act_dflt = "gelu_pytorch_tanh", \
    .window = 4096, .window_kind = DEC_WINDOW_ON, .tied = true

static const struct dec_reader gemma2_reader = {
    .d = {.vocab = 256000,
          .hidden = 2304,
          .ffn = 9216,
          .n_layer = 26,
          .n_head = 8,
          .max_pos = 8192,
          .n_kv_head = 4,
          .head_dim = 256,
          .eps = 1e-6},
    GEMMA_READER,
    .blk = {.norm = DEC_NORM_RMS_1P, .norm_at = DEC_NORM_SANDWICH},
    .own = gemma2_own,
    .theta = 10000.0,
    .sliding = DEC_SLIDING_ALTERNATE,
};

static const struct dec_reader gemma3_reader = {
    .d = {.vocab = 262208,
          .hidden = 2304,
          .ffn = 9216,
          .n_layer = 26,
          .n_head = 8,
          .max_pos = 131072,
          .n_kv_head = 4,
          .head_dim = 256,
          .eps = 1e-6},
    GEMMA_READER,
    .blk = {.norm = DEC_NORM_RMS_1P, .norm_at = DEC_NORM_SANDWICH, .qk_norm = DEC_QK_HEAD},
    .own = gemma3_own,
    .theta = 1e6,
    .local_theta = "rope_local_base_freq",
    .sliding = DEC_SLIDING_PATTERN,
};

// the pre norms are input_layernorm and pre_feedforward_layernorm
static const struct dec_names gemma_names = {DEC_NAMES_MODEL,
                                             DEC_NAMES_POST_NORMS,
                                             DEC_NAMES_ATTN,
                                             DEC_NAMES_QK_NORM,
                                             DEC_NAMES_MLP,
                                             .attn_norm = "input_layernorm",
                                             .mlp_norm = "pre_feedforward_layernorm"};

// Gemma's own aliases (model/aliases.h): with sandwich norms what the block adds to the residual
// stream is after the post norm; TransformerLens folds Gemma 2's sqrt(D) into W_E, which
// Hugging Face applies after the embedding (layers.0.layer_input)
static const struct alias_row gemma2_aliases[] = {
    DEC_ALIASES_POST_NORM, {.alias = "hook_embed", .canonical = "layers.0.layer_input"}, {0}};
static const struct alias_row gemma3_aliases[] = {DEC_ALIASES_POST_NORM, {0}};

// init-model presets: tests/ref/hf/make_tiny.py's tiny_config, pasted as the config.json text
// (every key of the release config in tests/ref/hf-configs that the preset is cut from,
// dimensions shrunk; the release named in "_tiny_from")
// gemma-2-2b-it's keys before the family's own and _tiny_from: the soft-caps,
// query_pre_attn_scalar and rope_theta are each family's
#define GEMMA_TINY(arch, mtype, attn_cap, final_cap, qpas, theta) \
    "{\"_name_or_path\": \"tiny\", "                              \
    "\"architectures\": [\"" arch "\"], "                         \
    "\"attention_bias\": false, "                                 \
    "\"attention_dropout\": 0.0, "                                \
    "\"attn_logit_softcapping\": " attn_cap ", "                  \
    "\"bos_token_id\": 2, "                                       \
    "\"cache_implementation\": \"hybrid\", "                      \
    "\"eos_token_id\": [1, 107], "                                \
    "\"final_logit_softcapping\": " final_cap ", "                \
    "\"head_dim\": 16, "                                          \
    "\"hidden_act\": \"gelu_pytorch_tanh\", "                     \
    "\"hidden_activation\": \"gelu_pytorch_tanh\", "              \
    "\"hidden_size\": 32, "                                       \
    "\"initializer_range\": 0.02, "                               \
    "\"intermediate_size\": 48, "                                 \
    "\"max_position_embeddings\": 64, "                           \
    "\"model_type\": \"" mtype "\", "                             \
    "\"num_attention_heads\": 4, "                                \
    "\"num_hidden_layers\": 3, "                                  \
    "\"num_key_value_heads\": 2, "                                \
    "\"pad_token_id\": 0, "                                       \
    "\"query_pre_attn_scalar\": " qpas ", "                       \
    "\"rms_norm_eps\": 1e-06, "                                   \
    "\"rope_theta\": " theta ", "                                 \
    "\"sliding_window\": 4, "                                     \
    "\"torch_dtype\": \"bfloat16\", "                             \
    "\"transformers_version\": \"4.43.3\", "                      \
    "\"use_cache\": true, "                                       \
    "\"vocab_size\": 96, "

static const char pr_gemma2[] = GEMMA_TINY("Gemma2ForCausalLM", "gemma2", "50.0", "30.0", "24",
                                           "10000.0") "\"_tiny_from\": \"gemma-2-2b-it.json\"}";

static const char pr_gemma3[] =
    GEMMA_TINY("Gemma3ForCausalLM", "gemma3_text", "null", "null", "16",
               "1000000.0") "\"rope_local_base_freq\": 10000.0, "
                            "\"sliding_window_pattern\": 2, "
                            "\"rope_scaling\": {\"factor\": 8.0, "
                            "\"rope_type\": \"linear\"}, "
                            "\"_tiny_from\": \"gemma-2-2b-it.json + Gemma3ForCausalLM's keys (no "
                            "release config of this family in tests/ref/hf-configs)\"}";

static const struct model_preset gemma2_presets[] = {{"gemma-2-2b", pr_gemma2}};
static const struct model_preset gemma3_presets[] = {{"gemma-3", pr_gemma3}};

DEC_FAMILY(gemma2_family, "gemma2", "Gemma2ForCausalLM", "gemma2", gemma2_presets, gemma2_aliases,
           .names = &gemma_names, .reader = &gemma2_reader, .quant = dec_quant_fp8)
DEC_FAMILY(gemma3_family, "gemma3", "Gemma3ForCausalLM", "gemma3_text", gemma3_presets,
           gemma3_aliases, .names = &gemma_names, .reader = &gemma3_reader, .quant = dec_quant_fp8)
