// textin.c - streaming text corpora (see textin.h)
#define _POSIX_C_SOURCE 200809L // defines: glob
#include "io/textin.h"

#include "model/ah.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

static bool is_jsonl(const char *path) {
    return ends_with(path, ".jsonl") || ends_with(path, ".json") || ends_with(path, ".jsonl.gz") ||
           ends_with(path, ".json.gz");
}

// a line of the file into *line (grown as needed); 0 at the end, -1 on a read error
static long next_line(gzFile f, char **line, size_t *cap) {
    size_t n = 0;
    for (;;) {
        if (n + 2 > *cap) {
            size_t c = *cap ? *cap * 2 : 4096;
            char *p = realloc(*line, c);
            if (!p) return -2;
            *line = p;
            *cap = c;
        }
        if (!gzgets(f, *line + n, (int)(*cap - n > 1 << 30 ? 1 << 30 : *cap - n))) {
            int e;
            gzerror(f, &e);
            return e != Z_OK && e != Z_BUF_ERROR ? -1 : (long)n;
        }
        n += strlen(*line + n);
        if (n && (*line)[n - 1] == '\n') return (long)n;
        if (gzeof(f)) return (long)n;
    }
}

static int read_file(struct text_source *s, const char *path, text_cb cb, void *u,
                     struct ah_error *err) {
    gzFile f = strcmp(path, "-") ? gzopen(path, "rb") : gzdopen(dup(0), "rb"); // "-": stdin
    if (!f) return ah_fail(err, AH_ENOENT, "%s: cannot open: %s", path, strerror(errno));
    gzbuffer(f, 1 << 17);
    char *line = NULL, where[4200];
    size_t cap = 0;
    int rc = 0;
    bool jsonl = !s->per_file && !s->raw_lines && is_jsonl(path);
    if (s->per_file && !is_jsonl(path)) { // the whole file, one prompt
        size_t n = 0;
        for (;;) {
            if (n + 65536 > cap) {
                char *p = realloc(line, cap = cap * 2 + 65536);
                if (!p) {
                    rc = -AH_ENOMEM;
                    break;
                }
                line = p;
            }
            int k = gzread(f, line + n, 65536);
            if (k < 0) {
                rc = ah_fail(err, AH_EIO, "%s: read error (a damaged gzip stream?)", path);
                break;
            }
            if (k == 0) break;
            n += (size_t)k;
        }
        if (rc == 0) rc = cb(u, line ? line : "", n, path, s->next_index++);
        free(line);
        gzclose(f);
        return rc;
    }
    for (long lineno = 1;; lineno++) {
        long n = next_line(f, &line, &cap);
        if (n == -2) {
            rc = -AH_ENOMEM;
            break;
        }
        if (n < 0) {
            rc = ah_fail(err, AH_EIO, "%s:%ld: read error (a damaged gzip stream?)", path, lineno);
            break;
        }
        if (n == 0) break;
        size_t len = (size_t)n;
        if (line[len - 1] == '\n') len--;
        if (len && line[len - 1] == '\r') len--;
        snprintf(where, sizeof where, "%s: line %ld", path, lineno);
        long index = s->next_index++;
        if (!jsonl || len == 0) {
            if ((rc = cb(u, line, len, where, index)) < 0) break;
            continue;
        }
        cJSON *j = cJSON_ParseWithLength(line, len);
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, s->field);
        if (!cJSON_IsObject(j)) {
            rc = ah_fail(err, AH_EINVAL, "%s: not a JSON object", where);
        } else if (!cJSON_IsString(v)) {
            rc = ah_fail(err, AH_EINVAL, "%s: expected a string field \"%s\"", where, s->field);
        } else {
            rc = cb(u, v->valuestring, strlen(v->valuestring), where, index);
        }
        cJSON_Delete(j);
        if (rc < 0) break;
    }
    free(line);
    gzclose(f);
    return rc;
}

int text_read(struct text_source *s, const char *path_or_glob, text_cb cb, void *u,
              struct ah_error *err) {
    if (!strpbrk(path_or_glob, "*?[")) return read_file(s, path_or_glob, cb, u, err);
    glob_t g;
    int r = glob(path_or_glob, 0, NULL, &g);
    if (r == GLOB_NOMATCH || (r == 0 && g.gl_pathc == 0)) {
        if (r == 0) globfree(&g);
        return ah_fail(err, AH_ENOENT, "%s: the pattern matches no file", path_or_glob);
    }
    if (r != 0) return ah_fail(err, AH_EIO, "%s: cannot expand the pattern", path_or_glob);
    int rc = 0;
    for (size_t i = 0; i < g.gl_pathc && rc == 0; i++) // glob sorts its matches
        rc = read_file(s, g.gl_pathv[i], cb, u, err);
    globfree(&g);
    return rc;
}
