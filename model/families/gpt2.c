// gpt2.c - the GPT-2 family (GPT2LMHeadModel, modeling_gpt2.py; float64 reference
// tests/ref/hf/gpt2.py) on the shared LayerNorm blocks of model/lnblock.h: learned positions
// (wpe), Conv1D weights stored [in, out], c_attn's columns q | k | v, gelu_new, the head tied to
// wte. Tensor names as published: unprefixed (`h.0.attn.c_attn.weight`, openai-community/gpt2)
// or `transformer.`-prefixed (GPT2LMHeadModel.save_pretrained); the `h.{i}.attn.bias` mask
// buffers are not parameters and are never read.
#include "model/ah.h"
#include "model/lnblock.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// a boolean key whose value `bad` harvest does not compute: an error naming it
static int refuse(const struct config *cf, const char *key, bool dflt, bool bad, const char *why,
                  struct ah_error *err) {
    bool v;
    int rc = lnb_cfg_bool(cf, key, dflt, &v, err);
    if (rc == 0 && v == bad)
        return ah_fail(err, AH_EINVAL, "%s: \"%s\": %s is not implemented (%s)", cf->path, key,
                       bad ? "true" : "false", why);
    return rc;
}

// GPT2Config's keys with its defaults for absent ones (tests/ref/hf/config.py)
static int gpt2_config(const struct config *cf, struct lnb_config *c, struct ah_error *err) {
    *c = (struct lnb_config){.arch = "GPT2LMHeadModel",
                             .conv1d = true,
                             .attn_bias = true,
                             .tied = true,
                             .rope_linear = 1.0,
                             .eps = 1e-5};
    int rc;
    bool scale, inv_scale, reorder;
    if ((rc = lnb_cfg_dim(cf, "vocab_size", 50257, &c->vocab, err)) < 0 ||
        (rc = lnb_cfg_dim(cf, "n_positions", 1024, &c->n_pos, err)) < 0 ||
        (rc = lnb_cfg_dim(cf, "n_embd", 768, &c->hidden, err)) < 0 ||
        (rc = lnb_cfg_dim(cf, "n_layer", 12, &c->n_layer, err)) < 0 ||
        (rc = lnb_cfg_dim(cf, "n_head", 12, &c->n_head, err)) < 0 ||
        (rc = lnb_cfg_act(cf, "activation_function", "gelu_new", &c->act, err)) < 0 ||
        (rc = cfg_double(cf, "layer_norm_epsilon", false, &c->eps, err)) < 0 ||
        (rc = lnb_cfg_bool(cf, "scale_attn_weights", true, &scale, err)) < 0 ||
        (rc = lnb_cfg_bool(cf, "scale_attn_by_inverse_layer_idx", false, &inv_scale, err)) < 0 ||
        // the same products in float32, ordered for half-precision training: harvest computes in
        // float32 throughout, so either value gives the same function
        (rc = lnb_cfg_bool(cf, "reorder_and_upcast_attn", false, &reorder, err)) < 0 ||
        (rc = refuse(cf, "tie_word_embeddings", true, false, "GPT2LMHeadModel's head is wte, tied",
                     err)) < 0 ||
        (rc = refuse(cf, "add_cross_attention", false, true,
                     "cross-attention needs an encoder's states", err)) < 0)
        return rc;
    c->inner = 4 * c->hidden; // n_inner null or absent
    if (cfg_kind(cf, cfg_get(cf, NULL, "n_inner")) != CFG_NULL &&
        (rc = lnb_cfg_dim(cf, "n_inner", c->inner, &c->inner, err)) < 0)
        return rc;
    c->max_pos = c->n_pos;
    c->inverse_layer_scale = inv_scale;
    if ((rc = lnb_cfg_check(cf, c, "n_head", "layer_norm_epsilon", err)) < 0) return rc;
    c->attn_scale = scale ? 1.0 / sqrt((double)c->head_dim) : 1.0;
    return 0;
}

// "" or "transformer.": the form of the checkpoint's names, told by where wte is
static int gpt2_prefix(const struct model_dims *dims, const char **prefix, struct ah_error *err) {
    int64_t sh[2];
    struct ah_error e = {0};
    *prefix = "";
    if (!dims || dims->dims(dims->u, "wte.weight", sh, 2, &e) >= 0) return 0;
    *prefix = "transformer.";
    int rc = dims->dims(dims->u, "transformer.wte.weight", sh, 2, err);
    if (rc < 0)
        snprintf(err->msg + strlen(err->msg), sizeof err->msg - strlen(err->msg),
                 " (nor \"wte.weight\": a GPT-2 checkpoint has one of the two)");
    return rc < 0 ? rc : 0;
}

static int gpt2_open(void **fm, const struct config *cf, const struct model_dims *dims,
                     struct model_tensor **list, struct ah_error *err) {
    struct lnb_model *m = calloc(1, sizeof *m);
    if (!(*fm = m)) return -AH_ENOMEM;
    const char *p;
    int rc;
    if ((rc = gpt2_config(cf, &m->cfg, err)) < 0 || (rc = gpt2_prefix(dims, &p, err)) < 0)
        return rc;
    // the names, with the checkpoint's prefix; buffers live until the list is made
    char n[5][40];
    static const char *const leaf[5] = {"wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias",
                                        "h"};
    for (int i = 0; i < 5; i++)
        snprintf(n[i], sizeof n[i], "%s%s", p, leaf[i]);
    struct lnb_names nm = {.embed = n[0],
                           .pos = n[1],
                           .lnf_w = n[2],
                           .lnf_b = n[3],
                           .layer_prefix = n[4],
                           .leaf = {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight",
                                    "attn.c_attn.bias", "attn.c_proj.weight", "attn.c_proj.bias",
                                    "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
                                    "mlp.c_proj.weight", "mlp.c_proj.bias"}};
    return lnb_init(m, &nm, dims, list);
}

// ---- init-model: tests/ref/hf/make_tiny.py's tiny_config("gpt2") (every key of
// openai-community/gpt2's config.json, tests/ref/hf-configs/gpt2.json) with 8 layers, so that
// blocks.6 exists
static const char gpt2_tiny[] =
    "{\"_name_or_path\": \"openai-community/gpt2\", "
    "\"activation_function\": \"gelu_new\", "
    "\"architectures\": [\"GPT2LMHeadModel\"], "
    "\"attn_pdrop\": 0.1, "
    "\"bos_token_id\": 50256, "
    "\"embd_pdrop\": 0.1, "
    "\"eos_token_id\": 50256, "
    "\"initializer_range\": 0.02, "
    "\"layer_norm_epsilon\": 1e-05, "
    "\"model_type\": \"gpt2\", "
    "\"n_ctx\": 64, "
    "\"n_embd\": 32, "
    "\"n_head\": 4, "
    "\"n_inner\": null, "
    "\"n_layer\": 8, "
    "\"n_positions\": 64, "
    "\"reorder_and_upcast_attn\": false, "
    "\"resid_pdrop\": 0.1, "
    "\"scale_attn_by_inverse_layer_idx\": false, "
    "\"scale_attn_weights\": true, "
    "\"summary_activation\": null, "
    "\"summary_first_dropout\": 0.1, "
    "\"summary_proj_to_labels\": true, "
    "\"summary_type\": \"cls_index\", "
    "\"summary_use_proj\": true, "
    "\"task_specific_params\": {\"text-generation\": {\"do_sample\": true, \"max_length\": 50}}, "
    "\"torch_dtype\": \"float32\", "
    "\"transformers_version\": \"4.47.1\", "
    "\"use_cache\": true, "
    "\"vocab_size\": 96, "
    "\"_tiny_from\": \"gpt2.json (n_layer 8)\"}";

static const struct model_preset gpt2_presets[] = {{"gpt2", gpt2_tiny}};

// GPT-2's own aliases (model/aliases.h): no rotary, so TransformerLens's q / k are the queries
// and keys entering attention; its module paths
static const struct alias_row gpt2_aliases[] = {
    {.alias = "blocks.{i}.attn.hook_q", .canonical = "layers.{i}.attention_queries"},
    {.alias = "blocks.{i}.attn.hook_k", .canonical = "layers.{i}.attention_keys"},
    {.alias = "transformer.h.{i}", .canonical = "layers.{i}.layer_output"},
    {.alias = "transformer.h.{i}.attn", .canonical = "layers.{i}.attention_output"},
    {.alias = "transformer.h.{i}.mlp", .canonical = "layers.{i}.mlp_output"},
    {.alias = "h.{i}", .canonical = "layers.{i}.layer_output"},
    {.alias = "h.{i}.attn", .canonical = "layers.{i}.attention_output"},
    {.alias = "h.{i}.mlp", .canonical = "layers.{i}.mlp_output"},
    // the shared Hugging Face module paths of the Llama-style models are none of its names
    {.alias = "model.layers.{i}"},
    {.alias = "model.layers.{i}.self_attn"},
    {.alias = "model.layers.{i}.mlp"},
    {0}};

static const char *const gpt2_ids[] = {"GPT2LMHeadModel", "gpt2", NULL};

const struct model_family gpt2_family = {
    .name = "gpt2",
    .ids = gpt2_ids,
    .open = gpt2_open,
    LNB_FAMILY_OPS,
    .aliases = gpt2_aliases,
    .presets = gpt2_presets,
    .n_presets = 1,
    .init_what = {"a tiny GPT-2 ", " checkpoint"},
};
