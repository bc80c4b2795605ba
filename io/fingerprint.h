// fingerprint.h - what a model folder's weights were when an output was started, so that
// `--resume` never mixes two models in one output.
//
// For each file the model is read from (config.json, the index, every safetensors file,
// tokenizer.json if present): its size, its modification time and an FNV-1a checksum of its
// header (a safetensors file's 8-byte length and JSON header, which hold every tensor's name,
// dtype, shape and offsets) or, for a JSON file, of the whole file.
#ifndef AH_FINGERPRINT_H
#define AH_FINGERPRINT_H

struct ah_error;

// JSON text (an array of {"file", "size", "mtime_ns", "checksum"}, in the order given; caller
// frees) of files[n]; file names are stored without their folder. Errors name the file.
int fp_make(const char *const *files, int n, char **json, struct ah_error *err);

// 0 if the fingerprints old and now (fp_make's texts) agree, else -AH_EINVAL with a message
// "what: FILE: size A -> B, ..." naming every file that changed, appeared or went (what: a prefix
// for the message, e.g. the output path).
int fp_compare(const char *old, const char *now, const char *what, struct ah_error *err);

#endif
