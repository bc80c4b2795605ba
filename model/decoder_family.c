// decoder_family.c - the Llama-style families in the registry (model/family.h): one table per
// architecture (its own model_family name in the output and for init-model --family), all with
// the operations of model/decoder.h. A table's ids are its "architectures" entry and model_type.
#include "model/ah.h"
#include "model/decoder.h"
#include "model/decoder_presets.h"
#include "model/family.h"

#include <stdio.h>
#include <stdlib.h>

static int dc_open(void **fm, const struct config *cf, const struct model_dims *dims,
                   struct model_tensor **list, struct ah_error *err) {
    struct dec_config c;
    struct decoder *m = calloc(1, sizeof *m);
    if (!(*fm = m)) return -AH_ENOMEM;
    int rc = dec_config_read(cf, &c, err);
    if (rc == 0) rc = dec_init(m, &c, dims, list);
    dec_config_free(&c); // zeroed by dec_init; freed here when it did not run
    return rc;
}

static void dc_close(void *fm) {
    if (fm) dec_free(fm);
    free(fm);
}

// Dynamic NTK RoPE exists to run past max_position_embeddings: prompts up to factor times it.
static void dc_info(const void *fm, struct model_info *out) {
    const struct dec_config *c = &((const struct decoder *)fm)->cfg;
    double lim = c->max_pos;
    if (c->rope_full.type == DEC_ROPE_DYNAMIC && c->rope_full.factor > 1.0)
        lim *= c->rope_full.factor;
    int max_pos = lim < (double)(1 << 30) ? (int)lim : 1 << 30;
    *out = (struct model_info){c->n_layer, max_pos, c->vocab, c->hidden, c->n_expert, c->top_k};
}

static int dc_n_taps(const void *fm) {
    return dec_n_taps(fm);
}

static void dc_catalogue(const void *fm, struct tap_desc *out) {
    dec_catalogue(fm, out);
}

static int64_t dc_axis_size(const void *fm, int block, const char *axis) {
    return dec_axis_size(fm, block, axis);
}

static int dc_state_init(void **fs, const void *fm, int max_T, int64_t max_tokens,
                         const uint8_t *want, const struct laguna_shard *shard) {
    return dec_state_init((struct dec_state **)fs, fm, max_T, max_tokens, want, shard);
}

static void dc_state_free(void *fs) {
    dec_state_free(fs);
}

static void dc_forward(const void *fm, void *fs, const struct mbatch *bt, const struct tap *tp,
                       int blk_begin, int blk_end) {
    dec_forward(fm, fs, bt, tp, blk_begin, blk_end);
}

static int dc_handoff(void *fs, float **arrays) {
    arrays[0] = dec_state_stream(fs);
    return 1;
}

static double dc_block_flops(const void *fm, int b, int T) {
    return dec_block_flops(&((const struct decoder *)fm)->cfg, b, T);
}

// vectors (norms, biases) of layer i: float32 whatever the checkpoint's dtype
static int64_t layer_vectors(const struct dec_config *c, int i) {
    const struct dec_block *b = &c->blk;
    int64_t D = c->hidden, HD = (int64_t)c->n_head * c->head_dim;
    int64_t KVD = (int64_t)c->n_kv_head * c->head_dim, I = c->moe[i] ? 0 : c->ffn;
    return dec_block_norm_params(c) + (HD + 2 * KVD) * b->qkv_bias + D * b->o_bias +
           (b->mlp_bias && I ? 2 * I + D : 0);
}

// BF16 matrices stay BF16 (mapped), any other dtype is held as float32; vectors float32. With
// BF16 matrices every matrix is counted at 2 bytes (a checkpoint mixing dtypes: an estimate).
static int64_t dc_stage_bytes(const void *fm, int b0, int b1, bool head, int shard, int n_shards,
                              const char **kind) {
    const struct decoder *m = fm;
    const struct dec_config *c = &m->cfg;
    int64_t w = m->any_bf16 ? 2 : 4, vec = c->hidden * (int64_t)head;
    int64_t vd = (int64_t)c->vocab * c->hidden, n = 0, E = c->n_expert;
    int64_t mine = E ? E * (shard + 1) / n_shards - E * shard / n_shards : 0;
    for (int i = b0; i < b1; i++) {
        n += dec_layer_params(c, i, false) + (E ? dec_layer_params(c, i, true) * mine / E : 0);
        vec += layer_vectors(c, i);
    }
    n += (b0 == 0 ? vd : 0) + (head && !(c->blk.tied && b0 == 0) ? vd : 0);
    *kind = m->any_bf16 ? "BF16 matrices mapped, vectors float32" : "float32";
    return w * (n - vec + c->hidden * (int64_t)head) + 4 * vec;
}

static void dc_describe(const void *fm, char *line, size_t n, int64_t *params, int64_t *bytes,
                        const char **stored) {
    const struct dec_config *c = &((const struct decoder *)fm)->cfg;
    int L = c->n_layer, n_sliding = 0, n_moe = 0;
    for (int i = 0; i < L; i++) {
        n_sliding += c->sliding[i];
        n_moe += c->moe[i];
    }
    int k = snprintf(line, n, "%s, %d layers (%d sliding-window", c->arch, L, n_sliding);
    if (n_moe && k > 0 && (size_t)k < n)
        k += snprintf(line + k, n - (size_t)k, ", %d mixture-of-experts: %d experts, top %d", n_moe,
                      c->n_expert, c->top_k);
    if (k > 0 && (size_t)k < n)
        snprintf(line + k, n - (size_t)k, "), hidden %d, %d heads (%d key/value) of %d, vocab %d%s",
                 c->hidden, c->n_head, c->n_kv_head, c->head_dim, c->vocab,
                 c->blk.tied ? ", tied embeddings" : "");
    *params = dec_params(c);
    *bytes = *params * c->bytes_per_param;
    *stored = c->bytes_per_param == 4 ? "float32 (config.json's torch_dtype)"
                                      : "16-bit (config.json's torch_dtype)";
}

#define DEC_FAMILY(var, fname, arch, mtype, ...)                      \
    static const char *const var##_ids[] = {arch, mtype, NULL};       \
    static const struct model_preset var##_presets[] = {__VA_ARGS__}; \
    const struct model_family var = {                                 \
        .name = fname,                                                \
        .ids = var##_ids,                                             \
        .open = dc_open,                                              \
        .close = dc_close,                                            \
        .info = dc_info,                                              \
        .n_taps = dc_n_taps,                                          \
        .catalogue = dc_catalogue,                                    \
        .axis_size = dc_axis_size,                                    \
        .state_init = dc_state_init,                                  \
        .state_free = dc_state_free,                                  \
        .forward = dc_forward,                                        \
        .handoff = dc_handoff,                                        \
        .block_flops = dc_block_flops,                                \
        .stage_bytes = dc_stage_bytes,                                \
        .describe = dc_describe,                                      \
        .presets = var##_presets,                                     \
        .n_presets = sizeof var##_presets / sizeof var##_presets[0],  \
        .init_dtype = "bf16",                                         \
        .init_shards = 2,                                             \
        .init_cut = true,                                             \
        .init_what = {"a tiny " fname " ", " checkpoint"},            \
    };

DEC_FAMILY(llama_family, "llama", "LlamaForCausalLM", "llama", {"Llama-3.2-1B", pr_llama},
           {"Llama-3.1-8B", pr_llama_untied})
DEC_FAMILY(mistral_family, "mistral", "MistralForCausalLM", "mistral",
           {"Mistral-7B-v0.1", pr_mistral})
DEC_FAMILY(qwen2_family, "qwen2", "Qwen2ForCausalLM", "qwen2", {"Qwen2.5-0.5B", pr_qwen2})
DEC_FAMILY(qwen3_family, "qwen3", "Qwen3ForCausalLM", "qwen3", {"Qwen3-0.6B", pr_qwen3})
DEC_FAMILY(qwen3_moe_family, "qwen3_moe", "Qwen3MoeForCausalLM", "qwen3_moe",
           {"Qwen3-MoE", pr_qwen3_moe})
DEC_FAMILY(mixtral_family, "mixtral", "MixtralForCausalLM", "mixtral", {"Mixtral-8x7B", pr_mixtral})
DEC_FAMILY(gemma2_family, "gemma2", "Gemma2ForCausalLM", "gemma2", {"gemma-2-2b", pr_gemma2})
DEC_FAMILY(gemma3_family, "gemma3", "Gemma3ForCausalLM", "gemma3_text", {"gemma-3", pr_gemma3})
