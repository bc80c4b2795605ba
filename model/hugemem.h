// hugemem.h - the large buffers' allocation (a run state's arena, packed weights, grown work
// buffers): 64-byte aligned, and from HUGE_MIN bytes up aligned to 2 MiB and advised as
// transparent huge pages (madvise MADV_HUGEPAGE). Debian's kernels run THP in "madvise" mode: an
// unadvised buffer is faulted in 4 KiB pages, each zeroed by the kernel at its first touch (on a
// virtual machine, a host fault too), and read through as many TLB entries. The advice changes
// no value: where the kernel has no huge page to give, the buffer is made of small ones.
#ifndef AH_HUGEMEM_H
#define AH_HUGEMEM_H

#include <stddef.h>

#define HUGE_MIN ((size_t)2 << 20)

// bytes (rounded up to the alignment) or NULL; free() it
void *huge_alloc(size_t bytes);

#endif
