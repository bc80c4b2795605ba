// dataset.c - see dataset.h
#define _POSIX_C_SOURCE 200809L // defines: fseeko
#include "io/dataset.h"

#include "io/dsfields.h"
#include "io/textin.h"
#include "io/tokenizer.h"
#include "model/ah.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

static int nomem(struct ah_error *err, const char *what, size_t bytes) {
    return ah_fail(err, AH_ENOMEM, "cannot allocate %zu bytes for %s (out of memory)", bytes, what);
}

static int grow(void **p, int64_t *cap, int64_t need, size_t elem, struct ah_error *err) {
    if (need <= *cap) return 0;
    int64_t c = *cap * 2 > need ? *cap * 2 : need + 1024;
    void *np = realloc(*p, (size_t)c * elem);
    if (!np) return nomem(err, "the table of prompts", (size_t)c * elem);
    *p = np;
    *cap = c;
    return 0;
}

// Where the token ids go: memory, or a spill file mapped read-only once complete (the ids then
// cost page cache, not memory, and every rank of a node shares one copy).
struct idsink {
    FILE *f;          // the spill file, or NULL
    const char *path; // its name, for messages
    int64_t *mem;     // else here
    int64_t cap;
    struct ah_error *err;
};

static int sink_put(struct idsink *k, struct ds_prompts *p, const int64_t *v, int64_t n) {
    if (k->f) {
        if (fwrite(v, sizeof *v, (size_t)n, k->f) == (size_t)n) return 0;
        return ah_fail(k->err, AH_EIO, "%s: cannot write the token ids (%lld bytes so far): %s",
                       k->path, (long long)((p->n_tokens + n) * 8), strerror(errno));
    }
    if (p->n_tokens + n > k->cap) {
        int64_t c = k->cap * 2 > p->n_tokens + n ? k->cap * 2 : p->n_tokens + n + 1024;
        int64_t *m = realloc(k->mem, (size_t)c * sizeof *m);
        if (!m) return nomem(k->err, "the token ids", (size_t)c * sizeof *m);
        k->mem = m;
        k->cap = c;
    }
    memcpy(k->mem + p->n_tokens, v, (size_t)n * sizeof *v);
    return 0;
}

int ds_map_ids(struct ds_prompts *p, const char *spill, struct ah_error *err) {
    p->ids = NULL;
    size_t bytes = (size_t)p->n_tokens * sizeof *p->ids;
    if (bytes == 0) return 0;
    int fd = open(spill, O_RDONLY);
    void *m = fd >= 0 ? mmap(NULL, bytes, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
    if (fd >= 0) close(fd);
    if (m == MAP_FAILED)
        return ah_fail(err, AH_EIO, "%s: cannot map the token ids: %s", spill, strerror(errno));
    p->map = m;
    p->map_bytes = bytes;
    p->ids = m;
    return 0;
}

// the sink's ids become p->ids
static int sink_finish(struct idsink *k, struct ds_prompts *p, const char *spill,
                       struct ah_error *err) {
    if (!k->f) {
        p->ids = k->mem;
        k->mem = NULL;
        return 0;
    }
    int bad = fflush(k->f) != 0 || ferror(k->f);
    bad |= fclose(k->f) != 0;
    k->f = NULL;
    if (bad)
        return ah_fail(err, AH_EIO, "%s: cannot write the token ids: %s", spill, strerror(errno));
    return ds_map_ids(p, spill, err);
}

static int sink_open(struct idsink *k, const char *spill, struct ah_error *err) {
    memset(k, 0, sizeof *k);
    k->path = spill;
    k->err = err;
    if (!spill) return 0;
    k->f = fopen(spill, "wb");
    if (!k->f) return ah_fail(err, AH_EIO, "%s: cannot create: %s", spill, strerror(errno));
    setvbuf(k->f, NULL, _IOFBF, 1 << 20);
    return 0;
}

struct loader {
    struct ds_prompts *p;
    struct idsink sink;
    const struct ds_spec *spec;
    int64_t truncate_at, vocab, cap_p;
    bool tok_fits;      // the tokenizer checked against the model's vocabulary
    struct tok_ids ids; // one prompt's ids
    struct ah_error *err;
};

// one prompt's ids (in l->ids), checked against the vocabulary, truncated, appended
static int add_prompt(struct loader *l, long index, const char *where, const char *key) {
    struct ds_prompts *p = l->p;
    int64_t n = (int64_t)l->ids.n;
    if (n == 0) {
        p->n_empty++;
        return 0;
    }
    for (int64_t i = 0; i < n; i++)
        if (l->ids.v[i] < 0 || l->ids.v[i] >= l->vocab)
            return ah_fail(
                l->err, AH_EINVAL,
                "%s: %s[%lld]: token id %lld is outside the model's vocabulary [0, %lld)", where,
                key, (long long)i, (long long)l->ids.v[i], (long long)l->vocab);
    int64_t use = n > l->truncate_at ? l->truncate_at : n;
    p->n_truncated += n > l->truncate_at;
    int64_t need = p->n + 1, c0 = l->cap_p, c1 = l->cap_p;
    int rc;
    if ((rc = sink_put(&l->sink, p, l->ids.v, use)) < 0 ||
        (rc = grow((void **)&p->source, &l->cap_p, need, 8, l->err)) < 0 ||
        (rc = grow((void **)&p->len, &c0, need, 8, l->err)) < 0 ||
        (rc = grow((void **)&p->off, &c1, need, 8, l->err)) < 0)
        return rc;
    p->source[p->n] = index;
    p->len[p->n] = use;
    p->off[p->n] = p->n_tokens;
    p->n++;
    p->n_tokens += use;
    if (use > p->longest) p->longest = use;
    return 0;
}

static int tokenize(struct loader *l, const char *text, size_t len, const char *where) {
    if (!l->spec->tok)
        return ah_fail(l->err, AH_EINVAL,
                       "%s: text prompts need a tokenizer.json in the model folder %s, which has "
                       "none; give {\"input_ids\": [..]} or add the model's tokenizer.json",
                       where, l->spec->model_dir ? l->spec->model_dir : "");
    if (!l->tok_fits) { // a tokenizer that gives ids the model has not is not the model's
        char cfg[4200];
        snprintf(cfg, sizeof cfg, "%s/config.json", l->spec->model_dir ? l->spec->model_dir : ".");
        int rc = tok_check_vocab(l->spec->tok, l->vocab, cfg, l->err);
        if (rc < 0) return rc;
        l->tok_fits = true;
    }
    // packed documents get no special tokens of their own: the contexts get the BOS
    int rc = tok_encode(l->spec->tok, text, len, l->spec->pack_len == 0, &l->ids);
    if (rc == -AH_ENOMEM)
        return ah_fail(
            l->err, AH_ENOMEM,
            "%s: cannot allocate memory to tokenize a text of %zu bytes (about %zu bytes "
            "needed)",
            where, len, 24 * len + 4096);
    if (rc < 0) return ah_fail(l->err, -rc, "%s: %s", where, tok_error(l->spec->tok));
    return rc;
}

// ---- Megatron indexed datasets: PREFIX.idx ("MMIDIDX\0\0", version, dtype, counts, sizes,
// pointers, document index) and PREFIX.bin (the tokens) ----

static int read_exact(FILE *f, void *p, size_t n) {
    return fread(p, 1, n, f) == n ? 0 : -1;
}

// a Megatron index after its file's name: the token dtype and the sequences' sizes and offsets
struct mmidx {
    uint8_t code;   // numpy's dtype code: 1 u8, 2 i8, 3 i16, 4 i32, 5 i64, 8 u16
    int w;          // its bytes
    uint64_t count; // sequences
    int32_t *sizes; // (count) tokens, owned
    int64_t *ptrs;  // (count) byte offsets into PREFIX.bin, owned
};

static int mmidx_read(struct loader *l, FILE *fi, const char *idx, struct mmidx *m) {
    char magic[9];
    uint64_t version = 0, docs = 0;
    if (read_exact(fi, magic, 9) || memcmp(magic, "MMIDIDX\0\0", 9) ||
        read_exact(fi, &version, 8) || version != 1 || read_exact(fi, &m->code, 1) ||
        read_exact(fi, &m->count, 8) || read_exact(fi, &docs, 8) || m->count > (1ull << 40))
        return ah_fail(l->err, AH_EFORMAT,
                       "%s: not a Megatron index (expected \"MMIDIDX\" version 1)", idx);
    static const int width[9] = {0, 1, 1, 2, 4,
                                 8, 0, 0, 2}; // 1 u8, 2 i8, 3 i16, 4 i32, 5 i64, 8 u16
    m->w = m->code < 9 ? width[m->code] : 0;
    if (!m->w)
        return ah_fail(l->err, AH_EFORMAT, "%s: token dtype code %u is not an integer type", idx,
                       m->code);
    m->sizes = malloc(m->count * sizeof *m->sizes + 1);
    m->ptrs = malloc(m->count * sizeof *m->ptrs + 1);
    if (!m->sizes || !m->ptrs) return nomem(l->err, "a Megatron index", m->count * 12);
    if (read_exact(fi, m->sizes, m->count * sizeof *m->sizes) ||
        read_exact(fi, m->ptrs, m->count * sizeof *m->ptrs))
        return ah_fail(l->err, AH_EFORMAT, "%s: truncated (%llu sequences announced)", idx,
                       (unsigned long long)m->count);
    return 0;
}

// sequence i of PREFIX.bin (fb) into l->ids, through *raw (*raw_cap bytes, grown), then a prompt
static int mmidx_sequence(struct loader *l, const struct mmidx *m, uint64_t i, FILE *fb,
                          const char *idx, const char *where, unsigned char **raw,
                          size_t *raw_cap) {
    l->p->n_lines = (int64_t)i + 1;
    l->ids.n = 0;
    if (m->sizes[i] < 0 || fseeko(fb, (off_t)m->ptrs[i], SEEK_SET) != 0)
        return ah_fail(l->err, AH_EFORMAT, "%s: bad size or offset in %s", where, idx);
    size_t bytes = (size_t)m->sizes[i] * (size_t)m->w;
    if (bytes > *raw_cap) {
        unsigned char *nr = realloc(*raw, bytes);
        size_t ncap = (size_t)m->sizes[i];
        int64_t *nv = nr ? realloc(l->ids.v, ncap * sizeof *nv + 1) : NULL;
        if (nr) *raw = nr;
        if (!nv) return nomem(l->err, "a Megatron sequence", bytes + ncap * 8);
        l->ids.v = nv;
        l->ids.cap = ncap;
        *raw_cap = bytes;
    }
    if (read_exact(fb, *raw, bytes))
        return ah_fail(l->err, AH_EFORMAT, "%s: past the end of the file", where);
    for (int32_t k = 0; k < m->sizes[i]; k++) { // little-endian, as numpy writes them
        const unsigned char *q = *raw + (size_t)k * (size_t)m->w;
        uint64_t u = 0;
        for (int b = m->w - 1; b >= 0; b--)
            u = u << 8 | q[b];
        int64_t v = (int64_t)u; // sign-extend the signed types
        if (m->code == 2) v = (int8_t)u;
        if (m->code == 3) v = (int16_t)u;
        if (m->code == 4) v = (int32_t)u;
        l->ids.v[k] = v;
    }
    l->ids.n = (size_t)m->sizes[i];
    return add_prompt(l, (long)i, where, "tokens");
}

static int load_megatron(struct loader *l, const char *path) {
    size_t n = strlen(path), cap = n + 8;
    char *idx = malloc(cap), *bin = malloc(cap), *where = malloc(cap + 64);
    if (!idx || !bin || !where) {
        free(idx), free(bin), free(where);
        return nomem(l->err, "the names of a Megatron dataset", 3 * cap + 64);
    }
    if (n > 4 && (!strcmp(path + n - 4, ".bin") || !strcmp(path + n - 4, ".idx"))) n -= 4;
    snprintf(idx, cap, "%.*s.idx", (int)n, path);
    snprintf(bin, cap, "%.*s.bin", (int)n, path);
    FILE *fi = fopen(idx, "rb"), *fb = fopen(bin, "rb");
    struct mmidx m = {0};
    int rc = 0;
    if (!fi || !fb)
        rc = ah_fail(l->err, AH_ENOENT,
                     "%s: cannot open (a Megatron dataset is PREFIX.bin and "
                     "PREFIX.idx)",
                     !fi ? idx : bin);
    if (rc == 0) rc = mmidx_read(l, fi, idx, &m);
    unsigned char *raw = NULL;
    size_t raw_cap = 0;
    for (uint64_t i = 0; i < m.count && rc == 0; i++) {
        snprintf(where, cap + 64, "%s: sequence %llu", bin, (unsigned long long)i);
        rc = mmidx_sequence(l, &m, i, fb, idx, where, &raw, &raw_cap);
    }
    free(raw);
    if (fi) fclose(fi);
    if (fb) fclose(fb);
    free(m.sizes);
    free(m.ptrs);
    free(idx), free(bin), free(where);
    return rc;
}

// joins the documents of p, the separator between two, and cuts contexts of len tokens, each
// starting with bos when given; the new ids go to k
// (doc[c]: the document of context c's first token, for the fields; n_ctx + 1 entries)
static int pack(struct ds_prompts *p, struct idsink *k, int64_t len, int64_t sep, int64_t bos,
                int64_t **doc) {
    int64_t body = bos >= 0 ? len - 1 : len, total = p->n_tokens + (sep >= 0 ? p->n - 1 : 0);
    int64_t n_ctx = p->n ? (total + body - 1) / body : 0;
    int64_t *src = malloc((size_t)(n_ctx + 1) * sizeof *src);
    int64_t *ln = malloc((size_t)(n_ctx + 1) * sizeof *ln),
            *off = malloc((size_t)(n_ctx + 1) * sizeof *off);
    *doc = malloc((size_t)(n_ctx + 1) * sizeof **doc);
    int64_t piece[4096], np = 0; // ids on their way to the sink
    struct ds_prompts out = {0}; // counts the sink's tokens
    int rc = src && ln && off && *doc
                 ? 0
                 : nomem(k->err, "the packed contexts", 32 * (size_t)(n_ctx + 1));
    int64_t c = 0, t = 0, in_ctx = body; // in_ctx == body: start a new context
    for (int64_t d = 0; rc == 0 && d < p->n; d++) {
        int64_t first = d > 0 && sep >= 0 ? -1 : 0; // -1: the separator before the document
        for (int64_t q = first; rc == 0 && q < p->len[d]; q++) {
            if (in_ctx == body) {
                off[c] = t;
                src[c] = p->source[d];
                (*doc)[c] = d;
                ln[c] = 0;
                c++;
                in_ctx = 0;
                if (bos >= 0) piece[np++] = bos, ln[c - 1]++, t++;
            }
            piece[np++] = q < 0 ? sep : p->ids[p->off[d] + q];
            ln[c - 1]++, t++;
            in_ctx++;
            if (np >= 4094) {
                rc = sink_put(k, &out, piece, np);
                out.n_tokens += np, np = 0;
            }
        }
    }
    if (rc == 0 && np) rc = sink_put(k, &out, piece, np);
    if (rc < 0) {
        free(src), free(ln), free(off);
        return rc;
    }
    free(p->source), free(p->len), free(p->off);
    p->source = src, p->len = ln, p->off = off;
    p->n = c;
    p->n_tokens = t;
    p->longest = 0;
    for (int64_t i = 0; i < c; i++)
        p->longest = ln[i] > p->longest ? ln[i] : p->longest;
    return 0;
}

static void drop_ids(struct ds_prompts *p) {
    if (p->map)
        munmap(p->map, p->map_bytes);
    else
        free(p->ids);
    p->map = NULL;
    p->ids = NULL;
}

static int on_line(void *u, const char *text, size_t len, const char *where, long index) {
    struct loader *l = u;
    l->p->n_lines = index + 1;
    l->ids.n = 0;
    if (len == 0) return add_prompt(l, index, where, "");
    if (strcmp(l->spec->format, "jsonl")) { // plain text
        int rc = tokenize(l, text, len, where);
        return rc < 0 ? rc : add_prompt(l, index, where, "text");
    }
    cJSON *o = text_parse_json(text, len, where, l->err);
    if (!o) return l->err ? l->err->code : -AH_EFORMAT;
    const char *key = l->spec->field;
    if (!key)
        key = cJSON_GetObjectItemCaseSensitive(o, "input_ids") ||
                      !cJSON_GetObjectItemCaseSensitive(o, "text")
                  ? "input_ids"
                  : "text";
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key), *e;
    int rc = 0;
    if (!cJSON_IsObject(o) || !v) {
        rc = ah_fail(l->err, AH_EINVAL, "%s: expected a JSON object with \"%s\": [token ids]%s",
                     where, key, l->spec->field ? "" : " or \"text\": \"..\"");
    } else if (cJSON_IsString(v)) {
        rc = tokenize(l, v->valuestring, strlen(v->valuestring), where);
    } else if (!cJSON_IsArray(v)) {
        rc = ah_fail(l->err, AH_EINVAL, "%s: \"%s\": expected an array of token ids or a text",
                     where, key);
    } else {
        int64_t i = 0;
        cJSON_ArrayForEach(e, v) {
            double d = cJSON_IsNumber(e) ? e->valuedouble : -1;
            if (!cJSON_IsNumber(e) || d != (double)(int64_t)d || d < 0 || d >= (double)l->vocab) {
                rc = ah_fail(l->err, AH_EINVAL,
                             "%s: %s[%lld]: token id %s%.17g is outside the model's vocabulary "
                             "[0, %lld)",
                             where, key, (long long)i, cJSON_IsNumber(e) ? "" : "(not a number) ",
                             cJSON_IsNumber(e) ? d : 0.0, (long long)l->vocab);
                break;
            }
            if ((rc = tok_ids_push(&l->ids, (int64_t)d)) < 0) {
                rc = nomem(l->err, "a prompt's token ids", 16 * l->ids.cap + 8);
                break;
            }
            i++;
        }
    }
    if (rc == 0) rc = dsf_line(l->p, o, where, l->err);
    cJSON_Delete(o);
    int64_t n0 = l->p->n;
    if (rc == 0) rc = add_prompt(l, index, where, key);
    if (rc == 0 && l->p->n == n0) dsf_drop(l->p, n0); // empty: not kept
    return rc;
}

int ds_load(struct ds_prompts *p, const struct ds_spec *spec, int64_t truncate_at, int64_t vocab,
            const char *spill, struct ah_error *err) {
    memset(p, 0, sizeof *p);
    struct ds_spec s = *spec;
    if (!s.format) s.format = "jsonl";
    struct loader l = {.p = p,
                       .spec = &s,
                       .truncate_at = s.pack_len > 0 ? INT64_MAX : truncate_at,
                       .vocab = vocab,
                       .err = err};
    bool per_file = !strcmp(s.format, "text-files");
    struct text_source src = {.raw_lines = !per_file, .per_file = per_file};
    int rc = sink_open(&l.sink, spill, err);
    if (rc == 0 && s.n_fields && strcmp(s.format, "jsonl"))
        rc = ah_fail(err, AH_EINVAL,
                     "\"data.fields\": fields are keys of JSON Lines objects; \"data.format\" "
                     "is \"%s\"",
                     s.format);
    if (rc == 0) rc = dsf_begin(p, &s, err);
    if (rc == 0)
        rc = !strcmp(s.format, "megatron") ? load_megatron(&l, s.path)
                                           : text_read(&src, s.path, on_line, &l, err);
    tok_ids_free(&l.ids);
    if (rc == 0) rc = sink_finish(&l.sink, p, spill, err);
    for (int k = 0; rc == 0 && s.pack_len > 0 && k < 2; k++) {
        int64_t id = k ? s.pack_bos : s.pack_separator;
        if (id >= vocab)
            rc = ah_fail(err, AH_EINVAL,
                         "\"data.pack.%s\": token id %lld is outside the model's "
                         "vocabulary [0, %lld)",
                         k ? "bos" : "separator", (long long)id, (long long)vocab);
    }
    char *tmp = NULL;
    if (rc == 0 && s.pack_len > 0 && spill) {
        size_t cap = strlen(spill) + 8;
        if (!(tmp = malloc(cap))) rc = nomem(err, "a file name", cap);
        if (tmp) snprintf(tmp, cap, "%s.pack", spill);
    }
    if (rc == 0 && s.pack_len > 0) { // the documents' ids, read once, become the contexts'
        struct idsink k;
        int64_t *doc = NULL;
        if ((rc = sink_open(&k, spill ? tmp : NULL, err)) == 0)
            rc = pack(p, &k, s.pack_len, s.pack_separator, s.pack_bos, &doc);
        if (rc == 0) rc = dsf_remap(p, doc, p->n, err);
        free(doc);
        drop_ids(p);
        if (rc == 0) rc = sink_finish(&k, p, spill ? tmp : NULL, err);
        if (k.f) fclose(k.f);
        free(k.mem);
        if (spill && rc == 0 && rename(tmp, spill) != 0)
            rc = ah_fail(err, AH_EIO, "%s: cannot rename to %s: %s", tmp, spill, strerror(errno));
        if (spill && rc < 0) remove(tmp);
    }
    free(tmp);
    if (rc == 0) dsf_finish(p);
    if (l.sink.f) fclose(l.sink.f);
    free(l.sink.mem);
    if (rc < 0) ds_free(p);
    return rc;
}

void ds_free(struct ds_prompts *p) {
    free(p->source);
    free(p->len);
    free(p->off);
    drop_ids(p);
    dsf_free(p);
    memset(p, 0, sizeof *p);
}
