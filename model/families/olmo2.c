// olmo2.c - Olmo2ForCausalLM (configuration_olmo2.py, modeling_olmo2.py; float64 reference
// tests/ref/olmo2_ref.py): no norm before attention or MLP, an RMSNorm on what each adds
// (post_attention_layernorm, post_feedforward_layernorm) before the residual add; q_norm and
// k_norm RMSNorms over the whole q / k projection (H hd and KV hd wide) before the heads are split
// and RoPE; a gated SiLU MLP without biases; attention_bias on q/k/v and o_proj.
// L = layers, D = hidden, H = query heads, KV = key/value heads, hd = head_dim, I = MLP width,
// V = vocab
#include "model/decoder_family.h"

#include "model/config.h"

static const struct dec_reader olmo2_reader = {
    .d = {.vocab = 50304,
          .hidden = 4096,
          .ffn = 11008,
          .n_layer = 32,
          .n_head = 32,
          .max_pos = 2048,
          .eps = 1e-5},
    .blk = {.norm = DEC_NORM_RMS, .norm_at = DEC_NORM_POST, .qk_norm = DEC_QK_PROJ},
    .bias = DEC_BIAS_ATTN, // Olmo2MLP has none (transformers ignores an mlp_bias key)
    .theta = 10000.0,
};

// no norms before attention and MLP: the post norms
static const struct dec_names olmo2_names = {DEC_NAMES_MODEL, DEC_NAMES_POST_NORMS, DEC_NAMES_ATTN,
                                             DEC_NAMES_QK_NORM, DEC_NAMES_MLP};

// OLMo 2's own aliases (model/aliases.h): what attention and MLP add to the residual stream is
// after their post norms; there is no norm before them for TransformerLens's ln1 / ln2
static const struct alias_row olmo2_aliases[] = {
    DEC_ALIASES_POST_NORM,
    {.alias = "blocks.{i}.ln1.hook_normalized",
     .why =
         "OLMo 2 has no norm before the attention, which reads layers.{i}.layer_input; its norm is "
         "after it: layers.{i}.attention_post_norm_output"},
    {.alias = "blocks.{i}.ln2.hook_normalized",
     .why = "OLMo 2 has no norm before the MLP, which reads layers.{i}.layer_mid; its norm is "
            "after it: "
            "layers.{i}.mlp_post_norm_output"},
    {0}};

// init-model preset: the release config.json, tests/ref/configs/OLMo-2-1124-7B.json, key for key
// with the dimensions shrunk, bfloat16 (the release is float32) and two key/value heads (the 7B
// has as many as query heads) so that k_norm's width differs from q_norm's.
static const char pr_olmo2[] = "{\"architectures\": [\"Olmo2ForCausalLM\"], "
                               "\"attention_bias\": false, "
                               "\"attention_dropout\": 0.0, "
                               "\"eos_token_id\": 100257, "
                               "\"hidden_act\": \"silu\", "
                               "\"hidden_size\": 32, "
                               "\"initializer_range\": 0.02, "
                               "\"intermediate_size\": 48, "
                               "\"max_position_embeddings\": 64, "
                               "\"model_type\": \"olmo2\", "
                               "\"num_attention_heads\": 4, "
                               "\"num_hidden_layers\": 2, "
                               "\"num_key_value_heads\": 2, "
                               "\"pad_token_id\": 100277, "
                               "\"rms_norm_eps\": 1e-06, "
                               "\"rope_scaling\": null, "
                               "\"rope_theta\": 500000, "
                               "\"tie_word_embeddings\": false, "
                               "\"torch_dtype\": \"bfloat16\", "
                               "\"transformers_version\": \"4.47.0.dev0\", "
                               "\"use_cache\": true, "
                               "\"vocab_size\": 96, "
                               "\"_tiny_from\": \"tests/ref/configs/OLMo-2-1124-7B.json\"}";

static const struct model_preset olmo2_presets[] = {{"OLMo-2-1124-7B", pr_olmo2}};

DEC_FAMILY(olmo2_family, "olmo2", "Olmo2ForCausalLM", "olmo2", olmo2_presets, olmo2_aliases,
           .names = &olmo2_names, .reader = &olmo2_reader, .quant = dec_quant_fp8)
