// fingerprint.c - see fingerprint.h. Cheap on any checkpoint size: a stat and the header of each
// file (a few MB at most), never the tensor data.
#define _POSIX_C_SOURCE 200809L // defines: pread, struct stat's st_mtim
#include "io/fingerprint.h"

#include "model/ah.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define HEADER_MAX ((uint64_t)100 << 20) // safetensors' own limit on the JSON header

static uint64_t fnv(uint64_t h, const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static bool ends_with(const char *s, const char *tail) {
    size_t a = strlen(s), b = strlen(tail);
    return a >= b && !strcmp(s + a - b, tail);
}

// checksum of the first `bytes` of fd (a safetensors file: its length word and header)
static int checksum(int fd, const char *path, off_t size, uint64_t *out, struct ah_error *err) {
    uint64_t h = 1469598103934665603ull, want = (uint64_t)size;
    unsigned char len[8];
    if (ends_with(path, ".safetensors")) {
        if (size < 8 || pread(fd, len, 8, 0) != 8)
            return ah_fail(err, AH_EFORMAT, "%s: too short for a safetensors file", path);
        uint64_t n = 0;
        for (int i = 7; i >= 0; i--)
            n = n << 8 | len[i];
        if (n > HEADER_MAX || n > (uint64_t)size - 8)
            return ah_fail(err, AH_EFORMAT, "%s: header length %llu is out of range", path,
                           (unsigned long long)n);
        want = 8 + n;
    }
    unsigned char buf[1 << 16];
    for (uint64_t at = 0; at < want;) {
        size_t step = want - at < sizeof buf ? (size_t)(want - at) : sizeof buf;
        ssize_t r = pread(fd, buf, step, (off_t)at);
        if (r <= 0)
            return ah_fail(err, AH_EIO, "%s: read error: %s", path,
                           r < 0 ? strerror(errno) : "EOF");
        h = fnv(h, buf, (size_t)r);
        at += (uint64_t)r;
    }
    *out = h;
    return 0;
}

static int one_file(cJSON *arr, const char *path, struct ah_error *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        int e = errno;
        if (fd >= 0) close(fd);
        return ah_fail(err, AH_EIO, "%s: cannot open: %s", path, strerror(e));
    }
    uint64_t h = 0;
    int rc = checksum(fd, path, st.st_size, &h, err);
    close(fd);
    if (rc < 0) return rc;
    const char *slash = strrchr(path, '/');
    char num[3][32];
    snprintf(num[0], sizeof num[0], "%lld", (long long)st.st_size);
    snprintf(num[1], sizeof num[1], "%lld%09ld", (long long)st.st_mtim.tv_sec,
             (long)st.st_mtim.tv_nsec);
    snprintf(num[2], sizeof num[2], "%016llx", (unsigned long long)h);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "file", slash ? slash + 1 : path);
    cJSON_AddStringToObject(o, "size", num[0]); // strings: JSON numbers lose 64-bit precision
    cJSON_AddStringToObject(o, "mtime_ns", num[1]);
    cJSON_AddStringToObject(o, "checksum", num[2]);
    cJSON_AddItemToArray(arr, o);
    return 0;
}

int fp_make(const char *const *files, int n, char **json, struct ah_error *err) {
    cJSON *arr = cJSON_CreateArray();
    int rc = arr ? 0 : ah_fail(err, AH_ENOMEM, "model fingerprint: out of memory");
    for (int i = 0; rc == 0 && i < n; i++)
        rc = one_file(arr, files[i], err);
    *json = rc == 0 ? cJSON_PrintUnformatted(arr) : NULL;
    if (rc == 0 && !*json) rc = ah_fail(err, AH_ENOMEM, "model fingerprint: out of memory");
    cJSON_Delete(arr);
    return rc;
}

static const char *field(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : "?";
}

static const cJSON *find(const cJSON *arr, const char *file) {
    const cJSON *o;
    cJSON_ArrayForEach(o, arr) {
        if (!strcmp(field(o, "file"), file)) return o;
    }
    return NULL;
}

// appends "FILE: what changed" for o (in a) against its namesake in b to msg
static void describe(char *msg, size_t cap, const cJSON *o, const cJSON *b, const char *gone) {
    static const char *const keys[3] = {"size", "mtime_ns", "checksum"};
    static const char *const names[3] = {"size", "modification time", "header checksum"};
    const char *f = field(o, "file");
    const cJSON *x = find(b, f);
    char what[400] = "";
    for (int k = 0; x && k < 3; k++) {
        if (!strcmp(field(o, keys[k]), field(x, keys[k]))) continue;
        size_t l = strlen(what);
        snprintf(what + l, sizeof what - l, "%s%s %s -> %s", l ? ", " : "", names[k],
                 field(o, keys[k]), field(x, keys[k]));
    }
    if (x && !what[0]) return;
    size_t l = strlen(msg);
    snprintf(msg + l, cap - l, "%s%s%s%s", l ? "; " : "", f, x ? ": " : " ", x ? what : gone);
}

int fp_compare(const char *old, const char *now, const char *what, struct ah_error *err) {
    cJSON *a = cJSON_Parse(old), *b = cJSON_Parse(now);
    char msg[900] = "";
    const cJSON *o;
    if (!cJSON_IsArray(a) || !cJSON_IsArray(b)) {
        cJSON_Delete(a);
        cJSON_Delete(b);
        return ah_fail(err, AH_EFORMAT, "%s: unreadable model fingerprint", what);
    }
    cJSON_ArrayForEach(o, a) describe(msg, sizeof msg, o, b, "is gone");
    cJSON_ArrayForEach(o, b) {
        if (!find(a, field(o, "file"))) describe(msg, sizeof msg, o, a, "is new");
    }
    cJSON_Delete(a);
    cJSON_Delete(b);
    if (!msg[0]) return 0;
    return ah_fail(err, AH_EINVAL,
                   "%s: the model's files changed since this output was started (%s); --resume "
                   "would mix two models in one output: use --overwrite to start again",
                   what, msg);
}
