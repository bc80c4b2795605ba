// dataset.c - see dataset.h
#define _POSIX_C_SOURCE 200809L // defines: getline
#include "io/dataset.h"

#include "model/ah.h"

#include <cjson/cJSON.h>
#include <errno.h>
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

int ds_load(struct ds_prompts *p, const char *path, const char *field, int64_t truncate_at,
            int64_t vocab, struct ah_error *err) {
    memset(p, 0, sizeof *p);
    const char *key = field ? field : "input_ids";
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return ah_fail(err, errno == ENOENT ? AH_ENOENT : AH_EIO, "%s: cannot open: %s", path,
                       strerror(errno));
    char *line = NULL;
    size_t lcap = 0;
    ssize_t got;
    int64_t cap_p = 0, cap_t = 0;
    int rc = 0;
    while ((got = getline(&line, &lcap, fp)) >= 0) {
        int64_t ln = p->n_lines++;
        while (got > 0 && (line[got - 1] == '\n' || line[got - 1] == '\r'))
            line[--got] = '\0';
        if (got == 0) { // a blank line is an empty prompt
            p->n_empty++;
            continue;
        }
        cJSON *o = cJSON_Parse(line);
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
        if (!cJSON_IsObject(o) || !v) {
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "text");
            if (cJSON_IsObject(o) && cJSON_IsString(t) && !field)
                rc = ah_fail(err, AH_EINVAL,
                             "%s: line %lld: text prompts need a tokenizer, which "
                             "this build cannot use yet; give {\"input_ids\": [..]}",
                             path, (long long)ln + 1);
            else
                rc = ah_fail(err, AH_EINVAL,
                             "%s: line %lld: expected a JSON object with \"%s\": "
                             "[token ids]",
                             path, (long long)ln + 1, key);
            cJSON_Delete(o);
            goto done;
        }
        if (!cJSON_IsArray(v)) {
            rc = ah_fail(err, AH_EINVAL, "%s: line %lld: \"%s\": expected an array of token ids%s",
                         path, (long long)ln + 1, key,
                         cJSON_IsString(v) ? " (text needs a tokenizer, not available yet)" : "");
            cJSON_Delete(o);
            goto done;
        }
        int64_t n = cJSON_GetArraySize(v), i = 0;
        if (n == 0) {
            p->n_empty++;
            cJSON_Delete(o);
            continue;
        }
        int64_t use = n > truncate_at ? truncate_at : n;
        p->n_truncated += n > truncate_at;
        if ((rc = grow((void **)&p->ids, &cap_t, p->n_tokens + use, 8)) < 0) {
            cJSON_Delete(o);
            goto done;
        }
        const cJSON *e;
        cJSON_ArrayForEach(e, v) {
            double d = cJSON_IsNumber(e) ? e->valuedouble : -1;
            if (!cJSON_IsNumber(e) || d != (double)(int64_t)d || d < 0 || d >= (double)vocab) {
                rc = ah_fail(err, AH_EINVAL,
                             "%s: line %lld: %s[%lld]: token id %s%.17g is outside "
                             "the model's vocabulary [0, %lld)",
                             path, (long long)ln + 1, key, (long long)i,
                             cJSON_IsNumber(e) ? "" : "(not a number) ",
                             cJSON_IsNumber(e) ? d : 0.0, (long long)vocab);
                cJSON_Delete(o);
                goto done;
            }
            if (i < use) p->ids[p->n_tokens + i] = (int64_t)d;
            i++;
        }
        cJSON_Delete(o);
        int64_t need = p->n + 1, c0 = cap_p, c1 = cap_p;
        if ((rc = grow((void **)&p->source, &cap_p, need, 8)) < 0 ||
            (rc = grow((void **)&p->len, &c0, need, 8)) < 0 ||
            (rc = grow((void **)&p->off, &c1, need, 8)) < 0)
            goto done;
        p->source[p->n] = ln;
        p->len[p->n] = use;
        p->off[p->n] = p->n_tokens;
        p->n++;
        p->n_tokens += use;
        if (use > p->longest) p->longest = use;
    }
    if (ferror(fp)) rc = ah_fail(err, AH_EIO, "%s: read error", path);
done:
    free(line);
    fclose(fp);
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
