// config.h - a read-only view of a model folder's config.json, so that each family in model/
// reads and checks its own configuration without a JSON library: io/config_json.c implements the
// view over cJSON. Values are borrowed from the document and valid while it is.
#ifndef AH_CONFIG_H
#define AH_CONFIG_H

#include <stdbool.h>

struct ah_error;

enum cfg_kind { CFG_ABSENT, CFG_NULL, CFG_BOOL, CFG_NUMBER, CFG_STRING, CFG_ARRAY, CFG_OBJECT };

struct cfg_value; // a node of the document (opaque)

struct cfg_ops {
    // The member `key` of an object; NULL when absent or v is not an object.
    const struct cfg_value *(*member)(const struct cfg_value *v, const char *key);
    enum cfg_kind (*kind)(const struct cfg_value *v); // v non-NULL
    bool (*boolean)(const struct cfg_value *v);       // v a CFG_BOOL
    double (*number)(const struct cfg_value *v);      // v a CFG_NUMBER
    const char *(*string)(const struct cfg_value *v); // v a CFG_STRING
    int (*length)(const struct cfg_value *v);         // v a CFG_ARRAY
    const struct cfg_value *(*element)(const struct cfg_value *v,
                                       int i); // v a CFG_ARRAY, i < length
};

struct config {
    const struct cfg_ops *ops;
    const struct cfg_value *root; // the top-level object
    const char *path;             // config.json's path, which every message names
};

// ---- safe on anything: NULL (absent) and values of another kind give the neutral answer ----
const struct cfg_value *cfg_get(const struct config *c, const struct cfg_value *obj,
                                const char *key); // obj NULL: the top level
enum cfg_kind cfg_kind(const struct config *c, const struct cfg_value *v); // NULL: CFG_ABSENT
bool cfg_is_true(const struct config *c, const struct cfg_value *v);
bool cfg_is_false(const struct config *c, const struct cfg_value *v);
double cfg_number(const struct config *c, const struct cfg_value *v);      // 0 if not a number
const char *cfg_string(const struct config *c, const struct cfg_value *v); // NULL if not a string
int cfg_length(const struct config *c, const struct cfg_value *v);         // 0 if not an array
const struct cfg_value *cfg_element(const struct config *c, const struct cfg_value *v, int i);

// ---- top-level keys. `required` false: returns 1 and leaves *out alone when the key is
// absent. Errors name config.json, the key and the expected type.
int cfg_int(const struct config *c, const char *key, bool required, int *out, struct ah_error *err);
int cfg_double(const struct config *c, const char *key, bool required, double *out,
               struct ah_error *err);
// Borrowed string, or NULL when absent or not a string.
const char *cfg_str(const struct config *c, const char *key);
// An integer key with a default, checked against [lo, hi]: "CONFIG: "KEY": V is out of range
// (expected LO to HI)".
int cfg_int_in(const struct config *c, const char *key, bool required, int *out, int lo, int hi,
               struct ah_error *err);

// ---- keys with a default (transformers' for an absent key): absent or null -> dflt (which
// cfg_opt_int checks against the range too).
int cfg_opt_int(const struct config *c, const char *key, int dflt, int lo, int hi, int *out,
                struct ah_error *err);
// A number key of obj (NULL: the top level; `where` its path for messages): absent or null ->
// dflt (NAN: "none"); else finite and > 0 (cfg_num_in's CFG_POSITIVE).
int cfg_opt_num(const struct config *c, const struct cfg_value *obj, const char *where,
                const char *key, double dflt, double *out, struct ah_error *err);
bool cfg_opt_bool(const struct config *c, const char *key, bool dflt); // not a bool: dflt
// Whether top-level `key` is present as null (transformers keeps None, which is not always the
// absent key's default).
bool cfg_is_null(const struct config *c, const char *key);

// ---- range-checked numbers: every family's reader checks its number keys with these, so that a
// value that makes no sense (a zero epsilon, a negative theta, 1e999, which parses as infinity)
// is an error naming config.json and the key, never computed.
enum cfg_range {
    CFG_FINITE,   // any finite number
    CFG_NONNEG,   // >= 0
    CFG_POSITIVE, // > 0
    CFG_UNIT,     // 0 to 1: a probability (dropout)
    CFG_FRACTION, // > 0 and <= 1: a fraction of something (partial_rotary_factor)
    CFG_COUNT,    // an integer from 1 to 2^30, held as a number
};
// The number `key` of obj (NULL: the top level; `where` obj's path for messages, NULL at the
// top). Absent, or null when null_absent: returns 1 and leaves *out alone. A number in range: 0.
// Anything else (another type, not finite, out of range): an error "CONFIG: "WHERE.KEY":
// expected a number > 0" (the range's words: cfg_range_words).
int cfg_num_in(const struct config *c, const struct cfg_value *obj, const char *where,
               const char *key, enum cfg_range r, bool null_absent, double *out,
               struct ah_error *err);
const char *cfg_range_words(enum cfg_range r); // "a number > 0", ...
// Keys transformers keeps but harvest never computes with (the dropouts, initializer_range,
// router_aux_loss_coef, pretraining_tp, ...): when present and not null, each must still be in
// its range. Every family's reader calls this once.
int cfg_check_unused(const struct config *c, struct ah_error *err);

#endif
