// dataset.c - see dataset.h
#include "io/dataset.h"

#include "io/textin.h"
#include "io/tokenizer.h"
#include "model/ah.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int grow(void **p, int64_t *cap, int64_t need, size_t elem) {
    if (need <= *cap) return 0;
    int64_t c = *cap * 2 > need ? *cap * 2 : need + 1024;
    void *np = realloc(*p, (size_t)c * elem);
    if (!np) return -AH_ENOMEM;
    *p = np;
    *cap = c;
    return 0;
}

struct loader {
    struct ds_prompts *p;
    const struct ds_spec *spec;
    int64_t truncate_at, vocab, cap_p, cap_t;
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
    if ((rc = grow((void **)&p->ids, &l->cap_t, p->n_tokens + use, 8)) < 0 ||
        (rc = grow((void **)&p->source, &l->cap_p, need, 8)) < 0 ||
        (rc = grow((void **)&p->len, &c0, need, 8)) < 0 ||
        (rc = grow((void **)&p->off, &c1, need, 8)) < 0)
        return rc;
    memcpy(p->ids + p->n_tokens, l->ids.v, (size_t)use * sizeof *p->ids);
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
    return tok_encode(l->spec->tok, text, len, true, &l->ids);
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
    cJSON *o = cJSON_ParseWithLength(text, len);
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
            if (l->ids.n == l->ids.cap) {
                size_t cap = l->ids.cap ? 2 * l->ids.cap : 256;
                int64_t *nv = realloc(l->ids.v, cap * sizeof *nv);
                if (!nv) {
                    rc = -AH_ENOMEM;
                    break;
                }
                l->ids.v = nv;
                l->ids.cap = cap;
            }
            l->ids.v[l->ids.n++] = (int64_t)d;
            i++;
        }
    }
    cJSON_Delete(o);
    return rc < 0 ? rc : add_prompt(l, index, where, key);
}

int ds_load(struct ds_prompts *p, const struct ds_spec *spec, int64_t truncate_at, int64_t vocab,
            struct ah_error *err) {
    memset(p, 0, sizeof *p);
    struct ds_spec s = *spec;
    if (!s.format) s.format = "jsonl";
    struct loader l = {.p = p, .spec = &s, .truncate_at = truncate_at, .vocab = vocab, .err = err};
    bool per_file = !strcmp(s.format, "text-files");
    struct text_source src = {.raw_lines = !per_file, .per_file = per_file};
    int rc = text_read(&src, s.path, on_line, &l, err);
    tok_ids_free(&l.ids);
    if (rc < 0) ds_free(p);
    return rc;
}

void ds_free(struct ds_prompts *p) {
    free(p->source);
    free(p->len);
    free(p->off);
    free(p->ids);
    memset(p, 0, sizeof *p);
}
