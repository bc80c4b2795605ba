// load.c - a model folder through the family registry (model/family.h): the family chosen from
// config.json, its tensors bound from the checkpoint, and every operation on a loaded model passed
// to the family's table.
#define _POSIX_C_SOURCE 200809L // defines: access
#include "harvest/harvest.h"

#include "io/config_json.h"
#include "model/blocks.h" // defines: arena_bytes_allocated
#include "model/dnnl.h"   // defines: mm16_forget

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int dims_of(void *u, const char *name, int64_t *shape, int max_dims, struct ah_error *err) {
    return md_tensor_dims(u, name, shape, max_dims, err);
}

static bool is_bf16_of(void *u, const char *name) {
    return md_tensor_is_bf16(u, name);
}

// binds tensor t (md_tensor_as): read false the header's checks alone
static int bind(struct modeldir *md, const struct model_tensor *t, bool read,
                struct ah_error *err) {
    enum md_as as = t->fp8 ? MD_AS_FP8 : t->u8 ? MD_AS_U8 : t->bf16 ? MD_AS_BF16 : MD_AS_F32;
    const void *p = NULL;
    int rc = md_tensor_as(md, t->name, t->ndim, t->shape, as, read, &p, err);
    if (t->fp8)
        *t->fp8 = p;
    else if (t->u8)
        *t->u8 = p;
    else if (t->bf16)
        *t->bf16 = p;
    else
        *t->dst = p;
    return rc;
}

// whether tensor t is of part p (NULL: the whole model) of a model with E routed experts
static bool in_part(const struct model_part *p, int E, const struct model_tensor *t) {
    if (!p) return true;
    bool in = t->block >= 0               ? t->block >= p->b0 && t->block < p->b1
              : t->block == MT_EMBED      ? p->embed
              : t->block == MT_HEAD       ? p->head
              : t->block == MT_EMBED_HEAD ? p->embed || p->head
                                          : true;
    if (!in || t->expert < 0 || p->n_shards <= 1) return in;
    return t->expert >= (int64_t)E * p->shard / p->n_shards &&
           t->expert < (int64_t)E * (p->shard + 1) / p->n_shards;
}

int model_check(struct model *m, const struct model_part *part, struct ah_error *err) {
    int E = m->fam ? model_n_experts(m) : 0, k = 0;
    for (int i = 0; i < m->n_later; i++) {
        if (!in_part(part, E, &m->later[i])) {
            m->later[k++] = m->later[i]; // still waiting
            continue;
        }
        int rc = bind(&m->md, &m->later[i], true, err);
        if (rc < 0) return rc;
    }
    m->n_later = k;
    if (k == 0) free(m->later), m->later = NULL;
    return 0;
}

// the family's model from config.json, with its tensors bound unless config-only: those of part
// checked now, the others from the header only, for model_check
static int open_family(struct model *m, bool weights, const struct model_part *part,
                       struct ah_error *err) {
    struct config cf = config_json(m->md.config, m->md.config_path);
    struct model_dims dims = {dims_of, &m->md, is_bf16_of};
    struct model_info in;
    int rc = model_family_of(&cf, &m->fam, err);
    if (rc < 0) return rc;
    m->family = m->fam->name;
    int n = m->fam->open(&m->fm, &cf, weights ? &dims : NULL, weights ? &m->later : NULL, err);
    rc = n < 0 ? n : 0;
    m->n_later = n > 0 ? n : 0;
    for (int i = 0; weights && i < m->n_later && rc == 0; i++)
        rc = bind(&m->md, &m->later[i], false, err);
    if (rc == 0 && weights) rc = model_check(m, part, err);
    if (rc < 0) return rc;
    m->n_cat = m->fam->n_taps(m->fm);
    if (!(m->cat = calloc((size_t)m->n_cat, sizeof *m->cat))) return -AH_ENOMEM;
    m->fam->catalogue(m->fm, m->cat);
    m->fam->info(m->fm, &in);
    m->n_blocks = in.n_blocks;
    m->max_pos = in.max_pos;
    m->vocab = in.vocab;
    return 0;
}

int model_load(struct model *m, const char *dir, bool weights, const struct model_part *part,
               struct ah_error *err) {
    memset(m, 0, sizeof *m);
    int rc = md_open(&m->md, dir, !weights, err);
    if (rc < 0) return rc;
    char tp[4200];
    snprintf(tp, sizeof tp, "%s/tokenizer.json", m->md.dir);
    if (weights && access(tp, F_OK) == 0 && (rc = tok_load(&m->tok, tp, err)) < 0) goto fail;
    if ((rc = open_family(m, weights, part, err)) == 0) return 0;
fail:
    model_free(m);
    return rc;
}

void model_free(struct model *m) {
    mm16_forget(); // the packed copies of compute bf16 (model/dnnl.h), before the unmapping
    if (m->fam) m->fam->close(m->fm);
    tok_free(m->tok);
    md_close(&m->md);
    free(m->cat);
    free(m->later);
    memset(m, 0, sizeof *m);
}

int64_t model_axis_size(const struct model *m, int block, const char *axis) {
    return m->fam->axis_size(m->fm, block, axis);
}

int model_state_init(const struct model *m, struct model_state *s, int max_T, int64_t max_tokens,
                     const uint8_t *want, const struct expert_shard *shard) {
    memset(s, 0, sizeof *s);
    s->fam = m->fam;
    int64_t before = arena_bytes_allocated();
    int rc = m->fam->state_init(&s->fs, m->fm, max_T, max_tokens, want, shard);
    s->bytes = arena_bytes_allocated() - before;
    return rc;
}

void model_state_free(struct model_state *s) {
    if (s->fam) s->fam->state_free(s->fs);
    memset(s, 0, sizeof *s);
}

void model_forward(const struct model *m, struct model_state *s, const struct mbatch *bt,
                   const struct tap *tp, int blk_begin, int blk_end) {
    m->fam->forward(m->fm, s->fs, bt, tp, blk_begin, blk_end);
}

void model_handoff(const struct model *m, struct model_state *s, float **arrays, int *n) {
    *n = m->fam->handoff(s->fs, arrays);
}

static struct model_info info(const struct model *m) {
    struct model_info in;
    m->fam->info(m->fm, &in);
    return in;
}

int model_hidden(const struct model *m) {
    return info(m).hidden;
}

int model_n_experts(const struct model *m) {
    return info(m).n_experts;
}

int model_top_k(const struct model *m) {
    return info(m).top_k;
}

double model_block_flops(const struct model *m, int b, int T) {
    return m->fam->block_flops(m->fm, b, T);
}

int64_t model_stage_bytes(const struct model *m, int b0, int b1, bool head, int shard, int n_shards,
                          const char **kind) {
    return m->fam->stage_bytes(m->fm, b0, b1, head, shard, n_shards, kind);
}
