// blascheck.c - the BLAS kernel check of `run` and `bench` (see blascheck.h).
#define _POSIX_C_SOURCE 200809L // defines: setenv, unsetenv
#include "harvest/blascheck.h"

#include <cblas.h> // defines: cblas_sgemm, openblas_get_corename, openblas_get_config
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h> // defines: __get_cpuid, __get_cpuid_count
#endif

// Environment of the re-executed process: the core harvest chose, and OpenBLAS's own choice.
#define ENV_CHOSEN   "HARVEST_BLAS_CHOSEN"
#define ENV_DETECTED "HARVEST_BLAS_DETECTED"
#define ENV_FAILED   "HARVEST_BLAS_FAILED"
// test hooks: make the self-check fail; take OpenBLAS's choice to be this core (so that the
// selection and its failure path are tested on any CPU with AVX2)
#define ENV_FAULT     "HARVEST_BLAS_SELFCHECK_FAULT"
#define ENV_ASSUME    "HARVEST_BLAS_ASSUME_CORE"
#define SELFCHECK_TOL 1e-5

static char described[256];

// ----------------------------------------------------------------------------
// the CPU

#if defined(__x86_64__) || defined(__i386__)
static uint64_t xgetbv0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

struct cpu_isa cpu_isa_detect(void) {
    struct cpu_isa c = {0};
    unsigned a, b, cx, d;
    if (!__get_cpuid(0, &a, &b, &cx, &d)) return c;
    char vendor[13] = {0};
    memcpy(vendor, &b, 4), memcpy(vendor + 4, &d, 4), memcpy(vendor + 8, &cx, 4);
    c.amd = !strcmp(vendor, "AuthenticAMD") || !strcmp(vendor, "HygonGenuine");
    unsigned max = a;
    if (max < 7 || !__get_cpuid(1, &a, &b, &cx, &d)) return c;
    bool fma = cx & (1u << 12), osxsave = cx & (1u << 27), avx = cx & (1u << 28);
    if (!osxsave || !avx) return c;
    uint64_t xcr0 = xgetbv0();
    bool ymm = (xcr0 & 0x6) == 0x6, zmm = (xcr0 & 0xe6) == 0xe6;
    __get_cpuid_count(7, 0, &a, &b, &cx, &d);
    bool avx2 = b & (1u << 5);
    const unsigned avx512 = (1u << 16) | (1u << 17) | (1u << 28) | (1u << 30) | (1u << 31);
    c.avx2_fma = ymm && avx2 && fma;
    c.avx512 = c.avx2_fma && zmm && (b & avx512) == avx512;
    return c;
}
#else
struct cpu_isa cpu_isa_detect(void) {
    return (struct cpu_isa){0};
}
#endif

// ----------------------------------------------------------------------------
// OpenBLAS's cores (0.3.21's DYNAMIC_ARCH names) by the widest vectors their kernels use

static const struct {
    const char *name;
    int level; // 1 SSE, 2 AVX, 3 AVX2 + FMA, 4 AVX-512
} cores[] = {
    {"Katmai", 1},       {"Coppermine", 1},     {"Northwood", 1},  {"Prescott", 1},
    {"Banias", 1},       {"Atom", 1},           {"Core2", 1},      {"Penryn", 1},
    {"Dunnington", 1},   {"Nehalem", 1},        {"Athlon", 1},     {"Opteron", 1},
    {"Opteron_SSE3", 1}, {"Barcelona", 1},      {"Nano", 1},       {"Bobcat", 1},
    {"Sandybridge", 2},  {"Bulldozer", 2},      {"Piledriver", 2}, {"Steamroller", 2},
    {"Excavator", 2},    {"Haswell", 3},        {"Zen", 3},        {"SkylakeX", 4},
    {"Cooperlake", 4},   {"SapphireRapids", 4},
};

const char *blas_better_core(const char *core, struct cpu_isa isa) {
    int have = -1, can = isa.avx512 ? 4 : isa.avx2_fma ? 3 : 0;
    for (size_t i = 0; core && i < sizeof cores / sizeof *cores; i++)
        if (!strcasecmp(core, cores[i].name)) have = cores[i].level;
    if (have < 0 || have >= can) return NULL; // a core harvest does not know, or right already
    return can == 4 ? "SkylakeX" : isa.amd ? "Zen" : "Haswell";
}

// ----------------------------------------------------------------------------
// the self-check

static double check_one(int M, int N, int K, bool trans, bool fault) {
    float *a = malloc(sizeof(float) * (size_t)(M * K + N * K + M * N));
    if (!a) return (double)INFINITY;
    float *b = a + M * K, *c = b + N * K;
    uint32_t s = 12345;
    for (int i = 0; i < M * K + N * K; i++) {
        s = s * 1664525u + 1013904223u;
        a[i] = (float)((s >> 8) / 16777216.0 * 2 - 1);
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, trans ? CblasTrans : CblasNoTrans, M, N, K, 1.0f, a, K,
                b, trans ? K : N, 0.0f, c, N);
    if (fault) c[(M / 2) * N + N / 3] += 0.5f;
    double worst = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double ref = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                double x = a[i * K + k], y = trans ? b[j * K + k] : b[k * N + j];
                ref += x * y, mag += fabs(x * y);
            }
            double e = fabs((double)c[i * N + j] - ref) / (mag > 0 ? mag : 1);
            if (isnan(e)) e = (double)INFINITY;
            if (e > worst) worst = e;
        }
    free(a);
    return worst;
}

double blas_selfcheck(bool fault) {
    double e1 = check_one(67, 45, 129, true, fault), e2 = check_one(33, 70, 96, false, false);
    return e1 > e2 ? e1 : e2;
}

// ----------------------------------------------------------------------------
// the re-exec

static void reexec(char **argv, const char *core, const char *chosen, const char *detected) {
    setenv("OPENBLAS_CORETYPE", core, 1);
    setenv(ENV_CHOSEN, chosen, 1);
    setenv(ENV_DETECTED, detected, 1);
    fflush(NULL);
    execv("/proc/self/exe", argv);
    fprintf(stderr,
            "harvest: warning: cannot re-execute itself for OpenBLAS core %s (%s); running "
            "%s\n",
            core, strerror(errno), openblas_get_corename());
    unsetenv("OPENBLAS_CORETYPE");
}

void blas_select(char **argv) {
    const char *user = getenv("OPENBLAS_CORETYPE"), *chosen = getenv(ENV_CHOSEN);
    const char *detected = getenv(ENV_DETECTED), *core = openblas_get_corename();
    bool fault = getenv(ENV_FAULT) && *getenv(ENV_FAULT);
    if (chosen && detected && !strcmp(chosen, "-")) { // back on OpenBLAS's choice after a failure
        const char *failed = getenv(ENV_FAILED);
        snprintf(described, sizeof described,
                 "core %s (OpenBLAS's choice; %s failed harvest's check)", core,
                 failed ? failed : "the chosen core");
        return;
    }
    if (chosen && detected) { // the re-executed process: is it the core asked for, and right?
        double e = strcasecmp(core, chosen) ? (double)INFINITY : blas_selfcheck(fault);
        if (e <= SELFCHECK_TOL) {
            snprintf(described, sizeof described,
                     "core %s (harvest's choice for this CPU; OpenBLAS chose %s)", core, detected);
            return;
        }
        fprintf(stderr,
                "harvest: warning: OpenBLAS core %s (asked for %s) failed harvest's sgemm "
                "check (relative error %.3g); running OpenBLAS's own choice, %s\n",
                core, chosen, e, detected);
        setenv(ENV_FAILED, chosen, 1);
        reexec(argv, detected, "-", detected);
        return;
    }
    struct cpu_isa isa = cpu_isa_detect();
    if (user && *user) { // kept; the line says when the CPU has wider kernels than it
        if (blas_better_core(core, isa))
            snprintf(described, sizeof described,
                     "core %s (OPENBLAS_CORETYPE=%s; the CPU has %s: unset it for faster kernels)",
                     core, user, isa.avx512 ? "AVX-512" : "AVX2 and FMA");
        else
            snprintf(described, sizeof described, "core %s (OPENBLAS_CORETYPE=%s)", core, user);
        return;
    }
    const char *assume = getenv(ENV_ASSUME);
    if (assume && *assume) core = assume;
    const char *better = blas_better_core(core, isa);
    if (better) reexec(argv, better, better, core);
    snprintf(described, sizeof described, "core %s (OpenBLAS's choice)", core);
}

const char *blas_describe(void) {
    static char line[512];
    const char *cfg = openblas_get_config(), *sp = strchr(cfg, ' ');
    sp = sp ? strchr(sp + 1, ' ') : NULL; // "OpenBLAS 0.3.21 NO_LAPACKE ..." -> "OpenBLAS 0.3.21"
    int n = sp ? (int)(sp - cfg) : (int)strlen(cfg);
    if (!described[0]) snprintf(described, sizeof described, "core %s", openblas_get_corename());
    snprintf(line, sizeof line, "%.*s, %s", n, cfg, described);
    return line;
}
