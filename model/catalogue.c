// catalogue.c - the walk of the one catalogue table (model/catalogue.h)
#include "model/catalogue.h"

#include "model/ah.h"

#include <stdio.h>

static const struct cat_value {
    const char *name, *shape, *meaning;
    enum tap_dtype dtype;
    unsigned needs; // enum cat_need
} values[CAT_N] = {
#define CAT_ROW(kind, name_, dtype_, shape_, needs_, meaning_) \
    [CAT_##kind] = {                                           \
        .name = name_, .shape = shape_, .meaning = meaning_, .dtype = dtype_, .needs = needs_},
    CAT_TABLE(CAT_ROW)
#undef CAT_ROW
};

static const struct cat_override {
    unsigned set; // enum cat_texts
    enum cat_kind kind;
    const char *shape, *meaning; // shape NULL: the table's
} overrides[] = {
#define CAT_OVER(set_, kind_, shape_, meaning_) \
    {.set = CAT_TEXT_##set_, .kind = CAT_##kind_, .shape = shape_, .meaning = meaning_},
    CAT_OVERRIDES(CAT_OVER)
#undef CAT_OVER
};

// value k's shape and meaning in a family with texts
static void texts_of(unsigned texts, int k, const char **shape, const char **meaning) {
    *shape = values[k].shape;
    *meaning = values[k].meaning;
    for (size_t i = 0; i < sizeof overrides / sizeof overrides[0]; i++) {
        const struct cat_override *o = &overrides[i];
        if (!(o->set & texts) || (int)o->kind != k) continue;
        if (o->shape) *shape = o->shape;
        *meaning = o->meaning;
    }
}

// the options layer l has: the roots' own, a block's as the family says
static unsigned layer_has(const struct cat_family *f, int l) {
    if (l < 0) return CAT_BEFORE;
    if (l >= f->n_layer) return CAT_AFTER;
    return CAT_BLOCK | f->block(f->u, l);
}

int cat_walk(const struct cat_family *f, int *id, struct tap_desc *out) {
    int n = 0;
    char name[TAP_NAME_MAX];
    for (int l = -1; l <= f->n_layer; l++) {
        unsigned has = layer_has(f, l);
        for (int k = 0; k < CAT_N; k++) {
            bool in = (values[k].needs & has) == values[k].needs;
            if (id) id[(l + 1) * CAT_N + k] = in ? n : -1;
            if (!in) continue;
            if (out) {
                if (l >= 0 && l < f->n_layer)
                    snprintf(name, sizeof name, "layers.%d.%s", l, values[k].name);
                else
                    snprintf(name, sizeof name, "%s", values[k].name);
                const char *shape, *meaning;
                texts_of(f->texts, k, &shape, &meaning);
                int r = tap_desc_set(&out[n], name, values[k].dtype, shape, meaning, l);
                AH_ASSERT(r == 0);
            }
            n++;
        }
    }
    return n;
}

int cat_block_reach(const int *id, int n_layer, int l, int blk_end, const struct tap *tp) {
    if (l != blk_end - 1 || !tp || !tp->stream_ends) return CAT_LAYER_OUTPUT;
    for (int k = CAT_LAYER_OUTPUT + 1; blk_end == n_layer && k < CAT_N; k++)
        if (tap_wants(tp, id[(n_layer + 1) * CAT_N + k])) return CAT_LAYER_OUTPUT;
    int reach = -1;
    for (int k = 0; k <= CAT_LAYER_OUTPUT; k++)
        if (tap_wants(tp, id[(l + 1) * CAT_N + k])) reach = k;
    return reach;
}

bool cat_wants_kind(const int *id, int n_layer, const uint8_t *want, enum cat_kind kind) {
    for (int l = 0; l < n_layer; l++) {
        int i = id[(l + 1) * CAT_N + kind];
        if (i >= 0 && (!want || want[i])) return true;
    }
    return false;
}
