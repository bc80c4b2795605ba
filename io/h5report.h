// h5report.h - what `harvest report` shows of an output, read once from its master: provenance,
// the selection counts, the per-position norm profiles (/norm_profile), the per-feature statistics
// (/stats), the attention patterns of chosen prompts and the experts' load and router entropy.
// Serial (no MPI), read-only. The HTML writer (io/htmlreport.h) takes the result.
//
// A value the output does not hold leaves its part empty (n 0, or has_* false): the page then says
// which job key would give it. Everything here is float64 or int64 and owned by struct rpt_data.
#ifndef AH_H5REPORT_H
#define AH_H5REPORT_H

#include "model/tap.h"

#include <hdf5.h>
#include <stdbool.h>
#include <stdint.h>

struct ah_error;

#define RPT_NAME_MAX   160 // a dataset or group name kept (longer ones are cut)
#define RPT_HIST_BINS  130 // /norm_profile/NAME/hist: bin 0 < 2^-8, 1..128 [2^((i-33)/4), ..), 129
#define RPT_N_COUNTS   5   // the selection's root attributes (harvest/writer.c)
#define RPT_N_QUANTILE 5   // the percentiles 5, 25, 50, 75, 95

// One /norm_profile/NAME group: a profiled value's L2 norm by position.
struct rpt_profile {
    char group[RPT_NAME_MAX]; // the group's name
    char value[RPT_NAME_MAX]; // attribute value: the catalogue name (group name if absent)
    int64_t T;                // positions
    int64_t *count;           // (T) owned
    double *sum, *sum_sq;     // (T) owned
    double *max;              // (T) owned; NaN where count is 0
    int64_t hist[RPT_HIST_BINS];
    double edges[RPT_HIST_BINS - 1]; // attribute hist_edges (made from the definition if absent)
    int64_t n_nan;
    int64_t K;              // outliers, largest first
    int64_t *o_prompt;      // (K) owned
    int64_t *o_pos, *o_tok; // (K) owned
    double *o_norm;         // (K) owned
    char **o_text;          // (K) the tokens' text, or NULL; filled by the caller, owned here
    // derived here: over every position
    int64_t n;                // sum of count
    double mean;              // sum / count
    double q[RPT_N_QUANTILE]; // the percentiles, interpolated in hist (rpt_hist_quantile)
};

// One /stats/NAME group: per-feature statistics.
struct rpt_stat {
    char name[RPT_NAME_MAX];
    int64_t d, rows;    // features, rows taken
    double *mean, *var; // (d) owned
    double norm_mean, norm_var;
};

// The attention pattern of one prompt in one dataset: the mean over heads of its probabilities,
// as block means when a side is longer than RPT_HEAT_MAX (blocks of bq queries x bk keys, the
// last ones smaller; bq = ceil(T / RPT_HEAT_MAX)), so a long prompt costs a 64 x 64 grid.
#define RPT_HEAT_MAX 64
struct rpt_attn {
    char name[RPT_NAME_MAX];
    int64_t prompt, T; // T = length[prompt]: queries
    int64_t n_key;     // keys: T, or 2T on a global+local-key axis
    int64_t heads;
    int64_t bq, bk;     // queries and keys a cell averages (1 up to RPT_HEAT_MAX a side)
    int64_t rows, cols; // ceil(T / bq), ceil(n_key / bk)
    double *p;          // (rows, cols) owned
};

// The experts of one block: load (from expert_indices) and router entropy (from router_logits).
struct rpt_moe {
    char layer[RPT_NAME_MAX]; // the names' common prefix ("layers.3.")
    int64_t E;                // experts
    bool has_load, has_entropy;
    int64_t *load;          // (E) owned: tokens routed to each expert (each of a token's k slots)
    int64_t load_tokens;    // tokens counted
    double entropy;         // mean over tokens of -sum p log p, p = softmax(router_logits), nats
    int64_t entropy_tokens; // tokens counted (rows with a NaN left out)
};

struct rpt_dset {
    char name[RPT_NAME_MAX];
    int ndim;
    int64_t dims[TAP_MAX_DIMS];
    char axes[TAP_MAX_DIMS][RPT_NAME_MAX]; // attribute stored_axes ("" if absent)
    char dtype[16];                        // attribute dtype
};

struct rpt_data {
    char *path;                                // owned
    char *family, *job, *provenance, *storage; // root attributes, owned (NULL if absent)
    int64_t format, complete, prompts_done, n_prompts, n_tokens, max_seq_len, batch_size;
    int64_t n_empty, n_truncated;
    bool token_layout;
    bool has_counts;              // the run had "select" (some of the counts are there)
    bool has_count[RPT_N_COUNTS]; // which are (n_tokens_dropped_norm: with the norm guard)
    int64_t counts[RPT_N_COUNTS];
    struct rpt_dset *dsets; // (n_dsets) owned, in natural name order
    int n_dsets;
    struct rpt_profile *prof; // (n_prof) owned, in layer order (rpt_read)
    int n_prof;
    struct rpt_stat *stats; // (n_stats) owned, in natural name order
    int n_stats;
    struct rpt_attn *attn; // (n_attn) owned: dataset by dataset, the prompts in the order given
    int n_attn;
    struct rpt_moe *moe; // (n_moe) owned, in layer order
    int n_moe;
};

// The names of the selection counts, in the order of rpt_data.counts.
extern const char *const rpt_count_names[RPT_N_COUNTS];

// Reads the output at path: refused as inspect and stats refuse (-AH_EINVAL naming the file) if it
// is no harvest output, is incomplete (attribute complete not 1: its missing rows would read as
// NaN and 0), or is damaged (h5out_check: a renamed copy, a missing or truncated segment). prompts
// (n_prompts of them; NULL: prompt 0) are the prompts whose attention patterns are read; a prompt
// beyond the output's is -AH_EINVAL naming it. The profiles are ordered as the job's "norm_profile"
// lists them (a glob's matches in natural order), the rest in natural order. Returns 0, -AH_EINVAL,
// -AH_ENOMEM or -AH_EIO; d is then freed already.
int rpt_read(struct rpt_data *d, const char *path, const int64_t *prompts, int n_prompts,
             struct ah_error *err);
void rpt_free(struct rpt_data *d); // safe on a zeroed struct
// The dataset of that name among d->dsets, or NULL.
const struct rpt_dset *rpt_find_dset(const struct rpt_data *d, const char *name);

// The q-quantile (0 <= q <= 1) of the norms counted in hist (RPT_HIST_BINS bins, edges their 129
// boundaries): the bin where the cumulative count reaches q * total, linearly interpolated inside
// it (bin 0 from 0, the last bin is its lower edge). NaN if hist is empty.
double rpt_hist_quantile(const int64_t *hist, const double *edges, double q);

// internal (h5report.c reads the rest, h5report_rows.c this): the attention patterns and the
// experts' rows, from the open master f, d's datasets listed already
int rpt_read_rows(struct rpt_data *d, hid_t f, const int64_t *prompts, int n_prompts,
                  struct ah_error *err);

#endif
