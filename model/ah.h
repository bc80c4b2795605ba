// ah.h - error codes, error messages and assertions shared by every module of harvest.
//
// File, memory and user-input code returns 0 or a negative AH_E* code and fills an optional
// `struct ah_error *` with a message that names the file, field or line and what was expected.
// Kernels do not fail: their preconditions use AH_ASSERT, which stays on in release builds.
#ifndef AH_H
#define AH_H

#include <stdio.h>
#include <stdlib.h>

// XX(name, exit code of `harvest run`, text)
#define AH_ERRNO_MAP(XX)             \
    XX(EINVAL, 1, "invalid input")   \
    XX(EFORMAT, 1, "malformed file") \
    XX(ENOENT, 1, "no such file")    \
    XX(EEXIST, 1, "output exists")   \
    XX(ENOMEM, 2, "out of memory")   \
    XX(EIO, 2, "I/O error")          \
    XX(ESTOP, 3, "stopped by a signal")

enum ah_code {
    AH_OK = 0,
#define XX(name, exitcode, text) AH_##name,
    AH_ERRNO_MAP(XX)
#undef XX
};
// the codes are returned negated: `return -AH_EINVAL;`

struct ah_error {
    int code;       // last negative AH_E* code set, 0 if none
    char msg[1024]; // "file: field: what was expected"
};

// Formats a message into err (if non-NULL) and returns -code, so callers can write
// `return ah_fail(err, AH_EINVAL, "%s: missing \"model\"", path);`
int ah_fail(struct ah_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
const char *ah_strerror(int neg_code);
int ah_exit_code(int neg_code); // 1 bad input, 2 system failure, 3 stopped

// Reads a whole regular file into a NUL-terminated buffer (*out, caller frees). Returns 0, or
// -AH_ENOENT / -AH_EIO / -AH_ENOMEM with "PATH: cannot open: reason", or -AH_EINVAL with
// "PATH: not a regular file (a FIFO)" for anything else (a FIFO would block: it is not opened).
int ah_read_file(const char *path, char **out, struct ah_error *err);

// Layers a config may give a layer-count key (num_hidden_layers, num_encoder_layers, ...): the
// catalogue names every value of every layer, and the stage cut searches over them.
#define AH_MAX_LAYERS 4096

#define AH_ASSERT(x)                                                                  \
    do {                                                                              \
        if (!(x)) {                                                                   \
            fprintf(stderr, "%s:%d: AH_ASSERT(%s) failed\n", __FILE__, __LINE__, #x); \
            abort();                                                                  \
        }                                                                             \
    } while (0)

#endif
