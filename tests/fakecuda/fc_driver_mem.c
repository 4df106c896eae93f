/*
 * fc_driver_mem.c: memory management and pointer-attribute entry points.
 *
 * Freeing or unregistering memory first waits for all queued work (the
 * real cuMemFree/cuMemFreeHost synchronise), so a queued copy never reads
 * memory that its owner has legitimately released.  Being synchronising,
 * they are also refused while a stream capture forbids that (PyTorch defers
 * its cudaFreeHost calls during capture for this reason).
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fc_internal.h"

FC_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) {
  FC_ENTER(cuMemAlloc_v2);
  fc_ctx *c;
  if (dptr == NULL) FC_RETURN(CUDA_ERROR_INVALID_VALUE);
  CUresult r = fc_ctx_require(&c);
  if (r != CUDA_SUCCESS) FC_RETURN(r);
  uintptr_t p;
  r = fc_dev_alloc(c->device, c, bytesize, FC_R_DEVICE, &p);
  if (r == CUDA_SUCCESS) *dptr = (CUdeviceptr)p;
  FC_RETURN(r);
}

FC_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags) {
  FC_ENTER(cuMemAllocManaged);
  fc_ctx *c;
  if (dptr == NULL || (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST))
    FC_RETURN(CUDA_ERROR_INVALID_VALUE);
  CUresult r = fc_ctx_require(&c);
  if (r != CUDA_SUCCESS) FC_RETURN(r);
  uintptr_t p;
  r = fc_dev_alloc(c->device, c, bytesize, FC_R_MANAGED, &p);
  if (r == CUDA_SUCCESS) *dptr = (CUdeviceptr)p;
  FC_RETURN(r);
}

FC_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
  FC_ENTER(cuMemFree_v2);
  fc_ctx *c;
  CUresult r = fc_ctx_require(&c);
  if (r != CUDA_SUCCESS) FC_RETURN(r);
  if (dptr == 0) FC_RETURN(CUDA_ERROR_INVALID_VALUE);
  r = fc_capture_guard();
  if (r != CUDA_SUCCESS) FC_RETURN(r);
  fc_sync_all();
  FC_RETURN(fc_dev_free((uintptr_t)dptr));
}

FC_EXPORT CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total) {
  FC_ENTER(cuMemGetInfo_v2);
  fc_ctx *c;
  if (free_bytes == NULL || total == NULL) FC_RETURN(CUDA_ERROR_INVALID_VALUE);
  CUresult r = fc_ctx_require(&c);
  if (r != CUDA_SUCCESS) FC_RETURN(r);
  /* Approximation: allocations of every device count against each. */
  unsigned long long used = atomic_load(&fc_stats.device_bytes_live);
  *total = fc_device_mem_bytes;
  *free_bytes = used < fc_device_mem_bytes ? fc_device_mem_bytes - (size_t)used : 0;
  FC_RETURN(CUDA_SUCCESS);
}

FC_EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr) {
  FC_ENTER(cuMemGetAddressRange_v2);
  fc_range r;
  if (!fc_range_find((uintptr_t)dptr, &r) || (r.kind != FC_R_DEVICE && r.kind != FC_R_MANAGED))
    FC_RETURN(CUDA_ERROR_NOT_FOUND);
  if (pbase) *pbase = (CUdeviceptr)r.start;
  if (psize) *psize = r.size;
  FC_RETURN(CUDA_SUCCESS);
}

static CUresult fc_host_alloc_api(void **pp, size_t size, unsigned flags) {
  const unsigned known =
      CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED;
  if (pp == NULL || (flags & ~known)) return CUDA_ERROR_INVALID_VALUE;
  fc_ctx *c;
  CUresult r = fc_ctx_require(&c);
  return r != CUDA_SUCCESS ? r : fc_host_alloc(c, size, flags, pp);
}

FC_EXPORT CUresult cuMemAllocHost_v2(void **pp, size_t bytesize) {
  FC_ENTER(cuMemAllocHost_v2);
  FC_RETURN(fc_host_alloc_api(pp, bytesize, 0));
}

FC_EXPORT CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags) {
  FC_ENTER(cuMemHostAlloc);
  FC_RETURN(fc_host_alloc_api(pp, bytesize, Flags));
}

FC_EXPORT CUresult cuMemFreeHost(void *p) {
  FC_ENTER(cuMemFreeHost);
  fc_ctx *c;
  CUresult r = fc_ctx_require(&c);
  if (r == CUDA_SUCCESS) r = fc_capture_guard();
  if (r != CUDA_SUCCESS) FC_RETURN(r);
  fc_sync_all();
  FC_RETURN(fc_host_free(p));
}

FC_EXPORT CUresult cuMemHostGetFlags(unsigned int *pFlags, void *p) {
  FC_ENTER(cuMemHostGetFlags);
  fc_range r;
  if (pFlags == NULL || !fc_range_find((uintptr_t)p, &r) ||
      (r.kind != FC_R_HOSTALLOC && r.kind != FC_R_REGISTERED))
    FC_RETURN(CUDA_ERROR_INVALID_VALUE);
  *pFlags = r.flags;
  FC_RETURN(CUDA_SUCCESS);
}

/* Pages of [p, p+size) not resident now. */
static unsigned long long fc_nonresident(const void *p, size_t size) {
  long pg = sysconf(_SC_PAGESIZE);
  uintptr_t lo = (uintptr_t)p & ~(uintptr_t)(pg - 1);
  size_t n = ((uintptr_t)p + size - lo + (size_t)pg - 1) / (size_t)pg;
  unsigned char *vec = n ? malloc(n) : NULL;
  unsigned long long out = 0;
  if (vec != NULL && mincore((void *)lo, n * (size_t)pg, vec) == 0)
    for (size_t i = 0; i < n; i++) out += !(vec[i] & 1);
  free(vec);
  return out;
}

static CUresult fc_register_api(void *p, size_t size, unsigned flags) {
  FC_STAT_ADD(host_register_calls, 1);
  if (p != NULL && size > 0) FC_STAT_ADD(host_register_nonresident_pages, fc_nonresident(p, size));
  fc_ctx *c;
  CUresult r = fc_ctx_require(&c);
  return r != CUDA_SUCCESS ? r : fc_host_register(c, p, size, flags);
}

FC_EXPORT CUresult cuMemHostRegister(void *p, size_t bytesize, unsigned int Flags) {
  FC_ENTER(cuMemHostRegister);
  FC_RETURN(fc_register_api(p, bytesize, Flags));
}

FC_EXPORT CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags) {
  FC_ENTER(cuMemHostRegister_v2);
  FC_RETURN(fc_register_api(p, bytesize, Flags));
}

FC_EXPORT CUresult cuMemHostUnregister(void *p) {
  FC_ENTER(cuMemHostUnregister);
  FC_STAT_ADD(host_unregister_calls, 1);
  fc_ctx *c;
  CUresult r = fc_ctx_require(&c);
  if (r != CUDA_SUCCESS) FC_RETURN(r);
  if (!fc_range_is_pinned_host((uintptr_t)p, 1)) FC_RETURN(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
  r = fc_capture_guard();
  if (r != CUDA_SUCCESS) FC_RETURN(r);
  fc_sync_all();
  FC_RETURN(fc_host_unregister(p));
}

FC_EXPORT CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int Flags) {
  FC_ENTER(cuMemHostGetDevicePointer_v2);
  fc_ctx *c;
  if (pdptr == NULL || Flags != 0) FC_RETURN(CUDA_ERROR_INVALID_VALUE);
  CUresult r = fc_ctx_require(&c);
  if (r != CUDA_SUCCESS) FC_RETURN(r);
  if (!fc_range_is_pinned_host((uintptr_t)p, 1)) FC_RETURN(CUDA_ERROR_INVALID_VALUE);
  /* Unified addressing: the device sees pinned memory at the host address. */
  *pdptr = (CUdeviceptr)(uintptr_t)p;
  FC_RETURN(CUDA_SUCCESS);
}

/* ------------------------------------------------------------------ */
/* pointer attributes                                                 */

#define FC_PUT(type, value) (*(type *)data = (type)(value))

/*
 * One attribute.  r == NULL: the pointer is not known to CUDA (pageable
 * host memory or garbage).  strict (cuPointerGetAttribute) turns "no
 * value" into CUDA_ERROR_INVALID_VALUE; cuPointerGetAttributes writes the
 * default instead and succeeds.
 */
static CUresult fc_attr(CUpointer_attribute a, const fc_range *r, uintptr_t ptr, void *data,
                        int strict) {
  int dev = r && (r->kind == FC_R_DEVICE || r->kind == FC_R_MANAGED);
  int host = r && !dev;
  if (data == NULL) return CUDA_ERROR_INVALID_VALUE;
  switch (a) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
      if (!r && strict) return CUDA_ERROR_INVALID_VALUE;
      FC_PUT(CUcontext, r ? (CUcontext)r->ctx : NULL);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      if (!r && strict) return CUDA_ERROR_INVALID_VALUE;
      /* Managed memory reads as device memory; IS_MANAGED tells them apart. */
      FC_PUT(unsigned int, !r ? 0 : dev ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
      if (!r && strict) return CUDA_ERROR_INVALID_VALUE;
      FC_PUT(CUdeviceptr, r ? ptr : 0);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
      if ((!r || (dev && r->kind != FC_R_MANAGED)) && strict) return CUDA_ERROR_INVALID_VALUE;
      FC_PUT(void *, (host || (r && r->kind == FC_R_MANAGED)) ? (void *)ptr : NULL);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_P2P_TOKENS: return CUDA_ERROR_NOT_SUPPORTED;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE:
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
      if (!r && strict) return CUDA_ERROR_INVALID_VALUE;
      FC_PUT(unsigned int, 0);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
      if (!r && strict) return CUDA_ERROR_INVALID_VALUE;
      FC_PUT(unsigned int, r ? CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE : 0);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
      if (!r && strict) return CUDA_ERROR_INVALID_VALUE;
      FC_PUT(unsigned long long, r ? r->id : 0);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
      if (!r && strict) return CUDA_ERROR_INVALID_VALUE;
      FC_PUT(unsigned int, r && r->kind == FC_R_MANAGED);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
      if (!r && strict) return CUDA_ERROR_INVALID_VALUE;
      FC_PUT(int, r ? r->device : CU_DEVICE_INVALID);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
      if (!r && strict) return CUDA_ERROR_INVALID_VALUE;
      FC_PUT(CUdeviceptr, r ? r->start : 0);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
      if (!r && strict) return CUDA_ERROR_INVALID_VALUE;
      FC_PUT(size_t, r ? r->size : 0);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPED:
      if (!r && strict) return CUDA_ERROR_INVALID_VALUE;
      FC_PUT(unsigned int, r != NULL);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
      if (!r && strict) return CUDA_ERROR_INVALID_VALUE;
      FC_PUT(CUmemoryPool, NULL);
      return CUDA_SUCCESS;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
}

FC_EXPORT CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute,
                                         CUdeviceptr ptr) {
  FC_ENTER(cuPointerGetAttribute);
  fc_range r;
  int known = fc_range_find((uintptr_t)ptr, &r);
  FC_RETURN(fc_attr(attribute, known ? &r : NULL, (uintptr_t)ptr, data, 1));
}

FC_EXPORT CUresult cuPointerGetAttributes(unsigned int numAttributes,
                                          CUpointer_attribute *attributes, void **data,
                                          CUdeviceptr ptr) {
  FC_ENTER(cuPointerGetAttributes);
  if (numAttributes == 0 || attributes == NULL || data == NULL) FC_RETURN(CUDA_ERROR_INVALID_VALUE);
  fc_range r;
  int known = fc_range_find((uintptr_t)ptr, &r);
  for (unsigned i = 0; i < numAttributes; i++) {
    CUresult e = fc_attr(attributes[i], known ? &r : NULL, (uintptr_t)ptr, data[i], 0);
    if (e != CUDA_SUCCESS) FC_RETURN(e);
  }
  FC_RETURN(CUDA_SUCCESS);
}
