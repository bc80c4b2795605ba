// laguna_family.c - Laguna's entry in the family registry (model/family.h): its operations over
// model/laguna.h, and the init-model presets, tiny checkpoints laid out as the releases are (config
// keys, sharded BF16 safetensors + index, per-expert tensors, the F32 selection bias), each
// mirroring one release's structure.
#include "model/ah.h"
#include "model/family.h"
#include "model/laguna.h"

#include <stdio.h>
#include <stdlib.h>

// The gate's granularity follows g_proj's rows (tests/ref/laguna-forward.md A3): H_i Dh rows
// per channel, H_i per head; another row count fails the shape check when the tensor is bound.
static int gate_rows(const struct model_dims *dims, struct laguna_config *c, struct ah_error *err) {
    int64_t sh[2] = {0, 0};
    int rc = dims->dims(dims->u, "model.layers.0.self_attn.g_proj.weight", sh, 2, err);
    if (rc < 0) return rc; // no g_proj: the message names file and tensor
    if (rc == 2 && sh[0] == (int64_t)c->n_head[0] * c->head_dim && c->head_dim > 1)
        c->gate_per_element = true;
    else if (rc == 2 && sh[0] == c->n_head[0])
        c->gate_per_element = false;
    return 0;
}

static int lg_open(void **fm, const struct config *cf, const struct model_dims *dims,
                   struct model_tensor **list, struct ah_error *err) {
    struct laguna_config c;
    struct laguna *m = calloc(1, sizeof *m);
    if (!(*fm = m)) return -AH_ENOMEM;
    int which, rc = laguna_config_read(cf, &c, err);
    if (rc < 0) return rc;
    // Laguna reads no quantization_config (its releases are BF16): a quantized one is refused
    int n = model_quant_method(cf, NULL, &which, err);
    if (n == 0 && dims) n = gate_rows(dims, &c, err);
    if (n == 0) n = laguna_init(m, &c, list);
    laguna_config_free(&c); // zeroed by laguna_init; freed here when it did not run
    return n;
}

static void lg_close(void *fm) {
    if (fm) laguna_free(fm);
    free(fm);
}

static void lg_info(const void *fm, struct model_info *out) {
    const struct laguna_config *c = &((const struct laguna *)fm)->cfg;
    *out = (struct model_info){.n_blocks = c->n_layer,
                               .max_pos = c->max_pos,
                               .vocab = c->vocab,
                               .hidden = c->hidden,
                               .n_experts = c->n_expert,
                               .top_k = c->top_k};
}

static int lg_n_taps(const void *fm) {
    return laguna_n_taps(&((const struct laguna *)fm)->cfg);
}

static void lg_catalogue(const void *fm, struct tap_desc *out) {
    laguna_catalogue(&((const struct laguna *)fm)->cfg, out);
}

static int64_t lg_axis_size(const void *fm, int block, const char *axis) {
    return laguna_axis_size(&((const struct laguna *)fm)->cfg, block, axis);
}

static int lg_state_init(void **fs, const void *fm, int max_T, int64_t max_tokens,
                         const uint8_t *want, const struct expert_shard *shard) {
    struct laguna_state *s = calloc(1, sizeof *s);
    if (!(*fs = s)) return -AH_ENOMEM;
    return laguna_state_init(s, fm, max_T, max_tokens, want, shard);
}

static void lg_state_free(void *fs) {
    if (fs) laguna_state_free(fs);
    free(fs);
}

static void lg_forward(const void *fm, void *fs, const struct mbatch *bt, const struct tap *tp,
                       int blk_begin, int blk_end) {
    laguna_forward(fm, fs, bt, tp, blk_begin, blk_end);
}

static int lg_handoff(void *fs, float **arrays) {
    arrays[0] = ((struct laguna_state *)fs)->x; // the residual stream
    return 1;
}

static double lg_block_flops(const void *fm, int b, int T) {
    return laguna_block_flops(&((const struct laguna *)fm)->cfg, b, T);
}

static int64_t lg_stage_bytes(const void *fm, int b0, int b1, bool head, int shard, int n_shards,
                              const char **kind) {
    const struct laguna_config *c = &((const struct laguna *)fm)->cfg;
    int64_t vd = (int64_t)c->vocab * c->hidden, n = 0, E = c->n_expert;
    int64_t mine = E * (shard + 1) / n_shards - E * shard / n_shards; // experts of the shard
    for (int i = b0; i < b1; i++)
        n += laguna_layer_bytes(c, i, false) + laguna_layer_bytes(c, i, true) * mine / E;
    *kind = "BF16, mapped";
    return n + (b0 == 0 ? 2 * vd : 0) + (head ? 2 * vd + 2 * c->hidden : 0);
}

static void lg_describe(const void *fm, char *line, size_t n, int64_t *params, int64_t *bytes,
                        const char **stored) {
    const struct laguna_config *c = &((const struct laguna *)fm)->cfg;
    int L = c->n_layer, n_sliding = 0, n_dense = 0;
    for (int i = 0; i < L; i++) {
        n_sliding += c->sliding[i];
        n_dense += c->dense[i];
    }
    snprintf(line, n,
             "LagunaForCausalLM, %d layers (%d full + %d sliding-window attention, %d dense + %d "
             "MoE), hidden %d, vocab %d, %d experts (top %d)",
             L, L - n_sliding, n_sliding, n_dense, L - n_dense, c->hidden, c->vocab, c->n_expert,
             c->top_k);
    *params = laguna_params(c);
    *bytes = laguna_bytes(c);
    *stored = "BF16, the selection bias F32";
}

// ---- init-model presets: hidden 64, head_dim 16, vocab 512, 16 experts of width 32, window 8;
// each its release's keys in their order, made of the fragments the releases share
#define LG_HEAD(gating)                                                                    \
    "{\"architectures\": [\"LagunaForCausalLM\"], \"model_type\": \"laguna\", "            \
    "\"attention_bias\": false, \"bos_token_id\": 2, \"eos_token_id\": [2, 24], "          \
    "\"pad_token_id\": 9, \"gating\": " gating ", \"head_dim\": 16, \"hidden_size\": 64, " \
    "\"hidden_act\": \"silu\", \"intermediate_size\": 96, "
#define LG_LAYER_TYPES                                                                     \
    "\"layer_types\": [\"full_attention\", \"sliding_attention\", \"sliding_attention\", " \
    "\"sliding_attention\", \"full_attention\"], "
#define LG_ONE_DENSE \
    "\"mlp_layer_types\": [\"dense\", \"sparse\", \"sparse\", \"sparse\", \"sparse\"], "
#define LG_SPARSE(only) \
    "\"mlp_only_layers\": [" only "], \"decoder_sparse_step\": 1, \"norm_topk_prob\": true, "
#define LG_MOE(scale)                                                              \
    "\"moe_apply_router_weight_on_input\": false, \"moe_intermediate_size\": 32, " \
    "\"moe_routed_scaling_factor\": " scale ", "
#define LG_EXPERTS(top_k)                                                                 \
    "\"num_experts\": 16, \"num_experts_per_tok\": " top_k ", \"num_hidden_layers\": 5, " \
    "\"num_key_value_heads\": 2, "
// rope_parameters: the full layers' YaRN, then (LG_SLIDING) the sliding layers' default RoPE
#define LG_YARN(attn_factor, beta_fast, factor, original, prf)                            \
    "\"rope_parameters\": {\"full_attention\": {\"attention_factor\": " attn_factor ", "  \
    "\"beta_fast\": " beta_fast ", \"beta_slow\": 1, \"factor\": " factor ", "            \
    "\"original_max_position_embeddings\": " original ", \"partial_rotary_factor\": " prf \
    ", \"rope_theta\": 500000, \"rope_type\": \"yarn\"}"
#define LG_SLIDING                                                                    \
    ", \"sliding_attention\": {\"partial_rotary_factor\": 1, \"rope_theta\": 10000, " \
    "\"rope_type\": \"default\"}"
#define LG_TAIL(window)                                                         \
    "\"shared_expert_intermediate_size\": 32, \"sliding_window\": " window ", " \
    "\"tie_word_embeddings\": false, \"torch_dtype\": \"bfloat16\", \"vocab_size\": 512}"

// clang-format off
static const char lg_xs_2_1[] =
    LG_HEAD("\"per-head\"")
    LG_LAYER_TYPES
    "\"max_position_embeddings\": 262144, "
    LG_ONE_DENSE
    LG_SPARSE("0")
    LG_MOE("2.5")
    "\"num_attention_heads\": 6, "
    "\"num_attention_heads_per_layer\": [6, 8, 8, 8, 6], "
    LG_EXPERTS("4")
    "\"rms_norm_eps\": 1e-06, "
    LG_YARN("1.3465735902799727", "64", "32", "8192", "0.5") LG_SLIDING "}, "
    LG_TAIL("8");

static const char lg_xs_2[] =
    LG_HEAD("true")
    LG_LAYER_TYPES
    "\"max_position_embeddings\": 262144, "
    LG_ONE_DENSE
    LG_MOE("2.5")
    "\"num_attention_heads\": 6, "
    "\"num_attention_heads_per_layer\": [6, 8, 8, 8, 6], "
    LG_EXPERTS("4")
    "\"partial_rotary_factor\": 0.5, "
    "\"rms_norm_eps\": 1e-06, "
    LG_YARN("1.4158883083359672", "64", "64", "4096", "0.5") LG_SLIDING ", "
    "\"original_max_position_embeddings\": 4096}, "
    LG_TAIL("8");

static const char lg_s_2_1[] =
    LG_HEAD("\"per-head\"")
    LG_LAYER_TYPES
    "\"max_position_embeddings\": 1048576, "
    LG_ONE_DENSE
    LG_SPARSE("0")
    LG_MOE("2.5")
    "\"num_attention_heads\": 4, "
    "\"num_attention_heads_per_layer\": [4, 6, 6, 6, 4], "
    LG_EXPERTS("5")
    "\"rms_norm_eps\": 1e-06, "
    LG_YARN("1.4852030263919618", "32", "128", "8192", "0.5") LG_SLIDING "}, "
    LG_TAIL("8");

static const char lg_m_1[] =
    LG_HEAD("\"per-element\"")
    "\"max_position_embeddings\": 262144, "
    "\"mlp_layer_types\": [\"dense\", \"dense\", \"dense\", \"sparse\", \"sparse\"], "
    LG_SPARSE("0, 1, 2")
    LG_MOE("1")
    "\"num_attention_heads\": 8, "
    LG_EXPERTS("6")
    "\"rms_norm_eps\": 1e-06, "
    LG_YARN("1.4158883083359672", "64", "64", "4096", "1") "}, "
    LG_TAIL("0");
// clang-format on

static const struct model_preset lg_presets[] = {
    {"XS-2.1", lg_xs_2_1},
    {"XS.2", lg_xs_2},
    {"S-2.1", lg_s_2_1},
    {"M.1", lg_m_1},
};

static const char *const lg_ids[] = {"LagunaForCausalLM", "laguna", NULL};

const struct model_family laguna_family = {
    .name = "laguna",
    .ids = lg_ids,
    .open = lg_open,
    .close = lg_close,
    .info = lg_info,
    .n_taps = lg_n_taps,
    .catalogue = lg_catalogue,
    .axis_size = lg_axis_size,
    .state_init = lg_state_init,
    .state_free = lg_state_free,
    .forward = lg_forward,
    .handoff = lg_handoff,
    .block_flops = lg_block_flops,
    .stage_bytes = lg_stage_bytes,
    .describe = lg_describe,
    .presets = lg_presets,
    .n_presets = sizeof lg_presets / sizeof lg_presets[0],
    .init_dtype = "bf16",
    .init_f32 = "e_score_correction_bias", // the selection bias, F32 as published
    .init_shards = 3,                      // the releases are sharded
    .init_cut = true,
    .init_what = {"a tiny laguna ", " checkpoint"},
};
