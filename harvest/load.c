// load.c - choose a family from config.json and bind its weights from the model folder.
#define _POSIX_C_SOURCE 200809L // defines: access
#include "harvest/harvest.h"

#include <cjson/cJSON.h>
#include <math.h>

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int model_config_encdec(const struct modeldir *md, struct encdec_config *c, struct ah_error *err) {
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
        int hi = i < 2 ? AH_MAX_LAYERS : 1 << 24; // the two layer counts come first
        if (*ints[i].dst < 1 || *ints[i].dst > hi)
            return ah_fail(err, AH_EINVAL, "%s: \"%s\": %d is out of range (expected 1 to %d)",
                           md->config_path, ints[i].key, *ints[i].dst, hi);
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

// The gate's granularity follows g_proj's rows (tests/ref/laguna-forward.md A3): H_i Dh rows
// per channel, H_i per head; another row count fails the shape check when the tensor is bound.
static int laguna_gate_rows(const struct modeldir *md, struct laguna_config *c,
                            struct ah_error *err) {
    int64_t sh[2] = {0, 0};
    int rc = md_tensor_dims(md, "model.layers.0.self_attn.g_proj.weight", sh, 2, err);
    if (rc < 0) return rc; // no g_proj: the message names file and tensor
    if (rc == 2 && sh[0] == (int64_t)c->n_head[0] * c->head_dim && c->head_dim > 1)
        c->gate_per_element = true;
    else if (rc == 2 && sh[0] == c->n_head[0])
        c->gate_per_element = false;
    return 0;
}

static int load_laguna(struct model *m, bool weights, struct ah_error *err) {
    struct laguna_config cfg;
    struct model_tensor *lt = NULL;
    int rc;
    m->family = "laguna";
    if ((rc = laguna_config_read(&m->md, &cfg, err)) < 0) return rc;
    m->max_pos = cfg.max_pos;
    int n = weights ? laguna_gate_rows(&m->md, &cfg, err) : 0;
    if (n == 0) n = laguna_init(&m->lg, &cfg, weights ? &lt : NULL);
    laguna_config_free(&cfg); // zeroed by laguna_init; freed here when it did not run
    if (n < 0) return n;
    for (int i = 0; weights && i < n && rc == 0; i++)
        rc = lt[i].bf16
                 ? md_tensor_bf16(&m->md, lt[i].name, lt[i].ndim, lt[i].shape, lt[i].bf16, err)
                 : md_tensor_f32(&m->md, lt[i].name, lt[i].ndim, lt[i].shape, lt[i].dst, err);
    free(lt);
    if (rc < 0) return rc;
    m->n_cat = laguna_n_taps(&m->lg.cfg);
    m->cat = calloc((size_t)m->n_cat, sizeof *m->cat);
    if (!m->cat) return -AH_ENOMEM;
    laguna_catalogue(&m->lg.cfg, m->cat);
    m->n_blocks = m->lg.cfg.n_layer;
    m->vocab = m->lg.cfg.vocab;
    return 0;
}

static int load_encdec(struct model *m, bool weights, struct ah_error *err) {
    struct encdec_config c;
    struct model_tensor *list = NULL;
    int rc;
    m->family = "encdec";
    if ((rc = model_config_encdec(&m->md, &c, err)) < 0) return rc;
    int n = encdec_init(&m->ed, &c, &list);
    if (n < 0) return n;
    for (int i = 0; weights && i < n && rc == 0; i++) {
        int64_t sh[2] = {list[i].shape[0], list[i].shape[1]};
        rc = md_tensor_f32(&m->md, list[i].name, list[i].ndim, sh, list[i].dst, err);
    }
    free(list);
    if (rc < 0) return rc;
    m->n_cat = encdec_n_taps(&c);
    m->cat = calloc((size_t)m->n_cat, sizeof *m->cat);
    if (!m->cat) return -AH_ENOMEM;
    encdec_catalogue(&c, m->cat);
    m->n_blocks = c.n_layer_enc + c.n_layer_dec;
    m->max_pos = c.max_pos;
    m->vocab = c.vocab;
    return 0;
}

// ---- each family's operations on a loaded model ----

static void free_laguna(struct model *m) {
    laguna_free(&m->lg);
}
static int64_t axis_laguna(const struct model *m, int block, const char *axis) {
    return laguna_axis_size(&m->lg.cfg, block, axis);
}
static int state_init_laguna(const struct model *m, struct model_state *s, int max_T,
                             int64_t max_tokens, const uint8_t *want,
                             const struct laguna_shard *shard) {
    return laguna_state_init(&s->lg, &m->lg, max_T, max_tokens, want, shard);
}
static void state_free_laguna(struct model_state *s) {
    laguna_state_free(&s->lg);
}
static void forward_laguna(const struct model *m, struct model_state *s, const struct mbatch *bt,
                           const struct tap *tp, int blk_begin, int blk_end) {
    laguna_forward(&m->lg, &s->lg, bt, tp, blk_begin, blk_end);
}
static void handoff_laguna(struct model_state *s, float **arrays, int *n) {
    arrays[0] = s->lg.x; // the residual stream
    *n = 1;
}
static void sizes_laguna(const struct model *m, int *hidden, int *n_experts, int *top_k) {
    *hidden = m->lg.cfg.hidden;
    *n_experts = m->lg.cfg.n_expert;
    *top_k = m->lg.cfg.top_k;
}
static double flops_laguna(const struct model *m, int b, int T) {
    return laguna_block_flops(&m->lg.cfg, b, T);
}
static int64_t bytes_laguna(const struct model *m, int b0, int b1, bool head, int shard,
                            int n_shards, const char **kind) {
    const struct laguna_config *c = &m->lg.cfg;
    int64_t vd = (int64_t)c->vocab * c->hidden, n = 0, E = c->n_expert;
    int64_t mine = E * (shard + 1) / n_shards - E * shard / n_shards; // experts of the shard
    for (int i = b0; i < b1; i++)
        n += laguna_layer_bytes(c, i, false) + laguna_layer_bytes(c, i, true) * mine / E;
    *kind = "BF16, mapped";
    return n + (b0 == 0 ? 2 * vd : 0) + (head ? 2 * vd + 2 * c->hidden : 0);
}

static void free_encdec(struct model *m) {
    encdec_free(&m->ed);
}
static int64_t axis_encdec(const struct model *m, int block, const char *axis) {
    (void)block;
    return encdec_axis_size(&m->ed.cfg, axis);
}
static int state_init_encdec(const struct model *m, struct model_state *s, int max_T,
                             int64_t max_tokens, const uint8_t *want,
                             const struct laguna_shard *shard) {
    (void)want, (void)shard;
    return encdec_state_init(&s->ed, &m->ed.cfg, max_T, max_tokens);
}
static void state_free_encdec(struct model_state *s) {
    encdec_state_free(&s->ed);
}
static void forward_encdec(const struct model *m, struct model_state *s, const struct mbatch *bt,
                           const struct tap *tp, int blk_begin, int blk_end) {
    encdec_forward(&m->ed, &s->ed, bt, tp, blk_begin, blk_end);
}
static void handoff_encdec(struct model_state *s, float **arrays, int *n) {
    arrays[0] = s->ed.x;       // the residual stream
    arrays[1] = s->ed.enc_out; // and encoder_output, for the decoder's global keys
    *n = 2;
}
static void sizes_encdec(const struct model *m, int *hidden, int *n_experts, int *top_k) {
    *hidden = m->ed.cfg.hidden;
    *n_experts = *top_k = 0;
}
static double flops_encdec(const struct model *m, int b, int T) {
    const struct encdec_config *c = &m->ed.cfg;
    double body = encdec_flops(c, T, false);
    return b < m->n_blocks ? body / m->n_blocks : encdec_flops(c, T, true) - body;
}
static int64_t bytes_encdec(const struct model *m, int b0, int b1, bool head, int shard,
                            int n_shards, const char **kind) {
    (void)shard, (void)n_shards;
    const struct encdec_config *c = &m->ed.cfg;
    int64_t C = c->hidden, HD = (int64_t)c->n_head * c->head_dim;
    int64_t block = 2 * C + 6 * C * HD + 3 * C * c->ffn_dim;
    int enc = c->n_layer_enc; // the encoder's final norm goes with its last block
    *kind = "float32";
    return 4 * ((int64_t)(b1 - b0) * block + (b0 == 0 || head ? (int64_t)c->vocab * C : 0) +
                (head ? C : 0) + (b0 < enc && enc <= b1 ? C : 0));
}

// ---- the test-only identity family (model/identity.h) ----

static int load_identity(struct model *m, bool weights, struct ah_error *err) {
    struct identity *c = &m->idn;
    const char *keys[] = {"hidden_size", "vocab_size"};
    int *dst[] = {&c->hidden, &c->vocab}, rc;
    m->family = "identity";
    for (int i = 0; i < 2; i++) {
        if ((rc = md_config_int(&m->md, keys[i], true, dst[i], err)) < 0) return rc;
        if (*dst[i] < 1 || *dst[i] > (1 << 20))
            return ah_fail(err, AH_EINVAL, "%s: \"%s\": %d is out of range (expected 1 to %d)",
                           m->md.config_path, keys[i], *dst[i], 1 << 20);
    }
    struct model_tensor t;
    int64_t sh[2];
    identity_tensors(c, &t);
    memcpy(sh, t.shape, sizeof sh);
    if (weights && (rc = md_tensor_f32(&m->md, t.name, t.ndim, sh, t.dst, err)) < 0) return rc;
    m->n_cat = identity_n_taps();
    if (!(m->cat = calloc((size_t)m->n_cat, sizeof *m->cat))) return -AH_ENOMEM;
    identity_catalogue(m->cat);
    m->n_blocks = IDENTITY_LAYERS;
    m->max_pos = 1 << 20;
    m->vocab = c->vocab;
    return 0;
}
static void free_identity(struct model *m) {
    (void)m; // the embedding is borrowed
}
static int64_t axis_identity(const struct model *m, int block, const char *axis) {
    (void)block;
    return identity_axis_size(&m->idn, axis);
}
static int state_init_identity(const struct model *m, struct model_state *s, int max_T,
                               int64_t max_tokens, const uint8_t *want,
                               const struct laguna_shard *shard) {
    (void)want, (void)shard;
    return identity_state_init(&s->idn, &m->idn, max_T, max_tokens);
}
static void state_free_identity(struct model_state *s) {
    identity_state_free(&s->idn);
}
static void forward_identity(const struct model *m, struct model_state *s, const struct mbatch *bt,
                             const struct tap *tp, int blk_begin, int blk_end) {
    identity_forward(&m->idn, &s->idn, bt, tp, blk_begin, blk_end);
}
static void handoff_identity(struct model_state *s, float **arrays, int *n) {
    arrays[0] = s->idn.x;
    *n = 1;
}
static void sizes_identity(const struct model *m, int *hidden, int *n_experts, int *top_k) {
    *hidden = m->idn.hidden;
    *n_experts = *top_k = 0;
}
static double flops_identity(const struct model *m, int b, int T) {
    return b < IDENTITY_LAYERS ? 1.0 : 2.0 * T * m->idn.hidden * (double)m->idn.vocab;
}
static int64_t bytes_identity(const struct model *m, int b0, int b1, bool head, int shard,
                              int n_shards, const char **kind) {
    (void)b1, (void)shard, (void)n_shards;
    *kind = "float32";
    return b0 == 0 || head ? 4 * (int64_t)m->idn.vocab * m->idn.hidden : 0;
}

// ---- the families: one table of operations each, chosen by name from config.json ----

struct family {
    const char *name;      // model_family of the output
    const char *const *id; // "architectures" entries / "model_type" / "architecture" naming it
    int (*load)(struct model *m, bool weights, struct ah_error *err);
    void (*free)(struct model *m);
    int64_t (*axis_size)(const struct model *m, int block, const char *axis);
    int (*state_init)(const struct model *m, struct model_state *s, int max_T, int64_t max_tokens,
                      const uint8_t *want, const struct laguna_shard *shard);
    void (*state_free)(struct model_state *s);
    void (*forward)(const struct model *m, struct model_state *s, const struct mbatch *bt,
                    const struct tap *tp, int blk_begin, int blk_end);
    void (*handoff)(struct model_state *s, float **arrays, int *n);
    void (*sizes)(const struct model *m, int *hidden, int *n_experts, int *top_k);
    double (*block_flops)(const struct model *m, int b, int T);
    int64_t (*stage_bytes)(const struct model *m, int b0, int b1, bool head, int shard,
                           int n_shards, const char **kind);
};

static const char *const laguna_ids[] = {"LagunaForCausalLM", "laguna", NULL};
static const char *const encdec_ids[] = {"causal-encoder-decoder", NULL};
static const char *const identity_ids[] = {"IdentityForTest", NULL};
static const struct family families[] = {
    {"laguna", laguna_ids, load_laguna, free_laguna, axis_laguna, state_init_laguna,
     state_free_laguna, forward_laguna, handoff_laguna, sizes_laguna, flops_laguna, bytes_laguna},
    {"encdec", encdec_ids, load_encdec, free_encdec, axis_encdec, state_init_encdec,
     state_free_encdec, forward_encdec, handoff_encdec, sizes_encdec, flops_encdec, bytes_encdec},
    {"identity", identity_ids, load_identity, free_identity, axis_identity, state_init_identity,
     state_free_identity, forward_identity, handoff_identity, sizes_identity, flops_identity,
     bytes_identity},
};
#define N_FAMILIES (sizeof families / sizeof families[0])

static const struct family *family_named(const char *id) {
    for (size_t f = 0; id && f < N_FAMILIES; f++)
        for (const char *const *n = families[f].id; *n; n++)
            if (!strcmp(*n, id)) return &families[f];
    return NULL;
}

// config.json's "architectures" (the first entry a family knows), else "model_type", else the
// spec's "architecture"; none known: an error listing the names that are
static int family_of(const struct modeldir *md, const struct family **fam, struct ah_error *err) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(md->config, "architectures"), *e;
    *fam = NULL;
    cJSON_ArrayForEach(e, a) {
        if (!*fam && cJSON_IsString(e)) *fam = family_named(e->valuestring);
    }
    if (!*fam) *fam = family_named(md_config_string(md, "model_type"));
    if (!*fam) *fam = family_named(md_config_string(md, "architecture"));
    if (*fam) return 0;
    char known[512] = "";
    for (size_t f = 0; f < N_FAMILIES; f++)
        for (const char *const *n = families[f].id; *n; n++)
            snprintf(known + strlen(known), sizeof known - strlen(known), "%s\"%s\"",
                     known[0] ? ", " : "", *n);
    return ah_fail(err, AH_EINVAL,
                   "%s: unknown model family (\"architectures\", \"model_type\" or "
                   "\"architecture\" must name one of %s)",
                   md->config_path, known);
}

int model_load(struct model *m, const char *dir, bool weights, struct ah_error *err) {
    memset(m, 0, sizeof *m);
    int rc = md_open(&m->md, dir, !weights, err);
    if (rc < 0) return rc;
    char tp[4200];
    snprintf(tp, sizeof tp, "%s/tokenizer.json", m->md.dir);
    if (weights && access(tp, F_OK) == 0 && (rc = tok_load(&m->tok, tp, err)) < 0) goto fail;
    if ((rc = family_of(&m->md, &m->fam, err)) < 0) goto fail;
    m->family = m->fam->name;
    if ((rc = m->fam->load(m, weights, err)) == 0) return 0;
fail:
    model_free(m);
    return rc;
}

void model_free(struct model *m) {
    if (m->fam) m->fam->free(m);
    tok_free(m->tok);
    md_close(&m->md);
    free(m->cat);
    memset(m, 0, sizeof *m);
}

int64_t model_axis_size(const struct model *m, int block, const char *axis) {
    return m->fam->axis_size(m, block, axis);
}

int model_state_init(const struct model *m, struct model_state *s, int max_T, int64_t max_tokens,
                     const uint8_t *want, const struct laguna_shard *shard) {
    memset(s, 0, sizeof *s);
    s->fam = m->fam;
    return m->fam->state_init(m, s, max_T, max_tokens, want, shard);
}

void model_state_free(struct model_state *s) {
    if (s->fam) s->fam->state_free(s);
    memset(s, 0, sizeof *s);
}

void model_forward(const struct model *m, struct model_state *s, const struct mbatch *bt,
                   const struct tap *tp, int blk_begin, int blk_end) {
    m->fam->forward(m, s, bt, tp, blk_begin, blk_end);
}

void model_handoff(const struct model *m, struct model_state *s, float **arrays, int *n) {
    m->fam->handoff(s, arrays, n);
}

int model_hidden(const struct model *m) {
    int h, e, k;
    m->fam->sizes(m, &h, &e, &k);
    return h;
}

int model_n_experts(const struct model *m) {
    int h, e, k;
    m->fam->sizes(m, &h, &e, &k);
    return e;
}

int model_top_k(const struct model *m) {
    int h, e, k;
    m->fam->sizes(m, &h, &e, &k);
    return k;
}

double model_block_flops(const struct model *m, int b, int T) {
    return m->fam->block_flops(m, b, T);
}

int64_t model_stage_bytes(const struct model *m, int b0, int b1, bool head, int shard, int n_shards,
                          const char **kind) {
    return m->fam->stage_bytes(m, b0, b1, head, shard, n_shards, kind);
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

// A number in a rope dict: 1 if found, 0 if absent, <0 on error (not a finite number).
static int rope_num(const char *cp, const char *where, const cJSON *o, const char *key, double *out,
                    struct ah_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return ah_fail(err, AH_EINVAL, "%s: \"%s.%s\": expected a finite number", cp, where, key);
    *out = v->valuedouble;
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
static int yarn_read(const struct modeldir *md, const cJSON *all, const cJSON *o, const char *where,
                     int max_pos, struct laguna_rope *r, struct ah_error *err) {
    const char *cp = md->config_path;
    double ms = 0.0, msa = 0.0, l0 = max_pos;
    int rc, has_a;
    if ((rc = rope_num(cp, where, o, "factor", &r->factor, err)) <= 0)
        return rc < 0 ? rc
                      : ah_fail(err, AH_EINVAL, "%s: \"%s\": yarn needs \"factor\"", cp, where);
    if (!(r->factor > 0.0))
        return ah_fail(err, AH_EINVAL, "%s: \"%s.factor\": %g is out of range (expected > 0)", cp,
                       where, r->factor);
    r->beta_fast = r->beta_slow = 0.0;
    if ((rc = rope_num(cp, where, o, "beta_fast", &r->beta_fast, err)) < 0 ||
        (rc = rope_num(cp, where, o, "beta_slow", &r->beta_slow, err)) < 0 ||
        (rc = rope_num(cp, where, o, "mscale", &ms, err)) < 0 ||
        (rc = rope_num(cp, where, o, "mscale_all_dim", &msa, err)) < 0 ||
        (has_a = rc = rope_num(cp, where, o, "attention_factor", &r->attention_factor, err)) < 0)
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
    if ((rc = rope_num(cp, where, o, "original_max_position_embeddings", &l0, err)) < 0 ||
        (rc == 0 && (rc = rope_num(cp, "rope_parameters", all, "original_max_position_embeddings",
                                   &l0, err)) < 0))
        return rc;
    if (!(l0 >= 1.0 && l0 <= 1e9 && l0 == floor(l0)))
        return ah_fail(err, AH_EINVAL,
                       "%s: \"%s.original_max_position_embeddings\": expected an integer >= 1", cp,
                       where);
    r->original_max_pos = (int)l0;
    const cJSON *tr = cJSON_GetObjectItemCaseSensitive(all, "truncate");
    const cJSON *own = cJSON_GetObjectItemCaseSensitive(o, "truncate");
    if ((tr && !cJSON_IsBool(tr)) || (own && !cJSON_IsBool(own)))
        return ah_fail(err, AH_EINVAL, "%s: \"%s.truncate\": expected true or false", cp,
                       tr && !cJSON_IsBool(tr) ? "rope_parameters" : where);
    r->no_truncate = cJSON_IsFalse(tr);
    if (own && cJSON_IsFalse(own) != r->no_truncate) // transformers reads only the top one
        return ah_fail(err, AH_EINVAL,
                       "%s: \"%s.truncate\": transformers reads \"truncate\" only at the top of "
                       "rope_parameters; put it there",
                       cp, where);
    return 0;
}

// The RoPE of one layer type (tests/ref/laguna_ref.py inv_freq): rope_parameters[type], with
// transformers' fallbacks: rope_theta and partial_rotary_factor from the top level when the dict
// lacks them (setdefault), LagunaConfig's defaults when there is no rope_parameters at all.
static int rope_read(const struct modeldir *md, const char *type, int head_dim, int max_pos,
                     struct laguna_rope *r, struct ah_error *err) {
    const char *cp = md->config_path;
    const cJSON *all = cJSON_GetObjectItemCaseSensitive(md->config, "rope_parameters");
    bool full = !strcmp(type, "full_attention");
    char where[64];
    snprintf(where, sizeof where, "rope_parameters.%s", type);
    memset(r, 0, sizeof *r);
    r->factor = r->attention_factor = 1.0;
    if (!all || cJSON_IsNull(all)) { // configuration_laguna.py's default_rope_params
        r->theta = full ? 500000.0 : 10000.0;
        r->partial = full ? 0.5 : 1.0;
        return 0;
    }
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(all, type);
    if (!cJSON_IsObject(o))
        return ah_fail(err, AH_EINVAL, "%s: \"%s\": expected an object (a layer uses it)", cp,
                       where);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "rope_type");
    const char *tn = cJSON_IsString(t) ? t->valuestring : "default";
    if (t && !cJSON_IsString(t))
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
    if ((rc = rope_num(cp, where, o, tk, &r->theta, err)) < 0) return rc;
    if (rc == 0) { // the top level's, if any
        if ((rc = md_config_double(md, tk, false, &r->theta, err)) != 0)
            return rc < 0
                       ? rc
                       : ah_fail(err, AH_EINVAL, "%s: \"%s\": missing \"rope_theta\"", cp, where);
        snprintf(tw, sizeof tw, "%s", tk);
    }
    r->partial = 1.0;
    if ((rc = rope_num(cp, where, o, pk, &r->partial, err)) < 0) return rc;
    if (rc == 0 && (rc = md_config_double(md, pk, false, &r->partial, err)) < 0) return rc;
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
    return r->type == LAGUNA_ROPE_YARN ? yarn_read(md, all, o, where, max_pos, r, err) : 0;
}

// The integer keys with LagunaConfig's defaults, each range-checked (sizes bounded so that
// products of them fit the counters).
static int laguna_ints(const struct modeldir *md, struct laguna_config *c, int *n_head,
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
        if ((rc = md_config_int(md, ints[i].key, false, ints[i].dst, err)) < 0) return rc;
        if (*ints[i].dst < ints[i].lo || *ints[i].dst > ints[i].hi)
            return ah_fail(err, AH_EINVAL, "%s: \"%s\": %d is out of range (expected %d to %d)",
                           md->config_path, ints[i].key, *ints[i].dst, ints[i].lo, ints[i].hi);
    }
    if (c->top_k > c->n_expert)
        return ah_fail(err, AH_EINVAL,
                       "%s: \"num_experts_per_tok\": %d is more than the %d experts",
                       md->config_path, c->top_k, c->n_expert);
    return 0;
}

// The float keys, each finite and in range; the keys whose other values harvest does not compute
// (hidden_act, attention_bias, ...) refused by name.
static int laguna_floats(const struct modeldir *md, struct laguna_config *c, struct ah_error *err) {
    const char *cp = md->config_path;
    struct {
        const char *key;
        double *dst, dflt, lo; // allowed: [lo, inf)
    } f[] = {
        {"rms_norm_eps", &c->eps, 1e-6, 0.0},
        {"moe_routed_scaling_factor", &c->routed_scaling, 1.0, -INFINITY},
        {"moe_router_logit_softcapping", &c->router_softcap, 0.0, 0.0},
    };
    int rc;
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        *f[i].dst = f[i].dflt;
        if ((rc = md_config_double(md, f[i].key, false, f[i].dst, err)) < 0) return rc;
        if (!isfinite(*f[i].dst) || *f[i].dst < f[i].lo)
            return ah_fail(err, AH_EINVAL, "%s: \"%s\": %g is out of range (expected %s)", cp,
                           f[i].key, *f[i].dst, f[i].lo == 0.0 ? ">= 0" : "a finite number");
    }
    const char *act = md_config_string(md, "hidden_act");
    const cJSON *actv = cJSON_GetObjectItemCaseSensitive(md->config, "hidden_act");
    if (actv && (!act || (strcmp(act, "silu") && strcmp(act, "swish"))))
        return ah_fail(err, AH_EINVAL,
                       "%s: \"hidden_act\": only \"silu\" is supported (transformers' SiLU)", cp);
    const char *sf = md_config_string(md, "moe_router_score_func");
    static const char *const flags[] = {"attention_bias", "tie_word_embeddings",
                                        "moe_apply_router_weight_on_input"};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(md->config, flags[i]);
        if (v && !cJSON_IsBool(v))
            return ah_fail(err, AH_EINVAL, "%s: \"%s\": expected true or false", cp, flags[i]);
        if (cJSON_IsTrue(v))
            return ah_fail(err, AH_EINVAL, "%s: \"%s\": true is not supported", cp, flags[i]);
    }
    if (sf && strcmp(sf, "sigmoid"))
        return ah_fail(err, AH_EINVAL,
                       "%s: \"moe_router_score_func\": only \"sigmoid\" is supported", cp);
    return 0;
}

// num_attention_heads_per_layer (else num_attention_heads for every layer)
static int laguna_heads(const struct modeldir *md, struct laguna_config *c, int n_head,
                        struct ah_error *err) {
    const char *cp = md->config_path;
    int L = c->n_layer;
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(md->config, "num_attention_heads_per_layer");
    if (h && (!cJSON_IsArray(h) || cJSON_GetArraySize(h) != L))
        return ah_fail(
            err, AH_EINVAL,
            "%s: \"num_attention_heads_per_layer\": expected a list of %d integers (one a "
            "layer)",
            cp, L);
    const cJSON *e = h ? h->child : NULL;
    for (int i = 0; i < L; i++, e = e ? e->next : NULL) {
        double v = e && cJSON_IsNumber(e) ? e->valuedouble : e ? -1.0 : n_head;
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

static int laguna_gating(const struct modeldir *md, struct laguna_config *c, struct ah_error *err) {
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(md->config, "gating");
    if (!g || cJSON_IsTrue(g) || (cJSON_IsString(g) && !strcmp(g->valuestring, "per-head")))
        c->gate_per_element = false;
    else if (cJSON_IsString(g) && !strcmp(g->valuestring, "per-element"))
        c->gate_per_element = true;
    else
        return ah_fail(err, AH_EINVAL,
                       "%s: \"gating\": expected \"per-head\", \"per-element\" or true",
                       md->config_path);
    return 0;
}

int laguna_config_read(const struct modeldir *md, struct laguna_config *c, struct ah_error *err) {
    memset(c, 0, sizeof *c);
    int n_head = 48, rc;
    if ((rc = laguna_ints(md, c, &n_head, err)) < 0 || (rc = laguna_floats(md, c, err)) < 0)
        goto fail;
    int L = c->n_layer;
    c->n_head = malloc((size_t)L * sizeof *c->n_head);
    c->sliding = malloc((size_t)L * sizeof *c->sliding);
    c->dense = malloc((size_t)L * sizeof *c->dense);
    if (!c->n_head || !c->sliding || !c->dense) {
        rc = -AH_ENOMEM;
        goto fail;
    }
    if ((rc = laguna_heads(md, c, n_head, err)) < 0 ||
        (rc = layer_list(md, "layer_types", "sliding_attention", "full_attention", L, c->sliding,
                         never, err)) < 0 ||
        (rc = layer_list(md, "mlp_layer_types", "dense", "sparse", L, c->dense, dense_first, err)) <
            0 ||
        (rc = laguna_gating(md, c, err)) < 0)
        goto fail;
    bool any_sliding = false, any_full = false;
    for (int i = 0; i < L; i++) {
        any_sliding |= c->sliding[i];
        any_full |= !c->sliding[i];
    }
    if (any_full &&
        (rc = rope_read(md, "full_attention", c->head_dim, c->max_pos, &c->rope_full, err)) < 0)
        goto fail;
    if (any_sliding && (rc = rope_read(md, "sliding_attention", c->head_dim, c->max_pos,
                                       &c->rope_sliding, err)) < 0)
        goto fail;
    if (any_sliding && c->sliding_window < 1) {
        rc = ah_fail(err, AH_EINVAL, "%s: \"sliding_window\": sliding layers need a window >= 1",
                     md->config_path);
        goto fail;
    }
    return 0;
fail:
    laguna_config_free(c);
    return rc;
}
