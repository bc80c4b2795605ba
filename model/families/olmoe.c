// olmoe.c - OlmoeForCausalLM (configuration_olmoe.py, modeling_olmoe.py; float64 reference
// tests/ref/olmoe_ref.py): the pre-norm Llama block (input_layernorm, post_attention_layernorm
// before the MLP) with q_norm and k_norm RMSNorms over the whole q / k projection (H hd and
// KV hd wide) before the heads are split and RoPE, clip_qkv (q, k after their norms and v
// clamped), head_dim = hidden_size / num_attention_heads, and every MLP a mixture
// (OlmoeSparseMoeBlock: softmax router mlp.gate, top-k of the probabilities, renormalised only
// with norm_topk_prob -- false in the release --, experts gate_proj / up_proj / down_proj of
// intermediate_size, no shared expert).
// L = layers, D = hidden, H = query heads, KV = key/value heads, hd = head_dim, I = MLP width,
// E = routed experts, k = experts a token goes to, V = vocab
#include "model/decoder_family.h"

#include "model/ah.h"
#include "model/config.h"

#include <math.h>

// OlmoeAttention: head_dim is hidden_size // num_attention_heads (a head_dim key is not read),
// and transformers refuses a hidden_size the heads do not divide
static int check_heads(const struct config *cf, const struct dec_config *c, struct ah_error *err) {
    if (c->hidden % c->n_head)
        return ah_fail(err, AH_EINVAL,
                       "%s: \"hidden_size\": %d is not a multiple of num_attention_heads (%d)",
                       cf->path, c->hidden, c->n_head);
    if (c->head_dim != c->hidden / c->n_head)
        return ah_fail(err, AH_EINVAL,
                       "%s: \"head_dim\": %d, but OLMoE's head_dim is hidden_size / "
                       "num_attention_heads (%d)",
                       cf->path, c->head_dim, c->hidden / c->n_head);
    return 0;
}

// clip_qkv: null (absent) none, else a number > 0 (the clamp's bound, as float32); and the heads
static int read_own(const struct config *cf, struct dec_config *c, struct ah_error *err) {
    double clip;
    int rc = check_heads(cf, c, err);
    if (rc < 0 || (rc = cfg_opt_num(cf, NULL, NULL, "clip_qkv", NAN, &clip, err)) < 0) return rc;
    c->blk.clip_qkv = isnan(clip) ? 0.0f : (float)clip;
    return 0;
}

// configuration_olmoe.py's attribute_map: num_local_experts is num_experts
static const struct dec_expert_keys olmoe_experts = {.n_key = "num_experts",
                                                     .n_alias = "num_local_experts",
                                                     .n_dflt = 64,
                                                     .n_min = 1,
                                                     .top_k_dflt = 8};

static const struct dec_reader olmoe_reader = {
    .d = {.vocab = 50304,
          .hidden = 2048,
          .ffn = 2048,
          .n_layer = 16,
          .n_head = 16,
          .max_pos = 4096,
          .eps = 1e-5},
    .experts = &olmoe_experts,
    .blk = {.norm = DEC_NORM_RMS, .norm_at = DEC_NORM_PRE, .qk_norm = DEC_QK_PROJ},
    .bias = DEC_BIAS_ATTN, // OlmoeMLP has none (transformers ignores an mlp_bias key)
    .own = read_own,
    .theta = 10000.0,
    .moe_layers = DEC_MOE_ALL,
};

static const struct dec_names olmoe_names = {DEC_NAMES_MODEL, DEC_NAMES_PRE_NORMS, DEC_NAMES_ATTN,
                                             DEC_NAMES_QK_NORM, DEC_NAMES_EXPERTS};

// OLMoE's own aliases (model/aliases.h): Hugging Face module paths of OlmoeDecoderLayer whose
// output harvest stores (post_attention_layernorm is the norm before the MLP)
static const struct alias_row olmoe_aliases[] = {
    {.alias = "model.layers.{i}.input_layernorm", .canonical = "layers.{i}.attention_norm_output"},
    {.alias = "model.layers.{i}.post_attention_layernorm",
     .canonical = "layers.{i}.mlp_norm_output"},
    {.alias = "model.layers.{i}.mlp.gate", .canonical = "layers.{i}.router_logits"},
    {0}};

// init-model preset: the release config.json tests/ref/configs/OLMoE-1B-7B-0924.json with every
// key kept (64 experts, top 8, not renormalised, clip_qkv null; no rms_norm_eps key: 1e-5) and the
// dimensions shrunk; two key/value heads (the release has as many as query heads) so that
// k_norm's width differs from q_norm's.
static const char pr_olmoe[] = "{\"architectures\": [\"OlmoeForCausalLM\"], "
                               "\"attention_bias\": false, "
                               "\"attention_dropout\": 0.0, "
                               "\"clip_qkv\": null, "
                               "\"eos_token_id\": 50279, "
                               "\"hidden_act\": \"silu\", "
                               "\"hidden_size\": 32, "
                               "\"initializer_range\": 0.02, "
                               "\"intermediate_size\": 16, "
                               "\"max_position_embeddings\": 64, "
                               "\"model_type\": \"olmoe\", "
                               "\"norm_topk_prob\": false, "
                               "\"num_attention_heads\": 4, "
                               "\"num_experts\": 64, "
                               "\"num_experts_per_tok\": 8, "
                               "\"num_hidden_layers\": 2, "
                               "\"num_key_value_heads\": 2, "
                               "\"output_router_logits\": false, "
                               "\"pad_token_id\": 1, "
                               "\"rope_scaling\": null, "
                               "\"rope_theta\": 10000.0, "
                               "\"router_aux_loss_coef\": 0.01, "
                               "\"tie_word_embeddings\": false, "
                               "\"torch_dtype\": \"bfloat16\", "
                               "\"transformers_version\": \"4.43.0.dev0\", "
                               "\"use_cache\": true, "
                               "\"vocab_size\": 96, "
                               "\"_tiny_from\": \"OLMoE-1B-7B-0924.json\"}";

static const struct model_preset olmoe_presets[] = {{"OLMoE-1B-7B-0924", pr_olmoe}};

DEC_FAMILY(olmoe_family, "olmoe", "OlmoeForCausalLM", "olmoe", olmoe_presets, olmoe_aliases,
           .names = &olmoe_names, .reader = &olmoe_reader, .quant = dec_quant_fp8)
