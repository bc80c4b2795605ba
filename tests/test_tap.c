// test_tap.c - the encdec catalogue's numbering and axes, globs and axis kinds.
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
    CHECK(tap_axis_kind("query") == TAP_AXIS_SEQ && tap_axis_kind("seq") == TAP_AXIS_SEQ);
    CHECK(tap_axis_kind("global+local-key") == TAP_AXIS_SEQ2);
    CHECK(tap_axis_kind("batch") == TAP_AXIS_BATCH && tap_axis_kind("head") == TAP_AXIS_FIXED);
    struct tap_desc t;
    CHECK_EQ(tap_desc_set(&t, "x", TAP_F32, "a,b,c,d,e,f", "m", 0), -1); // too many axes
}

int main(void) {
    cfg = encdec_spec_config();
    test_catalogue_numbering();
    test_glob_and_axes();
    return check_failures ? EXIT_FAILURE : EXIT_SUCCESS;
}
