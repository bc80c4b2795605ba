// h5shard.c - a shard as one HDF5 file of contiguous datasets (no chunks, no filters), so a
// reader can take any run of rows straight from the dataset's file offset (README "Training
// shards"): the shard's arrays NAME as /activations/NAME and tokens.COLUMN as /tokens/COLUMN, each
// with the attribute storage (the attribute storage.NAME, else its dtype's name) and, for
// activations, source_storage (source_storage.NAME); the other attributes on the root, typed
// (io/shardfmt.h sf_attr_i64 ...); the source's /stats/NAME of the names in stats_names copied
// whole. Written to NAME.tmp, the file's space reserved first (a full disk fails before HDF5
// writes), then renamed. Reading back maps the file: each dataset's data at its file offset.
#define _GNU_SOURCE // defines: fallocate
#include "io/fsutil.h"
#include "io/h5attr.h"
#include "io/h5src.h"
#include "io/h5src_hid.h" // defines: h5src_attrs_to_shard
#include "io/shardfmt.h"
#include "model/ah.h"

#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

// ----------------------------------------------------------------------------
// types and names

static hid_t half_type(void) { // IEEE float16, as h5py and numpy know it
    hid_t t = H5Tcopy(H5T_IEEE_F32LE);
    if (t < 0) return t;
    herr_t r = H5Tset_fields(t, 15, 10, 5, 0, 10);
    if (r >= 0) r = H5Tset_precision(t, 16);
    if (r >= 0) r = H5Tset_size(t, 2);
    if (r >= 0) r = H5Tset_ebias(t, 15);
    if (r < 0) {
        H5Tclose(t);
        return -1;
    }
    return t;
}

// the file type of dtype t (a copy the caller closes)
static hid_t file_type(enum sf_dtype t) {
    switch (t) {
        case SF_F32:
            return H5Tcopy(H5T_IEEE_F32LE);
        case SF_F16:
            return half_type();
        case SF_BF16:
            return H5Tcopy(H5T_STD_U16LE); // raw bfloat16 bits: widen by << 16
        case SF_F64:
            return H5Tcopy(H5T_IEEE_F64LE);
        default:
            return H5Tcopy(H5T_STD_I64LE);
    }
}

static const char *dtype_storage(enum sf_dtype t) {
    static const char *const n[] = {"float32", "float16", "bfloat16-as-uint16", "int64", "float64"};
    return n[t];
}

static bool starts(const char *s, const char *prefix) {
    return !strncmp(s, prefix, strlen(prefix));
}

// an attribute kept off the root: a dataset's (storage.NAME, source_storage.NAME), or the
// statistics' (stats_names, stats.NAME.KEY: the copy holds them)
static bool off_root(const char *key) {
    return starts(key, "storage.") || starts(key, "source_storage.") || starts(key, "stats");
}

static const char *attr_of(const struct sf_shard *w, const char *prefix, const char *name) {
    char key[600];
    snprintf(key, sizeof key, "%s.%s", prefix, name);
    return sf_get(w, key);
}

// ----------------------------------------------------------------------------
// write

static herr_t put_root_attrs(hid_t f, const struct sf_shard *w) {
    herr_t r = 0;
    for (int i = 0; r >= 0 && i < w->n_attr; i++) {
        const char *k = w->key[i], *v = w->val[i];
        if (off_root(k)) continue;
        int64_t iv = strtoll(v, NULL, 10);
        uint64_t uv = strtoull(v, NULL, 10);
        double dv = strtod(v, NULL);
        switch (w->attr_t[i]) {
            case SF_AI64:
                r = h5attr_put_num(f, k, H5T_STD_I64LE, H5T_STD_I64LE, &iv);
                break;
            case SF_AU64:
                r = h5attr_put_num(f, k, H5T_STD_U64LE, H5T_STD_U64LE, &uv);
                break;
            case SF_AF64:
                r = h5attr_put_num(f, k, H5T_IEEE_F64LE, H5T_IEEE_F64LE, &dv);
                break;
            default:
                r = h5attr_put_str(f, k, v);
        }
    }
    return r;
}

// a contiguous dataset loc/name holding a's data, with its storage attributes
static herr_t put_dset(hid_t loc, const char *name, const struct sf_array *a, const char *storage,
                       const char *source_storage) {
    hsize_t d[SF_MAX_DIMS];
    for (int k = 0; k < a->ndim; k++)
        d[k] = (hsize_t)a->shape[k];
    hid_t t = file_type(a->t), sp = H5Screate_simple(a->ndim, d, NULL);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE), ds = H5I_INVALID_HID;
    herr_t r = t < 0 || sp < 0 || dcpl < 0 ? -1 : 0;
    // REQUIRED: contiguous and allocated at once, so the dataset has a file offset; no times, so
    // the same rows give the same bytes
    if (r >= 0) r = H5Pset_layout(dcpl, H5D_CONTIGUOUS);
    if (r >= 0) r = H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY);
    if (r >= 0) r = H5Pset_obj_track_times(dcpl, 0);
    if (r >= 0)
        r = (ds = H5Dcreate2(loc, name, t, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT)) < 0 ? -1 : 0;
    if (r >= 0 && a->nbytes > 0) r = H5Dwrite(ds, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, a->data);
    if (r >= 0) r = h5attr_put_str(ds, "storage", storage ? storage : dtype_storage(a->t));
    if (r >= 0 && source_storage) r = h5attr_put_str(ds, "source_storage", source_storage);
    if (ds >= 0) H5Dclose(ds);
    if (dcpl >= 0) H5Pclose(dcpl);
    if (sp >= 0) H5Sclose(sp);
    if (t >= 0) H5Tclose(t);
    return r;
}

// group name of the arrays whose names start with prefix ("tokens.") or, prefix NULL, the
// activations (no "tokens." or "stats.")
static herr_t put_group(hid_t f, const char *name, const struct sf_shard *w, const char *prefix,
                        hid_t gcpl) {
    hid_t g = H5Gcreate2(f, name, H5P_DEFAULT, gcpl, H5P_DEFAULT);
    herr_t r = g < 0 ? -1 : 0;
    for (int i = 0; r >= 0 && i < w->n; i++) {
        const char *n = w->a[i].name;
        if (prefix ? !starts(n, prefix) : starts(n, "tokens.") || starts(n, "stats.")) continue;
        if (prefix)
            r = put_dset(g, n + strlen(prefix), &w->a[i], NULL, NULL);
        else
            r = put_dset(g, n, &w->a[i], attr_of(w, "storage", n), attr_of(w, "source_storage", n));
    }
    if (g >= 0) H5Gclose(g);
    return r;
}

// the source's /stats/NAME of every name in stats_names, copied as they are
static herr_t copy_stats(hid_t f, const struct sf_shard *w, hid_t gcpl) {
    const char *list = sf_get(w, "stats_names");
    if (!list || !*list) return 0;
    hid_t src = w->source ? H5Fopen(w->source, H5F_ACC_RDONLY, H5P_DEFAULT) : H5I_INVALID_HID;
    hid_t g = src >= 0 ? H5Gcreate2(f, "stats", H5P_DEFAULT, gcpl, H5P_DEFAULT) : H5I_INVALID_HID;
    herr_t r = g < 0 ? -1 : 0;
    char name[300], path[310];
    for (const char *p = list; r >= 0 && *p;) {
        size_t n = strcspn(p, ",");
        snprintf(name, sizeof name, "%.*s", (int)n, p);
        snprintf(path, sizeof path, "stats/%s", name);
        r = H5Ocopy(src, path, g, name, H5P_DEFAULT, H5P_DEFAULT);
        p += n + (p[n] == ',');
    }
    if (g >= 0) H5Gclose(g);
    if (src >= 0) H5Fclose(src);
    return r;
}

// the bytes the shard's file takes at most: its arrays, the copied statistics (a few float64 or
// int64 values a feature), and room for the superblock, object headers and attributes
static int64_t shard_bound(const struct sf_shard *w) {
    const char *list = sf_get(w, "stats_names");
    int64_t n = 256 << 10;
    for (int i = 0; i < w->n; i++) {
        if (starts(w->a[i].name, "stats.")) continue;
        n += (16 << 10) + (int64_t)w->a[i].nbytes;
        if (starts(w->a[i].name, "tokens.") || !list) continue;
        bool has = false;
        size_t len = strlen(w->a[i].name);
        for (const char *p = list; *p && !has;) {
            size_t k = strcspn(p, ",");
            has = k == len && !strncmp(p, w->a[i].name, k);
            p += k + (p[k] == ',');
        }
        int64_t elems = 1;
        for (int k = 1; k < w->a[i].ndim; k++)
            elems *= w->a[i].shape[k];
        if (has) n += 16 * 8 * elems + (64 << 10);
    }
    return n;
}

// Reserves n bytes of disk for path beyond its end (HDF5's writes then take those blocks), so a
// full disk fails here and not inside HDF5: -1 (errno ENOSPC, EDQUOT) when the disk has not got
// them; 0 too where the file system cannot reserve.
static int reserve(const char *path, int64_t n) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    int r = fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, (off_t)n), e = errno;
    close(fd);
    errno = e;
    return r == 0 || (e != ENOSPC && e != EDQUOT) ? 0 : -1;
}

// gives back what the file did not take of its reservation
static void unreserve(const char *path, int64_t n) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0) return;
    if (fstat(fd, &st) == 0 && st.st_size < n) {
        if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, st.st_size,
                      (off_t)n - st.st_size) != 0 ||
            ftruncate(fd, st.st_size) != 0) {
        } // a file system that cannot: the blocks come back when the file goes
    }
    close(fd);
}

// the shard's temporary whose writing failed: removed, with the reason
static int write_failed(const char *tmp, hid_t f, bool closed, struct ah_error *err) {
    int e = errno;
    if (f >= 0 && !closed && H5Fclose(f) < 0) h5src_set_stuck(); // HDF5 keeps it
    unlink(tmp);
    return ah_fail(err, AH_EIO, "%s: cannot write the shard (disk full? %s)", tmp,
                   strerror(e ? e : EIO));
}

static int h5_finish(struct sf_shard *w, struct ah_error *err) {
    int64_t bound = shard_bound(w);
    errno = 0;
    hid_t f = H5Fcreate(w->tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (f < 0 || reserve(w->tmp, bound) < 0) return write_failed(w->tmp, f, false, err);
    hid_t gcpl = H5Pcreate(H5P_GROUP_CREATE);
    H5Pset_obj_track_times(gcpl, 0);
    herr_t r = put_root_attrs(f, w);
    if (r >= 0) r = put_group(f, "activations", w, NULL, gcpl);
    if (r >= 0) r = put_group(f, "tokens", w, "tokens.", gcpl);
    if (r >= 0) r = copy_stats(f, w, gcpl);
    H5Pclose(gcpl);
    if (H5Fclose(f) < 0) {
        h5src_set_stuck(); // see h5src_stuck
        return write_failed(w->tmp, f, true, err);
    }
    if (r < 0) return write_failed(w->tmp, f, true, err);
    unreserve(w->tmp, bound);
    if (fs_replace(w->tmp, w->path) != 0) {
        int e = errno;
        unlink(w->tmp);
        return ah_fail(err, AH_EIO, "%s: cannot finish the shard: %s", w->path, strerror(e));
    }
    return 0;
}

static void h5_remove(const char *path) {
    unlink(path);
}

// ----------------------------------------------------------------------------
// read back

// the dtype of file type t, or -1
static int dtype_of(hid_t t) {
    H5T_class_t c = H5Tget_class(t);
    size_t n = H5Tget_size(t);
    if (c == H5T_FLOAT) return n == 4 ? SF_F32 : n == 2 ? SF_F16 : n == 8 ? SF_F64 : -1;
    if (c != H5T_INTEGER) return -1;
    return n == 2 && H5Tget_sign(t) == H5T_SGN_NONE ? SF_BF16 : n == 8 ? SF_I64 : -1;
}

// the datasets of group (prefix "": /activations, "tokens.": /tokens) as arrays into the file's
// mapping m (len bytes): contiguous, inside the file
static int get_group(struct sf_shard *r, hid_t f, const char *group, const char *prefix,
                     const unsigned char *m, size_t len) {
    hid_t g = H5Lexists(f, group, H5P_DEFAULT) > 0 ? H5Gopen2(f, group, H5P_DEFAULT) : -1;
    H5G_info_t info;
    char dn[256], key[300];
    int rc = g >= 0 && H5Gget_info(g, &info) >= 0 ? 0 : -1;
    for (hsize_t i = 0; rc == 0 && i < info.nlinks; i++) {
        hid_t d = H5Lget_name_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_INC, i, dn, sizeof dn,
                                     H5P_DEFAULT) < 0
                      ? H5I_INVALID_HID
                      : H5Dopen2(g, dn, H5P_DEFAULT);
        hid_t t = d >= 0 ? H5Dget_type(d) : H5I_INVALID_HID, sp = d >= 0 ? H5Dget_space(d) : -1;
        int nd = sp >= 0 ? H5Sget_simple_extent_ndims(sp) : -1, dt = t >= 0 ? dtype_of(t) : -1;
        hsize_t dims[SF_MAX_DIMS];
        int64_t shape[SF_MAX_DIMS];
        haddr_t off = d >= 0 ? H5Dget_offset(d) : HADDR_UNDEF;
        rc = dt >= 0 && nd >= 0 && nd <= SF_MAX_DIMS ? 0 : -1;
        if (rc == 0) H5Sget_simple_extent_dims(sp, dims, NULL);
        for (int k = 0; rc == 0 && k < nd; k++)
            shape[k] = (int64_t)dims[k];
        snprintf(key, sizeof key, "%s%s", prefix, dn);
        if (rc == 0) rc = sf_put(r, key, (enum sf_dtype)dt, nd, shape, m);
        const struct sf_array *a = rc == 0 ? &r->a[r->n - 1] : NULL;
        if (a && a->nbytes && (off == HADDR_UNDEF || off > len || a->nbytes > len - off)) rc = -1;
        if (a && a->nbytes) r->a[r->n - 1].data = m + off;
        if (sp >= 0) H5Sclose(sp);
        if (t >= 0) H5Tclose(t);
        if (d >= 0) H5Dclose(d);
    }
    if (g >= 0) H5Gclose(g);
    return rc;
}

// stats_names: the members of /stats, comma-separated (name order)
static int get_stats_names(struct sf_shard *r, hid_t f) {
    char buf[8192] = "", dn[256];
    size_t at = 0;
    hid_t g = H5Lexists(f, "stats", H5P_DEFAULT) > 0 ? H5Gopen2(f, "stats", H5P_DEFAULT) : -1;
    H5G_info_t info;
    if (g >= 0 && H5Gget_info(g, &info) >= 0)
        for (hsize_t i = 0; i < info.nlinks && at < sizeof buf; i++)
            if (H5Lget_name_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_INC, i, dn, sizeof dn,
                                   H5P_DEFAULT) >= 0)
                at += (size_t)snprintf(buf + at, sizeof buf - at, "%s%s", at ? "," : "", dn);
    if (g >= 0) H5Gclose(g);
    return sf_attr(r, "stats_names", buf);
}

static int h5_open(struct sf_shard *r) {
    const unsigned char *m;
    size_t len;
    if (sf_map(r, r->path, &m, &len) != 0) return -1;
    hid_t f = H5Fopen(r->path, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t root = f >= 0 ? H5Gopen2(f, "/", H5P_DEFAULT) : H5I_INVALID_HID; // attributes: a group
    int rc = root >= 0 ? h5src_attrs_to_shard(root, NULL, true, r) : -1;
    if (root >= 0) H5Gclose(root);
    if (rc == 0) rc = get_stats_names(r, f);
    if (rc == 0) rc = get_group(r, f, "activations", "", m, len);
    if (rc == 0) rc = get_group(r, f, "tokens", "tokens.", m, len);
    if (f >= 0) H5Fclose(f);
    return rc;
}

const struct sf_format sf_hdf5 = {"hdf5", ".h5", true, h5_finish, h5_open, h5_remove};
