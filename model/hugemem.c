// hugemem.c - large buffers on transparent huge pages (hugemem.h).
#define _DEFAULT_SOURCE // defines: madvise, MADV_HUGEPAGE
#include "model/hugemem.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

void *huge_alloc(size_t bytes) {
    size_t align = bytes >= HUGE_MIN ? HUGE_MIN : 64;
    if (bytes > SIZE_MAX - align) return NULL;
    size_t n = (bytes + align - 1) / align * align; // C11: aligned_alloc takes a multiple of it
    void *p = aligned_alloc(align, n);
#ifdef MADV_HUGEPAGE
    if (p && align == HUGE_MIN) madvise(p, n, MADV_HUGEPAGE);
#endif
    return p;
}
