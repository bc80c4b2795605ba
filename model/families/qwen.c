// qwen.c - Qwen2ForCausalLM, Qwen3ForCausalLM and Qwen3MoeForCausalLM (configuration_qwen2.py,
// configuration_qwen3.py, configuration_qwen3_moe.py): the Llama block; Qwen2 with q/k/v biases
// and none on o_proj, Qwen3 with RMSNorms over each head's queries and keys (q_norm, k_norm),
// Qwen3-MoE's mixture blocks (softmax router, top-k, norm_topk_prob). The sliding window only
// with use_sliding_window, from max_window_layers on (Qwen2, Qwen3).
// L = layers, D = hidden, H = query heads, KV = key/value heads, hd = head_dim, I = MLP width,
// E = routed experts, k = experts a token goes to, Ie = an expert's width, V = vocab
#include "model/decoder_family.h"

#include "model/config.h"

// Qwen2Config's default sizes, which Qwen3Config keeps (but head_dim's)
#define QWEN_SIZES \
    .vocab = 151936, .hidden = 4096, .ffn = 22016, .n_layer = 32, .n_head = 32, .max_pos = 32768

// Qwen2 and Qwen3: the sliding window only with use_sliding_window, from max_window_layers on
static const struct dec_reader qwen2_reader = {
    .d = {QWEN_SIZES, .eps = 1e-6},
    .window = 4096,
    .window_kind = DEC_WINDOW_GATED,
    .blk = {.norm = DEC_NORM_RMS, .norm_at = DEC_NORM_PRE},
    .bias = DEC_BIAS_QWEN2,
    .theta = 10000.0,
    .sliding = DEC_SLIDING_FROM,
};

// Qwen3: Qwen2's keys but head_dim's default, with per-head q/k norms and biases as
// attention_bias says
static const struct dec_reader qwen3_reader = {
    .d = {QWEN_SIZES, .head_dim = 128, .eps = 1e-6},
    .window = 4096,
    .window_kind = DEC_WINDOW_GATED,
    .blk = {.norm = DEC_NORM_RMS, .norm_at = DEC_NORM_PRE, .qk_norm = DEC_QK_HEAD},
    .theta = 10000.0,
    .sliding = DEC_SLIDING_FROM,
};

static const struct dec_expert_keys qwen3_moe_experts = {.n_key = "num_experts",
                                                         .n_dflt = 128,
                                                         .n_min = 0,
                                                         .top_k_dflt = 8,
                                                         .own_ffn = true,
                                                         .only_layers = true};

static const struct dec_reader qwen3_moe_reader = {
    .d = {.vocab = 151936,
          .hidden = 2048,
          .ffn = 6144,
          .n_layer = 24,
          .n_head = 32,
          .max_pos = 32768,
          .n_kv_head = 4,
          .head_dim = 128,
          .eps = 1e-6},
    .window = 4096,
    .window_kind = DEC_WINDOW_GATED,
    .experts = &qwen3_moe_experts,
    .blk = {.norm = DEC_NORM_RMS, .norm_at = DEC_NORM_PRE, .qk_norm = DEC_QK_HEAD},
    .theta = 10000.0,
    .moe_layers = DEC_MOE_SPARSE,
};

static const struct dec_names qwen_names = {DEC_NAMES_LLAMA, DEC_NAMES_QK_NORM, DEC_NAMES_EXPERTS};

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

// Qwen3-0.6B's keys (max_window_layers: every layer) before the family's own and _tiny_from
#define QWEN3_TINY(arch, mtype, layers)      \
    "{\"architectures\": [\"" arch "\"], "   \
    "\"attention_bias\": false, "            \
    "\"attention_dropout\": 0.0, "           \
    "\"bos_token_id\": 151643, "             \
    "\"eos_token_id\": 151645, "             \
    "\"head_dim\": 16, "                     \
    "\"hidden_act\": \"silu\", "             \
    "\"hidden_size\": 32, "                  \
    "\"initializer_range\": 0.02, "          \
    "\"intermediate_size\": 48, "            \
    "\"max_position_embeddings\": 64, "      \
    "\"max_window_layers\": " layers ", "    \
    "\"model_type\": \"" mtype "\", "        \
    "\"num_attention_heads\": 4, "           \
    "\"num_hidden_layers\": " layers ", "    \
    "\"num_key_value_heads\": 2, "           \
    "\"rms_norm_eps\": 1e-06, "              \
    "\"rope_scaling\": null, "               \
    "\"rope_theta\": 1000000, "              \
    "\"sliding_window\": null, "             \
    "\"tie_word_embeddings\": true, "        \
    "\"torch_dtype\": \"bfloat16\", "        \
    "\"transformers_version\": \"4.51.0\", " \
    "\"use_cache\": true, "                  \
    "\"use_sliding_window\": false, "        \
    "\"vocab_size\": 96, "

static const char pr_qwen3[] =
    QWEN3_TINY("Qwen3ForCausalLM", "qwen3", "2") "\"_tiny_from\": \"Qwen3-0.6B.json\"}";

static const char pr_qwen3_moe[] =
    QWEN3_TINY("Qwen3MoeForCausalLM", "qwen3_moe",
               "3") "\"num_experts\": 4, "
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

DEC_FAMILY(qwen2_family, "qwen2", "Qwen2ForCausalLM", "qwen2", qwen2_presets, NULL,
           .names = &qwen_names, .reader = &qwen2_reader, .quant = dec_quant_fp8)
DEC_FAMILY(qwen3_family, "qwen3", "Qwen3ForCausalLM", "qwen3", qwen3_presets, NULL,
           .names = &qwen_names, .reader = &qwen3_reader, .quant = dec_quant_fp8)
DEC_FAMILY(qwen3_moe_family, "qwen3_moe", "Qwen3MoeForCausalLM", "qwen3_moe", qwen3_moe_presets,
           NULL, .names = &qwen_names, .reader = &qwen3_moe_reader, .quant = dec_quant_fp8)
