// decoder_config.c - the shared steps of the Llama-style families' config readers
// (model/decoder_family.h; each family's reader is in model/families/), read as transformers
// reads config.json: each configuration_*.py's defaults for absent (or null) keys, which the
// family passes (tests/ref/hf/config.py DEFAULTS), layer types as tests/ref/hf/decoder.py
// layer_types() builds them, RoPE as modeling_rope_utils.py (tests/ref/hf/common.py
// rope_inv_freq). A key harvest does not implement is an error naming config.json and the key,
// never computed some other way.
#include "model/ah.h"
#include "model/config.h"
#include "model/decoder.h"
#include "model/decoder_family.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int dec_read_sizes(const struct config *cf, struct dec_config *c, const struct dec_defaults *d,
                   struct ah_error *err) {
    int rc;
    if ((rc = cfg_opt_int(cf, "vocab_size", d->vocab, 1, 1 << 24, &c->vocab, err)) < 0 ||
        (rc = cfg_opt_int(cf, "hidden_size", d->hidden, 1, 1 << 20, &c->hidden, err)) < 0 ||
        (rc = cfg_opt_int(cf, "intermediate_size", d->ffn, 1, 1 << 24, &c->ffn, err)) < 0 ||
        (rc = cfg_opt_int(cf, "num_hidden_layers", d->n_layer, 1, AH_MAX_LAYERS, &c->n_layer,
                          err)) < 0 ||
        (rc = cfg_opt_int(cf, "num_attention_heads", d->n_head, 1, 1 << 16, &c->n_head, err)) < 0 ||
        (rc = cfg_opt_int(cf, "max_position_embeddings", d->max_pos, 1, 1 << 30, &c->max_pos,
                          err)) < 0)
        return rc;
    int kv_d = d->n_kv_head;
    if (kv_d <= 0 || cfg_is_null(cf, "num_key_value_heads")) kv_d = c->n_head; // None -> heads
    if ((rc = cfg_opt_int(cf, "num_key_value_heads", kv_d, 1, 1 << 16, &c->n_kv_head, err)) < 0)
        return rc;
    int hd_d = d->head_dim > 0 ? d->head_dim : c->hidden / c->n_head;
    if (cfg_is_null(cf, "head_dim")) hd_d = c->hidden / c->n_head; // None -> hidden / heads
    if ((rc = cfg_opt_int(cf, "head_dim", hd_d, 2, 1 << 16, &c->head_dim, err)) < 0) return rc;
    if (c->head_dim % 2)
        return ah_fail(err, AH_EINVAL, "%s: \"head_dim\": %d is odd (RoPE rotates pairs)", cf->path,
                       c->head_dim);
    if (c->n_head % c->n_kv_head)
        return ah_fail(err, AH_EINVAL,
                       "%s: \"num_attention_heads\": %d is not a multiple of num_key_value_heads "
                       "(%d)",
                       cf->path, c->n_head, c->n_kv_head);
    return cfg_opt_num(cf, NULL, NULL, "rms_norm_eps", d->eps, &c->eps, err);
}

// ACT of common.py
int dec_read_act(const struct config *cf, struct dec_config *c, const char *key,
                 const char *alt_key, const char *dflt, struct ah_error *err) {
    const struct cfg_value *v = cfg_get(cf, NULL, key);
    if (alt_key && cfg_kind(cf, v) <= CFG_NULL) {
        v = cfg_get(cf, NULL, alt_key);
        if (v && cfg_kind(cf, v) != CFG_NULL) key = alt_key;
    }
    const char *s = cfg_kind(cf, v) <= CFG_NULL ? dflt : cfg_string(cf, v);
    return block_cfg_act(cf->path, key, s, &c->blk.act, err);
}

double dec_yarn_mscale(double scale, double mscale) {
    return scale <= 1.0 ? 1.0 : 0.1 * mscale * log(scale) + 1.0;
}

double dec_yarn_factor(double factor, double mscale, double mscale_all_dim) {
    if (mscale != 0.0 && mscale_all_dim != 0.0)
        return dec_yarn_mscale(factor, mscale) / dec_yarn_mscale(factor, mscale_all_dim);
    return dec_yarn_mscale(factor, 1.0);
}

void dec_yarn_inv_freq(const struct dec_rope *r, int dim, double *inv) {
    double base = r->theta, L0 = r->original_max_pos, pi = 3.141592653589793;
    double bf = r->beta_fast != 0.0 ? r->beta_fast : 32.0; // `or 32`
    double bs = r->beta_slow != 0.0 ? r->beta_slow : 1.0;  // `or 1`
    // find_correction_dim, find_correction_range
    double low = dim * log(L0 / (bf * 2.0 * pi)) / (2.0 * log(base));
    double high = dim * log(L0 / (bs * 2.0 * pi)) / (2.0 * log(base));
    if (r->truncate) low = floor(low), high = ceil(high);
    low = low > 0.0 ? low : 0.0;
    high = high < dim - 1 ? high : dim - 1;
    if (low == high) high += 0.001; // linear_ramp_factor: prevent singularity
    for (int j = 0; j < dim / 2; j++) {
        double ramp = (j - low) / (high - low), pos = pow(base, 2.0 * j / dim);
        ramp = ramp < 0.0 ? 0.0 : ramp > 1.0 ? 1.0 : ramp;
        double extra = 1.0 - ramp; // inv_freq_extrapolation_factor
        inv[j] = 1.0 / (r->factor * pos) * (1.0 - extra) + 1.0 / pos * extra;
    }
}

// YaRN's keys of the dict sc (at `where`), as _compute_yarn_parameters reads them: factor (read
// by the caller), original_max_position_embeddings (absent: max_position_embeddings, as
// model/families/laguna_config.c reads it), beta_fast / beta_slow (`or` their defaults),
// attention_factor else mscale / mscale_all_dim, truncate (default true).
static int yarn_keys(const struct config *cf, const struct cfg_value *sc, const char *where,
                     int max_pos, struct dec_rope *r, struct ah_error *err) {
    double l0 = max_pos, ms = 0.0, msa = 0.0;
    int rc, no_a;
    r->beta_fast = r->beta_slow = 0.0;
    r->attn_factor = NAN;
    if ((rc = cfg_num_in(cf, sc, where, "original_max_position_embeddings", CFG_COUNT, true, &l0,
                         err)) < 0 ||
        (rc = cfg_num_in(cf, sc, where, "beta_fast", CFG_NONNEG, true, &r->beta_fast, err)) < 0 ||
        (rc = cfg_num_in(cf, sc, where, "beta_slow", CFG_NONNEG, true, &r->beta_slow, err)) < 0 ||
        (rc = cfg_num_in(cf, sc, where, "mscale", CFG_NONNEG, true, &ms, err)) < 0 ||
        (rc = cfg_num_in(cf, sc, where, "mscale_all_dim", CFG_NONNEG, true, &msa, err)) < 0 ||
        (no_a = rc = cfg_num_in(cf, sc, where, "attention_factor", CFG_POSITIVE, true,
                                &r->attn_factor, err)) < 0)
        return rc;
    r->original_max_pos = (int)l0; // absent: max_position_embeddings (as Laguna's reader)
    if (no_a) r->attn_factor = dec_yarn_factor(r->factor, ms, msa);
    const struct cfg_value *t = cfg_get(cf, sc, "truncate");
    r->truncate = !cfg_is_false(cf, t);
    if (t && !cfg_is_true(cf, t) && !cfg_is_false(cf, t))
        return ah_fail(err, AH_EINVAL, "%s: \"%s.truncate\": expected true or false", cf->path,
                       where);
    return 0;
}

// The scaling dict sc (at `where`) of one layer type: rope_type (or the older "type") linear,
// dynamic or llama3 with their keys (modeling_rope_utils.py); another type is refused by name.
static int rope_scaling(const struct config *cf, const struct cfg_value *sc, const char *where,
                        const struct dec_config *c, struct dec_rope *r, struct ah_error *err) {
    const struct cfg_value *t = cfg_get(cf, sc, "rope_type");
    if (!t) t = cfg_get(cf, sc, "type");
    const char *tn = t ? cfg_string(cf, t) : "default";
    static const char *const names[] = {"default", "linear", "dynamic", "llama3", "yarn"};
    static const enum dec_rope_type types[] = {DEC_ROPE_DEFAULT, DEC_ROPE_LINEAR, DEC_ROPE_DYNAMIC,
                                               DEC_ROPE_LLAMA3, DEC_ROPE_YARN};
    int k = 0, rc, n = c->rope_yarn ? 5 : 4; // yarn only where the family reads it
    while (k < n && !(tn && !strcmp(tn, names[k])))
        k++;
    if (k == n)
        return ah_fail(err, AH_EINVAL,
                       "%s: \"%s.rope_type\": \"%s\" is not supported (expected \"default\", "
                       "\"linear\", \"dynamic\"%s \"llama3\"%s)",
                       cf->path, where, tn ? tn : "(not a string)", n == 5 ? "," : " or",
                       n == 5 ? " or \"yarn\"" : "");
    if ((r->type = types[k]) == DEC_ROPE_DEFAULT) return 0;
    if ((rc = cfg_opt_num(cf, sc, where, "factor", NAN, &r->factor, err)) < 0) return rc;
    if (isnan(r->factor))
        return ah_fail(err, AH_EINVAL, "%s: \"%s.factor\": missing", cf->path, where);
    if (r->type == DEC_ROPE_YARN) return yarn_keys(cf, sc, where, c->max_pos, r, err);
    if (r->type != DEC_ROPE_LLAMA3) return 0;
    double l0;
    if ((rc = cfg_opt_num(cf, sc, where, "low_freq_factor", NAN, &r->low, err)) < 0 ||
        (rc = cfg_opt_num(cf, sc, where, "high_freq_factor", NAN, &r->high, err)) < 0 ||
        (rc = cfg_opt_num(cf, sc, where, "original_max_position_embeddings", NAN, &l0, err)) < 0)
        return rc;
    if (isnan(r->low) || isnan(r->high) || isnan(l0) || r->low == r->high)
        return ah_fail(err, AH_EINVAL,
                       "%s: \"%s\": llama3 needs low_freq_factor < high_freq_factor and "
                       "original_max_position_embeddings",
                       cf->path, where);
    if ((rc = cfg_num_in(cf, sc, where, "original_max_position_embeddings", CFG_COUNT, true, &l0,
                         err)) < 0) // a length: (int)l0 of a fraction or of 1e300 would be wrong
        return rc;
    r->original_max_pos = (int)l0;
    return 0;
}

int dec_read_rope(const struct config *cf, struct dec_config *c, bool sliding, double theta,
                  const char *local_key, struct ah_error *err) {
    struct dec_rope *r = sliding ? &c->rope_sliding : &c->rope_full;
    const char *type = sliding ? "sliding_attention" : "full_attention";
    const struct cfg_value *rp = cfg_get(cf, NULL, "rope_parameters"), *sc;
    char where[64] = "rope_parameters";
    if (cfg_kind(cf, cfg_get(cf, rp, type)) == CFG_OBJECT) {
        rp = cfg_get(cf, rp, type);
        snprintf(where, sizeof where, "rope_parameters.%s", type);
    }
    int rc;
    memset(r, 0, sizeof *r);
    r->factor = 1.0;
    if (cfg_kind(cf, rp) == CFG_OBJECT && cfg_get(cf, rp, "rope_theta")) {
        sc = rp;
        rc = cfg_opt_num(cf, rp, where, "rope_theta", theta, &r->theta, err);
    } else if (local_key && sliding) {
        return cfg_opt_num(cf, NULL, NULL, local_key, 10000.0, &r->theta, err);
    } else {
        sc = cfg_get(cf, NULL, "rope_scaling");
        snprintf(where, sizeof where, "rope_scaling");
        rc = cfg_opt_num(cf, NULL, NULL, "rope_theta", theta, &r->theta, err);
    }
    if (rc < 0 || cfg_kind(cf, sc) <= CFG_NULL) return rc;
    if (cfg_kind(cf, sc) != CFG_OBJECT)
        return ah_fail(err, AH_EINVAL, "%s: \"%s\": expected an object or null", cf->path, where);
    return rope_scaling(cf, sc, where, c, r, err);
}

// decoder.py effective_window: Qwen keeps sliding_window only with use_sliding_window
int dec_read_window(const struct config *cf, struct dec_config *c, int dflt, enum dec_window w,
                    struct ah_error *err) {
    int rc;
    if (cfg_is_null(cf, "sliding_window")) dflt = 0;
    if ((rc = cfg_opt_int(cf, "sliding_window", dflt, 0, 1 << 30, &c->window, err)) < 0) return rc;
    bool unused = w == DEC_WINDOW_NONE ||
                  (w == DEC_WINDOW_GATED && !cfg_opt_bool(cf, "use_sliding_window", false));
    if (w == DEC_WINDOW_GATED && unused) c->window = 0; // transformers sets it to None
    if (w == DEC_WINDOW_NONE && cfg_get(cf, NULL, "sliding_window") && c->window)
        return ah_fail(err, AH_EINVAL, "%s: \"sliding_window\": %s has none", cf->path, c->arch);
    // a window of 0 keys masks every key (transformers' sliding mask): null is "no window"
    if (!unused && cfg_kind(cf, cfg_get(cf, NULL, "sliding_window")) == CFG_NUMBER && !c->window)
        return ah_fail(err, AH_EINVAL,
                       "%s: \"sliding_window\": 0 is out of range (expected null, no window, or "
                       ">= 1)",
                       cf->path);
    return 0;
}

// whether layer i slides by default (decoder.py layer_types)
static bool slides(enum dec_sliding sl, int i, int mwl, int pattern) {
    switch (sl) {
        case DEC_SLIDING_ALTERNATE:
            return (i + 1) % 2 != 0;
        case DEC_SLIDING_PATTERN:
            return (i + 1) % pattern != 0;
        case DEC_SLIDING_FROM:
            return i >= mwl;
        case DEC_SLIDING_ALL:
            break;
    }
    return true;
}

// per-layer sliding and mixture flags (decoder.py layer_types, params.py is_sparse_layer)
static int layer_flags(const struct config *cf, struct dec_config *c, enum dec_sliding sl,
                       enum dec_moe_layers ml, struct ah_error *err) {
    int L = c->n_layer, mwl, step, pattern, rc;
    if ((rc = cfg_opt_int(cf, "max_window_layers", 28, 0, 1 << 30, &mwl, err)) < 0 ||
        (rc = cfg_opt_int(cf, "decoder_sparse_step", 1, 1, 1 << 30, &step, err)) < 0 ||
        (rc = cfg_opt_int(cf, "sliding_window_pattern", 6, 1, 1 << 30, &pattern, err)) < 0)
        return rc;
    const struct cfg_value *lt = cfg_get(cf, NULL, "layer_types");
    if (lt && cfg_kind(cf, lt) != CFG_NULL && cfg_length(cf, lt) != L)
        return ah_fail(err, AH_EINVAL, "%s: \"layer_types\": expected a list of %d strings",
                       cf->path, L);
    const struct cfg_value *only = cfg_get(cf, NULL, "mlp_only_layers");
    for (int i = 0; i < L; i++) {
        const char *s = cfg_string(cf, cfg_element(cf, lt, i));
        if (cfg_length(cf, lt)) {
            if (!s || (strcmp(s, "sliding_attention") && strcmp(s, "full_attention")))
                return ah_fail(err, AH_EINVAL,
                               "%s: \"layer_types\"[%d]: expected \"sliding_attention\" or "
                               "\"full_attention\"",
                               cf->path, i);
            c->sliding[i] = !strcmp(s, "sliding_attention");
        } else {
            c->sliding[i] = slides(sl, i, mwl, pattern);
        }
        c->sliding[i] = c->sliding[i] && c->window > 0;
        bool in_only = false;
        for (int j = 0; j < cfg_length(cf, only); j++)
            in_only |= cfg_number(cf, cfg_element(cf, only, j)) == i;
        c->moe[i] = ml == DEC_MOE_ALL ||
                    (ml == DEC_MOE_SPARSE && c->n_expert > 0 && !in_only && (i + 1) % step == 0);
    }
    return 0;
}

int dec_read_layers(const struct config *cf, struct dec_config *c, enum dec_sliding sl,
                    enum dec_moe_layers ml, struct ah_error *err) {
    int rc = cfg_check_unused(cf, err);
    if (rc < 0) return rc;
    c->sliding = calloc((size_t)c->n_layer, sizeof *c->sliding);
    c->moe = calloc((size_t)c->n_layer, sizeof *c->moe);
    if (!c->sliding || !c->moe) return -AH_ENOMEM;
    return layer_flags(cf, c, sl, ml, err);
}

// Qwen3-MoE's mlp_only_layers: null or a list of layer indices (integers; one past the layers
// matches none, as in transformers)
static int read_only_layers(const struct config *cf, struct ah_error *err) {
    const struct cfg_value *v = cfg_get(cf, NULL, "mlp_only_layers");
    if (cfg_kind(cf, v) <= CFG_NULL) return 0;
    bool ok = cfg_kind(cf, v) == CFG_ARRAY;
    for (int j = 0; ok && j < cfg_length(cf, v); j++) {
        const struct cfg_value *e = cfg_element(cf, v, j);
        double d = cfg_number(cf, e);
        ok = cfg_kind(cf, e) == CFG_NUMBER && isfinite(d) && d == floor(d);
    }
    if (!ok)
        return ah_fail(err, AH_EINVAL, "%s: \"mlp_only_layers\": expected a list of layer indices",
                       cf->path);
    return 0;
}

int dec_read_experts(const struct config *cf, struct dec_config *c, const struct dec_expert_keys *k,
                     struct ah_error *err) {
    const char *key = k->n_key;
    if (k->n_alias && cfg_get(cf, NULL, k->n_alias) && !cfg_get(cf, NULL, k->n_key))
        key = k->n_alias;
    int rc;
    if ((rc = cfg_opt_int(cf, key, k->n_dflt, k->n_min, 1 << 16, &c->n_expert, err)) < 0 ||
        (rc = cfg_opt_int(cf, "num_experts_per_tok", k->top_k_dflt, 1, 1 << 16, &c->top_k, err)) <
            0 ||
        (rc = cfg_opt_int(cf, "moe_intermediate_size", 768, 1, 1 << 24, &c->expert_ffn, err)) < 0)
        return rc;
    if (k->only_layers && (rc = read_only_layers(cf, err)) < 0) return rc;
    if (!k->own_ffn) c->expert_ffn = c->ffn;
    c->blk.norm_topk = k->norm_forced || cfg_opt_bool(cf, "norm_topk_prob", false);
    if (c->n_expert > 0 && c->top_k > c->n_expert)
        return ah_fail(err, AH_EINVAL,
                       "%s: \"num_experts_per_tok\": %d is more than the %d experts", cf->path,
                       c->top_k, c->n_expert);
    return 0;
}

int dec_read_flags(const struct config *cf, struct dec_config *c, bool tied_dflt,
                   bool *attention_bias, struct ah_error *err) {
    struct dec_block *b = &c->blk;
    *attention_bias = cfg_opt_bool(cf, "attention_bias", false);
    b->mlp_bias = cfg_opt_bool(cf, "mlp_bias", false);
    b->tied = cfg_opt_bool(cf, "tie_word_embeddings", tied_dflt);
    b->scale = (float)(1.0 / sqrt((double)c->head_dim));
    b->embed_scale = 1.0f;
    if (cfg_opt_bool(cf, "use_bidirectional_attention", false))
        return ah_fail(err, AH_EINVAL,
                       "%s: \"use_bidirectional_attention\": true is not a causal LM (not "
                       "supported)",
                       cf->path);
    const char *dt = cfg_str(cf, "torch_dtype") ? cfg_str(cf, "torch_dtype") : cfg_str(cf, "dtype");
    c->bytes_per_param = dt && !strcmp(dt, "float32") ? 4 : 2;
    c->bf16 = dt && !strcmp(dt, "bfloat16");
    return 0;
}

// the biases r->bias gives, attention_bias being ab (and mlp_bias read by dec_read_flags)
static void set_biases(struct dec_block *b, enum dec_bias bias, bool ab) {
    b->qkv_bias = bias == DEC_BIAS_QWEN2 || (bias != DEC_BIAS_NONE && ab);
    b->o_bias = (bias == DEC_BIAS_KEYS || bias == DEC_BIAS_ATTN) && ab;
    if (bias == DEC_BIAS_ATTN || bias == DEC_BIAS_NONE) b->mlp_bias = false;
}

int dec_read_std(const struct config *cf, struct dec_config *c, const struct dec_reader *r,
                 struct ah_error *err) {
    const char *act = r->act_key ? r->act_key : "hidden_act";
    const char *act_dflt = r->act_key ? r->act_dflt : "silu";
    bool ab;
    int rc;
    c->blk = r->blk;
    if ((rc = dec_read_sizes(cf, c, &r->d, err)) < 0 ||
        (rc = dec_read_act(cf, c, act, r->act_alt, act_dflt, err)) < 0 ||
        (rc = dec_read_window(cf, c, r->window, r->window_kind, err)) < 0 ||
        (r->experts && (rc = dec_read_experts(cf, c, r->experts, err)) < 0) ||
        (rc = dec_read_flags(cf, c, r->tied, &ab, err)) < 0)
        return rc;
    set_biases(&c->blk, r->bias, ab);
    if (r->own && (rc = r->own(cf, c, err)) < 0) return rc;
    if (r->rope)
        rc = r->rope(cf, c, err);
    else if ((rc = dec_read_rope(cf, c, false, r->theta, r->local_theta, err)) == 0)
        rc = dec_read_rope(cf, c, true, r->theta, r->local_theta, err);
    if (rc < 0) return rc;
    return dec_read_layers(cf, c, r->sliding, r->moe_layers, err);
}

void dec_config_free(struct dec_config *c) {
    free(c->fp8.skip);
    free(c->sliding);
    free(c->moe);
    free(c->longrope);
    memset(c, 0, sizeof *c);
}

void dec_rope_inv_freq(const struct dec_rope *r, int hd, int max_pos, int T, double *inv) {
    if (r->type == DEC_ROPE_YARN) {
        dec_yarn_inv_freq(r, hd, inv);
        return;
    }
    double base = r->theta;
    if (r->type == DEC_ROPE_DYNAMIC && T > max_pos) // _compute_dynamic_ntk_parameters
        base *= pow(r->factor * T / max_pos - (r->factor - 1.0), (double)hd / (hd - 2));
    for (int j = 0; j < hd / 2; j++) {
        inv[j] = 1.0 / pow(base, 2.0 * j / hd);
        if (r->type == DEC_ROPE_LINEAR) inv[j] /= r->factor;
        if (r->type == DEC_ROPE_LONGROPE) // _compute_longrope_parameters: seq_len T
            inv[j] /= T > r->original_max_pos ? r->ext_long[j] : r->ext_short[j];
        if (r->type != DEC_ROPE_LLAMA3) continue;
        // _compute_llama3_parameters: long wavelengths divided by the factor, short kept, the
        // band between smoothed
        double old = r->original_max_pos, wl = 2.0 * 3.141592653589793 / inv[j];
        double lo_wl = old / r->low, hi_wl = old / r->high;
        double il = wl > lo_wl ? inv[j] / r->factor : inv[j];
        if (!(wl < hi_wl) && !(wl > lo_wl)) {
            double s = (old / wl - r->low) / (r->high - r->low);
            il = (1.0 - s) * il / r->factor + s * il;
        }
        inv[j] = il;
    }
}
