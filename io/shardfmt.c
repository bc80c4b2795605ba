// shardfmt.c - see shardfmt.h: what the shard formats share (the arrays and attributes held,
// mapping files for reading).
#define _POSIX_C_SOURCE 200809L // defines: strdup
#include "io/shardfmt.h"
#include "model/ah.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

size_t sf_dtype_size(enum sf_dtype t) {
    return t == SF_F32 ? 4 : t == SF_F16 || t == SF_BF16 ? 2 : 8;
}

const char *sf_npy_descr(enum sf_dtype t) {
    static const char *const d[] = {"<f4", "<f2", "<u2", "<i8", "<f8"};
    return d[t];
}

const char *sf_st_dtype(enum sf_dtype t) {
    static const char *const d[] = {"F32", "F16", "BF16", "I64", "F64"};
    return d[t];
}

void sf_create(struct sf_shard *w, const struct sf_format *f, const char *path) {
    memset(w, 0, sizeof *w);
    w->fmt = f;
    snprintf(w->path, sizeof w->path, "%s", path);
    snprintf(w->tmp, sizeof w->tmp, "%s.tmp", path);
}

int sf_put(struct sf_shard *w, const char *name, enum sf_dtype t, int ndim, const int64_t *shape,
           const void *data) {
    if (w->n == w->cap) {
        int cap = w->cap ? 2 * w->cap : 16;
        struct sf_array *a = realloc(w->a, (size_t)cap * sizeof *a);
        if (!a) return -1;
        w->a = a;
        w->cap = cap;
    }
    struct sf_array *a = &w->a[w->n];
    *a = (struct sf_array){.name = strdup(name), .t = t, .ndim = ndim, .data = data};
    if (!a->name) return -1;
    a->nbytes = sf_dtype_size(t);
    for (int k = 0; k < ndim; k++)
        a->nbytes *= (size_t)(a->shape[k] = shape[k]);
    w->n++;
    return 0;
}

static int put_attr(struct sf_shard *w, const char *key, const char *val, enum sf_atype t) {
    if (w->n_attr == w->cap_attr) {
        int cap = w->cap_attr ? 2 * w->cap_attr : 16;
        char **k = realloc(w->key, (size_t)cap * sizeof *k);
        if (k) w->key = k;
        char **v = k ? realloc(w->val, (size_t)cap * sizeof *v) : NULL;
        if (v) w->val = v;
        enum sf_atype *at = v ? realloc(w->attr_t, (size_t)cap * sizeof *at) : NULL;
        if (!at) return -1;
        w->attr_t = at;
        w->cap_attr = cap;
    }
    w->attr_t[w->n_attr] = t;
    w->key[w->n_attr] = strdup(key);
    w->val[w->n_attr] = strdup(val);
    if (!w->key[w->n_attr] || !w->val[w->n_attr]) {
        free(w->key[w->n_attr]);
        free(w->val[w->n_attr]);
        return -1;
    }
    w->n_attr++;
    return 0;
}

int sf_attr(struct sf_shard *w, const char *key, const char *val) {
    return put_attr(w, key, val, SF_ASTR);
}

int sf_attr_i64(struct sf_shard *w, const char *key, int64_t v) {
    char s[32];
    snprintf(s, sizeof s, "%lld", (long long)v);
    return put_attr(w, key, s, SF_AI64);
}

int sf_attr_u64(struct sf_shard *w, const char *key, uint64_t v) {
    char s[32];
    snprintf(s, sizeof s, "%llu", (unsigned long long)v);
    return put_attr(w, key, s, SF_AU64);
}

int sf_attr_f64(struct sf_shard *w, const char *key, double v) {
    char s[64];
    snprintf(s, sizeof s, "%.17g", v);
    return put_attr(w, key, s, SF_AF64);
}

void sf_set_source(struct sf_shard *w, const char *path) {
    w->source = path;
}

int sf_finish(struct sf_shard *w, struct ah_error *err) {
    int rc = w->fmt->finish(w, err);
    if (rc < 0) w->fmt->remove(w->tmp);
    sf_close(w);
    return rc;
}

void sf_abort(struct sf_shard *w) {
    if (w->fmt) w->fmt->remove(w->tmp);
    sf_close(w);
}

int sf_open(struct sf_shard *r, const struct sf_format *f, const char *path) {
    sf_create(r, f, path);
    if (f->open(r) == 0) return 0;
    sf_close(r);
    return -1;
}

const struct sf_array *sf_find(const struct sf_shard *r, const char *name) {
    for (int i = 0; i < r->n; i++)
        if (!strcmp(r->a[i].name, name)) return &r->a[i];
    return NULL;
}

const char *sf_get(const struct sf_shard *r, const char *key) {
    for (int i = 0; i < r->n_attr; i++)
        if (!strcmp(r->key[i], key)) return r->val[i];
    return NULL;
}

void sf_close(struct sf_shard *r) {
    for (int i = 0; i < r->n; i++)
        free(r->a[i].name);
    for (int i = 0; i < r->n_attr; i++) {
        free(r->key[i]);
        free(r->val[i]);
    }
    for (int i = 0; i < r->n_map; i++)
        munmap(r->map[i], r->map_len[i]);
    free(r->a);
    free(r->key);
    free(r->val);
    free(r->attr_t);
    free(r->map);
    free(r->map_len);
    memset(r, 0, sizeof *r);
}

int sf_write_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n > 0) {
        ssize_t k = write(fd, c, n > (1u << 30) ? (1u << 30) : n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            if (k == 0) errno = EIO;
            return -1;
        }
        c += k;
        n -= (size_t)k;
    }
    return 0;
}

int sf_map(struct sf_shard *r, const char *path, const unsigned char **p, size_t *n) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0) return -1;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) {
        close(fd);
        return -1;
    }
    void **m = realloc(r->map, (size_t)(r->n_map + 1) * sizeof *m);
    if (m) r->map = m;
    size_t *l = m ? realloc(r->map_len, (size_t)(r->n_map + 1) * sizeof *l) : NULL;
    if (l) r->map_len = l;
    void *v = l ? mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
    close(fd);
    if (v == MAP_FAILED) return -1;
    r->map[r->n_map] = v;
    r->map_len[r->n_map++] = (size_t)st.st_size;
    *p = v;
    *n = (size_t)st.st_size;
    return 0;
}
