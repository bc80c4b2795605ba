// output.c - see output.h: what every output format shares (the parts folder's paths, the choice
// of format).
#include "io/output.h"

#include <stdio.h>
#include <stdlib.h>

void out_parts_path(char *buf, size_t n, const char *out_path, const char *leaf) {
    snprintf(buf, n, "%s.parts%s%s", out_path, leaf ? "/" : "", leaf ? leaf : "");
}

const struct out_ops *out_format(const char *out_path) {
    (void)out_path; // one format today
    return &out_hdf5;
}

void out_peek_free(struct out_peek *pk) {
    free(pk->job);
    free(pk->compute_dtype);
    pk->job = pk->compute_dtype = NULL;
}
