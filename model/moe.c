// moe.c - experts over threads (see moe.h).
#include "model/moe.h"

#include "model/ah.h"
#include "model/ops.h"

#include <math.h>
#include <string.h>

void moe_group(const struct moe_experts *x) {
    int64_t E = x->E, n = x->N * x->k;
    int *start = x->start, *fill = x->start + E + 1; // (E) next free place of each expert
    memset(start, 0, (size_t)(E + 1) * sizeof *start);
    for (int64_t i = 0; i < n; i++)
        start[x->idx[i] + 1]++;
    for (int64_t e = 0; e < E; e++)
        start[e + 1] += start[e];
    memcpy(fill, start, (size_t)E * sizeof *fill);
    for (int64_t i = 0; i < n; i++)
        x->order[fill[x->idx[i]]++] = (int)i;
}

int64_t moe_panel_floats(int64_t D, int64_t Ie) {
    int64_t a = op_bf16_panel_floats((int)D, (int)Ie), b = op_bf16_panel_floats((int)Ie, (int)D);
    return a > b ? a : b;
}

// experts [e, ce) whose rows [start[e], start[ce]) sit at the top of the buffers
static void run_chunk(const struct moe_experts *x, int64_t e, int64_t ce, int nt) {
    int64_t D = x->D, Ie = x->Ie, k = x->k, r0 = x->start[e], rows = x->start[ce] - r0;
    int64_t P = moe_panel_floats(D, Ie);
#pragma omp parallel for num_threads(nt) if (nt > 1 && rows * D >= OP_PAR_MIN) schedule(static)
    for (int64_t r = 0; r < rows; r++)
        memcpy(x->xe + r * D, x->xn + (x->order[r0 + r] / k) * D, (size_t)D * sizeof(float));
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(dynamic, 1)
    for (int64_t q = e; q < ce; q++) {
        int64_t o = x->start[q] - r0, n = x->start[q + 1] - x->start[q];
        if (n > 0)
            x->ffn(x->u, q, n, x->xe + o * D, x->ge + o * Ie, x->ue + o * Ie, x->ye + o * D,
                   x->panels ? x->panels + op_thread_id() * P : NULL);
    }
    // each thread a range of columns: every (token, column) gets its slots in expert order
#pragma omp parallel for num_threads(nt) if (nt > 1 && rows * D >= OP_PAR_MIN) schedule(static)
    for (int p = 0; p < nt; p++) {
        int64_t d0 = D * p / nt, d1 = D * (p + 1) / nt;
        for (int64_t r = 0; r < rows; r++) {
            int64_t slot = x->order[r0 + r];
            float ww = x->w[slot];
            const float *y = x->ye + r * D;
            float *dst = x->routed ? x->routed + (slot / k) * D : NULL;
            for (int64_t d = d0; dst && d < d1; d++)
                dst[d] += ww * y[d];
            for (int64_t d = d0; x->eo && d < d1; d++)
                x->eo[slot * D + d] = ww * y[d];
        }
    }
}

void moe_run(const struct moe_experts *x) {
    int nt = op_threads() < x->threads ? op_threads() : x->threads;
    AH_ASSERT(nt >= 1);
    int blas = op_blas_serial(nt); // one sgemm a thread
    // runs of consecutive experts filling at most N rows (an expert has at most N: a token picks
    // it once)
    for (int64_t e = x->e0, ce; e < x->e1; e = ce) {
        for (ce = e + 1; ce < x->e1 && x->start[ce + 1] - x->start[e] <= x->N; ce++) {
        }
        run_chunk(x, e, ce, nt);
    }
    op_blas_restore(nt, blas);
}

void moe_forward(struct moe_experts *x, const struct expert_shard *sh, float *routed, float *eo) {
    AH_ASSERT(!sh || eo);
    memset(routed, 0, (size_t)(x->N * x->D) * sizeof(float));
    x->e0 = sh ? sh->e0 : 0;
    x->e1 = sh ? sh->e1 : x->E;
    x->routed = sh ? NULL : routed;
    x->eo = eo;
    moe_group(x);
    moe_run(x);
    if (!sh) return;
    sh->exchange(sh->u, eo, x->idx, x->N * x->k, (int)x->D);
    moe_sum_slots(routed, eo, x->idx, x->N, x->k, x->D);
}

void moe_sum_slots(float *routed, const float *eo, const int64_t *idx, int64_t N, int64_t k,
                   int64_t D) {
#pragma omp parallel for num_threads(op_threads()) if (N * k * D >= OP_PAR_MIN) schedule(static)
    for (int64_t t = 0; t < N; t++) {
        const int64_t *id = idx + t * k;
        for (int64_t done = 0, last = -1; done < k; done++) {
            int64_t j = -1; // the slot of the next larger expert
            for (int64_t q = 0; q < k; q++)
                if (id[q] > last && (j < 0 || id[q] < id[j])) j = q;
            last = id[j];
            for (int64_t d = 0; d < D; d++)
                routed[t * D + d] += eo[(t * k + j) * D + d];
        }
    }
}

// ----------------------------------------------------------------------------
// DeepSeek-V3's group-limited sigmoid router (moe.h)

void moe_topk(const float *x, int n, int k, int64_t *idx) {
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < n; e++) {
            bool taken = false;
            for (int q = 0; q < j; q++)
                taken |= idx[q] == e;
            if (!taken && (best < 0 || x[e] > x[best])) best = e;
        }
        idx[j] = best;
    }
}

// the best entry of x (n) not yet taken (taken[i] true), the lower index on ties
static int best_free(const float *x, int n, const bool *taken) {
    int best = -1;
    for (int i = 0; i < n; i++)
        if (!taken[i] && (best < 0 || x[i] > x[best])) best = i;
    return best;
}

void moe_route_group(const struct moe_group_route *r, const float *z, float *score, float *choice,
                     float *gs, int64_t *idx, float *w) {
    int E = r->E, G = r->n_group, per = E / G;
    bool gtaken[1024], etaken[4096], gsel[1024];
    float masked[4096];
    AH_ASSERT(G <= 1024 && E <= 4096 && per >= 2 && r->topk_group <= G);
    for (int e = 0; e < E; e++) {
        score[e] = (float)(1.0 / (1.0 + exp(-(double)z[e])));
        choice[e] = score[e] + r->bias[e];
    }
    for (int g = 0; g < G; g++) { // the sum of the group's two best choices
        const float *x = choice + g * per;
        int a = 0, b = 1;
        if (x[b] > x[a]) a = 1, b = 0;
        for (int i = 2; i < per; i++)
            if (x[i] > x[a])
                b = a, a = i;
            else if (x[i] > x[b])
                b = i;
        gs[g] = x[a] + x[b];
        gtaken[g] = gsel[g] = false;
    }
    for (int j = 0; j < r->topk_group; j++) {
        int g = best_free(gs, G, gtaken);
        gtaken[g] = gsel[g] = true;
    }
    for (int e = 0; e < E; e++) { // masked_fill(~score_mask, 0.0): what the top k is taken of
        etaken[e] = false;
        masked[e] = gsel[e / per] ? choice[e] : 0.0f;
    }
    float tot = 0.0f;
    for (int j = 0; j < r->k; j++) {
        int e = best_free(masked, E, etaken);
        etaken[e] = true;
        idx[j] = e;
        w[j] = score[e];
        tot += w[j];
    }
    for (int j = 0; j < r->k; j++)
        w[j] = (r->norm ? w[j] / (tot + 1e-20f) : w[j]) * r->scale;
}
