// h5attr.c - HDF5 attributes (see h5attr.h).
#include "io/h5attr.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// the variable-length UTF-8 string type every string attribute is written and read as
static hid_t vlen_utf8(herr_t *r) {
    hid_t t = H5Tcopy(H5T_C_S1);
    *r = H5Tset_size(t, H5T_VARIABLE);
    if (*r >= 0) *r = H5Tset_cset(t, H5T_CSET_UTF8);
    return t;
}

herr_t h5attr_put_str(hid_t obj, const char *name, const char *value) {
    hid_t s = H5Screate(H5S_SCALAR), a = H5I_INVALID_HID;
    herr_t r;
    hid_t t = vlen_utf8(&r);
    if (r >= 0) r = (a = H5Acreate2(obj, name, t, s, H5P_DEFAULT, H5P_DEFAULT)) < 0 ? -1 : 0;
    if (r >= 0) r = H5Awrite(a, t, &value);
    if (a >= 0) H5Aclose(a);
    H5Sclose(s);
    H5Tclose(t);
    return r;
}

char *h5attr_get_str(hid_t obj, const char *name) {
    if (H5Aexists(obj, name) <= 0) return NULL;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    herr_t r;
    hid_t t = vlen_utf8(&r); // read errors of the type surface as an H5Aread failure
    (void)r;
    char *v = NULL, *out = NULL;
    if (a >= 0 && H5Aread(a, t, &v) >= 0 && v) {
        out = malloc(strlen(v) + 1);
        if (out) strcpy(out, v);
        H5free_memory(v);
    }
    H5Tclose(t);
    if (a >= 0) H5Aclose(a);
    return out;
}

herr_t h5attr_put_strs(hid_t obj, const char *name, int n, const char *const *values) {
    hsize_t d = (hsize_t)n;
    hid_t s = H5Screate_simple(1, &d, NULL), a = H5I_INVALID_HID;
    herr_t r;
    hid_t t = vlen_utf8(&r);
    if (r >= 0) r = (a = H5Acreate2(obj, name, t, s, H5P_DEFAULT, H5P_DEFAULT)) < 0 ? -1 : 0;
    if (r >= 0) r = H5Awrite(a, t, values);
    if (a >= 0) H5Aclose(a);
    H5Sclose(s);
    H5Tclose(t);
    return r;
}

int h5attr_get_strs(hid_t obj, const char *name, char *out, int len, int max) {
    if (H5Aexists(obj, name) <= 0) return -1;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT), s = a < 0 ? H5I_INVALID_HID : H5Aget_space(a);
    herr_t r;
    hid_t t = vlen_utf8(&r); // read errors of the type surface as an H5Aread failure
    hssize_t n = s < 0 ? -1 : H5Sget_simple_extent_npoints(s);
    char **v = n >= 1 && n <= max ? calloc((size_t)n, sizeof *v) : NULL; // (n) borrowed by HDF5
    int rc = -1;
    if (v && H5Aread(a, t, v) >= 0) {
        for (hssize_t k = 0; k < n; k++)
            snprintf(out + k * len, (size_t)len, "%s", v[k] ? v[k] : "");
        H5Dvlen_reclaim(t, s, H5P_DEFAULT, v);
        rc = (int)n;
    }
    free(v);
    H5Tclose(t);
    if (s >= 0) H5Sclose(s);
    if (a >= 0) H5Aclose(a);
    return rc;
}

herr_t h5attr_put_num(hid_t obj, const char *name, hid_t ftype, hid_t mtype, const void *value) {
    hid_t s = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(obj, name, ftype, s, H5P_DEFAULT, H5P_DEFAULT);
    herr_t r = a < 0 ? -1 : H5Awrite(a, mtype, value);
    if (a >= 0) H5Aclose(a);
    H5Sclose(s);
    return r;
}

int h5attr_get_num(hid_t obj, const char *name, hid_t mtype, void *value) {
    if (H5Aexists(obj, name) <= 0) return -1;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    herr_t r = a < 0 ? -1 : H5Aread(a, mtype, value);
    if (a >= 0) H5Aclose(a);
    return r < 0 ? -1 : 0;
}
