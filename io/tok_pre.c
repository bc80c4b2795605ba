// tok_pre.c - the tokenizer's pre-tokenizers (see tokenizer_int.h): Split (a regex or a string,
// any of its behaviours), ByteLevel, Digits, Metaspace and a Sequence of them, loaded from
// "pre_tokenizer" and applied piece by piece (in -> out).
#define _POSIX_C_SOURCE 200809L
#include "io/tokenizer_int.h"

int tok_load_pre(struct tokenizer *t, const cJSON *j, struct pre *p, bool nested,
                 struct ah_error *err) {
    const char *type = jstr(j, "type");
    if (type && !strcmp(type, "Sequence") && !nested) {
        p->k = P_SEQ;
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(j, "pretokenizers"), *e;
        p->n_kids = cJSON_GetArraySize(list);
        p->kids = calloc((size_t)p->n_kids + 1, sizeof *p->kids);
        if (!p->kids) return -AH_ENOMEM;
        int k = 0, rc;
        cJSON_ArrayForEach(e, list) {
            if ((rc = tok_load_pre(t, e, &p->kids[k++], true, err)) < 0) return rc;
        }
        return 0;
    }
    if (type && !strcmp(type, "Split")) {
        p->k = P_SPLIT;
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(j, "pattern");
        const char *rx = jstr(pat, "Regex"), *lit = jstr(pat, "String"), *bh = jstr(j, "behavior");
        static const char *const names[] = {"Removed", "Isolated", "MergedWithPrevious",
                                            "MergedWithNext", "Contiguous"};
        int b = 0;
        while (b < 5 && (!bh || strcmp(bh, names[b])))
            b++;
        if (b == 5)
            return ah_fail(err, AH_EFORMAT,
                           "%s: pre_tokenizer Split: behavior \"%s\" is not one of Removed, "
                           "Isolated, MergedWithPrevious, MergedWithNext, Contiguous",
                           t->path, bh ? bh : "?");
        p->behavior = (enum split_behavior)b;
        p->invert = jbool(j, "invert", false);
        if (rx) return tok_regex_compile(t, &p->re, rx, "pre_tokenizer Split", err);
        if (lit) return tok_regex_literal(t, &p->re, lit, "pre_tokenizer Split", err);
        return ah_fail(err, AH_EFORMAT, "%s: pre_tokenizer Split: expected a pattern", t->path);
    }
    if (type && !strcmp(type, "ByteLevel")) {
        p->k = P_BYTELEVEL;
        p->add_prefix_space = jbool(j, "add_prefix_space", false);
        p->matches_only = true;
        if (!jbool(j, "use_regex", true)) return 0;
        return tok_regex_compile(
            t, &p->re,
            "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|"
            "\\s+(?!\\S)|\\s+",
            "pre_tokenizer ByteLevel", err);
    }
    if (type && !strcmp(type, "Digits")) {
        p->k = P_DIGITS;
        p->matches_only = true;
        return tok_regex_compile(
            t, &p->re, jbool(j, "individual_digits", false) ? "[^\\d]+|\\d" : "[^\\d]+|\\d+",
            "pre_tokenizer Digits", err);
    }
    if (type && !strcmp(type, "Metaspace"))
        return tok_load_metaspace(t, j, p, "pre_tokenizer", err);
    return ah_fail(err, AH_EFORMAT,
                   "%s: \"pre_tokenizer\": type \"%s\" is not supported (expected Sequence, "
                   "Split, ByteLevel, Digits or Metaspace%s)",
                   t->path, type ? type : "?", nested ? "; Sequences do not nest" : "");
}

void tok_pre_free(struct pre *p) {
    for (int i = 0; i < p->n_kids; i++)
        tok_pre_free(&p->kids[i]);
    free(p->kids);
    pcre2_code_free(p->re);
}

// one character (a JSON string of exactly one code point) into ch; false if it is not one
bool tok_one_char(const cJSON *j, const char *key, char ch[5], size_t *ch_len) {
    const char *s = jstr(j, key);
    size_t n = s ? strlen(s) : 0, len = 0;
    if (n == 0 || n > 4) return false;
    int32_t cp = utf8_next(s, n, &len);
    if (len != n || (cp == 0xFFFD && n != 3)) return false;
    memcpy(ch, s, n);
    ch[n] = '\0';
    *ch_len = n;
    return true;
}

// where: "pre_tokenizer" or "decoder", for messages
int tok_load_metaspace(struct tokenizer *t, const cJSON *j, struct pre *p, const char *where,
                       struct ah_error *err) {
    p->k = P_METASPACE;
    if (!tok_one_char(j, "replacement", p->rep, &p->rep_len))
        return ah_fail(err, AH_EFORMAT, "%s: %s Metaspace: \"replacement\": expected one character",
                       t->path, where);
    // prepend_scheme (default always); the legacy add_prefix_space false means never
    const cJSON *aps = cJSON_GetObjectItemCaseSensitive(j, "add_prefix_space");
    const char *ps = jstr(j, "prepend_scheme");
    static const char *const schemes[] = {"always", "first", "never"};
    int k = 0;
    while (ps && k < 3 && strcmp(ps, schemes[k]))
        k++;
    if (k == 3 || (ps == NULL && cJSON_GetObjectItemCaseSensitive(j, "prepend_scheme") &&
                   !cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(j, "prepend_scheme"))))
        return ah_fail(err, AH_EFORMAT,
                       "%s: %s Metaspace: \"prepend_scheme\": expected \"always\", "
                       "\"first\" or \"never\"",
                       t->path, where);
    p->prepend = (enum ms_prepend)k;
    if (cJSON_IsFalse(aps)) {
        if (ps && p->prepend != MS_NEVER)
            return ah_fail(err, AH_EFORMAT,
                           "%s: %s Metaspace: \"add_prefix_space\": false contradicts "
                           "\"prepend_scheme\": \"%s\"",
                           t->path, where, ps);
        p->prepend = MS_NEVER;
    }
    p->split = jbool(j, "split", true);
    return 0;
}

// Metaspace on one piece: spaces become the replacement, which is prepended (always; first: to
// the first piece of the section at the start of the text) unless the piece then starts with
// it; split cuts before every replacement (MergedWithNext), as tokenizers' metaspace.rs does.
static int metaspace_piece(struct tokenizer *t, const struct pre *p, const char *s, size_t n,
                           bool first, struct pieces *out) {
    struct buf *w = &t->nb2;
    w->n = 0;
    bool starts = n && (s[0] == ' ' || (n >= p->rep_len && !memcmp(s, p->rep, p->rep_len)));
    bool prepend = p->prepend == MS_ALWAYS || (p->prepend == MS_FIRST && first);
    if (prepend && !starts && buf_put(w, p->rep, p->rep_len) < 0) return -AH_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        if (buf_put(w, s[i] == ' ' ? p->rep : s + i, s[i] == ' ' ? p->rep_len : 1) < 0)
            return -AH_ENOMEM;
    }
    if (!p->split) return pieces_add(out, w->p, w->n);
    size_t a = 0;
    for (size_t i = 1; i + p->rep_len <= w->n; i++) {
        if (memcmp(w->p + i, p->rep, p->rep_len)) continue;
        int rc = pieces_add(out, w->p + a, i - a);
        if (rc < 0) return rc;
        a = i;
        i += p->rep_len - 1;
    }
    return pieces_add(out, w->p + a, w->n - a);
}

// HF's split behaviours over the spans of one piece (tokenizers' pattern.rs / normalizer.rs)
static int split_piece(const struct pre *p, const char *s, const struct spans *sp,
                       struct pieces *out) {
    int rc = 0;
    size_t n = sp->n;
    if (p->matches_only) { // ByteLevel, Digits: the matches (transformers.js' text.match)
        for (size_t i = 0; i < n && rc == 0; i++)
            if (sp->v[i].match) rc = pieces_add(out, s + sp->v[i].a, sp->v[i].b - sp->v[i].a);
        return rc;
    }
    // is_delim: a match, or (inverted) a gap
    for (size_t i = 0; i < n && rc == 0;) {
        const struct span *c = &sp->v[i];
        bool delim = c->match != p->invert;
        size_t a = c->a, b = c->b, j = i + 1;
        switch (p->behavior) {
            case B_REMOVED:
                if (!delim) rc = pieces_add(out, s + a, b - a);
                break;
            case B_ISOLATED:
                rc = pieces_add(out, s + a, b - a);
                break;
            case B_CONTIGUOUS: // runs of equal kind become one
                while (j < n && (sp->v[j].match != p->invert) == delim)
                    b = sp->v[j++].b;
                rc = pieces_add(out, s + a, b - a);
                break;
            case B_MERGED_PREV: // a delimiter joins the piece before it (if that one is no
                                // delimiter)
                while (j < n && (sp->v[j].match != p->invert) && !(sp->v[j - 1].match != p->invert))
                    b = sp->v[j++].b;
                rc = pieces_add(out, s + a, b - a);
                break;
            case B_MERGED_NEXT: // a delimiter joins the piece after it (if that one is no
                                // delimiter)
                if (delim && j < n && !(sp->v[j].match != p->invert)) b = sp->v[j++].b;
                rc = pieces_add(out, s + a, b - a);
                break;
        }
        i = j;
    }
    return rc;
}

static int pre_one(struct tokenizer *t, const struct pre *p, const struct pieces *in,
                   struct pieces *out) {
    pieces_clear(out);
    for (size_t i = 0; i < in->n; i++) {
        const char *s = in->b.p + in->v[i].off;
        size_t n = in->v[i].len;
        int rc;
        if (p->k == P_METASPACE) {
            if ((rc = metaspace_piece(t, p, s, n, t->section_first && i == 0, out)) < 0) return rc;
            continue;
        }
        if (p->k == P_BYTELEVEL) {
            struct buf *w = &t->nb2; // prefix space, then the regex, then bytes -> characters
            w->n = 0;
            if ((p->add_prefix_space && s[0] != ' ' && buf_put(w, " ", 1) < 0) ||
                buf_put(w, s, n) < 0)
                return -AH_ENOMEM;
            s = w->p, n = w->n;
            if (p->re) {
                if ((rc = tok_regex_spans(t, p->re, s, n, &t->spans)) < 0) return rc;
            } else {
                t->spans.n = 0;
                if ((rc = tok_spans_add(&t->spans, 0, n, true)) < 0) return rc;
            }
            struct buf *m = &t->nb;
            for (size_t k = 0; k < t->spans.n; k++) {
                const struct span *sp = &t->spans.v[k];
                if (!sp->match) continue;
                m->n = 0;
                if (buf_reserve(m, 2 * (sp->b - sp->a) + 1) < 0) return -AH_ENOMEM;
                for (size_t q = sp->a; q < sp->b; q++)
                    m->n += utf8_put(m->p + m->n, t->byte_char[(unsigned char)s[q]]);
                if ((rc = pieces_add(out, m->p, m->n)) < 0) return rc;
            }
            continue;
        }
        if ((rc = tok_regex_spans(t, p->re, s, n, &t->spans)) < 0) return rc;
        if ((rc = split_piece(p, s, &t->spans, out)) < 0) return rc;
    }
    return 0;
}

// the section's pieces end up in t->pb
int tok_pre_tokenize(struct tokenizer *t) {
    const struct pre *p = t->pre;
    if (!p) return 0;
    if (p->k != P_SEQ) {
        int rc = pre_one(t, p, &t->pa, &t->pc);
        struct pieces tmp = t->pa;
        t->pa = t->pc;
        t->pc = tmp;
        return rc;
    }
    for (int k = 0; k < p->n_kids; k++) {
        int rc = pre_one(t, &p->kids[k], &t->pa, &t->pc);
        if (rc < 0) return rc;
        struct pieces tmp = t->pa;
        t->pa = t->pc;
        t->pc = tmp;
    }
    return 0;
}
