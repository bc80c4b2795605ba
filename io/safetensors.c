// safetensors.c - see safetensors.h. Format: u64 little-endian header length N, N bytes of JSON
// {"name": {"dtype": "F32", "shape": [..], "data_offsets": [b, e]}, "__metadata__": {..}},
// then the data; offsets are relative to the end of the header.
#define _POSIX_C_SOURCE 200809L // defines: mmap, fstat
#include "io/safetensors.h"

#include "model/ah.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *dtype_names[ST_N_DTYPES] = {"F32", "F16", "BF16", "I64", "I32", "U8", "F8_E4M3"};
static const size_t dtype_sizes[ST_N_DTYPES] = {4, 2, 2, 8, 4, 1, 1};

const char *st_dtype_name(enum st_dtype t) {
    return dtype_names[t];
}

size_t st_dtype_size(enum st_dtype t) {
    return dtype_sizes[t];
}

// a JSON number that is a whole count (shape entries, offsets)
static bool is_count(const cJSON *d) {
    return cJSON_IsNumber(d) && d->valuedouble >= 0 && d->valuedouble <= 9.0e15 &&
           d->valuedouble == (double)(int64_t)d->valuedouble;
}

// a short rendering of a JSON value for messages (a static buffer)
static const char *json_text(const cJSON *v) {
    static _Thread_local char buf[48];
    char *s = v ? cJSON_PrintUnformatted(v) : NULL;
    snprintf(buf, sizeof buf, "%s", s ? s : "nothing");
    free(s);
    return buf;
}

static int parse_entry(struct st_tensor *t, const cJSON *e, size_t data_size, const char *path,
                       struct ah_error *err) {
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *of = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(dt) || !cJSON_IsArray(sh) || !cJSON_IsArray(of) ||
        cJSON_GetArraySize(of) != 2)
        return ah_fail(err, AH_EFORMAT,
                       "%s: tensor \"%s\": expected \"dtype\", \"shape\" and two \"data_offsets\"",
                       path, t->name);
    int k = 0;
    while (k < ST_N_DTYPES && strcmp(dt->valuestring, dtype_names[k]))
        k++;
    if (k == ST_N_DTYPES)
        return ah_fail(err, AH_EFORMAT, "%s: tensor \"%s\": unsupported dtype \"%s\"", path,
                       t->name, dt->valuestring);
    t->dtype = (enum st_dtype)k;
    t->ndim = cJSON_GetArraySize(sh);
    if (t->ndim > ST_MAX_DIMS)
        return ah_fail(err, AH_EFORMAT, "%s: tensor \"%s\": %d dims (at most %d)", path, t->name,
                       t->ndim, ST_MAX_DIMS);
    double count = 1;
    for (int i = 0; i < t->ndim; i++) {
        const cJSON *d = cJSON_GetArrayItem(sh, i);
        if (!is_count(d))
            return ah_fail(err, AH_EFORMAT,
                           "%s: tensor \"%s\": shape entry %d: expected an integer >= 0, not %s",
                           path, t->name, i, json_text(d));
        t->shape[i] = (int64_t)d->valuedouble;
        count *= (double)t->shape[i];
    }
    for (int i = 0; i < 2; i++)
        if (!is_count(cJSON_GetArrayItem(of, i)))
            return ah_fail(err, AH_EFORMAT,
                           "%s: tensor \"%s\": data_offsets[%d]: expected an integer >= 0, not %s",
                           path, t->name, i, json_text(cJSON_GetArrayItem(of, i)));
    double b = cJSON_GetArrayItem(of, 0)->valuedouble, e_ = cJSON_GetArrayItem(of, 1)->valuedouble;
    if (!(b >= 0 && e_ >= b && e_ <= (double)data_size))
        return ah_fail(err, AH_EFORMAT,
                       "%s: tensor \"%s\": data_offsets [%.0f, %.0f] outside the %zu data bytes "
                       "(truncated file or lying header)",
                       path, t->name, b, e_, data_size);
    t->nbytes = (size_t)(e_ - b);
    if ((double)t->nbytes != count * (double)dtype_sizes[k])
        return ah_fail(err, AH_EFORMAT,
                       "%s: tensor \"%s\": %zu data bytes, but shape and dtype %s need %.0f", path,
                       t->name, t->nbytes, dtype_names[k], count * (double)dtype_sizes[k]);
    t->data = (const void *)(uintptr_t)b; // made absolute by the caller
    return 0;
}

static int not_regular(const char *path, const struct stat *sb, struct ah_error *err) {
    const char *kind = S_ISFIFO(sb->st_mode)  ? " (a FIFO)"
                       : S_ISDIR(sb->st_mode) ? " (a folder)"
                                              : "";
    return ah_fail(err, AH_EINVAL, "%s: not a regular file%s", path, kind);
}

int st_regular(const char *path, struct ah_error *err) {
    struct stat sb;
    if (stat(path, &sb) != 0 && errno == ENAMETOOLONG)
        return ah_fail(err, AH_EINVAL,
                       "%.200s...: a path of %zu bytes, longer than the system allows", path,
                       strlen(path));
    if (stat(path, &sb) != 0)
        return ah_fail(err, errno == ENOENT || errno == ENOTDIR ? AH_ENOENT : AH_EIO,
                       "%s: cannot open: %s", path, strerror(errno));
    return S_ISREG(sb.st_mode) ? 0 : not_regular(path, &sb, err);
}

static int by_name(const void *x, const void *y) {
    const struct st_tensor *const *a = x, *const *b = y;
    return strcmp((*a)->name, (*b)->name);
}

static int by_offset(const void *x, const void *y) {
    const struct st_tensor *const *a = x, *const *b = y;
    uintptr_t pa = (uintptr_t)(*a)->data, pb = (uintptr_t)(*b)->data;
    return pa < pb ? -1 : pa > pb ? 1 : 0;
}

// Each tensor named once; no two tensors' bytes overlap (a header that lies about its offsets
// would make two weights share data).
static int check_layout(const struct st_file *f, const unsigned char *data, struct ah_error *err) {
    const struct st_tensor **v = malloc(((size_t)f->n + 1) * sizeof *v);
    int rc = 0;
    if (!v) return ah_fail(err, AH_ENOMEM, "%s: cannot allocate the tensor index", f->path);
    for (int i = 0; i < f->n; i++)
        v[i] = &f->t[i];
    qsort(v, (size_t)f->n, sizeof *v, by_name);
    for (int i = 1; i < f->n && rc == 0; i++)
        if (!strcmp(v[i - 1]->name, v[i]->name))
            rc = ah_fail(err, AH_EFORMAT, "%s: tensor \"%s\" appears twice in the header", f->path,
                         v[i]->name);
    qsort(v, (size_t)f->n, sizeof *v, by_offset);
    for (int i = 1; i < f->n && rc == 0; i++) {
        size_t a0 = (size_t)((const unsigned char *)v[i - 1]->data - data),
               a1 = a0 + v[i - 1]->nbytes, b0 = (size_t)((const unsigned char *)v[i]->data - data),
               b1 = b0 + v[i]->nbytes;
        if (v[i]->nbytes && v[i - 1]->nbytes && a1 > b0)
            rc = ah_fail(err, AH_EFORMAT,
                         "%s: tensors \"%s\" and \"%s\" overlap: data_offsets [%zu, %zu] and "
                         "[%zu, %zu]",
                         f->path, v[i - 1]->name, v[i]->name, a0, a1, b0, b1);
    }
    free(v);
    return rc;
}

// f->fd and f->map: the file opened, checked to be a regular file of at least 8 bytes, mapped
static int st_map(struct st_file *f, const char *path, struct ah_error *err) {
    f->fd = open(path, O_RDONLY | O_NONBLOCK); // a FIFO without a writer must not block
    if (f->fd < 0)
        return ah_fail(err, errno == ENOENT || errno == ENOTDIR ? AH_ENOENT : AH_EIO,
                       "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(f->fd, &sb) != 0)
        return ah_fail(err, AH_EIO, "%s: cannot stat: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode)) return not_regular(path, &sb, err);
    f->size = (size_t)sb.st_size;
    if (f->size < 8)
        return ah_fail(err, AH_EFORMAT, "%s: %zu bytes, too short for a safetensors header", path,
                       f->size);
    f->map = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, f->fd, 0);
    if (f->map == MAP_FAILED) {
        f->map = NULL;
        return ah_fail(err, AH_EIO, "%s: cannot mmap: %s", path, strerror(errno));
    }
    return 0;
}

// f->t: the tensors of the JSON header h, their views into the data after the header (hlen bytes)
static int st_tensors(struct st_file *f, const cJSON *h, uint64_t hlen, const char *path,
                      struct ah_error *err) {
    size_t data_size = f->size - 8 - hlen;
    const unsigned char *data = (const unsigned char *)f->map + 8 + hlen;
    f->t = calloc((size_t)cJSON_GetArraySize(h) + 1, sizeof *f->t);
    if (!f->t) return -AH_ENOMEM;
    const cJSON *e;
    int rc;
    cJSON_ArrayForEach(e, h) {
        if (!strcmp(e->string, "__metadata__")) continue;
        struct st_tensor *t = &f->t[f->n];
        t->name = strdup(e->string);
        if (!t->name) return -AH_ENOMEM;
        f->n++;
        if ((rc = parse_entry(t, e, data_size, path, err)) < 0) return rc;
        t->data = data + (uintptr_t)t->data;
    }
    return check_layout(f, data, err);
}

// the header: its little-endian length, then the JSON object of the tensors
static int st_header(struct st_file *f, const char *path, struct ah_error *err) {
    const unsigned char *p = f->map;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | p[i];
    if (hlen > f->size - 8)
        return ah_fail(err, AH_EFORMAT, "%s: header length %llu past the end of the %zu-byte file",
                       path, (unsigned long long)hlen, f->size);
    char *text = malloc(hlen + 1);
    if (!text) return -AH_ENOMEM;
    memcpy(text, p + 8, hlen);
    text[hlen] = '\0';
    cJSON *h = cJSON_Parse(text);
    int rc = cJSON_IsObject(h) ? st_tensors(f, h, hlen, path, err)
                               : ah_fail(err, AH_EFORMAT, "%s: header is not a JSON object", path);
    free(text);
    cJSON_Delete(h);
    return rc;
}

int st_open(struct st_file *f, const char *path, struct ah_error *err) {
    memset(f, 0, sizeof *f);
    f->fd = -1;
    f->path = strdup(path);
    if (!f->path) return -AH_ENOMEM;
    int rc = st_map(f, path, err);
    if (rc == 0) rc = st_header(f, path, err);
    if (rc < 0) st_close(f);
    return rc;
}

const struct st_tensor *st_find(const struct st_file *f, const char *name) {
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->t[i].name, name)) return &f->t[i];
    return NULL;
}

void st_close(struct st_file *f) {
    for (int i = 0; i < f->n; i++)
        free(f->t[i].name);
    free(f->t);
    if (f->map) munmap(f->map, f->size);
    if (f->fd >= 0) close(f->fd);
    free(f->path);
    memset(f, 0, sizeof *f);
    f->fd = -1;
}

int st_write(const char *path, const struct st_wtensor *t, int n, struct ah_error *err) {
    int rc = -AH_ENOMEM;
    char *text = NULL;
    FILE *fp = NULL;
    cJSON *h = cJSON_CreateObject();
    cJSON *meta = cJSON_AddObjectToObject(h, "__metadata__");
    if (!meta || !cJSON_AddStringToObject(meta, "format", "pt")) goto fail;
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        uint64_t nb = st_dtype_size(t[i].dtype);
        for (int d = 0; d < t[i].ndim; d++)
            nb *= (uint64_t)t[i].shape[d];
        cJSON *e = cJSON_AddObjectToObject(h, t[i].name);
        if (!e || !cJSON_AddStringToObject(e, "dtype", st_dtype_name(t[i].dtype))) goto fail;
        cJSON *sh = cJSON_AddArrayToObject(e, "shape");
        cJSON *of = cJSON_AddArrayToObject(e, "data_offsets");
        if (!sh || !of) goto fail;
        for (int d = 0; d < t[i].ndim; d++)
            cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)t[i].shape[d]));
        cJSON_AddItemToArray(of, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(of, cJSON_CreateNumber((double)(off + nb)));
        off += nb;
    }
    text = cJSON_PrintUnformatted(h);
    if (!text) goto fail;
    size_t len = strlen(text), padded = (len + 7) / 8 * 8; // keeps data 8-byte aligned
    fp = fopen(path, "wb");
    if (!fp) {
        rc = ah_fail(err, AH_EIO, "%s: cannot create: %s", path, strerror(errno));
        goto fail;
    }
    unsigned char hl[8];
    for (int i = 0; i < 8; i++)
        hl[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    int ok = fwrite(hl, 1, 8, fp) == 8 && fwrite(text, 1, len, fp) == len;
    for (size_t i = len; ok && i < padded; i++)
        ok = fputc(' ', fp) != EOF;
    for (int i = 0; ok && i < n; i++) {
        size_t nb = st_dtype_size(t[i].dtype);
        for (int d = 0; d < t[i].ndim; d++)
            nb *= (size_t)t[i].shape[d];
        ok = fwrite(t[i].data, 1, nb, fp) == nb;
    }
    if (fclose(fp) != 0) ok = 0;
    fp = NULL;
    rc = ok ? 0 : ah_fail(err, AH_EIO, "%s: write failed: %s", path, strerror(errno));
fail:
    if (fp) fclose(fp);
    free(text);
    cJSON_Delete(h);
    return rc;
}
