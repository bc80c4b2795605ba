// tok_norm.c - the tokenizer's normalizers (see tokenizer_int.h): NFC, NFD, NFKC, NFKD,
// Lowercase, Replace, Prepend, Strip and Sequence, loaded from "normalizer" and applied to a
// section in place.
#define _POSIX_C_SOURCE 200809L
#include "io/tokenizer_int.h"

int tok_load_norm(struct tokenizer *t, const cJSON *j, struct norm *n, struct ah_error *err) {
    const char *type = jstr(j, "type");
    static const struct {
        const char *name;
        enum norm_kind k;
    } kinds[] = {{"Sequence", N_SEQ},    {"NFC", N_NFC},         {"NFD", N_NFD},
                 {"NFKC", N_NFKC},       {"NFKD", N_NFKD},       {"Lowercase", N_LOWER},
                 {"Replace", N_REPLACE}, {"Prepend", N_PREPEND}, {"Strip", N_STRIP}};
    size_t i = 0;
    while (i < sizeof kinds / sizeof kinds[0] && (!type || strcmp(type, kinds[i].name)))
        i++;
    if (i == sizeof kinds / sizeof kinds[0])
        return ah_fail(err, AH_EFORMAT,
                       "%s: \"normalizer\": type \"%s\" is not supported (expected Sequence, "
                       "NFC, NFD, NFKC, NFKD, Lowercase, Replace, Prepend or Strip)",
                       t->path, type ? type : "?");
    n->k = kinds[i].k;
    if (n->k == N_SEQ) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(j, "normalizers"), *e;
        n->n_kids = cJSON_GetArraySize(list);
        n->kids = calloc((size_t)n->n_kids + 1, sizeof *n->kids);
        if (!n->kids) return -AH_ENOMEM;
        int k = 0, rc;
        cJSON_ArrayForEach(e, list) {
            if ((rc = tok_load_norm(t, e, &n->kids[k++], err)) < 0) return rc;
        }
    } else if (n->k == N_REPLACE || n->k == N_PREPEND) {
        const char *c = jstr(j, n->k == N_PREPEND ? "prepend" : "content");
        size_t cl = c ? strlen(c) : 0;
        n->content = malloc(3 * cl + 1); // it goes into the text: valid UTF-8 only
        if (!n->content) return -AH_ENOMEM;
        n->content[tok_utf8_sanitize(c ? c : "", cl, n->content)] = '\0';
        if (n->k == N_REPLACE) {
            const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "pattern");
            const char *rx = jstr(p, "Regex"), *lit = jstr(p, "String");
            if (rx) return tok_regex_compile(t, &n->re, rx, "normalizer Replace", err);
            if (lit) return tok_regex_literal(t, &n->re, lit, "normalizer Replace", err);
            return ah_fail(err, AH_EFORMAT, "%s: normalizer Replace: expected a pattern", t->path);
        }
    } else if (n->k == N_STRIP) {
        n->left = jbool(j, "strip_left", true);
        n->right = jbool(j, "strip_right", true);
    }
    return 0;
}

void tok_norm_free(struct norm *n) {
    for (int i = 0; i < n->n_kids; i++)
        tok_norm_free(&n->kids[i]);
    free(n->kids);
    free(n->content);
    pcre2_code_free(n->re);
}

// Rust's char::is_whitespace (White_Space), what tokenizers' added tokens and Strip strip
static bool rust_space(int32_t c) {
    return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

// s[a, b) without White_Space at its end (tok_rtrim_end) or start (tok_rtrim_start)
size_t tok_rtrim_end(const char *s, size_t a, size_t b) {
    size_t len;
    while (b > a) {
        size_t c = b - 1;
        while (c > a && ((unsigned char)s[c] & 0xC0) == 0x80)
            c--;
        if (!rust_space(utf8_next(s + c, b - c, &len))) break;
        b = c;
    }
    return b;
}

size_t tok_rtrim_start(const char *s, size_t a, size_t b) {
    size_t len;
    while (a < b && rust_space(utf8_next(s + a, b - a, &len)))
        a += len;
    return a;
}

int tok_norm_apply(struct tokenizer *t, const struct norm *n, struct buf *s) {
    if (n->k == N_SEQ) {
        for (int i = 0; i < n->n_kids; i++) {
            int rc = tok_norm_apply(t, &n->kids[i], s);
            if (rc < 0) return rc;
        }
        return 0;
    }
    struct buf *o = &t->nb2;
    o->n = 0;
    if (n->k >= N_NFC && n->k <= N_NFKD) {
        static const int opts[] = {UTF8PROC_COMPOSE, UTF8PROC_DECOMPOSE,
                                   UTF8PROC_COMPOSE | UTF8PROC_COMPAT,
                                   UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT};
        utf8proc_uint8_t *res = NULL;
        utf8proc_ssize_t k =
            utf8proc_map((const utf8proc_uint8_t *)s->p, (utf8proc_ssize_t)s->n, &res,
                         (utf8proc_option_t)(UTF8PROC_STABLE | opts[n->k - N_NFC]));
        if (k < 0) return 0; // not valid UTF-8: cannot happen after sanitizing; leave as is
        s->n = 0;
        int rc = buf_put(s, res, (size_t)k);
        free(res);
        return rc;
    }
    int rc = 0;
    if (n->k == N_LOWER) {
        for (size_t i = 0; i < s->n && rc == 0;) {
            size_t len;
            char tmp[4];
            int32_t cp = utf8_next(s->p + i, s->n - i, &len);
            if (cp == 0x130) // Rust's full lowercase: the one character with two (i, U+0307)
                rc = buf_put(o, "i\xcc\x87", 3);
            else
                rc = buf_put(o, tmp, utf8_put(tmp, utf8proc_tolower(cp)));
            i += len;
        }
    } else if (n->k == N_PREPEND) {
        rc = s->n ? buf_put(o, n->content, strlen(n->content)) : 0;
        if (rc == 0) rc = buf_put(o, s->p, s->n);
    } else if (n->k == N_STRIP) {
        size_t a = n->left ? tok_rtrim_start(s->p, 0, s->n) : 0;
        size_t b = n->right ? tok_rtrim_end(s->p, a, s->n) : s->n;
        rc = buf_put(o, s->p + a, b - a);
    } else { // Replace: every match by content
        if ((rc = tok_regex_spans(t, n->re, s->p, s->n, &t->spans)) < 0) return rc;
        for (size_t i = 0; i < t->spans.n && rc == 0; i++) {
            const struct span *sp = &t->spans.v[i];
            rc = sp->match ? buf_put(o, n->content, strlen(n->content))
                           : buf_put(o, s->p + sp->a, sp->b - sp->a);
        }
    }
    if (rc < 0) return rc;
    s->n = 0;
    return buf_put(s, o->p ? o->p : "", o->n);
}
