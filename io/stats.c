// stats.c - see stats.h. F = n_features.
#include "io/stats.h"

#include "model/ah.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define STATS_TAG 20261201.0 // first double of a packed partial

int stats_init(struct stats *s, int64_t n_features) {
    memset(s, 0, sizeof *s);
    AH_ASSERT(n_features >= 1);
    size_t n = (size_t)n_features;
    s->n_features = n_features;
    s->mean = malloc(n * sizeof(double));
    s->m2 = malloc(n * sizeof(double));
    s->min = malloc(n * sizeof(double));
    s->max = malloc(n * sizeof(double));
    if (!s->mean || !s->m2 || !s->min || !s->max) return -AH_ENOMEM;
    stats_reset(s);
    return 0;
}

void stats_free(struct stats *s) {
    free(s->mean);
    free(s->m2);
    free(s->min);
    free(s->max);
    memset(s, 0, sizeof *s);
}

void stats_reset(struct stats *s) {
    s->count = s->nonfinite = 0;
    s->norm_mean = s->norm_m2 = 0.0;
    for (int64_t j = 0; j < s->n_features; j++) {
        s->mean[j] = s->m2[j] = 0.0;
        s->min[j] = (double)INFINITY;
        s->max[j] = -(double)INFINITY;
    }
}

// Welford's update of one row x (F) that is known to be finite; inv = 1 / count (count already
// incremented). Each feature's operations are independent of the others', so the loop vectorises
// without changing a bit (restrict: the four arrays are distinct).
static void add_row(struct stats *s, const float *restrict x, double inv, double norm) {
    double *restrict mean = s->mean, *restrict m2 = s->m2;
    double *restrict mn = s->min, *restrict mx = s->max;
    for (int64_t j = 0; j < s->n_features; j++) {
        double v = (double)x[j];
        double d = v - mean[j];
        mean[j] += d * inv;
        m2[j] += d * (v - mean[j]);
        mn[j] = v < mn[j] ? v : mn[j];
        mx[j] = v > mx[j] ? v : mx[j];
    }
    double d = norm - s->norm_mean;
    s->norm_mean += d * inv;
    s->norm_m2 += d * (norm - s->norm_mean);
}

void stats_add_rows(struct stats *s, const float *rows, int64_t n_rows) {
    const int64_t F = s->n_features;
    for (int64_t r = 0; r < n_rows; r++) {
        const float *x = rows + r * F;
        // squared norm in float64: a float's square cannot overflow a double, so the sum is
        // non-finite exactly when an element is NaN or infinite
        double ss = 0.0;
        for (int64_t j = 0; j < F; j++)
            ss += (double)x[j] * (double)x[j];
        if (!isfinite(ss)) {
            s->nonfinite++;
            continue;
        }
        s->count++;
        add_row(s, x, 1.0 / (double)s->count, sqrt(ss));
    }
}

void stats_merge(struct stats *dst, const struct stats *src) {
    AH_ASSERT(dst->n_features == src->n_features);
    const int64_t F = dst->n_features;
    dst->nonfinite += src->nonfinite;
    if (src->count == 0) return;
    if (dst->count == 0) { // exact copy, so a fold from empty starts with the first partial
        size_t b = (size_t)F * sizeof(double);
        memcpy(dst->mean, src->mean, b);
        memcpy(dst->m2, src->m2, b);
        memcpy(dst->min, src->min, b);
        memcpy(dst->max, src->max, b);
        dst->count = src->count;
        dst->norm_mean = src->norm_mean;
        dst->norm_m2 = src->norm_m2;
        return;
    }
    // Chan et al.: n = na + nb, delta = mean_b - mean_a,
    // mean = mean_a + delta nb / n, M2 = M2_a + M2_b + delta^2 na nb / n
    const double na = (double)dst->count, nb = (double)src->count, n = na + nb;
    const double wb = nb / n, wab = na * nb / n;
    for (int64_t j = 0; j < F; j++) {
        double d = src->mean[j] - dst->mean[j];
        dst->mean[j] += d * wb;
        dst->m2[j] += src->m2[j] + d * d * wab;
        if (src->min[j] < dst->min[j]) dst->min[j] = src->min[j];
        if (src->max[j] > dst->max[j]) dst->max[j] = src->max[j];
    }
    double d = src->norm_mean - dst->norm_mean;
    dst->norm_mean += d * wb;
    dst->norm_m2 += src->norm_m2 + d * d * wab;
    dst->count += src->count;
}

void stats_var(const struct stats *s, double *var) {
    for (int64_t j = 0; j < s->n_features; j++)
        var[j] = s->count ? s->m2[j] / (double)s->count : (double)NAN;
}

double stats_norm_var(const struct stats *s) {
    return s->count ? s->norm_m2 / (double)s->count : (double)NAN;
}

// ---------------------------------------------------------------------------------------------
// serialisation

int64_t stats_buf_len(int64_t n_features) {
    return 6 + 4 * n_features;
}

void stats_pack(const struct stats *s, double *buf) {
    const int64_t F = s->n_features;
    buf[0] = STATS_TAG;
    buf[1] = (double)F;
    buf[2] = (double)s->count;
    buf[3] = (double)s->nonfinite;
    buf[4] = s->norm_mean;
    buf[5] = s->norm_m2;
    size_t b = (size_t)F * sizeof(double);
    memcpy(buf + 6, s->mean, b);
    memcpy(buf + 6 + F, s->m2, b);
    memcpy(buf + 6 + 2 * F, s->min, b);
    memcpy(buf + 6 + 3 * F, s->max, b);
}

int stats_unpack(struct stats *s, const double *buf, int64_t len) {
    const int64_t F = s->n_features;
    if (len != stats_buf_len(F) || buf[0] != STATS_TAG || buf[1] != (double)F || !(buf[2] >= 0) ||
        !(buf[3] >= 0) || buf[2] > 0x1p53 || buf[3] > 0x1p53 || buf[2] != floor(buf[2]) ||
        buf[3] != floor(buf[3]))
        return -AH_EFORMAT;
    s->count = (int64_t)buf[2];
    s->nonfinite = (int64_t)buf[3];
    s->norm_mean = buf[4];
    s->norm_m2 = buf[5];
    size_t b = (size_t)F * sizeof(double);
    memcpy(s->mean, buf + 6, b);
    memcpy(s->m2, buf + 6 + F, b);
    memcpy(s->min, buf + 6 + 2 * F, b);
    memcpy(s->max, buf + 6 + 3 * F, b);
    return 0;
}

// ---------------------------------------------------------------------------------------------
// in-order merging of batch partials

int stats_fold_init(struct stats_fold *f, int n_sets, const int64_t *n_features) {
    memset(f, 0, sizeof *f);
    AH_ASSERT(n_sets >= 1);
    f->total = calloc((size_t)n_sets, sizeof *f->total);
    f->tmp = calloc((size_t)n_sets, sizeof *f->tmp);
    if (!f->total || !f->tmp) return -AH_ENOMEM;
    f->n_sets = n_sets;
    for (int i = 0; i < n_sets; i++) {
        if (stats_init(&f->total[i], n_features[i]) < 0 ||
            stats_init(&f->tmp[i], n_features[i]) < 0)
            return -AH_ENOMEM;
        f->batch_len += stats_buf_len(n_features[i]);
    }
    return 0;
}

void stats_fold_free(struct stats_fold *f) {
    for (int i = 0; i < f->n_sets; i++) {
        if (f->total) stats_free(&f->total[i]);
        if (f->tmp) stats_free(&f->tmp[i]);
    }
    free(f->total);
    free(f->tmp);
    free(f->early_batch);
    free(f->early);
    memset(f, 0, sizeof *f);
}

void stats_fold_pack_batch(const struct stats_fold *f, const struct stats *parts, double *buf) {
    for (int i = 0; i < f->n_sets; i++) {
        AH_ASSERT(parts[i].n_features == f->total[i].n_features);
        stats_pack(&parts[i], buf);
        buf += stats_buf_len(parts[i].n_features);
    }
}

// merges one batch's packed partials into the totals
static int fold_merge(struct stats_fold *f, const double *buf) {
    for (int i = 0; i < f->n_sets; i++) {
        int64_t n = stats_buf_len(f->tmp[i].n_features);
        if (stats_unpack(&f->tmp[i], buf, n) < 0) return -AH_EFORMAT;
        buf += n;
    }
    for (int i = 0; i < f->n_sets; i++)
        stats_merge(&f->total[i], &f->tmp[i]);
    return 0;
}

// keeps batch k's partials until the batches before it are in
static int fold_keep(struct stats_fold *f, int64_t batch, const double *buf) {
    const double *b0 = buf;
    for (int i = 0; i < f->n_sets; i++) { // a bad buffer is refused now, not when its turn comes
        int64_t n = stats_buf_len(f->tmp[i].n_features);
        if (stats_unpack(&f->tmp[i], b0, n) < 0) return -AH_EFORMAT;
        b0 += n;
    }
    int64_t at = 0;
    while (at < f->n_early && f->early_batch[at] < batch)
        at++;
    if (at < f->n_early && f->early_batch[at] == batch) return -AH_EINVAL;
    if (f->n_early == f->cap) {
        int64_t cap = f->cap ? 2 * f->cap : 8;
        int64_t *b = realloc(f->early_batch, (size_t)cap * sizeof *b);
        if (b) f->early_batch = b;
        double *e = b ? realloc(f->early, (size_t)(cap * f->batch_len) * sizeof *e) : NULL;
        if (!e) return -AH_ENOMEM;
        f->early = e;
        f->cap = cap;
    }
    size_t row = (size_t)f->batch_len * sizeof(double);
    memmove(f->early + (at + 1) * f->batch_len, f->early + at * f->batch_len,
            (size_t)(f->n_early - at) * row);
    memmove(f->early_batch + at + 1, f->early_batch + at,
            (size_t)(f->n_early - at) * sizeof(int64_t));
    memcpy(f->early + at * f->batch_len, buf, row);
    f->early_batch[at] = batch;
    f->n_early++;
    return 0;
}

int stats_fold_add(struct stats_fold *f, int64_t batch, const double *buf) {
    if (batch < f->next) return -AH_EINVAL;
    int rc = batch > f->next ? fold_keep(f, batch, buf) : fold_merge(f, buf);
    if (rc < 0 || batch > f->next) return rc;
    f->next++;
    int64_t k = 0; // then the early batches that now follow on
    while (k < f->n_early && f->early_batch[k] == f->next) {
        if ((rc = fold_merge(f, f->early + k * f->batch_len)) < 0) return rc;
        f->next++, k++;
    }
    if (k == 0) return 0;
    memmove(f->early, f->early + k * f->batch_len,
            (size_t)((f->n_early - k) * f->batch_len) * sizeof(double));
    memmove(f->early_batch, f->early_batch + k, (size_t)(f->n_early - k) * sizeof(int64_t));
    f->n_early -= k;
    return 0;
}

int64_t stats_fold_state_len(const struct stats_fold *f) {
    return 2 + f->n_early + (1 + f->n_early) * f->batch_len;
}

void stats_fold_pack_state(const struct stats_fold *f, double *buf) {
    buf[0] = (double)f->next;
    buf[1] = (double)f->n_early;
    for (int64_t k = 0; k < f->n_early; k++)
        buf[2 + k] = (double)f->early_batch[k];
    double *t = buf + 2 + f->n_early;
    stats_fold_pack_batch(f, f->total, t);
    if (f->n_early)
        memcpy(t + f->batch_len, f->early, (size_t)(f->n_early * f->batch_len) * sizeof(double));
}

int stats_fold_unpack_state(struct stats_fold *f, const double *buf, int64_t len) {
    for (int i = 0; i < f->n_sets; i++)
        stats_reset(&f->total[i]);
    f->next = f->n_early = 0;
    if (len < 2 || !(buf[0] >= 0) || !(buf[1] >= 0) || buf[0] > 0x1p53 || buf[1] > 0x1p40 ||
        buf[0] != floor(buf[0]) || buf[1] != floor(buf[1]))
        return -AH_EFORMAT;
    int64_t next = (int64_t)buf[0], n_early = (int64_t)buf[1];
    if (len != 2 + n_early + (1 + n_early) * f->batch_len) return -AH_EFORMAT;
    const double *t = buf + 2 + n_early;
    int rc = fold_merge(f, t); // into the empty totals: an exact copy
    for (int64_t k = 0; rc == 0 && k < n_early; k++) {
        double b = buf[2 + k];
        if (!(b > (double)next) || b != floor(b) || (k && !(b > buf[1 + k])))
            rc = -AH_EFORMAT;
        else
            rc = fold_keep(f, (int64_t)b, t + (1 + k) * f->batch_len);
    }
    if (rc == 0) f->next = next;
    if (rc < 0) { // back to empty
        for (int i = 0; i < f->n_sets; i++)
            stats_reset(&f->total[i]);
        f->n_early = 0;
    }
    return rc == -AH_ENOMEM ? rc : rc < 0 ? -AH_EFORMAT : 0;
}
