// plan.c - `harvest plan MODEL_DIR_OR_CONFIG [--pipeline-stages S] [--expert-parallel E]`:
// what a model is and what it needs, from config.json alone: parameters, bytes as published, and
// the weights each rank holds for a pipeline/expert split. Stages are cut as `run` cuts them:
// contiguous layers balanced by per-token work.
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

static int plan_laguna(const struct modeldir *md, int S, int E, struct ah_error *err) {
    struct laguna_config c;
    int rc = laguna_config_read(md, &c, err);
    if (rc < 0) return rc;
    int L = c.n_layer, n_sliding = 0, n_dense = 0;
    for (int i = 0; i < L; i++) {
        n_sliding += c.sliding[i];
        n_dense += c.dense[i];
    }
    if (S > L || c.n_expert % E) {
        rc = ah_fail(err, AH_EINVAL,
                     "plan: %d stages for %d layers, %d expert shards for %d experts (stages at "
                     "most the layers, shards must divide the experts)",
                     S, L, E, c.n_expert);
        laguna_config_free(&c);
        return rc;
    }
    char a[40], b[40];
    printf("%s: LagunaForCausalLM, %d layers (%d full + %d sliding-window attention, %d dense + "
           "%d MoE), hidden %d, vocab %d, %d experts (top %d)\n",
           md->config_path, L, L - n_sliding, n_sliding, n_dense, L - n_dense, c.hidden, c.vocab,
           c.n_expert, c.top_k);
    printf("parameters: %s\n", commas(laguna_params(&c), a));
    printf("bytes: %s (%.2f GiB) as published: BF16, the selection bias F32\n",
           commas(laguna_bytes(&c), b), gib(laguna_bytes(&c)));

    double *cost = malloc((size_t)L * sizeof *cost);
    int *cut = malloc(((size_t)S + 1) * sizeof *cut);
    if (!cost || !cut) {
        free(cost);
        free(cut);
        laguna_config_free(&c);
        return -AH_ENOMEM;
    }
    for (int i = 0; i < L; i++)
        cost[i] = laguna_layer_flops(&c, i);
    plan_partition(cost, L, S, cut);
    printf("split: %d pipeline stage%s x %d expert shard%s = %d ranks a replica\n", S,
           S > 1 ? "s" : "", E, E > 1 ? "s" : "", S * E);
    int64_t peak = 0;
    for (int s = 0; s < S; s++) {
        int64_t shared = 0, experts = 0;
        for (int i = cut[s]; i < cut[s + 1]; i++) {
            shared += laguna_layer_bytes(&c, i, false);
            experts += laguna_layer_bytes(&c, i, true);
        }
        // embed_tokens on the first stage; the final norm and lm_head on the last
        if (s == 0) shared += 2 * (int64_t)c.vocab * c.hidden;
        if (s == S - 1) shared += 2 * ((int64_t)c.vocab * c.hidden + c.hidden);
        int64_t rank = shared + experts / E;
        peak = rank > peak ? rank : peak;
        printf("  stage %d: layers %d-%d, %.2f GiB a rank (%.2f GiB attention, dense MLP, router, "
               "shared experts%s + %.2f GiB routed experts / %d)\n",
               s, cut[s], cut[s + 1] - 1, gib(rank), gib(shared),
               s == 0 && s == S - 1 ? ", embeddings, lm_head"
               : s == 0             ? ", embeddings"
               : s == S - 1         ? ", lm_head"
                                    : "",
               gib(experts), E);
    }
    printf("weights a rank at most: %.2f GiB (%s bytes, held as BF16)\n", gib(peak),
           commas(peak, a));
    free(cost);
    free(cut);
    laguna_config_free(&c);
    return 0;
}

int cmd_plan(int argc, char **argv) {
    const char *path = NULL;
    int S = 1, E = 1;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--pipeline-stages") && i + 1 < argc)
            S = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--expert-parallel") && i + 1 < argc)
            E = atoi(argv[++i]);
        else if (argv[i][0] != '-' && !path)
            path = argv[i];
        else
            path = NULL, i = argc;
    }
    if (!path || S < 1 || E < 1) {
        fprintf(stderr, "usage: harvest plan MODEL_DIR_OR_CONFIG [--pipeline-stages S] "
                        "[--expert-parallel E]\n");
        return 1;
    }
    // config.json alone: a .json path, or DIR/config.json (the weights are not needed)
    struct modeldir md;
    struct ah_error err = {0};
    int rc = md_open(&md, path, true, &err);
    if (rc < 0) return report(rc, &err);
    if (model_is_laguna(&md)) {
        rc = plan_laguna(&md, S, E, &err);
    } else {
        // the spec model: its tensors, from the family's list
        struct encdec tmp;
        struct model_tensor *list = NULL;
        struct encdec_config ec;
        if ((rc = model_config_encdec(&md, &ec, &err)) == 0 &&
            (rc = encdec_init(&tmp, &ec, &list)) >= 0) {
            int64_t n = 0;
            for (int i = 0; i < rc; i++)
                n += list[i].shape[0] * (list[i].ndim == 2 ? list[i].shape[1] : 1);
            char a[40], b[40];
            printf("%s: causal-encoder-decoder, %d blocks\nparameters: %s\nbytes: %s as float32\n",
                   md.config_path, ec.n_layer_enc + ec.n_layer_dec, commas(n, a), commas(4 * n, b));
            free(list);
            encdec_free(&tmp);
            rc = 0;
        }
    }
    md_close(&md);
    return report(rc, &err);
}
