// catalogue.h - the one table of value names the Llama-style decoder (model/decoder*.c), the
// LayerNorm block of GPT-2 and GPT-NeoX (model/lnblock*.c) and Laguna (model/families/laguna*.c)
// make their catalogues from: each value's name, dtype, semantic shape, meaning and the block
// options that produce it (tests/ref/hf/NAMES.md, tests/ref/laguna-nnterp.txt).
//
// A family's catalogue is this table walked in forward order: the values before the blocks
// (layer -1, bare names), each block's (`layers.{i}.{name}`), the values after them (layer
// n_layer, bare names). A value is in block i when every option it needs is one block i has. The
// shapes and meanings are stored in outputs, so where a family's text differs from the table's it
// is kept as that family's override row (CAT_OVERRIDES), not changed: the table's text is the one
// most of the families share, Laguna's (the nnterp text) where they all differ.
//
// Not made from this table: the spec model (model/families/encdec.c), whose names are spec.json's
// (`encoder_{i}_{name}`, `decoder_{i}_{name}`, two key sets a decoder block) and checked against
// it, and the test-only identity family (model/families/identity.c), whose three values stand in
// for a family's in tests; neither shares a name or a block with the three here.
#ifndef AH_CATALOGUE_H
#define AH_CATALOGUE_H

#include "model/tap.h"

#include <stdbool.h>
#include <stdint.h>

// The options a value needs (all of them) and a block has.
enum cat_need {
    CAT_BEFORE = 1 << 0,    // a root value before the blocks (layer -1)
    CAT_AFTER = 1 << 1,     // a root value after the blocks (layer n_layer)
    CAT_BLOCK = 1 << 2,     // every block
    CAT_PRE_NORM = 1 << 3,  // norms before the attention and the MLP
    CAT_POST_NORM = 1 << 4, // norms on what the attention and the MLP add (Gemma's, OLMo 2's)
    CAT_PRE_ROPE = 1 << 5,  // queries and keys shown before RoPE too
    CAT_GATE = 1 << 6,      // the head outputs gated before the output projection (Laguna)
    CAT_DENSE = 1 << 7,     // a dense MLP
    CAT_MOE = 1 << 8,       // a mixture of experts
    CAT_SHARED = 1 << 9,    // a shared expert beside the routed ones (Laguna)
    CAT_SINKS = 1 << 10,    // attention sinks: a learned logit per head in the softmax (gpt-oss)
    CAT_CLAMPED = 1 << 11,  // experts with the clamped SwiGLU, their gate and up shown (gpt-oss)
    CAT_MLA = 1 << 20,      // multi-head latent attention (DeepSeek-V3, model/mla.h)
    CAT_Q_LORA = 1 << 21,   // ... with a q latent (q_lora_rank not null)
    CAT_SIGMOID = 1 << 22,  // a sigmoid router with a choice bias and groups (DeepSeek-V3)
};

#define CAT_BSH "batch,seq,hidden_size"
#define CAT_BHQ "batch,num_heads,seq,qk_head_dim"
#define CAT_BKQ "batch,num_kv_heads,seq,qk_head_dim"
#define CAT_BKS "batch,num_kv_heads,seq,head_dim"
#define CAT_ATT "batch,num_heads,query,key"
#define CAT_BSI "batch,seq,intermediate_size"

// X(KIND, name, dtype, semantic shape, needs, meaning), in forward order
#define CAT_TABLE(X)                                                                               \
    X(INPUT_IDS, "input_ids", TAP_I64, "batch,seq", CAT_BEFORE,                                    \
      "The token ids the model was called with")                                                   \
    X(ATTENTION_MASK, "attention_mask", TAP_I64, "batch,seq", CAT_BEFORE,                          \
      "The attention mask the model was called with; zeros are padding")                           \
    X(TOKEN_EMBEDDINGS, "token_embeddings", TAP_F32, CAT_BSH, CAT_BEFORE,                          \
      "The embedding module's output; layers[0].input is what enters the first block")             \
    X(LAYER_INPUT, "layer_input", TAP_F32, CAT_BSH, CAT_BLOCK,                                     \
      "The residual stream entering the block")                                                    \
    X(ATTENTION_NORM_OUTPUT, "attention_norm_output", TAP_F32, CAT_BSH, CAT_PRE_NORM,              \
      "The normed stream entering the attention")                                                  \
    X(Q_LATENT, "attention_q_latent", TAP_F32, "batch,seq,q_lora_rank", CAT_MLA | CAT_Q_LORA,      \
      "q_a_proj's output: the compressed query latent")                                            \
    X(Q_LATENT_NORM, "attention_q_latent_norm", TAP_F32, "batch,seq,q_lora_rank",                  \
      CAT_MLA | CAT_Q_LORA, "q_a_layernorm's output, what q_b_proj reads")                         \
    X(KV_LATENT, "attention_kv_latent", TAP_F32, "batch,seq,kv_lora_rank", CAT_MLA,                \
      "The compressed key/value latent: kv_a_proj_with_mqa's first kv_lora_rank columns")          \
    X(KV_LATENT_NORM, "attention_kv_latent_norm", TAP_F32, "batch,seq,kv_lora_rank", CAT_MLA,      \
      "kv_a_layernorm's output, what kv_b_proj reads")                                             \
    X(QUERIES_PRE_ROPE, "attention_queries_pre_rope", TAP_F32, CAT_BHQ, CAT_PRE_ROPE,              \
      "The queries before RoPE")                                                                   \
    X(KEYS_PRE_ROPE, "attention_keys_pre_rope", TAP_F32, CAT_BKQ, CAT_PRE_ROPE,                    \
      "The keys before RoPE")                                                                      \
    X(ROPE_KEY, "attention_rope_key", TAP_F32, "batch,seq,qk_rope_head_dim", CAT_MLA,              \
      "The one rotary key every head shares (kv_a_proj_with_mqa's last columns), after RoPE")      \
    X(QUERIES, "attention_queries", TAP_F32, CAT_BHQ, CAT_BLOCK, "The queries entering attention") \
    X(KEYS, "attention_keys", TAP_F32, CAT_BKQ, CAT_BLOCK, "The keys entering attention")          \
    X(VALUES, "attention_values", TAP_F32, CAT_BKS, CAT_BLOCK, "The values entering attention")    \
    X(SCORES, "attention_scores", TAP_F32, CAT_ATT, CAT_BLOCK,                                     \
      "The attention scores entering the softmax, masked")                                         \
    X(PROBABILITIES, "attention_probabilities", TAP_F32, CAT_ATT, CAT_BLOCK,                       \
      "The attention pattern the values are mixed with")                                           \
    X(ATTENTION_SINKS, "attention_sinks", TAP_F32, "batch,num_heads", CAT_SINKS,                   \
      "Each head's learned sink logit (a parameter, the same for every prompt): one more column "  \
      "of every row's softmax, dropped after it")                                                  \
    X(SINK_PROBABILITIES, "attention_sink_probabilities", TAP_F32, "batch,num_heads,query",        \
      CAT_SINKS,                                                                                   \
      "The share of each query row's softmax the sink takes: 1 minus the row's sum of "            \
      "attention_probabilities")                                                                   \
    X(HEAD_OUTPUTS, "attention_head_outputs", TAP_F32, "batch,seq,num_heads,head_dim", CAT_BLOCK,  \
      "The per-head outputs before the output projection")                                         \
    X(ATTENTION_PREMIX, "attention_premix", TAP_F32, "batch,seq,num_heads,head_dim", CAT_GATE,     \
      "Every head's output side by side, as the output projection takes it")                       \
    X(ATTENTION_OUTPUT, "attention_output", TAP_F32, CAT_BSH, CAT_BLOCK,                           \
      "What the attention adds to the residual stream")                                            \
    X(ATTENTION_POST_NORM, "attention_post_norm_output", TAP_F32, CAT_BSH, CAT_POST_NORM,          \
      "post_attention_layernorm(attention_output): what the attention adds to the residual "       \
      "stream")                                                                                    \
    X(LAYER_MID, "layer_mid", TAP_F32, CAT_BSH, CAT_BLOCK,                                         \
      "The residual stream after the attention add")                                               \
    X(MLP_NORM_OUTPUT, "mlp_norm_output", TAP_F32, CAT_BSH, CAT_PRE_NORM,                          \
      "The normed stream entering the MLP")                                                        \
    X(MLP_INPUT, "mlp_input", TAP_F32, CAT_BSH, CAT_BLOCK, "What the MLP is called with")          \
    X(MLP_ACTIVATION, "mlp_activation", TAP_F32, CAT_BSI, CAT_DENSE,                               \
      "The activation function's output")                                                          \
    X(MLP_NEURONS, "mlp_neurons", TAP_F32, CAT_BSI, CAT_DENSE,                                     \
      "What the down projection receives: act(gate)\u00b7up on a gated MLP, the activation "       \
      "itself otherwise")                                                                          \
    X(SHARED_EXPERT_OUTPUT, "shared_expert_output", TAP_F32, CAT_BSH, CAT_MOE | CAT_SHARED,        \
      "The shared expert's output")                                                                \
    X(ROUTER_LOGITS, "router_logits", TAP_F32, "batch,seq,num_experts", CAT_MOE,                   \
      "The router's logits, one per expert, before the scoring")                                   \
    X(ROUTER_SCORES, "router_scores", TAP_F32, "batch,seq,num_experts", CAT_MOE | CAT_SIGMOID,     \
      "sigmoid(router_logits): the scores the chosen experts are weighted by")                     \
    X(ROUTER_CHOICE_SCORES, "router_choice_scores", TAP_F32, "batch,seq,num_experts",              \
      CAT_MOE | CAT_SIGMOID,                                                                       \
      "router_scores + e_score_correction_bias: what the experts are chosen by (not weighted)")    \
    X(ROUTER_GROUP_SCORES, "router_group_scores", TAP_F32, "batch,seq,n_group",                    \
      CAT_MOE | CAT_SIGMOID,                                                                       \
      "Each expert group's score, the sum of its two best choice scores; the topk_group best "     \
      "groups are the ones the experts are chosen from")                                           \
    X(EXPERT_INDICES, "expert_indices", TAP_I64, "batch,seq,top_k", CAT_MOE,                       \
      "The expert each routing slot sends the token to")                                           \
    X(EXPERT_WEIGHTS, "expert_weights", TAP_F32, "batch,seq,top_k", CAT_MOE,                       \
      "The weight each selected expert's output is scaled by")                                     \
    X(EXPERT_GATE, "expert_gate", TAP_F32, "batch,seq,top_k,intermediate_size", CAT_CLAMPED,       \
      "Each routing slot's expert gate projection (+ bias), before the clamp")                     \
    X(EXPERT_UP, "expert_up", TAP_F32, "batch,seq,top_k,intermediate_size", CAT_CLAMPED,           \
      "Each routing slot's expert up projection (+ bias), before the clamp")                       \
    X(EXPERT_NEURONS, "expert_neurons", TAP_F32, "batch,seq,top_k,intermediate_size", CAT_CLAMPED, \
      "What each slot's expert down projection receives: (clamp(up) + 1) * g * sigmoid(alpha g), " \
      "g = min(gate, limit)")                                                                      \
    X(EXPERT_OUTPUTS, "expert_outputs", TAP_F32, "batch,seq,top_k,hidden_size", CAT_MOE,           \
      "Each routing slot's weighted expert output")                                                \
    X(ROUTED_OUTPUT, "routed_output", TAP_F32, CAT_BSH, CAT_MOE,                                   \
      "The routed experts' combined output, times routed_scaling_factor")                          \
    X(MLP_OUTPUT, "mlp_output", TAP_F32, CAT_BSH, CAT_BLOCK,                                       \
      "What the MLP adds to the residual stream")                                                  \
    X(MLP_POST_NORM, "mlp_post_norm_output", TAP_F32, CAT_BSH, CAT_POST_NORM,                      \
      "post_feedforward_layernorm(mlp_output): what the MLP adds")                                 \
    X(LAYER_OUTPUT, "layer_output", TAP_F32, CAT_BSH, CAT_BLOCK,                                   \
      "The residual stream leaving the block")                                                     \
    X(FINAL_NORM_OUTPUT, "final_norm_output", TAP_F32, CAT_BSH, CAT_AFTER,                         \
      "The residual stream after the final norm, what lm_head reads")                              \
    X(LM_HEAD_OUTPUT, "lm_head_output", TAP_F32, "batch,seq,vocab_size", CAT_AFTER,                \
      "The head's logits before anything the model does past lm_head (a softcap, a scale)")        \
    X(LOGITS, "logits", TAP_F32, "batch,seq,vocab_size", CAT_AFTER,                                \
      "The logits the model returns, after anything it does past lm_head (a softcap, a scale)")    \
    X(NEXT_TOKEN_PROBS, "next_token_probs", TAP_F32, "batch,vocab_size", CAT_AFTER,                \
      "The next-token distribution at the last position; derived, read-only")

enum cat_kind {
#define CAT_ENUM(kind, name, dtype, shape, needs, meaning) CAT_##kind,
    CAT_TABLE(CAT_ENUM)
#undef CAT_ENUM
        CAT_N
};

// The families' own texts: a family walks the table with a set of these (enum cat_texts bits),
// and a row of a set it has replaces the table's shape (NULL: the table's) and meaning.
enum cat_texts {
    CAT_TEXT_DEC = 1 << 0,          // the Llama-style decoder (model/decoder.c)
    CAT_TEXT_LNB = 1 << 1,          // the LayerNorm block (model/lnblock.c)
    CAT_TEXT_LNB_PARALLEL = 1 << 2, // ... with a parallel residual (GPT-NeoX)
    CAT_TEXT_LNB_ROTARY = 1 << 3,   // ... with rotary positions (GPT-NeoX)
    CAT_TEXT_LAGUNA = 1 << 4,       // Laguna: the table's (nnterp) texts but its layer_output
    CAT_TEXT_DSV3 = 1 << 20,        // DeepSeek-V3 (after DEC's): MLA's heads, its router
};

#define CAT_BHS "batch,num_heads,seq,head_dim"

// Y(set, KIND, shape or NULL, meaning)
#define CAT_OVERRIDES(Y)                                                                           \
    Y(DEC, ATTENTION_MASK, NULL, "The attention mask the model was called with (all ones)")        \
    Y(DEC, TOKEN_EMBEDDINGS, NULL,                                                                 \
      "The embedding module's output (Gemma 2: unscaled; Gemma 3: times sqrt(hidden_size))")       \
    Y(DEC, ATTENTION_NORM_OUTPUT, NULL, "input_layernorm's output, what the attention reads")      \
    Y(DEC, QUERIES_PRE_ROPE, NULL,                                                                 \
      "The queries before RoPE (after q_norm where the family has one)")                           \
    Y(DEC, KEYS_PRE_ROPE, NULL, "The keys before RoPE (after k_norm where the family has one)")    \
    Y(DEC, QUERIES, NULL, "The queries entering attention (projection, bias, q_norm, RoPE)")       \
    Y(DEC, KEYS, NULL, "The keys entering attention (projection, bias, k_norm, RoPE)")             \
    Y(DEC, SCORES, NULL,                                                                           \
      "q.k times the scale, soft-capped (Gemma 2), -inf where masked: what the softmax reads")     \
    Y(DEC, HEAD_OUTPUTS, NULL, "Each head's P.V, what o_proj receives")                            \
    Y(DEC, ATTENTION_OUTPUT, NULL, "o_proj's output (Gemma: before post_attention_layernorm)")     \
    Y(DEC, MLP_NORM_OUTPUT, NULL,                                                                  \
      "The normed stream the MLP reads (Gemma: pre_feedforward_layernorm)")                        \
    Y(DEC, MLP_ACTIVATION, NULL, "act(gate_proj(x))")                                              \
    Y(DEC, MLP_NEURONS, NULL, "act(gate_proj(x)) * up_proj(x): what down_proj receives")           \
    Y(DEC, ROUTER_LOGITS, NULL, "The router's logits, before the softmax")                         \
    Y(DEC, EXPERT_INDICES, NULL, "The top-k experts of softmax(router_logits), largest first")     \
    Y(DEC, EXPERT_WEIGHTS, NULL, "Their probabilities (renormalised: Mixtral, norm_topk_prob)")    \
    Y(DEC, EXPERT_OUTPUTS, NULL, "Each slot's weighted expert output")                             \
    Y(DEC, ROUTED_OUTPUT, NULL, "The sum over slots (equals mlp_output)")                          \
    Y(DEC, MLP_OUTPUT, NULL, "The MLP module's output (Gemma: before post_feedforward_layernorm)") \
    Y(DEC, FINAL_NORM_OUTPUT, NULL, "model.norm's output, what the head reads")                    \
    Y(DEC, LM_HEAD_OUTPUT, NULL, "final_norm_output times the head (the embedding when tied)")     \
    Y(DEC, LOGITS, NULL, "The model's logits: lm_head_output, soft-capped by Gemma 2")             \
    Y(DEC, NEXT_TOKEN_PROBS, NULL, "softmax of the logits at the last position")                   \
    Y(LNB, TOKEN_EMBEDDINGS, NULL,                                                                 \
      "The token embedding's output (GPT-2: wte alone, before the learned positions that "         \
      "layers.0.layer_input adds)")                                                                \
    Y(LNB, ATTENTION_NORM_OUTPUT, NULL, "The normed stream entering the attention (LayerNorm)")    \
    Y(LNB, QUERIES_PRE_ROPE, CAT_BHS, "The queries before RoPE")                                   \
    Y(LNB, KEYS_PRE_ROPE, CAT_BKS, "The keys before RoPE")                                         \
    Y(LNB, QUERIES, CAT_BHS, "The queries entering attention")                                     \
    Y(LNB, KEYS, CAT_BKS, "The keys entering attention")                                           \
    Y(LNB, LAYER_MID, NULL, "layer_input + attention_output")                                      \
    Y(LNB, MLP_NEURONS, NULL, "What the down projection receives: the activation itself")          \
    Y(LNB, FINAL_NORM_OUTPUT, NULL,                                                                \
      "The residual stream after the final norm, what the head reads")                             \
    Y(LNB, LM_HEAD_OUTPUT, NULL, "The head's logits")                                              \
    Y(LNB, LOGITS, NULL, "The logits the model returns (the head's: no softcap, no scale)")        \
    Y(LNB_PARALLEL, LAYER_MID, NULL,                                                               \
      "layer_input + attention_output: in a parallel block nothing reads it (the MLP reads "       \
      "layer_input), layer_mid + mlp_output == layer_output")                                      \
    Y(LNB_PARALLEL, MLP_NORM_OUTPUT, NULL,                                                         \
      "The normed stream entering the MLP: post_attention_layernorm(layer_input) in a parallel "   \
      "block")                                                                                     \
    Y(LNB_ROTARY, QUERIES, CAT_BHS,                                                                \
      "The queries entering attention, after RoPE on the first rotary_pct of each head")           \
    Y(LNB_ROTARY, KEYS, CAT_BKS,                                                                   \
      "The keys entering attention, after RoPE on the first rotary_pct of each head")              \
    Y(DSV3, QUERIES_PRE_ROPE, NULL,                                                                \
      "Each head's query [nope | rope] before RoPE (q_b_proj's or q_proj's output)")               \
    Y(DSV3, KEYS_PRE_ROPE, NULL,                                                                   \
      "Each head's key [k_nope from kv_b_proj | the shared rotary key] before RoPE")               \
    Y(DSV3, QUERIES, NULL,                                                                         \
      "The queries entering attention: the rope part after RoPE (de-interleaved first with "       \
      "rope_interleave, as transformers leaves it)")                                               \
    Y(DSV3, KEYS, NULL,                                                                            \
      "The keys entering attention: k_nope, then the shared rotary key after RoPE")                \
    Y(DSV3, VALUES, NULL, "Each head's value from kv_b_proj (v_head_dim wide)")                    \
    Y(DSV3, SCORES, NULL,                                                                          \
      "q.k times qk_head_dim^-0.5 (times YaRN's mscale(factor, mscale_all_dim)^2), -inf where "    \
      "masked")                                                                                    \
    Y(DSV3, ROUTER_LOGITS, NULL, "The router's logits (mlp.gate), before the sigmoid")             \
    Y(DSV3, EXPERT_INDICES, NULL,                                                                  \
      "The top-k experts by router_choice_scores within the chosen groups, largest first")         \
    Y(DSV3, EXPERT_WEIGHTS, NULL,                                                                  \
      "Their router_scores, renormalised (norm_topk_prob), times routed_scaling_factor")           \
    Y(DSV3, SHARED_EXPERT_OUTPUT, NULL, "mlp.shared_experts' output, added to routed_output")      \
    Y(DSV3, ROUTED_OUTPUT, NULL, "The sum over slots of the weighted expert outputs")              \
    Y(DSV3, MLP_OUTPUT, NULL,                                                                      \
      "The MLP's output: a dense MLP's, or routed_output + shared_expert_output")                  \
    Y(LAGUNA, LAYER_OUTPUT, NULL,                                                                  \
      "The residual stream leaving the block, a tensor even when the block returns a tuple")

// What a family's catalogue is made from.
struct cat_family {
    int n_layer;
    unsigned texts; // enum cat_texts: the override rows that apply, later rows winning
    // the options of block l past CAT_BLOCK (enum cat_need bits); the walk adds CAT_BLOCK
    unsigned (*block)(const void *u, int l);
    const void *u; // the family's configuration, passed to block
};

// Walks f's catalogue in forward order: catalogue ids into id[(l + 1) * CAT_N + kind] (-1 where
// the value is absent; (n_layer + 2) x CAT_N ints) and descriptions into out; either may be
// NULL. Returns the count.
int cat_walk(const struct cat_family *f, int *id, struct tap_desc *out);

// catalogue id of value `kind` of layer l (-1 before the blocks, n_layer after), -1 if absent
#define CAT_ID(m, l, kind) ((m)->id[((l) + 1) * CAT_N + (kind)])

// Whether want (catalogue-indexed; NULL: everything) asks for value `kind` of any block, given
// the id table cat_walk filled.
bool cat_wants_kind(const int *id, int n_layer, const uint8_t *want, enum cat_kind kind);

// How far a forward call runs block l (an enum cat_kind: the block's values come in that order):
// CAT_LAYER_OUTPUT, the whole block, unless l is the call's last block (blk_end - 1), tp says
// nothing reads the stream after it (tp->stream_ends) and, when blk_end is n_layer, no value
// after the blocks is wanted; then the last kind of block l that tp wants, or -1 for none. The
// rest of the block is work nobody asked for.
int cat_block_reach(const int *id, int n_layer, int l, int blk_end, const struct tap *tp);

#endif
