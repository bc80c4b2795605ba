// report.c - how every subcommand ends: its error on stderr and the exit code (harvest.h).
#include "harvest/harvest.h"

#include <stdio.h>

int report(int rc, const struct ah_error *err) {
    if (rc >= 0) return 0;
    if (err && err->msg[0])
        fprintf(stderr, "harvest: %s\n", err->msg);
    else
        fprintf(stderr, "harvest: %s\n", ah_strerror(rc));
    return ah_exit_code(rc);
}
