// tokenizer.c - Hugging Face tokenizer.json, byte-level BPE (see tokenizer.h).
//
// The pipeline of one text: WHATWG UTF-8 decoding -> added tokens cut out (a byte trie) ->
// per section: normalizer -> pre-tokenizer (a list of pieces) -> BPE per piece (cached) ->
// post-processor. Pieces live in growable byte buffers owned by the tokenizer and reused.
#define _POSIX_C_SOURCE 200809L
#include "io/tokenizer.h"

#include "model/ah.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <cjson/cJSON.h>
#include <pcre2.h>
#include <utf8proc.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

// ----------------------------------------------------------------------------
// small containers

struct buf {
    char *p;
    size_t n, cap;
};

static int buf_reserve(struct buf *b, size_t more) {
    if (b->n + more <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + more)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) return -AH_ENOMEM;
    b->p = p;
    b->cap = cap;
    return 0;
}

static int buf_put(struct buf *b, const void *s, size_t n) {
    if (buf_reserve(b, n + 1) < 0) return -AH_ENOMEM;
    memcpy(b->p + b->n, s, n);
    b->n += n;
    return 0;
}

// room for one more element in a growable array of `elem`-byte elements
static int grow_one(void **v, size_t n, size_t *cap, size_t elem) {
    if (n < *cap) return 0;
    size_t c = *cap ? *cap * 2 : 64;
    void *p = realloc(*v, c * elem);
    if (!p) return -AH_ENOMEM;
    *v = p;
    *cap = c;
    return 0;
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

// pieces of text: (offset, length) into one byte buffer
struct piece {
    size_t off, len;
};
struct pieces {
    struct piece *v;
    size_t n, cap;
    struct buf b;
};

static void pieces_clear(struct pieces *p) {
    p->n = 0;
    p->b.n = 0;
}

static int pieces_add(struct pieces *p, const char *s, size_t n) {
    if (n == 0) return 0;
    if (grow_one((void **)&p->v, p->n, &p->cap, sizeof *p->v) < 0) return -AH_ENOMEM;
    size_t off = p->b.n;
    if (buf_put(&p->b, s, n) < 0) return -AH_ENOMEM;
    p->v[p->n++] = (struct piece){off, n};
    return 0;
}

static void pieces_free(struct pieces *p) {
    free(p->v);
    free(p->b.p);
    memset(p, 0, sizeof *p);
}

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static uint64_t hash_u64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

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

// the code point at s (n > 0 bytes left) and its length; a bad sequence is one U+FFFD byte
static int32_t utf8_next(const char *s, size_t n, size_t *len) {
    const unsigned char *u = (const unsigned char *)s;
    size_t k = u[0] < 0x80   ? 1
               : u[0] < 0xC2 ? 0
               : u[0] < 0xE0 ? 2
               : u[0] < 0xF0 ? 3
               : u[0] < 0xF5 ? 4
                             : 0;
    int32_t cp = k == 1 ? u[0] : k == 2 ? u[0] & 0x1F : k == 3 ? u[0] & 0x0F : u[0] & 0x07;
    for (size_t i = 1; i < k; i++) {
        if (i >= n || (u[i] & 0xC0) != 0x80) k = 0;
        if (k) cp = cp << 6 | (u[i] & 0x3F);
    }
    *len = k ? k : 1;
    return k ? cp : 0xFFFD;
}

static size_t utf8_put(char *out, int32_t cp) {
    return (size_t)utf8proc_encode_char(cp, (utf8proc_uint8_t *)out);
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

struct tokenizer;
static int regex_name(struct tokenizer *t, const pcre2_code *re, const char *where,
                      const char *kind, const char *pattern);
static const char *tok_path(const struct tokenizer *t);

static int regex_compile(struct tokenizer *t, pcre2_code **re, const char *pattern,
                         const char *where, struct ah_error *err) {
    struct buf b = {0};
    if (regex_translate(pattern, &b) < 0) return -AH_ENOMEM;
    int code;
    PCRE2_SIZE at;
    *re = pcre2_compile((PCRE2_SPTR)b.p, PCRE2_ZERO_TERMINATED, PCRE2_UTF, &code, &at, NULL);
    free(b.p);
    if (!*re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        return ah_fail(err, AH_EFORMAT, "%s: %s: regex %s: %s at offset %zu", tok_path(t), where,
                       pattern, (const char *)msg, (size_t)at);
    }
    pcre2_jit_compile(*re, PCRE2_JIT_COMPLETE); // falls back to the interpreter if unavailable
    return regex_name(t, *re, where, "regex", pattern);
}

// a string pattern: every ASCII punctuation character escaped
static int regex_literal(struct tokenizer *t, pcre2_code **re, const char *s, const char *where,
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
    if (!*re) return ah_fail(err, AH_EFORMAT, "%s: %s: bad string pattern", tok_path(t), where);
    return regex_name(t, *re, where, "string", s);
}

// match spans of re in s[0..n), JavaScript's matchAll: an empty match moves on by a code point
struct span {
    size_t a, b;
    bool match;
};
struct spans {
    struct span *v;
    size_t n, cap;
};

static int spans_add(struct spans *sp, size_t a, size_t b, bool match) {
    if (grow_one((void **)&sp->v, sp->n, &sp->cap, sizeof *sp->v) < 0) return -AH_ENOMEM;
    sp->v[sp->n++] = (struct span){a, b, match};
    return 0;
}

static int regex_gave_up(struct tokenizer *t, const pcre2_code *re, int rc, size_t n, size_t at);
static pcre2_match_data *tok_md(const struct tokenizer *t);
static pcre2_match_context *tok_mctx(const struct tokenizer *t);

// spans covering s: gaps (match false) and matches (match true), in order, none empty. Returns
// 0, -AH_ENOMEM, or 1 when PCRE2 gave up (*why: its code, *at_out: where), never taken for "no
// match".
static int spans_of(const pcre2_code *re, pcre2_match_data *md, pcre2_match_context *mctx,
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
        if (a > prev && spans_add(sp, prev, a, false) < 0) return -AH_ENOMEM;
        if (b > a && spans_add(sp, a, b, true) < 0) return -AH_ENOMEM;
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
    if (n > prev && spans_add(sp, prev, n, false) < 0) return -AH_ENOMEM;
    return 0;
}

// spans_of with the tokenizer's match data and limits; PCRE2 giving up (its match or depth limit,
// on a regex that backtracks without end) is an error naming the regex.
static int regex_spans(struct tokenizer *t, const pcre2_code *re, const char *s, size_t n,
                       struct spans *sp) {
    size_t at = 0;
    int why = 0, rc = spans_of(re, tok_md(t), tok_mctx(t), s, n, sp, &why, &at);
    return rc == 1 ? regex_gave_up(t, re, why, n, at) : rc;
}

// ----------------------------------------------------------------------------
// the tokenizer

enum norm_kind { N_SEQ, N_NFC, N_NFD, N_NFKC, N_NFKD, N_LOWER, N_REPLACE, N_PREPEND, N_STRIP };
struct norm {
    enum norm_kind k;
    struct norm *kids;
    int n_kids;
    pcre2_code *re;   // Replace
    char *content;    // Replace, Prepend
    bool left, right; // Strip
};

enum split_behavior { B_REMOVED, B_ISOLATED, B_MERGED_PREV, B_MERGED_NEXT, B_CONTIGUOUS };
enum pre_kind { P_SEQ, P_SPLIT, P_BYTELEVEL, P_DIGITS, P_METASPACE };
enum ms_prepend { MS_ALWAYS, MS_FIRST, MS_NEVER };
struct pre {
    enum pre_kind k;
    struct pre *kids;
    int n_kids;
    pcre2_code *re; // Split; ByteLevel with use_regex; Digits
    enum split_behavior behavior;
    bool invert, add_prefix_space, matches_only;
    char rep[5];             // Metaspace: the replacement character (UTF-8, NUL-terminated)
    size_t rep_len;          // its bytes
    enum ms_prepend prepend; // Metaspace: when the replacement is prepended
    bool split;              // Metaspace: cut before each replacement
};

struct post { // ids around the sequence (TemplateProcessing's single, Bert/Roberta cls/sep)
    int64_t *before, *after;
    int n_before, n_after;
};

struct added {
    char *content;
    size_t len;
    int64_t id;
    bool lstrip, rstrip, special, single_word, normalized; // normalized: matched after the
                                                           // normalizer, as its content normalized
};

// a part of a text between added tokens (token -1) or an added token (its index) with the
// whitespace its lstrip/rstrip take (tokenizers' AddedVocabulary::find_matches)
struct seg {
    size_t a, b;
    int token;
};
struct segs {
    struct seg *v;
    size_t n, cap;
};

#define TRIE_RAW  0 // the root of the added tokens matched in the text as it is
#define TRIE_NORM 1 // the root of those matched in the normalized sections (normalized: true)

struct trie_node {
    int32_t child, sibling, token; // first child, next sibling, added token index or -1
    unsigned char byte;
};

struct regex_name {
    const pcre2_code *re;
    char *what; // "pre_tokenizer Split regex PATTERN"
};

// PCRE2's limits, set explicitly (its defaults, written down): a regex needing more is an error
#define TOK_MATCH_LIMIT 10000000u
#define TOK_DEPTH_LIMIT 10000000u
#define TOK_JIT_STACK   (8u << 20)

struct vocab_entry {
    uint32_t off, len;
    int64_t id; // -1: empty slot
};

struct merge_entry {
    uint64_t key; // left id << 32 | right id; 0 with rank -1: empty
    int32_t rank, result;
};

struct cache_entry {
    uint64_t hash;
    uint32_t key_off, key_len, ids_off, ids_len; // into cache_keys / cache_ids
    bool used;
};

struct tokenizer {
    char *path;
    struct buf str; // token strings
    struct vocab_entry *vocab;
    size_t vocab_cap;
    uint32_t *id_off, *id_len; // (n_ids) token string of an id; id_len UINT32_MAX: none
    int64_t n_ids;
    bool *is_special, *is_added; // (n_ids)
    struct merge_entry *merges;
    size_t merges_cap;
    int32_t char_id[1024]; // id of a one-character token for code points < 1024, -1 if none
    int64_t unk_id;        // -1 if none
    bool ignore_merges, byte_fallback, byte_level_decoder;
    int64_t byte_id[256]; // <0xXX> tokens for byte_fallback, -1 if absent
    struct added *added;
    int n_added;
    struct trie_node *trie;
    int n_trie, cap_trie;
    int32_t trie_first[256]; // the root's child for each first byte, -1 if none
    struct norm *norm;       // NULL: none
    struct pre *pre;         // NULL: the whole section is one piece
    struct post post;        // applied when special tokens are asked for
    int32_t byte_char[256];  // ByteLevel: byte -> code point
    int16_t char_byte[324];  // and back, -1 where no byte maps
    struct regex_name *rx;   // (n_rx) what each compiled regex is, for messages
    int n_rx;
    char error[768]; // the last encode error (a regex that gave up)
    // per-call scratch
    pcre2_match_data *md;
    pcre2_match_context *mctx; // explicit match and depth limits; the JIT stack
    pcre2_jit_stack *jit;
    struct spans spans;
    struct pieces pa, pb, pc;
    struct buf nb, nb2;
    int32_t *sym, *prev, *next;
    size_t cap_sym;
    struct heap_item *heap;
    size_t cap_heap;
    struct cache_entry *cache;
    size_t cache_cap, cache_n;
    struct buf cache_keys;
    struct tok_ids cache_ids;
    struct dec *dec;     // the decoder chain; NULL: ByteLevel (byte_level_decoder) or none
    bool fuse_unk;       // BPE: consecutive unknown characters give one unk
    bool section_first;  // encoding the section at the start of the text (Metaspace "first")
    bool any_normalized; // an added token is matched after the normalizer
    char *unk_missing;   // model.unk_token when it is not in the vocabulary (an encode error)
    pcre2_code *word_re; // single_word: Rust regex's \w, one character
    struct segs segs_raw, segs_norm;
    struct buf sec; // the normalized section
};

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

static const char *tok_path(const struct tokenizer *t) {
    return t->path;
}

static pcre2_match_data *tok_md(const struct tokenizer *t) {
    return t->md;
}

static pcre2_match_context *tok_mctx(const struct tokenizer *t) {
    return t->mctx;
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

const char *tok_error(const struct tokenizer *t) {
    return t->error;
}

// SentencePiece-style components (the end of this file)
struct dec;
static int load_sp(struct tokenizer *t, const cJSON *j, struct ah_error *err);
static int load_metaspace(struct tokenizer *t, const cJSON *j, struct pre *p, const char *where,
                          struct ah_error *err);
static int metaspace_piece(struct tokenizer *t, const struct pre *p, const char *s, size_t n,
                           bool first, struct pieces *out);
static int decode_chain(const struct tokenizer *t, const int64_t *ids, size_t n, bool skip_special,
                        char **text, size_t *len);
static void dec_free(struct dec *d);
static void bytes_to_unicode(int32_t *map) {
    bool direct[256] = {false};
    for (int b = '!'; b <= '~'; b++)
        direct[b] = true;
    for (int b = 0xA1; b <= 0xAC; b++)
        direct[b] = true;
    for (int b = 0xAE; b <= 0xFF; b++)
        direct[b] = true;
    int n = 0;
    for (int b = 0; b < 256; b++)
        map[b] = direct[b] ? b : 256 + n++;
}

// ---- vocabulary: string -> id ----

static struct vocab_entry *vocab_slot(const struct tokenizer *t, const char *s, size_t n) {
    size_t mask = t->vocab_cap - 1, i = hash_bytes(s, n) & mask;
    for (;; i = (i + 1) & mask) {
        struct vocab_entry *e = &t->vocab[i];
        if (e->id < 0 || (e->len == n && !memcmp(t->str.p + e->off, s, n))) return e;
    }
}

static int64_t vocab_get(const struct tokenizer *t, const char *s, size_t n) {
    if (n <= 2 && n > 0) { // one short character: the table
        size_t len;
        int32_t cp = utf8_next(s, n, &len);
        if (len == n && cp < 1024) return t->char_id[cp];
    }
    return vocab_slot(t, s, n)->id;
}

static int vocab_set(struct tokenizer *t, const char *s, size_t n, int64_t id) {
    struct vocab_entry *e = vocab_slot(t, s, n);
    if (e->id < 0) {
        e->off = (uint32_t)t->str.n;
        e->len = (uint32_t)n;
        if (buf_put(&t->str, s, n) < 0) return -AH_ENOMEM;
    }
    e->id = id;
    if (id >= 0 && id < t->n_ids) {
        t->id_off[id] = e->off;
        t->id_len[id] = e->len;
    }
    size_t len;
    int32_t cp = n ? utf8_next(s, n, &len) : 0;
    if (n && len == n && cp < 1024) t->char_id[cp] = (int32_t)id;
    return 0;
}

// ---- merges: (left id, right id) -> (rank, result id) ----

static struct merge_entry *merge_slot(const struct tokenizer *t, uint64_t key) {
    size_t mask = t->merges_cap - 1, i = hash_u64(key) & mask;
    for (;; i = (i + 1) & mask) {
        struct merge_entry *e = &t->merges[i];
        if (e->rank < 0 || e->key == key) return e;
    }
}

// ---- loading ----

static size_t pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n)
        c *= 2;
    return c;
}

static const char *jstr(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static bool jbool(const cJSON *o, const char *key, bool dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}

static bool bad_id(const cJSON *v) {
    return !cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 16777215 ||
           v->valuedouble != (double)(int64_t)v->valuedouble;
}

static int load_norm(struct tokenizer *t, const cJSON *j, struct norm *n, struct ah_error *err) {
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
            if ((rc = load_norm(t, e, &n->kids[k++], err)) < 0) return rc;
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
            if (rx) return regex_compile(t, &n->re, rx, "normalizer Replace", err);
            if (lit) return regex_literal(t, &n->re, lit, "normalizer Replace", err);
            return ah_fail(err, AH_EFORMAT, "%s: normalizer Replace: expected a pattern", t->path);
        }
    } else if (n->k == N_STRIP) {
        n->left = jbool(j, "strip_left", true);
        n->right = jbool(j, "strip_right", true);
    }
    return 0;
}

static int load_pre(struct tokenizer *t, const cJSON *j, struct pre *p, bool nested,
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
            if ((rc = load_pre(t, e, &p->kids[k++], true, err)) < 0) return rc;
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
        if (rx) return regex_compile(t, &p->re, rx, "pre_tokenizer Split", err);
        if (lit) return regex_literal(t, &p->re, lit, "pre_tokenizer Split", err);
        return ah_fail(err, AH_EFORMAT, "%s: pre_tokenizer Split: expected a pattern", t->path);
    }
    if (type && !strcmp(type, "ByteLevel")) {
        p->k = P_BYTELEVEL;
        p->add_prefix_space = jbool(j, "add_prefix_space", false);
        p->matches_only = true;
        if (!jbool(j, "use_regex", true)) return 0;
        return regex_compile(t, &p->re,
                             "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|"
                             "\\s+(?!\\S)|\\s+",
                             "pre_tokenizer ByteLevel", err);
    }
    if (type && !strcmp(type, "Digits")) {
        p->k = P_DIGITS;
        p->matches_only = true;
        return regex_compile(t, &p->re,
                             jbool(j, "individual_digits", false) ? "[^\\d]+|\\d" : "[^\\d]+|\\d+",
                             "pre_tokenizer Digits", err);
    }
    if (type && !strcmp(type, "Metaspace")) return load_metaspace(t, j, p, "pre_tokenizer", err);
    return ah_fail(err, AH_EFORMAT,
                   "%s: \"pre_tokenizer\": type \"%s\" is not supported (expected Sequence, "
                   "Split, ByteLevel, Digits or Metaspace%s)",
                   t->path, type ? type : "?", nested ? "; Sequences do not nest" : "");
}

// ids of a special-token name: the post-processor's special_tokens table, else the vocabulary
static int special_ids(struct tokenizer *t, const cJSON *table, const char *name, int64_t **v,
                       int *n, struct ah_error *err) {
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(table, name),
                                                      "ids"),
                *x;
    if (table && !e) // tokenizers refuses the file
        return ah_fail(err, AH_EFORMAT,
                       "%s: post_processor TemplateProcessing: special token \"%s\" is not in "
                       "its \"special_tokens\" (with its \"ids\")",
                       t->path, name ? name : "?");
    int64_t id = name ? vocab_get(t, name, strlen(name)) : -1;
    int k = e ? cJSON_GetArraySize(e) : 1;
    int64_t *nv = realloc(*v, ((size_t)*n + (size_t)k) * sizeof *nv);
    if (!nv) return -AH_ENOMEM;
    *v = nv;
    cJSON_ArrayForEach(x, e) {
        if (bad_id(x))
            return ah_fail(err, AH_EFORMAT,
                           "%s: post_processor: \"special_tokens\": \"%s\": expected integer ids",
                           t->path, name);
        nv[(*n)++] = (int64_t)x->valuedouble;
    }
    if (e) return 0;
    if (id < 0)
        return ah_fail(err, AH_EFORMAT, "%s: post_processor: special token \"%s\" is unknown",
                       t->path, name ? name : "?");
    nv[(*n)++] = id;
    return 0;
}

// Bert/Roberta's cls or sep, [token, id]: the id, as tokenizers (the token's, if none is given)
static int pair_id(struct tokenizer *t, const cJSON *pair, int64_t **v, int *n,
                   struct ah_error *err) {
    const cJSON *name = cJSON_GetArrayItem(pair, 0), *id = cJSON_GetArrayItem(pair, 1);
    int rc = special_ids(t, NULL, cJSON_IsString(name) ? name->valuestring : NULL, v, n, err);
    if (rc == 0 && id && !bad_id(id)) (*v)[*n - 1] = (int64_t)id->valuedouble;
    return rc;
}

static int load_post(struct tokenizer *t, const cJSON *j, struct ah_error *err) {
    const char *type = jstr(j, "type");
    if (!type || !strcmp(type, "ByteLevel")) return 0;
    if (!strcmp(type, "Sequence")) {
        const cJSON *e;
        int rc;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(j, "processors")) {
            if ((rc = load_post(t, e, err)) < 0) return rc;
        }
        return 0;
    }
    struct post *p = &t->post;
    if (!strcmp(type, "TemplateProcessing")) {
        const cJSON *table = cJSON_GetObjectItemCaseSensitive(j, "special_tokens"), *it;
        bool seen_a = false;
        int rc;
        cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(j, "single")) {
            const cJSON *sp = cJSON_GetObjectItemCaseSensitive(it, "SpecialToken");
            if (!sp) {
                seen_a = true;
                continue;
            }
            if ((rc = special_ids(t, table, jstr(sp, "id"), seen_a ? &p->after : &p->before,
                                  seen_a ? &p->n_after : &p->n_before, err)) < 0)
                return rc;
        }
        return 0;
    }
    if (!strcmp(type, "BertProcessing") || !strcmp(type, "RobertaProcessing")) {
        int rc =
            pair_id(t, cJSON_GetObjectItemCaseSensitive(j, "cls"), &p->before, &p->n_before, err);
        return rc ? rc
                  : pair_id(t, cJSON_GetObjectItemCaseSensitive(j, "sep"), &p->after, &p->n_after,
                            err);
    }
    return ah_fail(err, AH_EFORMAT,
                   "%s: \"post_processor\": type \"%s\" is not supported (expected "
                   "TemplateProcessing, ByteLevel, BertProcessing, RobertaProcessing or Sequence)",
                   t->path, type);
}

static int trie_add(struct tokenizer *t, int root, const char *s, size_t n, int token) {
    int node = root;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        int k = t->trie[node].child;
        while (k >= 0 && t->trie[k].byte != c)
            k = t->trie[k].sibling;
        if (k < 0) {
            if (t->n_trie == t->cap_trie) {
                int cap = t->cap_trie * 2;
                struct trie_node *v = realloc(t->trie, (size_t)cap * sizeof *v);
                if (!v) return -AH_ENOMEM;
                t->trie = v;
                t->cap_trie = cap;
            }
            k = t->n_trie++;
            t->trie[k] = (struct trie_node){-1, t->trie[node].child, -1, c};
            t->trie[node].child = k;
        }
        node = k;
    }
    t->trie[node].token = token;
    return 0;
}

// model.type, and the keys of a BPE model that change ids and are not implemented
static int model_keys(struct tokenizer *t, const cJSON *m, struct ah_error *err) {
    const char *type = jstr(m, "type");
    if (!type || strcmp(type, "BPE"))
        return ah_fail(err, AH_EFORMAT,
                       "%s: \"model.type\": \"%s\" is not supported (expected BPE)", t->path,
                       type ? type : "?");
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(m, "dropout");
    if (d && !cJSON_IsNull(d) && !(cJSON_IsNumber(d) && d->valuedouble == 0)) {
        char *v = cJSON_PrintUnformatted(d);
        int rc = ah_fail(err, AH_EFORMAT,
                         "%s: \"model.dropout\": %.40s: BPE dropout skips merges at random "
                         "(Hugging Face's tokenizers give other ids on every call); it must be "
                         "null or 0",
                         t->path, v ? v : "?");
        free(v);
        return rc;
    }
    const char *sfx = jstr(m, "continuing_subword_prefix"), *eow = jstr(m, "end_of_word_suffix");
    if ((sfx && *sfx) || (eow && *eow))
        return ah_fail(err, AH_EFORMAT,
                       "%s: \"model\": continuing_subword_prefix / end_of_word_suffix are not "
                       "supported",
                       t->path);
    return 0;
}

// the tables, sized for ids up to the largest of the vocabulary and the added tokens
static int alloc_tables(struct tokenizer *t, const cJSON *vocab, const cJSON *added_list,
                        struct ah_error *err) {
    int64_t max_id = -1, n_vocab = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, vocab) {
        if (bad_id(e))
            return ah_fail(err, AH_EFORMAT,
                           "%s: \"model.vocab\": \"%s\": expected an integer id from 0 to 16777215",
                           t->path, e->string);
        max_id = (int64_t)e->valuedouble > max_id ? (int64_t)e->valuedouble : max_id;
        n_vocab++;
    }
    cJSON_ArrayForEach(e, added_list) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
        if (bad_id(id) || !jstr(e, "content"))
            return ah_fail(err, AH_EFORMAT, "%s: \"added_tokens\": expected {\"id\", \"content\"}",
                           t->path);
        max_id = (int64_t)id->valuedouble > max_id ? (int64_t)id->valuedouble : max_id;
        n_vocab++;
    }
    t->n_ids = max_id + 1;
    t->vocab_cap = pow2_at_least((size_t)n_vocab * 2 + 16);
    t->vocab = malloc(t->vocab_cap * sizeof *t->vocab);
    t->id_off = calloc((size_t)t->n_ids + 1, sizeof *t->id_off);
    t->id_len = malloc(((size_t)t->n_ids + 1) * sizeof *t->id_len);
    t->is_special = calloc((size_t)t->n_ids + 1, 1);
    t->is_added = calloc((size_t)t->n_ids + 1, 1);
    t->added = calloc((size_t)cJSON_GetArraySize(added_list) + 1, sizeof *t->added);
    t->cap_trie = 64;
    t->trie = malloc((size_t)t->cap_trie * sizeof *t->trie);
    if (!t->vocab || !t->id_off || !t->id_len || !t->is_special || !t->is_added || !t->added ||
        !t->trie)
        return -AH_ENOMEM;
    for (size_t i = 0; i < t->vocab_cap; i++)
        t->vocab[i].id = -1;
    for (int64_t i = 0; i <= t->n_ids; i++)
        t->id_len[i] = UINT32_MAX;
    for (int i = 0; i < 1024; i++)
        t->char_id[i] = -1;
    t->trie[TRIE_RAW] = (struct trie_node){-1, -1, -1, 0};
    t->trie[TRIE_NORM] = (struct trie_node){-1, -1, -1, 0};
    t->n_trie = 2;
    return 0;
}

static int load_vocab(struct tokenizer *t, const cJSON *vocab, struct ah_error *err) {
    const cJSON *e;
    int rc;
    cJSON_ArrayForEach(e, vocab) { // each token once, each id once
        int64_t id = (int64_t)e->valuedouble;
        size_t n = strlen(e->string);
        if (vocab_get(t, e->string, n) >= 0)
            return ah_fail(err, AH_EFORMAT, "%s: \"model.vocab\": \"%s\" appears twice", t->path,
                           e->string);
        if (t->id_len[id] != UINT32_MAX)
            return ah_fail(err, AH_EFORMAT,
                           "%s: \"model.vocab\": \"%s\" and \"%.*s\" both have id %lld", t->path,
                           e->string, (int)t->id_len[id], t->str.p + t->id_off[id], (long long)id);
        if ((rc = vocab_set(t, e->string, n, id)) < 0) return rc;
    }
    return 0;
}

// The id Hugging Face's tokenizers give an added token (AddedVocabulary::add_tokens, in the
// order of the file): its id in the vocabulary, else the next one after the vocabulary's
// n_model tokens and the added tokens before it; tokenizer.json's own id must be that one.
static int added_id(struct tokenizer *t, const struct added *a, int64_t n_model, int64_t *max_added,
                    struct ah_error *err) {
    if (!a->len) return 0; // an empty token is left out
    int64_t want = vocab_get(t, a->content, a->len);
    if (want < 0)
        want = *max_added < 0                          ? n_model
               : *max_added >= n_model || n_model == 0 ? *max_added + 1
                                                       : n_model;
    if (want > *max_added) *max_added = want;
    if (a->id == want) return 0;
    return ah_fail(err, AH_EFORMAT,
                   "%s: \"added_tokens\": \"%s\" has id %lld, but Hugging Face's tokenizers give "
                   "it id %lld (%s)",
                   t->path, a->content, (long long)a->id, (long long)want,
                   vocab_get(t, a->content, a->len) >= 0
                       ? "its id in the vocabulary"
                       : "the next id after the vocabulary and the added tokens before it");
}

// one of "added_tokens": its flags, its id checked, into the vocabulary and a trie (normalized
// ones: TRIE_NORM once the normalizer is loaded, by added_normalized)
static int load_added(struct tokenizer *t, const cJSON *e, int64_t n_model, int64_t *max_added,
                      struct ah_error *err) {
    struct added *a = &t->added[t->n_added];
    const char *c = jstr(e, "content"); // matched in valid UTF-8 text: made valid too
    a->content = malloc(3 * strlen(c) + 1);
    if (!a->content) return -AH_ENOMEM;
    t->n_added++;
    a->len = tok_utf8_sanitize(c, strlen(c), a->content);
    a->content[a->len] = '\0';
    a->id = (int64_t)cJSON_GetObjectItemCaseSensitive(e, "id")->valuedouble;
    a->lstrip = jbool(e, "lstrip", false);
    a->rstrip = jbool(e, "rstrip", false);
    a->special = jbool(e, "special", false);
    a->single_word = jbool(e, "single_word", false);
    a->normalized = jbool(e, "normalized", false);
    int64_t have = vocab_get(t, a->content, a->len);
    for (int k = 0; have >= 0 && t->is_added[have] && k < t->n_added - 1; k++) {
        const struct added *p = &t->added[k];
        if (p->len != a->len || memcmp(p->content, a->content, a->len)) continue;
        if (p->id != a->id || p->lstrip != a->lstrip || p->rstrip != a->rstrip ||
            p->special != a->special || p->single_word != a->single_word ||
            p->normalized != a->normalized)
            return ah_fail(err, AH_EFORMAT,
                           "%s: \"added_tokens\": \"%s\" appears twice, with other flags or ids",
                           t->path, a->content);
    }
    int rc = added_id(t, a, n_model, max_added, err);
    if (rc < 0) return rc;
    t->is_added[a->id] = true;
    t->is_special[a->id] = a->special;
    t->any_normalized |= a->normalized && a->len;
    if ((rc = vocab_set(t, a->content, a->len, a->id)) < 0) return rc;
    if (a->len && !a->normalized) return trie_add(t, TRIE_RAW, a->content, a->len, t->n_added - 1);
    return 0;
}

// merges: "a b" strings or [a, b] pairs
static int load_merges(struct tokenizer *t, const cJSON *merges, struct ah_error *err) {
    int n_merges = cJSON_GetArraySize(merges), rank = 0, rc;
    t->merges_cap = pow2_at_least((size_t)n_merges * 2 + 16);
    t->merges = malloc(t->merges_cap * sizeof *t->merges);
    struct buf pair = {0};
    if (!t->merges) return -AH_ENOMEM;
    for (size_t i = 0; i < t->merges_cap; i++)
        t->merges[i] = (struct merge_entry){0, -1, -1};
    const cJSON *e;
    cJSON_ArrayForEach(e, merges) {
        const char *a, *b;
        size_t la, lb;
        if (cJSON_IsString(e)) {
            const char *sp = strchr(e->valuestring, ' ');
            if (!sp) {
                free(pair.p);
                return ah_fail(err, AH_EFORMAT, "%s: \"model.merges\"[%d]: \"%s\" is not \"a b\"",
                               t->path, rank, e->valuestring);
            }
            a = e->valuestring, la = (size_t)(sp - a), b = sp + 1, lb = strlen(b);
        } else if (cJSON_GetArraySize(e) == 2 && cJSON_IsString(cJSON_GetArrayItem(e, 0)) &&
                   cJSON_IsString(cJSON_GetArrayItem(e, 1))) {
            a = cJSON_GetArrayItem(e, 0)->valuestring, la = strlen(a);
            b = cJSON_GetArrayItem(e, 1)->valuestring, lb = strlen(b);
        } else {
            free(pair.p);
            return ah_fail(err, AH_EFORMAT, "%s: \"model.merges\"[%d]: expected \"a b\" or [a, b]",
                           t->path, rank);
        }
        pair.n = 0;
        if (buf_put(&pair, a, la) < 0 || buf_put(&pair, b, lb) < 0) {
            free(pair.p);
            return -AH_ENOMEM;
        }
        int64_t ia = vocab_get(t, a, la), ib = vocab_get(t, b, lb),
                ir = vocab_get(t, pair.p, pair.n);
        rank++;
        if (ia < 0 || ib < 0 || ir < 0) { // as Hugging Face's BPE builder: an error
            int bad_n = (int)(ia < 0 ? la : ib < 0 ? lb : pair.n);
            const char *bad = ia < 0 ? a : ib < 0 ? b : pair.p;
            rc = ah_fail(err, AH_EFORMAT,
                         "%s: \"model.merges\"[%d]: %s \"%.*s\" is not in the vocabulary", t->path,
                         rank - 1, ia < 0 || ib < 0 ? "token" : "the merged token", bad_n, bad);
            free(pair.p);
            return rc;
        }
        struct merge_entry *m2 = merge_slot(t, (uint64_t)ia << 32 | (uint64_t)ib);
        if (m2->rank >= 0) continue; // the first rank of a pair wins
        *m2 = (struct merge_entry){(uint64_t)ia << 32 | (uint64_t)ib, rank - 1, (int32_t)ir};
    }
    free(pair.p);
    return 0;
}

static int load_model(struct tokenizer *t, const cJSON *m, const cJSON *added_list,
                      struct ah_error *err) {
    int rc = model_keys(t, m, err);
    if (rc < 0) return rc;
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(m, "vocab"), *e;
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(m, "merges");
    if (!cJSON_IsObject(vocab) || !cJSON_IsArray(merges))
        return ah_fail(err, AH_EFORMAT,
                       "%s: \"model\": expected \"vocab\" (an object) and "
                       "\"merges\" (a list)",
                       t->path);
    if ((rc = alloc_tables(t, vocab, added_list, err)) < 0 || (rc = load_vocab(t, vocab, err)) < 0)
        return rc;
    int64_t max_added = -1;
    cJSON_ArrayForEach(e, added_list) { // added tokens join the vocabulary, as in transformers.js
        if ((rc = load_added(t, e, cJSON_GetArraySize(vocab), &max_added, err)) < 0) return rc;
    }
    // (the vocabulary with the added tokens, for merges: as transformers.js)
    if ((rc = load_merges(t, merges, err)) < 0) return rc;
    const char *unk = jstr(m, "unk_token");
    t->unk_id = unk ? vocab_get(t, unk, strlen(unk)) : -1;
    if (unk && t->unk_id < 0 && !(t->unk_missing = strdup(unk))) return -AH_ENOMEM;
    t->ignore_merges = jbool(m, "ignore_merges", false);
    t->byte_fallback = jbool(m, "byte_fallback", false);
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        t->byte_id[b] = vocab_get(t, name, 6);
    }
    return 0;
}

static void norm_free(struct norm *n) {
    for (int i = 0; i < n->n_kids; i++)
        norm_free(&n->kids[i]);
    free(n->kids);
    free(n->content);
    pcre2_code_free(n->re);
}

static void pre_free(struct pre *p) {
    for (int i = 0; i < p->n_kids; i++)
        pre_free(&p->kids[i]);
    free(p->kids);
    pcre2_code_free(p->re);
}

void tok_free(struct tokenizer *t) {
    if (!t) return;
    free(t->path);
    free(t->str.p);
    free(t->vocab);
    free(t->id_off);
    free(t->id_len);
    free(t->is_special);
    free(t->is_added);
    free(t->merges);
    for (int i = 0; i < t->n_added; i++)
        free(t->added[i].content);
    free(t->added);
    free(t->trie);
    if (t->norm) norm_free(t->norm);
    free(t->norm);
    if (t->pre) pre_free(t->pre);
    free(t->pre);
    dec_free(t->dec);
    free(t->post.before);
    free(t->post.after);
    pcre2_match_data_free(t->md);
    pcre2_match_context_free(t->mctx);
    pcre2_jit_stack_free(t->jit);
    for (int i = 0; i < t->n_rx; i++)
        free(t->rx[i].what);
    free(t->rx);
    free(t->spans.v);
    pieces_free(&t->pa);
    pieces_free(&t->pb);
    pieces_free(&t->pc);
    free(t->nb.p);
    free(t->nb2.p);
    free(t->sym);
    free(t->prev);
    free(t->next);
    free(t->heap);
    free(t->cache);
    free(t->cache_keys.p);
    tok_ids_free(&t->cache_ids);
    free(t->unk_missing);
    pcre2_code_free(t->word_re);
    free(t->segs_raw.v);
    free(t->segs_norm.v);
    free(t->sec.p);
    free(t);
}

// truncation and padding change the ids of an encoding (tokenizers applies them in encode)
static int top_keys(struct tokenizer *t, const cJSON *j, struct ah_error *err) {
    static const char *const keys[] = {"truncation", "padding"};
    for (int i = 0; i < 2; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, keys[i]);
        if (v && !cJSON_IsNull(v))
            return ah_fail(err, AH_EFORMAT,
                           "%s: \"%s\": not null, and not supported (Hugging Face's tokenizers "
                           "would %s every encoding); set it to null",
                           t->path, keys[i], i ? "pad" : "truncate");
    }
    return 0;
}

// the parts of a tokenizer.json, each checked
static int load_parts(struct tokenizer *t, const cJSON *j, struct ah_error *err) {
    int rc = top_keys(t, j, err);
    if (rc == 0)
        rc = load_model(t, cJSON_GetObjectItemCaseSensitive(j, "model"),
                        cJSON_GetObjectItemCaseSensitive(j, "added_tokens"), err);
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(j, "normalizer");
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "pre_tokenizer");
    if (rc == 0 && cJSON_IsObject(n)) {
        t->norm = calloc(1, sizeof *t->norm);
        rc = t->norm ? load_norm(t, n, t->norm, err) : -AH_ENOMEM;
    }
    if (rc == 0 && cJSON_IsObject(p)) {
        t->pre = calloc(1, sizeof *t->pre);
        rc = t->pre ? load_pre(t, p, t->pre, false, err) : -AH_ENOMEM;
    }
    if (rc == 0) rc = load_post(t, cJSON_GetObjectItemCaseSensitive(j, "post_processor"), err);
    const char *dec = jstr(cJSON_GetObjectItemCaseSensitive(j, "decoder"), "type");
    t->byte_level_decoder = dec && !strcmp(dec, "ByteLevel");
    if (rc == 0) rc = load_sp(t, j, err);
    return rc;
}

static int norm_apply(struct tokenizer *t, const struct norm *n, struct buf *s);
static int added_at(const struct tokenizer *t, int root, const char *s, size_t n, size_t *len);

// once the normalizer can run: the normalized added tokens' trie (each token's content through
// the normalizer, as tokenizers' refresh_added_tokens; special tokens first, then the others,
// the first of equal contents kept), and single_word's \w
static int added_finish(struct tokenizer *t, struct ah_error *err) {
    int rc = 0;
    bool single = false;
    for (int pass = 0; pass < 2 && rc == 0; pass++)
        for (int k = 0; k < t->n_added && rc == 0; k++) {
            struct added *a = &t->added[k];
            single |= a->single_word;
            if (!a->normalized || !a->len || a->special != (pass == 0)) continue;
            t->sec.n = 0;
            if ((rc = buf_put(&t->sec, a->content, a->len)) == 0 && t->norm)
                rc = norm_apply(t, t->norm, &t->sec);
            if (rc == -AH_EINVAL) return ah_fail(err, AH_EINVAL, "%s", t->error);
            if (rc == 0 && t->sec.n == 0)
                return ah_fail(err, AH_EFORMAT,
                               "%s: \"added_tokens\": \"%s\" (normalized: true) is empty once "
                               "normalized",
                               t->path, a->content);
            size_t len = 0;
            if (rc == 0 &&
                (added_at(t, TRIE_NORM, t->sec.p, t->sec.n, &len) < 0 || len != t->sec.n))
                rc = trie_add(t, TRIE_NORM, t->sec.p, t->sec.n, k);
        }
    if (rc < 0 || !single) return rc;
    int code;
    PCRE2_SIZE at;
    t->word_re =
        pcre2_compile((PCRE2_SPTR) "[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}]",
                      PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &code, &at, NULL);
    return t->word_re ? 0 : -AH_ENOMEM;
}

// the tokenizer of JSON text; name (for messages) is the file it came from
static int load_text(struct tokenizer **out, char *path, const char *text, size_t len,
                     struct ah_error *err) {
    *out = NULL;
    struct tokenizer *t = calloc(1, sizeof *t);
    if (!t) {
        free(path);
        return -AH_ENOMEM;
    }
    t->path = path;
    cJSON *j = cJSON_ParseWithLength(text, len);
    int rc = cJSON_IsObject(j) ? load_parts(t, j, err)
                               : ah_fail(err, AH_EFORMAT, "%s: malformed JSON", t->path);
    cJSON_Delete(j);
    bytes_to_unicode(t->byte_char);
    for (int i = 0; i < 324; i++)
        t->char_byte[i] = -1;
    for (int b = 0; b < 256; b++)
        t->char_byte[t->byte_char[b]] = (int16_t)b;
    for (int b = 0; b < 256; b++)
        t->trie_first[b] = -1;
    for (int k = t->trie ? t->trie[TRIE_RAW].child : -1; k >= 0; k = t->trie[k].sibling)
        t->trie_first[t->trie[k].byte] = k;
    t->md = pcre2_match_data_create(4, NULL);
    t->mctx = pcre2_match_context_create(NULL);
    t->jit = pcre2_jit_stack_create(32u << 10, TOK_JIT_STACK, NULL);
    if (t->mctx) {
        pcre2_set_match_limit(t->mctx, TOK_MATCH_LIMIT);
        pcre2_set_depth_limit(t->mctx, TOK_DEPTH_LIMIT);
        if (t->jit) pcre2_jit_stack_assign(t->mctx, NULL, t->jit);
    }
    t->cache_cap = 1 << 16;
    t->cache = calloc(t->cache_cap, sizeof *t->cache);
    if (rc == 0 && (!t->md || !t->mctx || !t->jit || !t->cache)) rc = -AH_ENOMEM;
    if (rc == 0) rc = added_finish(t, err);
    if (rc == -AH_ENOMEM && (!err || !err->code))
        rc = ah_fail(err, AH_ENOMEM, "%s: out of memory loading %zu bytes of JSON", t->path, len);
    if (rc < 0) {
        tok_free(t);
        return rc;
    }
    *out = t;
    return 0;
}

int tok_load(struct tokenizer **out, const char *path, struct ah_error *err) {
    *out = NULL;
    struct stat st;
    size_t pl = strlen(path) + 32;
    char *full = malloc(pl), *text = NULL;
    if (!full) return -AH_ENOMEM;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        snprintf(full, pl, "%s/tokenizer.json", path);
    else
        snprintf(full, pl, "%s", path);
    int rc = 0;
    if (stat(full, &st) != 0 && errno == ENAMETOOLONG)
        rc =
            ah_fail(err, AH_EINVAL, "%.200s...: a path of %zu bytes, longer than the system allows",
                    full, strlen(full));
    else if (stat(full, &st) == 0 && !S_ISREG(st.st_mode)) // a FIFO would block the open forever
        rc = ah_fail(err, AH_EINVAL, "%s: not a regular file (a tokenizer.json is read whole)",
                     full);
    if (rc == 0) rc = ah_read_file(full, &text, err);
    if (rc < 0) {
        free(full);
        return rc;
    }
    rc = load_text(out, full, text, strlen(text), err);
    free(text);
    return rc;
}

int tok_load_json(struct tokenizer **out, const char *json, size_t len, const char *name,
                  struct ah_error *err) {
    char *n = strdup(name);
    return n ? load_text(out, n, json, len, err) : -AH_ENOMEM;
}

int64_t tok_n_ids(const struct tokenizer *t) {
    return t->n_ids;
}

int tok_check_vocab(const struct tokenizer *t, int64_t vocab, const char *config,
                    struct ah_error *err) {
    int64_t top = t->n_ids - 1;
    const char *what = "token";
    for (int i = 0; i < t->post.n_before + t->post.n_after; i++) {
        int64_t id = i < t->post.n_before ? t->post.before[i] : t->post.after[i - t->post.n_before];
        if (id > top) top = id, what = "the post-processor's special token";
    }
    if (top < vocab) return 0;
    bool named = top < t->n_ids && t->id_len[top] != UINT32_MAX;
    return ah_fail(err, AH_EINVAL,
                   "%s: %s id %lld%s%.*s%s is outside the model's vocabulary: %s gives it %lld "
                   "tokens (ids 0 to %lld); this tokenizer does not fit the model",
                   t->path, what, (long long)top, named ? " (\"" : "",
                   named ? (int)(t->id_len[top] > 200 ? 200 : t->id_len[top]) : 0,
                   named ? t->str.p + t->id_off[top] : "", named ? "\")" : "", config,
                   (long long)vocab, (long long)vocab - 1);
}

// Rust's char::is_whitespace (White_Space), what tokenizers' added tokens and Strip strip
static bool rust_space(int32_t c) {
    return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

// s[a, b) without White_Space at its end (rtrim_end) or start (rtrim_start)
static size_t rtrim_end(const char *s, size_t a, size_t b) {
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

static size_t rtrim_start(const char *s, size_t a, size_t b) {
    size_t len;
    while (a < b && rust_space(utf8_next(s + a, b - a, &len)))
        a += len;
    return a;
}

// ----------------------------------------------------------------------------
// normalizers

static int norm_apply(struct tokenizer *t, const struct norm *n, struct buf *s) {
    if (n->k == N_SEQ) {
        for (int i = 0; i < n->n_kids; i++) {
            int rc = norm_apply(t, &n->kids[i], s);
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
        size_t a = n->left ? rtrim_start(s->p, 0, s->n) : 0;
        size_t b = n->right ? rtrim_end(s->p, a, s->n) : s->n;
        rc = buf_put(o, s->p + a, b - a);
    } else { // Replace: every match by content
        if ((rc = regex_spans(t, n->re, s->p, s->n, &t->spans)) < 0) return rc;
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

// ----------------------------------------------------------------------------
// pre-tokenizers: in -> out, piece by piece

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
                if ((rc = regex_spans(t, p->re, s, n, &t->spans)) < 0) return rc;
            } else {
                t->spans.n = 0;
                if ((rc = spans_add(&t->spans, 0, n, true)) < 0) return rc;
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
        if ((rc = regex_spans(t, p->re, s, n, &t->spans)) < 0) return rc;
        if ((rc = split_piece(p, s, &t->spans, out)) < 0) return rc;
    }
    return 0;
}

// the section's pieces end up in t->pb
static int pre_tokenize(struct tokenizer *t) {
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

// ----------------------------------------------------------------------------
// BPE

struct heap_item {
    int32_t rank, left, right, a, b; // merge rank, node positions, their symbols when pushed
};

static bool heap_less(const struct heap_item *x, const struct heap_item *y) {
    return x->rank < y->rank || (x->rank == y->rank && x->left < y->left);
}

static void heap_push(struct heap_item *h, size_t *n, struct heap_item it) {
    size_t i = (*n)++;
    while (i > 0 && heap_less(&it, &h[(i - 1) / 2])) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = it;
}

static struct heap_item heap_pop(struct heap_item *h, size_t *n) {
    struct heap_item top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && heap_less(&h[c + 1], &h[c])) c++;
        if (!heap_less(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = last;
    return top;
}

static void push_pair(const struct tokenizer *t, struct heap_item *h, size_t *n, int32_t left,
                      int32_t right) {
    int32_t a = t->sym[left], b = t->sym[right];
    if (a < 0 || b < 0) return;
    const struct merge_entry *m = merge_slot(t, (uint64_t)a << 32 | (uint64_t)b);
    if (m->rank >= 0) heap_push(h, n, (struct heap_item){m->rank, left, right, a, b});
}

// The symbols of s[0..n) in t->sym, as tokenizers' BPE::merge_word: a character's token; for
// one not in the vocabulary its bytes' <0xXX> tokens (byte_fallback, all of them there), else
// unk_token (consecutive ones fused into one with fuse_unk; an unk waits until a known
// character, the next unk or the end, so byte tokens can come before it, as there), else
// nothing: the characters beside it then merge. Returns their count or -AH_EINVAL (unk_token not
// in the vocabulary, tok_error says so).
static int32_t bpe_symbols(struct tokenizer *t, const char *s, size_t n) {
    int32_t m = 0;
    bool unk = false; // an unk waiting
    for (size_t i = 0, len; i < n; i += len) {
        utf8_next(s + i, n - i, &len);
        int64_t id = vocab_get(t, s + i, len);
        if (id >= 0) {
            if (unk) t->sym[m++] = (int32_t)t->unk_id, unk = false;
            t->sym[m++] = (int32_t)id;
            continue;
        }
        bool all = t->byte_fallback;
        for (size_t k = 0; all && k < len; k++)
            all = t->byte_id[(unsigned char)s[i + k]] >= 0;
        for (size_t k = 0; all && k < len; k++)
            t->sym[m++] = (int32_t)t->byte_id[(unsigned char)s[i + k]];
        if (all) continue;
        if (t->unk_missing) {
            snprintf(t->error, sizeof t->error,
                     "%s: \"model.unk_token\": \"%.200s\" is not in the vocabulary, and a "
                     "character has no token (Hugging Face's tokenizers fail here too)",
                     t->path, t->unk_missing);
            return -AH_EINVAL;
        }
        if (t->unk_id < 0) continue;
        if (unk && !t->fuse_unk) t->sym[m++] = (int32_t)t->unk_id;
        unk = true;
    }
    if (unk) t->sym[m++] = (int32_t)t->unk_id;
    return m;
}

// ids of one piece, appended to out
static int bpe_piece(struct tokenizer *t, const char *s, size_t n, struct tok_ids *out) {
    if (t->ignore_merges) {
        int64_t id = vocab_get(t, s, n);
        if (id >= 0) return tok_ids_push(out, id);
    }
    // the cache: a hit copies the ids
    uint64_t h = hash_bytes(s, n);
    size_t mask = t->cache_cap - 1, slot = h & mask;
    for (;; slot = (slot + 1) & mask) {
        struct cache_entry *e = &t->cache[slot];
        if (!e->used) break;
        if (e->hash == h && e->key_len == n && !memcmp(t->cache_keys.p + e->key_off, s, n)) {
            for (uint32_t k = 0; k < e->ids_len; k++)
                if (tok_ids_push(out, t->cache_ids.v[e->ids_off + k]) < 0) return -AH_ENOMEM;
            return 0;
        }
    }
    if (n + 1 > t->cap_sym) {
        size_t cap = pow2_at_least(n + 1);
        int32_t *a = realloc(t->sym, cap * sizeof *a), *b = NULL, *c = NULL;
        if (a) t->sym = a;
        b = a ? realloc(t->prev, cap * sizeof *b) : NULL;
        if (b) t->prev = b;
        c = b ? realloc(t->next, cap * sizeof *c) : NULL;
        if (c) t->next = c;
        struct heap_item *hp = c ? realloc(t->heap, cap * 3 * sizeof *hp) : NULL;
        if (!hp) return -AH_ENOMEM;
        t->heap = hp;
        t->cap_sym = cap;
        t->cap_heap = cap * 3;
    }
    int32_t m = bpe_symbols(t, s, n);
    if (m < 0) return m;
    size_t first_out = out->n;
    for (int32_t i = 0; i < m; i++) {
        t->prev[i] = i - 1;
        t->next[i] = i + 1 < m ? i + 1 : -1;
    }
    size_t nh = 0;
    for (int32_t i = 0; i + 1 < m; i++)
        push_pair(t, t->heap, &nh, i, i + 1);
    while (nh) {
        struct heap_item it = heap_pop(t->heap, &nh);
        int32_t l = it.left, r = it.right;
        if (t->sym[l] != it.a || t->next[l] != r || t->sym[r] != it.b) continue; // stale
        t->sym[l] = merge_slot(t, (uint64_t)it.a << 32 | (uint64_t)it.b)->result;
        t->sym[r] = -2; // gone
        t->next[l] = t->next[r];
        if (t->next[r] >= 0) t->prev[t->next[r]] = l;
        if (t->prev[l] >= 0) push_pair(t, t->heap, &nh, t->prev[l], l);
        if (t->next[l] >= 0) push_pair(t, t->heap, &nh, l, t->next[l]);
    }
    int rc = 0;
    for (int32_t i = m ? 0 : -1; i >= 0 && rc == 0; i = t->next[i])
        rc = tok_ids_push(out, t->sym[i]);
    if (rc < 0) return rc;
    // remember it (the cache is cleared when it fills up)
    if (t->cache_n * 2 >= t->cache_cap || t->cache_keys.n + n > (1u << 30)) {
        memset(t->cache, 0, t->cache_cap * sizeof *t->cache);
        t->cache_n = 0;
        t->cache_keys.n = 0;
        t->cache_ids.n = 0;
        slot = h & mask;
    }
    struct cache_entry e = {h,
                            (uint32_t)t->cache_keys.n,
                            (uint32_t)n,
                            (uint32_t)t->cache_ids.n,
                            (uint32_t)(out->n - first_out),
                            true};
    if (buf_put(&t->cache_keys, s, n) < 0) return -AH_ENOMEM;
    for (size_t k = first_out; k < out->n; k++)
        if (tok_ids_push(&t->cache_ids, out->v[k]) < 0) return -AH_ENOMEM;
    t->cache[slot] = e;
    t->cache_n++;
    return 0;
}

// ----------------------------------------------------------------------------
// encode

// the longest added token of the trie at root at s[0..n), or -1
static int added_at(const struct tokenizer *t, int root, const char *s, size_t n, size_t *len) {
    int node = root, found = -1;
    for (size_t i = 0; i < n; i++) {
        int k = !i && root == TRIE_RAW ? t->trie_first[(unsigned char)s[0]] : t->trie[node].child;
        while (k >= 0 && t->trie[k].byte != (unsigned char)s[i])
            k = t->trie[k].sibling;
        if (k < 0) break;
        node = k;
        if (t->trie[k].token >= 0) found = t->trie[k].token, *len = i + 1;
    }
    return found;
}

// single_word: is the character of s that ends at b (ends) or starts at a a word character
// (the regex crate's Unicode \w)?
static bool word_char(const struct tokenizer *t, const char *s, size_t a, size_t b) {
    if (a >= b) return false;
    size_t len;
    utf8_next(s + a, b - a, &len);
    return pcre2_match(t->word_re, (PCRE2_SPTR)(s + a), len, 0, PCRE2_ANCHORED | PCRE2_NO_UTF_CHECK,
                       t->md, NULL) >= 0;
}

static bool word_before(const struct tokenizer *t, const char *s, size_t at) {
    size_t c = at;
    while (c > 0 && ((unsigned char)s[--c] & 0xC0) == 0x80) {
    }
    return at > 0 && word_char(t, s, c, at);
}

static int segs_add(struct segs *sg, size_t a, size_t b, int token) {
    if (grow_one((void **)&sg->v, sg->n, &sg->cap, sizeof *sg->v) < 0) return -AH_ENOMEM;
    sg->v[sg->n++] = (struct seg){a, b, token};
    return 0;
}

// s[0..n) cut at the added tokens of the trie at root, as tokenizers' find_matches: leftmost
// longest matches, each search going on where the last match ended; one not a single word
// when it must be is dropped; lstrip/rstrip take the whitespace beside it into the token.
static int find_added(struct tokenizer *t, int root, const char *s, size_t n, struct segs *out) {
    out->n = 0;
    size_t start_offset = 0;
    int rc = 0;
    for (size_t i = 0, len = 0; i < n && rc == 0;) {
        int a = added_at(t, root, s + i, n - i, &len);
        if (a < 0) {
            i++;
            continue;
        }
        const struct added *tk = &t->added[a];
        size_t start = i, stop = i + len;
        i = stop;
        if (tk->single_word && (word_before(t, s, start) || word_char(t, s, stop, n))) continue;
        if (tk->lstrip) {
            size_t ns = rtrim_end(s, 0, start);
            start = ns > start_offset ? ns : start_offset;
        }
        if (tk->rstrip) stop = rtrim_start(s, stop, n);
        if (start_offset < start) rc = segs_add(out, start_offset, start, -1);
        if (rc == 0) rc = segs_add(out, start, stop, a);
        start_offset = stop;
    }
    if (rc == 0 && start_offset != n) rc = segs_add(out, start_offset, n, -1);
    return rc;
}

// one piece of a normalized section: pre-tokenize, BPE
static int encode_piece(struct tokenizer *t, const char *s, size_t n, bool first,
                        struct tok_ids *out) {
    t->section_first = first;
    pieces_clear(&t->pa);
    int rc = pieces_add(&t->pa, s, n);
    if (rc == 0) rc = pre_tokenize(t);
    for (size_t i = 0; i < t->pa.n && rc == 0; i++)
        rc = bpe_piece(t, t->pa.b.p + t->pa.v[i].off, t->pa.v[i].len, out);
    return rc;
}

// one section between added tokens: normalize, cut at the normalized added tokens, then each
// piece; first: the section starts the text
static int encode_section(struct tokenizer *t, const char *s, size_t n, bool first,
                          struct tok_ids *out) {
    struct buf *b = &t->sec;
    b->n = 0;
    int rc = buf_put(b, s, n);
    if (rc == 0 && t->norm) rc = norm_apply(t, t->norm, b);
    if (rc < 0 || b->n == 0) return rc;
    if (!t->any_normalized) return encode_piece(t, b->p, b->n, first, out);
    if ((rc = find_added(t, TRIE_NORM, b->p, b->n, &t->segs_norm)) < 0) return rc;
    for (size_t i = 0; i < t->segs_norm.n && rc == 0; i++) {
        const struct seg *g = &t->segs_norm.v[i];
        rc = g->token >= 0 ? tok_ids_push(out, t->added[g->token].id)
                           : encode_piece(t, b->p + g->a, g->b - g->a, first && g->a == 0, out);
    }
    return rc;
}

int tok_encode(struct tokenizer *t, const char *text, size_t len, bool add_special,
               struct tok_ids *out) {
    char *s = malloc(3 * len + 1);
    if (!s) return -AH_ENOMEM;
    size_t n = tok_utf8_sanitize(text, len, s);
    int rc = 0;
    if (add_special)
        for (int i = 0; i < t->post.n_before && rc == 0; i++)
            rc = tok_ids_push(out, t->post.before[i]);
    // the added tokens matched in the text as it is, then the sections between them
    if (rc == 0) rc = find_added(t, TRIE_RAW, s, n, &t->segs_raw);
    for (size_t i = 0; i < t->segs_raw.n && rc == 0; i++) {
        const struct seg *g = &t->segs_raw.v[i];
        rc = g->token >= 0 ? tok_ids_push(out, t->added[g->token].id)
                           : encode_section(t, s + g->a, g->b - g->a, g->a == 0, out);
    }
    if (add_special)
        for (int k = 0; k < t->post.n_after && rc == 0; k++)
            rc = tok_ids_push(out, t->post.after[k]);
    free(s);
    return rc;
}

// ----------------------------------------------------------------------------
// decode

int tok_decode(const struct tokenizer *t, const int64_t *ids, size_t n, bool skip_special,
               char **text, size_t *len, struct ah_error *err) {
    struct buf raw = {0};
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        int64_t id = ids[i];
        if (id < 0 || id >= t->n_ids || t->id_len[id] == UINT32_MAX) {
            rc = ah_fail(err, AH_EINVAL, "token id %lld is not in the vocabulary of %s",
                         (long long)id, t->path);
            break;
        }
        if (t->dec) { // the decoder chain, once every id is known
            if (i + 1 == n) return decode_chain(t, ids, n, skip_special, text, len);
            continue;
        }
        if (skip_special && t->is_special[id]) continue;
        const char *s = t->str.p + t->id_off[id];
        size_t sl = t->id_len[id];
        if (t->is_added[id] || !t->byte_level_decoder) {
            rc = buf_put(&raw, s, sl);
            continue;
        }
        for (size_t k = 0; k < sl && rc == 0;) { // characters back to bytes
            size_t cl;
            int32_t cp = utf8_next(s + k, sl - k, &cl);
            if (cp < 324 && t->char_byte[cp] >= 0) {
                char c = (char)t->char_byte[cp];
                rc = buf_put(&raw, &c, 1);
            } else {
                rc = buf_put(&raw, s + k, cl);
            }
            k += cl;
        }
    }
    char *o = rc == 0 ? malloc(3 * raw.n + 1) : NULL;
    if (rc == 0 && !o) rc = -AH_ENOMEM;
    if (rc == 0) {
        *len = tok_utf8_sanitize(raw.p ? raw.p : "", raw.n, o);
        o[*len] = '\0';
        *text = o;
    }
    free(raw.p);
    return rc;
}

// ----------------------------------------------------------------------------
// SentencePiece-style files (Llama 2, Mistral, Gemma): the Metaspace pre-tokenizer, BPE's
// fuse_unk, and the decoders Replace, ByteFallback, Fuse, Strip, Metaspace (and ByteLevel) in a
// Sequence. Semantics are those of Hugging Face tokenizers (Rust) where transformers.js differs.

enum dec_kind { D_SEQ, D_BYTELEVEL, D_REPLACE, D_BYTEFALLBACK, D_FUSE, D_STRIP, D_METASPACE };
struct dec {
    enum dec_kind k;
    struct dec *kids; // (n_kids) Sequence
    int n_kids;
    char *pat, *content; // Replace: a String pattern (or NULL) and what replaces it
    pcre2_code *re;      // Replace: a Regex pattern
    char ch[5];          // Strip: the character; Metaspace: the replacement (UTF-8)
    size_t ch_len;
    int start, stop; // Strip: at most this many characters from the start / the end
    bool prefix;     // Metaspace: prepend_scheme is not "never" (the first token loses them)
};

static void dec_clear(struct dec *d) {
    for (int i = 0; i < d->n_kids; i++)
        dec_clear(&d->kids[i]);
    free(d->kids);
    free(d->pat);
    free(d->content);
    pcre2_code_free(d->re);
}

static void dec_free(struct dec *d) { // safe on NULL
    if (d) dec_clear(d);
    free(d);
}

// one character (a JSON string of exactly one code point) into ch; false if it is not one
static bool one_char(const cJSON *j, const char *key, char ch[5], size_t *ch_len) {
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
static int load_metaspace(struct tokenizer *t, const cJSON *j, struct pre *p, const char *where,
                          struct ah_error *err) {
    p->k = P_METASPACE;
    if (!one_char(j, "replacement", p->rep, &p->rep_len))
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

static int load_dec(struct tokenizer *t, const cJSON *j, struct dec *d, bool nested,
                    struct ah_error *err) {
    const char *type = jstr(j, "type");
    static const struct {
        const char *name;
        enum dec_kind k;
    } kinds[] = {
        {"Sequence", D_SEQ},       {"ByteLevel", D_BYTELEVEL},       {"Replace", D_REPLACE},
        {"Fuse", D_FUSE},          {"ByteFallback", D_BYTEFALLBACK}, {"Strip", D_STRIP},
        {"Metaspace", D_METASPACE}};
    size_t i = 0;
    while (i < sizeof kinds / sizeof kinds[0] && (!type || strcmp(type, kinds[i].name)))
        i++;
    if (i == sizeof kinds / sizeof kinds[0] || (nested && kinds[i].k == D_SEQ))
        return ah_fail(err, AH_EFORMAT,
                       "%s: \"decoder\": type \"%s\" is not supported (expected Sequence, "
                       "ByteLevel, Replace, ByteFallback, Fuse, Strip or Metaspace%s)",
                       t->path, type ? type : "?", nested ? "; Sequences do not nest" : "");
    d->k = kinds[i].k;
    if (d->k == D_SEQ) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(j, "decoders"), *e;
        if (!cJSON_IsArray(list))
            return ah_fail(err, AH_EFORMAT, "%s: decoder Sequence: expected \"decoders\" (a list)",
                           t->path);
        d->kids = calloc((size_t)cJSON_GetArraySize(list) + 1, sizeof *d->kids);
        if (!d->kids) return -AH_ENOMEM;
        int rc;
        cJSON_ArrayForEach(e, list) {
            d->n_kids++; // counted first: a half-loaded kid is freed too
            if ((rc = load_dec(t, e, &d->kids[d->n_kids - 1], true, err)) < 0) return rc;
        }
    } else if (d->k == D_REPLACE) {
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "pattern");
        const char *rx = jstr(p, "Regex"), *lit = jstr(p, "String"), *c = jstr(j, "content");
        if (!c || (!rx && !(lit && *lit)))
            return ah_fail(err, AH_EFORMAT,
                           "%s: decoder Replace: expected \"pattern\" ({\"String\": non-empty} "
                           "or {\"Regex\"}) and \"content\"",
                           t->path);
        d->content = strdup(c);
        if (!d->content) return -AH_ENOMEM;
        if (rx) return regex_compile(t, &d->re, rx, "decoder Replace", err);
        d->pat = strdup(lit);
        if (!d->pat) return -AH_ENOMEM;
    } else if (d->k == D_STRIP) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "start");
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(j, "stop");
        if (!one_char(j, "content", d->ch, &d->ch_len) || !cJSON_IsNumber(a) ||
            !cJSON_IsNumber(b) || a->valuedouble < 0 || b->valuedouble < 0 ||
            a->valuedouble > 1e6 || b->valuedouble > 1e6)
            return ah_fail(err, AH_EFORMAT,
                           "%s: decoder Strip: expected \"content\" (one character), \"start\" "
                           "and \"stop\" (counts)",
                           t->path);
        d->start = (int)a->valuedouble;
        d->stop = (int)b->valuedouble;
    } else if (d->k == D_METASPACE) {
        struct pre p = {0}; // the same fields as the pre-tokenizer
        int rc = load_metaspace(t, j, &p, "decoder", err);
        if (rc < 0) return rc;
        memcpy(d->ch, p.rep, sizeof d->ch);
        d->ch_len = p.rep_len;
        d->prefix = p.prepend != MS_NEVER;
    }
    return 0;
}

// the parts of the file only SentencePiece-style tokenizers use: model.fuse_unk, the decoder
static int load_sp(struct tokenizer *t, const cJSON *j, struct ah_error *err) {
    t->fuse_unk = jbool(cJSON_GetObjectItemCaseSensitive(j, "model"), "fuse_unk", false);
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(j, "decoder");
    if (!cJSON_IsObject(d) || t->byte_level_decoder) return 0; // none, or ByteLevel alone
    t->dec = calloc(1, sizeof *t->dec);
    if (!t->dec) return -AH_ENOMEM;
    return load_dec(t, d, t->dec, false, err);
}

// ---- decoding through the chain: a list of token strings, step by step ----

// tokens are pieces that may be empty; add one from s, or end one begun at offset off
static int toks_add(struct pieces *p, const char *s, size_t n) {
    if (grow_one((void **)&p->v, p->n, &p->cap, sizeof *p->v) < 0) return -AH_ENOMEM;
    size_t off = p->b.n;
    if (buf_put(&p->b, s, n) < 0) return -AH_ENOMEM;
    p->v[p->n++] = (struct piece){off, n};
    return 0;
}

static int toks_end(struct pieces *p, size_t off) {
    if (grow_one((void **)&p->v, p->n, &p->cap, sizeof *p->v) < 0) return -AH_ENOMEM;
    p->v[p->n++] = (struct piece){off, p->b.n - off};
    return 0;
}

// Replace: every match of the pattern in s by content
static int dec_replace(const struct dec *d, pcre2_match_data *md, pcre2_match_context *mctx,
                       struct spans *sp, const char *s, size_t n, struct buf *o) {
    size_t cl = strlen(d->content);
    if (d->re) {
        size_t at = 0; // a limit hit (the tokenizer's match limits) is an error, not "no match"
        int why = 0, rc = spans_of(d->re, md, mctx, s, n, sp, &why, &at);
        if (rc == 1) return -AH_EINVAL;
        for (size_t i = 0; i < sp->n && rc == 0; i++)
            rc = sp->v[i].match ? buf_put(o, d->content, cl)
                                : buf_put(o, s + sp->v[i].a, sp->v[i].b - sp->v[i].a);
        return rc;
    }
    size_t pl = strlen(d->pat), a = 0;
    for (size_t i = 0; i + pl <= n;) {
        if (memcmp(s + i, d->pat, pl)) {
            i++;
            continue;
        }
        if (buf_put(o, s + a, i - a) < 0 || buf_put(o, d->content, cl) < 0) return -AH_ENOMEM;
        i += pl;
        a = i;
    }
    return buf_put(o, s + a, n - a);
}

static int hex_digit(char c) {
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

// ByteFallback: a run of <0xXX> tokens becomes its text; bytes that are not valid UTF-8 become
// one U+FFFD each (tokenizers' byte_fallback.rs; transformers.js decodes them the WHATWG way)
static int dec_bytes_flush(struct buf *run, struct pieces *out) {
    if (run->n == 0) return 0;
    int rc = 0;
    char *v = malloc(3 * run->n + 1);
    if (!v) return -AH_ENOMEM;
    size_t vn = tok_utf8_sanitize(run->p, run->n, v);
    if (vn == run->n && !memcmp(v, run->p, vn)) {
        rc = toks_add(out, v, vn);
    } else {
        for (size_t k = 0; k < run->n && rc == 0; k++)
            rc = toks_add(out, "\xEF\xBF\xBD", 3);
    }
    free(v);
    run->n = 0;
    return rc;
}

// the characters of s with c, up to `start` of them at its start and `stop` at its end, removed
static void strip_span(const struct dec *d, const char *s, size_t n, size_t *a, size_t *b) {
    *a = 0, *b = n; // (UTF-8 is self-synchronizing: a byte match is a character match)
    for (int k = 0; k < d->start && *a + d->ch_len <= n; k++) {
        if (memcmp(s + *a, d->ch, d->ch_len)) break;
        *a += d->ch_len;
    }
    for (int k = 0; k < d->stop && *b >= *a + d->ch_len; k++) {
        if (memcmp(s + *b - d->ch_len, d->ch, d->ch_len)) break;
        *b -= d->ch_len;
    }
}

static int dec_step(const struct tokenizer *t, const struct dec *d, pcre2_match_data *md,
                    struct spans *sp, const struct pieces *in, struct pieces *out) {
    pieces_clear(out);
    struct buf run = {0};
    int rc = 0;
    for (size_t i = 0; i < in->n && rc == 0; i++) {
        const char *s = in->b.p + in->v[i].off;
        size_t n = in->v[i].len, off = out->b.n, a, b;
        switch (d->k) {
            case D_REPLACE:
                if ((rc = dec_replace(d, md, tok_mctx(t), sp, s, n, &out->b)) == 0)
                    rc = toks_end(out, off);
                break;
            case D_BYTEFALLBACK:
                if (n == 6 && !memcmp(s, "<0x", 3) && s[5] == '>' && hex_digit(s[3]) >= 0 &&
                    hex_digit(s[4]) >= 0) {
                    char c = (char)(hex_digit(s[3]) * 16 + hex_digit(s[4]));
                    rc = buf_put(&run, &c, 1);
                } else if ((rc = dec_bytes_flush(&run, out)) == 0) {
                    rc = toks_add(out, s, n);
                }
                break;
            case D_FUSE: // everything joins the first token
                if ((rc = buf_put(&out->b, s, n)) == 0 && i + 1 == in->n) rc = toks_end(out, 0);
                break;
            case D_STRIP:
                strip_span(d, s, n, &a, &b);
                rc = toks_add(out, s + a, b - a);
                break;
            case D_METASPACE: // the replacement is a space, and gone from the first token
                for (size_t k = 0; k < n && rc == 0;) {
                    bool r = k + d->ch_len <= n && !memcmp(s + k, d->ch, d->ch_len);
                    if (r && !(i == 0 && d->prefix)) rc = buf_put(&out->b, " ", 1);
                    if (!r) rc = buf_put(&out->b, s + k, 1);
                    k += r ? d->ch_len : 1;
                }
                if (rc == 0) rc = toks_end(out, off);
                break;
            default: // ByteLevel: characters back to bytes, all joined (lossy UTF-8 below)
                for (size_t k = 0; k < n && rc == 0;) {
                    size_t cl;
                    int32_t cp = utf8_next(s + k, n - k, &cl);
                    char c = cp < 324 && t->char_byte[cp] >= 0 ? (char)t->char_byte[cp] : 0;
                    rc = cp < 324 && t->char_byte[cp] >= 0 ? buf_put(&run, &c, 1)
                                                           : buf_put(&run, s + k, cl);
                    k += cl;
                }
                break;
        }
    }
    if (rc == 0 && d->k == D_BYTEFALLBACK) rc = dec_bytes_flush(&run, out);
    if (rc == 0 && d->k == D_BYTELEVEL) {
        char *v = malloc(3 * run.n + 1);
        rc = v ? toks_add(out, v, tok_utf8_sanitize(run.p ? run.p : "", run.n, v)) : -AH_ENOMEM;
        free(v);
    }
    free(run.p);
    return rc;
}

// tok_decode through the decoder chain: the ids' token strings (added tokens too, as
// tokenizers and transformers.js do), each step in turn, then joined
static int decode_chain(const struct tokenizer *t, const int64_t *ids, size_t n, bool skip_special,
                        char **text, size_t *len) {
    struct pieces a = {0}, b = {0};
    struct spans sp = {0};
    pcre2_match_data *md = pcre2_match_data_create(4, NULL);
    int rc = md ? 0 : -AH_ENOMEM;
    for (size_t i = 0; i < n && rc == 0; i++)
        if (!(skip_special && t->is_special[ids[i]]))
            rc = toks_add(&a, t->str.p + t->id_off[ids[i]], t->id_len[ids[i]]);
    const struct dec *steps = t->dec->k == D_SEQ ? t->dec->kids : t->dec;
    int n_steps = t->dec->k == D_SEQ ? t->dec->n_kids : 1;
    for (int k = 0; k < n_steps && rc == 0; k++) {
        rc = dec_step(t, &steps[k], md, &sp, &a, &b);
        struct pieces tmp = a;
        a = b;
        b = tmp;
    }
    char *o = rc == 0 ? malloc(3 * a.b.n + 1) : NULL;
    if (rc == 0 && !o) rc = -AH_ENOMEM;
    if (rc == 0) { // the tokens joined (their order in the buffer)
        struct buf all = {0};
        for (size_t i = 0; i < a.n && rc == 0; i++)
            rc = buf_put(&all, a.b.p + a.v[i].off, a.v[i].len);
        *len = rc == 0 ? tok_utf8_sanitize(all.p ? all.p : "", all.n, o) : 0;
        o[*len] = '\0';
        free(all.p);
    }
    if (rc == 0) {
        *text = o;
    } else {
        free(o);
    }
    pieces_free(&a);
    pieces_free(&b);
    free(sp.v);
    pcre2_match_data_free(md);
    return rc;
}
