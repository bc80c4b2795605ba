// progress.c - prompts, tokens/s and ETA on stderr; a rewritten line on a terminal, a line every
// 10 s otherwise.
#define _POSIX_C_SOURCE 200809L // defines: clock_gettime, isatty, fileno
#include "harvest/harvest.h"

#include <stdio.h>
#include <time.h>
#include <unistd.h>

double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void progress_init(struct progress *p, bool quiet, int64_t total, int64_t total_tokens,
                   int64_t start, int64_t start_tokens) {
    p->quiet = quiet;
    p->tty = isatty(fileno(stderr));
    p->t0 = p->last = now_seconds();
    p->total = total;
    p->total_tokens = total_tokens;
    p->start = start;
    p->start_tokens = start_tokens;
}

void progress_update(struct progress *p, int64_t done, int64_t done_tokens, bool final) {
    if (p->quiet) return;
    double t = now_seconds();
    if (!final && t - p->last < (p->tty ? 0.5 : 10.0)) return;
    p->last = t;
    double el = t - p->t0, tok = (double)(done_tokens - p->start_tokens);
    double rate = el > 0 ? tok / el : 0.0;
    double left = (double)(p->total_tokens - done_tokens);
    int eta = rate > 0 ? (int)(left / rate + 0.5) : 0;
    fprintf(stderr,
            "%s[harvest] %lld/%lld prompts  %lld/%lld tokens  %.0f tok/s  ETA %d:%02d:%02d%s",
            p->tty ? "\r" : "", (long long)done, (long long)p->total, (long long)done_tokens,
            (long long)p->total_tokens, rate, eta / 3600, eta / 60 % 60, eta % 60,
            p->tty && !final ? "   " : "\n");
    fflush(stderr);
}
