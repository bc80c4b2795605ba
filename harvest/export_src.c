// export_src.c - `harvest export`'s source: a harvest output read through io/h5src.h, a block of
// prompts at a time (large runs of rows of the master's datasets, read in their stored type with
// no conversion; the virtual datasets map them onto the segment files).
#define _POSIX_C_SOURCE 200809L // defines: strdup, strtok_r, access
#include "harvest/export.h"
#include "io/feistel.h"
#include "io/h5out.h"
#include "io/h5src.h"
#include "io/halfconv.h"
#include "model/tap.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *xkind_name(enum xkind k) {
    static const char *const n[] = {"float32", "float16", "bfloat16", "int64"};
    return n[k];
}

size_t xkind_size(enum xkind k) {
    return k == XK_F32 ? 4 : k == XK_I64 ? 8 : 2;
}

void xkind_convert(void *dst, enum xkind dk, const void *src, enum xkind sk, int64_t n) {
    if (dk == sk) {
        memcpy(dst, src, (size_t)n * xkind_size(dk));
        return;
    }
    const uint16_t *h = src;
    const float *f = src;
    for (int64_t k = 0; k < n; k++) {
        float v = sk == XK_F32 ? f[k] : sk == XK_F16 ? hc_f16_to_f32(h[k]) : hc_bf16_to_f32(h[k]);
        if (dk == XK_F32)
            ((float *)dst)[k] = v;
        else
            ((uint16_t *)dst)[k] = dk == XK_F16 ? hc_f32_to_f16(v) : hc_f32_to_bf16(v);
    }
}

// ----------------------------------------------------------------------------
// which prompts every dataset holds (a stopped output lists the rows of complete batches)

static int mark_done(struct xsrc *s, int n_datasets, struct ah_error *err) {
    int64_t N = s->n_prompts;
    if (s->complete == 1) {
        memset(s->done, 1, (size_t)N);
        return 0;
    }
    char *text = h5src_attr_str(s->f, "segments");
    cJSON *a = text ? cJSON_Parse(text) : NULL;
    uint8_t *cover = malloc((size_t)N + 1);
    int rc = cJSON_IsArray(a) && cover
                 ? 0
                 : ah_fail(err, AH_EFORMAT, "%s: unreadable \"segments\" attribute", s->path);
    memset(s->done, 1, (size_t)N);
    for (int i = 0; rc == 0 && i < n_datasets; i++) {
        memset(cover, 0, (size_t)N);
        const cJSON *o, *u;
        cJSON_ArrayForEach(o, a) {
            const cJSON *ds = cJSON_GetObjectItemCaseSensitive(o, "datasets");
            const cJSON *runs = cJSON_GetObjectItemCaseSensitive(o, "runs");
            if (cJSON_GetArraySize(ds) != 2 || !cJSON_IsArray(runs)) continue;
            if (i < cJSON_GetArrayItem(ds, 0)->valueint || i >= cJSON_GetArrayItem(ds, 1)->valueint)
                continue;
            cJSON_ArrayForEach(u, runs) {
                int64_t p0 = (int64_t)cJSON_GetArrayItem(u, 0)->valuedouble;
                int64_t p1 = (int64_t)cJSON_GetArrayItem(u, 1)->valuedouble;
                for (int64_t p = p0 < 0 ? 0 : p0; p < p1 && p < N; p++)
                    cover[p] = 1;
            }
        }
        for (int64_t p = 0; p < N; p++)
            s->done[p] &= cover[p];
    }
    free(cover);
    cJSON_Delete(a);
    free(text);
    return rc;
}

// ----------------------------------------------------------------------------
// the datasets

// Fills x from dataset NAME; returns 0, 1 if it has no token rows (why in *why), -1 on failure.
static int describe(struct h5src *f, const char *name, bool *token_layout, struct xname *x,
                    const char **why) {
    char path[300], axes[X_MAX_DIMS + 1][64];
    snprintf(path, sizeof path, "activations/%s", name);
    memset(x, 0, sizeof *x);
    snprintf(x->name, sizeof x->name, "%s", name);
    if (!(x->ds = h5src_dset(f, path))) return -1;
    int64_t d[X_MAX_DIMS + 1];
    int nd = h5src_dset_dims(x->ds, d, X_MAX_DIMS + 1);
    int na = h5src_dset_strs(x->ds, "stored_axes", axes[0], 64, X_MAX_DIMS + 1);
    int t = h5src_dset_kind(x->ds);
    if (nd < 1 || na != nd || t < 0) return -1;
    x->src = t == SF_I64 ? XK_I64 : t == SF_F32 ? XK_F32 : t == SF_BF16 ? XK_BF16 : XK_F16;
    *token_layout = !strcmp(axes[0], "token");
    int seq = -1, n_seq = 0, n_key = 0;
    for (int k = 1; k < nd; k++) {
        enum tap_axis_kind kind = tap_axis_kind(axes[k]);
        if (kind == TAP_AXIS_SEQ && strcmp(axes[k], "key")) seq = k, n_seq++;
        n_key += kind == TAP_AXIS_SEQ2 || !strcmp(axes[k], "key");
    }
    x->outer = x->inner = x->elems = 1;
    if (*token_layout) {
        for (int k = 1; k < nd; k++)
            x->dims[x->ndim++] = (int64_t)d[k], x->elems *= (int64_t)d[k];
        x->inner = x->elems;
        x->src_bytes = (size_t)x->elems * xkind_size(x->src);
        return 0;
    }
    if (n_key || n_seq != 1) {
        *why = n_key ? "it has a key axis" : "it has no single sequence axis";
        return 1;
    }
    for (int k = 1; k < nd; k++) {
        if (k == seq) continue;
        x->dims[x->ndim++] = (int64_t)d[k];
        x->elems *= (int64_t)d[k];
        *(k < seq ? &x->outer : &x->inner) *= (int64_t)d[k];
    }
    x->src_rows = (int64_t)d[seq];
    x->src_bytes = (size_t)(x->elems * x->src_rows) * xkind_size(x->src);
    return 0;
}

static int add_name(struct xsrc *s, char **have, int n_have, const char *name, const char *list,
                    enum xkind dst, bool explicit, struct ah_error *err) {
    struct xname x;
    const char *why = "";
    bool tok = false;
    int k = 0;
    while (k < n_have && strcmp(have[k], name))
        k++;
    if (k == n_have)
        return ah_fail(err, AH_EINVAL,
                       "%s: --names: no dataset \"%s\" in /activations (it has: %s)", s->path, name,
                       list);
    int r = describe(s->f, name, &tok, &x, &why);
    if (r < 0) {
        h5src_dset_close(x.ds);
        return ah_fail(err, AH_EFORMAT, "%s: /activations/%s: unreadable (no stored_axes?)",
                       s->path, name);
    }
    if (r == 1) {
        h5src_dset_close(x.ds);
        if (!explicit) return 0;
        return ah_fail(err, AH_EINVAL, "%s: --names: \"%s\" has no token rows (%s)", s->path, name,
                       why);
    }
    s->token_layout = tok;
    x.dst = x.src == XK_I64 || dst == XK_I64 ? x.src : dst; // XK_I64: as stored
    s->names[s->n_names++] = x;
    return 0;
}

// every dataset of /activations, in name order, comma-separated (for messages)
static char *list_names(char **have, int n) {
    size_t cap = 256, len = 0;
    char *out = calloc(cap, 1);
    for (int k = 0; out && k < n; k++) {
        const char *buf = have[k];
        size_t l = strlen(buf);
        if (len + l + 3 > cap) {
            char *o = realloc(out, cap = 2 * (len + l + 3));
            if (!o) break;
            out = o;
        }
        len += (size_t)sprintf(out + len, "%s%s", k ? ", " : "", buf);
    }
    return out;
}

static int pick_names(struct xsrc *s, const char *csv, enum xkind dst, int *n_datasets,
                      struct ah_error *err) {
    int n = 0, rc = 0;
    char **have = h5src_names(s->f, "activations", &n);
    if (!have) return ah_fail(err, AH_EFORMAT, "%s: no /activations group", s->path);
    char *list = list_names(have, n);
    *n_datasets = n;
    s->names = calloc((size_t)n + 1, sizeof *s->names);
    if (!s->names || !list) rc = ah_fail(err, AH_ENOMEM, "out of memory");
    if (rc == 0 && csv) {
        char *copy = strdup(csv), *save = NULL;
        for (char *t = copy ? strtok_r(copy, ",", &save) : NULL; t && rc == 0;
             t = strtok_r(NULL, ",", &save)) {
            for (int k = 0; k < s->n_names; k++)
                if (!strcmp(s->names[k].name, t))
                    rc = ah_fail(err, AH_EINVAL, "--names: \"%s\" given twice", t);
            if (rc == 0 && s->n_names == n)
                rc = ah_fail(err, AH_EINVAL, "--names: more names than datasets");
            if (rc == 0) rc = add_name(s, have, n, t, list, dst, true, err);
        }
        free(copy);
    }
    for (int k = 0; rc == 0 && !csv && k < n; k++)
        rc = add_name(s, have, n, have[k], list, dst, false, err);
    if (rc == 0 && s->n_names == 0)
        rc = ah_fail(err, AH_EINVAL, "%s: no dataset with token rows to export (it has: %s)",
                     s->path, list);
    free(list);
    h5src_names_free(have, n);
    return rc;
}

// ----------------------------------------------------------------------------
// open, blocks

static int alloc_blocks(struct xsrc *s, int64_t block_bytes) {
    size_t row = 0, elems = 1;
    int64_t longest = 1;
    for (int i = 0; i < s->n_names; i++) {
        row += s->names[i].src_bytes;
        if ((size_t)s->names[i].elems > elems) elems = (size_t)s->names[i].elems;
    }
    for (int64_t p = 0; p < s->n_prompts; p++)
        if (s->length[p] > longest) longest = s->length[p];
    int64_t cap = block_bytes / (int64_t)(row ? row : 1);
    if (s->token_layout && cap < longest) cap = longest;
    if (cap < 1) cap = 1;
    s->blk_prompts = cap;
    int64_t tokens = s->token_layout ? cap : cap * s->names[0].src_rows;
    for (int64_t k = 0; !s->token_layout && k < s->n_names; k++)
        if (cap * s->names[k].src_rows > tokens) tokens = cap * s->names[k].src_rows;
    if (s->n_names < 1 || tokens < 1) return -1;
    s->blk = calloc((size_t)s->n_names, sizeof *s->blk);
    s->ids = malloc((size_t)tokens * sizeof *s->ids);
    if (s->pos_ds && !(s->pos = malloc((size_t)tokens * sizeof *s->pos))) return -1;
    if (s->sel_ds && !(s->sel = malloc((size_t)tokens))) return -1;
    s->row = malloc(elems * 8);
    if (!s->blk || !s->ids || !s->row) return -1;
    for (int i = 0; i < s->n_names; i++)
        if (!(s->blk[i] = malloc((size_t)cap * s->names[i].src_bytes))) return -1;
    return 0;
}

// A token-layout output written with "select" stores only the chosen tokens: prompt p's rows are
// token_offset[p] .. token_offset[p + 1] (the last up to n_tokens), not its length; the export
// walks stored rows, so `length` becomes that count.
static void stored_rows(struct xsrc *s) {
    for (int64_t p = 0; p < s->n_prompts; p++) {
        int64_t end = p + 1 < s->n_prompts ? s->token_offset[p + 1] : s->n_tokens;
        s->length[p] = end - s->token_offset[p];
    }
}

// The prompt layout under "select" stores every token and marks the chosen ones in
// /tokens/selected: the export takes only those (rows[p] of prompt p), as the statistics do.
// Counted a piece of /tokens/selected at a time, so memory stays flat in the corpus.
static int open_selected(struct xsrc *s, struct ah_error *err) {
    memcpy(s->rows, s->length, (size_t)s->n_prompts * sizeof *s->rows);
    if (s->token_layout || !h5src_has(s->f, "tokens/selected")) return 0;
    if (!(s->sel_ds = h5src_dset(s->f, "tokens/selected")))
        return ah_fail(err, AH_EFORMAT, "%s: cannot open /tokens/selected", s->path);
    int64_t n = 0;
    int ok = h5src_dset_dims(s->sel_ds, &n, 1) == 1 && n == s->n_tokens;
    if (!ok)
        return ah_fail(err, AH_EFORMAT, "%s: /tokens/selected: expected %lld entries", s->path,
                       (long long)s->n_tokens);
    enum { PIECE = 1 << 20 };
    uint8_t *buf = malloc(PIECE);
    int64_t c0 = 0, c1 = 0; // buf holds /tokens/selected [c0, c1)
    for (int64_t p = 0; ok && p < s->n_prompts; p++) {
        s->rows[p] = 0;
        for (int64_t t = s->token_offset[p]; ok && t < s->token_offset[p] + s->length[p]; t++) {
            if (t < c0 || t >= c1) {
                c0 = t, c1 = t + PIECE < s->n_tokens ? t + PIECE : s->n_tokens;
                ok = buf && h5src_rows(s->sel_ds, HSRC_UINT8, c0, c1, buf) == 0;
            }
            if (ok) s->rows[p] += buf[t - c0] != 0;
        }
    }
    free(buf);
    return ok ? 0 : ah_fail(err, AH_EIO, "%s: cannot read /tokens/selected", s->path);
}

// FNV-1a of a string attribute's text, or of a JSON member of it (member NULL: the whole text);
// 0 when absent
static uint64_t text_sum(const struct h5src *f, const char *attr, const char *member) {
    char *text = h5src_has_attr(f, attr) ? h5src_attr_str(f, attr) : NULL, *part = NULL;
    cJSON *o = text && member ? cJSON_Parse(text) : NULL;
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(o, member);
    if (m) part = cJSON_PrintUnformatted(m);
    const char *t = member ? part : text;
    uint64_t h = t ? fnv64_words(FNV64_INIT, t, strlen(t)) : 0;
    free(part);
    cJSON_Delete(o);
    free(text);
    return h;
}

int xsrc_open(struct xsrc *s, const char *path, const char *names_csv, enum xkind dst,
              int64_t block_bytes, struct ah_error *err) {
    memset(s, 0, sizeof *s);
    s->path = path;
    if (access(path, R_OK) != 0) return ah_fail(err, AH_ENOENT, "%s: cannot open", path);
    s->f = h5src_open(path);
    int64_t fmt = 0, sum = 0, n_datasets = 0;
    if (!s->f || h5src_attr_i64(s->f, "harvest_format", &fmt) < 0)
        return ah_fail(err, AH_EINVAL, "%s: not a harvest output (no harvest_format attribute)",
                       path);
    if (h5src_attr_i64(s->f, "complete", &s->complete) < 0) s->complete = 0;
    if (h5src_attr_i64(s->f, "prompts_done", &s->prompts_done) < 0) s->prompts_done = 0;
    if (h5src_attr_i64(s->f, "data_checksum", &sum) < 0)
        return ah_fail(err, AH_EFORMAT, "%s: no data_checksum attribute", path);
    s->data_checksum = (uint64_t)sum;
    s->weights_sum = text_sum(s->f, "provenance", "model_fingerprint");
    s->job_sum = text_sum(s->f, "job", NULL);
    char *st = h5src_attr_str(s->f, "storage_dtype");
    snprintf(s->storage, sizeof s->storage, "%s", st ? st : "float32");
    free(st);
    s->n_prompts = -1;
    s->source_index = h5src_table(s->f, "prompts/source_index", &s->n_prompts);
    s->length = h5src_table(s->f, "prompts/length", &s->n_prompts);
    s->token_offset = h5src_table(s->f, "prompts/token_offset", &s->n_prompts);
    s->n_tokens = -1;
    s->ids_ds = h5src_dset(s->f, "tokens/input_ids");
    int64_t nt = 0;
    if (s->ids_ds && h5src_dset_dims(s->ids_ds, &nt, 1) == 1) s->n_tokens = nt;
    if (!s->source_index || !s->length || !s->token_offset || s->n_tokens < 0)
        return ah_fail(err, AH_EFORMAT, "%s: unreadable /prompts or /tokens tables", path);
    int nd = 0;
    int rc = pick_names(s, names_csv, dst, &nd, err);
    n_datasets = nd;
    if (rc < 0) return rc;
    if (s->token_layout && h5src_has_attr(s->f, "n_tokens_selected")) {
        stored_rows(s);
        if (!(s->pos_ds = h5src_dset(s->f, "tokens/position")))
            return ah_fail(err, AH_EFORMAT, "%s: no /tokens/position (a selected token layout)",
                           path);
    }
    for (int64_t p = 0; p < s->n_prompts; p++)
        if (s->length[p] < 0 || s->token_offset[p] < 0 ||
            s->token_offset[p] + s->length[p] > s->n_tokens)
            return ah_fail(err, AH_EFORMAT, "%s: /prompts/token_offset[%lld] out of range", path,
                           (long long)p);
    if (!(s->done = malloc((size_t)s->n_prompts + 1)) ||
        !(s->rows = malloc(((size_t)s->n_prompts + 1) * sizeof *s->rows)))
        return ah_fail(err, AH_ENOMEM, "out of memory");
    if ((rc = open_selected(s, err)) < 0) return rc;
    if ((rc = mark_done(s, (int)n_datasets, err)) < 0) return rc;
    struct h5out_health h = {.done = s->done, .n_prompts = s->n_prompts}; // the files it reads
    if ((rc = h5out_check(path, stderr, "harvest: damaged: ", &h, err)) < 0) return rc;
    if (h.n_bad) s->complete = 0, s->prompts_done = h.n_done; // what they hold is not complete
    if (alloc_blocks(s, block_bytes) < 0)
        return ah_fail(err, AH_ENOMEM, "out of memory for blocks of %lld bytes",
                       (long long)block_bytes);
    return 0;
}

void xsrc_close(struct xsrc *s) {
    for (int i = 0; s->names && i < s->n_names; i++) {
        h5src_dset_close(s->names[i].ds);
        if (s->blk) free(s->blk[i]);
    }
    h5src_dset_close(s->ids_ds);
    h5src_dset_close(s->pos_ds);
    free(s->pos);
    h5src_dset_close(s->sel_ds);
    free(s->sel);
    free(s->rows);
    h5src_close(s->f);
    free(s->names);
    free(s->blk);
    free(s->ids);
    free(s->row);
    free(s->source_index);
    free(s->length);
    free(s->token_offset);
    free(s->done);
    memset(s, 0, sizeof *s);
}

size_t xsrc_block_bytes(const struct xsrc *s) {
    size_t b = 0;
    for (int i = 0; i < s->n_names; i++)
        b += (size_t)s->blk_prompts * s->names[i].src_bytes;
    return b;
}

int64_t xsrc_block_end(const struct xsrc *s, int64_t p0) {
    if (!s->token_layout)
        return p0 + s->blk_prompts < s->n_prompts ? p0 + s->blk_prompts : s->n_prompts;
    int64_t p = p0, t = 0;
    while (p < s->n_prompts && (p == p0 || t + s->length[p] <= s->blk_prompts))
        t += s->length[p++];
    return p;
}

int xsrc_read(struct xsrc *s, int64_t p0, int64_t p1, struct ah_error *err) {
    s->p0 = p0, s->p1 = p1;
    s->t0 = s->token_offset[p0];
    s->t1 = s->token_offset[p1 - 1] + s->length[p1 - 1];
    int64_t r0 = s->token_layout ? s->t0 : p0, r1 = s->token_layout ? s->t1 : p1;
    for (int i = 0; i < s->n_names; i++) {
        enum h5src_mem mt = s->names[i].src == XK_I64 ? HSRC_INT64 : HSRC_STORED;
        if (h5src_rows(s->names[i].ds, mt, r0, r1, s->blk[i]) < 0)
            return ah_fail(err, AH_EIO, "%s: /activations/%s: cannot read rows %lld..%lld", s->path,
                           s->names[i].name, (long long)r0, (long long)r1);
    }
    if (h5src_rows(s->ids_ds, HSRC_INT64, s->t0, s->t1, s->ids) < 0)
        return ah_fail(err, AH_EIO, "%s: /tokens/input_ids: cannot read rows %lld..%lld", s->path,
                       (long long)s->t0, (long long)s->t1);
    if (s->pos_ds && h5src_rows(s->pos_ds, HSRC_INT64, s->t0, s->t1, s->pos) < 0)
        return ah_fail(err, AH_EIO, "%s: /tokens/position: cannot read rows %lld..%lld", s->path,
                       (long long)s->t0, (long long)s->t1);
    if (s->sel_ds && h5src_rows(s->sel_ds, HSRC_UINT8, s->t0, s->t1, s->sel) < 0)
        return ah_fail(err, AH_EIO, "%s: /tokens/selected: cannot read rows %lld..%lld", s->path,
                       (long long)s->t0, (long long)s->t1);
    return 0;
}

const void *xsrc_token(struct xsrc *s, int i, int64_t p, int64_t pos) {
    const struct xname *x = &s->names[i];
    size_t es = xkind_size(x->src);
    const char *b = s->blk[i];
    if (s->token_layout) return b + (size_t)(s->token_offset[p] + pos - s->t0) * x->src_bytes;
    b += (size_t)(p - s->p0) * x->src_bytes;
    if (x->outer == 1) return b + (size_t)(pos * x->inner) * es;
    char *row = s->row;
    size_t run = (size_t)x->inner * es;
    for (int64_t o = 0; o < x->outer; o++)
        memcpy(row + (size_t)o * run, b + (size_t)(o * x->src_rows + pos) * run, run);
    return row;
}
