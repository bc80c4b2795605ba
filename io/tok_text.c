// tok_text.c - the tokenizer's text primitives (see tokenizer_int.h): WHATWG UTF-8 decoding, the
// id list, and regexes: PCRE2 with JavaScript's \s, \d, \w (transformers.js compiles these with
// the u flag), their match spans, and the message naming a regex that gave up.
#define _POSIX_C_SOURCE 200809L
#include "io/tokenizer_int.h"

#include <stdio.h>

// ----------------------------------------------------------------------------
// UTF-8

size_t tok_utf8_sanitize(const char *s, size_t n, char *out) {
    static const char rep[3] = {(char)0xEF, (char)0xBF, (char)0xBD};
    const unsigned char *u = (const unsigned char *)s;
    size_t o = 0, start = 0;
    int need = 0, seen = 0;
    unsigned lower = 0x80, upper = 0xBF;
    for (size_t i = 0; i < n; i++) {
        unsigned b = u[i];
        if (need == 0) {
            start = i;
            if (b < 0x80) {
                out[o++] = (char)b;
            } else if (b >= 0xC2 && b <= 0xDF) {
                need = 1;
            } else if (b >= 0xE0 && b <= 0xEF) {
                lower = b == 0xE0 ? 0xA0 : 0x80;
                upper = b == 0xED ? 0x9F : 0xBF;
                need = 2;
            } else if (b >= 0xF0 && b <= 0xF4) {
                lower = b == 0xF0 ? 0x90 : 0x80;
                upper = b == 0xF4 ? 0x8F : 0xBF;
                need = 3;
            } else {
                memcpy(out + o, rep, 3), o += 3;
            }
            continue;
        }
        if (b < lower || b > upper) { // the subpart so far is invalid; b starts over
            need = seen = 0;
            lower = 0x80, upper = 0xBF;
            memcpy(out + o, rep, 3), o += 3;
            i--;
            continue;
        }
        lower = 0x80, upper = 0xBF;
        if (++seen == need) {
            memcpy(out + o, s + start, (size_t)need + 1);
            o += (size_t)need + 1;
            need = seen = 0;
        }
    }
    if (need) memcpy(out + o, rep, 3), o += 3;
    return o;
}

int tok_ids_push(struct tok_ids *ids, int64_t id) {
    if (grow_one((void **)&ids->v, ids->n, &ids->cap, sizeof *ids->v) < 0) return -AH_ENOMEM;
    ids->v[ids->n++] = id;
    return 0;
}

void tok_ids_free(struct tok_ids *ids) {
    free(ids->v);
    memset(ids, 0, sizeof *ids);
}

// JavaScript's \s: WhiteSpace and LineTerminator
#define JS_SPACE_CLASS                                                                          \
    "\\t\\n\\x0B\\f\\r \\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}" \
    "\\x{3000}\\x{FEFF}"

// ----------------------------------------------------------------------------
// regexes: PCRE2 with JavaScript's \s, \d, \w (transformers.js compiles these with the u flag)

static const char *const ASCII_CONTRACTIONS[2] = {
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)",
    "(?:'([sS]|[tT]|[rR][eE]|[vV][eE]|[mM]|[lL][lL]|[dD]))"}; // as transformers.js rewrites it

static int regex_translate(const char *src, struct buf *out) {
    const char *hit = strstr(src, ASCII_CONTRACTIONS[0]);
    bool in_class = false;
    for (const char *p = src; *p; p++) {
        if (p == hit) {
            if (buf_put(out, ASCII_CONTRACTIONS[1], strlen(ASCII_CONTRACTIONS[1])) < 0)
                return -AH_ENOMEM;
            p += strlen(ASCII_CONTRACTIONS[0]) - 1;
            continue;
        }
        const char *rep = NULL;
        if (*p == '\\' && p[1]) {
            char c = p[1];
            if (c == 's') rep = in_class ? JS_SPACE_CLASS : "[" JS_SPACE_CLASS "]";
            if (c == 'S' && !in_class) rep = "[^" JS_SPACE_CLASS "]";
            if (c == 'd') rep = in_class ? "0-9" : "[0-9]";
            if (c == 'D' && !in_class) rep = "[^0-9]";
            if (c == 'w') rep = in_class ? "A-Za-z0-9_" : "[A-Za-z0-9_]";
            if (c == 'W' && !in_class) rep = "[^A-Za-z0-9_]";
            if (rep) {
                if (buf_put(out, rep, strlen(rep)) < 0) return -AH_ENOMEM;
            } else if (buf_put(out, p, 2) < 0) {
                return -AH_ENOMEM;
            }
            p++;
            continue;
        }
        if (*p == '[' && !in_class) {
            in_class = true;
            if (buf_put(out, p, 1) < 0) return -AH_ENOMEM;
            if (p[1] == '^') { // "[^" and "[]" or "[^]": a leading ] is literal
                if (buf_put(out, ++p, 1) < 0) return -AH_ENOMEM;
            }
            if (p[1] == ']' && buf_put(out, ++p, 1) < 0) return -AH_ENOMEM;
            continue;
        }
        if (*p == ']' && in_class) in_class = false;
        if (buf_put(out, p, 1) < 0) return -AH_ENOMEM;
    }
    return buf_put(out, "", 1); // NUL
}

static int regex_name(struct tokenizer *t, const pcre2_code *re, const char *where,
                      const char *kind, const char *pattern) {
    struct regex_name *v = realloc(t->rx, (size_t)(t->n_rx + 1) * sizeof *v);
    if (!v) return -AH_ENOMEM;
    t->rx = v;
    size_t n = strlen(where) + strlen(kind) + strlen(pattern) + 8;
    char *w = malloc(n);
    if (!w) return -AH_ENOMEM;
    snprintf(w, n, "%s %s %s", where, kind, pattern);
    t->rx[t->n_rx++] = (struct regex_name){re, w};
    return 0;
}

int tok_regex_compile(struct tokenizer *t, pcre2_code **re, const char *pattern, const char *where,
                      struct ah_error *err) {
    struct buf b = {0};
    if (regex_translate(pattern, &b) < 0) return -AH_ENOMEM;
    int code;
    PCRE2_SIZE at;
    *re = pcre2_compile((PCRE2_SPTR)b.p, PCRE2_ZERO_TERMINATED, PCRE2_UTF, &code, &at, NULL);
    free(b.p);
    if (!*re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        return ah_fail(err, AH_EFORMAT, "%s: %s: regex %s: %s at offset %zu", t->path, where,
                       pattern, (const char *)msg, (size_t)at);
    }
    pcre2_jit_compile(*re, PCRE2_JIT_COMPLETE); // falls back to the interpreter if unavailable
    return regex_name(t, *re, where, "regex", pattern);
}

// a string pattern: every ASCII punctuation character escaped
int tok_regex_literal(struct tokenizer *t, pcre2_code **re, const char *s, const char *where,
                      struct ah_error *err) {
    struct buf b = {0};
    int rc = 0;
    for (const char *p = s; rc == 0 && *p; p++) {
        unsigned char c = (unsigned char)*p;
        bool punct = c < 0x80 &&
                     !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'));
        if (punct) rc = buf_put(&b, "\\", 1);
        if (rc == 0) rc = buf_put(&b, p, 1);
    }
    if (rc == 0) rc = buf_put(&b, "", 1);
    if (rc < 0) {
        free(b.p);
        return -AH_ENOMEM;
    }
    int code;
    PCRE2_SIZE at;
    *re = pcre2_compile((PCRE2_SPTR)b.p, b.n - 1, PCRE2_UTF, &code, &at, NULL);
    free(b.p);
    if (!*re) return ah_fail(err, AH_EFORMAT, "%s: %s: bad string pattern", t->path, where);
    return regex_name(t, *re, where, "string", s);
}

int tok_spans_add(struct spans *sp, size_t a, size_t b, bool match) {
    if (grow_one((void **)&sp->v, sp->n, &sp->cap, sizeof *sp->v) < 0) return -AH_ENOMEM;
    sp->v[sp->n++] = (struct span){a, b, match};
    return 0;
}

static int regex_gave_up(struct tokenizer *t, const pcre2_code *re, int rc, size_t n, size_t at) {
    const char *what = "a regex";
    for (int i = 0; i < t->n_rx; i++)
        if (t->rx[i].re == re) what = t->rx[i].what;
    PCRE2_UCHAR msg[160];
    pcre2_get_error_message(rc, msg, sizeof msg);
    snprintf(t->error, sizeof t->error,
             "%s: %s: PCRE2 gave up at byte %zu of a %zu-byte piece of text: %s (limits: %u "
             "matches, depth %u); the tokenizer's ids for this text are undefined",
             t->path, what, at, n, (const char *)msg, TOK_MATCH_LIMIT, TOK_DEPTH_LIMIT);
    return -AH_EINVAL;
}

// spans covering s: gaps (match false) and matches (match true), in order, none empty. Returns
// 0, -AH_ENOMEM, or 1 when PCRE2 gave up (*why: its code, *at_out: where), never taken for "no
// match".
int tok_spans_of(const pcre2_code *re, pcre2_match_data *md, pcre2_match_context *mctx,
                 const char *s, size_t n, struct spans *sp, int *why, size_t *at_out) {
    sp->n = 0;
    size_t at = 0, prev = 0;
    while (at <= n) {
        int rc = pcre2_match(re, (PCRE2_SPTR)s, n, at, PCRE2_NO_UTF_CHECK, md, mctx);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            *why = rc;
            *at_out = at;
            return 1;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t a = ov[0], b = ov[1];
        if (a > prev && tok_spans_add(sp, prev, a, false) < 0) return -AH_ENOMEM;
        if (b > a && tok_spans_add(sp, a, b, true) < 0) return -AH_ENOMEM;
        prev = b;
        if (b > a) {
            at = b;
        } else { // empty: advance one code point
            if (a >= n) break;
            size_t len;
            utf8_next(s + a, n - a, &len);
            at = a + len;
        }
    }
    if (n > prev && tok_spans_add(sp, prev, n, false) < 0) return -AH_ENOMEM;
    return 0;
}

// tok_spans_of with the tokenizer's match data and limits; PCRE2 giving up (its match or depth
// limit, on a regex that backtracks without end) is an error naming the regex.
int tok_regex_spans(struct tokenizer *t, const pcre2_code *re, const char *s, size_t n,
                    struct spans *sp) {
    size_t at = 0;
    int why = 0, rc = tok_spans_of(re, t->md, t->mctx, s, n, sp, &why, &at);
    return rc == 1 ? regex_gave_up(t, re, why, n, at) : rc;
}
