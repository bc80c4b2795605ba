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
#define _POSIX_C_SOURCE 200809L // defines: sigaction, gethostname
#include "harvest/harvest.h"

#include "io/dataset.h"
#include "io/fingerprint.h"
#include "io/outlock.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <glob.h>
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { TAG_HDR = 1, TAG_DATA, TAG_STOP, TAG_REC, TAG_DONE };

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

// The token layout takes activations with one sequence axis (sequence/seq/query) and no key axis.
static int check_token_layout(const struct job *j, const struct model *m, const uint8_t *want,
                              struct ah_error *err) {
    char bad[512] = "";
    int nbad = 0;
    for (int i = 0; i < m->n_cat; i++) {
        if (!want[i]) continue;
        const struct tap_desc *d = &m->cat[i];
        bool ok = tap_n_seq_axes(d) == 1;
        for (int k = 0; k < d->ndim; k++)
            ok = ok && strcmp(d->axes[k], "key") && tap_axis_kind(d->axes[k]) != TAP_AXIS_SEQ2;
        if (ok) continue;
        if (nbad++ < 4)
            snprintf(bad + strlen(bad), sizeof bad - strlen(bad), "%s%s", nbad > 1 ? ", " : "",
                     d->name);
    }
    if (!nbad) return 0;
    return ah_fail(err, AH_EINVAL,
                   "%s: \"output.layout\": \"token\" takes activations with one "
                   "sequence axis and no key axis; %d requested do not: %s%s (use \"prompt\")",
                   j->path, nbad, bad, nbad > 4 ? ", ..." : "");
}

// Stored shape of each wanted activation.
static int build_dsets(const struct model *m, const uint8_t *want, enum job_layout layout,
                       int64_t S, int64_t n_prompts, int64_t n_tokens, struct h5out_dset *d,
                       int *dset_of_id) {
    int n = 0;
    for (int i = 0; i < m->n_cat; i++) {
        dset_of_id[i] = -1;
        if (!want[i]) continue;
        const struct tap_desc *t = &m->cat[i];
        struct h5out_dset *o = &d[n];
        memset(o, 0, sizeof *o);
        o->desc = t;
        strcpy(o->axes[0], layout == JOB_LAYOUT_PROMPT ? "prompt" : "token");
        o->dims[0] = layout == JOB_LAYOUT_PROMPT ? n_prompts : n_tokens;
        o->ndim = 1;
        for (int k = 0; k < t->ndim; k++) {
            enum tap_axis_kind kind = tap_axis_kind(t->axes[k]);
            if (kind == TAP_AXIS_BATCH) continue;
            if (layout == JOB_LAYOUT_TOKEN && kind == TAP_AXIS_SEQ) continue;
            int64_t len = kind == TAP_AXIS_SEQ    ? S
                          : kind == TAP_AXIS_SEQ2 ? 2 * S
                                                  : model_axis_size(m, t->block, t->axes[k]);
            AH_ASSERT(len >= 1);
            strcpy(o->axes[o->ndim], t->axes[k]);
            o->dims[o->ndim++] = len;
        }
        dset_of_id[i] = n++;
    }
    return n;
}

// FNV-1a over what the output is built from: source lines, lengths and token ids
static uint64_t prompts_checksum(const struct ds_prompts *ds) {
    uint64_t h = 1469598103934665603ull;
    const int64_t *arrays[3] = {ds->source, ds->len, ds->ids};
    int64_t counts[3] = {ds->n, ds->n, ds->n_tokens};
    for (int a = 0; a < 3; a++)
        for (int64_t i = 0; i < counts[a]; i++) {
            uint64_t v = (uint64_t)arrays[a][i];
            for (int b = 0; b < 8; b++)
                h = (h ^ ((v >> (8 * b)) & 0xff)) * 1099511628211ull;
        }
    return h;
}

// ----------------------------------------------------------------------------
// the plan: identical on every rank

struct plan {
    struct job j;
    struct model m;
    struct ds_prompts ds;
    uint8_t *want;            // (n_cat) requested
    int *dset_of_id;          // (n_cat) index in dsets, or -1
    struct h5out_dset *dsets; // (n_dsets) catalogue order
    int n_dsets;
    int64_t S;   // max_seq_len
    int blk_end; // blocks [0, blk_end) run
    int B;       // batch_size
    int64_t K;   // batches
};

static void plan_free(struct plan *pl) {
    free(pl->dsets);
    free(pl->dset_of_id);
    free(pl->want);
    ds_free(&pl->ds);
    model_free(&pl->m);
    job_free(&pl->j);
}

static int plan_load(struct plan *pl, const char *job_path, int world, struct ah_error *err) {
    int rc;
    struct job *j = &pl->j;
    struct model *m = &pl->m;
    if ((rc = job_load(j, job_path, err)) < 0) return rc;
    if ((rc = model_load(m, j->model, true, err)) < 0) return rc;
    pl->want = calloc((size_t)m->n_cat, 1);
    pl->dset_of_id = calloc((size_t)m->n_cat, sizeof(int));
    if (!pl->want || !pl->dset_of_id) return -AH_ENOMEM;
    if ((rc = job_select(j, m->cat, m->n_cat, pl->want, err)) < 0) return rc;
    if (j->layout == JOB_LAYOUT_TOKEN && (rc = check_token_layout(j, m, pl->want, err)) < 0)
        return rc;
    if (j->max_seq_len > m->max_pos)
        return ah_fail(err, AH_EINVAL,
                       "%s: \"max_seq_len\": %d is longer than the model's "
                       "max_position_embeddings %d",
                       j->path, j->max_seq_len, m->max_pos);
    if (j->expert_parallel != 1 && strcmp(m->family, "laguna"))
        return ah_fail(err, AH_EINVAL,
                       "%s: \"parallel.expert_parallel\": %d, but the %s model has no experts "
                       "(expected 1)",
                       j->path, j->expert_parallel, m->family);
    if (!strcmp(m->family, "laguna") && j->expert_parallel > m->lg.cfg.n_expert)
        return ah_fail(err, AH_EINVAL,
                       "%s: \"parallel.expert_parallel\": %d shards for %d experts (at most one "
                       "shard an expert)",
                       j->path, j->expert_parallel, m->lg.cfg.n_expert);
    if (world % (j->pipeline_stages * j->expert_parallel))
        return ah_fail(err, AH_EINVAL,
                       "%s: \"parallel.pipeline_stages\" x \"parallel.expert_parallel\" = %d x %d "
                       "does not divide the %d ranks (world size = pipeline_stages x "
                       "expert_parallel x data-parallel replicas)",
                       j->path, j->pipeline_stages, j->expert_parallel, world);
    return 0;
}

// ----------------------------------------------------------------------------
// the output's neighbourhood: inputs, the lock, the model's fingerprint (rank 0)

struct paths {
    char **v; // (n) owned
    int n, cap;
};

static void paths_free(struct paths *ps) {
    for (int i = 0; i < ps->n; i++)
        free(ps->v[i]);
    free(ps->v);
    memset(ps, 0, sizeof *ps);
}

// adds a + b (b may be ""), if it names an existing file
static int paths_add(struct paths *ps, const char *a, const char *b) {
    size_t n = strlen(a) + strlen(b) + 1;
    char *s = malloc(n);
    if (!s) return -AH_ENOMEM;
    snprintf(s, n, "%s%s", a, b);
    if (access(s, F_OK) != 0) {
        free(s);
        return 0;
    }
    if (ps->n == ps->cap) {
        int c = ps->cap * 2 + 8;
        char **nv = realloc(ps->v, (size_t)c * sizeof *nv);
        if (!nv) {
            free(s);
            return -AH_ENOMEM;
        }
        ps->v = nv;
        ps->cap = c;
    }
    ps->v[ps->n++] = s;
    return 0;
}

// the files of the model the run reads: config, index, weights, tokenizer
static int model_files(const struct model *m, struct paths *ps) {
    int rc = paths_add(ps, m->md.config_path, "");
    if (rc == 0 && m->md.index_path) rc = paths_add(ps, m->md.index_path, "");
    for (int i = 0; rc == 0 && i < m->md.n_files; i++)
        rc = paths_add(ps, m->md.files[i].path, "");
    if (rc == 0) rc = paths_add(ps, m->md.dir, "/tokenizer.json");
    return rc;
}

// every file the job reads: the job, the data (a glob's matches, a Megatron prefix's pair) and
// the model's files
static int job_inputs(const struct plan *pl, struct paths *ps) {
    const struct job *j = &pl->j;
    int rc = paths_add(ps, j->path, "");
    if (rc == 0) rc = paths_add(ps, j->data_path, "");
    if (rc == 0) rc = paths_add(ps, j->data_path, ".bin");
    if (rc == 0) rc = paths_add(ps, j->data_path, ".idx");
    glob_t g;
    if (rc == 0 && glob(j->data_path, 0, NULL, &g) == 0) {
        for (size_t i = 0; rc == 0 && i < g.gl_pathc; i++)
            rc = paths_add(ps, g.gl_pathv[i], "");
        globfree(&g);
    }
    return rc == 0 ? model_files(&pl->m, ps) : rc;
}

// rank 0, before the output is touched: no output file is an input, and no other run has it
static int output_guard(const struct plan *pl, struct outlock *lk, struct ah_error *err) {
    struct paths in = {0};
    int rc = job_inputs(pl, &in);
    if (rc < 0)
        rc = ah_fail(err, AH_ENOMEM, "%s: out of memory listing the job's files", pl->j.path);
    if (rc == 0) rc = outlock_check_inputs(pl->j.out_path, (const char *const *)in.v, in.n, err);
    paths_free(&in);
    return rc == 0 ? outlock_take(lk, pl->j.out_path, err) : rc;
}

// JSON text of the model's fingerprint (caller frees)
static int model_fingerprint(const struct model *m, char **json, struct ah_error *err) {
    struct paths ps = {0};
    int rc = model_files(m, &ps);
    if (rc < 0) rc = ah_fail(err, AH_ENOMEM, "%s: out of memory listing its files", m->md.dir);
    if (rc == 0) rc = fp_make((const char *const *)ps.v, ps.n, json, err);
    paths_free(&ps);
    return rc;
}

// Every rank returns the same code: the worst one.
static int agree(int rc) {
    int code = rc < 0 ? -rc : 0, worst = 0;
    MPI_Allreduce(&code, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return -worst;
}

// The data: rank 0 reads the corpus once, its token ids going to a spill file next to the output
// that every rank then maps (so they cost the page cache, once a node); the per-prompt tables (24
// bytes a prompt) are broadcast. Collective.
static int plan_data(struct plan *pl, int rank, struct ah_error *err) {
    const struct job *j = &pl->j;
    const struct model *m = &pl->m;
    struct ds_prompts *ds = &pl->ds;
    char spill[4200];
    snprintf(spill, sizeof spill, "%s.tokens", j->out_path);
    int rc = 0;
    FILE *probe = rank == 0 ? fopen(spill, "ab") : NULL; // the output's folder must take files
    if (rank == 0 && !probe)
        rc = ah_fail(err, AH_EIO,
                     "%s: cannot create the output file (check that its folder exists and is "
                     "writable): %s",
                     j->out_path, strerror(errno));
    if (probe) fclose(probe);
    if (rank == 0 && rc == 0) {
        int64_t cap = j->max_seq_len ? j->max_seq_len : m->max_pos;
        struct ds_spec spec = {j->data_path,      j->data_format,
                               j->data_field,     m->tok,
                               m->md.dir,         j->pack ? j->max_seq_len : 0,
                               j->pack_separator, j->pack_bos};
        rc = ds_load(ds, &spec, cap, m->vocab, spill, err);
    }
    if ((rc = agree(rc)) < 0) {
        if (rank == 0) remove(spill); // a half-written spill file is of no use
        return rc;
    }
    int64_t counts[6] = {ds->n,       ds->n_tokens,    ds->n_lines,
                         ds->n_empty, ds->n_truncated, ds->longest};
    MPI_Bcast(counts, 6, MPI_INT64_T, 0, MPI_COMM_WORLD);
    if (rank != 0) {
        ds->n = counts[0], ds->n_tokens = counts[1], ds->n_lines = counts[2];
        ds->n_empty = counts[3], ds->n_truncated = counts[4], ds->longest = counts[5];
        ds->source = malloc((size_t)(ds->n + 1) * sizeof *ds->source);
        ds->len = malloc((size_t)(ds->n + 1) * sizeof *ds->len);
        ds->off = malloc((size_t)(ds->n + 1) * sizeof *ds->off);
        if (!ds->source || !ds->len || !ds->off) MPI_Abort(MPI_COMM_WORLD, 2);
    }
    for (int64_t at = 0; at < ds->n; at += 1 << 26) { // MPI counts are ints
        int cnt = (int)(ds->n - at < (1 << 26) ? ds->n - at : 1 << 26);
        MPI_Bcast(ds->source + at, cnt, MPI_INT64_T, 0, MPI_COMM_WORLD);
        MPI_Bcast(ds->len + at, cnt, MPI_INT64_T, 0, MPI_COMM_WORLD);
        MPI_Bcast(ds->off + at, cnt, MPI_INT64_T, 0, MPI_COMM_WORLD);
    }
    if (rank != 0) rc = ds_map_ids(ds, spill, err);
    rc = agree(rc);
    MPI_Barrier(MPI_COMM_WORLD); // every rank has it mapped: the name can go
    if (rank == 0) remove(spill);
    return rc;
}

// The rest of the plan, from the data. Identical on every rank.
static int plan_finish(struct plan *pl, struct ah_error *err) {
    const struct job *j = &pl->j;
    const struct model *m = &pl->m;
    const struct ds_prompts *ds = &pl->ds;
    pl->S = j->max_seq_len ? j->max_seq_len : (ds->longest > 0 ? ds->longest : 1);
    int deepest = -1;
    for (int i = 0; i < m->n_cat; i++)
        if (pl->want[i]) {
            pl->n_dsets++;
            deepest = m->cat[i].block > deepest ? m->cat[i].block : deepest;
        }
    pl->blk_end = deepest + 1 < m->n_blocks ? deepest + 1 : m->n_blocks;
    if (j->pipeline_stages > (pl->blk_end > 0 ? pl->blk_end : 1)) // 0 blocks: embeddings only
        return ah_fail(err, AH_EINVAL,
                       "%s: \"parallel.pipeline_stages\": %d stages for the %d blocks this job "
                       "runs (at most one stage a block)",
                       j->path, j->pipeline_stages, pl->blk_end);
    pl->dsets = calloc((size_t)pl->n_dsets + 1, sizeof *pl->dsets);
    if (!pl->dsets) return -AH_ENOMEM;
    build_dsets(m, pl->want, j->layout, pl->S, ds->n, ds->n_tokens, pl->dsets, pl->dset_of_id);
    pl->B = j->batch_size;
    pl->K = (ds->n + pl->B - 1) / pl->B;
    return 0;
}

static int64_t batch_first(const struct plan *pl, int64_t k) {
    return k * pl->B;
}
static int64_t batch_end(const struct plan *pl, int64_t k) {
    return (k + 1) * pl->B < pl->ds.n ? (k + 1) * pl->B : pl->ds.n;
}
static int64_t token_at(const struct plan *pl, int64_t p) {
    return p < pl->ds.n ? pl->ds.off[p] : pl->ds.n_tokens;
}

// ----------------------------------------------------------------------------
// the grid

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

void plan_partition(const double *cost, int n, int parts, int *cut) {
    AH_ASSERT(parts >= 1 && parts <= n);
    size_t w = (size_t)n + 1;
    double *best =
        malloc((size_t)(parts + 1) * w * sizeof *best); // [s][b]: blocks [0, b), s stages
    int *arg = malloc((size_t)(parts + 1) * w * sizeof *arg);
    AH_ASSERT(best && arg);
    for (int b = 0; b <= n; b++) {
        best[w + (size_t)b] = 0;
        for (int i = 0; i < b; i++)
            best[w + (size_t)b] += cost[i];
    }
    for (int s = 2; s <= parts; s++)
        for (int b = s; b <= n; b++) {
            double *bb = &best[(size_t)s * w + (size_t)b], tail = 0;
            *bb = 1e300;
            for (int c = b - 1; c >= s - 1; c--) { // the last stage is [c, b)
                tail += cost[c];
                double prev = best[(size_t)(s - 1) * w + (size_t)c];
                double v = prev > tail ? prev : tail;
                if (v < *bb) {
                    *bb = v;
                    arg[(size_t)s * w + (size_t)b] = c;
                }
            }
        }
    cut[parts] = n;
    for (int s = parts; s > 1; s--)
        cut[s - 1] = arg[(size_t)s * w + (size_t)cut[s]];
    cut[0] = 0;
    free(best);
    free(arg);
}

static int owner_block(int block, int nb) {
    return block < 0 ? 0 : block >= nb ? nb - 1 : block;
}

static void grid_make(struct grid *g, const struct plan *pl, int rank, int size) {
    g->rank = rank;
    g->size = size;
    g->n_stages = pl->j.pipeline_stages;
    g->n_shards = pl->j.expert_parallel;
    g->n_replicas = size / (g->n_stages * g->n_shards);
    g->shard = rank % g->n_shards;
    g->stage = rank / g->n_shards % g->n_stages;
    g->replica = rank / (g->n_shards * g->n_stages);
    g->ecomm = MPI_COMM_NULL;
    g->n_experts = !strcmp(pl->m.family, "laguna") ? pl->m.lg.cfg.n_expert : 0;
    if (g->n_shards > 1) MPI_Comm_split(MPI_COMM_WORLD, rank / g->n_shards, g->shard, &g->ecomm);
    // blocks cost their FLOPs at the longest prompt; the LM head (if asked for) adds to the last
    int T = (int)pl->S, nb = pl->m.n_blocks;
    double head = 0.0;
    for (int i = 0; i < pl->n_dsets; i++)
        if (pl->dsets[i].desc->block == nb) head = model_block_flops(&pl->m, nb, T);
    double *cost = malloc((size_t)pl->blk_end * sizeof *cost + 1);
    int *cut = malloc(((size_t)g->n_stages + 1) * sizeof *cut);
    AH_ASSERT(cost && cut);
    cut[0] = cut[1] = 0; // no block to run (the embeddings alone): one stage, blocks [0, 0)
    for (int b = 0; b < pl->blk_end; b++)
        cost[b] = model_block_flops(&pl->m, b, T) + (b == nb - 1 ? head : 0.0);
    if (pl->blk_end > 0) plan_partition(cost, pl->blk_end, g->n_stages, cut);
    g->b0 = cut[g->stage];
    g->b1 = cut[g->stage + 1];
    free(cost);
    free(cut);
    g->i0 = g->i1 = 0;
    if (pl->blk_end == 0) g->i1 = pl->n_dsets; // the embeddings alone: one stage writes all
    for (int i = 0; pl->blk_end > 0 && i < pl->n_dsets; i++) {
        int b = owner_block(pl->dsets[i].desc->block, nb);
        if (b < g->b0)
            g->i0 = g->i1 = i + 1;
        else if (b < g->b1)
            g->i1 = i + 1;
    }
    // the stage's segments are shared by its ranks, which therefore go in lockstep rounds
    MPI_Comm_split(MPI_COMM_WORLD, g->i1 > g->i0 ? g->stage : MPI_UNDEFINED, rank, &g->scomm);
}

// ----------------------------------------------------------------------------
// segment records travel to rank 0 as bytes: a header, then the runs

struct rec_header {
    char file[64];
    int32_t i0, i1, n_runs;
};

// Record sends are non-blocking: a stage must never wait for rank 0 (which is a first stage, and
// may itself be waiting for that stage to take a micro-batch). The buffers stay until sent.
struct pending {
    MPI_Request req;
    char *buf;
};

static void send_record(struct pending **pend, int *n_pend, const struct h5out_record *r) {
    size_t n = sizeof(struct rec_header) + (size_t)r->n_runs * sizeof(struct h5out_run);
    char *buf = malloc(n);
    struct pending *np = realloc(*pend, ((size_t)*n_pend + 1) * sizeof *np);
    AH_ASSERT(buf && np);
    *pend = np;
    struct rec_header h = {{0}, r->i0, r->i1, r->n_runs};
    memcpy(h.file, r->file, sizeof h.file);
    memcpy(buf, &h, sizeof h);
    memcpy(buf + sizeof h, r->runs, (size_t)r->n_runs * sizeof(struct h5out_run));
    np[*n_pend].buf = buf;
    MPI_Isend(buf, (int)n, MPI_BYTE, 0, TAG_REC, MPI_COMM_WORLD, &np[*n_pend].req);
    (*n_pend)++;
}

// completes every record send (before the DONE message, so rank 0 has them all)
static void finish_records(struct pending *pend, int n_pend) {
    for (int i = 0; i < n_pend; i++) {
        MPI_Wait(&pend[i].req, MPI_STATUS_IGNORE);
        free(pend[i].buf);
    }
    free(pend);
}

// rank 0: receives one record message and adds it to the master
static int recv_record(struct h5master *mst, int src) {
    MPI_Status stt;
    int n = 0;
    MPI_Probe(src, TAG_REC, MPI_COMM_WORLD, &stt);
    MPI_Get_count(&stt, MPI_BYTE, &n);
    char *buf = malloc((size_t)n + 1);
    AH_ASSERT(buf);
    MPI_Recv(buf, n, MPI_BYTE, stt.MPI_SOURCE, TAG_REC, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    struct rec_header h;
    memcpy(&h, buf, sizeof h);
    struct h5out_record r = {{0}, h.i0, h.i1, NULL, h.n_runs};
    memcpy(r.file, h.file, sizeof r.file);
    r.runs = malloc(((size_t)h.n_runs + 1) * sizeof *r.runs);
    AH_ASSERT(r.runs);
    memcpy(r.runs, buf + sizeof h, (size_t)h.n_runs * sizeof *r.runs);
    free(buf);
    return h5m_add(mst, &r);
}

// ----------------------------------------------------------------------------
// a rank's run

struct rank_run {
    const struct plan *pl;
    const struct grid *g;
    const struct run_opts *o;
    struct h5master *mst; // rank 0 only
    int run;              // number of this run of the output (segment names)
    int seq;              // segments the stage has opened
    struct h5seg *seg;
    struct collector col;
    double last_checkpoint;
    bool master_dirty;
    int64_t bytes;
    double busy, wall;    // seconds working (forward, writes, hand-off copies) and in the loop
    struct pending *pend; // record sends in flight (ranks other than 0)
    int n_pend;
};

// Collective over the stage: opens its next segment, named after the stage's first rank.
static int seg_begin(struct rank_run *rr, struct ah_error *err) {
    char file[64];
    snprintf(file, sizeof file, "seg-%03d-%05d-%05d.h5", rr->run, rr->g->stage * rr->g->n_shards,
             rr->seq++);
    return h5seg_open(&rr->seg, rr->g->scomm, rr->pl->j.out_path, file,
                      rr->pl->j.out_dtype == JOB_F16    ? H5OUT_F16
                      : rr->pl->j.out_dtype == JOB_BF16 ? H5OUT_BF16
                                                        : H5OUT_F32,
                      rr->pl->j.compression, rr->pl->B, rr->pl->dsets, rr->g->i0, rr->g->i1, err);
}

// Collective over the stage: closes the open segment and the stage's first rank hands its record
// to rank 0.
static int seg_finish(struct rank_run *rr, struct ah_error *err) {
    if (!rr->seg) return 0;
    struct h5out_record rec;
    int me = 0;
    double t0 = now_seconds();
    rr->bytes += h5seg_bytes(rr->seg);
    int rc = h5seg_close(rr->seg, &rec, err);
    rr->seg = NULL;
    rr->col.seconds += now_seconds() - t0; // the fsync is part of writing
    if (rc < 0) return rc;
    MPI_Comm_rank(rr->g->scomm, &me);
    if (me == 0 && rr->g->rank == 0) {
        rc = h5m_add(rr->mst, &rec);
        rr->master_dirty = true;
    } else if (me == 0) {
        send_record(&rr->pend, &rr->n_pend, &rec);
    }
    h5out_record_free(&rec);
    return rc;
}

// rank 0: takes the records that have arrived and, if any, replaces the master
static int master_poll(struct rank_run *rr, struct ah_error *err) {
    int flag = 1, rc = 0;
    while (rc == 0 && flag) {
        MPI_Status stt;
        MPI_Iprobe(MPI_ANY_SOURCE, TAG_REC, MPI_COMM_WORLD, &flag, &stt);
        if (flag) {
            rc = recv_record(rr->mst, stt.MPI_SOURCE);
            rr->master_dirty = true;
        }
    }
    if (rc == 0 && rr->master_dirty) {
        rc = h5m_write(rr->mst, false, err);
        rr->master_dirty = false;
    }
    return rc;
}

// stage 0: has a stop been asked for, here or on any rank?
static bool stop_seen(void) {
    int flag = 0;
    MPI_Iprobe(MPI_ANY_SOURCE, TAG_STOP, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
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
        MPI_Isend(&z, 0, MPI_CHAR, r, TAG_STOP, MPI_COMM_WORLD, &q);
        MPI_Request_free(&q);
    }
}

static void drain_stops(void) {
    int flag = 1;
    while (flag) {
        MPI_Status stt;
        MPI_Iprobe(MPI_ANY_SOURCE, TAG_STOP, MPI_COMM_WORLD, &flag, &stt);
        if (flag)
            MPI_Recv(NULL, 0, MPI_CHAR, stt.MPI_SOURCE, TAG_STOP, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
    }
}

// The batches this rank's replica works on: a contiguous share of those not done yet.
static int64_t my_batches(const struct plan *pl, const struct grid *g, const uint8_t *done,
                          int64_t *out) {
    int64_t todo = 0, n = 0;
    for (int64_t k = 0; k < pl->K; k++)
        todo += !done[k];
    int64_t a = todo * g->replica / g->n_replicas, b = todo * (g->replica + 1) / g->n_replicas;
    for (int64_t k = 0, i = 0; k < pl->K; k++) {
        if (done[k]) continue;
        if (i >= a && i < b) out[n++] = k;
        i++;
    }
    return n;
}

// ----------------------------------------------------------------------------
// expert shards: the slots each shard computed, to every shard of the group

struct exchange {
    const struct grid *g;
    float *buf; // (slots, D) gathered, owner after owner
    size_t cap;
};

static int owner_of(int64_t e, int64_t E, int n) { // the shard whose [E s / n, E (s+1) / n) has e
    int s = (int)(e * n / E);
    while (s + 1 < n && E * (s + 1) / n <= e)
        s++;
    while (s > 0 && E * s / n > e)
        s--;
    return s;
}

static void exchange_slots(void *u, float *eo, const int64_t *idx, int64_t n_slots, int D) {
    struct exchange *x = u;
    const struct grid *g = x->g;
    int n = g->n_shards;
    int cnt[256], disp[256];
    AH_ASSERT(n <= 256);
    for (int s = 0; s < n; s++)
        cnt[s] = 0;
    for (int64_t i = 0; i < n_slots; i++)
        cnt[owner_of(idx[i], g->n_experts, n)] += D;
    for (int s = 0, d = 0; s < n; d += cnt[s], s++)
        disp[s] = d;
    size_t need = (size_t)n_slots * (size_t)D;
    AH_ASSERT(need <= x->cap); // sized for the largest batch before the first one
    float *mine = x->buf + disp[g->shard];
    for (int64_t i = 0; i < n_slots; i++)
        if (owner_of(idx[i], g->n_experts, n) == g->shard)
            memcpy(mine, eo + i * D, (size_t)D * sizeof(float)), mine += D;
    MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_FLOAT, x->buf, cnt, disp, MPI_FLOAT, g->ecomm);
    int at[256];
    memcpy(at, disp, sizeof(int) * (size_t)n);
    for (int64_t i = 0; i < n_slots; i++) {
        int s = owner_of(idx[i], g->n_experts, n);
        memcpy(eo + i * D, x->buf + at[s], (size_t)D * sizeof(float));
        at[s] += D;
    }
}

// ----------------------------------------------------------------------------
// rounds: the ranks of a stage with datasets share its segment, one batch each a round

struct round {
    int members;            // ranks of the stage; member m is shard m % n_shards of its replica
    int64_t *info;          // (members, 3): batch (-1: none), stop asked, checkpoint due
    struct h5out_run *rows; // (members) the rows each writes this round
};

// Collective over the stage: every rank tells the batch it holds this round (k, -1 for none) and
// whether it saw a stop; the stage's first rank keeps the checkpoint clock. *play is false when
// the round is not played: a first stage asked to stop, or no rank with a batch. Otherwise a due
// checkpoint closes the segment (and rank 0 relists at once), and the round begins in the open
// or a new segment, its rows in rank order.
static int round_begin(struct rank_run *rr, struct round *rd, int64_t k, int stop, bool *play,
                       struct ah_error *err) {
    const struct plan *pl = rr->pl;
    const struct grid *g = rr->g;
    int rc = 0;
    int64_t mine[3] = {k, stop, now_seconds() - rr->last_checkpoint >= pl->j.checkpoint_seconds};
    MPI_Allgather(mine, 3, MPI_INT64_T, rd->info, 3, MPI_INT64_T, g->scomm);
    bool any = false;
    for (int m = 0; m < rd->members; m++) {
        any = any || rd->info[3 * m] >= 0;
        stop = stop || rd->info[3 * m + 1];
    }
    *play = any && !(g->stage == 0 && stop);
    if (!*play) return 0;
    if (rd->info[2] && rr->seg) {
        if ((rc = seg_finish(rr, err)) < 0) return rc;
        if (g->rank == 0 && (rc = master_poll(rr, err)) < 0) return rc;
        rr->last_checkpoint = now_seconds();
    }
    for (int m = 0; m < rd->members; m++) {
        int64_t km = rd->info[3 * m];
        struct h5out_run *r = &rd->rows[m];
        *r = (struct h5out_run){0};
        if (km < 0 || m % g->n_shards) continue; // shard 0 writes
        r->p0 = batch_first(pl, km);
        r->p1 = batch_end(pl, km);
        r->t0 = token_at(pl, r->p0);
        r->t1 = token_at(pl, r->p1);
    }
    if (!rr->seg && (rc = seg_begin(rr, err)) < 0) return rc;
    return h5seg_begin_round(rr->seg, rd->rows, err);
}

// The loop of one rank: receive (unless first stage), compute, write, send (unless last stage).
static int rank_loop(struct rank_run *rr, const uint8_t *done, struct ah_error *err) {
    const struct plan *pl = rr->pl;
    const struct grid *g = rr->g;
    int C = model_hidden(&pl->m), B = pl->B, rc = 0;
    bool first = g->stage == 0, last = g->stage == g->n_stages - 1, relayed = false;
    int prev = g->rank - g->n_shards, next = g->rank + g->n_shards; // the same shard
    struct exchange ex = {g, NULL, 0};                              // expert shards' slots
    int64_t *mine = malloc(((size_t)pl->K + 1) * sizeof *mine);
    int *lens = malloc((size_t)B * sizeof *lens);
    int64_t *boff = malloc((size_t)B * sizeof *boff), *brow = malloc((size_t)B * sizeof *brow);
    struct model_state st = {0};
    uint8_t *want = NULL;
    float *hand[2];
    int n_hand = 0;
    int64_t max_tokens = 1;
    for (int64_t k = 0; k < pl->K; k++) {
        int64_t t = token_at(pl, batch_end(pl, k)) - token_at(pl, batch_first(pl, k));
        max_tokens = t > max_tokens ? t : max_tokens;
    }
    size_t msg = (size_t)max_tokens * 2 * (size_t)C; // x, then (encdec) encoder_output
    float *rbuf[2] = {malloc(msg * 4 + 4), malloc(msg * 4 + 4)};
    float *sbuf[2] = {malloc(msg * 4 + 4), malloc(msg * 4 + 4)};
    int64_t rhdr[2], shdr[2];
    MPI_Request rreq[2][2], sreq[2][2];
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 2; k++)
            rreq[i][k] = sreq[i][k] = MPI_REQUEST_NULL;
    if (!mine || !lens || !boff || !brow || !rbuf[0] || !rbuf[1] || !sbuf[0] || !sbuf[1]) {
        rc = ah_fail(err, AH_ENOMEM,
                     "out of memory: 4 hand-off buffers of %zu bytes (batches of up to %lld "
                     "tokens, hidden %d)",
                     msg * 4 + 4, (long long)max_tokens, C);
        goto done;
    }
    int64_t n_mine = my_batches(pl, g, done, mine);

    rr->col = (struct collector){.dsets = pl->dsets,
                                 .dset_of_id = pl->dset_of_id,
                                 .layout = pl->j.layout,
                                 .token_row = brow};
    want = calloc((size_t)pl->m.n_cat, 1); // what this stage writes
    if (!want) {
        rc = -AH_ENOMEM;
        goto done;
    }
    // shard 0 writes what the shards of a replica compute alike
    for (int i = 0; g->shard == 0 && i < pl->m.n_cat; i++)
        want[i] = pl->dset_of_id[i] >= g->i0 && pl->dset_of_id[i] < g->i1;
    struct laguna_shard shard = {
        (int)((int64_t)pl->m.lg.cfg.n_expert * g->shard / g->n_shards),
        (int)((int64_t)pl->m.lg.cfg.n_expert * (g->shard + 1) / g->n_shards), exchange_slots, &ex};
    if ((rc = model_state_init(&pl->m, &st, (int)pl->S, max_tokens, want,
                               g->n_shards > 1 ? &shard : NULL)) < 0)
        goto done;
    if (g->n_shards > 1) { // every slot of the largest batch, gathered
        ex.cap = (size_t)max_tokens * (size_t)pl->m.lg.cfg.top_k * (size_t)pl->m.lg.cfg.hidden;
        if (!(ex.buf = malloc(ex.cap * sizeof *ex.buf))) {
            rc = ah_fail(err, AH_ENOMEM, "out of memory: the expert exchange buffer of %zu bytes",
                         ex.cap * sizeof *ex.buf);
            goto done;
        }
    }
    model_handoff(&pl->m, &st, hand, &n_hand);
    struct tap tp = {want, collect_take, &rr->col};

    struct progress pr;
    int64_t my_prompts = 0, my_tokens = 0, done_prompts = 0, done_tokens = 0;
    for (int64_t i = 0; i < n_mine; i++) {
        my_prompts += batch_end(pl, mine[i]) - batch_first(pl, mine[i]);
        my_tokens += token_at(pl, batch_end(pl, mine[i])) - token_at(pl, batch_first(pl, mine[i]));
    }
    progress_init(&pr, rr->o->quiet || g->rank != 0, my_prompts, my_tokens, 0, 0);
    rr->last_checkpoint = now_seconds();

    // a stage with datasets shares its segments: its ranks go in rounds, each with one batch or
    // none, and agree on stops and checkpoints at the start of every round
    bool lock = g->scomm != MPI_COMM_NULL, ended = false;
    struct round rd = {1, NULL, NULL};
    if (lock) MPI_Comm_size(g->scomm, &rd.members);
    rd.info = malloc((size_t)rd.members * 3 * sizeof *rd.info);
    rd.rows = malloc((size_t)rd.members * sizeof *rd.rows);
    if (!rd.info || !rd.rows) {
        rc = -AH_ENOMEM;
        goto loop_done;
    }
    double t_loop = now_seconds();
    int cur = 0;
    if (!first) {
        MPI_Irecv(&rhdr[0], 1, MPI_INT64_T, prev, TAG_HDR, MPI_COMM_WORLD, &rreq[0][0]);
        MPI_Irecv(rbuf[0], (int)msg, MPI_FLOAT, prev, TAG_DATA, MPI_COMM_WORLD, &rreq[0][1]);
    }
    for (int64_t i = 0;; i++) {
        int64_t k = -1;
        int stop = 0;
        relay_stop(g, &relayed);
        if (first) {
            stop = stop_seen();
            if (i < n_mine) k = mine[i];
        } else if (!ended) {
            MPI_Waitall(2, rreq[cur], MPI_STATUSES_IGNORE);
            k = rhdr[cur];
            ended = k < 0; // the stage before has ended
            int nx = 1 - cur;
            if (!ended) {
                MPI_Irecv(&rhdr[nx], 1, MPI_INT64_T, prev, TAG_HDR, MPI_COMM_WORLD, &rreq[nx][0]);
                MPI_Irecv(rbuf[nx], (int)msg, MPI_FLOAT, prev, TAG_DATA, MPI_COMM_WORLD,
                          &rreq[nx][1]);
            }
        }
        if (lock) {
            bool play = false;
            if ((rc = round_begin(rr, &rd, k, stop, &play, err)) < 0) goto loop_done;
            if (!play) break; // the pipeline drains behind the last batch
        } else if (k < 0) {
            break;
        } else if (first && g->ecomm != MPI_COMM_NULL) { // shards stop together: they exchange
            MPI_Allreduce(MPI_IN_PLACE, &stop, 1, MPI_INT, MPI_MAX, g->ecomm);
            if (stop) break;
        } else if (first && stop) {
            break;
        }
        if (k >= 0) {
            double t_busy = now_seconds();
            int64_t p0 = batch_first(pl, k), p1 = batch_end(pl, k);
            int64_t t0 = token_at(pl, p0);
            int n = (int)(p1 - p0);
            for (int b = 0; b < n; b++) {
                lens[b] = (int)pl->ds.len[p0 + b];
                boff[b] = pl->ds.off[p0 + b] - t0;
                brow[b] = pl->ds.off[p0 + b];
            }
            struct mbatch bt = {n, token_at(pl, p1) - t0, pl->ds.ids + t0, lens, boff};
            size_t hand_n = (size_t)bt.n_tokens * C; // floats of one hand-off array
            for (int a = 0; !first && a < n_hand; a++)
                memcpy(hand[a], rbuf[cur] + a * hand_n, hand_n * sizeof(float));
            rr->col.seg = rr->seg;
            rr->col.first_prompt = p0;
            model_forward(&pl->m, &st, &bt, &tp, g->b0, g->b1);
            if ((rc = rr->col.rc) < 0) {
                *err = rr->col.err;
                goto loop_done;
            }
            if (!last) {
                int sb = (int)(i % 2);
                MPI_Waitall(2, sreq[sb], MPI_STATUSES_IGNORE); // the buffer's last message is out
                for (int a = 0; a < n_hand; a++)
                    memcpy(sbuf[sb] + a * hand_n, hand[a], hand_n * sizeof(float));
                shdr[sb] = k;
                MPI_Isend(&shdr[sb], 1, MPI_INT64_T, next, TAG_HDR, MPI_COMM_WORLD, &sreq[sb][0]);
                MPI_Isend(sbuf[sb], (int)(n_hand * hand_n), MPI_FLOAT, next, TAG_DATA,
                          MPI_COMM_WORLD, &sreq[sb][1]);
            }
            rr->busy += now_seconds() - t_busy;
            if (!first) cur = 1 - cur;
            done_prompts += n;
            done_tokens += bt.n_tokens;
            progress_update(&pr, done_prompts, done_tokens, false);
        }
        if (lock) {
            double t_write = now_seconds();
            if ((rc = h5seg_end_round(rr->seg, err)) < 0) goto loop_done;
            rr->col.seconds += now_seconds() - t_write;
        }
        if (g->rank == 0 && (rc = master_poll(rr, err)) < 0) goto loop_done;
    }
    if (!last) { // end of stream
        for (int sb = 0; sb < 2; sb++)
            MPI_Waitall(2, sreq[sb], MPI_STATUSES_IGNORE);
        shdr[0] = -1;
        MPI_Send(&shdr[0], 1, MPI_INT64_T, next, TAG_HDR, MPI_COMM_WORLD);
        MPI_Send(sbuf[0], 0, MPI_FLOAT, next, TAG_DATA, MPI_COMM_WORLD);
    }
    rr->wall = now_seconds() - t_loop;
    progress_update(&pr, done_prompts, done_tokens, true);
    rc = seg_finish(rr, err);
loop_done:
    free(rd.info);
    free(rd.rows);
done:
    free(want);
    // after a failure the job ends at once (MPI_Abort): no wait for sends, and the open
    // segment (if any) is left unclosed, as closing is collective; it is never listed
    for (int s = 0; rc == 0 && s < 2; s++)
        MPI_Waitall(2, sreq[s], MPI_STATUSES_IGNORE);
    collector_free(&rr->col);
    model_state_free(&st);
    free(ex.buf);
    for (int s = 0; s < 2; s++) {
        free(rbuf[s]);
        free(sbuf[s]);
    }
    free(mine);
    free(lens);
    free(boff);
    free(brow);
    return rc;
}

// JSON text of every rank's identity, gathered on rank 0
static char *provenance(const struct grid *g) {
    char mine[256], host[128] = "?";
    gethostname(host, sizeof host - 1);
    const char *job = getenv("SLURM_JOB_ID"), *step = getenv("SLURM_STEP_ID");
    snprintf(mine, sizeof mine, "%d %d %d %d %s %s %s", g->rank, g->stage, g->replica, g->shard,
             host, job ? job : "-", step ? step : "-");
    char *all = g->rank == 0 ? malloc((size_t)g->size * sizeof mine) : NULL;
    MPI_Gather(mine, sizeof mine, MPI_CHAR, all, sizeof mine, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (g->rank != 0) return NULL;
    cJSON *o = cJSON_CreateObject(), *ranks = cJSON_AddArrayToObject(o, "ranks");
    cJSON_AddNumberToObject(o, "world_size", g->size);
    cJSON_AddNumberToObject(o, "pipeline_stages", g->n_stages);
    cJSON_AddNumberToObject(o, "replicas", g->n_replicas);
    cJSON_AddNumberToObject(o, "expert_parallel", g->n_shards);
    for (int r = 0; r < g->size; r++) {
        int rank, stage, replica, shard;
        char h[128], j[64], s[64];
        if (sscanf(all + (size_t)r * sizeof mine, "%d %d %d %d %127s %63s %63s", &rank, &stage,
                   &replica, &shard, h, j, s) != 7)
            continue;
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "rank", rank);
        cJSON_AddNumberToObject(e, "stage", stage);
        cJSON_AddNumberToObject(e, "replica", replica);
        if (g->n_shards > 1) cJSON_AddNumberToObject(e, "expert_shard", shard);
        cJSON_AddStringToObject(e, "host", h);
        if (strcmp(j, "-")) cJSON_AddStringToObject(e, "slurm_job_id", j);
        if (strcmp(s, "-")) cJSON_AddStringToObject(e, "slurm_step_id", s);
        cJSON_AddItemToArray(ranks, e);
    }
    free(all);
    char *t = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return t;
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

int harvest_run(const struct run_opts *o, struct run_stats *stats, struct ah_error *err) {
    double t_start = now_seconds();
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    struct plan pl = {0};
    struct grid g = {.ecomm = MPI_COMM_NULL, .scomm = MPI_COMM_NULL};
    struct rank_run rr = {0};
    uint8_t *done = NULL;
    char *prov = NULL, *fp = NULL;
    bool complete = false;
    struct outlock lock = {.fd = -1};

    // ---- everything the user can get wrong, on every rank, before touching the output ----
    int rc = agree(plan_load(&pl, o->job_path, size, err));
    if (rc < 0) goto done;
    if ((rc = agree(rank == 0 ? output_guard(&pl, &lock, err) : 0)) < 0) goto done;
    if ((rc = plan_data(&pl, rank, err)) < 0 || (rc = agree(plan_finish(&pl, err))) < 0) goto done;
    grid_make(&g, &pl, rank, size);
    if (!o->quiet && g.replica == 0) { // what this stage holds: the pages it touches
        const char *kind;
        int64_t wb =
            model_stage_bytes(&pl.m, g.b0, g.b1, g.b1 == pl.m.n_blocks, g.shard, g.n_shards, &kind);
        char sh[64] = "";
        if (g.n_shards > 1) snprintf(sh, sizeof sh, ", expert shard %d of %d", g.shard, g.n_shards);
        fprintf(stderr, "harvest: rank %d: stage %d of %d, blocks %d-%d%s: weights %.1f MB (%s)\n",
                rank, g.stage, g.n_stages, g.b0, g.b1 - 1, sh, (double)wb / 1e6, kind);
    }
    prov = provenance(&g);
    done = calloc((size_t)pl.K + 1, 1);
    if (!done) rc = -AH_ENOMEM;

    // ---- the output: rank 0 makes or reopens it, then every rank knows what is done ----
    bool exists = rank == 0 && access(pl.j.out_path, F_OK) == 0;
    if (rc == 0 && rank == 0) {
        if (exists && !o->resume && !o->overwrite)
            rc = ah_fail(err, AH_EEXIST,
                         "%s: the output exists; run with --resume to continue it or "
                         "--overwrite to replace it",
                         pl.j.out_path);
        // --overwrite, or a fresh start: nothing of an old output may stay
        if (rc == 0 && !(exists && o->resume)) rc = h5out_remove(pl.j.out_path, err);
        if (rc == 0) rc = model_fingerprint(&pl.m, &fp, err);
        struct h5out_params hp = {
            .path = pl.j.out_path,
            .store = pl.j.out_dtype == JOB_F16    ? H5OUT_F16
                     : pl.j.out_dtype == JOB_BF16 ? H5OUT_BF16
                                                  : H5OUT_F32,
            .model_family = pl.m.family,
            .model_config = pl.m.md.config_text,
            .job = pl.j.text,
            .data_checksum = prompts_checksum(&pl.ds),
            .n_prompts = pl.ds.n,
            .source_index = pl.ds.source,
            .length = pl.ds.len,
            .token_offset = pl.ds.off,
            .n_tokens = pl.ds.n_tokens,
            .input_ids = pl.ds.ids,
            .batch_size = pl.B,
            .max_seq_len = pl.S,
            .n_skipped_empty = pl.ds.n_empty,
            .n_truncated = pl.ds.n_truncated,
            .provenance = prov,
            .model_fingerprint = fp,
        };
        if (rc == 0)
            rc = h5m_open(&rr.mst, &hp, pl.dsets, pl.n_dsets, exists && o->resume, done, &rr.run,
                          &complete, err);
    }
    rc = agree(rc);
    if (rc < 0) goto done;
    MPI_Bcast(done, (int)pl.K, MPI_UINT8_T, 0, MPI_COMM_WORLD);
    MPI_Bcast(&rr.run, 1, MPI_INT, 0, MPI_COMM_WORLD);
    int complete_all = complete; // every rank must take the same path below
    MPI_Bcast(&complete_all, 1, MPI_INT, 0, MPI_COMM_WORLD);
    complete = complete_all;
    int64_t todo = 0;
    for (int64_t k = 0; k < pl.K; k++)
        todo += !done[k];
    if (todo == 0 && complete) {
        if (rank == 0 && !o->quiet)
            fprintf(stderr, "harvest: %s is already complete\n", pl.j.out_path);
        goto done;
    }

    // ---- the work ----
    rr.pl = &pl;
    rr.g = &g;
    rr.o = o;
    rc = rank_loop(&rr, done, err);
    if (rc < 0) { // a failure mid-run
        if (size > 1) fprintf(stderr, "[rank %d] ", rank);
        fprintf(stderr, "harvest: %s\n", err->msg[0] ? err->msg : ah_strerror(rc));
        // the others cannot go on without this rank
        if (size > 1) MPI_Abort(MPI_COMM_WORLD, ah_exit_code(rc));
        // HDF5 keeps a file whose close failed (disk full) open, and its shutdown hook in
        // MPI_Finalize would trip over it: the listed output is intact, so leave at once
        fflush(NULL);
        _exit(ah_exit_code(rc));
    }
    if (rc == 0 && size > 1) {
        if (rank == 0) { // every other rank's records, then its end
            for (int left = size - 1; left > 0;) {
                MPI_Status stt;
                MPI_Probe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &stt);
                if (stt.MPI_TAG == TAG_REC) {
                    rc = recv_record(rr.mst, stt.MPI_SOURCE);
                } else if (stt.MPI_TAG == TAG_DONE) {
                    MPI_Recv(NULL, 0, MPI_CHAR, stt.MPI_SOURCE, TAG_DONE, MPI_COMM_WORLD,
                             MPI_STATUS_IGNORE);
                    left--;
                } else { // a late stop notice
                    MPI_Recv(NULL, 0, MPI_CHAR, stt.MPI_SOURCE, stt.MPI_TAG, MPI_COMM_WORLD,
                             MPI_STATUS_IGNORE);
                }
            }
        } else {
            finish_records(rr.pend, rr.n_pend);
            rr.pend = NULL;
            rr.n_pend = 0;
            MPI_Send(NULL, 0, MPI_CHAR, 0, TAG_DONE, MPI_COMM_WORLD);
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    drain_stops();
    double mine[2] = {rr.busy, rr.wall},
           *times = rank == 0 ? malloc(sizeof mine * (size_t)size) : NULL;
    MPI_Gather(mine, 2, MPI_DOUBLE, times, 2, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    char *prov_t = rank == 0 ? provenance_timing(prov, times, size) : NULL;
    if (rank == 0 && prov_t) h5m_set_provenance(rr.mst, prov_t);
    if (rank == 0 && rc == 0) {
        int64_t all = h5m_done_prompts(rr.mst);
        double t_close = now_seconds();
        rc = h5m_write(rr.mst, all == pl.ds.n, err);
        rr.col.seconds += now_seconds() - t_close;
        if (rc == 0 && all < pl.ds.n)
            rc = ah_fail(err, AH_ESTOP,
                         "stopped by a signal after %lld of %lld prompts; run the same command "
                         "with --resume to continue",
                         (long long)all, (long long)pl.ds.n);
        else if (rc == 0 && !o->quiet)
            fprintf(stderr,
                    "harvest: wrote %lld prompts (%lld tokens, %d activations) to %s; "
                    "%lld empty prompts skipped, %lld truncated to %lld tokens\n",
                    (long long)pl.ds.n, (long long)pl.ds.n_tokens, pl.n_dsets, pl.j.out_path,
                    (long long)pl.ds.n_empty, (long long)pl.ds.n_truncated, (long long)pl.S);
    }
    MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD); // rank 0's verdict is everyone's
    free(times);
    free(prov_t);
    if (stats)
        *stats = (struct run_stats){.prompts = pl.ds.n,
                                    .tokens = pl.ds.n_tokens,
                                    .seconds = now_seconds() - t_start,
                                    .seconds_write = rr.col.seconds,
                                    .bytes = rr.bytes};
done:
    h5m_close(rr.mst);
    outlock_release(&lock);
    free(done);
    free(prov);
    free(fp);
    if (g.n_shards > 1) MPI_Comm_free(&g.ecomm);
    if (g.scomm != MPI_COMM_NULL) MPI_Comm_free(&g.scomm);
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
            return usage();
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
