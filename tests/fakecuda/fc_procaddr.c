/*
 * fc_procaddr.c: cuGetProcAddress and cuGetProcAddress_v2.
 *
 * Like the real driver, the lookup key is the undecorated base name plus
 * the caller's ABI version: the newest variant introduced at or before that
 * version wins ("cuMemcpyHtoD" at 3020 is cuMemcpyHtoD_v2, at 2000 the
 * legacy 32-bit cuMemcpyHtoD), and CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
 * selects the _ptds/_ptsz twin when there is one.  The table is the same
 * fc_procs.def list that defines the exports, so it covers every one.
 *
 * The pointers handed out are this library's own definitions (the library
 * is linked with -Bsymbolic-functions), never whatever an LD_PRELOADed
 * object might interpose under the same name.
 */
#include <string.h>

#include "fc_internal.h"

struct fc_proc {
  const char *base;
  int version;
  void *fn;
  void *twin;
};

#define FC_FN(f) ((void *)(uintptr_t) & (f))
static const struct fc_proc fc_procs[] = {
#define FC_SYM(base, ver, sym) {#base, ver, FC_FN(sym), NULL},
#define FC_SYM_PT(base, ver, sym, twin) {#base, ver, FC_FN(sym), FC_FN(twin)},
#define FC_LOOKUP(base, ver, sym) {#base, ver, FC_FN(sym), NULL},
#include "fc_procs.def"
#undef FC_SYM
#undef FC_SYM_PT
#undef FC_LOOKUP
};

static CUresult fc_get_proc(const char *symbol, void **pfn, int version, cuuint64_t flags,
                            CUdriverProcAddressQueryResult *status) {
  const cuuint64_t known =
      CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  if (status) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  if (symbol == NULL || pfn == NULL || (flags & ~known) || version <= 0)
    return CUDA_ERROR_INVALID_VALUE;
  *pfn = NULL;
  /* Documented: asking for a newer CUDA than the driver implements fails. */
  if (version > fc_driver_version) return CUDA_ERROR_INVALID_VALUE;
  const struct fc_proc *best = NULL;
  int named = 0;
  for (size_t i = 0; i < sizeof fc_procs / sizeof fc_procs[0]; i++) {
    const struct fc_proc *p = &fc_procs[i];
    if (strcmp(p->base, symbol) != 0) continue;
    named = 1;
    if (p->version <= version && (best == NULL || p->version > best->version)) best = p;
  }
  if (best == NULL) {
    if (status && named) *status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
    return CUDA_ERROR_NOT_FOUND;
  }
  int per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  *pfn = (per_thread && best->twin) ? best->twin : best->fn;
  if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
  return CUDA_SUCCESS;
}

FC_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                    cuuint64_t flags) {
  FC_ENTER(cuGetProcAddress);
  FC_RETURN(fc_get_proc(symbol, pfn, cudaVersion, flags, NULL));
}

FC_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                       cuuint64_t flags,
                                       CUdriverProcAddressQueryResult *symbolStatus) {
  FC_ENTER(cuGetProcAddress_v2);
  FC_RETURN(fc_get_proc(symbol, pfn, cudaVersion, flags, symbolStatus));
}
