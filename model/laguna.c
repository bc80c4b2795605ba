// laguna.c - Laguna configuration counts (see laguna.h; shared/docs/laguna-forward.md section 6:
//   params = 2 V D + D
//          + sum_i [ D H_i Dh + 2 D KV Dh + H_i Dh D + G_i D + 2 Dh + 2 D ]   G_i = H_i or H_i Dh
//          + sum_dense 3 D I_d + sum_moe [ E D + E + 3 E D I_e + 3 D I_s ] )
#include "model/laguna.h"

#include <stdlib.h>
#include <string.h>

void laguna_config_free(struct laguna_config *c) {
    free(c->n_head);
    free(c->sliding);
    free(c->dense);
    memset(c, 0, sizeof *c);
}

static int64_t attn_params(const struct laguna_config *c, int i) {
    int64_t D = c->hidden, Dh = c->head_dim, H = c->n_head[i], KV = c->n_kv_head;
    int64_t gate_rows = c->gate_per_element ? H * Dh : H;
    return D * H * Dh + 2 * D * KV * Dh + H * Dh * D + gate_rows * D + 2 * Dh + 2 * D;
}

int64_t laguna_layer_params(const struct laguna_config *c, int i, bool experts) {
    int64_t D = c->hidden, E = c->n_expert;
    if (experts) return c->dense[i] ? 0 : 3 * E * D * c->expert_ffn;
    if (c->dense[i]) return attn_params(c, i) + 3 * D * c->dense_ffn;
    return attn_params(c, i) + E * D + E + 3 * D * c->shared_ffn; // router, bias, shared expert
}

int64_t laguna_outer_params(const struct laguna_config *c) {
    return 2 * (int64_t)c->vocab * c->hidden + c->hidden;
}

int64_t laguna_params(const struct laguna_config *c) {
    int64_t n = laguna_outer_params(c);
    for (int i = 0; i < c->n_layer; i++)
        n += laguna_layer_params(c, i, false) + laguna_layer_params(c, i, true);
    return n;
}

int64_t laguna_layer_bytes(const struct laguna_config *c, int i, bool experts) {
    int64_t b = 2 * laguna_layer_params(c, i, experts);
    if (!experts && !c->dense[i]) b += 2 * (int64_t)c->n_expert; // the F32 bias: 4 bytes, not 2
    return b;
}

int64_t laguna_bytes(const struct laguna_config *c) {
    int64_t b = 2 * laguna_outer_params(c);
    for (int i = 0; i < c->n_layer; i++)
        b += laguna_layer_bytes(c, i, false) + laguna_layer_bytes(c, i, true);
    return b;
}

double laguna_layer_flops(const struct laguna_config *c, int i) {
    double D = c->hidden, active = (double)attn_params(c, i);
    if (c->dense[i])
        active += 3 * D * c->dense_ffn;
    else
        active += D * c->n_expert + 3 * D * c->expert_ffn * c->top_k + 3 * D * c->shared_ffn;
    return 2.0 * active;
}
