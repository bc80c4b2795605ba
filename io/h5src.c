// h5src.c - see h5src.h: an HDF5 file read-only for `harvest export` (moved from
// harvest/export_src.c and export_shard.c: the same HDF5 calls in the same order).
#define _POSIX_C_SOURCE 200809L // defines: strdup
#include "io/h5src.h"
#include "io/h5attr.h"    // defines: h5attr_get_num, h5attr_get_str, h5attr_get_strs
#include "io/h5src_hid.h" // defines: h5src_hid, h5src_dset_hid

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct h5src {
    hid_t f;
};

struct h5dset {
    hid_t d;
};

void h5src_quiet(void) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

hid_t h5src_hid(const struct h5src *f) {
    return f->f;
}

hid_t h5src_dset_hid(const struct h5dset *d) {
    return d->d;
}

struct h5src *h5src_open(const char *path) {
    struct h5src *f = malloc(sizeof *f);
    if (!f) return NULL;
    if ((f->f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT)) >= 0) return f;
    free(f);
    return NULL;
}

void h5src_close(struct h5src *f) {
    if (!f) return;
    H5Fclose(f->f);
    free(f);
}

bool h5src_has(const struct h5src *f, const char *path) {
    char part[1024];
    for (const char *slash = path;; slash++) {
        slash = strchr(slash, '/');
        size_t n = slash ? (size_t)(slash - path) : strlen(path);
        if (n >= sizeof part) return false;
        memcpy(part, path, n);
        part[n] = 0;
        if (H5Lexists(f->f, part, H5P_DEFAULT) <= 0) return false;
        if (!slash) return true;
    }
}

bool h5src_has_attr(const struct h5src *f, const char *name) {
    return H5Aexists(f->f, name) > 0;
}

int h5src_attr_i64(const struct h5src *f, const char *name, int64_t *v) {
    return h5attr_get_num(f->f, name, H5T_NATIVE_INT64, v);
}

char *h5src_attr_str(const struct h5src *f, const char *name) {
    return h5attr_get_str(f->f, name);
}

int64_t *h5src_table(const struct h5src *f, const char *path, int64_t *n) {
    hid_t d = H5Dopen2(f->f, path, H5P_DEFAULT);
    if (d < 0) return NULL;
    hid_t sp = H5Dget_space(d);
    hsize_t dim = 0;
    int64_t *v = NULL;
    if (H5Sget_simple_extent_ndims(sp) == 1 && H5Sget_simple_extent_dims(sp, &dim, NULL) == 1 &&
        (*n < 0 || (int64_t)dim == *n)) {
        v = malloc((dim ? dim : 1) * sizeof *v);
        if (v && dim && H5Dread(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) < 0) {
            free(v);
            v = NULL;
        }
        *n = (int64_t)dim;
    }
    H5Sclose(sp);
    H5Dclose(d);
    return v;
}

char **h5src_names(const struct h5src *f, const char *path, int *n) {
    hid_t g = H5Gopen2(f->f, path, H5P_DEFAULT);
    H5G_info_t gi;
    if (g < 0 || H5Gget_info(g, &gi) < 0) {
        if (g >= 0) H5Gclose(g);
        return NULL;
    }
    char **out = calloc((size_t)gi.nlinks + 1, sizeof *out), buf[300];
    for (hsize_t k = 0; out && k < gi.nlinks; k++) {
        buf[0] = 0;
        H5Lget_name_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_INC, k, buf, sizeof buf, H5P_DEFAULT);
        if (!(out[k] = strdup(buf))) {
            h5src_names_free(out, (int)k);
            out = NULL;
        }
    }
    H5Gclose(g);
    *n = (int)gi.nlinks;
    return out;
}

void h5src_names_free(char **names, int n) {
    for (int k = 0; names && k < n; k++)
        free(names[k]);
    free(names);
}

// ----------------------------------------------------------------------------
// datasets

struct h5dset *h5src_dset(const struct h5src *f, const char *path) {
    struct h5dset *d = malloc(sizeof *d);
    if (!d) return NULL;
    if ((d->d = H5Dopen2(f->f, path, H5P_DEFAULT)) >= 0) return d;
    free(d);
    return NULL;
}

void h5src_dset_close(struct h5dset *d) {
    if (!d) return;
    H5Dclose(d->d);
    free(d);
}

int h5src_dset_dims(const struct h5dset *d, int64_t *dims, int max) {
    hid_t sp = H5Dget_space(d->d);
    hsize_t h[32];
    int nd = sp >= 0 ? H5Sget_simple_extent_ndims(sp) : -1;
    if (nd < 0 || nd > max || nd > 32) nd = -1;
    if (nd >= 0 && H5Sget_simple_extent_dims(sp, h, NULL) < 0) nd = -1;
    for (int k = 0; k < nd; k++)
        dims[k] = (int64_t)h[k];
    if (sp >= 0) H5Sclose(sp);
    return nd;
}

int h5src_dset_kind(const struct h5dset *d) {
    hid_t t = H5Dget_type(d->d);
    if (t < 0) return -1;
    int k = -1;
    if (H5Tget_class(t) == H5T_INTEGER) {
        k = SF_I64;
    } else if (H5Tget_class(t) == H5T_FLOAT) {
        size_t spos, epos, esize, mpos, msize;
        H5Tget_fields(t, &spos, &epos, &esize, &mpos, &msize);
        k = H5Tget_size(t) == 4 ? SF_F32 : msize == 7 ? SF_BF16 : SF_F16;
    }
    H5Tclose(t);
    return k;
}

int h5src_dset_strs(const struct h5dset *d, const char *name, char *out, int len, int max) {
    return h5attr_get_strs(d->d, name, out, len, max);
}

int h5src_rows(const struct h5dset *d, enum h5src_mem m, int64_t r0, int64_t r1, void *buf) {
    if (r1 <= r0) return 0;
    hid_t mt = m == HSRC_INT64   ? H5T_NATIVE_INT64
               : m == HSRC_UINT8 ? H5T_NATIVE_UINT8
                                 : H5Dget_type(d->d);
    hid_t fs = H5Dget_space(d->d);
    int nd = H5Sget_simple_extent_ndims(fs);
    hsize_t dims[32], start[32] = {0};
    herr_t r = nd >= 1 && nd <= 32 && mt >= 0 ? 0 : -1;
    if (r >= 0) H5Sget_simple_extent_dims(fs, dims, NULL);
    start[0] = (hsize_t)r0;
    dims[0] = (hsize_t)(r1 - r0);
    hid_t ms = r >= 0 ? H5Screate_simple(nd, dims, NULL) : H5I_INVALID_HID;
    if (r >= 0) r = H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, dims, NULL);
    if (r >= 0) r = H5Dread(d->d, mt, ms, fs, H5P_DEFAULT, buf);
    if (ms >= 0) H5Sclose(ms);
    H5Sclose(fs);
    if (m == HSRC_STORED && mt >= 0) H5Tclose(mt);
    return r < 0 ? -1 : 0;
}

// ----------------------------------------------------------------------------
// /stats/NAME as shard arrays

// a buffer of n bytes kept in *bufs (NULL: out of memory)
static void *keep_buf(void ***bufs, int *n_bufs, size_t n) {
    void **b = realloc(*bufs, (size_t)(*n_bufs + 1) * sizeof *b);
    if (!b) return NULL;
    *bufs = b;
    void *p = malloc(n ? n : 1);
    if (p) b[(*n_bufs)++] = p;
    return p;
}

void h5src_bufs_free(void **bufs, int n_bufs) {
    for (int i = 0; i < n_bufs; i++)
        free(bufs[i]);
    free(bufs);
}

int h5src_attrs_to_shard(hid_t obj, const char *prefix, bool all, struct sf_shard *w) {
    char key[600], an[256];
    int n = H5Aget_num_attrs(obj), rc = n < 0 ? -1 : 0;
    for (int i = 0; rc == 0 && i < n; i++) {
        hid_t a = H5Aopen_by_idx(obj, ".", H5_INDEX_NAME, H5_ITER_INC, (hsize_t)i, H5P_DEFAULT,
                                 H5P_DEFAULT);
        hid_t t = a >= 0 ? H5Aget_type(a) : H5I_INVALID_HID;
        H5T_class_t c = t >= 0 ? H5Tget_class(t) : H5T_NO_CLASS;
        bool u = all && c == H5T_INTEGER && H5Tget_sign(t) == H5T_SGN_NONE;
        int64_t iv = 0;
        uint64_t uv = 0;
        double dv = 0;
        char *sv = NULL;
        if (a < 0 || H5Aget_name(a, sizeof an, an) < 0) rc = -1;
        snprintf(key, sizeof key, "%s%s%s", prefix ? prefix : "", prefix ? "." : "", an);
        if (rc < 0) {
        } else if (u && H5Aread(a, H5T_NATIVE_UINT64, &uv) >= 0) {
            rc = sf_attr_u64(w, key, uv);
        } else if (!u && c == H5T_INTEGER && H5Aread(a, H5T_NATIVE_INT64, &iv) >= 0) {
            rc = sf_attr_i64(w, key, iv);
        } else if (c == H5T_FLOAT && H5Aread(a, H5T_NATIVE_DOUBLE, &dv) >= 0) {
            rc = sf_attr_f64(w, key, dv);
        } else if (all && c == H5T_STRING && (sv = h5attr_get_str(obj, an))) {
            rc = sf_attr(w, key, sv);
        } // else: not a number (nor, with all, a string): left out
        free(sv);
        if (t >= 0) H5Tclose(t);
        if (a >= 0) H5Aclose(a);
    }
    return rc;
}

// dataset d as the array key (int64 or float64)
static int group_array(struct sf_shard *w, hid_t d, const char *key, void ***bufs, int *n_bufs) {
    hid_t t = H5Dget_type(d), sp = H5Dget_space(d);
    bool integer = t >= 0 && H5Tget_class(t) == H5T_INTEGER;
    int nd = sp >= 0 ? H5Sget_simple_extent_ndims(sp) : -1;
    hsize_t dims[SF_MAX_DIMS];
    int64_t shape[SF_MAX_DIMS], n = 1;
    int rc = nd >= 0 && nd <= SF_MAX_DIMS ? 0 : -1;
    if (rc == 0) H5Sget_simple_extent_dims(sp, dims, NULL);
    for (int k = 0; rc == 0 && k < nd; k++)
        n *= shape[k] = (int64_t)dims[k];
    void *buf = rc == 0 ? keep_buf(bufs, n_bufs, (size_t)n * 8) : NULL;
    if (!buf || H5Dread(d, integer ? H5T_NATIVE_INT64 : H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL,
                        H5P_DEFAULT, buf) < 0)
        rc = -1;
    if (rc == 0) rc = sf_put(w, key, integer ? SF_I64 : SF_F64, nd, shape, buf);
    if (sp >= 0) H5Sclose(sp);
    if (t >= 0) H5Tclose(t);
    return rc;
}

int h5src_group_to_shard(const struct h5src *f, const char *path, const char *keyprefix,
                         struct sf_shard *w, void ***bufs, int *n_bufs) {
    char key[600], dn[256];
    hid_t g = H5Gopen2(f->f, path, H5P_DEFAULT);
    H5G_info_t info;
    int rc = g >= 0 && H5Gget_info(g, &info) >= 0 ? 0 : -1;
    for (hsize_t i = 0; rc == 0 && i < info.nlinks; i++) {
        if (H5Lget_name_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_INC, i, dn, sizeof dn, H5P_DEFAULT) <
            0)
            rc = -1;
        hid_t d = rc == 0 ? H5Dopen2(g, dn, H5P_DEFAULT) : H5I_INVALID_HID;
        snprintf(key, sizeof key, "%s.%s", keyprefix, dn);
        if (d >= 0) rc = group_array(w, d, key, bufs, n_bufs), H5Dclose(d);
    }
    if (rc == 0) rc = h5src_attrs_to_shard(g, keyprefix, false, w);
    if (g >= 0) H5Gclose(g);
    return rc;
}

// ----------------------------------------------------------------------------

static bool stuck;

bool h5src_stuck(void) {
    return stuck;
}

void h5src_set_stuck(void) {
    stuck = true;
}
