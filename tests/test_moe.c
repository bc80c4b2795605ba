// test_moe.c - model/moe.h: the grouping of slots by expert, and the experts run over threads
// against one thread running them one after another (the definition: each token's weighted
// outputs added in expert order) - bit for bit at 1 and 2 threads, in runs of experts that do not
// fit the buffers at once, and split into expert shards summed by moe_sum_slots; and the sum
// against float64.
#include "model/moe.h"
#include "model/ops.h"
#include "tests/check.h"

#include <cblas.h> // defines: openblas_set_num_threads
#include <stdlib.h>
#include <string.h>

enum { N = 300, K = 3, E = 7, D = 64, IE = 32 };

static uint16_t wg[E][IE * D], wu[E][IE * D], wd[E][D * IE];

static uint16_t bf16_of(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16);
}

static float rnd(unsigned *s) {
    *s = *s * 1103515245u + 12345u;
    return (float)((*s >> 8) & 0xffff) / 65536.0f - 0.5f;
}

static void ffn(const void *u, int64_t e, int64_t n, const float *xe, float *ge, float *ue,
                float *ye, float *panel) {
    (void)u;
    op_matmul_bf16(ge, xe, wg[e], (int)n, D, IE, panel);
    op_matmul_bf16(ue, xe, wu[e], (int)n, D, IE, panel);
    op_swiglu(ue, ge, ue, n * IE);
    op_matmul_bf16(ye, ue, wd[e], (int)n, IE, D, panel);
}

// float64 of expert e on one row
static void ffn_ref(int e, const float *x, double *y) {
    double h[IE];
    for (int i = 0; i < IE; i++) {
        double g = 0, u = 0;
        for (int d = 0; d < D; d++) {
            g += (double)op_bf16(wg[e][i * D + d]) * (double)x[d];
            u += (double)op_bf16(wu[e][i * D + d]) * (double)x[d];
        }
        h[i] = g / (1.0 + exp(-g)) * u;
    }
    for (int d = 0; d < D; d++) {
        y[d] = 0;
        for (int i = 0; i < IE; i++)
            y[d] += (double)op_bf16(wd[e][d * IE + i]) * h[i];
    }
}

static float xn[N * D], wts[N * K], xe[N * D], ge[N * IE], ue[N * IE], ye[N * D];
static int64_t idx[N * K];
static int order[N * K], start[2 * E + 1];

static struct moe_experts setup(float *routed, float *eo, float *panels, int threads, int e0,
                                int e1) {
    struct moe_experts x = {N,     K,  D,  IE, E,  e0,     e1, xn,     idx,     wts, order,
                            start, xe, ge, ue, ye, routed, eo, panels, threads, ffn, NULL};
    moe_group(&x);
    return x;
}

// the definition: experts one after another, each token's outputs added in expert order
static void serial(float *routed, float *panel) {
    memset(routed, 0, sizeof(float) * N * D);
    for (int e = 0; e < E; e++) {
        int n = 0, tok[N];
        float w[N];
        for (int t = 0; t < N; t++)
            for (int j = 0; j < K; j++)
                if (idx[t * K + j] == e) {
                    tok[n] = t, w[n] = wts[t * K + j];
                    memcpy(xe + n * D, xn + t * D, sizeof(float) * D);
                    n++;
                }
        if (n) ffn(NULL, e, n, xe, ge, ue, ye, panel);
        for (int r = 0; r < n; r++)
            for (int d = 0; d < D; d++)
                routed[tok[r] * D + d] += w[r] * ye[r * D + d];
    }
}

int main(void) {
    openblas_set_num_threads(1); // the definition: one thread, one sgemm after another
    unsigned s = 7;
    for (int e = 0; e < E; e++)
        for (int i = 0; i < IE * D; i++) {
            wg[e][i] = bf16_of(rnd(&s) * 0.5f);
            wu[e][i] = bf16_of(rnd(&s) * 0.5f);
            wd[e][i] = bf16_of(rnd(&s) * 0.5f);
        }
    for (int i = 0; i < N * D; i++)
        xn[i] = rnd(&s) * 4.0f;
    // three distinct experts a token, not in expert order (so the order of the sum matters);
    // expert 6 gets no token
    for (int t = 0; t < N; t++) {
        int a = (t * 7 + t / 3) % 6, b = (a + 1 + t % 3) % 6, c = (b + 1 + t % 2) % 6;
        c = c == a ? (c + 1) % 6 : c;
        c = c == b ? (c + 1) % 6 : c;
        idx[t * K] = a, idx[t * K + 1] = b, idx[t * K + 2] = c;
        for (int j = 0; j < K; j++)
            wts[t * K + j] = 0.3f + rnd(&s) * 0.2f;
    }
    int64_t P = moe_panel_floats(D, IE);
    float *panels = malloc(sizeof(float) * 2 * P), *want = malloc(sizeof(float) * N * D);
    float *got = malloc(sizeof(float) * N * D), *eo = malloc(sizeof(float) * N * K * D);
    float *eo2 = malloc(sizeof(float) * N * K * D);

    // grouping: every slot once, experts ascending, token order within an expert
    struct moe_experts x = setup(got, NULL, panels, 1, 0, E);
    CHECK_EQ(start[0], 0);
    CHECK_EQ(start[E], N * K);
    CHECK_EQ(start[E] - start[E - 1], 0);
    for (int e = 0; e < E; e++)
        for (int i = start[e]; i < start[e + 1]; i++) {
            CHECK_EQ(idx[order[i]], e);
            if (i > start[e]) CHECK(order[i] > order[i - 1]);
        }

    serial(want, panels);
    for (int threads = 1; threads <= 2; threads++) {
        op_set_threads(threads);
        memset(got, 0, sizeof(float) * N * D);
        x = setup(got, eo, panels, threads, 0, E);
        moe_run(&x);
        CHECK(memcmp(got, want, sizeof(float) * N * D) == 0);
        for (int t = 0; t < N; t++) // eo: each slot's weighted output
            for (int j = 0; j < K; j++) {
                double y[D];
                ffn_ref((int)idx[t * K + j], xn + t * D, y);
                for (int d = 0; d < D; d++) {
                    double r = (double)wts[t * K + j] * y[d];
                    CHECK(fabs((double)eo[(t * K + j) * D + d] - r) <= 1e-5 + 1e-5 * fabs(r));
                }
            }
        // expert shards [0, 3) and [3, 7): eo only, then summed in expert order
        memset(eo2, 0, sizeof(float) * N * K * D);
        x = setup(NULL, eo2, panels, threads, 0, 3);
        moe_run(&x);
        x = setup(NULL, eo2, panels, threads, 3, E);
        moe_run(&x);
        CHECK(memcmp(eo2, eo, sizeof(float) * N * K * D) == 0);
        memset(got, 0, sizeof(float) * N * D);
        moe_sum_slots(got, eo2, idx, N, K, D);
        CHECK(memcmp(got, want, sizeof(float) * N * D) == 0);
    }
    // the sum against float64
    double worst = 0, scale = 0; // the largest error against the largest value
    for (int t = 0; t < N; t++) {
        double acc[D] = {0}, y[D];
        for (int j = 0; j < K; j++) {
            ffn_ref((int)idx[t * K + j], xn + t * D, y);
            for (int d = 0; d < D; d++)
                acc[d] += (double)wts[t * K + j] * y[d];
        }
        for (int d = 0; d < D; d++) {
            double err = fabs((double)want[t * D + d] - acc[d]);
            worst = err > worst ? err : worst;
            scale = fabs(acc[d]) > scale ? fabs(acc[d]) : scale;
        }
    }
    if (!(worst <= 1e-6 * scale)) fprintf(stderr, "max error %g, scale %g\n", worst, scale);
    CHECK(worst <= 1e-6 * scale);
    free(panels), free(want), free(got), free(eo), free(eo2);
    return check_failures ? EXIT_FAILURE : EXIT_SUCCESS;
}
