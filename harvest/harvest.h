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

#include <mpi.h>
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
    struct model_tensor *later; // (n_later) tensors bound but not yet checked (model_check); owned
    int n_later;
};

// The part of a model a rank computes with: blocks [b0, b1), the embedding (the stage running
// block 0), the final norm and head (the last stage), and of the routed experts shard `shard` of
// n_shards (experts [E shard / n_shards, E (shard + 1) / n_shards), as struct expert_shard;
// n_shards 1: every expert). Tensors no family assigns to a part (MT_EVERY) are in every part.
struct model_part {
    int b0, b1;
    bool embed, head;
    int shard, n_shards;
};

// Loads DIR; with weights false only config.json is read (for `activations`). With weights every
// tensor is bound, its presence, shape and dtype checked from the headers; those of `part` (NULL:
// the whole model) have their values checked (finite) and are widened or realigned where needed
// now, the others wait for model_check: their data pages are not read, and their views are NULL
// where a copy is needed (no forward pass may use them before). Errors name the file and tensor.
int model_load(struct model *m, const char *dir, bool weights, const struct model_part *part,
               struct ah_error *err);
// Checks (and copies) the tensors of `part` (NULL: all) that model_load left waiting; an error
// names the file, the tensor and its first non-finite element. A rank calls it with the part it
// computes with before its forward passes; tensors already checked are not read again.
int model_check(struct model *m, const struct model_part *part, struct ah_error *err);
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

// ---- tap consumers: the protocol (consumers.c) ----
// Each tap view goes, in order, to every consumer that wants its name; the forward pass computes
// what any consumer wants and nothing more (the union of their wants). Around every batch:
//   begin(batch)         what a consumer needs to know of the batch (struct cbatch)
//   take(view) ...       one call per prompt and wanted value; the view is valid during the call
//                        only (buffers are reused): a consumer copies what it keeps
//   end(batch)           the batch's views are all in
// and, for consumers that keep per-batch partials in the segment files (write-time statistics,
// the norm profile), segment(path) when a segment of this rank's stage closes, before the master
// lists it (collective over the stage's ranks). The selection ("select", the norm guard) is
// applied once, before the consumers: each take receives its prompt's keep mask.
// Errors: any hook returns 0 or a negative AH_E* with a message in err. The first failure stands
// (later takes of the batch are skipped) and reaches the run from consumers_end as an ah_error:
// the run stops (exit 1 or 2 as the code says).
struct cbatch {
    int64_t k;           // batch index
    int64_t p0;          // its first prompt (corpus index); prompt b is p0 + b
    int n;               // prompts
    const int *lens;     // (n) tokens of prompt b
    const int64_t *boff; // (n) prompt b's first token, counted from the batch's first
    int64_t t0;          // the batch's first token in the corpus (ds.off)
    int64_t n_tokens;    // tokens of the batch
    const int64_t *ids;  // (n_tokens) their token ids; borrowed
    const uint8_t *keep; // (n_tokens) the chosen positions (1) under "select"; NULL: all
};

struct ctake {
    int id;                   // catalogue id of the value
    const struct tap_desc *d; // its catalogue entry; borrowed
    int b;                    // prompt within the batch
    const uint8_t *keep;      // (lens[b]) its chosen positions; NULL: all
    const struct cbatch *bt;  // the batch in hand; borrowed
};

struct out_ops;
struct consumer {
    const char *name;    // for messages
    const uint8_t *want; // (n_cat) the names it takes; borrowed (NULL: none)
    int (*begin)(void *u, const struct cbatch *bt, struct ah_error *err); // may be NULL
    int (*take)(void *u, const struct ctake *t, const struct tview *v, struct ah_error *err);
    int (*end)(void *u, const struct cbatch *bt, struct ah_error *err); // may be NULL
    // a segment of the stage closed (collective over comm): `file` of the output at out_path, of
    // format out (its partials go in through out or the consumer's own io/ file); may be NULL
    int (*segment)(void *u, const struct out_ops *out, MPI_Comm comm, const char *out_path,
                   const char *file, struct ah_error *err);
    void (*free)(void *u); // releases u (NULL: u is not owned)
    void *u;
    double seconds; // spent in take (the protocol's count)
};

// What a consumer is made from: the plan and grid of this rank (harvest/run.h) and its writer.
struct plan;
struct grid;
struct writer;
struct h5out_record;
struct consumer_env {
    const struct plan *pl;
    const struct grid *g;
    struct writer *w;
};

// A kind of consumer: one file defines one (`const struct consumer_kind NAME_kind`), and one line
// of consumers.c's table registers it. Hooks may be NULL.
//   check  every rank, after the grid and before the output is touched: bad input (exit 1) found
//          here ends every rank alike (Collective through run_agree by the caller)
//   make   every rank: fills *c, or leaves c->take NULL when this rank has nothing to do
//   final  rank 0, every batch in: what the kind stores in the master (from the listed segment
//          records); if_missing: only when the master lacks it (a run that finds its output
//          complete: killed between the last master and this)
struct consumer_kind {
    const char *name;
    int (*check)(const struct plan *pl, const struct grid *g, struct ah_error *err);
    int (*make)(struct consumer *c, const struct consumer_env *env, struct ah_error *err);
    int (*final)(const struct plan *pl, const struct out_ops *out, const struct h5out_record *rec,
                 int n_rec, bool if_missing, struct ah_error *err);
};

#define CONSUMERS_MAX 8
struct consumers {
    struct consumer list[CONSUMERS_MAX];
    int n;
    int n_cat;
    uint8_t *want;         // (n_cat) union of the consumers' wants; owned
    const struct plan *pl; // borrowed
    struct cbatch bt;      // the batch in hand
    int rc;                // the first failure of the batch (0: none)
    struct ah_error err;
};

// Every registered kind's check, in table order. 0 or the first failure.
int consumers_check(const struct plan *pl, const struct grid *g, struct ah_error *err);
// Makes every registered kind's consumer of this rank, in table order (the collector first).
int consumers_init(struct consumers *cs, const struct consumer_env *env, struct ah_error *err);
// Appends c (its want is folded into the union). -AH_EINVAL beyond CONSUMERS_MAX.
int consumers_add(struct consumers *cs, const struct consumer *c, struct ah_error *err);
// Around a batch's forward pass: bt is copied (its arrays borrowed until consumers_end), then
// every begin hook; consumers_end calls every end hook and returns the batch's first failure.
int consumers_begin(struct consumers *cs, const struct cbatch *bt, struct ah_error *err);
int consumers_end(struct consumers *cs, struct ah_error *err);
// Collective over the stage (comm): the stage's segment `file` of the output at out_path closed.
int consumers_segment(struct consumers *cs, const struct out_ops *out, MPI_Comm comm,
                      const char *out_path, const char *file, struct ah_error *err);
// Rank 0, every batch in: every kind's final hook, in table order.
int consumers_final(const struct plan *pl, const struct out_ops *out,
                    const struct h5out_record *rec, int n_rec, bool if_missing,
                    struct ah_error *err);
// The tap that feeds them: want is the union, take fans out.
struct tap consumers_tap(struct consumers *cs);
// Seconds spent in take by the consumer named name (0 if none).
double consumers_seconds(const struct consumers *cs, const char *name);
void consumers_free(struct consumers *cs); // frees every consumer; safe on a zeroed struct

// ---- the registered kinds ----
// the HDF5 collector (collect.c): tap views -> stored rows, through the writer. Prompt layout:
// the view (1, ...) is the leading corner of row `prompt`; token layout: the chosen positions'
// rows at the prompt's stored rows. It takes this stage's datasets on expert shard 0.
extern const struct consumer_kind collect_kind;
// write-time statistics (wstats.c, wstats.h)
extern const struct consumer_kind wstats_kind;
// the per-position norm profile (normprofile.c; docs/output.md "Norm profile")
extern const struct consumer_kind normprofile_kind;
// The deepest block (tap_desc.block) of the job's "norm_profile" values, -1 with none (or a name
// that resolves to nothing: the kind's check says so). The plan runs the blocks up to it.
int normprofile_deepest(const struct plan *pl);
// the SAEs of the job key "saes" (saes.c; docs/output.md "SAE latents")
extern const struct consumer_kind saes_kind;
// The deepest block of the SAEs' sites, -1 with none (a site that resolves to nothing: the
// kind's check says so). The plan runs the blocks up to it.
int saes_deepest(const struct plan *pl);

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
