// h5out.c - see h5out.h. Serial HDF5 on one process.
#include "io/h5out.h"

#include "io/halfconv.h"
#include "model/ah.h"

#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK_H5(call, what)                                                                    \
    do {                                                                                        \
        if ((call) < 0) {                                                                       \
            rc = ah_fail(err, AH_EIO, "%s: HDF5 failed to %s (%s:%d)", h->path, what, __FILE__, \
                         __LINE__);                                                             \
            goto fail;                                                                          \
        }                                                                                       \
    } while (0)

#define CHUNK_TARGET (1 << 20)  // bytes a chunk aims for when rows are small
#define CHUNK_MAX    (16 << 20) // a chunk larger than this is split inside the row

struct h5out {
    char *path;
    hid_t file;
    hid_t f16, bf16; // storage types
    enum h5out_store store;
    int n;
    hid_t *dset;           // (n)
    int64_t *row_elems;    // (n) elements per stored row
    enum tap_dtype *dtype; // (n)
    uint16_t *conv;        // conversion buffer
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

static hid_t file_type(const struct h5out *h, enum tap_dtype dt) {
    if (dt == TAP_I64) return H5T_STD_I64LE;
    return h->store == H5OUT_F16 ? h->f16 : h->store == H5OUT_BF16 ? h->bf16 : H5T_IEEE_F32LE;
}

static hid_t mem_type(const struct h5out *h, enum tap_dtype dt) {
    if (dt == TAP_I64) return H5T_NATIVE_INT64;
    return h->store == H5OUT_F16 ? h->f16 : h->store == H5OUT_BF16 ? h->bf16 : H5T_NATIVE_FLOAT;
}

static struct h5out *h5out_new(const char *path, enum h5out_store store, int n) {
    struct h5out *h = calloc(1, sizeof *h);
    if (!h) return NULL;
    h->file = H5I_INVALID_HID;
    h->store = store;
    h->path = malloc(strlen(path) + 1);
    h->dset = malloc(((size_t)n + 1) * sizeof *h->dset);
    h->row_elems = calloc((size_t)n + 1, sizeof *h->row_elems);
    h->dtype = calloc((size_t)n + 1, sizeof *h->dtype);
    h->f16 = make_half(0);
    h->bf16 = make_half(1);
    if (!h->path || !h->dset || !h->row_elems || !h->dtype || h->f16 < 0 || h->bf16 < 0) {
        h5out_close(h, false, NULL);
        return NULL;
    }
    strcpy(h->path, path);
    for (int i = 0; i < n; i++)
        h->dset[i] = H5I_INVALID_HID;
    h->n = n;
    return h;
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

// ----------------------------------------------------------------------------
// create

static herr_t write_1d(hid_t group, const char *name, const int64_t *v, int64_t n) {
    hsize_t d = (hsize_t)n, maxd = (hsize_t)n, chunk = (hsize_t)(n < 65536 ? (n ? n : 1) : 65536);
    hid_t s = H5Screate_simple(1, &d, &maxd), pl = H5Pcreate(H5P_DATASET_CREATE);
    herr_t r = H5Pset_chunk(pl, 1, &chunk);
    hid_t ds = r < 0 ? -1 : H5Dcreate2(group, name, H5T_STD_I64LE, s, H5P_DEFAULT, pl, H5P_DEFAULT);
    r = ds < 0 ? -1 : n ? H5Dwrite(ds, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) : 0;
    if (ds >= 0) H5Dclose(ds);
    H5Pclose(pl);
    H5Sclose(s);
    return r;
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

static int create_dset(struct h5out *h, hid_t group, int i, const struct h5out_dset *d,
                       int compression, struct ah_error *err) {
    int rc = 0;
    hsize_t dims[TAP_MAX_DIMS], chunk[TAP_MAX_DIMS];
    for (int k = 0; k < d->ndim; k++)
        dims[k] = (hsize_t)d->dims[k];
    hid_t ft = file_type(h, d->desc->dtype);
    choose_chunk(d, H5Tget_size(ft), chunk);
    size_t chunk_bytes = H5Tget_size(ft);
    for (int k = 0; k < d->ndim; k++)
        chunk_bytes *= chunk[k];
    hid_t s = H5Screate_simple(d->ndim, dims, NULL);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE), dapl = H5Pcreate(H5P_DATASET_ACCESS);
    CHECK_H5(s, "make a dataspace");
    CHECK_H5(H5Pset_chunk(dcpl, d->ndim, chunk), "set the chunk shape");
    // every row is written in full (padding included), so no fill pass is needed
    CHECK_H5(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER), "set the fill time");
    if (compression > 0) {
        CHECK_H5(H5Pset_shuffle(dcpl), "set the shuffle filter");
        CHECK_H5(H5Pset_deflate(dcpl, (unsigned)compression), "set gzip");
    }
    // OPTIONAL: a cache that holds a chunk while its rows arrive one write at a time
    size_t cache = chunk_bytes * 2 > (1u << 20) ? chunk_bytes * 2 : (1u << 20);
    CHECK_H5(H5Pset_chunk_cache(dapl, 521, cache, 1.0), "set the chunk cache");
    h->dset[i] = H5Dcreate2(group, d->desc->name, ft, s, H5P_DEFAULT, dcpl, dapl);
    CHECK_H5(h->dset[i], "create the dataset");
    char sem[TAP_MAX_DIMS][TAP_AXIS_MAX];
    memcpy(sem, d->desc->axes, sizeof sem);
    CHECK_H5(
        attr_strs(h->dset[i], "semantic_shape", d->desc->ndim, (const char(*)[TAP_AXIS_MAX])sem),
        "write semantic_shape");
    CHECK_H5(attr_strs(h->dset[i], "stored_axes", d->ndim, d->axes), "write stored_axes");
    CHECK_H5(attr_str(h->dset[i], "dtype", tap_dtype_name(d->desc->dtype)), "write dtype");
    CHECK_H5(attr_str(h->dset[i], "meaning", d->desc->meaning), "write meaning");
fail:
    H5Pclose(dapl);
    H5Pclose(dcpl);
    if (s >= 0) H5Sclose(s);
    return rc;
}

static void set_rows(struct h5out *h, const struct h5out_dset *d, int n) {
    for (int i = 0; i < n; i++) {
        h->row_elems[i] = 1;
        for (int k = 1; k < d[i].ndim; k++)
            h->row_elems[i] *= d[i].dims[k];
        h->dtype[i] = d[i].desc->dtype;
    }
}

int h5out_create(struct h5out **out, const struct h5out_params *p, const struct h5out_dset *d,
                 int n, struct ah_error *err) {
    int rc = 0;
    hid_t g = H5I_INVALID_HID;
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL); // errors are reported through err
    struct h5out *h = h5out_new(p->path, p->store, n);
    if (!h) return -AH_ENOMEM;
    set_rows(h, d, n);
    h->file = H5Fcreate(p->path, H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT);
    if (h->file < 0) {
        rc = ah_fail(err, AH_EIO,
                     "%s: cannot create the output file (check that its folder "
                     "exists and is writable)",
                     p->path);
        goto fail;
    }
    CHECK_H5(attr_i64(h->file, "harvest_format", 1), "write harvest_format");
    CHECK_H5(attr_str(h->file, "model_family", p->model_family), "write model_family");
    CHECK_H5(attr_str(h->file, "model_config", p->model_config), "write model_config");
    CHECK_H5(attr_str(h->file, "job", p->job), "write job");
    CHECK_H5(attr_i64(h->file, "complete", 0), "write complete");
    CHECK_H5(attr_i64(h->file, "prompts_done", 0), "write prompts_done");
    CHECK_H5(attr_i64(h->file, "max_seq_len", p->max_seq_len), "write max_seq_len");
    CHECK_H5(attr_i64(h->file, "n_prompts_skipped_empty", p->n_skipped_empty), "write counts");
    CHECK_H5(attr_i64(h->file, "n_prompts_truncated", p->n_truncated), "write counts");
    CHECK_H5(attr_str(h->file, "storage_dtype",
                      p->store == H5OUT_F16    ? "float16"
                      : p->store == H5OUT_BF16 ? "bfloat16"
                                               : "float32"),
             "write storage_dtype");

    CHECK_H5(g = H5Gcreate2(h->file, "prompts", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
             "create /prompts");
    CHECK_H5(write_1d(g, "source_index", p->source_index, p->n_prompts), "write /prompts");
    CHECK_H5(write_1d(g, "length", p->length, p->n_prompts), "write /prompts");
    CHECK_H5(write_1d(g, "token_offset", p->token_offset, p->n_prompts), "write /prompts");
    H5Gclose(g);
    CHECK_H5(g = H5Gcreate2(h->file, "tokens", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
             "create /tokens");
    CHECK_H5(write_1d(g, "input_ids", p->input_ids, p->n_tokens), "write /tokens");
    CHECK_H5(write_1d(g, "prompt_index", p->prompt_index, p->n_tokens), "write /tokens");
    CHECK_H5(write_1d(g, "position", p->position, p->n_tokens), "write /tokens");
    H5Gclose(g);
    CHECK_H5(g = H5Gcreate2(h->file, "activations", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
             "create /activations");
    for (int i = 0; i < n; i++)
        if ((rc = create_dset(h, g, i, &d[i], p->compression, err)) < 0) goto fail;
    H5Gclose(g);
    g = H5I_INVALID_HID;
    CHECK_H5(H5Fflush(h->file, H5F_SCOPE_GLOBAL), "flush");
    *out = h;
    return 0;
fail:
    if (g >= 0) H5Gclose(g);
    h5out_close(h, false, NULL);
    return rc;
}

int h5out_reopen(struct h5out **out, const char *path, const char *job, enum h5out_store store,
                 const struct h5out_dset *d, int n, int64_t *done, bool *complete,
                 struct ah_error *err) {
    int rc = 0;
    char *ojob = NULL;
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    struct h5out *h = h5out_new(path, store, n);
    if (!h) return -AH_ENOMEM;
    set_rows(h, d, n);
    h->file = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    if (h->file < 0) {
        rc = ah_fail(err, AH_EIO,
                     "%s: cannot reopen the output for --resume (not an HDF5 file, "
                     "or damaged: run with --overwrite to start again)",
                     path);
        goto fail;
    }
    ojob = attr_read_str(h->file, "job");
    int64_t c = 0;
    if (!ojob || attr_read_i64(h->file, "prompts_done", done) < 0 ||
        attr_read_i64(h->file, "complete", &c) < 0) {
        rc = ah_fail(err, AH_EINVAL,
                     "%s: not a harvest output (no job/prompts_done attributes); "
                     "use --overwrite to replace it",
                     path);
        goto fail;
    }
    if (strcmp(ojob, job)) {
        rc = ah_fail(err, AH_EINVAL,
                     "%s: was made by a different job; --resume needs the same "
                     "job file (use --overwrite to start again)",
                     path);
        goto fail;
    }
    *complete = c == 1;
    for (int i = 0; i < n; i++) {
        char name[TAP_NAME_MAX + 16];
        snprintf(name, sizeof name, "activations/%s", d[i].desc->name);
        h->dset[i] = H5Dopen2(h->file, name, H5P_DEFAULT);
        hsize_t dims[TAP_MAX_DIMS];
        hid_t s = h->dset[i] >= 0 ? H5Dget_space(h->dset[i]) : -1;
        int nd = s >= 0 ? H5Sget_simple_extent_dims(s, dims, NULL) : -1;
        if (s >= 0) H5Sclose(s);
        int same = nd == d[i].ndim;
        for (int k = 0; same && k < nd; k++)
            same = dims[k] == (hsize_t)d[i].dims[k];
        if (!same) {
            rc = ah_fail(err, AH_EINVAL,
                         "%s: dataset /%s is missing or has another shape than "
                         "this job makes; use --overwrite",
                         path, name);
            goto fail;
        }
    }
    free(ojob);
    *out = h;
    return 0;
fail:
    free(ojob);
    h5out_close(h, false, NULL);
    return rc;
}

// ----------------------------------------------------------------------------
// write, progress, close

int h5out_write(struct h5out *h, int i, int64_t row, int64_t nrows, const void *data,
                struct ah_error *err) {
    int rc = 0;
    hid_t fs = H5I_INVALID_HID, ms = H5I_INVALID_HID;
    int64_t ne = h->row_elems[i] * nrows;
    const void *buf = data;
    if (h->dtype[i] == TAP_F32 && h->store != H5OUT_F32) {
        if (ne > h->conv_n) {
            free(h->conv);
            h->conv = malloc((size_t)ne * 2);
            h->conv_n = h->conv ? ne : 0;
            if (!h->conv) return -AH_ENOMEM;
        }
        if (h->store == H5OUT_F16)
            hc_f32_to_f16_n(h->conv, data, ne);
        else
            hc_f32_to_bf16_n(h->conv, data, ne);
        buf = h->conv;
    }
    hsize_t start[TAP_MAX_DIMS] = {0}, count[TAP_MAX_DIMS];
    CHECK_H5(fs = H5Dget_space(h->dset[i]), "get a dataspace");
    int nd = H5Sget_simple_extent_dims(fs, count, NULL);
    start[0] = (hsize_t)row;
    count[0] = (hsize_t)nrows;
    CHECK_H5(H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL), "select rows");
    CHECK_H5(ms = H5Screate_simple(nd, count, NULL), "make a dataspace");
    CHECK_H5(H5Dwrite(h->dset[i], mem_type(h, h->dtype[i]), ms, fs, H5P_DEFAULT, buf),
             "write rows (disk full?)");
    h->bytes += ne * (int64_t)H5Tget_size(file_type(h, h->dtype[i]));
fail:
    if (ms >= 0) H5Sclose(ms);
    if (fs >= 0) H5Sclose(fs);
    return rc;
}

int h5out_progress(struct h5out *h, int64_t done, struct ah_error *err) {
    int rc = 0;
    CHECK_H5(H5Fflush(h->file, H5F_SCOPE_GLOBAL), "flush rows (disk full?)");
    CHECK_H5(attr_i64(h->file, "prompts_done", done), "record progress");
    CHECK_H5(H5Fflush(h->file, H5F_SCOPE_GLOBAL), "flush progress (disk full?)");
fail:
    return rc;
}

int h5out_close(struct h5out *h, bool complete, struct ah_error *err) {
    int rc = 0;
    if (!h) return 0;
    if (complete) CHECK_H5(attr_i64(h->file, "complete", 1), "set complete");
fail:
    for (int i = 0; i < h->n; i++)
        if (h->dset[i] >= 0 && H5Dclose(h->dset[i]) < 0 && rc == 0)
            rc = ah_fail(err, AH_EIO, "%s: HDF5 failed to close a dataset (disk full?)", h->path);
    if (h->file >= 0 && H5Fclose(h->file) < 0 && rc == 0)
        rc = ah_fail(err, AH_EIO, "%s: HDF5 failed to close the file (disk full?)", h->path);
    if (h->f16 >= 0) H5Tclose(h->f16);
    if (h->bf16 >= 0) H5Tclose(h->bf16);
    free(h->conv);
    free(h->dset);
    free(h->row_elems);
    free(h->dtype);
    free(h->path);
    free(h);
    return rc;
}

int64_t h5out_bytes(const struct h5out *h) {
    return h->bytes;
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
