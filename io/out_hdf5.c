// out_hdf5.c - the HDF5 output format (io/output.h's table over io/h5out.h and io/h5stats.h):
// segments, the master and the statistics partials, the last kept in each closed segment as group
// /stats: `batch` [n] int64 and `partials` [n, L] float64 (L doubles a batch).
#define _POSIX_C_SOURCE 200809L // defines: fsync, open, access
#include "io/output.h"

#include "io/h5attr.h"
#include "model/ah.h"

#include <fcntl.h>
#include <hdf5.h>
#include <math.h>
#include <stdlib.h>
#include <unistd.h>

#define PART_PATH_MAX 4400

// ----------------------------------------------------------------------------
// segments and the master: the opaque handles are io/h5out.h's own

static int seg_open(struct out_seg **s, MPI_Comm comm, const char *out_path, const char *file,
                    enum out_store store, int compression, int64_t batch_rows,
                    const struct h5out_dset *d, int i0, int i1, struct ah_error *err) {
    struct h5seg *h = NULL;
    int rc = h5seg_open(&h, comm, out_path, file, store, compression, batch_rows, d, i0, i1, err);
    *s = (struct out_seg *)h;
    return rc;
}

static int seg_begin_round(struct out_seg *s, const struct h5out_run *rows, struct ah_error *err) {
    return h5seg_begin_round((struct h5seg *)s, rows, err);
}

static int seg_write(struct out_seg *s, int i, int64_t row, int64_t nrows, const void *data,
                     struct ah_error *err) {
    return h5seg_write((struct h5seg *)s, i, row, nrows, data, err);
}

static int seg_end_round(struct out_seg *s, struct ah_error *err) {
    return h5seg_end_round((struct h5seg *)s, err);
}

static int seg_close(struct out_seg *s, struct h5out_record *rec, struct ah_error *err) {
    return h5seg_close((struct h5seg *)s, rec, err);
}

static int64_t seg_bytes(const struct out_seg *s) {
    return h5seg_bytes((const struct h5seg *)s);
}

static int master_open(struct out_master **m, const struct h5out_params *p,
                       const struct h5out_dset *d, int n, bool resume, uint8_t *batch_done,
                       int *run, bool *complete, struct ah_error *err) {
    struct h5master *h = NULL;
    int rc = h5m_open(&h, p, d, n, resume, batch_done, run, complete, err);
    *m = (struct out_master *)h;
    return rc;
}

static void master_set_provenance(struct out_master *m, const char *json) {
    h5m_set_provenance((struct h5master *)m, json);
}

static int master_add(struct out_master *m, struct h5out_record *rec) {
    return h5m_add((struct h5master *)m, rec);
}

static int master_write(struct out_master *m, bool complete, struct ah_error *err) {
    return h5m_write((struct h5master *)m, complete, err);
}

static int64_t master_done_prompts(const struct out_master *m) {
    return h5m_done_prompts((const struct h5master *)m);
}

static const struct h5out_record *master_records(const struct out_master *m, int *n) {
    return h5m_records((const struct h5master *)m, n);
}

static void master_close(struct out_master *m) {
    h5m_close((struct h5master *)m);
}

// ----------------------------------------------------------------------------
// a look at an existing master

static int peek(const char *path, struct out_peek *pk) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL); // no output, or not HDF5: h5m_open says so
    *pk = (struct out_peek){.ng_median = (double)NAN, .n_dropped_norm = -1};
    hid_t f = access(path, F_OK) == 0 ? H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT) : -1;
    if (f < 0) return -1;
    pk->job = h5attr_get_str(f, "job");
    pk->compute_dtype = h5attr_get_str(f, "compute_dtype");
    h5attr_get_num(f, "norm_guard_median", H5T_NATIVE_DOUBLE, &pk->ng_median);
    h5attr_get_num(f, "n_tokens_dropped_norm", H5T_NATIVE_INT64, &pk->n_dropped_norm);
    pk->has_stats = H5Lexists(f, "stats", H5P_DEFAULT) > 0;
    H5Fclose(f);
    return 0;
}

// ----------------------------------------------------------------------------
// statistics partials

// /stats/batch (n) and /stats/partials (n, L) into the closed segment, then its fsync
static int partials_put(const char *out_path, const char *file, const int64_t *batch,
                        const double *v, int64_t n, int64_t L, struct ah_error *err) {
    char path[PART_PATH_MAX];
    out_parts_path(path, sizeof path, out_path, file);
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT), g = H5I_INVALID_HID;
    hsize_t d[2] = {(hsize_t)n, (hsize_t)L};
    hid_t s1 = H5Screate_simple(1, d, NULL), s2 = H5Screate_simple(2, d, NULL);
    herr_t r = f < 0 ? -1 : 0;
    if (r >= 0) r = g = H5Gcreate2(f, "stats", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hid_t db =
        r < 0 ? -1
              : H5Dcreate2(g, "batch", H5T_STD_I64LE, s1, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hid_t dp = db < 0 ? -1
                      : H5Dcreate2(g, "partials", H5T_IEEE_F64LE, s2, H5P_DEFAULT, H5P_DEFAULT,
                                   H5P_DEFAULT);
    r = dp < 0 ? -1 : 0;
    if (r >= 0 && n) r = H5Dwrite(db, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, batch);
    if (r >= 0 && n) r = H5Dwrite(dp, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
    if (dp >= 0) H5Dclose(dp);
    if (db >= 0) H5Dclose(db);
    if (g >= 0) H5Gclose(g);
    H5Sclose(s1);
    H5Sclose(s2);
    if (f >= 0 && H5Fclose(f) < 0) r = -1;
    int fd = r < 0 ? -1 : open(path, O_RDONLY);
    if (fd < 0 || fsync(fd) != 0) r = -1;
    if (fd >= 0) close(fd);
    return r < 0 ? ah_fail(err, AH_EIO, "%s: cannot write the statistics' partials (disk full?)",
                           path)
                 : 0;
}

static int partials_batches(const char *out_path, const char *file, int64_t **batch, int64_t *n) {
    char path[PART_PATH_MAX];
    out_parts_path(path, sizeof path, out_path, file);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t d = f < 0 ? -1 : H5Dopen2(f, "stats/batch", H5P_DEFAULT);
    hid_t s = d < 0 ? -1 : H5Dget_space(d);
    hsize_t m = 0;
    int64_t *b = NULL;
    bool ok = s >= 0 && H5Sget_simple_extent_dims(s, &m, NULL) == 1 &&
              (b = malloc((size_t)m * sizeof *b + 8)) &&
              (m == 0 || H5Dread(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, b) >= 0);
    if (s >= 0) H5Sclose(s);
    if (d >= 0) H5Dclose(d);
    if (f >= 0) H5Fclose(f);
    if (!ok) free(b);
    *batch = ok ? b : NULL;
    *n = ok ? (int64_t)m : 0;
    return ok ? 0 : -1;
}

struct out_partials {
    hid_t f, d;
};

static void partials_close(struct out_partials *r) {
    if (!r) return;
    if (r->d >= 0) H5Dclose(r->d);
    if (r->f >= 0) H5Fclose(r->f);
    free(r);
}

static struct out_partials *partials_open(const char *out_path, const char *file) {
    char path[PART_PATH_MAX];
    out_parts_path(path, sizeof path, out_path, file);
    struct out_partials *r = malloc(sizeof *r);
    if (!r) return NULL;
    r->f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    r->d = r->f < 0 ? -1 : H5Dopen2(r->f, "stats/partials", H5P_DEFAULT);
    if (r->d >= 0) return r;
    partials_close(r);
    return NULL;
}

static int partials_row(struct out_partials *x, int64_t row, int64_t L, double *buf) {
    hid_t fs = x ? H5Dget_space(x->d) : -1;
    hsize_t st[2] = {(hsize_t)row, 0}, cnt[2] = {1, (hsize_t)L};
    hid_t ms = H5Screate_simple(2, cnt, NULL);
    herr_t r = fs < 0 ? -1 : H5Sselect_hyperslab(fs, H5S_SELECT_SET, st, NULL, cnt, NULL);
    if (r >= 0) r = H5Dread(x->d, H5T_NATIVE_DOUBLE, ms, fs, H5P_DEFAULT, buf);
    H5Sclose(ms);
    if (fs >= 0) H5Sclose(fs);
    return r < 0 ? -1 : 0;
}

const struct out_ops out_hdf5 = {
    .name = "hdf5",
    .seg_open = seg_open,
    .seg_begin_round = seg_begin_round,
    .seg_write = seg_write,
    .seg_end_round = seg_end_round,
    .seg_close = seg_close,
    .seg_bytes = seg_bytes,
    .master_open = master_open,
    .master_set_provenance = master_set_provenance,
    .master_add = master_add,
    .master_write = master_write,
    .master_done_prompts = master_done_prompts,
    .master_records = master_records,
    .master_close = master_close,
    .remove = h5out_remove,
    .peek = peek,
    .partials_put = partials_put,
    .partials_batches = partials_batches,
    .partials_open = partials_open,
    .partials_row = partials_row,
    .partials_close = partials_close,
    .stats_store = h5stats_store,
};
