// plan.c - the stage cut `harvest run` and `harvest plan` share, and
// `harvest plan MODEL_DIR_OR_CONFIG [--pipeline-stages S] [--expert-parallel E] [--seq-len T]`:
// what a model is and what it needs, from config.json alone: parameters, bytes as published, and
// the weights each rank holds for a pipeline/expert split, the stages cut as `run` cuts them.
#include "harvest/cliargs.h"
#include "harvest/harvest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// 12345678 -> "12,345,678"
static const char *commas(int64_t v, char *buf) {
    char tmp[32];
    int n = snprintf(tmp, sizeof tmp, "%lld", (long long)v), o = 0;
    for (int i = 0; i < n; i++) {
        buf[o++] = tmp[i];
        if (tmp[i] != '-' && (n - i - 1) % 3 == 0 && i < n - 1) buf[o++] = ',';
    }
    buf[o] = '\0';
    return buf;
}

static double gib(int64_t b) {
    return (double)b / (double)(1ull << 30);
}

// Contiguous blocks [0, n) into `parts` stages minimising the most expensive stage (cost[b]:
// block b's work). best[s][b] = the least maximum over blocks [0, b) in s stages; the last stage
// [c, b) is searched from c = b - 1 down, ties to the larger c. The search stops once the tail
// alone reaches the best found: the tail only grows as c falls (costs are >= 0), so no later c
// can win, and the cut is the one the full search gives.
static int partition(const double *cost, int n, int parts, int *cut) {
    size_t w = (size_t)n + 1;
    double *best = malloc((size_t)(parts + 1) * w * sizeof *best);
    int *arg = malloc((size_t)(parts + 1) * w * sizeof *arg);
    if (!best || !arg) {
        free(best);
        free(arg);
        return -AH_ENOMEM;
    }
    best[w] = 0;
    for (int b = 1; b <= n; b++) // one stage: the sum, added left to right
        best[w + (size_t)b] = best[w + (size_t)b - 1] + cost[b - 1];
    for (int s = 2; s <= parts; s++)
        for (int b = s; b <= n; b++) {
            double *bb = &best[(size_t)s * w + (size_t)b], tail = 0;
            *bb = 1e300;
            for (int c = b - 1; c >= s - 1 && tail < *bb; c--) { // the last stage is [c, b)
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
    return 0;
}

int plan_stage_cut(const struct model *m, int T, bool head, int n_blocks, int parts, int *cut) {
    AH_ASSERT(parts >= 1 && (parts <= n_blocks || (n_blocks == 0 && parts == 1)));
    cut[0] = cut[1] = 0; // no block to run (the embeddings alone): one stage, blocks [0, 0)
    if (n_blocks == 0) return 0;
    // blocks cost their FLOPs at T tokens; the LM head (if run) adds to the last block
    int nb = m->n_blocks;
    double head_flops = head ? model_block_flops(m, nb, T) : 0.0;
    double *cost = malloc((size_t)n_blocks * sizeof *cost);
    if (!cost) return -AH_ENOMEM;
    for (int b = 0; b < n_blocks; b++)
        cost[b] = model_block_flops(m, b, T) + (b == nb - 1 ? head_flops : 0.0);
    int rc = partition(cost, n_blocks, parts, cut);
    free(cost);
    return rc;
}

int plan_max_shards(const struct model *m) {
    int e = model_n_experts(m);
    return e < 1 ? 1 : e < PLAN_MAX_SHARDS ? e : PLAN_MAX_SHARDS;
}

// the family's own lines: what the model is, its parameters and bytes as published (a family
// without a description: its blocks and their float32 bytes)
static void describe(const struct model *m) {
    char a[40], b[40], line[512];
    int64_t params, bytes;
    const char *stored, *kind;
    if (m->fam->describe) {
        m->fam->describe(m->fm, line, sizeof line, &params, &bytes, &stored);
        printf("%s: %s\n", m->md.config_path, line);
        printf("parameters: %s\n", commas(params, a));
        printf("bytes: %s (%.2f GiB) as published: %s\n", commas(bytes, b), gib(bytes), stored);
        return;
    }
    int64_t n = model_stage_bytes(m, 0, m->n_blocks, true, 0, 1, &kind) / 4; // float32, all
    printf("%s: family %s, %d blocks\nparameters: %s\nbytes: %s as float32\n", m->md.config_path,
           m->family, m->n_blocks, commas(n, a), commas(4 * n, b));
}

// the split: each stage's layers and the weights its busiest rank holds
static int split(const struct model *m, int S, int E, int T) {
    int *cut = malloc(((size_t)S + 1) * sizeof *cut), rc;
    if (!cut) return -AH_ENOMEM;
    if ((rc = plan_stage_cut(m, T, true, m->n_blocks, S, cut)) < 0) {
        free(cut);
        return rc;
    }
    printf("split: %d pipeline stage%s x %d expert shard%s = %d ranks a replica (stages cut by "
           "the work of prompts of %d tokens with the LM head, as run cuts them)\n",
           S, S > 1 ? "s" : "", E, E > 1 ? "s" : "", S * E, T);
    int64_t peak = 0;
    const char *kind = "";
    char a[40];
    for (int s = 0; s < S; s++) {
        int64_t rank = 0;
        for (int e = 0; e < E; e++) {
            int64_t b = model_stage_bytes(m, cut[s], cut[s + 1], s == S - 1, e, E, &kind);
            rank = b > rank ? b : rank;
        }
        peak = rank > peak ? rank : peak;
        printf("  stage %d: layers %d-%d, %.2f GiB a rank%s\n", s, cut[s], cut[s + 1] - 1,
               gib(rank),
               s == 0 && s == S - 1 ? " (with the embeddings and lm_head)"
               : s == 0             ? " (with the embeddings)"
               : s == S - 1         ? " (with the final norm and lm_head)"
                                    : "");
    }
    printf("weights a rank at most: %.2f GiB (%s bytes, held as %s)\n", gib(peak), commas(peak, a),
           kind);
    free(cut);
    return 0;
}

int cmd_plan(int argc, char **argv) {
    const char *path = NULL;
    int S = 1, E = 1, T = 4096, bad = 0;
    for (int i = 0; i < argc && !bad; i++) {
        const char *f = argv[i];
        int *v = !strcmp(f, "--pipeline-stages")   ? &S
                 : !strcmp(f, "--expert-parallel") ? &E
                 : !strcmp(f, "--seq-len")         ? &T
                                                   : NULL;
        if (v) // checked against the model below; --seq-len: a prompt's tokens
            bad = cli_int32("plan", f, i + 1 < argc ? argv[++i] : NULL, 1, 1 << 24, v) < 0;
        else if (f[0] != '-' && !path)
            path = f;
        else
            bad = 1, fprintf(stderr, "harvest plan: unexpected \"%s\"\n", f);
    }
    if (!path || bad) {
        fprintf(stderr, "usage: harvest plan MODEL_DIR_OR_CONFIG [--pipeline-stages S] "
                        "[--expert-parallel E] [--seq-len T]\n");
        return 1;
    }
    // config.json alone: a .json path, or DIR/config.json (the weights are not needed)
    struct model m;
    struct ah_error err = {0};
    int rc = model_load(&m, path, false, NULL, &err);
    if (rc < 0) return report(rc, &err);
    if (S > m.n_blocks || E > plan_max_shards(&m))
        rc = ah_fail(&err, AH_EINVAL,
                     "plan: %d stages for %d layers, %d expert shards for %d experts (stages at "
                     "most the layers; expert shards at most the experts and %d, 1 without "
                     "experts)",
                     S, m.n_blocks, E, model_n_experts(&m), PLAN_MAX_SHARDS);
    else
        describe(&m), rc = split(&m, S, E, T);
    model_free(&m);
    return report(rc, &err);
}
