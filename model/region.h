// region.h - whether the caller runs inside an OpenMP parallel region: a kernel called there runs
// on the calling thread (one thread, no nested region). Shared by the kernels of ops.c, dnnl.c and
// amx.c.
#ifndef AH_REGION_H
#define AH_REGION_H

#include <stdbool.h>
#ifdef _OPENMP
#include <omp.h> // defines: omp_in_parallel
#endif

static inline bool op_in_region(void) {
#ifdef _OPENMP
    return omp_in_parallel();
#else
    return false;
#endif
}

#endif
