// h5report.c - reads what `harvest report` shows of an output (io/h5report.h): the root attributes,
// the groups /norm_profile and /stats whole, and of the activations only the attention patterns of
// the chosen prompts and the expert_indices / router_logits rows (read a prompt, or a block of
// token rows, at a time).
#include "io/h5report.h"
#include "io/h5attr.h"
#include "io/h5out.h"   // defines: h5out_check
#include "io/h5stats.h" // defines: h5stats_list
#include "model/ah.h"

#include <cjson/cJSON.h>
#include <hdf5.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *const rpt_count_names[RPT_N_COUNTS] = {"n_tokens_selected", "n_tokens_skipped_first",
                                                   "n_tokens_skipped_id", "n_tokens_not_chosen",
                                                   "n_tokens_dropped_norm"};

// natural order: digit runs compare as numbers ("layers.10" after "layers.9")
static int natural_cmp(const char *x, const char *y) {
    while (*x && *y) {
        if (*x >= '0' && *x <= '9' && *y >= '0' && *y <= '9') {
            char *ex, *ey;
            unsigned long long u = strtoull(x, &ex, 10), v = strtoull(y, &ey, 10);
            if (u != v) return u < v ? -1 : 1;
            x = ex, y = ey;
            continue;
        }
        if (*x != *y) return (unsigned char)*x < (unsigned char)*y ? -1 : 1;
        x++, y++;
    }
    return (unsigned char)*x - (unsigned char)*y;
}
static int cmp_names(const void *a, const void *b) {
    return natural_cmp(*(const char *const *)a, *(const char *const *)b);
}

static void copy_name(char *dst, const char *src) {
    size_t n = strlen(src);
    n = n < RPT_NAME_MAX - 1 ? n : RPT_NAME_MAX - 1;
    memcpy(dst, src, n);
    dst[n] = 0;
}

// the names of group g of f in natural order (l->n 0 when the group is absent)
static void list_sorted(hid_t f, const char *g, struct h5stats_names *l) {
    if (H5Lexists(f, g, H5P_DEFAULT) <= 0 || h5stats_list(f, g, l) < 0) {
        h5stats_names_free(l);
        return;
    }
    qsort(l->v, (size_t)l->n, sizeof *l->v, cmp_names);
}

// the shape of dataset name of loc (ndim, dims); -1 if it does not open
static int dset_shape(hid_t loc, const char *name, int *ndim, int64_t *dims) {
    hid_t d = H5Dopen2(loc, name, H5P_DEFAULT);
    if (d < 0) return -1;
    hid_t s = H5Dget_space(d);
    hsize_t h[H5S_MAX_RANK];
    int n = s >= 0 ? H5Sget_simple_extent_ndims(s) : -1;
    if (n >= 0 && n <= TAP_MAX_DIMS) H5Sget_simple_extent_dims(s, h, NULL);
    if (s >= 0) H5Sclose(s);
    H5Dclose(d);
    if (n < 0 || n > TAP_MAX_DIMS) return -1;
    *ndim = n;
    for (int i = 0; i < n; i++)
        dims[i] = (int64_t)h[i];
    return 0;
}

// a whole dataset of loc as mtype (malloc'd, *n elements), or NULL (absent, unreadable, no memory)
static void *read_whole(hid_t loc, const char *name, hid_t mtype, size_t esize, int64_t *n) {
    hid_t d = H5Dopen2(loc, name, H5P_DEFAULT);
    if (d < 0) return NULL;
    hid_t s = H5Dget_space(d);
    hssize_t m = s >= 0 ? H5Sget_simple_extent_npoints(s) : -1;
    if (s >= 0) H5Sclose(s);
    void *v = m >= 0 ? malloc(esize * (size_t)(m ? m : 1)) : NULL;
    if (v && H5Dread(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) < 0) {
        free(v);
        v = NULL;
    }
    H5Dclose(d);
    if (v) *n = (int64_t)m;
    return v;
}

// ----------------------------------------------------------------------------
// root attributes and the dataset list

static void read_root(struct rpt_data *d, hid_t f) {
    d->family = h5attr_get_str(f, "model_family");
    d->job = h5attr_get_str(f, "job");
    d->provenance = h5attr_get_str(f, "provenance");
    d->storage = h5attr_get_str(f, "storage_dtype");
    h5attr_get_num(f, "harvest_format", H5T_NATIVE_INT64, &d->format);
    h5attr_get_num(f, "complete", H5T_NATIVE_INT64, &d->complete);
    h5attr_get_num(f, "prompts_done", H5T_NATIVE_INT64, &d->prompts_done);
    h5attr_get_num(f, "max_seq_len", H5T_NATIVE_INT64, &d->max_seq_len);
    h5attr_get_num(f, "batch_size", H5T_NATIVE_INT64, &d->batch_size);
    h5attr_get_num(f, "n_prompts_skipped_empty", H5T_NATIVE_INT64, &d->n_empty);
    h5attr_get_num(f, "n_prompts_truncated", H5T_NATIVE_INT64, &d->n_truncated);
    for (int i = 0; i < RPT_N_COUNTS; i++) {
        d->has_count[i] =
            h5attr_get_num(f, rpt_count_names[i], H5T_NATIVE_INT64, &d->counts[i]) == 0;
        d->has_counts |= d->has_count[i];
    }
}

static int read_dsets(struct rpt_data *d, hid_t f) {
    struct h5stats_names l = {0};
    list_sorted(f, "activations", &l);
    d->dsets = calloc((size_t)(l.n ? l.n : 1), sizeof *d->dsets);
    if (!d->dsets) return h5stats_names_free(&l), -AH_ENOMEM;
    hid_t g = l.n ? H5Gopen2(f, "activations", H5P_DEFAULT) : H5I_INVALID_HID;
    for (int i = 0; i < l.n; i++) {
        struct rpt_dset *s = &d->dsets[d->n_dsets];
        if (dset_shape(g, l.v[i], &s->ndim, s->dims) < 0) continue;
        copy_name(s->name, l.v[i]);
        hid_t ds = H5Dopen2(g, l.v[i], H5P_DEFAULT);
        char axes[TAP_MAX_DIMS][TAP_AXIS_MAX];
        int na = h5attr_get_strs(ds, "stored_axes", &axes[0][0], TAP_AXIS_MAX, TAP_MAX_DIMS);
        if (na == s->ndim)
            for (int k = 0; k < na; k++)
                copy_name(s->axes[k], axes[k]);
        char *dt = h5attr_get_str(ds, "dtype");
        snprintf(s->dtype, sizeof s->dtype, "%s", dt ? dt : "");
        free(dt);
        H5Dclose(ds);
        if (!strcmp(s->axes[0], "token")) d->token_layout = true;
        d->n_dsets++;
    }
    if (g >= 0) H5Gclose(g);
    h5stats_names_free(&l);
    return 0;
}

// ----------------------------------------------------------------------------
// /norm_profile

double rpt_hist_quantile(const int64_t *hist, const double *edges, double q) {
    int64_t total = 0;
    for (int i = 0; i < RPT_HIST_BINS; i++)
        total += hist[i];
    if (total == 0) return NAN;
    double target = q * (double)total, cum = 0;
    for (int i = 0; i < RPT_HIST_BINS; i++) {
        if (hist[i] == 0) continue;
        if (cum + (double)hist[i] >= target || i == RPT_HIST_BINS - 1) {
            if (i == RPT_HIST_BINS - 1) return edges[RPT_HIST_BINS - 2];
            double lo = i == 0 ? 0 : edges[i - 1], hi = edges[i];
            double fr = (target - cum) / (double)hist[i];
            return lo + (fr < 0 ? 0 : fr) * (hi - lo);
        }
        cum += (double)hist[i];
    }
    return NAN;
}

// the profile's arrays; -1 if one is missing or has the wrong length
static int read_profile_arrays(struct rpt_profile *p, hid_t g) {
    int64_t n[8] = {0};
    p->count = read_whole(g, "count", H5T_NATIVE_INT64, 8, &n[0]);
    p->sum = read_whole(g, "sum", H5T_NATIVE_DOUBLE, 8, &n[1]);
    p->sum_sq = read_whole(g, "sum_sq", H5T_NATIVE_DOUBLE, 8, &n[2]);
    p->max = read_whole(g, "max", H5T_NATIVE_DOUBLE, 8, &n[3]);
    p->o_prompt = read_whole(g, "outlier_prompt", H5T_NATIVE_INT64, 8, &n[4]);
    p->o_pos = read_whole(g, "outlier_position", H5T_NATIVE_INT64, 8, &n[5]);
    p->o_tok = read_whole(g, "outlier_token", H5T_NATIVE_INT64, 8, &n[6]);
    p->o_norm = read_whole(g, "outlier_norm", H5T_NATIVE_DOUBLE, 8, &n[7]);
    int64_t nh = 0, *h = read_whole(g, "hist", H5T_NATIVE_INT64, 8, &nh);
    bool ok = p->count && p->sum && p->sum_sq && p->max && h && nh == RPT_HIST_BINS &&
              n[1] == n[0] && n[2] == n[0] && n[3] == n[0];
    if (h && nh == RPT_HIST_BINS) memcpy(p->hist, h, sizeof p->hist);
    free(h);
    p->T = n[0];
    bool outl = p->o_prompt && p->o_pos && p->o_tok && p->o_norm && n[5] == n[4] && n[6] == n[4] &&
                n[7] == n[4];
    p->K = outl ? n[4] : 0;
    return ok ? 0 : -1;
}

static int read_profile(struct rpt_profile *p, hid_t f, const char *name, const char *path,
                        struct ah_error *err) {
    char gp[RPT_NAME_MAX + 32];
    snprintf(gp, sizeof gp, "norm_profile/%s", name);
    copy_name(p->group, name);
    hid_t g = H5Gopen2(f, gp, H5P_DEFAULT);
    if (g < 0 || read_profile_arrays(p, g) < 0) {
        if (g >= 0) H5Gclose(g);
        return ah_fail(err, AH_EINVAL,
                       "%s: /%s: not a norm profile (count, sum, sum_sq, max of one length and "
                       "hist of %d bins)",
                       path, gp, RPT_HIST_BINS);
    }
    char *v = h5attr_get_str(g, "value");
    copy_name(p->value, v ? v : name);
    free(v);
    h5attr_get_num(g, "n_nan", H5T_NATIVE_INT64, &p->n_nan);
    hid_t a = H5Aexists(g, "hist_edges") > 0 ? H5Aopen(g, "hist_edges", H5P_DEFAULT) : -1;
    hid_t as = a >= 0 ? H5Aget_space(a) : -1;
    bool edges = as >= 0 && H5Sget_simple_extent_npoints(as) == RPT_HIST_BINS - 1 &&
                 H5Aread(a, H5T_NATIVE_DOUBLE, p->edges) >= 0;
    if (as >= 0) H5Sclose(as);
    if (a >= 0) H5Aclose(a);
    H5Gclose(g);
    for (int i = 0; !edges && i < RPT_HIST_BINS - 1; i++) // the layout's own definition
        p->edges[i] = exp2((double)(i - 32) / 4.0);
    double s = 0;
    for (int64_t t = 0; t < p->T; t++)
        p->n += p->count[t], s += p->sum[t];
    p->mean = p->n ? s / (double)p->n : (double)NAN;
    static const double qs[RPT_N_QUANTILE] = {0.05, 0.25, 0.5, 0.75, 0.95};
    for (int k = 0; k < RPT_N_QUANTILE; k++)
        p->q[k] = rpt_hist_quantile(p->hist, p->edges, qs[k]);
    return 0;
}

// the job's "norm_profile" entries (names or globs) give the order; matches of one entry in
// natural order, then what no entry matched
static void order_profiles(const char *job, char **v, int n) {
    cJSON *j = job ? cJSON_Parse(job) : NULL;
    const cJSON *np = cJSON_GetObjectItemCaseSensitive(j, "norm_profile"), *e;
    int placed = 0;
    cJSON_ArrayForEach(e, np) {
        if (!cJSON_IsString(e)) continue;
        for (int i = placed; i < n; i++) {
            if (!tap_glob_match(e->valuestring, v[i])) continue;
            char *t = v[placed];
            v[placed++] = v[i], v[i] = t;
        }
    }
    cJSON_Delete(j);
}

static int read_profiles(struct rpt_data *d, hid_t f, struct ah_error *err) {
    struct h5stats_names l = {0};
    list_sorted(f, "norm_profile", &l);
    order_profiles(d->job, l.v, l.n);
    d->prof = calloc((size_t)(l.n ? l.n : 1), sizeof *d->prof);
    int rc = d->prof ? 0 : -AH_ENOMEM;
    for (int i = 0; i < l.n && rc == 0; i++, d->n_prof++)
        rc = read_profile(&d->prof[i], f, l.v[i], d->path, err);
    h5stats_names_free(&l);
    return rc;
}

// ----------------------------------------------------------------------------
// /stats

static int read_stats(struct rpt_data *d, hid_t f) {
    struct h5stats_names l = {0};
    list_sorted(f, "stats", &l);
    d->stats = calloc((size_t)(l.n ? l.n : 1), sizeof *d->stats);
    if (!d->stats) return h5stats_names_free(&l), -AH_ENOMEM;
    hid_t g = l.n ? H5Gopen2(f, "stats", H5P_DEFAULT) : H5I_INVALID_HID;
    for (int i = 0; i < l.n; i++) {
        struct rpt_stat *s = &d->stats[d->n_stats];
        hid_t h = H5Gopen2(g, l.v[i], H5P_DEFAULT);
        if (h < 0) continue;
        int64_t nm = 0, nv = 0, nc = 0, nn = 0, nnv = 0;
        s->mean = read_whole(h, "mean", H5T_NATIVE_DOUBLE, 8, &nm);
        s->var = read_whole(h, "var", H5T_NATIVE_DOUBLE, 8, &nv);
        int64_t *c = read_whole(h, "count", H5T_NATIVE_INT64, 8, &nc);
        double *a = read_whole(h, "norm_mean", H5T_NATIVE_DOUBLE, 8, &nn);
        double *b = read_whole(h, "norm_var", H5T_NATIVE_DOUBLE, 8, &nnv);
        H5Gclose(h);
        bool ok = s->mean && s->var && nm == nv && nm > 0;
        s->d = nm, s->rows = c && nc ? c[0] : 0;
        s->norm_mean = a && nn ? a[0] : (double)NAN, s->norm_var = b && nnv ? b[0] : (double)NAN;
        free(c), free(a), free(b);
        copy_name(s->name, l.v[i]);
        if (ok) {
            d->n_stats++;
            continue;
        }
        free(s->mean), free(s->var);
        memset(s, 0, sizeof *s);
    }
    if (g >= 0) H5Gclose(g);
    h5stats_names_free(&l);
    return 0;
}

// ----------------------------------------------------------------------------
// the file, whole

// the output is a harvest output and intact (as inspect and stats check it)
static int check_output(const char *path, struct ah_error *err) {
    struct h5out_health h = {0};
    int rc = h5out_check(path, stderr, "harvest: damaged: ", &h, err);
    if (rc == 0 && h.n_bad)
        rc = ah_fail(err, AH_EINVAL,
                     "%s: the output is damaged (the files above; their rows would read as NaN): "
                     "`harvest run JOB --resume` computes them again",
                     path);
    return rc;
}

int rpt_read(struct rpt_data *d, const char *path, const int64_t *prompts, int n_prompts,
             struct ah_error *err) {
    memset(d, 0, sizeof *d);
    int rc = check_output(path, err);
    if (rc < 0) return rc;
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) return ah_fail(err, AH_EINVAL, "%s: cannot open as HDF5", path);
    d->path = malloc(strlen(path) + 1);
    if (!d->path) rc = -AH_ENOMEM;
    if (rc == 0) {
        strcpy(d->path, path);
        read_root(d, f);
        int nd = 0;
        int64_t dims[TAP_MAX_DIMS] = {0};
        if (dset_shape(f, "prompts/length", &nd, dims) == 0 && nd == 1) d->n_prompts = dims[0];
        if (dset_shape(f, "tokens/input_ids", &nd, dims) == 0 && nd == 1) d->n_tokens = dims[0];
        rc = d->complete == 1
                 ? read_dsets(d, f)
                 : ah_fail(err, AH_EINVAL,
                           "%s: the output is incomplete (%lld prompts done): finish it with "
                           "`harvest run JOB --resume` first",
                           path, (long long)d->prompts_done);
    }
    if (rc == 0) rc = read_profiles(d, f, err);
    if (rc == 0) rc = read_stats(d, f);
    if (rc == 0) rc = rpt_read_rows(d, f, prompts, n_prompts, err);
    H5Fclose(f);
    if (rc == -AH_ENOMEM) ah_fail(err, AH_ENOMEM, "%s: out of memory", path);
    if (rc < 0) rpt_free(d);
    return rc;
}

void rpt_free(struct rpt_data *d) {
    free(d->path), free(d->family), free(d->job), free(d->provenance), free(d->storage);
    free(d->dsets);
    for (int i = 0; i < d->n_prof; i++) {
        struct rpt_profile *p = &d->prof[i];
        free(p->count), free(p->sum), free(p->sum_sq), free(p->max);
        free(p->o_prompt), free(p->o_pos), free(p->o_tok), free(p->o_norm);
        for (int64_t k = 0; p->o_text && k < p->K; k++)
            free(p->o_text[k]);
        free(p->o_text);
    }
    free(d->prof);
    for (int i = 0; i < d->n_stats; i++)
        free(d->stats[i].mean), free(d->stats[i].var);
    free(d->stats);
    for (int i = 0; i < d->n_attn; i++)
        free(d->attn[i].p);
    free(d->attn);
    for (int i = 0; i < d->n_moe; i++)
        free(d->moe[i].load);
    free(d->moe);
    memset(d, 0, sizeof *d);
}
