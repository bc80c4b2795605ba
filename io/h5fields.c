// h5fields.c - see h5fields.h
#include "io/h5fields.h"

#include "io/h5attr.h"
#include "model/ah.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define PIECE_BYTES (16 << 20) // strings are packed to fixed length this many bytes at a time

hid_t h5fields_type(const struct ds_field *f) {
    switch (f->spec->type) {
        case DS_INT:
            return H5Tcopy(H5T_STD_I64LE);
        case DS_FLOAT:
            return H5Tcopy(H5T_IEEE_F64LE);
        case DS_BOOL: { // h5py's own bool type, so that h5py reads numpy bools
            hid_t t = H5Tenum_create(H5T_NATIVE_INT8);
            int8_t no = 0, yes = 1;
            if (t >= 0 &&
                (H5Tenum_insert(t, "FALSE", &no) < 0 || H5Tenum_insert(t, "TRUE", &yes) < 0)) {
                H5Tclose(t);
                return -1;
            }
            return t;
        }
        default: {
            hid_t t = H5Tcopy(H5T_C_S1);
            if (t >= 0 &&
                (H5Tset_size(t, (size_t)(f->max_len > 0 ? f->max_len : 1)) < 0 ||
                 H5Tset_strpad(t, H5T_STR_NULLPAD) < 0 || H5Tset_cset(t, H5T_CSET_UTF8) < 0)) {
                H5Tclose(t);
                return -1;
            }
            return t;
        }
    }
}

// rows [a, b) of field f in the file's layout: fixed-length strings padded with NULs into buf,
// other types as they are in memory
static const void *rows_of(const struct ds_field *f, int64_t a, int64_t b, char *buf, size_t w) {
    if (f->spec->type != DS_STRING)
        return (const char *)f->v + (size_t)a * (f->spec->type == DS_BOOL ? 1 : 8);
    memset(buf, 0, (size_t)(b - a) * w);
    for (int64_t i = a; i < b; i++) {
        const char *s = f->s + ((const int64_t *)f->v)[i];
        memcpy(buf + (size_t)(i - a) * w, s, strlen(s));
    }
    return buf;
}

static int write_one(hid_t g, const struct ds_field *f, int64_t n, const char *path,
                     struct ah_error *err) {
    hsize_t d = (hsize_t)n;
    hid_t t = h5fields_type(f), s = H5Screate_simple(1, &d, NULL), ds = H5I_INVALID_HID;
    size_t w = t >= 0 ? H5Tget_size(t) : 1;
    int64_t step = (int64_t)(PIECE_BYTES / w) + 1;
    char *buf = f->spec->type == DS_STRING ? malloc((size_t)step * w) : NULL;
    int rc = f->spec->type == DS_STRING && !buf ? -AH_ENOMEM : 0;
    if (rc == 0 && t >= 0)
        ds = H5Dcreate2(g, f->spec->name, t, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    herr_t r = ds >= 0 ? h5attr_put_str(ds, "field_type", ds_ftype_name(f->spec->type)) : -1;
    for (int64_t a = 0; r >= 0 && a < n; a += step) {
        hsize_t at = (hsize_t)a, cnt = (hsize_t)(n - a < step ? n - a : step);
        hid_t m = H5Screate_simple(1, &cnt, NULL);
        r = H5Sselect_hyperslab(s, H5S_SELECT_SET, &at, NULL, &cnt, NULL);
        if (r >= 0) r = H5Dwrite(ds, t, m, s, H5P_DEFAULT, rows_of(f, a, a + (int64_t)cnt, buf, w));
        H5Sclose(m);
    }
    if (rc == 0 && r < 0)
        rc = ah_fail(err, AH_EIO, "%s: HDF5 failed to write /prompts/%s (data.fields)", path,
                     f->spec->name);
    if (ds >= 0) H5Dclose(ds);
    if (t >= 0) H5Tclose(t);
    H5Sclose(s);
    free(buf);
    return rc;
}

int h5fields_write(hid_t f, const struct ds_field *fl, int n, int64_t n_prompts, const char *path,
                   struct ah_error *err) {
    hid_t g = n ? H5Gopen2(f, "prompts", H5P_DEFAULT) : 0;
    if (g < 0) return ah_fail(err, AH_EIO, "%s: HDF5 failed to open /prompts", path);
    int rc = 0;
    for (int k = 0; k < n && rc == 0; k++)
        rc = write_one(g, &fl[k], n_prompts, path, err);
    if (n) H5Gclose(g);
    return rc;
}

// one virtual dataset /prompts/NAME over the same dataset of src
static herr_t map_one(hid_t f, const char *src, const struct ds_field *fl, int64_t n) {
    char name[4200];
    snprintf(name, sizeof name, "prompts/%s", fl->spec->name);
    hsize_t d = (hsize_t)n;
    hid_t t = h5fields_type(fl), vs = H5Screate_simple(1, &d, NULL);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE), ds = H5I_INVALID_HID;
    herr_t r = t < 0 ? -1 : 0;
    if (r >= 0 && n > 0) r = H5Pset_virtual(dcpl, vs, src, name, vs);
    if (r >= 0) r = ds = H5Dcreate2(f, name, t, vs, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    if (r >= 0) r = h5attr_put_str(ds, "field_type", ds_ftype_name(fl->spec->type));
    if (ds >= 0) H5Dclose(ds);
    if (t >= 0) H5Tclose(t);
    H5Pclose(dcpl);
    H5Sclose(vs);
    return r;
}

int h5fields_map(hid_t f, const char *src, const struct ds_field *fl, int n, int64_t n_prompts,
                 const char *path, struct ah_error *err) {
    for (int k = 0; k < n; k++)
        if (map_one(f, src, &fl[k], n_prompts) < 0)
            return ah_fail(err, AH_EIO, "%s: HDF5 failed to map /prompts/%s (data.fields)", path,
                           fl[k].spec->name);
    return 0;
}
