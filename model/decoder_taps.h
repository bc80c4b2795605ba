// decoder_taps.h - the kinds of value of the Llama-style families' catalogue (model/decoder.c),
// in forward order; shared by the catalogue and the forward pass (model/decoder_forward.c).
#ifndef AH_DECODER_TAPS_H
#define AH_DECODER_TAPS_H

enum dec_tap_kind {
    DT_INPUT_IDS,
    DT_ATTENTION_MASK,
    DT_TOKEN_EMBEDDINGS,
    DT_LAYER_INPUT,
    DT_ATTENTION_NORM_OUTPUT,
    DT_QUERIES_PRE_ROPE,
    DT_KEYS_PRE_ROPE,
    DT_QUERIES,
    DT_KEYS,
    DT_VALUES,
    DT_SCORES,
    DT_PROBS,
    DT_HEAD_OUTPUTS,
    DT_ATTENTION_OUTPUT,
    DT_ATTENTION_POST_NORM,
    DT_LAYER_MID,
    DT_MLP_NORM_OUTPUT,
    DT_MLP_INPUT,
    DT_MLP_ACTIVATION,
    DT_MLP_NEURONS,
    DT_ROUTER_LOGITS,
    DT_EXPERT_INDICES,
    DT_EXPERT_WEIGHTS,
    DT_EXPERT_OUTPUTS,
    DT_ROUTED_OUTPUT,
    DT_MLP_OUTPUT,
    DT_MLP_POST_NORM,
    DT_LAYER_OUTPUT,
    DT_FINAL_NORM_OUTPUT,
    DT_LM_HEAD_OUTPUT,
    DT_LOGITS,
    DT_NEXT_TOKEN_PROBS,
    DT_N
};

// catalogue id of kind k at layer l (-1 before the blocks, n_layer after), -1 if absent
#define DEC_ID(m, l, k) ((m)->id[((l) + 1) * DT_N + (k)])

#endif
