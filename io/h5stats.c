// h5stats.c - see h5stats.h. F = features of a row (its trailing shape flattened), B = batch_size.
#define _POSIX_C_SOURCE 200809L // defines: fsync, open
#include "io/h5stats.h"

#include "io/fsutil.h"
#include "io/h5attr.h"
#include "io/h5out.h"
#include "model/ah.h"
#include "model/tap.h"

#include <cjson/cJSON.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define H5TRY(call, file, what)                                                              \
    do {                                                                                     \
        if ((call) < 0) {                                                                    \
            rc = ah_fail(err, AH_EIO, "%s: HDF5 failed to %s (%s:%d)", file, what, __FILE__, \
                         __LINE__);                                                          \
            goto fail;                                                                       \
        }                                                                                    \
    } while (0)

#define BLOCK_FLOATS ((int64_t)1 << 20) // a read block: about 4 MiB of rows

// ---------------------------------------------------------------------------------------------
// writing one activation's statistics

static herr_t write_f64(hid_t g, const char *name, int ndim, const hsize_t *dims, const double *v) {
    hid_t s = ndim ? H5Screate_simple(ndim, dims, NULL) : H5Screate(H5S_SCALAR);
    hid_t d = H5Dcreate2(g, name, H5T_IEEE_F64LE, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    herr_t r = d < 0 ? -1 : H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
    if (d >= 0) H5Dclose(d);
    H5Sclose(s);
    return r;
}

int h5stats_write(hid_t loc, const char *name, int ndim, const int64_t *dims, const struct stats *s,
                  struct ah_error *err) {
    int rc = 0;
    const int64_t F = s->n_features;
    const bool none = s->count == 0;
    hsize_t hd[TAP_MAX_DIMS];
    for (int k = 0; k < ndim; k++)
        hd[k] = (hsize_t)dims[k];
    double *v = malloc((size_t)F * sizeof(double));
    int64_t *c = malloc((size_t)F * sizeof(int64_t));
    hid_t g = H5I_INVALID_HID, sp = H5I_INVALID_HID, d = H5I_INVALID_HID;
    if (!v || !c) {
        rc = ah_fail(err, AH_ENOMEM, "statistics of %s: out of memory", name);
        goto fail;
    }
    H5TRY(g = H5Gcreate2(loc, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), name, "make a group");
    for (int64_t j = 0; j < F; j++)
        c[j] = s->count; // rows are left out whole, so every feature has the same count
    H5TRY(sp = H5Screate_simple(ndim, hd, NULL), name, "make a dataspace");
    H5TRY(d = H5Dcreate2(g, "count", H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
          name, "create count");
    H5TRY(H5Dwrite(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, c), name, "write count");
    for (int64_t j = 0; j < F; j++)
        v[j] = none ? (double)NAN : s->mean[j];
    H5TRY(write_f64(g, "mean", ndim, hd, v), name, "write mean");
    stats_var(s, v);
    H5TRY(write_f64(g, "var", ndim, hd, v), name, "write var");
    for (int64_t j = 0; j < F; j++)
        v[j] = none ? (double)NAN : s->min[j];
    H5TRY(write_f64(g, "min", ndim, hd, v), name, "write min");
    for (int64_t j = 0; j < F; j++)
        v[j] = none ? (double)NAN : s->max[j];
    H5TRY(write_f64(g, "max", ndim, hd, v), name, "write max");
    double nm = none ? (double)NAN : s->norm_mean, nv = stats_norm_var(s);
    double scale = sqrt((double)F) / nm;
    H5TRY(write_f64(g, "norm_mean", 0, NULL, &nm), name, "write norm_mean");
    H5TRY(write_f64(g, "norm_var", 0, NULL, &nv), name, "write norm_var");
    H5TRY(h5attr_put_num(g, "sae_scale", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &scale), name,
          "write sae_scale");
    H5TRY(h5attr_put_num(g, "n_rows_nonfinite", H5T_STD_I64LE, H5T_NATIVE_INT64, &s->nonfinite),
          name, "write n_rows_nonfinite");
fail:
    if (d >= 0) H5Dclose(d);
    if (sp >= 0) H5Sclose(sp);
    if (g >= 0) H5Gclose(g);
    free(v);
    free(c);
    return rc;
}

// ---------------------------------------------------------------------------------------------
// reading an output

// rows [start, start + n) of a 1-d integer dataset
static herr_t read_i64(hid_t d, int64_t start, int64_t n, void *buf, hid_t mtype) {
    hsize_t st = (hsize_t)start, cnt = (hsize_t)n;
    hid_t fs = H5Dget_space(d), ms = H5Screate_simple(1, &cnt, NULL);
    herr_t r = H5Sselect_hyperslab(fs, H5S_SELECT_SET, &st, NULL, &cnt, NULL);
    if (r >= 0) r = H5Dread(d, mtype, ms, fs, H5P_DEFAULT, buf);
    H5Sclose(ms);
    H5Sclose(fs);
    return r;
}

// one activation dataset as read
struct src {
    const char *name;
    hid_t ds;
    int ndim;                    // stored rank; axis 0 is prompt or token
    hsize_t dims[TAP_MAX_DIMS];  // stored shape
    int seq;                     // the sequence axis (prompt layout), 0 for the token layout
    int64_t pre, post, F;        // elements of the axes before / after seq (not axis 0); pre*post
    int nf;                      // the features' axes
    int64_t fdims[TAP_MAX_DIMS]; // (nf) the features' shape
};

static bool is_seq(const char *a) {
    return !strcmp(a, "sequence") || !strcmp(a, "seq") || !strcmp(a, "query");
}

static bool is_key(const char *a) {
    return !strcmp(a, "key") || !strcmp(a, "global+local-key");
}

// Fills x from the dataset's attributes: returns 1 if its statistics can be taken (float, token
// rows), 0 if not (*why says why), -1 if it is not a harvest activation dataset.
static int src_describe(struct src *x, const char **why) {
    char axes[TAP_MAX_DIMS][TAP_AXIS_MAX], dt[TAP_MAX_DIMS][TAP_AXIS_MAX];
    hid_t s = H5Dget_space(x->ds);
    x->ndim = H5Sget_simple_extent_ndims(s);
    bool ok =
        x->ndim >= 1 && x->ndim <= TAP_MAX_DIMS && H5Sget_simple_extent_dims(s, x->dims, NULL) >= 0;
    H5Sclose(s);
    if (!ok ||
        h5attr_get_strs(x->ds, "stored_axes", axes[0], TAP_AXIS_MAX, TAP_MAX_DIMS) != x->ndim ||
        h5attr_get_strs(x->ds, "dtype", dt[0], TAP_AXIS_MAX, TAP_MAX_DIMS) < 0)
        return -1;
    *why = "its values are not float32";
    if (strcmp(dt[0], "float32")) return 0;
    bool token = !strcmp(axes[0], "token");
    int n_seq = 0, n_key = 0;
    x->seq = 0;
    x->nf = 0;
    x->pre = x->post = 1;
    for (int k = 1; k < x->ndim; k++) {
        n_key += is_key(axes[k]);
        if (is_seq(axes[k])) {
            n_seq++, x->seq = k;
            continue;
        }
        x->fdims[x->nf++] = (int64_t)x->dims[k];
        if (n_seq)
            x->post *= (int64_t)x->dims[k];
        else
            x->pre *= (int64_t)x->dims[k];
    }
    x->F = x->pre * x->post;
    *why = "it has no token rows (a key axis, or not one sequence axis)";
    if (n_key || (token ? n_seq != 0 : n_seq != 1) || x->F < 1) return 0;
    if (x->nf == 0) x->fdims[x->nf++] = 1; // a scalar per token: one feature
    return 1;
}

// the output's prompt tables and what batches are
struct tables {
    hid_t length, offset, selected; // /prompts/length, /prompts/token_offset, /tokens/selected
    int64_t n_prompts, batch;
};

// the block start/count of dataset x into buf (float32)
static herr_t read_slab(const struct src *x, const hsize_t *st, const hsize_t *cnt, float *buf) {
    hid_t fs = H5Dget_space(x->ds), ms = H5Screate_simple(x->ndim, cnt, NULL);
    herr_t r = H5Sselect_hyperslab(fs, H5S_SELECT_SET, st, NULL, cnt, NULL);
    if (r >= 0) r = H5Dread(x->ds, H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, buf);
    H5Sclose(ms);
    H5Sclose(fs);
    return r;
}

// rows [r0, r0 + n) of a token-layout dataset into buf (n, F)
static herr_t read_token_rows(const struct src *x, int64_t r0, int64_t n, float *buf) {
    hsize_t st[TAP_MAX_DIMS] = {0}, cnt[TAP_MAX_DIMS];
    memcpy(cnt, x->dims, sizeof cnt);
    st[0] = (hsize_t)r0;
    cnt[0] = (hsize_t)n;
    return read_slab(x, st, cnt, buf);
}

// positions [t0, t0 + n) of prompt p of a prompt-layout dataset into buf (n, pre, post), by way of
// tmp (pre, n, post) when the sequence axis is not the first after the prompt axis
static herr_t read_prompt_rows(const struct src *x, int64_t p, int64_t t0, int64_t n, float *buf,
                               float *tmp) {
    hsize_t st[TAP_MAX_DIMS] = {0}, cnt[TAP_MAX_DIMS];
    memcpy(cnt, x->dims, sizeof cnt);
    st[0] = (hsize_t)p, cnt[0] = 1;
    st[x->seq] = (hsize_t)t0, cnt[x->seq] = (hsize_t)n;
    herr_t r = read_slab(x, st, cnt, x->pre == 1 ? buf : tmp);
    for (int64_t i = 0; r >= 0 && x->pre > 1 && i < x->pre; i++) // (pre, n, post) -> (n, pre, post)
        for (int64_t t = 0; t < n; t++)
            memcpy(buf + (t * x->pre + i) * x->post, tmp + (i * n + t) * x->post,
                   (size_t)x->post * sizeof(float));
    return r;
}

// adds the rows of buf (n, F) whose mask entry is set (mask NULL: all), runs at a time
static void add_masked(struct stats *s, const float *buf, int64_t n, const uint8_t *mask) {
    for (int64_t t = 0; t < n;) {
        int64_t e = t;
        while (e < n && (!mask || mask[e]))
            e++;
        stats_add_rows(s, buf + t * s->n_features, e - t);
        t = e + 1;
    }
}

// working memory of one dataset's pass
struct pass {
    int64_t *len, *off; // (B + 1)
    float *buf, *tmp;   // (R, F)
    uint8_t *mask;      // (R)
    int64_t R;          // rows a block
};

// adds batch [p0, p0 + nb)'s rows to part, in prompt then position order
static herr_t add_batch(const struct src *x, const struct tables *tb, struct pass *w, int64_t p0,
                        int64_t nb, struct stats *part) {
    herr_t r = read_i64(tb->length, p0, nb, w->len, H5T_NATIVE_INT64);
    bool last = p0 + nb >= tb->n_prompts;
    if (r >= 0) r = read_i64(tb->offset, p0, nb + !last, w->off, H5T_NATIVE_INT64);
    if (r < 0) return r;
    if (x->seq == 0) { // token layout: the batch's rows run from its first prompt's to the next's
        int64_t end = last ? (int64_t)x->dims[0] : w->off[nb];
        for (int64_t r0 = w->off[0]; r0 < end && r >= 0; r0 += w->R) {
            int64_t n = end - r0 < w->R ? end - r0 : w->R;
            if ((r = read_token_rows(x, r0, n, w->buf)) >= 0) stats_add_rows(part, w->buf, n);
        }
        return r;
    }
    for (int64_t i = 0; i < nb && r >= 0; i++) {
        for (int64_t t0 = 0; t0 < w->len[i] && r >= 0; t0 += w->R) {
            int64_t n = w->len[i] - t0 < w->R ? w->len[i] - t0 : w->R;
            r = read_prompt_rows(x, p0 + i, t0, n, w->buf, w->tmp);
            if (r >= 0 && tb->selected >= 0)
                r = read_i64(tb->selected, w->off[i] + t0, n, w->mask, H5T_NATIVE_UINT8);
            if (r >= 0) add_masked(part, w->buf, n, tb->selected >= 0 ? w->mask : NULL);
        }
    }
    return r;
}

// the statistics of one dataset: a partial per batch, merged in batch order into total
static int stats_of(const char *path, const struct src *x, const struct tables *tb,
                    struct stats *total, struct ah_error *err) {
    int rc = 0;
    struct stats part = {0};
    struct pass w = {0};
    w.R = BLOCK_FLOATS / x->F > 0 ? BLOCK_FLOATS / x->F : 1;
    size_t rows = (size_t)w.R * (size_t)x->F * sizeof(float), B = (size_t)tb->batch + 1;
    w.len = malloc(B * sizeof(int64_t));
    w.off = malloc(B * sizeof(int64_t));
    w.buf = malloc(rows);
    w.tmp = malloc(rows);
    w.mask = malloc((size_t)w.R);
    if (!w.len || !w.off || !w.buf || !w.tmp || !w.mask || stats_init(&part, x->F) < 0 ||
        stats_init(total, x->F) < 0) {
        rc = ah_fail(err, AH_ENOMEM, "%s: %s: out of memory (%zu bytes a block)", path, x->name,
                     rows);
        goto fail;
    }
    char what[TAP_NAME_MAX + 64];
    snprintf(what, sizeof what, "read the rows of /activations/%s", x->name);
    for (int64_t p0 = 0; p0 < tb->n_prompts; p0 += tb->batch) {
        int64_t nb = tb->n_prompts - p0 < tb->batch ? tb->n_prompts - p0 : tb->batch;
        stats_reset(&part);
        H5TRY(add_batch(x, tb, &w, p0, nb, &part), path, what);
        stats_merge(total, &part);
    }
fail:
    stats_free(&part);
    free(w.len), free(w.off), free(w.buf), free(w.tmp), free(w.mask);
    return rc;
}

// ---------------------------------------------------------------------------------------------
// harvest stats

static herr_t collect_name(hid_t g, const char *name, const H5L_info_t *info, void *u) {
    (void)g, (void)info;
    struct h5stats_names *l = u;
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 16;
        char **v = realloc(l->v, (size_t)cap * sizeof *v);
        if (!v) return -1;
        l->v = v, l->cap = cap;
    }
    size_t n = strlen(name) + 1;
    if (!(l->v[l->n] = malloc(n))) return -1;
    memcpy(l->v[l->n++], name, n);
    return 0;
}

void h5stats_names_free(struct h5stats_names *l) {
    for (int i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
}

// the names of group path in f, in name order
int h5stats_list(hid_t f, const char *group, struct h5stats_names *l) {
    memset(l, 0, sizeof *l);
    hid_t g = H5Gopen2(f, group, H5P_DEFAULT);
    if (g < 0) return -1;
    herr_t r = H5Literate(g, H5_INDEX_NAME, H5_ITER_INC, NULL, collect_name, l);
    H5Gclose(g);
    return r < 0 ? -1 : 0;
}

// whether name is wanted: n_globs 0, or a glob matches it (then marks hit[k] of those that do)
static bool wanted(const char *name, const char *const *globs, int n_globs, uint8_t *hit) {
    bool any = n_globs == 0;
    for (int k = 0; k < n_globs; k++) {
        if (!tap_glob_match(globs[k], name)) continue;
        any = true;
        if (hit) hit[k] = 1;
    }
    return any;
}

// The files the master's virtual datasets read are its own and intact (io/h5out.h): a lost or
// truncated one would read as NaN rows, which a complete output must not have.
static int check_segments(const char *path, struct ah_error *err) {
    struct h5out_health h = {0};
    int rc = h5out_check(path, stderr, "harvest: damaged: ", &h, err);
    if (rc == 0 && h.n_bad)
        rc = ah_fail(err, AH_EINVAL,
                     "%s: the output is damaged (the files above; statistics would take their "
                     "rows as NaN): `harvest run JOB --resume` computes them again",
                     path);
    return rc;
}

// opens the output read-only and checks it is a complete harvest output; fills tb
static int open_output(const char *path, hid_t *f, struct tables *tb, struct ah_error *err) {
    int64_t fmt = -1, complete = 0, done = -1;
    tb->length = tb->offset = tb->selected = H5I_INVALID_HID;
    *f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (*f < 0)
        return ah_fail(err, AH_EINVAL,
                       "%s: cannot open as HDF5 (missing, not HDF5, or left open by a killed job)",
                       path);
    if (h5attr_get_num(*f, "harvest_format", H5T_NATIVE_INT64, &fmt) < 0)
        return ah_fail(err, AH_EINVAL, "%s: not a harvest output (no harvest_format attribute)",
                       path);
    h5attr_get_num(*f, "complete", H5T_NATIVE_INT64, &complete);
    h5attr_get_num(*f, "prompts_done", H5T_NATIVE_INT64, &done);
    hid_t l = tb->length = H5Dopen2(*f, "prompts/length", H5P_DEFAULT);
    tb->offset = H5Dopen2(*f, "prompts/token_offset", H5P_DEFAULT);
    hid_t s = l >= 0 ? H5Dget_space(l) : H5I_INVALID_HID;
    hsize_t n = 0;
    if (s >= 0) H5Sget_simple_extent_dims(s, &n, NULL), H5Sclose(s);
    tb->n_prompts = (int64_t)n;
    if (complete != 1)
        return ah_fail(err, AH_EINVAL,
                       "%s: the output is incomplete (complete = %lld, %lld of %lld prompts "
                       "written): finish it with `harvest run JOB --resume` first",
                       path, (long long)complete, (long long)done, (long long)tb->n_prompts);
    if (l < 0 || tb->offset < 0 ||
        h5attr_get_num(*f, "batch_size", H5T_NATIVE_INT64, &tb->batch) < 0 || tb->batch < 1)
        return ah_fail(err, AH_EFORMAT,
                       "%s: no /prompts/length, /prompts/token_offset or batch_size attribute",
                       path);
    if (H5Lexists(*f, "tokens/selected", H5P_DEFAULT) > 0)
        tb->selected = H5Dopen2(*f, "tokens/selected", H5P_DEFAULT);
    return check_segments(path, err);
}

static void close_output(hid_t f, struct tables *tb) {
    if (tb->selected >= 0) H5Dclose(tb->selected);
    if (tb->offset >= 0) H5Dclose(tb->offset);
    if (tb->length >= 0) H5Dclose(tb->length);
    if (f >= 0) H5Fclose(f);
}

static hid_t open_activation(hid_t f, const char *name) {
    char full[TAP_NAME_MAX + 32];
    snprintf(full, sizeof full, "activations/%s", name);
    return H5Dopen2(f, full, H5P_DEFAULT);
}

// the wanted activations of f into res (*n_res of them, statistics not yet taken); a glob that
// matches none whose statistics can be taken is an error
static int choose_all(const char *path, hid_t f, const struct h5stats_names *l,
                      const char *const *globs, int n_globs, struct h5stats_item *res, int *n_res,
                      struct ah_error *err) {
    uint8_t hit[64] = {0};
    int rc = 0;
    const char *why = NULL, *why_name = NULL;
    for (int i = 0; i < l->n && rc == 0; i++) {
        if (!wanted(l->v[i], globs, n_globs, NULL)) continue;
        struct src x = {.name = l->v[i], .ds = open_activation(f, l->v[i])};
        const char *w = NULL;
        int ok = x.ds < 0 ? -1 : src_describe(&x, &w);
        if (ok < 0)
            rc = ah_fail(err, AH_EFORMAT, "%s: /activations/%s is not a harvest dataset", path,
                         x.name);
        if (ok == 0) why = w, why_name = l->v[i];
        if (ok == 1) {
            wanted(l->v[i], globs, n_globs, hit); // a glob counts when it matches one taken
            char *canon = h5attr_get_str(x.ds, "canonical_name"); // an alias's: kept
            if (canon) snprintf(res[*n_res].canonical, sizeof res->canonical, "%s", canon);
            free(canon);
            res[*n_res].name = l->v[i];
            res[(*n_res)++].nf = x.nf;
        }
        if (x.ds >= 0) H5Dclose(x.ds);
    }
    for (int k = 0; k < n_globs && rc == 0; k++) {
        if (hit[k]) continue;
        if (why_name && !tap_glob_match(globs[k], why_name)) why_name = NULL;
        rc = ah_fail(err, AH_EINVAL,
                     "%s: --names: \"%s\" matches no activation of the output with token rows "
                     "of float32 values (%s%s%s)",
                     path, globs[k], why_name ? why_name : "see `harvest inspect`",
                     why_name ? ": " : "", why_name ? why : "");
    }
    if (rc == 0 && *n_res == 0)
        rc = ah_fail(err, AH_EINVAL, "%s: no activation to take statistics of (%s%s%s)", path,
                     why_name ? why_name : "the output has none", why_name ? ": " : "",
                     why_name ? why : "");
    return rc;
}

// takes the statistics of each chosen activation, one pass over each
static int compute_all(const char *path, hid_t f, const struct tables *tb, struct h5stats_item *res,
                       int n_res, FILE *log, struct ah_error *err) {
    int rc = 0;
    for (int i = 0; i < n_res && rc == 0; i++) {
        struct h5stats_item *r = &res[i];
        struct src x = {.name = r->name, .ds = open_activation(f, r->name)};
        const char *why;
        if (x.ds < 0 || src_describe(&x, &why) != 1) {
            rc = ah_fail(err, AH_EIO, "%s: cannot read /activations/%s", path, r->name);
        } else {
            memcpy(r->fdims, x.fdims, sizeof r->fdims);
            rc = stats_of(path, &x, tb, &r->s, err);
        }
        if (rc == 0 && log)
            fprintf(log, "stats: %s: %lld rows of %lld features, norm mean %.6g\n", r->name,
                    (long long)r->s.count, (long long)r->s.n_features, r->s.norm_mean);
        if (rc == 0 && r->s.nonfinite) // even with --quiet: a lost segment reads as NaN
            fprintf(stderr,
                    "harvest stats: warning: %s: %s: %lld rows hold a NaN or an infinity and are "
                    "left out (n_rows_nonfinite); rows of a missing segment read as NaN: see "
                    "`harvest inspect`\n",
                    path, r->name, (long long)r->s.nonfinite);
        if (x.ds >= 0) H5Dclose(x.ds);
    }
    return rc;
}

// copies from to `to` and fsyncs it
static int copy_file(const char *from, const char *to, struct ah_error *err) {
    int in = open(from, O_RDONLY), out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int rc = in < 0 || out < 0 ? -1 : 0;
    char buf[1 << 16];
    for (ssize_t n; rc == 0 && (n = read(in, buf, sizeof buf)) != 0;) {
        if (n < 0 || write(out, buf, (size_t)n) != n) rc = -1;
    }
    if (rc == 0 && fsync(out) < 0) rc = -1;
    if (in >= 0) close(in);
    if (out >= 0 && close(out) < 0) rc = -1;
    return rc < 0 ? ah_fail(err, AH_EIO, "%s: cannot copy the master to %s (disk full?)", from, to)
                  : 0;
}

// the attribute canonical_name of the group loc/name
static herr_t put_canonical(hid_t loc, const char *name, const char *canonical) {
    hid_t g = H5Gopen2(loc, name, H5P_DEFAULT);
    herr_t r = g < 0 ? -1 : h5attr_put_str(g, "canonical_name", canonical);
    if (g >= 0 && H5Gclose(g) < 0) r = -1;
    return r;
}

int h5stats_store(const char *path, const struct h5stats_item *res, int n, struct ah_error *err) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int rc = copy_file(path, tmp, err);
    if (rc < 0) return rc;
    hid_t f = H5Fopen(tmp, H5F_ACC_RDWR, H5P_DEFAULT), g = H5I_INVALID_HID;
    H5TRY(f, tmp, "open the copy of the master");
    if (H5Lexists(f, "stats", H5P_DEFAULT) > 0)
        H5TRY(g = H5Gopen2(f, "stats", H5P_DEFAULT), tmp, "open /stats");
    else
        H5TRY(g = H5Gcreate2(f, "stats", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), tmp,
              "make /stats");
    for (int i = 0; i < n && rc == 0; i++) { // other activations' statistics stay
        if (H5Lexists(g, res[i].name, H5P_DEFAULT) > 0)
            H5TRY(H5Ldelete(g, res[i].name, H5P_DEFAULT), tmp, "remove old statistics");
        rc = h5stats_write(g, res[i].name, res[i].nf, res[i].fdims, &res[i].s, err);
        if (rc == 0 && res[i].canonical[0])
            H5TRY(put_canonical(g, res[i].name, res[i].canonical), tmp, "write canonical_name");
    }
    if (rc < 0) goto fail;
    H5Gclose(g);
    g = H5I_INVALID_HID;
    herr_t r = H5Fclose(f);
    f = H5I_INVALID_HID;
    H5TRY(r, tmp, "close the master");
    if (fs_replace(tmp, path) < 0)
        rc = ah_fail(err, AH_EIO, "%s: cannot replace the master with %s", path, tmp);
fail:
    if (g >= 0) H5Gclose(g);
    if (f >= 0) H5Fclose(f);
    if (rc < 0) unlink(tmp);
    return rc;
}

int h5stats_recompute(const char *path, const char *const *globs, int n_globs, FILE *log,
                      struct ah_error *err) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    if (n_globs > 64) return ah_fail(err, AH_EINVAL, "--names: at most 64 names or globs");
    hid_t f = H5I_INVALID_HID;
    struct tables tb;
    struct h5stats_names l = {0};
    struct h5stats_item *res = NULL;
    int n_res = 0;
    int rc = open_output(path, &f, &tb, err);
    if (rc == 0 && h5stats_list(f, "activations", &l) < 0)
        rc = ah_fail(err, AH_EFORMAT, "%s: cannot list /activations", path);
    if (rc == 0 && !(res = calloc((size_t)l.n + 1, sizeof *res))) rc = -AH_ENOMEM;
    if (rc == 0) rc = choose_all(path, f, &l, globs, n_globs, res, &n_res, err);
    if (rc == 0) rc = compute_all(path, f, &tb, res, n_res, log, err);
    close_output(f, &tb);
    if (rc == 0) rc = h5stats_store(path, res, n_res, err);
    for (int i = 0; i < n_res; i++)
        stats_free(&res[i].s);
    free(res);
    h5stats_names_free(&l);
    return rc;
}
