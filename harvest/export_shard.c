// export_shard.c - one training shard on disk, in any of io/shardfmt.h's formats (HDF5:
// io/h5shard.c; npy: io/npyout.c; safetensors: io/stshard.c): the arrays, attributes and
// statistics a shard holds, and whether a shard already on disk is the one the export would
// write (then it is kept).
#define _POSIX_C_SOURCE 200809L // defines: access
#include "harvest/export.h"
#include "io/feistel.h"
#include "io/h5src.h"
#include "io/shardfmt.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *const xshard_cols[4] = {"input_ids", "prompt_index", "position", "source_index"};

static const struct sf_format *sf_of(enum xfmt f) {
    return f == XF_NPY ? &sf_npy : f == XF_SAFETENSORS ? &sf_safetensors : &sf_hdf5;
}

int xshard_alloc(struct xshard *b, const struct xsrc *s, int64_t n_tokens) {
    memset(b, 0, sizeof *b);
    b->n_tokens = n_tokens;
    b->act = calloc((size_t)s->n_names, sizeof *b->act);
    if (!b->act) return -1;
    for (int i = 0; i < s->n_names; i++) {
        size_t n = (size_t)(n_tokens * s->names[i].elems) * xkind_size(s->names[i].dst);
        if (!(b->act[i] = malloc(n ? n : 1))) return -1;
    }
    for (int c = 0; c < 4; c++)
        if (!(b->cols[c] = malloc((size_t)(n_tokens ? n_tokens : 1) * sizeof(int64_t)))) return -1;
    return 0;
}

void xshard_free(struct xshard *b, int n_names) {
    for (int i = 0; b->act && i < n_names; i++)
        free(b->act[i]);
    free(b->act);
    for (int c = 0; c < 4; c++)
        free(b->cols[c]);
    memset(b, 0, sizeof *b);
}

static uint64_t shard_checksum(const struct xshard *b, const struct xsrc *s) {
    uint64_t h = FNV64_INIT;
    for (int i = 0; i < s->n_names; i++)
        h = fnv64_words(h, b->act[i],
                        (size_t)(b->n_tokens * s->names[i].elems) * xkind_size(s->names[i].dst));
    for (int c = 0; c < 4; c++)
        h = fnv64_words(h, b->cols[c], (size_t)b->n_tokens * sizeof(int64_t));
    return h;
}

// 1 if the source has statistics for name (/stats/NAME, written by `harvest stats`)
static bool has_stats(const struct xsrc *s, const char *name) {
    char path[300];
    snprintf(path, sizeof path, "stats/%s", name);
    return h5src_has(s->f, path);
}

bool xshard_stuck(void) {
    return h5src_stuck();
}

void xshard_set_stuck(void) {
    h5src_set_stuck();
}

// ----------------------------------------------------------------------------
// the formats (io/shardfmt.h): arrays NAME, tokens.COLUMN and (unless the format copies them
// whole) stats.NAME.KEY; the shard's attributes (README "Training shards"), storage.NAME and
// source_storage.NAME of each name, and stats_names: the names whose statistics the shard holds

const char *xfmt_name(enum xfmt f) {
    return f == XF_NPY ? "npy" : f == XF_SAFETENSORS ? "safetensors" : "hdf5";
}

const char *xfmt_ext(enum xfmt f) {
    return sf_of(f)->ext;
}

int xfmt_parse(const char *name, enum xfmt *f) {
    for (int k = XF_HDF5; k <= XF_SAFETENSORS; k++)
        if (!strcmp(name, xfmt_name((enum xfmt)k))) {
            *f = (enum xfmt)k;
            return 0;
        }
    return -1;
}

static enum sf_dtype sf_kind(enum xkind k) {
    return k == XK_F32 ? SF_F32 : k == XK_F16 ? SF_F16 : k == XK_BF16 ? SF_BF16 : SF_I64;
}

// the names with statistics in the source, comma-separated, into buf
static void stats_names(const struct xsrc *s, char *buf, size_t n) {
    size_t at = 0;
    buf[0] = 0;
    for (int i = 0; i < s->n_names; i++)
        if (has_stats(s, s->names[i].name) && at < n)
            at += (size_t)snprintf(buf + at, n - at, "%s%s", at ? "," : "", s->names[i].name);
}

static const char *kind_storage(enum xkind k) {
    return k == XK_BF16 ? "bfloat16-as-uint16" : xkind_name(k);
}

static int put_attrs(struct sf_shard *w, const struct xsrc *s, const struct xshard_meta *m,
                     uint64_t sum) {
    char v[8192], key[300];
    int rc = sf_attr(w, "format", "harvest-shard") | sf_attr_i64(w, "format_version", 1) |
             sf_attr(w, "split", m->split);
    const char *ik[] = {"shard", "n_tokens", "first_position", "seed"};
    const int64_t iv[] = {m->shard, m->n_tokens, m->first_position, m->seed};
    for (int k = 0; k < 4; k++)
        rc |= sf_attr_i64(w, ik[k], iv[k]);
    rc |= sf_attr_f64(w, "val_fraction", m->val_fraction);
    const char *uk[] = {"source_data_checksum", "checksum", "export_id"};
    const uint64_t uv[] = {m->data_checksum, sum, m->export_id};
    for (int k = 0; k < 3; k++)
        rc |= sf_attr_u64(w, uk[k], uv[k]);
    for (int i = 0; i < s->n_names; i++) {
        snprintf(key, sizeof key, "storage.%s", s->names[i].name);
        rc |= sf_attr(w, key, kind_storage(s->names[i].dst));
        snprintf(key, sizeof key, "source_storage.%s", s->names[i].name);
        rc |= sf_attr(w, key, xkind_name(s->names[i].src));
    }
    stats_names(s, v, sizeof v);
    return rc | sf_attr(w, "stats_names", v);
}

int xshard_write(const char *dir, const char *file, const struct xshard *b, const struct xsrc *s,
                 const struct xshard_meta *m, uint64_t *sum, struct ah_error *err) {
    struct sf_shard w;
    void **st = NULL; // the statistics arrays read from the source, kept until w is written
    int n_st = 0;
    char key[300], path[4200];
    int64_t shape[SF_MAX_DIMS] = {b->n_tokens};
    snprintf(path, sizeof path, "%s/%s", dir, file);
    *sum = shard_checksum(b, s);
    sf_create(&w, sf_of(m->fmt), path);
    sf_set_source(&w, s->path);
    int rc = put_attrs(&w, s, m, *sum);
    for (int i = 0; rc == 0 && i < s->n_names; i++) {
        const struct xname *x = &s->names[i];
        memcpy(shape + 1, x->dims, (size_t)x->ndim * sizeof *shape);
        rc = sf_put(&w, x->name, sf_kind(x->dst), x->ndim + 1, shape, b->act[i]);
    }
    for (int c = 0; rc == 0 && c < 4; c++) {
        snprintf(key, sizeof key, "tokens.%s", xshard_cols[c]);
        rc = sf_put(&w, key, SF_I64, 1, shape, b->cols[c]);
    }
    for (int i = 0; rc == 0 && !w.fmt->copies_stats && i < s->n_names; i++) {
        snprintf(key, sizeof key, "stats/%s", s->names[i].name);
        char prefix[300];
        snprintf(prefix, sizeof prefix, "stats.%s", s->names[i].name);
        if (has_stats(s, s->names[i].name))
            rc = h5src_group_to_shard(s->f, key, prefix, &w, &st, &n_st);
    }
    if (rc < 0) {
        sf_abort(&w);
        h5src_bufs_free(st, n_st);
        return ah_fail(err, AH_ENOMEM,
                       "%s: cannot gather the shard (out of memory, or the "
                       "source's statistics unreadable)",
                       path);
    }
    rc = sf_finish(&w, err);
    h5src_bufs_free(st, n_st);
    return rc;
}

// the attribute key of r is v (unsigned decimal)
static bool attr_is(const struct sf_shard *r, const char *key, uint64_t v) {
    const char *a = sf_get(r, key);
    char *end;
    errno = 0;
    unsigned long long got = a ? strtoull(a, &end, 10) : 0;
    return a && *a && !*end && !errno && got == v;
}

// array name of r: kind k, n rows of x's shape (x NULL: scalars); its bytes chained into *h
static bool array_is(const struct sf_shard *r, const char *name, enum xkind k,
                     const struct xname *x, int64_t n, uint64_t *h) {
    const struct sf_array *a = sf_find(r, name);
    int nd = x ? x->ndim : 0;
    bool ok = a && a->t == sf_kind(k) && a->ndim == nd + 1 && a->shape[0] == n;
    for (int j = 0; ok && j < nd; j++)
        ok = a->shape[j + 1] == x->dims[j];
    if (ok) *h = fnv64_words(*h, a->data, a->nbytes);
    return ok;
}

// the number of names of a comma-separated list, and whether it holds name (n bytes)
static int list_count(const char *list, const char *name, size_t n, bool *has) {
    int count = 0;
    for (const char *p = list; *p; count++) {
        size_t k = strcspn(p, ",");
        if (name && k == n && !strncmp(p, name, n)) *has = true;
        p += k + (p[k] == ',');
    }
    return count;
}

// the same names in two comma-separated lists, in any order (an HDF5 shard lists its /stats in
// name order)
static bool same_names(const char *a, const char *b) {
    for (const char *p = a; *p;) {
        size_t k = strcspn(p, ",");
        bool has = false;
        list_count(b, p, k, &has);
        if (!has) return false;
        p += k + (p[k] == ',');
    }
    return list_count(a, NULL, 0, NULL) == list_count(b, NULL, 0, NULL);
}

int xshard_verify(const char *dir, const char *file, const struct xsrc *s,
                  const struct xshard_meta *m, uint64_t *sum_out) {
    struct sf_shard r;
    char want[8192], key[300], path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    if (access(path, R_OK) != 0) return 0;
    if (sf_open(&r, sf_of(m->fmt), path) != 0) return 0;
    const char *split = sf_get(&r, "split"), *have = sf_get(&r, "stats_names");
    const char *c = sf_get(&r, "checksum");
    uint64_t h = FNV64_INIT, sum = c ? strtoull(c, NULL, 10) : 0;
    stats_names(s, want, sizeof want);
    bool ok = split && !strcmp(split, m->split) && have && same_names(have, want) &&
              attr_is(&r, "export_id", m->export_id) && attr_is(&r, "checksum", sum) &&
              attr_is(&r, "n_tokens", (uint64_t)m->n_tokens) &&
              attr_is(&r, "shard", (uint64_t)m->shard) && attr_is(&r, "seed", (uint64_t)m->seed) &&
              attr_is(&r, "source_data_checksum", m->data_checksum);
    for (int i = 0; ok && i < s->n_names; i++)
        ok = array_is(&r, s->names[i].name, s->names[i].dst, &s->names[i], m->n_tokens, &h);
    for (int k = 0; ok && k < 4; k++) {
        snprintf(key, sizeof key, "tokens.%s", xshard_cols[k]);
        ok = array_is(&r, key, XK_I64, NULL, m->n_tokens, &h);
    }
    sf_close(&r);
    *sum_out = sum;
    return ok && h == sum;
}
