// npyout.c - a shard as a folder of .npy files (NPY format 1.0: C order, little-endian; bfloat16
// as "<u2", its raw bits), one a named array (NAME.npy), and shard.json: the attributes and the
// arrays' list. Written as the folder NAME.tmp, each file fsynced, then renamed to NAME.
#define _DEFAULT_SOURCE // defines: fsync, DT_DIR
#include "io/fsutil.h"
#include "io/shardfmt.h"
#include "model/ah.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

// The NPY 1.0 header of an array into buf (at least 256 + 24 * SF_MAX_DIMS bytes): its length,
// a multiple of 64, as numpy writes it.
static size_t npy_header(char *buf, enum sf_dtype t, int ndim, const int64_t *shape) {
    char dict[512];
    int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (",
                     sf_npy_descr(t));
    for (int k = 0; k < ndim; k++)
        n += snprintf(dict + n, sizeof dict - (size_t)n, "%lld,%s", (long long)shape[k],
                      k + 1 < ndim ? " " : "");
    if (ndim > 1) n--; // "(3, 4)" but "(3,)"
    n += snprintf(dict + n, sizeof dict - (size_t)n, "), }");
    size_t total = (10 + (size_t)n + 1 + 63) / 64 * 64, hl = total - 10;
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    buf[8] = (char)(hl & 0xff);
    buf[9] = (char)(hl >> 8);
    memcpy(buf + 10, dict, (size_t)n);
    memset(buf + 10 + n, ' ', hl - (size_t)n - 1);
    buf[total - 1] = '\n';
    return total;
}

static void npy_remove(const char *path) {
    DIR *d = opendir(path);
    if (!d) {
        unlink(path); // a file, or nothing
        return;
    }
    char p[4600];
    for (struct dirent *e; (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", path, e->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(path);
}

// dir/file written whole from (a, an) then (b, bn), fsynced
static int put_file(const char *dir, const char *file, const void *a, size_t an, const void *b,
                    size_t bn, struct ah_error *err) {
    char p[4600];
    snprintf(p, sizeof p, "%s/%s", dir, file);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    int ok =
        fd >= 0 && sf_write_all(fd, a, an) == 0 && sf_write_all(fd, b, bn) == 0 && fsync(fd) == 0;
    int e = errno;
    if (fd >= 0 && close(fd) != 0 && ok) ok = 0, e = errno;
    return ok ? 0
              : ah_fail(err, AH_EIO, "%s: cannot write the shard (disk full? %s)", p,
                        strerror(e ? e : EIO));
}

static cJSON *sidecar(const struct sf_shard *w) {
    cJSON *j = cJSON_CreateObject(), *at = cJSON_CreateObject(), *list = cJSON_CreateArray();
    cJSON_AddStringToObject(j, "format", "harvest-shard-npy");
    for (int i = 0; i < w->n_attr; i++)
        cJSON_AddStringToObject(at, w->key[i], w->val[i]);
    cJSON_AddItemToObject(j, "attributes", at);
    for (int i = 0; i < w->n; i++) {
        const struct sf_array *a = &w->a[i];
        cJSON *e = cJSON_CreateObject(), *sh = cJSON_CreateArray();
        char file[320];
        snprintf(file, sizeof file, "%s.npy", a->name);
        cJSON_AddStringToObject(e, "name", a->name);
        cJSON_AddStringToObject(e, "file", file);
        cJSON_AddStringToObject(e, "dtype", sf_npy_descr(a->t));
        for (int k = 0; k < a->ndim; k++)
            cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)a->shape[k]));
        cJSON_AddItemToObject(e, "shape", sh);
        cJSON_AddItemToArray(list, e);
    }
    cJSON_AddItemToObject(j, "arrays", list);
    return j;
}

static int npy_finish(struct sf_shard *w, struct ah_error *err) {
    char hdr[512], file[320];
    npy_remove(w->tmp); // a killed export's
    if (mkdir(w->tmp, 0777) != 0)
        return ah_fail(err, AH_EIO, "%s: cannot create the folder: %s", w->tmp, strerror(errno));
    int rc = 0;
    for (int i = 0; rc == 0 && i < w->n; i++) {
        const struct sf_array *a = &w->a[i];
        snprintf(file, sizeof file, "%s.npy", a->name);
        rc = put_file(w->tmp, file, hdr, npy_header(hdr, a->t, a->ndim, a->shape), a->data,
                      a->nbytes, err);
    }
    cJSON *j = rc == 0 ? sidecar(w) : NULL;
    char *text = j ? cJSON_Print(j) : NULL;
    cJSON_Delete(j);
    if (rc == 0 && !text) rc = ah_fail(err, AH_ENOMEM, "out of memory");
    if (rc == 0) rc = put_file(w->tmp, "shard.json", text, strlen(text), "\n", 1, err);
    free(text);
    if (rc < 0) return rc;
    npy_remove(w->path); // an unfinished or another export's shard of that name
    if (fs_replace(w->tmp, w->path) != 0)
        return ah_fail(err, AH_EIO, "%s: cannot finish the shard: %s", w->path, strerror(errno));
    return 0;
}

// one array of the sidecar: its file mapped, its header the one its dtype and shape give
static int open_array(struct sf_shard *r, const cJSON *e) {
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "name"));
    const char *dt = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "dtype"));
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape"), *d;
    int64_t shape[SF_MAX_DIMS];
    int nd = 0, t = 0;
    while (t <= SF_F64 && dt && strcmp(dt, sf_npy_descr((enum sf_dtype)t)))
        t++;
    if (!name || !dt || t > SF_F64 || !cJSON_IsArray(sh) || strchr(name, '/')) return -1;
    cJSON_ArrayForEach(d, sh) {
        if (nd == SF_MAX_DIMS || !cJSON_IsNumber(d) || d->valuedouble < 0) return -1;
        shape[nd++] = (int64_t)d->valuedouble;
    }
    char p[4600], hdr[512];
    snprintf(p, sizeof p, "%s/%s.npy", r->path, name);
    const unsigned char *m;
    size_t len, hl = npy_header(hdr, (enum sf_dtype)t, nd, shape);
    if (sf_map(r, p, &m, &len) != 0 || sf_put(r, name, (enum sf_dtype)t, nd, shape, m) != 0)
        return -1;
    r->a[r->n - 1].data = m + hl;
    return len == hl + r->a[r->n - 1].nbytes && !memcmp(m, hdr, hl) ? 0 : -1;
}

static int npy_open(struct sf_shard *r) {
    char p[4600], *text = NULL;
    struct ah_error e = {0};
    snprintf(p, sizeof p, "%s/shard.json", r->path);
    if (access(p, R_OK) != 0 || ah_read_file(p, &text, &e) != 0) return -1;
    cJSON *j = cJSON_Parse(text), *it;
    free(text);
    cJSON *at = cJSON_GetObjectItemCaseSensitive(j, "attributes");
    int rc = cJSON_IsObject(at) ? 0 : -1;
    cJSON *walk = rc == 0 ? at : NULL;
    cJSON_ArrayForEach(it, walk) {
        if (rc == 0 && cJSON_IsString(it)) rc = sf_attr(r, it->string, it->valuestring);
    }
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(j, "arrays")) {
        if (rc == 0) rc = open_array(r, it);
    }
    cJSON_Delete(j);
    return rc;
}

const struct sf_format sf_npy = {"npy", "", false, npy_finish, npy_open, npy_remove};
