// ah.c - error helpers (see ah.h)
#include "model/ah.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>

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

int ah_read_file(const char *path, char **out, struct ah_error *err) {
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return ah_fail(err, errno == ENOENT ? AH_ENOENT : AH_EIO, "%s: cannot open: %s", path,
                       strerror(errno));
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
