// dsfields.h - the data.fields of a JSON Lines corpus (io/dataset.h): each line's typed values,
// kept for the prompts the loader keeps. Internal to io/dataset.c.
#ifndef AH_DSFIELDS_H
#define AH_DSFIELDS_H

#include "io/dataset.h"

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
