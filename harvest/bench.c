// bench.c - `harvest bench` (written below)
#include "harvest/harvest.h"

#include <stdio.h>

int cmd_bench(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "harvest: bench is not written yet\n");
    return 2;
}
