// tap.h - named activations ("taps"): the catalogue entry of each name, the view a forward pass
// emits, and the ask-then-observe contract between a forward pass and whoever records it.
//
// A family numbers its activations 0..n-1 (its catalogue order). A forward pass asks
// `tap_wants(tp, id)` before any tap-only work and calls `tap_emit(tp, id, b, &view)` right after
// the step that makes the value. `take` must copy what it keeps before returning: buffers are
// reused. Views describe one prompt (batch axis of length 1) in the catalogue's semantic shape,
// outermost first, contiguous.
#ifndef AH_TAP_H
#define AH_TAP_H

#include "model/batch.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TAP_MAX_DIMS 5
#define TAP_NAME_MAX 64
#define TAP_AXIS_MAX 24

enum tap_dtype { TAP_F32 = 0, TAP_I64 = 1 };

struct tview {
    const void *data; // borrowed: valid only during take()
    enum tap_dtype dtype;
    int ndim;
    int64_t dims[TAP_MAX_DIMS];
};

// One named activation of a model's catalogue.
struct tap_desc {
    char name[TAP_NAME_MAX]; // e.g. "encoder_0_q"
    enum tap_dtype dtype;
    int ndim;
    char axes[TAP_MAX_DIMS][TAP_AXIS_MAX]; // semantic shape, e.g. {"batch","head","sequence",..}
    const char *meaning;                   // static string
    int block;                             // block that computes it (family numbering),
                                           // -1 before the first block, n_blocks after the last
};

// The write-back seam (docs/architecture.md "The write-back seam"): a tap may also replace a
// value at its emit point. For an id with write[id] set, the emit first calls
//   write(u, id, b, live, v)
// with `live` the forward's own buffer of prompt b's rows (v->data == live, v's shape as the
// emit's view): what write leaves there is what the forward reads on, and what any take of the
// id then observes. Only the values a forward emits from its live float buffers can be replaced
// (tap_emit_rows, tap_emit_token_heads; tap_emit_heads copies the transposed heads back); a value
// emitted from a copy or a const view (tap_emit: scores, probabilities, logits, ids) calls write
// with live == NULL once per prompt: the writer must record that as a refused site (the forward
// itself has no error path). write runs inside the forward: it must not fail or allocate, and
// must do the same on every expert shard of a stage (they run the forward in lockstep).
struct tap {
    const uint8_t *want; // [n_ids] nonzero = record this id; borrowed
    void (*take)(void *u, int id, int b, const struct tview *v); // b: prompt within the batch
    void *u;
    const uint8_t *write; // [n_ids] nonzero = replace this id (write-back); NULL: none; borrowed
    void (*write_fn)(void *u, int id, int b, float *live, const struct tview *v);
    // Set by a caller that reads nothing of the residual stream after the call's last block (the
    // last pipeline stage, its stream neither sent on nor kept): the forward may then stop that
    // block after the last of its values wanted (cat_block_reach, model/catalogue.h). false:
    // every block of the call runs whole.
    bool stream_ends;
};

static inline bool tap_writes(const struct tap *tp, int id) {
    return tp && id >= 0 && tp->write && tp->write[id];
}

// whether the forward computes id: some take records it or a writer replaces it
static inline bool tap_wants(const struct tap *tp, int id) {
    return tp && id >= 0 && (tp->want[id] || (tp->write && tp->write[id]));
}

// a value emitted as a const view (not replaceable: a writer of id is told, live NULL)
static inline void tap_emit(const struct tap *tp, int id, int b, const struct tview *v) {
    if (tap_writes(tp, id)) tp->write_fn(tp->u, id, b, NULL, v);
    if (tp && id >= 0 && tp->want[id]) tp->take(tp->u, id, b, v);
}

// The emit helpers the forward passes share: views of each prompt of a packed batch (prompt b's
// tokens at rows off[b] .. off[b] + len[b] of a token-major buffer), emitted only if id is wanted.
// buf is the live buffer (the write-back seam replaces its rows in place).
// (1, T, width) float32 rows of an (N, width) buffer; the same in int64 (expert indices, which a
// writer cannot replace):
void tap_emit_rows(const struct tap *tp, int id, const struct mbatch *bt, float *buf, int width);
void tap_emit_rows_i64(const struct tap *tp, int id, const struct mbatch *bt, const int64_t *buf,
                       int width);
// (1, H, T, D) heads of an (N, H*D) buffer, transposed into scratch (H*T*D floats); a writer
// writes the scratch, which is copied back into buf before the takes:
void tap_emit_heads(const struct tap *tp, int id, const struct mbatch *bt, float *buf, int H, int D,
                    float *scratch);
// (1, T, H, D) 4-D views of an (N, H*D) buffer as it is, heads after the sequence (head outputs;
// with H = top_k, D = hidden: the expert slots' outputs):
void tap_emit_token_heads(const struct tap *tp, int id, const struct mbatch *bt, float *buf, int H,
                          int D);

// Fills d from a comma-separated shape ("batch,head,sequence,head_dim"). Returns 0 or -1 if the
// shape has too many axes or an axis name is too long.
int tap_desc_set(struct tap_desc *d, const char *name, enum tap_dtype dtype, const char *shape_csv,
                 const char *meaning, int block);

// Axis kinds for the output layouts: sequence-like axes ("sequence", "seq", "query", "key") have
// length T, "global+local-key" has 2T, "batch" is the batch axis, everything else is fixed.
enum tap_axis_kind { TAP_AXIS_FIXED, TAP_AXIS_BATCH, TAP_AXIS_SEQ, TAP_AXIS_SEQ2 };
enum tap_axis_kind tap_axis_kind(const char *axis);

// Number of sequence-like axes (SEQ or SEQ2) of d; the token layout takes exactly one SEQ axis.
int tap_n_seq_axes(const struct tap_desc *d);

const char *tap_dtype_name(enum tap_dtype t); // "float32", "int64"
size_t tap_dtype_size(enum tap_dtype t);

// Shell-style glob match (*, ?, [..]) of a whole name.
bool tap_glob_match(const char *pattern, const char *name);

// The index of the entry of cat[0..n) named exactly `name` (names are unique), -1 if none.
int tap_desc_find(const struct tap_desc *cat, int n, const char *name);

// The axis of a view (1, A.., T, B..) that is the activation's sequence axis (asserted to exist).
int tview_seq_axis(const struct tap_desc *d, const struct tview *v);
// The rows of a view (1, A.., T, B..) with sequence axis seq, as (n, A.., B..) into dst: the
// positions t with keep[t] (keep NULL: all T), in order. Returns n.
int64_t tview_rows(const struct tview *v, int seq, const uint8_t *keep, char *dst);

#endif
