// load.c - choose a family from config.json and bind its weights from the model folder.
#define _POSIX_C_SOURCE 200809L // defines: access
#include "harvest/harvest.h"

#include <cjson/cJSON.h>
#include <math.h>

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int model_config_encdec(const struct modeldir *md, struct encdec_config *c, struct ah_error *err) {
    const char *arch = md_config_string(md, "architecture");
    if (!arch || strcmp(arch, "causal-encoder-decoder"))
        return ah_fail(err, AH_EINVAL,
                       "%s: unknown model family (expected \"architecture\": "
                       "\"causal-encoder-decoder\" or \"architectures\": [\"LagunaForCausalLM\"])",
                       md->config_path);
    struct {
        const char *key;
        int *dst;
    } ints[] = {
        {"num_encoder_layers", &c->n_layer_enc},
        {"num_decoder_layers", &c->n_layer_dec},
        {"hidden_size", &c->hidden},
        {"num_attention_heads", &c->n_head},
        {"head_dim", &c->head_dim},
        {"vocab_size", &c->vocab},
        {"local_window", &c->local_window},
        {"max_position_embeddings", &c->max_pos},
        {"ffn_dim", &c->ffn_dim},
    };
    int rc;
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        if ((rc = md_config_int(md, ints[i].key, true, ints[i].dst, err)) < 0) return rc;
        if (*ints[i].dst < 1 || *ints[i].dst > (1 << 24))
            return ah_fail(err, AH_EINVAL, "%s: \"%s\": %d is out of range (expected 1 to %d)",
                           md->config_path, ints[i].key, *ints[i].dst, 1 << 24);
    }
    if (c->head_dim % 2)
        return ah_fail(err, AH_EINVAL, "%s: \"head_dim\": RoPE needs an even head_dim, not %d",
                       md->config_path, c->head_dim);
    double eps = 1e-6, theta = 10000.0;
    if ((rc = md_config_double(md, "rms_norm_eps", false, &eps, err)) < 0 ||
        (rc = md_config_double(md, "rope_theta", false, &theta, err)) < 0)
        return rc;
    c->eps = (float)eps;
    c->rope_theta = theta;
    static const struct {
        const char *key, *want;
    } fixed[] = {
        {"position_encoding", "rope"}, {"normalization", "rmsnorm"}, {"activation", "swiglu"}};
    for (size_t i = 0; i < 3; i++) {
        const char *v = md_config_string(md, fixed[i].key);
        if (v && strcmp(v, fixed[i].want))
            return ah_fail(err, AH_EINVAL, "%s: \"%s\": \"%s\" is not supported (expected \"%s\")",
                           md->config_path, fixed[i].key, v, fixed[i].want);
    }
    return 0;
}

int model_load(struct model *m, const char *dir, bool weights, struct ah_error *err) {
    memset(m, 0, sizeof *m);
    struct model_tensor *list = NULL;
    int rc = md_open(&m->md, dir, !weights, err);
    if (rc < 0) return rc;
    char tp[4200];
    snprintf(tp, sizeof tp, "%s/tokenizer.json", m->md.dir);
    if (weights && access(tp, F_OK) == 0 && (rc = tok_load(&m->tok, tp, err)) < 0) goto fail;
    if (model_is_laguna(&m->md)) {
        m->family = "laguna";
        struct laguna_config cfg;
        struct laguna_tensor *lt = NULL;
        if ((rc = laguna_config_read(&m->md, &cfg, err)) < 0) goto fail;
        m->max_pos = 131072;
        if ((rc = md_config_int(&m->md, "max_position_embeddings", false, &m->max_pos, err)) < 0) {
            laguna_config_free(&cfg);
            goto fail;
        }
        if (weights) { // the gate's granularity follows g_proj's rows (laguna-forward.md A3)
            int64_t sh[2] = {0, 0};
            rc = md_tensor_dims(&m->md, "model.layers.0.self_attn.g_proj.weight", sh, 2, err);
            if (rc == 2 && sh[0] == (int64_t)cfg.n_head[0] * cfg.head_dim && cfg.head_dim > 1)
                cfg.gate_per_element = true;
            else if (rc == 2 && sh[0] == cfg.n_head[0])
                cfg.gate_per_element = false;
            if (rc < 0) { // no g_proj: the message names file and tensor
                laguna_config_free(&cfg);
                goto fail;
            }
            rc = 0; // another row count fails the shape check when the tensor is bound
        }
        int n = laguna_init(&m->lg, &cfg, &lt);
        if (n < 0) {
            laguna_config_free(&cfg);
            rc = n;
            goto fail;
        }
        for (int i = 0; weights && i < n && rc == 0; i++)
            rc = lt[i].bf16
                     ? md_tensor_bf16(&m->md, lt[i].name, lt[i].ndim, lt[i].shape, lt[i].bf16, err)
                     : md_tensor_f32(&m->md, lt[i].name, lt[i].ndim, lt[i].shape, lt[i].f32, err);
        free(lt);
        if (rc < 0) goto fail;
        m->n_cat = laguna_n_taps(&m->lg.cfg);
        m->cat = calloc((size_t)m->n_cat, sizeof *m->cat);
        if (!m->cat) {
            rc = -AH_ENOMEM;
            goto fail;
        }
        laguna_catalogue(&m->lg.cfg, m->cat);
        m->n_blocks = m->lg.cfg.n_layer;
        m->vocab = m->lg.cfg.vocab;
        return 0;
    }
    m->family = "encdec";
    struct encdec_config c;
    if ((rc = model_config_encdec(&m->md, &c, err)) < 0) goto fail;
    int n = encdec_init(&m->ed, &c, &list);
    if (n < 0) {
        rc = n;
        goto fail;
    }
    for (int i = 0; weights && i < n; i++) {
        int64_t sh[2] = {list[i].shape[0], list[i].shape[1]};
        if ((rc = md_tensor_f32(&m->md, list[i].name, list[i].ndim, sh, list[i].dst, err)) < 0)
            goto fail;
    }
    free(list);
    list = NULL;
    m->n_cat = encdec_n_taps(&c);
    m->cat = calloc((size_t)m->n_cat, sizeof *m->cat);
    if (!m->cat) {
        rc = -AH_ENOMEM;
        goto fail;
    }
    encdec_catalogue(&c, m->cat);
    m->n_blocks = c.n_layer_enc + c.n_layer_dec;
    m->max_pos = c.max_pos;
    m->vocab = c.vocab;
    return 0;
fail:
    free(list);
    model_free(m);
    return rc;
}

void model_free(struct model *m) {
    encdec_free(&m->ed);
    laguna_free(&m->lg);
    tok_free(m->tok);
    md_close(&m->md);
    free(m->cat);
    memset(m, 0, sizeof *m);
}

int64_t model_axis_size(const struct model *m, int block, const char *axis) {
    if (!strcmp(m->family, "laguna")) return laguna_axis_size(&m->lg.cfg, block, axis);
    return encdec_axis_size(&m->ed.cfg, axis);
}

static bool is_laguna(const struct model *m) {
    return !strcmp(m->family, "laguna");
}

int model_state_init(const struct model *m, struct model_state *s, int max_T, int64_t max_tokens,
                     const uint8_t *want, const struct laguna_shard *shard) {
    memset(s, 0, sizeof *s);
    if (is_laguna(m)) return laguna_state_init(&s->lg, &m->lg, max_T, max_tokens, want, shard);
    return encdec_state_init(&s->ed, &m->ed.cfg, max_T, max_tokens);
}

void model_state_free(struct model_state *s) {
    encdec_state_free(&s->ed);
    laguna_state_free(&s->lg);
}

void model_forward(const struct model *m, struct model_state *s, const struct mbatch *bt,
                   const struct tap *tp, int blk_begin, int blk_end) {
    if (is_laguna(m))
        laguna_forward(&m->lg, &s->lg, bt, tp, blk_begin, blk_end);
    else
        encdec_forward(&m->ed, &s->ed, bt, tp, blk_begin, blk_end);
}

void model_handoff(const struct model *m, struct model_state *s, float **arrays, int *n) {
    if (is_laguna(m)) { // the residual stream
        arrays[0] = s->lg.x;
        *n = 1;
    } else { // the residual stream, and encoder_output for the decoder's global keys
        arrays[0] = s->ed.x;
        arrays[1] = s->ed.enc_out;
        *n = 2;
    }
}

int model_hidden(const struct model *m) {
    return is_laguna(m) ? m->lg.cfg.hidden : m->ed.cfg.hidden;
}

double model_block_flops(const struct model *m, int b, int T) {
    if (is_laguna(m)) return laguna_block_flops(&m->lg.cfg, b, T);
    const struct encdec_config *c = &m->ed.cfg;
    double body = encdec_flops(c, T, false);
    return b < m->n_blocks ? body / m->n_blocks : encdec_flops(c, T, true) - body;
}

int64_t model_stage_bytes(const struct model *m, int b0, int b1, bool head, int shard, int n_shards,
                          const char **kind) {
    if (is_laguna(m)) {
        const struct laguna_config *c = &m->lg.cfg;
        int64_t vd = (int64_t)c->vocab * c->hidden, n = 0, E = c->n_expert;
        int64_t mine = E * (shard + 1) / n_shards - E * shard / n_shards; // experts of the shard
        for (int i = b0; i < b1; i++)
            n += laguna_layer_bytes(c, i, false) + laguna_layer_bytes(c, i, true) * mine / E;
        *kind = "BF16, mapped";
        return n + (b0 == 0 ? 2 * vd : 0) + (head ? 2 * vd + 2 * c->hidden : 0);
    }
    const struct encdec_config *c = &m->ed.cfg;
    int64_t C = c->hidden, HD = (int64_t)c->n_head * c->head_dim;
    int64_t block = 2 * C + 6 * C * HD + 3 * C * c->ffn_dim;
    *kind = "float32";
    return 4 * ((int64_t)(b1 - b0) * block + (b0 == 0 || head ? (int64_t)c->vocab * C : 0) +
                (head ? C : 0));
}

// ----------------------------------------------------------------------------
// Laguna: its config.json

bool model_is_laguna(const struct modeldir *md) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(md->config, "architectures"), *e;
    cJSON_ArrayForEach(e, a) {
        if (cJSON_IsString(e) && !strcmp(e->valuestring, "LagunaForCausalLM")) return true;
    }
    const char *t = md_config_string(md, "model_type");
    return t && !strcmp(t, "laguna");
}

// A per-layer list of strings: each must be `a` (sets out[i]) or `b`; absent: dflt(i).
static int layer_list(const struct modeldir *md, const char *key, const char *a, const char *b,
                      int L, bool *out, bool (*dflt)(int), struct ah_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(md->config, key);
    if (!v) {
        for (int i = 0; i < L; i++)
            out[i] = dflt(i);
        return 0;
    }
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != L)
        return ah_fail(err, AH_EINVAL, "%s: \"%s\": expected a list of %d strings (one a layer)",
                       md->config_path, key, L);
    for (int i = 0; i < L; i++) {
        const cJSON *e = cJSON_GetArrayItem(v, i);
        if (cJSON_IsString(e) && !strcmp(e->valuestring, a))
            out[i] = true;
        else if (cJSON_IsString(e) && !strcmp(e->valuestring, b))
            out[i] = false;
        else
            return ah_fail(err, AH_EINVAL, "%s: \"%s\"[%d]: expected \"%s\" or \"%s\"",
                           md->config_path, key, i, a, b);
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

static int rope_read(const struct modeldir *md, const char *type, struct laguna_rope *r,
                     struct ah_error *err) {
    const cJSON *all = cJSON_GetObjectItemCaseSensitive(md->config, "rope_parameters");
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(all, type);
    if (!cJSON_IsObject(o))
        return ah_fail(err, AH_EINVAL,
                       "%s: \"rope_parameters.%s\": expected an object (a layer "
                       "uses it)",
                       md->config_path, type);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "rope_type");
    const char *tn = cJSON_IsString(t) ? t->valuestring : "default";
    if (!strcmp(tn, "default"))
        r->type = LAGUNA_ROPE_DEFAULT;
    else if (!strcmp(tn, "yarn"))
        r->type = LAGUNA_ROPE_YARN;
    else
        return ah_fail(err, AH_EINVAL,
                       "%s: \"rope_parameters.%s.rope_type\": \"%s\" is not "
                       "supported (expected \"default\" or \"yarn\")",
                       md->config_path, type, tn);
    struct {
        const char *key;
        double *dst, dflt;
        bool yarn_only, required;
    } f[] = {
        {"rope_theta", &r->theta, 0, false, true},
        {"partial_rotary_factor", &r->partial, 1.0, false, false},
        {"factor", &r->factor, 1.0, true, true},
        {"beta_fast", &r->beta_fast, 32.0, true, false},
        {"beta_slow", &r->beta_slow, 1.0, true, false},
        {"attention_factor", &r->attention_factor, -1.0, true, false},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, f[i].key);
        *f[i].dst = f[i].dflt;
        if (f[i].yarn_only && r->type != LAGUNA_ROPE_YARN) continue;
        if (!v && f[i].required)
            return ah_fail(err, AH_EINVAL, "%s: \"rope_parameters.%s\": missing \"%s\"",
                           md->config_path, type, f[i].key);
        if (v && !cJSON_IsNumber(v))
            return ah_fail(err, AH_EINVAL, "%s: \"rope_parameters.%s.%s\": expected a number",
                           md->config_path, type, f[i].key);
        if (v) *f[i].dst = v->valuedouble;
    }
    if (!(r->partial > 0.0 && r->partial <= 1.0) || r->theta <= 0.0)
        return ah_fail(err, AH_EINVAL,
                       "%s: \"rope_parameters.%s\": rope_theta > 0 and "
                       "partial_rotary_factor in (0, 1] expected",
                       md->config_path, type);
    if (r->type == LAGUNA_ROPE_YARN) {
        // original_max_position_embeddings: in the type's dict, or (XS.2) at the top of the dict
        const cJSON *l0 = cJSON_GetObjectItemCaseSensitive(o, "original_max_position_embeddings");
        if (!l0) l0 = cJSON_GetObjectItemCaseSensitive(all, "original_max_position_embeddings");
        if (!cJSON_IsNumber(l0) || l0->valuedouble < 1)
            return ah_fail(err, AH_EINVAL,
                           "%s: \"rope_parameters.%s\": yarn needs "
                           "\"original_max_position_embeddings\"",
                           md->config_path, type);
        r->original_max_pos = (int)l0->valuedouble;
        if (r->attention_factor < 0) r->attention_factor = 0.1 * log(r->factor) + 1.0;
    }
    return 0;
}

int laguna_config_read(const struct modeldir *md, struct laguna_config *c, struct ah_error *err) {
    memset(c, 0, sizeof *c);
    const char *cp = md->config_path;
    struct {
        const char *key;
        int *dst, dflt;
    } ints[] = {
        {"num_hidden_layers", &c->n_layer, 40},
        {"hidden_size", &c->hidden, 2048},
        {"vocab_size", &c->vocab, 100352},
        {"num_key_value_heads", &c->n_kv_head, 8},
        {"head_dim", &c->head_dim, 128},
        {"intermediate_size", &c->dense_ffn, 8192},
        {"moe_intermediate_size", &c->expert_ffn, 512},
        {"shared_expert_intermediate_size", &c->shared_ffn, 512},
        {"num_experts", &c->n_expert, 256},
        {"num_experts_per_tok", &c->top_k, 8},
        {"sliding_window", &c->sliding_window, 512},
    };
    int rc = 0, n_head = 48;
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        *ints[i].dst = ints[i].dflt;
        if ((rc = md_config_int(md, ints[i].key, false, ints[i].dst, err)) < 0) goto fail;
        if (*ints[i].dst < (strcmp(ints[i].key, "sliding_window") ? 1 : 0)) {
            rc = ah_fail(err, AH_EINVAL, "%s: \"%s\": %d is out of range", cp, ints[i].key,
                         *ints[i].dst);
            goto fail;
        }
    }
    if ((rc = md_config_int(md, "num_attention_heads", false, &n_head, err)) < 0) goto fail;
    if (c->top_k > c->n_expert) {
        rc = ah_fail(err, AH_EINVAL,
                     "%s: \"num_experts_per_tok\": %d is more than the %d "
                     "experts",
                     cp, c->top_k, c->n_expert);
        goto fail;
    }
    c->eps = 1e-6;
    c->routed_scaling = 1.0;
    c->router_softcap = 0.0;
    if ((rc = md_config_double(md, "rms_norm_eps", false, &c->eps, err)) < 0 ||
        (rc = md_config_double(md, "moe_routed_scaling_factor", false, &c->routed_scaling, err)) <
            0 ||
        (rc = md_config_double(md, "moe_router_logit_softcapping", false, &c->router_softcap,
                               err)) < 0)
        goto fail;
    int L = c->n_layer;
    c->n_head = malloc((size_t)L * sizeof *c->n_head);
    c->sliding = malloc((size_t)L * sizeof *c->sliding);
    c->dense = malloc((size_t)L * sizeof *c->dense);
    if (!c->n_head || !c->sliding || !c->dense) {
        rc = -AH_ENOMEM;
        goto fail;
    }
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(md->config, "num_attention_heads_per_layer");
    if (h && (!cJSON_IsArray(h) || cJSON_GetArraySize(h) != L)) {
        rc = ah_fail(err, AH_EINVAL,
                     "%s: \"num_attention_heads_per_layer\": expected a list of "
                     "%d integers (one a layer)",
                     cp, L);
        goto fail;
    }
    for (int i = 0; i < L; i++) {
        const cJSON *e = h ? cJSON_GetArrayItem(h, i) : NULL;
        c->n_head[i] = e ? e->valueint : n_head;
        if ((e && !cJSON_IsNumber(e)) || c->n_head[i] < 1 || c->n_head[i] % c->n_kv_head) {
            rc = ah_fail(err, AH_EINVAL,
                         "%s: \"num_attention_heads_per_layer\"[%d]: expected a "
                         "positive multiple of num_key_value_heads (%d)",
                         cp, i, c->n_kv_head);
            goto fail;
        }
    }
    if ((rc = layer_list(md, "layer_types", "sliding_attention", "full_attention", L, c->sliding,
                         never, err)) < 0 ||
        (rc = layer_list(md, "mlp_layer_types", "dense", "sparse", L, c->dense, dense_first, err)) <
            0)
        goto fail;
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(md->config, "gating");
    if (!g || cJSON_IsTrue(g) || (cJSON_IsString(g) && !strcmp(g->valuestring, "per-head"))) {
        c->gate_per_element = false;
    } else if (cJSON_IsString(g) && !strcmp(g->valuestring, "per-element")) {
        c->gate_per_element = true;
    } else {
        rc = ah_fail(err, AH_EINVAL,
                     "%s: \"gating\": expected \"per-head\", \"per-element\" "
                     "or true",
                     cp);
        goto fail;
    }
    const cJSON *aw =
        cJSON_GetObjectItemCaseSensitive(md->config, "moe_apply_router_weight_on_input");
    const char *sf = md_config_string(md, "moe_router_score_func");
    const cJSON *tie = cJSON_GetObjectItemCaseSensitive(md->config, "tie_word_embeddings");
    if (cJSON_IsTrue(aw) || (sf && strcmp(sf, "sigmoid")) || cJSON_IsTrue(tie)) {
        rc = ah_fail(err, AH_EINVAL, "%s: %s is not supported", cp,
                     cJSON_IsTrue(aw)    ? "\"moe_apply_router_weight_on_input\": true"
                     : cJSON_IsTrue(tie) ? "\"tie_word_embeddings\": true"
                                         : "\"moe_router_score_func\" other than \"sigmoid\"");
        goto fail;
    }
    bool any_sliding = false, any_full = false;
    for (int i = 0; i < L; i++) {
        any_sliding |= c->sliding[i];
        any_full |= !c->sliding[i];
    }
    if (any_full && (rc = rope_read(md, "full_attention", &c->rope_full, err)) < 0) goto fail;
    if (any_sliding && (rc = rope_read(md, "sliding_attention", &c->rope_sliding, err)) < 0)
        goto fail;
    if (any_sliding && c->sliding_window < 1) {
        rc = ah_fail(err, AH_EINVAL, "%s: \"sliding_window\": sliding layers need a window >= 1",
                     cp);
        goto fail;
    }
    return 0;
fail:
    laguna_config_free(c);
    return rc;
}
