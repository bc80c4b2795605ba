// decoder_config.c - config.json of the Llama-style families (model/decoder.h), read as
// transformers reads it: each configuration_*.py's defaults for absent (or null) keys
// (tests/ref/hf/config.py DEFAULTS), layer types as tests/ref/hf/decoder.py layer_types() builds
// them, RoPE as modeling_rope_utils.py (tests/ref/hf/common.py rope_inv_freq). A key harvest does
// not implement is an error naming config.json and the key, never computed some other way.
#include "model/ah.h"
#include "model/config.h"
#include "model/decoder.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *arch, *model_type;
    enum dec_kind kind;
} kinds[] = {
    {"LlamaForCausalLM", "llama", DEC_LLAMA},
    {"MistralForCausalLM", "mistral", DEC_MISTRAL},
    {"Qwen2ForCausalLM", "qwen2", DEC_QWEN2},
    {"Qwen3ForCausalLM", "qwen3", DEC_QWEN3},
    {"Qwen3MoeForCausalLM", "qwen3_moe", DEC_QWEN3_MOE},
    {"MixtralForCausalLM", "mixtral", DEC_MIXTRAL},
    {"Gemma2ForCausalLM", "gemma2", DEC_GEMMA2},
    {"Gemma3ForCausalLM", "gemma3_text", DEC_GEMMA3},
};
#define N_KINDS (int)(sizeof kinds / sizeof kinds[0])

#define LLAMA_NAMES                                                                      \
    .embed = "model.embed_tokens", .norm = "model.norm", .head = "lm_head",              \
    .layers = "model.layers", .attn_norm = "input_layernorm", .q = "self_attn.q_proj",   \
    .k = "self_attn.k_proj", .v = "self_attn.v_proj", .o = "self_attn.o_proj",           \
    .q_norm = "self_attn.q_norm", .k_norm = "self_attn.k_norm", .gate = "mlp.gate_proj", \
    .up = "mlp.up_proj", .down = "mlp.down_proj"
static const struct dec_names llama_names = {
    LLAMA_NAMES,          .mlp_norm = "post_attention_layernorm",
    .router = "mlp.gate", .experts = "mlp.experts",
    .egate = "gate_proj", .eup = "up_proj",
    .edown = "down_proj"};
static const struct dec_names mixtral_names = {LLAMA_NAMES,
                                               .mlp_norm = "post_attention_layernorm",
                                               .router = "block_sparse_moe.gate",
                                               .experts = "block_sparse_moe.experts",
                                               .egate = "w1",
                                               .eup = "w3",
                                               .edown = "w2"};
static const struct dec_names gemma_names = {LLAMA_NAMES, .mlp_norm = "pre_feedforward_layernorm",
                                             .post_attn_norm = "post_attention_layernorm",
                                             .post_mlp_norm = "post_feedforward_layernorm"};

// the first of "architectures" that is ours, else model_type (model/families.c's order)
static int kind_of(const struct config *cf, struct dec_config *c, struct ah_error *err) {
    const struct cfg_value *a = cfg_get(cf, NULL, "architectures");
    const char *mt = cfg_str(cf, "model_type");
    for (int i = 0; i <= cfg_length(cf, a); i++)
        for (int k = 0; k < N_KINDS; k++) {
            const char *s = i < cfg_length(cf, a) ? cfg_string(cf, cfg_element(cf, a, i)) : NULL;
            if ((s && !strcmp(s, kinds[k].arch)) ||
                (!s && i == cfg_length(cf, a) && mt && !strcmp(mt, kinds[k].model_type))) {
                c->kind = kinds[k].kind;
                c->arch = kinds[k].arch;
                return 0;
            }
        }
    return ah_fail(err, AH_EINVAL, "%s: \"architectures\": no Llama-style architecture", cf->path);
}

// An integer key: absent or null -> dflt; else an integer in [lo, hi].
static int opt_int(const struct config *cf, const char *key, int dflt, int lo, int hi, int *out,
                   struct ah_error *err) {
    *out = dflt;
    if (cfg_kind(cf, cfg_get(cf, NULL, key)) == CFG_NULL) return 0;
    int rc = cfg_int(cf, key, false, out, err);
    if (rc < 0) return rc;
    if (*out < lo || *out > hi)
        return ah_fail(err, AH_EINVAL, "%s: \"%s\": %d is out of range (expected %d to %d)",
                       cf->path, key, *out, lo, hi);
    return 0;
}

// A number key of obj (NULL: the top level; `where` its path for messages): absent or null ->
// dflt (NAN: "none"); else finite and > 0 (config.h's cfg_num_in).
static int opt_num(const struct config *cf, const struct cfg_value *obj, const char *where,
                   const char *key, double dflt, double *out, struct ah_error *err) {
    *out = dflt;
    int rc = cfg_num_in(cf, obj, obj ? where : NULL, key, CFG_POSITIVE, true, out, err);
    return rc < 0 ? rc : 0;
}

// a key present as null: transformers keeps None, which is not always the absent key's default
static bool null_key(const struct config *cf, const char *key) {
    return cfg_kind(cf, cfg_get(cf, NULL, key)) == CFG_NULL;
}

static bool opt_bool(const struct config *cf, const char *key, bool dflt) {
    const struct cfg_value *v = cfg_get(cf, NULL, key);
    return cfg_kind(cf, v) == CFG_BOOL ? cfg_is_true(cf, v) : dflt;
}

static bool is_moe_kind(enum dec_kind k) {
    return k == DEC_QWEN3_MOE || k == DEC_MIXTRAL;
}
static bool is_gemma(enum dec_kind k) {
    return k == DEC_GEMMA2 || k == DEC_GEMMA3;
}
static bool is_qwen(enum dec_kind k) {
    return k == DEC_QWEN2 || k == DEC_QWEN3 || k == DEC_QWEN3_MOE;
}

// sizes with each family's defaults (configuration_*.py)
static int read_sizes(const struct config *cf, struct dec_config *c, struct ah_error *err) {
    enum dec_kind k = c->kind;
    static const int d_vocab[] = {32000, 32000, 151936, 151936, 151936, 32000, 256000, 262208};
    static const int d_hidden[] = {4096, 4096, 4096, 4096, 2048, 4096, 2304, 2304};
    static const int d_ffn[] = {11008, 14336, 22016, 22016, 6144, 14336, 9216, 9216};
    static const int d_layers[] = {32, 32, 32, 32, 24, 32, 26, 26};
    static const int d_heads[] = {32, 32, 32, 32, 32, 32, 8, 8};
    static const int d_maxpos[] = {2048, 131072, 32768, 32768, 32768, 131072, 8192, 131072};
    int rc, kv_d = k == DEC_MISTRAL || k == DEC_MIXTRAL ? 8 : k == DEC_QWEN3_MOE ? 4 : -1;
    if ((rc = opt_int(cf, "vocab_size", d_vocab[k], 1, 1 << 24, &c->vocab, err)) < 0 ||
        (rc = opt_int(cf, "hidden_size", d_hidden[k], 1, 1 << 20, &c->hidden, err)) < 0 ||
        (rc = opt_int(cf, "intermediate_size", d_ffn[k], 1, 1 << 24, &c->ffn, err)) < 0 ||
        (rc = opt_int(cf, "num_hidden_layers", d_layers[k], 1, AH_MAX_LAYERS, &c->n_layer, err)) <
            0 ||
        (rc = opt_int(cf, "num_attention_heads", d_heads[k], 1, 1 << 16, &c->n_head, err)) < 0 ||
        (rc = opt_int(cf, "max_position_embeddings", d_maxpos[k], 1, 1 << 30, &c->max_pos, err)) <
            0)
        return rc;
    if (is_gemma(k)) kv_d = 4;
    if (kv_d < 0 || null_key(cf, "num_key_value_heads")) kv_d = c->n_head; // None -> heads
    if ((rc = opt_int(cf, "num_key_value_heads", kv_d, 1, 1 << 16, &c->n_kv_head, err)) < 0)
        return rc;
    int hd_d = is_gemma(k)                            ? 256
               : k == DEC_QWEN3 || k == DEC_QWEN3_MOE ? 128
                                                      : c->hidden / c->n_head;
    if (null_key(cf, "head_dim")) hd_d = c->hidden / c->n_head; // None -> hidden / heads
    if ((rc = opt_int(cf, "head_dim", hd_d, 2, 1 << 16, &c->head_dim, err)) < 0) return rc;
    if (c->head_dim % 2)
        return ah_fail(err, AH_EINVAL, "%s: \"head_dim\": %d is odd (RoPE rotates pairs)", cf->path,
                       c->head_dim);
    if (c->n_head % c->n_kv_head)
        return ah_fail(err, AH_EINVAL,
                       "%s: \"num_attention_heads\": %d is not a multiple of num_key_value_heads "
                       "(%d)",
                       cf->path, c->n_head, c->n_kv_head);
    double eps;
    if ((rc = opt_num(cf, NULL, NULL, "rms_norm_eps", k == DEC_MIXTRAL ? 1e-5 : 1e-6, &eps, err)) <
        0)
        return rc;
    c->eps = eps;
    return 0;
}

// the activation: hidden_act (Gemma: hidden_activation, else hidden_act), ACT of common.py
static int read_act(const struct config *cf, struct dec_config *c, struct ah_error *err) {
    const char *key = is_gemma(c->kind) ? "hidden_activation" : "hidden_act";
    const struct cfg_value *v = cfg_get(cf, NULL, key);
    if (is_gemma(c->kind) && cfg_kind(cf, v) <= CFG_NULL) {
        v = cfg_get(cf, NULL, "hidden_act");
        if (v && cfg_kind(cf, v) != CFG_NULL) key = "hidden_act";
    }
    const char *s = cfg_kind(cf, v) <= CFG_NULL ? (is_gemma(c->kind) ? "gelu_pytorch_tanh" : "silu")
                                                : cfg_string(cf, v);
    return block_cfg_act(cf->path, key, s, &c->blk.act, err);
}

// The scaling dict sc (at `where`) of one layer type: rope_type (or the older "type") linear,
// dynamic or llama3 with their keys (modeling_rope_utils.py); another type is refused by name.
static int rope_scaling(const struct config *cf, const struct cfg_value *sc, const char *where,
                        struct dec_rope *r, struct ah_error *err) {
    const struct cfg_value *t = cfg_get(cf, sc, "rope_type");
    if (!t) t = cfg_get(cf, sc, "type");
    const char *tn = t ? cfg_string(cf, t) : "default";
    static const char *const names[] = {"default", "linear", "dynamic", "llama3"};
    static const enum dec_rope_type types[] = {DEC_ROPE_DEFAULT, DEC_ROPE_LINEAR, DEC_ROPE_DYNAMIC,
                                               DEC_ROPE_LLAMA3};
    int k = 0, rc;
    while (k < 4 && !(tn && !strcmp(tn, names[k])))
        k++;
    if (k == 4)
        return ah_fail(err, AH_EINVAL,
                       "%s: \"%s.rope_type\": \"%s\" is not supported (expected \"default\", "
                       "\"linear\", \"dynamic\" or \"llama3\")",
                       cf->path, where, tn ? tn : "(not a string)");
    if ((r->type = types[k]) == DEC_ROPE_DEFAULT) return 0;
    if ((rc = opt_num(cf, sc, where, "factor", NAN, &r->factor, err)) < 0) return rc;
    if (isnan(r->factor))
        return ah_fail(err, AH_EINVAL, "%s: \"%s.factor\": missing", cf->path, where);
    if (r->type != DEC_ROPE_LLAMA3) return 0;
    double l0;
    if ((rc = opt_num(cf, sc, where, "low_freq_factor", NAN, &r->low, err)) < 0 ||
        (rc = opt_num(cf, sc, where, "high_freq_factor", NAN, &r->high, err)) < 0 ||
        (rc = opt_num(cf, sc, where, "original_max_position_embeddings", NAN, &l0, err)) < 0)
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

// One layer type's RoPE (tests/ref/hf/decoder.py rope_params): rope_parameters[type] or a flat
// rope_parameters, else rope_theta + rope_scaling; Gemma 3's sliding layers rope_local_base_freq
// without scaling.
static int read_rope(const struct config *cf, const struct dec_config *c, bool sliding,
                     struct dec_rope *r, struct ah_error *err) {
    const char *type = sliding ? "sliding_attention" : "full_attention";
    const struct cfg_value *rp = cfg_get(cf, NULL, "rope_parameters"), *sc;
    char where[64] = "rope_parameters";
    if (cfg_kind(cf, cfg_get(cf, rp, type)) == CFG_OBJECT) {
        rp = cfg_get(cf, rp, type);
        snprintf(where, sizeof where, "rope_parameters.%s", type);
    }
    double dtheta = c->kind == DEC_MIXTRAL || c->kind == DEC_GEMMA3 ? 1e6 : 10000.0;
    int rc;
    memset(r, 0, sizeof *r);
    r->factor = 1.0;
    if (cfg_kind(cf, rp) == CFG_OBJECT && cfg_get(cf, rp, "rope_theta")) {
        sc = rp;
        rc = opt_num(cf, rp, where, "rope_theta", dtheta, &r->theta, err);
    } else if (c->kind == DEC_GEMMA3 && sliding) {
        return opt_num(cf, NULL, NULL, "rope_local_base_freq", 10000.0, &r->theta, err);
    } else {
        sc = cfg_get(cf, NULL, "rope_scaling");
        snprintf(where, sizeof where, "rope_scaling");
        rc = opt_num(cf, NULL, NULL, "rope_theta", dtheta, &r->theta, err);
    }
    if (rc < 0 || cfg_kind(cf, sc) <= CFG_NULL) return rc;
    if (cfg_kind(cf, sc) != CFG_OBJECT)
        return ah_fail(err, AH_EINVAL, "%s: \"%s\": expected an object or null", cf->path, where);
    return rope_scaling(cf, sc, where, r, err);
}

// the window: Qwen keeps sliding_window only with use_sliding_window (decoder.py
// effective_window); Mistral's default is 4096, Mixtral's and Gemma's none / 4096
static int read_window(const struct config *cf, struct dec_config *c, struct ah_error *err) {
    enum dec_kind k = c->kind;
    int dflt = k == DEC_MIXTRAL || k == DEC_LLAMA || null_key(cf, "sliding_window") ? 0 : 4096, rc;
    if ((rc = opt_int(cf, "sliding_window", dflt, 0, 1 << 30, &c->window, err)) < 0) return rc;
    bool unused = k == DEC_LLAMA || (is_qwen(k) && !opt_bool(cf, "use_sliding_window", false));
    if (is_qwen(k) && unused) c->window = 0; // transformers sets it to None
    if (k == DEC_LLAMA && cfg_get(cf, NULL, "sliding_window") && c->window)
        return ah_fail(err, AH_EINVAL, "%s: \"sliding_window\": LlamaForCausalLM has none",
                       cf->path);
    // a window of 0 keys masks every key (transformers' sliding mask): null is "no window"
    if (!unused && cfg_kind(cf, cfg_get(cf, NULL, "sliding_window")) == CFG_NUMBER && !c->window)
        return ah_fail(err, AH_EINVAL,
                       "%s: \"sliding_window\": 0 is out of range (expected null, no window, or "
                       ">= 1)",
                       cf->path);
    return 0;
}

// per-layer sliding and mixture flags (decoder.py layer_types, params.py is_sparse_layer)
static int read_layers(const struct config *cf, struct dec_config *c, struct ah_error *err) {
    int L = c->n_layer, mwl, step, pattern, rc;
    enum dec_kind k = c->kind;
    if ((rc = opt_int(cf, "max_window_layers", 28, 0, 1 << 30, &mwl, err)) < 0 ||
        (rc = opt_int(cf, "decoder_sparse_step", 1, 1, 1 << 30, &step, err)) < 0 ||
        (rc = opt_int(cf, "sliding_window_pattern", 6, 1, 1 << 30, &pattern, err)) < 0)
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
        } else if (k == DEC_GEMMA2) {
            c->sliding[i] = (i + 1) % 2 != 0;
        } else if (k == DEC_GEMMA3) {
            c->sliding[i] = (i + 1) % pattern != 0;
        } else if (k == DEC_QWEN2 || k == DEC_QWEN3) {
            c->sliding[i] = c->window > 0 && i >= mwl;
        } else {
            c->sliding[i] = c->window > 0;
        }
        c->sliding[i] = c->sliding[i] && c->window > 0;
        bool in_only = false;
        for (int j = 0; j < cfg_length(cf, only); j++)
            in_only |= cfg_number(cf, cfg_element(cf, only, j)) == i;
        c->moe[i] = k == DEC_MIXTRAL ||
                    (k == DEC_QWEN3_MOE && c->n_expert > 0 && !in_only && (i + 1) % step == 0);
    }
    return 0;
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

static int read_experts(const struct config *cf, struct dec_config *c, struct ah_error *err) {
    int rc;
    if (!is_moe_kind(c->kind)) return 0;
    bool mx = c->kind == DEC_MIXTRAL;
    if ((rc = opt_int(cf, mx ? "num_local_experts" : "num_experts", mx ? 8 : 128, mx ? 1 : 0,
                      1 << 16, &c->n_expert, err)) < 0 ||
        (rc = opt_int(cf, "num_experts_per_tok", mx ? 2 : 8, 1, 1 << 16, &c->top_k, err)) < 0 ||
        (rc = opt_int(cf, "moe_intermediate_size", 768, 1, 1 << 24, &c->expert_ffn, err)) < 0)
        return rc;
    if (!mx && (rc = read_only_layers(cf, err)) < 0) return rc;
    if (mx) c->expert_ffn = c->ffn;
    c->blk.norm_topk = mx || opt_bool(cf, "norm_topk_prob", false);
    if (c->n_expert > 0 && c->top_k > c->n_expert)
        return ah_fail(err, AH_EINVAL,
                       "%s: \"num_experts_per_tok\": %d is more than the %d experts", cf->path,
                       c->top_k, c->n_expert);
    return 0;
}

// Gemma's scale, soft-caps and embedding normalizer; the biases; keys refused by name
static int read_flags(const struct config *cf, struct dec_config *c, struct ah_error *err) {
    enum dec_kind k = c->kind;
    bool ab = opt_bool(cf, "attention_bias", false);
    struct dec_block *b = &c->blk;
    c->names = is_gemma(k) ? &gemma_names : k == DEC_MIXTRAL ? &mixtral_names : &llama_names;
    b->norm = is_gemma(k) ? DEC_NORM_RMS_1P : DEC_NORM_RMS;
    b->norm_at = is_gemma(k) ? DEC_NORM_SANDWICH : DEC_NORM_PRE;
    b->qk_norm =
        k == DEC_QWEN3 || k == DEC_QWEN3_MOE || k == DEC_GEMMA3 ? DEC_QK_HEAD : DEC_QK_NONE;
    b->qkv_bias = k == DEC_QWEN2 || ab;
    b->o_bias = k != DEC_QWEN2 && ab;
    b->mlp_bias = opt_bool(cf, "mlp_bias", false);
    b->tied = opt_bool(cf, "tie_word_embeddings", is_gemma(k));
    b->scale = (float)(1.0 / sqrt((double)c->head_dim));
    b->embed_scale = is_gemma(k) ? (float)sqrt((double)c->hidden) : 1.0f;
    b->embed_tap_scaled = k == DEC_GEMMA3;
    if (opt_bool(cf, "use_bidirectional_attention", false))
        return ah_fail(err, AH_EINVAL,
                       "%s: \"use_bidirectional_attention\": true is not a causal LM (not "
                       "supported)",
                       cf->path);
    const char *dt = cfg_str(cf, "torch_dtype") ? cfg_str(cf, "torch_dtype") : cfg_str(cf, "dtype");
    c->bytes_per_param = dt && !strcmp(dt, "float32") ? 4 : 2;
    c->bf16 = dt && !strcmp(dt, "bfloat16");
    if (!is_gemma(k)) return 0;
    double qs, ac, fc,
        dac = k == DEC_GEMMA2 && !null_key(cf, "attn_logit_softcapping") ? 50.0 : 0.0;
    double dfc = k == DEC_GEMMA2 && !null_key(cf, "final_logit_softcapping") ? 30.0 : 0.0;
    int rc;
    if ((rc = opt_num(cf, NULL, NULL, "query_pre_attn_scalar", 256, &qs, err)) < 0 ||
        (rc = opt_num(cf, NULL, NULL, "attn_logit_softcapping", dac, &ac, err)) < 0 ||
        (rc = opt_num(cf, NULL, NULL, "final_logit_softcapping", dfc, &fc, err)) < 0)
        return rc;
    b->scale = (float)(1.0 / sqrt(qs));
    b->attn_cap = ac > 0 ? (float)ac : 0.0f;
    b->final_cap = fc > 0 ? (float)fc : 0.0f;
    return 0;
}

void dec_config_free(struct dec_config *c) {
    free(c->sliding);
    free(c->moe);
    memset(c, 0, sizeof *c);
}

int dec_config_read(const struct config *cf, struct dec_config *c, struct ah_error *err) {
    memset(c, 0, sizeof *c);
    int rc;
    if ((rc = kind_of(cf, c, err)) < 0 || (rc = read_sizes(cf, c, err)) < 0 ||
        (rc = read_act(cf, c, err)) < 0 || (rc = read_window(cf, c, err)) < 0 ||
        (rc = read_experts(cf, c, err)) < 0 || (rc = read_flags(cf, c, err)) < 0 ||
        (rc = read_rope(cf, c, false, &c->rope_full, err)) < 0 ||
        (rc = read_rope(cf, c, true, &c->rope_sliding, err)) < 0 ||
        (rc = cfg_check_unused(cf, err)) < 0)
        return rc;
    c->sliding = calloc((size_t)c->n_layer, sizeof *c->sliding);
    c->moe = calloc((size_t)c->n_layer, sizeof *c->moe);
    if (!c->sliding || !c->moe) return -AH_ENOMEM;
    return read_layers(cf, c, err);
}

void dec_rope_inv_freq(const struct dec_rope *r, int hd, int max_pos, int T, double *inv) {
    double base = r->theta;
    if (r->type == DEC_ROPE_DYNAMIC && T > max_pos) // _compute_dynamic_ntk_parameters
        base *= pow(r->factor * T / max_pos - (r->factor - 1.0), (double)hd / (hd - 2));
    for (int j = 0; j < hd / 2; j++) {
        inv[j] = 1.0 / pow(base, 2.0 * j / hd);
        if (r->type == DEC_ROPE_LINEAR) inv[j] /= r->factor;
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
