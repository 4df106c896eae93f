/* driver.c - the real CUDA driver, as the shim itself uses it.
 *
 * The shim never links libcuda: one build must serve programs built against
 * any cudart, and a program that never touches CUDA must not get the driver
 * loaded into it.  So the driver is looked up only once the program has
 * loaded it (RTLD_NOLOAD), and only through the real dlsym, never through
 * the shim's own wrappers. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>

#include "pl_internal.h"

static pl_driver pl_drv;
static _Atomic(const pl_driver *) pl_drv_ready;
static pthread_mutex_t pl_drv_lock = PTHREAD_MUTEX_INITIALIZER;
static void *_Atomic pl_drv_handle;

/* The program's libcuda handle, or NULL when it has not loaded one. */
static void *pl_driver_handle(void) {
  void *h = atomic_load(&pl_drv_handle);
  if (h) return h;
  h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (h) atomic_store(&pl_drv_handle, h);
  return h;
}

void pl_driver_note_handle(void *handle) {
  /* The pseudo-handles are not libcuda; the real one is found by soname. */
  if (handle == RTLD_DEFAULT || handle == RTLD_NEXT) return;
  void *expected = NULL;
  if (pl_real_dlsym(handle, "cuGetProcAddress_v2") != NULL)
    atomic_compare_exchange_strong(&pl_drv_handle, &expected, handle);
}

void *pl_driver_sym(const char *name) {
  void *h = pl_driver_handle();
  return h ? pl_real_dlsym(h, name) : NULL;
}

const pl_driver *pl_driver_get(void) {
  const pl_driver *d = atomic_load_explicit(&pl_drv_ready, memory_order_acquire);
  if (PL_LIKELY(d != NULL)) return d;
  void *h = pl_driver_handle();
  if (h == NULL) return NULL;
  pthread_mutex_lock(&pl_drv_lock);
  if (atomic_load(&pl_drv_ready) == NULL) {
    pl_drv.cuPointerGetAttributes = pl_real_dlsym(h, "cuPointerGetAttributes");
    pl_drv.cuCtxGetDevice = pl_real_dlsym(h, "cuCtxGetDevice");
    pl_drv.cuGetProcAddress = pl_real_dlsym(h, "cuGetProcAddress");
    pl_drv.cuGetProcAddress_v2 = pl_real_dlsym(h, "cuGetProcAddress_v2");
    /* tests/fakecuda exports its control API; say so in the trace, so no
     * reader mistakes simulated timings for measured ones. */
    pl_drv.simulated = pl_real_dlsym(h, "fakecuda_get_stats") != NULL;
    if (pl_drv.simulated) pl_trace_set_flag(PAGELOCK_FILE_SIMULATED);
    atomic_store_explicit(&pl_drv_ready, &pl_drv, memory_order_release);
  }
  pthread_mutex_unlock(&pl_drv_lock);
  return &pl_drv;
}
