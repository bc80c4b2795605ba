// tokenizer.h - Hugging Face `tokenizer.json` for byte-level BPE models and SentencePiece-style
// BPE models (Llama 2, Mistral, Gemma), in C.
//
// Encoding: as Hugging Face's tokenizers (Rust): added tokens (normalized: false) are cut out of
// the raw text first (leftmost, longest; single_word, lstrip, rstrip as its AddedVocabulary),
// then each other section is normalized (NFC, NFD, NFKC, NFKD, Lowercase, Replace, Prepend, Strip,
// Sequence), the added tokens with normalized: true cut out of it, and the rest pre-tokenized
// (Split with a regex or a string and any of its behaviours, ByteLevel, Digits, Metaspace,
// Sequence), BPE-merged (merges as "a b" strings or [a, b] pairs, ignore_merges, byte_fallback,
// unk_token, fuse_unk: as tokenizers' merge_word), and post-processed
// (TemplateProcessing, Bert/Roberta, ByteLevel, Sequence) when special tokens are asked for.
// Decoding: the ByteLevel decoder, or a chain of Replace, ByteFallback, Fuse, Strip, Metaspace
// (and ByteLevel) decoders; where transformers.js and tokenizers (Rust) differ, Rust's meaning.
// Regexes run on PCRE2 with JavaScript's meanings of \s, \d and \w (what transformers.js and the
// tokenizers' JS reference use); Unicode normalization is utf8proc's. Text that is not valid UTF-8
// is decoded as WHATWG decoders do (each maximal invalid subpart becomes U+FFFD) before anything
// else.
//
// A tokenizer is read-only after tok_load except for its BPE cache: one per thread.
#ifndef AH_TOKENIZER_H
#define AH_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ah_error;
struct tokenizer;

// A growable list of token ids.
struct tok_ids {
    int64_t *v;
    size_t n, cap;
};
void tok_ids_free(struct tok_ids *ids);
int tok_ids_push(struct tok_ids *ids, int64_t id); // 0 or -AH_ENOMEM

// path: a tokenizer.json, or a folder that holds one (a regular file). Errors name the file and
// the JSON field (an unsupported normalizer or pre-tokenizer type, a bad regex with its offset, a
// vocabulary id that is fractional or given twice, a merge naming a token not in the
// vocabulary, an added token whose id is not the one tokenizers gives it, and every key that
// would change ids and is not implemented: model.dropout not null or 0, truncation or padding not
// null, continuing_subword_prefix, end_of_word_suffix, ...).
int tok_load(struct tokenizer **out, const char *path, struct ah_error *err);
void tok_free(struct tokenizer *t); // safe on NULL
// The same from JSON text in memory; name stands for the file in messages.
int tok_load_json(struct tokenizer **out, const char *json, size_t len, const char *name,
                  struct ah_error *err);

// Appends the ids of text[0..len) (any bytes) to out; add_special runs the post-processor (the
// BOS a model prepends, say). Returns 0, -AH_ENOMEM, or -AH_EINVAL when one of the tokenizer's
// regexes made PCRE2 give up (its match or depth limit: a pattern that backtracks without end),
// or a character needs a model.unk_token that is not in the vocabulary (tokenizers fails too);
// tok_error then says which, naming the tokenizer.json.
int tok_encode(struct tokenizer *t, const char *text, size_t len, bool add_special,
               struct tok_ids *out);
const char *tok_error(const struct tokenizer *t); // the last encode error's message

// Text of ids (malloc'd, NUL-terminated, *len bytes): with the ByteLevel decoder, added tokens as
// their content and the rest through it; with a decoder chain, every token's string through the
// chain; skip_special drops special tokens. An id outside the vocabulary
// is an error naming it.
int tok_decode(const struct tokenizer *t, const int64_t *ids, size_t n, bool skip_special,
               char **text, size_t *len, struct ah_error *err);

// One past the largest id the tokenizer can produce.
int64_t tok_n_ids(const struct tokenizer *t);

// 0 if every id the tokenizer can give (its vocabulary's, its added tokens', its post-processor's
// special tokens') is below vocab, the model's vocabulary size; else an error (AH_EINVAL) naming
// the tokenizer.json, the largest id and config, the file the model's size is from.
int tok_check_vocab(const struct tokenizer *t, int64_t vocab, const char *config,
                    struct ah_error *err);

// WHATWG UTF-8 decoding of s[0..n) into out (at least 3n bytes): valid sequences are copied, each
// maximal invalid subpart becomes U+FFFD. Returns the bytes written.
size_t tok_utf8_sanitize(const char *s, size_t n, char *out);

#endif
