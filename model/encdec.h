// encdec.h - the spec model: a causal encoder-decoder with global+local attention
// (`"architecture": "causal-encoder-decoder"`, tests/ref/spec.json, pinned in issue 2).
//
// Weights are borrowed views (valid while whoever bound them keeps them mapped); the run state
// owns one arena sized before the first forward. encdec_forward() never allocates and never fails.
#ifndef AH_ENCDEC_H
#define AH_ENCDEC_H

#include "model/batch.h"
#include "model/blocks.h"
#include "model/tap.h"

#include <stdbool.h>

struct ah_error;

struct encdec_config {
    int n_layer_enc, n_layer_dec; // num_encoder_layers, num_decoder_layers
    int hidden;                   // C
    int n_head;                   // H
    int head_dim;                 // D (even)
    int ffn_dim;                  // F
    int vocab;                    // V
    int local_window;             // W: local key j is allowed for query i iff 0 <= i - j < W
    int max_pos;                  // max_position_embeddings
    float eps;                    // rms_norm_eps
    double rope_theta;
};

// Per-block activation points, in catalogue order. X(ID, suffix, dtype, shape, meaning in the
// encoder, meaning in the decoder)
#define SRC_E "source: the block's norm1"
#define SRC_D "source: encoder_output"
#define ENCDEC_BLOCK_TAPS(X)                                                                      \
    X(INPUT, "input", TAP_F32, "batch,sequence,feature", "Block input before attention RMSNorm",  \
      "")                                                                                         \
    X(NORM1, "norm1", TAP_F32, "batch,sequence,feature",                                          \
      "Block input after attention RMSNorm; local K/V source", "")                                \
    X(Q_PRE_ROPE, "q_pre_rope", TAP_F32, "batch,head,sequence,head_dim",                          \
      "Query linear projection before RoPE", "")                                                  \
    X(Q, "q", TAP_F32, "batch,head,sequence,head_dim",                                            \
      "Query after RoPE, used in attention scores", "")                                           \
    X(GK_PRE_ROPE, "global_k_pre_rope", TAP_F32, "batch,head,sequence,head_dim",                  \
      "Global key projection before RoPE; " SRC_E, "Global key projection before RoPE; " SRC_D)   \
    X(GK, "global_k", TAP_F32, "batch,head,sequence,head_dim",                                    \
      "Global key after RoPE, used in attention scores; " SRC_E,                                  \
      "Global key after RoPE, used in attention scores; " SRC_D)                                  \
    X(GV, "global_v", TAP_F32, "batch,head,sequence,head_dim",                                    \
      "Global value projection used in attention output; " SRC_E,                                 \
      "Global value projection used in attention output; " SRC_D)                                 \
    X(LK_PRE_ROPE, "local_k_pre_rope", TAP_F32, "batch,head,sequence,head_dim",                   \
      "Local key projection before RoPE", "")                                                     \
    X(LK, "local_k", TAP_F32, "batch,head,sequence,head_dim",                                     \
      "Local key after RoPE, used in attention scores", "")                                       \
    X(LV, "local_v", TAP_F32, "batch,head,sequence,head_dim",                                     \
      "Local value projection used in attention output", "")                                      \
    X(COMBINED_K, "combined_k", TAP_F32, "batch,head,global+local-key,head_dim",                  \
      "Global keys followed by local keys on the sequence axis", "")                              \
    X(COMBINED_V, "combined_v", TAP_F32, "batch,head,global+local-key,head_dim",                  \
      "Global values followed by local values on the sequence axis", "")                          \
    X(GLOBAL_MASK, "global_mask", TAP_I64, "batch,broadcast-head,query,key",                      \
      "Allowed global key positions; causal", "")                                                 \
    X(LOCAL_MASK, "local_mask", TAP_I64, "batch,broadcast-head,query,key",                        \
      "Allowed local key positions; causal and within local window", "")                          \
    X(ATTENTION_MASK, "attention_mask", TAP_I64, "batch,broadcast-head,query,global+local-key",   \
      "Global mask followed by local mask; 1 allowed, 0 blocked", "")                             \
    X(ATTN_SCORES, "attn_scores", TAP_F32, "batch,head,query,global+local-key",                   \
      "Scaled Q times transposed combined K, before mask", "")                                    \
    X(ATTN_MASKED_SCORES, "attn_masked_scores", TAP_F32, "batch,head,query,global+local-key",     \
      "Attention scores with blocked positions set to negative infinity", "")                     \
    X(ATTN_PROBS, "attn_probs", TAP_F32, "batch,head,query,global+local-key",                     \
      "Softmax probabilities actually multiplied by combined V", "")                              \
    X(ATTN_OUTPUT, "attn_output", TAP_F32, "batch,sequence,feature",                              \
      "Attention result after output projection, before residual add", "")                        \
    X(AFTER_ATTN_RESIDUAL, "after_attn_residual", TAP_F32, "batch,sequence,feature",              \
      "Hidden state after attention residual add", "")                                            \
    X(NORM2, "norm2", TAP_F32, "batch,sequence,feature", "Hidden state after FFN RMSNorm", "")    \
    X(FFN_GATE, "ffn_gate", TAP_F32, "batch,sequence,ffn_dim", "SwiGLU gate linear projection",   \
      "")                                                                                         \
    X(FFN_UP, "ffn_up", TAP_F32, "batch,sequence,ffn_dim", "SwiGLU up linear projection", "")     \
    X(FFN_ACTIVATION, "ffn_activation", TAP_F32, "batch,sequence,ffn_dim",                        \
      "SwiGLU product SiLU(gate) times up", "")                                                   \
    X(FFN_OUTPUT, "ffn_output", TAP_F32, "batch,sequence,feature",                                \
      "FFN down projection before residual add", "")                                              \
    X(OUTPUT, "output", TAP_F32, "batch,sequence,feature", "Block output after FFN residual add", \
      "")

enum encdec_block_tap {
#define X(id, suffix, dtype, shape, m_enc, m_dec) ED_##id,
    ENCDEC_BLOCK_TAPS(X)
#undef X
        ED_N_BLOCK_TAPS
};

// Catalogue ids: token_embeddings, encoder blocks, encoder_pre_final_norm, encoder_output,
// decoder blocks, decoder_output, final_hidden, logits (the order of tests/ref/spec.json).
int encdec_n_taps(const struct encdec_config *c);
int encdec_tap_id_block(const struct encdec_config *c, bool dec, int layer, int point);
enum {
    ED_TOKEN_EMBEDDINGS = 0,
}; // other model-level ids depend on the layer counts:
int encdec_id_enc_pre_final_norm(const struct encdec_config *c);
int encdec_id_enc_output(const struct encdec_config *c);
int encdec_id_dec_output(const struct encdec_config *c);
int encdec_id_final_hidden(const struct encdec_config *c);
int encdec_id_logits(const struct encdec_config *c);

// Fills out[0..encdec_n_taps) (name, dtype, semantic shape, meaning, block). Blocks are numbered
// 0..n_layer_enc-1 (encoder), then the decoder; the LM head is block n_layer_enc + n_layer_dec.
void encdec_catalogue(const struct encdec_config *c, struct tap_desc *out);
// Length of a fixed (not batch, not sequence) axis, or -1 for an unknown axis name.
int64_t encdec_axis_size(const struct encdec_config *c, const char *axis);

// ---- weights ----
struct encdec_block_w {
    const float *norm1, *norm2;  // (C)
    const float *wq, *wkg, *wvg; // (H*D, C)
    const float *wkl, *wvl;      // (H*D, C)
    const float *wo;             // (C, H*D)
    const float *wgate, *wup;    // (F, C)
    const float *wdown;          // (C, F)
};

struct encdec {
    struct encdec_config cfg;
    const float *embed;               // (V, C), also the tied LM head; borrowed
    const float *enc_norm, *dec_norm; // (C); borrowed
    struct encdec_block_w *enc, *dec; // (n_layer_enc), (n_layer_dec); owned arrays of views
};

// Allocates m's block arrays and returns in *list (caller frees) the tensors to bind, with dst
// pointing into m. Returns the count, or a negative AH_E* code.
int encdec_init(struct encdec *m, const struct encdec_config *c, struct model_tensor **list);
void encdec_free(struct encdec *m); // safe on a zeroed struct

// ---- run state ----
struct encdec_state {
    int max_T;            // longest prompt
    int64_t max_tokens;   // rows of the largest batch
    float *x;             // (N, C) residual stream; owned (arena)
    float *xn;            // (N, C) normed input of the current step
    float *q, *kg, *vg;   // (N, H*D)
    float *kl, *vl;       // (N, H*D)
    float *y;             // (N, H*D) attention heads concatenated
    float *ao, *fo;       // (N, C) attention output, FFN output
    float *gate, *up;     // (N, F)
    float *act;           // (N, F)
    float *enc_out;       // (N, C) encoder_output: the decoder's global K/V source
    float *att;           // (H, T, 2T) scores -> masked -> probs of one prompt
    int64_t n_att;        // its floats
    float *logits;        // (T, V) one prompt
    float *cos_t, *sin_t; // (max_T, D/2)
    float *scratch;       // (H, 2T, D) tap-only transposes
    int64_t *mask;        // (T, 2T) tap-only masks
    void *arena;          // owned: everything above
};

int encdec_state_init(struct encdec_state *s, const struct encdec_config *c, int max_T,
                      int64_t max_tokens);
void encdec_state_free(struct encdec_state *s); // safe on a zeroed struct

// Runs blocks [blk_begin, blk_end) on the batch, emitting wanted taps. blk_begin == 0 embeds the
// tokens; crossing the end of the encoder computes encoder_output into s->enc_out (a stage that
// starts in the decoder must find it there); blk_end == n_blocks also runs the final norm and the
// LM head if their taps are wanted. Every prompt of the batch must have len <= s->max_T.
void encdec_forward(const struct encdec *m, struct encdec_state *s, const struct mbatch *bt,
                    const struct tap *tp, int blk_begin, int blk_end);

// The spec model's dimensions: tests/ref/spec.json plus those pinned in issue 2 (ffn_dim 1024,
// rms_norm_eps 1e-6, rope_theta 10000).
struct encdec_config encdec_spec_config(void);

// Model FLOPs (multiply-adds x 2) of one prompt of length T through all blocks, without the LM
// head.
double encdec_flops(const struct encdec_config *c, int T, bool with_head);

#endif
