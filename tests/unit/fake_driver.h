/* fake_driver.h - the fake CUDA driver (tests/fakecuda) reached around the
 * shim, for the unit tests that link pagelock_core.
 *
 * In those binaries the driver's exported names are the shim's wrappers:
 * calling cuMemcpyHtoD_v2 runs what a preloaded program runs.  The tests'
 * own driver calls (setup, reference copies, checks) and the fake's
 * controls (faults, counters, modelled bandwidth) go through the f_*
 * pointers here instead, which load_driver fills from the fake
 * libcuda.so.1 through the real dlsym, untouched by the shim. */
#ifndef PL_TEST_FAKE_DRIVER_H
#define PL_TEST_FAKE_DRIVER_H

#include <stddef.h>
#include <stdint.h>

#include <cuda.h>

#include "fakecuda.h"

/* The driver entry points the tests call directly: DRV(name, parameters). */
#define FAKE_DRIVER_CALLS(DRV)                                                       \
  DRV(cuInit, unsigned)                                                              \
  DRV(cuDevicePrimaryCtxRetain, CUcontext *, CUdevice)                               \
  DRV(cuCtxSetCurrent, CUcontext)                                                    \
  DRV(cuCtxSynchronize, void)                                                        \
  DRV(cuCtxCreate_v2, CUcontext *, unsigned, CUdevice)                               \
  DRV(cuCtxDestroy_v2, CUcontext)                                                    \
  DRV(cuMemAlloc_v2, CUdeviceptr *, size_t)                                          \
  DRV(cuMemFree_v2, CUdeviceptr)                                                     \
  DRV(cuMemsetD8_v2, CUdeviceptr, unsigned char, size_t)                             \
  DRV(cuStreamCreate, CUstream *, unsigned)                                          \
  DRV(cuStreamDestroy_v2, CUstream)                                                  \
  DRV(cuStreamSynchronize, CUstream)                                                 \
  DRV(cuStreamQuery, CUstream)                                                       \
  DRV(cuLaunchHostFunc, CUstream, CUhostFn, void *)                                  \
  DRV(cuEventCreate, CUevent *, unsigned)                                            \
  DRV(cuEventRecord, CUevent, CUstream)                                              \
  DRV(cuEventSynchronize, CUevent)                                                   \
  DRV(cuEventDestroy_v2, CUevent)                                                    \
  DRV(cuStreamBeginCapture_v2, CUstream, CUstreamCaptureMode)                        \
  DRV(cuStreamEndCapture, CUstream, CUgraph *)                                       \
  DRV(cuGraphDestroy, CUgraph)                                                       \
  DRV(cuMemcpyHtoD_v2, CUdeviceptr, const void *, size_t)                            \
  DRV(cuMemcpyDtoH_v2, void *, CUdeviceptr, size_t)                                  \
  DRV(cuMemcpyHtoDAsync_v2, CUdeviceptr, const void *, size_t, CUstream)             \
  DRV(cuMemcpyDtoHAsync_v2, void *, CUdeviceptr, size_t, CUstream)                   \
  DRV(cuMemHostRegister_v2, void *, size_t, unsigned)                                \
  DRV(cuMemHostUnregister, void *)                                                   \
  DRV(cuPointerGetAttribute, void *, CUpointer_attribute, CUdeviceptr)               \
  DRV(cuPointerGetAttributes, unsigned, CUpointer_attribute *, void **, CUdeviceptr) \
  DRV(cuMemHostGetFlags, unsigned *, void *)                                         \
  DRV(cuMemHostGetDevicePointer_v2, CUdeviceptr *, void *, unsigned)

#define FAKE_DRIVER_DECLARE(name, ...) extern CUresult (*f_##name)(__VA_ARGS__);
FAKE_DRIVER_CALLS(FAKE_DRIVER_DECLARE)
#undef FAKE_DRIVER_DECLARE

/* The fake's controls (fakecuda.h says what each does). */
extern int (*f_fail)(const char *, int, int);
extern void (*f_clear_faults)(void);
extern void (*f_get_stats)(struct fakecuda_stats *);
extern void (*f_reset_stats)(void);
extern int (*f_is_registered)(const void *, size_t);
extern size_t (*f_reg_bytes_in)(const void *, size_t, const void **, size_t *);
extern unsigned long (*f_call_count)(const char *);
extern void (*f_reset_call_counts)(void);
extern void (*f_set_bandwidth)(double, double);
extern void (*f_set_register_bandwidth)(double);

/* The fake libcuda.so.1, and device 0's primary context. */
extern void *g_cuda;
extern CUcontext g_ctx;

/* Opens the fake driver (found through LD_LIBRARY_PATH), fills every
 * pointer above (aborting when one is missing), initialises it and makes
 * g_ctx current.  0, or -1 after saying why. */
int load_driver(void);

/* ---- the bytes the tests copy through it ---------------------------------- */

/* Byte i of pattern seed; fill writes p[0..n) with it. */
uint8_t pat(size_t i, unsigned seed);
void fill(void *p, size_t n, unsigned seed);
/* Index of the first byte of p[0..n) that is not pattern `seed`, or n. */
size_t check_pat(const void *p, size_t n, unsigned seed);

/* 1 in a ThreadSanitizer build, whose timings the tests allow more for. */
#if defined(__SANITIZE_THREAD__)
#define TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TSAN 1
#endif
#endif
#ifndef TSAN
#define TSAN 0
#endif

#endif
