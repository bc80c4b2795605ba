// decoder_family.c - the operations every Llama-style family's registry table shares
// (model/decoder_family.h): each family (model/families/*.c) has its own table, its own
// model_family name in the output and for init-model --family, its ids its "architectures" entry
// and model_type, and its own config reader; the rest is here, over model/decoder.h.
#include "model/decoder_family.h"

#include "model/ah.h"
#include "model/decoder.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// A fused FP8 matrix's views (Phi-3's qkv and gate_up) start on a scale block's rows: q, k and v
// (the gate and up) each a whole number of weight_block_size[0] rows.
static int fused_fp8_check(const struct config *cf, const struct dec_config *c,
                           struct ah_error *err) {
    int64_t HD = (int64_t)c->n_head * c->head_dim, KVD = (int64_t)c->n_kv_head * c->head_dim;
    bool bad = c->fp8.on && ((c->blk.fused_qkv && (HD % c->fp8.bn || KVD % c->fp8.bn)) ||
                             (c->blk.fused_gate_up && c->ffn % c->fp8.bn));
    if (!bad) return 0;
    return ah_fail(
        err, AH_EINVAL,
        "%s: \"quantization_config.weight_block_size\": %d rows a scale block do not "
        "divide the fused projections' parts (q %lld, k and v %lld, gate and up %d rows)",
        cf->path, c->fp8.bn, (long long)HD, (long long)KVD, c->ffn);
}

const struct dec_quant dec_quant_fp8[] = {{"fp8", dec_read_fp8}, {NULL, NULL}};

int dec_read_quant(const struct config *cf, struct dec_config *c, const struct dec_quant *q,
                   struct ah_error *err) {
    const char *methods[8] = {NULL}; // q's, for the check every family makes (model/family.h)
    int n = 0, which;
    for (const struct dec_quant *p = q; p && p->method; p++) {
        AH_ASSERT(n < DEC_N(methods) - 1);
        methods[n++] = p->method;
    }
    int rc = model_quant_method(cf, methods, &which, err);
    return rc < 0 || which < 0 ? rc : q[which].read(cf, c, err);
}

int dec_fam_open(const struct dec_family *f, void **fm, const struct config *cf,
                 const struct model_dims *dims, struct model_tensor **list, struct ah_error *err) {
    struct dec_config c;
    struct decoder *m = calloc(1, sizeof *m);
    if (!(*fm = m)) return -AH_ENOMEM;
    memset(&c, 0, sizeof c);
    c.arch = f->arch;
    c.names = f->names;
    int rc = f->reader ? dec_read_std(cf, &c, f->reader, err) : f->read(cf, &c, err);
    if (rc == 0) rc = dec_read_quant(cf, &c, f->quant, err); // the methods the family binds
    if (rc == 0) rc = fused_fp8_check(cf, &c, err);
    if (rc == 0) rc = dec_init(m, &c, dims, list);
    dec_config_free(&c); // zeroed by dec_init; freed here when it did not run
    return rc;
}

void dec_fam_close(void *fm) {
    if (fm) dec_free(fm);
    free(fm);
}

// Dynamic NTK RoPE exists to run past max_position_embeddings: prompts up to factor times it.
void dec_fam_info(const void *fm, struct model_info *out) {
    const struct dec_config *c = &((const struct decoder *)fm)->cfg;
    double lim = c->max_pos;
    if (c->rope_full.type == DEC_ROPE_DYNAMIC && c->rope_full.factor > 1.0)
        lim *= c->rope_full.factor;
    int max_pos = lim < (double)(1 << 30) ? (int)lim : 1 << 30;
    *out = (struct model_info){.n_blocks = c->n_layer,
                               .max_pos = max_pos,
                               .vocab = c->vocab,
                               .hidden = c->hidden,
                               .n_experts = c->n_expert,
                               .top_k = c->top_k};
}

int dec_fam_n_taps(const void *fm) {
    return dec_n_taps(fm);
}

void dec_fam_catalogue(const void *fm, struct tap_desc *out) {
    dec_catalogue(fm, out);
}

int64_t dec_fam_axis_size(const void *fm, int block, const char *axis) {
    return dec_axis_size(fm, block, axis);
}

int dec_fam_state_init(void **fs, const void *fm, int max_T, int64_t max_tokens,
                       const uint8_t *want, const struct expert_shard *shard) {
    return dec_state_init((struct dec_state **)fs, fm, max_T, max_tokens, want, shard);
}

void dec_fam_state_free(void *fs) {
    dec_state_free(fs);
}

void dec_fam_forward(const void *fm, void *fs, const struct mbatch *bt, const struct tap *tp,
                     int blk_begin, int blk_end) {
    dec_forward(fm, fs, bt, tp, blk_begin, blk_end);
}

int dec_fam_handoff(void *fs, float **arrays) {
    arrays[0] = dec_state_stream(fs);
    return 1;
}

double dec_fam_block_flops(const void *fm, int b, int T) {
    return dec_block_flops(&((const struct decoder *)fm)->cfg, b, T);
}

// vectors (norms, biases) of layer i: float32 whatever the checkpoint's dtype
static int64_t layer_vectors(const struct dec_config *c, int i) {
    const struct dec_block *b = &c->blk;
    int64_t D = c->hidden, HD = (int64_t)c->n_head * c->head_dim;
    int64_t KVD = (int64_t)c->n_kv_head * c->head_dim, I = c->moe[i] ? 0 : c->ffn;
    int64_t mla = c->mla.on ? c->mla.q_lora + c->mla.kv_lora : 0; // q_a / kv_a layernorms
    return dec_block_norm_params(c) + (HD + 2 * KVD) * b->qkv_bias + D * b->o_bias +
           (b->mlp_bias && I ? 2 * I + D : 0) + mla;
}

// MXFP4 experts (gpt-oss) as stored: 16 bytes of codes and one scale byte a row's 32 values,
// so 17/32 bytes a weight, of layer i's experts [0, mine)
static int64_t mxfp4_expert_bytes(const struct dec_config *c, int i, int64_t mine) {
    return c->moe[i] ? mine * 3 * (int64_t)c->hidden * c->expert_ffn / 32 * 17 : 0;
}

// a stage of an MXFP4 model: the experts as stored (their biases float32 vectors), the other
// matrices BF16 (or float32 as dec_fam_stage_bytes says), vectors float32
static int64_t mxfp4_stage_bytes(const struct decoder *m, int b0, int b1, bool head, int shard,
                                 int n_shards, const char **kind) {
    const struct dec_config *c = &m->cfg;
    int64_t w = m->any_bf16 ? 2 : 4, vec = c->hidden * (int64_t)head, q4 = 0;
    int64_t vd = (int64_t)c->vocab * c->hidden, n = 0, E = c->n_expert;
    int64_t mine = E * (shard + 1) / n_shards - E * shard / n_shards;
    for (int i = b0; i < b1; i++) {
        n += dec_layer_params(c, i, false);
        vec += layer_vectors(c, i) + c->n_head * c->blk.sinks + E * c->blk.router_bias;
        q4 += mxfp4_expert_bytes(c, i, mine);
        if (c->moe[i] && c->blk.expert_bias) vec += mine * (2 * c->expert_ffn + c->hidden);
    }
    n += (b0 == 0 ? vd : 0) + (head && !(c->blk.tied && b0 == 0) ? vd : 0);
    int64_t evec = 0; // the expert biases are not among n's matrices
    for (int i = b0; i < b1 && c->blk.expert_bias; i++)
        evec += c->moe[i] ? mine * (2 * c->expert_ffn + c->hidden) : 0;
    *kind = m->any_bf16 ? "MXFP4 experts and BF16 matrices mapped, vectors float32"
                        : "MXFP4 experts mapped, matrices and vectors float32";
    return w * (n - (vec - evec) + c->hidden * (int64_t)head) + 4 * vec + q4;
}

// BF16 matrices stay BF16 (mapped), any other dtype is held as float32; vectors float32. With
// BF16 matrices every matrix is counted at 2 bytes (a checkpoint mixing dtypes: an estimate).
int64_t dec_fam_stage_bytes(const void *fm, int b0, int b1, bool head, int shard, int n_shards,
                            const char **kind) {
    const struct decoder *m = fm;
    const struct dec_config *c = &m->cfg;
    if (m->any_mxfp4) return mxfp4_stage_bytes(m, b0, b1, head, shard, n_shards, kind);
    int64_t w = m->any_bf16 ? 2 : 4, vec = c->hidden * (int64_t)head;
    int64_t vd = (int64_t)c->vocab * c->hidden, n = 0, E = c->n_expert;
    int64_t mine = E ? E * (shard + 1) / n_shards - E * shard / n_shards : 0;
    for (int i = b0; i < b1; i++) {
        n += dec_layer_params(c, i, false) + (E ? dec_layer_params(c, i, true) * mine / E : 0);
        vec += layer_vectors(c, i);
    }
    n += (b0 == 0 ? vd : 0) + (head && !(c->blk.tied && b0 == 0) ? vd : 0);
    *kind = m->any_bf16 ? "BF16 matrices mapped, vectors float32" : "float32";
    int64_t q8 = 0, s8 = 0; // FP8 matrices: 1 byte a weight, their scales float32 (held widened)
    dec_fp8_stage(m, b0, b1, head, shard, n_shards, &q8, &s8);
    if (m->any_fp8)
        *kind = "FP8 block-scaled matrices mapped (1 byte a weight + float32 scales), the others "
                "16-bit, vectors float32";
    int64_t buffers = 0; // DeepSeek-V3's e_score_correction_bias (a buffer: not a parameter)
    for (int i = b0; c->route.sigmoid_group && i < b1; i++)
        buffers += c->moe[i] ? 4 * E : 0;
    return w * (n - vec + c->hidden * (int64_t)head - q8) + q8 + 4 * s8 + 4 * vec + buffers;
}

// The parameters a token computes with in a mixture model: all but the routed experts it is not
// sent to, (E - k) of each mixture block's E (the embedding and head counted whole, as model
// cards count "active" parameters)
static int64_t active_params(const struct dec_config *c) {
    int64_t n = dec_params(c);
    for (int i = 0; i < c->n_layer; i++)
        if (c->moe[i]) n -= (int64_t)(c->n_expert - c->top_k) * 3 * c->hidden * c->expert_ffn;
    return n;
}

// v with a comma every three digits into out (v >= 0)
static void group3(char *out, size_t n, int64_t v) {
    char d[32];
    int len = snprintf(d, sizeof d, "%lld", (long long)v), k = 0;
    for (int i = 0; i < len && (size_t)k + 2 < n; i++) {
        if (i > 0 && (len - i) % 3 == 0) out[k++] = ',';
        out[k++] = d[i];
    }
    out[k] = '\0';
}

// DeepSeek-V3's routing biases (e_score_correction_bias: a buffer, not a parameter) as published:
// float32 in the FP8 releases, torch_dtype otherwise
static int64_t route_bias_bytes(const struct dec_config *c, int n_moe) {
    if (!c->route.sigmoid_group) return 0;
    return (int64_t)n_moe * c->n_expert * (c->fp8.on ? 4 : c->bytes_per_param);
}

void dec_fam_describe(const void *fm, char *line, size_t n, int64_t *params, int64_t *bytes,
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
    size_t used = strlen(line);
    if (n_moe && used < n) { // a mixture: the parameters a token computes with
        char a[40];
        group3(a, sizeof a, active_params(c));
        snprintf(line + used, n - used, "; %s parameters active a token (top %d of %d experts)", a,
                 c->top_k, c->n_expert);
    }
    if (c->mla.on && strlen(line) < n) { // DeepSeek-V3: the heads above are the RoPE width
        size_t k0 = strlen(line);
        snprintf(line + k0, n - k0,
                 "; multi-head latent attention: q_lora_rank %d, kv_lora_rank %d, query/key heads "
                 "of %d + %d (rope), values of %d",
                 c->mla.q_lora, c->mla.kv_lora, c->mla.d_nope, c->mla.d_rope, c->mla.d_v);
    }
    if (c->n_mtp && (size_t)strlen(line) < n) { // DeepSeek-V3: what the release holds beside
        int64_t u, st;
        dec_mtp_params(c, &u, &st);
        size_t k0 = strlen(line);
        snprintf(line + k0, n - k0,
                 "; + %d multi-token-prediction layer(s), not loaded (as transformers): %lld "
                 "parameters, %lld as stored with their embedding and head copies",
                 c->n_mtp, (long long)u, (long long)st);
    }
    *params = dec_params(c);
    *bytes = *params * c->bytes_per_param + route_bias_bytes(c, n_moe);
    *stored = c->bytes_per_param == 4 ? "float32 (config.json's torch_dtype)"
                                      : "16-bit (config.json's torch_dtype)";
    int64_t q8 = 0, s8 = 0; // as published: FP8 1 byte a weight, weight_scale_inv float32
    dec_fp8_stage(fm, 0, L, true, 0, 1, &q8, &s8);
    if (c->fp8.on) {
        *bytes += q8 * (1 - c->bytes_per_param) + 4 * s8;
        *stored = "FP8 block-scaled (1 byte a weight + float32 weight_scale_inv), the rest "
                  "torch_dtype";
    }
    for (int i = 0; c->blk.experts_interleaved && i < L;
         i++) // gpt-oss: the experts' matrices MXFP4 (quantization_config)
        *bytes += mxfp4_expert_bytes(c, i, c->n_expert) -
                  (c->moe[i] ? 3 * (int64_t)c->n_expert * c->hidden * c->expert_ffn : 0) *
                      c->bytes_per_param;
    if (c->blk.experts_interleaved)
        *stored = "MXFP4 experts (quantization_config), the rest 16-bit";
}
