// select.c - see select.h
#define _POSIX_C_SOURCE 200809L // defines: strdup
#include "jobs/select.h"

#include "model/ah.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

// ---------------------------------------------------------------------------------------------
// parsing

static const char *const select_keys[] = {"seed",
                                          "skip_first",
                                          "skip_token_ids",
                                          "tokens_per_context",
                                          "max_norm_multiple",
                                          "max_norm_activation",
                                          "max_norm_sample",
                                          NULL};

// an integer in [lo, hi] (doubles hold integers exactly below 2^53)
static int get_i64(const cJSON *o, const char *key, const char *path, int64_t lo, int64_t hi,
                   int64_t *out, struct ah_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v) return 0;
    double d = cJSON_IsNumber(v) ? v->valuedouble : (double)NAN;
    if (!(d == floor(d)) || d < (double)lo || d > (double)hi)
        return ah_fail(err, AH_EINVAL, "%s: \"select.%s\": expected an integer from %lld to %lld",
                       path, key, (long long)lo, (long long)hi);
    *out = (int64_t)d;
    return 0;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

// sorts and removes duplicates
static void sort_unique(int64_t *v, int *n) {
    qsort(v, (size_t)*n, sizeof *v, cmp_i64);
    int k = 0;
    for (int i = 0; i < *n; i++)
        if (k == 0 || v[i] != v[k - 1]) v[k++] = v[i];
    *n = k;
}

// "special", or an array of ids and "special"
static int parse_skip_ids(const cJSON *v, const char *path, struct select_spec *s,
                          struct ah_error *err) {
    if (cJSON_IsString(v) && !strcmp(v->valuestring, "special")) {
        s->skip_special = true;
        return 0;
    }
    if (!cJSON_IsArray(v))
        return ah_fail(err, AH_EINVAL,
                       "%s: \"select.skip_token_ids\": expected an array of token ids and/or "
                       "\"special\", or \"special\"",
                       path);
    s->skip_ids = malloc(((size_t)cJSON_GetArraySize(v) + 1) * sizeof(int64_t));
    if (!s->skip_ids) return -AH_ENOMEM;
    const cJSON *e;
    int i = 0;
    cJSON_ArrayForEach(e, v) {
        if (cJSON_IsString(e) && !strcmp(e->valuestring, "special")) {
            s->skip_special = true;
        } else if (cJSON_IsNumber(e) && e->valuedouble == floor(e->valuedouble) &&
                   e->valuedouble >= 0 && e->valuedouble < 0x1p53) {
            s->skip_ids[s->n_skip_ids++] = (int64_t)e->valuedouble;
        } else {
            return ah_fail(err, AH_EINVAL,
                           "%s: \"select.skip_token_ids[%d]\": expected a token id (an integer "
                           ">= 0) or \"special\"",
                           path, i);
        }
        i++;
    }
    sort_unique(s->skip_ids, &s->n_skip_ids);
    return 0;
}

static int parse_norm_guard(const cJSON *v, const char *path, struct select_spec *s,
                            struct ah_error *err) {
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(v, "max_norm_multiple");
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(v, "max_norm_activation");
    if (!m) {
        if (a || cJSON_GetObjectItemCaseSensitive(v, "max_norm_sample"))
            return ah_fail(err, AH_EINVAL,
                           "%s: \"select.%s\" without \"select.max_norm_multiple\" (the norm "
                           "guard is off without it)",
                           path, a ? "max_norm_activation" : "max_norm_sample");
        return 0;
    }
    if (!cJSON_IsNumber(m) || !(m->valuedouble > 1) || !isfinite(m->valuedouble))
        return ah_fail(err, AH_EINVAL,
                       "%s: \"select.max_norm_multiple\": expected a number > 1 (a token is "
                       "dropped when its norm exceeds this multiple of the median norm)",
                       path);
    s->max_norm_multiple = m->valuedouble;
    if (!cJSON_IsString(a) || !a->valuestring[0])
        return ah_fail(err, AH_EINVAL,
                       "%s: \"select.max_norm_activation\": expected the name of the activation "
                       "whose norm \"select.max_norm_multiple\" guards",
                       path);
    if (!(s->max_norm_activation = strdup(a->valuestring))) return -AH_ENOMEM;
    s->max_norm_sample = 4096;
    return get_i64(v, "max_norm_sample", path, 1, (int64_t)1 << 40, &s->max_norm_sample, err);
}

int select_parse(const cJSON *v, const char *path, struct select_spec *s, struct ah_error *err) {
    memset(s, 0, sizeof *s);
    if (!v) return 0;
    if (!cJSON_IsObject(v))
        return ah_fail(err, AH_EINVAL, "%s: \"select\": expected an object", path);
    s->given = true;
    const cJSON *e;
    cJSON_ArrayForEach(e, v) {
        int ok = 0;
        for (int i = 0; select_keys[i] && !ok; i++)
            ok = !strcmp(e->string, select_keys[i]);
        if (!ok)
            return ah_fail(err, AH_EINVAL,
                           "%s: select: unknown key \"%s\" (expected one of: seed, skip_first, "
                           "skip_token_ids, tokens_per_context, max_norm_multiple, "
                           "max_norm_activation, max_norm_sample)",
                           path, e->string);
    }
    int64_t seed = 0;
    int rc;
    if ((rc = get_i64(v, "seed", path, 0, ((int64_t)1 << 53) - 1, &seed, err)) < 0 ||
        (rc = get_i64(v, "skip_first", path, 0, (int64_t)1 << 40, &s->skip_first, err)) < 0 ||
        (rc = get_i64(v, "tokens_per_context", path, 1, (int64_t)1 << 40, &s->tokens_per_context,
                      err)) < 0)
        return rc;
    s->seed = (uint64_t)seed;
    const cJSON *ids = cJSON_GetObjectItemCaseSensitive(v, "skip_token_ids");
    if (ids && (rc = parse_skip_ids(ids, path, s, err)) < 0) return rc;
    return parse_norm_guard(v, path, s, err);
}

int select_resolve(struct select_spec *s, int64_t vocab, bool have_tokenizer,
                   const int64_t *special, int n_special, const char *path, struct ah_error *err) {
    for (int i = 0; i < s->n_skip_ids; i++)
        if (s->skip_ids[i] >= vocab)
            return ah_fail(err, AH_EINVAL,
                           "%s: \"select.skip_token_ids\": id %lld is not a token of the model "
                           "(its vocabulary has %lld ids)",
                           path, (long long)s->skip_ids[i], (long long)vocab);
    if (!s->skip_special) return 0;
    if (!have_tokenizer)
        return ah_fail(err, AH_EINVAL,
                       "%s: \"select.skip_token_ids\": \"special\" needs the model's "
                       "tokenizer.json to know the special tokens (the model folder has none): "
                       "list the ids instead",
                       path);
    int64_t *v = realloc(s->skip_ids, ((size_t)s->n_skip_ids + (size_t)n_special + 1) * sizeof *v);
    if (!v) return -AH_ENOMEM;
    s->skip_ids = v;
    for (int i = 0; i < n_special; i++)
        if (special[i] >= 0 && special[i] < vocab) v[s->n_skip_ids++] = special[i];
    sort_unique(s->skip_ids, &s->n_skip_ids);
    s->skip_special = false; // resolved
    return 0;
}

void select_free(struct select_spec *s) {
    free(s->skip_ids);
    free(s->max_norm_activation);
    memset(s, 0, sizeof *s);
}

int select_parse_statistics(const cJSON *v, const char *path, int *out, struct ah_error *err) {
    *out = -1;
    if (!v) return 0;
    if (!cJSON_IsBool(v))
        return ah_fail(err, AH_EINVAL, "%s: \"statistics\": expected true or false", path);
    *out = cJSON_IsTrue(v) ? 1 : 0;
    return 0;
}

// ---------------------------------------------------------------------------------------------
// the primitives

// splitmix64's output function (Steele, Lea and Flood 2014) on x + the golden gamma
static uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

uint64_t select_key(uint64_t seed, int64_t source_index, int64_t position) {
    return mix64(mix64(mix64(seed) ^ (uint64_t)source_index) ^ (uint64_t)position);
}

bool select_skips_id(const struct select_spec *s, int64_t id) {
    return s->n_skip_ids &&
           bsearch(&id, s->skip_ids, (size_t)s->n_skip_ids, sizeof id, cmp_i64) != NULL;
}

struct keyed {
    uint64_t key;
    int64_t pos;
};

static int cmp_keyed(const void *a, const void *b) {
    const struct keyed *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return (x->pos > y->pos) - (x->pos < y->pos);
}

int64_t select_context(const struct select_spec *s, int64_t source_index, const int64_t *ids,
                       int64_t T, uint8_t *keep, struct select_counts *c) {
    struct select_counts n = {0};
    for (int64_t t = 0; t < T; t++) {
        keep[t] = 0;
        if (t < s->skip_first)
            n.skipped_first++;
        else if (select_skips_id(s, ids[t]))
            n.skipped_id++;
        else
            keep[t] = 1, n.kept++;
    }
    if (s->tokens_per_context > 0 && n.kept > s->tokens_per_context) {
        struct keyed *k = malloc((size_t)n.kept * sizeof *k);
        if (!k) return -AH_ENOMEM;
        int64_t m = 0;
        for (int64_t t = 0; t < T; t++)
            if (keep[t]) k[m++] = (struct keyed){select_key(s->seed, source_index, t), t};
        qsort(k, (size_t)m, sizeof *k, cmp_keyed);
        for (int64_t i = s->tokens_per_context; i < m; i++)
            keep[k[i].pos] = 0;
        free(k);
        n.not_chosen = n.kept - s->tokens_per_context;
        n.kept = s->tokens_per_context;
    }
    if (c) {
        c->kept += n.kept;
        c->skipped_first += n.skipped_first;
        c->skipped_id += n.skipped_id;
        c->not_chosen += n.not_chosen;
    }
    return n.kept;
}

// ---------------------------------------------------------------------------------------------
// the norm guard's median

int norm_median_init(struct norm_median *m, int64_t cap) {
    AH_ASSERT(cap >= 1);
    m->cap = cap;
    m->n = 0;
    m->v = malloc((size_t)cap * sizeof(double));
    return m->v ? 0 : -AH_ENOMEM;
}

void norm_median_free(struct norm_median *m) {
    free(m->v);
    memset(m, 0, sizeof *m);
}

bool norm_median_push(struct norm_median *m, double norm) {
    if (m->n >= m->cap) return false;
    if (isfinite(norm)) m->v[m->n++] = norm; // a non-finite norm is no sample

    return true;
}

static int cmp_f64(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double norm_median_value(struct norm_median *m) {
    if (m->n == 0) return (double)NAN;
    qsort(m->v, (size_t)m->n, sizeof *m->v, cmp_f64); // the set is what counts, not its order
    return m->v[(m->n - 1) / 2];
}

bool select_norm_keep(double norm, double median, double multiple) {
    return norm <= multiple * median;
}
