// jobfields.c - the job keys of probe datasets: data.fields (per-prompt labels read from the JSON
// Lines corpus, io/dataset.h) and pool (README "Probe datasets").
#define _POSIX_C_SOURCE 200809L // defines: strdup
#include "jobs/jobfields.h"

#include "io/dsfields.h" // DSF_INT_LIMIT, dsf_utf8_valid: the rules of the lines' values
#include "jobs/job.h"
#include "model/ah.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

// the /prompts tables harvest writes itself, in an output (source_index, length, token_offset)
// or in probe.h5 (prompt_index, source_index, length): a field may not take their names
static const char *const reserved[] = {"source_index", "length", "token_offset", "prompt_index",
                                       NULL};

static int bad_name(const char *n) {
    if (!n[0] || strchr(n, '/') || !strcmp(n, ".") || !strcmp(n, "..")) return 1;
    for (int i = 0; reserved[i]; i++)
        if (!strcmp(n, reserved[i])) return 2;
    return 0;
}

static int parse_type(const char *t, enum ds_ftype *out) {
    for (int k = 0; k < 4; k++)
        if (!strcmp(t, ds_ftype_name((enum ds_ftype)k))) {
            *out = (enum ds_ftype)k;
            return 0;
        }
    return -1;
}

// "default" of one field, of its type
static int parse_default(struct ds_field_spec *f, const cJSON *d, const char *path,
                         struct ah_error *err) {
    f->has_default = true;
    bool ok = false;
    double v = cJSON_IsNumber(d) ? d->valuedouble : 0.5; // (int64_t) of |v| >= 2^63 is undefined
    if (f->type == DS_INT && fabs(v) < DSF_INT_LIMIT && v == floor(v)) // exact: below 2^53
        ok = true, f->def_i = (int64_t)v;
    if (f->type == DS_FLOAT && cJSON_IsNumber(d)) ok = true, f->def_f = d->valuedouble;
    if (f->type == DS_BOOL && cJSON_IsBool(d)) ok = true, f->def_i = cJSON_IsTrue(d);
    if (f->type == DS_STRING && cJSON_IsString(d) && dsf_utf8_valid(d->valuestring)) {
        if (!(f->def_s = strdup(d->valuestring))) return -AH_ENOMEM;
        ok = true;
    }
    if (ok) return 0;
    return ah_fail(err, AH_EINVAL, "%s: \"data.fields.%s.default\": expected a value of type %s%s",
                   path, f->name, ds_ftype_name(f->type),
                   f->type == DS_INT      ? " (an integer of magnitude below 2^53)"
                   : f->type == DS_STRING ? " (valid UTF-8)"
                                          : "");
}

// one entry: "NAME": "TYPE" or "NAME": {"type": "TYPE", "default": VALUE}
static int parse_field(struct ds_field_spec *f, const cJSON *e, const char *path,
                       struct ah_error *err) {
    if (!(f->name = strdup(e->string))) return -AH_ENOMEM;
    if (!dsf_utf8_valid(f->name)) // not echoed: its bytes are no text
        return ah_fail(err, AH_EINVAL, "%s: \"data.fields\": a key is not valid UTF-8", path);
    int why = bad_name(f->name);
    if (why)
        return ah_fail(err, AH_EINVAL, "%s: \"data.fields\": \"%s\" %s", path, f->name,
                       why == 2 ? "is a table harvest writes in /prompts (of the output or of "
                                  "probe.h5): choose another name"
                                : "cannot name a dataset (empty, \".\", \"..\" or holding '/')");
    const cJSON *t = cJSON_IsObject(e) ? cJSON_GetObjectItemCaseSensitive(e, "type") : e;
    const cJSON *k, *keys = cJSON_IsObject(e) ? e : NULL;
    cJSON_ArrayForEach(k, keys) {
        if (strcmp(k->string, "type") && strcmp(k->string, "default"))
            return ah_fail(err, AH_EINVAL,
                           "%s: \"data.fields.%s\": unknown key \"%s\" (expected type, default)",
                           path, f->name, k->string);
    }
    if (!cJSON_IsString(t) || parse_type(t->valuestring, &f->type) < 0)
        return ah_fail(err, AH_EINVAL,
                       "%s: \"data.fields.%s\": expected a type \"int\", \"float\", \"bool\" or "
                       "\"string\", or {\"type\": .., \"default\": ..}",
                       path, f->name);
    const cJSON *d = cJSON_IsObject(e) ? cJSON_GetObjectItemCaseSensitive(e, "default") : NULL;
    return d ? parse_default(f, d, path, err) : 0;
}

int job_parse_fields(struct job *j, const cJSON *data, const char *path, struct ah_error *err) {
    const cJSON *fl = cJSON_GetObjectItemCaseSensitive(data, "fields"), *e;
    if (!fl) return 0;
    if (!cJSON_IsObject(fl))
        return ah_fail(err, AH_EINVAL,
                       "%s: \"data.fields\": expected an object {\"NAME\": \"int\" | \"float\" | "
                       "\"bool\" | \"string\" | {\"type\": .., \"default\": ..}}",
                       path);
    if (strcmp(j->data_format ? j->data_format : "jsonl", "jsonl"))
        return ah_fail(err, AH_EINVAL,
                       "%s: \"data.fields\": fields are keys of JSON Lines objects, and "
                       "\"data.format\" is \"%s\"",
                       path, j->data_format);
    int n = cJSON_GetArraySize(fl);
    if (!(j->fields = calloc((size_t)n + 1, sizeof *j->fields))) return -AH_ENOMEM;
    cJSON_ArrayForEach(e, fl) {
        int rc = parse_field(&j->fields[j->n_fields++], e, path, err);
        if (rc < 0) return rc;
    }
    return 0;
}

void job_free_fields(struct job *j) {
    for (int i = 0; i < j->n_fields; i++) {
        free(j->fields[i].name);
        free(j->fields[i].def_s);
    }
    free(j->fields);
    j->fields = NULL;
    j->n_fields = 0;
}

int job_parse_pool(struct job *j, const cJSON *root, const char *path, struct ah_error *err) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "pool"), *e;
    if (!p) return 0;
    const cJSON *one[1] = {p};
    int n = cJSON_IsArray(p) ? cJSON_GetArraySize(p) : 1;
    for (int k = 0; k < n; k++) {
        e = cJSON_IsArray(p) ? cJSON_GetArrayItem(p, k) : one[0];
        const char *v = cJSON_IsString(e) ? e->valuestring : "";
        unsigned bit = !strcmp(v, "last") ? 1 : !strcmp(v, "mean") ? 2 : 0;
        if (!bit)
            return ah_fail(err, AH_EINVAL,
                           "%s: \"pool\": expected \"last\", \"mean\" or [\"last\", \"mean\"]",
                           path);
        j->pool |= bit;
    }
    if (!j->pool)
        return ah_fail(err, AH_EINVAL,
                       "%s: \"pool\": an empty list (give \"last\" and/or \"mean\")", path);
    return 0;
}
