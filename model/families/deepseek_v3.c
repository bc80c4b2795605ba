// deepseek_v3.c - DeepseekV3ForCausalLM (configuration_deepseek_v3.py, modeling_deepseek_v3.py;
// also moonshotai/Kimi-K2-Instruct; float64 reference tests/ref/deepseek_v3_ref.py): the Llama
// block's pre norms around multi-head latent attention (model/mla.h: q / kv latents, one rotary
// key, YaRN with its mscale in the softmax scale) and an MLP that is dense for the first
// first_k_dense_replace layers, then a mixture: a sigmoid router whose e_score_correction_bias
// steers the choice only, group-limited top-k (n_group, topk_group, topk_method noaux_tc),
// norm_topk_prob, routed_scaling_factor, n_shared_experts shared experts added to the routed sum.
// The multi-token-prediction layers (num_nextn_predict_layers; model.layers.{L}.* in the release)
// are not loaded, as transformers does not load them (_keys_to_ignore_on_load_unexpected).
// L = layers, D = hidden, H = heads, ql / kvl = q / kv latent, dn / dr / dv = the nope, rope
// and value head widths, E = routed experts, k = experts a token goes to, Ie = an expert's width,
// V = vocab
#include "model/decoder_family.h"

#include "model/ah.h"
#include "model/config.h"

#include <math.h>
#include <string.h>

// a string key that must be `want` when present (what harvest computes)
static int only(const struct config *cf, const char *key, const char *want, struct ah_error *err) {
    const struct cfg_value *v = cfg_get(cf, NULL, key);
    if (cfg_kind(cf, v) <= CFG_NULL) return 0;
    const char *s = cfg_string(cf, v);
    if (s && !strcmp(s, want)) return 0;
    return ah_fail(err, AH_EINVAL, "%s: \"%s\": \"%s\" is not implemented (only \"%s\")", cf->path,
                   key, s ? s : "(not a string)", want);
}

// MLA's sizes (DeepseekV3Config's defaults); q_lora_rank null: q_proj
static int read_mla(const struct config *cf, struct dec_config *c, struct ah_error *err) {
    struct dec_mla *a = &c->mla;
    int rc;
    a->on = true;
    if ((rc = cfg_opt_int(cf, "q_lora_rank", 1536, 1, 1 << 20, &a->q_lora, err)) < 0 ||
        (rc = cfg_opt_int(cf, "kv_lora_rank", 512, 1, 1 << 20, &a->kv_lora, err)) < 0 ||
        (rc = cfg_opt_int(cf, "qk_nope_head_dim", 128, 0, 1 << 16, &a->d_nope, err)) < 0 ||
        (rc = cfg_opt_int(cf, "qk_rope_head_dim", 64, 2, 1024, &a->d_rope, err)) < 0 ||
        (rc = cfg_opt_int(cf, "v_head_dim", 128, 1, 1 << 16, &a->d_v, err)) < 0)
        return rc;
    if (cfg_is_null(cf, "q_lora_rank") || !cfg_get(cf, NULL, "q_lora_rank"))
        a->q_lora = cfg_get(cf, NULL, "q_lora_rank") ? 0 : 1536;
    if (a->d_rope % 2)
        return ah_fail(err, AH_EINVAL, "%s: \"qk_rope_head_dim\": %d is odd (RoPE rotates pairs)",
                       cf->path, a->d_rope);
    a->interleave = cfg_opt_bool(cf, "rope_interleave", true);
    return 0;
}

// DeepseekV3TopkRouter's and DeepseekV3MoE's keys
static int read_route(const struct config *cf, struct dec_config *c, struct ah_error *err) {
    struct dec_route *r = &c->route;
    double rsf = 2.5;
    int rc, freq;
    r->sigmoid_group = true;
    if ((rc = cfg_opt_int(cf, "n_group", 8, 1, 1024, &r->n_group, err)) < 0 ||
        (rc = cfg_opt_int(cf, "topk_group", 4, 1, 1024, &r->topk_group, err)) < 0 ||
        (rc = cfg_opt_int(cf, "n_shared_experts", 1, 1, 1 << 10, &r->n_shared, err)) < 0 ||
        (rc = cfg_opt_int(cf, "first_k_dense_replace", 3, 0, 1 << 20, &r->first_dense, err)) < 0 ||
        (rc = cfg_opt_int(cf, "moe_layer_freq", 1, 1, 1, &freq, err)) < 0 ||
        (rc = cfg_opt_int(cf, "moe_intermediate_size", 2048, 1, 1 << 24, &c->expert_ffn, err)) <
            0 ||
        (rc = cfg_num_in(cf, NULL, NULL, "routed_scaling_factor", CFG_POSITIVE, true, &rsf, err)) <
            0 ||
        (rc = only(cf, "scoring_func", "sigmoid", err)) < 0 ||
        (rc = only(cf, "topk_method", "noaux_tc", err)) < 0 ||
        (rc = cfg_opt_int(cf, "num_nextn_predict_layers", 0, 0, 1 << 10, &c->n_mtp, err)) < 0)
        return rc;
    r->scale = (float)rsf;
    c->blk.norm_topk = cfg_opt_bool(cf, "norm_topk_prob", true);
    int E = c->n_expert, per = E / r->n_group;
    if (E > 4096)
        return ah_fail(err, AH_EINVAL, "%s: \"n_routed_experts\": %d is more than 4096", cf->path,
                       E);
    if (E % r->n_group || per < 2)
        return ah_fail(err, AH_EINVAL,
                       "%s: \"n_group\": %d groups of the %d experts (a group needs >= 2 experts, "
                       "all the same size)",
                       cf->path, r->n_group, E);
    if (r->topk_group > r->n_group || c->top_k > r->topk_group * per)
        return ah_fail(err, AH_EINVAL,
                       "%s: \"topk_group\": %d of %d groups of %d experts cannot hold "
                       "num_experts_per_tok (%d)",
                       cf->path, r->topk_group, r->n_group, per, c->top_k);
    return 0;
}

// qk_head_dim^-0.5, times yarn_get_mscale(factor, mscale_all_dim)^2 when rope_scaling has one
// (DeepseekV3Attention.__init__: whatever the scaling's type)
static int read_scale(const struct config *cf, struct dec_config *c, struct ah_error *err) {
    const char *where = "rope_scaling"; // newer configs: the same keys in rope_parameters
    const struct cfg_value *sc = cfg_get(cf, NULL, where);
    if (cfg_kind(cf, sc) != CFG_OBJECT) sc = cfg_get(cf, NULL, where = "rope_parameters");
    double s = 1.0 / sqrt((double)(c->mla.d_nope + c->mla.d_rope)), msa = 0.0, f = NAN;
    int rc;
    if (cfg_kind(cf, sc) == CFG_OBJECT) {
        if ((rc = cfg_num_in(cf, sc, where, "mscale_all_dim", CFG_NONNEG, true, &msa, err)) < 0 ||
            (rc = cfg_opt_num(cf, sc, where, "factor", NAN, &f, err)) < 0)
            return rc;
        if (msa != 0.0 && isnan(f))
            return ah_fail(err, AH_EINVAL, "%s: \"%s.factor\": missing", cf->path, where);
        if (msa != 0.0) s *= dec_yarn_mscale(f, msa) * dec_yarn_mscale(f, msa);
    }
    c->blk.scale = (float)s;
    return 0;
}

static int read_deepseek_v3(const struct config *cf, struct dec_config *c, struct ah_error *err) {
    struct dec_defaults d = {.vocab = 129280,
                             .hidden = 7168,
                             .ffn = 18432,
                             .n_layer = 61,
                             .n_head = 128,
                             .max_pos = 4096,
                             .n_kv_head = 128,
                             .eps = 1e-6};
    static const struct dec_expert_keys ek = {
        .n_key = "n_routed_experts", .n_dflt = 256, .n_min = 1, .top_k_dflt = 8, .own_ffn = true};
    bool ab;
    int rc;
    if ((rc = read_mla(cf, c, err)) < 0) return rc;
    d.head_dim = c->mla.d_rope; // configuration_deepseek_v3.py: head_dim = qk_rope_head_dim
    if ((rc = dec_read_sizes(cf, c, &d, err)) < 0 ||
        (rc = dec_read_act(cf, c, "hidden_act", NULL, "silu", err)) < 0 ||
        (rc = dec_read_window(cf, c, 0, DEC_WINDOW_NONE, err)) < 0 ||
        (rc = dec_read_experts(cf, c, &ek, err)) < 0 ||
        (rc = dec_read_flags(cf, c, false, &ab, err)) < 0 || (rc = read_route(cf, c, err)) < 0 ||
        (rc = read_scale(cf, c, err)) < 0)
        return rc;
    if (c->head_dim != c->mla.d_rope)
        return ah_fail(err, AH_EINVAL, "%s: \"head_dim\": %d is not qk_rope_head_dim (%d)",
                       cf->path, c->head_dim, c->mla.d_rope);
    if (c->n_kv_head != c->n_head) // kv_b_proj makes a key and a value for every head
        return ah_fail(err, AH_EINVAL,
                       "%s: \"num_key_value_heads\": %d is not num_attention_heads (%d)", cf->path,
                       c->n_kv_head, c->n_head);
    if (ab)
        return ah_fail(err, AH_EINVAL, "%s: \"attention_bias\": true is not implemented", cf->path);
    struct dec_block *b = &c->blk;
    b->norm = DEC_NORM_RMS;
    b->norm_at = DEC_NORM_PRE;
    b->qk_norm = DEC_QK_NONE;
    b->mlp_bias = false; // DeepseekV3MLP has none
    c->rope_yarn = true;
    c->fp8.keep_router = true; // DeepseekV3TopkRouter.weight is an nn.Parameter: never FP8
    if ((rc = dec_read_rope(cf, c, false, 10000.0, NULL, err)) < 0 ||
        (rc = dec_read_rope(cf, c, true, 10000.0, NULL, err)) < 0 ||
        (rc = dec_read_layers(cf, c, DEC_SLIDING_ALL, DEC_MOE_ALL, err)) < 0)
        return rc;
    enum dec_rope_type t = c->rope_full.type;
    if (t != DEC_ROPE_DEFAULT && t != DEC_ROPE_YARN)
        return ah_fail(err, AH_EINVAL,
                       "%s: \"rope_scaling\": only \"yarn\" (or none) is implemented for %s",
                       cf->path, c->arch);
    for (int i = 0; i < c->n_layer; i++)
        c->moe[i] = i >= c->route.first_dense;
    return 0;
}

// the Llama names with MLA's projections in place of k and v, the routing bias and the shared
// experts
static const struct dec_names deepseek_v3_names = {
    DEC_NAMES_MODEL,
    DEC_NAMES_PRE_NORMS,
    DEC_NAMES_MLP,
    DEC_NAMES_EXPERTS,
    .q = "self_attn.q_proj",
    .o = "self_attn.o_proj",
    .q_a = "self_attn.q_a_proj",
    .q_a_norm = "self_attn.q_a_layernorm",
    .q_b = "self_attn.q_b_proj",
    .kv_a = "self_attn.kv_a_proj_with_mqa",
    .kv_a_norm = "self_attn.kv_a_layernorm",
    .kv_b = "self_attn.kv_b_proj",
    .router_bias = "mlp.gate.e_score_correction_bias",
    .sgate = "mlp.shared_experts.gate_proj",
    .sup = "mlp.shared_experts.up_proj",
    .sdown = "mlp.shared_experts.down_proj",
};

// DeepSeek-V3's own aliases (model/aliases.h): the HF modules of MLA and of the router
static const struct alias_row deepseek_v3_aliases[] = {
    {.alias = "model.layers.{i}.self_attn.q_a_proj", .canonical = "layers.{i}.attention_q_latent"},
    {.alias = "model.layers.{i}.self_attn.q_a_layernorm",
     .canonical = "layers.{i}.attention_q_latent_norm"},
    {.alias = "model.layers.{i}.self_attn.kv_a_layernorm",
     .canonical = "layers.{i}.attention_kv_latent_norm"},
    {.alias = "model.layers.{i}.mlp.shared_experts",
     .canonical = "layers.{i}.shared_expert_output"},
    {.alias = "blocks.{i}.attn.hook_rot_k", .canonical = "layers.{i}.attention_keys"},
    {.alias = "blocks.{i}.attn.hook_rot_q", .canonical = "layers.{i}.attention_queries"},
    {0}};

// init-model presets: the release configs in tests/ref/configs with the dimensions shrunk (every
// other key verbatim, quantization_config dropped: the tiny checkpoints are BF16); two dense
// layers' worth of structure: one dense layer, then mixtures
#define DSV3_TINY(from, extra)                                                                 \
    "{\"architectures\": [\"DeepseekV3ForCausalLM\"], \"attention_bias\": false, "             \
    "\"attention_dropout\": 0.0, \"bos_token_id\": 0, \"eos_token_id\": 1, "                   \
    "\"first_k_dense_replace\": "                                                              \
    "1, \"hidden_act\": \"silu\", \"hidden_size\": 32, \"initializer_range\": 0.02, "          \
    "\"intermediate_size\": 48, \"kv_lora_rank\": 12, \"max_position_embeddings\": 64, "       \
    "\"model_type\": \"deepseek_v3\", \"moe_intermediate_size\": 16, \"moe_layer_freq\": 1, "  \
    "\"n_routed_experts\": 8, \"n_shared_experts\": 1, \"norm_topk_prob\": true, "             \
    "\"num_attention_heads\": 4, \"num_experts_per_tok\": 2, \"num_hidden_layers\": 3, "       \
    "\"num_key_value_heads\": 4, \"qk_nope_head_dim\": 6, \"qk_rope_head_dim\": 4, "           \
    "\"rms_norm_eps\": 1e-06, \"scoring_func\": \"sigmoid\", \"tie_word_embeddings\": false, " \
    "\"topk_method\": \"noaux_tc\", \"torch_dtype\": \"bfloat16\", \"use_cache\": true, "      \
    "\"v_head_dim\": 5, \"vocab_size\": 96, " extra ", \"_tiny_from\": \"" from "\"}"

static const char pr_r1[] = DSV3_TINY(
    "DeepSeek-R1-0528.json",
    "\"ep_size\": 1, \"n_group\": 4, \"num_nextn_predict_layers\": 1, \"q_lora_rank\": 10, "
    "\"rope_scaling\": {\"beta_fast\": 32, \"beta_slow\": 1, \"factor\": 40, \"mscale\": 1.0, "
    "\"mscale_all_dim\": 1.0, \"original_max_position_embeddings\": 4096, \"type\": \"yarn\"}, "
    "\"rope_theta\": 10000, \"routed_scaling_factor\": 2.5, \"topk_group\": 2");

static const char pr_kimi[] = DSV3_TINY(
    "Kimi-K2-Instruct.json",
    "\"aux_loss_alpha\": 0.001, \"n_group\": 1, \"num_nextn_predict_layers\": 0, "
    "\"pretraining_tp\": 1, \"q_lora_rank\": 10, \"rope_theta\": 50000.0, "
    "\"routed_scaling_factor\": 2.827, \"rope_scaling\": {\"beta_fast\": 1.0, \"beta_slow\": 1.0, "
    "\"factor\": 32.0, \"mscale\": 1.0, \"mscale_all_dim\": 1.0, "
    "\"original_max_position_embeddings\": 4096, \"type\": \"yarn\"}, \"seq_aux\": true, "
    "\"topk_group\": 1");

static const struct model_preset deepseek_v3_presets[] = {{"DeepSeek-V3", pr_r1},
                                                          {"Kimi-K2-Instruct", pr_kimi}};

DEC_FAMILY(deepseek_v3_family, "deepseek_v3", "DeepseekV3ForCausalLM", "deepseek_v3",
           deepseek_v3_presets, deepseek_v3_aliases, .names = &deepseek_v3_names,
           .read = read_deepseek_v3, .quant = dec_quant_fp8)
