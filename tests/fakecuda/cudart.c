/*
 * cudart.c: a fake CUDA runtime (libcudart.so.13 and libcudart_static.a).
 *
 * It reaches the driver the way every real cudart since CUDA 11.3 does,
 * because that path is what pagelock has to intercept:
 *   dlopen("libcuda.so.1") on first use, dlsym(handle, "cuGetProcAddress_v2"),
 *   then every driver function it needs through cuGetProcAddress_v2 by
 *   base name and ABI version, twice: once with flags 0 and once with
 *   CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM.  The plain runtime entry
 *   points call the first set, the _ptds/_ptsz ones (what nvcc
 *   --default-stream per-thread compiles to) the second.
 * It never links libcuda, so a binary using the static archive exports no
 * CUDA symbol at all, like a default nvcc build.
 *
 * Runtime semantics kept: lazy initialisation, the primary context of the
 * thread's device made current on demand, a per-thread last error.
 */
#ifndef __CUDA_API_VERSION_INTERNAL
#define __CUDA_API_VERSION_INTERNAL 1 /* declares both cudaMemcpy and cudaMemcpy_ptds */
#endif
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "cudart_internal.h"

/*
 * Every driver function the runtime uses, with the ABI version it asks
 * for (the version of the variant whose signature it calls; the typedef
 * PFN_<name>_v<version> from cudaTypedefs.h checks that at compile time).
 */
#define RT_DRIVER_FUNCTIONS(X)                \
  X(cuInit, 2000)                             \
  X(cuDriverGetVersion, 2020)                 \
  X(cuDeviceGetCount, 2000)                   \
  X(cuDevicePrimaryCtxRetain, 7000)           \
  X(cuDevicePrimaryCtxReset, 11000)           \
  X(cuCtxGetCurrent, 4000)                    \
  X(cuCtxSetCurrent, 4000)                    \
  X(cuCtxGetDevice, 2000)                     \
  X(cuCtxSynchronize, 2000)                   \
  X(cuMemAlloc, 3020)                         \
  X(cuMemFree, 3020)                          \
  X(cuMemAllocManaged, 6000)                  \
  X(cuMemAllocHost, 3020)                     \
  X(cuMemHostAlloc, 2020)                     \
  X(cuMemFreeHost, 2000)                      \
  X(cuMemHostRegister, 6050)                  \
  X(cuMemHostUnregister, 4000)                \
  X(cuMemHostGetFlags, 2030)                  \
  X(cuMemHostGetDevicePointer, 3020)          \
  X(cuMemcpy, 4000)                           \
  X(cuMemcpyAsync, 4000)                      \
  X(cuMemcpyHtoD, 3020)                       \
  X(cuMemcpyDtoH, 3020)                       \
  X(cuMemcpyDtoD, 3020)                       \
  X(cuMemcpyHtoDAsync, 3020)                  \
  X(cuMemcpyDtoHAsync, 3020)                  \
  X(cuMemcpyDtoDAsync, 3020)                  \
  X(cuMemcpyPeer, 4000)                       \
  X(cuMemcpyPeerAsync, 4000)                  \
  X(cuMemcpy2DUnaligned, 3020)                \
  X(cuMemcpy2DAsync, 3020)                    \
  X(cuMemcpyBatchAsync, 13000)                \
  X(cuMemsetD8, 3020)                         \
  X(cuMemsetD8Async, 3020)                    \
  X(cuStreamCreate, 2000)                     \
  X(cuStreamDestroy, 4000)                    \
  X(cuStreamSynchronize, 2000)                \
  X(cuStreamQuery, 2000)                      \
  X(cuStreamWaitEvent, 3020)                  \
  X(cuStreamBeginCapture, 10010)              \
  X(cuStreamEndCapture, 10000)                \
  X(cuStreamIsCapturing, 10000)               \
  X(cuThreadExchangeStreamCaptureMode, 10010) \
  X(cuGraphInstantiateWithFlags, 11040)       \
  X(cuGraphLaunch, 10000)                     \
  X(cuGraphDestroy, 10000)                    \
  X(cuGraphExecDestroy, 10000)                \
  X(cuEventCreate, 2000)                      \
  X(cuEventRecord, 2000)                      \
  X(cuEventSynchronize, 2000)                 \
  X(cuEventQuery, 2000)                       \
  X(cuEventElapsedTime, 12080)                \
  X(cuEventDestroy, 4000)                     \
  X(cuLaunchHostFunc, 10000)                  \
  X(cuPointerGetAttributes, 7000)

/* [0]: default (legacy stream) pointer, [1]: per-thread-stream pointer */
static struct {
#define RT_MEMBER(name, ver) PFN_##name##_v##ver name[2];
  RT_DRIVER_FUNCTIONS(RT_MEMBER)
#undef RT_MEMBER
} drv;

#define DRV(pt, name) (drv.name[(pt) ? 1 : 0])

#define RT_MAX_DEVICES 64

static pthread_once_t rt_once = PTHREAD_ONCE_INIT;
static cudaError_t rt_init_error;
static void *rt_libcuda;
static PFN_cuGetProcAddress_v12000 rt_get_proc; /* for cudaGetDriverEntryPointByVersion */
static int rt_device_count;
static pthread_mutex_t rt_mu = PTHREAD_MUTEX_INITIALIZER;
static CUcontext rt_primary[RT_MAX_DEVICES]; /* retained once per process, under rt_mu */

static __thread int rt_tls_device;
static __thread cudaError_t rt_tls_error;

/* ------------------------------------------------------------------ */
/* initialisation                                                     */

static void rt_init_body(void) {
  rt_libcuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (rt_libcuda == NULL) {
    rt_init_error = cudaErrorInsufficientDriver;
    return;
  }
  PFN_cuGetProcAddress_v12000 get_proc =
      (PFN_cuGetProcAddress_v12000)(uintptr_t)dlsym(rt_libcuda, "cuGetProcAddress_v2");
  if (get_proc == NULL) {
    rt_init_error = cudaErrorInsufficientDriver;
    return;
  }
  rt_get_proc = get_proc;
  CUdriverProcAddressQueryResult status;
#define RT_RESOLVE(name, ver)                                                                    \
  if (get_proc(#name, (void **)&drv.name[0], ver, CU_GET_PROC_ADDRESS_DEFAULT, &status) !=       \
          CUDA_SUCCESS ||                                                                        \
      drv.name[0] == NULL ||                                                                     \
      get_proc(#name, (void **)&drv.name[1], ver, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, \
               &status) != CUDA_SUCCESS ||                                                       \
      drv.name[1] == NULL) {                                                                     \
    rt_init_error = cudaErrorInsufficientDriver;                                                 \
    return;                                                                                      \
  }
  RT_DRIVER_FUNCTIONS(RT_RESOLVE)
#undef RT_RESOLVE
  CUresult r = drv.cuInit[0](0);
  if (r == CUDA_SUCCESS) r = drv.cuDeviceGetCount[0](&rt_device_count);
  if (r == CUDA_SUCCESS && rt_device_count == 0) r = CUDA_ERROR_NO_DEVICE;
  if (rt_device_count > RT_MAX_DEVICES) rt_device_count = RT_MAX_DEVICES;
  rt_init_error = rt_map_error(r);
}

static cudaError_t rt_init(void) {
  pthread_once(&rt_once, rt_init_body);
  return rt_init_error;
}

static cudaError_t rt_retain_primary(int dev, CUcontext *out) {
  CUresult r = CUDA_SUCCESS;
  pthread_mutex_lock(&rt_mu);
  if (rt_primary[dev] == NULL) r = drv.cuDevicePrimaryCtxRetain[0](&rt_primary[dev], dev);
  *out = rt_primary[dev];
  pthread_mutex_unlock(&rt_mu);
  return rt_map_error(r);
}

/*
 * Every call that touches a device: initialise, then make sure some
 * context is current.  A context the application made current through the
 * driver API is respected, as the real runtime does.
 */
static cudaError_t rt_begin(void) {
  cudaError_t e = rt_init();
  if (e != cudaSuccess) return e;
  CUcontext cur = NULL;
  CUresult r = drv.cuCtxGetCurrent[0](&cur);
  if (r != CUDA_SUCCESS) return rt_map_error(r);
  if (cur != NULL) return cudaSuccess;
  e = rt_retain_primary(rt_tls_device, &cur);
  if (e != cudaSuccess) return e;
  return rt_map_error(drv.cuCtxSetCurrent[0](cur));
}

/* Remember failures for cudaGetLastError; "not ready" is not a failure. */
static cudaError_t rt_ret(cudaError_t e) {
  if (e != cudaSuccess && e != cudaErrorNotReady) rt_tls_error = e;
  return e;
}

static cudaError_t rt_drv(CUresult r) { return rt_ret(rt_map_error(r)); }

#define RT_BEGIN()                                  \
  do {                                              \
    cudaError_t rt__e = rt_begin();                 \
    if (rt__e != cudaSuccess) return rt_ret(rt__e); \
  } while (0)

/* ------------------------------------------------------------------ */
/* driver entry points                                                */

/* The runtime's way to the driver API without linking libcuda (the demo
 * uses it, so that its real build needs no libcuda.so.1 at link time). */
RT_API cudaError_t CUDARTAPI cudaGetDriverEntryPointByVersion(
    const char *symbol, void **funcPtr, unsigned int cudaVersion, unsigned long long flags,
    enum cudaDriverEntryPointQueryResult *driverStatus) {
  if (symbol == NULL || funcPtr == NULL) return rt_ret(cudaErrorInvalidValue);
  *funcPtr = NULL;
  cudaError_t e = rt_init();
  if (e != cudaSuccess) return rt_ret(e);
  CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  CUresult r = rt_get_proc(symbol, funcPtr, (int)cudaVersion, flags, &st);
  if (driverStatus)
    *driverStatus = st == CU_GET_PROC_ADDRESS_SUCCESS ? cudaDriverEntryPointSuccess
                    : st == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                        ? cudaDriverEntryPointVersionNotSufficent
                        : cudaDriverEntryPointSymbolNotFound;
  return rt_drv(r);
}

/* ------------------------------------------------------------------ */
/* device management                                                  */

RT_API cudaError_t CUDARTAPI cudaGetDeviceCount(int *count) {
  if (count == NULL) return rt_ret(cudaErrorInvalidValue);
  cudaError_t e = rt_init();
  *count = e == cudaSuccess ? rt_device_count : 0;
  return rt_ret(e);
}

RT_API cudaError_t CUDARTAPI cudaSetDevice(int device) {
  cudaError_t e = rt_init();
  if (e != cudaSuccess) return rt_ret(e);
  if (device < 0 || device >= rt_device_count) return rt_ret(cudaErrorInvalidDevice);
  rt_tls_device = device;
  CUcontext c;
  e = rt_retain_primary(device, &c);
  if (e != cudaSuccess) return rt_ret(e);
  return rt_drv(drv.cuCtxSetCurrent[0](c));
}

RT_API cudaError_t CUDARTAPI cudaGetDevice(int *device) {
  if (device == NULL) return rt_ret(cudaErrorInvalidValue);
  cudaError_t e = rt_init();
  if (e != cudaSuccess) return rt_ret(e);
  CUcontext cur = NULL;
  CUdevice d;
  if (drv.cuCtxGetCurrent[0](&cur) == CUDA_SUCCESS && cur != NULL &&
      drv.cuCtxGetDevice[0](&d) == CUDA_SUCCESS) {
    *device = d;
    return cudaSuccess;
  }
  *device = rt_tls_device;
  return cudaSuccess;
}

RT_API cudaError_t CUDARTAPI cudaDeviceSynchronize(void) {
  RT_BEGIN();
  return rt_drv(drv.cuCtxSynchronize[0]());
}

RT_API cudaError_t CUDARTAPI cudaDeviceReset(void) {
  RT_BEGIN();
  int dev;
  cudaGetDevice(&dev);
  /* Frees everything the device's primary context owns; the context
   * stays retained and current, ready for the next call. */
  return rt_drv(drv.cuDevicePrimaryCtxReset[0](dev));
}

RT_API cudaError_t CUDARTAPI cudaDriverGetVersion(int *driverVersion) {
  if (driverVersion == NULL) return rt_ret(cudaErrorInvalidValue);
  rt_init();
  if (rt_libcuda == NULL || drv.cuDriverGetVersion[0] == NULL) {
    *driverVersion = 0; /* no driver installed */
    return cudaSuccess;
  }
  return rt_drv(drv.cuDriverGetVersion[0](driverVersion));
}

RT_API cudaError_t CUDARTAPI cudaRuntimeGetVersion(int *runtimeVersion) {
  if (runtimeVersion == NULL) return rt_ret(cudaErrorInvalidValue);
  *runtimeVersion = CUDART_VERSION;
  return cudaSuccess;
}

/* ------------------------------------------------------------------ */
/* errors                                                             */

RT_API cudaError_t CUDARTAPI cudaGetLastError(void) {
  cudaError_t e = rt_tls_error;
  rt_tls_error = cudaSuccess;
  return e;
}

RT_API cudaError_t CUDARTAPI cudaPeekAtLastError(void) { return rt_tls_error; }

/* ------------------------------------------------------------------ */
/* memory                                                             */

#define DP(p) ((CUdeviceptr)(uintptr_t)(p))

RT_API cudaError_t CUDARTAPI cudaMalloc(void **devPtr, size_t size) {
  if (devPtr == NULL) return rt_ret(cudaErrorInvalidValue);
  RT_BEGIN();
  if (size == 0) {
    *devPtr = NULL;
    return cudaSuccess;
  }
  CUdeviceptr p;
  CUresult r = drv.cuMemAlloc[0](&p, size);
  if (r == CUDA_SUCCESS) *devPtr = (void *)(uintptr_t)p;
  return rt_drv(r);
}

RT_API cudaError_t CUDARTAPI cudaFree(void *devPtr) {
  RT_BEGIN();
  if (devPtr == NULL) return cudaSuccess;
  return rt_drv(drv.cuMemFree[0](DP(devPtr)));
}

RT_API cudaError_t CUDARTAPI cudaMallocManaged(void **devPtr, size_t size, unsigned int flags) {
  if (devPtr == NULL || size == 0) return rt_ret(cudaErrorInvalidValue);
  RT_BEGIN();
  CUdeviceptr p;
  CUresult r = drv.cuMemAllocManaged[0](&p, size, flags);
  if (r == CUDA_SUCCESS) *devPtr = (void *)(uintptr_t)p;
  return rt_drv(r);
}

RT_API cudaError_t CUDARTAPI cudaMallocHost(void **ptr, size_t size) {
  if (ptr == NULL) return rt_ret(cudaErrorInvalidValue);
  RT_BEGIN();
  if (size == 0) {
    *ptr = NULL;
    return cudaSuccess;
  }
  return rt_drv(drv.cuMemAllocHost[0](ptr, size));
}

RT_API cudaError_t CUDARTAPI cudaHostAlloc(void **pHost, size_t size, unsigned int flags) {
  if (pHost == NULL) return rt_ret(cudaErrorInvalidValue);
  RT_BEGIN();
  if (size == 0) {
    *pHost = NULL;
    return cudaSuccess;
  }
  /* cudaHostAlloc* flag bits equal CU_MEMHOSTALLOC_* */
  return rt_drv(drv.cuMemHostAlloc[0](pHost, size, flags));
}

RT_API cudaError_t CUDARTAPI cudaFreeHost(void *ptr) {
  RT_BEGIN();
  if (ptr == NULL) return cudaSuccess;
  return rt_drv(drv.cuMemFreeHost[0](ptr));
}

RT_API cudaError_t CUDARTAPI cudaHostRegister(void *ptr, size_t size, unsigned int flags) {
  RT_BEGIN();
  /* cudaHostRegister* flag bits equal CU_MEMHOSTREGISTER_* */
  return rt_drv(drv.cuMemHostRegister[0](ptr, size, flags));
}

RT_API cudaError_t CUDARTAPI cudaHostUnregister(void *ptr) {
  RT_BEGIN();
  return rt_drv(drv.cuMemHostUnregister[0](ptr));
}

RT_API cudaError_t CUDARTAPI cudaHostGetFlags(unsigned int *pFlags, void *pHost) {
  RT_BEGIN();
  return rt_drv(drv.cuMemHostGetFlags[0](pFlags, pHost));
}

RT_API cudaError_t CUDARTAPI cudaHostGetDevicePointer(void **pDevice, void *pHost,
                                                      unsigned int flags) {
  if (pDevice == NULL) return rt_ret(cudaErrorInvalidValue);
  RT_BEGIN();
  CUdeviceptr d = 0;
  CUresult r = drv.cuMemHostGetDevicePointer[0](&d, pHost, flags);
  if (r == CUDA_SUCCESS) *pDevice = (void *)(uintptr_t)d;
  return rt_drv(r);
}

RT_API cudaError_t CUDARTAPI cudaPointerGetAttributes(struct cudaPointerAttributes *attributes,
                                                      const void *ptr) {
  if (attributes == NULL) return rt_ret(cudaErrorInvalidValue);
  RT_BEGIN();
  unsigned int type = 0, managed = 0;
  int ordinal = CU_DEVICE_INVALID;
  CUdeviceptr dptr = 0;
  void *hptr = NULL;
  CUpointer_attribute which[] = {
      CU_POINTER_ATTRIBUTE_MEMORY_TYPE,    CU_POINTER_ATTRIBUTE_IS_MANAGED,
      CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CU_POINTER_ATTRIBUTE_DEVICE_POINTER,
      CU_POINTER_ATTRIBUTE_HOST_POINTER,
  };
  void *data[] = {&type, &managed, &ordinal, &dptr, &hptr};
  CUresult r = drv.cuPointerGetAttributes[0](5, which, data, DP(ptr));
  if (r != CUDA_SUCCESS) return rt_drv(r);
  *attributes = (struct cudaPointerAttributes){0};
  if (managed) {
    attributes->type = cudaMemoryTypeManaged;
  } else if (type == CU_MEMORYTYPE_DEVICE) {
    attributes->type = cudaMemoryTypeDevice;
  } else if (type == CU_MEMORYTYPE_HOST) {
    attributes->type = cudaMemoryTypeHost;
  } else {
    /* Unregistered host memory: type 0, device -2, the pointer itself
     * as host pointer (what the CUDA 11+ runtime reports). */
    attributes->type = cudaMemoryTypeUnregistered;
    attributes->device = CU_DEVICE_INVALID;
    attributes->hostPointer = (void *)ptr;
    return cudaSuccess;
  }
  attributes->device = ordinal;
  attributes->devicePointer = (void *)(uintptr_t)dptr;
  attributes->hostPointer = hptr;
  return cudaSuccess;
}

/* ------------------------------------------------------------------ */
/* copies                                                             */

static cudaError_t rt_memcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                             cudaStream_t s, int async, int pt) {
  RT_BEGIN();
  CUresult r;
  switch (kind) {
    case cudaMemcpyHostToDevice:
      r = async ? DRV(pt, cuMemcpyHtoDAsync)(DP(dst), src, n, s)
                : DRV(pt, cuMemcpyHtoD)(DP(dst), src, n);
      break;
    case cudaMemcpyDeviceToHost:
      r = async ? DRV(pt, cuMemcpyDtoHAsync)(dst, DP(src), n, s)
                : DRV(pt, cuMemcpyDtoH)(dst, DP(src), n);
      break;
    case cudaMemcpyDeviceToDevice:
      r = async ? DRV(pt, cuMemcpyDtoDAsync)(DP(dst), DP(src), n, s)
                : DRV(pt, cuMemcpyDtoD)(DP(dst), DP(src), n);
      break;
    case cudaMemcpyHostToHost:
    case cudaMemcpyDefault:
      r = async ? DRV(pt, cuMemcpyAsync)(DP(dst), DP(src), n, s)
                : DRV(pt, cuMemcpy)(DP(dst), DP(src), n);
      break;
    default: return rt_ret(cudaErrorInvalidMemcpyDirection);
  }
  return rt_drv(r);
}

RT_API cudaError_t CUDARTAPI cudaMemcpy(void *dst, const void *src, size_t count,
                                        enum cudaMemcpyKind kind) {
  return rt_memcpy(dst, src, count, kind, NULL, 0, 0);
}

RT_API cudaError_t CUDARTAPI cudaMemcpy_ptds(void *dst, const void *src, size_t count,
                                             enum cudaMemcpyKind kind) {
  return rt_memcpy(dst, src, count, kind, NULL, 0, 1);
}

RT_API cudaError_t CUDARTAPI cudaMemcpyAsync(void *dst, const void *src, size_t count,
                                             enum cudaMemcpyKind kind, cudaStream_t stream) {
  return rt_memcpy(dst, src, count, kind, stream, 1, 0);
}

RT_API cudaError_t CUDARTAPI cudaMemcpyAsync_ptsz(void *dst, const void *src, size_t count,
                                                  enum cudaMemcpyKind kind, cudaStream_t stream) {
  return rt_memcpy(dst, src, count, kind, stream, 1, 1);
}

/* cudaMemcpyPeer[Async]: the two devices' primary contexts. */
static cudaError_t rt_memcpy_peer(void *dst, int dst_dev, const void *src, int src_dev, size_t n,
                                  cudaStream_t s, int async, int pt) {
  RT_BEGIN();
  if (dst_dev < 0 || dst_dev >= rt_device_count || src_dev < 0 || src_dev >= rt_device_count)
    return rt_ret(cudaErrorInvalidDevice);
  CUcontext dc, sc;
  cudaError_t e = rt_retain_primary(dst_dev, &dc);
  if (e == cudaSuccess) e = rt_retain_primary(src_dev, &sc);
  if (e != cudaSuccess) return rt_ret(e);
  return rt_drv(async ? DRV(pt, cuMemcpyPeerAsync)(DP(dst), dc, DP(src), sc, n, s)
                      : DRV(pt, cuMemcpyPeer)(DP(dst), dc, DP(src), sc, n));
}

RT_API cudaError_t CUDARTAPI cudaMemcpyPeer(void *dst, int dstDevice, const void *src,
                                            int srcDevice, size_t count) {
  return rt_memcpy_peer(dst, dstDevice, src, srcDevice, count, NULL, 0, 0);
}

RT_API cudaError_t CUDARTAPI cudaMemcpyPeer_ptds(void *dst, int dstDevice, const void *src,
                                                 int srcDevice, size_t count) {
  return rt_memcpy_peer(dst, dstDevice, src, srcDevice, count, NULL, 0, 1);
}

RT_API cudaError_t CUDARTAPI cudaMemcpyPeerAsync(void *dst, int dstDevice, const void *src,
                                                 int srcDevice, size_t count, cudaStream_t stream) {
  return rt_memcpy_peer(dst, dstDevice, src, srcDevice, count, stream, 1, 0);
}

RT_API cudaError_t CUDARTAPI cudaMemcpyPeerAsync_ptsz(void *dst, int dstDevice, const void *src,
                                                      int srcDevice, size_t count,
                                                      cudaStream_t stream) {
  return rt_memcpy_peer(dst, dstDevice, src, srcDevice, count, stream, 1, 1);
}

static cudaError_t rt_memcpy2d(void *dst, size_t dpitch, const void *src, size_t spitch,
                               size_t width, size_t height, enum cudaMemcpyKind kind,
                               cudaStream_t s, int async, int pt) {
  RT_BEGIN();
  CUmemorytype st, dt;
  switch (kind) {
    case cudaMemcpyHostToDevice:
      st = CU_MEMORYTYPE_HOST;
      dt = CU_MEMORYTYPE_DEVICE;
      break;
    case cudaMemcpyDeviceToHost:
      st = CU_MEMORYTYPE_DEVICE;
      dt = CU_MEMORYTYPE_HOST;
      break;
    case cudaMemcpyDeviceToDevice: st = dt = CU_MEMORYTYPE_DEVICE; break;
    case cudaMemcpyHostToHost: st = dt = CU_MEMORYTYPE_HOST; break;
    case cudaMemcpyDefault: st = dt = CU_MEMORYTYPE_UNIFIED; break;
    default: return rt_ret(cudaErrorInvalidMemcpyDirection);
  }
  if (height > 1 && (width > dpitch || width > spitch)) return rt_ret(cudaErrorInvalidPitchValue);
  CUDA_MEMCPY2D p = {
      .srcMemoryType = st,
      .srcPitch = spitch,
      .dstMemoryType = dt,
      .dstPitch = dpitch,
      .WidthInBytes = width,
      .Height = height,
  };
  if (st == CU_MEMORYTYPE_HOST)
    p.srcHost = src;
  else
    p.srcDevice = DP(src);
  if (dt == CU_MEMORYTYPE_HOST)
    p.dstHost = dst;
  else
    p.dstDevice = DP(dst);
  /* The synchronous runtime copy goes to the Unaligned driver variant. */
  return rt_drv(async ? DRV(pt, cuMemcpy2DAsync)(&p, s) : DRV(pt, cuMemcpy2DUnaligned)(&p));
}

RT_API cudaError_t CUDARTAPI cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch,
                                          size_t width, size_t height, enum cudaMemcpyKind kind) {
  return rt_memcpy2d(dst, dpitch, src, spitch, width, height, kind, NULL, 0, 0);
}

RT_API cudaError_t CUDARTAPI cudaMemcpy2D_ptds(void *dst, size_t dpitch, const void *src,
                                               size_t spitch, size_t width, size_t height,
                                               enum cudaMemcpyKind kind) {
  return rt_memcpy2d(dst, dpitch, src, spitch, width, height, kind, NULL, 0, 1);
}

RT_API cudaError_t CUDARTAPI cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src,
                                               size_t spitch, size_t width, size_t height,
                                               enum cudaMemcpyKind kind, cudaStream_t stream) {
  return rt_memcpy2d(dst, dpitch, src, spitch, width, height, kind, stream, 1, 0);
}

RT_API cudaError_t CUDARTAPI cudaMemcpy2DAsync_ptsz(void *dst, size_t dpitch, const void *src,
                                                    size_t spitch, size_t width, size_t height,
                                                    enum cudaMemcpyKind kind, cudaStream_t stream) {
  return rt_memcpy2d(dst, dpitch, src, spitch, width, height, kind, stream, 1, 1);
}

static cudaError_t rt_memcpy_batch(void *const *dsts, const void *const *srcs, const size_t *sizes,
                                   size_t count, struct cudaMemcpyAttributes *attrs,
                                   size_t *attrsIdxs, size_t numAttrs, cudaStream_t s, int pt) {
  RT_BEGIN();
  if ((count && (dsts == NULL || srcs == NULL || sizes == NULL)) || (numAttrs && attrs == NULL))
    return rt_ret(cudaErrorInvalidValue);
  CUdeviceptr *d = malloc((count ? count : 1) * sizeof *d);
  CUdeviceptr *sr = malloc((count ? count : 1) * sizeof *sr);
  size_t *sz = malloc((count ? count : 1) * sizeof *sz);
  CUmemcpyAttributes *a = calloc(numAttrs ? numAttrs : 1, sizeof *a);
  cudaError_t e = cudaErrorMemoryAllocation;
  if (d && sr && sz && a) {
    for (size_t i = 0; i < count; i++) {
      d[i] = DP(dsts[i]);
      sr[i] = DP(srcs[i]);
      sz[i] = sizes[i];
    }
    for (size_t i = 0; i < numAttrs; i++) {
      a[i].srcAccessOrder = (CUmemcpySrcAccessOrder)attrs[i].srcAccessOrder;
      a[i].srcLocHint.type = (CUmemLocationType)attrs[i].srcLocHint.type;
      a[i].srcLocHint.id = attrs[i].srcLocHint.id;
      a[i].dstLocHint.type = (CUmemLocationType)attrs[i].dstLocHint.type;
      a[i].dstLocHint.id = attrs[i].dstLocHint.id;
      a[i].flags = attrs[i].flags;
    }
    e = rt_map_error(DRV(pt, cuMemcpyBatchAsync)(d, sr, sz, count, a, attrsIdxs, numAttrs, s));
  }
  free(d);
  free(sr);
  free(sz);
  free(a);
  return rt_ret(e);
}

RT_API cudaError_t CUDARTAPI cudaMemcpyBatchAsync(void *const *dsts, const void *const *srcs,
                                                  const size_t *sizes, size_t count,
                                                  struct cudaMemcpyAttributes *attrs,
                                                  size_t *attrsIdxs, size_t numAttrs,
                                                  cudaStream_t stream) {
  return rt_memcpy_batch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, stream, 0);
}

RT_API cudaError_t CUDARTAPI cudaMemcpyBatchAsync_ptsz(void *const *dsts, const void *const *srcs,
                                                       const size_t *sizes, size_t count,
                                                       struct cudaMemcpyAttributes *attrs,
                                                       size_t *attrsIdxs, size_t numAttrs,
                                                       cudaStream_t stream) {
  return rt_memcpy_batch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, stream, 1);
}

static cudaError_t rt_memset(void *p, int value, size_t n, cudaStream_t s, int async, int pt) {
  RT_BEGIN();
  unsigned char v = (unsigned char)value;
  return rt_drv(async ? DRV(pt, cuMemsetD8Async)(DP(p), v, n, s)
                      : DRV(pt, cuMemsetD8)(DP(p), v, n));
}

RT_API cudaError_t CUDARTAPI cudaMemset(void *devPtr, int value, size_t count) {
  return rt_memset(devPtr, value, count, NULL, 0, 0);
}

RT_API cudaError_t CUDARTAPI cudaMemset_ptds(void *devPtr, int value, size_t count) {
  return rt_memset(devPtr, value, count, NULL, 0, 1);
}

RT_API cudaError_t CUDARTAPI cudaMemsetAsync(void *devPtr, int value, size_t count,
                                             cudaStream_t stream) {
  return rt_memset(devPtr, value, count, stream, 1, 0);
}

RT_API cudaError_t CUDARTAPI cudaMemsetAsync_ptsz(void *devPtr, int value, size_t count,
                                                  cudaStream_t stream) {
  return rt_memset(devPtr, value, count, stream, 1, 1);
}

/* ------------------------------------------------------------------ */
/* streams                                                            */

RT_API cudaError_t CUDARTAPI cudaStreamCreate(cudaStream_t *pStream) {
  if (pStream == NULL) return rt_ret(cudaErrorInvalidValue);
  RT_BEGIN();
  return rt_drv(drv.cuStreamCreate[0](pStream, CU_STREAM_DEFAULT));
}

RT_API cudaError_t CUDARTAPI cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags) {
  if (pStream == NULL) return rt_ret(cudaErrorInvalidValue);
  RT_BEGIN();
  /* cudaStreamNonBlocking == CU_STREAM_NON_BLOCKING */
  return rt_drv(drv.cuStreamCreate[0](pStream, flags));
}

RT_API cudaError_t CUDARTAPI cudaStreamDestroy(cudaStream_t stream) {
  RT_BEGIN();
  return rt_drv(drv.cuStreamDestroy[0](stream));
}

RT_API cudaError_t CUDARTAPI cudaStreamSynchronize(cudaStream_t stream) {
  RT_BEGIN();
  return rt_drv(drv.cuStreamSynchronize[0](stream));
}

RT_API cudaError_t CUDARTAPI cudaStreamSynchronize_ptsz(cudaStream_t stream) {
  RT_BEGIN();
  return rt_drv(drv.cuStreamSynchronize[1](stream));
}

RT_API cudaError_t CUDARTAPI cudaStreamQuery(cudaStream_t stream) {
  RT_BEGIN();
  return rt_drv(drv.cuStreamQuery[0](stream));
}

RT_API cudaError_t CUDARTAPI cudaStreamQuery_ptsz(cudaStream_t stream) {
  RT_BEGIN();
  return rt_drv(drv.cuStreamQuery[1](stream));
}

RT_API cudaError_t CUDARTAPI cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event,
                                                 unsigned int flags) {
  RT_BEGIN();
  return rt_drv(drv.cuStreamWaitEvent[0](stream, event, flags));
}

RT_API cudaError_t CUDARTAPI cudaStreamWaitEvent_ptsz(cudaStream_t stream, cudaEvent_t event,
                                                      unsigned int flags) {
  RT_BEGIN();
  return rt_drv(drv.cuStreamWaitEvent[1](stream, event, flags));
}

RT_API cudaError_t CUDARTAPI cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn,
                                                void *userData) {
  RT_BEGIN();
  return rt_drv(drv.cuLaunchHostFunc[0](stream, fn, userData));
}

RT_API cudaError_t CUDARTAPI cudaLaunchHostFunc_ptsz(cudaStream_t stream, cudaHostFn_t fn,
                                                     void *userData) {
  RT_BEGIN();
  return rt_drv(drv.cuLaunchHostFunc[1](stream, fn, userData));
}

/* ------------------------------------------------------------------ */
/* capture and graphs                                                 */

RT_API cudaError_t CUDARTAPI cudaStreamBeginCapture(cudaStream_t stream,
                                                    enum cudaStreamCaptureMode mode) {
  RT_BEGIN();
  return rt_drv(drv.cuStreamBeginCapture[0](stream, (CUstreamCaptureMode)mode));
}

RT_API cudaError_t CUDARTAPI cudaStreamBeginCapture_ptsz(cudaStream_t stream,
                                                         enum cudaStreamCaptureMode mode) {
  RT_BEGIN();
  return rt_drv(drv.cuStreamBeginCapture[1](stream, (CUstreamCaptureMode)mode));
}

RT_API cudaError_t CUDARTAPI cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph) {
  RT_BEGIN();
  return rt_drv(drv.cuStreamEndCapture[0](stream, pGraph));
}

RT_API cudaError_t CUDARTAPI cudaStreamEndCapture_ptsz(cudaStream_t stream, cudaGraph_t *pGraph) {
  RT_BEGIN();
  return rt_drv(drv.cuStreamEndCapture[1](stream, pGraph));
}

RT_API cudaError_t CUDARTAPI cudaStreamIsCapturing(cudaStream_t stream,
                                                   enum cudaStreamCaptureStatus *pCaptureStatus) {
  RT_BEGIN();
  return rt_drv(drv.cuStreamIsCapturing[0](stream, (CUstreamCaptureStatus *)pCaptureStatus));
}

RT_API cudaError_t CUDARTAPI
cudaStreamIsCapturing_ptsz(cudaStream_t stream, enum cudaStreamCaptureStatus *pCaptureStatus) {
  RT_BEGIN();
  return rt_drv(drv.cuStreamIsCapturing[1](stream, (CUstreamCaptureStatus *)pCaptureStatus));
}

RT_API cudaError_t CUDARTAPI cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode) {
  RT_BEGIN();
  return rt_drv(drv.cuThreadExchangeStreamCaptureMode[0]((CUstreamCaptureMode *)mode));
}

RT_API cudaError_t CUDARTAPI cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                                  unsigned long long flags) {
  RT_BEGIN();
  return rt_drv(drv.cuGraphInstantiateWithFlags[0](pGraphExec, graph, flags));
}

RT_API cudaError_t CUDARTAPI cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream) {
  RT_BEGIN();
  return rt_drv(drv.cuGraphLaunch[0](graphExec, stream));
}

RT_API cudaError_t CUDARTAPI cudaGraphLaunch_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream) {
  RT_BEGIN();
  return rt_drv(drv.cuGraphLaunch[1](graphExec, stream));
}

RT_API cudaError_t CUDARTAPI cudaGraphDestroy(cudaGraph_t graph) {
  RT_BEGIN();
  return rt_drv(drv.cuGraphDestroy[0](graph));
}

RT_API cudaError_t CUDARTAPI cudaGraphExecDestroy(cudaGraphExec_t graphExec) {
  RT_BEGIN();
  return rt_drv(drv.cuGraphExecDestroy[0](graphExec));
}

/* ------------------------------------------------------------------ */
/* events                                                             */

RT_API cudaError_t CUDARTAPI cudaEventCreate(cudaEvent_t *event) {
  if (event == NULL) return rt_ret(cudaErrorInvalidValue);
  RT_BEGIN();
  return rt_drv(drv.cuEventCreate[0](event, CU_EVENT_DEFAULT));
}

RT_API cudaError_t CUDARTAPI cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags) {
  if (event == NULL) return rt_ret(cudaErrorInvalidValue);
  RT_BEGIN();
  /* cudaEvent* flag bits equal CU_EVENT_* */
  return rt_drv(drv.cuEventCreate[0](event, flags));
}

RT_API cudaError_t CUDARTAPI cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  RT_BEGIN();
  return rt_drv(drv.cuEventRecord[0](event, stream));
}

RT_API cudaError_t CUDARTAPI cudaEventRecord_ptsz(cudaEvent_t event, cudaStream_t stream) {
  RT_BEGIN();
  return rt_drv(drv.cuEventRecord[1](event, stream));
}

RT_API cudaError_t CUDARTAPI cudaEventSynchronize(cudaEvent_t event) {
  RT_BEGIN();
  return rt_drv(drv.cuEventSynchronize[0](event));
}

RT_API cudaError_t CUDARTAPI cudaEventQuery(cudaEvent_t event) {
  RT_BEGIN();
  return rt_drv(drv.cuEventQuery[0](event));
}

RT_API cudaError_t CUDARTAPI cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
  RT_BEGIN();
  return rt_drv(drv.cuEventElapsedTime[0](ms, start, end));
}

RT_API cudaError_t CUDARTAPI cudaEventDestroy(cudaEvent_t event) {
  RT_BEGIN();
  return rt_drv(drv.cuEventDestroy[0](event));
}
