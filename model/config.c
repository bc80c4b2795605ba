// config.c - the helpers of config.h over any implementation of its view
#include "model/config.h"

#include "model/ah.h"

#include <limits.h>
#include <math.h>
#include <stddef.h>

const struct cfg_value *cfg_get(const struct config *c, const struct cfg_value *obj,
                                const char *key) {
    const struct cfg_value *o = obj ? obj : c->root;
    return o ? c->ops->member(o, key) : NULL;
}

enum cfg_kind cfg_kind(const struct config *c, const struct cfg_value *v) {
    return v ? c->ops->kind(v) : CFG_ABSENT;
}

bool cfg_is_true(const struct config *c, const struct cfg_value *v) {
    return cfg_kind(c, v) == CFG_BOOL && c->ops->boolean(v);
}

bool cfg_is_false(const struct config *c, const struct cfg_value *v) {
    return cfg_kind(c, v) == CFG_BOOL && !c->ops->boolean(v);
}

double cfg_number(const struct config *c, const struct cfg_value *v) {
    return cfg_kind(c, v) == CFG_NUMBER ? c->ops->number(v) : 0.0;
}

const char *cfg_string(const struct config *c, const struct cfg_value *v) {
    return cfg_kind(c, v) == CFG_STRING ? c->ops->string(v) : NULL;
}

int cfg_length(const struct config *c, const struct cfg_value *v) {
    return cfg_kind(c, v) == CFG_ARRAY ? c->ops->length(v) : 0;
}

const struct cfg_value *cfg_element(const struct config *c, const struct cfg_value *v, int i) {
    return i >= 0 && i < cfg_length(c, v) ? c->ops->element(v, i) : NULL;
}

int cfg_int(const struct config *c, const char *key, bool required, int *out,
            struct ah_error *err) {
    const struct cfg_value *v = cfg_get(c, NULL, key);
    if (!v && !required) return 1;
    if (!v) return ah_fail(err, AH_EINVAL, "%s: missing \"%s\" (an integer)", c->path, key);
    bool num = cfg_kind(c, v) == CFG_NUMBER;
    double d = num ? cfg_number(c, v) : 0.5; // the range first: (int)1e10 is undefined
    if (!(d >= INT_MIN && d <= INT_MAX) || d != (double)(int)d)
        return ah_fail(err, AH_EINVAL, "%s: \"%s\": expected an integer, not %s", c->path, key,
                       num ? "a fraction or out of range" : "that type");
    *out = (int)d;
    return 0;
}

int cfg_double(const struct config *c, const char *key, bool required, double *out,
               struct ah_error *err) {
    const struct cfg_value *v = cfg_get(c, NULL, key);
    if (!v && !required) return 1;
    if (!v) return ah_fail(err, AH_EINVAL, "%s: missing \"%s\" (a number)", c->path, key);
    if (cfg_kind(c, v) != CFG_NUMBER)
        return ah_fail(err, AH_EINVAL, "%s: \"%s\": expected a number", c->path, key);
    *out = cfg_number(c, v);
    return 0;
}

const char *cfg_str(const struct config *c, const char *key) {
    return cfg_string(c, cfg_get(c, NULL, key));
}

int cfg_int_in(const struct config *c, const char *key, bool required, int *out, int lo, int hi,
               struct ah_error *err) {
    int rc = cfg_int(c, key, required, out, err);
    if (rc < 0) return rc;
    if (*out < lo || *out > hi)
        return ah_fail(err, AH_EINVAL, "%s: \"%s\": %d is out of range (expected %d to %d)",
                       c->path, key, *out, lo, hi);
    return 0;
}

const char *cfg_range_words(enum cfg_range r) {
    static const char *const words[] = {
        [CFG_FINITE] = "a finite number",         [CFG_NONNEG] = "a number >= 0",
        [CFG_POSITIVE] = "a number > 0",          [CFG_UNIT] = "a number from 0 to 1",
        [CFG_FRACTION] = "a number > 0 and <= 1", [CFG_COUNT] = "an integer from 1 to 1073741824",
    };
    return words[r];
}

static bool in_range(double d, enum cfg_range r) {
    switch (r) {
        case CFG_FINITE:
            return isfinite(d);
        case CFG_NONNEG:
            return isfinite(d) && d >= 0.0;
        case CFG_POSITIVE:
            return isfinite(d) && d > 0.0;
        case CFG_UNIT:
            return d >= 0.0 && d <= 1.0;
        case CFG_FRACTION:
            return d > 0.0 && d <= 1.0;
        case CFG_COUNT:
            return d >= 1.0 && d <= (double)(1 << 30) && d == floor(d);
    }
    return false;
}

int cfg_num_in(const struct config *c, const struct cfg_value *obj, const char *where,
               const char *key, enum cfg_range r, bool null_absent, double *out,
               struct ah_error *err) {
    const struct cfg_value *v = cfg_get(c, obj, key);
    if (!v || (null_absent && cfg_kind(c, v) == CFG_NULL)) return 1;
    if (cfg_kind(c, v) != CFG_NUMBER || !in_range(cfg_number(c, v), r))
        return ah_fail(err, AH_EINVAL, "%s: \"%s%s%s\": expected %s", c->path, where ? where : "",
                       where ? "." : "", key, cfg_range_words(r));
    *out = cfg_number(c, v);
    return 0;
}

int cfg_check_unused(const struct config *c, struct ah_error *err) {
    static const struct {
        const char *key;
        enum cfg_range r;
    } keys[] = {
        {"attention_dropout", CFG_UNIT},
        {"hidden_dropout", CFG_UNIT},
        {"classifier_dropout", CFG_UNIT},
        {"attn_pdrop", CFG_UNIT},
        {"embd_pdrop", CFG_UNIT},
        {"resid_pdrop", CFG_UNIT},
        {"summary_first_dropout", CFG_UNIT},
        {"initializer_range", CFG_NONNEG}, // torch's normal_ needs std >= 0
        {"router_aux_loss_coef", CFG_FINITE},
        {"router_jitter_noise", CFG_NONNEG},
        {"pretraining_tp", CFG_COUNT},
        {"n_ctx", CFG_COUNT},
    };
    double d;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        int rc = cfg_num_in(c, NULL, NULL, keys[i].key, keys[i].r, true, &d, err);
        if (rc < 0) return rc;
    }
    return 0;
}

int cfg_opt_int(const struct config *c, const char *key, int dflt, int lo, int hi, int *out,
                struct ah_error *err) {
    *out = dflt;
    if (cfg_is_null(c, key)) return 0;
    int rc = cfg_int(c, key, false, out, err);
    if (rc < 0) return rc;
    if (*out < lo || *out > hi)
        return ah_fail(err, AH_EINVAL, "%s: \"%s\": %d is out of range (expected %d to %d)",
                       c->path, key, *out, lo, hi);
    return 0;
}

int cfg_opt_num(const struct config *c, const struct cfg_value *obj, const char *where,
                const char *key, double dflt, double *out, struct ah_error *err) {
    *out = dflt;
    int rc = cfg_num_in(c, obj, obj ? where : NULL, key, CFG_POSITIVE, true, out, err);
    return rc < 0 ? rc : 0;
}

bool cfg_opt_bool(const struct config *c, const char *key, bool dflt) {
    const struct cfg_value *v = cfg_get(c, NULL, key);
    return cfg_kind(c, v) == CFG_BOOL ? cfg_is_true(c, v) : dflt;
}

bool cfg_is_null(const struct config *c, const char *key) {
    return cfg_kind(c, cfg_get(c, NULL, key)) == CFG_NULL;
}
