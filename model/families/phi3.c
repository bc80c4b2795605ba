// phi3.c - Phi3ForCausalLM (configuration_phi3.py, modeling_phi3.py; float64 reference
// tests/ref/phi3_ref.py): the Llama block with one fused qkv_proj (rows [0, H hd) q, then KV hd k,
// then KV hd v) and one fused gate_up_proj (rows [0, I) the gate, then I up: chunk(2)), no biases,
// RoPE on the first head_dim * partial_rotary_factor dims, sliding_window on every layer when set,
// and longrope scaling (modeling_rope_utils.py _compute_longrope_parameters): inv_freq divided by
// short_factor, or by long_factor for a prompt longer than original_max_position_embeddings
// (then for every position of it: transformers' longrope update looks at max(position_ids) + 1),
// cos and sin times the attention factor.
// L = layers, D = hidden, H = query heads, KV = key/value heads, hd = head_dim, I = MLP width,
// V = vocab, h2 = rotary dims / 2
#include "model/decoder_family.h"

#include "model/ah.h"
#include "model/config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

// rope_scaling's `key` at `where`: h2 numbers, each finite and > 0, into out
static int factors(const struct config *cf, const struct cfg_value *sc, const char *where,
                   const char *key, int h2, double *out, struct ah_error *err) {
    const struct cfg_value *v = cfg_get(cf, sc, key);
    if (cfg_kind(cf, v) != CFG_ARRAY || cfg_length(cf, v) != h2)
        return ah_fail(err, AH_EINVAL,
                       "%s: \"%s.%s\": expected a list of %d numbers (head_dim * "
                       "partial_rotary_factor / 2), got %d",
                       cf->path, where, key, h2, cfg_length(cf, v));
    for (int j = 0; j < h2; j++) {
        const struct cfg_value *e = cfg_element(cf, v, j);
        out[j] = cfg_number(cf, e);
        if (cfg_kind(cf, e) != CFG_NUMBER || !isfinite(out[j]) || out[j] <= 0)
            return ah_fail(err, AH_EINVAL, "%s: \"%s.%s\"[%d]: expected a number > 0", cf->path,
                           where, key, j);
    }
    return 0;
}

// the longrope parameters of sc (at where): both factor lists, the original length (the dict's
// must agree with the top-level key transformers switches on), the attention factor
static int longrope(const struct config *cf, const struct cfg_value *sc, const char *where,
                    struct dec_config *c, int h2, struct ah_error *err) {
    struct dec_rope *r = &c->rope_full;
    int om, rc;
    double d = NAN, factor, A;
    if ((rc = cfg_opt_int(cf, "original_max_position_embeddings", 4096, 1, 1 << 30, &om, err)) <
            0 ||
        (rc = cfg_num_in(cf, sc, where, "original_max_position_embeddings", CFG_COUNT, true, &d,
                         err)) < 0 ||
        (rc = cfg_opt_num(cf, sc, where, "factor", NAN, &factor, err)) < 0 ||
        (rc = cfg_opt_num(cf, sc, where, "attention_factor", NAN, &A, err)) < 0)
        return rc;
    if (!isnan(d) && (int)d != om)
        return ah_fail(err, AH_EINVAL,
                       "%s: \"%s.original_max_position_embeddings\": %d differs from the "
                       "top-level original_max_position_embeddings (%d)",
                       cf->path, where, (int)d, om);
    if (!(c->longrope = malloc(2 * (size_t)h2 * sizeof *c->longrope))) return -AH_ENOMEM;
    if ((rc = factors(cf, sc, where, "short_factor", h2, c->longrope, err)) < 0 ||
        (rc = factors(cf, sc, where, "long_factor", h2, c->longrope + h2, err)) < 0)
        return rc;
    if (isnan(factor)) factor = (double)c->max_pos / om; // Phi-3's max / original
    if (isnan(A)) A = factor <= 1.0 ? 1.0 : sqrt(1.0 + log(factor) / log((double)om));
    r->type = DEC_ROPE_LONGROPE;
    r->factor = factor;
    r->original_max_pos = om;
    r->ext_short = c->longrope;
    r->ext_long = c->longrope + h2;
    r->attn_factor = A;
    return 0;
}

// Phi3Config's RoPE: rope_scaling (else rope_parameters) null, "default" or "longrope" (its
// "su" and "yarn" are read as longrope, as Phi3Config does); rope_theta and partial_rotary_factor
// from the dict, else the top level. Every layer type gets it.
static int read_rope(const struct config *cf, struct dec_config *c, struct ah_error *err) {
    const char *where = "rope_scaling";
    const struct cfg_value *sc = cfg_get(cf, NULL, where);
    if (cfg_kind(cf, sc) <= CFG_NULL) sc = cfg_get(cf, NULL, where = "rope_parameters");
    if (cfg_kind(cf, sc) > CFG_NULL && cfg_kind(cf, sc) != CFG_OBJECT)
        return ah_fail(err, AH_EINVAL, "%s: \"%s\": expected an object or null", cf->path, where);
    bool in = cfg_kind(cf, sc) == CFG_OBJECT;
    struct dec_rope *r = &c->rope_full;
    double prf = 1.0;
    int rc;
    memset(r, 0, sizeof *r);
    r->factor = r->attn_factor = 1.0;
    if ((rc = cfg_opt_num(cf, in && cfg_get(cf, sc, "rope_theta") ? sc : NULL, where, "rope_theta",
                          10000.0, &r->theta, err)) < 0 ||
        (rc = cfg_num_in(cf, NULL, NULL, "partial_rotary_factor", CFG_FRACTION, true, &prf, err)) <
            0 ||
        (rc = cfg_num_in(cf, in ? sc : NULL, where, "partial_rotary_factor", CFG_FRACTION, true,
                         &prf, err)) < 0)
        return rc;
    int n_rot = (int)(c->head_dim * prf);
    if (n_rot < 2 || n_rot % 2)
        return ah_fail(err, AH_EINVAL,
                       "%s: \"partial_rotary_factor\": head_dim %d times it is %d rotary dims "
                       "(expected an even number >= 2)",
                       cf->path, c->head_dim, n_rot);
    c->blk.n_rot = n_rot == c->head_dim ? 0 : n_rot;
    const struct cfg_value *t = in ? cfg_get(cf, sc, "rope_type") : NULL;
    if (in && !t) t = cfg_get(cf, sc, "type");
    const char *tn = t ? cfg_string(cf, t) : "default";
    if (tn && (!strcmp(tn, "longrope") || !strcmp(tn, "su") || !strcmp(tn, "yarn")))
        rc = longrope(cf, sc, where, c, n_rot / 2, err);
    else if (!tn || strcmp(tn, "default"))
        return ah_fail(err, AH_EINVAL,
                       "%s: \"%s.rope_type\": \"%s\" is not supported by Phi-3 (expected "
                       "\"default\" or \"longrope\")",
                       cf->path, where, tn ? tn : "(not a string)");
    c->rope_sliding = c->rope_full;
    return rc;
}

// Phi3Attention and Phi3MLP have no biases: transformers ignores attention_bias / mlp_bias
static const struct dec_reader phi3_reader = {
    .d = {.vocab = 32064,
          .hidden = 3072,
          .ffn = 8192,
          .n_layer = 32,
          .n_head = 32,
          .max_pos = 4096,
          .eps = 1e-5},
    .window_kind = DEC_WINDOW_ON,
    .blk = {.norm = DEC_NORM_RMS,
            .norm_at = DEC_NORM_PRE,
            .fused_qkv = true,
            .fused_gate_up = true},
    .bias = DEC_BIAS_NONE,
    .rope = read_rope,
};

static const struct dec_names phi3_names = {
    DEC_NAMES_MODEL,         DEC_NAMES_PRE_NORMS,           .qkv = "self_attn.qkv_proj",
    .o = "self_attn.o_proj", .gate_up = "mlp.gate_up_proj", .down = "mlp.down_proj",
};

// The fused modules' outputs are values harvest stores apart
static const struct alias_row phi3_aliases[] = {
    {.alias = "model.layers.{i}.self_attn.qkv_proj",
     .why =
         "qkv_proj's output is three values, stored apart: layers.{i}.attention_queries_pre_rope, "
         "layers.{i}.attention_keys_pre_rope and layers.{i}.attention_values"},
    {.alias = "model.layers.{i}.mlp.gate_up_proj",
     .why = "gate_up_proj's output is the gate before its activation (not stored; "
            "layers.{i}.mlp_activation is after it) and the up projection; layers.{i}.mlp_neurons "
            "is up * act(gate)"},
    {0}};

// init-model preset: microsoft/Phi-3.5-mini-instruct's config.json keys (as transformers 4.46.3
// re-serialises them; tests/ref/configs/PROVENANCE.md) with the dimensions shrunk: head_dim 8
// (4 rotary frequencies, so 4 short and 4 long factors, values taken from the release's lists),
// two key/value heads for four query heads (the release has 32 and 32) so that k and v are
// narrower than q in qkv_proj, original_max_position_embeddings 16 with max 512 (the release's
// ratio, 32: attention factor sqrt(1 + ln 32 / ln 16) = 1.5), so that prompts of more than 16
// tokens take long_factor.
static const char pr_phi35[] =
    "{\"architectures\": [\"Phi3ForCausalLM\"], "
    "\"attention_bias\": false, "
    "\"attention_dropout\": 0.0, "
    "\"bos_token_id\": 1, "
    "\"embd_pdrop\": 0.0, "
    "\"eos_token_id\": 32000, "
    "\"hidden_act\": \"silu\", "
    "\"hidden_size\": 32, "
    "\"initializer_range\": 0.02, "
    "\"intermediate_size\": 48, "
    "\"max_position_embeddings\": 512, "
    "\"model_type\": \"phi3\", "
    "\"num_attention_heads\": 4, "
    "\"num_hidden_layers\": 2, "
    "\"num_key_value_heads\": 2, "
    "\"original_max_position_embeddings\": 16, "
    "\"pad_token_id\": 32000, "
    "\"resid_pdrop\": 0.0, "
    "\"rms_norm_eps\": 1e-05, "
    "\"rope_scaling\": {\"long_factor\": [1.0800000429153442, 3.2300000190734863, "
    "30.420001983642578, 64.83999633789062], \"short_factor\": [1.0, 1.0499999523162842, "
    "1.679999828338623, 2.8399994373321533], \"type\": \"longrope\"}, "
    "\"rope_theta\": 10000.0, "
    "\"sliding_window\": 262144, "
    "\"tie_word_embeddings\": false, "
    "\"torch_dtype\": \"bfloat16\", "
    "\"use_cache\": true, "
    "\"vocab_size\": 96, "
    "\"_tiny_from\": \"microsoft/Phi-3.5-mini-instruct's config.json keys, dimensions shrunk\"}";

static const struct model_preset phi3_presets[] = {{"Phi-3.5-mini-instruct", pr_phi35}};

DEC_FAMILY(phi3_family, "phi3", "Phi3ForCausalLM", "phi3", phi3_presets, phi3_aliases,
           .names = &phi3_names, .reader = &phi3_reader, .quant = dec_quant_fp8)
