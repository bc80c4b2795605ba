// ah.c - error helpers (see ah.h)
#define _POSIX_C_SOURCE 200809L // defines: fdopen, fstat, O_NONBLOCK
#include "model/ah.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int ah_fail(struct ah_error *err, int code, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->code = -code;
    }
    return -code;
}

const char *ah_strerror(int neg_code) {
    switch (-neg_code) {
        case AH_OK:
            return "ok";
#define XX(name, exitcode, text) \
    case AH_##name:              \
        return text;
            AH_ERRNO_MAP(XX)
#undef XX
    }
    return "unknown error";
}

int ah_exit_code(int neg_code) {
    switch (-neg_code) {
        case AH_OK:
            return 0;
#define XX(name, exitcode, text) \
    case AH_##name:              \
        return exitcode;
            AH_ERRNO_MAP(XX)
#undef XX
    }
    return 2;
}

// opens path for reading if it is a regular file: a FIFO (or a terminal) would block the open or
// the read forever, so it is opened without blocking and refused (as io/safetensors.c st_regular)
static FILE *open_regular(const char *path, struct ah_error *err, int *rc) {
    int fd = open(path, O_RDONLY | O_NONBLOCK);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0) {
        *rc = ah_fail(err, errno == ENOENT || errno == ENOTDIR ? AH_ENOENT : AH_EIO,
                      "%s: cannot open: %s", path, strerror(errno));
    } else if (!S_ISREG(sb.st_mode)) {
        const char *kind = S_ISFIFO(sb.st_mode)  ? " (a FIFO)"
                           : S_ISDIR(sb.st_mode) ? " (a folder)"
                                                 : "";
        *rc = ah_fail(err, AH_EINVAL, "%s: not a regular file%s", path, kind);
    } else {
        FILE *fp = fdopen(fd, "rb");
        if (fp) return fp;
        *rc = ah_fail(err, AH_ENOMEM, "%s: cannot open: %s", path, strerror(errno));
    }
    if (fd >= 0) close(fd);
    return NULL;
}

int ah_read_file(const char *path, char **out, struct ah_error *err) {
    int rc = 0;
    FILE *fp = open_regular(path, err, &rc);
    if (!fp) return rc;
    char *buf = NULL;
    size_t len = 0, cap = 0, r;
    do {
        if (cap - len < 65536) {
            char *nb = realloc(buf, cap = cap * 2 + 65536);
            if (!nb) {
                free(buf);
                fclose(fp);
                return -AH_ENOMEM;
            }
            buf = nb;
        }
        r = fread(buf + len, 1, cap - len - 1, fp);
        len += r;
    } while (r > 0);
    int bad = ferror(fp);
    fclose(fp);
    if (bad) {
        free(buf);
        return ah_fail(err, AH_EIO, "%s: read error", path);
    }
    buf[len] = '\0';
    *out = buf;
    return 0;
}
