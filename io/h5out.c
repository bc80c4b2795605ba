// h5out.c - see h5out.h. One process writes; the layout (closed segments + a master replaced
// whole) is what makes a kill at any moment resumable.
#define _GNU_SOURCE // defines: fsync, opendir, sync_file_range
#include "io/h5out.h"

#include "io/halfconv.h"
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

struct segment {
    int64_t p0, p1, t0, t1; // prompt rows [p0, p1), token rows [t0, t1)
};

struct h5out {
    struct h5out_params p;      // strings and arrays borrowed from the caller (valid until close)
    const struct h5out_dset *d; // (n) borrowed
    int n;
    char master_tmp[PATH_MAX_ / 2], parts[PATH_MAX_ / 2], parts_rel[PATH_MAX_ / 2];
    hid_t f16, bf16;     // storage types
    struct segment *seg; // (n_seg) listed segments
    int n_seg, cap_seg;
    // the open segment
    hid_t sfile;
    hid_t *sdset;       // (n)
    struct segment cur; // p1/t1: rows made writable so far
    bool open;
    uint16_t *conv; // conversion buffer
    int64_t conv_n;
    int64_t bytes;
};

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

static herr_t attr_str(hid_t obj, const char *name, const char *value) {
    hid_t t = H5Tcopy(H5T_C_S1), s = H5Screate(H5S_SCALAR), a = H5I_INVALID_HID;
    herr_t r = H5Tset_size(t, H5T_VARIABLE);
    if (r >= 0) r = H5Tset_cset(t, H5T_CSET_UTF8);
    if (r >= 0) r = (a = H5Acreate2(obj, name, t, s, H5P_DEFAULT, H5P_DEFAULT)) < 0 ? -1 : 0;
    if (r >= 0) r = H5Awrite(a, t, &value);
    if (a >= 0) H5Aclose(a);
    H5Sclose(s);
    H5Tclose(t);
    return r;
}

static herr_t attr_strs(hid_t obj, const char *name, int n, const char (*values)[TAP_AXIS_MAX]) {
    const char *v[TAP_MAX_DIMS];
    for (int i = 0; i < n; i++)
        v[i] = values[i];
    hsize_t d = (hsize_t)n;
    hid_t t = H5Tcopy(H5T_C_S1), s = H5Screate_simple(1, &d, NULL), a = H5I_INVALID_HID;
    herr_t r = H5Tset_size(t, H5T_VARIABLE);
    if (r >= 0) r = H5Tset_cset(t, H5T_CSET_UTF8);
    if (r >= 0) r = (a = H5Acreate2(obj, name, t, s, H5P_DEFAULT, H5P_DEFAULT)) < 0 ? -1 : 0;
    if (r >= 0) r = H5Awrite(a, t, v);
    if (a >= 0) H5Aclose(a);
    H5Sclose(s);
    H5Tclose(t);
    return r;
}

static herr_t attr_i64(hid_t obj, const char *name, int64_t value) {
    herr_t r;
    hid_t a;
    if (H5Aexists(obj, name) > 0) {
        a = H5Aopen(obj, name, H5P_DEFAULT);
    } else {
        hid_t s = H5Screate(H5S_SCALAR);
        a = H5Acreate2(obj, name, H5T_STD_I64LE, s, H5P_DEFAULT, H5P_DEFAULT);
        H5Sclose(s);
    }
    if (a < 0) return -1;
    r = H5Awrite(a, H5T_NATIVE_INT64, &value);
    H5Aclose(a);
    return r;
}

static int attr_read_i64(hid_t obj, const char *name, int64_t *out) {
    if (H5Aexists(obj, name) <= 0) return -1;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    if (a < 0) return -1;
    herr_t r = H5Aread(a, H5T_NATIVE_INT64, out);
    H5Aclose(a);
    return r < 0 ? -1 : 0;
}

// Reads a scalar string attribute (caller frees), or NULL.
static char *attr_read_str(hid_t obj, const char *name) {
    if (H5Aexists(obj, name) <= 0) return NULL;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    H5Tset_cset(t, H5T_CSET_UTF8); // as written by attr_str
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

// Chunk: whole rows while small, several rows up to CHUNK_TARGET; a row above CHUNK_MAX is split
// along its largest axes. Reading one prompt (or a run of tokens) touches few chunks.
static void choose_chunk(const struct h5out_dset *d, size_t esize, hsize_t *chunk) {
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
            chunk[0] = (hsize_t)rows;
            return;
        }
        chunk[big] = (chunk[big] + 1) / 2;
    }
}

static hid_t file_type(const struct h5out *h, enum tap_dtype dt) {
    if (dt == TAP_I64) return H5T_STD_I64LE;
    return h->p.store == H5OUT_F16 ? h->f16 : h->p.store == H5OUT_BF16 ? h->bf16 : H5T_IEEE_F32LE;
}

static hid_t mem_type(const struct h5out *h, enum tap_dtype dt) {
    if (dt == TAP_I64) return H5T_NATIVE_INT64;
    return h->p.store == H5OUT_F32 ? H5T_NATIVE_FLOAT : file_type(h, dt);
}

static bool by_token(const struct h5out_dset *d) {
    return !strcmp(d->axes[0], "token");
}

static void seg_name(const struct h5out *h, int k, bool relative, char *out, size_t n) {
    snprintf(out, n, "%s/seg-%06d.h5", relative ? h->parts_rel : h->parts, k);
}

static void index_name(const struct h5out *h, bool relative, char *out, size_t n) {
    snprintf(out, n, "%s/index.h5", relative ? h->parts_rel : h->parts);
}

// durability: a closed file's bytes reach the disk before anything lists it
static int fsync_path(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return -1;
    int r = fsync(fd);
    close(fd);
    return r;
}

// ----------------------------------------------------------------------------
// the index file: /prompts and /tokens, written once

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

static const char *const table_names[6] = {"prompts/source_index", "prompts/length",
                                           "prompts/token_offset", "tokens/input_ids",
                                           "tokens/prompt_index",  "tokens/position"};

static int write_index(const struct h5out *h, struct ah_error *err) {
    int rc = 0;
    char path[PATH_MAX_];
    index_name(h, false, path, sizeof path);
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), g = H5I_INVALID_HID;
    const int64_t *v[6] = {h->p.source_index, h->p.length,       h->p.token_offset,
                           h->p.input_ids,    h->p.prompt_index, h->p.position};
    CHECK_H5(f, path, "create the index file");
    CHECK_H5(g = H5Gcreate2(f, "prompts", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), path,
             "make a group");
    H5Gclose(g);
    CHECK_H5(g = H5Gcreate2(f, "tokens", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), path,
             "make a group");
    H5Gclose(g);
    for (int i = 0; i < 6; i++)
        CHECK_H5(write_1d(f, table_names[i], v[i], i < 3 ? h->p.n_prompts : h->p.n_tokens), path,
                 "write /prompts and /tokens");
    herr_t r = H5Fclose(f);
    f = H5I_INVALID_HID;
    CHECK_H5(r, path, "close the index file");
    if (fsync_path(path) != 0) rc = ah_fail(err, AH_EIO, "%s: fsync: %s", path, strerror(errno));
fail:
    if (f >= 0) H5Fclose(f);
    return rc;
}

// ----------------------------------------------------------------------------
// the master: attributes + virtual datasets over index.h5 and the listed segments

static char *segments_json(const struct h5out *h) {
    cJSON *a = cJSON_CreateArray();
    for (int k = 0; k < h->n_seg; k++) {
        const struct segment *s = &h->seg[k];
        double v[4] = {(double)s->p0, (double)s->p1, (double)s->t0, (double)s->t1};
        cJSON_AddItemToArray(a, cJSON_CreateDoubleArray(v, 4));
    }
    char *t = cJSON_PrintUnformatted(a);
    cJSON_Delete(a);
    return t;
}

// one virtual dataset: rows [r0, r1) of each segment (or all of index.h5 for a table)
static int master_dset(const struct h5out *h, hid_t f, const char *name, hid_t type, int ndim,
                       const int64_t *dims, bool token_rows, bool table, const void *fill,
                       hid_t *out, struct ah_error *err) {
    int rc = 0;
    hsize_t vd[TAP_MAX_DIMS], sd[TAP_MAX_DIMS], start[TAP_MAX_DIMS] = {0}, count[TAP_MAX_DIMS];
    for (int k = 0; k < ndim; k++)
        vd[k] = count[k] = sd[k] = (hsize_t)dims[k];
    hid_t vs = H5Screate_simple(ndim, vd, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    hid_t ss = H5I_INVALID_HID;
    char src[PATH_MAX_ + 32], dname[TAP_NAME_MAX + 16];
    CHECK_H5(H5Pset_fill_value(dcpl, type, fill), h->p.path, "set a fill value");
    if (table) {
        index_name(h, true, src, sizeof src);
        if (vd[0] > 0) {
            CHECK_H5(ss = H5Screate_simple(1, sd, NULL), h->p.path, "make a dataspace");
            CHECK_H5(H5Pset_virtual(dcpl, vs, src, name, ss), h->p.path, "map /prompts, /tokens");
            H5Sclose(ss);
            ss = H5I_INVALID_HID;
        }
    }
    snprintf(dname, sizeof dname, "activations/%s", name);
    for (int k = 0; !table && k < h->n_seg; k++) {
        const struct segment *s = &h->seg[k];
        int64_t r0 = token_rows ? s->t0 : s->p0, r1 = token_rows ? s->t1 : s->p1;
        if (r1 == r0) continue;
        start[0] = (hsize_t)r0;
        count[0] = sd[0] = (hsize_t)(r1 - r0);
        seg_name(h, k, true, src, sizeof src);
        CHECK_H5(H5Sselect_hyperslab(vs, H5S_SELECT_SET, start, NULL, count, NULL), h->p.path,
                 "select rows");
        CHECK_H5(ss = H5Screate_simple(ndim, sd, NULL), h->p.path, "make a dataspace");
        CHECK_H5(H5Pset_virtual(dcpl, vs, src, dname, ss), h->p.path, "map a segment");
        H5Sclose(ss);
        ss = H5I_INVALID_HID;
    }
    H5Sselect_all(vs);
    CHECK_H5(*out = H5Dcreate2(f, name, type, vs, H5P_DEFAULT, dcpl, H5P_DEFAULT), h->p.path,
             "create a virtual dataset");
fail:
    if (ss >= 0) H5Sclose(ss);
    H5Pclose(dcpl);
    H5Sclose(vs);
    return rc;
}

static int master_write(const struct h5out *h, bool complete, struct ah_error *err) {
    int rc = 0;
    const char *mp = h->p.path, *tmp = h->master_tmp;
    char *segs = segments_json(h);
    hid_t f = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), g = H5I_INVALID_HID;
    hid_t ds = H5I_INVALID_HID;
    int64_t done = h->n_seg ? h->seg[h->n_seg - 1].p1 : 0;
    CHECK_H5(f, tmp, "create the master file");
    CHECK_H5(attr_i64(f, "harvest_format", 1), tmp, "write harvest_format");
    CHECK_H5(attr_str(f, "model_family", h->p.model_family), tmp, "write model_family");
    CHECK_H5(attr_str(f, "model_config", h->p.model_config), tmp, "write model_config");
    CHECK_H5(attr_str(f, "job", h->p.job), tmp, "write job");
    CHECK_H5(attr_i64(f, "complete", complete), tmp, "write complete");
    CHECK_H5(attr_i64(f, "prompts_done", done), tmp, "write prompts_done");
    CHECK_H5(attr_i64(f, "max_seq_len", h->p.max_seq_len), tmp, "write max_seq_len");
    CHECK_H5(attr_i64(f, "n_prompts_skipped_empty", h->p.n_skipped_empty), tmp, "write counts");
    CHECK_H5(attr_i64(f, "n_prompts_truncated", h->p.n_truncated), tmp, "write counts");
    CHECK_H5(attr_i64(f, "data_checksum", (int64_t)h->p.data_checksum), tmp, "write checksum");
    CHECK_H5(attr_str(f, "storage_dtype",
                      h->p.store == H5OUT_F16    ? "float16"
                      : h->p.store == H5OUT_BF16 ? "bfloat16"
                                                 : "float32"),
             tmp, "write storage_dtype");
    CHECK_H5(attr_str(f, "segments", segs ? segs : "[]"), tmp, "write segments");

    static const int64_t zero = 0;
    for (int i = 0; i < 6; i++) {
        const char *grp = i < 3 ? "prompts" : "tokens";
        if (i == 0 || i == 3)
            CHECK_H5(g = H5Gcreate2(f, grp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), tmp,
                     "make a group");
        int64_t n = i < 3 ? h->p.n_prompts : h->p.n_tokens;
        if ((rc = master_dset(h, f, table_names[i], H5T_STD_I64LE, 1, &n, false, true, &zero, &ds,
                              err)) < 0)
            goto fail;
        H5Dclose(ds);
        ds = H5I_INVALID_HID;
        if (i == 2 || i == 5) {
            H5Gclose(g);
            g = H5I_INVALID_HID;
        }
    }
    CHECK_H5(g = H5Gcreate2(f, "activations", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), tmp,
             "make a group");
    const float nan32 = NAN;
    const uint16_t nan16 = 0x7e00, nanbf = 0x7fc0;
    for (int i = 0; i < h->n; i++) {
        const struct h5out_dset *d = &h->d[i];
        bool fl = d->desc->dtype == TAP_F32;
        const void *fill = !fl                        ? (const void *)&zero
                           : h->p.store == H5OUT_F16  ? (const void *)&nan16
                           : h->p.store == H5OUT_BF16 ? (const void *)&nanbf
                                                      : (const void *)&nan32;
        if ((rc = master_dset(h, g, d->desc->name, file_type(h, d->desc->dtype), d->ndim, d->dims,
                              by_token(d), false, fill, &ds, err)) < 0)
            goto fail;
        char sem[TAP_MAX_DIMS][TAP_AXIS_MAX];
        memcpy(sem, d->desc->axes, sizeof sem);
        CHECK_H5(attr_strs(ds, "semantic_shape", d->desc->ndim, (const char(*)[TAP_AXIS_MAX])sem),
                 tmp, "write semantic_shape");
        CHECK_H5(attr_strs(ds, "stored_axes", d->ndim, d->axes), tmp, "write stored_axes");
        CHECK_H5(attr_str(ds, "dtype", tap_dtype_name(d->desc->dtype)), tmp, "write dtype");
        CHECK_H5(attr_str(ds, "meaning", d->desc->meaning), tmp, "write meaning");
        H5Dclose(ds);
        ds = H5I_INVALID_HID;
    }
    H5Gclose(g);
    g = H5I_INVALID_HID;
    herr_t r = H5Fclose(f);
    f = H5I_INVALID_HID;
    CHECK_H5(r, tmp, "close the master file");
    if (fsync_path(tmp) != 0 || rename(tmp, mp) != 0) {
        rc = ah_fail(err, AH_EIO, "%s: cannot replace the master file: %s", mp, strerror(errno));
        goto fail;
    }
fail:
    if (ds >= 0) H5Dclose(ds);
    if (g >= 0) H5Gclose(g);
    if (f >= 0) H5Fclose(f);
    free(segs);
    return rc;
}

// ----------------------------------------------------------------------------
// segments

static int seg_open(struct h5out *h, struct ah_error *err) {
    int rc = 0;
    char path[PATH_MAX_];
    seg_name(h, h->n_seg, false, path, sizeof path);
    h->sfile = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hid_t g = H5I_INVALID_HID;
    CHECK_H5(h->sfile, path, "create a segment file");
    CHECK_H5(g = H5Gcreate2(h->sfile, "activations", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), path,
             "make a group");
    for (int i = 0; i < h->n; i++) {
        const struct h5out_dset *d = &h->d[i];
        hsize_t dims[TAP_MAX_DIMS], maxd[TAP_MAX_DIMS], chunk[TAP_MAX_DIMS];
        for (int k = 0; k < d->ndim; k++)
            dims[k] = maxd[k] = (hsize_t)d->dims[k];
        dims[0] = 0;
        maxd[0] = H5S_UNLIMITED;
        hid_t ft = file_type(h, d->desc->dtype);
        choose_chunk(d, H5Tget_size(ft), chunk);
        size_t chunk_bytes = H5Tget_size(ft);
        for (int k = 0; k < d->ndim; k++)
            chunk_bytes *= chunk[k];
        hid_t s = H5Screate_simple(d->ndim, dims, maxd);
        hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE), dapl = H5Pcreate(H5P_DATASET_ACCESS);
        herr_t r = H5Pset_chunk(dcpl, d->ndim, chunk);
        // every row is written in full (padding included): no fill pass
        if (r >= 0) r = H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
        if (r >= 0 && h->p.compression > 0) r = H5Pset_shuffle(dcpl);
        if (r >= 0 && h->p.compression > 0) r = H5Pset_deflate(dcpl, (unsigned)h->p.compression);
        // OPTIONAL: rows arrive one write at a time. Where a chunk holds one row, every write
        // covers whole chunks and goes straight to the file (no cache, no extra copy); where a
        // chunk holds several rows, a cache keeps it until its rows are in.
        size_t cache = chunk[0] == 1                  ? 0
                       : chunk_bytes * 2 > (1u << 20) ? chunk_bytes * 2
                                                      : (1u << 20);
        if (r >= 0) r = H5Pset_chunk_cache(dapl, 521, cache, 1.0);
        if (r >= 0) r = h->sdset[i] = H5Dcreate2(g, d->desc->name, ft, s, H5P_DEFAULT, dcpl, dapl);
        H5Pclose(dapl);
        H5Pclose(dcpl);
        H5Sclose(s);
        CHECK_H5(r, path, "create a segment dataset");
    }
    h->open = true;
    h->cur = (struct segment){
        h->n_seg ? h->seg[h->n_seg - 1].p1 : 0, h->n_seg ? h->seg[h->n_seg - 1].p1 : 0,
        h->n_seg ? h->seg[h->n_seg - 1].t1 : 0, h->n_seg ? h->seg[h->n_seg - 1].t1 : 0};
fail:
    if (g >= 0) H5Gclose(g);
    return rc;
}

// closes the open segment's handles; returns the first failure
static herr_t seg_close_handles(struct h5out *h) {
    herr_t r = 0;
    for (int i = 0; i < h->n; i++)
        if (h->sdset[i] >= 0) {
            if (H5Dclose(h->sdset[i]) < 0) r = -1;
            h->sdset[i] = H5I_INVALID_HID;
        }
    if (h->sfile >= 0 && H5Fclose(h->sfile) < 0) r = -1;
    h->sfile = H5I_INVALID_HID;
    h->open = false;
    return r;
}

// ----------------------------------------------------------------------------
// open / begin_batch / write / checkpoint / close

static struct h5out *h5out_new(const struct h5out_params *p, const struct h5out_dset *d, int n) {
    struct h5out *h = calloc(1, sizeof *h);
    if (!h) return NULL;
    h->p = *p;
    h->d = d;
    h->n = n;
    h->sfile = H5I_INVALID_HID;
    h->sdset = malloc(((size_t)n + 1) * sizeof *h->sdset);
    h->f16 = make_half(0);
    h->bf16 = make_half(1);
    const char *slash = strrchr(p->path, '/');
    snprintf(h->master_tmp, sizeof h->master_tmp, "%s.tmp", p->path);
    snprintf(h->parts, sizeof h->parts, "%s.parts", p->path);
    snprintf(h->parts_rel, sizeof h->parts_rel, "%s.parts", slash ? slash + 1 : p->path);
    if (!h->sdset || h->f16 < 0 || h->bf16 < 0) {
        h5out_close(h, false, NULL);
        return NULL;
    }
    for (int i = 0; i < n; i++)
        h->sdset[i] = H5I_INVALID_HID;
    return h;
}

static int push_segment(struct h5out *h, struct segment s) {
    if (h->n_seg == h->cap_seg) {
        int cap = h->cap_seg * 2 + 16;
        struct segment *ns = realloc(h->seg, (size_t)cap * sizeof *ns);
        if (!ns) return -AH_ENOMEM;
        h->seg = ns;
        h->cap_seg = cap;
    }
    h->seg[h->n_seg++] = s;
    return 0;
}

// reads the listed segments and progress of an existing master
static int resume_state(struct h5out *h, int64_t *done, bool *complete, struct ah_error *err) {
    int rc = 0;
    const char *mp = h->p.path;
    char *job = NULL, *segs = NULL;
    cJSON *a = NULL;
    hid_t f = H5Fopen(mp, H5F_ACC_RDONLY, H5P_DEFAULT);
    int64_t c = 0, sum = 0;
    if (f < 0) {
        rc = ah_fail(err, AH_EINVAL,
                     "%s: cannot open for --resume (not an HDF5 file?); use "
                     "--overwrite to start again",
                     mp);
        goto fail;
    }
    job = attr_read_str(f, "job");
    segs = attr_read_str(f, "segments");
    if (!job || !segs || attr_read_i64(f, "complete", &c) < 0 ||
        attr_read_i64(f, "data_checksum", &sum) < 0) {
        rc = ah_fail(err, AH_EINVAL,
                     "%s: not a harvest output (no job/segments attributes); use "
                     "--overwrite to replace it",
                     mp);
        goto fail;
    }
    if (strcmp(job, h->p.job)) {
        rc = ah_fail(err, AH_EINVAL,
                     "%s: was made by a different job; --resume needs the same job "
                     "file (use --overwrite to start again)",
                     mp);
        goto fail;
    }
    if ((uint64_t)sum != h->p.data_checksum) {
        rc = ah_fail(err, AH_EINVAL,
                     "%s: the prompts differ from the ones this output was started "
                     "with (the data file changed?); use --overwrite to start again",
                     mp);
        goto fail;
    }
    a = cJSON_Parse(segs);
    const cJSON *e;
    cJSON_ArrayForEach(e, a) {
        struct segment s;
        int64_t *v[4] = {&s.p0, &s.p1, &s.t0, &s.t1};
        for (int k = 0; k < 4; k++)
            *v[k] = (int64_t)cJSON_GetArrayItem(e, k)->valuedouble;
        if ((rc = push_segment(h, s)) < 0) goto fail;
    }
    *done = h->n_seg ? h->seg[h->n_seg - 1].p1 : 0;
    *complete = c == 1;
fail:
    cJSON_Delete(a);
    free(job);
    free(segs);
    if (f >= 0) H5Fclose(f);
    return rc;
}

int h5out_open(struct h5out **out, const struct h5out_params *p, const struct h5out_dset *d, int n,
               bool resume, int64_t *done, bool *complete, struct ah_error *err) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL); // errors are reported through err
    struct h5out *h = h5out_new(p, d, n);
    if (!h) return -AH_ENOMEM;
    int rc = 0;
    *done = 0;
    *complete = false;
    if (resume) {
        rc = resume_state(h, done, complete, err);
    } else if (mkdir(h->parts, 0777) != 0 && errno != EEXIST) {
        rc = ah_fail(err, AH_EIO,
                     "%s: cannot create the output file (check that its folder exists and is "
                     "writable): %s",
                     p->path, strerror(errno));
    } else if ((rc = write_index(h, err)) == 0) {
        rc = master_write(h, false, err);
    }
    if (rc < 0) {
        h5out_close(h, false, NULL);
        return rc;
    }
    *out = h;
    return 0;
}

// Starts writeback of what the open segment has in the page cache, without waiting: the
// checkpoint's fsync then finds little left, and dirty pages do not pile up.
static void seg_start_writeback(struct h5out *h) {
    void *handle = NULL;
    if (H5Fget_vfd_handle(h->sfile, H5P_DEFAULT, &handle) >= 0 && handle)
        sync_file_range(*(int *)handle, 0, 0, SYNC_FILE_RANGE_WRITE);
}

int h5out_begin_batch(struct h5out *h, int64_t p_end, int64_t t_end, struct ah_error *err) {
    int rc = 0;
    if (h->open) seg_start_writeback(h);
    if (!h->open && (rc = seg_open(h, err)) < 0) return rc;
    char path[PATH_MAX_];
    seg_name(h, h->n_seg, false, path, sizeof path);
    for (int i = 0; i < h->n; i++) {
        hsize_t dims[TAP_MAX_DIMS];
        for (int k = 0; k < h->d[i].ndim; k++)
            dims[k] = (hsize_t)h->d[i].dims[k];
        dims[0] = (hsize_t)(by_token(&h->d[i]) ? t_end - h->cur.t0 : p_end - h->cur.p0);
        CHECK_H5(H5Dset_extent(h->sdset[i], dims), path, "extend a segment dataset");
    }
    h->cur.p1 = p_end;
    h->cur.t1 = t_end;
fail:
    return rc;
}

int h5out_write(struct h5out *h, int i, int64_t row, int64_t nrows, const void *data,
                struct ah_error *err) {
    int rc = 0;
    hid_t fs = H5I_INVALID_HID, ms = H5I_INVALID_HID;
    const struct h5out_dset *d = &h->d[i];
    int64_t row_elems = 1;
    for (int k = 1; k < d->ndim; k++)
        row_elems *= d->dims[k];
    int64_t ne = row_elems * nrows;
    const void *buf = data;
    AH_ASSERT(h->open);
    if (d->desc->dtype == TAP_F32 && h->p.store != H5OUT_F32) {
        if (ne > h->conv_n) {
            free(h->conv);
            h->conv = malloc((size_t)ne * 2);
            h->conv_n = h->conv ? ne : 0;
            if (!h->conv) return -AH_ENOMEM;
        }
        if (h->p.store == H5OUT_F16)
            hc_f32_to_f16_n(h->conv, data, ne);
        else
            hc_f32_to_bf16_n(h->conv, data, ne);
        buf = h->conv;
    }
    char path[PATH_MAX_];
    seg_name(h, h->n_seg, false, path, sizeof path);
    hsize_t start[TAP_MAX_DIMS] = {0}, count[TAP_MAX_DIMS];
    for (int k = 0; k < d->ndim; k++)
        count[k] = (hsize_t)d->dims[k];
    start[0] = (hsize_t)(row - (by_token(d) ? h->cur.t0 : h->cur.p0));
    count[0] = (hsize_t)nrows;
    CHECK_H5(fs = H5Dget_space(h->sdset[i]), path, "get a dataspace");
    CHECK_H5(H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL), path,
             "select rows");
    CHECK_H5(ms = H5Screate_simple(d->ndim, count, NULL), path, "make a dataspace");
    CHECK_H5(H5Dwrite(h->sdset[i], mem_type(h, d->desc->dtype), ms, fs, H5P_DEFAULT, buf), path,
             "write rows");
    h->bytes += ne * (int64_t)H5Tget_size(file_type(h, d->desc->dtype));
fail:
    if (ms >= 0) H5Sclose(ms);
    if (fs >= 0) H5Sclose(fs);
    return rc;
}

int h5out_checkpoint(struct h5out *h, struct ah_error *err) {
    if (!h->open) return 0;
    char path[PATH_MAX_];
    seg_name(h, h->n_seg, false, path, sizeof path);
    struct segment s = h->cur;
    if (seg_close_handles(h) < 0)
        return ah_fail(err, AH_EIO, "%s: HDF5 failed to close a segment (disk full?)", path);
    if (fsync_path(path) != 0) return ah_fail(err, AH_EIO, "%s: fsync: %s", path, strerror(errno));
    int rc = push_segment(h, s);
    if (rc == 0) rc = master_write(h, false, err);
    if (rc < 0) h->n_seg--; // not listed: the next segment takes its place
    return rc;
}

int h5out_close(struct h5out *h, bool complete, struct ah_error *err) {
    if (!h) return 0;
    int rc = 0;
    if (complete) {
        rc = h5out_checkpoint(h, err);
        if (rc == 0) rc = master_write(h, true, err);
    }
    seg_close_handles(h); // dropped unless checkpointed above
    if (h->f16 >= 0) H5Tclose(h->f16);
    if (h->bf16 >= 0) H5Tclose(h->bf16);
    free(h->conv);
    free(h->sdset);
    free(h->seg);
    free(h);
    return rc;
}

int64_t h5out_bytes(const struct h5out *h) {
    return h->bytes;
}

int64_t h5out_done(const struct h5out *h) {
    return h->n_seg ? h->seg[h->n_seg - 1].p1 : 0;
}

int h5out_remove(const char *path, struct ah_error *err) {
    char p[PATH_MAX_ + 32];
    if (unlink(path) != 0 && errno != ENOENT)
        return ah_fail(err, AH_EIO, "%s: cannot remove: %s", path, strerror(errno));
    snprintf(p, sizeof p, "%s.tmp", path);
    unlink(p);
    snprintf(p, sizeof p, "%s.parts", path);
    DIR *dir = opendir(p);
    if (!dir) return 0;
    struct dirent *e;
    while ((e = readdir(dir))) {
        size_t l = strlen(e->d_name);
        bool ours = !strcmp(e->d_name, "index.h5") ||
                    (!strncmp(e->d_name, "seg-", 4) && l > 7 && !strcmp(e->d_name + l - 3, ".h5"));
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
    char *dtype = attr_read_str(d, "dtype");
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

int h5out_inspect(const char *path, FILE *out, struct ah_error *err) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0)
        return ah_fail(err, AH_EINVAL,
                       "%s: cannot open as HDF5 (missing, not HDF5, or left open "
                       "by a killed job)",
                       path);
    int64_t fmt = -1, complete = 0, done = -1, empty = 0, trunc = 0, S = 0;
    if (attr_read_i64(f, "harvest_format", &fmt) < 0) {
        H5Fclose(f);
        return ah_fail(err, AH_EINVAL, "%s: not a harvest output (no harvest_format attribute)",
                       path);
    }
    attr_read_i64(f, "complete", &complete);
    attr_read_i64(f, "prompts_done", &done);
    attr_read_i64(f, "n_prompts_skipped_empty", &empty);
    attr_read_i64(f, "n_prompts_truncated", &trunc);
    attr_read_i64(f, "max_seq_len", &S);
    char *family = attr_read_str(f, "model_family"), *store = attr_read_str(f, "storage_dtype");
    char *segs = attr_read_str(f, "segments");
    cJSON *sa = segs ? cJSON_Parse(segs) : NULL;
    int n_seg = cJSON_GetArraySize(sa);
    cJSON_Delete(sa);
    free(segs);
    int64_t n = dset_len(f, "prompts/length"), nt = dset_len(f, "tokens/input_ids");
    fprintf(out, "%s: harvest_format %lld, model_family %s, storage %s\n", path, (long long)fmt,
            family ? family : "?", store ? store : "?");
    free(family);
    free(store);
    if (complete == 1)
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
