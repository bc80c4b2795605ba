// job.h - the job file (contract.md "Job file"): parsed into a plain C struct; no cJSON pointer
// leaves job.c. Unknown keys are errors; relative paths resolve against the job file's folder.
#ifndef AH_JOB_H
#define AH_JOB_H

#include "io/dataset.h" // struct ds_field_spec (data.fields)
#include "jobs/select.h"
#include "model/tap.h"

#include <stdint.h>

#include <stdbool.h>

struct ah_error;

enum job_layout { JOB_LAYOUT_PROMPT, JOB_LAYOUT_TOKEN };
enum job_dtype { JOB_F32, JOB_F16, JOB_BF16 };
// "compute": how the linear layers multiply (model/ops.h op_set_compute), "float32" (default)
// or "bf16"; the output's root attribute compute_dtype
enum job_compute { JOB_COMPUTE_F32, JOB_COMPUTE_BF16 };

// one SAE of "saes" (docs/saes.md "The saes job key")
struct job_sae {
    char *path;    // resolved SAE folder; owned
    char *on;      // the site: a catalogue name or alias, as written; owned
    char *name;    // the name its outputs go under (/saes/<name>); owned
    int top_n;     // exemplars kept per latent, 1..4096 (default 32)
    bool evaluate; // "evaluate": splice-in evaluation (harvest/saeval.c; default false)

    int ctx_before, ctx_after; // "context": token ids shown before / after an exemplar (8, 4)
};
#define JOB_SAE_TOP_N_MAX 4096

#define JOB_SAE_CONTEXT_MAX    1024 // "context": at most this many either side
#define JOB_SAE_CONTEXT_BEFORE 8
#define JOB_SAE_CONTEXT_AFTER  4

struct job {
    char *path;         // the job file as given; owned
    char *text;         // the job as compact JSON text (provenance, resume check); owned
    char *model;        // resolved model folder; owned
    char *data_path;    // resolved data file; owned
    char *data_format;  // "jsonl", "text" (a prompt a line), "text-files" (a glob) or
                        // "megatron" (an indexed .bin/.idx pair); owned
    char *data_field;   // field holding the prompt, or NULL: "input_ids" else "text"; owned
    bool pack;          // data.pack: documents joined and cut into max_seq_len contexts
    int pack_separator; // token between documents, -1 for none
    int pack_bos;       // token that starts every context, -1 for none
    struct ds_field_spec *fields; // (n_fields) data.fields (jobs/jobfields.c); owned
    int n_fields;
    unsigned pool;      // "pool": bit 0 last, bit 1 mean (jobs/jobfields.c); 0: none
    char **activations; // (n_activations) names or globs as written; owned
    int n_activations;
    char **norm_profile;  // (n_norm_profile) "norm_profile": names, aliases or globs; owned
    int n_norm_profile;   // 0: no profile
    struct job_sae *saes; // (n_saes) "saes"; owned
    int n_saes;           // 0: none
    int max_seq_len;      // 0: the longest prompt, capped by the model
    int batch_size;       // prompts per forward (default 8)
    char *out_path;       // resolved output path; owned
    enum job_dtype out_dtype;
    enum job_layout layout;
    int compression;        // gzip level 0-9
    int checkpoint_seconds; // seconds between checkpoints (default 60; 0: after every batch)
    int pipeline_stages;    // >= 1
    int expert_parallel;    // >= 1
    struct select_spec sel; // "select" (jobs/select.h); sel.given false when absent
    int statistics;         // "statistics": 1, 0, or -1 when absent (true for the token layout)
    // "compute"
    enum job_compute compute;
};

// Returns 0 or -AH_ENOENT / -AH_EFORMAT / -AH_EINVAL with "FILE: line N: ..." or "FILE: KEY: ...".
int job_load(struct job *j, const char *path, struct ah_error *err);
void job_free(struct job *j); // safe on a zeroed struct

const char *job_dtype_name(enum job_dtype d); // "float32", "float16", "bfloat16"
// "float32", "bf16"
const char *job_compute_name(enum job_compute c);

// Marks want[i] = 1 (want: n_cat zeroes) for every catalogue entry matched by a name or glob of
// the job, or by an alias of a model of `family` (model/aliases.h): then alias_of_id[i] (n_cat
// NULLs) is the job's name for it (borrowed from j), under which it is stored. A pattern that
// matches nothing is an error naming it and suggesting the closest catalogue names; so is an alias
// whose canonical name the model lacks, and a value asked for under two names (two aliases, or an
// alias and a name or glob): it is stored once.
int job_select(const struct job *j, const struct tap_desc *cat, int n_cat, const char *family,
               uint8_t *want, const char **alias_of_id, struct ah_error *err);
// The same for another list of the job (names, n of them) under the key `key` (messages name
// it): job_select is job_select_list(j, "activations", j->activations, j->n_activations, ...).
int job_select_list(const struct job *j, const char *key, char *const *names, int n,
                    const struct tap_desc *cat, int n_cat, const char *family, uint8_t *want,
                    const char **alias_of_id, struct ah_error *err);

#endif
