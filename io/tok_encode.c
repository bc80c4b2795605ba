// tok_encode.c - encoding a text (see tokenizer.h, tokenizer_int.h): the added tokens cut out of
// the raw text, then per section the normalizer, the normalized added tokens, the pre-tokenizer
// and BPE on each piece (a heap of merges, results cached), with the post-processor's ids around.
#define _POSIX_C_SOURCE 200809L
#include "io/tokenizer_int.h"

#include <stdio.h>

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

// the cache: a hit (1) appends the ids to out; a miss (0) leaves in *slot the empty slot for h
static int cache_get(const struct tokenizer *t, const char *s, size_t n, uint64_t h, size_t *slot,
                     struct tok_ids *out) {
    size_t mask = t->cache_cap - 1;
    for (*slot = h & mask;; *slot = (*slot + 1) & mask) {
        const struct cache_entry *e = &t->cache[*slot];
        if (!e->used) return 0;
        if (e->hash == h && e->key_len == n && !memcmp(t->cache_keys.p + e->key_off, s, n)) {
            for (uint32_t k = 0; k < e->ids_len; k++)
                if (tok_ids_push(out, t->cache_ids.v[e->ids_off + k]) < 0) return -AH_ENOMEM;
            return 1;
        }
    }
}

// remember s's ids, out->v[first_out..] (the cache is cleared when it fills up)
static int cache_put(struct tokenizer *t, const char *s, size_t n, uint64_t h, size_t slot,
                     const struct tok_ids *out, size_t first_out) {
    if (t->cache_n * 2 >= t->cache_cap || t->cache_keys.n + n > (1u << 30)) {
        memset(t->cache, 0, t->cache_cap * sizeof *t->cache);
        t->cache_n = 0;
        t->cache_keys.n = 0;
        t->cache_ids.n = 0;
        slot = h & (t->cache_cap - 1);
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

// room for the symbols of an n-byte piece: sym, prev, next (n + 1) and the heap (3 (n + 1))
static int sym_reserve(struct tokenizer *t, size_t n) {
    if (n + 1 <= t->cap_sym) return 0;
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
    return 0;
}

// the m symbols of t->sym merged, lowest rank first (leftmost among equal ranks): a linked list
// (prev, next) from node 0, merged nodes' symbols -2
static void bpe_merge(struct tokenizer *t, int32_t m) {
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
}

// ids of one piece, appended to out
static int bpe_piece(struct tokenizer *t, const char *s, size_t n, struct tok_ids *out) {
    if (t->ignore_merges) {
        int64_t id = vocab_get(t, s, n);
        if (id >= 0) return tok_ids_push(out, id);
    }
    uint64_t h = hash_bytes(s, n);
    size_t slot;
    int rc = cache_get(t, s, n, h, &slot, out);
    if (rc != 0) return rc < 0 ? rc : 0;
    if ((rc = sym_reserve(t, n)) < 0) return rc;
    int32_t m = bpe_symbols(t, s, n);
    if (m < 0) return m;
    size_t first_out = out->n;
    bpe_merge(t, m);
    for (int32_t i = m ? 0 : -1; i >= 0 && rc == 0; i = t->next[i])
        rc = tok_ids_push(out, t->sym[i]);
    return rc < 0 ? rc : cache_put(t, s, n, h, slot, out, first_out);
}

// the longest added token of the trie at root at s[0..n), or -1
int tok_added_at(const struct tokenizer *t, int root, const char *s, size_t n, size_t *len) {
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
        int a = tok_added_at(t, root, s + i, n - i, &len);
        if (a < 0) {
            i++;
            continue;
        }
        const struct added *tk = &t->added[a];
        size_t start = i, stop = i + len;
        i = stop;
        if (tk->single_word && (word_before(t, s, start) || word_char(t, s, stop, n))) continue;
        if (tk->lstrip) {
            size_t ns = tok_rtrim_end(s, 0, start);
            start = ns > start_offset ? ns : start_offset;
        }
        if (tk->rstrip) stop = tok_rtrim_start(s, stop, n);
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
    if (rc == 0) rc = tok_pre_tokenize(t);
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
    if (rc == 0 && t->norm) rc = tok_norm_apply(t, t->norm, b);
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
