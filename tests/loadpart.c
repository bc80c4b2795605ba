// loadpart.c - a helper of test_loadpart.py (not a test itself): what model_load and model_check
// (harvest/load.c) read of a checkpoint for one rank's part of the model.
//
//   loadpart MODEL_DIR B0 B1 EMBED HEAD SHARD N_SHARDS < NAMES
//
// Loads MODEL_DIR as `harvest run` does (every tensor bound from the headers alone), prints
// "bound NAME" for each bound tensor, then makes every page wholly inside the tensors NAMES lists
// (one a line: those the test finds outside the part by their names) unreadable (PROT_NONE), and
// checks the part (model_check): reading any of those pages kills the process with SIGSEGV. Then
// it prints "waiting NAME" for each tensor model_check left unchecked, and "pages P" (the pages
// made unreadable). Exit 0, or 1 with the error of a refused load or check.
#define _DEFAULT_SOURCE // defines: mprotect, sysconf
#include "harvest/harvest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

// the pages wholly inside tensor `name` of m's files made unreadable; their count
static long protect(const struct model *m, const char *name) {
    uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    for (int f = 0; f < m->md.n_files; f++) {
        const struct st_tensor *t = st_find(&m->md.files[f], name);
        if (!t) continue;
        uintptr_t a = (uintptr_t)t->data, lo = (a + pg - 1) / pg * pg,
                  hi = (a + t->nbytes) / pg * pg;
        if (hi <= lo) return 0;
        if (mprotect((void *)lo, hi - lo, PROT_NONE) != 0) {
            perror("mprotect");
            exit(2);
        }
        return (long)((hi - lo) / pg);
    }
    fprintf(stderr, "loadpart: no tensor \"%s\" in the files\n", name);
    exit(2);
}

int main(int argc, char **argv) {
    if (argc != 8) {
        fprintf(stderr, "usage: loadpart MODEL_DIR B0 B1 EMBED HEAD SHARD N_SHARDS < NAMES\n");
        return 2;
    }
    struct model m;
    struct ah_error err = {0};
    struct model_part none = {.n_shards = 1};
    struct model_part part = {atoi(argv[2]),      atoi(argv[3]), atoi(argv[4]) != 0,
                              atoi(argv[5]) != 0, atoi(argv[6]), atoi(argv[7])};
    if (model_load(&m, argv[1], true, &none, &err) < 0) {
        fprintf(stderr, "loadpart: %s\n", err.msg);
        return 1;
    }
    for (int i = 0; i < m.n_later; i++)
        printf("bound %s\n", m.later[i].name);
    long pages = 0;
    char line[512];
    while (fgets(line, sizeof line, stdin)) {
        line[strcspn(line, "\n")] = 0;
        if (line[0]) pages += protect(&m, line);
    }
    fflush(stdout);
    int rc = model_check(&m, &part, &err);
    if (rc < 0) fprintf(stderr, "loadpart: %s\n", err.msg);
    for (int i = 0; rc == 0 && i < m.n_later; i++)
        printf("waiting %s\n", m.later[i].name);
    printf("pages %ld\n", pages);
    model_free(&m); // munmap takes the unreadable pages as well
    return rc < 0 ? 1 : 0;
}
