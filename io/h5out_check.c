// h5out_check.c - see h5out.h: the files an output's virtual datasets read, checked (h5out_check,
// and --resume through h5o_health_check), and an output inspected.
#define _POSIX_C_SOURCE 200809L // defines: realpath
#include "io/h5out_int.h"

#include "io/h5attr.h"
#include "io/output.h" // defines: out_parts_path

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

// ----------------------------------------------------------------------------
// listed files checked: a segment or the index deleted, truncated or replaced after listing, and
// the master's virtual datasets mapped onto exactly the files of its own parts folder

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
    int64_t rows = h5o_dset_len(g, name), need = rows_needed(c->r, tok == 1);
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
        ok = h5o_dset_len(f, h5o_table_names[i]) == (i < 3 ? n_prompts : n_tokens);
    if (f >= 0) H5Fclose(f);
    return ok;
}

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

// Fills h (h->why and h->fid allocated here for h->n_rec records; h5o_health_free frees them) for
// the master f, whose records' datasets are token-major as tm says.
int h5o_health_check(struct health *h, hid_t f, token_major_fn tm, void *u, int64_t n_prompts,
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

void h5o_health_free(struct health *h) {
    free(h->why);
    free(h->fid);
}
// ----------------------------------------------------------------------------
// inspect

int64_t h5o_dset_len(hid_t file, const char *path) {
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
    int64_t n = H5Lexists(x->f, p, H5P_DEFAULT) > 0 ? h5o_dset_len(x->f, p) : -1;
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
    int64_t n = h5o_dset_len(f, "prompts/length"), nt = h5o_dset_len(f, "tokens/input_ids");
    struct master_names x = {f, nt};
    hid_t g = H5Gopen2(f, "activations", H5P_DEFAULT);
    H5G_info_t gi = {0};
    if (g >= 0) H5Gget_info(g, &gi), H5Gclose(g);
    int rc = !segs || h5o_records_parse(&m, segs) == 0 // none: an output of plain datasets
                 ? 0
                 : ah_fail(err, AH_EFORMAT, "%s: unreadable \"segments\" attribute", path);
    free(segs);
    struct health h = {.path = path, .rec = m.rec, .n_rec = m.n_rec, .n_dsets = (int)gi.nlinks};
    if (rc == 0) rc = h5o_health_check(&h, f, token_major_master, &x, n, nt);
    if (rc == 0) rc = health_say(&h, say, lead, hl, err);
    h5o_health_free(&h);
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
    int64_t n = h5o_dset_len(f, "prompts/length"), nt = h5o_dset_len(f, "tokens/input_ids");
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
    int64_t n = h5o_dset_len(f, "prompts/length"), off = 0, ln = 0;
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
        int64_t end = h5o_dset_len(f, "tokens/input_ids"); // under "select" (token layout) /tokens
        at = (hsize_t)prompt + 1;   // lists the stored tokens: up to the next
        if (ok && prompt + 1 < n) { // prompt's
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
