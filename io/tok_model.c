// tok_model.c - the tokenizer's BPE model (see tokenizer_int.h): "model" (its keys checked, the
// vocabulary, the merges) and "added_tokens" (their ids as Hugging Face's tokenizers give them,
// into the vocabulary and the raw-text trie).
#define _POSIX_C_SOURCE 200809L
#include "io/tokenizer_int.h"

#include <stdio.h>

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

int tok_trie_add(struct tokenizer *t, int root, const char *s, size_t n, int token) {
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
    if (a->len && !a->normalized)
        return tok_trie_add(t, TRIE_RAW, a->content, a->len, t->n_added - 1);
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

int tok_load_model(struct tokenizer *t, const cJSON *m, const cJSON *added_list,
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
