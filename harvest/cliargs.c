// cliargs.c - see cliargs.h.
#include "harvest/cliargs.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int needs_value(const char *cmd, const char *flag) {
    fprintf(stderr, "harvest %s: %s needs a value\n", cmd, flag);
    return -1;
}

// the value as a message shows it: "" when empty
static const char *shown(const char *v) {
    return v[0] ? v : "\"\"";
}

// a number's first character: strtod/strtoll skip spaces and take "nan", "inf" and hex, which no
// flag means
static int plain_number(const char *v) {
    if (strpbrk(v, "xX")) return 0;
    return isdigit((unsigned char)v[0]) || ((v[0] == '-' || v[0] == '+' || v[0] == '.') && v[1]);
}

int cli_int(const char *cmd, const char *flag, const char *v, int64_t lo, int64_t hi,
            int64_t *out) {
    if (!v) return needs_value(cmd, flag);
    char *end = NULL;
    errno = 0;
    long long n = plain_number(v) ? strtoll(v, &end, 10) : 0;
    if (!end || end == v || *end || errno || n < lo || n > hi) {
        fprintf(stderr, "harvest %s: %s %s: expected an integer from %lld to %lld\n", cmd, flag,
                shown(v), (long long)lo, (long long)hi);
        return -1;
    }
    *out = n;
    return 0;
}

int cli_int32(const char *cmd, const char *flag, const char *v, int lo, int hi, int *out) {
    int64_t n;
    if (cli_int(cmd, flag, v, lo, hi, &n) < 0) return -1;
    *out = (int)n;
    return 0;
}

// n bytes in the largest unit that divides it: "64M", "1T", "1000"
static const char *bytes_text(int64_t n, char *buf, size_t len) {
    int u = 0;
    while (u < 4 && n >= 1024 && n % 1024 == 0)
        n /= 1024, u++;
    snprintf(buf, len, "%lld%s", (long long)n,
             u ? (const char *[]){"K", "M", "G", "T"}[u - 1] : "");
    return buf;
}

int cli_size(const char *cmd, const char *flag, const char *v, int64_t lo, int64_t hi,
             int64_t *out) {
    if (!v) return needs_value(cmd, flag);
    char *end = NULL;
    errno = 0;
    double x = plain_number(v) && v[0] != '-' ? strtod(v, &end) : -1.0;
    const char *units = "KMGT", *u = end && *end ? strchr(units, toupper((unsigned char)*end)) : 0;
    if (u) x = ldexp(x, 10 * (int)(u - units + 1)), end++;
    if (!end || end == v || *end || errno || !(x >= (double)lo && x < (double)hi + 1.0)) {
        char a[32], b[32];
        fprintf(stderr,
                "harvest %s: %s %s: expected bytes from %s to %s (e.g. 512M, 2G; K, M, G, T "
                "are powers of 1024)\n",
                cmd, flag, shown(v), bytes_text(lo, a, sizeof a), bytes_text(hi, b, sizeof b));
        return -1;
    }
    int64_t n = (int64_t)x;
    *out = n > hi ? hi : n; // x < hi + 1 (a double near 2^63 rounds)
    return 0;
}

int cli_fraction(const char *cmd, const char *flag, const char *v, double lo, double hi,
                 double *out) {
    if (!v) return needs_value(cmd, flag);
    char *end = NULL;
    errno = 0;
    double x = plain_number(v) ? strtod(v, &end) : 0.0;
    if (!end || end == v || *end || errno || !(x >= lo && x < hi)) {
        fprintf(stderr, "harvest %s: %s %s: expected a number from %g up to (not including) %g\n",
                cmd, flag, v, lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}

const char *cli_value(const char *cmd, int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        needs_value(cmd, argv[*i]);
        return NULL;
    }
    return argv[++*i];
}
