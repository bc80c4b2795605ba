// tokenizer_int.h - the tokenizer's insides, shared by its files (not part of the io/ API).
//
// The pipeline of one text: WHATWG UTF-8 decoding -> added tokens cut out (a byte trie) ->
// per section: normalizer -> pre-tokenizer (a list of pieces) -> BPE per piece (cached) ->
// post-processor. Pieces live in growable byte buffers owned by the tokenizer and reused.
//
// The files, one job each, calls pointing down this list (no cycle; tests/check_structure.py):
//   tokenizer.c   loading a tokenizer.json: its parts in order, the added tokens' tries, tok_free
//   tok_decode.c  the post-processor (ids around the sequence) and decoding (the decoder chain)
//   tok_encode.c  encoding: added tokens cut out, sections, BPE with its cache
//   tok_model.c   the BPE model: vocabulary, added tokens, merges
//   tok_pre.c     pre-tokenizers (Split, ByteLevel, Digits, Metaspace, Sequence)
//   tok_norm.c    normalizers (NFC .. NFKD, Lowercase, Replace, Prepend, Strip, Sequence)
//   tok_text.c    UTF-8, the id list, regexes (PCRE2 with JavaScript's classes) and their spans
// The small helpers below are static inline: the BPE and the vocabulary look-ups are hot.
#ifndef AH_IO_TOKENIZER_INT_H
#define AH_IO_TOKENIZER_INT_H

#include "io/tokenizer.h" // defines: struct tokenizer (opaque there), struct tok_ids
#include "model/ah.h"     // defines: AH_E*, ah_fail

#define PCRE2_CODE_UNIT_WIDTH 8
#include <cjson/cJSON.h>
#include <pcre2.h>
#include <utf8proc.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

// ----------------------------------------------------------------------------
// small containers

struct buf {
    char *p;
    size_t n, cap;
};

static inline int buf_reserve(struct buf *b, size_t more) {
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

static inline int buf_put(struct buf *b, const void *s, size_t n) {
    if (buf_reserve(b, n + 1) < 0) return -AH_ENOMEM;
    memcpy(b->p + b->n, s, n);
    b->n += n;
    return 0;
}

// room for one more element in a growable array of `elem`-byte elements
static inline int grow_one(void **v, size_t n, size_t *cap, size_t elem) {
    if (n < *cap) return 0;
    size_t c = *cap ? *cap * 2 : 64;
    void *p = realloc(*v, c * elem);
    if (!p) return -AH_ENOMEM;
    *v = p;
    *cap = c;
    return 0;
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

static inline void pieces_clear(struct pieces *p) {
    p->n = 0;
    p->b.n = 0;
}

static inline int pieces_add(struct pieces *p, const char *s, size_t n) {
    if (n == 0) return 0;
    if (grow_one((void **)&p->v, p->n, &p->cap, sizeof *p->v) < 0) return -AH_ENOMEM;
    size_t off = p->b.n;
    if (buf_put(&p->b, s, n) < 0) return -AH_ENOMEM;
    p->v[p->n++] = (struct piece){off, n};
    return 0;
}

static inline void pieces_free(struct pieces *p) {
    free(p->v);
    free(p->b.p);
    memset(p, 0, sizeof *p);
}

// ---- hashes and UTF-8 ----

static inline uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static inline uint64_t hash_u64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

// the code point at s (n > 0 bytes left) and its length; a bad sequence is one U+FFFD byte
static inline int32_t utf8_next(const char *s, size_t n, size_t *len) {
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

static inline size_t utf8_put(char *out, int32_t cp) {
    return (size_t)utf8proc_encode_char(cp, (utf8proc_uint8_t *)out);
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

// ---- vocabulary: string -> id; merges: (left id, right id) -> (rank, result id) ----

static inline struct vocab_entry *vocab_slot(const struct tokenizer *t, const char *s, size_t n) {
    size_t mask = t->vocab_cap - 1, i = hash_bytes(s, n) & mask;
    for (;; i = (i + 1) & mask) {
        struct vocab_entry *e = &t->vocab[i];
        if (e->id < 0 || (e->len == n && !memcmp(t->str.p + e->off, s, n))) return e;
    }
}

static inline int64_t vocab_get(const struct tokenizer *t, const char *s, size_t n) {
    if (n <= 2 && n > 0) { // one short character: the table
        size_t len;
        int32_t cp = utf8_next(s, n, &len);
        if (len == n && cp < 1024) return t->char_id[cp];
    }
    return vocab_slot(t, s, n)->id;
}

static inline struct merge_entry *merge_slot(const struct tokenizer *t, uint64_t key) {
    size_t mask = t->merges_cap - 1, i = hash_u64(key) & mask;
    for (;; i = (i + 1) & mask) {
        struct merge_entry *e = &t->merges[i];
        if (e->rank < 0 || e->key == key) return e;
    }
}

// ---- loading ----

static inline size_t pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n)
        c *= 2;
    return c;
}

static inline const char *jstr(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static inline bool jbool(const cJSON *o, const char *key, bool dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}

static inline bool bad_id(const cJSON *v) {
    return !cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 16777215 ||
           v->valuedouble != (double)(int64_t)v->valuedouble;
}

// ----------------------------------------------------------------------------
// between the files: 0 or a negative AH_E* unless said otherwise; the loaders take err

// tok_text.c
int tok_regex_compile(struct tokenizer *t, pcre2_code **re, const char *pattern, const char *where,
                      struct ah_error *err);
// a string pattern: every ASCII punctuation character escaped
int tok_regex_literal(struct tokenizer *t, pcre2_code **re, const char *s, const char *where,
                      struct ah_error *err);
int tok_spans_add(struct spans *sp, size_t a, size_t b, bool match);
// spans covering s: gaps (match false) and matches (match true), in order, none empty. Returns
// 0, -AH_ENOMEM, or 1 when PCRE2 gave up (*why: its code, *at_out: where), never taken for "no
// match".
int tok_spans_of(const pcre2_code *re, pcre2_match_data *md, pcre2_match_context *mctx,
                 const char *s, size_t n, struct spans *sp, int *why, size_t *at_out);
// tok_spans_of with the tokenizer's match data and limits; PCRE2 giving up is -AH_EINVAL with
// tok_error naming the regex
int tok_regex_spans(struct tokenizer *t, const pcre2_code *re, const char *s, size_t n,
                    struct spans *sp);

// tok_norm.c
int tok_load_norm(struct tokenizer *t, const cJSON *j, struct norm *n, struct ah_error *err);
void tok_norm_free(struct norm *n);                                           // its parts, not n
int tok_norm_apply(struct tokenizer *t, const struct norm *n, struct buf *s); // s in place
// s[a, b) without Rust's White_Space at its end (tok_rtrim_end: the new b) or start (the new a)
size_t tok_rtrim_end(const char *s, size_t a, size_t b);
size_t tok_rtrim_start(const char *s, size_t a, size_t b);

// tok_pre.c
int tok_load_pre(struct tokenizer *t, const cJSON *j, struct pre *p, bool nested,
                 struct ah_error *err);
void tok_pre_free(struct pre *p); // its parts, not p
// where: "pre_tokenizer" or "decoder", for messages
int tok_load_metaspace(struct tokenizer *t, const cJSON *j, struct pre *p, const char *where,
                       struct ah_error *err);
// one character (a JSON string of exactly one code point) into ch; false if it is not one
bool tok_one_char(const cJSON *j, const char *key, char ch[5], size_t *ch_len);
int tok_pre_tokenize(struct tokenizer *t); // t->pa's pieces, pre-tokenized, in t->pa

// tok_model.c
int tok_load_model(struct tokenizer *t, const cJSON *m, const cJSON *added_list,
                   struct ah_error *err);
int tok_trie_add(struct tokenizer *t, int root, const char *s, size_t n, int token);

// tok_encode.c (tok_encode is in tokenizer.h)
// the longest added token of the trie at root at s[0..n) (*len: its bytes), or -1
int tok_added_at(const struct tokenizer *t, int root, const char *s, size_t n, size_t *len);

// tok_decode.c (tok_decode is in tokenizer.h)
int tok_load_post(struct tokenizer *t, const cJSON *j, struct ah_error *err);
// the parts of the file only SentencePiece-style tokenizers use: model.fuse_unk, the decoder
int tok_load_sp(struct tokenizer *t, const cJSON *j, struct ah_error *err);
void tok_dec_free(struct dec *d); // safe on NULL

#endif
