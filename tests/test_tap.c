// test_tap.c - the encdec catalogue's numbering and axes, globs and axis kinds; the write-back
// seam (a writer replaces rows and heads in the live buffer, a const view is refused).
#include "model/blocks.h" // head_emit
#include "model/encdec.h"
#include "model/tap.h"
#include "tests/check.h"

#include <stdlib.h>
#include <string.h>

static struct encdec_config cfg;

static void test_catalogue_numbering(void) {
    int n = encdec_n_taps(&cfg);
    CHECK_EQ(n, 214);
    struct tap_desc *d = calloc((size_t)n, sizeof *d);
    encdec_catalogue(&cfg, d);
    CHECK(!strcmp(d[ED_TOKEN_EMBEDDINGS].name, "token_embeddings"));
    CHECK(!strcmp(d[encdec_tap_id_block(&cfg, false, 2, ED_ATTN_PROBS)].name,
                  "encoder_2_attn_probs"));
    CHECK(!strcmp(d[encdec_tap_id_block(&cfg, true, 3, ED_OUTPUT)].name, "decoder_3_output"));
    CHECK(!strcmp(d[encdec_id_enc_output(&cfg)].name, "encoder_output"));
    CHECK(!strcmp(d[encdec_id_logits(&cfg)].name, "logits"));
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < i; j++)
            CHECK(strcmp(d[i].name, d[j].name) != 0);
        CHECK(i == 0 || d[i].block >= d[i - 1].block); // catalogue order is forward order
        CHECK(!strcmp(d[i].axes[0], "batch"));
        for (int k = 1; k < d[i].ndim; k++) {
            enum tap_axis_kind kind = tap_axis_kind(d[i].axes[k]);
            CHECK(kind == TAP_AXIS_SEQ || kind == TAP_AXIS_SEQ2 ||
                  encdec_axis_size(&cfg, d[i].axes[k]) > 0);
        }
    }
    CHECK(d[encdec_id_logits(&cfg)].block == 8 && d[ED_TOKEN_EMBEDDINGS].block == -1);
    CHECK_EQ(tap_n_seq_axes(&d[encdec_tap_id_block(&cfg, false, 0, ED_ATTENTION_MASK)]), 2);
    free(d);
}

static void test_glob_and_axes(void) {
    CHECK(tap_glob_match("encoder_*_q", "encoder_3_q"));
    CHECK(!tap_glob_match("encoder_*_q", "encoder_3_q_pre_rope"));
    CHECK(tap_glob_match("decoder_[02]_output", "decoder_2_output"));
    CHECK(!tap_glob_match("decoder_[02]_output", "decoder_1_output"));
    CHECK(tap_glob_match("logit?", "logits"));
    struct tap_desc cat[3] = {{.name = "a"}, {.name = "logits"}, {.name = "logits_2"}};
    CHECK_EQ(tap_desc_find(cat, 3, "logits"), 1);
    CHECK_EQ(tap_desc_find(cat, 3, "logit"), -1);
    CHECK_EQ(tap_desc_find(cat, 2, "logits_2"), -1);
    CHECK(tap_axis_kind("query") == TAP_AXIS_SEQ && tap_axis_kind("seq") == TAP_AXIS_SEQ);
    CHECK(tap_axis_kind("global+local-key") == TAP_AXIS_SEQ2);
    CHECK(tap_axis_kind("batch") == TAP_AXIS_BATCH && tap_axis_kind("head") == TAP_AXIS_FIXED);
    struct tap_desc t;
    CHECK_EQ(tap_desc_set(&t, "x", TAP_F32, "a,b,c,d,e,f", "m", 0), -1); // too many axes
}

// ---- the write-back seam: a writer that adds 1000 + id to what it is handed, a take that
// records what it saw after the write

struct seam {
    float seen[64];
    int n_seen, refused, writes;
};

static void seam_write(void *u, int id, int b, float *live, const struct tview *v) {
    struct seam *s = u;
    (void)b;
    if (!live) {
        s->refused++;
        return;
    }
    CHECK(v->data == live);
    int64_t n = 1;
    for (int k = 0; k < v->ndim; k++)
        n *= v->dims[k];
    for (int64_t i = 0; i < n; i++)
        live[i] += 1000.0f + (float)id;
    s->writes++;
}

static void seam_take(void *u, int id, int b, const struct tview *v) {
    struct seam *s = u;
    (void)id, (void)b;
    const float *x = v->data;
    int64_t n = 1;
    for (int k = 0; k < v->ndim; k++)
        n *= v->dims[k];
    for (int64_t i = 0; i < n && s->n_seen < 64; i++)
        s->seen[s->n_seen++] = x[i];
}

static void test_write_back(void) {
    // two prompts of 2 and 1 tokens, rows of H = 2 heads of D = 2 (width 4)
    int len[2] = {2, 1};
    int64_t off[2] = {0, 2}, ids[3] = {0, 0, 0};
    struct mbatch bt = {2, 3, ids, len, off};
    float buf[12], scratch[8];
    for (int i = 0; i < 12; i++)
        buf[i] = (float)i;
    uint8_t want[3] = {1, 1, 1}, wr[3] = {1, 0, 1};
    struct seam s = {0};
    struct tap tp = {want, seam_take, &s, wr, seam_write, false};
    tap_emit_rows(&tp, 0, &bt, buf, 4); // written: every row + 1000, the take sees that
    CHECK_EQ(s.writes, 2);
    CHECK(buf[0] == 1000.0f && buf[11] == 1011.0f && s.seen[5] == 1005.0f);
    tap_emit_rows(&tp, 1, &bt, buf, 4); // wanted only: untouched
    CHECK(buf[0] == 1000.0f);
    // heads: the writer gets the (1, H, T, D) copy, which goes back into the (T, H D) rows
    for (int i = 0; i < 12; i++)
        buf[i] = (float)i;
    s = (struct seam){0};
    tap_emit_heads(&tp, 2, &bt, buf, 2, 2, scratch);
    for (int i = 0; i < 12; i++)
        CHECK(buf[i] == (float)i + 1002.0f);
    CHECK(s.seen[0] == 1002.0f && s.seen[2] == 1006.0f); // head 0 of token 1: row 1, cols 0..1
    // a const view (tap_emit) and int64 rows: refused once a prompt, the data untouched
    s = (struct seam){0};
    struct tview v = {buf, TAP_F32, 3, {1, 2, 4}};
    tap_emit(&tp, 0, 0, &v);
    int64_t e[3] = {7, 8, 9};
    tap_emit_rows_i64(&tp, 2, &bt, e, 1);
    CHECK_EQ(s.refused, 3);
    CHECK_EQ(s.writes, 0);
    CHECK(buf[0] == 1002.0f && e[0] == 7);
    // the head's values (lm_head_output, logits, next_token_probs) are const views: refused
    s = (struct seam){0};
    float logits[3 * 4 + 4]; // (T, V) and the next-token row
    for (int i = 0; i < 16; i++)
        logits[i] = (float)i;
    uint8_t wall[3] = {1, 1, 1};
    struct tap th = {want, seam_take, &s, wall, seam_write, false};
    head_emit(&th, 0, logits, 3, 4, 0, 1, 2, 0.0f);
    CHECK_EQ(s.refused, 3);
    CHECK_EQ(s.writes, 0);
    CHECK(logits[0] == 0.0f && logits[11] == 11.0f);
    // no write array: tap_wants as before
    struct tap plain = {want, seam_take, &s, NULL, NULL, false};
    CHECK(tap_wants(&plain, 1) && !tap_writes(&plain, 1));
    uint8_t none[3] = {0, 0, 0};
    struct tap only_w = {none, seam_take, &s, wr, seam_write, false};
    CHECK(tap_wants(&only_w, 0) && !tap_wants(&only_w, 1)); // a written id is computed
}

int main(void) {
    cfg = encdec_spec_config();
    test_catalogue_numbering();
    test_glob_and_axes();
    test_write_back();
    return check_failures ? EXIT_FAILURE : EXIT_SUCCESS;
}
