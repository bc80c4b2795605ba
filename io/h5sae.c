// h5sae.c - see h5sae.h. The partials are written and read back through io/h5part.c's steps,
// as io/h5profile.c does the norm profile's, under their own groups.
#include "io/h5sae.h"

#include "io/h5attr.h"     // h5attr_put_str, h5attr_put_num
#include "io/h5part_hid.h" // h5part_put_array, h5part_group_new, h5part_store, ...
#include "model/ah.h"

#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PART    "saes_part"
#define PART_EX "saes_part_ex"

int h5sae_write_partials(const char *seg_path, const int64_t *batch, int64_t n, int n_saes,
                         const char *const *names, const double *const *v, const int64_t *L,
                         const double *const *ex, const int64_t *E, struct ah_error *err) {
    hid_t f = H5Fopen(seg_path, H5F_ACC_RDWR, H5P_DEFAULT), g = H5I_INVALID_HID;
    hid_t ge = H5I_INVALID_HID;
    herr_t r = f < 0 ? -1 : 0;
    if (r >= 0) r = g = H5Gcreate2(f, PART, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (r >= 0) r = ge = H5Gcreate2(f, PART_EX, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t d[2] = {(hsize_t)n, 0};
    if (r >= 0) r = h5part_put_array(g, "batch", 1, d, H5T_STD_I64LE, H5T_NATIVE_INT64, batch);
    for (int k = 0; r >= 0 && k < n_saes; k++) {
        d[0] = (hsize_t)n, d[1] = (hsize_t)L[k];
        r = h5part_put_array(g, names[k], 2, d, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, v[k]);
        d[0] = (hsize_t)E[k], d[1] = 2;
        if (r >= 0)
            r = h5part_put_array(ge, names[k], 2, d, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, ex[k]);
    }
    if (ge >= 0 && H5Gclose(ge) < 0) r = -1;
    if (g >= 0 && H5Gclose(g) < 0) r = -1;
    if (h5part_close_sync(f, seg_path, r) < 0)
        return ah_fail(err, AH_EIO, "%s: cannot write the SAEs' partials (disk full?)", seg_path);
    return 0;
}

int h5sae_write_latents(const char *seg_path, const char *name, int64_t nb, const int64_t *batch,
                        const int64_t *btok, int64_t nt, const int64_t *pos, const int64_t *n_ent,
                        int64_t nz, const int32_t *idx, const float *val, struct ah_error *err) {
    hid_t f = H5Fopen(seg_path, H5F_ACC_RDWR, H5P_DEFAULT), g = H5I_INVALID_HID;
    hid_t top = H5I_INVALID_HID;
    herr_t r = f < 0 ? -1 : 0;
    if (r >= 0) r = top = h5part_group(f, "saes_latents");
    if (r >= 0) r = g = H5Gcreate2(top, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t b[1] = {(hsize_t)nb}, t[1] = {(hsize_t)nt}, z[1] = {(hsize_t)nz};
    hid_t i64 = H5T_STD_I64LE, mi = H5T_NATIVE_INT64;
    if (r >= 0) r = h5part_put_array(g, "batch", 1, b, i64, mi, batch);
    if (r >= 0) r = h5part_put_array(g, "batch_tokens", 1, b, i64, mi, btok);
    if (r >= 0) r = h5part_put_array(g, "position", 1, t, i64, mi, pos);
    if (r >= 0) r = h5part_put_array(g, "n_entries", 1, t, i64, mi, n_ent);
    if (r >= 0) r = h5part_put_array(g, "indices", 1, z, H5T_STD_I32LE, H5T_NATIVE_INT32, idx);
    if (r >= 0) r = h5part_put_array(g, "values", 1, z, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, val);
    if (g >= 0 && H5Gclose(g) < 0) r = -1;
    if (top >= 0 && H5Gclose(top) < 0) r = -1;
    if (h5part_close_sync(f, seg_path, r) < 0)
        return ah_fail(err, AH_EIO, "%s: cannot write the latents of SAE \"%s\" (disk full?)",
                       seg_path, name);
    return 0;
}

void h5sae_src_init(struct h5sae_src *x) {
    h5part_src_init(&x->rows);
    h5part_src_init(&x->ex);
}

void h5sae_src_close(struct h5sae_src *x) {
    h5part_src_close(&x->ex);
    h5part_src_close(&x->rows);
}

int h5sae_batches(const char *path, const char *name, int64_t **batch, int64_t *n) {
    return h5part_batches(path, PART, name, batch, n);
}

int h5sae_read_row(struct h5sae_src *x, const char *path, const char *name, int64_t row, int64_t L,
                   double *buf) {
    return h5part_read_rows(&x->rows, path, PART, name, row, 1, L, buf);
}

int h5sae_read_ex(struct h5sae_src *x, const char *path, const char *name, int64_t off, int64_t n,
                  double *buf) {
    return h5part_read_rows(&x->ex, path, PART_EX, name, off, n, 2, buf);
}

// the item's attributes on group g
static herr_t put_attrs(hid_t g, const struct h5sae_item *it) {
    hid_t i64 = H5T_STD_I64LE, f64 = H5T_IEEE_F64LE, mi = H5T_NATIVE_INT64, md = H5T_NATIVE_DOUBLE;
    herr_t r = h5attr_put_str(g, "on", it->on);
    if (r >= 0) r = h5attr_put_str(g, "path", it->path);
    if (r >= 0) r = h5attr_put_str(g, "layout", it->layout);
    if (r >= 0) r = h5attr_put_str(g, "architecture", it->arch);
    if (r >= 0) r = h5attr_put_num(g, "d_in", i64, mi, &it->d_in);
    if (r >= 0) r = h5attr_put_num(g, "d_sae", i64, mi, &it->d_sae);
    if (r >= 0) r = h5attr_put_num(g, "k", i64, mi, &it->k);
    if (r >= 0) r = h5attr_put_num(g, "top_n", i64, mi, &it->top_n);
    if (r >= 0) r = h5attr_put_num(g, "context_before", i64, mi, &it->ctx_before);
    if (r >= 0) r = h5attr_put_num(g, "context_after", i64, mi, &it->ctx_after);
    if (r >= 0) r = h5attr_put_num(g, "n_tokens", i64, mi, &it->n_tokens);
    if (r >= 0) r = h5attr_put_num(g, "sse", f64, md, &it->sse);
    if (r >= 0) r = h5attr_put_num(g, "total_variance", f64, md, &it->total_var);
    if (r >= 0) r = h5attr_put_num(g, "fvu", f64, md, &it->fvu);
    if (r >= 0) r = h5attr_put_num(g, "l0_mean", f64, md, &it->l0_mean);
    if (r >= 0) r = h5attr_put_num(g, "dense_threshold", f64, md, &it->dense_threshold);
    if (r >= 0) r = h5attr_put_num(g, "n_dead", i64, mi, &it->n_dead);
    if (r >= 0) r = h5attr_put_num(g, "n_dense", i64, mi, &it->n_dense);
    return r;
}

// group loc/it->name with the item's datasets and attributes
static herr_t put_item(hid_t loc, const void *items, int i) {
    const struct h5sae_item *it = (const struct h5sae_item *)items + i;
    hid_t g = h5part_group_new(loc, it->name);
    if (g < 0) return -1;
    hsize_t d[1] = {(hsize_t)it->d_sae}, h[1] = {(hsize_t)it->d_sae + 1};
    hsize_t e[2] = {(hsize_t)it->d_sae, (hsize_t)it->top_n};
    hid_t i64 = H5T_STD_I64LE, f64 = H5T_IEEE_F64LE, mi = H5T_NATIVE_INT64, md = H5T_NATIVE_DOUBLE;
    herr_t r = h5part_put_array(g, "count", 1, d, i64, mi, it->count);
    if (r >= 0) r = h5part_put_array(g, "sum", 1, d, f64, md, it->sum);
    if (r >= 0) r = h5part_put_array(g, "sum_sq", 1, d, f64, md, it->sum_sq);
    if (r >= 0) r = h5part_put_array(g, "max", 1, d, f64, md, it->max);
    if (r >= 0) r = h5part_put_array(g, "l0_hist", 1, h, i64, mi, it->l0_hist);
    if (r >= 0) r = h5part_put_array(g, "exemplar_count", 1, d, i64, mi, it->ex_count);
    if (r >= 0) r = h5part_put_array(g, "exemplar_value", 2, e, f64, md, it->ex_value);
    if (r >= 0) r = h5part_put_array(g, "exemplar_position", 2, e, i64, mi, it->ex_position);
    if (r >= 0) r = put_attrs(g, it);
    if (H5Gclose(g) < 0) r = -1;
    return r;
}

int h5sae_store(const char *path, const struct h5sae_item *items, int n, struct ah_error *err) {
    return h5part_store(path, "saes", put_item, items, n, "the SAEs' results", err);
}

static int print_ce(hid_t g, const char *name, const char *prefix, FILE *out); // (below)

// one SAE's line (H5Literate callback over /saes)
static herr_t print_one(hid_t loc, const char *name, const H5L_info_t *info, void *u) {
    (void)info;
    FILE *out = ((void **)u)[0];
    int *count = ((void **)u)[1];
    hid_t g = H5Gopen2(loc, name, H5P_DEFAULT);
    if (g < 0) return 0;
    char *on = h5attr_get_str(g, "on"), *arch = h5attr_get_str(g, "architecture");
    char *layout = h5attr_get_str(g, "layout");
    int64_t n = 0, d = 0, dead = 0, dense = 0;
    double fvu = NAN, l0 = NAN;
    h5attr_get_num(g, "n_tokens", H5T_NATIVE_INT64, &n);
    h5attr_get_num(g, "d_sae", H5T_NATIVE_INT64, &d);
    h5attr_get_num(g, "n_dead", H5T_NATIVE_INT64, &dead);
    h5attr_get_num(g, "n_dense", H5T_NATIVE_INT64, &dense);
    h5attr_get_num(g, "fvu", H5T_NATIVE_DOUBLE, &fvu);
    h5attr_get_num(g, "l0_mean", H5T_NATIVE_DOUBLE, &l0);
    fprintf(out,
            "sae %s (%s, %s) on %s: %lld tokens, FVU %.4f, L0 %.2f, dead %lld / %lld, dense "
            "%lld\n",
            name, arch ? arch : "?", layout ? layout : "?", on ? on : "?", (long long)n, fvu, l0,
            (long long)dead, (long long)d, (long long)dense);
    print_ce(g, name, "  ", out); // the splice-in evaluation's line, if evaluated
    free(on), free(arch), free(layout);
    H5Gclose(g);
    (*count)++;
    return 0;
}

int h5sae_print(const char *path, FILE *out) {
    int count = 0;
    void *u[2] = {out, &count};
    h5part_iterate(path, "saes", print_one, u);
    return count;
}

// ---------------------------------------------------------------------------------------------
// the splice-in evaluation's partials and results

#define EVAL "saes_eval"

int h5sae_write_eval(const char *seg_path, const int64_t *batch, int64_t n, int n_saes,
                     const char *const *names, const double *v, struct ah_error *err) {
    hid_t f = H5Fopen(seg_path, H5F_ACC_RDWR, H5P_DEFAULT), g = H5I_INVALID_HID;
    herr_t r = f < 0 ? -1 : 0;
    if (r >= 0) r = g = H5Gcreate2(f, EVAL, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t d[2] = {(hsize_t)n, 4};
    if (r >= 0) r = h5part_put_array(g, "batch", 1, d, H5T_STD_I64LE, H5T_NATIVE_INT64, batch);
    for (int k = 0; r >= 0 && k < n_saes; k++)
        r = h5part_put_array(g, names[k], 2, d, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE,
                             v + (size_t)k * n * 4);
    if (g >= 0 && H5Gclose(g) < 0) r = -1;
    if (h5part_close_sync(f, seg_path, r) < 0)
        return ah_fail(err, AH_EIO, "%s: cannot write the SAEs' CE partials (disk full?)",
                       seg_path);
    return 0;
}

// the whole dataset loc/name of n elements of memory type mt into a malloc'd *buf (n elements)
static herr_t read_all(hid_t loc, const char *name, hid_t mt, size_t es, void **buf, hsize_t *n) {
    hid_t d = H5Dopen2(loc, name, H5P_DEFAULT), s = d < 0 ? -1 : H5Dget_space(d);
    hssize_t m = s < 0 ? -1 : H5Sget_simple_extent_npoints(s);
    herr_t r = m < 0 ? -1 : 0;
    if (r >= 0 && !(*buf = malloc((size_t)m * es + 8))) r = -1;
    if (r >= 0 && m > 0) r = H5Dread(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, *buf);
    if (r >= 0) *n = (hsize_t)m;
    if (s >= 0) H5Sclose(s);
    if (d >= 0) H5Dclose(d);
    return r;
}

int h5sae_read_eval(const char *path, const char *name, int64_t **batch, double **v, int64_t *n) {
    *batch = NULL, *v = NULL, *n = 0;
    char dname[600];
    snprintf(dname, sizeof dname, EVAL "/%s", name);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) return -1;
    if (H5Lexists(f, EVAL, H5P_DEFAULT) <= 0 || H5Lexists(f, dname, H5P_DEFAULT) <= 0) {
        H5Fclose(f);
        return 0;
    }
    hsize_t nb = 0, nv = 0;
    herr_t r = read_all(f, EVAL "/batch", H5T_NATIVE_INT64, 8, (void **)batch, &nb);
    if (r >= 0) r = read_all(f, dname, H5T_NATIVE_DOUBLE, 8, (void **)v, &nv);
    if (r >= 0 && nv != 4 * nb) r = -1;
    H5Fclose(f);
    if (r < 0) {
        free(*batch), free(*v);
        *batch = NULL, *v = NULL;
        return -1;
    }
    *n = (int64_t)nb;
    return 0;
}

// the CE attributes of item i on its group g/<name>
static herr_t put_eval(hid_t loc, const void *items, int i) {
    const struct h5sae_eval *it = (const struct h5sae_eval *)items + i;
    hid_t f64 = H5T_IEEE_F64LE, md = H5T_NATIVE_DOUBLE;
    hid_t g = H5Lexists(loc, it->name, H5P_DEFAULT) > 0 ? H5Gopen2(loc, it->name, H5P_DEFAULT)
                                                        : H5I_INVALID_HID;
    herr_t r = g < 0 ? -1 : 0;
    if (r >= 0) r = h5attr_put_num(g, "ce_clean", f64, md, &it->clean);
    if (r >= 0) r = h5attr_put_num(g, "ce_spliced", f64, md, &it->spliced);
    if (r >= 0) r = h5attr_put_num(g, "ce_zero", f64, md, &it->zero);
    if (r >= 0) r = h5attr_put_num(g, "ce_loss_recovered", f64, md, &it->recovered);
    if (r >= 0)
        r = h5attr_put_num(g, "n_ce_tokens", H5T_STD_I64LE, H5T_NATIVE_INT64, &it->n_tokens);
    if (g >= 0 && H5Gclose(g) < 0) r = -1;
    return r;
}

int h5sae_store_eval(const char *path, const struct h5sae_eval *items, int n,
                     struct ah_error *err) {
    return h5part_store(path, "saes", put_eval, items, n, "the SAEs' CE results", err);
}

bool h5sae_has_eval(const char *path, const char *name) {
    char gname[600];
    snprintf(gname, sizeof gname, "saes/%s", name);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    bool has = f >= 0 && H5Lexists(f, "saes", H5P_DEFAULT) > 0 &&
               H5Lexists(f, gname, H5P_DEFAULT) > 0 &&
               H5Aexists_by_name(f, gname, "ce_loss_recovered", H5P_DEFAULT) > 0;
    if (f >= 0) H5Fclose(f);
    return has;
}

// the CE line of group g (an SAE of /saes) if it has one; 1 if printed
static int print_ce(hid_t g, const char *name, const char *prefix, FILE *out) {
    if (H5Aexists(g, "ce_loss_recovered") <= 0) return 0;
    double c = NAN, s = NAN, z = NAN, rec = NAN;
    int64_t n = 0;
    h5attr_get_num(g, "ce_clean", H5T_NATIVE_DOUBLE, &c);
    h5attr_get_num(g, "ce_spliced", H5T_NATIVE_DOUBLE, &s);
    h5attr_get_num(g, "ce_zero", H5T_NATIVE_DOUBLE, &z);
    h5attr_get_num(g, "ce_loss_recovered", H5T_NATIVE_DOUBLE, &rec);
    h5attr_get_num(g, "n_ce_tokens", H5T_NATIVE_INT64, &n);
    fprintf(out,
            "%ssae %s: CE loss recovered %.4f (CE clean %.4f, spliced %.4f, zero-ablated %.4f "
            "nats over %lld tokens)\n",
            prefix, name, rec, c, s, z, (long long)n);
    return 1;
}

struct ce_print {
    FILE *out;
    const char *prefix;
    int count;
};

static herr_t print_eval_one(hid_t loc, const char *name, const H5L_info_t *info, void *u) {
    (void)info;
    struct ce_print *a = u;
    hid_t g = H5Gopen2(loc, name, H5P_DEFAULT);
    if (g < 0) return 0;
    a->count += print_ce(g, name, a->prefix, a->out);
    H5Gclose(g);
    return 0;
}

int h5sae_print_eval(const char *path, const char *prefix, FILE *out) {
    struct ce_print u = {out, prefix, 0};
    h5part_iterate(path, "saes", print_eval_one, &u);
    return u.count;
}
