// ah.c - error helpers (see ah.h)
#include "model/ah.h"

#include <stdarg.h>

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
