// dataset.h - the prompts of a job: JSON Lines ({"input_ids": [..]} or {"text": ".."}, or the
// field the job names), plain text a prompt a line, or text files a prompt a file (a glob); any
// of them gzip'd; or a Megatron indexed dataset (PREFIX.bin + PREFIX.idx, "MMIDIDX" version 1: a
// sequence a prompt). Text goes through the model's tokenizer (with its special tokens, as Hugging
// Face's encode adds them). Empty prompts are skipped and over-long ones truncated, both counted.
//
// Packing (SAE datasets): the documents are joined, a separator token between two, and cut into
// contexts of `pack_len` tokens (the last may be shorter), each optionally starting with a BOS;
// text is then tokenized without the tokenizer's special tokens. A context's source is the
// document its first token comes from.
#ifndef AH_DATASET_H
#define AH_DATASET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ah_error;
struct tokenizer;

// Per-prompt fields (data.fields, JSON Lines only): a key of each line's object copied as the
// prompt's label, typed. A line without the key (or with null) takes the default, else is an
// error naming the file, the line and the field; so is a value of another type.
enum ds_ftype { DS_INT, DS_FLOAT, DS_BOOL, DS_STRING }; // int64, float64, bool, UTF-8 text
struct ds_field_spec {
    char *name; // the JSON key, also the dataset's name (/prompts/NAME)
    enum ds_ftype type;
    bool has_default;
    int64_t def_i; // DS_INT, DS_BOOL (0/1)
    double def_f;  // DS_FLOAT
    char *def_s;   // DS_STRING
};
static inline const char *ds_ftype_name(enum ds_ftype t) { // the job file's type names
    return t == DS_INT ? "int" : t == DS_FLOAT ? "float" : t == DS_BOOL ? "bool" : "string";
}

// One field's values for the prompts kept (the same rows as the prompt tables).
struct ds_field {
    const struct ds_field_spec *spec; // borrowed from the ds_spec
    void *v;                          // (n) int64_t, double or uint8_t; strings: (n) int64_t
                                      // offsets into s (each NUL-terminated); owned
    char *s;                          // strings' bytes; owned
    int64_t s_len, s_cap, cap;
    int64_t max_len; // longest string in bytes (the stored fixed length)
};

struct ds_prompts {
    int64_t n;       // prompts kept
    int64_t *source; // (n) 0-based line (or file) in the data; owned
    int64_t *len;    // (n) tokens used, after truncation; owned
    int64_t *off;    // (n) first token of the prompt in ids; owned
    int64_t *ids;    // (n_tokens) owned
    int64_t n_tokens;
    int64_t n_lines;     // lines (or files) read
    int64_t n_empty;     // prompts skipped because empty
    int64_t n_truncated; // prompts cut to `truncate_at`
    int64_t longest;     // longest prompt after truncation
    void *map;           // ids mapped from a spill file (else malloc'd)
    size_t map_bytes;
    struct ds_field *fields; // (n_fields) the data.fields values, rank 0 only; owned
    int n_fields;
};

struct ds_spec {
    const char *path;      // the file, a glob for "text-files", PREFIX(.bin) for "megatron"
    const char *format;    // "jsonl" (default), "text", "text-files" or "megatron"
    const char *field;     // jsonl: the key of each line's object (NULL: "input_ids", else "text")
    struct tokenizer *tok; // for text; NULL when the model folder has no tokenizer.json
    const char *model_dir; // named in the message when text meets no tokenizer
    int pack_len;          // > 0: pack into contexts of this many tokens
    int pack_separator;    // -1: none
    int pack_bos;          // -1: none
    const struct ds_field_spec *fields; // (n_fields) data.fields; borrowed
    int n_fields;
};

// Loads every prompt, reading the data once. Prompts longer than truncate_at tokens are cut. Ids
// must lie in [0, vocab). Errors name the file and line. spill: a file for the token ids, written
// as they come and then mapped read-only, so that memory holds 24 bytes a prompt whatever the
// corpus' size (NULL: the ids stay in memory).
int ds_load(struct ds_prompts *p, const struct ds_spec *spec, int64_t truncate_at, int64_t vocab,
            const char *spill, struct ah_error *err);
// Maps the n_tokens ids of a spill file another process wrote with ds_load into p->ids.
int ds_map_ids(struct ds_prompts *p, const char *spill, struct ah_error *err);
void ds_free(struct ds_prompts *p); // safe on a zeroed struct

#endif
