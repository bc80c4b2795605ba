// encdec_family.c - the spec model's entry in the family registry (model/family.h): its
// config.json (tests/ref/spec.json's keys), its operations over model/encdec.h and its init-model
// preset.
#include "model/ah.h"
#include "model/encdec.h"
#include "model/family.h"

#include <stdlib.h>
#include <string.h>

// config.json as model_load has always checked it (the family is chosen by the registry)
static int ed_config(const struct config *cf, struct encdec_config *c, struct ah_error *err) {
    struct {
        const char *key;
        int *dst;
    } ints[] = {
        {"num_encoder_layers", &c->n_layer_enc},
        {"num_decoder_layers", &c->n_layer_dec},
        {"hidden_size", &c->hidden},
        {"num_attention_heads", &c->n_head},
        {"head_dim", &c->head_dim},
        {"vocab_size", &c->vocab},
        {"local_window", &c->local_window},
        {"max_position_embeddings", &c->max_pos},
        {"ffn_dim", &c->ffn_dim},
    };
    int rc;
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        int hi = i < 2 ? AH_MAX_LAYERS : 1 << 24; // the two layer counts come first
        if ((rc = cfg_int_in(cf, ints[i].key, true, ints[i].dst, 1, hi, err)) < 0) return rc;
    }
    if (c->head_dim % 2)
        return ah_fail(err, AH_EINVAL, "%s: \"head_dim\": RoPE needs an even head_dim, not %d",
                       cf->path, c->head_dim);
    double eps = 1e-6, theta = 10000.0;
    int which;
    if ((rc = cfg_num_in(cf, NULL, NULL, "rms_norm_eps", CFG_POSITIVE, false, &eps, err)) < 0 ||
        (rc = cfg_num_in(cf, NULL, NULL, "rope_theta", CFG_POSITIVE, false, &theta, err)) < 0 ||
        (rc = cfg_check_unused(cf, err)) < 0 ||
        (rc = model_quant_method(cf, NULL, &which, err)) < 0) // the spec model reads none
        return rc;
    c->eps = (float)eps;
    c->rope_theta = theta;
    static const struct {
        const char *key, *want;
    } fixed[] = {
        {"position_encoding", "rope"}, {"normalization", "rmsnorm"}, {"activation", "swiglu"}};
    for (size_t i = 0; i < 3; i++) {
        const char *v = cfg_str(cf, fixed[i].key);
        if (v && strcmp(v, fixed[i].want))
            return ah_fail(err, AH_EINVAL, "%s: \"%s\": \"%s\" is not supported (expected \"%s\")",
                           cf->path, fixed[i].key, v, fixed[i].want);
    }
    return 0;
}

static int ed_open(void **fm, const struct config *cf, const struct model_dims *dims,
                   struct model_tensor **list, struct ah_error *err) {
    (void)dims;
    struct encdec_config c;
    struct model_tensor *l = NULL;
    struct encdec *m = calloc(1, sizeof *m);
    if (!(*fm = m)) return -AH_ENOMEM;
    int rc = ed_config(cf, &c, err);
    if (rc < 0) return rc;
    int n = encdec_init(m, &c, &l);
    if (list)
        *list = l;
    else
        free(l);
    return n;
}

static void ed_close(void *fm) {
    if (fm) encdec_free(fm);
    free(fm);
}

static const struct encdec_config *cfg_of(const void *fm) {
    return &((const struct encdec *)fm)->cfg;
}

static void ed_info(const void *fm, struct model_info *out) {
    const struct encdec_config *c = cfg_of(fm);
    *out = (struct model_info){.n_blocks = c->n_layer_enc + c->n_layer_dec,
                               .max_pos = c->max_pos,
                               .vocab = c->vocab,
                               .hidden = c->hidden};
}

static int ed_n_taps(const void *fm) {
    return encdec_n_taps(cfg_of(fm));
}

static void ed_catalogue(const void *fm, struct tap_desc *out) {
    encdec_catalogue(cfg_of(fm), out);
}

static int64_t ed_axis_size(const void *fm, int block, const char *axis) {
    (void)block;
    return encdec_axis_size(cfg_of(fm), axis);
}

static int ed_state_init(void **fs, const void *fm, int max_T, int64_t max_tokens,
                         const uint8_t *want, const struct expert_shard *shard) {
    (void)want, (void)shard;
    struct encdec_state *s = calloc(1, sizeof *s);
    if (!(*fs = s)) return -AH_ENOMEM;
    return encdec_state_init(s, cfg_of(fm), max_T, max_tokens);
}

static void ed_state_free(void *fs) {
    if (fs) encdec_state_free(fs);
    free(fs);
}

static void ed_forward(const void *fm, void *fs, const struct mbatch *bt, const struct tap *tp,
                       int blk_begin, int blk_end) {
    encdec_forward(fm, fs, bt, tp, blk_begin, blk_end);
}

static int ed_handoff(void *fs, float **arrays) {
    struct encdec_state *s = fs;
    arrays[0] = s->x;       // the residual stream
    arrays[1] = s->enc_out; // and encoder_output, for the decoder's global keys
    return 2;
}

// every block costs the same: the body's FLOPs shared out; the LM head what it adds
static double ed_block_flops(const void *fm, int b, int T) {
    const struct encdec_config *c = cfg_of(fm);
    int n_blocks = c->n_layer_enc + c->n_layer_dec;
    double body = encdec_flops(c, T, false);
    return b < n_blocks ? body / n_blocks : encdec_flops(c, T, true) - body;
}

static int64_t ed_stage_bytes(const void *fm, int b0, int b1, bool head, int shard, int n_shards,
                              const char **kind) {
    (void)shard, (void)n_shards;
    const struct encdec_config *c = cfg_of(fm);
    int64_t C = c->hidden, HD = (int64_t)c->n_head * c->head_dim;
    int64_t block = 2 * C + 6 * C * HD + 3 * C * c->ffn_dim;
    int enc = c->n_layer_enc; // the encoder's final norm goes with its last block
    *kind = "float32";
    return 4 * ((int64_t)(b1 - b0) * block + (b0 == 0 || head ? (int64_t)c->vocab * C : 0) +
                (head ? C : 0) + (b0 < enc && enc <= b1 ? C : 0));
}

// ---- init-model: the spec model (encdec_spec_config), as config.json ----
static const char encdec_spec_json[] = "{\"architecture\": \"causal-encoder-decoder\", "
                                       "\"num_encoder_layers\": 4, "
                                       "\"num_decoder_layers\": 4, "
                                       "\"hidden_size\": 384, "
                                       "\"num_attention_heads\": 6, "
                                       "\"head_dim\": 64, "
                                       "\"vocab_size\": 8192, "
                                       "\"local_window\": 64, "
                                       "\"max_position_embeddings\": 512, "
                                       "\"position_encoding\": \"rope\", "
                                       "\"normalization\": \"rmsnorm\", "
                                       "\"activation\": \"swiglu\", "
                                       "\"ffn_dim\": 1024, "
                                       "\"rms_norm_eps\": 9.99999997475243e-07, "
                                       "\"rope_theta\": 10000, "
                                       "\"tie_word_embeddings\": true}";

static const struct model_preset ed_presets[] = {{"spec", encdec_spec_json}};

static const char *const ed_ids[] = {"causal-encoder-decoder", NULL};

const struct model_family encdec_family = {
    .name = "encdec",
    .ids = ed_ids,
    .open = ed_open,
    .close = ed_close,
    .info = ed_info,
    .n_taps = ed_n_taps,
    .catalogue = ed_catalogue,
    .axis_size = ed_axis_size,
    .state_init = ed_state_init,
    .state_free = ed_state_free,
    .forward = ed_forward,
    .handoff = ed_handoff,
    .block_flops = ed_block_flops,
    .stage_bytes = ed_stage_bytes,
    .presets = ed_presets,
    .n_presets = 1,
    .init_what = {"the encdec ", " model"},
};
