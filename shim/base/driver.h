/* driver.h - the real driver, loaded at run time (driver.c): one table
 * of its entry points, the real function behind every wrapped symbol, and
 * the device a copy runs on.  Included before any other header that may
 * include cuda.h (it must not rename the driver's symbols). */
#ifndef PL_DRIVER_H
#define PL_DRIVER_H

#include "pl_defs.h"

/* Raw driver names: the shim defines the exact decorated symbols itself
 * (cuMemcpyHtoD_v2, cuMemcpyHtoDAsync_v2_ptsz, legacy cuGetProcAddress),
 * so the header must not rename them. */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

/* The real address of an exact driver symbol, or NULL. */
void *pl_driver_sym(const char *name);
/* Tell the driver module which handle the program got for libcuda. */
void pl_driver_note_handle(void *handle);
/* The real dlsym, found with dlvsym so that our own dlsym is skipped. */
void *pl_real_dlsym(void *handle, const char *name);

/* The other driver entry points the shim wraps, after the copy ids of
 * PAGELOCK_API_LIST: the host-allocation calls the program itself makes, so
 * the shim's picture of pinned memory stays exact, and its pointer queries,
 * so the shim's own registrations stay invisible to it (hook_hostalloc.c);
 * cuInit, so CUPTI starts before the first context and the staging pool
 * prepares its memory (hook_cupti.c); and
 * cuMemAlloc_v2, whose first call in a context starts the staging pool
 * (pool.c); the program's waits for the GPU, only timed
 * (hook_sync.c); and its teardown of streams and contexts, only noted
 * (hook_ctx.c).  Each
 * exact symbol a lookup can hand out: cudart asks for cuMemHostRegister at
 * 6050 and cuMemHostGetDevicePointer at 3020 (the _v2s), a program looking
 * up the bare names gets the originals. */
#define PL_HOSTALLOC_LIST(X)      \
  X(cuMemHostAlloc)               \
  X(cuMemAllocHost_v2)            \
  X(cuMemFreeHost)                \
  X(cuMemHostRegister_v2)         \
  X(cuMemHostUnregister)          \
  X(cuInit)                       \
  X(cuMemHostRegister)            \
  X(cuMemHostGetFlags)            \
  X(cuMemHostGetDevicePointer_v2) \
  X(cuMemHostGetDevicePointer)    \
  X(cuPointerGetAttribute)        \
  X(cuPointerGetAttributes)       \
  X(cuMemAlloc_v2)                \
  X(cuCtxSynchronize)             \
  X(cuCtxSynchronize_v2)          \
  X(cuStreamSynchronize)          \
  X(cuStreamSynchronize_ptsz)     \
  X(cuEventSynchronize)           \
  X(cuStreamDestroy)              \
  X(cuStreamDestroy_v2)           \
  X(cuCtxDestroy)                 \
  X(cuCtxDestroy_v2)              \
  X(cuDevicePrimaryCtxRelease)    \
  X(cuDevicePrimaryCtxRelease_v2) \
  X(cuDevicePrimaryCtxReset)      \
  X(cuDevicePrimaryCtxReset_v2)   \
  X(cuGreenCtxDestroy)            \
  X(cuLaunchHostFunc)             \
  X(cuLaunchHostFunc_ptsz)        \
  X(cuStreamAddCallback)          \
  X(cuStreamAddCallback_ptsz)

/* cuda.h declares the per-thread twins only for its own macro names. */
CUresult cuStreamSynchronize_ptsz(CUstream hStream);
CUresult cuLaunchHostFunc_ptsz(CUstream hStream, CUhostFn fn, void *userData);
CUresult cuStreamAddCallback_ptsz(CUstream hStream, CUstreamCallback callback, void *userData,
                                  unsigned int flags);

enum pl_hook_id {
  PL_HOOK_HOSTALLOC_FIRST = PAGELOCK_API_COUNT - 1,
#define PL_HOOK_ENUM(name) PL_HOOK_##name,
  PL_HOSTALLOC_LIST(PL_HOOK_ENUM)
#undef PL_HOOK_ENUM
      PL_HOOK_COUNT
};

/* The real driver, one table: what the shim's own code calls, resolved
 * all at once the first time it is asked for with libcuda loaded, and the
 * real function behind every wrapped symbol, resolved one by one on first
 * use.  Every pointer comes from pl_driver_sym with the exact decorated
 * name, so no caller ever re-enters the shim's wrappers.  The fields drop
 * the cu prefix, as cupti.c's table drops cupti's: a name the shim
 * defines itself (hook_*.c) is a wrapper, never one of these. */
typedef struct pl_drv {
  /* Behind hook id i: pl_hook_real(i). */
  void *_Atomic real[PL_HOOK_COUNT];
  bool simulated; /* the loaded libcuda is tests/fakecuda */
  bool engines;   /* every entry point the engines require is there */
  /* Queries; any may be NULL. */
  CUresult (*PointerGetAttributes)(unsigned, CUpointer_attribute *, void **, CUdeviceptr);
  CUresult (*CtxGetDevice)(CUdevice *);
  CUresult (*GetProcAddress)(const char *, void **, int, cuuint64_t);
  CUresult (*GetProcAddress_v2)(const char *, void **, int, cuuint64_t,
                                CUdriverProcAddressQueryResult *);
  /* The devices, for the trace's DEVICE records (cupti.c). */
  CUresult (*DeviceGetCount)(int *);
  CUresult (*DeviceGet)(CUdevice *, int);
  CUresult (*DeviceGetAttribute)(int *, CUdevice_attribute, CUdevice);
  CUresult (*DeviceGetName)(char *, int, CUdevice);
  /* The engines' (stage.c, pool.c, pinreg.c, autopin.c), and the device
   * memo's below.  Optional, may be NULL on older or simulated drivers:
   * CtxGetId, ThreadExchangeStreamCaptureMode, StreamGetCtx, StreamGetId,
   * and the primary and green contexts' getters used at teardown; every
   * other one is required for `engines`. */
  CUresult (*CtxGetCurrent)(CUcontext *);
  CUresult (*CtxGetId)(CUcontext, unsigned long long *);
  CUresult (*CtxPushCurrent)(CUcontext);
  CUresult (*CtxPopCurrent)(CUcontext *);
  CUresult (*ThreadExchangeStreamCaptureMode)(CUstreamCaptureMode *);
  CUresult (*MemGetAddressRange)(CUdeviceptr *, size_t *, CUdeviceptr);
  CUresult (*StreamGetCtx)(CUstream, CUcontext *);
  CUresult (*StreamGetId[2])(CUstream, unsigned long long *);
  CUresult (*MemHostRegister)(void *, size_t, unsigned);
  CUresult (*MemHostUnregister)(void *);
  CUresult (*EventCreate)(CUevent *, unsigned);
  CUresult (*EventDestroy)(CUevent);
  CUresult (*EventQuery)(CUevent);
  CUresult (*EventSynchronize)(CUevent);
  /* [0] legacy default stream semantics, [1] the _ptsz per-thread twin */
  CUresult (*StreamIsCapturing[2])(CUstream, CUstreamCaptureStatus *);
  CUresult (*MemcpyHtoDAsync[2])(CUdeviceptr, const void *, size_t, CUstream);
  CUresult (*MemcpyDtoHAsync[2])(void *, CUdeviceptr, size_t, CUstream);
  CUresult (*EventRecord[2])(CUevent, CUstream);
  CUresult (*LaunchHostFunc[2])(CUstream, CUhostFn, void *);
  CUresult (*StreamSynchronize[2])(CUstream);
  /* teardowns (hook_ctx.c) */
  CUresult (*DevicePrimaryCtxGetState)(CUdevice, unsigned *, int *);
  CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
  CUresult (*DevicePrimaryCtxRelease)(CUdevice);
  CUresult (*CtxFromGreenCtx)(CUcontext *, CUgreenCtx);
} pl_drv;

/* The table, resolved from the libcuda the program itself loaded (the
 * shim never loads it into a program that does not use CUDA); NULL while
 * libcuda is not loaded.  Safe from any thread. */
const pl_drv *pl_drv_get(void);
/* The same for the engines: NULL also when the driver lacks an entry
 * point they require (said once in the log). */
static inline const pl_drv *pl_drv_engines(void) {
  const pl_drv *d = pl_drv_get();
  return PL_LIKELY(d != NULL && d->engines) ? d : NULL;
}
/* The real driver function behind hook id `id`, NULL if this driver lacks
 * it.  Inline: every copy asks it, and the call cost 13 of a repeated
 * copy's instructions. */
extern pl_drv pl_drv_table;
void *pl_hook_resolve(int id);
static inline void *pl_hook_real(int id) {
  void *f = atomic_load_explicit(&pl_drv_table.real[id], memory_order_acquire);
  return PL_LIKELY(f != NULL) ? f : pl_hook_resolve(id);
}
/* Hook id whose real driver function is `fn`, or -1. */
int pl_hook_find_real(void *fn);
extern const char *const pl_hook_names[PL_HOOK_COUNT];

/* The ordinal of the device a copy on `stream` runs on: that of the
 * stream's context, or of the current one for the legacy and per-thread
 * default streams; -1 unknown.  Remembered per thread by stream and by
 * context until pl_copy_device_forget, so a copy on a stream the thread
 * used before asks the driver nothing.  Call it outside the CUPTI
 * correlation window of the program's call. */
int pl_copy_device(CUstream stream);
/* A stream or a context was destroyed: its handle may come back naming
 * another one, so every thread asks again (hook_ctx.c). */
void pl_copy_device_forget(void);
/* What pl_copy_device's answer for `stream` rests on: the generation
 * pl_copy_device_forget moves, and for a default stream the current
 * context (0 for any other stream).  Equal marks, equal answers. */
unsigned pl_copy_device_gen(void);
uintptr_t pl_copy_device_ctx(CUstream stream);

#endif
