// test_cat.c - the one catalogue (model/catalogue.h) and the emit helpers (model/tap.h):
// - cat_walk of a made-up family of four blocks with different options (dense pre-norm; a
//   mixture with a shared expert, gated attention and q/k before RoPE; dense with post norms
//   only; a mixture without a shared expert) gives exactly the names written out below, in
//   forward order, numbered 0..n-1 (CAT_ID, -1 where absent), with each value's block;
// - the families' texts: no set gives the table's, a set its override rows, a later set
//   winning (the LayerNorm block's rotary texts over its own), shapes replaced only where a row
//   has one; dtypes are the table's;
// - cat_wants_kind looks at the blocks' values only, through the wanted ids;
// - tap_emit_rows_i64 and tap_emit_token_heads hand take() each prompt's view of a packed batch
//   (data pointer, dtype, dims), and nothing when the id is not wanted.
#include "model/catalogue.h"
#include "model/tap.h"
#include "tests/check.h"

#include <stdlib.h>
#include <string.h>

static const unsigned opts[4] = {
    CAT_PRE_NORM | CAT_DENSE,
    CAT_MOE | CAT_SHARED | CAT_GATE | CAT_PRE_ROPE,
    CAT_POST_NORM | CAT_DENSE,
    CAT_PRE_NORM | CAT_MOE,
};

static unsigned block_opts(const void *u, int l) {
    return ((const unsigned *)u)[l];
}

#define ATT_QKV "attention_queries", "attention_keys", "attention_values"
#define ATT_SP  "attention_scores", "attention_probabilities", "attention_head_outputs"
#define ROUTED \
    "router_logits", "expert_indices", "expert_weights", "expert_outputs", "routed_output"
static const char *const want_names[][24] = {
    {"input_ids", "attention_mask", "token_embeddings"},
    {"layer_input", "attention_norm_output", ATT_QKV, ATT_SP, "attention_output", "layer_mid",
     "mlp_norm_output", "mlp_input", "mlp_activation", "mlp_neurons", "mlp_output", "layer_output"},
    {"layer_input", "attention_queries_pre_rope", "attention_keys_pre_rope", ATT_QKV, ATT_SP,
     "attention_premix", "attention_output", "layer_mid", "mlp_input", "shared_expert_output",
     ROUTED, "mlp_output", "layer_output"},
    {"layer_input", ATT_QKV, ATT_SP, "attention_output", "attention_post_norm_output", "layer_mid",
     "mlp_input", "mlp_activation", "mlp_neurons", "mlp_output", "mlp_post_norm_output",
     "layer_output"},
    {"layer_input", "attention_norm_output", ATT_QKV, ATT_SP, "attention_output", "layer_mid",
     "mlp_norm_output", "mlp_input", ROUTED, "mlp_output", "layer_output"},
    {"final_norm_output", "lm_head_output", "logits", "next_token_probs"},
};

static struct cat_family family(unsigned texts) {
    return (struct cat_family){.n_layer = 4, .texts = texts, .block = block_opts, .u = opts};
}

static const struct tap_desc *find(const struct tap_desc *d, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(d[i].name, name)) return &d[i];
    return NULL;
}

static void test_walk_names_order_ids(void) {
    struct cat_family f = family(0);
    int n = cat_walk(&f, NULL, NULL), id[6 * CAT_N];
    struct tap_desc *d = calloc((size_t)n, sizeof *d);
    CHECK_EQ(cat_walk(&f, id, d), n);
    int i = 0;
    char name[TAP_NAME_MAX];
    for (int l = -1; l <= 4; l++)
        for (int j = 0; j < 24 && want_names[l + 1][j]; j++, i++) {
            if (l >= 0 && l < 4)
                snprintf(name, sizeof name, "layers.%d.%s", l, want_names[l + 1][j]);
            else
                snprintf(name, sizeof name, "%s", want_names[l + 1][j]);
            if (i >= n) continue;
            if (strcmp(d[i].name, name)) fprintf(stderr, "[%d] %s, want %s\n", i, d[i].name, name);
            CHECK(!strcmp(d[i].name, name));
            CHECK_EQ(d[i].block, l);
        }
    CHECK_EQ(n, i);
    // ids: forward order, -1 where absent
    struct {
        int l;
        enum cat_kind k;
        const char *name; // NULL: absent
    } ids[] = {{-1, CAT_INPUT_IDS, "input_ids"},
               {-1, CAT_LAYER_INPUT, NULL},
               {0, CAT_LAYER_INPUT, "layers.0.layer_input"},
               {0, CAT_ROUTER_LOGITS, NULL},
               {1, CAT_SHARED_EXPERT_OUTPUT, "layers.1.shared_expert_output"},
               {3, CAT_SHARED_EXPERT_OUTPUT, NULL},
               {2, CAT_ATTENTION_NORM_OUTPUT, NULL},
               {2, CAT_MLP_POST_NORM, "layers.2.mlp_post_norm_output"},
               {3, CAT_EXPERT_OUTPUTS, "layers.3.expert_outputs"},
               {4, CAT_LOGITS, "logits"},
               {4, CAT_LAYER_OUTPUT, NULL}};
    struct {
        int *id;
    } m = {id};
    for (size_t k = 0; k < sizeof ids / sizeof ids[0]; k++) {
        int x = CAT_ID(&m, ids[k].l, ids[k].k);
        if (!ids[k].name) {
            CHECK_EQ(x, -1);
            continue;
        }
        CHECK(x >= 0 && x < n && !strcmp(d[x].name, ids[k].name));
    }
    free(d);
}

static void test_walk_texts(void) {
    struct cat_family f = family(0);
    int n = cat_walk(&f, NULL, NULL);
    struct tap_desc *d = calloc((size_t)n, sizeof *d);
    cat_walk(&f, NULL, d);
    const struct tap_desc *x = find(d, n, "attention_mask");
    CHECK(x && !strcmp(x->meaning, "The attention mask the model was called with; zeros are "
                                   "padding"));
    CHECK(x && x->dtype == TAP_I64 && x->ndim == 2);
    x = find(d, n, "layers.3.expert_indices");
    CHECK(x && x->dtype == TAP_I64 && !strcmp(x->axes[2], "top_k"));
    x = find(d, n, "layers.3.expert_weights");
    CHECK(x && x->dtype == TAP_F32);

    f = family(CAT_TEXT_DEC);
    cat_walk(&f, NULL, d);
    x = find(d, n, "attention_mask");
    CHECK(x && !strcmp(x->meaning, "The attention mask the model was called with (all ones)"));
    x = find(d, n, "layers.0.attention_queries");
    CHECK(x && !strcmp(x->axes[3], "qk_head_dim")); // a row without a shape keeps the table's

    f = family(CAT_TEXT_LNB | CAT_TEXT_LNB_ROTARY);
    cat_walk(&f, NULL, d);
    x = find(d, n, "layers.1.attention_queries");
    CHECK(x && !strcmp(x->axes[3], "head_dim"));
    CHECK(x && !strcmp(x->meaning, "The queries entering attention, after RoPE on the first "
                                   "rotary_pct of each head"));
    x = find(d, n, "layers.1.attention_queries_pre_rope");
    CHECK(x && !strcmp(x->axes[3], "head_dim") && !strcmp(x->meaning, "The queries before RoPE"));
    x = find(d, n, "layers.1.layer_mid"); // LNB's, not LNB_PARALLEL's
    CHECK(x && !strcmp(x->meaning, "layer_input + attention_output"));

    f = family(CAT_TEXT_LAGUNA);
    cat_walk(&f, NULL, d);
    x = find(d, n, "layers.0.layer_output");
    CHECK(x && !strcmp(x->meaning, "The residual stream leaving the block, a tensor even when the "
                                   "block returns a tuple"));
    free(d);
}

static void test_wants_kind(void) {
    struct cat_family f = family(0);
    int n = cat_walk(&f, NULL, NULL), id[6 * CAT_N];
    cat_walk(&f, id, NULL);
    uint8_t *want = calloc((size_t)n, 1);
    struct {
        int *id;
    } m = {id};
    want[CAT_ID(&m, 3, CAT_EXPERT_OUTPUTS)] = 1;
    want[CAT_ID(&m, -1, CAT_TOKEN_EMBEDDINGS)] = 1;
    CHECK(cat_wants_kind(id, 4, want, CAT_EXPERT_OUTPUTS));
    CHECK(!cat_wants_kind(id, 4, want, CAT_SCORES));
    CHECK(!cat_wants_kind(id, 4, want, CAT_TOKEN_EMBEDDINGS)); // blocks only
    CHECK(cat_wants_kind(id, 4, NULL, CAT_ATTENTION_PREMIX));  // NULL: everything
    CHECK(!cat_wants_kind(id, 4, NULL, CAT_LOGITS));
    free(want);
}

// ---- the emit helpers

struct seen {
    int n, id[4], b[4];
    struct tview v[4];
};

static void take(void *u, int id, int b, const struct tview *v) {
    struct seen *s = u;
    if (s->n < 4) s->id[s->n] = id, s->b[s->n] = b, s->v[s->n] = *v;
    s->n++;
}

static void test_emit_helpers(void) {
    const int len[2] = {2, 3};
    const int64_t off[2] = {0, 2}, ids[5] = {0};
    struct mbatch bt = {.n = 2, .n_tokens = 5, .ids = ids, .len = len, .off = off};
    const uint8_t want[3] = {0, 1, 1};
    struct seen s = {0};
    struct tap tp = {want, take, &s, NULL, NULL, false};
    int64_t idx[5 * 2] = {0};
    float buf[5 * 6] = {0};

    tap_emit_rows_i64(&tp, 0, &bt, idx, 2); // not wanted
    CHECK_EQ(s.n, 0);
    tap_emit_rows_i64(&tp, 1, &bt, idx, 2);
    CHECK_EQ(s.n, 2);
    CHECK(s.id[1] == 1 && s.b[1] == 1 && s.v[1].dtype == TAP_I64 && s.v[1].ndim == 3);
    CHECK(s.v[0].data == idx && s.v[1].data == idx + 4);
    CHECK(s.v[1].dims[0] == 1 && s.v[1].dims[1] == 3 && s.v[1].dims[2] == 2);

    s.n = 0;
    tap_emit_token_heads(&tp, 0, &bt, buf, 2, 3);
    CHECK_EQ(s.n, 0);
    tap_emit_token_heads(&tp, 2, &bt, buf, 2, 3);
    CHECK_EQ(s.n, 2);
    CHECK(s.id[0] == 2 && s.b[0] == 0 && s.v[0].dtype == TAP_F32 && s.v[0].ndim == 4);
    CHECK(s.v[0].data == buf && s.v[1].data == buf + 2 * 6);
    CHECK(s.v[1].dims[0] == 1 && s.v[1].dims[1] == 3 && s.v[1].dims[2] == 2 && s.v[1].dims[3] == 3);
}

int main(void) {
    test_walk_names_order_ids();
    test_walk_texts();
    test_wants_kind();
    test_emit_helpers();
    return check_failures ? EXIT_FAILURE : EXIT_SUCCESS;
}
