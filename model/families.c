// families.c - the registry of model families (model/family.h): one line each.
#include "model/family.h"

#include "model/ah.h"

#include <stdio.h>
#include <string.h>

#define MODEL_FAMILIES(X) \
    X(laguna_family)      \
    X(encdec_family)      \
    X(identity_family)    \
    X(gpt2_family)        \
    X(neox_family)        \
    X(llama_family)       \
    X(mistral_family)     \
    X(qwen2_family)       \
    X(qwen3_family)       \
    X(qwen3_moe_family)   \
    X(mixtral_family)     \
    X(gemma2_family)      \
    X(gemma3_family)      \
    X(olmo2_family)       \
    X(phi3_family)        \
    X(olmoe_family)       \
    X(deepseek_v3_family) \
    X(gpt_oss_family)     \
    /* one line a family, each ending in a backslash */

#define X(f) extern const struct model_family f;
MODEL_FAMILIES(X)
#undef X

const struct model_family *const model_families[] = {
#define X(f) &f,
    MODEL_FAMILIES(X)
#undef X
        NULL};

const struct model_family *model_family_with_id(const char *id) {
    for (int f = 0; id && model_families[f]; f++)
        for (const char *const *n = model_families[f]->ids; *n; n++)
            if (!strcmp(*n, id)) return model_families[f];
    return NULL;
}

int model_family_of(const struct config *c, const struct model_family **fam, struct ah_error *err) {
    const struct cfg_value *a = cfg_get(c, NULL, "architectures");
    *fam = NULL;
    for (int i = 0; !*fam && i < cfg_length(c, a); i++)
        *fam = model_family_with_id(cfg_string(c, cfg_element(c, a, i)));
    if (!*fam) *fam = model_family_with_id(cfg_str(c, "model_type"));
    if (!*fam) *fam = model_family_with_id(cfg_str(c, "architecture"));
    if (*fam) return 0;
    char known[768] = ""; // every id, quoted (the message holds 1024 bytes)
    for (int f = 0; model_families[f]; f++)
        for (const char *const *n = model_families[f]->ids; *n; n++)
            snprintf(known + strlen(known), sizeof known - strlen(known), "%s\"%s\"",
                     known[0] ? ", " : "", *n);
    return ah_fail(err, AH_EINVAL,
                   "%s: unknown model family (\"architectures\", \"model_type\" or "
                   "\"architecture\" must name one of %s)",
                   c->path, known);
}

const struct model_family *model_family_named(const char *name) {
    for (int f = 0; name && model_families[f]; f++)
        if (!strcmp(model_families[f]->name, name)) return model_families[f];
    return NULL;
}

int model_quant_method(const struct config *c, const char *const *methods, int *which,
                       struct ah_error *err) {
    const struct cfg_value *qc = cfg_get(c, NULL, "quantization_config");
    *which = -1;
    if (cfg_kind(c, qc) <= CFG_NULL) return 0;
    if (cfg_kind(c, qc) != CFG_OBJECT)
        return ah_fail(err, AH_EINVAL, "%s: \"quantization_config\": expected an object", c->path);
    const struct cfg_value *m = cfg_get(c, qc, "quant_method");
    if (cfg_kind(c, m) <= CFG_NULL)
        return ah_fail(err, AH_EINVAL, "%s: \"quantization_config.quant_method\": missing",
                       c->path);
    const char *s = cfg_string(c, m);
    for (int i = 0; s && methods && methods[i]; i++)
        if (!strcmp(s, methods[i])) {
            *which = i;
            return 0;
        }
    char known[128] = "none";
    for (size_t i = 0, k = 0; methods && methods[i] && k < sizeof known; i++)
        k += (size_t)snprintf(known + k, sizeof known - k, "%s%s", k ? ", " : "", methods[i]);
    return ah_fail(err, AH_EINVAL,
                   "%s: \"quantization_config.quant_method\": %s%s%s is not implemented (known: "
                   "%s)",
                   c->path, s ? "\"" : "", s ? s : "a non-string", s ? "\"" : "", known);
}
