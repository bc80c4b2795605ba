// llama.c - LlamaForCausalLM and MistralForCausalLM (configuration_llama.py,
// configuration_mistral.py; modeling_llama.py's block: RMSNorm before attention and MLP, RoPE,
// grouped-query attention, a gated SiLU MLP). Mistral adds the sliding window of every layer.
// L = layers, D = hidden, H = query heads, KV = key/value heads, hd = head_dim, I = MLP width,
// E = routed experts, k = experts a token goes to, Ie = an expert's width, V = vocab
#include "model/decoder_family.h"

#include "model/config.h"

// the Llama block: pre RMSNorms, biases as attention_bias says
static void llama_block(struct dec_config *c, bool attention_bias) {
    c->blk.norm = DEC_NORM_RMS;
    c->blk.norm_at = DEC_NORM_PRE;
    c->blk.qk_norm = DEC_QK_NONE;
    c->blk.qkv_bias = attention_bias;
    c->blk.o_bias = attention_bias;
}

// Llama and Mistral read the same keys, with their own defaults and window
static int read_llama_like(const struct config *cf, struct dec_config *c,
                           const struct dec_defaults *d, int window, enum dec_window w,
                           struct ah_error *err) {
    bool ab;
    int rc;
    if ((rc = dec_read_sizes(cf, c, d, err)) < 0 ||
        (rc = dec_read_act(cf, c, "hidden_act", NULL, "silu", err)) < 0 ||
        (rc = dec_read_window(cf, c, window, w, err)) < 0 ||
        (rc = dec_read_flags(cf, c, false, &ab, err)) < 0)
        return rc;
    llama_block(c, ab);
    if ((rc = dec_read_rope(cf, c, false, 10000.0, NULL, err)) < 0 ||
        (rc = dec_read_rope(cf, c, true, 10000.0, NULL, err)) < 0)
        return rc;
    return dec_read_layers(cf, c, DEC_SLIDING_ALL, DEC_MOE_NONE, err);
}

static int read_llama(const struct config *cf, struct dec_config *c, struct ah_error *err) {
    static const struct dec_defaults d = {.vocab = 32000,
                                          .hidden = 4096,
                                          .ffn = 11008,
                                          .n_layer = 32,
                                          .n_head = 32,
                                          .max_pos = 2048,
                                          .eps = 1e-6};
    return read_llama_like(cf, c, &d, 0, DEC_WINDOW_NONE, err);
}

static int read_mistral(const struct config *cf, struct dec_config *c, struct ah_error *err) {
    static const struct dec_defaults d = {.vocab = 32000,
                                          .hidden = 4096,
                                          .ffn = 14336,
                                          .n_layer = 32,
                                          .n_head = 32,
                                          .max_pos = 131072,
                                          .n_kv_head = 8,
                                          .eps = 1e-6};
    return read_llama_like(cf, c, &d, 4096, DEC_WINDOW_ON, err);
}

static const struct dec_names llama_names = {
    .embed = "model.embed_tokens",
    .norm = "model.norm",
    .head = "lm_head",
    .layers = "model.layers",
    .attn_norm = "input_layernorm",
    .mlp_norm = "post_attention_layernorm",
    .q = "self_attn.q_proj",
    .k = "self_attn.k_proj",
    .v = "self_attn.v_proj",
    .o = "self_attn.o_proj",
    .gate = "mlp.gate_proj",
    .up = "mlp.up_proj",
    .down = "mlp.down_proj",
};

// init-model presets: tests/ref/hf/make_tiny.py's tiny_config, pasted as the config.json text
// (every key of the release config in tests/ref/hf-configs that the preset is cut from,
// dimensions shrunk; the release named in "_tiny_from")
static const char pr_llama[] = "{\"_name_or_path\": \"meta-llama/Llama-3.2-1B\", "
                               "\"architectures\": [\"LlamaForCausalLM\"], "
                               "\"attention_bias\": false, "
                               "\"attention_dropout\": 0.0, "
                               "\"bos_token_id\": 128000, "
                               "\"eos_token_id\": 128001, "
                               "\"head_dim\": 8, "
                               "\"hidden_act\": \"silu\", "
                               "\"hidden_size\": 32, "
                               "\"initializer_range\": 0.02, "
                               "\"intermediate_size\": 48, "
                               "\"max_position_embeddings\": 64, "
                               "\"mlp_bias\": false, "
                               "\"model_type\": \"llama\", "
                               "\"num_attention_heads\": 4, "
                               "\"num_hidden_layers\": 2, "
                               "\"num_key_value_heads\": 2, "
                               "\"pretraining_tp\": 1, "
                               "\"rms_norm_eps\": 1e-05, "
                               "\"rope_scaling\": {\"factor\": 32.0, "
                               "\"high_freq_factor\": 4.0, "
                               "\"low_freq_factor\": 1.0, "
                               "\"original_max_position_embeddings\": 16, "
                               "\"rope_type\": \"llama3\"}, "
                               "\"rope_theta\": 500000.0, "
                               "\"tie_word_embeddings\": true, "
                               "\"torch_dtype\": \"bfloat16\", "
                               "\"transformers_version\": \"4.44.2\", "
                               "\"use_cache\": true, "
                               "\"vocab_size\": 96, "
                               "\"_tiny_from\": \"Llama-3.2-1B.json\"}";

static const char pr_llama_untied[] = "{\"_name_or_path\": \"meta-llama/Llama-3.1-8B\", "
                                      "\"architectures\": [\"LlamaForCausalLM\"], "
                                      "\"attention_bias\": false, "
                                      "\"attention_dropout\": 0.0, "
                                      "\"bos_token_id\": 128000, "
                                      "\"eos_token_id\": 128001, "
                                      "\"head_dim\": 8, "
                                      "\"hidden_act\": \"silu\", "
                                      "\"hidden_size\": 32, "
                                      "\"initializer_range\": 0.02, "
                                      "\"intermediate_size\": 48, "
                                      "\"max_position_embeddings\": 64, "
                                      "\"mlp_bias\": false, "
                                      "\"model_type\": \"llama\", "
                                      "\"num_attention_heads\": 4, "
                                      "\"num_hidden_layers\": 2, "
                                      "\"num_key_value_heads\": 2, "
                                      "\"pretraining_tp\": 1, "
                                      "\"rms_norm_eps\": 1e-05, "
                                      "\"rope_scaling\": {\"factor\": 8.0, "
                                      "\"high_freq_factor\": 4.0, "
                                      "\"low_freq_factor\": 1.0, "
                                      "\"original_max_position_embeddings\": 16, "
                                      "\"rope_type\": \"llama3\"}, "
                                      "\"rope_theta\": 500000.0, "
                                      "\"tie_word_embeddings\": false, "
                                      "\"torch_dtype\": \"float32\", "
                                      "\"transformers_version\": \"4.46.3\", "
                                      "\"use_cache\": true, "
                                      "\"vocab_size\": 96, "
                                      "\"_tiny_from\": \"Llama-3.1-8B.json\"}";

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

DEC_FAMILY(llama_family, "llama", "LlamaForCausalLM", "llama", read_llama, &llama_names,
           llama_presets, NULL)
DEC_FAMILY(mistral_family, "mistral", "MistralForCausalLM", "mistral", read_mistral, &llama_names,
           mistral_presets, NULL)
