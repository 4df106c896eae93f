/* hook_dl.c - owning the lookups: dlsym, cuGetProcAddress, cuGetProcAddress_v2.
 *
 * Every cudart, static or shared, reaches the driver by dlopen("libcuda.so.1"),
 * dlsym(h, "cuGetProcAddress_v2"), and then one cuGetProcAddress call per
 * entry point (twice: default and per-thread stream).  Owning those three
 * functions is what lets one shim see a default nvcc build, PyTorch and a
 * ctypes program alike.  The rule everywhere: call the real lookup first,
 * then swap the answer for our wrapper of that exact symbol; anything we do
 * not wrap passes through untouched. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <string.h>

#include "pl_internal.h"
#include "hooks.h"

#ifndef PL_UNIT_TEST
/* dlsym(RTLD_NEXT, name) on behalf of `caller`.  glibc resolves RTLD_NEXT
 * relative to the object containing the return address; forwarded from
 * here, that would be libpagelock.so and a preloaded library after us would
 * get the wrong answer.  So walk the link map from the caller's object on
 * and return the first definition that lives in a later object. */
static void *pl_dlsym_next(const void *caller, const char *name) {
  Dl_info info;
  struct link_map *self = NULL;
  if (dladdr1(caller, &info, (void **)&self, RTLD_DL_LINKMAP) == 0 || self == NULL)
    return pl_real_dlsym(RTLD_NEXT, name); /* caller unknown: best effort */
  for (struct link_map *l = self->l_next; l != NULL; l = l->l_next) {
    /* A link_map is not a usable handle for every object (the vDSO's lookup
     * scope is empty and crashes dlsym); ask the loader for a real handle
     * of an object already loaded.  The lookup covers l and its
     * dependencies, so keep only a definition that l itself owns. */
    if (l->l_name == NULL || l->l_name[0] == '\0') continue;
    void *h = dlopen(l->l_name, RTLD_LAZY | RTLD_NOLOAD);
    if (h == NULL) continue;
    void *s = pl_real_dlsym(h, name);
    dlclose(h);
    if (s == NULL) continue;
    struct link_map *owner = NULL;
    Dl_info si;
    if (dladdr1(s, &si, (void **)&owner, RTLD_DL_LINKMAP) != 0 && owner == l) return s;
  }
  /* Leave dlerror() saying "not found", as the real RTLD_NEXT would. */
  (void)pl_real_dlsym(RTLD_NEXT, "\001pagelock-no-such-symbol");
  return NULL;
}
#endif

static CUresult pl_getproc_v1(const char *, void **, int, cuuint64_t);
static CUresult pl_getproc_v2(const char *, void **, int, cuuint64_t,
                              CUdriverProcAddressQueryResult *);

/* Swap a real driver pointer for our wrapper of the same exact symbol.
 * Returns fn unchanged when we do not wrap it. */
static void *pl_substitute(void *fn) {
  const pl_drv *d = pl_drv_get();
  if (d != NULL) {
    if (fn == (void *)d->GetProcAddress_v2) return (void *)pl_getproc_v2;
    if (fn == (void *)d->GetProcAddress) return (void *)pl_getproc_v1;
  }
  int api = pl_hook_find_real(fn);
  return api >= 0 ? pl_hook_wrapper(api) : fn;
}

#ifndef PL_UNIT_TEST
/* Left out of the unit-test library (pagelock_core): in a test executable it
 * would also catch the sanitizer runtimes' own dlsym(RTLD_NEXT) calls made
 * while they start, before anything in the shim may run.  The preload
 * tests cover it in libpagelock.so. */
PL_EXPORT void *dlsym(void *handle, const char *name) {
  void *r = handle == RTLD_NEXT ? pl_dlsym_next(__builtin_return_address(0), name)
                                : pl_real_dlsym(handle, name);
  /* Only driver names can need a swap; everything else returns as is, so
   * the override costs one comparison for the rest of the world. */
  if (r == NULL || name[0] != 'c' || name[1] != 'u' || pl_shim_inside()) return r;
  pl_shim_enter();
  pl_driver_note_handle(handle);
  void *w = r;
  if (strcmp(name, "cuGetProcAddress_v2") == 0)
    w = (void *)pl_getproc_v2;
  else if (strcmp(name, "cuGetProcAddress") == 0)
    w = (void *)pl_getproc_v1;
  else if (strcmp(name, "cuptiSubscribe") == 0)
    w = pl_active() ? pl_cupti_subscribe_wrapper(r) : r;
  else if (strcmp(name, "cuptiActivityRegisterCallbacks") == 0)
    w = pl_active() ? pl_cupti_register_wrapper(r) : r;
  else {
    int api = pl_hook_find_name(name);
    if (api >= 0 && pl_active()) w = pl_hook_wrapper(api);
  }
  pl_shim_leave();
  return w;
}
#endif

/* Shared tail of both cuGetProcAddress versions: swap the answer. */
static void pl_getproc_fix(const char *symbol, void **pfn) {
  if (pfn == NULL || *pfn == NULL || symbol == NULL || pl_shim_inside() || !pl_active()) return;
  pl_shim_enter();
  *pfn = pl_substitute(*pfn);
  pl_shim_leave();
}

static CUresult pl_getproc_v2(const char *symbol, void **pfn, int ver, cuuint64_t flags,
                              CUdriverProcAddressQueryResult *status) {
  const pl_drv *d = pl_drv_get();
  if (d == NULL || d->GetProcAddress_v2 == NULL) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult r = d->GetProcAddress_v2(symbol, pfn, ver, flags, status);
  if (r == CUDA_SUCCESS) pl_getproc_fix(symbol, pfn);
  return r;
}

static CUresult pl_getproc_v1(const char *symbol, void **pfn, int ver, cuuint64_t flags) {
  const pl_drv *d = pl_drv_get();
  if (d == NULL || d->GetProcAddress == NULL) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult r = d->GetProcAddress(symbol, pfn, ver, flags);
  if (r == CUDA_SUCCESS) pl_getproc_fix(symbol, pfn);
  return r;
}

/* Programs linked with -lcuda call these through the PLT. */
PL_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int ver, cuuint64_t flags,
                                       CUdriverProcAddressQueryResult *status) {
  return pl_getproc_v2(symbol, pfn, ver, flags, status);
}

PL_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int ver, cuuint64_t flags) {
  return pl_getproc_v1(symbol, pfn, ver, flags);
}
