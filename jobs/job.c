// job.c - see job.h
#define _POSIX_C_SOURCE 200809L // defines: strdup
#include "jobs/job.h"

#include "jobs/jobfields.h"
#include "model/ah.h"
#include "model/aliases.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *job_dtype_name(enum job_dtype d) {
    return d == JOB_F16 ? "float16" : d == JOB_BF16 ? "bfloat16" : "float32";
}

const char *job_compute_name(enum job_compute c) {
    return c == JOB_COMPUTE_BF16 ? "bf16" : "float32";
}

// Rejects keys of obj not in the NULL-terminated list `allowed`.
static int check_keys(const cJSON *obj, const char *const *allowed, const char *path,
                      const char *where, struct ah_error *err) {
    const cJSON *e;
    cJSON_ArrayForEach(e, obj) {
        int ok = 0;
        for (int i = 0; allowed[i] && !ok; i++)
            ok = !strcmp(e->string, allowed[i]);
        if (ok) continue;
        char list[256] = "";
        for (int i = 0; allowed[i]; i++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "",
                     allowed[i]);
        return ah_fail(err, AH_EINVAL, "%s: %sunknown key \"%s\" (expected one of: %s)", path,
                       where, e->string, list);
    }
    return 0;
}

// dir of `path` + rel, unless rel is absolute
static char *resolve(const char *path, const char *rel) {
    if (rel[0] == '/') return strdup(rel);
    const char *slash = strrchr(path, '/');
    size_t dl = slash ? (size_t)(slash - path) : 1;
    size_t n = dl + strlen(rel) + 2;
    char *p = malloc(n);
    if (!p) return NULL;
    if (slash)
        snprintf(p, n, "%.*s/%s", (int)dl, path, rel);
    else
        snprintf(p, n, "./%s", rel);
    return p;
}

static int get_string(const cJSON *obj, const char *key, const char *path, const char *where,
                      bool required, char **out, struct ah_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v && !required) return 0;
    if (!v) return ah_fail(err, AH_EINVAL, "%s: missing \"%s%s\" (a string)", path, where, key);
    if (!cJSON_IsString(v) || !v->valuestring[0])
        return ah_fail(err, AH_EINVAL, "%s: \"%s%s\": expected a non-empty string", path, where,
                       key);
    *out = strdup(v->valuestring);
    return *out ? 0 : -AH_ENOMEM;
}

// An optional string key that must be one of the NULL-terminated choices: *idx is its index
// (unchanged when the key is absent); else an error listing the choices.
static int get_choice(const cJSON *obj, const char *key, const char *path, const char *where,
                      const char *const *choices, int *idx, struct ah_error *err) {
    char *v = NULL;
    int rc = get_string(obj, key, path, where, false, &v, err);
    if (rc < 0 || !v) return rc;
    int n = 0;
    while (choices[n] && strcmp(choices[n], v))
        n++;
    if (choices[n]) {
        *idx = n;
        free(v);
        return 0;
    }
    char expected[256] = ""; // "a", "b" or "c"
    for (int k = 0; choices[k]; k++)
        snprintf(expected + strlen(expected), sizeof expected - strlen(expected), "%s\"%s\"",
                 k == 0           ? ""
                 : choices[k + 1] ? ", "
                                  : " or ",
                 choices[k]);
    rc = ah_fail(err, AH_EINVAL, "%s: \"%s%s\": \"%s\" (expected %s)", path, where, key, v,
                 expected);
    free(v);
    return rc;
}

static int get_int(const cJSON *obj, const char *key, const char *path, const char *where, int lo,
                   int hi, int *out, struct ah_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble != (double)(int)v->valuedouble || v->valueint < lo ||
        v->valueint > hi)
        return ah_fail(err, AH_EINVAL, "%s: \"%s%s\": expected an integer from %d to %d", path,
                       where, key, lo, hi);
    *out = v->valueint;
    return 0;
}

// A key named twice in one object (cJSON keeps both and reads the first): an error naming the key
// by its dotted path ("output.path").
static int duplicate_keys(const cJSON *j, const char *where, const char *path,
                          struct ah_error *err) {
    const cJSON *e, *f;
    for (e = j->child; e; e = e->next) {
        char sub[256];
        if (cJSON_IsObject(j)) {
            for (f = j->child; f != e; f = f->next)
                if (!strcmp(f->string, e->string))
                    return ah_fail(err, AH_EINVAL, "%s: key \"%s%s\" appears twice", path, where,
                                   e->string);
            snprintf(sub, sizeof sub, "%s%s.", where, e->string);
        } else {
            snprintf(sub, sizeof sub, "%.*s[].", (int)(strlen(where) ? strlen(where) - 1 : 0),
                     where);
        }
        int rc = duplicate_keys(e, sub, path, err);
        if (rc < 0) return rc;
    }
    return 0;
}

static int line_of(const char *text, const char *at) {
    int line = 1;
    for (const char *p = text; p < at && *p; p++)
        line += *p == '\n';
    return line;
}

// the strings of the array arr (key `key`) into *out (*n of them, each malloc'd)
static int get_names(const cJSON *arr, const char *key, const char *path, char ***out, int *n,
                     struct ah_error *err) {
    *out = calloc((size_t)cJSON_GetArraySize(arr) + 1, sizeof(char *));
    if (!*out) return -AH_ENOMEM;
    const cJSON *a;
    cJSON_ArrayForEach(a, arr) {
        if (!cJSON_IsString(a) || !a->valuestring[0])
            return ah_fail(err, AH_EINVAL, "%s: \"%s[%d]\": expected a non-empty string", path, key,
                           *n);
        if (!((*out)[(*n)++] = strdup(a->valuestring))) return -AH_ENOMEM;
    }
    return 0;
}

static const char *const top_keys[] = {
    "model", "data",   "activations", "max_seq_len", "batch_size",   "output", "parallel",
    "pool",  "select", "statistics",  "compute",     "norm_profile", "saes",   NULL};
static const char *const data_keys[] = {"path", "format", "field", "pack", "fields", NULL};
static const char *const pack_keys[] = {"separator", "bos", NULL};
static const char *const out_keys[] = {
    "path", "dtype", "layout", "compression", "checkpoint_seconds", NULL};
static const char *const sae_keys[] = {"path", "on", "name", "top_n", "context", "evaluate", NULL};
static const char *const par_keys[] = {"pipeline_stages", "expert_parallel", NULL};

// "data": a path, or an object {path, format, field, pack, fields}
static int parse_data(struct job *j, const cJSON *root, const char *path, struct ah_error *err) {
    int rc = 0;
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(root, "data");
    char *dpath = NULL;
    if (cJSON_IsObject(data)) {
        if ((rc = check_keys(data, data_keys, path, "data: ", err)) < 0) return rc;
        if ((rc = get_string(data, "path", path, "data.", true, &dpath, err)) < 0) return rc;
        if ((rc = get_string(data, "format", path, "data.", false, &j->data_format, err)) < 0 ||
            (rc = get_string(data, "field", path, "data.", false, &j->data_field, err)) < 0) {
            free(dpath);
            return rc;
        }
        const cJSON *pack = cJSON_GetObjectItemCaseSensitive(data, "pack");
        j->pack_separator = j->pack_bos = -1;
        if (pack && !cJSON_IsObject(pack))
            rc = ah_fail(err, AH_EINVAL,
                         "%s: \"data.pack\": expected an object {\"separator\": id, \"bos\": id} "
                         "(both optional)",
                         path);
        if (rc == 0 && pack) {
            j->pack = true;
            if ((rc = check_keys(pack, pack_keys, path, "data.pack: ", err)) == 0 &&
                (rc = get_int(pack, "separator", path, "data.pack.", 0, 1 << 30, &j->pack_separator,
                              err)) == 0)
                rc = get_int(pack, "bos", path, "data.pack.", 0, 1 << 30, &j->pack_bos, err);
        }
        if (rc < 0) {
            free(dpath);
            return rc;
        }
    } else if ((rc = get_string(root, "data", path, "", true, &dpath, err)) < 0) {
        return rc;
    }
    j->data_path = resolve(path, dpath);
    free(dpath);
    if (!j->data_format) j->data_format = strdup("jsonl");
    if (strcmp(j->data_format, "jsonl") && strcmp(j->data_format, "text") &&
        strcmp(j->data_format, "text-files") && strcmp(j->data_format, "megatron"))
        return ah_fail(err, AH_EINVAL,
                       "%s: \"data.format\": \"%s\" is not supported (expected \"jsonl\", "
                       "\"text\", \"text-files\" or \"megatron\")",
                       path, j->data_format);
    if (cJSON_IsObject(data) && (rc = job_parse_fields(j, data, path, err)) < 0) return rc;
    return 0;
}

// "activations" and "norm_profile": names, aliases or globs
static int parse_names(struct job *j, const cJSON *root, const char *path, struct ah_error *err) {
    int rc = 0;
    const cJSON *acts = cJSON_GetObjectItemCaseSensitive(root, "activations");
    if (!cJSON_IsArray(acts) || cJSON_GetArraySize(acts) == 0)
        return ah_fail(err, AH_EINVAL,
                       "%s: \"activations\": expected a non-empty array of names "
                       "or globs (see `harvest activations MODEL_DIR`)",
                       path);
    if ((rc = get_names(acts, "activations", path, &j->activations, &j->n_activations, err)) < 0)
        return rc;
    const cJSON *prof = cJSON_GetObjectItemCaseSensitive(root, "norm_profile");
    if (prof && !cJSON_IsArray(prof))
        return ah_fail(err, AH_EINVAL,
                       "%s: \"norm_profile\": expected an array of names, aliases or globs of "
                       "(batch, sequence, features) activations",
                       path);
    if (prof &&
        (rc = get_names(prof, "norm_profile", path, &j->norm_profile, &j->n_norm_profile, err)) < 0)
        return rc;
    return 0;
}

// "saes[i].context": [BEFORE, AFTER], the token ids kept around each exemplar (0..1024 each)
static int get_context(const cJSON *e, const char *path, const char *where, struct job_sae *s,
                       struct ah_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(e, "context");
    if (!v) return 0;
    const cJSON *a = cJSON_GetArrayItem(v, 0), *b = cJSON_GetArrayItem(v, 1);
    bool ok =
        cJSON_IsArray(v) && cJSON_GetArraySize(v) == 2 && cJSON_IsNumber(a) && cJSON_IsNumber(b);
    for (int k = 0; ok && k < 2; k++) {
        double x = (k ? b : a)->valuedouble;
        ok = x == (double)(int)x && x >= 0 && x <= JOB_SAE_CONTEXT_MAX;
    }
    if (!ok)
        return ah_fail(err, AH_EINVAL,
                       "%s: \"%scontext\": expected [BEFORE, AFTER], two integers from 0 to %d "
                       "(the tokens shown before and after each exemplar)",
                       path, where, JOB_SAE_CONTEXT_MAX);
    s->ctx_before = a->valueint, s->ctx_after = b->valueint;
    return 0;
}

// An optional boolean key: *out unchanged when it is absent.
static int get_bool(const cJSON *obj, const char *key, const char *path, const char *where,
                    bool *out, struct ah_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v) return 0;
    if (!cJSON_IsBool(v))
        return ah_fail(err, AH_EINVAL, "%s: \"%s%s\": expected true or false", path, where, key);
    *out = cJSON_IsTrue(v);
    return 0;
}

// "saes": a list of {"path": DIR, "on": NAME_OR_ALIAS, "name": NAME, "top_n": N, "context":
// [BEFORE, AFTER], "evaluate": BOOL}; the SAE
// folders and sites are checked against the model by the consumer (harvest/saes.c)
static int parse_saes(struct job *j, const cJSON *root, const char *path, struct ah_error *err) {
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(root, "saes"), *e;
    if (!arr) return 0;
    if (!cJSON_IsArray(arr))
        return ah_fail(err, AH_EINVAL,
                       "%s: \"saes\": expected an array of {\"path\": DIR, \"on\": NAME, "
                       "\"name\": NAME}",
                       path);
    j->saes = calloc((size_t)cJSON_GetArraySize(arr) + 1, sizeof *j->saes);
    if (!j->saes) return -AH_ENOMEM;
    int rc = 0;
    cJSON_ArrayForEach(e, arr) {
        char where[64], in[64];
        snprintf(where, sizeof where, "saes[%d].", j->n_saes);
        snprintf(in, sizeof in, "saes[%d]: ", j->n_saes);
        struct job_sae *s = &j->saes[j->n_saes++];
        s->top_n = 32;
        s->ctx_before = JOB_SAE_CONTEXT_BEFORE, s->ctx_after = JOB_SAE_CONTEXT_AFTER;
        char *dir = NULL;
        if (!cJSON_IsObject(e))
            return ah_fail(err, AH_EINVAL, "%s: \"saes[%d]\": expected an object", path,
                           j->n_saes - 1);
        if ((rc = check_keys(e, sae_keys, path, in, err)) < 0 ||
            (rc = get_string(e, "path", path, where, true, &dir, err)) < 0 ||
            (rc = get_string(e, "on", path, where, true, &s->on, err)) < 0 ||
            (rc = get_string(e, "name", path, where, true, &s->name, err)) < 0 ||
            (rc = get_int(e, "top_n", path, where, 1, JOB_SAE_TOP_N_MAX, &s->top_n, err)) < 0 ||
            (rc = get_context(e, path, where, s, err)) < 0 ||
            (rc = get_bool(e, "evaluate", path, where, &s->evaluate, err)) < 0) {
            free(dir);
            return rc;
        }
        s->path = resolve(path, dir);
        free(dir);
        if (!s->path) return -AH_ENOMEM;
        if (strchr(s->name, '/') || !strcmp(s->name, ".") || !strcmp(s->name, ".."))
            return ah_fail(err, AH_EINVAL, "%s: \"%sname\": \"%s\" is not a name (no \"/\")", path,
                           where, s->name);
        for (int k = 0; k < j->n_saes - 1; k++)
            if (!strcmp(j->saes[k].name, s->name))
                return ah_fail(err, AH_EINVAL,
                               "%s: \"%sname\": \"%s\" is the name of saes[%d] too (each SAE "
                               "needs its own)",
                               path, where, s->name, k);
    }
    return 0;
}

// "output"
static int parse_output(struct job *j, const cJSON *root, const char *path, struct ah_error *err) {
    int rc = 0;
    const cJSON *out = cJSON_GetObjectItemCaseSensitive(root, "output");
    if (!cJSON_IsObject(out))
        return ah_fail(err, AH_EINVAL, "%s: \"output\": expected an object with at least \"path\"",
                       path);
    if ((rc = check_keys(out, out_keys, path, "output: ", err)) < 0) return rc;
    char *opath = NULL;
    if ((rc = get_string(out, "path", path, "output.", true, &opath, err)) < 0) return rc;
    j->out_path = resolve(path, opath);
    free(opath);
    // in the order of enum job_dtype and enum job_layout
    static const char *const dtypes[] = {"float32", "float16", "bfloat16", NULL};
    static const char *const layouts[] = {"prompt", "token", NULL};
    int dt = JOB_F32, lay = JOB_LAYOUT_PROMPT;
    if ((rc = get_choice(out, "dtype", path, "output.", dtypes, &dt, err)) < 0 ||
        (rc = get_choice(out, "layout", path, "output.", layouts, &lay, err)) < 0)
        return rc;
    j->out_dtype = (enum job_dtype)dt;
    j->layout = (enum job_layout)lay;
    j->checkpoint_seconds = 60;
    if ((rc = get_int(out, "compression", path, "output.", 0, 9, &j->compression, err)) < 0 ||
        (rc = get_int(out, "checkpoint_seconds", path, "output.", 0, 1 << 30,
                      &j->checkpoint_seconds, err)) < 0)
        return rc;
    return 0;
}

// "parallel"
static int parse_parallel(struct job *j, const cJSON *root, const char *path,
                          struct ah_error *err) {
    int rc = 0;
    j->pipeline_stages = j->expert_parallel = 1;
    const cJSON *par = cJSON_GetObjectItemCaseSensitive(root, "parallel");
    if (par) {
        if (!cJSON_IsObject(par))
            return ah_fail(err, AH_EINVAL, "%s: \"parallel\": expected an object", path);
        if ((rc = check_keys(par, par_keys, path, "parallel: ", err)) < 0 ||
            (rc = get_int(par, "pipeline_stages", path, "parallel.", 1, 4096, &j->pipeline_stages,
                          err)) < 0 ||
            (rc = get_int(par, "expert_parallel", path, "parallel.", 1, 4096, &j->expert_parallel,
                          err)) < 0)
            return rc;
    }
    return 0;
}

static int parse(struct job *j, const cJSON *root, const char *path, struct ah_error *err) {
    int rc;
    if (!cJSON_IsObject(root)) return ah_fail(err, AH_EINVAL, "%s: expected a JSON object", path);
    if ((rc = check_keys(root, top_keys, path, "", err)) < 0) return rc;

    char *model = NULL;
    if ((rc = get_string(root, "model", path, "", true, &model, err)) < 0) return rc;
    j->model = resolve(path, model);
    free(model);

    if ((rc = parse_data(j, root, path, err)) < 0) return rc;
    if ((rc = job_parse_pool(j, root, path, err)) < 0) return rc;

    if ((rc = parse_names(j, root, path, err)) < 0) return rc;
    if ((rc = parse_saes(j, root, path, err)) < 0) return rc;

    int cm = JOB_COMPUTE_F32; // in the order of enum job_compute
    static const char *const computes[] = {"float32", "bf16", NULL};
    if ((rc = get_choice(root, "compute", path, "", computes, &cm, err)) < 0) return rc;
    j->compute = (enum job_compute)cm;

    j->batch_size = 8;
    if ((rc = get_int(root, "max_seq_len", path, "", 1, 1 << 20, &j->max_seq_len, err)) < 0 ||
        (rc = get_int(root, "batch_size", path, "", 1, 1 << 16, &j->batch_size, err)) < 0)
        return rc;
    if (j->pack && j->max_seq_len < 2)
        return ah_fail(err, AH_EINVAL,
                       "%s: \"data.pack\" cuts contexts of \"max_seq_len\" tokens: give "
                       "\"max_seq_len\" (at least 2)",
                       path);

    if ((rc = parse_output(j, root, path, err)) < 0) return rc;
    if ((rc = parse_parallel(j, root, path, err)) < 0) return rc;
    if (!j->model || !j->data_path || !j->out_path || !j->data_format) return -AH_ENOMEM;
    // token selection and write-time statistics (jobs/select.h)
    if ((rc = select_parse(cJSON_GetObjectItemCaseSensitive(root, "select"), path, &j->sel, err)) <
        0)
        return rc;
    return select_parse_statistics(cJSON_GetObjectItemCaseSensitive(root, "statistics"), path,
                                   &j->statistics, err);
}

int job_load(struct job *j, const char *path, struct ah_error *err) {
    memset(j, 0, sizeof *j);
    char *text = NULL;
    int rc = ah_read_file(path, &text, err);
    if (rc < 0) return rc;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &end, 1);
    if (!root) {
        const char *at = end ? end : cJSON_GetErrorPtr();
        int n = 0; // the excerpt stops at the end of its line
        while (at && n < 20 && at[n] && at[n] != '\n')
            n++;
        rc = ah_fail(err, AH_EINVAL, "%s: line %d: malformed JSON near \"%.*s\"", path,
                     at ? line_of(text, at) : 0, n, at ? at : "");
        free(text);
        return rc;
    }
    free(text);
    j->path = strdup(path);
    j->text = cJSON_PrintUnformatted(root);
    rc = duplicate_keys(root, "", path, err);
    if (rc == 0) rc = parse(j, root, path, err);
    cJSON_Delete(root);
    if (rc == 0 && (!j->path || !j->text)) rc = -AH_ENOMEM;
    if (rc < 0) job_free(j);
    return rc;
}

void job_free(struct job *j) {
    for (int i = 0; i < j->n_activations; i++)
        free(j->activations[i]);
    free(j->activations);
    for (int i = 0; i < j->n_norm_profile; i++)
        free(j->norm_profile[i]);
    free(j->norm_profile);
    for (int i = 0; i < j->n_saes; i++)
        free(j->saes[i].path), free(j->saes[i].on), free(j->saes[i].name);
    free(j->saes);
    free(j->path);
    free(j->text);
    free(j->model);
    free(j->data_path);
    free(j->data_format);
    free(j->data_field);
    job_free_fields(j);
    free(j->out_path);
    select_free(&j->sel);
    memset(j, 0, sizeof *j);
}

// ----------------------------------------------------------------------------
// activation selection

static int edit_distance(const char *a, const char *b) {
    int la = (int)strlen(a), lb = (int)strlen(b);
    if (la > 127 || lb > 127) return 1 << 20;
    int row[128];
    for (int j = 0; j <= lb; j++)
        row[j] = j;
    for (int i = 1; i <= la; i++) {
        int prev = row[0];
        row[0] = i;
        for (int j = 1; j <= lb; j++) {
            int cur = row[j];
            int sub = prev + (a[i - 1] != b[j - 1]);
            int del = row[j] + 1, ins = row[j - 1] + 1;
            row[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
            prev = cur;
        }
    }
    return row[lb];
}

// pattern a of the job matches nothing: an error suggesting the three closest names
static int no_match(const struct job *j, const char *key, const char *pat, int a,
                    const struct tap_desc *cat, int n_cat, struct ah_error *err) {
    int best[3] = {-1, -1, -1}, bd[3] = {1 << 30, 1 << 30, 1 << 30};
    for (int i = 0; i < n_cat; i++) {
        int d = edit_distance(pat, cat[i].name);
        for (int k = 0; k < 3; k++) {
            if (d >= bd[k]) continue;
            for (int m = 2; m > k; m--) {
                bd[m] = bd[m - 1];
                best[m] = best[m - 1];
            }
            bd[k] = d;
            best[k] = i;
            break;
        }
    }
    char sugg[256] = "";
    for (int k = 0; k < 3 && best[k] >= 0; k++)
        snprintf(sugg + strlen(sugg), sizeof sugg - strlen(sugg), "%s\"%s\"", k ? ", " : "",
                 cat[best[k]].name);
    return ah_fail(err, AH_EINVAL,
                   "%s: \"%s[%d]\": \"%s\" matches no activation of the model; "
                   "closest: %s (list them with `harvest activations MODEL_DIR`)",
                   j->path, key, a, pat, sugg);
}

// pattern a of the job, a name no glob matched, taken as an alias (model/aliases.h): marks its
// catalogue entry with bit 2 of want and the name in alias_of_id
static int select_alias(const struct job *j, const char *key, const char *pat, int a,
                        const struct tap_desc *cat, int n_cat, const char *family, uint8_t *want,
                        const char **alias_of_id, struct ah_error *err) {
    char canon[TAP_NAME_MAX + 128];
    int r = alias_resolve(family, pat, canon, sizeof canon);
    if (r == 0) return no_match(j, key, pat, a, cat, n_cat, err);
    if (r < 0)
        return ah_fail(err, AH_EINVAL, "%s: \"%s[%d]\": \"%s\": %s", j->path, key, a, pat, canon);
    int i = tap_desc_find(cat, n_cat, canon);
    if (i < 0)
        return ah_fail(err, AH_EINVAL,
                       "%s: \"%s[%d]\": \"%s\" is an alias of \"%s\", which the %s "
                       "model lacks (list its aliases with `harvest activations MODEL_DIR "
                       "--aliases`)",
                       j->path, key, a, pat, canon, family);
    if (want[i] & 2)
        return ah_fail(err, AH_EINVAL,
                       "%s: \"%s[%d]\": \"%s\" and \"%s\" are both \"%s\" (a value "
                       "is stored once, under one name: ask for one)",
                       j->path, key, a, alias_of_id[i], pat, canon);
    want[i] |= 2;
    alias_of_id[i] = pat;
    return 0;
}

int job_select(const struct job *j, const struct tap_desc *cat, int n_cat, const char *family,
               uint8_t *want, const char **alias_of_id, struct ah_error *err) {
    return job_select_list(j, "activations", j->activations, j->n_activations, cat, n_cat, family,
                           want, alias_of_id, err);
}

int job_select_list(const struct job *j, const char *key, char *const *names, int n,
                    const struct tap_desc *cat, int n_cat, const char *family, uint8_t *want,
                    const char **alias_of_id, struct ah_error *err) {
    for (int a = 0; a < n; a++) {
        int hits = 0, rc;
        for (int i = 0; i < n_cat; i++)
            if (tap_glob_match(names[a], cat[i].name)) {
                want[i] |= 1;
                hits++;
            }
        if (!hits && (rc = select_alias(j, key, names[a], a, cat, n_cat, family, want, alias_of_id,
                                        err)) < 0)
            return rc;
    }
    for (int i = 0; i < n_cat; i++) {
        if (want[i] == 3)
            return ah_fail(err, AH_EINVAL,
                           "%s: \"%s\": \"%s\" is an alias of \"%s\", which a name or "
                           "glob of the job also asks for (a value is stored once, under one "
                           "name: ask for one)",
                           j->path, key, alias_of_id[i], cat[i].name);
        want[i] = want[i] != 0;
    }
    return 0;
}
