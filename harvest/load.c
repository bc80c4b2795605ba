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

// the family's model from config.json, with its tensors bound unless config-only
static int open_family(struct model *m, bool weights, struct ah_error *err) {
    struct config cf = config_json(m->md.config, m->md.config_path);
    struct model_dims dims = {dims_of, &m->md, is_bf16_of};
    struct model_tensor *lt = NULL;
    struct model_info in;
    int rc = model_family_of(&cf, &m->fam, err);
    if (rc < 0) return rc;
    m->family = m->fam->name;
    int n = m->fam->open(&m->fm, &cf, weights ? &dims : NULL, weights ? &lt : NULL, err);
    rc = n < 0 ? n : 0;
    for (int i = 0; weights && i < n && rc == 0; i++)
        rc = lt[i].fp8  ? md_tensor_fp8(&m->md, lt[i].name, lt[i].ndim, lt[i].shape, lt[i].fp8, err)
             : lt[i].u8 ? md_tensor_u8(&m->md, lt[i].name, lt[i].ndim, lt[i].shape, lt[i].u8, err)
             : lt[i].bf16
                 ? md_tensor_bf16(&m->md, lt[i].name, lt[i].ndim, lt[i].shape, lt[i].bf16, err)
                 : md_tensor_f32(&m->md, lt[i].name, lt[i].ndim, lt[i].shape, lt[i].dst, err);
    free(lt);
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

int model_load(struct model *m, const char *dir, bool weights, struct ah_error *err) {
    memset(m, 0, sizeof *m);
    int rc = md_open(&m->md, dir, !weights, err);
    if (rc < 0) return rc;
    char tp[4200];
    snprintf(tp, sizeof tp, "%s/tokenizer.json", m->md.dir);
    if (weights && access(tp, F_OK) == 0 && (rc = tok_load(&m->tok, tp, err)) < 0) goto fail;
    if ((rc = open_family(m, weights, err)) == 0) return 0;
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
