// harvest.h - the driver's internal interfaces: model loading by family, the collector that turns
// tap views into stored rows, progress display and the subcommands.
#ifndef AH_HARVEST_H
#define AH_HARVEST_H

#include "io/h5out.h"
#include "io/modeldir.h"
#include "io/tokenizer.h"
#include "jobs/job.h"
#include "model/ah.h"
#include "model/family.h"
#include "model/moe.h" // struct expert_shard

#include <stdbool.h>
#include <stdint.h>

// ---- a loaded model of any family ----
struct model {
    const struct model_family *fam; // chosen from config.json (model/families.c)
    const char *family;             // its name (fam->name)
    struct modeldir md;             // config (+ weights unless config-only)
    void *fm;                       // the family's model (weights unbound when config-only); owned
    struct tokenizer *tok; // the folder's tokenizer.json, if it has one (loaded with weights)
    struct tap_desc *cat;  // (n_cat) catalogue; owned
    int n_cat;
    int n_blocks; // blocks of the layer loop
    int max_pos;  // longest prompt the model takes
    int64_t vocab;
};

// Loads DIR; with weights false only config.json is read (for `activations`). Errors name the file.
int model_load(struct model *m, const char *dir, bool weights, struct ah_error *err);
void model_free(struct model *m); // safe on a zeroed struct
// Length of a fixed axis of a value computed by `block` (tap_desc.block): Laguna's query heads
// differ from block to block.
int64_t model_axis_size(const struct model *m, int block, const char *axis);

// ---- the forward pass of either family ----
struct model_state {
    const struct model_family *fam;
    void *fs;      // the family's run state; owned
    int64_t bytes; // its buffers (the family's arena)
};
// want (catalogue-indexed) sizes tap-only buffers; NULL = anything may be asked for.
// shard: Laguna's expert shard of this rank (NULL: every expert), borrowed.
int model_state_init(const struct model *m, struct model_state *s, int max_T, int64_t max_tokens,
                     const uint8_t *want, const struct expert_shard *shard);
void model_state_free(struct model_state *s);
void model_forward(const struct model *m, struct model_state *s, const struct mbatch *bt,
                   const struct tap *tp, int blk_begin, int blk_end);
// What a pipeline stage hands to the next: *n arrays of (tokens, hidden) floats in s.
void model_handoff(const struct model *m, struct model_state *s, float **arrays, int *n);
int model_hidden(const struct model *m);
int model_n_experts(const struct model *m); // routed experts a mixture block has (0: none)
int model_top_k(const struct model *m);     // experts a token is routed to (0: none)
// FLOPs of a prompt of T tokens through block b (b == n_blocks: the LM head).
double model_block_flops(const struct model *m, int b, int T);
// Weight bytes a stage running blocks [b0, b1) touches (embeddings with block 0, the final norm
// and head with `head`), and the storage they are kept in ("BF16, mapped", "float32").
// Routed experts count 1/n_shards of theirs (shard's range of them).
int64_t model_stage_bytes(const struct model *m, int b0, int b1, bool head, int shard, int n_shards,
                          const char **kind);

// ---- tap consumers: each tap view goes, in order, to every consumer that wants its name ----
// The forward pass computes what any consumer wants and nothing more (the union of their wants).
// A consumer copies what it keeps before returning (buffers are reused) and records its errors
// itself, for the driver to check after the forward pass. The HDF5 collector is the first one;
// write-time statistics and token selection attach here.
struct consumer {
    const uint8_t *want; // (n_cat) the names it takes; borrowed
    void (*take)(void *u, int id, int b, const struct tview *v);
    void *u;
};

#define CONSUMERS_MAX 8
struct consumers {
    struct consumer list[CONSUMERS_MAX];
    int n;
    int n_cat;
    uint8_t *want; // (n_cat) union of the consumers' wants; owned
};

int consumers_init(struct consumers *cs, int n_cat, struct ah_error *err);
// Appends c (its want is folded into the union). -AH_EINVAL beyond CONSUMERS_MAX.
int consumers_add(struct consumers *cs, const struct consumer *c, struct ah_error *err);
// The tap that feeds them: want is the union, take fans out.
struct tap consumers_tap(struct consumers *cs);
void consumers_free(struct consumers *cs); // safe on a zeroed struct

// ---- the HDF5 collector: tap views -> stored rows, through the writer ----
struct writer;
struct placement;
struct collector {
    struct writer *w;               // borrowed
    const struct placement *pc;     // where rows go (harvest/rounds.h); borrowed
    const struct h5out_dset *dsets; // borrowed
    const int *dset_of_id;          // (n_cat) dataset index of a catalogue id, or -1
    enum job_layout layout;
    int64_t batch;       // the batch in hand
    const uint8_t *keep; // (batch tokens) the chosen positions under "select" (NULL: all)
    const int64_t *boff; // (batch prompts) prompt b's first token in keep
    float *buf;          // padded/transposed row; owned
    size_t buf_bytes;
    int rc; // first error, 0 if none
    struct ah_error err;
    double seconds; // time spent in take()
};

void collect_take(void *u, int id, int b, const struct tview *v);

// ---- write-time statistics: a tap consumer after the collector (wstats.c) ----
struct wstats;
void collector_free(struct collector *c);

// ---- progress on stderr ----
struct progress {
    bool quiet, tty;
    double t0, last;
    int64_t total, total_tokens, start, start_tokens;
};
void progress_init(struct progress *p, bool quiet, int64_t total, int64_t total_tokens,
                   int64_t start, int64_t start_tokens);
void progress_update(struct progress *p, int64_t done, int64_t done_tokens, bool final);
double now_seconds(void);

// ---- harvest run ----
struct run_opts {
    const char *job_path;
    bool resume, overwrite, quiet;
};

struct run_stats {
    int64_t prompts, tokens; // harvested by this call
    double seconds;          // whole call
    double seconds_write;    // inside take() and closing the output: the cost of writing
    int64_t bytes;           // activation bytes written
    int64_t state_bytes;     // the run state's buffers on rank 0 (activations, BF16 panels)
};

// Runs a job (see run.c); stats may be NULL. Returns 0 or a negative AH_E* code.
int harvest_run(const struct run_opts *o, struct run_stats *stats, struct ah_error *err);
// SIGTERM, SIGINT and SIGUSR1 ask a run to stop at the next batch boundary (exit 3). Installed
// before MPI_Init, which can take seconds (a singleton starts its own orted).
void harvest_catch_stops(void);

// Writes preset `preset` of family `family` (model/family.h) with random weights into dir, in
// the family's published dtype or dtype_st, in `shards` files (0: the family's default); see
// initmodel.c.
int init_model_preset(const char *dir, const char *family, const char *preset, uint64_t seed,
                      int dtype_st, int shards, struct ah_error *err);

// The stage cut of `run` and `plan` (plan.c): blocks [0, n_blocks) into `parts` contiguous
// stages minimising the most expensive one, a block costing model_block_flops at T tokens and
// the LM head's FLOPs (if `head`) added to the last block. cut[s] is the first block of stage s,
// cut[parts] = n_blocks (n_blocks 0: one stage of no block). 0 or -AH_ENOMEM.
int plan_stage_cut(const struct model *m, int T, bool head, int n_blocks, int parts, int *cut);
// Expert shards a split may have: at most the routed experts and PLAN_MAX_SHARDS; 1 without.
#define PLAN_MAX_SHARDS 256
int plan_max_shards(const struct model *m);

// ---- subcommands: return the process exit code ----
int cmd_run(int argc, char **argv);
int cmd_activations(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_init_model(int argc, char **argv);
int cmd_init_sae(int argc, char **argv); // initsae.c
int cmd_bench(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_stats(int argc, char **argv); // statscmd.c
int cmd_export(int argc, char **argv);
int cmd_report(int argc, char **argv); // reportcmd.c

// prints "harvest: MSG" and returns the exit code of rc
int report(int rc, const struct ah_error *err);

#endif
