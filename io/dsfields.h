// dsfields.h - the data.fields of a JSON Lines corpus (io/dataset.h): each line's typed values,
// kept for the prompts the loader keeps. Internal to io/dataset.c (and jobs/jobfields.c, which
// checks the job's defaults with the same rules).
#ifndef AH_DSFIELDS_H
#define AH_DSFIELDS_H

#include "io/dataset.h"

#include <stdbool.h>

// An int field's values: integers of magnitude below 2^53, which a JSON number (read as a double,
// as cJSON reads them) holds exactly; past it, neighbouring integers read as the same value.
#define DSF_INT_LIMIT 9007199254740992.0

// true if s is valid UTF-8 as Python decodes it (strict: no overlong forms, no surrogates, nothing
// past U+10FFFF), so that h5py's asstr() reads the stored string
static inline bool dsf_utf8_valid(const char *str) {
    const unsigned char *s = (const unsigned char *)str;
    while (*s) {
        unsigned c = *s++;
        if (c < 0x80) continue;
        if (c < 0xC2 || c > 0xF4) return false;
        int n = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : 1;
        unsigned lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80; // the first continuation's range
        unsigned hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
        for (int k = 0; k < n; k++, lo = 0x80, hi = 0xBF)
            if (s[k] < lo || s[k] > hi) return false; // the terminating NUL stops it too
        s += n;
    }
    return true;
}

struct ah_error;
struct cJSON;

// Sets up p->fields for spec's n_fields fields (none: nothing).
int dsf_begin(struct ds_prompts *p, const struct ds_spec *spec, struct ah_error *err);
// Reads the fields of one line's object o into row p->n (the row of the prompt about to be
// added). A missing key or null takes the default, else it is an error, as is a value of another
// type, naming `where` ("FILE: line N") and the field.
int dsf_line(struct ds_prompts *p, const struct cJSON *o, const char *where, struct ah_error *err);
// Forgets what dsf_line wrote for row `row` (the prompt was not kept: empty).
void dsf_drop(struct ds_prompts *p, int64_t row);
// Packing: context c takes the values of document doc[c] (n_ctx contexts).
int dsf_remap(struct ds_prompts *p, const int64_t *doc, int64_t n_ctx, struct ah_error *err);
// The longest string of each string field, over the kept rows.
void dsf_finish(struct ds_prompts *p);
void dsf_free(struct ds_prompts *p);

#endif
