// statscmd.c - `harvest stats OUT.h5`: recomputes the per-feature statistics of a finished output
// and stores them in its master (io/h5stats.h), or prints the stored ones (--print).
#include "harvest/harvest.h"
#include "io/h5stats.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char stats_usage[] =
    "usage: harvest stats OUT.h5 [--names GLOB[,GLOB...]]... [--quiet]\n"
    "       harvest stats OUT.h5 --print [GLOB] [--top K]\n";

int cmd_stats(int argc, char **argv) {
    const char *path = NULL, *print_glob = NULL;
    bool quiet = false, print = false;
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
        } else if (!strcmp(argv[i], "--top") && i + 1 < argc) {
            char *end;
            top = (int)strtol(argv[++i], &end, 10);
            bad = *end || top < 0 || top > 1000;
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
    if (bad || !path) {
        fputs(stats_usage, stderr);
        rc = 1;
    } else if (print) {
        rc = report(h5stats_print(path, print_glob, top, stdout, &err), &err);
    } else {
        rc = report(h5stats_recompute(path, globs, n_globs, quiet ? NULL : stderr, &err), &err);
    }
    for (int i = 0; i < n_lists; i++)
        free(lists[i]);
    return rc;
}
