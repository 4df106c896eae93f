/* driver.c - the real CUDA driver, as the shim itself uses it: the one
 * place that looks up libcuda (and the real dlsym), for every module.
 *
 * The shim never links libcuda: one build must serve programs built against
 * any cudart, and a program that never touches CUDA must not get the driver
 * loaded into it.  So the driver is looked up only once the program has
 * loaded it (RTLD_NOLOAD), and only through the real dlsym, never through
 * the shim's own wrappers. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>

#include "driver.h"
#include "log.h"
#include "state.h"

/* ---- the real dlsym ------------------------------------------------------ */

typedef void *(*pl_dlsym_fn)(void *, const char *);
static _Atomic(pl_dlsym_fn) pl_dlsym_real;

void *pl_real_dlsym(void *handle, const char *name) {
  pl_dlsym_fn f = atomic_load_explicit(&pl_dlsym_real, memory_order_acquire);
  if (PL_UNLIKELY(f == NULL)) {
    /* dlvsym is not interposed, so it reaches libc's dlsym without
     * recursing into ours.  glibc 2.34 moved dlsym into libc with a new
     * version node; older systems only have the original one. */
    f = (pl_dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (f == NULL) f = (pl_dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    if (f == NULL) f = (pl_dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.17"); /* aarch64 */
    if (f == NULL) return NULL;
    atomic_store_explicit(&pl_dlsym_real, f, memory_order_release);
  }
  return f(handle, name);
}

/* ---- the table ----------------------------------------------------------- */

pl_drv pl_drv_table;
static _Atomic(const pl_drv *) pl_drv_ready;
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

/* Resolve one exact name; *missing is set when a required one is absent. */
static void *pl_drv_sym(void *h, const char *name, bool required, bool *missing) {
  void *f = pl_real_dlsym(h, name);
  if (f == NULL && required) {
    if (!*missing)
      pl_log(PL_LOG_WARN, PL_LK_STAGE_ERROR,
             "driver lacks %s: staging disabled, copies pass through", name);
    *missing = true;
  }
  return f;
}

const pl_drv *pl_drv_get(void) {
  const pl_drv *d = atomic_load_explicit(&pl_drv_ready, memory_order_acquire);
  if (PL_LIKELY(d != NULL)) return d;
  void *h = pl_driver_handle();
  if (h == NULL) return NULL;
  pthread_mutex_lock(&pl_drv_lock);
  if (atomic_load(&pl_drv_ready) == NULL) {
    pl_drv *t = &pl_drv_table;
    bool miss = false;
#define PL_SYM(field, name, req) *(void **)&t->field = pl_drv_sym(h, name, req, &miss)
    PL_SYM(PointerGetAttributes, "cuPointerGetAttributes", false);
    PL_SYM(CtxGetDevice, "cuCtxGetDevice", false);
    PL_SYM(GetProcAddress, "cuGetProcAddress", false);
    PL_SYM(GetProcAddress_v2, "cuGetProcAddress_v2", false);
    PL_SYM(DeviceGetCount, "cuDeviceGetCount", false);
    PL_SYM(DeviceGet, "cuDeviceGet", false);
    PL_SYM(DeviceGetAttribute, "cuDeviceGetAttribute", false);
    PL_SYM(DeviceGetName, "cuDeviceGetName", false);
    PL_SYM(CtxGetCurrent, "cuCtxGetCurrent", true);
    PL_SYM(CtxGetId, "cuCtxGetId", false);
    PL_SYM(CtxPushCurrent, "cuCtxPushCurrent_v2", true);
    PL_SYM(CtxPopCurrent, "cuCtxPopCurrent_v2", true);
    PL_SYM(ThreadExchangeStreamCaptureMode, "cuThreadExchangeStreamCaptureMode", false);
    PL_SYM(StreamGetCtx, "cuStreamGetCtx", false);
    PL_SYM(StreamGetId[0], "cuStreamGetId", false);
    PL_SYM(StreamGetId[1], "cuStreamGetId_ptsz", false);
    PL_SYM(MemGetAddressRange, "cuMemGetAddressRange_v2", true);
    PL_SYM(MemHostRegister, "cuMemHostRegister_v2", true);
    PL_SYM(MemHostUnregister, "cuMemHostUnregister", true);
    PL_SYM(EventCreate, "cuEventCreate", true);
    PL_SYM(EventDestroy, "cuEventDestroy_v2", true);
    PL_SYM(EventQuery, "cuEventQuery", true);
    PL_SYM(EventSynchronize, "cuEventSynchronize", true);
    PL_SYM(StreamIsCapturing[0], "cuStreamIsCapturing", true);
    PL_SYM(StreamIsCapturing[1], "cuStreamIsCapturing_ptsz", true);
    PL_SYM(MemcpyHtoDAsync[0], "cuMemcpyHtoDAsync_v2", true);
    PL_SYM(MemcpyHtoDAsync[1], "cuMemcpyHtoDAsync_v2_ptsz", true);
    PL_SYM(MemcpyDtoHAsync[0], "cuMemcpyDtoHAsync_v2", true);
    PL_SYM(MemcpyDtoHAsync[1], "cuMemcpyDtoHAsync_v2_ptsz", true);
    PL_SYM(EventRecord[0], "cuEventRecord", true);
    PL_SYM(EventRecord[1], "cuEventRecord_ptsz", true);
    PL_SYM(LaunchHostFunc[0], "cuLaunchHostFunc", true);
    PL_SYM(LaunchHostFunc[1], "cuLaunchHostFunc_ptsz", true);
    PL_SYM(StreamSynchronize[0], "cuStreamSynchronize", true);
    PL_SYM(StreamSynchronize[1], "cuStreamSynchronize_ptsz", true);
    PL_SYM(DevicePrimaryCtxGetState, "cuDevicePrimaryCtxGetState", false);
    PL_SYM(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", false);
    PL_SYM(DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", false);
    PL_SYM(CtxFromGreenCtx, "cuCtxFromGreenCtx", false);
#undef PL_SYM
    t->engines = !miss;
    /* tests/fakecuda exports its control API; say so in the trace, so no
     * reader mistakes simulated timings for measured ones. */
    t->simulated = pl_real_dlsym(h, "fakecuda_get_stats") != NULL;
    if (t->simulated) pl_trace_set_flag(PAGELOCK_FILE_SIMULATED);
    atomic_store_explicit(&pl_drv_ready, t, memory_order_release);
  }
  pthread_mutex_unlock(&pl_drv_lock);
  return &pl_drv_table;
}

/* ---- the real function behind every wrapped symbol ----------------------- */

const char *const pl_hook_names[PL_HOOK_COUNT] = {
#define PL_NAME(n) #n,
    PAGELOCK_API_LIST(PL_NAME) PL_HOSTALLOC_LIST(PL_NAME)
#undef PL_NAME
};

static atomic_bool pl_real_all;

void *pl_hook_resolve(int id) {
  void *f = atomic_load_explicit(&pl_drv_table.real[id], memory_order_acquire);
  if (f != NULL) return f;
  f = pl_driver_sym(pl_hook_names[id]);
  if (f) atomic_store_explicit(&pl_drv_table.real[id], f, memory_order_release);
  return f;
}

/* Resolve every real pointer once, so answers of cuGetProcAddress can be
 * mapped back to their exact symbol. */
static void pl_hook_resolve_all(void) {
  if (atomic_load(&pl_real_all)) return;
  if (pl_drv_get() == NULL) return;
  for (int i = 0; i < PL_HOOK_COUNT; i++) (void)pl_hook_real(i);
  atomic_store(&pl_real_all, true);
}

int pl_hook_find_real(void *fn) {
  if (fn == NULL) return -1;
  pl_hook_resolve_all();
  for (int i = 0; i < PL_HOOK_COUNT; i++)
    if (atomic_load_explicit(&pl_drv_table.real[i], memory_order_relaxed) == fn) return i;
  return -1;
}

/* ---- the device a copy runs on ------------------------------------------ */

/* Moves after any stream or context is destroyed (hook_ctx.c).  Until
 * then a handle names the same stream or context, on the same device, so
 * an answer a thread got stays true. */
static atomic_uint pl_dev_gen = 1;

/* A thread's answers, by stream for copies on the program's own streams
 * and by context for the legacy and per-thread default streams.  Four
 * streams, each in any slot (one cache line, searched whole): a training
 * loop's copy stream, compute stream and a side stream or two never push
 * each other out, however the driver's allocator aligns its handles (under
 * ASan two streams fell in one slot of a table indexed by address bits,
 * and took turns asking the driver).  An answer is also asked again after
 * PL_DEV_USES copies: a teardown the hooks did not see (an entry point
 * reached some other way) misnames at most that many records, and the
 * check costs ~40 ns per 4096 copies. */
#define PL_DEV_SLOTS 4
#define PL_DEV_USES 4096
typedef struct pl_dev_memo {
  uintptr_t key; /* the stream, or the current context */
  uint32_t gen;
  uint16_t uses;
  int16_t dev;
} pl_dev_memo;
static PL_TLS pl_dev_memo pl_dev_by_stream[PL_DEV_SLOTS] __attribute__((aligned(64)));
static PL_TLS unsigned pl_dev_next; /* the slot a new stream takes, in turn */
static PL_TLS pl_dev_memo pl_dev_by_ctx;

void pl_copy_device_forget(void) {
  atomic_fetch_add_explicit(&pl_dev_gen, 1, memory_order_release);
}

unsigned pl_copy_device_gen(void) {
  return atomic_load_explicit(&pl_dev_gen, memory_order_acquire);
}

uintptr_t pl_copy_device_ctx(CUstream stream) {
  if (stream != NULL && stream != CU_STREAM_LEGACY && stream != CU_STREAM_PER_THREAD) return 0;
  const pl_drv *d = pl_drv_engines();
  CUcontext cur = NULL;
  if (d == NULL || d->CtxGetCurrent(&cur) != CUDA_SUCCESS) return 0;
  return (uintptr_t)cur;
}

/* The slot holding the stream's answer, or the one it is to take. */
static pl_dev_memo *pl_dev_slot(CUstream stream) {
  for (int i = 0; i < PL_DEV_SLOTS; i++)
    if (pl_dev_by_stream[i].key == (uintptr_t)stream) return &pl_dev_by_stream[i];
  return &pl_dev_by_stream[pl_dev_next++ % PL_DEV_SLOTS];
}

static bool pl_dev_hit(pl_dev_memo *m, uintptr_t key, unsigned gen) {
  if (m->key != key || m->gen != gen || m->uses == 0) return false;
  m->uses--;
  return true;
}

int pl_copy_device(CUstream stream) {
  /* The generation before any question: a teardown while the driver
   * answers leaves the answer stored under a generation already gone. */
  unsigned gen = atomic_load_explicit(&pl_dev_gen, memory_order_acquire);
  bool dflt = stream == NULL || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD;
  pl_dev_memo *m = dflt ? &pl_dev_by_ctx : pl_dev_slot(stream);
  /* A stream's context never changes: its answer needs no driver call. */
  if (!dflt && PL_LIKELY(pl_dev_hit(m, (uintptr_t)stream, gen))) return m->dev;
  const pl_drv *d = pl_drv_engines();
  if (d == NULL || d->CtxGetDevice == NULL) return -1;
  /* Both getters only read the thread's context stack or the stream's
   * owner: no allocation, no lock of the program's. */
  CUcontext cur = NULL, ctx = NULL;
  if (d->CtxGetCurrent(&cur) != CUDA_SUCCESS) cur = NULL;
  if (dflt) {
    if (cur != NULL && PL_LIKELY(pl_dev_hit(m, (uintptr_t)cur, gen))) return m->dev;
    ctx = cur;
  } else if (d->StreamGetCtx == NULL || d->StreamGetCtx(stream, &ctx) != CUDA_SUCCESS) {
    /* Not an answer about the stream: named, but not kept. */
    m = NULL;
    ctx = cur;
  }
  if (ctx == NULL) return -1;
  /* cuCtxGetDevice answers for the current context only: a stream of
   * another one is asked with that context pushed for the one call. */
  CUdevice dev = -1;
  CUresult r;
  if (ctx == cur) {
    r = d->CtxGetDevice(&dev);
  } else {
    if (d->CtxPushCurrent(ctx) != CUDA_SUCCESS) return -1;
    r = d->CtxGetDevice(&dev);
    CUcontext popped;
    (void)d->CtxPopCurrent(&popped);
  }
  if (r != CUDA_SUCCESS) return -1;
  /* A CUdevice is the ordinal cuDeviceGet was given (every driver so far
   * hands out 0..n-1), which is what CUPTI's records carry too. */
  if (m != NULL)
    *m = (pl_dev_memo){.key = dflt ? (uintptr_t)ctx : (uintptr_t)stream,
                       .gen = gen,
                       .uses = PL_DEV_USES,
                       .dev = (int16_t)dev};
  return (int)dev;
}
