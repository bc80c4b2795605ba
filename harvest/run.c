// run.c - `harvest run JOB.json [--resume | --overwrite] [--quiet]` on one rank or many.
//
// Every rank loads and checks the same plan (job, model, names, data), so bad input ends every
// rank with the same message and exit code before any work. Ranks then form a grid:
//   shard   = rank % E                 expert shards of a stage (Laguna), E = expert_parallel
//   stage   = rank / E % S             contiguous blocks of the model, balanced by work
//   replica = rank / (E S)             a contiguous share of the batches
// Batches are the ones a single rank would make (prompts [k*B, k*B + B)), so the numbers do not
// depend on the grid. Stage s receives the residual stream (and encoder_output) of each batch from
// stage s-1 with pre-posted non-blocking receives and sends its own on with non-blocking sends: a
// stream of micro-batches whose fill and drain is paid once per job. Each rank writes only what it
// computes; the ranks of a stage share its segment files (parallel HDF5 over MPI-IO, io/h5out.h)
// and go in lockstep rounds of one batch each, agreeing at the start of every round on stops and
// checkpoints. Rank 0 collects the closed segments' records and replaces the master. A stop
// signal on any rank reaches every first stage, which stops feeding; the pipeline drains,
// segments close, and every rank exits 3. `complete` is set only when every batch is in.
// Here: signals, stops and the rank loop; the pipe between stages is pipe.c's. The plan is
// runplan.c's, the grid and the expert exchange grid.c's, the output side writer.c's (rows placed
// by rounds.c), and the tap consumers consumers.c's (run.h, writer.h).
#define _POSIX_C_SOURCE 200809L // defines: sigaction
#include "harvest/blascheck.h"  // blas_describe
#include "harvest/export.h"     // xprobe_pool_output (the job key "pool")
#include "harvest/normguard.h"
#include "harvest/pipe.h"
#include "harvest/saeval.h" // the splice-in evaluation of saes[i].evaluate
#include "harvest/writer.h"
#include "io/h5sae.h"   // h5sae_print_eval (the summary)
#include "model/dnnl.h" // mm16_packing, mm16_kernel
#include "model/ops.h"  // op_threads, op_compute

#include <cjson/cJSON.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t stop_requested;

static void on_signal(int sig) {
    (void)sig;
    stop_requested = 1;
}

void harvest_catch_stops(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
}

// ----------------------------------------------------------------------------
// stops: a signal on any rank reaches every first stage

// stage 0: has a stop been asked for, here or on any rank?
static bool stop_seen(void) {
    int flag = 0;
    CHECK_MPI(MPI_Iprobe(MPI_ANY_SOURCE, TAG_STOP, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE));
    return stop_requested || flag;
}

// a signal here: tell every first stage once
static void relay_stop(const struct grid *g, bool *relayed) {
    if (!stop_requested || *relayed) return;
    *relayed = true;
    for (int r = 0; r < g->size; r++) {
        if (r / g->n_shards % g->n_stages) continue; // first stages only
        char z = 0;
        MPI_Request q;
        CHECK_MPI(MPI_Isend(&z, 0, MPI_CHAR, r, TAG_STOP, MPI_COMM_WORLD, &q));
        CHECK_MPI(MPI_Request_free(&q));
    }
}

static void drain_stops(void) {
    int flag = 1;
    while (flag) {
        MPI_Status stt;
        CHECK_MPI(MPI_Iprobe(MPI_ANY_SOURCE, TAG_STOP, MPI_COMM_WORLD, &flag, &stt));
        if (flag)
            CHECK_MPI(MPI_Recv(NULL, 0, MPI_CHAR, stt.MPI_SOURCE, TAG_STOP, MPI_COMM_WORLD,
                               MPI_STATUS_IGNORE));
    }
}

// ----------------------------------------------------------------------------
// a rank's run

struct rank_run {
    const struct plan *pl;
    const struct grid *g;
    struct writer w;
    struct consumers cons; // every tap consumer (consumers.c); cons.want: what the forward computes
    uint8_t *keep;         // (max_tokens) the batch's chosen positions under "select"
    struct model_state st;
    struct expert_shard shard; // this rank's routed experts
    struct exchange ex;        // expert shards' slots
    struct pipe pipe;
    int64_t *mine; // (n_mine) this replica's batches
    int64_t n_mine;
    int *lens;      // (B) the batch's prompt lengths
    int64_t *boff;  // (B) their first tokens, from the batch's first
    float *hand[2]; // (n_hand) the state handed to the next stage
    int n_hand;
    struct progress pr;
    int64_t done_prompts, done_tokens;
    double busy, wall; // seconds working (forward, writes, hand-off copies) and in the loop
};

// the consumers: every registered kind's (consumers.c), the HDF5 collector first; the writer
// tells them when a segment closes
static int rank_consumers(struct rank_run *rr, struct ah_error *err) {
    struct consumer_env env = {rr->pl, rr->g, &rr->w};
    rr->w.cons = &rr->cons;
    rr->w.segment = consumers_segment;
    return consumers_init(&rr->cons, &env, err);
}

// The tokens batch k runs through the model: [*t0, *t1) of the corpus (ds.off; the stored rows
// of the token layout differ under "select", see place_batch).
static void batch_tokens(const struct plan *pl, int64_t k, int64_t *t0, int64_t *t1) {
    struct h5out_run r = place_batch(&pl->place.pc, k);
    *t0 = pl->ds.off[r.p0];
    *t1 = r.p1 < pl->ds.n ? pl->ds.off[r.p1] : pl->ds.n_tokens;
}

static int rank_setup(struct rank_run *rr, const uint8_t *done, bool quiet, struct ah_error *err) {
    const struct plan *pl = rr->pl;
    const struct grid *g = rr->g;
    int64_t max_tokens = 1, my_prompts = 0, my_tokens = 0;
    for (int64_t k = 0, t0, t1; k < pl->place.K; k++) {
        batch_tokens(pl, k, &t0, &t1);
        max_tokens = t1 - t0 > max_tokens ? t1 - t0 : max_tokens;
    }
    rr->mine = malloc(((size_t)pl->place.K + 1) * sizeof *rr->mine);
    rr->lens = malloc((size_t)pl->place.B * sizeof *rr->lens);
    rr->boff = malloc((size_t)pl->place.B * sizeof *rr->boff);
    rr->keep = pl->sel.on ? malloc((size_t)max_tokens) : NULL;
    if (!rr->mine || !rr->lens || !rr->boff || (pl->sel.on && !rr->keep))
        return ah_fail(err, AH_ENOMEM, "out of memory: the tables of %lld batches",
                       (long long)pl->place.K);
    rr->n_mine = rounds_share(pl->place.K, done, g->replica, g->n_replicas, rr->mine);
    rr->shard =
        (struct expert_shard){.e0 = (int)((int64_t)g->n_experts * g->shard / g->n_shards),
                              .e1 = (int)((int64_t)g->n_experts * (g->shard + 1) / g->n_shards),
                              .exchange = exchange_slots,
                              .u = &rr->ex};
    int rc = rank_consumers(rr, err);
    if (rc == 0)
        rc = model_state_init(&pl->m, &rr->st, (int)pl->place.S, max_tokens, rr->cons.want,
                              g->n_shards > 1 ? &rr->shard : NULL);
    if (rc == 0)
        rc = exchange_init(&rr->ex, g, max_tokens, model_top_k(&pl->m), model_hidden(&pl->m), err);
    if (rc == 0) rc = pipe_init(&rr->pipe, g, (size_t)max_tokens * 2 * model_hidden(&pl->m), err);
    if (rc < 0) return rc;
    if (!quiet && g->rank == 0) fprintf(stderr, "harvest: BLAS %s\n", blas_describe());
    if (!quiet && g->rank == 0) fprintf(stderr, "harvest: rank 0: %d threads\n", op_threads());
    if (!quiet && g->rank == 0)
        fprintf(stderr, "harvest: rank 0: run state %.1f MB (buffers for %lld tokens a batch)\n",
                (double)rr->st.bytes / 1e6, (long long)max_tokens);
    model_handoff(&pl->m, &rr->st, rr->hand, &rr->n_hand);
    for (int64_t i = 0, t0, t1; i < rr->n_mine; i++) {
        struct h5out_run r = place_batch(&pl->place.pc, rr->mine[i]);
        batch_tokens(pl, rr->mine[i], &t0, &t1);
        my_prompts += r.p1 - r.p0;
        my_tokens += t1 - t0;
    }
    progress_init(&rr->pr, quiet || g->rank != 0, my_prompts, my_tokens, 0, 0);
    return 0;
}

static void rank_free(struct rank_run *rr, bool wait) {
    pipe_free(&rr->pipe, wait);
    consumers_free(&rr->cons);
    free(rr->keep);
    model_state_free(&rr->st);
    exchange_free(&rr->ex);
    free(rr->mine);
    free(rr->lens);
    free(rr->boff);
}

// Whether a round is played: a stage that writes agrees in lockstep (writer.h); one that does
// not plays while it has batches, its expert shards agreeing on a stop.
static int round_open(struct rank_run *rr, int64_t k, int stop, bool *play, struct ah_error *err) {
    if (rr->w.lockstep) return writer_round_begin(&rr->w, k, stop, play, err);
    bool first = rr->g->stage == 0;
    if (k >= 0 && first && rr->g->ecomm != MPI_COMM_NULL) // shards stop together: they exchange
        CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &stop, 1, MPI_INT, MPI_MAX, rr->g->ecomm));
    *play = k >= 0 && !(first && stop);
    return 0;
}

// Batch k through this stage's blocks: the consumers take what they want, the hand-off goes on.
static int run_batch(struct rank_run *rr, int64_t k, const float *in, struct ah_error *err) {
    const struct plan *pl = rr->pl;
    double start = now_seconds();
    struct h5out_run r = place_batch(&pl->place.pc, k);
    int64_t t0, t1;
    batch_tokens(pl, k, &t0, &t1);
    int n = (int)(r.p1 - r.p0);
    for (int b = 0; b < n; b++) {
        rr->lens[b] = (int)pl->ds.len[r.p0 + b];
        rr->boff[b] = pl->ds.off[r.p0 + b] - t0;
        if (rr->keep && plan_keep(pl, r.p0 + b, rr->keep + rr->boff[b]) < 0)
            return ah_fail(err, AH_ENOMEM, "out of memory: the selection of a prompt");
    }
    struct mbatch bt = {n, t1 - t0, pl->ds.ids + t0, rr->lens, rr->boff};
    size_t hand_n = (size_t)bt.n_tokens * (size_t)model_hidden(&pl->m); // floats of an array
    for (int a = 0; in && a < rr->n_hand; a++)
        memcpy(rr->hand[a], in + a * hand_n, hand_n * sizeof(float));
    struct tap tp = consumers_tap(&rr->cons);
    // the last stage sends nothing on: its last block stops at the last value asked of it (one
    // expert shard only: the shards of a stage run the forward in lockstep, and shard 0 alone
    // takes the values, so the others could not know where it stops)
    tp.stream_ends = rr->pipe.last && rr->g->n_shards == 1;
    struct cbatch cb = {k, r.p0, n, rr->lens, rr->boff, t0, bt.n_tokens, bt.ids, rr->keep};
    int rc = consumers_begin(&rr->cons, &cb, err);
    if (rc < 0) return rc;
    rc = saeval_forward(saeval_find(&rr->cons), &pl->m, &rr->st, &bt, &tp, rr->g->b0, rr->g->b1,
                        err); // model_forward, and the SAEs spliced in when they evaluate
    if (rc < 0 || (rc = consumers_end(&rr->cons, err)) < 0) return rc;
    if (!rr->pipe.last) pipe_send(&rr->pipe, k, rr->hand, rr->n_hand, hand_n);
    rr->busy += now_seconds() - start;
    rr->done_prompts += n;
    rr->done_tokens += bt.n_tokens;
    progress_update(&rr->pr, rr->done_prompts, rr->done_tokens, false);
    return 0;
}

// The loop of one rank: next batch, receive, forward, send, end the round.
static int rank_loop(struct rank_run *rr, struct ah_error *err) {
    struct pipe *pp = &rr->pipe;
    bool relayed = false, play = false;
    int rc = 0;
    double t_loop = now_seconds();
    for (int64_t i = 0;; i++) {
        int64_t k = -1;
        int stop = 0;
        const float *in = NULL;
        relay_stop(rr->g, &relayed);
        if (pp->first) { // this replica's own batches; the others come down the pipeline
            stop = stop_seen();
            k = i < rr->n_mine ? rr->mine[i] : -1;
        } else if (!pp->ended) {
            k = pipe_recv(pp, &in);
        }
        if ((rc = round_open(rr, k, stop, &play, err)) < 0 || !play) break;
        if (k >= 0 && (rc = run_batch(rr, k, in, err)) < 0) break;
        if ((rc = writer_round_end(&rr->w, err)) < 0) break;
    }
    if (rc < 0) return rc;
    if (!pp->last) pipe_end(pp); // the pipeline drains behind the last batch
    rr->wall = now_seconds() - t_loop;
    progress_update(&rr->pr, rr->done_prompts, rr->done_tokens, true);
    return writer_finish(&rr->w, err);
}
// The provenance with each rank's busy and loop seconds added (the pipeline's idle time is
// 1 - busy / loop, per stage). Caller frees.
static char *provenance_timing(const char *prov, const double *times, int size) {
    cJSON *o = cJSON_Parse(prov ? prov : "{}"),
          *ranks = cJSON_GetObjectItemCaseSensitive(o, "ranks");
    for (int r = 0; r < size && times; r++) {
        cJSON *e = cJSON_GetArrayItem(ranks, r);
        if (!e) continue;
        cJSON_AddNumberToObject(e, "busy_seconds", times[2 * r]);
        cJSON_AddNumberToObject(e, "loop_seconds", times[2 * r + 1]);
    }
    char *t = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return t;
}

// what this stage holds: the pages it touches
static void say_stage(const struct plan *pl, const struct grid *g, bool quiet) {
    if (quiet || g->replica != 0) return;
    const char *kind;
    int64_t wb = model_stage_bytes(&pl->m, g->b0, g->b1, g->b1 == pl->m.n_blocks, g->shard,
                                   g->n_shards, &kind);
    char sh[64] = "";
    if (g->n_shards > 1) snprintf(sh, sizeof sh, ", expert shard %d of %d", g->shard, g->n_shards);
    bool bf = op_compute() == OP_COMPUTE_BF16;
    fprintf(stderr,
            "harvest: rank %d: stage %d of %d, blocks %d-%d%s: weights %.1f MB (%s)%s%s%s\n",
            g->rank, g->stage, g->n_stages, g->b0, g->b1 - 1, sh, (double)wb / 1e6, kind,
            bf ? "; compute bf16 on " : "", bf ? mm16_kernel() : "",
            bf ? "; each matrix packed once, at its first product, into the kernel's layout "
                 "(about as large), its mapped pages then released"
               : "");
}

// compute bf16: what the stage's packed matrices hold (model/dnnl.h mm16_packing)
static void say_packing(const struct grid *g, bool quiet) {
    if (quiet || g->replica != 0 || op_compute() != OP_COMPUTE_BF16) return;
    struct mm16_packing p = mm16_packing();
    fprintf(stderr,
            "harvest: rank %d: compute bf16: %d matrices packed, %.1f MB (mapped pages released: "
            "%.1f MB), %d left plain (not reorderable); packing took %.2f s\n",
            g->rank, p.n_packed, (double)p.bytes / 1e6, (double)p.released / 1e6, p.n_plain,
            p.seconds);
}

// A failure mid-run: the others cannot go on without this rank.
static void die_mid_run(int rc, const struct ah_error *err, const struct grid *g) {
    if (g->size > 1) fprintf(stderr, "[rank %d] ", g->rank);
    fprintf(stderr, "harvest: %s\n", err->msg[0] ? err->msg : ah_strerror(rc));
    if (g->size > 1) MPI_Abort(MPI_COMM_WORLD, ah_exit_code(rc));
    // HDF5 keeps a file whose close failed (disk full) open, and its shutdown hook in
    // MPI_Finalize would trip over it: the listed output is intact, so leave at once
    fflush(NULL);
    _exit(ah_exit_code(rc));
}

// The plan, the grid and the output: everything the user can get wrong, on every rank, before
// the output is touched; then rank 0 makes or reopens the output. Collective.
static int run_prepare(struct plan *pl, struct grid *g, struct rank_run *rr,
                       const struct run_opts *o, struct outlock *lock, char **prov, uint8_t **done,
                       bool *complete, struct ah_error *err) {
    int rank = 0, size = 1;
    CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &size));
    int rc = plan_load(pl, o->job_path, size, lock, err);
    if (rc == 0) rc = plan_data(pl, rank, err);
    if (rc == 0) rc = run_agree(plan_finish(pl, err), err);
    if (rc == 0 && o->resume)
        rc = run_agree(rank == 0 ? plan_resume_job(pl, o->quiet, err) : 0, err);
    if (rc == 0 && pl->ng.on) rc = normguard_run(pl, o, stop_seen, err); // select.max_norm_multiple
    if (rc == 0 && pl->ng.on && rank == 0 && !o->quiet)
        fprintf(stderr, "harvest: norm guard: median norm %.6g, %lld tokens dropped\n",
                pl->ng.median, (long long)pl->ng.n_drop);
    if (rc == 0) rc = run_agree(grid_make(g, pl, rank, size, err), err);
    struct model_part part = {
        g->b0,    g->b1,      g->b0 == 0, g->b1 == pl->m.n_blocks,
        g->shard, g->n_shards}; // the weights this rank computes with: their values
    if (rc == 0) rc = run_agree(model_check(&pl->m, &part, err), err);
    if (rc == 0) rc = run_agree(consumers_check(pl, g, err), err); // the consumers' job keys
    if (rc < 0) return rc;
    say_stage(pl, g, o->quiet);
    *prov = grid_provenance(g);
    *done = calloc((size_t)pl->place.K + 1, 1);
    rc = run_agree(
        *done ? 0 : ah_fail(err, AH_ENOMEM, "out of memory: %lld batches", (long long)pl->place.K),
        err);
    rr->pl = pl;
    rr->g = g;
    if (rc == 0) rc = writer_open(&rr->w, pl, g, o, *prov, *done, complete, err);
    rr->w.final = consumers_final; // what the consumers store in the master at the end
    if (rc == 0 && rank == 0) normguard_save(pl); // the pass's record for a --resume
    return rc;
}

// The provenance with every rank's busy and loop seconds, on rank 0 (caller frees). Collective.
static char *timed_provenance(const struct rank_run *rr, const char *prov) {
    const struct grid *g = rr->g;
    double mine[2] = {rr->busy, rr->wall},
           *times = g->rank == 0 ? malloc(sizeof mine * (size_t)g->size) : NULL;
    CHECK_MPI(MPI_Gather(mine, 2, MPI_DOUBLE, times, 2, MPI_DOUBLE, 0, MPI_COMM_WORLD));
    char *t = g->rank == 0 ? provenance_timing(prov, times, g->size) : NULL;
    free(times);
    return t;
}

int harvest_run(const struct run_opts *o, struct run_stats *stats, struct ah_error *err) {
    double t_start = now_seconds();
    // MPI errors come back as codes, which CHECK_MPI reports with the call and the rank
    CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    struct plan pl = {0};
    struct grid g = {.ecomm = MPI_COMM_NULL, .scomm = MPI_COMM_NULL};
    struct rank_run rr = {0};
    struct outlock lock = {.fd = -1};
    uint8_t *done = NULL;
    char *prov = NULL, *prov_t = NULL;
    bool complete = false;
    int64_t todo = 0, all = 0;
    int rc = run_prepare(&pl, &g, &rr, o, &lock, &prov, &done, &complete, err);
    for (int64_t k = 0; rc == 0 && k < pl.place.K; k++)
        todo += !done[k];
    if (rc < 0 || (todo == 0 && complete)) {
        if (rc == 0 && g.rank == 0 && !o->quiet)
            fprintf(stderr, "harvest: %s is already complete\n", pl.j.out_path);
        if (rc == 0) // killed between the last master and its /stats (or the like): rank 0 adds
            rc = run_agree(writer_stats(&rr.w, true, err), err);
        goto done;
    }
    // ---- the work ----
    rc = rank_setup(&rr, done, o->quiet, err);
    if (rc == 0) rc = rank_loop(&rr, err);
    if (rc < 0) die_mid_run(rc, err, &g);
    say_packing(&g, o->quiet);
    CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
    drain_stops();
    prov_t = timed_provenance(&rr, prov);
    rc = writer_final(&rr.w, prov_t, &all, err);
    if (rc == 0 && g.rank == 0 && !o->quiet)
        fprintf(stderr,
                "harvest: wrote %lld prompts (%lld tokens, %d activations) to %s; "
                "%lld empty prompts skipped, %lld truncated to %lld tokens\n",
                (long long)pl.ds.n, (long long)pl.ds.n_tokens, pl.names.n_dsets, pl.j.out_path,
                (long long)pl.ds.n_empty, (long long)pl.ds.n_truncated, (long long)pl.place.S);
    if (rc == 0 && g.rank == 0 && !o->quiet) h5sae_print_eval(pl.j.out_path, "harvest: ", stderr);
    CHECK_MPI(MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD)); // rank 0's verdict is everyone's
    if (stats)
        *stats = (struct run_stats){.prompts = pl.ds.n,
                                    .tokens = pl.ds.n_tokens,
                                    .seconds = now_seconds() - t_start,
                                    .seconds_write =
                                        consumers_seconds(&rr.cons, "collect") + rr.w.seconds,
                                    .bytes = rr.w.bytes,
                                    .state_bytes = rr.st.bytes};
done:
    if (rc == 0 && g.rank == 0 && pl.j.pool) // the job key "pool", on the complete output
        rc = xprobe_pool_output(pl.j.out_path, pl.j.pool, err);
    rank_free(&rr, rc == 0);
    writer_close(&rr.w);
    outlock_release(&lock);
    free(prov_t);
    free(done);
    free(prov);
    grid_free(&g);
    plan_free(&pl);
    return rc;
}

static int usage(void) {
    fprintf(stderr, "usage: harvest run JOB.json [--resume | --overwrite] [--quiet]\n");
    return 1;
}

int cmd_run(int argc, char **argv) {
    struct run_opts o = {0};
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--resume"))
            o.resume = true;
        else if (!strcmp(argv[i], "--overwrite"))
            o.overwrite = true;
        else if (!strcmp(argv[i], "--quiet"))
            o.quiet = true;
        else if (argv[i][0] == '-' || o.job_path)
            return fprintf(stderr, "harvest run: unexpected \"%s\"\n", argv[i]), usage();
        else
            o.job_path = argv[i];
    }
    if (!o.job_path) return usage();
    if (o.resume && o.overwrite) {
        fprintf(stderr, "harvest: --resume and --overwrite exclude each other\n");
        return 1;
    }
    struct ah_error err = {0};
    int rc = harvest_run(&o, NULL, &err);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank != 0) return ah_exit_code(rc); // rank 0 speaks for all
    return report(rc, &err);
}
