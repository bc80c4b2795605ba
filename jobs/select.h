// select.h - token selection (the job's "select" key) as pure functions, and the parsing of the
// job keys "select" and "statistics" (README "Statistics" gives the schema).
//
// Every choice is a function of the corpus alone, never of the grid, the batch size or a resume:
//   - skip_first and skip_token_ids look at a token's position and id;
//   - tokens_per_context keeps the k eligible positions of a context with the smallest keys
//     select_key(seed, source index of the prompt, position) (ties: the lower position);
//   - max_norm_multiple drops a chosen token whose norm exceeds m x the median norm of a fixed
//     sample: the first max_norm_sample chosen tokens of the corpus in corpus order (prompt order,
//     then position). The median is an order statistic of that set, so it does not depend on the
//     order the sample's norms are pushed in.
// Order of application: skip_first, skip_token_ids, tokens_per_context, then the norm guard (so the
// chosen (prompt, position) pairs do not depend on the model's numerics).
#ifndef AH_SELECT_H
#define AH_SELECT_H

#include <stdbool.h>
#include <stdint.h>

struct ah_error;
struct cJSON;

struct select_spec {
    bool given;         // the job has a "select" object
    uint64_t seed;      // select.seed (default 0)
    int64_t skip_first; // select.skip_first (default 0)
    int64_t *skip_ids;  // (n_skip_ids) sorted, unique; owned
    int n_skip_ids;
    bool skip_special;          // "special" was given: select_resolve adds the tokenizer's specials
    int64_t tokens_per_context; // 0: every eligible token
    double max_norm_multiple;   // 0: no norm guard; else > 1
    char *max_norm_activation;  // the named activation whose norm is guarded; owned
    int64_t max_norm_sample;    // tokens in the median's sample (default 4096)
};

// Parses the job's "select" value v (NULL: absent, all defaults) into s (zeroed first). path names
// the job file in errors: "JOB: \"select.KEY\": what was expected". Unknown keys are errors.
// Returns 0, -AH_EINVAL or -AH_ENOMEM; s is freeable either way.
int select_parse(const struct cJSON *v, const char *path, struct select_spec *s,
                 struct ah_error *err);
// Checks the ids against the model: every id < vocab, else an error naming
// "select.skip_token_ids[i]"; with "special", adds the tokenizer's special ids (special, n_special)
// or, with have_tokenizer false, fails naming the key. Keeps skip_ids sorted and unique.
int select_resolve(struct select_spec *s, int64_t vocab, bool have_tokenizer,
                   const int64_t *special, int n_special, const char *path, struct ah_error *err);
void select_free(struct select_spec *s); // safe on a zeroed struct

// Parses the job's "statistics" value v (NULL: absent): *out = 1 (true), 0 (false) or -1 (absent:
// the default, true for the token layout). Anything but a boolean is an error naming the key.
int select_parse_statistics(const struct cJSON *v, const char *path, int *out,
                            struct ah_error *err);

// ---- the primitives ----
// A 64-bit key of (seed, source index, position): splitmix64's finaliser chained over the three.
uint64_t select_key(uint64_t seed, int64_t source_index, int64_t position);
// Whether id is in skip_ids (binary search).
bool select_skips_id(const struct select_spec *s, int64_t id);

// What selection left out, summed over contexts (for the output's attributes).
struct select_counts {
    int64_t kept;          // tokens chosen
    int64_t skipped_first; // by skip_first
    int64_t skipped_id;    // by skip_token_ids (among those past skip_first)
    int64_t not_chosen;    // eligible but not among a context's tokens_per_context
    int64_t dropped_norm;  // by the norm guard (select_norm_keep's callers count these)
};

// One context (prompt) of T tokens ids[0..T) with its source index: keep[t] = 1 for the chosen
// positions, 0 for the others (all but the norm guard). Adds to *c (may be NULL). Returns the
// number kept, or -AH_ENOMEM.
int64_t select_context(const struct select_spec *s, int64_t source_index, const int64_t *ids,
                       int64_t T, uint8_t *keep, struct select_counts *c);

// ---- the norm guard's median ----
struct norm_median {
    int64_t cap, n;
    double *v; // (cap) the sample; owned
};
int norm_median_init(struct norm_median *m, int64_t cap); // 0 or -AH_ENOMEM
void norm_median_free(struct norm_median *m);             // safe on a zeroed struct
// Adds a chosen token's norm while the sample is not full; returns false once it is (the norm was
// not taken). A non-finite norm is not taken either (returns true: the sample is still open).
bool norm_median_push(struct norm_median *m, double norm);
// The lower median of the sample (its element floor((n - 1) / 2) in sorted order); NaN if empty.
// Sorts the sample in place (the sample is a set: pushes may continue).
double norm_median_value(struct norm_median *m);
// Whether a token of this norm is kept: norm <= multiple x median (a NaN norm is dropped).
bool select_norm_keep(double norm, double median, double multiple);

#endif
