// h5out_seg.c - see h5out.h: a segment is written through MPI-IO by the ranks of one pipeline
// stage (collective create, extend and close; independent or, with compression, collective row
// writes), closed and fsynced by every writer before the master lists it.
#define _GNU_SOURCE // defines: fsync, sync_file_range
#include "io/h5out_int.h"

#include "io/halfconv.h"
#include "io/output.h" // defines: out_parts_path

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CHUNK_TARGET (1 << 20)  // bytes a chunk aims for when rows are small
#define CHUNK_MAX    (16 << 20) // a chunk larger than this is split inside the row

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
    return s->store == OUT_F32 ? H5T_NATIVE_FLOAT
                               : h5o_file_type(s->f16, s->bf16, s->store, TAP_F32);
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

// creates dataset i of the segment (d[i0 + i], no rows yet) in group g; < 0 on failure
static herr_t seg_dset(struct h5seg *s, hid_t g, int i, int compression, int64_t batch_rows) {
    const struct h5out_dset *e = &s->d[s->i0 + i];
    hsize_t dims[TAP_MAX_DIMS], maxd[TAP_MAX_DIMS], chunk[TAP_MAX_DIMS];
    for (int k = 0; k < e->ndim; k++)
        dims[k] = maxd[k] = (hsize_t)e->dims[k];
    dims[0] = 0;
    maxd[0] = H5S_UNLIMITED;
    hid_t ft = h5o_file_type(s->f16, s->bf16, s->store, e->desc->dtype);
    choose_chunk(e, H5Tget_size(ft), h5o_by_token(e) ? 0 : batch_rows, chunk);
    hid_t sp = H5Screate_simple(e->ndim, dims, maxd);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    herr_t r = H5Pset_chunk(dcpl, e->ndim, chunk);
    // every row is written in full (padding included): no fill pass
    if (r >= 0) r = H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
    if (r >= 0 && compression > 0) r = H5Pset_shuffle(dcpl);
    if (r >= 0 && compression > 0) r = H5Pset_deflate(dcpl, (unsigned)compression);
    if (r >= 0)
        r = s->dset[i] = H5Dcreate2(g, h5out_dset_name(e), ft, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    H5Pclose(dcpl);
    H5Sclose(sp);
    return r;
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
    s->f16 = h5o_make_half(0);
    s->bf16 = h5o_make_half(1);
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
    for (int i = 0; i < n; i++)
        CHECK_H5(seg_dset(s, g, i, compression, batch_rows), s->path, "create a segment dataset");
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
        if ((rc = h5o_push_run(&s->runs, &s->n_runs, &s->cap_runs, r)) < 0) return rc;
        s->rows += r.p1 - r.p0;
        s->rows_t += r.t1 - r.t0;
    }
    for (int i = s->i0; i < s->i1; i++) {
        const struct h5out_dset *d = &s->d[i];
        hsize_t dims[TAP_MAX_DIMS];
        for (int k = 0; k < d->ndim; k++)
            dims[k] = (hsize_t)d->dims[k];
        dims[0] = (hsize_t)(h5o_by_token(d) ? s->rows_t : s->rows);
        CHECK_H5(H5Dset_extent(s->dset[i - s->i0], dims), s->path, "extend a segment dataset");
        if (!s->staged) continue;
        int64_t n = h5o_by_token(d) ? s->mine.t1 - s->mine.t0 : s->mine.p1 - s->mine.p0;
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
                (int64_t)H5Tget_size(h5o_file_type(s->f16, s->bf16, s->store, d->desc->dtype));
fail:
    if (ms >= 0) H5Sclose(ms);
    if (fs >= 0) H5Sclose(fs);
    return rc;
}

int h5seg_write(struct h5seg *s, int i, int64_t row, int64_t nrows, const void *data,
                struct ah_error *err) {
    const struct h5out_dset *d = &s->d[i];
    AH_ASSERT(i >= s->i0 && i < s->i1);
    bool tok = h5o_by_token(d);
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
        bool tok = h5o_by_token(&s->d[i]);
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
