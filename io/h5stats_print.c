// h5stats_print.c - `harvest stats --print` and `harvest inspect --stats`: the stored /stats of an
// output as a table (io/h5stats.h). Reading only; computing and storing are io/h5stats.c's.
#include "io/h5attr.h"
#include "io/h5stats.h"
#include "model/ah.h"
#include "model/tap.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

// natural order: digit runs compare as numbers ("layers.10" after "layers.9")
static int cmp_natural(const void *a, const void *b) {
    const char *x = *(const char *const *)a, *y = *(const char *const *)b;
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

// a whole float64 dataset of g (malloc'd, *n elements, its shape in dims/ndim), or NULL
static double *read_all(hid_t g, const char *name, int64_t *n, int *ndim, hsize_t *dims) {
    hid_t d = H5Dopen2(g, name, H5P_DEFAULT);
    if (d < 0) return NULL;
    hid_t s = H5Dget_space(d);
    *ndim = H5Sget_simple_extent_ndims(s);
    hssize_t m = H5Sget_simple_extent_npoints(s);
    double *v =
        *ndim >= 0 && *ndim <= TAP_MAX_DIMS && m >= 1 ? malloc((size_t)m * sizeof *v) : NULL;
    if (v) H5Sget_simple_extent_dims(s, dims, NULL);
    if (v && H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) < 0) {
        free(v);
        v = NULL;
    }
    *n = (int64_t)m;
    H5Sclose(s);
    H5Dclose(d);
    return v;
}

static double attr_f64(hid_t obj, const char *name) {
    double v = (double)NAN;
    h5attr_get_num(obj, name, H5T_NATIVE_DOUBLE, &v); // stays NaN when missing
    return v;
}

// "[h,d]": feature j as an index into the features' shape
static void feature_index(int64_t j, int ndim, const hsize_t *dims, char *out, size_t cap) {
    int64_t idx[TAP_MAX_DIMS];
    for (int k = ndim - 1; k >= 0; k--)
        idx[k] = j % (int64_t)dims[k], j /= (int64_t)dims[k];
    size_t at = (size_t)snprintf(out, cap, "[");
    for (int k = 0; k < ndim && at < cap; k++)
        at += (size_t)snprintf(out + at, cap - at, "%s%lld", k ? "," : "", (long long)idx[k]);
    if (at < cap) snprintf(out + at, cap - at, "]");
}

// the table line of one activation, and its `top` largest means on the line below
static void print_one(hid_t g, const char *name, int top, FILE *out) {
    int64_t n = 0, nc = 0;
    int nd = 0, ndc = 0;
    hsize_t dims[TAP_MAX_DIMS], dc[TAP_MAX_DIMS];
    double *mean = read_all(g, "mean", &n, &nd, dims), nm = (double)NAN, nv = (double)NAN;
    double *count = read_all(g, "count", &nc, &ndc, dc); // read as float64: exact below 2^53
    int64_t n1 = 0;
    int d1 = 0;
    hsize_t s1[TAP_MAX_DIMS];
    double *a = read_all(g, "norm_mean", &n1, &d1, s1), *b = read_all(g, "norm_var", &n1, &d1, s1);
    if (a) nm = a[0];
    if (b) nv = b[0];
    fprintf(out, "  %-34s %6lld %10.0f %11.5g %10.4g %9.4g %6.0f\n", name, (long long)n,
            count ? count[0] : (double)NAN, nm, sqrt(nv), attr_f64(g, "sae_scale"),
            attr_f64(g, "n_rows_nonfinite"));
    for (int k = 0; mean && k < top && k < n; k++) { // selection of the k-th largest, k small
        int64_t best = -1;
        for (int64_t j = 0; j < n; j++)
            if (!isnan(mean[j]) && (best < 0 || mean[j] > mean[best])) best = j;
        if (best < 0) break;
        char ix[64];
        feature_index(best, nd, dims, ix, sizeof ix);
        fprintf(out, "%s%s %.4g", k ? ", " : "      largest means: ", ix, mean[best]);
        mean[best] = (double)NAN;
        if (k + 1 == top || k + 1 == n) fputc('\n', out);
    }
    free(mean), free(count), free(a), free(b);
}

int h5stats_print(const char *path, const char *glob, int top, FILE *out, struct ah_error *err) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) return ah_fail(err, AH_EINVAL, "%s: cannot open as HDF5", path);
    struct h5stats_names l;
    if (h5stats_list(f, "stats", &l) < 0) {
        H5Fclose(f);
        return ah_fail(err, AH_EINVAL,
                       "%s: the output has no statistics (/stats): compute them with `harvest "
                       "stats %s`",
                       path, path);
    }
    qsort(l.v, (size_t)l.n, sizeof *l.v, cmp_natural);
    fprintf(out, "statistics of %s (float64, over the token rows):\n", path);
    fprintf(out, "  %-34s %6s %10s %11s %10s %9s %6s\n", "name", "d", "rows", "norm mean",
            "norm std", "sae_scale", "NaN");
    int shown = 0;
    for (int i = 0; i < l.n; i++) {
        if (glob && !tap_glob_match(glob, l.v[i])) continue;
        hid_t g = H5Gopen2(f, "stats", H5P_DEFAULT), h = H5Gopen2(g, l.v[i], H5P_DEFAULT);
        if (h >= 0) print_one(h, l.v[i], top, out), H5Gclose(h), shown++;
        H5Gclose(g);
    }
    h5stats_names_free(&l);
    H5Fclose(f);
    if (glob && !shown)
        return ah_fail(err, AH_EINVAL, "%s: no statistics of an activation matching \"%s\"", path,
                       glob);
    return 0;
}
