/* hook_ctx.c - the program's teardown of streams and contexts: only noted.
 *
 * Why: each copy's record names the device it ran on (pl_copy_device,
 * driver.c).  Asking the driver for it took three getters per copy: the
 * stream's context, the context's id, the current context.  On the H200
 * host that cost ~100 ns of a 256-byte pageable copy's ~1.9 us.  A thread
 * now keeps the answers it got.  They hold until a stream or a context is
 * destroyed, since only then can a handle come back naming another one,
 * on another device.  These wrappers say when that happened.  The call
 * itself is unchanged: one atomic add after it returns. */
#define _GNU_SOURCE
#include "pl_internal.h"

/* The real call, then the device memo told.  After the call, not before:
 * a thread asking between a bump and the destruction would keep an answer
 * for the handle that is about to go. */
#define PL_WRAP_TEARDOWN(name, params, args)                                \
  PL_EXPORT CUresult name params {                                          \
    CUresult(*f) params = (CUresult(*) params)pl_hook_real(PL_HOOK_##name); \
    if (f == NULL) return CUDA_ERROR_NOT_FOUND;                             \
    CUresult r = f args;                                                    \
    pl_copy_device_forget();                                                \
    return r;                                                               \
  }

PL_WRAP_TEARDOWN(cuStreamDestroy, (CUstream s), (s))
PL_WRAP_TEARDOWN(cuStreamDestroy_v2, (CUstream s), (s))
PL_WRAP_TEARDOWN(cuCtxDestroy, (CUcontext c), (c))
PL_WRAP_TEARDOWN(cuCtxDestroy_v2, (CUcontext c), (c))
PL_WRAP_TEARDOWN(cuDevicePrimaryCtxRelease, (CUdevice d), (d))
PL_WRAP_TEARDOWN(cuDevicePrimaryCtxRelease_v2, (CUdevice d), (d))
PL_WRAP_TEARDOWN(cuDevicePrimaryCtxReset, (CUdevice d), (d))
PL_WRAP_TEARDOWN(cuDevicePrimaryCtxReset_v2, (CUdevice d), (d))
PL_WRAP_TEARDOWN(cuGreenCtxDestroy, (CUgreenCtx g), (g))
