// h5sae.c - see h5sae.h. The partials are read and written as io/h5profile.c does the norm
// profile's, under their own group.
#define _POSIX_C_SOURCE 200809L // defines: fsync
#include "io/h5sae.h"

#include "io/fsutil.h" // fs_sync_path, fs_replace
#include "io/h5attr.h" // h5attr_put_str, h5attr_put_num
#include "model/ah.h"

#include <fcntl.h>
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PART    "saes_part"
#define PART_EX "saes_part_ex"

// a dataset loc/name of rank nd (dims d) of file type ft, written from buf of memory type mt
static herr_t put_array(hid_t loc, const char *name, int nd, const hsize_t *d, hid_t ft, hid_t mt,
                        const void *buf) {
    hid_t s = H5Screate_simple(nd, d, NULL);
    hid_t ds = s < 0 ? -1 : H5Dcreate2(loc, name, ft, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    herr_t r = ds < 0 ? -1 : 0;
    hssize_t elems = s < 0 ? 0 : H5Sget_simple_extent_npoints(s);
    if (r >= 0 && elems > 0) r = H5Dwrite(ds, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf);
    if (ds >= 0 && H5Dclose(ds) < 0) r = -1;
    if (s >= 0) H5Sclose(s);
    return r;
}

int h5sae_write_partials(const char *seg_path, const int64_t *batch, int64_t n, int n_saes,
                         const char *const *names, const double *const *v, const int64_t *L,
                         const double *const *ex, const int64_t *E, struct ah_error *err) {
    hid_t f = H5Fopen(seg_path, H5F_ACC_RDWR, H5P_DEFAULT), g = H5I_INVALID_HID;
    hid_t ge = H5I_INVALID_HID;
    herr_t r = f < 0 ? -1 : 0;
    if (r >= 0) r = g = H5Gcreate2(f, PART, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (r >= 0) r = ge = H5Gcreate2(f, PART_EX, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t d[2] = {(hsize_t)n, 0};
    if (r >= 0) r = put_array(g, "batch", 1, d, H5T_STD_I64LE, H5T_NATIVE_INT64, batch);
    for (int k = 0; r >= 0 && k < n_saes; k++) {
        d[0] = (hsize_t)n, d[1] = (hsize_t)L[k];
        r = put_array(g, names[k], 2, d, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, v[k]);
        d[0] = (hsize_t)E[k], d[1] = 2;
        if (r >= 0) r = put_array(ge, names[k], 2, d, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, ex[k]);
    }
    if (ge >= 0 && H5Gclose(ge) < 0) r = -1;
    if (g >= 0 && H5Gclose(g) < 0) r = -1;
    if (f >= 0 && H5Fclose(f) < 0) r = -1;
    if (r >= 0 && fs_sync_path(seg_path) != 0) r = -1;
    return r < 0
               ? ah_fail(err, AH_EIO, "%s: cannot write the SAEs' partials (disk full?)", seg_path)
               : 0;
}

int h5sae_write_latents(const char *seg_path, const char *name, int64_t nb, const int64_t *batch,
                        const int64_t *btok, int64_t nt, const int64_t *pos, const int64_t *n_ent,
                        int64_t nz, const int32_t *idx, const float *val, struct ah_error *err) {
    hid_t f = H5Fopen(seg_path, H5F_ACC_RDWR, H5P_DEFAULT), g = H5I_INVALID_HID;
    hid_t top = H5I_INVALID_HID;
    herr_t r = f < 0 ? -1 : 0;
    if (r >= 0 && H5Lexists(f, "saes_latents", H5P_DEFAULT) > 0)
        r = top = H5Gopen2(f, "saes_latents", H5P_DEFAULT);
    else if (r >= 0)
        r = top = H5Gcreate2(f, "saes_latents", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (r >= 0) r = g = H5Gcreate2(top, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t b[1] = {(hsize_t)nb}, t[1] = {(hsize_t)nt}, z[1] = {(hsize_t)nz};
    hid_t i64 = H5T_STD_I64LE, mi = H5T_NATIVE_INT64;
    if (r >= 0) r = put_array(g, "batch", 1, b, i64, mi, batch);
    if (r >= 0) r = put_array(g, "batch_tokens", 1, b, i64, mi, btok);
    if (r >= 0) r = put_array(g, "position", 1, t, i64, mi, pos);
    if (r >= 0) r = put_array(g, "n_entries", 1, t, i64, mi, n_ent);
    if (r >= 0) r = put_array(g, "indices", 1, z, H5T_STD_I32LE, H5T_NATIVE_INT32, idx);
    if (r >= 0) r = put_array(g, "values", 1, z, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, val);
    if (g >= 0 && H5Gclose(g) < 0) r = -1;
    if (top >= 0 && H5Gclose(top) < 0) r = -1;
    if (f >= 0 && H5Fclose(f) < 0) r = -1;
    if (r >= 0 && fs_sync_path(seg_path) != 0) r = -1;
    return r < 0 ? ah_fail(err, AH_EIO, "%s: cannot write the latents of SAE \"%s\" (disk full?)",
                           seg_path, name)
                 : 0;
}

void h5sae_src_init(struct h5sae_src *x) {
    x->path[0] = x->name[0] = 0;
    x->f = x->d = x->e = H5I_INVALID_HID;
}

void h5sae_src_close(struct h5sae_src *x) {
    if (x->e >= 0) H5Dclose(x->e);
    if (x->d >= 0) H5Dclose(x->d);
    if (x->f >= 0) H5Fclose(x->f);
    h5sae_src_init(x);
}

int h5sae_batches(const char *path, const char *name, int64_t **batch, int64_t *n) {
    *batch = NULL;
    *n = 0;
    char dname[512];
    snprintf(dname, sizeof dname, PART "/%s", name);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) return -1;
    int rc = 0;
    if (H5Lexists(f, PART, H5P_DEFAULT) > 0 && H5Lexists(f, dname, H5P_DEFAULT) > 0) rc = 1;
    hid_t d = rc == 1 ? H5Dopen2(f, PART "/batch", H5P_DEFAULT) : H5I_INVALID_HID;
    hid_t s = d >= 0 ? H5Dget_space(d) : H5I_INVALID_HID;
    hsize_t m = 0;
    if (rc == 1 && (s < 0 || H5Sget_simple_extent_dims(s, &m, NULL) != 1)) rc = -1;
    if (rc == 1 && !(*batch = malloc((size_t)m * sizeof **batch + 8))) rc = -1;
    if (rc == 1 && m > 0 && H5Dread(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, *batch) < 0)
        rc = -1;
    if (s >= 0) H5Sclose(s);
    if (d >= 0) H5Dclose(d);
    H5Fclose(f);
    if (rc < 0) {
        free(*batch);
        *batch = NULL;
    }
    *n = rc == 1 ? (int64_t)m : 0;
    return rc;
}

int h5sae_read_row(struct h5sae_src *x, const char *path, const char *name, int64_t row, int64_t L,
                   double *buf) {
    if (strcmp(x->path, path) || strcmp(x->name, name)) {
        h5sae_src_close(x);
        snprintf(x->path, sizeof x->path, "%s", path);
        snprintf(x->name, sizeof x->name, "%s", name);
        char dname[512], ename[512];
        snprintf(dname, sizeof dname, PART "/%s", name);
        snprintf(ename, sizeof ename, PART_EX "/%s", name);
        x->f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
        x->d = x->f < 0 ? -1 : H5Dopen2(x->f, dname, H5P_DEFAULT);
        bool has = x->f >= 0 && H5Lexists(x->f, PART_EX, H5P_DEFAULT) > 0 &&
                   H5Lexists(x->f, ename, H5P_DEFAULT) > 0;
        x->e = has ? H5Dopen2(x->f, ename, H5P_DEFAULT) : H5I_INVALID_HID;
    }
    hid_t fs = x->d < 0 ? -1 : H5Dget_space(x->d);
    hsize_t st[2] = {(hsize_t)row, 0}, cnt[2] = {1, (hsize_t)L}, dims[2] = {0, 0};
    herr_t r = fs < 0 ? -1 : H5Sget_simple_extent_dims(fs, dims, NULL);
    if (r >= 0 && (r != 2 || dims[1] != (hsize_t)L || (hsize_t)row >= dims[0])) r = -1;
    hid_t ms = H5Screate_simple(2, cnt, NULL);
    if (r >= 0) r = H5Sselect_hyperslab(fs, H5S_SELECT_SET, st, NULL, cnt, NULL);
    if (r >= 0) r = H5Dread(x->d, H5T_NATIVE_DOUBLE, ms, fs, H5P_DEFAULT, buf);
    H5Sclose(ms);
    if (fs >= 0) H5Sclose(fs);
    return r < 0 ? -1 : 0;
}

int h5sae_read_ex(struct h5sae_src *x, const char *path, const char *name, int64_t off, int64_t n,
                  double *buf) {
    if (n == 0) return 0;
    if (strcmp(x->path, path) || strcmp(x->name, name) || x->e < 0) return -1; // read_row first
    hid_t fs = H5Dget_space(x->e);
    hsize_t st[2] = {(hsize_t)off, 0}, cnt[2] = {(hsize_t)n, 2}, dims[2] = {0, 0};
    herr_t r = fs < 0 ? -1 : H5Sget_simple_extent_dims(fs, dims, NULL);
    if (r >= 0 && (r != 2 || dims[1] != 2 || off < 0 || (hsize_t)(off + n) > dims[0])) r = -1;
    hid_t ms = H5Screate_simple(2, cnt, NULL);
    if (r >= 0) r = H5Sselect_hyperslab(fs, H5S_SELECT_SET, st, NULL, cnt, NULL);
    if (r >= 0) r = H5Dread(x->e, H5T_NATIVE_DOUBLE, ms, fs, H5P_DEFAULT, buf);
    H5Sclose(ms);
    if (fs >= 0) H5Sclose(fs);
    return r < 0 ? -1 : 0;
}

// copies from to `to` and fsyncs it
static int copy_file(const char *from, const char *to) {
    int in = open(from, O_RDONLY), out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int rc = in < 0 || out < 0 ? -1 : 0;
    char buf[1 << 16];
    for (ssize_t n; rc == 0 && (n = read(in, buf, sizeof buf)) != 0;)
        if (n < 0 || write(out, buf, (size_t)n) != n) rc = -1;
    if (rc == 0 && fsync(out) < 0) rc = -1;
    if (in >= 0) close(in);
    if (out >= 0 && close(out) < 0) rc = -1;
    return rc;
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
static herr_t put_item(hid_t loc, const struct h5sae_item *it) {
    if (H5Lexists(loc, it->name, H5P_DEFAULT) > 0 && H5Ldelete(loc, it->name, H5P_DEFAULT) < 0)
        return -1;
    hid_t g = H5Gcreate2(loc, it->name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (g < 0) return -1;
    hsize_t d[1] = {(hsize_t)it->d_sae}, h[1] = {(hsize_t)it->d_sae + 1};
    hsize_t e[2] = {(hsize_t)it->d_sae, (hsize_t)it->top_n};
    hid_t i64 = H5T_STD_I64LE, f64 = H5T_IEEE_F64LE, mi = H5T_NATIVE_INT64, md = H5T_NATIVE_DOUBLE;
    herr_t r = put_array(g, "count", 1, d, i64, mi, it->count);
    if (r >= 0) r = put_array(g, "sum", 1, d, f64, md, it->sum);
    if (r >= 0) r = put_array(g, "sum_sq", 1, d, f64, md, it->sum_sq);
    if (r >= 0) r = put_array(g, "max", 1, d, f64, md, it->max);
    if (r >= 0) r = put_array(g, "l0_hist", 1, h, i64, mi, it->l0_hist);
    if (r >= 0) r = put_array(g, "exemplar_count", 1, d, i64, mi, it->ex_count);
    if (r >= 0) r = put_array(g, "exemplar_value", 2, e, f64, md, it->ex_value);
    if (r >= 0) r = put_array(g, "exemplar_position", 2, e, i64, mi, it->ex_position);
    if (r >= 0) r = put_attrs(g, it);
    if (H5Gclose(g) < 0) r = -1;
    return r;
}

int h5sae_store(const char *path, const struct h5sae_item *items, int n, struct ah_error *err) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    if (copy_file(path, tmp) < 0) {
        unlink(tmp);
        return ah_fail(err, AH_EIO, "%s: cannot copy the master to %s (disk full?)", path, tmp);
    }
    hid_t f = H5Fopen(tmp, H5F_ACC_RDWR, H5P_DEFAULT), g = H5I_INVALID_HID;
    herr_t r = f < 0 ? -1 : 0;
    if (r >= 0 && H5Lexists(f, "saes", H5P_DEFAULT) > 0)
        r = g = H5Gopen2(f, "saes", H5P_DEFAULT);
    else if (r >= 0)
        r = g = H5Gcreate2(f, "saes", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    for (int i = 0; r >= 0 && i < n; i++)
        r = put_item(g, &items[i]);
    if (g >= 0 && H5Gclose(g) < 0) r = -1;
    if (f >= 0 && H5Fclose(f) < 0) r = -1;
    if (r >= 0 && fs_replace(tmp, path) < 0) r = -1;
    if (r < 0) {
        unlink(tmp);
        return ah_fail(err, AH_EIO,
                       "%s: cannot write the SAEs' results into the master (disk "
                       "full?)",
                       path);
    }
    return 0;
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
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t g = f >= 0 && H5Lexists(f, "saes", H5P_DEFAULT) > 0 ? H5Gopen2(f, "saes", H5P_DEFAULT)
                                                              : H5I_INVALID_HID;
    if (g >= 0) H5Literate(g, H5_INDEX_NAME, H5_ITER_INC, NULL, print_one, u);
    if (g >= 0) H5Gclose(g);
    if (f >= 0) H5Fclose(f);
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
    if (r >= 0) r = put_array(g, "batch", 1, d, H5T_STD_I64LE, H5T_NATIVE_INT64, batch);
    for (int k = 0; r >= 0 && k < n_saes; k++)
        r = put_array(g, names[k], 2, d, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, v + (size_t)k * n * 4);
    if (g >= 0 && H5Gclose(g) < 0) r = -1;
    if (f >= 0 && H5Fclose(f) < 0) r = -1;
    if (r >= 0 && fs_sync_path(seg_path) != 0) r = -1;
    return r < 0 ? ah_fail(err, AH_EIO, "%s: cannot write the SAEs' CE partials (disk full?)",
                           seg_path)
                 : 0;
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

int h5sae_store_eval(const char *path, const struct h5sae_eval *items, int n,
                     struct ah_error *err) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    if (copy_file(path, tmp) < 0) {
        unlink(tmp);
        return ah_fail(err, AH_EIO, "%s: cannot copy the master to %s (disk full?)", path, tmp);
    }
    hid_t f = H5Fopen(tmp, H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t f64 = H5T_IEEE_F64LE, md = H5T_NATIVE_DOUBLE;
    herr_t r = f < 0 ? -1 : 0;
    for (int i = 0; r >= 0 && i < n; i++) {
        char gname[600];
        snprintf(gname, sizeof gname, "saes/%s", items[i].name);
        hid_t g = H5Gopen2(f, gname, H5P_DEFAULT);
        r = g < 0 ? -1 : 0;
        if (r >= 0) r = h5attr_put_num(g, "ce_clean", f64, md, &items[i].clean);
        if (r >= 0) r = h5attr_put_num(g, "ce_spliced", f64, md, &items[i].spliced);
        if (r >= 0) r = h5attr_put_num(g, "ce_zero", f64, md, &items[i].zero);
        if (r >= 0) r = h5attr_put_num(g, "ce_loss_recovered", f64, md, &items[i].recovered);
        if (r >= 0)
            r = h5attr_put_num(g, "n_ce_tokens", H5T_STD_I64LE, H5T_NATIVE_INT64,
                               &items[i].n_tokens);
        if (g >= 0 && H5Gclose(g) < 0) r = -1;
    }
    if (f >= 0 && H5Fclose(f) < 0) r = -1;
    if (r >= 0 && fs_replace(tmp, path) < 0) r = -1;
    if (r < 0) {
        unlink(tmp);
        return ah_fail(err, AH_EIO, "%s: cannot write the SAEs' CE results into the master", path);
    }
    return 0;
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
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t g = f >= 0 && H5Lexists(f, "saes", H5P_DEFAULT) > 0 ? H5Gopen2(f, "saes", H5P_DEFAULT)
                                                              : H5I_INVALID_HID;
    if (g >= 0) H5Literate(g, H5_INDEX_NAME, H5_ITER_INC, NULL, print_eval_one, &u);
    if (g >= 0) H5Gclose(g);
    if (f >= 0) H5Fclose(f);
    return u.count;
}
