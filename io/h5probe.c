// h5probe.c - see h5probe.h (moved from harvest/export_probe.c: the same HDF5 calls in the same
// order, so the same bytes).
#include "io/h5probe.h"
#include "io/h5attr.h"
#include "io/h5src_hid.h" // defines: h5src_hid

#include <stdlib.h>
#include <string.h>

#define MAX_DIMS 16

struct h5probe {
    hid_t f, prompts, pooled; // the file, its /prompts and /pooled (while being laid out)
    hid_t *ds;                // (n_ds) the pooled datasets by slot; -1 if not asked for
    int n_ds;
};

static struct h5probe *wrap(hid_t f) {
    struct h5probe *p = f >= 0 ? malloc(sizeof *p) : NULL;
    if (!p) {
        if (f >= 0) H5Fclose(f);
        return NULL;
    }
    *p = (struct h5probe){.f = f, .prompts = H5I_INVALID_HID, .pooled = H5I_INVALID_HID};
    return p;
}

struct h5probe *h5probe_create(const char *path) {
    return wrap(H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
}

struct h5probe *h5probe_open(const char *path) {
    return wrap(H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT));
}

int h5probe_close(struct h5probe *p) {
    if (!p) return 0;
    for (int i = 0; i < p->n_ds; i++)
        if (p->ds[i] >= 0) H5Dclose(p->ds[i]);
    if (p->prompts >= 0) H5Gclose(p->prompts);
    if (p->pooled >= 0) H5Gclose(p->pooled);
    int rc = H5Fclose(p->f) < 0 ? -1 : 0;
    if (rc < 0) h5src_set_stuck();
    free(p->ds);
    free(p);
    return rc;
}

int h5probe_attr_str(struct h5probe *p, const char *name, const char *value) {
    return h5attr_put_str(p->f, name, value) < 0 ? -1 : 0;
}

int h5probe_attr_i64(struct h5probe *p, const char *name, int64_t value) {
    return h5attr_put_num(p->f, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value) < 0 ? -1 : 0;
}

int h5probe_prompts(struct h5probe *p) {
    p->prompts = H5Gcreate2(p->f, "prompts", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    return p->prompts < 0 ? -1 : 0;
}

int h5probe_table(struct h5probe *p, const char *name, const int64_t *v, int64_t n) {
    hsize_t d = (hsize_t)n;
    hid_t sp = H5Screate_simple(1, &d, NULL);
    hid_t ds =
        H5Dcreate2(p->prompts, name, H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    herr_t r = ds < 0 ? -1
               : d    ? H5Dwrite(ds, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v)
                      : 0;
    if (ds >= 0) H5Dclose(ds);
    H5Sclose(sp);
    return r < 0 ? -1 : 0;
}

struct fields {
    hid_t prompts;
    const int64_t *keep;
    int64_t n_keep;
};

// /prompts/NAME of the source for every field (a dataset with attribute field_type): the kept
// prompts' values, same type
static herr_t copy_field(hid_t g, const char *name, const H5L_info_t *info, void *u) {
    (void)info;
    struct fields *o = u;
    hid_t src = H5Dopen2(g, name, H5P_DEFAULT);
    if (src < 0) return -1;
    if (H5Aexists(src, "field_type") <= 0) return H5Dclose(src) < 0 ? -1 : 0;
    hid_t t = H5Dget_type(src), sp = H5Dget_space(src);
    size_t w = H5Tget_size(t);
    int64_t N = (int64_t)H5Sget_simple_extent_npoints(sp);
    char *all = malloc((size_t)(N ? N : 1) * w), *kept = malloc((size_t)(o->n_keep + 1) * w);
    char *ft = h5attr_get_str(src, "field_type");
    herr_t r =
        all && kept && ft ? (N ? H5Dread(src, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, all) : 0) : -1;
    for (int64_t k = 0; r >= 0 && k < o->n_keep; k++)
        memcpy(kept + (size_t)k * w, all + (size_t)o->keep[k] * w, w);
    hsize_t d = (hsize_t)o->n_keep;
    hid_t fs = H5Screate_simple(1, &d, NULL);
    hid_t ds = r >= 0 ? H5Dcreate2(o->prompts, name, t, fs, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)
                      : H5I_INVALID_HID;
    r = ds < 0 ? -1 : d ? H5Dwrite(ds, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, kept) : 0;
    if (r >= 0) r = h5attr_put_str(ds, "field_type", ft);
    if (ds >= 0) H5Dclose(ds);
    H5Sclose(fs);
    H5Sclose(sp);
    H5Tclose(t);
    H5Dclose(src);
    free(ft);
    free(all);
    free(kept);
    return r < 0 ? -1 : 0;
}

int h5probe_fields(struct h5probe *p, const struct h5src *src, const int64_t *keep, int64_t n) {
    struct fields o = {p->prompts, keep, n};
    return H5Literate_by_name(h5src_hid(src), "prompts", H5_INDEX_NAME, H5_ITER_INC, NULL,
                              copy_field, &o, H5P_DEFAULT) < 0
               ? -1
               : 0;
}

int h5probe_pooled(struct h5probe *p, int n_slots) {
    if (!(p->ds = malloc((size_t)(n_slots ? n_slots : 1) * sizeof *p->ds))) return -1;
    for (p->n_ds = 0; p->n_ds < n_slots; p->n_ds++)
        p->ds[p->n_ds] = H5I_INVALID_HID;
    p->pooled = H5Gcreate2(p->f, "pooled", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    return p->pooled < 0 ? -1 : 0;
}

static hid_t make_2d(hid_t g, const char *name, int64_t n, int ndim, const int64_t *dims) {
    hsize_t d[MAX_DIMS + 1] = {(hsize_t)n};
    for (int k = 0; k < ndim && k < MAX_DIMS; k++)
        d[k + 1] = (hsize_t)dims[k];
    hid_t sp = H5Screate_simple(ndim + 1, d, NULL);
    hid_t ds = H5Dcreate2(g, name, H5T_IEEE_F32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Sclose(sp);
    return ds;
}

int h5probe_pool_name(struct h5probe *p, int i, const char *name, unsigned pools, int64_t n_rows,
                      int ndim, const int64_t *dims) {
    static const char *const pool_name[2] = {"last", "mean"};
    if (ndim > MAX_DIMS || 2 * i + 1 >= p->n_ds) return -1;
    hid_t g = H5Gcreate2(p->pooled, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    int rc = g < 0 ? -1 : 0;
    for (int w = 0; w < 2 && g >= 0; w++)
        if ((pools >> w & 1) &&
            (p->ds[2 * i + w] = make_2d(g, pool_name[w], n_rows, ndim, dims)) < 0)
            rc = -1;
    if (g >= 0) H5Gclose(g);
    return rc;
}

void h5probe_pooled_end(struct h5probe *p) {
    if (p->pooled >= 0) H5Gclose(p->pooled);
    p->pooled = H5I_INVALID_HID;
}

int h5probe_rows(struct h5probe *p, int slot, int64_t r, int64_t n, int64_t e, const float *buf) {
    hid_t ds = p->ds[slot];
    hid_t fs = H5Dget_space(ds);
    hsize_t start[MAX_DIMS + 1] = {(hsize_t)r}, cnt[MAX_DIMS + 1];
    H5Sget_simple_extent_dims(fs, cnt, NULL);
    cnt[0] = (hsize_t)n;
    hsize_t flat = (hsize_t)(n * e);
    hid_t ms = H5Screate_simple(1, &flat, NULL);
    herr_t rc = H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, cnt, NULL);
    if (rc >= 0 && n > 0) rc = H5Dwrite(ds, H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, buf);
    H5Sclose(ms);
    H5Sclose(fs);
    return rc < 0 ? -1 : 0;
}
