// statscmd.c - `harvest stats OUT.h5`: recomputes the per-feature statistics of a finished output
// and stores them in its master (io/h5stats.h), or prints the stored ones (--print).
#include "harvest/cliargs.h"
#include "harvest/harvest.h"
#include "io/h5stats.h"
#include "io/outlock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char stats_usage[] =
    "usage: harvest stats OUT.h5 [--names GLOB[,GLOB...]]... [--quiet]\n"
    "       harvest stats OUT.h5 --print [GLOB] [--top K]\n";

// stats reads the output and writes /stats into its master, its one output by design: the master
// must not also be one of the files the activations are read from (OUT.tokens, a file in
// OUT.parts/, e.g. hard-linked), which the write would change under the reading. -AH_EINVAL.
static int check_master(const char *path, struct ah_error *err) {
    char **in = NULL;
    int n = 0;
    if (outlock_output_files(path, &in, &n) < 0) return ah_fail(err, AH_ENOMEM, "out of memory");
    // in[0] is the master itself, in[2] the parts folder
    const char *hit = outlock_input_at(path, false, (const char *const *)in + 1, n - 1);
    int rc = hit ? ah_fail(err, AH_EINVAL,
                           "%s: stats writes /stats into this master, and it is also %s, a file "
                           "the output's activations are read from; copy the master to a file "
                           "of its own",
                           path, hit)
                 : 0;
    outlock_files_free(in, n);
    return rc;
}

int cmd_stats(int argc, char **argv) {
    const char *path = NULL, *print_glob = NULL;
    bool quiet = false, print = false, top_given = false;
    int top = 5, n_globs = 0;
    const char *globs[64];
    char *lists[64];
    int n_lists = 0, bad = argc == 0;
    for (int i = 0; i < argc && !bad; i++) {
        if (!strcmp(argv[i], "--quiet")) {
            quiet = true;
        } else if (!strcmp(argv[i], "--print")) {
            print = true;
            if (i + 1 < argc && argv[i + 1][0] != '-') print_glob = argv[++i];
        } else if (!strcmp(argv[i], "--top")) {
            bad = cli_int32("stats", "--top", i + 1 < argc ? argv[++i] : NULL, 0, 1000, &top) < 0;
            top_given = true;
        } else if (!strcmp(argv[i], "--names") && i + 1 < argc && n_lists < 64) {
            char *s = lists[n_lists++] = malloc(strlen(argv[++i]) + 1);
            if (!s) return report(-AH_ENOMEM, NULL);
            strcpy(s, argv[i]);
            for (char *t = strtok(s, ","); t && n_globs < 64; t = strtok(NULL, ","))
                globs[n_globs++] = t;
        } else if (argv[i][0] != '-' && !path) {
            path = argv[i];
        } else {
            bad = 1;
        }
    }
    int rc = 0;
    struct ah_error err = {0};
    const char *wrong = print && n_lists
                            ? "--names: not an option of --print (give a GLOB after it)"
                        : !print && top_given ? "--top: an option of --print only"
                                              : NULL;
    if (!bad && wrong) fprintf(stderr, "harvest stats: %s\n", wrong);
    if (bad || !path || wrong) {
        fputs(stats_usage, stderr);
        rc = 1;
    } else if (print) {
        rc = report(h5stats_print(path, print_glob, top, stdout, &err), &err);
    } else {
        rc = check_master(path, &err);
        if (rc == 0) rc = h5stats_recompute(path, globs, n_globs, quiet ? NULL : stderr, &err);
        rc = report(rc, &err);
    }
    for (int i = 0; i < n_lists; i++)
        free(lists[i]);
    return rc;
}
