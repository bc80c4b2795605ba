// jobfields.h - the job keys of probe datasets (README "Probe datasets"): data.fields.
#ifndef AH_JOBFIELDS_H
#define AH_JOBFIELDS_H

struct job;
struct cJSON;
struct ah_error;

// data.fields of the job's data object: {"NAME": "int" | "float" | "bool" | "string" |
// {"type": .., "default": ..}}, into j->fields. Errors name the file and the key.
int job_parse_fields(struct job *j, const struct cJSON *data, const char *path,
                     struct ah_error *err);
void job_free_fields(struct job *j); // safe on a zeroed struct

#endif
