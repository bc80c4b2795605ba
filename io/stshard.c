// stshard.c - a shard as one .safetensors file: 8 bytes (little-endian) of header length, the JSON
// header (each tensor's dtype, shape, data_offsets; "__metadata__": the attributes, a string map),
// padded with spaces to a multiple of 8, then the data. Tensors are stored by element size, the
// largest first, so each one's data is aligned to its element size (the spec allows no holes).
// Written to NAME.tmp, fsynced, renamed.
#define _POSIX_C_SOURCE 200809L // defines: fsync
#include "io/fsutil.h"
#include "io/shardfmt.h"
#include "model/ah.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// the arrays' order in the file: 8-byte elements, then 4, then 2 (each group in w's order)
static int file_order(const struct sf_shard *w, int *order) {
    int n = 0;
    for (size_t size = 8; size >= 2; size /= 2)
        for (int i = 0; i < w->n; i++)
            if (sf_dtype_size(w->a[i].t) == size) order[n++] = i;
    return n;
}

static char *st_header(const struct sf_shard *w, const int *order, size_t *len) {
    cJSON *h = cJSON_CreateObject(), *meta = cJSON_AddObjectToObject(h, "__metadata__");
    for (int i = 0; i < w->n_attr; i++)
        cJSON_AddStringToObject(meta, w->key[i], w->val[i]);
    double off = 0;
    for (int j = 0; j < w->n; j++) {
        const struct sf_array *a = &w->a[order[j]];
        cJSON *e = cJSON_AddObjectToObject(h, a->name);
        cJSON_AddStringToObject(e, "dtype", sf_st_dtype(a->t));
        cJSON *sh = cJSON_AddArrayToObject(e, "shape"),
              *of = cJSON_AddArrayToObject(e, "data_offsets");
        for (int k = 0; k < a->ndim; k++)
            cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)a->shape[k]));
        cJSON_AddItemToArray(of, cJSON_CreateNumber(off));
        cJSON_AddItemToArray(of, cJSON_CreateNumber(off += (double)a->nbytes));
    }
    char *text = cJSON_PrintUnformatted(h);
    cJSON_Delete(h);
    size_t n = text ? strlen(text) : 0, padded = (n + 7) / 8 * 8;
    char *out = text ? realloc(text, padded + 1) : NULL;
    if (!out) {
        free(text);
        return NULL;
    }
    memset(out + n, ' ', padded - n);
    out[padded] = 0;
    *len = padded;
    return out;
}

static void st_remove(const char *path) {
    unlink(path);
}

static int st_finish(struct sf_shard *w, struct ah_error *err) {
    int *order = malloc((size_t)(w->n ? w->n : 1) * sizeof *order);
    size_t len = 0;
    char *hdr = order ? (file_order(w, order), st_header(w, order, &len)) : NULL;
    if (!hdr) {
        free(order);
        return ah_fail(err, AH_ENOMEM, "out of memory");
    }
    unsigned char hl[8];
    for (int i = 0; i < 8; i++)
        hl[i] = (unsigned char)((uint64_t)len >> (8 * i));
    errno = 0;
    int fd = open(w->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    int ok = fd >= 0 && sf_write_all(fd, hl, 8) == 0 && sf_write_all(fd, hdr, len) == 0;
    for (int j = 0; ok && j < w->n; j++)
        ok = sf_write_all(fd, w->a[order[j]].data, w->a[order[j]].nbytes) == 0;
    if (ok) ok = fsync(fd) == 0;
    int e = errno;
    if (fd >= 0 && close(fd) != 0 && ok) ok = 0, e = errno;
    free(hdr);
    free(order);
    if (!ok)
        return ah_fail(err, AH_EIO, "%s: cannot write the shard (disk full? %s)", w->tmp,
                       strerror(e ? e : EIO));
    if (fs_replace(w->tmp, w->path) != 0)
        return ah_fail(err, AH_EIO, "%s: cannot finish the shard: %s", w->path, strerror(errno));
    return 0;
}

// one tensor of the header, its data inside the data section [0, size)
static int st_tensor(struct sf_shard *r, const cJSON *e, const unsigned char *data, size_t size) {
    const char *dt = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "dtype"));
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape"), *d;
    const cJSON *of = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    int64_t shape[SF_MAX_DIMS];
    int nd = 0, t = 0;
    while (t <= SF_F64 && dt && strcmp(dt, sf_st_dtype((enum sf_dtype)t)))
        t++;
    if (!dt || t > SF_F64 || !cJSON_IsArray(sh) || cJSON_GetArraySize(of) != 2) return -1;
    cJSON_ArrayForEach(d, sh) {
        if (nd == SF_MAX_DIMS || !cJSON_IsNumber(d) || d->valuedouble < 0) return -1;
        shape[nd++] = (int64_t)d->valuedouble;
    }
    double a = cJSON_GetArrayItem(of, 0)->valuedouble, b = cJSON_GetArrayItem(of, 1)->valuedouble;
    if (!(a >= 0 && b >= a && b <= (double)size)) return -1;
    if (sf_put(r, e->string, (enum sf_dtype)t, nd, shape, data + (size_t)a) != 0) return -1;
    return r->a[r->n - 1].nbytes == (size_t)(b - a) ? 0 : -1;
}

static int st_open(struct sf_shard *r) {
    const unsigned char *m;
    size_t len;
    if (sf_map(r, r->path, &m, &len) != 0 || len < 8) return -1;
    uint64_t hl = 0;
    for (int i = 0; i < 8; i++)
        hl |= (uint64_t)m[i] << (8 * i);
    if (hl > len - 8) return -1;
    cJSON *h = cJSON_ParseWithLength((const char *)m + 8, (size_t)hl), *it;
    int rc = cJSON_IsObject(h) ? 0 : -1;
    cJSON *walk = rc == 0 ? h : NULL;
    cJSON_ArrayForEach(it, walk) {
        if (rc < 0) break;
        if (strcmp(it->string, "__metadata__")) {
            rc = st_tensor(r, it, m + 8 + hl, len - 8 - (size_t)hl);
            continue;
        }
        const cJSON *kv;
        cJSON_ArrayForEach(kv, it) {
            if (rc == 0 && cJSON_IsString(kv)) rc = sf_attr(r, kv->string, kv->valuestring);
        }
    }
    cJSON_Delete(h);
    return rc;
}

const struct sf_format sf_safetensors = {"safetensors", ".safetensors", false,
                                         st_finish,     st_open,        st_remove};
