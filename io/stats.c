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
