// jobfields.h - the job keys of probe datasets (README "Probe datasets"): data.fields, pool.
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
// "pool": "last" | "mean" | ["last", "mean"] at the job's top level, into j->pool (bit 0 last,
// bit 1 mean): `harvest run` then writes /pooled/NAME/{last, mean} once the output is complete.
int job_parse_pool(struct job *j, const struct cJSON *root, const char *path, struct ah_error *err);

#endif
