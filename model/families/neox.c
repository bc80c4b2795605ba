// neox.c - the GPT-NeoX family (GPTNeoXForCausalLM, Pythia; modeling_gpt_neox.py; float64
// reference tests/ref/hf/neox.py) on the shared LayerNorm blocks of model/lnblock.h: the parallel
// residual (use_parallel_residual; false: sequential), rotary on the first int(hd * rotary_pct)
// dims of each head, query_key_value's rows [q_h k_h v_h] a head, Linear weights [out, in], the
// untied embed_out (tied: embed_in).
#include "model/ah.h"
#include "model/lnblock.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

// RoPE: rope_scaling (else rope_parameters, as transformers 5 writes it) of type default or
// linear; its rope_theta / partial_rotary_factor override rotary_emb_base / rotary_pct. Another
// type (dynamic NTK's base depends on the longest prompt of a batch) is an error naming the key.
static int neox_rope(const struct config *cf, struct lnb_config *c, double *pct,
                     struct ah_error *err) {
    const char *key = "rope_scaling";
    const struct cfg_value *o = cfg_get(cf, NULL, key);
    if (cfg_kind(cf, o) == CFG_ABSENT || cfg_kind(cf, o) == CFG_NULL)
        o = cfg_get(cf, NULL, key = "rope_parameters");
    if (cfg_kind(cf, o) == CFG_ABSENT || cfg_kind(cf, o) == CFG_NULL) return 0;
    if (cfg_kind(cf, o) != CFG_OBJECT)
        return ah_fail(err, AH_EINVAL, "%s: \"%s\": expected an object or null", cf->path, key);
    const char *type = cfg_string(cf, cfg_get(cf, o, "rope_type"));
    if (!type) type = cfg_string(cf, cfg_get(cf, o, "type"));
    if (!type) type = "default";
    int rc;
    if ((rc = cfg_num_in(cf, o, key, "rope_theta", CFG_POSITIVE, true, &c->rope_theta, err)) < 0 ||
        (rc = cfg_num_in(cf, o, key, "partial_rotary_factor", CFG_UNIT, true, pct, err)) < 0)
        return rc;
    if (!strcmp(type, "default")) return 0;
    const struct cfg_value *f = cfg_get(cf, o, "factor");
    if (strcmp(type, "linear") != 0)
        return ah_fail(err, AH_EINVAL,
                       "%s: \"%s\": rope_type \"%s\" is not implemented (known: default, linear)",
                       cf->path, key, type);
    if (!(cfg_number(cf, f) >= 1.0 && isfinite(cfg_number(cf, f))))
        return ah_fail(err, AH_EINVAL, "%s: \"%s\": \"factor\": expected a number >= 1", cf->path,
                       key);
    c->rope_linear = cfg_number(cf, f);
    return 0;
}

// GPTNeoXConfig's keys with its defaults for absent ones (tests/ref/hf/config.py)
static int neox_config(const struct config *cf, struct lnb_config *c, struct ah_error *err) {
    *c = (struct lnb_config){.arch = "GPTNeoXForCausalLM",
                             .rotary = true,
                             .rope_theta = 10000.0,
                             .rope_linear = 1.0,
                             .eps = 1e-5};
    int rc;
    double pct = 0.25;
    if ((rc = lnb_cfg_dim(cf, "vocab_size", 50432, &c->vocab, err)) < 0 ||
        (rc = lnb_cfg_dim(cf, "hidden_size", 6144, &c->hidden, err)) < 0 ||
        (rc = lnb_cfg_dim(cf, "num_hidden_layers", 44, &c->n_layer, err)) < 0 ||
        (rc = lnb_cfg_dim(cf, "num_attention_heads", 64, &c->n_head, err)) < 0 ||
        (rc = lnb_cfg_dim(cf, "intermediate_size", 24576, &c->inner, err)) < 0 ||
        (rc = lnb_cfg_dim(cf, "max_position_embeddings", 2048, &c->max_pos, err)) < 0 ||
        (rc = lnb_cfg_act(cf, "hidden_act", "gelu", &c->act, err)) < 0 ||
        (rc = cfg_double(cf, "layer_norm_eps", false, &c->eps, err)) < 0 ||
        (rc = cfg_double(cf, "rotary_pct", false, &pct, err)) < 0 ||
        (rc = cfg_double(cf, "rotary_emb_base", false, &c->rope_theta, err)) < 0 ||
        (rc = lnb_cfg_bool(cf, "use_parallel_residual", true, &c->parallel, err)) < 0 ||
        (rc = lnb_cfg_bool(cf, "attention_bias", true, &c->attn_bias, err)) < 0 ||
        (rc = lnb_cfg_bool(cf, "tie_word_embeddings", false, &c->tied, err)) < 0 ||
        (rc = neox_rope(cf, c, &pct, err)) < 0 ||
        (rc = lnb_cfg_check(cf, c, "num_attention_heads", "layer_norm_eps", err)) < 0)
        return rc;
    c->attn_scale = 1.0 / sqrt((double)c->head_dim);
    c->n_rot = pct >= 0.0 && pct <= 1.0 ? (int)(c->head_dim * pct) : -1;
    if (c->n_rot < 0 || c->n_rot % 2)
        return ah_fail(err, AH_EINVAL,
                       "%s: \"rotary_pct\": %g of head_dim %d: expected a fraction in [0, 1] "
                       "giving an even number of rotated dims",
                       cf->path, pct, c->head_dim);
    if (!(c->rope_theta > 0.0 && isfinite(c->rope_theta)))
        return ah_fail(err, AH_EINVAL, "%s: \"rotary_emb_base\": expected a positive number",
                       cf->path);
    return 0;
}

static int neox_open(void **fm, const struct config *cf, const struct model_dims *dims,
                     struct model_tensor **list, struct ah_error *err) {
    struct lnb_model *m = calloc(1, sizeof *m);
    if (!(*fm = m)) return -AH_ENOMEM;
    int rc = neox_config(cf, &m->cfg, err);
    if (rc < 0) return rc;
    bool b = m->cfg.attn_bias;
    struct lnb_names nm = {
        .embed = "gpt_neox.embed_in.weight",
        .lnf_w = "gpt_neox.final_layer_norm.weight",
        .lnf_b = "gpt_neox.final_layer_norm.bias",
        .head = "embed_out.weight",
        .layer_prefix = "gpt_neox.layers",
        .leaf = {"input_layernorm.weight", "input_layernorm.bias",
                 "attention.query_key_value.weight", b ? "attention.query_key_value.bias" : NULL,
                 "attention.dense.weight", b ? "attention.dense.bias" : NULL,
                 "post_attention_layernorm.weight", "post_attention_layernorm.bias",
                 "mlp.dense_h_to_4h.weight", "mlp.dense_h_to_4h.bias", "mlp.dense_4h_to_h.weight",
                 "mlp.dense_4h_to_h.bias"}};
    return lnb_init(m, &nm, dims, list);
}

// ---- init-model: tests/ref/hf/make_tiny.py's tiny_config("gpt_neox"), every key of
// EleutherAI/pythia-160m's config.json (tests/ref/hf-configs/pythia-160m.json)
static const char neox_tiny[] = "{\"architectures\": [\"GPTNeoXForCausalLM\"], "
                                "\"bos_token_id\": 0, "
                                "\"eos_token_id\": 0, "
                                "\"hidden_act\": \"gelu\", "
                                "\"hidden_size\": 32, "
                                "\"initializer_range\": 0.02, "
                                "\"intermediate_size\": 128, "
                                "\"layer_norm_eps\": 1e-05, "
                                "\"max_position_embeddings\": 64, "
                                "\"model_type\": \"gpt_neox\", "
                                "\"num_attention_heads\": 4, "
                                "\"num_hidden_layers\": 2, "
                                "\"rotary_emb_base\": 10000, "
                                "\"rotary_pct\": 0.5, "
                                "\"tie_word_embeddings\": false, "
                                "\"torch_dtype\": \"float16\", "
                                "\"transformers_version\": \"4.24.0\", "
                                "\"use_cache\": true, "
                                "\"use_parallel_residual\": true, "
                                "\"vocab_size\": 96, "
                                "\"_tiny_from\": \"pythia-160m.json\"}";

static const struct model_preset neox_presets[] = {{"pythia-160m", neox_tiny}};

// GPT-NeoX's own aliases (model/aliases.h): a parallel-residual block has no mid stream; its
// module paths
static const struct alias_row neox_aliases[] = {
    {.alias = "blocks.{i}.hook_resid_mid",
     .why = "a parallel-residual block (GPT-NeoX) has no mid stream, nor a TransformerLens hook "
            "there"},
    {.alias = "gpt_neox.layers.{i}", .canonical = "layers.{i}.layer_output"},
    {.alias = "gpt_neox.layers.{i}.attention", .canonical = "layers.{i}.attention_output"},
    {.alias = "gpt_neox.layers.{i}.mlp", .canonical = "layers.{i}.mlp_output"},
    // the shared Hugging Face module paths of the Llama-style models are none of its names
    {.alias = "model.layers.{i}"},
    {.alias = "model.layers.{i}.self_attn"},
    {.alias = "model.layers.{i}.mlp"},
    {0}};

static const char *const neox_ids[] = {"GPTNeoXForCausalLM", "gpt_neox", NULL};

const struct model_family neox_family = {
    .name = "gpt_neox",
    .ids = neox_ids,
    .open = neox_open,
    LNB_FAMILY_OPS,
    .aliases = neox_aliases,
    .presets = neox_presets,
    .n_presets = 1,
    .init_cut = true, // --config CONFIG.json --layers N: a release's dimensions
    .init_what = {"a tiny GPT-NeoX ", " checkpoint"},
};
