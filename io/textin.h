// textin.h - corpora as users keep them: JSON Lines (a chosen field), plain text (a prompt a line,
// or a prompt a file), each possibly gzip'd, named by a path or a glob (sorted).
//
// Files are streamed through zlib (which reads plain files as they are): memory holds one line,
// or one file with per_file.
#ifndef AH_TEXTIN_H
#define AH_TEXTIN_H

#include <stdbool.h>
#include <stddef.h>

struct ah_error;

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

#endif
