// textin.c - streaming text corpora (see textin.h)
#define _POSIX_C_SOURCE 200809L // defines: glob, stat
#include "io/textin.h"

#include "model/ah.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

// ---- reading: gzread into a buffer, lines cut with memchr (a NUL byte is data, not an end) ----

struct reader {
    gzFile f;
    const char *path;
    char *buf; // [a, b) not yet handed out
    size_t cap, a, b;
    size_t scanned; // buf[a, scanned) holds no '\n'
    bool eof;
};

// More bytes into the buffer; r->eof at the end of the stream. A gzip stream that stops early
// (zlib's Z_BUF_ERROR "unexpected end of file") is an error, not an end.
static int fill(struct reader *r, long lineno, struct ah_error *err) {
    if (r->a > 0) {
        memmove(r->buf, r->buf + r->a, r->b - r->a);
        r->b -= r->a;
        r->scanned -= r->a;
        r->a = 0;
    }
    if (r->cap - r->b < 65536) {
        size_t c = r->cap * 2 + 65536;
        char *p = realloc(r->buf, c);
        if (!p)
            return ah_fail(err, AH_ENOMEM, "%s: line %ld: cannot allocate %zu bytes for the line",
                           r->path, lineno, c);
        r->buf = p;
        r->cap = c;
    }
    size_t room = r->cap - r->b;
    int k = gzread(r->f, r->buf + r->b, (unsigned)(room > 1u << 30 ? 1u << 30 : room));
    int e = Z_OK;
    const char *msg = gzerror(r->f, &e);
    if (e == Z_BUF_ERROR)
        return ah_fail(err, AH_EFORMAT, "%s: the gzip stream ends early (a truncated .gz file)",
                       r->path);
    if (k < 0 || (e != Z_OK && e != Z_STREAM_END))
        return ah_fail(err, AH_EIO, "%s: line %ld: read error: %s", r->path, lineno,
                       e == Z_ERRNO ? strerror(errno) : msg);
    if (k == 0) r->eof = true;
    r->b += (size_t)k;
    return 0;
}

// The next line into *s, *n (without its '\n'): 1, 0 at the end, or a negative AH_E* code.
static int next_line(struct reader *r, const char **s, size_t *n, long lineno,
                     struct ah_error *err) {
    for (;;) {
        char *nl = r->b > r->scanned ? memchr(r->buf + r->scanned, '\n', r->b - r->scanned) : NULL;
        if (nl || (r->eof && r->b > r->a)) {
            size_t end = nl ? (size_t)(nl - r->buf) : r->b;
            *s = r->buf + r->a;
            *n = end - r->a;
            r->a = r->scanned = nl ? end + 1 : end;
            return 1;
        }
        if (r->eof) return 0;
        r->scanned = r->b;
        int rc = fill(r, lineno, err);
        if (rc < 0) return rc;
    }
}

static int no_nul(const char *s, size_t n, const char *where, struct ah_error *err) {
    const char *z = memchr(s, '\0', n);
    if (!z) return 0;
    return ah_fail(err, AH_EFORMAT, "%s: a NUL byte at byte %zu: not text (a binary file?)", where,
                   (size_t)(z - s) + 1);
}

// ---- JSON Lines ----

// the first key that an object of j names twice, or NULL
static const char *duplicate_key(const cJSON *j) {
    const cJSON *e, *f;
    for (e = j ? j->child : NULL; e; e = e->next) {
        for (f = cJSON_IsObject(j) ? j->child : NULL; f != e && f; f = f->next)
            if (!strcmp(f->string, e->string)) return e->string;
        const char *d = duplicate_key(e);
        if (d) return d;
    }
    return NULL;
}

cJSON *text_parse_json(const char *line, size_t len, const char *where, struct ah_error *err) {
    if (no_nul(line, len, where, err) < 0) return NULL;
    for (const char *q = line; (q = memchr(q, '\\', len - (size_t)(q - line))); q += 2) {
        if ((size_t)(q - line) + 6 <= len && !memcmp(q, "\\u0000", 6)) {
            ah_fail(err, AH_EFORMAT, "%s: \\u0000 (a NUL character) in a JSON string: not text",
                    where);
            return NULL;
        }
        if ((size_t)(q - line) + 1 >= len) break;
    }
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(line, len, &end, 0);
    if (!j) {
        const char *at = end && end >= line && end <= line + len ? end : line;
        int k = (int)(line + len - at < 20 ? line + len - at : 20);
        ah_fail(err, AH_EFORMAT, "%s: malformed JSON near \"%.*s\" (expected a JSON object a line)",
                where, k, at);
        return NULL;
    }
    size_t used = (size_t)(end - line);
    while (used < len && strchr(" \t\r\n", line[used]))
        used++;
    const char *dup = used == len ? duplicate_key(j) : NULL;
    if (used < len) {
        int k = (int)(len - used < 20 ? len - used : 20);
        ah_fail(err, AH_EFORMAT,
                "%s: \"%.*s\" after the JSON value at byte %zu (one JSON value a line)", where, k,
                line + used, used + 1);
    } else if (dup) {
        ah_fail(err, AH_EFORMAT, "%s: key \"%s\" appears twice in one object", where, dup);
    } else {
        return j;
    }
    cJSON_Delete(j);
    return NULL;
}

// ---- files ----

// "-" is standard input; regular files, FIFOs and character devices are read as streams; a
// folder or another kind of file is refused
static gzFile open_text(const char *path, struct ah_error *err, int *rc) {
    struct stat sb;
    *rc = 0;
    if (strcmp(path, "-") && stat(path, &sb) == 0 && !S_ISREG(sb.st_mode) &&
        !S_ISFIFO(sb.st_mode) && !S_ISCHR(sb.st_mode)) {
        *rc = ah_fail(err, AH_EINVAL, "%s: %s, expected a file%s", path,
                      S_ISDIR(sb.st_mode) ? "a folder" : "not a regular file",
                      S_ISDIR(sb.st_mode) ? " (a folder's files: a glob such as DIR/*.txt)" : "");
        return NULL;
    }
    gzFile f = strcmp(path, "-") ? gzopen(path, "rb") : gzdopen(dup(0), "rb");
    if (!f && errno == ENAMETOOLONG)
        *rc =
            ah_fail(err, AH_EINVAL, "%.200s...: a path of %zu bytes, longer than the system allows",
                    path, strlen(path));
    else if (!f)
        *rc = ah_fail(err, errno == ENOENT ? AH_ENOENT : AH_EIO, "%s: cannot open: %s", path,
                      strerror(errno));
    return f;
}

// the whole file, one prompt
static int read_whole(struct text_source *s, struct reader *r, text_cb cb, void *u,
                      struct ah_error *err) {
    int rc = 0;
    while (!r->eof && rc == 0) {
        r->scanned = r->b;
        rc = fill(r, 1, err);
    }
    if (rc == 0) rc = no_nul(r->buf ? r->buf : "", r->b, r->path, err);
    if (rc == 0) rc = cb(u, r->buf ? r->buf : "", r->b, r->path, s->next_index++);
    return rc;
}

static int read_file(struct text_source *s, const char *path, text_cb cb, void *u,
                     struct ah_error *err) {
    int rc;
    struct reader r = {.path = path};
    if (!(r.f = open_text(path, err, &rc))) return rc;
    gzbuffer(r.f, 1 << 17);
    size_t wcap = strlen(path) + 32;
    char *where = malloc(wcap);
    if (!where) {
        gzclose(r.f);
        return ah_fail(err, AH_ENOMEM, "%s: cannot allocate %zu bytes", path, wcap);
    }
    bool jsonl = !s->per_file && !s->raw_lines && is_jsonl(path);
    if (s->per_file && !is_jsonl(path)) {
        rc = read_whole(s, &r, cb, u, err);
        goto done;
    }
    const char *line;
    size_t len;
    for (long lineno = 1; (rc = next_line(&r, &line, &len, lineno, err)) > 0; lineno++) {
        rc = 0;
        if (len && line[len - 1] == '\r') len--;
        snprintf(where, wcap, "%s: line %ld", path, lineno);
        long index = s->next_index++;
        if ((rc = no_nul(line, len, where, err)) < 0) break;
        if (!jsonl || len == 0) {
            if ((rc = cb(u, line, len, where, index)) < 0) break;
            continue;
        }
        cJSON *j = text_parse_json(line, len, where, err);
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, s->field);
        if (!j) {
            rc = err ? err->code : -AH_EFORMAT;
        } else if (!cJSON_IsObject(j)) {
            rc = ah_fail(err, AH_EINVAL, "%s: not a JSON object", where);
        } else if (!cJSON_IsString(v)) {
            rc = ah_fail(err, AH_EINVAL, "%s: expected a string field \"%s\"", where, s->field);
        } else {
            rc = cb(u, v->valuestring, strlen(v->valuestring), where, index);
        }
        cJSON_Delete(j);
        if (rc < 0) break;
    }
done:
    free(where);
    free(r.buf);
    gzclose(r.f);
    return rc < 0 ? rc : 0;
}

int text_read(struct text_source *s, const char *path_or_glob, text_cb cb, void *u,
              struct ah_error *err) {
    struct stat sb; // a path that exists is itself, even with *?[ in its name
    if (!strpbrk(path_or_glob, "*?[") || stat(path_or_glob, &sb) == 0)
        return read_file(s, path_or_glob, cb, u, err);
    glob_t g;
    int r = glob(path_or_glob, 0, NULL, &g);
    if (r == GLOB_NOMATCH || (r == 0 && g.gl_pathc == 0)) {
        if (r == 0) globfree(&g);
        return ah_fail(err, AH_ENOENT, "%s: no such file, and as a pattern it matches no file",
                       path_or_glob);
    }
    if (r != 0) return ah_fail(err, AH_EIO, "%s: cannot expand the pattern", path_or_glob);
    int rc = 0;
    for (size_t i = 0; i < g.gl_pathc && rc == 0; i++) // glob sorts its matches
        rc = read_file(s, g.gl_pathv[i], cb, u, err);
    globfree(&g);
    return rc;
}
