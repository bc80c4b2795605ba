// test_blascheck.c - harvest/blascheck.c's pure parts: which OpenBLAS core replaces which on what
// CPU, and the sgemm self-check (a working kernel passes; one wrong element fails it).
#include "harvest/blascheck.h"
#include "tests/check.h"

#include <stdlib.h>
#include <string.h>

static int same(const char *a, const char *b) {
    return (!a && !b) || (a && b && !strcmp(a, b));
}

int main(void) {
    const struct cpu_isa none = {0}, avx2 = {true, false, false}, avx2_amd = {true, false, true},
                         avx512 = {true, true, false}, avx512_amd = {true, true, true};
    const struct {
        const char *core;
        struct cpu_isa isa;
        const char *want;
    } cases[] = {
        {"Prescott", avx512, "SkylakeX"}, // Debian's 0.3.21 on a 5th-generation Xeon
        {"prescott", avx512, "SkylakeX"}, // names compare without case, as OpenBLAS's do
        {"Core2", avx2, "Haswell"},
        {"Nehalem", avx2_amd, "Zen"},
        {"Sandybridge", avx2, "Haswell"},
        {"Haswell", avx512, "SkylakeX"},
        {"Zen", avx512_amd, "SkylakeX"},
        {"Haswell", avx2, NULL},
        {"Zen", avx2_amd, NULL},
        {"SkylakeX", avx512, NULL},
        {"Cooperlake", avx512, NULL},
        {"Prescott", none, NULL}, // nothing better to run
        {"ARMV8", avx512, NULL},
        {"", avx512, NULL}, // cores harvest does not know
        {NULL, avx512, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *got = blas_better_core(cases[i].core, cases[i].isa);
        if (!same(got, cases[i].want)) {
            fprintf(stderr, "case %zu: %s -> %s, want %s\n", i, cases[i].core ? cases[i].core : "-",
                    got ? got : "(keep)", cases[i].want ? cases[i].want : "(keep)");
            check_failures++;
        }
    }
    double ok = blas_selfcheck(false), bad = blas_selfcheck(true);
    printf("self-check: %.3g (working), %.3g (one element off by 0.5)\n", ok, bad);
    CHECK(ok <= 1e-6);
    CHECK(bad > 1e-3);
    struct cpu_isa here = cpu_isa_detect();
    CHECK(!here.avx512 || here.avx2_fma); // AVX-512 implies AVX2 + FMA in what harvest detects
    return check_failures ? EXIT_FAILURE : EXIT_SUCCESS;
}
