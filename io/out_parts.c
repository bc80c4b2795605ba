// out_parts.c - see output.h: every path inside an output's parts folder (OUT.parts/LEAF). A file
// of its own, below the formats that use it and the table that chooses them (no call cycle).
#include "io/output.h"

#include <stdio.h>

void out_parts_path(char *buf, size_t n, const char *out_path, const char *leaf) {
    snprintf(buf, n, "%s.parts%s%s", out_path, leaf ? "/" : "", leaf ? leaf : "");
}
