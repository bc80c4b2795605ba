// mixtral.c - MixtralForCausalLM (configuration_mixtral.py, modeling_mixtral.py): the Llama
// block with every MLP a mixture of experts (block_sparse_moe: softmax router, top-k, the top-k
// weights always renormalised; experts w1 / w3 / w2 of intermediate_size).
// L = layers, D = hidden, H = query heads, KV = key/value heads, hd = head_dim, I = MLP width,
// E = routed experts, k = experts a token goes to, Ie = an expert's width, V = vocab
#include "model/decoder_family.h"

#include "model/config.h"

static const struct dec_expert_keys mixtral_experts = {
    .n_key = "num_local_experts", .n_dflt = 8, .n_min = 1, .top_k_dflt = 2, .norm_forced = true};

static const struct dec_reader mixtral_reader = {
    .d = {.vocab = 32000,
          .hidden = 4096,
          .ffn = 14336,
          .n_layer = 32,
          .n_head = 32,
          .max_pos = 131072,
          .n_kv_head = 8,
          .eps = 1e-5},
    .window_kind = DEC_WINDOW_ON,
    .experts = &mixtral_experts,
    .blk = {.norm = DEC_NORM_RMS, .norm_at = DEC_NORM_PRE},
    .theta = 1e6,
    .moe_layers = DEC_MOE_ALL,
};

// the Llama names, and the experts under block_sparse_moe: w1 the gate, w3 up, w2 down
static const struct dec_names mixtral_names = {
    DEC_NAMES_LLAMA,
    .router = "block_sparse_moe.gate",
    .experts = "block_sparse_moe.experts",
    .egate = "w1",
    .eup = "w3",
    .edown = "w2",
};

// init-model presets: tests/ref/hf/make_tiny.py's tiny_config, pasted as the config.json text
// (every key of the release config in tests/ref/hf-configs that the preset is cut from,
// dimensions shrunk; the release named in "_tiny_from")
static const char pr_mixtral[] = "{\"architectures\": [\"MixtralForCausalLM\"], "
                                 "\"attention_dropout\": 0.0, "
                                 "\"bos_token_id\": 1, "
                                 "\"eos_token_id\": 2, "
                                 "\"hidden_act\": \"silu\", "
                                 "\"hidden_size\": 32, "
                                 "\"initializer_range\": 0.02, "
                                 "\"intermediate_size\": 48, "
                                 "\"max_position_embeddings\": 64, "
                                 "\"model_type\": \"mixtral\", "
                                 "\"num_attention_heads\": 4, "
                                 "\"num_experts_per_tok\": 2, "
                                 "\"num_hidden_layers\": 2, "
                                 "\"num_key_value_heads\": 2, "
                                 "\"num_local_experts\": 4, "
                                 "\"output_router_logits\": false, "
                                 "\"rms_norm_eps\": 1e-05, "
                                 "\"rope_theta\": 1000000.0, "
                                 "\"router_aux_loss_coef\": 0.02, "
                                 "\"sliding_window\": null, "
                                 "\"tie_word_embeddings\": false, "
                                 "\"torch_dtype\": \"bfloat16\", "
                                 "\"transformers_version\": \"4.36.0.dev0\", "
                                 "\"use_cache\": true, "
                                 "\"vocab_size\": 96, "
                                 "\"_tiny_from\": \"Mixtral-8x7B-Instruct-v0.1.json\"}";

static const struct model_preset mixtral_presets[] = {{"Mixtral-8x7B", pr_mixtral}};

DEC_FAMILY(mixtral_family, "mixtral", "MixtralForCausalLM", "mixtral", mixtral_presets, NULL,
           .names = &mixtral_names, .reader = &mixtral_reader, .quant = dec_quant_fp8)
