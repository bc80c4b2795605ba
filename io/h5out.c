// h5out.c - see h5out.h. The helpers the io/h5out*.c files share (io/h5out_int.h), the index
// and the master, written by rank 0 alone: whole, to OUT.tmp, fsynced and renamed, so a kill
// leaves every listed file closed. Segments: h5out_seg.c; checks and inspect: h5out_check.c;
// --resume: h5out_resume.c.
#define _GNU_SOURCE // defines: fsync
#include "io/h5out_int.h"

#include "io/fsutil.h"
#include "io/h5attr.h"
#include "io/h5fields.h"
#include "io/output.h" // defines: out_parts_path

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h> // defines: NAN
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

hid_t h5o_make_half(int bf) {
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

hid_t h5o_file_type(hid_t f16, hid_t bf16, enum out_store store, enum tap_dtype dt) {
    if (dt == TAP_I64) return H5T_STD_I64LE;
    return store == OUT_F16 ? f16 : store == OUT_BF16 ? bf16 : H5T_IEEE_F32LE;
}

const char *h5out_dset_name(const struct h5out_dset *d) {
    return d->alias ? d->alias : d->desc->name;
}

bool h5o_by_token(const struct h5out_dset *d) {
    return !strcmp(d->axes[0], "token");
}

// Segment names are made and recognised here alone: seg-RRR-KKKKK-QQQQQ.h5
void h5out_seg_name(char *file, size_t n, int run, int first_rank, int seq) {
    snprintf(file, n, "seg-%03d-%05d-%05d.h5", run, first_rank, seq);
}

bool h5o_is_seg_name(const char *name) {
    int r, k, q, end = 0;
    return sscanf(name, "seg-%d-%d-%d.h5%n", &r, &k, &q, &end) == 3 && end > 0 && !name[end];
}

void h5out_record_free(struct h5out_record *r) {
    free(r->runs);
    memset(r, 0, sizeof *r);
}

// appends a run, merging it into the last one when it continues it
int h5o_push_run(struct h5out_run **runs, int *n, int *cap, struct h5out_run r) {
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
// the index file: /prompts and /tokens, written once by rank 0

const char *const h5o_table_names[6] = {"prompts/source_index", "prompts/length",
                                        "prompts/token_offset", "tokens/input_ids",
                                        "tokens/prompt_index",  "tokens/position"};

int h5o_write_index(const struct h5out_params *p, struct ah_error *err) {
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
        CHECK_H5(write_1d(f, h5o_table_names[i], v[i], i < 3 ? p->n_prompts : p->n_tokens), path,
                 "write /prompts and /tokens");
    for (int i = 4; i < 6; i++) // made from the lengths, a piece at a time
        CHECK_H5(write_by_token(f, h5o_table_names[i], p, i == 4), path, "write /tokens");
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
int h5o_records_parse(struct h5master *m, const char *text) {
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
            if ((rc = h5o_push_run(&r.runs, &r.n_runs, &cap, x)) < 0) break;
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
    bool tok = i >= 0 && h5o_by_token(&m->d[i]);
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
char *h5o_provenance_fingerprint(const char *prov) {
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

// an activation dataset's attributes; NULL, or what failed
static const char *act_attrs(hid_t ds, const struct h5out_dset *d) {
    char sem[TAP_MAX_DIMS][TAP_AXIS_MAX];
    memcpy(sem, d->desc->axes, sizeof sem);
    if (attr_strs(ds, "semantic_shape", d->desc->ndim, (const char(*)[TAP_AXIS_MAX])sem) < 0)
        return "write semantic_shape";
    if (attr_strs(ds, "stored_axes", d->ndim, d->axes) < 0) return "write stored_axes";
    if (h5attr_put_str(ds, "dtype", tap_dtype_name(d->desc->dtype)) < 0) return "write dtype";
    if (h5attr_put_str(ds, "meaning", d->desc->meaning) < 0) return "write meaning";
    if (d->alias && h5attr_put_str(ds, "canonical_name", d->desc->name) < 0)
        return "write canonical_name";
    return NULL;
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
        if ((rc = master_dset(m, f, h5o_table_names[i], -1, H5T_STD_I64LE, 1, &n, &zero, &ds,
                              err)) < 0)
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
        hid_t ft = h5o_file_type(m->f16, m->bf16, m->p.store, d->desc->dtype);
        if ((rc = master_dset(m, g, h5out_dset_name(d), i, ft, d->ndim, d->dims, fill, &ds, err)) <
            0)
            goto fail;
        const char *what = act_attrs(ds, d);
        CHECK_H5(what ? -1 : 0, tmp, what);
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

int64_t h5o_n_batches(const struct h5out_params *p) {
    return (p->n_prompts + p->batch_size - 1) / p->batch_size;
}

// done[k] = 1 when every dataset has batch k's prompt rows in some record
void h5o_batches_done(const struct h5master *m, uint8_t *done) {
    int64_t K = h5o_n_batches(&m->p), B = m->p.batch_size;
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
    int64_t K = h5o_n_batches(&m->p), B = m->p.batch_size, n = 0;
    uint8_t *done = malloc((size_t)K + 1);
    if (!done) return 0;
    h5o_batches_done(m, done);
    for (int64_t k = 0; k < K; k++)
        if (done[k]) n += (k + 1) * B < m->p.n_prompts ? B : m->p.n_prompts - k * B;
    free(done);
    return n;
}

// keeps only the rows of complete batches in every record (batches never straddle runs)
int h5o_trim_records(struct h5master *m, const uint8_t *done) {
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
                rc = h5o_push_run(&kept, &n_kept, &cap, y);
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
