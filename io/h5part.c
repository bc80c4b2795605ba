// h5part.c - see h5part.h and h5part_hid.h.
#define _POSIX_C_SOURCE 200809L // defines: fsync
#include "io/h5part_hid.h"

#include "io/fsutil.h" // fs_sync_path, fs_replace
#include "model/ah.h"

#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// ---------------------------------------------------------------------------------------------
// the partials read back

int h5part_batches(const char *path, const char *group, const char *name, int64_t **batch,
                   int64_t *n) {
    *batch = NULL;
    *n = 0;
    char dset[600], bname[600];
    snprintf(dset, sizeof dset, "%s/%s", group, name);
    snprintf(bname, sizeof bname, "%s/batch", group);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) return -1;
    int rc = 0;
    if (H5Lexists(f, group, H5P_DEFAULT) > 0 && H5Lexists(f, dset, H5P_DEFAULT) > 0) rc = 1;
    hid_t d = rc == 1 ? H5Dopen2(f, bname, H5P_DEFAULT) : H5I_INVALID_HID;
    hid_t s = d >= 0 ? H5Dget_space(d) : H5I_INVALID_HID;
    hsize_t m = 0;
    if (rc == 1 && (s < 0 || H5Sget_simple_extent_ndims(s) != 1)) rc = -1;
    if (rc == 1 && H5Sget_simple_extent_dims(s, &m, NULL) != 1) rc = -1;
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

void h5part_src_init(struct h5part_src *x) {
    x->path[0] = x->dset[0] = 0;
    x->f = x->d = H5I_INVALID_HID;
}

void h5part_src_close(struct h5part_src *x) {
    if (x->d >= 0) H5Dclose(x->d);
    if (x->f >= 0) H5Fclose(x->f);
    h5part_src_init(x);
}

int h5part_read_rows(struct h5part_src *x, const char *path, const char *group, const char *name,
                     int64_t row, int64_t n, int64_t cols, double *buf) {
    if (n == 0) return 0;
    char dset[600];
    snprintf(dset, sizeof dset, "%s/%s", group, name);
    if (strcmp(x->path, path) || strcmp(x->dset, dset)) {
        h5part_src_close(x);
        snprintf(x->path, sizeof x->path, "%s", path);
        snprintf(x->dset, sizeof x->dset, "%s", dset);
        x->f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
        bool has = x->f >= 0 && H5Lexists(x->f, group, H5P_DEFAULT) > 0 &&
                   H5Lexists(x->f, dset, H5P_DEFAULT) > 0;
        x->d = has ? H5Dopen2(x->f, dset, H5P_DEFAULT) : H5I_INVALID_HID;
    }
    hid_t fs = x->d < 0 ? -1 : H5Dget_space(x->d);
    hsize_t st[2] = {(hsize_t)row, 0}, cnt[2] = {(hsize_t)n, (hsize_t)cols}, dims[2] = {0, 0};
    herr_t r = fs < 0 || H5Sget_simple_extent_ndims(fs) != 2 ? -1 : 0;
    if (r >= 0) r = H5Sget_simple_extent_dims(fs, dims, NULL);
    if (r >= 0 && (dims[1] != (hsize_t)cols || row < 0 || (hsize_t)(row + n) > dims[0])) r = -1;
    hid_t ms = H5Screate_simple(2, cnt, NULL);
    if (r >= 0) r = H5Sselect_hyperslab(fs, H5S_SELECT_SET, st, NULL, cnt, NULL);
    if (r >= 0) r = H5Dread(x->d, H5T_NATIVE_DOUBLE, ms, fs, H5P_DEFAULT, buf);
    H5Sclose(ms);
    if (fs >= 0) H5Sclose(fs);
    return r < 0 ? -1 : 0;
}

// ---------------------------------------------------------------------------------------------
// the writers' steps

herr_t h5part_put_array(hid_t loc, const char *name, int nd, const hsize_t *d, hid_t ft, hid_t mt,
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

hid_t h5part_group(hid_t loc, const char *name) {
    if (H5Lexists(loc, name, H5P_DEFAULT) > 0) return H5Gopen2(loc, name, H5P_DEFAULT);
    return H5Gcreate2(loc, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
}

hid_t h5part_group_new(hid_t loc, const char *name) {
    if (H5Lexists(loc, name, H5P_DEFAULT) > 0 && H5Ldelete(loc, name, H5P_DEFAULT) < 0) return -1;
    return H5Gcreate2(loc, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
}

herr_t h5part_close_sync(hid_t f, const char *seg_path, herr_t r) {
    if (f < 0) r = -1;
    if (f >= 0 && H5Fclose(f) < 0) r = -1;
    if (r >= 0 && fs_sync_path(seg_path) != 0) r = -1;
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

int h5part_store(const char *path, const char *group,
                 herr_t (*put)(hid_t g, const void *items, int i), const void *items, int n,
                 const char *what, struct ah_error *err) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    if (copy_file(path, tmp) < 0) {
        unlink(tmp);
        return ah_fail(err, AH_EIO, "%s: cannot copy the master to %s (disk full?)", path, tmp);
    }
    hid_t f = H5Fopen(tmp, H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t g = f < 0 ? H5I_INVALID_HID : h5part_group(f, group);
    herr_t r = g < 0 ? -1 : 0;
    for (int i = 0; r >= 0 && i < n; i++)
        r = put(g, items, i);
    if (g >= 0 && H5Gclose(g) < 0) r = -1;
    if (f >= 0 && H5Fclose(f) < 0) r = -1;
    if (r >= 0 && fs_replace(tmp, path) < 0) r = -1;
    if (r < 0) {
        unlink(tmp);
        return ah_fail(err, AH_EIO, "%s: cannot write %s into the master (disk full?)", path, what);
    }
    return 0;
}

void h5part_iterate(const char *path, const char *group, H5L_iterate_t op, void *u) {
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t g = f >= 0 && H5Lexists(f, group, H5P_DEFAULT) > 0 ? H5Gopen2(f, group, H5P_DEFAULT)
                                                             : H5I_INVALID_HID;
    if (g >= 0) H5Literate(g, H5_INDEX_NAME, H5_ITER_INC, NULL, op, u);
    if (g >= 0) H5Gclose(g);
    if (f >= 0) H5Fclose(f);
}
