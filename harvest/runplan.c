// runplan.c - the plan of `harvest run` (run.h): every rank loads and checks the same job, model,
// names and data, so bad input ends every rank with the same message and exit code before any
// work; rank 0 also checks the output's neighbourhood (no input among its files, no other run on
// it) before anything is written.
#define _POSIX_C_SOURCE 200809L // defines: access, glob
#include "harvest/run.h"

#include "io/fingerprint.h"
#include "io/output.h" // defines: out_format, the look at an old output
#include "model/aliases.h"
#include "model/ops.h" // defines: op_set_compute

#include <cjson/cJSON.h>
#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// io/h5out.c and the spill file name files beside the output in 4096-byte buffers
#define OUT_PATH_MAX 4000

// The token layout takes activations with one sequence axis (sequence/seq/query) and no key axis.
static int check_token_layout(const struct job *j, const struct model *m, const uint8_t *want,
                              struct ah_error *err) {
    char bad[512] = "";
    int nbad = 0;
    for (int i = 0; i < m->n_cat; i++) {
        if (!want[i]) continue;
        const struct tap_desc *d = &m->cat[i];
        bool ok = tap_n_seq_axes(d) == 1;
        for (int k = 0; k < d->ndim; k++)
            ok = ok && strcmp(d->axes[k], "key") && tap_axis_kind(d->axes[k]) != TAP_AXIS_SEQ2;
        if (ok) continue;
        if (nbad++ < 4)
            snprintf(bad + strlen(bad), sizeof bad - strlen(bad), "%s%s", nbad > 1 ? ", " : "",
                     d->name);
    }
    if (!nbad) return 0;
    return ah_fail(err, AH_EINVAL,
                   "%s: \"output.layout\": \"token\" takes activations with one "
                   "sequence axis and no key axis; %d requested do not: %s%s (use \"prompt\")",
                   j->path, nbad, bad, nbad > 4 ? ", ..." : "");
}

// Stored shape of each wanted activation.
static int build_dsets(const struct model *m, const uint8_t *want, const char **alias_of_id,
                       enum job_layout layout, int64_t S, int64_t n_prompts, int64_t n_tokens,
                       struct h5out_dset *d, int *dset_of_id) {
    int n = 0;
    for (int i = 0; i < m->n_cat; i++) {
        dset_of_id[i] = -1;
        if (!want[i]) continue;
        const struct tap_desc *t = &m->cat[i];
        struct h5out_dset *o = &d[n];
        memset(o, 0, sizeof *o);
        o->desc = t;
        o->alias = alias_of_id[i];
        strcpy(o->axes[0], layout == JOB_LAYOUT_PROMPT ? "prompt" : "token");
        o->dims[0] = layout == JOB_LAYOUT_PROMPT ? n_prompts : n_tokens;
        o->ndim = 1;
        for (int k = 0; k < t->ndim; k++) {
            enum tap_axis_kind kind = tap_axis_kind(t->axes[k]);
            if (kind == TAP_AXIS_BATCH) continue;
            if (layout == JOB_LAYOUT_TOKEN && kind == TAP_AXIS_SEQ) continue;
            int64_t len = kind == TAP_AXIS_SEQ    ? S
                          : kind == TAP_AXIS_SEQ2 ? 2 * S
                                                  : model_axis_size(m, t->block, t->axes[k]);
            AH_ASSERT(len >= 1);
            strcpy(o->axes[o->ndim], t->axes[k]);
            o->dims[o->ndim++] = len;
        }
        dset_of_id[i] = n++;
    }
    return n;
}

uint64_t plan_checksum(const struct plan *pl) {
    const struct ds_prompts *ds = &pl->ds;
    uint64_t h = 1469598103934665603ull;
    const int64_t *arrays[3] = {ds->source, ds->len, ds->ids};
    int64_t counts[3] = {ds->n, ds->n, ds->n_tokens};
    for (int a = 0; a < 3; a++)
        for (int64_t i = 0; i < counts[a]; i++) {
            uint64_t v = (uint64_t)arrays[a][i];
            for (int b = 0; b < 8; b++)
                h = (h ^ ((v >> (8 * b)) & 0xff)) * 1099511628211ull;
        }
    return h;
}

void plan_free(struct plan *pl) {
    free(pl->sel.st_off);
    free(pl->ng.drop);
    free(pl->stats.want);
    free(pl->names.dsets);
    free(pl->names.dset_of_id);
    free(pl->names.alias_of_id);
    free(pl->names.want);
    ds_free(&pl->ds);
    model_free(&pl->m);
    job_free(&pl->j);
}

// ----------------------------------------------------------------------------
// the output's neighbourhood: inputs, the lock, the model's fingerprint (rank 0)

struct paths {
    char **v; // (n) owned
    int n, cap;
};

static void paths_free(struct paths *ps) {
    for (int i = 0; i < ps->n; i++)
        free(ps->v[i]);
    free(ps->v);
    memset(ps, 0, sizeof *ps);
}

// adds a + b (b may be ""), if it names an existing file
static int paths_add(struct paths *ps, const char *a, const char *b) {
    size_t n = strlen(a) + strlen(b) + 1;
    char *s = malloc(n);
    if (!s) return -AH_ENOMEM;
    snprintf(s, n, "%s%s", a, b);
    if (access(s, F_OK) != 0) {
        free(s);
        return 0;
    }
    if (ps->n == ps->cap) {
        int c = ps->cap * 2 + 8;
        char **nv = realloc(ps->v, (size_t)c * sizeof *nv);
        if (!nv) {
            free(s);
            return -AH_ENOMEM;
        }
        ps->v = nv;
        ps->cap = c;
    }
    ps->v[ps->n++] = s;
    return 0;
}

// the files of the model the run reads: config, index, weights, tokenizer
static int model_files(const struct model *m, struct paths *ps) {
    int rc = paths_add(ps, m->md.config_path, "");
    if (rc == 0 && m->md.index_path) rc = paths_add(ps, m->md.index_path, "");
    for (int i = 0; rc == 0 && i < m->md.n_files; i++)
        rc = paths_add(ps, m->md.files[i].path, "");
    if (rc == 0) rc = paths_add(ps, m->md.dir, "/tokenizer.json");
    return rc;
}

// every file the job reads: the job, the data (a glob's matches, a Megatron prefix's pair) and
// the model's files
static int job_inputs(const struct plan *pl, struct paths *ps) {
    const struct job *j = &pl->j;
    int rc = paths_add(ps, j->path, "");
    if (rc == 0) rc = paths_add(ps, j->data_path, "");
    if (rc == 0) rc = paths_add(ps, j->data_path, ".bin");
    if (rc == 0) rc = paths_add(ps, j->data_path, ".idx");
    glob_t g;
    if (rc == 0 && glob(j->data_path, 0, NULL, &g) == 0) {
        for (size_t i = 0; rc == 0 && i < g.gl_pathc; i++)
            rc = paths_add(ps, g.gl_pathv[i], "");
        globfree(&g);
    }
    return rc == 0 ? model_files(&pl->m, ps) : rc;
}

// rank 0, before the output is touched: no output file is an input, and no other run has it
static int output_guard(const struct plan *pl, struct outlock *lk, struct ah_error *err) {
    struct paths in = {0};
    int rc = job_inputs(pl, &in);
    if (rc < 0)
        rc = ah_fail(err, AH_ENOMEM, "%s: out of memory listing the job's files", pl->j.path);
    if (rc == 0) rc = outlock_check_inputs(pl->j.out_path, (const char *const *)in.v, in.n, err);
    paths_free(&in);
    return rc == 0 ? outlock_take(lk, pl->j.out_path, err) : rc;
}

// ----------------------------------------------------------------------------
// --resume: the job the output was made with

// parallel.KEY of a job's tree (1 when absent, as job.c defaults it)
static int par_value(const cJSON *root, const char *key) {
    const cJSON *par = cJSON_GetObjectItemCaseSensitive(root, "parallel");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(par, key);
    return cJSON_IsNumber(v) ? v->valueint : 1;
}

// the first member of object a or of object b whose value the other lacks or differs from
static const char *diff_key(const cJSON *a, const cJSON *b) {
    const cJSON *x;
    cJSON_ArrayForEach(x, a) {
        const cJSON *y = cJSON_GetObjectItemCaseSensitive(b, x->string);
        if (!y || !cJSON_Compare(x, y, true)) return x->string;
    }
    cJSON_ArrayForEach(x, b) {
        if (!cJSON_GetObjectItemCaseSensitive(a, x->string)) return x->string;
    }
    return NULL;
}

// a job key that differs between then (the output's job) and now: -AH_EINVAL naming it
static int job_differs(const struct plan *pl, const cJSON *then, const cJSON *now, const char *k,
                       struct ah_error *err) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(then, k);
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(now, k);
    const char *k2 = cJSON_IsObject(a) && cJSON_IsObject(b) ? diff_key(a, b) : NULL;
    if (k2)
        a = cJSON_GetObjectItemCaseSensitive(a, k2), b = cJSON_GetObjectItemCaseSensitive(b, k2);
    char *ta = a ? cJSON_PrintUnformatted(a) : NULL, *tb = b ? cJSON_PrintUnformatted(b) : NULL;
    int rc = ah_fail(err, AH_EINVAL,
                     "%s: was made by a different job: \"%s%s%s\" is %.60s now, %.60s then; "
                     "--resume needs the same job (or use --overwrite to start again)",
                     pl->j.out_path, k, k2 ? "." : "", k2 ? k2 : "", tb ? tb : "absent",
                     ta ? ta : "absent");
    free(ta), free(tb);
    return rc;
}

int plan_resume_job(struct plan *pl, bool quiet, struct ah_error *err) {
    struct out_peek pk; // no output, or not one: master_open says so
    out_format(pl->j.out_path)->peek(pl->j.out_path, &pk);
    char *old = pk.job;
    pk.job = NULL;
    out_peek_free(&pk);
    cJSON *then = old && strcmp(old, pl->j.text) ? cJSON_Parse(old) : NULL;
    cJSON *now = then ? cJSON_Parse(pl->j.text) : NULL;
    int rc = 0;
    if (cJSON_IsObject(then) && cJSON_IsObject(now)) {
        int s0 = par_value(then, "pipeline_stages"), s1 = par_value(now, "pipeline_stages");
        int e0 = par_value(then, "expert_parallel"), e1 = par_value(now, "expert_parallel");
        cJSON_DeleteItemFromObjectCaseSensitive(then, "parallel");
        cJSON_DeleteItemFromObjectCaseSensitive(now, "parallel");
        const char *k = diff_key(then, now);
        if (k) {
            rc = job_differs(pl, then, now, k, err);
        } else if (s0 != s1) {
            rc = ah_fail(err, AH_EINVAL,
                         "%s: was made by a different job: \"parallel.pipeline_stages\" is %d "
                         "now, %d then; its segments hold the datasets of %d stages, so "
                         "--resume needs \"pipeline_stages\": %d (replicas and "
                         "\"expert_parallel\" may change; or use --overwrite to start again)",
                         pl->j.out_path, s1, s0, s0, s0);
        } else { // the same job but for expert shards: the output keeps its job text
            if (!quiet && e0 != e1)
                fprintf(stderr,
                        "harvest: --resume with \"parallel.expert_parallel\" %d (the output was "
                        "started with %d): the rows do not depend on it\n",
                        e1, e0);
            free(pl->j.text);
            pl->j.text = old;
            old = NULL;
        }
    }
    cJSON_Delete(then);
    cJSON_Delete(now);
    free(old);
    return rc;
}

// JSON text of the model's fingerprint (caller frees)
int plan_fingerprint(const struct plan *pl, char **json, struct ah_error *err) {
    const struct model *m = &pl->m;
    struct paths ps = {0};
    int rc = model_files(m, &ps);
    if (rc < 0) rc = ah_fail(err, AH_ENOMEM, "%s: out of memory listing its files", m->md.dir);
    if (rc == 0) rc = fp_make((const char *const *)ps.v, ps.n, json, err);
    paths_free(&ps);
    return rc;
}

// ----------------------------------------------------------------------------
// token selection and write-time statistics (README "Statistics")

bool plan_stats_eligible(const struct tap_desc *d) {
    bool ok = d->dtype == TAP_F32 && tap_n_seq_axes(d) == 1;
    for (int k = 0; k < d->ndim; k++)
        ok = ok && strcmp(d->axes[k], "key") && tap_axis_kind(d->axes[k]) != TAP_AXIS_SEQ2;
    return ok;
}

// The special tokens of the model's tokenizer: the ids whose text decoding with skip_special
// drops (io/tokenizer.h keeps its table private). *ids malloc'd.
static int special_ids(struct tokenizer *t, int64_t vocab, int64_t **ids, int *n) {
    *n = 0;
    *ids = malloc(64 * sizeof **ids);
    int cap = 64;
    for (int64_t id = 0; *ids && id < vocab && id < tok_n_ids(t); id++) {
        char *a = NULL, *b = NULL;
        size_t la = 0, lb = 0;
        struct ah_error e = {0};
        bool special = tok_decode(t, &id, 1, true, &a, &la, &e) == 0 &&
                       tok_decode(t, &id, 1, false, &b, &lb, &e) == 0 && la == 0 && lb > 0;
        free(a), free(b);
        if (!special) continue;
        if (*n == cap) {
            int64_t *v = realloc(*ids, (size_t)(cap *= 2) * sizeof *v);
            if (!v) free(*ids);
            *ids = v;
            if (!v) break;
        }
        (*ids)[(*n)++] = id;
    }
    return *ids ? 0 : -AH_ENOMEM;
}

// The norm guard's activation (select.max_norm_activation): a catalogue name or an alias of one,
// with a vector a token (what statistics take: float, one sequence axis, no key axis).
static int guard_target(const struct job *j, const struct model *m, struct plan *pl,
                        struct ah_error *err) {
    const char *name = j->sel.max_norm_activation;
    char canon[TAP_NAME_MAX + 64];
    if (alias_resolve(m->family, name, canon, sizeof canon) != 1)
        snprintf(canon, sizeof canon, "%s", name);
    pl->ng.id = tap_desc_find(m->cat, m->n_cat, canon);
    if (pl->ng.id < 0)
        return ah_fail(err, AH_EINVAL,
                       "%s: \"select.max_norm_activation\": \"%s\" is not an activation of the "
                       "%s model (`harvest activations` lists them)",
                       j->path, name, m->family);
    if (!plan_stats_eligible(&m->cat[pl->ng.id]))
        return ah_fail(err, AH_EINVAL,
                       "%s: \"select.max_norm_activation\": \"%s\" is not a float vector a "
                       "token (the guard takes an activation with one sequence axis and no key "
                       "axis)",
                       j->path, name);
    pl->ng.on = true;
    return 0;
}

// "select" against the model, and which names get statistics
static int plan_select(struct job *j, const struct model *m, struct plan *pl,
                       struct ah_error *err) {
    int64_t *sp = NULL;
    int n_sp = 0, rc = 0;
    if (j->sel.skip_special && m->tok) rc = special_ids(m->tok, m->vocab, &sp, &n_sp);
    if (rc == 0) rc = select_resolve(&j->sel, m->vocab, m->tok != NULL, sp, n_sp, j->path, err);
    free(sp);
    if (rc < 0) return rc;
    if (j->sel.max_norm_multiple > 0 && (rc = guard_target(j, m, pl, err)) < 0) return rc;
    bool stats = j->statistics < 0 ? j->layout == JOB_LAYOUT_TOKEN : j->statistics == 1;
    if (!(pl->stats.want = calloc((size_t)m->n_cat + 1, 1))) return -AH_ENOMEM;
    for (int i = 0; stats && i < m->n_cat; i++)
        if (pl->names.want[i] && plan_stats_eligible(&m->cat[i]))
            pl->stats.want[i] = 1, pl->stats.n++;
    pl->sel.on = j->sel.given;
    return 0;
}

// the norm guard's drops (pl->ng.drop, corpus token indices) among prompt p's chosen positions:
// cleared in keep and counted in c (may be NULL); returns how many
static int64_t guard_drops(const struct plan *pl, int64_t p, uint8_t *keep,
                           struct select_counts *c) {
    int64_t t0 = pl->ds.off[p], t1 = t0 + pl->ds.len[p], lo = 0, hi = pl->ng.n_drop, n = 0;
    while (lo < hi) { // the first drop at or after t0
        int64_t mid = lo + (hi - lo) / 2;
        if (pl->ng.drop[mid] < t0)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (; lo < pl->ng.n_drop && pl->ng.drop[lo] < t1; lo++, n++)
        keep[pl->ng.drop[lo] - t0] = 0;
    if (c) c->kept -= n, c->dropped_norm += n;
    return n;
}

// prompt p's chosen positions into keep, its counts added to c (may be NULL)
static int64_t keep_of(const struct plan *pl, int64_t p, uint8_t *keep, struct select_counts *c) {
    const struct ds_prompts *ds = &pl->ds;
    // with pack, contexts of one document share a source index: key on the context itself
    int64_t key = pl->j.pack ? p : ds->source[p];
    int64_t n = select_context(&pl->j.sel, key, ds->ids + ds->off[p], ds->len[p], keep, c);
    return n > 0 && pl->ng.n_drop ? n - guard_drops(pl, p, keep, c) : n;
}

int64_t plan_keep(const struct plan *pl, int64_t p, uint8_t *keep) {
    return keep_of(pl, p, keep, NULL);
}

// the stored offsets and the counts of selection, from the corpus alone (every rank alike)
static int plan_selection(struct plan *pl, struct ah_error *err) {
    const struct ds_prompts *ds = &pl->ds;
    free(pl->sel.st_off); // the norm guard's pass folds its drops in with a second call
    memset(&pl->sel.sc, 0, sizeof pl->sel.sc);
    pl->sel.st_off = malloc(((size_t)ds->n + 1) * sizeof *pl->sel.st_off);
    uint8_t *keep = malloc((size_t)pl->place.S + 1);
    int rc = pl->sel.st_off && keep ? 0 : -AH_ENOMEM;
    int64_t at = 0;
    for (int64_t p = 0; rc == 0 && p < ds->n; p++) {
        pl->sel.st_off[p] = at;
        int64_t n = keep_of(pl, p, keep, &pl->sel.sc);
        if (n < 0) rc = (int)n;
        at += n > 0 ? n : 0;
    }
    free(keep);
    if (rc < 0) return ah_fail(err, AH_ENOMEM, "out of memory: the selection of a prompt");
    pl->sel.st_off[ds->n] = at;
    pl->sel.n_stored = pl->j.layout == JOB_LAYOUT_TOKEN ? at : ds->n_tokens;
    return 0;
}

int plan_index_tables(const struct plan *pl, int64_t **ids, int64_t **pos, int64_t **count,
                      uint8_t **selected, struct ah_error *err) {
    *ids = *pos = *count = NULL;
    *selected = NULL;
    if (!pl->sel.on) return 0;
    const struct ds_prompts *ds = &pl->ds;
    bool tok = pl->j.layout == JOB_LAYOUT_TOKEN;
    uint8_t *keep = malloc((size_t)pl->place.S + 1);
    if (tok) {
        *ids = malloc(((size_t)pl->sel.n_stored + 1) * sizeof **ids);
        *pos = malloc(((size_t)pl->sel.n_stored + 1) * sizeof **pos);
        *count = malloc(((size_t)ds->n + 1) * sizeof **count);
    } else {
        *selected = malloc((size_t)ds->n_tokens + 1);
    }
    bool ok = keep && (tok ? *ids && *pos && *count : *selected != NULL);
    for (int64_t p = 0, at = 0; ok && p < ds->n; p++) {
        ok = plan_keep(pl, p, tok ? keep : *selected + ds->off[p]) >= 0;
        for (int64_t t = 0; ok && tok && t < ds->len[p]; t++)
            if (keep[t]) (*ids)[at] = ds->ids[ds->off[p] + t], (*pos)[at++] = t;
        if (tok) (*count)[p] = pl->sel.st_off[p + 1] - pl->sel.st_off[p];
    }
    free(keep);
    if (ok) return 0;
    free(*ids), free(*pos), free(*count), free(*selected);
    *ids = *pos = *count = NULL;
    *selected = NULL;
    return ah_fail(err, AH_ENOMEM, "out of memory: the /tokens tables of %lld tokens",
                   (long long)ds->n_tokens);
}

// The job's "compute" set for the forward passes, before the model loads (GPT-2 and NeoX borrow
// their BF16 matrices only under bf16, model/lnblock.h)
static int plan_set_compute(const struct job *j, struct ah_error *err) {
    char msg[200] = "";
    if (op_set_compute(j->compute == JOB_COMPUTE_BF16 ? OP_COMPUTE_BF16 : OP_COMPUTE_F32, msg,
                       sizeof msg) < 0)
        return ah_fail(err, AH_EIO, "%s: \"compute\": \"bf16\": %s", j->path, msg);
    return 0;
}

// ... and checked once it has: bf16 needs a model whose matrices are BF16 in memory (BF16
// checkpoints; float32/float16 checkpoints are refused, not converted)
static int plan_compute(const struct job *j, const struct model *m, struct ah_error *err) {
    const char *kind = "";
    if (j->compute == JOB_COMPUTE_BF16) model_stage_bytes(m, 0, m->n_blocks, false, 0, 1, &kind);
    if (j->compute == JOB_COMPUTE_BF16 && strncmp(kind, "BF16", 4))
        return ah_fail(err, AH_EINVAL,
                       "%s: \"compute\": \"bf16\" needs a checkpoint with BF16 weight matrices; "
                       "this %s model's are held as %s (use \"float32\")",
                       j->path, m->family, kind);
    return 0;
}

static int plan_check(struct plan *pl, const char *job_path, int world, struct ah_error *err) {
    int rc;
    struct job *j = &pl->j;
    struct model *m = &pl->m;
    if ((rc = job_load(j, job_path, err)) < 0) return rc;
    if (strlen(j->out_path) > OUT_PATH_MAX)
        return ah_fail(err, AH_EINVAL,
                       "%s: \"output.path\" is %zu bytes long (resolved: %.60s...); at most %d, "
                       "as the files beside it add their names",
                       j->path, strlen(j->out_path), j->out_path, OUT_PATH_MAX);
    if ((rc = plan_set_compute(j, err)) < 0) return rc;
    // bound from the headers alone: the values a rank computes with are checked once its part of
    // the grid is known (run.c, normguard.c: model_check)
    struct model_part none = {.n_shards = 1};
    if ((rc = model_load(m, j->model, true, &none, err)) < 0) return rc;
    if ((rc = plan_compute(j, m, err)) < 0) return rc;
    pl->names.want = calloc((size_t)m->n_cat, 1);
    pl->names.dset_of_id = calloc((size_t)m->n_cat, sizeof(int));
    pl->names.alias_of_id = calloc((size_t)m->n_cat, sizeof(char *));
    if (!pl->names.want || !pl->names.dset_of_id || !pl->names.alias_of_id) return -AH_ENOMEM;
    if ((rc = job_select(j, m->cat, m->n_cat, m->family, pl->names.want, pl->names.alias_of_id,
                         err)) < 0)
        return rc;
    if (j->layout == JOB_LAYOUT_TOKEN && (rc = check_token_layout(j, m, pl->names.want, err)) < 0)
        return rc;
    if ((rc = plan_select(j, m, pl, err)) < 0) return rc;
    if (j->max_seq_len > m->max_pos)
        return ah_fail(err, AH_EINVAL,
                       "%s: \"max_seq_len\": %d is longer than the model's "
                       "max_position_embeddings %d",
                       j->path, j->max_seq_len, m->max_pos);
    if (j->expert_parallel != 1 && model_n_experts(m) == 0)
        return ah_fail(err, AH_EINVAL,
                       "%s: \"parallel.expert_parallel\": %d, but the %s model has no experts "
                       "(expected 1)",
                       j->path, j->expert_parallel, m->family);
    if (j->expert_parallel > plan_max_shards(m))
        return ah_fail(err, AH_EINVAL,
                       "%s: \"parallel.expert_parallel\": %d shards for %d experts (at most one "
                       "shard an expert, and at most %d)",
                       j->path, j->expert_parallel, model_n_experts(m), PLAN_MAX_SHARDS);
    if (world % (j->pipeline_stages * j->expert_parallel))
        return ah_fail(err, AH_EINVAL,
                       "%s: \"parallel.pipeline_stages\" x \"parallel.expert_parallel\" = %d x %d "
                       "does not divide the %d ranks (world size = pipeline_stages x "
                       "expert_parallel x data-parallel replicas)",
                       j->path, j->pipeline_stages, j->expert_parallel, world);
    return 0;
}

int plan_load(struct plan *pl, const char *job_path, int world, struct outlock *lock,
              struct ah_error *err) {
    int rank = 0, rc = run_agree(plan_check(pl, job_path, world, err), err);
    CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    if (rc == 0) rc = run_agree(rank == 0 ? output_guard(pl, lock, err) : 0, err);
    return rc;
}

int run_agree(int rc, struct ah_error *err) {
    int rank = 0, size = 1;
    CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &size));
    struct {
        int code, rank;
    } mine = {rc < 0 ? -rc : 0, rank}, worst; // MAXLOC: the worst code, then the lowest rank
    CHECK_MPI(MPI_Allreduce(&mine, &worst, 1, MPI_2INT, MPI_MAXLOC, MPI_COMM_WORLD));
    if (worst.code == 0) return 0;
    int from = worst.rank;
    if (size > 1 && err) { // rank `from`'s own message, for rank 0 to print
        char msg[sizeof err->msg];
        if (rank == from)
            snprintf(msg, sizeof msg, "%s", err->msg[0] ? err->msg : ah_strerror(-worst.code));
        CHECK_MPI(MPI_Bcast(msg, (int)sizeof msg, MPI_CHAR, from, MPI_COMM_WORLD));
        if (from != 0)
            snprintf(err->msg, sizeof err->msg, "[rank %d] %.1000s", from, msg);
        else
            snprintf(err->msg, sizeof err->msg, "%s", msg);
        err->code = -worst.code;
    }
    return -worst.code;
}

// The data: rank 0 reads the corpus once, its token ids going to a spill file next to the output
// that every rank then maps (so they cost the page cache, once a node); the per-prompt tables (24
// bytes a prompt) are broadcast. Collective.
int plan_data(struct plan *pl, int rank, struct ah_error *err) {
    const struct job *j = &pl->j;
    const struct model *m = &pl->m;
    struct ds_prompts *ds = &pl->ds;
    char spill[4200];
    snprintf(spill, sizeof spill, "%s.tokens", j->out_path);
    int rc = 0;
    FILE *probe = rank == 0 ? fopen(spill, "ab") : NULL; // the output's folder must take files
    if (rank == 0 && !probe)
        rc = ah_fail(err, AH_EIO,
                     "%s: cannot create the output file (check that its folder exists and is "
                     "writable): %s",
                     j->out_path, strerror(errno));
    if (probe) fclose(probe);
    if (rank == 0 && rc == 0) {
        int64_t cap = j->max_seq_len ? j->max_seq_len : m->max_pos;
        struct ds_spec spec = {j->data_path,      j->data_format,
                               j->data_field,     m->tok,
                               m->md.dir,         j->pack ? j->max_seq_len : 0,
                               j->pack_separator, j->pack_bos,
                               j->fields,         j->n_fields}; // data.fields
        rc = ds_load(ds, &spec, cap, m->vocab, spill, err);
    }
    if ((rc = run_agree(rc, err)) < 0) {
        if (rank == 0) remove(spill); // a half-written spill file is of no use
        return rc;
    }
    int64_t counts[6] = {ds->n,       ds->n_tokens,    ds->n_lines,
                         ds->n_empty, ds->n_truncated, ds->longest};
    CHECK_MPI(MPI_Bcast(counts, 6, MPI_INT64_T, 0, MPI_COMM_WORLD));
    if (rank != 0) {
        ds->n = counts[0], ds->n_tokens = counts[1], ds->n_lines = counts[2];
        ds->n_empty = counts[3], ds->n_truncated = counts[4], ds->longest = counts[5];
        ds->source = malloc((size_t)(ds->n + 1) * sizeof *ds->source);
        ds->len = malloc((size_t)(ds->n + 1) * sizeof *ds->len);
        ds->off = malloc((size_t)(ds->n + 1) * sizeof *ds->off);
        if (!ds->source || !ds->len || !ds->off)
            rc = ah_fail(err, AH_ENOMEM, "out of memory: 3 tables of %lld prompts (%zu bytes)",
                         (long long)ds->n, 3 * (size_t)(ds->n + 1) * sizeof *ds->source);
    }
    if ((rc = run_agree(rc, err)) < 0) return rc;
    for (int64_t at = 0; at < ds->n; at += 1 << 26) { // MPI counts are ints
        int cnt = (int)(ds->n - at < (1 << 26) ? ds->n - at : 1 << 26);
        CHECK_MPI(MPI_Bcast(ds->source + at, cnt, MPI_INT64_T, 0, MPI_COMM_WORLD));
        CHECK_MPI(MPI_Bcast(ds->len + at, cnt, MPI_INT64_T, 0, MPI_COMM_WORLD));
        CHECK_MPI(MPI_Bcast(ds->off + at, cnt, MPI_INT64_T, 0, MPI_COMM_WORLD));
    }
    if (rank != 0) rc = ds_map_ids(ds, spill, err);
    rc = run_agree(rc, err);
    CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD)); // every rank has it mapped: the name can go
    if (rank == 0) remove(spill);
    return rc;
}

// The rest of the plan, from the data. Identical on every rank.
int plan_finish(struct plan *pl, struct ah_error *err) {
    const struct job *j = &pl->j;
    const struct model *m = &pl->m;
    const struct ds_prompts *ds = &pl->ds;
    pl->place.S = j->max_seq_len ? j->max_seq_len : (ds->longest > 0 ? ds->longest : 1);
    int deepest = -1;
    for (int i = 0; i < m->n_cat; i++)
        if (pl->names.want[i]) {
            pl->names.n_dsets++;
            deepest = m->cat[i].block > deepest ? m->cat[i].block : deepest;
        }
    int prof = normprofile_deepest(pl); // the job key norm_profile's values are computed too
    deepest = prof > deepest ? prof : deepest;
    int sae = saes_deepest(pl); // and the sites of the job key saes
    deepest = sae > deepest ? sae : deepest;
    pl->place.blk_end = deepest + 1 < m->n_blocks ? deepest + 1 : m->n_blocks;
    if (j->pipeline_stages >
        (pl->place.blk_end > 0 ? pl->place.blk_end : 1)) // 0 blocks: embeddings only
        return ah_fail(err, AH_EINVAL,
                       "%s: \"parallel.pipeline_stages\": %d stages for the %d blocks this job "
                       "runs (at most one stage a block)",
                       j->path, j->pipeline_stages, pl->place.blk_end);
    pl->names.dsets = calloc((size_t)pl->names.n_dsets + 1, sizeof *pl->names.dsets);
    if (!pl->names.dsets) return -AH_ENOMEM;
    return plan_place(pl, err);
}

// "select" keeps no token of the corpus: an output without rows (and statistics of nothing)
static int none_kept(const struct plan *pl, struct ah_error *err) {
    const struct select_counts *c = &pl->sel.sc;
    return ah_fail(err, AH_EINVAL,
                   "%s: \"select\" keeps none of the corpus's %lld tokens (\"select.skip_first\" "
                   "leaves out %lld, \"select.skip_token_ids\" %lld, "
                   "\"select.tokens_per_context\" %lld, the norm guard "
                   "\"select.max_norm_multiple\" %lld): nothing to store, nothing written",
                   pl->j.path, (long long)pl->ds.n_tokens, (long long)c->skipped_first,
                   (long long)c->skipped_id, (long long)c->not_chosen, (long long)c->dropped_norm);
}

int plan_place(struct plan *pl, struct ah_error *err) {
    const struct job *j = &pl->j;
    const struct model *m = &pl->m;
    const struct ds_prompts *ds = &pl->ds;
    pl->sel.n_stored = ds->n_tokens;
    if (pl->sel.on) {
        int rc = plan_selection(pl, err);
        if (rc < 0) return rc;
        if (pl->sel.sc.kept == 0 && ds->n_tokens > 0) return none_kept(pl, err);
    }
    bool stored = pl->sel.on && j->layout == JOB_LAYOUT_TOKEN; // rows: the chosen tokens
    build_dsets(m, pl->names.want, pl->names.alias_of_id, j->layout, pl->place.S, ds->n,
                pl->sel.n_stored, pl->names.dsets, pl->names.dset_of_id);
    pl->place.B = j->batch_size;
    pl->place.pc =
        (struct placement){ds->n, pl->sel.n_stored, stored ? pl->sel.st_off : ds->off, pl->place.B};
    pl->place.K = place_batches(&pl->place.pc);
    return 0;
}
