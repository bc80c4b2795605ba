// export_probe.c - `harvest export OUT.h5 --probe DIR`: one row a prompt for probes, in
// DIR/probe.h5: each name's pooled values (/pooled/NAME/last, /pooled/NAME/mean) and the prompt's
// data.fields (/prompts/FIELD, typed as in the output, io/h5fields.h), plus where each row comes
// from (/prompts/prompt_index, source_index, length). Pooling runs on the stored values (either
// layout, read a block of prompts at a time through export_src.c): `last` is the prompt's last
// stored token (the token layout under select stores only the chosen ones), widened to float32
// (exact); `mean` sums the prompt's tokens in position order in float64 and divides by their
// count, rounded once to float32; a prompt with no stored token gets NaN for both.
#define _POSIX_C_SOURCE 200809L // defines: fsync
#include "harvest/export.h"
#include "io/h5probe.h"
#include "io/h5src.h"
#include "io/halfconv.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CHECK(call, what)                                                                \
    do {                                                                                 \
        if ((call) < 0) {                                                                \
            rc = ah_fail(err, AH_EIO, "%s: HDF5 failed to %s (disk full?)", path, what); \
            goto fail;                                                                   \
        }                                                                                \
    } while (0)

static const char *const pool_name[2] = {"last", "mean"};

static float widen(const void *row, enum xkind k, int64_t e) {
    if (k == XK_F32) return ((const float *)row)[e];
    uint16_t h = ((const uint16_t *)row)[e];
    return k == XK_F16 ? hc_f16_to_f32(h) : hc_bf16_to_f32(h);
}

// pooled rows of prompt p for name i: last (e floats) and mean (e floats) over the tokens sel
// marks (sel: the prompt's T flags, NULL: every token; none: NaN), acc: e doubles
static void pool_prompt(struct xsrc *s, int i, int64_t p, const uint8_t *sel, float *last,
                        float *mean, double *acc) {
    const struct xname *x = &s->names[i];
    int64_t T = s->length[p], n = 0;
    memset(acc, 0, (size_t)x->elems * sizeof *acc);
    for (int64_t t = 0; t < T; t++) {
        bool take = !sel || sel[t];
        if (!take && t < T - 1) continue;
        const void *row = xsrc_token(s, i, p, t);
        for (int64_t e = 0; take && e < x->elems; e++)
            acc[e] += (double)widen(row, x->src, e);
        n += take;
        if (t == T - 1)
            for (int64_t e = 0; e < x->elems; e++)
                last[e] = widen(row, x->src, e);
    }
    for (int64_t e = 0; e < x->elems; e++) {
        mean[e] = n ? (float)(acc[e] / (double)n) : NAN;
        if (T == 0) last[e] = NAN; // no stored row (token layout, select kept none)
    }
}

struct probe_out {
    struct h5probe *p;       // the probe file (or the master's copy); its slot 2 * i + w: name
                             // i's pool w (0 last, 1 mean)
    float *rows;             // (blk_prompts * elems) one block's pooled rows of one name
    double *acc;             // (elems)
    int64_t *keep;           // (n_prompts) exported prompts' indices
    struct h5dset *selected; // the output's /tokens/selected (prompt layout under `select`), or
                             // NULL; owned
    uint8_t *sel;            // (sel_cap) one block's flags of it
    int64_t sel_cap;
    int64_t n_keep;
};

// /tokens/selected of the block's tokens [s->t0, s->t1) into o->sel
static int read_selected(const struct xsrc *s, struct probe_out *o, struct ah_error *err) {
    int64_t n = s->t1 - s->t0;
    if (n > o->sel_cap) {
        uint8_t *b = realloc(o->sel, (size_t)n);
        if (!b) return ah_fail(err, AH_ENOMEM, "out of memory for /tokens/selected");
        o->sel = b, o->sel_cap = n;
    }
    int r = h5src_rows(o->selected, HSRC_UINT8, s->t0, s->t1, o->sel);
    return r < 0 ? ah_fail(err, AH_EIO, "%s: cannot read /tokens/selected", s->path) : 0;
}

// every exported prompt's pooled rows, a block of prompts at a time
static int pool_all(struct xsrc *s, struct probe_out *o, unsigned pools, const char *path,
                    struct ah_error *err) {
    int rc = 0;
    int64_t row = 0; // the probe file's row of the block's first exported prompt
    for (int64_t p0 = 0; rc == 0 && p0 < s->n_prompts;) {
        int64_t p1 = xsrc_block_end(s, p0), n = 0;
        for (int64_t p = p0; p < p1; p++)
            n += s->done[p];
        if (n && (rc = xsrc_read(s, p0, p1, err)) < 0) break;
        if (n && o->selected && (rc = read_selected(s, o, err)) < 0) break;
        for (int i = 0; n && i < s->n_names; i++) {
            const struct xname *x = &s->names[i];
            float *last = o->rows, *mean = o->rows + (size_t)n * (size_t)x->elems;
            int64_t k = 0;
            for (int64_t p = p0; p < p1; p++)
                if (s->done[p]) {
                    size_t at = (size_t)k++ * (size_t)x->elems;
                    const uint8_t *sel = o->selected ? o->sel + s->token_offset[p] - s->t0 : NULL;
                    pool_prompt(s, i, p, sel, last + at, mean + at, o->acc);
                }
            for (int w = 0; w < 2; w++)
                if ((pools >> w & 1) &&
                    h5probe_rows(o->p, 2 * i + w, row, n, x->elems, w ? mean : last) < 0)
                    return ah_fail(err, AH_EIO, "%s: cannot write /pooled/%s/%s", path, x->name,
                                   pool_name[w]);
        }
        row += n;
        p0 = p1;
    }
    return rc;
}

// /prompts/{prompt_index, source_index, length} of the exported prompts
static int write_tables(const struct xsrc *s, struct probe_out *o) {
    const int64_t *col[3] = {NULL, s->source_index, s->length};
    static const char *const names[3] = {"prompt_index", "source_index", "length"};
    int64_t *v = malloc((size_t)(o->n_keep + 1) * sizeof *v);
    int r = v ? 0 : -1;
    for (int c = 0; r >= 0 && c < 3; c++) {
        for (int64_t k = 0; k < o->n_keep; k++)
            v[k] = c ? col[c][o->keep[k]] : o->keep[k];
        r = h5probe_table(o->p, names[c], v, o->n_keep);
    }
    free(v);
    return r;
}

// the probe file's root attributes
static int probe_attrs(const struct xsrc *s, const struct probe_out *o, unsigned pools,
                       const char *path, struct ah_error *err) {
    int rc = 0;
    int64_t n = o->n_keep, sum = (int64_t)s->data_checksum;
    const char *slash = strrchr(s->path, '/');
    char list[32];
    snprintf(list, sizeof list, "%s%s%s", pools & 1 ? "last" : "", pools == 3 ? "," : "",
             pools & 2 ? "mean" : "");
    CHECK(h5probe_attr_str(o->p, "format", "harvest-probe"), "write attributes");
    CHECK(h5probe_attr_i64(o->p, "format_version", 1), "write attributes");
    CHECK(h5probe_attr_str(o->p, "source", slash ? slash + 1 : s->path), "write attributes");
    CHECK(h5probe_attr_i64(o->p, "source_data_checksum", sum), "write attributes");
    CHECK(h5probe_attr_i64(o->p, "n_prompts", n), "write attributes");
    CHECK(h5probe_attr_str(o->p, "pool", list), "write attributes");
fail:
    return rc;
}

// /pooled/NAME/{last, mean} (those pools asks for), empty, in o->ds
static int pooled_layout(const struct xsrc *s, struct probe_out *o, unsigned pools,
                         const char *path, struct ah_error *err) {
    int rc = 0;
    if (h5probe_pooled(o->p, 2 * s->n_names) < 0)
        return ah_fail(err, AH_EIO, "%s: cannot create /pooled", path);
    for (int i = 0; i < s->n_names && rc == 0; i++) {
        const struct xname *x = &s->names[i];
        if (h5probe_pool_name(o->p, i, x->name, pools, o->n_keep, x->ndim, x->dims) < 0)
            rc = ah_fail(err, AH_EIO, "%s: cannot create /pooled/%s", path, x->name);
    }
    h5probe_pooled_end(o->p);
    return rc;
}

// int64 names (expert indices) are not pooled: dropped from the default list, an error if named
static int float_names_only(struct xsrc *s, bool named, struct ah_error *err) {
    int k = 0;
    for (int i = 0; i < s->n_names; i++) {
        if (s->names[i].src != XK_I64) {
            s->names[k] = s->names[i];
            s->blk[k++] = s->blk[i];
            continue;
        }
        if (named)
            return ah_fail(err, AH_EINVAL,
                           "%s: --names: \"%s\" holds integers (int64): only float activations "
                           "are pooled",
                           s->path, s->names[i].name);
        h5src_dset_close(s->names[i].ds);
        free(s->blk[i]);
    }
    s->n_names = k;
    if (k == 0) return ah_fail(err, AH_EINVAL, "%s: no float activation with token rows", s->path);
    return 0;
}

// o's buffers for the names of s, and every prompt s->done holds as a row
static int probe_alloc(const struct xsrc *s, struct probe_out *o, struct ah_error *err) {
    *o = (struct probe_out){0};
    // the prompt layout under `select` marks the chosen tokens (README "Statistics")
    if (!s->token_layout && h5src_has(s->f, "tokens/selected") &&
        !(o->selected = h5src_dset(s->f, "tokens/selected")))
        return ah_fail(err, AH_EIO, "%s: cannot open /tokens/selected", s->path);
    int64_t elems = 1;
    for (int i = 0; i < s->n_names; i++)
        elems = s->names[i].elems > elems ? s->names[i].elems : elems;
    o->rows = malloc((size_t)(2 * s->blk_prompts * elems) * sizeof *o->rows);
    o->acc = malloc((size_t)elems * sizeof *o->acc);
    o->keep = malloc((size_t)(s->n_prompts + 1) * sizeof *o->keep);
    if (!o->rows || !o->acc || !o->keep)
        return ah_fail(err, AH_ENOMEM, "out of memory for the probe rows");
    for (int64_t p = 0; p < s->n_prompts; p++)
        if (s->done[p]) o->keep[o->n_keep++] = p;
    return 0;
}

// closes o's file (path), and if all went well fsyncs it and renames it to final
static int probe_finish(struct probe_out *o, const char *path, const char *final, int rc,
                        struct ah_error *err) {
    h5src_dset_close(o->selected);
    free(o->sel);
    if (h5probe_close(o->p) < 0) { // HDF5 keeps the file open: see xshard_stuck
        if (rc == 0) rc = ah_fail(err, AH_EIO, "%s: cannot close (disk full?)", path);
    }
    int fd = rc == 0 ? open(path, O_RDONLY) : -1;
    if (rc == 0 && (fd < 0 || fsync(fd) != 0 || rename(path, final) != 0))
        rc = ah_fail(err, AH_EIO, "%s: cannot write: %s", final, strerror(errno));
    if (fd >= 0) close(fd);
    if (rc < 0) remove(path);
    free(o->rows);
    free(o->acc);
    free(o->keep);
    return rc;
}

int xprobe_write(struct xsrc *s, const char *dir, unsigned pools, bool named,
                 struct ah_error *err) {
    char path[4200], final[4200];
    snprintf(final, sizeof final, "%s/probe.h5", dir);
    snprintf(path, sizeof path, "%s/probe.h5.tmp", dir);
    int rc = float_names_only(s, named, err);
    if (rc == 0 && mkdir(dir, 0777) != 0 && errno != EEXIST)
        rc = ah_fail(err, AH_EIO, "%s: cannot create: %s", dir, strerror(errno));
    if (rc < 0) return rc;
    struct probe_out o;
    if ((rc = probe_alloc(s, &o, err)) < 0) goto fail;
    CHECK((o.p = h5probe_create(path)) ? 0 : -1, "create the file");
    CHECK(h5probe_prompts(o.p), "make /prompts");
    CHECK(write_tables(s, &o), "write /prompts");
    CHECK(h5probe_fields(o.p, s->f, o.keep, o.n_keep), "copy the data.fields (/prompts/NAME)");
    if ((rc = probe_attrs(s, &o, pools, path, err)) == 0 &&
        (rc = pooled_layout(s, &o, pools, path, err)) == 0)
        rc = pool_all(s, &o, pools, path, err);
fail:
    return probe_finish(&o, path, final, rc, err);
}

// from to to, whole (to is created or truncated)
static int copy_whole(const char *from, const char *to) {
    int in = open(from, O_RDONLY), out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0666);
    char buf[1 << 16];
    ssize_t n = in >= 0 && out >= 0 ? 1 : -1;
    while (n > 0 && (n = read(in, buf, sizeof buf)) > 0)
        n = write(out, buf, (size_t)n) == n ? n : -1;
    if (in >= 0) close(in);
    if (out >= 0 && close(out) != 0) n = -1;
    return n < 0 ? -1 : 0;
}

int xprobe_pool_output(const char *path, unsigned pools, struct ah_error *err) {
    struct xsrc s;
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int rc = xsrc_open(&s, path, NULL, XK_F32, 64 << 20, err);
    if (rc < 0 || s.complete != 1 || h5src_has(s.f, "pooled")) {
        xsrc_close(&s); // incomplete: pooled by the run that completes it; or done already
        return rc;
    }
    struct probe_out o;
    if ((rc = float_names_only(&s, false, err)) == 0) {
        rc = probe_alloc(&s, &o, err);
        if (rc == 0 && (copy_whole(path, tmp) < 0 || !(o.p = h5probe_open(tmp))))
            rc = ah_fail(err, AH_EIO, "%s: cannot copy the master to %s (disk full?)", path, tmp);
        if (rc == 0 && (rc = pooled_layout(&s, &o, pools, tmp, err)) == 0)
            rc = pool_all(&s, &o, pools, tmp, err);
        rc = probe_finish(&o, tmp, path, rc, err);
    }
    xsrc_close(&s);
    return rc;
}

unsigned xprobe_pools(const char *csv) {
    unsigned bits = 0;
    const char *a = csv;
    while (*a) {
        size_t n = strcspn(a, ",");
        unsigned b = n == 4 && !strncmp(a, "last", 4)   ? 1
                     : n == 4 && !strncmp(a, "mean", 4) ? 2
                                                        : 0;
        if (!b) return 0;
        bits |= b;
        a += n + (a[n] == ',');
    }
    return bits;
}

unsigned xprobe_job_pools(const struct xsrc *s) {
    char *text = h5src_attr_str(s->f, "job");
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "pool"), *e;
    const cJSON *list = cJSON_IsArray(p) ? p : NULL;
    unsigned bits = 0;
    if (cJSON_IsString(p)) bits = xprobe_pools(p->valuestring);
    cJSON_ArrayForEach(e, list) {
        if (cJSON_IsString(e)) bits |= xprobe_pools(e->valuestring);
    }
    cJSON_Delete(j);
    free(text);
    return bits;
}

int64_t xprobe_count(const struct xsrc *s) {
    int64_t n = 0;
    for (int64_t p = 0; p < s->n_prompts; p++)
        n += s->done[p];
    return n;
}
