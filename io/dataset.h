// dataset.h - prompts from a JSON Lines file: one prompt a line, {"input_ids": [..]} (or the field
// the job names). Empty prompts are skipped and over-long ones truncated, both counted.
#ifndef AH_DATASET_H
#define AH_DATASET_H

#include <stdint.h>

struct ah_error;

struct ds_prompts {
    int64_t n;       // prompts kept
    int64_t *source; // (n) 0-based line in the data file; owned
    int64_t *len;    // (n) tokens used, after truncation; owned
    int64_t *off;    // (n) first token of the prompt in ids; owned
    int64_t *ids;    // (n_tokens) owned
    int64_t n_tokens;
    int64_t n_lines;     // lines read
    int64_t n_empty;     // prompts skipped because empty
    int64_t n_truncated; // prompts cut to `truncate_at`
    int64_t longest;     // longest prompt after truncation
};

// Loads every prompt. field: the key of each line's object (NULL: "input_ids"). Prompts longer than
// truncate_at tokens are cut. Ids must lie in [0, vocab). Errors name the file and line.
int ds_load(struct ds_prompts *p, const char *path, const char *field, int64_t truncate_at,
            int64_t vocab, struct ah_error *err);
void ds_free(struct ds_prompts *p); // safe on a zeroed struct

#endif
