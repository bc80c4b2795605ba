// alias_dump.c - the alias table (model/aliases.h) for one family, for tests/test_aliases.py to
// compare with the reference tests/ref/hf/aliases.py on every family, including those harvest
// has no model of yet.
//   alias_dump FAMILY resolve < NAMES   one line a name: "NAME\tCANONICAL", "NAME\t-" (no alias)
//                                       or "NAME\t!REASON" (an alias the family refuses)
//   alias_dump FAMILY of < NAMES        one line a catalogue name: "NAME\tALIAS\tALIAS..."
#include "model/aliases.h"

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc != 3 || (strcmp(argv[2], "resolve") && strcmp(argv[2], "of"))) {
        fprintf(stderr, "usage: alias_dump FAMILY resolve|of < NAMES\n");
        return 2;
    }
    char line[512], out[512];
    while (fgets(line, sizeof line, stdin)) {
        line[strcspn(line, "\n")] = '\0';
        printf("%s", line);
        if (!strcmp(argv[2], "of")) {
            for (int k = 0; alias_of(argv[1], line, k, out, sizeof out); k++)
                printf("\t%s", out);
        } else {
            int r = alias_resolve(argv[1], line, out, sizeof out);
            printf("\t%s%s", r < 0 ? "!" : "", r == 0 ? "-" : out);
        }
        printf("\n");
    }
    return 0;
}
