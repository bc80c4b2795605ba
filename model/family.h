// family.h - the family registry: each model family is one table of operations, defined in its
// file of model/families/, and model/families.c lists the tables. The driver (harvest/load.c)
// chooses a family from config.json and reaches the family's model only through these operations:
// the model and its run state are opaque pointers the family allocates and frees.
//
// Adding a family: one file in model/families/ defining `const struct model_family NAME_family`,
// its line in model/families.c, and its test. A Llama-style family is a config reader and tables
// (model/decoder_family.h, model/families/).
#ifndef AH_FAMILY_H
#define AH_FAMILY_H

#include "model/aliases.h"
#include "model/batch.h"
#include "model/blocks.h"
#include "model/config.h"
#include "model/tap.h"

#include <stdbool.h>
#include <stdint.h>

struct ah_error;
struct expert_shard; // model/moe.h: a rank's range of routed experts

// The sizes the driver needs of a loaded model.
struct model_info {
    int n_blocks;         // blocks of the layer loop
    int max_pos;          // longest prompt the model takes
    int64_t vocab;        // V
    int hidden;           // the width of what a stage hands on (the residual stream)
    int n_experts, top_k; // routed experts of a mixture block, experts a token goes to (0: none)
};

// What a family may ask of the checkpoint before its tensors are bound (Laguna: g_proj's rows
// choose its gate's granularity). dims returns ndim, or a negative AH_E* code naming the file.
struct model_dims {
    int (*dims)(void *u, const char *name, int64_t *shape, int max_dims, struct ah_error *err);
    void *u;
    // whether tensor `name` is stored BF16 (false when it is missing: binding then names it), so
    // that a family can borrow BF16 matrices and widen the others; may be NULL
    bool (*is_bf16)(void *u, const char *name);
};

// init-model: a named configuration, as config.json's text (written as cJSON prints it).
struct model_preset {
    const char *name;
    const char *config;
};

struct model_family {
    const char *name;       // model_family of the output, --family of init-model
    const char *const *ids; // NULL-terminated "architectures" / "model_type" / "architecture"

    // Reads and checks config.json (errors name it and the key) and makes the family's model in
    // *fm (close() frees it, also after a failure). list NULL: the config only; else *list
    // (caller frees) receives the tensors to bind into *fm, dims (may be NULL) the checkpoint's
    // shapes where the config leaves a choice open. Returns the tensor count or a negative AH_E*.
    int (*open)(void **fm, const struct config *c, const struct model_dims *dims,
                struct model_tensor **list, struct ah_error *err);
    void (*close)(void *fm); // safe on NULL
    void (*info)(const void *fm, struct model_info *out);
    // the activation catalogue, in forward order (model/tap.h)
    int (*n_taps)(const void *fm);
    void (*catalogue)(const void *fm, struct tap_desc *out);
    // length of a fixed axis of a value computed by `block`; -1 for an unknown axis name
    int64_t (*axis_size)(const void *fm, int block, const char *axis);

    // Run state in *fs (state_free frees it, also after a failure). want (catalogue-indexed)
    // sizes tap-only buffers, NULL: anything may be asked for; shard: the rank's experts (NULL:
    // every expert; families without experts ignore it).
    int (*state_init)(void **fs, const void *fm, int max_T, int64_t max_tokens, const uint8_t *want,
                      const struct expert_shard *shard);
    void (*state_free)(void *fs); // safe on NULL
    // Runs blocks [blk_begin, blk_end) of the batch, emitting wanted taps.
    void (*forward)(const void *fm, void *fs, const struct mbatch *bt, const struct tap *tp,
                    int blk_begin, int blk_end);
    // What a pipeline stage hands to the next: arrays of (tokens, hidden) floats in fs; the count.
    int (*handoff)(void *fs, float **arrays);

    // FLOPs of a prompt of T tokens through block b (b == n_blocks: the LM head).
    double (*block_flops)(const void *fm, int b, int T);
    // Weight bytes a stage running blocks [b0, b1) touches (embeddings with block 0, the final
    // norm and head with `head`; routed experts 1/n_shards of theirs) and how they are stored.
    int64_t (*stage_bytes)(const void *fm, int b0, int b1, bool head, int shard, int n_shards,
                           const char **kind);
    // `plan`'s description, NULL for the generic one (the float32 bytes of every block): the
    // line after config.json's path, the parameters and bytes as published, and their storage.
    void (*describe)(const void *fm, char *line, size_t n, int64_t *params, int64_t *bytes,
                     const char **stored);

    // the family's own alias rows (model/aliases.h), tried before the shared ones; ended by a
    // zeroed row; NULL: none
    const struct alias_row *aliases;

    // ---- init-model ----
    const struct model_preset *presets;
    int n_presets;
    const char *init_dtype;   // the weights' dtype as published ("bf16"), NULL: --dtype chooses
    const char *init_f32;     // tensors whose names contain this are written F32 (NULL: none)
    int init_shards;          // files of about 256 MiB, at least this many (0: one unless --shards)
    bool init_cut;            // --config CONFIG.json --layers N cuts a release's config.json
    const char *init_what[2]; // the message's words around the preset's name
};

// The registry (model/families.c), NULL-terminated, in the order config.json's names are tried.
extern const struct model_family *const model_families[];

// The family of config.json: its "architectures" (the first entry a family knows), else
// "model_type", else the spec's "architecture". None known: an error naming config.json and every
// name that is.
int model_family_of(const struct config *c, const struct model_family **fam, struct ah_error *err);
// quantization_config of config.json against the quant_method values a family reads (methods:
// NULL-ended; NULL: none). Absent or null: 0, *which -1. An object whose quant_method is
// methods[i]: 0, *which i. Else -AH_EINVAL naming config.json and "quantization_config" (not an
// object) or "quantization_config.quant_method" (missing, not a string, or another method: "is
// not implemented (known: ...)"). Every family's open calls it once where it reads config.json,
// so that no quantized checkpoint is computed as if it were not (Llama-style families through
// dec_read_quant, model/decoder_family.h).
int model_quant_method(const struct config *c, const char *const *methods, int *which,
                       struct ah_error *err);
// The family whose name is `name` (init-model's --family), or NULL.
const struct model_family *model_family_named(const char *name);
// The family one of whose ids ("architectures" entry, model_type, ...) is `id`, or NULL.
const struct model_family *model_family_with_id(const char *id);

#endif
