// dsfields.c - see dsfields.h
#include "io/dsfields.h"

#include "model/ah.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static size_t elem_size(enum ds_ftype t) {
    return t == DS_BOOL ? 1 : 8; // strings: int64 offsets
}

int dsf_begin(struct ds_prompts *p, const struct ds_spec *spec, struct ah_error *err) {
    if (spec->n_fields == 0) return 0;
    p->fields = calloc((size_t)spec->n_fields, sizeof *p->fields);
    if (!p->fields) return ah_fail(err, AH_ENOMEM, "out of memory: data.fields");
    p->n_fields = spec->n_fields;
    for (int k = 0; k < spec->n_fields; k++)
        p->fields[k].spec = &spec->fields[k];
    return 0;
}

static int grow_bytes(char **b, int64_t *cap, int64_t need) {
    if (need <= *cap) return 0;
    int64_t c = *cap * 2 > need ? *cap * 2 : need + 4096;
    char *nb = realloc(*b, (size_t)c);
    if (!nb) return -AH_ENOMEM;
    *b = nb;
    *cap = c;
    return 0;
}

// appends the string s to field f as row `row`
static int put_string(struct ds_field *f, int64_t row, const char *s) {
    int64_t n = (int64_t)strlen(s);
    if (grow_bytes(&f->s, &f->s_cap, f->s_len + n + 1) < 0) return -AH_ENOMEM;
    memcpy(f->s + f->s_len, s, (size_t)n + 1);
    ((int64_t *)f->v)[row] = f->s_len;
    f->s_len += n + 1;
    return 0;
}

static int type_error(struct ah_error *err, const char *where, const struct ds_field_spec *fs,
                      const char *got) {
    return ah_fail(err, AH_EINVAL,
                   "%s: field \"%s\": expected %s (data.fields.%s is \"%s\"), got %s", where,
                   fs->name,
                   fs->type == DS_INT     ? "an integer"
                   : fs->type == DS_FLOAT ? "a number"
                   : fs->type == DS_BOOL  ? "true or false"
                                          : "a string",
                   fs->name, ds_ftype_name(fs->type), got);
}

static const char *kind_of(const cJSON *v) {
    return cJSON_IsNumber(v)   ? "a number"
           : cJSON_IsBool(v)   ? "a boolean"
           : cJSON_IsString(v) ? "a string"
           : cJSON_IsArray(v)  ? "an array"
                               : "an object";
}

// one field's value of one line (v NULL: the default)
static int put_value(struct ds_field *f, int64_t row, const cJSON *v, const char *where,
                     struct ah_error *err) {
    const struct ds_field_spec *fs = f->spec;
    switch (fs->type) {
        case DS_INT: {
            double d = v ? v->valuedouble : (double)fs->def_i;
            if (v && (!cJSON_IsNumber(v) || d != floor(d)))
                return type_error(err, where, fs, cJSON_IsNumber(v) ? "a fraction" : kind_of(v));
            // integers as JSON numbers: exact below 2^53 (cJSON reads numbers as doubles)
            if (v && fabs(d) >= DSF_INT_LIMIT)
                return ah_fail(
                    err, AH_EINVAL,
                    "%s: field \"%s\": an integer of magnitude 2^53 (9007199254740992) or more "
                    "cannot be read exactly (JSON numbers are read as doubles, and "
                    "nearby integers read the same): give it as a string field",
                    where, fs->name);
            ((int64_t *)f->v)[row] = v ? (int64_t)d : fs->def_i;
            return 0;
        }
        case DS_FLOAT:
            if (v && !cJSON_IsNumber(v)) return type_error(err, where, fs, kind_of(v));
            ((double *)f->v)[row] = v ? v->valuedouble : fs->def_f;
            return 0;
        case DS_BOOL:
            if (v && !cJSON_IsBool(v)) return type_error(err, where, fs, kind_of(v));
            ((uint8_t *)f->v)[row] = v ? (uint8_t)cJSON_IsTrue(v) : (uint8_t)fs->def_i;
            return 0;
        default:
            if (v && !cJSON_IsString(v)) return type_error(err, where, fs, kind_of(v));
            if (v && !dsf_utf8_valid(v->valuestring))
                return ah_fail(err, AH_EINVAL,
                               "%s: field \"%s\": the string is not valid UTF-8 (stored as "
                               "UTF-8 text, it would not read back)",
                               where, fs->name);
            if (put_string(f, row, v ? v->valuestring : fs->def_s) < 0)
                return ah_fail(err, AH_ENOMEM, "%s: out of memory for field \"%s\"", where,
                               fs->name);
            return 0;
    }
}

int dsf_line(struct ds_prompts *p, const cJSON *o, const char *where, struct ah_error *err) {
    int64_t row = p->n;
    for (int k = 0; k < p->n_fields; k++) {
        struct ds_field *f = &p->fields[k];
        const struct ds_field_spec *fs = f->spec;
        if (row >= f->cap) {
            int64_t c = f->cap * 2 + 1024;
            void *nv = realloc(f->v, (size_t)c * elem_size(fs->type));
            if (!nv) return ah_fail(err, AH_ENOMEM, "out of memory for field \"%s\"", fs->name);
            f->v = nv;
            f->cap = c;
        }
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, fs->name);
        if (cJSON_IsNull(v)) v = NULL;
        if (!v && !fs->has_default)
            return ah_fail(err, AH_EINVAL,
                           "%s: field \"%s\" is missing (data.fields.%s has no \"default\")", where,
                           fs->name, fs->name);
        int rc = put_value(f, row, v, where, err);
        if (rc < 0) return rc;
    }
    return 0;
}

void dsf_drop(struct ds_prompts *p, int64_t row) {
    for (int k = 0; k < p->n_fields; k++)
        if (p->fields[k].spec->type == DS_STRING)
            p->fields[k].s_len = ((int64_t *)p->fields[k].v)[row];
}

int dsf_remap(struct ds_prompts *p, const int64_t *doc, int64_t n_ctx, struct ah_error *err) {
    for (int k = 0; k < p->n_fields; k++) {
        struct ds_field *f = &p->fields[k], g = {.spec = f->spec, .cap = n_ctx + 1};
        size_t es = elem_size(f->spec->type);
        if (!(g.v = malloc((size_t)g.cap * es)))
            return ah_fail(err, AH_ENOMEM, "out of memory for field \"%s\"", f->spec->name);
        int rc = 0;
        for (int64_t c = 0; c < n_ctx && rc == 0; c++) {
            if (f->spec->type == DS_STRING)
                rc = put_string(&g, c, f->s + ((int64_t *)f->v)[doc[c]]);
            else
                memcpy((char *)g.v + (size_t)c * es, (char *)f->v + (size_t)doc[c] * es, es);
        }
        free(f->v);
        free(f->s);
        *f = g;
        if (rc < 0) return ah_fail(err, AH_ENOMEM, "out of memory for field \"%s\"", f->spec->name);
    }
    return 0;
}

void dsf_finish(struct ds_prompts *p) {
    for (int k = 0; k < p->n_fields; k++) {
        struct ds_field *f = &p->fields[k];
        f->max_len = 0;
        for (int64_t i = 0; f->spec->type == DS_STRING && i < p->n; i++) {
            int64_t n = (int64_t)strlen(f->s + ((int64_t *)f->v)[i]);
            f->max_len = n > f->max_len ? n : f->max_len;
        }
    }
}

void dsf_free(struct ds_prompts *p) {
    for (int k = 0; k < p->n_fields; k++) {
        free(p->fields[k].v);
        free(p->fields[k].s);
    }
    free(p->fields);
    p->fields = NULL;
    p->n_fields = 0;
}
