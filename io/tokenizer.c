// tokenizer.c - Hugging Face tokenizer.json, byte-level BPE (see tokenizer.h): loading the file,
// its parts in order (tokenizer_int.h lists the files of the other jobs), and freeing it.
#define _POSIX_C_SOURCE 200809L
#include "io/tokenizer_int.h"

#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>

const char *tok_error(const struct tokenizer *t) {
    return t->error;
}

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
    if (t->norm) tok_norm_free(t->norm);
    free(t->norm);
    if (t->pre) tok_pre_free(t->pre);
    free(t->pre);
    tok_dec_free(t->dec);
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
        rc = tok_load_model(t, cJSON_GetObjectItemCaseSensitive(j, "model"),
                            cJSON_GetObjectItemCaseSensitive(j, "added_tokens"), err);
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(j, "normalizer");
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "pre_tokenizer");
    if (rc == 0 && cJSON_IsObject(n)) {
        t->norm = calloc(1, sizeof *t->norm);
        rc = t->norm ? tok_load_norm(t, n, t->norm, err) : -AH_ENOMEM;
    }
    if (rc == 0 && cJSON_IsObject(p)) {
        t->pre = calloc(1, sizeof *t->pre);
        rc = t->pre ? tok_load_pre(t, p, t->pre, false, err) : -AH_ENOMEM;
    }
    if (rc == 0) rc = tok_load_post(t, cJSON_GetObjectItemCaseSensitive(j, "post_processor"), err);
    const char *dec = jstr(cJSON_GetObjectItemCaseSensitive(j, "decoder"), "type");
    t->byte_level_decoder = dec && !strcmp(dec, "ByteLevel");
    if (rc == 0) rc = tok_load_sp(t, j, err);
    return rc;
}

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
                rc = tok_norm_apply(t, t->norm, &t->sec);
            if (rc == -AH_EINVAL) return ah_fail(err, AH_EINVAL, "%s", t->error);
            if (rc == 0 && t->sec.n == 0)
                return ah_fail(err, AH_EFORMAT,
                               "%s: \"added_tokens\": \"%s\" (normalized: true) is empty once "
                               "normalized",
                               t->path, a->content);
            size_t len = 0;
            if (rc == 0 &&
                (tok_added_at(t, TRIE_NORM, t->sec.p, t->sec.n, &len) < 0 || len != t->sec.n))
                rc = tok_trie_add(t, TRIE_NORM, t->sec.p, t->sec.n, k);
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
