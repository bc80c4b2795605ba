// grid.c - the ranks as a grid (run.h): expert shards within a stage, stages over the blocks
// (cut by work), replicas over the batches; and the exchange of expert slots between shards.
#define _POSIX_C_SOURCE 200809L // defines: gethostname
#include "harvest/run.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void run_mpi_failed(int code, const char *call, const char *file, int line) {
    char text[MPI_MAX_ERROR_STRING] = "";
    int n = 0, rank = -1;
    MPI_Error_string(code, text, &n);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    fprintf(stderr, "[rank %d] harvest: MPI failed in %s (%s:%d): %s\n", rank, call, file, line,
            text);
    fflush(NULL);
    MPI_Abort(MPI_COMM_WORLD, 2);
}

static int owner_block(int block, int nb) {
    return block < 0 ? 0 : block >= nb ? nb - 1 : block;
}

// Blocks [b0, b1) of this stage: the cut `harvest plan` shows (plan_stage_cut in plan.c), blocks
// costing their FLOPs at the longest prompt and the LM head (if asked for) adding to the last one.
static int stage_blocks(struct grid *g, const struct plan *pl, struct ah_error *err) {
    int nb = pl->m.n_blocks;
    bool head = false;
    for (int i = 0; i < pl->names.n_dsets; i++)
        head |= pl->names.dsets[i].desc->block == nb;
    int *cut = malloc(((size_t)g->n_stages + 1) * sizeof *cut + sizeof *cut);
    g->b0 = g->b1 = 0; // no block to run (the embeddings alone): one stage, blocks [0, 0)
    if (!cut ||
        plan_stage_cut(&pl->m, (int)pl->place.S, head, pl->place.blk_end, g->n_stages, cut) < 0) {
        free(cut);
        return ah_fail(err, AH_ENOMEM, "out of memory: the stage cut of %d blocks",
                       pl->place.blk_end);
    }
    g->b0 = cut[g->stage];
    g->b1 = cut[g->stage + 1];
    free(cut);
    return 0;
}

// Datasets [i0, i1) of this stage: those of its blocks (catalogue order follows the blocks).
static void stage_datasets(struct grid *g, const struct plan *pl) {
    int nb = pl->m.n_blocks;
    g->i0 = g->i1 = 0;
    if (pl->place.blk_end == 0)
        g->i1 = pl->names.n_dsets; // the embeddings alone: one stage writes all
    for (int i = 0; pl->place.blk_end > 0 && i < pl->names.n_dsets; i++) {
        int b = owner_block(pl->names.dsets[i].desc->block, nb);
        if (b < g->b0)
            g->i0 = g->i1 = i + 1;
        else if (b < g->b1)
            g->i1 = i + 1;
    }
}

int grid_make(struct grid *g, const struct plan *pl, int rank, int size, struct ah_error *err) {
    g->rank = rank;
    g->size = size;
    g->n_stages = pl->j.pipeline_stages;
    g->n_shards = pl->j.expert_parallel;
    g->n_replicas = size / (g->n_stages * g->n_shards);
    g->shard = rank % g->n_shards;
    g->stage = rank / g->n_shards % g->n_stages;
    g->replica = rank / (g->n_shards * g->n_stages);
    g->ecomm = MPI_COMM_NULL;
    g->n_experts = model_n_experts(&pl->m);
    if (g->n_shards > 1)
        CHECK_MPI(MPI_Comm_split(MPI_COMM_WORLD, rank / g->n_shards, g->shard, &g->ecomm));
    int rc = stage_blocks(g, pl, err);
    stage_datasets(g, pl);
    // the stage's segments are shared by its ranks, which therefore go in lockstep rounds
    CHECK_MPI(
        MPI_Comm_split(MPI_COMM_WORLD, g->i1 > g->i0 ? g->stage : MPI_UNDEFINED, rank, &g->scomm));
    return rc;
}

void grid_free(struct grid *g) {
    if (g->ecomm != MPI_COMM_NULL) MPI_Comm_free(&g->ecomm);
    if (g->scomm != MPI_COMM_NULL) MPI_Comm_free(&g->scomm);
}

// JSON text of every rank's identity, gathered on rank 0
char *grid_provenance(const struct grid *g) {
    char mine[256], host[128] = "?";
    gethostname(host, sizeof host - 1);
    const char *job = getenv("SLURM_JOB_ID"), *step = getenv("SLURM_STEP_ID");
    snprintf(mine, sizeof mine, "%d %d %d %d %s %s %s", g->rank, g->stage, g->replica, g->shard,
             host, job ? job : "-", step ? step : "-");
    char *all = g->rank == 0 ? malloc((size_t)g->size * sizeof mine) : NULL;
    CHECK_MPI(
        MPI_Gather(mine, sizeof mine, MPI_CHAR, all, sizeof mine, MPI_CHAR, 0, MPI_COMM_WORLD));
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

// ----------------------------------------------------------------------------
// expert shards: the slots each shard computed, to every shard of the group

static int owner_of(int64_t e, int64_t E, int n) { // the shard whose [E s / n, E (s+1) / n) has e
    int s = (int)(e * n / E);
    while (s + 1 < n && E * (s + 1) / n <= e)
        s++;
    while (s > 0 && E * s / n > e)
        s--;
    return s;
}

int exchange_init(struct exchange *x, const struct grid *g, int64_t max_tokens, int top_k,
                  int hidden, struct ah_error *err) {
    memset(x, 0, sizeof *x);
    x->g = g;
    if (g->n_shards <= 1) return 0;
    x->cap = (size_t)max_tokens * (size_t)top_k * (size_t)hidden;
    x->buf = malloc(x->cap * sizeof *x->buf);
    x->cnt = malloc(3 * (size_t)g->n_shards * sizeof *x->cnt);
    if (!x->buf || !x->cnt)
        return ah_fail(err, AH_ENOMEM,
                       "out of memory: the expert exchange buffer of %zu bytes (%lld tokens x "
                       "top %d x hidden %d)",
                       x->cap * sizeof *x->buf, (long long)max_tokens, top_k, hidden);
    x->disp = x->cnt + g->n_shards;
    x->at = x->disp + g->n_shards;
    return 0;
}

void exchange_free(struct exchange *x) {
    free(x->buf);
    free(x->cnt);
    memset(x, 0, sizeof *x);
}

void exchange_slots(void *u, float *eo, const int64_t *idx, int64_t n_slots, int D) {
    struct exchange *x = u;
    const struct grid *g = x->g;
    int n = g->n_shards, *cnt = x->cnt, *disp = x->disp, *at = x->at;
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
    CHECK_MPI(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_FLOAT, x->buf, cnt, disp, MPI_FLOAT, g->ecomm));
    memcpy(at, disp, sizeof(int) * (size_t)n);
    for (int64_t i = 0; i < n_slots; i++) {
        int s = owner_of(idx[i], g->n_experts, n);
        memcpy(eo + i * D, x->buf + at[s], (size_t)D * sizeof(float));
        at[s] += D;
    }
}
