// h5profile.c - see h5profile.h. The partials are written and read back through io/h5part.c's
// steps, which the SAEs' files share.
#include "io/h5profile.h"

#include "io/h5attr.h"     // h5attr_put_str, h5attr_put_num
#include "io/h5part_hid.h" // h5part_put_array, h5part_group_new, h5part_store, ...
#include "model/ah.h"

#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PART "norm_profile_part"

bool h5prof_has_group(const char *path, const char *name) {
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    bool yes = f >= 0 && H5Lexists(f, name, H5P_DEFAULT) > 0;
    if (f >= 0) H5Fclose(f);
    return yes;
}

int h5prof_write_partials(const char *seg_path, const int64_t *batch, int64_t n, int n_values,
                          const char *const *names, const double *const *v, int64_t L,
                          struct ah_error *err) {
    hid_t f = H5Fopen(seg_path, H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t g = f < 0 ? H5I_INVALID_HID : H5Gcreate2(f, PART, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t d[2] = {(hsize_t)n, (hsize_t)L};
    herr_t r =
        g < 0 ? -1 : h5part_put_array(g, "batch", 1, d, H5T_STD_I64LE, H5T_NATIVE_INT64, batch);
    for (int k = 0; r >= 0 && k < n_values; k++)
        r = h5part_put_array(g, names[k], 2, d, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, v[k]);
    if (g >= 0 && H5Gclose(g) < 0) r = -1;
    if (h5part_close_sync(f, seg_path, r) < 0)
        return ah_fail(err, AH_EIO, "%s: cannot write the norm profile's partials (disk full?)",
                       seg_path);
    return 0;
}

int h5prof_batches(const char *path, const char *value, int64_t **batch, int64_t *n) {
    return h5part_batches(path, PART, value, batch, n);
}

int h5prof_read_row(struct h5part_src *x, const char *path, const char *value, int64_t row,
                    int64_t L, double *buf) {
    return h5part_read_rows(x, path, PART, value, row, 1, L, buf);
}

// group loc/it->name with the item's datasets and attributes
static herr_t put_item(hid_t loc, const void *items, int i) {
    const struct h5prof_item *it = (const struct h5prof_item *)items + i;
    hid_t g = h5part_group_new(loc, it->name);
    if (g < 0) return -1;
    hsize_t t[1] = {(hsize_t)it->T}, h[1] = {NORM_PROFILE_BINS}, o[1] = {(hsize_t)it->n_out};
    hid_t i64 = H5T_STD_I64LE, f64 = H5T_IEEE_F64LE, mi = H5T_NATIVE_INT64, md = H5T_NATIVE_DOUBLE;
    herr_t r = h5part_put_array(g, "count", 1, t, i64, mi, it->count);
    if (r >= 0) r = h5part_put_array(g, "sum", 1, t, f64, md, it->sum);
    if (r >= 0) r = h5part_put_array(g, "sum_sq", 1, t, f64, md, it->sum_sq);
    if (r >= 0) r = h5part_put_array(g, "max", 1, t, f64, md, it->max);
    if (r >= 0) r = h5part_put_array(g, "hist", 1, h, i64, mi, it->hist);
    if (r >= 0) r = h5part_put_array(g, "outlier_prompt", 1, o, i64, mi, it->o_prompt);
    if (r >= 0) r = h5part_put_array(g, "outlier_position", 1, o, i64, mi, it->o_pos);
    if (r >= 0) r = h5part_put_array(g, "outlier_token", 1, o, i64, mi, it->o_tok);
    if (r >= 0) r = h5part_put_array(g, "outlier_norm", 1, o, f64, md, it->o_norm);
    if (r >= 0) r = h5attr_put_str(g, "value", it->value);
    if (r >= 0) r = h5attr_put_num(g, "n_nan", i64, mi, &it->n_nan);
    hsize_t e[1] = {NORM_PROFILE_BINS - 1};
    hid_t s = r < 0 ? -1 : H5Screate_simple(1, e, NULL);
    hid_t a = s < 0 ? -1 : H5Acreate2(g, "hist_edges", f64, s, H5P_DEFAULT, H5P_DEFAULT);
    r = a < 0 ? -1 : H5Awrite(a, md, it->edges);
    if (a >= 0 && H5Aclose(a) < 0) r = -1;
    if (s >= 0) H5Sclose(s);
    if (H5Gclose(g) < 0) r = -1;
    return r;
}

int h5prof_store(const char *path, const struct h5prof_item *items, int n, struct ah_error *err) {
    return h5part_store(path, "norm_profile", put_item, items, n, "the norm profile", err);
}

struct list_acc {
    char *buf;
    size_t n;
    int count;
};

static herr_t list_one(hid_t g, const char *name, const H5L_info_t *info, void *u) {
    (void)g, (void)info;
    struct list_acc *a = u;
    size_t at = strlen(a->buf);
    snprintf(a->buf + at, a->n - at, "%s%s", a->count ? ", " : "", name);
    a->count++;
    return 0;
}

int h5prof_list(const char *path, char *buf, size_t n) {
    buf[0] = 0;
    struct list_acc a = {buf, n, 0};
    h5part_iterate(path, "norm_profile", list_one, &a);
    return a.count;
}
