// qwen.c - Qwen2ForCausalLM, Qwen3ForCausalLM and Qwen3MoeForCausalLM (configuration_qwen2.py,
// configuration_qwen3.py, configuration_qwen3_moe.py): the Llama block; Qwen2 with q/k/v biases
// and none on o_proj, Qwen3 with RMSNorms over each head's queries and keys (q_norm, k_norm),
// Qwen3-MoE's mixture blocks (softmax router, top-k, norm_topk_prob). The sliding window only
// with use_sliding_window, from max_window_layers on (Qwen2, Qwen3).
// L = layers, D = hidden, H = query heads, KV = key/value heads, hd = head_dim, I = MLP width,
// E = routed experts, k = experts a token goes to, Ie = an expert's width, V = vocab
#include "model/decoder_family.h"

#include "model/config.h"

// Qwen2's keys (Qwen3 the same but for the q/k norms and head_dim's default)
static int read_qwen_dense(const struct config *cf, struct dec_config *c,
                           const struct dec_defaults *d, bool qwen3, struct ah_error *err) {
    bool ab;
    int rc;
    if ((rc = dec_read_sizes(cf, c, d, err)) < 0 ||
        (rc = dec_read_act(cf, c, "hidden_act", NULL, "silu", err)) < 0 ||
        (rc = dec_read_window(cf, c, 4096, DEC_WINDOW_GATED, err)) < 0 ||
        (rc = dec_read_flags(cf, c, false, &ab, err)) < 0)
        return rc;
    c->blk.norm = DEC_NORM_RMS;
    c->blk.norm_at = DEC_NORM_PRE;
    c->blk.qk_norm = qwen3 ? DEC_QK_HEAD : DEC_QK_NONE;
    c->blk.qkv_bias = !qwen3 || ab; // Qwen2: always, and never on o_proj
    c->blk.o_bias = qwen3 && ab;
    if ((rc = dec_read_rope(cf, c, false, 10000.0, NULL, err)) < 0 ||
        (rc = dec_read_rope(cf, c, true, 10000.0, NULL, err)) < 0)
        return rc;
    return dec_read_layers(cf, c, DEC_SLIDING_FROM, DEC_MOE_NONE, err);
}

static int read_qwen2(const struct config *cf, struct dec_config *c, struct ah_error *err) {
    static const struct dec_defaults d = {.vocab = 151936,
                                          .hidden = 4096,
                                          .ffn = 22016,
                                          .n_layer = 32,
                                          .n_head = 32,
                                          .max_pos = 32768,
                                          .eps = 1e-6};
    return read_qwen_dense(cf, c, &d, false, err);
}

static int read_qwen3(const struct config *cf, struct dec_config *c, struct ah_error *err) {
    static const struct dec_defaults d = {.vocab = 151936,
                                          .hidden = 4096,
                                          .ffn = 22016,
                                          .n_layer = 32,
                                          .n_head = 32,
                                          .max_pos = 32768,
                                          .head_dim = 128,
                                          .eps = 1e-6};
    return read_qwen_dense(cf, c, &d, true, err);
}

static int read_qwen3_moe(const struct config *cf, struct dec_config *c, struct ah_error *err) {
    static const struct dec_defaults d = {.vocab = 151936,
                                          .hidden = 2048,
                                          .ffn = 6144,
                                          .n_layer = 24,
                                          .n_head = 32,
                                          .max_pos = 32768,
                                          .n_kv_head = 4,
                                          .head_dim = 128,
                                          .eps = 1e-6};
    static const struct dec_expert_keys ek = {.n_key = "num_experts",
                                              .n_dflt = 128,
                                              .n_min = 0,
                                              .top_k_dflt = 8,
                                              .own_ffn = true,
                                              .only_layers = true};
    bool ab;
    int rc;
    if ((rc = dec_read_sizes(cf, c, &d, err)) < 0 ||
        (rc = dec_read_act(cf, c, "hidden_act", NULL, "silu", err)) < 0 ||
        (rc = dec_read_window(cf, c, 4096, DEC_WINDOW_GATED, err)) < 0 ||
        (rc = dec_read_experts(cf, c, &ek, err)) < 0 ||
        (rc = dec_read_flags(cf, c, false, &ab, err)) < 0)
        return rc;
    c->blk.norm = DEC_NORM_RMS;
    c->blk.norm_at = DEC_NORM_PRE;
    c->blk.qk_norm = DEC_QK_HEAD;
    c->blk.qkv_bias = ab;
    c->blk.o_bias = ab;
    if ((rc = dec_read_rope(cf, c, false, 10000.0, NULL, err)) < 0 ||
        (rc = dec_read_rope(cf, c, true, 10000.0, NULL, err)) < 0)
        return rc;
    return dec_read_layers(cf, c, DEC_SLIDING_ALL, DEC_MOE_SPARSE, err);
}

static const struct dec_names qwen_names = {
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
    .q_norm = "self_attn.q_norm",
    .k_norm = "self_attn.k_norm",
    .router = "mlp.gate",
    .experts = "mlp.experts",
    .egate = "gate_proj",
    .eup = "up_proj",
    .edown = "down_proj",
};

// init-model presets: tests/ref/hf/make_tiny.py's tiny_config, pasted as the config.json text
// (every key of the release config in tests/ref/hf-configs that the preset is cut from,
// dimensions shrunk; the release named in "_tiny_from")
static const char pr_qwen2[] = "{\"_name_or_path\": \"Qwen/Qwen2.5-0.5B\", "
                               "\"architectures\": [\"Qwen2ForCausalLM\"], "
                               "\"attention_dropout\": 0.0, "
                               "\"bos_token_id\": 151643, "
                               "\"eos_token_id\": 151643, "
                               "\"hidden_act\": \"silu\", "
                               "\"hidden_size\": 32, "
                               "\"initializer_range\": 0.02, "
                               "\"intermediate_size\": 48, "
                               "\"max_position_embeddings\": 64, "
                               "\"max_window_layers\": 1, "
                               "\"model_type\": \"qwen2\", "
                               "\"num_attention_heads\": 4, "
                               "\"num_hidden_layers\": 2, "
                               "\"num_key_value_heads\": 2, "
                               "\"pad_token_id\": null, "
                               "\"rms_norm_eps\": 1e-06, "
                               "\"rope_theta\": 1000000.0, "
                               "\"sliding_window\": null, "
                               "\"tie_word_embeddings\": true, "
                               "\"torch_dtype\": \"bfloat16\", "
                               "\"transformers_version\": \"4.44.2\", "
                               "\"unsloth_fixed\": true, "
                               "\"use_cache\": true, "
                               "\"use_mrope\": false, "
                               "\"use_sliding_window\": false, "
                               "\"vocab_size\": 96, "
                               "\"_tiny_from\": \"Qwen2.5-0.5B.json\"}";

static const char pr_qwen3[] = "{\"architectures\": [\"Qwen3ForCausalLM\"], "
                               "\"attention_bias\": false, "
                               "\"attention_dropout\": 0.0, "
                               "\"bos_token_id\": 151643, "
                               "\"eos_token_id\": 151645, "
                               "\"head_dim\": 16, "
                               "\"hidden_act\": \"silu\", "
                               "\"hidden_size\": 32, "
                               "\"initializer_range\": 0.02, "
                               "\"intermediate_size\": 48, "
                               "\"max_position_embeddings\": 64, "
                               "\"max_window_layers\": 2, "
                               "\"model_type\": \"qwen3\", "
                               "\"num_attention_heads\": 4, "
                               "\"num_hidden_layers\": 2, "
                               "\"num_key_value_heads\": 2, "
                               "\"rms_norm_eps\": 1e-06, "
                               "\"rope_scaling\": null, "
                               "\"rope_theta\": 1000000, "
                               "\"sliding_window\": null, "
                               "\"tie_word_embeddings\": true, "
                               "\"torch_dtype\": \"bfloat16\", "
                               "\"transformers_version\": \"4.51.0\", "
                               "\"use_cache\": true, "
                               "\"use_sliding_window\": false, "
                               "\"vocab_size\": 96, "
                               "\"_tiny_from\": \"Qwen3-0.6B.json\"}";

static const char pr_qwen3_moe[] =
    "{\"architectures\": [\"Qwen3MoeForCausalLM\"], "
    "\"attention_bias\": false, "
    "\"attention_dropout\": 0.0, "
    "\"bos_token_id\": 151643, "
    "\"eos_token_id\": 151645, "
    "\"head_dim\": 16, "
    "\"hidden_act\": \"silu\", "
    "\"hidden_size\": 32, "
    "\"initializer_range\": 0.02, "
    "\"intermediate_size\": 48, "
    "\"max_position_embeddings\": 64, "
    "\"max_window_layers\": 3, "
    "\"model_type\": \"qwen3_moe\", "
    "\"num_attention_heads\": 4, "
    "\"num_hidden_layers\": 3, "
    "\"num_key_value_heads\": 2, "
    "\"rms_norm_eps\": 1e-06, "
    "\"rope_scaling\": null, "
    "\"rope_theta\": 1000000, "
    "\"sliding_window\": null, "
    "\"tie_word_embeddings\": true, "
    "\"torch_dtype\": \"bfloat16\", "
    "\"transformers_version\": \"4.51.0\", "
    "\"use_cache\": true, "
    "\"use_sliding_window\": false, "
    "\"vocab_size\": 96, "
    "\"num_experts\": 4, "
    "\"num_experts_per_tok\": 2, "
    "\"moe_intermediate_size\": 24, "
    "\"norm_topk_prob\": true, "
    "\"decoder_sparse_step\": 1, "
    "\"mlp_only_layers\": [1], "
    "\"router_aux_loss_coef\": 0.001, "
    "\"output_router_logits\": false, "
    "\"_tiny_from\": \"Qwen3-0.6B.json + Qwen3MoeForCausalLM's keys (no "
    "release config of this family in tests/ref/hf-configs)\"}";

static const struct model_preset qwen2_presets[] = {{"Qwen2.5-0.5B", pr_qwen2}};
static const struct model_preset qwen3_presets[] = {{"Qwen3-0.6B", pr_qwen3}};
static const struct model_preset qwen3_moe_presets[] = {{"Qwen3-MoE", pr_qwen3_moe}};

DEC_FAMILY(qwen2_family, "qwen2", "Qwen2ForCausalLM", "qwen2", read_qwen2, &qwen_names,
           qwen2_presets, NULL)
DEC_FAMILY(qwen3_family, "qwen3", "Qwen3ForCausalLM", "qwen3", read_qwen3, &qwen_names,
           qwen3_presets, NULL)
DEC_FAMILY(qwen3_moe_family, "qwen3_moe", "Qwen3MoeForCausalLM", "qwen3_moe", read_qwen3_moe,
           &qwen_names, qwen3_moe_presets, NULL)
