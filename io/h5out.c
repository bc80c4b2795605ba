// h5out.c - see h5out.h. A segment is written through MPI-IO by the ranks of one pipeline stage
// (collective create, extend and close; independent or, with compression, collective row writes);
// the index and the master are written by rank 0 alone. A kill leaves every listed file closed.
#define _GNU_SOURCE // defines: fsync, sync_file_range
#include "io/h5out.h"

#include "io/fingerprint.h"
#include "io/fsutil.h"
#include "io/h5attr.h"
#include "io/h5fields.h"
#include "io/halfconv.h"
#include "io/output.h" // defines: out_parts_path
#include "model/ah.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CHECK_H5(call, file, what)                                                            \
    do {                                                                                      \
        if ((call) < 0) {                                                                     \
            rc = ah_fail(err, AH_EIO, "%s: HDF5 failed to %s (disk full? %s:%d)", file, what, \
                         __FILE__, __LINE__);                                                 \
            goto fail;                                                                        \
        }                                                                                     \
    } while (0)

#define CHUNK_TARGET (1 << 20)  // bytes a chunk aims for when rows are small
#define CHUNK_MAX    (16 << 20) // a chunk larger than this is split inside the row
#define PATH_MAX_    4096

static hid_t make_half(int bf) {
    hid_t t = H5Tcopy(H5T_IEEE_F32LE);
    if (t < 0) return t;
    herr_t r = bf ? H5Tset_fields(t, 15, 7, 8, 0, 7) : H5Tset_fields(t, 15, 10, 5, 0, 10);
    if (r >= 0) r = H5Tset_precision(t, 16);
    if (r >= 0) r = H5Tset_size(t, 2);
    if (r >= 0) r = H5Tset_ebias(t, bf ? 127 : 15);
    if (r < 0) {
        H5Tclose(t);
        return -1;
    }
    return t;
}

// ----------------------------------------------------------------------------
// attributes

// a new int64 attribute (stored little-endian) holding value
static herr_t attr_i64(hid_t obj, const char *name, int64_t value) {
    return h5attr_put_num(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value);
}

// a 1-D string attribute of n axis names
static herr_t attr_strs(hid_t obj, const char *name, int n, const char (*values)[TAP_AXIS_MAX]) {
    const char *v[TAP_MAX_DIMS];
    for (int i = 0; i < n; i++)
        v[i] = values[i];
    return h5attr_put_strs(obj, name, n, v);
}

// Chunk: whole rows while small, several rows up to CHUNK_TARGET; a row above CHUNK_MAX is split
// along its largest axes. Reading one prompt (or a run of tokens) touches few chunks. Prompt rows
// come a batch at a time from each replica and a segment holds whole batches, so a chunk holds at
// most max_rows (the batch size) prompt rows: on one replica every batch fills whole chunks.
static void choose_chunk(const struct h5out_dset *d, size_t esize, int64_t max_rows,
                         hsize_t *chunk) {
    chunk[0] = 1;
    for (int i = 1; i < d->ndim; i++)
        chunk[i] = (hsize_t)(d->dims[i] ? d->dims[i] : 1);
    for (;;) {
        size_t bytes = esize;
        int big = 1;
        for (int i = 1; i < d->ndim; i++) {
            bytes *= chunk[i];
            if (chunk[i] > chunk[big]) big = i;
        }
        if (bytes <= CHUNK_MAX || d->ndim == 1 || chunk[big] == 1) {
            int64_t rows = (int64_t)(CHUNK_TARGET / bytes);
            if (rows < 1) rows = 1;
            if (rows > d->dims[0]) rows = d->dims[0] > 0 ? d->dims[0] : 1;
            if (max_rows > 0 && rows > max_rows) rows = max_rows;
            chunk[0] = (hsize_t)rows;
            return;
        }
        chunk[big] = (chunk[big] + 1) / 2;
    }
}

static herr_t write_1d(hid_t loc, const char *name, const int64_t *v, int64_t n) {
    hsize_t d = (hsize_t)n;
    hid_t s = H5Screate_simple(1, &d, NULL);
    hid_t ds = H5Dcreate2(loc, name, H5T_STD_I64LE, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    herr_t r = ds < 0 ? -1
               : n    ? H5Dwrite(ds, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v)
                      : 0;
    if (ds >= 0) H5Dclose(ds);
    H5Sclose(s);
    return r;
}

// n values of buf into dataset ds (file space s) from row *at on
static herr_t write_piece(hid_t ds, hid_t s, hsize_t *at, hsize_t n, const int64_t *buf) {
    hid_t m = H5Screate_simple(1, &n, NULL);
    H5Sselect_hyperslab(s, H5S_SELECT_SET, at, NULL, &n, NULL);
    herr_t r = H5Dwrite(ds, H5T_NATIVE_INT64, m, s, H5P_DEFAULT, buf);
    H5Sclose(m);
    *at += n;
    return r;
}

// /tokens/prompt_index (which) or /tokens/position of every token, from the prompts' lengths (or,
// under selection, the stored tokens' counts and positions)
static herr_t write_by_token(hid_t loc, const char *name, const struct h5out_params *p,
                             bool which) {
    hsize_t d = (hsize_t)p->n_tokens;
    hid_t s = H5Screate_simple(1, &d, NULL);
    hid_t ds = H5Dcreate2(loc, name, H5T_STD_I64LE, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    enum { PIECE = 1 << 18 };
    int64_t *buf = malloc(PIECE * sizeof *buf);
    herr_t r = ds < 0 || !buf ? -1 : 0;
    hsize_t at = 0, n = 0;
    const int64_t *count = p->token_count ? p->token_count : p->length;
    for (int64_t q = 0, i = 0; r >= 0 && q < p->n_prompts; q++)
        for (int64_t t = 0; r >= 0 && t < count[q]; t++, i++) {
            buf[n++] = which ? q : p->token_position ? p->token_position[i] : t;
            if (n == PIECE) r = write_piece(ds, s, &at, n, buf), n = 0;
        }
    if (r >= 0 && n) r = write_piece(ds, s, &at, n, buf);
    free(buf);
    if (ds >= 0) H5Dclose(ds);
    H5Sclose(s);
    return r;
}

// /tokens/selected: a 0/1 byte a token
static herr_t write_u8(hid_t loc, const char *name, const struct h5out_params *p) {
    hsize_t d = (hsize_t)p->n_tokens;
    hid_t s = H5Screate_simple(1, &d, NULL);
    hid_t ds = H5Dcreate2(loc, name, H5T_STD_U8LE, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    herr_t r =
        ds < 0 ? -1
        : d    ? H5Dwrite(ds, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, p->token_selected)
               : 0;
    if (ds >= 0) H5Dclose(ds);
    H5Sclose(s);
    return r;
}

static hid_t file_type(hid_t f16, hid_t bf16, enum out_store store, enum tap_dtype dt) {
    if (dt == TAP_I64) return H5T_STD_I64LE;
    return store == OUT_F16 ? f16 : store == OUT_BF16 ? bf16 : H5T_IEEE_F32LE;
}

const char *h5out_dset_name(const struct h5out_dset *d) {
    return d->alias ? d->alias : d->desc->name;
}

static bool by_token(const struct h5out_dset *d) {
    return !strcmp(d->axes[0], "token");
}

// Segment names are made and recognised here alone: seg-RRR-KKKKK-QQQQQ.h5
void h5out_seg_name(char *file, size_t n, int run, int first_rank, int seq) {
    snprintf(file, n, "seg-%03d-%05d-%05d.h5", run, first_rank, seq);
}

static bool is_seg_name(const char *name) {
    int r, k, q, end = 0;
    return sscanf(name, "seg-%d-%d-%d.h5%n", &r, &k, &q, &end) == 3 && end > 0 && !name[end];
}

void h5out_record_free(struct h5out_record *r) {
    free(r->runs);
    memset(r, 0, sizeof *r);
}

// appends a run, merging it into the last one when it continues it
static int push_run(struct h5out_run **runs, int *n, int *cap, struct h5out_run r) {
    if (*n > 0) {
        struct h5out_run *l = &(*runs)[*n - 1];
        if (l->p1 == r.p0 && l->t1 == r.t0 && l->q + (l->p1 - l->p0) == r.q &&
            l->qt + (l->t1 - l->t0) == r.qt) {
            l->p1 = r.p1;
            l->t1 = r.t1;
            return 0;
        }
    }
    if (*n == *cap) {
        int c = *cap * 2 + 8;
        struct h5out_run *nr = realloc(*runs, (size_t)c * sizeof *nr);
        if (!nr) return -AH_ENOMEM;
        *runs = nr;
        *cap = c;
    }
    (*runs)[(*n)++] = r;
    return 0;
}

// ----------------------------------------------------------------------------
// segments: one file shared by the ranks of a communicator, opened through MPI-IO

struct h5seg {
    char path[PATH_MAX_];
    char out_path[PATH_MAX_];
    char file[64];
    MPI_Comm comm;
    int me, members;
    const struct h5out_dset *d;
    int i0, i1;
    enum out_store store;
    bool staged; // compression: rows wait in stage[] for the round's collective write
    hid_t f16, bf16, file_id, dxpl;
    int fd;                 // the file, for writeback and fsync (MPI-IO keeps its own handle)
    hid_t *dset;            // (i1 - i0)
    struct h5out_run *runs; // (n_runs) rows so far, of every member
    int n_runs, cap_runs;
    int64_t rows, rows_t;  // prompt rows and token rows so far
    struct h5out_run mine; // this rank's rows of the current round (q, qt: where they start)
    uint16_t *conv;        // conversion buffer (direct writes)
    int64_t conv_n;
    char **stage;        // (i1 - i0) this rank's rows of the round, in the storage dtype
    size_t *stage_bytes; // their capacity
    int64_t bytes;
};

static void seg_free(struct h5seg *s) {
    for (int i = 0; s->dset && i < s->i1 - s->i0; i++)
        if (s->dset[i] >= 0) H5Dclose(s->dset[i]);
    if (s->file_id >= 0) H5Fclose(s->file_id);
    if (s->fd >= 0) close(s->fd);
    if (s->dxpl >= 0) H5Pclose(s->dxpl);
    if (s->f16 >= 0) H5Tclose(s->f16);
    if (s->bf16 >= 0) H5Tclose(s->bf16);
    for (int i = 0; s->stage && i < s->i1 - s->i0; i++)
        free(s->stage[i]);
    free(s->stage);
    free(s->stage_bytes);
    free(s->dset);
    free(s->runs);
    free(s->conv);
    free(s);
}

static size_t row_elems(const struct h5out_dset *d) {
    size_t n = 1;
    for (int k = 1; k < d->ndim; k++)
        n *= (size_t)d->dims[k];
    return n;
}

// the type rows are handed to HDF5 in: int64, float32, or already the 16-bit storage type
static hid_t mem_type(const struct h5seg *s, const struct h5out_dset *d) {
    if (d->desc->dtype == TAP_I64) return H5T_NATIVE_INT64;
    return s->store == OUT_F32 ? H5T_NATIVE_FLOAT : file_type(s->f16, s->bf16, s->store, TAP_F32);
}

// a file of the parts folder could not be made, opened or kept: if the folder itself is gone
// (removed while the run went on), say so
static int parts_failed(struct ah_error *err, const char *out_path, const char *file,
                        const char *what) {
    char dir[PATH_MAX_];
    struct stat st;
    out_parts_path(dir, sizeof dir, out_path, NULL);
    if (stat(dir, &st) == 0 && S_ISDIR(st.st_mode)) return 0;
    return ah_fail(err, AH_EIO,
                   "%s: the output's parts folder is gone (removed while the run went on?), so "
                   "%s cannot be %s; `--resume` computes what it held again",
                   dir, file, what);
}

int h5seg_open(struct h5seg **out, MPI_Comm comm, const char *out_path, const char *file,
               enum out_store store, int compression, int64_t batch_rows,
               const struct h5out_dset *d, int i0, int i1, struct ah_error *err) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL); // errors are reported through err
    int rc = 0, n = i1 - i0;
    struct h5seg *s = calloc(1, sizeof *s);
    if (!s) return -AH_ENOMEM;
    s->file_id = s->f16 = s->bf16 = s->dxpl = H5I_INVALID_HID;
    s->fd = -1;
    s->dset = malloc(((size_t)n + 1) * sizeof *s->dset);
    s->stage = calloc((size_t)n + 1, sizeof *s->stage);
    s->stage_bytes = calloc((size_t)n + 1, sizeof *s->stage_bytes);
    if (!s->dset || !s->stage || !s->stage_bytes) {
        seg_free(s);
        return ah_fail(err, AH_ENOMEM, "%s: out of memory: the tables of %d datasets", file, n);
    }
    for (int i = 0; i < n; i++)
        s->dset[i] = H5I_INVALID_HID;
    out_parts_path(s->path, sizeof s->path, out_path, file);
    snprintf(s->out_path, sizeof s->out_path, "%s", out_path);
    snprintf(s->file, sizeof s->file, "%s", file);
    s->comm = comm;
    if (MPI_Comm_rank(comm, &s->me) != MPI_SUCCESS ||
        MPI_Comm_size(comm, &s->members) != MPI_SUCCESS) {
        rc = ah_fail(err, AH_EIO, "%s: MPI_Comm_rank/size failed on the segment's ranks", s->path);
        seg_free(s);
        return rc;
    }
    s->d = d;
    s->i0 = i0;
    s->i1 = i1;
    s->store = store;
    s->staged = compression > 0;
    s->f16 = make_half(0);
    s->bf16 = make_half(1);
    hid_t g = H5I_INVALID_HID, fapl = H5Pcreate(H5P_FILE_ACCESS);
    CHECK_H5(s->f16 < 0 || s->bf16 < 0 ? -1 : 0, s->path, "make the 16-bit float types");
    CHECK_H5(H5Pset_fapl_mpio(fapl, comm, MPI_INFO_NULL), s->path, "set up MPI-IO");
    s->file_id = H5Fcreate(s->path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    if (s->file_id < 0 && (rc = parts_failed(err, out_path, file, "made")) < 0) goto fail;
    CHECK_H5(s->file_id, s->path, "create a segment file");
    if ((s->fd = open(s->path, O_RDONLY)) < 0) {
        int e = errno;
        if ((rc = parts_failed(err, out_path, file, "opened")) == 0)
            rc = ah_fail(err, AH_EIO, "%s: open: %s", s->path, strerror(e));
        goto fail;
    }
    // filtered datasets take only collective transfers; plain ones are written independently,
    // straight from the forward pass
    CHECK_H5(s->dxpl = H5Pcreate(H5P_DATASET_XFER), s->path, "make a transfer list");
    CHECK_H5(H5Pset_dxpl_mpio(s->dxpl, s->staged ? H5FD_MPIO_COLLECTIVE : H5FD_MPIO_INDEPENDENT),
             s->path, "set the transfer mode");
    CHECK_H5(g = H5Gcreate2(s->file_id, "activations", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
             s->path, "make a group");
    for (int i = 0; i < n; i++) {
        const struct h5out_dset *e = &d[i0 + i];
        hsize_t dims[TAP_MAX_DIMS], maxd[TAP_MAX_DIMS], chunk[TAP_MAX_DIMS];
        for (int k = 0; k < e->ndim; k++)
            dims[k] = maxd[k] = (hsize_t)e->dims[k];
        dims[0] = 0;
        maxd[0] = H5S_UNLIMITED;
        hid_t ft = file_type(s->f16, s->bf16, store, e->desc->dtype);
        choose_chunk(e, H5Tget_size(ft), by_token(e) ? 0 : batch_rows, chunk);
        hid_t sp = H5Screate_simple(e->ndim, dims, maxd);
        hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
        herr_t r = H5Pset_chunk(dcpl, e->ndim, chunk);
        // every row is written in full (padding included): no fill pass
        if (r >= 0) r = H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
        if (r >= 0 && compression > 0) r = H5Pset_shuffle(dcpl);
        if (r >= 0 && compression > 0) r = H5Pset_deflate(dcpl, (unsigned)compression);
        if (r >= 0)
            r = s->dset[i] =
                H5Dcreate2(g, h5out_dset_name(e), ft, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
        H5Pclose(dcpl);
        H5Sclose(sp);
        CHECK_H5(r, s->path, "create a segment dataset");
    }
    H5Gclose(g);
    H5Pclose(fapl);
    *out = s;
    return 0;
fail:
    if (g >= 0) H5Gclose(g);
    H5Pclose(fapl);
    seg_free(s);
    return rc;
}

int h5seg_begin_round(struct h5seg *s, const struct h5out_run *rows, struct ah_error *err) {
    int rc = 0;
    // start writeback of the rows so far without waiting: the fsync at close then finds little
    // left, and dirty pages do not pile up
    if (s->rows) sync_file_range(s->fd, 0, 0, SYNC_FILE_RANGE_WRITE);
    for (int m = 0; m < s->members; m++) {
        struct h5out_run r = rows[m];
        r.q = s->rows;
        r.qt = s->rows_t;
        if (m == s->me) s->mine = r;
        if (r.p1 == r.p0) continue;
        if ((rc = push_run(&s->runs, &s->n_runs, &s->cap_runs, r)) < 0) return rc;
        s->rows += r.p1 - r.p0;
        s->rows_t += r.t1 - r.t0;
    }
    for (int i = s->i0; i < s->i1; i++) {
        const struct h5out_dset *d = &s->d[i];
        hsize_t dims[TAP_MAX_DIMS];
        for (int k = 0; k < d->ndim; k++)
            dims[k] = (hsize_t)d->dims[k];
        dims[0] = (hsize_t)(by_token(d) ? s->rows_t : s->rows);
        CHECK_H5(H5Dset_extent(s->dset[i - s->i0], dims), s->path, "extend a segment dataset");
        if (!s->staged) continue;
        int64_t n = by_token(d) ? s->mine.t1 - s->mine.t0 : s->mine.p1 - s->mine.p0;
        size_t need = (size_t)n * row_elems(d) * H5Tget_size(mem_type(s, d));
        if (need > s->stage_bytes[i - s->i0]) {
            free(s->stage[i - s->i0]);
            s->stage[i - s->i0] = malloc(need);
            s->stage_bytes[i - s->i0] = s->stage[i - s->i0] ? need : 0;
            if (!s->stage[i - s->i0])
                return ah_fail(err, AH_ENOMEM,
                               "%s: out of memory staging %zu bytes of %s for a round", s->path,
                               need, h5out_dset_name(d));
        }
    }
fail:
    return rc;
}

// rows [start, start + n) of dataset i (n = 0: none) from buf, in this rank's transfer mode
static int seg_put(struct h5seg *s, int i, int64_t start, int64_t n, const void *buf,
                   struct ah_error *err) {
    int rc = 0;
    const struct h5out_dset *d = &s->d[i];
    hid_t fs = H5I_INVALID_HID, ms = H5I_INVALID_HID;
    hsize_t at[TAP_MAX_DIMS] = {0}, count[TAP_MAX_DIMS];
    for (int k = 0; k < d->ndim; k++)
        count[k] = (hsize_t)d->dims[k];
    at[0] = (hsize_t)start;
    count[0] = (hsize_t)n;
    CHECK_H5(fs = H5Dget_space(s->dset[i - s->i0]), s->path, "get a dataspace");
    CHECK_H5(ms = H5Screate_simple(d->ndim, count, NULL), s->path, "make a dataspace");
    if (n > 0)
        CHECK_H5(H5Sselect_hyperslab(fs, H5S_SELECT_SET, at, NULL, count, NULL), s->path,
                 "select rows");
    else
        CHECK_H5(H5Sselect_none(fs) < 0 || H5Sselect_none(ms) < 0 ? -1 : 0, s->path,
                 "select no rows");
    CHECK_H5(H5Dwrite(s->dset[i - s->i0], mem_type(s, d), ms, fs, s->dxpl, buf), s->path,
             "write rows");
    s->bytes += n * (int64_t)row_elems(d) *
                (int64_t)H5Tget_size(file_type(s->f16, s->bf16, s->store, d->desc->dtype));
fail:
    if (ms >= 0) H5Sclose(ms);
    if (fs >= 0) H5Sclose(fs);
    return rc;
}

int h5seg_write(struct h5seg *s, int i, int64_t row, int64_t nrows, const void *data,
                struct ah_error *err) {
    const struct h5out_dset *d = &s->d[i];
    AH_ASSERT(i >= s->i0 && i < s->i1);
    bool tok = by_token(d);
    int64_t first = tok ? s->mine.t0 : s->mine.p0, end = tok ? s->mine.t1 : s->mine.p1;
    AH_ASSERT(row >= first && row + nrows <= end); // this rank's rows of the round
    size_t ne = (size_t)nrows * row_elems(d), es = H5Tget_size(mem_type(s, d));
    bool half = d->desc->dtype == TAP_F32 && s->store != OUT_F32;
    void *dst = NULL;
    if (s->staged) {
        dst = s->stage[i - s->i0] + (size_t)(row - first) * row_elems(d) * es;
    } else if (half) {
        if ((int64_t)ne > s->conv_n) {
            free(s->conv);
            s->conv = malloc(ne * 2);
            s->conv_n = s->conv ? (int64_t)ne : 0;
            if (!s->conv)
                return ah_fail(err, AH_ENOMEM, "%s: out of memory: %zu bytes to convert %s",
                               s->path, ne * 2, h5out_dset_name(d));
        }
        dst = s->conv;
    }
    if (half && s->store == OUT_F16)
        hc_f32_to_f16_n(dst, data, (int64_t)ne);
    else if (half)
        hc_f32_to_bf16_n(dst, data, (int64_t)ne);
    else if (dst)
        memcpy(dst, data, ne * es);
    if (s->staged) return 0;
    return seg_put(s, i, (tok ? s->mine.qt : s->mine.q) + row - first, nrows, dst ? dst : data,
                   err);
}

int h5seg_end_round(struct h5seg *s, struct ah_error *err) {
    int rc = 0;
    for (int i = s->i0; s->staged && rc == 0 && i < s->i1; i++) {
        bool tok = by_token(&s->d[i]);
        rc = seg_put(s, i, tok ? s->mine.qt : s->mine.q,
                     tok ? s->mine.t1 - s->mine.t0 : s->mine.p1 - s->mine.p0, s->stage[i - s->i0],
                     err);
    }
    return rc;
}

int h5seg_close(struct h5seg *s, struct h5out_record *rec, struct ah_error *err) {
    int rc = 0;
    herr_t r = 0;
    for (int i = 0; i < s->i1 - s->i0; i++) {
        if (H5Dclose(s->dset[i]) < 0) r = -1;
        s->dset[i] = H5I_INVALID_HID;
    }
    if (H5Fclose(s->file_id) < 0) r = -1;
    s->file_id = H5I_INVALID_HID;
    // every rank's bytes reach the disk (each flushes its own node's cache) before anything
    // lists the file, and the ranks agree that they all did
    if (r < 0)
        rc = ah_fail(err, AH_EIO, "%s: HDF5 failed to close a segment (disk full?)", s->path);
    else if (fsync(s->fd) != 0)
        rc = ah_fail(err, AH_EIO, "%s: fsync: %s", s->path, strerror(errno));
    else if (access(s->path, F_OK) != 0 &&
             (rc = parts_failed(err, s->out_path, s->file, "kept")) == 0)
        rc = ah_fail(err, AH_EIO, "%s: removed while the run wrote it", s->path);
    int worst = rc;
    if (MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MIN, s->comm) != MPI_SUCCESS && rc == 0)
        rc = worst = ah_fail(err, AH_EIO, "%s: MPI_Allreduce failed closing the segment", s->path);
    if (rc == 0 && worst < 0)
        rc = ah_fail(err, worst, "%s: another rank failed to close the segment", s->path);
    if (rc == 0) {
        memset(rec, 0, sizeof *rec);
        snprintf(rec->file, sizeof rec->file, "%s", s->file);
        rec->i0 = s->i0;
        rec->i1 = s->i1;
        rec->runs = s->runs;
        rec->n_runs = s->n_runs;
        s->runs = NULL;
    }
    seg_free(s);
    return rc;
}

int64_t h5seg_bytes(const struct h5seg *s) {
    return s->bytes;
}

// ----------------------------------------------------------------------------
// the index file: /prompts and /tokens, written once by rank 0

static const char *const table_names[6] = {"prompts/source_index", "prompts/length",
                                           "prompts/token_offset", "tokens/input_ids",
                                           "tokens/prompt_index",  "tokens/position"};

static int write_index(const struct h5out_params *p, struct ah_error *err) {
    int rc = 0;
    char path[PATH_MAX_];
    out_parts_path(path, sizeof path, p->path, "index.h5");
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), g = H5I_INVALID_HID;
    const int64_t *v[4] = {p->source_index, p->length, p->token_offset, p->input_ids};
    CHECK_H5(f, path, "create the index file");
    CHECK_H5(g = H5Gcreate2(f, "prompts", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), path,
             "make a group");
    H5Gclose(g);
    CHECK_H5(g = H5Gcreate2(f, "tokens", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), path,
             "make a group");
    H5Gclose(g);
    for (int i = 0; i < 4; i++)
        CHECK_H5(write_1d(f, table_names[i], v[i], i < 3 ? p->n_prompts : p->n_tokens), path,
                 "write /prompts and /tokens");
    for (int i = 4; i < 6; i++) // made from the lengths, a piece at a time
        CHECK_H5(write_by_token(f, table_names[i], p, i == 4), path, "write /tokens");
    if ((rc = h5fields_write(f, p->fields, p->n_fields, p->n_prompts, path, err)) < 0) goto fail;
    if (p->token_selected) CHECK_H5(write_u8(f, "tokens/selected", p), path, "write /tokens");
    herr_t r = H5Fclose(f);
    f = H5I_INVALID_HID;
    CHECK_H5(r, path, "close the index file");
    if (fs_sync_path(path) != 0) rc = ah_fail(err, AH_EIO, "%s: fsync: %s", path, strerror(errno));
fail:
    if (f >= 0) H5Fclose(f);
    return rc;
}

// ----------------------------------------------------------------------------
// the master

struct h5master {
    struct h5out_params p;      // strings and arrays borrowed from the caller
    const struct h5out_dset *d; // (n) borrowed
    int n;
    hid_t f16, bf16;
    struct h5out_record *rec; // (n_rec) listed segments
    int n_rec, cap_rec;
    int run; // runs of this output so far, this one included
    char tmp[PATH_MAX_];
};

static char *records_json(const struct h5master *m) {
    cJSON *a = cJSON_CreateArray();
    for (int k = 0; k < m->n_rec; k++) {
        const struct h5out_record *r = &m->rec[k];
        cJSON *o = cJSON_CreateObject(), *runs = cJSON_CreateArray();
        cJSON_AddStringToObject(o, "file", r->file);
        int ds[2] = {r->i0, r->i1};
        cJSON_AddItemToObject(o, "datasets", cJSON_CreateIntArray(ds, 2));
        for (int j = 0; j < r->n_runs; j++) {
            const struct h5out_run *u = &r->runs[j];
            double v[6] = {(double)u->p0, (double)u->p1, (double)u->t0,
                           (double)u->t1, (double)u->q,  (double)u->qt};
            cJSON_AddItemToArray(runs, cJSON_CreateDoubleArray(v, 6));
        }
        cJSON_AddItemToObject(o, "runs", runs);
        cJSON_AddItemToArray(a, o);
    }
    char *t = cJSON_PrintUnformatted(a);
    cJSON_Delete(a);
    return t;
}

// records from the JSON of a master's `segments` attribute
static int records_parse(struct h5master *m, const char *text) {
    cJSON *a = cJSON_Parse(text);
    const cJSON *o;
    int rc = cJSON_IsArray(a) ? 0 : -AH_EFORMAT;
    cJSON_ArrayForEach(o, a) {
        struct h5out_record r = {0};
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, "file");
        const cJSON *ds = cJSON_GetObjectItemCaseSensitive(o, "datasets");
        const cJSON *runs = cJSON_GetObjectItemCaseSensitive(o, "runs"), *u;
        if (!cJSON_IsString(f) || cJSON_GetArraySize(ds) != 2 || !cJSON_IsArray(runs)) {
            rc = -AH_EFORMAT;
            break;
        }
        snprintf(r.file, sizeof r.file, "%s", f->valuestring);
        r.i0 = cJSON_GetArrayItem(ds, 0)->valueint;
        r.i1 = cJSON_GetArrayItem(ds, 1)->valueint;
        int cap = 0;
        cJSON_ArrayForEach(u, runs) {
            struct h5out_run x;
            int64_t *v[6] = {&x.p0, &x.p1, &x.t0, &x.t1, &x.q, &x.qt};
            for (int k = 0; k < 6; k++)
                *v[k] = (int64_t)cJSON_GetArrayItem(u, k)->valuedouble;
            if ((rc = push_run(&r.runs, &r.n_runs, &cap, x)) < 0) break;
        }
        if (rc == 0) rc = h5m_add(m, &r);
        if (rc < 0) {
            h5out_record_free(&r);
            break;
        }
    }
    cJSON_Delete(a);
    return rc;
}

// one virtual dataset: all of index.h5's table, or the runs of every segment holding dataset i
static int master_dset(const struct h5master *m, hid_t loc, const char *name, int i, hid_t type,
                       int ndim, const int64_t *dims, const void *fill, hid_t *out,
                       struct ah_error *err) {
    int rc = 0;
    hsize_t vd[TAP_MAX_DIMS], count[TAP_MAX_DIMS], sd[TAP_MAX_DIMS];
    for (int k = 0; k < ndim; k++)
        vd[k] = count[k] = sd[k] = (hsize_t)dims[k];
    hid_t vs = H5Screate_simple(ndim, vd, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    hid_t ss = H5I_INVALID_HID;
    char src[PATH_MAX_], dname[TAP_NAME_MAX + 16];
    const char *slash = strrchr(m->p.path, '/');
    const char *base = slash ? slash + 1 : m->p.path; // sources are relative to the master
    CHECK_H5(H5Pset_fill_value(dcpl, type, fill), m->p.path, "set a fill value");
    if (i < 0 && vd[0] > 0) {
        out_parts_path(src, sizeof src, base, "index.h5");
        CHECK_H5(ss = H5Screate_simple(1, sd, NULL), m->p.path, "make a dataspace");
        CHECK_H5(H5Pset_virtual(dcpl, vs, src, name, ss), m->p.path, "map /prompts, /tokens");
    }
    snprintf(dname, sizeof dname, "activations/%s", name);
    bool tok = i >= 0 && by_token(&m->d[i]);
    for (int k = 0; i >= 0 && k < m->n_rec; k++) {
        const struct h5out_record *r = &m->rec[k];
        if (i < r->i0 || i >= r->i1) continue;
        int64_t rows = 0; // the segment's rows of this dataset
        for (int j = 0; j < r->n_runs; j++) {
            const struct h5out_run *u = &r->runs[j];
            int64_t e = tok ? u->qt + u->t1 - u->t0 : u->q + u->p1 - u->p0;
            rows = e > rows ? e : rows;
        }
        sd[0] = (hsize_t)rows;
        out_parts_path(src, sizeof src, base, r->file);
        for (int j = 0; j < r->n_runs; j++) {
            const struct h5out_run *u = &r->runs[j];
            int64_t a = tok ? u->t0 : u->p0, b = tok ? u->t1 : u->p1, q = tok ? u->qt : u->q;
            if (b == a) continue;
            hsize_t vstart[TAP_MAX_DIMS] = {0}, sstart[TAP_MAX_DIMS] = {0};
            vstart[0] = (hsize_t)a;
            sstart[0] = (hsize_t)q;
            count[0] = (hsize_t)(b - a);
            CHECK_H5(ss = H5Screate_simple(ndim, sd, NULL), m->p.path, "make a dataspace");
            CHECK_H5(H5Sselect_hyperslab(vs, H5S_SELECT_SET, vstart, NULL, count, NULL), m->p.path,
                     "select rows");
            CHECK_H5(H5Sselect_hyperslab(ss, H5S_SELECT_SET, sstart, NULL, count, NULL), m->p.path,
                     "select segment rows");
            CHECK_H5(H5Pset_virtual(dcpl, vs, src, dname, ss), m->p.path, "map a segment");
            H5Sclose(ss);
            ss = H5I_INVALID_HID;
        }
    }
    H5Sselect_all(vs);
    CHECK_H5(*out = H5Dcreate2(loc, name, type, vs, H5P_DEFAULT, dcpl, H5P_DEFAULT), m->p.path,
             "create a virtual dataset");
fail:
    if (ss >= 0) H5Sclose(ss);
    H5Pclose(dcpl);
    H5Sclose(vs);
    return rc;
}

// the caller's provenance with the model's fingerprint added (caller frees)
static char *provenance_json(const struct h5master *m) {
    cJSON *o = cJSON_Parse(m->p.provenance ? m->p.provenance : "{}");
    cJSON *fp = m->p.model_fingerprint ? cJSON_Parse(m->p.model_fingerprint) : NULL;
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        o = cJSON_CreateObject();
    }
    if (fp) cJSON_AddItemToObject(o, "model_fingerprint", fp);
    char *t = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return t;
}

// the model fingerprint a master's provenance holds (caller frees), or NULL
static char *provenance_fingerprint(const char *prov) {
    cJSON *o = prov ? cJSON_Parse(prov) : NULL;
    const cJSON *fp = cJSON_GetObjectItemCaseSensitive(o, "model_fingerprint");
    char *t = fp ? cJSON_PrintUnformatted(fp) : NULL;
    cJSON_Delete(o);
    return t;
}

// the root attributes of the master being written (tmp)
static int master_attrs(const struct h5master *m, hid_t f, bool complete, struct ah_error *err) {
    int rc = 0;
    const char *tmp = m->tmp;
    char *segs = records_json(m), *prov = provenance_json(m);
    CHECK_H5(attr_i64(f, "harvest_format", 1), tmp, "write harvest_format");
    CHECK_H5(h5attr_put_str(f, "model_family", m->p.model_family), tmp, "write model_family");
    CHECK_H5(h5attr_put_str(f, "model_config", m->p.model_config), tmp, "write model_config");
    CHECK_H5(h5attr_put_str(f, "job", m->p.job), tmp, "write job");
    if (m->p.compute_dtype)
        CHECK_H5(h5attr_put_str(f, "compute_dtype", m->p.compute_dtype), tmp, "write compute");
    CHECK_H5(attr_i64(f, "complete", complete), tmp, "write complete");
    CHECK_H5(attr_i64(f, "prompts_done", h5m_done_prompts(m)), tmp, "write prompts_done");
    CHECK_H5(attr_i64(f, "max_seq_len", m->p.max_seq_len), tmp, "write max_seq_len");
    CHECK_H5(attr_i64(f, "batch_size", m->p.batch_size), tmp, "write batch_size");
    CHECK_H5(attr_i64(f, "n_prompts_skipped_empty", m->p.n_skipped_empty), tmp, "write counts");
    CHECK_H5(attr_i64(f, "n_prompts_truncated", m->p.n_truncated), tmp, "write counts");
    CHECK_H5(attr_i64(f, "data_checksum", (int64_t)m->p.data_checksum), tmp, "write checksum");
    CHECK_H5(attr_i64(f, "runs", m->run + 1), tmp, "write runs");
    CHECK_H5(h5attr_put_str(f, "storage_dtype",
                            m->p.store == OUT_F16    ? "float16"
                            : m->p.store == OUT_BF16 ? "bfloat16"
                                                     : "float32"),
             tmp, "write storage_dtype");
    CHECK_H5(h5attr_put_str(f, "segments", segs ? segs : "[]"), tmp, "write segments");
    CHECK_H5(h5attr_put_str(f, "provenance", prov ? prov : "{}"), tmp, "write provenance");
    for (int i = 0; i < m->p.n_counts; i++)
        CHECK_H5(attr_i64(f, m->p.count_names[i], m->p.count_values[i]), tmp, "write counts");
    for (int i = 0; i < m->p.n_reals; i++)
        CHECK_H5(h5attr_put_num(f, m->p.real_names[i], H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE,
                                &m->p.real_values[i]),
                 tmp, "write counts");

fail:
    free(segs);
    free(prov);
    return rc;
}

int h5m_write(struct h5master *m, bool complete, struct ah_error *err) {
    int rc = 0;
    const char *tmp = m->tmp;
    hid_t f = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), g = H5I_INVALID_HID;
    hid_t ds = H5I_INVALID_HID;
    CHECK_H5(f, tmp, "create the master file");
    if ((rc = master_attrs(m, f, complete, err)) < 0) goto fail;
    static const int64_t zero = 0;
    for (int i = 0; i < 6; i++) {
        if (i == 0 || i == 3)
            CHECK_H5(g = H5Gcreate2(f, i < 3 ? "prompts" : "tokens", H5P_DEFAULT, H5P_DEFAULT,
                                    H5P_DEFAULT),
                     tmp, "make a group");
        int64_t n = i < 3 ? m->p.n_prompts : m->p.n_tokens;
        if ((rc = master_dset(m, f, table_names[i], -1, H5T_STD_I64LE, 1, &n, &zero, &ds, err)) < 0)
            goto fail;
        H5Dclose(ds);
        ds = H5I_INVALID_HID;
        if (i == 2 || i == 5) {
            H5Gclose(g);
            g = H5I_INVALID_HID;
        }
    }
    if (m->p.n_fields) { // data.fields: /prompts/NAME over the index's
        char src[PATH_MAX_];
        const char *slash = strrchr(m->p.path, '/');
        out_parts_path(src, sizeof src, slash ? slash + 1 : m->p.path, "index.h5");
        if ((rc = h5fields_map(f, src, m->p.fields, m->p.n_fields, m->p.n_prompts, tmp, err)) < 0)
            goto fail;
    }
    if (m->p.token_selected) { // a virtual dataset over index.h5's, as the tables above
        if ((rc = master_dset(m, f, "tokens/selected", -1, H5T_STD_U8LE, 1, &m->p.n_tokens, &zero,
                              &ds, err)) < 0)
            goto fail;
        H5Dclose(ds);
        ds = H5I_INVALID_HID;
    }
    CHECK_H5(g = H5Gcreate2(f, "activations", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), tmp,
             "make a group");
    const float nan32 = NAN;
    const uint16_t nan16 = 0x7e00, nanbf = 0x7fc0;
    for (int i = 0; i < m->n; i++) {
        const struct h5out_dset *d = &m->d[i];
        const void *fill = d->desc->dtype != TAP_F32 ? (const void *)&zero
                           : m->p.store == OUT_F16   ? (const void *)&nan16
                           : m->p.store == OUT_BF16  ? (const void *)&nanbf
                                                     : (const void *)&nan32;
        hid_t ft = file_type(m->f16, m->bf16, m->p.store, d->desc->dtype);
        if ((rc = master_dset(m, g, h5out_dset_name(d), i, ft, d->ndim, d->dims, fill, &ds, err)) <
            0)
            goto fail;
        char sem[TAP_MAX_DIMS][TAP_AXIS_MAX];
        memcpy(sem, d->desc->axes, sizeof sem);
        CHECK_H5(attr_strs(ds, "semantic_shape", d->desc->ndim, (const char(*)[TAP_AXIS_MAX])sem),
                 tmp, "write semantic_shape");
        CHECK_H5(attr_strs(ds, "stored_axes", d->ndim, d->axes), tmp, "write stored_axes");
        CHECK_H5(h5attr_put_str(ds, "dtype", tap_dtype_name(d->desc->dtype)), tmp, "write dtype");
        CHECK_H5(h5attr_put_str(ds, "meaning", d->desc->meaning), tmp, "write meaning");
        if (d->alias)
            CHECK_H5(h5attr_put_str(ds, "canonical_name", d->desc->name), tmp,
                     "write canonical_name");
        H5Dclose(ds);
        ds = H5I_INVALID_HID;
    }
    H5Gclose(g);
    g = H5I_INVALID_HID;
    herr_t r = H5Fclose(f);
    f = H5I_INVALID_HID;
    CHECK_H5(r, tmp, "close the master file");
    if (fs_replace(tmp, m->p.path) != 0) {
        rc = ah_fail(err, AH_EIO, "%s: cannot replace the master file: %s", m->p.path,
                     strerror(errno));
        goto fail;
    }
fail:
    if (ds >= 0) H5Dclose(ds);
    if (g >= 0) H5Gclose(g);
    if (f >= 0) H5Fclose(f);
    return rc;
}

void h5m_set_provenance(struct h5master *m, const char *json) {
    m->p.provenance = json;
}

int h5m_add(struct h5master *m, struct h5out_record *rec) {
    if (m->n_rec == m->cap_rec) {
        int c = m->cap_rec * 2 + 16;
        struct h5out_record *nr = realloc(m->rec, (size_t)c * sizeof *nr);
        if (!nr) return -AH_ENOMEM;
        m->rec = nr;
        m->cap_rec = c;
    }
    m->rec[m->n_rec++] = *rec;
    memset(rec, 0, sizeof *rec);
    return 0;
}

static int64_t n_batches(const struct h5out_params *p) {
    return (p->n_prompts + p->batch_size - 1) / p->batch_size;
}

// done[k] = 1 when every dataset has batch k's prompt rows in some record
static void batches_done(const struct h5master *m, uint8_t *done) {
    int64_t K = n_batches(&m->p), B = m->p.batch_size;
    for (int64_t k = 0; k < K; k++) {
        int64_t p = k * B;
        bool all = true;
        for (int i = 0; all && i < m->n; i++) {
            bool found = false;
            for (int r = 0; !found && r < m->n_rec; r++) {
                const struct h5out_record *x = &m->rec[r];
                if (i < x->i0 || i >= x->i1) continue;
                for (int j = 0; !found && j < x->n_runs; j++)
                    found = p >= x->runs[j].p0 && p < x->runs[j].p1;
            }
            all = found;
        }
        done[k] = all;
    }
}

const struct h5out_record *h5m_records(const struct h5master *m, int *n) {
    *n = m->n_rec;
    return m->rec;
}

int64_t h5m_done_prompts(const struct h5master *m) {
    int64_t K = n_batches(&m->p), B = m->p.batch_size, n = 0;
    uint8_t *done = malloc((size_t)K + 1);
    if (!done) return 0;
    batches_done(m, done);
    for (int64_t k = 0; k < K; k++)
        if (done[k]) n += (k + 1) * B < m->p.n_prompts ? B : m->p.n_prompts - k * B;
    free(done);
    return n;
}

// keeps only the rows of complete batches in every record (batches never straddle runs)
static int trim_records(struct h5master *m, const uint8_t *done) {
    int64_t B = m->p.batch_size, N = m->p.n_prompts;
    const int64_t *off = m->p.token_offset;
    for (int r = 0; r < m->n_rec; r++) {
        struct h5out_record *x = &m->rec[r];
        struct h5out_run *kept = NULL;
        int n_kept = 0, cap = 0, rc = 0;
        for (int j = 0; rc == 0 && j < x->n_runs; j++) {
            const struct h5out_run *u = &x->runs[j];
            for (int64_t p = u->p0; rc == 0 && p < u->p1; p += B) {
                int64_t e = p + B < N ? p + B : N;
                if (!done[p / B]) continue;
                int64_t t0 = p < N ? off[p] : m->p.n_tokens, t1 = e < N ? off[e] : m->p.n_tokens;
                struct h5out_run y = {p, e, t0, t1, u->q + p - u->p0, u->qt + t0 - u->t0};
                rc = push_run(&kept, &n_kept, &cap, y);
            }
        }
        if (rc < 0) {
            free(kept);
            return rc;
        }
        free(x->runs);
        x->runs = kept;
        x->n_runs = n_kept;
    }
    return 0;
}

// ----------------------------------------------------------------------------
// listed files checked: a segment or the index deleted, truncated or replaced after listing, and
// the master's virtual datasets mapped onto exactly the files of its own parts folder

#define WHY_MAX 300

// rows the runs of r need in its prompt (tok false) or token datasets
static int64_t rows_needed(const struct h5out_record *r, bool tok) {
    int64_t need = 0;
    for (int j = 0; j < r->n_runs; j++) {
        const struct h5out_run *u = &r->runs[j];
        int64_t e = tok ? u->qt + u->t1 - u->t0 : u->q + u->p1 - u->p0;
        need = e > need ? e : need;
    }
    return need;
}

static int64_t dset_len(hid_t file, const char *path);

// whether dataset `name` of r's segment is token-major: 1, 0, or -1 for a name it should not hold
typedef int (*token_major_fn)(void *u, const struct h5out_record *r, const char *name);

struct seg_check {
    const struct h5out_record *r;
    token_major_fn token_major;
    void *u;
    int n; // datasets found
    char *why;
    size_t cap;
};

static herr_t check_dset(hid_t g, const char *name, const H5L_info_t *info, void *u) {
    (void)info;
    struct seg_check *c = u;
    int tok = c->token_major(c->u, c->r, name);
    if (tok < 0) {
        snprintf(c->why, c->cap, "holds a dataset it should not, %s", name);
        return 1;
    }
    int64_t rows = dset_len(g, name), need = rows_needed(c->r, tok == 1);
    if (rows < need) {
        snprintf(c->why, c->cap, "its dataset %s has %lld of its %lld rows", name,
                 (long long)(rows < 0 ? 0 : rows), (long long)need);
        return 1;
    }
    c->n++;
    return 0;
}

// Whether the segment file of r exists, opens and holds its datasets with the rows it lists;
// if not, why says what is wrong.
static bool seg_intact(const char *out_path, const struct h5out_record *r, token_major_fn tm,
                       void *u, char *why, size_t cap) {
    char path[PATH_MAX_];
    struct stat st;
    out_parts_path(path, sizeof path, out_path, r->file);
    if (stat(path, &st) != 0) {
        snprintf(why, cap, "is missing");
        return false;
    }
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t g = f < 0 ? H5I_INVALID_HID : H5Gopen2(f, "activations", H5P_DEFAULT);
    struct seg_check c = {r, tm, u, 0, why, cap};
    why[0] = 0;
    herr_t e = g < 0 ? -1 : H5Literate(g, H5_INDEX_NAME, H5_ITER_INC, NULL, check_dset, &c);
    if (e < 0)
        snprintf(why, cap, "cannot be read as HDF5 (truncated or damaged)");
    else if (e == 0 && c.n != r->i1 - r->i0)
        snprintf(why, cap, "holds %d of its %d datasets", c.n, r->i1 - r->i0);
    if (g >= 0) H5Gclose(g);
    if (f >= 0) H5Fclose(f);
    return !why[0];
}

// Whether index.h5 opens and holds /prompts (n_prompts rows) and /tokens (n_tokens rows).
static bool index_intact(const char *out_path, int64_t n_prompts, int64_t n_tokens) {
    char path[PATH_MAX_];
    out_parts_path(path, sizeof path, out_path, "index.h5");
    struct stat st;
    if (stat(path, &st) != 0) return false;
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    bool ok = f >= 0;
    for (int i = 0; ok && i < 6; i++)
        ok = dset_len(f, table_names[i]) == (i < 3 ? n_prompts : n_tokens);
    if (f >= 0) H5Fclose(f);
    return ok;
}

// What is wrong with the files of an output: its listed segments and index.h5 (each checked as
// above), and every mapping of the master's virtual datasets, which must name a file of the
// master's own parts folder (BASE.parts/LEAF, BASE the master's own file name) whose dataset
// holds the rows and shape the mapping reads.
struct health {
    const char *path;               // the master
    const struct h5out_record *rec; // (n_rec) its listed segments
    int n_rec, n_dsets;
    char (*why)[WHY_MAX]; // (n_rec + 1): "" or what is wrong with a record's file; [n_rec]: index
    hid_t *fid;           // (n_rec + 1) the files, opened when a mapping first reads them
    char foreign[PATH_MAX_];      // a source named outside the master's own parts folder, or ""
    char unlisted[PATH_MAX_ * 2]; // a damaged source that the master does not list, or ""
    char redirect[PATH_MAX_ * 5]; // a source HDF5_VDS_PREFIX finds elsewhere, or ""
    bool index_always;            // index.h5 checked even if no mapping reads it (--resume)
    bool index_read;              // a mapping reads index.h5
};

// the leaf of a mapped file name, and whether it is BASE.parts/LEAF for the master's own BASE
static const char *own_leaf(const char *master, const char *file, bool *own) {
    const char *slash = strrchr(master, '/'), *base = slash ? slash + 1 : master;
    const char *leaf = strrchr(file, '/');
    size_t n = strlen(base);
    *own =
        leaf && !strncmp(file, base, n) && !strncmp(file + n, ".parts/", 7) && file + n + 6 == leaf;
    return leaf ? leaf + 1 : file;
}

// HDF5 looks for a mapped file under each folder of HDF5_VDS_PREFIX before the master's folder:
// the first one there that is not the master's own file (own) goes into h->redirect
static void check_prefix(struct health *h, const char *file, const char *own) {
    const char *env = getenv("HDF5_VDS_PREFIX"), *slash = strrchr(h->path, '/');
    struct stat a, b;
    if (!env || !*env || h->redirect[0]) return;
    for (const char *p = env; *p;) {
        size_t n = strcspn(p, ":");
        char cand[PATH_MAX_ * 2];
        bool origin = n >= 9 && !strncmp(p, "${ORIGIN}", 9);
        snprintf(cand, sizeof cand, "%.*s%.*s/%s",
                 origin ? (slash ? (int)(slash - h->path) : 1) : 0, slash ? h->path : ".",
                 (int)(origin ? n - 9 : n), origin ? p + 9 : p, file);
        if (n && stat(cand, &a) == 0) { // HDF5 opens the first one found
            if (stat(own, &b) != 0 || a.st_ino != b.st_ino || a.st_dev != b.st_dev)
                snprintf(h->redirect, sizeof h->redirect, "%s (not %s)", cand, own);
            return;
        }
        p += n + (p[n] == ':');
    }
}

// one past the last source row mapping i reads (a source selection "all": as many rows as the
// virtual selection has, from row 0)
static hsize_t rows_read(hid_t dcpl, size_t i) {
    hid_t ss = H5Pget_virtual_srcspace(dcpl, i), vs = H5Pget_virtual_vspace(dcpl, i);
    bool all = ss >= 0 && H5Sget_select_type(ss) == H5S_SEL_ALL;
    hid_t s = all ? vs : ss;
    hsize_t a[TAP_MAX_DIMS + 1], b[TAP_MAX_DIMS + 1], n = 0;
    int nd = s >= 0 ? H5Sget_simple_extent_ndims(s) : -1;
    if (nd > 0 && nd <= TAP_MAX_DIMS + 1 && H5Sget_select_npoints(s) > 0 &&
        H5Sget_select_bounds(s, a, b) >= 0)
        n = all ? b[0] - a[0] + 1 : b[0] + 1;
    if (ss >= 0) H5Sclose(ss);
    if (vs >= 0) H5Sclose(vs);
    return n;
}

// the source dataset of mapping i of virtual dataset d: it must hold the rows the mapping
// reads, with the master's row shape and element type
static void check_source(char *why, hid_t src, hid_t d, hid_t dcpl, size_t i, const char *dname) {
    hid_t sd = H5Dopen2(src, dname, H5P_DEFAULT);
    hid_t sp = sd < 0 ? H5I_INVALID_HID : H5Dget_space(sd), vp = H5Dget_space(d);
    hid_t st = sd < 0 ? H5I_INVALID_HID : H5Dget_type(sd), vt = H5Dget_type(d);
    hsize_t sdim[TAP_MAX_DIMS + 1], vdim[TAP_MAX_DIMS + 1], rows = 0;
    int nd = H5Sget_simple_extent_ndims(vp);
    bool ok = sd >= 0 && nd > 0 && nd <= TAP_MAX_DIMS + 1 && H5Sget_simple_extent_ndims(sp) == nd &&
              H5Sget_simple_extent_dims(sp, sdim, NULL) == nd &&
              H5Sget_simple_extent_dims(vp, vdim, NULL) == nd &&
              H5Tget_class(st) == H5Tget_class(vt) && H5Tget_size(st) == H5Tget_size(vt);
    for (int k = 1; ok && k < nd; k++)
        ok = sdim[k] == vdim[k];
    if (sd < 0)
        snprintf(why, WHY_MAX, "lacks the dataset %s", dname);
    else if (!ok)
        snprintf(why, WHY_MAX, "its dataset %s has another shape or type than the master's", dname);
    else if ((rows = rows_read(dcpl, i)) > sdim[0])
        snprintf(why, WHY_MAX, "its dataset %s has %llu of the %llu rows the master reads", dname,
                 (unsigned long long)sdim[0], (unsigned long long)rows);
    if (sp >= 0) H5Sclose(sp);
    if (st >= 0) H5Tclose(st);
    if (sd >= 0) H5Dclose(sd);
    H5Sclose(vp);
    H5Tclose(vt);
}

// mapping i of virtual dataset d: its file is the master's own and holds what it reads
// a mapping onto a file of the master's folder that its segments attribute does not list (not a
// master harvest writes): checked all the same; when damaged, h->unlisted says so
static void unlisted_source(struct health *h, const char *own, const char *leaf, hid_t d,
                            hid_t dcpl, size_t i, const char *dname) {
    char why[WHY_MAX] = "";
    hid_t f = H5Fopen(own, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0)
        snprintf(why, sizeof why, "cannot be read as HDF5 (missing, truncated or damaged)");
    else
        check_source(why, f, d, dcpl, i, dname);
    if (f >= 0) H5Fclose(f);
    if (why[0])
        snprintf(h->unlisted, sizeof h->unlisted,
                 "%s %s (the master reads it, though its segments attribute does not list it)",
                 leaf, why);
}

static bool same_file(const char *a, const char *b) {
    struct stat x, y;
    return stat(a, &x) == 0 && stat(b, &y) == 0 && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

static void check_mapping(struct health *h, hid_t d, hid_t dcpl, size_t i) {
    char file[PATH_MAX_], dname[TAP_NAME_MAX + 64], own[PATH_MAX_ * 2], read[PATH_MAX_ * 2];
    bool mine = false;
    if (H5Pget_virtual_filename(dcpl, i, file, sizeof file) < 0 ||
        H5Pget_virtual_dsetname(dcpl, i, dname, sizeof dname) < 0)
        snprintf(file, sizeof file, "(an unreadable mapping)");
    const char *leaf = own_leaf(h->path, file, &mine), *slash = strrchr(h->path, '/');
    out_parts_path(own, sizeof own, h->path, leaf);
    // another name is fine when it reaches the very files of the master's own folder (a parts
    // folder linked to the one it names): what HDF5 opens, the master's folder and the name
    snprintf(read, sizeof read, "%.*s%s%s",
             file[0] == '/' ? 0
             : slash        ? (int)(slash - h->path)
                            : 1,
             slash ? h->path : ".", file[0] == '/' ? "" : "/", file);
    if (!mine) mine = same_file(read, own);
    if (!mine && !h->foreign[0]) snprintf(h->foreign, sizeof h->foreign, "%s", file);
    int k = 0;
    while (k < h->n_rec && strcmp(h->rec[k].file, leaf))
        k++;
    if (k == h->n_rec && strcmp(leaf, "index.h5")) { // a file the master does not list
        if (!h->unlisted[0]) unlisted_source(h, own, leaf, d, dcpl, i, dname);
        return;
    }
    if (k == h->n_rec) h->index_read = true;
    if (h->why[k][0]) return; // known to be damaged
    if (mine) check_prefix(h, file, own);
    if (h->fid[k] < 0 && (h->fid[k] = H5Fopen(own, H5F_ACC_RDONLY, H5P_DEFAULT)) < 0) {
        snprintf(h->why[k], WHY_MAX, "cannot be read as HDF5 (missing, truncated or damaged)");
        return;
    }
    check_source(h->why[k], h->fid[k], d, dcpl, i, dname);
}

static herr_t check_vds(hid_t g, const char *name, const H5L_info_t *info, void *u) {
    (void)info;
    hid_t d = H5Dopen2(g, name, H5P_DEFAULT); // fails (quietly) for a group
    if (d < 0) return 0;
    hid_t dcpl = H5Dget_create_plist(d);
    size_t n = 0;
    if (dcpl >= 0 && H5Pget_layout(dcpl) == H5D_VIRTUAL && H5Pget_virtual_count(dcpl, &n) >= 0)
        for (size_t i = 0; i < n; i++)
            check_mapping(u, d, dcpl, i);
    if (dcpl >= 0) H5Pclose(dcpl);
    H5Dclose(d);
    return 0;
}

// Fills h (h->why and h->fid allocated here for h->n_rec records; health_free frees them) for
// the master f, whose records' datasets are token-major as tm says.
static int health_check(struct health *h, hid_t f, token_major_fn tm, void *u, int64_t n_prompts,
                        int64_t n_tokens) {
    h->why = calloc((size_t)h->n_rec + 1, sizeof *h->why);
    h->fid = malloc(((size_t)h->n_rec + 1) * sizeof *h->fid);
    if (!h->why || !h->fid) return -AH_ENOMEM;
    for (int k = 0; k <= h->n_rec; k++)
        h->fid[k] = H5I_INVALID_HID;
    if (!index_intact(h->path, n_prompts, n_tokens))
        snprintf(h->why[h->n_rec], WHY_MAX, "is missing or damaged");
    for (int k = 0; k < h->n_rec; k++) {
        const struct h5out_record *r = &h->rec[k];
        if (r->i0 < 0 || r->i1 > h->n_dsets || r->i0 >= r->i1)
            snprintf(h->why[k], WHY_MAX, "lists datasets [%d, %d) of %d", r->i0, r->i1, h->n_dsets);
        else
            seg_intact(h->path, r, tm, u, h->why[k], WHY_MAX);
    }
    H5Lvisit(f, H5_INDEX_NAME, H5_ITER_INC, check_vds, h);
    if (!h->index_always && !h->index_read) h->why[h->n_rec][0] = 0; // an output of plain datasets
    for (int k = 0; k <= h->n_rec; k++)
        if (h->fid[k] >= 0) H5Fclose(h->fid[k]);
    return 0;
}

static void health_free(struct health *h) {
    free(h->why);
    free(h->fid);
}

// resume: a dataset of a record is token-major as the output's list says
static int token_major_listed(void *u, const struct h5out_record *r, const char *name) {
    const struct h5master *m = u;
    for (int i = r->i0; i < r->i1 && i < m->n; i++)
        if (!strcmp(h5out_dset_name(&m->d[i]), name)) return by_token(&m->d[i]);
    return -1;
}

// Drops every record whose segment is not intact (its batches are then computed again, and
// remove_unlisted deletes what is left of the file), saying so on stderr.
static void drop_damaged(struct h5master *m, const struct health *h) {
    int kept = 0;
    for (int k = 0; k < m->n_rec; k++) {
        if (!h->why[k][0]) {
            m->rec[kept++] = m->rec[k];
            continue;
        }
        fprintf(stderr,
                "harvest: %s.parts/%s %s (it is listed in the output): its rows are computed "
                "again\n",
                m->p.path, m->rec[k].file, h->why[k]);
        h5out_record_free(&m->rec[k]);
    }
    m->n_rec = kept;
}

// Removes the segment files of the parts folder that no record lists: rows of a failed or killed
// run that never became part of the output (they only hold disk space).
static void remove_unlisted(const struct h5master *m) {
    char dir[PATH_MAX_], f[PATH_MAX_ + 300];
    out_parts_path(dir, sizeof dir, m->p.path, NULL);
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!is_seg_name(e->d_name)) continue;
        bool listed = false;
        for (int k = 0; !listed && k < m->n_rec; k++)
            listed = !strcmp(m->rec[k].file, e->d_name);
        if (listed) continue;
        snprintf(f, sizeof f, "%s/%s", dir, e->d_name);
        unlink(f);
    }
    closedir(d);
}

// resume: the parts folder and index.h5 as a fresh start makes them, if they were deleted or
// damaged (their content follows from the job and the data, which match)
static int resume_parts(const struct h5master *m, bool index_ok, struct ah_error *err) {
    char parts[PATH_MAX_];
    out_parts_path(parts, sizeof parts, m->p.path, NULL);
    if (mkdir(parts, 0777) != 0 && errno != EEXIST)
        return ah_fail(err, AH_EIO, "%s: cannot create the parts folder: %s", parts,
                       strerror(errno));
    if (index_ok) return 0;
    fprintf(stderr, "harvest: %s.parts/index.h5 is missing or damaged: written again\n", m->p.path);
    return write_index(&m->p, err);
}

static int resume_state(struct h5master *m, uint8_t *batch_done, bool *complete,
                        struct ah_error *err) {
    int rc = 0;
    const char *mp = m->p.path;
    char *job = NULL, *segs = NULL, *prov = NULL, *fp = NULL;
    hid_t f = H5Fopen(mp, H5F_ACC_RDONLY, H5P_DEFAULT);
    int64_t c = 0, sum = 0, runs = 0, bsz = 0;
    if (f < 0) {
        rc = ah_fail(err, AH_EINVAL,
                     "%s: cannot open for --resume (not an HDF5 file?); use "
                     "--overwrite to start again",
                     mp);
        goto fail;
    }
    job = h5attr_get_str(f, "job");
    segs = h5attr_get_str(f, "segments");
    prov = h5attr_get_str(f, "provenance");
    if (!job || !segs || h5attr_get_num(f, "complete", H5T_NATIVE_INT64, &c) < 0 ||
        h5attr_get_num(f, "data_checksum", H5T_NATIVE_INT64, &sum) < 0 ||
        h5attr_get_num(f, "runs", H5T_NATIVE_INT64, &runs) < 0 ||
        h5attr_get_num(f, "batch_size", H5T_NATIVE_INT64, &bsz) < 0) {
        rc = ah_fail(err, AH_EINVAL,
                     "%s: not a harvest output (no job/segments attributes); use "
                     "--overwrite to replace it",
                     mp);
        goto fail;
    }
    if (strcmp(job, m->p.job) || bsz != m->p.batch_size) {
        rc = ah_fail(err, AH_EINVAL,
                     "%s: was made by a different job; --resume needs the same job "
                     "file (use --overwrite to start again)",
                     mp);
        goto fail;
    }
    if ((uint64_t)sum != m->p.data_checksum) {
        rc = ah_fail(err, AH_EINVAL,
                     "%s: the prompts differ from the ones this output was started "
                     "with (the data file changed?); use --overwrite to start again",
                     mp);
        goto fail;
    }
    if (records_parse(m, segs) < 0) {
        rc = ah_fail(err, AH_EFORMAT, "%s: unreadable \"segments\" attribute; use --overwrite", mp);
        goto fail;
    }
    if (m->p.model_fingerprint && (fp = provenance_fingerprint(prov)) &&
        (rc = fp_compare(fp, m->p.model_fingerprint, mp, err)) < 0)
        goto fail;
    struct health h = {
        .path = mp, .rec = m->rec, .n_rec = m->n_rec, .n_dsets = m->n, .index_always = true};
    if ((rc = health_check(&h, f, token_major_listed, m, m->p.n_prompts, m->p.n_tokens)) == 0 &&
        (rc = resume_parts(m, !h.why[m->n_rec][0], err)) == 0)
        drop_damaged(m, &h);
    health_free(&h);
    if (rc < 0) goto fail;
    batches_done(m, batch_done);
    if ((rc = trim_records(m, batch_done)) < 0) goto fail;
    remove_unlisted(m);
    m->run = (int)runs;
    *complete = c == 1;
fail:
    free(job);
    free(segs);
    free(prov);
    free(fp);
    if (f >= 0) H5Fclose(f);
    return rc;
}

int h5m_open(struct h5master **out, const struct h5out_params *p, const struct h5out_dset *d, int n,
             bool resume, uint8_t *batch_done, int *run, bool *complete, struct ah_error *err) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL); // errors are reported through err
    struct h5master *m = calloc(1, sizeof *m);
    if (!m) return -AH_ENOMEM;
    m->p = *p;
    m->d = d;
    m->n = n;
    m->f16 = make_half(0);
    m->bf16 = make_half(1);
    snprintf(m->tmp, sizeof m->tmp, "%s.tmp", p->path);
    int rc = m->f16 < 0 || m->bf16 < 0 ? -AH_EIO : 0;
    char parts[PATH_MAX_];
    out_parts_path(parts, sizeof parts, p->path, NULL);
    *complete = false;
    memset(batch_done, 0, (size_t)n_batches(p));
    if (rc < 0) {
    } else if (resume) {
        rc = resume_state(m, batch_done, complete, err);
    } else if (mkdir(parts, 0777) != 0 && errno != EEXIST) {
        rc = ah_fail(err, AH_EIO,
                     "%s: cannot create the output file (check that its folder exists and is "
                     "writable): %s",
                     p->path, strerror(errno));
    } else if ((rc = write_index(p, err)) == 0) {
        rc = h5m_write(m, false, err);
    }
    if (rc < 0) {
        h5m_close(m);
        return rc;
    }
    *run = m->run;
    *out = m;
    return 0;
}

void h5m_close(struct h5master *m) {
    if (!m) return;
    for (int k = 0; k < m->n_rec; k++)
        h5out_record_free(&m->rec[k]);
    free(m->rec);
    if (m->f16 >= 0) H5Tclose(m->f16);
    if (m->bf16 >= 0) H5Tclose(m->bf16);
    free(m);
}

int h5out_remove(const char *path, struct ah_error *err) {
    char p[PATH_MAX_ + 32];
    if (unlink(path) != 0 && errno != ENOENT)
        return ah_fail(err, AH_EIO, "%s: cannot remove: %s", path, strerror(errno));
    snprintf(p, sizeof p, "%s.tmp", path);
    unlink(p);
    out_parts_path(p, sizeof p, path, NULL);
    DIR *dir = opendir(p);
    if (!dir) return 0;
    struct dirent *e;
    while ((e = readdir(dir))) {
        bool ours = !strcmp(e->d_name, "index.h5") || is_seg_name(e->d_name);
        if (!ours) continue;
        char f[PATH_MAX_ + 300];
        snprintf(f, sizeof f, "%s/%s", p, e->d_name);
        unlink(f);
    }
    closedir(dir);
    rmdir(p); // stays if the user keeps other files there
    return 0;
}

// ----------------------------------------------------------------------------
// inspect

static int64_t dset_len(hid_t file, const char *path) {
    hid_t d = H5Dopen2(file, path, H5P_DEFAULT);
    if (d < 0) return -1;
    hid_t s = H5Dget_space(d);
    hsize_t n = 0;
    H5Sget_simple_extent_dims(s, &n, NULL);
    H5Sclose(s);
    H5Dclose(d);
    return (int64_t)n;
}

static herr_t show_dset(hid_t g, const char *name, const H5L_info_t *info, void *u) {
    (void)info;
    hid_t d = H5Dopen2(g, name, H5P_DEFAULT);
    if (d < 0) return 0;
    hid_t s = H5Dget_space(d), t = H5Dget_type(d);
    hsize_t dims[8];
    int nd = H5Sget_simple_extent_dims(s, dims, NULL);
    char shape[128] = "";
    for (int k = 0; k < nd; k++)
        snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%llu", k ? ", " : "",
                 (unsigned long long)dims[k]);
    char *dtype = h5attr_get_str(d, "dtype");
    const char *stored = "float32";
    size_t spos, epos, esize, mpos, msize;
    if (H5Tget_class(t) == H5T_INTEGER)
        stored = "int64";
    else if (H5Tget_size(t) == 2 && H5Tget_fields(t, &spos, &epos, &esize, &mpos, &msize) >= 0)
        stored = esize == 8 ? "bfloat16" : "float16";
    fprintf(u, "  %-34s %-8s stored %-8s [%s]\n", name, dtype ? dtype : "?", stored, shape);
    free(dtype);
    H5Tclose(t);
    H5Sclose(s);
    H5Dclose(d);
    return 0;
}

// inspect, stats, export: a dataset is token-major when the master's has n_tokens rows (with as
// many tokens as prompts, every prompt is one token long and both ways of counting agree)
struct master_names {
    hid_t f;
    int64_t n_tokens;
};

static int token_major_master(void *u, const struct h5out_record *r, const char *name) {
    (void)r;
    const struct master_names *x = u;
    char p[TAP_NAME_MAX + 16];
    snprintf(p, sizeof p, "activations/%s", name);
    int64_t n = H5Lexists(x->f, p, H5P_DEFAULT) > 0 ? dset_len(x->f, p) : -1;
    return n < 0 ? -1 : n == x->n_tokens;
}

// a master read under another name than the one it was written as (h->foreign names a file
// outside its own parts folder)
static int foreign_error(const struct health *h, struct ah_error *err) {
    const char *f = h->foreign, *p = strstr(f, ".parts/"), *slash = strrchr(h->path, '/');
    const char *base = slash ? slash + 1 : h->path;
    if (!p || strchr(f, '/') < p)
        return ah_fail(err, AH_EINVAL,
                       "%s: its virtual datasets read %s, not a file of its own parts folder "
                       "%s.parts/ (not an output harvest wrote?)",
                       h->path, f, h->path);
    int n = (int)(p - f);
    return ah_fail(err, AH_EINVAL,
                   "%s: written as %.*s, it has been renamed or copied under another name: its "
                   "virtual datasets read %.*s.parts/ beside it (another output's rows, or NaN), "
                   "not its own %s.parts/. An output moves or copies only as its two parts under "
                   "the same name: rename it back to %.*s and %s.parts/ to %.*s.parts/ (in "
                   "another folder, to keep a copy beside the original)",
                   h->path, n, f, n, f, base, n, f, base, n, f);
}

// h said: an error for a master that reads files not its own; else each damaged file is a line
// on say and hl is filled
static int health_say(const struct health *h, FILE *say, const char *lead, struct h5out_health *hl,
                      struct ah_error *err) {
    if (h->foreign[0]) return foreign_error(h, err);
    if (h->redirect[0])
        return ah_fail(err, AH_EINVAL,
                       "%s: HDF5_VDS_PREFIX makes HDF5 read %s through its virtual datasets: "
                       "unset HDF5_VDS_PREFIX to read this output",
                       h->path, h->redirect);
    hl->n_bad = 0;
    for (int k = 0; k <= h->n_rec; k++) {
        if (!h->why[k][0]) continue;
        hl->n_bad++;
        if (say)
            fprintf(say, "%s%s.parts/%s %s\n", lead, h->path,
                    k < h->n_rec ? h->rec[k].file : "index.h5", h->why[k]);
        for (int j = 0; hl->done && k < h->n_rec && j < h->rec[k].n_runs; j++)
            for (int64_t p = h->rec[k].runs[j].p0; p < h->rec[k].runs[j].p1; p++)
                if (p >= 0 && p < hl->n_prompts) hl->done[p] = 0;
        if (hl->done && k == h->n_rec) memset(hl->done, 0, (size_t)hl->n_prompts);
    }
    if (h->unlisted[0]) { // which prompts it holds is not known: none is taken as done
        hl->n_bad++;
        if (say) fprintf(say, "%s%s.parts/%s\n", lead, h->path, h->unlisted);
        if (hl->done) memset(hl->done, 0, (size_t)hl->n_prompts);
    }
    hl->n_done = 0;
    for (int64_t p = 0; hl->done && p < hl->n_prompts; p++)
        hl->n_done += hl->done[p] != 0;
    return 0;
}

// h5out_check of the open master f
static int check_master(const char *path, hid_t f, FILE *say, const char *lead,
                        struct h5out_health *hl, struct ah_error *err) {
    struct h5master m = {.p = {.path = path}};
    char *segs = h5attr_get_str(f, "segments");
    int64_t n = dset_len(f, "prompts/length"), nt = dset_len(f, "tokens/input_ids");
    struct master_names x = {f, nt};
    hid_t g = H5Gopen2(f, "activations", H5P_DEFAULT);
    H5G_info_t gi = {0};
    if (g >= 0) H5Gget_info(g, &gi), H5Gclose(g);
    int rc = !segs || records_parse(&m, segs) == 0 // none: an output of plain datasets
                 ? 0
                 : ah_fail(err, AH_EFORMAT, "%s: unreadable \"segments\" attribute", path);
    free(segs);
    struct health h = {.path = path, .rec = m.rec, .n_rec = m.n_rec, .n_dsets = (int)gi.nlinks};
    if (rc == 0) rc = health_check(&h, f, token_major_master, &x, n, nt);
    if (rc == 0) rc = health_say(&h, say, lead, hl, err);
    health_free(&h);
    for (int k = 0; k < m.n_rec; k++)
        h5out_record_free(&m.rec[k]);
    free(m.rec);
    return rc;
}

int h5out_check(const char *path, FILE *say, const char *lead, struct h5out_health *hl,
                struct ah_error *err) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0)
        return ah_fail(err, AH_EINVAL,
                       "%s: cannot open as HDF5 (missing, not HDF5, or left open by a killed job)",
                       path);
    int rc = check_master(path, f, say, lead, hl, err);
    H5Fclose(f);
    return rc;
}

int h5out_inspect(const char *path, FILE *out, struct ah_error *err) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0)
        return ah_fail(err, AH_EINVAL,
                       "%s: cannot open as HDF5 (missing, not HDF5, or left open "
                       "by a killed job)",
                       path);
    int64_t fmt = -1, complete = 0, done = -1, empty = 0, trunc = 0, S = 0;
    if (h5attr_get_num(f, "harvest_format", H5T_NATIVE_INT64, &fmt) < 0) {
        H5Fclose(f);
        return ah_fail(err, AH_EINVAL, "%s: not a harvest output (no harvest_format attribute)",
                       path);
    }
    h5attr_get_num(f, "complete", H5T_NATIVE_INT64, &complete);
    h5attr_get_num(f, "prompts_done", H5T_NATIVE_INT64, &done);
    h5attr_get_num(f, "n_prompts_skipped_empty", H5T_NATIVE_INT64, &empty);
    h5attr_get_num(f, "n_prompts_truncated", H5T_NATIVE_INT64, &trunc);
    h5attr_get_num(f, "max_seq_len", H5T_NATIVE_INT64, &S);
    char *family = h5attr_get_str(f, "model_family"), *store = h5attr_get_str(f, "storage_dtype");
    char *segs = h5attr_get_str(f, "segments");
    cJSON *sa = segs ? cJSON_Parse(segs) : NULL;
    int n_seg = cJSON_GetArraySize(sa);
    cJSON_Delete(sa);
    int64_t n = dset_len(f, "prompts/length"), nt = dset_len(f, "tokens/input_ids");
    fprintf(out, "%s: harvest_format %lld, model_family %s, storage %s\n", path, (long long)fmt,
            family ? family : "?", store ? store : "?");
    free(family);
    free(store);
    struct h5out_health hl = {0};
    int rc = check_master(path, f, out, "damaged: ", &hl, err), bad = hl.n_bad;
    if (rc == -AH_EFORMAT) bad = -1; // an unreadable segment list: said below
    if (rc < 0 && bad >= 0) {
        free(segs);
        H5Fclose(f);
        return rc;
    }
    free(segs);
    if (bad != 0)
        fprintf(out,
                "complete: no (%s; `harvest run JOB --resume` computes the missing rows again)\n",
                bad < 0 ? "the segment list is unreadable" : "files listed above are damaged");
    else if (complete == 1)
        fprintf(out, "complete: yes\n");
    else
        fprintf(out,
                "complete: no (%lld of %lld prompts written; continue with `harvest run JOB "
                "--resume`)\n",
                (long long)done, (long long)n);
    fprintf(out,
            "prompts: %lld (%lld empty skipped, %lld truncated), tokens: %lld, "
            "max_seq_len %lld\n",
            (long long)n, (long long)empty, (long long)trunc, (long long)nt, (long long)S);
    fprintf(out, "segments: %d in %s.parts/\n", n_seg, path);
    hid_t g = H5Gopen2(f, "activations", H5P_DEFAULT);
    if (g >= 0) {
        H5G_info_t gi;
        H5Gget_info(g, &gi);
        fprintf(out, "activations (%llu):\n", (unsigned long long)gi.nlinks);
        H5Literate(g, H5_INDEX_NAME, H5_ITER_INC, NULL, show_dset, out);
        H5Gclose(g);
    }
    H5Fclose(f);
    return 0;
}

int h5out_prompt_ids(const char *path, int64_t prompt, int64_t **ids, int64_t *len, char **job,
                     struct ah_error *err) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    *ids = NULL;
    *len = 0;
    *job = NULL;
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) return ah_fail(err, AH_EINVAL, "%s: cannot open as HDF5", path);
    int64_t n = dset_len(f, "prompts/length"), off = 0, ln = 0;
    int rc = 0;
    if (prompt < 0 || prompt >= n) {
        rc = ah_fail(err, AH_EINVAL, "%s: prompt %lld does not exist (the output has %lld)", path,
                     (long long)prompt, (long long)n);
    } else {
        hid_t dl = H5Dopen2(f, "prompts/length", H5P_DEFAULT);
        hid_t doff = H5Dopen2(f, "prompts/token_offset", H5P_DEFAULT);
        hid_t dt = H5Dopen2(f, "tokens/input_ids", H5P_DEFAULT);
        hsize_t one = 1, at = (hsize_t)prompt;
        hid_t mem = H5Screate_simple(1, &one, NULL);
        hid_t sl = H5Dget_space(dl), so = H5Dget_space(doff);
        H5Sselect_hyperslab(sl, H5S_SELECT_SET, &at, NULL, &one, NULL);
        H5Sselect_hyperslab(so, H5S_SELECT_SET, &at, NULL, &one, NULL);
        bool ok = dl >= 0 && doff >= 0 && dt >= 0 &&
                  H5Dread(dl, H5T_NATIVE_INT64, mem, sl, H5P_DEFAULT, &ln) >= 0 &&
                  H5Dread(doff, H5T_NATIVE_INT64, mem, so, H5P_DEFAULT, &off) >= 0 && ln >= 0;
        int64_t end = dset_len(f, "tokens/input_ids"); // under "select" (token layout) /tokens
        at = (hsize_t)prompt + 1;                      // lists the stored tokens: up to the next
        if (ok && prompt + 1 < n) {                    // prompt's
            H5Sselect_hyperslab(so, H5S_SELECT_SET, &at, NULL, &one, NULL);
            ok = H5Dread(doff, H5T_NATIVE_INT64, mem, so, H5P_DEFAULT, &end) >= 0;
        }
        ln = ok && end - off < ln ? end - off : ln;
        *ids = ok ? malloc((size_t)ln * sizeof **ids + 1) : NULL;
        if (ok && *ids && ln > 0) {
            hsize_t cnt = (hsize_t)ln, start = (hsize_t)off;
            hid_t mt = H5Screate_simple(1, &cnt, NULL), st = H5Dget_space(dt);
            H5Sselect_hyperslab(st, H5S_SELECT_SET, &start, NULL, &cnt, NULL);
            ok = H5Dread(dt, H5T_NATIVE_INT64, mt, st, H5P_DEFAULT, *ids) >= 0;
            H5Sclose(mt);
            H5Sclose(st);
        }
        if (!ok || !*ids)
            rc = ah_fail(err, AH_EIO, "%s: cannot read prompt %lld's tokens", path,
                         (long long)prompt);
        *len = ln;
        H5Sclose(mem);
        H5Sclose(sl);
        H5Sclose(so);
        if (dl >= 0) H5Dclose(dl);
        if (doff >= 0) H5Dclose(doff);
        if (dt >= 0) H5Dclose(dt);
    }
    if (rc == 0) *job = h5attr_get_str(f, "job");
    H5Fclose(f);
    if (rc < 0) {
        free(*ids);
        *ids = NULL;
    }
    return rc;
}
