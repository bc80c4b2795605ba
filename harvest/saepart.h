// saepart.h - one batch partial of an SAE of "saes" (harvest/saes.c): its per-latent
// statistics, metrics and exemplars, accumulated token by token and merged batch after batch.
// Internal to harvest/.
//
// A partial is a row of L = 6D + 4 + 2C doubles (D = d_sae, C = d_in, N = top_n):
//   count (D), sum (D), sum_sq (D), max (D), l0_hist (D + 1), n_tok, sse, sum_x (C),
//   sum_xx (C), n_ex (D), ex_off
// and its exemplars, packed: latent after latent, its n_ex (value, position) pairs, largest
// first (ex_off: where they start in the segment's exemplar table, set as it is written). A
// batch's exemplars are at most min(entries of the batch, D x N), so a held batch costs
// 8 (6D + 2C + 4) bytes and 16 bytes an exemplar, not 16 D N (the batch in hand, and the total of
// the final merge, keep the full (D, N) table). Counts and positions are exact as doubles
// (below 2^53).
#ifndef AH_SAEPART_H
#define AH_SAEPART_H

#include <stdint.h>

struct sdims {
    int64_t D, C, N, L;
    int64_t cnt, sum, sq, max, hist, ntok, sse, sx, sxx, nex, exo; // offsets in a partial
};

// the offsets of a partial of d_sae D, d_in C, top_n N
void saepart_dims(struct sdims *z, int64_t D, int64_t C, int64_t N);
// p (L) zeroed: a batch begins (no exemplar held)
void saepart_reset(const struct sdims *z, double *p);

// exemplar (v, pos) into latent j's sorted list (at most N) of partial p, whose exemplar table
// is ex (D, N, 2): larger value first, then the smaller position
void saepart_ex_add(const struct sdims *z, double *p, double *tab, int64_t j, double v, double pos);

// one token: its activation x (C), reconstruction y (C) and code (n entries idx, val)
void saepart_token(const struct sdims *z, double *p, double *tab, int64_t pos, const float *x,
                   const float *y, const int32_t *idx, const float *val, int64_t n);

// the exemplars of partial p (table tab) packed into out (2 x their number); returns the number
int64_t saepart_ex_pack(const struct sdims *z, const double *p, const double *tab, double *out);

// exemplars held by partial p
int64_t saepart_ex_count(const struct sdims *z, const double *p);

// total (table tex) += part (its exemplars packed in pex), in this order (the merge of batch
// partials, batch after batch)
void saepart_merge(const struct sdims *z, double *total, double *tex, const double *part,
                   const double *pex);

#endif
