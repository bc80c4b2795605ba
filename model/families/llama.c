// llama.c - LlamaForCausalLM and MistralForCausalLM (configuration_llama.py,
// configuration_mistral.py; modeling_llama.py's block: RMSNorm before attention and MLP, RoPE,
// grouped-query attention, a gated SiLU MLP). Mistral adds the sliding window of every layer.
// L = layers, D = hidden, H = query heads, KV = key/value heads, hd = head_dim, I = MLP width,
// E = routed experts, k = experts a token goes to, Ie = an expert's width, V = vocab
#include "model/decoder_family.h"

#include "model/config.h"

// Llama and Mistral read the same keys, with their own defaults and window: the Llama block (pre
// RMSNorms, biases as attention_bias says)
static const struct dec_reader llama_reader = {
    .d = {.vocab = 32000,
          .hidden = 4096,
          .ffn = 11008,
          .n_layer = 32,
          .n_head = 32,
          .max_pos = 2048,
          .eps = 1e-6},
    .blk = {.norm = DEC_NORM_RMS, .norm_at = DEC_NORM_PRE},
    .theta = 10000.0,
};

static const struct dec_reader mistral_reader = {
    .d = {.vocab = 32000,
          .hidden = 4096,
          .ffn = 14336,
          .n_layer = 32,
          .n_head = 32,
          .max_pos = 131072,
          .n_kv_head = 8,
          .eps = 1e-6},
    .window = 4096,
    .window_kind = DEC_WINDOW_ON,
    .blk = {.norm = DEC_NORM_RMS, .norm_at = DEC_NORM_PRE},
    .theta = 10000.0,
};

static const struct dec_names llama_names = {DEC_NAMES_LLAMA};

// init-model presets: tests/ref/hf/make_tiny.py's tiny_config, pasted as the config.json text
// (every key of the release config in tests/ref/hf-configs that the preset is cut from,
// dimensions shrunk; the release named in "_tiny_from"). The Llama 3 releases' keys: the
// release's name, its llama3 RoPE factor, tie_word_embeddings, torch_dtype, transformers_version
#define LLAMA3_TINY(name, factor, tied, dtype, version) \
    "{\"_name_or_path\": \"meta-llama/" name "\", "     \
    "\"architectures\": [\"LlamaForCausalLM\"], "       \
    "\"attention_bias\": false, "                       \
    "\"attention_dropout\": 0.0, "                      \
    "\"bos_token_id\": 128000, "                        \
    "\"eos_token_id\": 128001, "                        \
    "\"head_dim\": 8, "                                 \
    "\"hidden_act\": \"silu\", "                        \
    "\"hidden_size\": 32, "                             \
    "\"initializer_range\": 0.02, "                     \
    "\"intermediate_size\": 48, "                       \
    "\"max_position_embeddings\": 64, "                 \
    "\"mlp_bias\": false, "                             \
    "\"model_type\": \"llama\", "                       \
    "\"num_attention_heads\": 4, "                      \
    "\"num_hidden_layers\": 2, "                        \
    "\"num_key_value_heads\": 2, "                      \
    "\"pretraining_tp\": 1, "                           \
    "\"rms_norm_eps\": 1e-05, "                         \
    "\"rope_scaling\": {\"factor\": " factor ", "       \
    "\"high_freq_factor\": 4.0, "                       \
    "\"low_freq_factor\": 1.0, "                        \
    "\"original_max_position_embeddings\": 16, "        \
    "\"rope_type\": \"llama3\"}, "                      \
    "\"rope_theta\": 500000.0, "                        \
    "\"tie_word_embeddings\": " tied ", "               \
    "\"torch_dtype\": \"" dtype "\", "                  \
    "\"transformers_version\": \"" version "\", "       \
    "\"use_cache\": true, "                             \
    "\"vocab_size\": 96, "                              \
    "\"_tiny_from\": \"" name ".json\"}"

static const char pr_llama[] = LLAMA3_TINY("Llama-3.2-1B", "32.0", "true", "bfloat16", "4.44.2");
static const char pr_llama_untied[] =
    LLAMA3_TINY("Llama-3.1-8B", "8.0", "false", "float32", "4.46.3");

static const char pr_mistral[] = "{\"_name_or_path\": \"mistralai/Mistral-7B-v0.1\", "
                                 "\"architectures\": [\"MistralForCausalLM\"], "
                                 "\"bos_token_id\": 1, "
                                 "\"eos_token_id\": 2, "
                                 "\"hidden_act\": \"silu\", "
                                 "\"hidden_size\": 32, "
                                 "\"initializer_range\": 0.02, "
                                 "\"intermediate_size\": 48, "
                                 "\"max_position_embeddings\": 64, "
                                 "\"model_type\": \"mistral\", "
                                 "\"num_attention_heads\": 4, "
                                 "\"num_hidden_layers\": 2, "
                                 "\"num_key_value_heads\": 2, "
                                 "\"rms_norm_eps\": 1e-05, "
                                 "\"rope_theta\": 10000.0, "
                                 "\"sliding_window\": 4, "
                                 "\"tie_word_embeddings\": false, "
                                 "\"torch_dtype\": \"float32\", "
                                 "\"transformers_version\": \"4.34.0\", "
                                 "\"use_cache\": true, "
                                 "\"vocab_size\": 96, "
                                 "\"_tiny_from\": \"Mistral-7B-v0.1.json\"}";

static const struct model_preset llama_presets[] = {{"Llama-3.2-1B", pr_llama},
                                                    {"Llama-3.1-8B", pr_llama_untied}};
static const struct model_preset mistral_presets[] = {{"Mistral-7B-v0.1", pr_mistral}};

DEC_FAMILY(llama_family, "llama", "LlamaForCausalLM", "llama", llama_presets, NULL,
           .names = &llama_names, .reader = &llama_reader, .quant = dec_quant_fp8)
DEC_FAMILY(mistral_family, "mistral", "MistralForCausalLM", "mistral", mistral_presets, NULL,
           .names = &llama_names, .reader = &mistral_reader, .quant = dec_quant_fp8)
