// textin.h - corpora as users keep them: JSON Lines (a chosen field), plain text (a prompt a line,
// or a prompt a file), each possibly gzip'd, named by a path or a glob (sorted).
//
// Files are streamed through zlib (which reads plain files as they are): memory holds one line,
// or one file with per_file. A path that exists is read as itself even when it holds *?[; only a
// path that does not exist is expanded as a glob. Regular files, FIFOs and character devices are
// read once, as streams ("-" is standard input); a folder is refused. A gzip stream that stops
// early is an error, and so is a NUL byte anywhere in the text (naming the line).
#ifndef AH_TEXTIN_H
#define AH_TEXTIN_H

#include <stdbool.h>
#include <stddef.h>

struct ah_error;
struct cJSON;

struct text_source {
    const char *field; // JSON Lines: the field that holds the text
    bool per_file;     // plain text: the whole file is one prompt (else one a line)
    bool raw_lines;    // hand every line over as it is (field unused)
    long next_index;   // running count of prompts handed over; start at 0
};

// Called for each prompt: its text (not NUL-terminated; empty for an empty line), where it is
// ("FILE: line N" or "FILE") and its index (0-based line, or file, counted over all files read with
// this source). A negative return stops the reading and is returned (cb fills err itself).
typedef int (*text_cb)(void *u, const char *text, size_t len, const char *where, long index);

// A file is JSON Lines when its name ends in .jsonl or .json (before an optional .gz). Errors
// name the file and line: a line that is not a JSON object, a missing or non-string field, a glob
// that matches nothing.
int text_read(struct text_source *s, const char *path_or_glob, text_cb cb, void *u,
              struct ah_error *err);

// One line of JSON Lines as a JSON value: nothing but white space may follow it, no object in it
// may name a key twice, and it may hold no NUL (raw or \u0000). Returns the tree (the caller
// frees it with cJSON_Delete), or NULL with err filled ("WHERE: what is wrong").
struct cJSON *text_parse_json(const char *line, size_t len, const char *where,
                              struct ah_error *err);

#endif
