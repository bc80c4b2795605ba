// tok_decode.c - the post-processor and decoding (see tokenizer.h, tokenizer_int.h): the special
// ids around a sequence (TemplateProcessing, Bert/Roberta, Sequence), and ids back to text,
// through the ByteLevel mapping or the decoder chain.
//
// SentencePiece-style files (Llama 2, Mistral, Gemma) bring BPE's fuse_unk and the decoders
// Replace, ByteFallback, Fuse, Strip, Metaspace (and ByteLevel) in a Sequence. Semantics are those
// of Hugging Face tokenizers (Rust) where transformers.js differs.
#define _POSIX_C_SOURCE 200809L
#include "io/tokenizer_int.h"

// ----------------------------------------------------------------------------
// the post-processor

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

int tok_load_post(struct tokenizer *t, const cJSON *j, struct ah_error *err) {
    const char *type = jstr(j, "type");
    if (!type || !strcmp(type, "ByteLevel")) return 0;
    if (!strcmp(type, "Sequence")) {
        const cJSON *e;
        int rc;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(j, "processors")) {
            if ((rc = tok_load_post(t, e, err)) < 0) return rc;
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

void tok_dec_free(struct dec *d) { // safe on NULL
    if (d) dec_clear(d);
    free(d);
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
        if (rx) return tok_regex_compile(t, &d->re, rx, "decoder Replace", err);
        d->pat = strdup(lit);
        if (!d->pat) return -AH_ENOMEM;
    } else if (d->k == D_STRIP) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "start");
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(j, "stop");
        if (!tok_one_char(j, "content", d->ch, &d->ch_len) || !cJSON_IsNumber(a) ||
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
        int rc = tok_load_metaspace(t, j, &p, "decoder", err);
        if (rc < 0) return rc;
        memcpy(d->ch, p.rep, sizeof d->ch);
        d->ch_len = p.rep_len;
        d->prefix = p.prepend != MS_NEVER;
    }
    return 0;
}

// the parts of the file only SentencePiece-style tokenizers use: model.fuse_unk, the decoder
int tok_load_sp(struct tokenizer *t, const cJSON *j, struct ah_error *err) {
    t->fuse_unk = jbool(cJSON_GetObjectItemCaseSensitive(j, "model"), "fuse_unk", false);
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(j, "decoder");
    if (!cJSON_IsObject(d) || t->byte_level_decoder) return 0; // none, or ByteLevel alone
    t->dec = calloc(1, sizeof *t->dec);
    if (!t->dec) return -AH_ENOMEM;
    return load_dec(t, d, t->dec, false, err);
}

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
        int why = 0, rc = tok_spans_of(d->re, md, mctx, s, n, sp, &why, &at);
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
                if ((rc = dec_replace(d, md, t->mctx, sp, s, n, &out->b)) == 0)
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
