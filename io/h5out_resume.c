// h5out_resume.c - see h5out.h: the master opened (made new, or reopened by --resume with every
// listed file checked and what is damaged dropped), closed, and an output removed.
#define _POSIX_C_SOURCE 200809L // defines: fsync
#include "io/h5out_int.h"

#include "io/fingerprint.h" // defines: fp_compare
#include "io/h5attr.h"
#include "io/output.h" // defines: out_parts_path

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

// resume: a dataset of a record is token-major as the output's list says
static int token_major_listed(void *u, const struct h5out_record *r, const char *name) {
    const struct h5master *m = u;
    for (int i = r->i0; i < r->i1 && i < m->n; i++)
        if (!strcmp(h5out_dset_name(&m->d[i]), name)) return h5o_by_token(&m->d[i]);
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
        if (!h5o_is_seg_name(e->d_name)) continue;
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
    return h5o_write_index(&m->p, err);
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
    if (h5o_records_parse(m, segs) < 0) {
        rc = ah_fail(err, AH_EFORMAT, "%s: unreadable \"segments\" attribute; use --overwrite", mp);
        goto fail;
    }
    if (m->p.model_fingerprint && (fp = h5o_provenance_fingerprint(prov)) &&
        (rc = fp_compare(fp, m->p.model_fingerprint, mp, err)) < 0)
        goto fail;
    struct health h = {
        .path = mp, .rec = m->rec, .n_rec = m->n_rec, .n_dsets = m->n, .index_always = true};
    if ((rc = h5o_health_check(&h, f, token_major_listed, m, m->p.n_prompts, m->p.n_tokens)) == 0 &&
        (rc = resume_parts(m, !h.why[m->n_rec][0], err)) == 0)
        drop_damaged(m, &h);
    h5o_health_free(&h);
    if (rc < 0) goto fail;
    h5o_batches_done(m, batch_done);
    if ((rc = h5o_trim_records(m, batch_done)) < 0) goto fail;
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
    m->f16 = h5o_make_half(0);
    m->bf16 = h5o_make_half(1);
    snprintf(m->tmp, sizeof m->tmp, "%s.tmp", p->path);
    int rc = m->f16 < 0 || m->bf16 < 0 ? -AH_EIO : 0;
    char parts[PATH_MAX_];
    out_parts_path(parts, sizeof parts, p->path, NULL);
    *complete = false;
    memset(batch_done, 0, (size_t)h5o_n_batches(p));
    if (rc < 0) {
    } else if (resume) {
        rc = resume_state(m, batch_done, complete, err);
    } else if (mkdir(parts, 0777) != 0 && errno != EEXIST) {
        rc = ah_fail(err, AH_EIO,
                     "%s: cannot create the output file (check that its folder exists and is "
                     "writable): %s",
                     p->path, strerror(errno));
    } else if ((rc = h5o_write_index(p, err)) == 0) {
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
        bool ours = !strcmp(e->d_name, "index.h5") || h5o_is_seg_name(e->d_name);
        if (!ours) continue;
        char f[PATH_MAX_ + 300];
        snprintf(f, sizeof f, "%s/%s", p, e->d_name);
        unlink(f);
    }
    closedir(dir);
    rmdir(p); // stays if the user keeps other files there
    return 0;
}
