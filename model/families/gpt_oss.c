// gpt_oss.c - GptOssForCausalLM (openai/gpt-oss-20b, gpt-oss-120b; configuration_gpt_oss.py,
// modeling_gpt_oss.py, integrations/mxfp4.py; float64 reference tests/ref/gpt_oss_ref.py): the
// Llama block with biases on q/k/v/o, attention sinks (a learned logit per head joining each
// softmax, dropped after), sliding-window and full layers alternating (layer_types), YaRN RoPE,
// and every MLP a mixture: a router Linear with a bias, top-k on its logits then a softmax over
// the k, experts with biases whose gate_up_proj interleaves gate (even) and up (odd) rows, the
// clamped SwiGLU (clamp(up, -limit, limit) + 1) * g * sigmoid(alpha g), g = min(gate, limit).
// The experts are read as published, MXFP4 blocks + scales (model/mxfp4.h), never widened whole.
// L = layers, D = hidden, H = query heads, KV = key/value heads, hd = head_dim, I = MLP width,
// E = routed experts, k = experts a token goes to, Ie = an expert's width (I), V = vocab
#include "model/decoder_family.h"

#include "model/ah.h"
#include "model/config.h"

#include <string.h>

// quantization_config: gpt-oss's one method is "mxfp4" (its struct dec_quant below; another is
// refused by name); absent, the experts would be float tensors, which harvest does not read for
// this family
static int read_quant(const struct config *cf, struct ah_error *err) {
    if (cfg_kind(cf, cfg_get(cf, NULL, "quantization_config")) > CFG_NULL) return 0;
    return ah_fail(err, AH_EINVAL,
                   "%s: \"quantization_config\": absent is not supported (harvest reads gpt-oss's "
                   "experts as published: quant_method \"mxfp4\")",
                   cf->path);
}

// quant_method "mxfp4" (model/mxfp4.h): the experts' rows and inputs in whole scale groups
static int read_mxfp4(const struct config *cf, struct dec_config *c, struct ah_error *err) {
    if (c->hidden % 32 || c->expert_ffn % 32)
        return ah_fail(err, AH_EINVAL,
                       "%s: \"%s\": %d is not a multiple of 32 (an MXFP4 scale covers 32 values)",
                       cf->path, c->hidden % 32 ? "hidden_size" : "intermediate_size",
                       c->hidden % 32 ? c->hidden : c->expert_ffn);
    return 0;
}

static const struct dec_quant gpt_oss_quant[] = {{"mxfp4", read_mxfp4}, {NULL, NULL}};

// GptOssConfig's rope_parameters when the config has neither rope_parameters nor rope_scaling
static void default_yarn(struct dec_rope *r, double theta) {
    memset(r, 0, sizeof *r);
    *r = (struct dec_rope){.type = DEC_ROPE_YARN,
                           .theta = theta,
                           .factor = 32.0,
                           .original_max_pos = 4096,
                           .beta_fast = 32.0,
                           .beta_slow = 1.0,
                           .truncate = false};
    r->attn_factor = dec_yarn_factor(r->factor, 0.0, 0.0);
}

static int read_rope(const struct config *cf, struct dec_config *c, struct ah_error *err) {
    int rc;
    if (cfg_kind(cf, cfg_get(cf, NULL, "rope_scaling")) <= CFG_NULL &&
        cfg_kind(cf, cfg_get(cf, NULL, "rope_parameters")) <= CFG_NULL) {
        double theta;
        if ((rc = cfg_opt_num(cf, NULL, NULL, "rope_theta", 150000.0, &theta, err)) < 0) return rc;
        default_yarn(&c->rope_full, theta);
        default_yarn(&c->rope_sliding, theta);
        return 0;
    }
    if ((rc = dec_read_rope(cf, c, false, 150000.0, NULL, err)) < 0) return rc;
    return dec_read_rope(cf, c, true, 150000.0, NULL, err);
}

static int read_gpt_oss(const struct config *cf, struct dec_config *c, struct ah_error *err) {
    static const struct dec_defaults d = {.vocab = 201088,
                                          .hidden = 2880,
                                          .ffn = 2880,
                                          .n_layer = 36,
                                          .n_head = 64,
                                          .max_pos = 131072,
                                          .n_kv_head = 8,
                                          .head_dim = 64,
                                          .eps = 1e-5};
    static const struct dec_expert_keys ek = {
        .n_key = "num_local_experts", .n_dflt = 128, .n_min = 1, .top_k_dflt = 4};
    bool ab;
    double alpha, limit;
    int rc;
    if ((rc = dec_read_sizes(cf, c, &d, err)) < 0 ||
        (rc = dec_read_window(cf, c, 128, DEC_WINDOW_ON, err)) < 0 ||
        (rc = dec_read_experts(cf, c, &ek, err)) < 0 ||
        (rc = dec_read_flags(cf, c, false, &ab, err)) < 0 || (rc = read_quant(cf, err)) < 0 ||
        (rc = cfg_opt_num(cf, NULL, NULL, "swiglu_alpha", 1.702, &alpha, err)) < 0 ||
        (rc = cfg_opt_num(cf, NULL, NULL, "swiglu_limit", 7.0, &limit, err)) < 0)
        return rc;
    // hidden_act is not read: GptOssExperts computes its own SwiGLU whatever it says
    struct dec_block *b = &c->blk;
    b->norm = DEC_NORM_RMS;
    b->norm_at = DEC_NORM_PRE;
    b->qk_norm = DEC_QK_NONE;
    b->qkv_bias = b->o_bias = cfg_opt_bool(cf, "attention_bias", true); // GptOssConfig: True
    b->mlp_bias = false;
    b->norm_topk = false;
    b->sinks = b->router_bias = b->topk_softmax = b->expert_bias = true;
    b->swiglu_clamp = b->experts_interleaved = true;
    b->swiglu_alpha = (float)alpha;
    b->swiglu_limit = (float)limit;
    if (!cfg_str(cf, "torch_dtype") && !cfg_str(cf, "dtype")) // the releases' non-expert tensors
        c->bf16 = true, c->bytes_per_param = 2;
    (void)ab;
    c->rope_yarn = true;
    if ((rc = read_rope(cf, c, err)) < 0) return rc;
    return dec_read_layers(cf, c, DEC_SLIDING_ALTERNATE, DEC_MOE_ALL, err);
}

// the Llama names but the dense MLP's, the sinks, the router mlp.router and the experts' fused
// tensors
static const struct dec_names gpt_oss_names = {
    DEC_NAMES_MODEL,
    DEC_NAMES_PRE_NORMS,
    DEC_NAMES_ATTN,
    .sinks = "self_attn.sinks",
    .router = "mlp.router",
    .experts = "mlp.experts",
    .egate_up = "gate_up_proj",
    .edown = "down_proj",
};

// gpt-oss's own aliases (model/aliases.h): Hugging Face module paths of its MLP (nnsight). The
// experts' module returns the weighted sum over the slots; the router returns the top-k softmax
// scattered into zeros and the indices, which harvest keeps as the logits, indices and weights.
static const struct alias_row gpt_oss_aliases[] = {
    {.alias = "model.layers.{i}.mlp.experts", .canonical = "layers.{i}.routed_output"},
    {.alias = "model.layers.{i}.mlp.router",
     .why = "GptOssTopKRouter returns (router_scores: the top-k softmax scattered into zeros, "
            "router_indices), which harvest keeps as layers.{i}.router_logits, "
            "layers.{i}.expert_indices and layers.{i}.expert_weights"},
    {0}};

// init-model presets: the release config.json's keys (tests/ref/configs/gpt-oss-20b.json,
// gpt-oss-120b.json) with the dimensions shrunk: hidden and expert width 64 (two MXFP4 groups),
// 4 heads of 16 over 2 key/value heads, a window of 4 keys so that short prompts slide, vocab 96.
#define GPT_OSS_TINY(layers, types, experts, topk)                                                 \
    "{\"architectures\": [\"GptOssForCausalLM\"], \"attention_bias\": true, "                      \
    "\"attention_dropout\": 0.0, \"eos_token_id\": 95, \"experts_per_token\": " topk ", "          \
    "\"head_dim\": 16, \"hidden_act\": \"silu\", \"hidden_size\": 64, "                            \
    "\"initial_context_length\": 4096, \"initializer_range\": 0.02, \"intermediate_size\": 64, "   \
    "\"layer_types\": [" types "], \"max_position_embeddings\": 131072, "                          \
    "\"model_type\": \"gpt_oss\", \"num_attention_heads\": 4, \"num_experts_per_tok\": " topk ", " \
    "\"num_hidden_layers\": " layers ", \"num_key_value_heads\": 2, "                              \
    "\"num_local_experts\": " experts ", \"output_router_logits\": false, "                        \
    "\"pad_token_id\": 94, \"quantization_config\": {\"modules_to_not_convert\": "                 \
    "[\"model.layers.*.self_attn\", \"model.layers.*.mlp.router\", \"model.embed_tokens\", "       \
    "\"lm_head\"], \"quant_method\": \"mxfp4\"}, \"rms_norm_eps\": 1e-05, "                        \
    "\"rope_scaling\": {\"beta_fast\": 32.0, \"beta_slow\": 1.0, \"factor\": 32.0, "               \
    "\"original_max_position_embeddings\": 4096, \"rope_type\": \"yarn\", \"truncate\": false}, "  \
    "\"rope_theta\": 150000, \"router_aux_loss_coef\": 0.9, \"sliding_window\": 4, "               \
    "\"swiglu_limit\": 7.0, \"tie_word_embeddings\": false, \"use_cache\": true, "                 \
    "\"vocab_size\": 96, \"_tiny_from\": \"tests/ref/configs/\"}"
#define GPT_OSS_SF "\"sliding_attention\", \"full_attention\""

static const struct model_preset gpt_oss_presets[] = {
    {"gpt-oss-20b", GPT_OSS_TINY("2", GPT_OSS_SF, "4", "2")},
    {"gpt-oss-120b", GPT_OSS_TINY("4", GPT_OSS_SF ", " GPT_OSS_SF, "8", "4")},
};

DEC_FAMILY(gpt_oss_family, "gpt_oss", "GptOssForCausalLM", "gpt_oss", gpt_oss_presets,
           gpt_oss_aliases, .names = &gpt_oss_names, .read = read_gpt_oss, .quant = gpt_oss_quant)
