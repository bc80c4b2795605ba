// moe.h - the experts of a mixture-of-experts block, spread over threads, their weighted outputs
// added to each token's sum in expert order (the order one thread running them one after another
// adds them in, so the sum has the same bits whatever the thread count or the schedule).
#ifndef AH_MOE_H
#define AH_MOE_H

#include <stdbool.h>
#include <stdint.h>

// Expert shards (every family with experts): a rank runs experts [e0, e1) of
// every mixture block. Every shard routes every token the same way; exchange() fills in, from the
// other shards, the weighted outputs of the slots (of n_slots = tokens x top_k, idx their experts)
// whose experts this rank does not run. The routed sum then adds each token's slots in expert
// order, as one rank running all experts does, so shards change no bit of the result.
struct expert_shard {
    int e0, e1;
    void (*exchange)(void *u, float *eo, const int64_t *idx, int64_t n_slots, int D);
    void *u;
};

// One block's experts on a batch. The family fills the fields; moe_run runs experts [e0, e1).
struct moe_experts {
    int64_t N, k, D, Ie, E; // tokens, slots a token, hidden size, expert width, experts
    int64_t e0, e1;         // the experts this rank runs
    const float *xn;        // (N, D) the normed stream the experts read
    const int64_t *idx;     // (N, k) each slot's expert
    const float *w;         // (N, k) each slot's weight
    int *order, *start;     // (N k) slots grouped by expert, (2 E + 1) offsets: moe_group fills
    // buffers of N rows holding a run of consecutive experts' rows at a time: their tokens xe
    // (N, D), gate and up ge, ue (N, Ie), outputs ye (N, D)
    float *xe, *ge, *ue, *ye;
    float *routed; // (N, D) the weighted outputs added in expert order (zeroed by the caller), or
                   // NULL (expert shards: only eo)
    float *eo;     // (N, k, D) each slot's weighted output, or NULL
    float *panels; // threads BF16 panels of moe_panel_floats(D, Ie) floats, one a thread, or
                   // NULL (no BF16 expert: ffn gets a NULL panel)
    int threads;   // the most threads to run experts on (the panels' count)
    // expert e's feed-forward on its n rows xe -> ye; ge, ue its (n, Ie) scratch; panel: this
    // thread's BF16 panel. Called from several threads at once, one expert each.
    void (*ffn)(const void *u, int64_t e, int64_t n, const float *xe, float *ge, float *ue,
                float *ye, float *panel);
    const void *u;
};

// The moe_experts of a family's run state s whose buffers have ARENA_MOE's names (model/blocks.h:
// xn, idx, w, order, start, xe, ge, ue, ye) and n_xpanels; panels NULL if no expert is BF16.
#define MOE_EXPERTS(s, N_, k_, D_, Ie_, E_, panels_, ffn_, u_)                                   \
    (struct moe_experts) {                                                                       \
        .N = (N_), .k = (k_), .D = (D_), .Ie = (Ie_), .E = (E_), .xn = (s)->xn, .idx = (s)->idx, \
        .w = (s)->w, .order = (s)->order, .start = (s)->start, .xe = (s)->xe, .ge = (s)->ge,     \
        .ue = (s)->ue, .ye = (s)->ye, .panels = (panels_), .threads = (s)->n_xpanels,            \
        .ffn = (ffn_), .u = (u_)                                                                 \
    }
// A block's experts on x's slots (moe_group, then moe_run): those of shard sh (NULL: all), the
// other shards' slots through its exchange. routed (N, D) gets the weighted outputs added in
// expert order (zeroed first); eo (N, k, D), if not NULL (with a shard it must be), each slot's
// weighted output. Sets x's e0, e1, routed and eo.
void moe_forward(struct moe_experts *x, const struct expert_shard *sh, float *routed, float *eo);
// The slots (token t, j) grouped by expert, token order within an expert: x->order, x->start.
void moe_group(const struct moe_experts *x);
// Runs experts [e0, e1) over min(op_threads(), threads) threads (OpenBLAS on one thread each
// meanwhile), adding w * output into routed and/or storing it in eo.
void moe_run(const struct moe_experts *x);
// Adds each token's k slot outputs eo (N, k, D) to routed (N, D) in expert order (expert shards,
// after the exchange).
void moe_sum_slots(float *routed, const float *eo, const int64_t *idx, int64_t N, int64_t k,
                   int64_t D);
// Floats of one thread's panel: the larger of an (Ie x D) and a (D x Ie) BF16 panel.
int64_t moe_panel_floats(int64_t D, int64_t Ie);

// idx (k) the k largest of x (n), largest first, the lower index on ties (k is small: a scan a
// pick)
void moe_topk(const float *x, int n, int k, int64_t *idx);

// DeepSeek-V3's router on one token (DeepseekV3TopkRouter.forward / get_topk_indices):
// score = sigmoid(z); choice = score + bias (the bias steers the choice only); a group's score is
// the sum of its two best choices; the topk_group best groups keep their choices, the others' are
// 0.0 (masked_fill with 0, not -inf); the k best of those are the experts (largest first, the
// lower index first on ties, groups alike); their weights are their scores, divided by their sum
// + 1e-20 when norm, times scale. Outputs score and choice (E; choice before the mask), gs
// (n_group) the groups' scores, idx and w (k). At most 1024 groups and 4096 experts.
struct moe_group_route {
    int E, k, n_group, topk_group;
    bool norm;
    float scale;
    const float *bias; // (E) e_score_correction_bias
};
void moe_route_group(const struct moe_group_route *r, const float *z, float *score, float *choice,
                     float *gs, int64_t *idx, float *w);

#endif
