// decoder.c - counts, catalogue and weights of the Llama-style families (model/decoder.h);
// parameters as tests/ref/hf/params.py counts them:
//   V D + D + (untied: V D) + sum_i [ D H hd + 2 D KV hd + H hd D + biases + q/k norms 2 hd
//   + 2 D (Gemma 4 D) + (dense: 3 D I (+ 2 I + D with mlp_bias); mixture: D E + 3 E D Ie) ]
// The forward pass is model/decoder_forward.c.
#include "model/decoder.h"

#include "model/ah.h"
#include "model/catalogue.h"
#include "model/config.h" // defines: cfg_get, cfg_kind (quantization_config)
#include "model/family.h"
#include "model/mla.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// DeepSeek-V3's layer i (tests/ref/param_count.py deepseek_layer): its norms, MLA, a dense MLP or
// the router (e_score_correction_bias is a buffer, not counted) and the shared experts
static int64_t dsv3_layer_params(const struct dec_config *c, int i, bool experts) {
    int64_t D = c->hidden, E = c->n_expert, Is = (int64_t)c->route.n_shared * c->expert_ffn;
    if (experts) return c->moe[i] ? 3 * E * D * c->expert_ffn : 0;
    int64_t n = 2 * D + mla_params(c);
    if (c->moe[i]) return n + D * E + 3 * D * Is;
    return n + 3 * D * c->ffn;
}

void dec_mtp_params(const struct dec_config *c, int64_t *unique, int64_t *stored) {
    int64_t D = c->hidden, E = c->n_expert, Is = (int64_t)c->route.n_shared * c->expert_ffn;
    int64_t layer = 2 * D + mla_params(c) + D * E + 3 * D * Is + 3 * E * D * c->expert_ffn;
    *unique = c->n_mtp * (2 * D + 2 * D * D + layer + D);
    *stored = *unique + c->n_mtp * 2 * (int64_t)c->vocab * D;
}

int64_t dec_layer_params(const struct dec_config *c, int i, bool experts) {
    int64_t D = c->hidden, H = c->n_head, KV = c->n_kv_head, hd = c->head_dim, I = c->ffn;
    int64_t E = c->n_expert, Ie = c->expert_ffn;
    if (c->mla.on) return dsv3_layer_params(c, i, experts);
    if (experts)
        return c->moe[i] ? 3 * E * D * Ie + (c->blk.expert_bias ? E * (2 * Ie + D) : 0) : 0;
    int64_t n = D * H * hd + 2 * D * KV * hd + H * hd * D;
    n += (H * hd + 2 * KV * hd) * c->blk.qkv_bias + D * c->blk.o_bias + dec_block_norm_params(c);
    n += c->blk.sinks ? H : 0;
    if (c->moe[i]) return n + D * E + (c->blk.router_bias ? E : 0); // the router
    return n + 3 * D * I + (c->blk.mlp_bias ? 2 * I + D : 0);
}

int64_t dec_block_norm_params(const struct dec_config *c) {
    const struct dec_block *b = &c->blk;
    int64_t D = c->hidden, hd = c->head_dim;
    int64_t n =
        2 * D * ((b->norm_at & DEC_NORM_PRE) != 0) + 2 * D * ((b->norm_at & DEC_NORM_POST) != 0);
    if (b->qk_norm == DEC_QK_HEAD) n += 2 * hd;
    if (b->qk_norm == DEC_QK_PROJ) n += (int64_t)(c->n_head + c->n_kv_head) * hd;
    return n;
}

int64_t dec_params(const struct dec_config *c) {
    int64_t VD = (int64_t)c->vocab * c->hidden, n = VD + c->hidden + (c->blk.tied ? 0 : VD);
    for (int i = 0; i < c->n_layer; i++)
        n += dec_layer_params(c, i, false) + dec_layer_params(c, i, true);
    return n;
}

double dec_block_flops(const struct dec_config *c, int i, int T) {
    if (i >= c->n_layer) return 2.0 * T * c->hidden * (double)c->vocab;
    double active = (double)dec_layer_params(c, i, false);
    if (c->moe[i]) active += 3.0 * c->hidden * c->expert_ffn * c->top_k;
    if (c->mla.on) // q.k over d_nope + d_rope, P.v over d_v
        return 2.0 * T * active +
               2.0 * c->n_head * (double)T * T * (c->mla.d_nope + c->mla.d_rope + c->mla.d_v);
    return 2.0 * T * active + 4.0 * c->n_head * c->head_dim * (double)T * T;
}

// ----------------------------------------------------------------------------
// catalogue (model/catalogue.h; tests/ref/hf/NAMES.md)

// every block has the attention's values, q/k before RoPE among them; the norm outputs where its
// norms sit; a dense MLP's or a mixture's values
static unsigned block_options(const void *u, int l) {
    const struct dec_config *c = u;
    unsigned has = CAT_PRE_ROPE | (c->moe[l] ? CAT_MOE : CAT_DENSE);
    if (c->blk.norm_at & DEC_NORM_PRE) has |= CAT_PRE_NORM;
    if (c->blk.norm_at & DEC_NORM_POST) has |= CAT_POST_NORM;
    if (c->mla.on) has |= CAT_MLA | (c->mla.q_lora ? CAT_Q_LORA : 0u);
    if (c->moe[l] && c->route.sigmoid_group) has |= CAT_SIGMOID;
    if (c->moe[l] && c->route.n_shared > 0) has |= CAT_SHARED;
    if (c->blk.sinks) has |= CAT_SINKS;
    if (c->moe[l] && c->blk.swiglu_clamp) has |= CAT_CLAMPED;
    return has;
}

static int walk(const struct dec_config *c, int *id, struct tap_desc *out) {
    struct cat_family f = {.n_layer = c->n_layer,
                           .texts = CAT_TEXT_DEC | (c->mla.on ? CAT_TEXT_DSV3 : 0u),
                           .block = block_options,
                           .u = c};
    return cat_walk(&f, id, out);
}

int dec_n_taps(const struct decoder *m) {
    return walk(&m->cfg, NULL, NULL);
}

void dec_catalogue(const struct decoder *m, struct tap_desc *out) {
    walk(&m->cfg, NULL, out);
}

// MLA's axes (model/mla.h): a query / key head is d_nope + d_rope, a value head d_v
static int64_t dsv3_axis_size(const struct dec_config *c, const char *axis) {
    static const char *const names[] = {"qk_head_dim",  "head_dim",         "q_lora_rank",
                                        "kv_lora_rank", "qk_rope_head_dim", "n_group"};
    const int v[] = {c->mla.d_nope + c->mla.d_rope,
                     c->mla.d_v,
                     c->mla.q_lora,
                     c->mla.kv_lora,
                     c->mla.d_rope,
                     c->route.n_group};
    for (size_t i = 0; c->mla.on && i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(axis, names[i])) return v[i];
    return -1;
}

int64_t dec_axis_size(const struct decoder *m, int block, const char *axis) {
    const struct dec_config *c = &m->cfg;
    (void)block;
    int64_t mla = dsv3_axis_size(c, axis);
    if (mla >= 0) return mla;
    static const char *const names[] = {"num_heads",   "num_kv_heads", "head_dim",
                                        "qk_head_dim", "hidden_size",  "intermediate_size",
                                        "num_experts", "top_k",        "vocab_size"};
    const int v[] = {c->n_head, c->n_kv_head, c->head_dim, c->head_dim, c->hidden,
                     c->ffn,    c->n_expert,  c->top_k,    c->vocab};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(axis, names[i])) return v[i];
    return -1;
}

// ----------------------------------------------------------------------------
// weights: tests/ref/hf/NAMES.md "Families and their tensor names"

// ----------------------------------------------------------------------------
// FP8 block-scaled weights (model/fp8.h): quantization_config, which matrices, their counts

static const char *const QC = "quantization_config";

// a string member of quantization_config: absent or null -> dflt; else one of ok[] (NULL-ended)
static int qc_string(const struct config *cf, const struct cfg_value *q, const char *key,
                     const char *dflt, const char *const *ok, const char **out,
                     struct ah_error *err) {
    const struct cfg_value *v = cfg_get(cf, q, key);
    *out = dflt;
    if (cfg_kind(cf, v) <= CFG_NULL) return 0;
    const char *str = cfg_string(cf, v);
    for (int i = 0; str && ok[i]; i++)
        if (!strcmp(str, ok[i])) {
            *out = ok[i];
            return 0;
        }
    return ah_fail(err, AH_EINVAL, "%s: \"%s.%s\": %s%s%s is not implemented (known: %s)", cf->path,
                   QC, key, str ? "\"" : "", str ? str : "a non-string", str ? "\"" : "", ok[0]);
}

// weight_block_size: two positive integers (absent or null: transformers' [128, 128])
static int qc_blocks(const struct config *cf, const struct cfg_value *q, struct dec_fp8 *f,
                     struct ah_error *err) {
    const struct cfg_value *v = cfg_get(cf, q, "weight_block_size");
    f->bn = f->bk = 128;
    if (cfg_kind(cf, v) <= CFG_NULL) return 0;
    bool ok = cfg_kind(cf, v) == CFG_ARRAY && cfg_length(cf, v) == 2;
    int b[2] = {0, 0};
    for (int j = 0; ok && j < 2; j++) {
        const struct cfg_value *e = cfg_element(cf, v, j);
        double d = cfg_number(cf, e);
        ok = cfg_kind(cf, e) == CFG_NUMBER && d == floor(d) && d >= 1 && d <= (1 << 20);
        b[j] = ok ? (int)d : 0;
    }
    if (!ok)
        return ah_fail(err, AH_EINVAL,
                       "%s: \"%s.weight_block_size\": expected two positive integers, [rows, "
                       "inputs] of a scale's block (as [128, 128])",
                       cf->path, QC);
    f->bn = b[0];
    f->bk = b[1];
    return 0;
}

// modules_to_not_convert: null or a list of strings, copied into f->skip
static int qc_skip(const struct config *cf, const struct cfg_value *q, struct dec_fp8 *f,
                   struct ah_error *err) {
    const struct cfg_value *v = cfg_get(cf, q, "modules_to_not_convert");
    if (cfg_kind(cf, v) <= CFG_NULL) return 0;
    bool ok = cfg_kind(cf, v) == CFG_ARRAY;
    size_t n = 1;
    for (int j = 0; ok && j < cfg_length(cf, v); j++) {
        const char *str = cfg_string(cf, cfg_element(cf, v, j));
        ok = str && *str;
        n += ok ? strlen(str) + 1 : 0;
    }
    if (!ok)
        return ah_fail(err, AH_EINVAL,
                       "%s: \"%s.modules_to_not_convert\": expected null or a list of module "
                       "names (non-empty strings)",
                       cf->path, QC);
    char *p = f->skip = malloc(n);
    if (!p) return -AH_ENOMEM;
    for (int j = 0; j < cfg_length(cf, v); j++) {
        const char *str = cfg_string(cf, cfg_element(cf, v, j));
        memcpy(p, str, strlen(str) + 1);
        p += strlen(str) + 1;
    }
    *p = '\0';
    return 0;
}

int dec_read_fp8(const struct config *cf, struct dec_config *c, struct ah_error *err) {
    static const char *const methods[] = {"fp8", NULL}, *const fmts[] = {"e4m3", NULL};
    static const char *const schemes[] = {"dynamic", NULL};
    const struct cfg_value *q = cfg_get(cf, NULL, QC);
    const char *s;
    int rc;
    if (cfg_kind(cf, q) <= CFG_NULL) return 0;
    if (cfg_kind(cf, q) != CFG_OBJECT)
        return ah_fail(err, AH_EINVAL, "%s: \"%s\": expected an object", cf->path, QC);
    if (cfg_kind(cf, cfg_get(cf, q, "quant_method")) <= CFG_NULL)
        return ah_fail(err, AH_EINVAL, "%s: \"%s.quant_method\": missing", cf->path, QC);
    if ((rc = qc_string(cf, q, "quant_method", NULL, methods, &s, err)) < 0 ||
        (rc = qc_string(cf, q, "fmt", "e4m3", fmts, &s, err)) < 0 ||
        (rc = qc_string(cf, q, "activation_scheme", "dynamic", schemes, &s, err)) < 0 ||
        (rc = qc_blocks(cf, q, &c->fp8, err)) < 0 || (rc = qc_skip(cf, q, &c->fp8, err)) < 0)
        return rc;
    c->fp8.on = true;
    return 0;
}

// name with each run of digits replaced by "*" into out
static void starred(char *out, size_t n, const char *name) {
    size_t k = 0;
    for (const char *p = name; *p && k + 1 < n; p++) {
        if (isdigit((unsigned char)*p)) {
            while (isdigit((unsigned char)p[1]))
                p++;
            out[k++] = '*';
        } else {
            out[k++] = *p;
        }
    }
    out[k] = '\0';
}

bool dec_fp8_converts(const struct dec_config *c, const char *name) {
    char star[160];
    starred(star, sizeof star, name);
    if (strstr(name, "lm_head")) return false;
    for (const char *p = c->fp8.skip; p && *p; p += strlen(p) + 1)
        if (strstr(name, p) || strstr(star, p)) return false;
    return true;
}

// layer's FP8 (d0, d1) weight `name` and its name_scale_inv into the list; its counts
static void fp8_mat(struct model_tensor *t, int *n, struct decoder *m, struct dec_mat *dst,
                    int64_t d0, int64_t d1, int layer, const char *name) {
    const struct dec_fp8 *f = &m->cfg.fp8;
    int64_t s0 = (d0 + f->bn - 1) / f->bn, s1 = (d1 + f->bk - 1) / f->bk, L1 = m->cfg.n_layer + 1;
    char sname[160];
    m->any_fp8 = true;
    m->q8_w[layer + 1] += d0 * d1;
    m->q8_w[L1 + layer + 1] += s0 * s1;
    dst->bn = f->bn;
    dst->bk = f->bk;
    model_tensor_add(t, n, NULL, NULL, d0, d1, NULL, 0, name);
    if (t) t[*n - 1].fp8 = &dst->q8;
    snprintf(sname, sizeof sname, "%s_scale_inv", name);
    model_tensor_add(t, n, NULL, &dst->s8, s0, s1, NULL, 0, sname);
}

// moves layer i's FP8 counts since (w0, s0) to its routed experts' entries
static void fp8_experts(struct decoder *m, int i, int64_t w0, int64_t s0) {
    if (!m->q8_w) return;
    int64_t L1 = m->cfg.n_layer + 1, *q = m->q8_w;
    q[2 * L1 + i + 1] += q[i + 1] - w0;
    q[3 * L1 + i + 1] += q[L1 + i + 1] - s0;
    q[i + 1] = w0;
    q[L1 + i + 1] = s0;
}

void dec_fp8_stage(const struct decoder *m, int b0, int b1, bool head, int shard, int n_shards,
                   int64_t *weights, int64_t *scales) {
    *weights = *scales = 0;
    if (!m->q8_w) return;
    const int64_t L1 = m->cfg.n_layer + 1, *q = m->q8_w, E = m->cfg.n_expert;
    int64_t mine = E ? E * (shard + 1) / n_shards - E * shard / n_shards : 0;
    for (int i = b0; i < b1; i++) {
        *weights += q[i + 1] + (E ? q[2 * L1 + i + 1] / E * mine : 0);
        *scales += q[L1 + i + 1] + (E ? q[3 * L1 + i + 1] / E * mine : 0);
    }
    if (head) { // the model-level matrices (not the embedding; the head when not lm_head)
        *weights += q[0];
        *scales += q[L1];
    }
}

// ----------------------------------------------------------------------------
// binding

// "{layers}.{layer}.{leaf}{suffix}" (layer < 0: leaf alone) into name
static const char *tname(char *name, size_t n, const struct dec_config *c, int layer,
                         const char *leaf, const char *suffix) {
    AH_ASSERT(leaf); // a description paired with a table that lacks the tensor
    if (layer >= 0)
        snprintf(name, n, "%s.%d.%s%s", c->names->layers, layer, leaf, suffix);
    else
        snprintf(name, n, "%s%s", leaf, suffix);
    return name;
}

// the part of the model (model_tensor.block) of layer's tensor leaf: the layer's block, else the
// embedding (tied: also the head's), the final norm or the head
static int part_of(const struct dec_config *c, int layer, const char *leaf) {
    if (layer >= 0) return layer;
    if (leaf != c->names->embed) return MT_HEAD;
    return c->blk.tied ? MT_EMBED_HEAD : MT_EMBED;
}

// Appends matrix leaf.weight of layer (< 0: the model's): borrowed if stored BF16
static void mat(struct model_tensor *t, int *n, struct decoder *m, const struct model_dims *dims,
                struct dec_mat *dst, int64_t d0, int64_t d1, int layer, const char *leaf) {
    char name[128];
    int n0 = *n;
    tname(name, sizeof name, &m->cfg, layer, leaf, ".weight");
    bool embedding = layer < 0 && leaf == m->cfg.names->embed; // an nn.Embedding: never FP8
    bool param = m->cfg.fp8.keep_router && leaf == m->cfg.names->router;
    if (m->cfg.fp8.on && !embedding && !param && dec_fp8_converts(&m->cfg, name)) {
        fp8_mat(t, n, m, dst, d0, d1, layer, name);
    } else {
        bool h = t && dims && dims->is_bf16 && dims->is_bf16(dims->u, name);
        m->any_bf16 |= h;
        model_tensor_add(t, n, h ? &dst->h : NULL, h ? NULL : &dst->f, d0, d1, NULL, 0, name);
    }
    model_tensor_mark(t, n0, *n, part_of(&m->cfg, layer, leaf), -1);
}

// Appends float32 vector leaf{suffix} of layer (< 0: the model's), shape (d0)
static void vec(struct model_tensor *t, int *n, const struct dec_config *c, const float **dst,
                int64_t d0, int layer, const char *leaf, const char *suffix) {
    char name[128];
    model_tensor_add(t, n, NULL, dst, d0, 0, NULL, 0,
                     tname(name, sizeof name, c, layer, leaf, suffix));
    model_tensor_mark(t, *n - 1, *n, part_of(c, layer, leaf), -1);
}

// one mixture block's router and experts ({experts}.{e}.{egate} ...)
static void expert_tensors(struct model_tensor *t, int *n, struct decoder *m,
                           const struct model_dims *dims, int i, struct dec_block_w *w) {
    const struct dec_config *c = &m->cfg;
    const struct dec_names *nm = c->names;
    int64_t D = c->hidden, Ie = c->expert_ffn;
    char leaf[96];
    mat(t, n, m, dims, &w->router, c->n_expert, D, i, nm->router);
    int64_t w0 = m->q8_w ? m->q8_w[i + 1] : 0, s0 = m->q8_w ? m->q8_w[c->n_layer + 1 + i + 1] : 0;
    for (int e = 0, e0 = *n; e < c->n_expert; e++, e0 = *n) {
        snprintf(leaf, sizeof leaf, "%s.%d.%s", nm->experts, e, nm->egate);
        mat(t, n, m, dims, &w->eg[e], Ie, D, i, leaf);
        snprintf(leaf, sizeof leaf, "%s.%d.%s", nm->experts, e, nm->eup);
        mat(t, n, m, dims, &w->eu[e], Ie, D, i, leaf);
        snprintf(leaf, sizeof leaf, "%s.%d.%s", nm->experts, e, nm->edown);
        mat(t, n, m, dims, &w->ed[e], D, Ie, i, leaf);
        model_tensor_mark(t, e0, *n, i, e); // expert e's: its shard's alone
    }
    fp8_experts(m, i, w0, s0);
}

// DeepSeek-V3's attention (MLA) of layer i, and a mixture block's routing bias and shared experts
static void mla_tensors(struct model_tensor *t, int *n, struct decoder *m,
                        const struct model_dims *dims, int i, struct dec_block_w *w) {
    const struct dec_config *c = &m->cfg;
    const struct dec_mla *a = &c->mla;
    const struct dec_names *nm = c->names;
    int64_t D = c->hidden, H = c->n_head, dqk = a->d_nope + a->d_rope, ql = a->q_lora;
    if (ql) {
        mat(t, n, m, dims, &w->q_a, ql, D, i, nm->q_a);
        vec(t, n, c, &w->q_a_norm, ql, i, nm->q_a_norm, ".weight");
        mat(t, n, m, dims, &w->q_b, H * dqk, ql, i, nm->q_b);
    } else {
        mat(t, n, m, dims, &w->wq, H * dqk, D, i, nm->q);
    }
    mat(t, n, m, dims, &w->kv_a, a->kv_lora + a->d_rope, D, i, nm->kv_a);
    vec(t, n, c, &w->kv_a_norm, a->kv_lora, i, nm->kv_a_norm, ".weight");
    mat(t, n, m, dims, &w->kv_b, H * (a->d_nope + a->d_v), a->kv_lora, i, nm->kv_b);
    mat(t, n, m, dims, &w->wo, D, H * a->d_v, i, nm->o);
}

static void dsv3_moe_tensors(struct model_tensor *t, int *n, struct decoder *m,
                             const struct model_dims *dims, int i, struct dec_block_w *w) {
    const struct dec_config *c = &m->cfg;
    const struct dec_names *nm = c->names;
    int64_t D = c->hidden, Is = (int64_t)c->route.n_shared * c->expert_ffn;
    if (c->route.sigmoid_group) vec(t, n, c, &w->e_bias, c->n_expert, i, nm->router_bias, "");
    if (c->route.n_shared <= 0) return;
    mat(t, n, m, dims, &w->sg, Is, D, i, nm->sgate);
    mat(t, n, m, dims, &w->su, Is, D, i, nm->sup);
    mat(t, n, m, dims, &w->sd, D, Is, i, nm->sdown);
}

// gpt-oss's mixture block: the router (+ bias) and the experts' fused tensors as published,
// MXFP4 blocks + scales (kept as stored; model/mxfp4.h) and float32 biases
static void expert_tensors_mxfp4(struct model_tensor *t, int *n, struct decoder *m,
                                 const struct model_dims *dims, int i, struct dec_block_w *w) {
    const struct dec_config *c = &m->cfg;
    const struct dec_names *nm = c->names;
    int64_t D = c->hidden, Ie = c->expert_ffn, E = c->n_expert;
    char leaf[96], name[160];
    mat(t, n, m, dims, &w->router, E, D, i, nm->router);
    if (c->blk.router_bias) vec(t, n, c, &w->brouter, E, i, nm->router, ".bias");
    const int64_t gu_b[4] = {E, 2 * Ie, D / 32, 16}, dn_b[4] = {E, D, Ie / 32, 16};
    struct {
        const char *leaf;
        struct mxfp4_mat *q;
        const int64_t *shape;
    } f[2] = {{nm->egate_up, &w->gu_q4, gu_b}, {nm->edown, &w->down_q4, dn_b}};
    for (int k = 0; k < 2; k++) {
        snprintf(leaf, sizeof leaf, "%s.%s_blocks", nm->experts, f[k].leaf);
        model_tensor_add_u8(t, n, &f[k].q->blocks, 4, f[k].shape,
                            tname(name, sizeof name, c, i, leaf, ""));
        snprintf(leaf, sizeof leaf, "%s.%s_scales", nm->experts, f[k].leaf);
        model_tensor_add_u8(t, n, &f[k].q->scales, 3, f[k].shape,
                            tname(name, sizeof name, c, i, leaf, ""));
        snprintf(leaf, sizeof leaf, "%s.%s_bias", nm->experts, f[k].leaf);
        if (c->blk.expert_bias)
            model_tensor_add(t, n, NULL, k ? &w->bed : &w->bgu, E, k ? D : 2 * Ie, NULL, 0,
                             tname(name, sizeof name, c, i, leaf, ""));
    }
    m->any_mxfp4 = true;
}

static void block_tensors(struct model_tensor *t, int *n, struct decoder *m,
                          const struct model_dims *dims, int i, struct dec_block_w *w) {
    const struct dec_config *c = &m->cfg;
    const struct dec_block *b = &c->blk;
    const struct dec_names *nm = c->names;
    int64_t D = c->hidden, hd = c->head_dim, HD = c->n_head * hd, KVD = c->n_kv_head * hd;
    int64_t I = c->ffn;
    bool proj = b->qk_norm == DEC_QK_PROJ;
#define FV(dst, d0, leaf)      vec(t, n, c, dst, d0, i, leaf, ".weight")
#define BIAS(dst, d0, leaf)    vec(t, n, c, dst, d0, i, leaf, ".bias")
#define MAT(dst, d0, d1, leaf) mat(t, n, m, dims, dst, d0, d1, i, leaf)
    if (b->norm_at & DEC_NORM_PRE) {
        FV(&w->attn_norm, D, nm->attn_norm);
        FV(&w->mlp_norm, D, nm->mlp_norm);
    }
    if (b->norm_at & DEC_NORM_POST) {
        FV(&w->post_attn_norm, D, nm->post_attn_norm);
        FV(&w->post_mlp_norm, D, nm->post_mlp_norm);
    }
    if (c->mla.on) {
        mla_tensors(t, n, m, dims, i, w);
    } else if (b->fused_qkv) { // one matrix; the forward uses its row blocks (decoder_forward.c)
        MAT(&w->qkv, HD + 2 * KVD, D, nm->qkv);
        MAT(&w->wo, D, HD, nm->o);
    } else {
        MAT(&w->wq, HD, D, nm->q);
        MAT(&w->wk, KVD, D, nm->k);
        MAT(&w->wv, KVD, D, nm->v);
        MAT(&w->wo, D, HD, nm->o);
    }
    if (b->qkv_bias) {
        BIAS(&w->bq, HD, nm->q);
        BIAS(&w->bk, KVD, nm->k);
        BIAS(&w->bv, KVD, nm->v);
    }
    if (b->o_bias) BIAS(&w->bo, D, nm->o);
    if (b->qk_norm != DEC_QK_NONE) {
        FV(&w->q_norm, proj ? HD : hd, nm->q_norm);
        FV(&w->k_norm, proj ? KVD : hd, nm->k_norm);
    }
    if (b->sinks) vec(t, n, c, &w->sinks, c->n_head, i, nm->sinks, "");
    if (c->moe[i] && b->experts_interleaved) {
        expert_tensors_mxfp4(t, n, m, dims, i, w);
        return;
    }
    if (c->moe[i]) {
        expert_tensors(t, n, m, dims, i, w);
        dsv3_moe_tensors(t, n, m, dims, i, w);
        return;
    }
    if (b->fused_gate_up) {
        MAT(&w->gate_up, 2 * I, D, nm->gate_up);
    } else {
        MAT(&w->gate, I, D, nm->gate);
        MAT(&w->up, I, D, nm->up);
    }
    MAT(&w->down, D, I, nm->down);
    if (b->mlp_bias) {
        BIAS(&w->bg, I, nm->gate);
        BIAS(&w->bu, I, nm->up);
        BIAS(&w->bd, D, nm->down);
    }
#undef FV
#undef BIAS
#undef MAT
}

// every tensor of the checkpoint into t (NULL: counts them)
static int all_tensors(struct decoder *m, const struct model_dims *dims, struct model_tensor *t) {
    const struct dec_config *c = &m->cfg;
    int n = 0;
    if (m->q8_w) memset(m->q8_w, 0, 4 * (size_t)(c->n_layer + 1) * sizeof *m->q8_w);
    mat(t, &n, m, dims, &m->embed, c->vocab, c->hidden, -1, c->names->embed);
    for (int i = 0; i < c->n_layer; i++)
        block_tensors(t, &n, m, dims, i, &m->blk[i]);
    vec(t, &n, c, &m->norm, c->hidden, -1, c->names->norm, ".weight");
    if (!c->blk.tied) mat(t, &n, m, dims, &m->head, c->vocab, c->hidden, -1, c->names->head);
    return n;
}

int dec_init(struct decoder *m, struct dec_config *c, const struct model_dims *dims,
             struct model_tensor **list) {
    memset(m, 0, sizeof *m);
    m->cfg = *c;
    memset(c, 0, sizeof *c);
    c = &m->cfg;
    int L = c->n_layer, n_moe = 0;
    AH_ASSERT(L >= 1);
    for (int i = 0; i < L; i++)
        n_moe += c->moe[i];
    m->blk = calloc((size_t)L, sizeof *m->blk);
    m->experts = calloc(3 * (size_t)c->n_expert * (size_t)n_moe + 1, sizeof *m->experts);
    m->id = malloc((size_t)(L + 2) * CAT_N * sizeof *m->id);
    if (!m->blk || !m->experts || !m->id) return -AH_ENOMEM;
    walk(c, m->id, NULL);
    for (int i = 0, j = 0; i < L; i++)
        if (c->moe[i]) {
            struct dec_block_w *w = &m->blk[i];
            w->eg = m->experts + (size_t)3 * c->n_expert * j++;
            w->eu = w->eg + c->n_expert;
            w->ed = w->eu + c->n_expert;
        }
    if (c->fp8.on && !(m->q8_w = calloc(4 * (size_t)(L + 1), sizeof *m->q8_w))) return -AH_ENOMEM;
    if (c->fp8.on) all_tensors(m, NULL, NULL); // counts the FP8 matrices (plan, bench)
    m->any_bf16 = c->bf16;                     // config only (plan, bench): as torch_dtype says
    m->any_mxfp4 = c->blk.experts_interleaved;
    if (!list) return 0;
    m->any_bf16 = false; // with the files: as they are
    int n = all_tensors(m, dims, NULL);
    if (n < 1 || !(*list = calloc((size_t)n, sizeof **list))) return -AH_ENOMEM;
    return all_tensors(m, dims, *list);
}

void dec_free(struct decoder *m) {
    dec_config_free(&m->cfg);
    free(m->blk);
    free(m->experts);
    free(m->id);
    free(m->q8_w);
    memset(m, 0, sizeof *m);
}
