/*
 * cupti_selftest.c: checks the fake libcupti.so.13 against what pagelock's
 * CUPTI recorder relies on.  Like the shim, it links neither CUPTI nor the
 * driver: it dlopens "libcupti.so.13" and "libcuda.so.1" (LD_LIBRARY_PATH
 * points at the fakes) and resolves every function with dlsym.
 *
 *   cupti_selftest              the callback and activity API end to end
 *   cupti_selftest <mode>       one FAKECUPTI_* / FAKECUDA_* knob, set by
 *                               ctest in the environment (see main)
 *
 * Timing checks use lower bounds (a sleep cannot end early) and make the
 * overlap window wide, so a loaded CI machine passes.
 */
#define _GNU_SOURCE
#ifndef __CUDA_API_VERSION_INTERNAL
#define __CUDA_API_VERSION_INTERNAL 1 /* declare the exact _v2/_ptsz names */
#endif
#include <cuda.h>
/* The parts of cupti.h, which itself clashes with the exact-name mode of
 * cuda.h (it redefines the legacy _v1 structures); the shim does the same. */
#include <cupti_activity.h>
#include <cupti_callbacks.h>
#include <cupti_driver_cbid.h>
#include <cupti_result.h>
#include <cupti_version.h>
#include <generated_cuda_meta.h>

#include <dlfcn.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static atomic_int g_pass, g_fail;

#define CHECK(cond)                                                   \
  do {                                                                \
    if (cond) {                                                       \
      g_pass++;                                                       \
    } else {                                                          \
      g_fail++;                                                       \
      fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); \
    }                                                                 \
  } while (0)
#define CU(call) CHECK((call) == CUDA_SUCCESS)
#define CP(call) CHECK((call) == CUPTI_SUCCESS)

/* ------------------------------------------------------------------ */
/* the libraries, resolved like the shim does                         */

#define CUPTI_FUNCTIONS(X)                  \
  X(cuptiGetVersion)                        \
  X(cuptiGetResultString)                   \
  X(cuptiSubscribe)                         \
  X(cuptiUnsubscribe)                       \
  X(cuptiEnableCallback)                    \
  X(cuptiEnableDomain)                      \
  X(cuptiActivityRegisterCallbacks)         \
  X(cuptiActivityRegisterTimestampCallback) \
  X(cuptiActivityEnable)                    \
  X(cuptiActivityDisable)                   \
  X(cuptiActivityFlushAll)                  \
  X(cuptiActivityFlushPeriod)               \
  X(cuptiActivityGetNextRecord)             \
  X(cuptiActivityGetNumDroppedRecords)      \
  X(cuptiActivityPushExternalCorrelationId) \
  X(cuptiActivityPopExternalCorrelationId)  \
  X(cuptiGetTimestamp)                      \
  X(cuptiFinalize)

#define DRIVER_FUNCTIONS(X)    \
  X(cuInit)                    \
  X(cuDevicePrimaryCtxRetain)  \
  X(cuCtxSetCurrent)           \
  X(cuCtxGetCurrent)           \
  X(cuCtxSynchronize)          \
  X(cuMemAlloc_v2)             \
  X(cuMemFree_v2)              \
  X(cuMemHostAlloc)            \
  X(cuMemFreeHost)             \
  X(cuStreamCreate)            \
  X(cuStreamDestroy_v2)        \
  X(cuStreamSynchronize)       \
  X(cuStreamWaitEvent)         \
  X(cuMemcpyHtoDAsync_v2)      \
  X(cuMemcpyHtoDAsync_v2_ptsz) \
  X(cuMemcpyDtoH_v2)           \
  X(cuMemsetD8Async)           \
  X(cuModuleLoadData)          \
  X(cuModuleGetFunction)       \
  X(cuLaunchKernel)            \
  X(cuLaunchHostFunc)          \
  X(cuEventCreate)             \
  X(cuEventRecord)             \
  X(cuEventSynchronize)        \
  X(cuEventDestroy_v2)

static struct {
#define X(f) __typeof__(f) *f;
  CUPTI_FUNCTIONS(X)
#undef X
} cp;
static struct {
#define X(f) __typeof__(f) *f;
  DRIVER_FUNCTIONS(X)
#undef X
  void (*set_bandwidth)(double, double);
} cu;

static void load(void) {
  void *h = dlopen("libcupti.so.13", RTLD_NOW | RTLD_LOCAL);
  CHECK(h != NULL);
  if (h == NULL) {
    fprintf(stderr, "%s\n", dlerror());
    exit(1);
  }
  /* The unversioned name CUPTI's own samples link against. */
  void *h2 = dlopen("libcupti.so", RTLD_NOW | RTLD_LOCAL);
  CHECK(h2 == h);
  int missing = 0;
#define X(f)                                        \
  *(void **)&cp.f = dlsym(h, #f);                   \
  if (cp.f == NULL) {                               \
    fprintf(stderr, "libcupti.so.13: no %s\n", #f); \
    missing++;                                      \
  }
  CUPTI_FUNCTIONS(X)
#undef X
  /* Exactly as the real library names them: symbol version libcupti.so.13. */
  CHECK(dlvsym(h, "cuptiActivityEnable", "libcupti.so.13") == (void *)cp.cuptiActivityEnable);
  /* CUPTI loads the driver itself when first needed; here the test wants
   * the handle now, NOLOAD-free, exactly as an application would. */
  void *d = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  CHECK(d != NULL);
  if (d == NULL) exit(1);
#define X(f)                                      \
  *(void **)&cu.f = dlsym(d, #f);                 \
  if (cu.f == NULL) {                             \
    fprintf(stderr, "libcuda.so.1: no %s\n", #f); \
    missing++;                                    \
  }
  DRIVER_FUNCTIONS(X)
#undef X
  *(void **)&cu.set_bandwidth = dlsym(d, "fakecuda_set_bandwidth");
  if (missing || cu.set_bandwidth == NULL) exit(1);
}

static uint64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t real_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ------------------------------------------------------------------ */
/* the client: buffers, records, callbacks                            */

/* A clock nowhere near CLOCK_REALTIME: records on it prove CUPTI used it. */
#define TS_OFFSET 500000000000000000ull
static atomic_ullong g_ts_calls;
static uint64_t CUPTIAPI ts_callback(void) {
  g_ts_calls++;
  return mono_ns() + TS_OFFSET;
}

enum { BUF_NORMAL, BUF_NONE };
static atomic_int g_buf_mode;
static atomic_size_t g_buf_max; /* maxNumRecords handed out */
static atomic_int g_requested, g_completed;
static atomic_int g_completed_main, g_completed_other; /* by delivering thread */
static atomic_size_t g_max_recs_per_buf;
static atomic_int g_walk_bad; /* a walk that did not end with MAX_LIMIT_REACHED */
static pthread_t g_main;

#define MAX_RECS 8192
struct rec {
  uint32_t kind;
  union {
    CUpti_Activity a;
    CUpti_ActivityMemcpy6 memcpy;
    CUpti_ActivityMemset4 memset;
    CUpti_ActivityKernel10 kernel;
    CUpti_ActivityAPI api;
    CUpti_ActivitySynchronization2 sync;
    CUpti_ActivityExternalCorrelation ext;
    CUpti_ActivityOverhead3 overhead;
  } u;
};
static pthread_mutex_t g_recs_mu = PTHREAD_MUTEX_INITIALIZER;
static struct rec g_recs[MAX_RECS];
static int g_nrecs;

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
  g_requested++;
  *buffer = NULL;
  *size = 0;
  *max_records = 0;
  if (g_buf_mode == BUF_NONE) return;
  const size_t sz = 256 << 10;
  *buffer = aligned_alloc(8, sz);
  *size = *buffer ? sz : 0;
  *max_records = g_buf_max;
}

static size_t rec_size(uint32_t kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_KIND_MEMCPY: return sizeof(CUpti_ActivityMemcpy6);
    case CUPTI_ACTIVITY_KIND_MEMSET: return sizeof(CUpti_ActivityMemset4);
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
    case CUPTI_ACTIVITY_KIND_KERNEL: return sizeof(CUpti_ActivityKernel10);
    case CUPTI_ACTIVITY_KIND_DRIVER: return sizeof(CUpti_ActivityAPI);
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: return sizeof(CUpti_ActivitySynchronization2);
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: return sizeof(CUpti_ActivityExternalCorrelation);
    case CUPTI_ACTIVITY_KIND_OVERHEAD: return sizeof(CUpti_ActivityOverhead3);
    default: return 0;
  }
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
                                      size_t valid) {
  (void)size;
  if (ctx != NULL || stream != 0) g_walk_bad++;
  CUpti_Activity *a = NULL;
  CUptiResult r;
  size_t n = 0;
  pthread_mutex_lock(&g_recs_mu);
  while ((r = cp.cuptiActivityGetNextRecord(buffer, valid, &a)) == CUPTI_SUCCESS) {
    n++;
    size_t sz = rec_size(a->kind);
    if (sz == 0 || g_nrecs == MAX_RECS) {
      g_walk_bad++;
      continue;
    }
    g_recs[g_nrecs].kind = a->kind;
    memcpy(&g_recs[g_nrecs].u, a, sz);
    g_nrecs++;
  }
  pthread_mutex_unlock(&g_recs_mu);
  if (r != CUPTI_ERROR_MAX_LIMIT_REACHED) g_walk_bad++;
  size_t m = g_max_recs_per_buf;
  while (n > m && !atomic_compare_exchange_weak(&g_max_recs_per_buf, &m, n))
    ;
  if (pthread_equal(pthread_self(), g_main))
    g_completed_main++;
  else
    g_completed_other++;
  g_completed++;
  free(buffer);
}

/* What the scenario works on (the nesting callback copies too). */
static CUpti_SubscriberHandle g_sub;
static CUcontext g_ctx;
static CUdeviceptr g_dev;
static unsigned char *g_pinned, *g_pageable;
static CUstream g_a, g_b;
static CUfunction g_spin, g_probe;
static const size_t MiB = 1u << 20;

/* Driver API calls the subscriber saw, on the main thread. */
#define MAX_CALLS 1024
struct call {
  uint32_t cbid;
  uint32_t corr;
  const char *name;
  const char *symbol;
  uint32_t ctx_uid;
  size_t bytes; /* ByteCount from functionParams (HtoDAsync) */
  int depth;    /* 2: made from inside another call's callback */
  int exited;
  CUresult ret;
  int data_ok; /* correlationData carried from entry to exit */
};
static struct call g_calls[MAX_CALLS];
static int g_ncalls;
static int g_cb_depth, g_cb_max_depth;
static atomic_int g_cb_other_thread; /* callbacks of the copier threads */
static int g_nest; /* call the driver from inside the next HtoDAsync entry callback */

/* The outermost call with this correlation id. */
static struct call *find_call(uint32_t corr) {
  for (int i = 0; i < g_ncalls; i++)
    if (g_calls[i].corr == corr) return &g_calls[i];
  return NULL;
}

/* The call an exit callback closes: nested calls share their id. */
static struct call *find_open(uint32_t corr, uint32_t cbid) {
  for (int i = g_ncalls - 1; i >= 0; i--)
    if (g_calls[i].corr == corr && g_calls[i].cbid == cbid && !g_calls[i].exited)
      return &g_calls[i];
  return NULL;
}

static int call_with_bytes(uint32_t corr, size_t bytes) {
  for (int i = 0; i < g_ncalls; i++)
    if (g_calls[i].corr == corr && g_calls[i].bytes == bytes) return 1;
  return 0;
}

static void CUPTIAPI on_callback(void *ud, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                 const void *data) {
  const CUpti_CallbackData *d = data;
  if (ud != (void *)&g_calls || domain != CUPTI_CB_DOMAIN_DRIVER_API) return;
  if (!pthread_equal(pthread_self(), g_main)) {
    g_cb_other_thread++;
    return;
  }
  if (++g_cb_depth > g_cb_max_depth) g_cb_max_depth = g_cb_depth;
  if (d->callbackSite == CUPTI_API_ENTER && g_ncalls < MAX_CALLS) {
    struct call *c = &g_calls[g_ncalls++];
    memset(c, 0, sizeof *c);
    c->cbid = cbid;
    c->corr = d->correlationId;
    c->name = d->functionName;
    c->symbol = d->symbolName;
    c->ctx_uid = d->contextUid;
    c->depth = g_cb_depth;
    if ((cbid == CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2 ||
         cbid == CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2_ptsz) &&
        d->functionParams)
      c->bytes = ((const cuMemcpyHtoDAsync_v2_params *)d->functionParams)->ByteCount;
    *d->correlationData = 0x5eed0000ull + d->correlationId;
    if (g_nest && cbid == CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2) {
      /* As CUPTI 13 does (measured), these are called back too, from
       * inside this callback, and share this call's id. */
      g_nest = 0;
      CUcontext cur;
      CU(cu.cuCtxGetCurrent(&cur));
      CU(cu.cuMemcpyHtoDAsync_v2(g_dev, g_pinned, 1234, g_a));
    }
  } else if (d->callbackSite == CUPTI_API_EXIT) {
    struct call *c = find_open(d->correlationId, cbid);
    if (c) {
      c->exited++;
      c->ret = *(const CUresult *)d->functionReturnValue;
      c->data_ok = *d->correlationData == 0x5eed0000ull + d->correlationId;
    }
  }
  g_cb_depth--;
}

/* ------------------------------------------------------------------ */
/* record queries                                                     */

static int count_kind(uint32_t kind) {
  int n = 0;
  pthread_mutex_lock(&g_recs_mu);
  for (int i = 0; i < g_nrecs; i++) n += g_recs[i].kind == kind;
  pthread_mutex_unlock(&g_recs_mu);
  return n;
}

/* Index of the first record of kind with this correlation id, -1 if none;
 * *count: how many there are. */
static int find_rec(uint32_t kind, uint32_t corr, int *count) {
  int first = -1, n = 0;
  pthread_mutex_lock(&g_recs_mu);
  for (int i = 0; i < g_nrecs; i++) {
    uint32_t c;
    switch (g_recs[i].kind) {
      case CUPTI_ACTIVITY_KIND_MEMCPY: c = g_recs[i].u.memcpy.correlationId; break;
      case CUPTI_ACTIVITY_KIND_MEMSET: c = g_recs[i].u.memset.correlationId; break;
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      case CUPTI_ACTIVITY_KIND_KERNEL: c = g_recs[i].u.kernel.correlationId; break;
      case CUPTI_ACTIVITY_KIND_DRIVER: c = g_recs[i].u.api.correlationId; break;
      case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: c = g_recs[i].u.sync.correlationId; break;
      case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: c = g_recs[i].u.ext.correlationId; break;
      default: continue;
    }
    if (g_recs[i].kind == kind && c == corr) {
      if (first < 0) first = i;
      n++;
    }
  }
  pthread_mutex_unlock(&g_recs_mu);
  if (count) *count = n;
  return first;
}

/* The record of a call made with its callback enabled; NULL unless exactly one. */
static const struct rec *one_rec(uint32_t kind, uint32_t corr) {
  int n;
  int i = find_rec(kind, corr, &n);
  return n == 1 ? &g_recs[i] : NULL;
}

static int kernel_named(const char *name, const struct rec **out) {
  int n = 0;
  pthread_mutex_lock(&g_recs_mu);
  for (int i = 0; i < g_nrecs; i++) {
    uint32_t k = g_recs[i].kind;
    if ((k == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || k == CUPTI_ACTIVITY_KIND_KERNEL) &&
        g_recs[i].u.kernel.name && strcmp(g_recs[i].u.kernel.name, name) == 0) {
      n++;
      if (out) *out = &g_recs[i];
    }
  }
  pthread_mutex_unlock(&g_recs_mu);
  return n;
}

static uint32_t last_corr(uint32_t cbid) {
  for (int i = g_ncalls - 1; i >= 0; i--)
    if (g_calls[i].cbid == cbid) return g_calls[i].corr;
  return 0;
}

static int calls_of(uint32_t cbid) {
  int n = 0;
  for (int i = 0; i < g_ncalls; i++) n += g_calls[i].cbid == cbid;
  return n;
}

/* ------------------------------------------------------------------ */
/* the scenario                                                       */

static void setup_cupti(void) {
  uint32_t v = 0;
  CP(cp.cuptiGetVersion(&v));
  CHECK(v == CUPTI_API_VERSION);
  const char *s = NULL;
  CP(cp.cuptiGetResultString(CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED, &s));
  CHECK(s && strcmp(s, "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED") == 0);
  CHECK(cp.cuptiGetResultString((CUptiResult)36, &s) == CUPTI_ERROR_INVALID_PARAMETER);

  /* Default clock: CLOCK_REALTIME, as CUPTI on Linux. */
  uint64_t t = 0, r0 = real_ns();
  CP(cp.cuptiGetTimestamp(&t));
  CHECK(t >= r0 && t - r0 < 5000000000ull);

  /* Subscribing loads and attaches to the driver: no cuInit yet. */
  CP(cp.cuptiSubscribe(&g_sub, on_callback, &g_calls));
  CUpti_SubscriberHandle other;
  CHECK(cp.cuptiSubscribe(&other, on_callback, NULL) ==
        CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED);

  static const CUpti_CallbackId cbids[] = {
      CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2,
      CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2_ptsz,
      CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2,
      CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async,
      CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
      CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize,
      CUPTI_DRIVER_TRACE_CBID_cuEventSynchronize,
      CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize,
      CUPTI_DRIVER_TRACE_CBID_cuCtxGetCurrent,
  };
  for (size_t i = 0; i < sizeof cbids / sizeof cbids[0]; i++)
    CP(cp.cuptiEnableCallback(1, g_sub, CUPTI_CB_DOMAIN_DRIVER_API, cbids[i]));
  CHECK(cp.cuptiEnableCallback(1, g_sub, CUPTI_CB_DOMAIN_DRIVER_API,
                               CUPTI_DRIVER_TRACE_CBID_SIZE) == CUPTI_ERROR_INVALID_PARAMETER);
  CHECK(cp.cuptiEnableCallback(1, (CUpti_SubscriberHandle)&other, CUPTI_CB_DOMAIN_DRIVER_API, 1) ==
        CUPTI_ERROR_INVALID_PARAMETER);
  /* Accepted, never calls back in the fake. */
  CP(cp.cuptiEnableDomain(1, g_sub, CUPTI_CB_DOMAIN_RESOURCE));

  /* In the order the shim uses: clock first, so every record uses it. */
  CP(cp.cuptiActivityRegisterTimestampCallback(ts_callback));
  CP(cp.cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed));
  static const CUpti_ActivityKind kinds[] = {
      CUPTI_ACTIVITY_KIND_MEMCPY,
      CUPTI_ACTIVITY_KIND_MEMCPY2,
      CUPTI_ACTIVITY_KIND_MEMSET,
      CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
      CUPTI_ACTIVITY_KIND_OVERHEAD,
      CUPTI_ACTIVITY_KIND_SYNCHRONIZATION,
      CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION,
      CUPTI_ACTIVITY_KIND_DRIVER,
  };
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) CP(cp.cuptiActivityEnable(kinds[i]));
  CHECK(cp.cuptiActivityEnable(CUPTI_ACTIVITY_KIND_PC_SAMPLING) ==
        CUPTI_ERROR_LEGACY_PROFILER_NOT_SUPPORTED);
  /* What CUPTI 13 answers (measured). */
  CHECK(cp.cuptiActivityEnable((CUpti_ActivityKind)9999) == CUPTI_ERROR_NOT_COMPATIBLE);
  CP(cp.cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME));
  CP(cp.cuptiActivityDisable(CUPTI_ACTIVITY_KIND_RUNTIME));
}

static void setup_cuda(void) {
  CUdevice dev = 0;
  CU(cu.cuInit(0));
  CU(cu.cuDevicePrimaryCtxRetain(&g_ctx, dev));
  CU(cu.cuCtxSetCurrent(g_ctx));
  CU(cu.cuMemAlloc_v2(&g_dev, 64 * MiB));
  CU(cu.cuMemHostAlloc((void **)&g_pinned, 32 * MiB, 0));
  g_pageable = malloc(32 * MiB);
  CHECK(g_pageable != NULL);
  memset(g_pinned, 1, 32 * MiB);
  memset(g_pageable, 2, 32 * MiB);
  CU(cu.cuStreamCreate(&g_a, CU_STREAM_NON_BLOCKING));
  CU(cu.cuStreamCreate(&g_b, CU_STREAM_NON_BLOCKING));
  CUmodule mod;
  static const char image[] = "fake cubin";
  CU(cu.cuModuleLoadData(&mod, image));
  CU(cu.cuModuleGetFunction(&g_spin, mod, "pagelock_spin"));
  CU(cu.cuModuleGetFunction(&g_probe, mod, "probe_kernel"));
}

static void spin(CUstream s, uint64_t ns) {
  void *args[] = {&ns};
  CU(cu.cuLaunchKernel(g_spin, 2, 1, 1, 64, 1, 1, 0, s, args, NULL));
}

static void check_gpu_times(const struct rec *r, uint64_t lo, uint64_t hi) {
  uint64_t s, e;
  switch (r->kind) {
    case CUPTI_ACTIVITY_KIND_MEMCPY:
      s = r->u.memcpy.start;
      e = r->u.memcpy.end;
      break;
    case CUPTI_ACTIVITY_KIND_MEMSET:
      s = r->u.memset.start;
      e = r->u.memset.end;
      break;
    default:
      s = r->u.kernel.start;
      e = r->u.kernel.end;
      break;
  }
  CHECK(s != 0 && s <= e);
  CHECK(s >= lo && e <= hi); /* on the registered clock, not CLOCK_REALTIME */
}

/* A host function that holds its stream until the test lets it go. */
static sem_t g_gate;
static void CUDA_CB hold_stream(void *arg) {
  (void)arg;
  sem_wait(&g_gate);
}

static void test_activity(void) {
  uint64_t t_lo = ts_callback();
  g_main = pthread_self();

  /* (1) pinned H2D, async */
  CU(cu.cuMemcpyHtoDAsync_v2(g_dev, g_pinned, 1 * MiB, g_a));
  uint32_t c_pinned = last_corr(CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2);
  /* (2) pageable H2D, async (the driver stages it and returns when done) */
  CU(cu.cuMemcpyHtoDAsync_v2(g_dev, g_pageable, 2 * MiB, g_a));
  uint32_t c_pageable = last_corr(CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2);
  /* (3) D2H into pageable memory, synchronous, legacy stream */
  CU(cu.cuMemcpyDtoH_v2(g_pageable, g_dev, 3 * MiB));
  uint32_t c_d2h = last_corr(CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2);
  /* (4) a memset */
  CU(cu.cuMemsetD8Async(g_dev, 0x5a, 4096, g_b));
  uint32_t c_memset = last_corr(CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async);
  /* (5) a kernel on B and a pinned upload on A at the same time.  B is
   * held by a host function, then records `started` and runs the kernel
   * (150 ms); A waits for `started`, then uploads (16 MiB at 0.1 GB/s:
   * 168 ms).  So the upload cannot start before the kernel, and B's
   * worker goes from the event straight into the kernel: only A's
   * wake-up, on a loaded machine, stands between them, and it has 150 ms. */
  CUevent started;
  CU(cu.cuEventCreate(&started, 0));
  sem_init(&g_gate, 0, 0);
  CU(cu.cuLaunchHostFunc(g_b, hold_stream, NULL));
  CU(cu.cuEventRecord(started, g_b));
  spin(g_b, 150000000);
  uint32_t c_spin = last_corr(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel);
  cu.set_bandwidth(0.1, 1);
  CU(cu.cuStreamWaitEvent(g_a, started, 0));
  CU(cu.cuMemcpyHtoDAsync_v2(g_dev, g_pinned, 16 * MiB, g_a));
  uint32_t c_long = last_corr(CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2);
  sem_post(&g_gate);
  /* (6) waits */
  CU(cu.cuStreamSynchronize(g_a));
  uint32_t c_sync_a = last_corr(CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize);
  CU(cu.cuStreamSynchronize(g_b));
  CU(cu.cuEventDestroy_v2(started));
  sem_destroy(&g_gate);
  cu.set_bandwidth(24, 6);
  /* (7) an external id around a call */
  CP(cp.cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0,
                                               0xabcdefull));
  CU(cu.cuMemcpyHtoDAsync_v2(g_dev, g_pinned, 4096, g_a));
  uint32_t c_ext = last_corr(CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2);
  uint64_t popped = 0;
  CP(cp.cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &popped));
  CHECK(popped == 0xabcdefull);
  CHECK(cp.cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, NULL) ==
        CUPTI_ERROR_QUEUE_EMPTY);
  CHECK(cp.cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_INVALID, 1) ==
        CUPTI_ERROR_INVALID_PARAMETER);
  /* (8) event and context waits */
  CUevent ev;
  CU(cu.cuEventCreate(&ev, 0));
  spin(g_b, 2000000);
  uint32_t c_spin2 = last_corr(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel);
  CU(cu.cuEventRecord(ev, g_b));
  CU(cu.cuEventSynchronize(ev));
  uint32_t c_evsync = last_corr(CUPTI_DRIVER_TRACE_CBID_cuEventSynchronize);
  CU(cu.cuCtxSynchronize());
  uint32_t c_ctxsync = last_corr(CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize);
  CU(cu.cuEventDestroy_v2(ev));
  /* (9) driver calls from inside a callback: called back (nested), under
   * the enclosing call's id, their records too */
  CUcontext cur;
  CU(cu.cuCtxGetCurrent(&cur));
  CHECK(calls_of(CUPTI_DRIVER_TRACE_CBID_cuCtxGetCurrent) == 1);
  CHECK(g_cb_max_depth == 1);
  g_nest = 1;
  CU(cu.cuMemcpyHtoDAsync_v2(g_dev, g_pinned, 8192, g_a));
  uint32_t c_nest = find_call(last_corr(CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2))->corr;
  CHECK(g_nest == 0);
  CHECK(calls_of(CUPTI_DRIVER_TRACE_CBID_cuCtxGetCurrent) == 2);
  CHECK(g_cb_max_depth == 2);
  CHECK(last_corr(CUPTI_DRIVER_TRACE_CBID_cuCtxGetCurrent) == c_nest);
  /* (10) the per-thread twin, stream 0 = this thread's default stream */
  CU(cu.cuMemcpyHtoDAsync_v2_ptsz(g_dev, g_pinned, 12288, NULL));
  uint32_t c_ptsz = last_corr(CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2_ptsz);
  CU(cu.cuCtxSynchronize());

  uint64_t t_hi = ts_callback();
  int before = g_completed;
  CP(cp.cuptiActivityFlushAll(0));
  /* Blocking: the current, partly filled buffer is back when it returns,
   * delivered by CUPTI's thread, not this one (as measured on CUPTI 13). */
  CHECK(g_completed > before);
  CHECK(g_completed_main == 0);
  CHECK(g_walk_bad == 0);
  CHECK(g_cb_other_thread == 0);

  /* Callbacks: every entry matched by an exit with the call's result and
   * the correlationData written at entry; ids fresh and increasing, but
   * for nested calls, which carry their enclosing call's. */
  int n_nested = 0;
  for (int i = 0; i < g_ncalls; i++) {
    CHECK(g_calls[i].exited == 1);
    CHECK(g_calls[i].ret == CUDA_SUCCESS);
    CHECK(g_calls[i].data_ok);
    CHECK(g_calls[i].ctx_uid != 0);
    if (i > 0 && g_calls[i].depth == 1) CHECK(g_calls[i].corr > g_calls[i - 1].corr);
    if (g_calls[i].depth == 2) {
      n_nested++;
      CHECK(g_calls[i].corr == c_nest);
    }
  }
  CHECK(n_nested == 2);
  struct call *pc = find_call(c_pinned);
  CHECK(pc && pc->name && strcmp(pc->name, "cuMemcpyHtoDAsync_v2") == 0);
  CHECK(pc && pc->bytes == 1 * MiB);
  struct call *kc = find_call(c_spin);
  CHECK(kc && kc->symbol && strcmp(kc->symbol, "pagelock_spin") == 0);
  struct call *tc = find_call(c_ptsz);
  CHECK(tc && tc->name && strcmp(tc->name, "cuMemcpyHtoDAsync_v2_ptsz") == 0 && tc->bytes == 12288);

  /* Memcpy records: one per call, joined on the id the entry callback saw. */
  const struct rec *r1 = one_rec(CUPTI_ACTIVITY_KIND_MEMCPY, c_pinned);
  const struct rec *r2 = one_rec(CUPTI_ACTIVITY_KIND_MEMCPY, c_pageable);
  const struct rec *r3 = one_rec(CUPTI_ACTIVITY_KIND_MEMCPY, c_d2h);
  const struct rec *r5 = one_rec(CUPTI_ACTIVITY_KIND_MEMCPY, c_long);
  const struct rec *rt = one_rec(CUPTI_ACTIVITY_KIND_MEMCPY, c_ptsz);
  CHECK(r1 && r2 && r3 && r5 && rt);
  if (!(r1 && r2 && r3 && r5 && rt)) return;
  const CUpti_ActivityMemcpy6 *m1 = &r1->u.memcpy, *m2 = &r2->u.memcpy, *m3 = &r3->u.memcpy,
                              *m5 = &r5->u.memcpy;
  CHECK(m1->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_HTOD &&
        m1->srcKind == CUPTI_ACTIVITY_MEMORY_KIND_PINNED &&
        m1->dstKind == CUPTI_ACTIVITY_MEMORY_KIND_DEVICE);
  CHECK(m1->bytes == 1 * MiB && (m1->flags & CUPTI_ACTIVITY_FLAG_MEMCPY_ASYNC));
  CHECK(m2->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_HTOD &&
        m2->srcKind == CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE);
  CHECK(m2->bytes == 2 * MiB && (m2->flags & CUPTI_ACTIVITY_FLAG_MEMCPY_ASYNC));
  CHECK(m3->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOH &&
        m3->srcKind == CUPTI_ACTIVITY_MEMORY_KIND_DEVICE &&
        m3->dstKind == CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE);
  CHECK(m3->bytes == 3 * MiB && !(m3->flags & CUPTI_ACTIVITY_FLAG_MEMCPY_ASYNC));
  CHECK(m5->bytes == 16 * MiB && m5->srcKind == CUPTI_ACTIVITY_MEMORY_KIND_PINNED);
  CHECK(m1->streamId == m2->streamId && m1->streamId != m3->streamId && m1->streamId != 0);
  CHECK(rt->u.memcpy.streamId != m1->streamId && rt->u.memcpy.streamId != m3->streamId);
  CHECK(m1->contextId == pc->ctx_uid && m1->deviceId == 0);
  CHECK(m1->copyCount == 1);
  /* Every memcpy record belongs to a call the callback saw. */
  pthread_mutex_lock(&g_recs_mu);
  for (int i = 0; i < g_nrecs; i++) {
    const struct rec *r = &g_recs[i];
    if (r->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      struct call *c = find_call(r->u.memcpy.correlationId);
      CHECK(c != NULL);
      if (c && c->bytes) CHECK(call_with_bytes(r->u.memcpy.correlationId, r->u.memcpy.bytes));
    }
    if (r->kind == CUPTI_ACTIVITY_KIND_MEMCPY || r->kind == CUPTI_ACTIVITY_KIND_MEMSET ||
        r->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)
      check_gpu_times(r, t_lo, t_hi);
  }
  pthread_mutex_unlock(&g_recs_mu);

  /* Memset */
  const struct rec *rm = one_rec(CUPTI_ACTIVITY_KIND_MEMSET, c_memset);
  CHECK(rm && rm->u.memset.bytes == 4096 && rm->u.memset.value == 0x5a &&
        rm->u.memset.memoryKind == CUPTI_ACTIVITY_MEMORY_KIND_DEVICE &&
        (rm->u.memset.flags & CUPTI_ACTIVITY_FLAG_MEMSET_ASYNC));

  /* Kernels: their own stream, their real durations; the first overlaps
   * the upload on A. */
  const struct rec *rk2 = one_rec(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, c_spin2);
  CHECK(rk2 && rk2->u.kernel.end - rk2->u.kernel.start >= 2000000);
  const struct rec *rk = one_rec(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, c_spin);
  CHECK(rk != NULL);
  if (rk) {
    const CUpti_ActivityKernel10 *k = &rk->u.kernel;
    CHECK(k->name && strcmp(k->name, "pagelock_spin") == 0);
    CHECK(k->streamId != m5->streamId && k->streamId == rm->u.memset.streamId);
    CHECK(k->gridX == 2 && k->blockX == 64 && k->completed == k->end);
    CHECK(k->end - k->start >= 150000000);
    CHECK(m5->end - m5->start >= 167000000); /* 16 MiB at 0.1 GB/s */
    CHECK(k->start < m5->end && m5->start < k->end);
    if (!(k->start < m5->end && m5->start < k->end))
      fprintf(stderr, "  kernel 0..%lld, upload %lld..%lld (ns from the kernel's start)\n",
              (long long)(k->end - k->start), (long long)(m5->start - k->start),
              (long long)(m5->end - k->start));
    /* CUPTI's name pointers are stable: the second launch has the same. */
    int n = 0;
    pthread_mutex_lock(&g_recs_mu);
    for (int i = 0; i < g_nrecs; i++)
      if (g_recs[i].kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
        n++;
        CHECK(g_recs[i].u.kernel.name == k->name);
      }
    pthread_mutex_unlock(&g_recs_mu);
    CHECK(n == 2);
  }

  /* Synchronization records: the host interval of each wait. */
  const struct rec *rs = one_rec(CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, c_sync_a);
  CHECK(rs && rs->u.sync.type == CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE &&
        rs->u.sync.streamId == m1->streamId && rs->u.sync.contextId == m1->contextId &&
        rs->u.sync.start <= rs->u.sync.end && rs->u.sync.start >= t_lo &&
        rs->u.sync.cudaEventId == CUPTI_SYNCHRONIZATION_INVALID_VALUE);
  const struct rec *re = one_rec(CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, c_evsync);
  CHECK(re && re->u.sync.type == CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE &&
        re->u.sync.cudaEventId != CUPTI_SYNCHRONIZATION_INVALID_VALUE &&
        re->u.sync.streamId == CUPTI_SYNCHRONIZATION_INVALID_VALUE);
  const struct rec *rc = one_rec(CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, c_ctxsync);
  CHECK(rc && rc->u.sync.type == CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE);

  /* Driver API records: one per call, same id, same cbid. */
  const struct rec *ra = one_rec(CUPTI_ACTIVITY_KIND_DRIVER, c_pinned);
  CHECK(ra && ra->u.api.cbid == CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2 &&
        ra->u.api.start <= ra->u.api.end && ra->u.api.returnValue == CUDA_SUCCESS &&
        ra->u.api.processId == (uint32_t)getpid());
  /* Both cuCtxGetCurrent calls were traced, the nested one too. */
  int n_getcur = 0;
  pthread_mutex_lock(&g_recs_mu);
  for (int i = 0; i < g_nrecs; i++)
    n_getcur += g_recs[i].kind == CUPTI_ACTIVITY_KIND_DRIVER &&
                g_recs[i].u.api.cbid == CUPTI_DRIVER_TRACE_CBID_cuCtxGetCurrent;
  pthread_mutex_unlock(&g_recs_mu);
  CHECK(n_getcur == 2);
  /* The nested copy's records carry the enclosing call's id, and were
   * queued first (from inside its entry callback). */
  int n_nest_cpy, n_nest_api;
  int i_nest = find_rec(CUPTI_ACTIVITY_KIND_MEMCPY, c_nest, &n_nest_cpy);
  find_rec(CUPTI_ACTIVITY_KIND_DRIVER, c_nest, &n_nest_api);
  CHECK(n_nest_cpy == 2 && n_nest_api == 3);
  CHECK(i_nest >= 0 && g_recs[i_nest].u.memcpy.bytes == 1234);

  /* External correlation: before the call's other records. */
  int n_ext;
  int i_ext = find_rec(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION, c_ext, &n_ext);
  int i_cpy = find_rec(CUPTI_ACTIVITY_KIND_MEMCPY, c_ext, NULL);
  int i_api = find_rec(CUPTI_ACTIVITY_KIND_DRIVER, c_ext, NULL);
  CHECK(n_ext == 1 && i_ext >= 0 && i_ext < i_cpy && i_ext < i_api);
  if (i_ext >= 0)
    CHECK(g_recs[i_ext].u.ext.externalKind == CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0 &&
          g_recs[i_ext].u.ext.externalId == 0xabcdefull);
  /* Only while pushed. */
  CHECK(count_kind(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION) == 1);

  /* One overhead record per buffer request. */
  int n_ovh = 0;
  pthread_mutex_lock(&g_recs_mu);
  for (int i = 0; i < g_nrecs; i++)
    if (g_recs[i].kind == CUPTI_ACTIVITY_KIND_OVERHEAD) {
      n_ovh++;
      CHECK(g_recs[i].u.overhead.overheadKind == CUPTI_ACTIVITY_OVERHEAD_ACTIVITY_BUFFER_REQUEST &&
            g_recs[i].u.overhead.start <= g_recs[i].u.overhead.end);
    }
  pthread_mutex_unlock(&g_recs_mu);
  CHECK(n_ovh >= 1 && n_ovh <= g_requested);
  CHECK(g_ts_calls > 0);
}

static void test_incomplete(void) {
  /* A kernel queued behind a blocked host function: its record is in the
   * buffer, incomplete.  FlushAll(0) must keep that buffer; a forced
   * flush hands it over with zero timestamps. */
  CP(cp.cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
  sem_init(&g_gate, 0, 0);
  CU(cu.cuLaunchHostFunc(g_b, hold_stream, NULL));
  CU(cu.cuLaunchKernel(g_probe, 1, 1, 1, 1, 1, 1, 0, g_b, NULL, NULL));
  CP(cp.cuptiActivityFlushAll(0));
  CHECK(kernel_named("probe_kernel", NULL) == 0);
  CP(cp.cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
  const struct rec *r = NULL;
  CHECK(kernel_named("probe_kernel", &r) == 1);
  CHECK(r && r->u.kernel.start == 0 && r->u.kernel.end == 0);
  sem_post(&g_gate);
  CU(cu.cuStreamSynchronize(g_b));
  CP(cp.cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
  CHECK(kernel_named("probe_kernel", NULL) == 1);
  sem_destroy(&g_gate);

  /* Complete records: FlushAll(0) delivers them from a partly full buffer. */
  CU(cu.cuLaunchKernel(g_probe, 1, 1, 1, 1, 1, 1, 0, g_b, NULL, NULL));
  CU(cu.cuStreamSynchronize(g_b));
  CP(cp.cuptiActivityFlushAll(0));
  CHECK(kernel_named("probe_kernel", &r) == 2);
  CHECK(r && r->u.kernel.start != 0 && r->u.kernel.start <= r->u.kernel.end);
}

static void test_dropped(void) {
  size_t n = 99;
  CP(cp.cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
  CP(cp.cuptiActivityGetNumDroppedRecords(NULL, 0, &n)); /* reset */
  int req0 = g_requested, recs0 = count_kind(CUPTI_ACTIVITY_KIND_MEMCPY);
  g_buf_mode = BUF_NONE;
  for (int i = 0; i < 3; i++) CU(cu.cuMemcpyHtoDAsync_v2(g_dev, g_pinned, 4096, g_a));
  CU(cu.cuStreamSynchronize(g_a));
  g_buf_mode = BUF_NORMAL;
  /* 3 x (memcpy + driver API) + (synchronization + driver API) */
  CP(cp.cuptiActivityGetNumDroppedRecords(NULL, 0, &n));
  CHECK(n == 8);
  CHECK(g_requested - req0 == 8); /* asked again for every record */
  CP(cp.cuptiActivityGetNumDroppedRecords(NULL, 0, &n));
  CHECK(n == 0);
  CP(cp.cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
  CHECK(count_kind(CUPTI_ACTIVITY_KIND_MEMCPY) == recs0);
  CHECK(cp.cuptiActivityGetNumDroppedRecords(NULL, 0, NULL) == CUPTI_ERROR_INVALID_PARAMETER);
}

/* Without DRIVER records, CUPTI 13 writes no external correlation records
 * (measured), even for GPU work queued while an id is pushed. */
static void test_ext_needs_driver(void) {
  CP(cp.cuptiActivityDisable(CUPTI_ACTIVITY_KIND_DRIVER));
  int n_ext = count_kind(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION);
  CP(cp.cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM1, 99));
  CU(cu.cuMemcpyHtoDAsync_v2(g_dev, g_pinned, 4096, g_a));
  uint32_t c = last_corr(CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2);
  CP(cp.cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM1, NULL));
  CU(cu.cuStreamSynchronize(g_a));
  CP(cp.cuptiActivityFlushAll(0));
  CHECK(one_rec(CUPTI_ACTIVITY_KIND_MEMCPY, c) != NULL);
  CHECK(count_kind(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION) == n_ext);
  CP(cp.cuptiActivityEnable(CUPTI_ACTIVITY_KIND_DRIVER));
}

static void test_worker_delivery(void) {
  /* Buffers of 4 records: full ones come back on CUPTI's thread, with no
   * flush from us. */
  CP(cp.cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
  g_buf_max = 4;
  g_max_recs_per_buf = 0;
  CP(cp.cuptiActivityFlushPeriod(10));
  int other0 = g_completed_other, main0 = g_completed_main;
  int recs0 = count_kind(CUPTI_ACTIVITY_KIND_MEMCPY);
  for (int i = 0; i < 10; i++) CU(cu.cuMemcpyHtoDAsync_v2(g_dev, g_pinned, 4096, g_a));
  CU(cu.cuStreamSynchronize(g_a));
  for (int i = 0; i < 200 && g_completed_other - other0 < 4; i++) usleep(10000);
  CHECK(g_completed_other - other0 >= 4);
  CHECK(g_completed_main == main0);
  CP(cp.cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
  CHECK(g_max_recs_per_buf == 4);
  CHECK(count_kind(CUPTI_ACTIVITY_KIND_MEMCPY) - recs0 == 10);
  g_buf_max = 0;
  CP(cp.cuptiActivityFlushPeriod(0));
  CHECK(g_walk_bad == 0);
}

/* Several threads queue copies while another flushes and the worker
 * delivers 3-record buffers: every record arrives once, none is dropped,
 * every callback runs on the thread that made the call. */
#define N_THREADS 4
#define N_COPIES 200
static atomic_int g_stop_flusher;

static void *copier(void *arg) {
  (void)arg;
  CUstream s;
  CU(cu.cuCtxSetCurrent(g_ctx));
  CU(cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  for (int i = 0; i < N_COPIES; i++) CU(cu.cuMemcpyHtoDAsync_v2(g_dev, g_pinned, 512, s));
  CU(cu.cuStreamSynchronize(s));
  CU(cu.cuStreamDestroy_v2(s));
  return NULL;
}

static void *flusher(void *arg) {
  (void)arg;
  while (!g_stop_flusher) {
    CP(cp.cuptiActivityFlushAll(0));
    usleep(500);
  }
  return NULL;
}

static void test_threads(void) {
  size_t dropped;
  CP(cp.cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
  CP(cp.cuptiActivityGetNumDroppedRecords(NULL, 0, &dropped));
  int recs0 = count_kind(CUPTI_ACTIVITY_KIND_MEMCPY), other0 = g_cb_other_thread;
  g_buf_max = 3;
  CP(cp.cuptiActivityFlushPeriod(1));
  pthread_t t[N_THREADS], f;
  g_stop_flusher = 0;
  CHECK(pthread_create(&f, NULL, flusher, NULL) == 0);
  for (int i = 0; i < N_THREADS; i++) CHECK(pthread_create(&t[i], NULL, copier, NULL) == 0);
  for (int i = 0; i < N_THREADS; i++) pthread_join(t[i], NULL);
  g_stop_flusher = 1;
  pthread_join(f, NULL);
  CP(cp.cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
  CHECK(count_kind(CUPTI_ACTIVITY_KIND_MEMCPY) - recs0 == N_THREADS * N_COPIES);
  /* entry and exit of each copy, plus both of each cuStreamSynchronize */
  CHECK(g_cb_other_thread - other0 == N_THREADS * (N_COPIES + 1) * 2);
  CP(cp.cuptiActivityGetNumDroppedRecords(NULL, 0, &dropped));
  CHECK(dropped == 0);
  CHECK(g_walk_bad == 0);
  g_buf_max = 0;
  CP(cp.cuptiActivityFlushPeriod(0));
}

static void test_next_record(void) {
  static uint8_t buf[1024] __attribute__((aligned(8)));
  CUpti_Activity *a = NULL;
  memset(buf, 0, sizeof buf);
  CUpti_ActivityMemcpy6 m;
  memset(&m, 0, sizeof m);
  m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
  memcpy(buf, &m, sizeof m);
  CHECK(cp.cuptiActivityGetNextRecord(NULL, sizeof m, &a) == CUPTI_ERROR_INVALID_PARAMETER);
  CHECK(cp.cuptiActivityGetNextRecord(buf, 0, &a) == CUPTI_ERROR_MAX_LIMIT_REACHED);
  CHECK(cp.cuptiActivityGetNextRecord(buf, sizeof m - 8, &a) == CUPTI_ERROR_MAX_LIMIT_REACHED);
  CHECK(a == NULL);
  CP(cp.cuptiActivityGetNextRecord(buf, sizeof m, &a));
  CHECK((uint8_t *)a == buf);
  CHECK(cp.cuptiActivityGetNextRecord(buf, sizeof m, &a) == CUPTI_ERROR_MAX_LIMIT_REACHED);
  CHECK(cp.cuptiActivityGetNextRecord(buf, sizeof buf, &a) ==
        CUPTI_ERROR_INVALID_KIND); /* zeros next */
  uint32_t garbage = 0x7777;
  memcpy(buf, &garbage, sizeof garbage);
  a = NULL;
  CHECK(cp.cuptiActivityGetNextRecord(buf, sizeof buf, &a) == CUPTI_ERROR_INVALID_KIND);
}

static void test_resubscribe(void) {
  CP(cp.cuptiUnsubscribe(g_sub));
  CHECK(cp.cuptiUnsubscribe(g_sub) == CUPTI_ERROR_INVALID_PARAMETER);
  int calls = g_ncalls;
  CU(cu.cuStreamSynchronize(g_a));
  CHECK(g_ncalls == calls);
  CP(cp.cuptiSubscribe(&g_sub, on_callback, &g_calls));
  /* A fresh subscriber starts with nothing enabled. */
  CU(cu.cuStreamSynchronize(g_a));
  CHECK(g_ncalls == calls);
  CP(cp.cuptiEnableDomain(1, g_sub, CUPTI_CB_DOMAIN_DRIVER_API));
  CU(cu.cuStreamSynchronize(g_a));
  CHECK(g_ncalls == calls + 1);

  /* Finalize: buffers come back, callbacks and records stop. */
  int done0 = g_completed;
  CU(cu.cuMemcpyHtoDAsync_v2(g_dev, g_pinned, 4096, g_a));
  CU(cu.cuStreamSynchronize(g_a));
  CP(cp.cuptiFinalize());
  CHECK(g_completed > done0);
  int n_memcpy = count_kind(CUPTI_ACTIVITY_KIND_MEMCPY);
  calls = g_ncalls;
  int req = g_requested;
  CU(cu.cuMemcpyHtoDAsync_v2(g_dev, g_pinned, 4096, g_a));
  CU(cu.cuStreamSynchronize(g_a));
  CHECK(g_ncalls == calls && g_requested == req);
  CHECK(count_kind(CUPTI_ACTIVITY_KIND_MEMCPY) == n_memcpy);
  CHECK(cp.cuptiActivityFlushAll(0) == CUPTI_ERROR_INVALID_OPERATION); /* callbacks gone */
  /* ... and CUPTI can start again. */
  CP(cp.cuptiSubscribe(&g_sub, on_callback, &g_calls));
  CP(cp.cuptiFinalize());
}

static void run_main(void) {
  load();
  setup_cupti();
  setup_cuda();
  test_activity();
  test_incomplete();
  test_dropped();
  test_worker_delivery();
  test_ext_needs_driver();
  test_threads();
  test_next_record();
  test_resubscribe();
  CHECK(g_completed_main == 0); /* bufferCompleted never ran on this thread */
  CU(cu.cuStreamDestroy_v2(g_a));
  CU(cu.cuStreamDestroy_v2(g_b));
  CU(cu.cuMemFreeHost(g_pinned));
  CU(cu.cuMemFree_v2(g_dev));
  free(g_pageable);
}

/* ------------------------------------------------------------------ */
/* one knob per run (ctest sets the environment)                       */

static void run_mode(const char *mode) {
  load();
  g_main = pthread_self();
  CUpti_SubscriberHandle sub;
  size_t n = 0;
  uint32_t v = 0;
  if (strcmp(mode, "fail-subscribe") == 0) {
    /* As under nsys: the callback API is taken, the rest still works. */
    CHECK(cp.cuptiSubscribe(&sub, on_callback, &g_calls) ==
          CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED);
    CP(cp.cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY));
  } else if (strcmp(mode, "fail-version") == 0 || strcmp(mode, "old-driver") == 0) {
    /* CUPTI newer than the driver: documented NOT_INITIALIZED. */
    CHECK(cp.cuptiSubscribe(&sub, on_callback, &g_calls) == CUPTI_ERROR_NOT_INITIALIZED);
    CHECK(cp.cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY) == CUPTI_ERROR_NOT_INITIALIZED);
    CHECK(cp.cuptiActivityFlushAll(0) == CUPTI_ERROR_NOT_INITIALIZED);
    CP(cp.cuptiGetVersion(&v));
  } else if (strcmp(mode, "fail-device") == 0) {
    CHECK(cp.cuptiSubscribe(&sub, on_callback, &g_calls) == CUPTI_ERROR_INVALID_DEVICE);
    CHECK(cp.cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY) == CUPTI_ERROR_INVALID_DEVICE);
  } else if (strcmp(mode, "fail-enable") == 0) {
    CP(cp.cuptiSubscribe(&sub, on_callback, &g_calls));
    CHECK(cp.cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY) == CUPTI_ERROR_NOT_INITIALIZED);
  } else if (strcmp(mode, "nobuffer") == 0) {
    CP(cp.cuptiActivityGetNumDroppedRecords(NULL, 0, &n));
    CHECK(n == 7);
    CP(cp.cuptiActivityGetNumDroppedRecords(NULL, 0, &n));
    CHECK(n == 0);
  } else if (strcmp(mode, "version") == 0) {
    CP(cp.cuptiGetVersion(&v));
    CHECK(v == 120090); /* FAKECUPTI_VERSION */
  } else if (strcmp(mode, "buffer-records") == 0) {
    /* FAKECUPTI_BUFFER_RECORDS=2 caps buffers whatever the client asks. */
    CP(cp.cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed));
    CP(cp.cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY));
    CP(cp.cuptiActivityEnable(CUPTI_ACTIVITY_KIND_DRIVER));
    setup_cuda();
    for (int i = 0; i < 7; i++) CU(cu.cuMemcpyHtoDAsync_v2(g_dev, g_pinned, 4096, g_a));
    CU(cu.cuStreamSynchronize(g_a));
    CP(cp.cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
    CHECK(g_max_recs_per_buf == 2);
    CHECK(count_kind(CUPTI_ACTIVITY_KIND_MEMCPY) == 7);
    CHECK(g_walk_bad == 0);
  } else {
    fprintf(stderr, "unknown mode %s\n", mode);
    g_fail++;
  }
}

int main(int argc, char **argv) {
  g_main = pthread_self();
  if (argc > 1)
    run_mode(argv[1]);
  else
    run_main();
  printf("%d passed, %d failed\n", atomic_load(&g_pass), atomic_load(&g_fail));
  fflush(stdout);
  return atomic_load(&g_fail) ? 1 : 0;
}
