// config.c - the helpers of config.h over any implementation of its view
#include "model/config.h"

#include "model/ah.h"

#include <limits.h>
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
