// main.c - harvest's command line: dispatches to the subcommands, owns MPI init/finalize.
//
// Only harvest/ ends the process. Every subcommand returns its exit code: 0 done, 1 bad input,
// 2 system failure, 3 stopped by a signal (resume with --resume).
#include "harvest/blascheck.h"
#include "harvest/harvest.h"

#include <mpi.h>
#include <stdio.h>
#include <string.h>

static const char usage_text[] =
    "usage: harvest COMMAND ...\n"
    "  run JOB.json [--resume | --overwrite] [--quiet]   harvest activations into HDF5\n"
    "  activations MODEL_DIR [GLOB] [--json] [--aliases] list the named activations (or aliases)\n"
    "  inspect OUT.h5 [--text P [--tokenizer PATH]]     summarise an output file\n"
    "  stats OUT.h5 [--names GLOB,..] [--quiet] | --print [GLOB]  per-feature statistics\n"
    "  tokenize MODEL_DIR_OR_TOKENIZER FILE... [--decode] text <-> token ids (JSON Lines)\n"
    "  plan MODEL_DIR_OR_CONFIG [--pipeline-stages S] [--expert-parallel E]\n"
    "                                                   parameters, bytes, weights a rank\n"
    "  init-model --family F [--preset NAME | --config CONFIG.json --layers N] [--seed N]\n"
    "             [--dtype f32|f16|bf16] [--shards N] OUT_DIR  write a random-weight checkpoint\n"
    "  init-sae --layout saelens|sparsify|gemmascope --arch relu|jumprelu|topk|batchtopk\n"
    "           --d-in N --d-sae M [--k K] [--dtype f32|bf16] [--seed S] [--overwrite] OUT_DIR\n"
    "                                                   write a random SAE\n"
    "  bench [--prompts N] [--T N] [--batch N] [--dir DIR]  forward and HDF5 throughput\n"
    "  export OUT.h5 --shards DIR [--names N1,N2] [--dtype D] [--shard-tokens N] [--seed S]\n"
    "         [--val FRACTION] [--allow-partial] [--quiet]  shuffled training shards\n"
    "  export OUT.h5 --probe DIR [--names N1,N2] [--pool last,mean]  pooled rows + fields\n"
    "  report OUT.h5 -o REPORT.html [--prompts P,..] [--quiet]  a page of plots of an output\n";

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        fputs(usage_text, argc < 2 ? stderr : stdout);
        return argc < 2 ? 1 : 0;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "activations")) return cmd_activations(argc - 2, argv + 2);
    if (!strcmp(cmd, "inspect")) return cmd_inspect(argc - 2, argv + 2);
    if (!strcmp(cmd, "init-model")) return cmd_init_model(argc - 2, argv + 2);
    if (!strcmp(cmd, "init-sae")) return cmd_init_sae(argc - 2, argv + 2);
    if (!strcmp(cmd, "plan")) return cmd_plan(argc - 2, argv + 2);
    if (!strcmp(cmd, "tokenize")) return cmd_tokenize(argc - 2, argv + 2);
    if (!strcmp(cmd, "stats")) return cmd_stats(argc - 2, argv + 2);
    if (!strcmp(cmd, "export")) return cmd_export(argc - 2, argv + 2);
    if (!strcmp(cmd, "report")) return cmd_report(argc - 2, argv + 2);
    if (strcmp(cmd, "run") && strcmp(cmd, "bench")) {
        fprintf(stderr, "harvest: unknown command \"%s\"\n%s", cmd, usage_text);
        return 1;
    }
    blas_select(argv); // OpenBLAS fell back to a generic core: re-exec with the right one
    if (!strcmp(cmd, "run")) harvest_catch_stops();
    // REQUIRED: run and bench are MPI programs (mpirun -np N, srun --mpi=pmix, or a singleton)
    if (MPI_Init(&argc, &argv) != MPI_SUCCESS) {
        fprintf(stderr, "harvest: MPI_Init failed\n");
        return 2;
    }
    int code = !strcmp(cmd, "run") ? cmd_run(argc - 2, argv + 2) : cmd_bench(argc - 2, argv + 2);
    MPI_Finalize();
    return code;
}
