// modeldir.c - see modeldir.h
#define _POSIX_C_SOURCE 200809L // defines: strdup, sysconf
#define _DEFAULT_SOURCE         // defines: madvise, MADV_DONTNEED
#include "io/modeldir.h"

#include "io/config_json.h"
#include "io/halfconv.h"
#include "model/ah.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h> // defines: madvise
#include <unistd.h>

static char *path_join(const char *dir, const char *leaf) {
    size_t n = strlen(dir) + strlen(leaf) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, leaf);
    return p;
}

static int open_shards(struct modeldir *md, struct ah_error *err) {
    char *text = NULL;
    int rc = st_regular(md->index_path, err);
    if (rc == 0) rc = ah_read_file(md->index_path, &text, err);
    if (rc < 0) return rc;
    cJSON *idx = cJSON_Parse(text);
    free(text);
    cJSON *wm = cJSON_DetachItemFromObjectCaseSensitive(idx, "weight_map");
    cJSON_Delete(idx);
    if (!cJSON_IsObject(wm)) {
        cJSON_Delete(wm);
        return ah_fail(err, AH_EFORMAT, "%s: expected a JSON object with a \"weight_map\" object",
                       md->index_path);
    }
    md->index = wm;
    int n = cJSON_GetArraySize(wm);
    md->files = calloc((size_t)n + 1, sizeof *md->files);
    if (!md->files) return -AH_ENOMEM;
    const cJSON *e;
    cJSON_ArrayForEach(e, wm) {
        if (!cJSON_IsString(e))
            return ah_fail(err, AH_EFORMAT, "%s: weight_map[\"%s\"]: expected a file name",
                           md->index_path, e->string);
        int seen = 0;
        for (int i = 0; i < md->n_files && !seen; i++) {
            const char *leaf = strrchr(md->files[i].path, '/') + 1;
            seen = !strcmp(leaf, e->valuestring);
        }
        if (seen) continue;
        if (strchr(e->valuestring, '/'))
            return ah_fail(err, AH_EFORMAT,
                           "%s: weight_map[\"%s\"]: shard \"%s\" must be a file "
                           "name in the model folder",
                           md->index_path, e->string, e->valuestring);
        char *p = path_join(md->dir, e->valuestring);
        if (!p) return -AH_ENOMEM;
        if (access(p, R_OK) != 0) {
            rc = ah_fail(err, AH_ENOENT,
                         "%s: weight_map[\"%s\"] names shard \"%s\", which is "
                         "missing from %s",
                         md->index_path, e->string, e->valuestring, md->dir);
            free(p);
            return rc;
        }
        rc = st_open(&md->files[md->n_files], p, err);
        free(p);
        if (rc < 0) return rc;
        md->n_files++;
    }
    return 0;
}

int md_open(struct modeldir *md, const char *dir, bool config_only, struct ah_error *err) {
    memset(md, 0, sizeof *md);
    int rc = -AH_ENOMEM;
    size_t dl = strlen(dir);
    if (config_only && dl > 5 && !strcmp(dir + dl - 5, ".json")) {
        md->config_path = strdup(dir);
        md->dir = strdup(".");
    } else {
        md->dir = strdup(dir);
        md->config_path = path_join(dir, "config.json");
    }
    if (!md->dir || !md->config_path) goto fail;
    if ((rc = st_regular(md->config_path, err)) < 0 ||
        (rc = ah_read_file(md->config_path, &md->config_text, err)) < 0)
        goto fail;
    md->config = cJSON_Parse(md->config_text);
    if (!cJSON_IsObject(md->config)) {
        rc = ah_fail(err, AH_EFORMAT, "%s: not a JSON object", md->config_path);
        goto fail;
    }
    if (config_only) return 0;

    md->index_path = path_join(dir, "model.safetensors.index.json");
    if (!md->index_path) goto fail;
    if (access(md->index_path, F_OK) == 0) {
        if ((rc = open_shards(md, err)) < 0) goto fail;
    } else {
        free(md->index_path);
        md->index_path = NULL;
        char *p = path_join(dir, "model.safetensors");
        md->files = calloc(1, sizeof *md->files);
        if (!p || !md->files) {
            free(p);
            goto fail;
        }
        if (access(p, F_OK) != 0) {
            rc = ah_fail(err, AH_ENOENT,
                         "%s: no model.safetensors nor "
                         "model.safetensors.index.json",
                         dir);
            free(p);
            goto fail;
        }
        rc = st_open(&md->files[0], p, err);
        free(p);
        if (rc < 0) goto fail;
        md->n_files = 1;
    }
    return 0;
fail:
    md_close(md);
    return rc;
}

void md_close(struct modeldir *md) {
    for (int i = 0; i < md->n_files; i++)
        st_close(&md->files[i]);
    free(md->files);
    for (int i = 0; i < md->n_owned; i++)
        free(md->owned[i]);
    free(md->owned);
    cJSON_Delete(md->config);
    cJSON_Delete(md->index);
    free(md->config_text);
    free(md->config_path);
    free(md->index_path);
    free(md->dir);
    memset(md, 0, sizeof *md);
}

// the config through model/config.h's view, whose helpers word the messages
int md_config_int(const struct modeldir *md, const char *key, bool required, int *out,
                  struct ah_error *err) {
    struct config c = config_json(md->config, md->config_path);
    return cfg_int(&c, key, required, out, err);
}

int md_config_double(const struct modeldir *md, const char *key, bool required, double *out,
                     struct ah_error *err) {
    struct config c = config_json(md->config, md->config_path);
    return cfg_double(&c, key, required, out, err);
}

const char *md_config_string(const struct modeldir *md, const char *key) {
    struct config c = config_json(md->config, md->config_path);
    return cfg_str(&c, key);
}

static int find(const struct modeldir *md, const char *name, const struct st_tensor **t,
                const char **file, struct ah_error *err) {
    if (md->index) {
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(md->index, name);
        if (!cJSON_IsString(s))
            return ah_fail(err, AH_EFORMAT, "%s: missing tensor \"%s\" in weight_map",
                           md->index_path, name);
        for (int i = 0; i < md->n_files; i++) {
            const char *leaf = strrchr(md->files[i].path, '/') + 1;
            if (strcmp(leaf, s->valuestring)) continue;
            *file = md->files[i].path;
            if ((*t = st_find(&md->files[i], name))) return 0;
            return ah_fail(err, AH_EFORMAT, "%s: weight_map puts \"%s\" in %s, which lacks it",
                           md->index_path, name, md->files[i].path);
        }
    }
    for (int i = 0; i < md->n_files; i++) {
        *file = md->files[i].path;
        if ((*t = st_find(&md->files[i], name))) return 0;
    }
    return ah_fail(err, AH_EFORMAT, "%s: missing tensor \"%s\"",
                   md->n_files ? md->files[0].path : md->dir, name);
}

int md_tensor_dims(const struct modeldir *md, const char *name, int64_t *shape, int max_dims,
                   struct ah_error *err) {
    const struct st_tensor *t = NULL;
    const char *file = NULL;
    int rc = find(md, name, &t, &file, err);
    if (rc < 0) return rc;
    for (int i = 0; i < t->ndim && i < max_dims; i++)
        shape[i] = t->shape[i];
    return t->ndim;
}

bool md_tensor_is_bf16(const struct modeldir *md, const char *name) {
    const struct st_tensor *t = NULL;
    const char *file = NULL;
    return find(md, name, &t, &file, NULL) == 0 && t->dtype == ST_BF16;
}

// find(), then the shape check
static int locate(const struct modeldir *md, const char *name, int ndim, const int64_t *shape,
                  const struct st_tensor **tp, const char **filep, struct ah_error *err) {
    const struct st_tensor *t = NULL;
    const char *file = NULL;
    int rc = find(md, name, &t, &file, err);
    if (rc < 0) return rc;
    *tp = t;
    *filep = file;
    int same = t->ndim == ndim;
    for (int i = 0; same && i < ndim; i++)
        same = t->shape[i] == shape[i];
    if (!same) {
        char want[128] = "", got[128] = "";
        for (int i = 0; i < ndim; i++)
            snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", i ? ", " : "",
                     (long long)shape[i]);
        for (int i = 0; i < t->ndim; i++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", i ? ", " : "",
                     (long long)t->shape[i]);
        return ah_fail(err, AH_EFORMAT, "%s: tensor \"%s\": shape [%s], expected [%s]", file, name,
                       got, want);
    }
    return 0;
}

// a buffer the modeldir frees at md_close
static void *own(struct modeldir *md, size_t bytes) {
    if (md->n_owned == md->cap_owned) {
        int cap = md->cap_owned * 2 + 16;
        void **o = realloc(md->owned, (size_t)cap * sizeof *o);
        if (!o) return NULL;
        md->owned = o;
        md->cap_owned = cap;
    }
    void *buf = malloc(bytes + 1);
    if (buf) md->owned[md->n_owned++] = buf;
    return buf;
}

// ---- non-finite weights: a NaN selection bias or an Inf norm weight would propagate silently.
// A value is NaN or Inf exactly when its exponent bits are all ones. The scans are loops the
// compiler vectorises with baseline x86-64 (SSE2) instructions: a signed 16-bit max over the
// magnitude bits (pmaxsw), a 32-bit compare-and-or (pcmpeqd); ~3 GB/s here, the memory's pace
// (a 1 GiB BF16 tensor in the page cache: 0.35 s). ----

static size_t first_nonfinite16(const uint16_t *v, size_t n, uint16_t inf) {
    for (size_t i = 0; i < n; i++)
        if ((v[i] & 0x7fffu) >= inf) return i;
    return n;
}

static bool finite16(const void *data, size_t n, uint16_t inf) {
    const unsigned char *p = data;
    int16_t m = 0;
    if ((uintptr_t)p % 2 == 0) {
        const uint16_t *v = data;
        for (size_t i = 0; i < n; i++) {
            int16_t a = (int16_t)(v[i] & 0x7fffu);
            m = a > m ? a : m;
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            int16_t a = (int16_t)((p[2 * i] | p[2 * i + 1] << 8) & 0x7fff);
            m = a > m ? a : m;
        }
    }
    return m < (int16_t)inf;
}

static bool finite32(const void *data, size_t n) {
    const unsigned char *p = data;
    uint32_t bad = 0;
    if ((uintptr_t)p % 4 == 0) {
        const uint32_t *v = data;
        for (size_t i = 0; i < n; i++)
            bad |= (uint32_t)((v[i] & 0x7f800000u) == 0x7f800000u);
    } else {
        for (size_t i = 0; i < n; i++) {
            uint32_t w;
            memcpy(&w, p + 4 * i, 4);
            bad |= (uint32_t)((w & 0x7f800000u) == 0x7f800000u);
        }
    }
    return bad == 0;
}

// The load's checks read every tensor of the checkpoint; without this its pages would stay in
// the process: a pipeline stage would hold every other stage's blocks, and a run that computes no
// logits the LM head. The pages wholly inside t's bytes are dropped from this process's mapping
// (read-only and private, never written: they come back from the page cache or the file when the
// forward pass reads them), so a rank holds what its forward passes touch.
static void release_pages(const struct st_tensor *t) {
    uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE), a = (uintptr_t)t->data;
    uintptr_t lo = (a + pg - 1) / pg * pg, hi = (a + t->nbytes) / pg * pg;
    if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED); // advice: a failure changes nothing
}

// 0, or an error naming the file, the tensor and the first non-finite element
static int check_finite(const struct st_tensor *t, const char *file, struct ah_error *err) {
    size_t n = t->nbytes / st_dtype_size(t->dtype), at = n;
    uint16_t inf = t->dtype == ST_F16 ? 0x7c00 : 0x7f80;
    bool ok = t->dtype == ST_F32 ? finite32(t->data, n) : finite16(t->data, n, inf);
    if (ok) return 0;
    const unsigned char *p = t->data;
    float x = 0;
    if (t->dtype == ST_F32) {
        for (at = 0; at < n; at++) {
            memcpy(&x, p + 4 * at, 4);
            if (!isfinite(x)) break;
        }
    } else {
        uint16_t *tmp = malloc(t->nbytes + 2);
        if (!tmp) return ah_fail(err, AH_ENOMEM, "cannot allocate %zu bytes", t->nbytes);
        memcpy(tmp, p, t->nbytes);
        at = first_nonfinite16(tmp, n, inf);
        x = t->dtype == ST_F16 ? hc_f16_to_f32(tmp[at]) : hc_bf16_to_f32(tmp[at]);
        free(tmp);
    }
    return ah_fail(err, AH_EFORMAT,
                   "%s: tensor \"%s\": element %zu (flat index) is %s: the weights must be finite "
                   "(a damaged checkpoint?)",
                   file, t->name, at,
                   isnan(x) ? "NaN"
                   : x > 0  ? "+Inf"
                            : "-Inf");
}

// ---- binding: md_tensor_as and its per-dtype wrappers ----

// the dtypes a binding as `as` takes; 0, or the error naming the file, the tensor and its dtype
static int dtype_ok(const struct st_tensor *t, const char *file, enum md_as as,
                    struct ah_error *err) {
    enum st_dtype d = t->dtype;
    if (as == MD_AS_F32 && d != ST_F32 && d != ST_F16 && d != ST_BF16)
        return ah_fail(err, AH_EFORMAT, "%s: tensor \"%s\": dtype %s, expected F32, F16 or BF16",
                       file, t->name, st_dtype_name(d));
    if ((as == MD_AS_BF16 && d != ST_BF16) || (as == MD_AS_U8 && d != ST_U8))
        return ah_fail(err, AH_EFORMAT, "%s: tensor \"%s\": dtype %s, expected %s", file, t->name,
                       st_dtype_name(d), as == MD_AS_U8 ? "U8" : "BF16");
    if (as == MD_AS_FP8 && d != ST_F8_E4M3)
        return ah_fail(err, AH_EFORMAT,
                       "%s: tensor \"%s\": dtype %s, expected F8_E4M3 (config.json's "
                       "quantization_config makes it an FP8 weight; modules_to_not_convert keeps a "
                       "module as it is)",
                       file, t->name, st_dtype_name(d));
    return 0;
}

// 0, or the error naming the file, the tensor and its first NaN byte
static int check_fp8(const struct st_tensor *t, const char *file, struct ah_error *err) {
    const uint8_t *b = t->data;
    for (size_t i = 0; i < t->nbytes; i++)
        if ((b[i] & 0x7F) == 0x7F)
            return ah_fail(err, AH_EFORMAT,
                           "%s: tensor \"%s\": element %zu (flat index) is NaN: the weights must "
                           "be finite (a damaged checkpoint?)",
                           file, t->name, i);
    return 0;
}

// whether a binding as `as` hands out t's bytes in the mapping as they are (no copy)
static bool is_view(const struct st_tensor *t, enum md_as as) {
    return as == MD_AS_FP8 || as == MD_AS_U8 || (as == MD_AS_BF16 && (uintptr_t)t->data % 2 == 0) ||
           (as == MD_AS_F32 && t->dtype == ST_F32 && (uintptr_t)t->data % 4 == 0);
}

// t's values as a binding as `as` hands them out: the mapping itself, or a copy the modeldir owns
// (float32 widened from F16/BF16, or realigned); NULL when out of memory
static const void *values(struct modeldir *md, const struct st_tensor *t, enum md_as as) {
    size_t n = t->nbytes / st_dtype_size(t->dtype);
    if (is_view(t, as)) return t->data;
    if (as == MD_AS_BF16) {
        uint16_t *buf = own(md, t->nbytes);
        if (buf) memcpy(buf, t->data, t->nbytes);
        return buf;
    }
    float *buf = own(md, n * sizeof(float));
    const unsigned char *src = t->data;
    for (size_t i = 0; buf && i < n; i++) {
        uint16_t h;
        if (t->dtype == ST_F32) {
            memcpy(&buf[i], src + 4 * i, 4);
            continue;
        }
        memcpy(&h, src + 2 * i, 2);
        buf[i] = t->dtype == ST_F16 ? hc_f16_to_f32(h) : hc_bf16_to_f32(h);
    }
    return buf;
}

int md_tensor_as(struct modeldir *md, const char *name, int ndim, const int64_t *shape,
                 enum md_as as, bool read, const void **out, struct ah_error *err) {
    const struct st_tensor *t;
    const char *file;
    *out = NULL;
    int rc = locate(md, name, ndim, shape, &t, &file, err);
    if (rc == 0) rc = dtype_ok(t, file, as, err);
    if (rc < 0) return rc;
    if (!read) { // the header alone: no data page is touched
        *out = is_view(t, as) ? t->data : NULL;
        return 0;
    }
    if (as == MD_AS_U8) { // MXFP4 blocks and scales: every byte is a value
        *out = t->data;
        return 0;
    }
    rc = as == MD_AS_FP8 ? check_fp8(t, file, err) : check_finite(t, file, err);
    if (rc < 0) return rc;
    if (!(*out = values(md, t, as))) return -AH_ENOMEM;
    release_pages(t);
    return 0;
}

int md_tensor_f32(struct modeldir *md, const char *name, int ndim, const int64_t *shape,
                  const float **out, struct ah_error *err) {
    const void *p;
    int rc = md_tensor_as(md, name, ndim, shape, MD_AS_F32, true, &p, err);
    *out = p;
    return rc;
}

int md_tensor_bf16(struct modeldir *md, const char *name, int ndim, const int64_t *shape,
                   const uint16_t **out, struct ah_error *err) {
    const void *p;
    int rc = md_tensor_as(md, name, ndim, shape, MD_AS_BF16, true, &p, err);
    *out = p;
    return rc;
}

int md_tensor_fp8(struct modeldir *md, const char *name, int ndim, const int64_t *shape,
                  const uint8_t **out, struct ah_error *err) {
    const void *p;
    int rc = md_tensor_as(md, name, ndim, shape, MD_AS_FP8, true, &p, err);
    *out = p;
    return rc;
}

int md_tensor_u8(struct modeldir *md, const char *name, int ndim, const int64_t *shape,
                 const uint8_t **out, struct ah_error *err) {
    const void *p;
    int rc = md_tensor_as(md, name, ndim, shape, MD_AS_U8, true, &p, err);
    *out = p;
    return rc;
}
