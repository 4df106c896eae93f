/* hook_ctx.c - the program's teardown of streams and contexts.
 *
 * Why, first: each copy's record names the device it ran on
 * (pl_copy_device, driver.c).  Asking the driver for it took three getters
 * per copy: the stream's context, the context's id, the current context.
 * On the H200 host that cost ~100 ns of a 256-byte pageable copy's ~1.9
 * us.  A thread now keeps the answers it got.  They hold until a stream or
 * a context is destroyed, since only then can a handle come back naming
 * another one, on another device.  These wrappers say when that happened.
 *
 * Second: a context that ends takes with it every event and registration
 * made in it, the engines' included (the staging pool's chunk events and
 * slab, the registrations of `auto`).  A program that went on after
 * cudaDeviceReset crashed inside the driver on the H200 host when the
 * shim next used one of those events (docs/bench/2026-11-27-a-context-that-ends.md).  So the
 * engines are told, before the call, to finish what their thread does in
 * that context, and after it, to forget what they made there
 * (pl_engines_ctx_ending, pl_engines_ctx_gone).  In observe mode
 * both return at once: the call costs one atomic add more. */
#define _GNU_SOURCE
#include "pl_internal.h"
#include "engines.h"

/* The real call, then the device memo told.  After the call, not before:
 * a thread asking between a bump and the destruction would keep an answer
 * for the handle that is about to go. */
#define PL_REAL(name, params, args)                                       \
  CUresult(*f) params = (CUresult(*) params)pl_hook_real(PL_HOOK_##name); \
  if (f == NULL) return CUDA_ERROR_NOT_FOUND;                             \
  CUresult r = f args;                                                    \
  pl_copy_device_forget()

#define PL_WRAP_STREAM(name)            \
  PL_EXPORT CUresult name(CUstream s) { \
    PL_REAL(name, (CUstream), (s));     \
    return r;                           \
  }

PL_WRAP_STREAM(cuStreamDestroy)
PL_WRAP_STREAM(cuStreamDestroy_v2)

static bool pl_ctx_noted(void) { return pl_opt_long(PL_OPT_MODE) != PAGELOCK_MODE_OBSERVE; }

/* The primary context of `dev` while it is active, else NULL.  There is no
 * getter for it: a retain hands the handle, and the release right after
 * puts the count back (it cannot reach zero: active means retained). */
static CUcontext pl_primary_of(CUdevice dev) {
  const pl_drv *d = pl_drv_engines();
  unsigned flags = 0;
  int active = 0;
  CUcontext c = NULL;
  if (d == NULL || d->DevicePrimaryCtxGetState == NULL || d->DevicePrimaryCtxRetain == NULL ||
      d->DevicePrimaryCtxRelease == NULL)
    return NULL;
  if (d->DevicePrimaryCtxGetState(dev, &flags, &active) != CUDA_SUCCESS || !active) return NULL;
  if (d->DevicePrimaryCtxRetain(&c, dev) != CUDA_SUCCESS) return NULL;
  d->DevicePrimaryCtxRelease(dev);
  return c;
}

/* Whether the primary context of `dev` is no longer active: a release was
 * its last. */
static bool pl_primary_ended(CUdevice dev) {
  const pl_drv *d = pl_drv_engines();
  unsigned flags = 0;
  int active = 1;
  return d != NULL && d->DevicePrimaryCtxGetState != NULL &&
         d->DevicePrimaryCtxGetState(dev, &flags, &active) == CUDA_SUCCESS && !active;
}

/* A context destroyed outright. */
#define PL_WRAP_DESTROY(name)                            \
  PL_EXPORT CUresult name(CUcontext c) {                 \
    bool on = pl_ctx_noted() && c != NULL;               \
    if (on) pl_engines_ctx_ending(c);                    \
    PL_REAL(name, (CUcontext), (c));                     \
    if (on && r == CUDA_SUCCESS) pl_engines_ctx_gone(c); \
    return r;                                            \
  }

PL_WRAP_DESTROY(cuCtxDestroy)
PL_WRAP_DESTROY(cuCtxDestroy_v2)

/* A reset ends the primary context whatever its count; a release only
 * when it was the last. */
#define PL_WRAP_PRIMARY(name, always)                                          \
  PL_EXPORT CUresult name(CUdevice dev) {                                      \
    CUcontext c = pl_ctx_noted() ? pl_primary_of(dev) : NULL;                  \
    if (c != NULL) pl_engines_ctx_ending(c);                                   \
    PL_REAL(name, (CUdevice), (dev));                                          \
    if (c != NULL && r == CUDA_SUCCESS && ((always) || pl_primary_ended(dev))) \
      pl_engines_ctx_gone(c);                                                  \
    return r;                                                                  \
  }

PL_WRAP_PRIMARY(cuDevicePrimaryCtxRelease, false)
PL_WRAP_PRIMARY(cuDevicePrimaryCtxRelease_v2, false)
PL_WRAP_PRIMARY(cuDevicePrimaryCtxReset, true)
PL_WRAP_PRIMARY(cuDevicePrimaryCtxReset_v2, true)

PL_EXPORT CUresult cuGreenCtxDestroy(CUgreenCtx g) {
  const pl_drv *d = pl_ctx_noted() ? pl_drv_engines() : NULL;
  CUcontext c = NULL;
  if (d != NULL && d->CtxFromGreenCtx != NULL && d->CtxFromGreenCtx(&c, g) != CUDA_SUCCESS)
    c = NULL;
  if (c != NULL) pl_engines_ctx_ending(c);
  PL_REAL(cuGreenCtxDestroy, (CUgreenCtx), (g));
  if (c != NULL && r == CUDA_SUCCESS) pl_engines_ctx_gone(c);
  return r;
}
