/*
 * fc_device.c: devices, primary and user contexts, and the per-thread
 * context stack.
 *
 * Context structures are never freed before exit, so a stale CUcontext
 * handle reads as "destroyed" instead of pointing at reused memory.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fc_internal.h"

struct fc_device fc_devices[FC_MAX_DEVICES];
pthread_mutex_t fc_ctx_mu = PTHREAD_MUTEX_INITIALIZER;
static fc_ctx *fc_ctx_all; /* under fc_ctx_mu */
static atomic_uint fc_ctx_last_uid;

#define FC_CTX_STACK_MAX 64
static __thread fc_ctx *fc_tls_ctx_stack[FC_CTX_STACK_MAX];
static __thread int fc_tls_ctx_depth;

static fc_ctx *fc_ctx_new(int device, int primary, unsigned flags) {
  fc_ctx *c = calloc(1, sizeof *c);
  if (c == NULL) return NULL;
  c->magic = FC_CTX_MAGIC;
  c->uid = atomic_fetch_add(&fc_ctx_last_uid, 1) + 1;
  c->device = device;
  c->is_primary = primary;
  c->active = 1;
  c->flags = flags;
  pthread_mutex_init(&c->mu, NULL);
  pthread_mutex_init(&c->order_mu, NULL);
  pthread_mutex_lock(&fc_ctx_mu);
  c->all_next = fc_ctx_all;
  fc_ctx_all = c;
  pthread_mutex_unlock(&fc_ctx_mu);
  return c;
}

static int fc_ctx_known(fc_ctx *c) { return c != NULL && c->magic == FC_CTX_MAGIC; }

int fc_ctx_usable(fc_ctx *c) {
  if (!fc_ctx_known(c)) return 0;
  pthread_mutex_lock(&fc_ctx_mu);
  int a = c->active;
  pthread_mutex_unlock(&fc_ctx_mu);
  return a;
}

fc_ctx *fc_ctx_current(void) {
  return fc_tls_ctx_depth > 0 ? fc_tls_ctx_stack[fc_tls_ctx_depth - 1] : NULL;
}

CUresult fc_ctx_require(fc_ctx **out) {
  fc_ctx *c = fc_ctx_current();
  if (c == NULL) return CUDA_ERROR_INVALID_CONTEXT;
  if (!fc_ctx_usable(c)) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  *out = c;
  return CUDA_SUCCESS;
}

CUresult fc_sync_all(void) {
  pthread_mutex_lock(&fc_ctx_mu);
  fc_ctx *list = fc_ctx_all;
  pthread_mutex_unlock(&fc_ctx_mu);
  /* Contexts are only ever prepended and never freed before exit. */
  for (fc_ctx *c = list; c; c = c->all_next) {
    CUresult r = fc_ctx_synchronize(c);
    if (r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

CUresult fc_capture_guard(void) {
  pthread_mutex_lock(&fc_ctx_mu);
  fc_ctx *list = fc_ctx_all;
  pthread_mutex_unlock(&fc_ctx_mu);
  CUresult r = CUDA_SUCCESS;
  for (fc_ctx *c = list; c; c = c->all_next)
    if (fc_ctx_capture_check(c) != CUDA_SUCCESS) r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  return r;
}

/* Free what the context owns; the structure itself stays. */
static void fc_ctx_teardown(fc_ctx *c, int include_defaults) {
  fc_ctx_synchronize(c);
  fc_streams_stop_ctx(c, include_defaults);
  fc_ranges_release_ctx(c);
  fc_events_ctx_gone(c);
}

void fc_ctx_fini(void) {
  pthread_mutex_lock(&fc_ctx_mu);
  fc_ctx *c = fc_ctx_all;
  fc_ctx_all = NULL;
  pthread_mutex_unlock(&fc_ctx_mu);
  while (c) {
    fc_ctx *n = c->all_next;
    c->magic = 0;
    pthread_mutex_destroy(&c->mu);
    pthread_mutex_destroy(&c->order_mu);
    free(c);
    c = n;
  }
  for (int d = 0; d < FC_MAX_DEVICES; d++) fc_devices[d].primary = NULL;
}

static CUresult fc_check_device(CUdevice dev) {
  return (dev >= 0 && dev < fc_ndevices) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

/* ------------------------------------------------------------------ */
/* devices                                                            */

FC_EXPORT CUresult cuDeviceGet(CUdevice *device, int ordinal) {
  FC_ENTER(cuDeviceGet);
  if (device == NULL) FC_RETURN(CUDA_ERROR_INVALID_VALUE);
  if (fc_check_device(ordinal) != CUDA_SUCCESS) FC_RETURN(CUDA_ERROR_INVALID_DEVICE);
  *device = ordinal;
  FC_RETURN(CUDA_SUCCESS);
}

FC_EXPORT CUresult cuDeviceGetCount(int *count) {
  FC_ENTER(cuDeviceGetCount);
  if (count == NULL) FC_RETURN(CUDA_ERROR_INVALID_VALUE);
  *count = fc_ndevices;
  FC_RETURN(CUDA_SUCCESS);
}

FC_EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice dev) {
  FC_ENTER(cuDeviceGetName);
  if (name == NULL || len <= 0) FC_RETURN(CUDA_ERROR_INVALID_VALUE);
  if (fc_check_device(dev) != CUDA_SUCCESS) FC_RETURN(CUDA_ERROR_INVALID_DEVICE);
  snprintf(name, (size_t)len, "fakecuda device %d", dev);
  FC_RETURN(CUDA_SUCCESS);
}

static int fc_attribute(CUdevice_attribute a, int dev) {
  switch (a) {
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: return 2;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: return 132;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: return 1;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: return 1;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: return 1;
    case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP: return 1;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: return 1;
    case CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: return 9;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: return 0;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: return 32;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: return 1024;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: return dev + 1;
    default: return 0;
  }
}

FC_EXPORT CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev) {
  FC_ENTER(cuDeviceGetAttribute);
  if (pi == NULL || (int)attrib < 1 || attrib >= CU_DEVICE_ATTRIBUTE_MAX)
    FC_RETURN(CUDA_ERROR_INVALID_VALUE);
  if (fc_check_device(dev) != CUDA_SUCCESS) FC_RETURN(CUDA_ERROR_INVALID_DEVICE);
  *pi = fc_attribute(attrib, dev);
  FC_RETURN(CUDA_SUCCESS);
}

FC_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
  FC_ENTER(cuDeviceTotalMem_v2);
  if (bytes == NULL) FC_RETURN(CUDA_ERROR_INVALID_VALUE);
  if (fc_check_device(dev) != CUDA_SUCCESS) FC_RETURN(CUDA_ERROR_INVALID_DEVICE);
  *bytes = fc_device_mem_bytes;
  FC_RETURN(CUDA_SUCCESS);
}

/* ------------------------------------------------------------------ */
/* primary contexts                                                   */

FC_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
  FC_ENTER(cuDevicePrimaryCtxRetain);
  if (pctx == NULL) FC_RETURN(CUDA_ERROR_INVALID_VALUE);
  if (fc_check_device(dev) != CUDA_SUCCESS) FC_RETURN(CUDA_ERROR_INVALID_DEVICE);
  pthread_mutex_lock(&fc_ctx_mu);
  fc_ctx *c = fc_devices[dev].primary;
  pthread_mutex_unlock(&fc_ctx_mu);
  if (c == NULL) {
    fc_ctx *fresh = fc_ctx_new(dev, 1, 0);
    if (fresh == NULL) FC_RETURN(CUDA_ERROR_OUT_OF_MEMORY);
    pthread_mutex_lock(&fc_ctx_mu);
    if (fc_devices[dev].primary == NULL) {
      fc_devices[dev].primary = fresh;
    } else {
      /* Lost a race: the spare stays on the all-list, inactive. */
      fresh->active = 0;
    }
    c = fc_devices[dev].primary;
    pthread_mutex_unlock(&fc_ctx_mu);
  }
  pthread_mutex_lock(&fc_ctx_mu);
  c->retain++;
  c->active = 1;
  pthread_mutex_unlock(&fc_ctx_mu);
  *pctx = (CUcontext)c;
  FC_RETURN(CUDA_SUCCESS);
}

static CUresult fc_primary_release(CUdevice dev) {
  if (fc_check_device(dev) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_DEVICE;
  pthread_mutex_lock(&fc_ctx_mu);
  fc_ctx *c = fc_devices[dev].primary;
  if (c == NULL || c->retain == 0) {
    pthread_mutex_unlock(&fc_ctx_mu);
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  int last = (--c->retain == 0);
  pthread_mutex_unlock(&fc_ctx_mu);
  if (last) {
    /* The last release resets the context; it is inactive until retained. */
    fc_ctx_teardown(c, 0);
    pthread_mutex_lock(&fc_ctx_mu);
    if (c->retain == 0) c->active = 0;
    pthread_mutex_unlock(&fc_ctx_mu);
  }
  return CUDA_SUCCESS;
}

FC_EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev) {
  FC_ENTER(cuDevicePrimaryCtxRelease);
  FC_RETURN(fc_primary_release(dev));
}

FC_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  FC_ENTER(cuDevicePrimaryCtxRelease_v2);
  FC_RETURN(fc_primary_release(dev));
}

static CUresult fc_primary_reset(CUdevice dev) {
  if (fc_check_device(dev) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_DEVICE;
  pthread_mutex_lock(&fc_ctx_mu);
  fc_ctx *c = fc_devices[dev].primary;
  pthread_mutex_unlock(&fc_ctx_mu);
  /* Frees every allocation, registration and user stream of the context;
   * handles to them are dead afterwards, exactly the hazard of cudaDeviceReset. */
  if (c != NULL) fc_ctx_teardown(c, 0);
  return CUDA_SUCCESS;
}

FC_EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice dev) {
  FC_ENTER(cuDevicePrimaryCtxReset);
  FC_RETURN(fc_primary_reset(dev));
}

FC_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  FC_ENTER(cuDevicePrimaryCtxReset_v2);
  FC_RETURN(fc_primary_reset(dev));
}

FC_EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active) {
  FC_ENTER(cuDevicePrimaryCtxGetState);
  if (flags == NULL || active == NULL) FC_RETURN(CUDA_ERROR_INVALID_VALUE);
  if (fc_check_device(dev) != CUDA_SUCCESS) FC_RETURN(CUDA_ERROR_INVALID_DEVICE);
  pthread_mutex_lock(&fc_ctx_mu);
  fc_ctx *c = fc_devices[dev].primary;
  *flags = c ? c->flags : 0;
  *active = c ? (c->active && c->retain > 0) : 0;
  pthread_mutex_unlock(&fc_ctx_mu);
  FC_RETURN(CUDA_SUCCESS);
}

FC_EXPORT CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags) {
  FC_ENTER(cuDevicePrimaryCtxSetFlags_v2);
  if (fc_check_device(dev) != CUDA_SUCCESS) FC_RETURN(CUDA_ERROR_INVALID_DEVICE);
  pthread_mutex_lock(&fc_ctx_mu);
  fc_ctx *c = fc_devices[dev].primary;
  pthread_mutex_unlock(&fc_ctx_mu);
  if (c == NULL) {
    c = fc_ctx_new(dev, 1, flags);
    if (c == NULL) FC_RETURN(CUDA_ERROR_OUT_OF_MEMORY);
    pthread_mutex_lock(&fc_ctx_mu);
    if (fc_devices[dev].primary == NULL) {
      c->active = 1;
      fc_devices[dev].primary = c;
    } else {
      c->active = 0;
      c = fc_devices[dev].primary;
    }
    pthread_mutex_unlock(&fc_ctx_mu);
  }
  pthread_mutex_lock(&fc_ctx_mu);
  c->flags = flags;
  pthread_mutex_unlock(&fc_ctx_mu);
  FC_RETURN(CUDA_SUCCESS);
}

/* ------------------------------------------------------------------ */
/* user contexts and the context stack                                */

static CUresult fc_push(fc_ctx *c) {
  if (fc_tls_ctx_depth >= FC_CTX_STACK_MAX) return CUDA_ERROR_INVALID_VALUE;
  fc_tls_ctx_stack[fc_tls_ctx_depth++] = c;
  return CUDA_SUCCESS;
}

static CUresult fc_ctx_create(CUcontext *pctx, unsigned flags, CUdevice dev) {
  if (pctx == NULL) return CUDA_ERROR_INVALID_VALUE;
  if (fc_check_device(dev) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_DEVICE;
  fc_ctx *c = fc_ctx_new(dev, 0, flags);
  if (c == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = fc_push(c);
  if (r != CUDA_SUCCESS) {
    pthread_mutex_lock(&fc_ctx_mu);
    c->active = 0;
    pthread_mutex_unlock(&fc_ctx_mu);
    return r;
  }
  *pctx = (CUcontext)c;
  return CUDA_SUCCESS;
}

FC_EXPORT CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev) {
  FC_ENTER(cuCtxCreate);
  FC_RETURN(fc_ctx_create(pctx, flags, dev));
}

FC_EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev) {
  FC_ENTER(cuCtxCreate_v2);
  FC_RETURN(fc_ctx_create(pctx, flags, dev));
}

FC_EXPORT CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams,
                                  unsigned int flags, CUdevice dev) {
  FC_ENTER(cuCtxCreate_v3);
  (void)paramsArray; /* execution affinity is not modelled */
  (void)numParams;
  FC_RETURN(fc_ctx_create(pctx, flags, dev));
}

FC_EXPORT CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams,
                                  unsigned int flags, CUdevice dev) {
  FC_ENTER(cuCtxCreate_v4);
  (void)ctxCreateParams;
  FC_RETURN(fc_ctx_create(pctx, flags, dev));
}

static CUresult fc_ctx_destroy(CUcontext ctx) {
  fc_ctx *c = (fc_ctx *)ctx;
  if (!fc_ctx_known(c)) return CUDA_ERROR_INVALID_VALUE;
  if (c->is_primary || !fc_ctx_usable(c)) return CUDA_ERROR_INVALID_CONTEXT;
  fc_ctx_teardown(c, 1);
  pthread_mutex_lock(&fc_ctx_mu);
  c->active = 0;
  pthread_mutex_unlock(&fc_ctx_mu);
  /* Popped from this thread's stack if current here; other threads keep a
   * dead context, and their calls fail with CONTEXT_IS_DESTROYED. */
  if (fc_ctx_current() == c) fc_tls_ctx_depth--;
  return CUDA_SUCCESS;
}

FC_EXPORT CUresult cuCtxDestroy(CUcontext ctx) {
  FC_ENTER(cuCtxDestroy);
  FC_RETURN(fc_ctx_destroy(ctx));
}

FC_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx) {
  FC_ENTER(cuCtxDestroy_v2);
  FC_RETURN(fc_ctx_destroy(ctx));
}

FC_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx) {
  FC_ENTER(cuCtxSetCurrent);
  fc_ctx *c = (fc_ctx *)ctx;
  if (c == NULL) {
    if (fc_tls_ctx_depth > 0) fc_tls_ctx_depth--;
    FC_RETURN(CUDA_SUCCESS);
  }
  if (!fc_ctx_usable(c)) FC_RETURN(CUDA_ERROR_INVALID_CONTEXT);
  if (fc_tls_ctx_depth == 0) FC_RETURN(fc_push(c));
  fc_tls_ctx_stack[fc_tls_ctx_depth - 1] = c;
  FC_RETURN(CUDA_SUCCESS);
}

FC_EXPORT CUresult cuCtxGetCurrent(CUcontext *pctx) {
  FC_ENTER(cuCtxGetCurrent);
  if (pctx == NULL) FC_RETURN(CUDA_ERROR_INVALID_VALUE);
  *pctx = (CUcontext)fc_ctx_current();
  FC_RETURN(CUDA_SUCCESS);
}

FC_EXPORT CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
  FC_ENTER(cuCtxPushCurrent_v2);
  fc_ctx *c = (fc_ctx *)ctx;
  if (!fc_ctx_usable(c)) FC_RETURN(CUDA_ERROR_INVALID_CONTEXT);
  FC_RETURN(fc_push(c));
}

FC_EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *pctx) {
  FC_ENTER(cuCtxPopCurrent_v2);
  if (fc_tls_ctx_depth == 0) FC_RETURN(CUDA_ERROR_INVALID_CONTEXT);
  fc_ctx *c = fc_tls_ctx_stack[--fc_tls_ctx_depth];
  if (pctx) *pctx = (CUcontext)c;
  FC_RETURN(CUDA_SUCCESS);
}

static CUresult fc_ctx_get_device(CUdevice *device, fc_ctx *c) {
  if (device == NULL) return CUDA_ERROR_INVALID_VALUE;
  if (c == NULL) {
    CUresult r = fc_ctx_require(&c);
    if (r != CUDA_SUCCESS) return r;
  } else if (!fc_ctx_usable(c)) {
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  *device = c->device;
  return CUDA_SUCCESS;
}

FC_EXPORT CUresult cuCtxGetDevice(CUdevice *device) {
  FC_ENTER(cuCtxGetDevice);
  FC_RETURN(fc_ctx_get_device(device, NULL));
}

FC_EXPORT CUresult cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx) {
  FC_ENTER(cuCtxGetDevice_v2);
  FC_RETURN(fc_ctx_get_device(device, (fc_ctx *)ctx));
}

static CUresult fc_ctx_sync_api(fc_ctx *c) {
  if (c == NULL) {
    CUresult r = fc_ctx_require(&c);
    if (r != CUDA_SUCCESS) return r;
  } else if (!fc_ctx_usable(c)) {
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  fc_tool_sync(FC_TS_CONTEXT_SYNCHRONIZE, c, NULL, NULL);
  /* Synchronising a context while one of its streams captures is illegal
   * and invalidates the capture. */
  CUresult r = fc_ctx_capture_check(c);
  return r != CUDA_SUCCESS ? r : fc_ctx_synchronize(c);
}

FC_EXPORT CUresult cuCtxSynchronize(void) {
  FC_ENTER(cuCtxSynchronize);
  FC_RETURN(fc_ctx_sync_api(NULL));
}

FC_EXPORT CUresult cuCtxSynchronize_v2(CUcontext ctx) {
  cuCtxSynchronize_v2_params p = {ctx};
  FC_ENTER_P(cuCtxSynchronize_v2, &p);
  FC_RETURN(fc_ctx_sync_api((fc_ctx *)ctx));
}
