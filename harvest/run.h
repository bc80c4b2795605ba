// run.h - the pieces of `harvest run` (run.c): the plan every rank makes alike (runplan.c), the
// grid of ranks and the expert exchange (grid.c). Internal to harvest/.
//
// Dependencies point one way: run.c -> writer.c -> rounds.c; run.c, writer.c -> grid.c,
// runplan.c. Functions marked "Collective" must be called by every rank of MPI_COMM_WORLD (or of
// the communicator named).
#ifndef AH_RUN_H
#define AH_RUN_H

#include "harvest/harvest.h"
#include "harvest/rounds.h"
#include "io/dataset.h"
#include "io/outlock.h"

#include <mpi.h>

// Every MPI call is checked: a failure is reported with its place and the job ends (MPI's own
// error handler would abort without a word on most errors; here the message names the call).
#define CHECK_MPI(call)                                                                 \
    do {                                                                                \
        int mpi_rc_ = (call);                                                           \
        if (mpi_rc_ != MPI_SUCCESS) run_mpi_failed(mpi_rc_, #call, __FILE__, __LINE__); \
    } while (0)
void run_mpi_failed(int code, const char *call, const char *file, int line);

// message tags on MPI_COMM_WORLD: the pipeline's hand-offs, stop notices, segment records
enum { TAG_HDR = 1, TAG_DATA, TAG_STOP, TAG_REC, TAG_DONE };

// ---- the plan: identical on every rank (runplan.c), by concern ----
// the activations asked for (job "activations"), and how each is stored
struct plan_names {
    uint8_t *want;            // (n_cat) requested
    int *dset_of_id;          // (n_cat) index in dsets, or -1
    const char **alias_of_id; // (n_cat) the job's alias it is stored under, or NULL; owned array
    struct h5out_dset *dsets; // (n_dsets) catalogue order
    int n_dsets;
};
// what runs and where each batch's rows go
struct plan_place {
    int64_t S;           // max_seq_len
    int blk_end;         // blocks [0, blk_end) run
    int B;               // batch_size
    int64_t K;           // batches
    struct placement pc; // where each batch's rows go (after plan_finish)
};
// token selection (job "select", jobs/select.h): the token layout stores the chosen tokens
// only, prompt p's at rows [st_off[p], st_off[p + 1]); the prompt layout stores every token
struct plan_select {
    bool on;                 // the job has "select"
    int64_t *st_off;         // (n_prompts + 1) first stored token row of each prompt; owned
    int64_t n_stored;        // token rows of the token layout (n_tokens without selection)
    struct select_counts sc; // what selection kept and left out, over the corpus
};
// the norm guard (select.max_norm_multiple, harvest/normguard.c): the drops of its pass
struct plan_guard {
    bool on;        // the job has it
    int id;         // the guarded activation's catalogue id (select.max_norm_activation)
    double median;  // the median norm of its sample
    int64_t *drop;  // (n_drop) corpus token indices (ds.off) of the dropped tokens, sorted
    int64_t n_drop; // NULL/0 until the pass: plan_keep is then the choice without the guard
    int64_t bad[2]; // chosen tokens with a NaN or infinite norm: in all, in the sample
    bool reused;    // the pass's record (normguard.h) was read, not written, by this run
};
// write-time statistics (harvest/wstats.c)
struct plan_stats {
    uint8_t *want; // (n_cat) names with write-time statistics
    int n;         // how many
};
struct plan {
    struct job j;         // the job
    struct model m;       // the model
    struct ds_prompts ds; // the data
    struct plan_names names;
    struct plan_place place;
    struct plan_select sel;
    struct plan_guard ng;
    struct plan_stats stats;
};

// The chosen positions of prompt p (T = ds.len[p] of them, keep[t] = 0 or 1); returns how many.
int64_t plan_keep(const struct plan *pl, int64_t p, uint8_t *keep);
// Whether write-time statistics can be taken of an activation: float, one sequence axis, no key.
bool plan_stats_eligible(const struct tap_desc *d);
// Rank 0: the /tokens tables of the output under selection (each malloc'd; NULL without it):
// ids, positions and per-prompt counts of the stored tokens (token layout) or the selected mask
// of every token (prompt layout).
int plan_index_tables(const struct plan *pl, int64_t **ids, int64_t **pos, int64_t **count,
                      uint8_t **selected, struct ah_error *err);

// Collective: each rank checks the job, model, names and grid alike; then rank 0 checks the
// output's neighbourhood (outlock.h) and takes its lock (held in *lock until outlock_release).
int plan_load(struct plan *pl, const char *job_path, int world, struct outlock *lock,
              struct ah_error *err);
// Collective: rank 0 reads the data, every rank receives its tables and maps its token ids.
int plan_data(struct plan *pl, int rank, struct ah_error *err);
// Collective: the rest of the plan, from the data.
int plan_finish(struct plan *pl, struct ah_error *err);
// The selection's offsets and counts, the datasets' shapes and the placement (plan_finish's end;
// again after the norm guard's pass has set pl->ng.drop).
int plan_place(struct plan *pl, struct ah_error *err);
// The norm guard's pass: harvest/normguard.h.
void plan_free(struct plan *pl);
// Rank 0, --resume: the job against the one the output was made with (its "job" attribute). The
// grid may change (parallel.expert_parallel: the rows do not depend on it; pl->j.text becomes
// the output's); another parallel.pipeline_stages, or any other key, is -AH_EINVAL naming the key.
// 0 also when there is no readable output (the writer says what is wrong with it).
int plan_resume_job(struct plan *pl, bool quiet, struct ah_error *err);
// JSON text of the fingerprint of the model's files (io/fingerprint.h); caller frees.
int plan_fingerprint(const struct plan *pl, char **json, struct ah_error *err);
// FNV-1a over what the output is built from: source lines, lengths and token ids
uint64_t plan_checksum(const struct plan *pl);

// Collective: every rank returns the worst code of all, and err holds the message of the (first)
// rank that had it, prefixed "[rank k] " when k is not rank 0: rank k's own words reach the user.
int run_agree(int rc, struct ah_error *err);

// ---- the grid (grid.c) ----
//   shard   = rank % E                 expert shards of a stage (Laguna), E = expert_parallel
//   stage   = rank / E % S             contiguous blocks of the model, balanced by work
//   replica = rank / (E S)             a contiguous share of the batches
struct grid {
    int rank, size;
    int n_stages, stage, n_replicas, replica;
    int n_shards, shard; // expert shards: the ranks of one stage of one replica
    int n_experts;       // routed experts a mixture block has (0: none)
    MPI_Comm ecomm;      // those ranks (MPI_COMM_NULL for one shard)
    MPI_Comm scomm;      // every rank of this stage, world order (MPI_COMM_NULL: no datasets)
    int b0, b1;          // blocks of this stage
    int i0, i1;          // datasets of this stage (catalogue order follows the blocks)
};

// Collective.
int grid_make(struct grid *g, const struct plan *pl, int rank, int size, struct ah_error *err);
void grid_free(struct grid *g);
// JSON text of every rank's identity, on rank 0 (NULL elsewhere). Collective.
char *grid_provenance(const struct grid *g);

// expert shards: the slots each shard computed go to every shard of the group
struct exchange {
    const struct grid *g;
    float *buf; // (cap) gathered slots, owner after owner
    size_t cap;
    int *cnt, *disp, *at; // (n_shards) each
};
// Sized for every slot of a batch of max_tokens tokens (top_k of hidden floats each).
int exchange_init(struct exchange *x, const struct grid *g, int64_t max_tokens, int top_k,
                  int hidden, struct ah_error *err);
void exchange_free(struct exchange *x);
// expert_shard's callback: u is a struct exchange. Collective over the shards of a replica.
void exchange_slots(void *u, float *eo, const int64_t *idx, int64_t n_slots, int D);

#endif
