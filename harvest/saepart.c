// saepart.c - one batch partial of an SAE of "saes" (see saepart.h).
#include "harvest/saepart.h"

#include <string.h>

void saepart_dims(struct sdims *z, int64_t D, int64_t C, int64_t N) {
    z->D = D, z->C = C, z->N = N;
    z->cnt = 0, z->sum = D, z->sq = 2 * D, z->max = 3 * D, z->hist = 4 * D;
    z->ntok = 5 * D + 1, z->sse = z->ntok + 1, z->sx = z->sse + 1, z->sxx = z->sx + C;
    z->nex = z->sxx + C, z->exo = z->nex + D;
    z->L = z->exo + 1;
}

void saepart_reset(const struct sdims *z, double *p) {
    memset(p, 0, (size_t)z->L * sizeof *p);
}

// exemplar (v, pos) into latent j's sorted list (at most N) of partial p, whose exemplar table
// is ex (D, N, 2): larger value first, then the smaller position
void saepart_ex_add(const struct sdims *z, double *p, double *tab, int64_t j, double v,
                    double pos) {
    double *n_ex = p + z->nex + j, *ex = tab + 2 * z->N * j;
    int64_t n = (int64_t)*n_ex, N = z->N;
#define EX_BEFORE(a) (v > (a)[0] || (v == (a)[0] && pos < (a)[1]))
    if (n == N && !EX_BEFORE(ex + 2 * (N - 1))) return;
    int64_t at = n < N ? n : N - 1;
    while (at > 0 && EX_BEFORE(ex + 2 * (at - 1))) {
        ex[2 * at] = ex[2 * (at - 1)], ex[2 * at + 1] = ex[2 * (at - 1) + 1];
        at--;
    }
#undef EX_BEFORE
    ex[2 * at] = v, ex[2 * at + 1] = pos;
    if (n < N) *n_ex = (double)(n + 1);
}

// one token: its activation x (C), reconstruction y (C) and code (n entries idx, val)
void saepart_token(const struct sdims *z, double *p, double *tab, int64_t pos, const float *x,
                   const float *y, const int32_t *idx, const float *val, int64_t n) {
    int64_t l0 = 0;
    for (int64_t e = 0; e < n; e++) {
        double v = (double)val[e];
        if (!(v > 0)) continue;
        int64_t j = idx[e];
        l0++;
        p[z->cnt + j] += 1;
        p[z->sum + j] += v;
        p[z->sq + j] += v * v;
        if (v > p[z->max + j]) p[z->max + j] = v;
        saepart_ex_add(z, p, tab, j, v, (double)pos);
    }
    p[z->hist + l0] += 1;
    p[z->ntok] += 1;
    double sse = 0;
    for (int64_t f = 0; f < z->C; f++) {
        double xf = (double)x[f], r = xf - (double)y[f];
        sse += r * r;
        p[z->sx + f] += xf;
        p[z->sxx + f] += xf * xf;
    }
    p[z->sse] += sse;
}

// the exemplars of partial p (table tab) packed into out (2 x their number); returns the number
int64_t saepart_ex_pack(const struct sdims *z, const double *p, const double *tab, double *out) {
    int64_t n = 0;
    for (int64_t j = 0; j < z->D; j++) {
        int64_t m = (int64_t)p[z->nex + j];
        memcpy(out + 2 * n, tab + 2 * z->N * j, (size_t)(2 * m) * sizeof *out);
        n += m;
    }
    return n;
}

// exemplars held by partial p
int64_t saepart_ex_count(const struct sdims *z, const double *p) {
    int64_t n = 0;
    for (int64_t j = 0; j < z->D; j++)
        n += (int64_t)p[z->nex + j];
    return n;
}

// total (table tex) += part (its exemplars packed in pex), in this order (the merge of batch
// partials, batch after batch)
void saepart_merge(const struct sdims *z, double *total, double *tex, const double *part,
                   const double *pex) {
    for (int64_t j = 0; j < z->D; j++) {
        total[z->cnt + j] += part[z->cnt + j];
        total[z->sum + j] += part[z->sum + j];
        total[z->sq + j] += part[z->sq + j];
        if (part[z->max + j] > total[z->max + j]) total[z->max + j] = part[z->max + j];
    }
    for (int64_t k = 0; k <= z->D + 2; k++) // the histogram, n_tok and sse
        total[z->hist + k] += part[z->hist + k];
    for (int64_t f = 0; f < 2 * z->C; f++) // sum_x, sum_xx
        total[z->sx + f] += part[z->sx + f];
    for (int64_t j = 0; j < z->D; j++)
        for (int64_t e = 0; e < (int64_t)part[z->nex + j]; e++, pex += 2)
            saepart_ex_add(z, total, tex, j, pex[0], pex[1]);
}
