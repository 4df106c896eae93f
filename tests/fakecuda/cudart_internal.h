/*
 * cudart_internal.h: shared by the two files of the fake CUDA runtime.
 */
#ifndef CUDART_INTERNAL_H
#define CUDART_INTERNAL_H

/* Exported: the runtime API is this library's interface. */
#define RT_API __attribute__((visibility("default")))

cudaError_t rt_map_error(CUresult r);

#endif /* CUDART_INTERNAL_H */
