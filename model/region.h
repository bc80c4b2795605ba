// region.h - whether the caller runs inside an OpenMP parallel region: a kernel called there runs
// on the calling thread (one thread, no nested region); and the wall clock the kernels time
// themselves with. Shared by the kernels of ops.c, dnnl.c, amx.c and simdpeak.c.
#ifndef AH_REGION_H
#define AH_REGION_H

#include <stdbool.h>
#ifdef _OPENMP
#include <omp.h> // defines: omp_in_parallel, omp_get_wtime
#endif

static inline bool op_in_region(void) {
#ifdef _OPENMP
    return omp_in_parallel();
#else
    return false;
#endif
}

// seconds of the OpenMP wall clock (0 in a build without OpenMP)
static inline double op_wall(void) {
#ifdef _OPENMP
    return omp_get_wtime();
#else
    return 0.0;
#endif
}

#endif
