// export_shard.c - one training shard on disk: an HDF5 file of contiguous datasets (no chunks, no
// filters), so a reader can take any run of rows straight from the dataset's file offset.
#define _GNU_SOURCE // defines: access, fallocate
#include "harvest/export.h"
#include "io/feistel.h"
#include "io/fsutil.h"
#include "io/h5attr.h"
#include "io/shardfmt.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *const xshard_cols[4] = {"input_ids", "prompt_index", "position", "source_index"};

static const struct sf_format *sf_of(enum xfmt f) {
    return f == XF_NPY ? &sf_npy : &sf_safetensors;
}
static int sf_write(const char *path, const struct xshard *b, const struct xsrc *s,
                    const struct xshard_meta *m, uint64_t sum, struct ah_error *err);
static int sf_verify(const char *path, const struct xsrc *s, const struct xshard_meta *m,
                     uint64_t *sum_out);

int xshard_alloc(struct xshard *b, const struct xsrc *s, int64_t n_tokens) {
    memset(b, 0, sizeof *b);
    b->n_tokens = n_tokens;
    b->act = calloc((size_t)s->n_names, sizeof *b->act);
    if (!b->act) return -1;
    for (int i = 0; i < s->n_names; i++) {
        size_t n = (size_t)(n_tokens * s->names[i].elems) * xkind_size(s->names[i].dst);
        if (!(b->act[i] = malloc(n ? n : 1))) return -1;
    }
    for (int c = 0; c < 4; c++)
        if (!(b->cols[c] = malloc((size_t)(n_tokens ? n_tokens : 1) * sizeof(int64_t)))) return -1;
    return 0;
}

void xshard_free(struct xshard *b, int n_names) {
    for (int i = 0; b->act && i < n_names; i++)
        free(b->act[i]);
    free(b->act);
    for (int c = 0; c < 4; c++)
        free(b->cols[c]);
    memset(b, 0, sizeof *b);
}

// ----------------------------------------------------------------------------
// types and attributes

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

// the file type of kind k (a copy the caller closes)
static hid_t kind_type(enum xkind k) {
    switch (k) {
        case XK_F32:
            return H5Tcopy(H5T_IEEE_F32LE);
        case XK_F16:
            return half_type();
        case XK_BF16:
            return H5Tcopy(H5T_STD_U16LE); // raw bfloat16 bits: widen by << 16
        default:
            return H5Tcopy(H5T_STD_I64LE);
    }
}

static const char *kind_storage(enum xkind k) {
    return k == XK_BF16 ? "bfloat16-as-uint16" : xkind_name(k);
}

static herr_t put_meta(hid_t f, const struct xshard_meta *m, uint64_t sum) {
    herr_t r = h5attr_put_str(f, "format", "harvest-shard");
    int64_t one = 1;
    if (r >= 0) r = h5attr_put_num(f, "format_version", H5T_STD_I64LE, H5T_STD_I64LE, &one);
    if (r >= 0) r = h5attr_put_str(f, "split", m->split);
    if (r >= 0) r = h5attr_put_num(f, "shard", H5T_STD_I64LE, H5T_STD_I64LE, &m->shard);
    if (r >= 0) r = h5attr_put_num(f, "n_tokens", H5T_STD_I64LE, H5T_STD_I64LE, &m->n_tokens);
    if (r >= 0)
        r = h5attr_put_num(f, "first_position", H5T_STD_I64LE, H5T_STD_I64LE, &m->first_position);
    if (r >= 0) r = h5attr_put_num(f, "seed", H5T_STD_I64LE, H5T_STD_I64LE, &m->seed);
    if (r >= 0)
        r = h5attr_put_num(f, "val_fraction", H5T_IEEE_F64LE, H5T_IEEE_F64LE, &m->val_fraction);
    if (r >= 0)
        r = h5attr_put_num(f, "source_data_checksum", H5T_STD_U64LE, H5T_STD_U64LE,
                           &m->data_checksum);
    if (r >= 0) r = h5attr_put_num(f, "checksum", H5T_STD_U64LE, H5T_STD_U64LE, &sum);
    if (r >= 0) r = h5attr_put_num(f, "export_id", H5T_STD_U64LE, H5T_STD_U64LE, &m->export_id);
    return r;
}

// ----------------------------------------------------------------------------
// write

static uint64_t shard_checksum(const struct xshard *b, const struct xsrc *s) {
    uint64_t h = FNV64_INIT;
    for (int i = 0; i < s->n_names; i++)
        h = fnv64_words(h, b->act[i],
                        (size_t)(b->n_tokens * s->names[i].elems) * xkind_size(s->names[i].dst));
    for (int c = 0; c < 4; c++)
        h = fnv64_words(h, b->cols[c], (size_t)b->n_tokens * sizeof(int64_t));
    return h;
}

// a contiguous dataset loc/name of n rows of shape x (x NULL: int64 scalars) holding data
static herr_t put_dset(hid_t loc, const char *name, const struct xname *x, int64_t n,
                       const void *data) {
    hsize_t d[X_MAX_DIMS + 1] = {(hsize_t)n};
    int nd = 1;
    for (int k = 0; x && k < x->ndim; k++)
        d[nd++] = (hsize_t)x->dims[k];
    enum xkind k = x ? x->dst : XK_I64;
    hid_t t = kind_type(k), sp = H5Screate_simple(nd, d, NULL);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE), ds = H5I_INVALID_HID;
    herr_t r = t < 0 || sp < 0 || dcpl < 0 ? -1 : 0;
    // REQUIRED: contiguous and allocated at once, so the dataset has a file offset; no times, so
    // the same rows give the same bytes
    if (r >= 0) r = H5Pset_layout(dcpl, H5D_CONTIGUOUS);
    if (r >= 0) r = H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY);
    if (r >= 0) r = H5Pset_obj_track_times(dcpl, 0);
    if (r >= 0)
        r = (ds = H5Dcreate2(loc, name, t, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT)) < 0 ? -1 : 0;
    if (r >= 0 && n > 0) r = H5Dwrite(ds, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
    if (r >= 0) r = h5attr_put_str(ds, "storage", kind_storage(k));
    if (r >= 0 && x) r = h5attr_put_str(ds, "source_storage", xkind_name(x->src));
    if (ds >= 0) H5Dclose(ds);
    if (dcpl >= 0) H5Pclose(dcpl);
    if (sp >= 0) H5Sclose(sp);
    if (t >= 0) H5Tclose(t);
    return r;
}

// 1 if the source has statistics for name i (/stats/NAME, written by `harvest stats`)
static bool has_stats(hid_t f, const char *name) {
    char path[300];
    snprintf(path, sizeof path, "stats/%s", name);
    return H5Lexists(f, "stats", H5P_DEFAULT) > 0 && H5Lexists(f, path, H5P_DEFAULT) > 0;
}

// the source's /stats/NAME of every exported name that has them, copied as they are
static herr_t copy_stats(hid_t f, const struct xsrc *s, hid_t gcpl) {
    hid_t g = H5I_INVALID_HID;
    herr_t r = 0;
    char path[300];
    for (int i = 0; r >= 0 && i < s->n_names; i++) {
        if (!has_stats(s->f, s->names[i].name)) continue;
        if (g < 0 && (g = H5Gcreate2(f, "stats", H5P_DEFAULT, gcpl, H5P_DEFAULT)) < 0) return -1;
        snprintf(path, sizeof path, "stats/%s", s->names[i].name);
        r = H5Ocopy(s->f, path, g, s->names[i].name, H5P_DEFAULT, H5P_DEFAULT);
    }
    if (g >= 0) H5Gclose(g);
    return r;
}

static bool stuck;
bool xshard_stuck(void) {
    return stuck;
}
void xshard_set_stuck(void) {
    stuck = true;
}

// the bytes the shard's file takes at most: its rows, the copied statistics (a few float64 or
// int64 values a feature), and room for the superblock, object headers and attributes
static int64_t shard_bound(const struct xshard *b, const struct xsrc *s) {
    int64_t n = (256 << 10) + (16 << 10) * (s->n_names + 4) + 4 * 8 * b->n_tokens;
    for (int i = 0; i < s->n_names; i++) {
        n += b->n_tokens * s->names[i].elems * (int64_t)xkind_size(s->names[i].dst);
        if (has_stats(s->f, s->names[i].name)) n += 16 * 8 * s->names[i].elems + (64 << 10);
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
    if (f >= 0 && !closed && H5Fclose(f) < 0) stuck = true; // HDF5 keeps it: see xshard_stuck
    unlink(tmp);
    return ah_fail(err, AH_EIO, "%s: cannot write the shard (disk full? %s)", tmp,
                   strerror(e ? e : EIO));
}

int xshard_write(const char *dir, const char *file, const struct xshard *b, const struct xsrc *s,
                 const struct xshard_meta *m, uint64_t *sum, struct ah_error *err) {
    char path[4200], tmp[4210];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    *sum = shard_checksum(b, s);
    if (m->fmt != XF_HDF5) return sf_write(path, b, s, m, *sum, err);
    int64_t bound = shard_bound(b, s);
    errno = 0;
    hid_t f = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), g = H5I_INVALID_HID;
    if (f < 0 || reserve(tmp, bound) < 0) return write_failed(tmp, f, false, err);
    hid_t gcpl = H5Pcreate(H5P_GROUP_CREATE);
    H5Pset_obj_track_times(gcpl, 0);
    herr_t r = put_meta(f, m, *sum);
    if (r >= 0) r = (g = H5Gcreate2(f, "activations", H5P_DEFAULT, gcpl, H5P_DEFAULT)) < 0 ? -1 : 0;
    for (int i = 0; r >= 0 && i < s->n_names; i++)
        r = put_dset(g, s->names[i].name, &s->names[i], b->n_tokens, b->act[i]);
    if (g >= 0) H5Gclose(g);
    if (r >= 0) r = (g = H5Gcreate2(f, "tokens", H5P_DEFAULT, gcpl, H5P_DEFAULT)) < 0 ? -1 : 0;
    for (int c = 0; r >= 0 && c < 4; c++)
        r = put_dset(g, xshard_cols[c], NULL, b->n_tokens, b->cols[c]);
    if (g >= 0) H5Gclose(g);
    if (r >= 0) r = copy_stats(f, s, gcpl);
    H5Pclose(gcpl);
    if (H5Fclose(f) < 0) {
        stuck = true;
        return write_failed(tmp, f, true, err);
    }
    if (r < 0) return write_failed(tmp, f, true, err);
    unreserve(tmp, bound);
    if (fs_replace(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return ah_fail(err, AH_EIO, "%s: cannot finish the shard: %s", path, strerror(e));
    }
    return 0;
}

// ----------------------------------------------------------------------------
// verify

// chains the bytes of dataset d (n rows of row_bytes, stored as type t) into *h, piece by piece
static int hash_dset(hid_t d, int64_t n, size_t row_bytes, void *buf, size_t buf_bytes,
                     uint64_t *h) {
    int64_t rows = (int64_t)(buf_bytes / (row_bytes ? row_bytes : 1)) / 8 * 8;
    if (rows < 8) rows = 8; // pieces of a multiple of 8 rows: a multiple of 8 bytes
    hid_t t = H5Dget_type(d), fs = H5Dget_space(d);
    int nd = H5Sget_simple_extent_ndims(fs);
    hsize_t dims[X_MAX_DIMS + 1], start[X_MAX_DIMS + 1] = {0};
    H5Sget_simple_extent_dims(fs, dims, NULL);
    size_t file_row = H5Tget_size(t);
    for (int k = 1; k < nd; k++)
        file_row *= dims[k];
    int rc = (int64_t)dims[0] == n && file_row == row_bytes ? 0 : -1;
    for (int64_t r0 = 0; rc == 0 && r0 < n; r0 += rows) {
        int64_t m = n - r0 < rows ? n - r0 : rows;
        start[0] = (hsize_t)r0;
        dims[0] = (hsize_t)m;
        hid_t ms = H5Screate_simple(nd, dims, NULL);
        if (H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, dims, NULL) < 0 ||
            H5Dread(d, t, ms, fs, H5P_DEFAULT, buf) < 0)
            rc = -1;
        H5Sclose(ms);
        if (rc == 0) *h = fnv64_words(*h, buf, (size_t)m * row_bytes);
    }
    H5Sclose(fs);
    H5Tclose(t);
    return rc;
}

int xshard_verify(const char *dir, const char *file, const struct xsrc *s,
                  const struct xshard_meta *m, size_t buf_bytes, uint64_t *sum_out) {
    char path[4200], name[300];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    if (access(path, R_OK) != 0) return 0;
    if (m->fmt != XF_HDF5) return sf_verify(path, s, m, sum_out);
    size_t biggest = 8;
    for (int i = 0; i < s->n_names; i++) {
        size_t rb = (size_t)s->names[i].elems * xkind_size(s->names[i].dst);
        biggest = rb > biggest ? rb : biggest;
    }
    if (buf_bytes < 8 * biggest) buf_bytes = 8 * biggest;
    void *buf = malloc(buf_bytes);
    hid_t f = buf ? H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT) : H5I_INVALID_HID;
    int64_t n = -1, shard = -1, seed = -1;
    uint64_t sum = 0, src = 0, id = 0, h = FNV64_INIT;
    char *split = f >= 0 ? h5attr_get_str(f, "split") : NULL;
    int ok = f >= 0 && split && !strcmp(split, m->split) &&
             h5attr_get_num(f, "export_id", H5T_NATIVE_UINT64, &id) == 0 && id == m->export_id &&
             h5attr_get_num(f, "n_tokens", H5T_NATIVE_INT64, &n) == 0 &&
             h5attr_get_num(f, "shard", H5T_NATIVE_INT64, &shard) == 0 &&
             h5attr_get_num(f, "seed", H5T_NATIVE_INT64, &seed) == 0 &&
             h5attr_get_num(f, "checksum", H5T_NATIVE_UINT64, &sum) == 0 &&
             h5attr_get_num(f, "source_data_checksum", H5T_NATIVE_UINT64, &src) == 0 &&
             n == m->n_tokens && shard == m->shard && seed == m->seed && src == m->data_checksum;
    for (int i = 0; ok && i < s->n_names + 4; i++) {
        const struct xname *x = i < s->n_names ? &s->names[i] : NULL;
        snprintf(name, sizeof name, x ? "activations/%s" : "tokens/%s",
                 x ? x->name : xshard_cols[i - s->n_names]);
        hid_t d = H5Lexists(f, x ? "activations" : "tokens", H5P_DEFAULT) > 0 &&
                          H5Lexists(f, name, H5P_DEFAULT) > 0
                      ? H5Dopen2(f, name, H5P_DEFAULT)
                      : H5I_INVALID_HID;
        size_t rb = x ? (size_t)x->elems * xkind_size(x->dst) : 8;
        ok = d >= 0 && hash_dset(d, n, rb, buf, buf_bytes, &h) == 0;
        if (d >= 0) H5Dclose(d);
        // statistics added to the output since (`harvest stats`): the shard is written again
        if (ok && x) ok = has_stats(s->f, x->name) == has_stats(f, x->name);
    }
    if (f >= 0) H5Fclose(f);
    free(split);
    free(buf);
    *sum_out = sum;
    return ok && h == sum;
}

// ----------------------------------------------------------------------------
// the other formats (io/shardfmt.h): arrays NAME, tokens.COLUMN and stats.NAME.KEY, the HDF5
// shard's attributes as strings (numbers in decimal), storage.NAME and source_storage.NAME as
// its datasets' attributes, and stats_names: the names whose statistics the shard holds

const char *xfmt_name(enum xfmt f) {
    return f == XF_NPY ? "npy" : f == XF_SAFETENSORS ? "safetensors" : "hdf5";
}

const char *xfmt_ext(enum xfmt f) {
    return f == XF_HDF5 ? ".h5" : sf_of(f)->ext;
}

int xfmt_parse(const char *name, enum xfmt *f) {
    for (int k = XF_HDF5; k <= XF_SAFETENSORS; k++)
        if (!strcmp(name, xfmt_name((enum xfmt)k))) {
            *f = (enum xfmt)k;
            return 0;
        }
    return -1;
}

static enum sf_dtype sf_kind(enum xkind k) {
    return k == XK_F32 ? SF_F32 : k == XK_F16 ? SF_F16 : k == XK_BF16 ? SF_BF16 : SF_I64;
}

// the statistics arrays read from the source, kept until the shard is written
struct xstats {
    void **buf; // (n) owned
    int n, cap;
};

static void xstats_free(struct xstats *st) {
    for (int i = 0; i < st->n; i++)
        free(st->buf[i]);
    free(st->buf);
    memset(st, 0, sizeof *st);
}

// a buffer of n bytes kept in st (NULL: out of memory)
static void *xstats_alloc(struct xstats *st, size_t n) {
    if (st->n == st->cap) {
        int cap = st->cap ? 2 * st->cap : 16;
        void **b = realloc(st->buf, (size_t)cap * sizeof *b);
        if (!b) return NULL;
        st->buf = b;
        st->cap = cap;
    }
    void *p = malloc(n ? n : 1);
    if (p) st->buf[st->n++] = p;
    return p;
}

// the numeric attributes of the source's /stats/NAME as stats.NAME.KEY
static int stats_attrs(struct sf_shard *w, hid_t g, const char *name) {
    char key[600], an[256], v[64];
    int n = H5Aget_num_attrs(g), rc = n < 0 ? -1 : 0;
    for (int i = 0; rc == 0 && i < n; i++) {
        hid_t a = H5Aopen_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_INC, (hsize_t)i, H5P_DEFAULT,
                                 H5P_DEFAULT);
        hid_t t = a >= 0 ? H5Aget_type(a) : H5I_INVALID_HID;
        H5T_class_t c = t >= 0 ? H5Tget_class(t) : H5T_NO_CLASS;
        int64_t iv = 0;
        double dv = 0;
        if (a < 0 || H5Aget_name(a, sizeof an, an) < 0)
            rc = -1;
        else if (c == H5T_INTEGER && H5Aread(a, H5T_NATIVE_INT64, &iv) >= 0)
            snprintf(v, sizeof v, "%lld", (long long)iv);
        else if (c == H5T_FLOAT && H5Aread(a, H5T_NATIVE_DOUBLE, &dv) >= 0)
            snprintf(v, sizeof v, "%.17g", dv);
        else
            v[0] = 0; // not a number: left out
        snprintf(key, sizeof key, "stats.%s.%s", name, an);
        if (rc == 0 && v[0]) rc = sf_attr(w, key, v);
        if (t >= 0) H5Tclose(t);
        if (a >= 0) H5Aclose(a);
    }
    return rc;
}

// dataset d of /stats/NAME as the array stats.NAME.KEY (int64 or float64)
static int stats_array(struct sf_shard *w, hid_t d, const char *key, struct xstats *st) {
    hid_t t = H5Dget_type(d), sp = H5Dget_space(d);
    bool integer = t >= 0 && H5Tget_class(t) == H5T_INTEGER;
    int nd = sp >= 0 ? H5Sget_simple_extent_ndims(sp) : -1;
    hsize_t dims[SF_MAX_DIMS];
    int64_t shape[SF_MAX_DIMS], n = 1;
    int rc = nd >= 0 && nd <= SF_MAX_DIMS ? 0 : -1;
    if (rc == 0) H5Sget_simple_extent_dims(sp, dims, NULL);
    for (int k = 0; rc == 0 && k < nd; k++)
        n *= shape[k] = (int64_t)dims[k];
    void *buf = rc == 0 ? xstats_alloc(st, (size_t)n * 8) : NULL;
    if (!buf || H5Dread(d, integer ? H5T_NATIVE_INT64 : H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL,
                        H5P_DEFAULT, buf) < 0)
        rc = -1;
    if (rc == 0) rc = sf_put(w, key, integer ? SF_I64 : SF_F64, nd, shape, buf);
    if (sp >= 0) H5Sclose(sp);
    if (t >= 0) H5Tclose(t);
    return rc;
}

// the source's /stats/NAME: its datasets (in name order) and numeric attributes
static int put_stats(struct sf_shard *w, hid_t f, const char *name, struct xstats *st) {
    char path[300], key[600], dn[256];
    snprintf(path, sizeof path, "stats/%s", name);
    hid_t g = H5Gopen2(f, path, H5P_DEFAULT);
    H5G_info_t info;
    int rc = g >= 0 && H5Gget_info(g, &info) >= 0 ? 0 : -1;
    for (hsize_t i = 0; rc == 0 && i < info.nlinks; i++) {
        if (H5Lget_name_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_INC, i, dn, sizeof dn, H5P_DEFAULT) <
            0)
            rc = -1;
        hid_t d = rc == 0 ? H5Dopen2(g, dn, H5P_DEFAULT) : H5I_INVALID_HID;
        snprintf(key, sizeof key, "stats.%s.%s", name, dn);
        if (d >= 0) rc = stats_array(w, d, key, st), H5Dclose(d);
    }
    if (rc == 0) rc = stats_attrs(w, g, name);
    if (g >= 0) H5Gclose(g);
    return rc;
}

// the names with statistics in the source, comma-separated, into buf
static void stats_names(const struct xsrc *s, char *buf, size_t n) {
    size_t at = 0;
    buf[0] = 0;
    for (int i = 0; i < s->n_names; i++)
        if (has_stats(s->f, s->names[i].name) && at < n)
            at += (size_t)snprintf(buf + at, n - at, "%s%s", at ? "," : "", s->names[i].name);
}

static int put_attrs(struct sf_shard *w, const struct xsrc *s, const struct xshard_meta *m,
                     uint64_t sum) {
    char v[8192], key[300];
    int rc = sf_attr(w, "format", "harvest-shard") | sf_attr(w, "format_version", "1") |
             sf_attr(w, "split", m->split);
    const char *ik[] = {"shard", "n_tokens", "first_position", "seed"};
    const int64_t iv[] = {m->shard, m->n_tokens, m->first_position, m->seed};
    for (int k = 0; k < 4; k++) {
        snprintf(v, sizeof v, "%lld", (long long)iv[k]);
        rc |= sf_attr(w, ik[k], v);
    }
    snprintf(v, sizeof v, "%.17g", m->val_fraction);
    rc |= sf_attr(w, "val_fraction", v);
    const char *uk[] = {"source_data_checksum", "checksum", "export_id"};
    const uint64_t uv[] = {m->data_checksum, sum, m->export_id};
    for (int k = 0; k < 3; k++) {
        snprintf(v, sizeof v, "%llu", (unsigned long long)uv[k]);
        rc |= sf_attr(w, uk[k], v);
    }
    for (int i = 0; i < s->n_names; i++) {
        snprintf(key, sizeof key, "storage.%s", s->names[i].name);
        rc |= sf_attr(w, key, kind_storage(s->names[i].dst));
        snprintf(key, sizeof key, "source_storage.%s", s->names[i].name);
        rc |= sf_attr(w, key, xkind_name(s->names[i].src));
    }
    stats_names(s, v, sizeof v);
    return rc | sf_attr(w, "stats_names", v);
}

static int sf_write(const char *path, const struct xshard *b, const struct xsrc *s,
                    const struct xshard_meta *m, uint64_t sum, struct ah_error *err) {
    struct sf_shard w;
    struct xstats st = {0};
    char key[300];
    int64_t shape[SF_MAX_DIMS] = {b->n_tokens};
    sf_create(&w, sf_of(m->fmt), path);
    int rc = put_attrs(&w, s, m, sum);
    for (int i = 0; rc == 0 && i < s->n_names; i++) {
        const struct xname *x = &s->names[i];
        memcpy(shape + 1, x->dims, (size_t)x->ndim * sizeof *shape);
        rc = sf_put(&w, x->name, sf_kind(x->dst), x->ndim + 1, shape, b->act[i]);
    }
    for (int c = 0; rc == 0 && c < 4; c++) {
        snprintf(key, sizeof key, "tokens.%s", xshard_cols[c]);
        rc = sf_put(&w, key, SF_I64, 1, shape, b->cols[c]);
    }
    for (int i = 0; rc == 0 && i < s->n_names; i++)
        if (has_stats(s->f, s->names[i].name)) rc = put_stats(&w, s->f, s->names[i].name, &st);
    if (rc < 0) {
        sf_abort(&w);
        xstats_free(&st);
        return ah_fail(err, AH_ENOMEM,
                       "%s: cannot gather the shard (out of memory, or the "
                       "source's statistics unreadable)",
                       path);
    }
    rc = sf_finish(&w, err);
    xstats_free(&st);
    return rc;
}

// the attribute key of r is v (unsigned decimal)
static bool attr_is(const struct sf_shard *r, const char *key, uint64_t v) {
    const char *a = sf_get(r, key);
    char *end;
    errno = 0;
    unsigned long long got = a ? strtoull(a, &end, 10) : 0;
    return a && *a && !*end && !errno && got == v;
}

// array name of r: kind k, n rows of x's shape (x NULL: scalars); its bytes chained into *h
static bool array_is(const struct sf_shard *r, const char *name, enum xkind k,
                     const struct xname *x, int64_t n, uint64_t *h) {
    const struct sf_array *a = sf_find(r, name);
    int nd = x ? x->ndim : 0;
    bool ok = a && a->t == sf_kind(k) && a->ndim == nd + 1 && a->shape[0] == n;
    for (int j = 0; ok && j < nd; j++)
        ok = a->shape[j + 1] == x->dims[j];
    if (ok) *h = fnv64_words(*h, a->data, a->nbytes);
    return ok;
}

static int sf_verify(const char *path, const struct xsrc *s, const struct xshard_meta *m,
                     uint64_t *sum_out) {
    struct sf_shard r;
    char want[8192], key[300];
    if (sf_open(&r, sf_of(m->fmt), path) != 0) return 0;
    const char *split = sf_get(&r, "split"), *have = sf_get(&r, "stats_names");
    const char *c = sf_get(&r, "checksum");
    uint64_t h = FNV64_INIT, sum = c ? strtoull(c, NULL, 10) : 0;
    stats_names(s, want, sizeof want);
    bool ok = split && !strcmp(split, m->split) && have && !strcmp(have, want) &&
              attr_is(&r, "export_id", m->export_id) && attr_is(&r, "checksum", sum) &&
              attr_is(&r, "n_tokens", (uint64_t)m->n_tokens) &&
              attr_is(&r, "shard", (uint64_t)m->shard) && attr_is(&r, "seed", (uint64_t)m->seed) &&
              attr_is(&r, "source_data_checksum", m->data_checksum);
    for (int i = 0; ok && i < s->n_names; i++)
        ok = array_is(&r, s->names[i].name, s->names[i].dst, &s->names[i], m->n_tokens, &h);
    for (int k = 0; ok && k < 4; k++) {
        snprintf(key, sizeof key, "tokens.%s", xshard_cols[k]);
        ok = array_is(&r, key, XK_I64, NULL, m->n_tokens, &h);
    }
    sf_close(&r);
    *sum_out = sum;
    return ok && h == sum;
}
