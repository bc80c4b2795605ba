// laguna_config.c - Laguna's config.json (tests/ref/laguna-forward.md section 2, with HF's
// defaults for absent keys), read through model/config.h. Errors name config.json and the key.
#include "model/ah.h"
#include "model/config.h"
#include "model/laguna.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// A per-layer list of strings: each must be `a` (sets out[i]) or `b`; absent: dflt(i).
static int layer_list(const struct config *cf, const char *key, const char *a, const char *b, int L,
                      bool *out, bool (*dflt)(int), struct ah_error *err) {
    const struct cfg_value *v = cfg_get(cf, NULL, key);
    if (!v) {
        for (int i = 0; i < L; i++)
            out[i] = dflt(i);
        return 0;
    }
    if (cfg_kind(cf, v) != CFG_ARRAY || cfg_length(cf, v) != L)
        return ah_fail(err, AH_EINVAL, "%s: \"%s\": expected a list of %d strings (one a layer)",
                       cf->path, key, L);
    for (int i = 0; i < L; i++) {
        const char *e = cfg_string(cf, cfg_element(cf, v, i));
        if (e && !strcmp(e, a))
            out[i] = true;
        else if (e && !strcmp(e, b))
            out[i] = false;
        else
            return ah_fail(err, AH_EINVAL, "%s: \"%s\"[%d]: expected \"%s\" or \"%s\"", cf->path,
                           key, i, a, b);
    }
    return 0;
}

static bool never(int i) {
    (void)i;
    return false;
}
static bool dense_first(int i) {
    return i == 0;
}

// A number in a rope dict: 1 if found, 0 if absent, <0 on error (not a finite number).
static int rope_num(const struct config *cf, const char *where, const struct cfg_value *o,
                    const char *key, double *out, struct ah_error *err) {
    const struct cfg_value *v = cfg_get(cf, o, key);
    if (!v) return 0;
    if (cfg_kind(cf, v) != CFG_NUMBER || !isfinite(cfg_number(cf, v)))
        return ah_fail(err, AH_EINVAL, "%s: \"%s.%s\": expected a finite number", cf->path, where,
                       key);
    *out = cfg_number(cf, v);
    return 1;
}

// transformers' get_mscale (modeling_rope_utils.py, _compute_yarn_parameters)
static double yarn_mscale(double scale, double mscale) {
    return scale <= 1.0 ? 1.0 : 0.1 * mscale * log(scale) + 1.0;
}

// YaRN's keys of one layer type's dict o, as transformers' _compute_yarn_parameters reads them:
// beta_fast / beta_slow `or 32` / `or 1`; attention_factor from mscale / mscale_all_dim when
// absent; original_max_position_embeddings from the type's dict, the top of rope_parameters or
// max_position_embeddings; truncate from the top of rope_parameters (default true).
static int yarn_read(const struct config *cf, const struct cfg_value *all,
                     const struct cfg_value *o, const char *where, int max_pos,
                     struct laguna_rope *r, struct ah_error *err) {
    const char *cp = cf->path;
    double ms = 0.0, msa = 0.0, l0 = max_pos;
    int rc, has_a;
    if ((rc = rope_num(cf, where, o, "factor", &r->factor, err)) <= 0)
        return rc < 0 ? rc
                      : ah_fail(err, AH_EINVAL, "%s: \"%s\": yarn needs \"factor\"", cp, where);
    if (!(r->factor > 0.0))
        return ah_fail(err, AH_EINVAL, "%s: \"%s.factor\": %g is out of range (expected > 0)", cp,
                       where, r->factor);
    r->beta_fast = r->beta_slow = 0.0;
    if ((rc = rope_num(cf, where, o, "beta_fast", &r->beta_fast, err)) < 0 ||
        (rc = rope_num(cf, where, o, "beta_slow", &r->beta_slow, err)) < 0 ||
        (rc = rope_num(cf, where, o, "mscale", &ms, err)) < 0 ||
        (rc = rope_num(cf, where, o, "mscale_all_dim", &msa, err)) < 0 ||
        (has_a = rc = rope_num(cf, where, o, "attention_factor", &r->attention_factor, err)) < 0)
        return rc;
    if (r->beta_fast == 0.0) r->beta_fast = 32.0; // `or 32`
    if (r->beta_slow == 0.0) r->beta_slow = 1.0;  // `or 1`
    if (r->beta_fast < 0.0 || r->beta_slow < 0.0)
        return ah_fail(err, AH_EINVAL, "%s: \"%s\": beta_fast and beta_slow must be > 0", cp,
                       where);
    if (!has_a)
        r->attention_factor = ms != 0.0 && msa != 0.0
                                  ? yarn_mscale(r->factor, ms) / yarn_mscale(r->factor, msa)
                                  : yarn_mscale(r->factor, 1.0);
    if (!(r->attention_factor > 0.0 && isfinite(r->attention_factor)))
        return ah_fail(err, AH_EINVAL, "%s: \"%s.%s\": the attention factor is %g (expected > 0)",
                       cp, where, has_a ? "attention_factor" : "mscale", r->attention_factor);
    if ((rc = rope_num(cf, where, o, "original_max_position_embeddings", &l0, err)) < 0 ||
        (rc == 0 && (rc = rope_num(cf, "rope_parameters", all, "original_max_position_embeddings",
                                   &l0, err)) < 0))
        return rc;
    if (!(l0 >= 1.0 && l0 <= 1e9 && l0 == floor(l0)))
        return ah_fail(err, AH_EINVAL,
                       "%s: \"%s.original_max_position_embeddings\": expected an integer >= 1", cp,
                       where);
    r->original_max_pos = (int)l0;
    const struct cfg_value *tr = cfg_get(cf, all, "truncate");
    const struct cfg_value *own = cfg_get(cf, o, "truncate");
    if ((tr && cfg_kind(cf, tr) != CFG_BOOL) || (own && cfg_kind(cf, own) != CFG_BOOL))
        return ah_fail(err, AH_EINVAL, "%s: \"%s.truncate\": expected true or false", cp,
                       tr && cfg_kind(cf, tr) != CFG_BOOL ? "rope_parameters" : where);
    r->no_truncate = cfg_is_false(cf, tr);
    if (own && cfg_is_false(cf, own) != r->no_truncate) // transformers reads only the top one
        return ah_fail(err, AH_EINVAL,
                       "%s: \"%s.truncate\": transformers reads \"truncate\" only at the top of "
                       "rope_parameters; put it there",
                       cp, where);
    return 0;
}

// The RoPE of one layer type (tests/ref/laguna_ref.py inv_freq): rope_parameters[type], with
// transformers' fallbacks: rope_theta and partial_rotary_factor from the top level when the dict
// lacks them (setdefault), LagunaConfig's defaults when there is no rope_parameters at all.
static int rope_read(const struct config *cf, const char *type, int head_dim, int max_pos,
                     struct laguna_rope *r, struct ah_error *err) {
    const char *cp = cf->path;
    const struct cfg_value *all = cfg_get(cf, NULL, "rope_parameters");
    bool full = !strcmp(type, "full_attention");
    char where[64];
    snprintf(where, sizeof where, "rope_parameters.%s", type);
    memset(r, 0, sizeof *r);
    r->factor = r->attention_factor = 1.0;
    if (!all || cfg_kind(cf, all) == CFG_NULL) { // configuration_laguna.py's default_rope_params
        r->theta = full ? 500000.0 : 10000.0;
        r->partial = full ? 0.5 : 1.0;
        return 0;
    }
    const struct cfg_value *o = cfg_get(cf, all, type);
    if (cfg_kind(cf, o) != CFG_OBJECT)
        return ah_fail(err, AH_EINVAL, "%s: \"%s\": expected an object (a layer uses it)", cp,
                       where);
    const struct cfg_value *t = cfg_get(cf, o, "rope_type");
    const char *tn = cfg_string(cf, t) ? cfg_string(cf, t) : "default";
    if (t && !cfg_string(cf, t))
        return ah_fail(err, AH_EINVAL, "%s: \"%s.rope_type\": expected a string", cp, where);
    if (!strcmp(tn, "default"))
        r->type = LAGUNA_ROPE_DEFAULT;
    else if (!strcmp(tn, "yarn"))
        r->type = LAGUNA_ROPE_YARN;
    else
        return ah_fail(err, AH_EINVAL,
                       "%s: \"%s.rope_type\": \"%s\" is not supported (expected \"default\" or "
                       "\"yarn\")",
                       cp, where, tn);
    int rc;
    const char *tk = "rope_theta", *pk = "partial_rotary_factor";
    char tw[96], pw[96];
    snprintf(tw, sizeof tw, "%s.%s", where, tk);
    snprintf(pw, sizeof pw, "%s.%s", where, pk);
    if ((rc = rope_num(cf, where, o, tk, &r->theta, err)) < 0) return rc;
    if (rc == 0) { // the top level's, if any
        if ((rc = cfg_double(cf, tk, false, &r->theta, err)) != 0)
            return rc < 0
                       ? rc
                       : ah_fail(err, AH_EINVAL, "%s: \"%s\": missing \"rope_theta\"", cp, where);
        snprintf(tw, sizeof tw, "%s", tk);
    }
    r->partial = 1.0;
    if ((rc = rope_num(cf, where, o, pk, &r->partial, err)) < 0) return rc;
    if (rc == 0 && (rc = cfg_double(cf, pk, false, &r->partial, err)) < 0) return rc;
    if (rc == 0) snprintf(pw, sizeof pw, "%s", pk);
    int d = (int)(head_dim * r->partial);
    if (!(r->theta > 0.0 && isfinite(r->theta)) || (r->type == LAGUNA_ROPE_YARN && r->theta == 1.0))
        return ah_fail(err, AH_EINVAL, "%s: \"%s\": %g is out of range (expected > 0%s)", cp, tw,
                       r->theta, r->type == LAGUNA_ROPE_YARN ? ", not 1" : "");
    if (!(r->partial > 0.0 && r->partial <= 1.0) || d < 2 || d % 2)
        return ah_fail(err, AH_EINVAL,
                       "%s: \"%s\": %g gives %d rotated dimensions of head_dim %d (expected a "
                       "factor in (0, 1] giving an even number >= 2)",
                       cp, pw, r->partial, d, head_dim);
    return r->type == LAGUNA_ROPE_YARN ? yarn_read(cf, all, o, where, max_pos, r, err) : 0;
}

// The integer keys with LagunaConfig's defaults, each range-checked (sizes bounded so that
// products of them fit the counters).
static int laguna_ints(const struct config *cf, struct laguna_config *c, int *n_head,
                       struct ah_error *err) {
    struct {
        const char *key;
        int *dst, dflt, lo, hi;
    } ints[] = {
        {"num_hidden_layers", &c->n_layer, 40, 1, AH_MAX_LAYERS},
        {"hidden_size", &c->hidden, 2048, 1, 1 << 20},
        {"vocab_size", &c->vocab, 100352, 1, 1 << 24},
        {"num_attention_heads", n_head, 48, 1, 1 << 16},
        {"num_key_value_heads", &c->n_kv_head, 8, 1, 1 << 16},
        {"head_dim", &c->head_dim, 128, 1, 1 << 16},
        {"intermediate_size", &c->dense_ffn, 8192, 1, 1 << 24},
        {"moe_intermediate_size", &c->expert_ffn, 512, 1, 1 << 24},
        {"shared_expert_intermediate_size", &c->shared_ffn, 512, 1, 1 << 24},
        {"num_experts", &c->n_expert, 256, 1, 1 << 16},
        {"num_experts_per_tok", &c->top_k, 8, 1, 1 << 16},
        {"sliding_window", &c->sliding_window, 512, 0, 1 << 30},
        {"max_position_embeddings", &c->max_pos, 131072, 1, 1 << 30},
    };
    int rc;
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        *ints[i].dst = ints[i].dflt;
        if ((rc = cfg_int(cf, ints[i].key, false, ints[i].dst, err)) < 0) return rc;
        if (*ints[i].dst < ints[i].lo || *ints[i].dst > ints[i].hi)
            return ah_fail(err, AH_EINVAL, "%s: \"%s\": %d is out of range (expected %d to %d)",
                           cf->path, ints[i].key, *ints[i].dst, ints[i].lo, ints[i].hi);
    }
    if (c->top_k > c->n_expert)
        return ah_fail(err, AH_EINVAL,
                       "%s: \"num_experts_per_tok\": %d is more than the %d experts", cf->path,
                       c->top_k, c->n_expert);
    return 0;
}

// The float keys, each finite and in range; the keys whose other values harvest does not compute
// (hidden_act, attention_bias, ...) refused by name.
static int laguna_floats(const struct config *cf, struct laguna_config *c, struct ah_error *err) {
    const char *cp = cf->path;
    struct {
        const char *key;
        double *dst, dflt, lo; // allowed: [lo, inf), (lo, inf) when open
        bool open;
    } f[] = {
        // x / sqrt(mean(x^2) + 0) of a zero row is NaN
        {"rms_norm_eps", &c->eps, 1e-6, 0.0, true},
        {"moe_routed_scaling_factor", &c->routed_scaling, 1.0, -INFINITY, false},
        {"moe_router_logit_softcapping", &c->router_softcap, 0.0, 0.0, false}, // 0: none
    };
    int rc;
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        *f[i].dst = f[i].dflt;
        if ((rc = cfg_double(cf, f[i].key, false, f[i].dst, err)) < 0) return rc;
        if (!isfinite(*f[i].dst) || *f[i].dst < f[i].lo || (f[i].open && *f[i].dst == f[i].lo))
            return ah_fail(err, AH_EINVAL, "%s: \"%s\": %g is out of range (expected %s)", cp,
                           f[i].key, *f[i].dst,
                           f[i].open        ? "> 0"
                           : f[i].lo == 0.0 ? ">= 0"
                                            : "a finite number");
    }
    if ((rc = cfg_check_unused(cf, err)) < 0) return rc;
    const char *act = cfg_str(cf, "hidden_act");
    const struct cfg_value *actv = cfg_get(cf, NULL, "hidden_act");
    if (actv && (!act || (strcmp(act, "silu") && strcmp(act, "swish"))))
        return ah_fail(err, AH_EINVAL,
                       "%s: \"hidden_act\": only \"silu\" is supported (transformers' SiLU)", cp);
    const char *sf = cfg_str(cf, "moe_router_score_func");
    static const char *const flags[] = {"attention_bias", "tie_word_embeddings",
                                        "moe_apply_router_weight_on_input"};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        const struct cfg_value *v = cfg_get(cf, NULL, flags[i]);
        if (v && cfg_kind(cf, v) != CFG_BOOL)
            return ah_fail(err, AH_EINVAL, "%s: \"%s\": expected true or false", cp, flags[i]);
        if (cfg_is_true(cf, v))
            return ah_fail(err, AH_EINVAL, "%s: \"%s\": true is not supported", cp, flags[i]);
    }
    if (sf && strcmp(sf, "sigmoid"))
        return ah_fail(err, AH_EINVAL,
                       "%s: \"moe_router_score_func\": only \"sigmoid\" is supported", cp);
    return 0;
}

// num_attention_heads_per_layer (else num_attention_heads for every layer)
static int laguna_heads(const struct config *cf, struct laguna_config *c, int n_head,
                        struct ah_error *err) {
    const char *cp = cf->path;
    int L = c->n_layer;
    const struct cfg_value *h = cfg_get(cf, NULL, "num_attention_heads_per_layer");
    if (h && (cfg_kind(cf, h) != CFG_ARRAY || cfg_length(cf, h) != L))
        return ah_fail(
            err, AH_EINVAL,
            "%s: \"num_attention_heads_per_layer\": expected a list of %d integers (one a "
            "layer)",
            cp, L);
    for (int i = 0; i < L; i++) {
        const struct cfg_value *e = cfg_element(cf, h, i);
        double v = cfg_kind(cf, e) == CFG_NUMBER ? cfg_number(cf, e) : e ? -1.0 : n_head;
        c->n_head[i] = v >= 1.0 && v <= (1 << 16) && v == floor(v) ? (int)v : 0;
        if (c->n_head[i] < 1 || c->n_head[i] % c->n_kv_head)
            return ah_fail(err, AH_EINVAL,
                           "%s: \"%s\"[%d]: expected a positive multiple of num_key_value_heads "
                           "(%d)",
                           cp, h ? "num_attention_heads_per_layer" : "num_attention_heads",
                           h ? i : 0, c->n_kv_head);
    }
    return 0;
}

static int laguna_gating(const struct config *cf, struct laguna_config *c, struct ah_error *err) {
    const struct cfg_value *g = cfg_get(cf, NULL, "gating");
    const char *gs = cfg_string(cf, g);
    if (!g || cfg_is_true(cf, g) || (gs && !strcmp(gs, "per-head")))
        c->gate_per_element = false;
    else if (gs && !strcmp(gs, "per-element"))
        c->gate_per_element = true;
    else
        return ah_fail(err, AH_EINVAL,
                       "%s: \"gating\": expected \"per-head\", \"per-element\" or true", cf->path);
    return 0;
}

int laguna_config_read(const struct config *cf, struct laguna_config *c, struct ah_error *err) {
    memset(c, 0, sizeof *c);
    int n_head = 48, rc;
    if ((rc = laguna_ints(cf, c, &n_head, err)) < 0 || (rc = laguna_floats(cf, c, err)) < 0)
        goto fail;
    int L = c->n_layer;
    c->n_head = malloc((size_t)L * sizeof *c->n_head);
    c->sliding = malloc((size_t)L * sizeof *c->sliding);
    c->dense = malloc((size_t)L * sizeof *c->dense);
    if (!c->n_head || !c->sliding || !c->dense) {
        rc = -AH_ENOMEM;
        goto fail;
    }
    if ((rc = laguna_heads(cf, c, n_head, err)) < 0 ||
        (rc = layer_list(cf, "layer_types", "sliding_attention", "full_attention", L, c->sliding,
                         never, err)) < 0 ||
        (rc = layer_list(cf, "mlp_layer_types", "dense", "sparse", L, c->dense, dense_first, err)) <
            0 ||
        (rc = laguna_gating(cf, c, err)) < 0)
        goto fail;
    bool any_sliding = false, any_full = false;
    for (int i = 0; i < L; i++) {
        any_sliding |= c->sliding[i];
        any_full |= !c->sliding[i];
    }
    if (any_full &&
        (rc = rope_read(cf, "full_attention", c->head_dim, c->max_pos, &c->rope_full, err)) < 0)
        goto fail;
    if (any_sliding && (rc = rope_read(cf, "sliding_attention", c->head_dim, c->max_pos,
                                       &c->rope_sliding, err)) < 0)
        goto fail;
    if (any_sliding && c->sliding_window < 1) {
        rc = ah_fail(err, AH_EINVAL, "%s: \"sliding_window\": sliding layers need a window >= 1",
                     cf->path);
        goto fail;
    }
    return 0;
fail:
    laguna_config_free(c);
    return rc;
}
