// load.c - choose a family from config.json and bind its weights from the model folder.
#include "harvest/harvest.h"

#include <stdlib.h>
#include <string.h>

static int encdec_config_read(const struct modeldir *md, struct encdec_config *c,
                              struct ah_error *err) {
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
        if ((rc = md_config_int(md, ints[i].key, true, ints[i].dst, err)) < 0) return rc;
        if (*ints[i].dst < 1 || *ints[i].dst > (1 << 24))
            return ah_fail(err, AH_EINVAL, "%s: \"%s\": %d is out of range (expected 1 to %d)",
                           md->config_path, ints[i].key, *ints[i].dst, 1 << 24);
    }
    if (c->head_dim % 2)
        return ah_fail(err, AH_EINVAL, "%s: \"head_dim\": RoPE needs an even head_dim, not %d",
                       md->config_path, c->head_dim);
    double eps = 1e-6, theta = 10000.0;
    if ((rc = md_config_double(md, "rms_norm_eps", false, &eps, err)) < 0 ||
        (rc = md_config_double(md, "rope_theta", false, &theta, err)) < 0)
        return rc;
    c->eps = (float)eps;
    c->rope_theta = theta;
    static const struct {
        const char *key, *want;
    } fixed[] = {
        {"position_encoding", "rope"}, {"normalization", "rmsnorm"}, {"activation", "swiglu"}};
    for (size_t i = 0; i < 3; i++) {
        const char *v = md_config_string(md, fixed[i].key);
        if (v && strcmp(v, fixed[i].want))
            return ah_fail(err, AH_EINVAL, "%s: \"%s\": \"%s\" is not supported (expected \"%s\")",
                           md->config_path, fixed[i].key, v, fixed[i].want);
    }
    return 0;
}

int model_load(struct model *m, const char *dir, bool weights, struct ah_error *err) {
    memset(m, 0, sizeof *m);
    struct model_tensor *list = NULL;
    int rc = md_open(&m->md, dir, !weights, err);
    if (rc < 0) return rc;
    const char *arch = md_config_string(&m->md, "architecture");
    if (!arch || strcmp(arch, "causal-encoder-decoder")) {
        rc = ah_fail(err, AH_EINVAL,
                     "%s: unknown model family (expected \"architecture\": "
                     "\"causal-encoder-decoder\"; LagunaForCausalLM is not supported yet)",
                     m->md.config_path);
        goto fail;
    }
    m->family = "encdec";
    struct encdec_config c;
    if ((rc = encdec_config_read(&m->md, &c, err)) < 0) goto fail;
    int n = encdec_init(&m->ed, &c, &list);
    if (n < 0) {
        rc = n;
        goto fail;
    }
    for (int i = 0; weights && i < n; i++) {
        int64_t sh[2] = {list[i].shape[0], list[i].shape[1]};
        if ((rc = md_tensor_f32(&m->md, list[i].name, list[i].ndim, sh, list[i].dst, err)) < 0)
            goto fail;
    }
    free(list);
    list = NULL;
    m->n_cat = encdec_n_taps(&c);
    m->cat = calloc((size_t)m->n_cat, sizeof *m->cat);
    if (!m->cat) {
        rc = -AH_ENOMEM;
        goto fail;
    }
    encdec_catalogue(&c, m->cat);
    m->n_blocks = c.n_layer_enc + c.n_layer_dec;
    m->max_pos = c.max_pos;
    m->vocab = c.vocab;
    return 0;
fail:
    free(list);
    model_free(m);
    return rc;
}

void model_free(struct model *m) {
    encdec_free(&m->ed);
    md_close(&m->md);
    free(m->cat);
    memset(m, 0, sizeof *m);
}

int64_t model_axis_size(const struct model *m, const char *axis) {
    return encdec_axis_size(&m->ed.cfg, axis);
}
