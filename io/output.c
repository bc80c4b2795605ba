// output.c - see output.h: the choice of format (the parts folder's paths are io/out_parts.c's).
#include "io/output.h"

#include <stdlib.h>

const struct out_ops *out_format(const char *out_path) {
    (void)out_path; // one format today
    return &out_hdf5;
}

void out_peek_free(struct out_peek *pk) {
    free(pk->job);
    free(pk->compute_dtype);
    pk->job = pk->compute_dtype = NULL;
}
