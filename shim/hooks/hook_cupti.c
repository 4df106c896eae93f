/* hook_cupti.c - the CUPTI entry points the shim exports: cuInit (so CUPTI
 * starts before the first context, and the staging pool prepares its
 * memory while the program sets CUDA up), cuptiSubscribe and
 * cuptiActivityRegisterCallbacks (so a program's own CUPTI client, a
 * profiler, gets CUPTI as it would without pagelock) and
 * InitializeInjection (the driver's tool hook, CUDA_INJECTION64_PATH).
 * Each forwards to cupti.c, which never knows how it was reached. */
#define _GNU_SOURCE
#include <dlfcn.h>

#include "pl_internal.h"
#include "engines.h"
#include "hooks.h"
#include "pl_cupti.h"

#include <cupti_activity.h>
#include <cupti_callbacks.h>
#include <cupti_result.h>

typedef CUresult (*pl_init_t)(unsigned int);

PL_EXPORT CUresult cuInit(unsigned int flags) {
  pl_init_t f = (pl_init_t)pl_hook_real(PL_HOOK_cuInit);
  if (f == NULL) return CUDA_ERROR_NOT_FOUND;
  pl_cupti_ensure();
  CUresult r = f(flags);
  if (r == CUDA_SUCCESS) {
    pl_cupti_driver_ready();
    if (!pl_shim_inside() && pl_active()) pl_engines_driver_init();
  }
  return r;
}

typedef CUptiResult (*pl_subscribe_t)(CUpti_SubscriberHandle *, CUpti_CallbackFunc, void *);
/* The real cuptiSubscribe behind the program's dlsym of it (hook_dl.c). */
static _Atomic(pl_subscribe_t) pl_app_subscribe;

PL_EXPORT CUptiResult cuptiSubscribe(CUpti_SubscriberHandle *subscriber,
                                     CUpti_CallbackFunc callback, void *userdata) {
  pl_subscribe_t f = atomic_load(&pl_app_subscribe);
  if (f == NULL) f = (pl_subscribe_t)pl_real_dlsym(RTLD_NEXT, "cuptiSubscribe");
  if (f == NULL) f = (pl_subscribe_t)pl_cupti_own_subscribe();
  if (f == NULL) return CUPTI_ERROR_NOT_INITIALIZED;
  pl_cupti_program_subscribes();
  return f(subscriber, callback, userdata);
}

void *pl_cupti_subscribe_wrapper(void *real) {
  if (real == NULL || real == (void *)cuptiSubscribe) return real;
  atomic_store(&pl_app_subscribe, (pl_subscribe_t)real);
  return (void *)cuptiSubscribe;
}

typedef CUptiResult (*pl_register_t)(CUpti_BuffersCallbackRequestFunc,
                                     CUpti_BuffersCallbackCompleteFunc);
static _Atomic(pl_register_t) pl_app_register;

/* CUPTI keeps one pair of buffer callbacks per process: a program that
 * registers its own is a CUPTI client, subscribed or not (a tool of the
 * activity API alone).  Left alone, it would get our records in its
 * buffers, and a sampling window of ours would take the buffers back. */
PL_EXPORT CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc requested,
                                                     CUpti_BuffersCallbackCompleteFunc completed) {
  pl_register_t f = atomic_load(&pl_app_register);
  if (f == NULL) f = (pl_register_t)pl_real_dlsym(RTLD_NEXT, "cuptiActivityRegisterCallbacks");
  if (f == NULL) f = (pl_register_t)pl_cupti_own_register();
  if (f == NULL) return CUPTI_ERROR_NOT_INITIALIZED;
  pl_cupti_program_subscribes();
  return f(requested, completed);
}

void *pl_cupti_register_wrapper(void *real) {
  if (real == NULL || real == (void *)cuptiActivityRegisterCallbacks) return real;
  atomic_store(&pl_app_register, (pl_register_t)real);
  return (void *)cuptiActivityRegisterCallbacks;
}

/* The driver's tool entry point (CUDA_INJECTION64_PATH): called inside the
 * first cuInit, before any context exists.  Returns 1: a zero return makes
 * the driver treat the injection as failed. */
PL_EXPORT int InitializeInjection(void) {
  pl_cupti_ensure();
  return 1;
}
