/* test_stage.c - the staging engine over the fake driver (cmocka).
 *
 * Linked against pagelock_core, so the exported copy wrappers
 * (cuMemcpyHtoDAsync_v2, ...) in this binary are the shim's own: calling
 * them runs exactly what a preloaded program runs (classification, the
 * decision point, the engine).  Everything else of the driver, and the
 * reference copies the results are checked with, come from the fake
 * libcuda.so.1 through the real dlsym, untouched by the shim.
 *
 * Threads never call cmocka's asserts (they longjmp): they count failures
 * and the main thread asserts the count. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "cpuload.h"
#include "copy.h"
#include "init.h"
#include "fakecuda.h"
#include "pinreg.h"
#include "pl_internal.h"
#include "stage.h"
#include "trace.h"
#include "trace_read.h"

#if defined(__SANITIZE_THREAD__)
#define TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TSAN 1
#endif
#endif
#ifndef TSAN
#define TSAN 0
#endif

/* The shim's wrappers of the per-thread twins (cuda.h declares only some). */
CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr, const void *, size_t);
CUresult cuMemcpyDtoH_v2_ptds(void *, CUdeviceptr, size_t);
CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr, const void *, size_t, CUstream);
CUresult cuMemcpyDtoHAsync_v2_ptsz(void *, CUdeviceptr, size_t, CUstream);

/* ---- the fake driver, reached around the shim ----------------------------- */

static void *g_cuda;
static CUcontext g_ctx;

#define DRV(name, ...) static CUresult (*f_##name)(__VA_ARGS__)
DRV(cuInit, unsigned);
DRV(cuDevicePrimaryCtxRetain, CUcontext *, CUdevice);
DRV(cuCtxSetCurrent, CUcontext);
DRV(cuCtxSynchronize, void);
DRV(cuCtxCreate_v2, CUcontext *, unsigned, CUdevice);
DRV(cuCtxDestroy_v2, CUcontext);
DRV(cuMemAlloc_v2, CUdeviceptr *, size_t);
DRV(cuMemFree_v2, CUdeviceptr);
DRV(cuMemsetD8_v2, CUdeviceptr, unsigned char, size_t);
DRV(cuStreamCreate, CUstream *, unsigned);
DRV(cuStreamDestroy_v2, CUstream);
DRV(cuStreamSynchronize, CUstream);
DRV(cuLaunchHostFunc, CUstream, CUhostFn, void *);
DRV(cuEventCreate, CUevent *, unsigned);
DRV(cuEventRecord, CUevent, CUstream);
DRV(cuEventSynchronize, CUevent);
DRV(cuEventDestroy_v2, CUevent);
DRV(cuStreamBeginCapture_v2, CUstream, CUstreamCaptureMode);
DRV(cuStreamEndCapture, CUstream, CUgraph *);
DRV(cuGraphDestroy, CUgraph);
DRV(cuMemcpyHtoD_v2, CUdeviceptr, const void *, size_t);
DRV(cuMemcpyDtoH_v2, void *, CUdeviceptr, size_t);
DRV(cuMemcpyHtoDAsync_v2, CUdeviceptr, const void *, size_t, CUstream);
DRV(cuMemcpyDtoHAsync_v2, void *, CUdeviceptr, size_t, CUstream);
static int (*f_fail)(const char *, int, int);
static void (*f_clear_faults)(void);
static void (*f_get_stats)(struct fakecuda_stats *);
static void (*f_reset_stats)(void);
static unsigned long (*f_call_count)(const char *);
static void (*f_reset_call_counts)(void);
static void (*f_set_bandwidth)(double, double);

static void *sym(const char *name) {
  void *p = pl_real_dlsym(g_cuda, name);
  if (p == NULL) {
    fprintf(stderr, "fake libcuda lacks %s\n", name);
    abort();
  }
  return p;
}

#define LOAD(name) *(void **)&f_##name = sym(#name)

static int load_driver(void) {
  g_cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (g_cuda == NULL) {
    fprintf(stderr, "fake libcuda not found (LD_LIBRARY_PATH?): %s\n", dlerror());
    return -1;
  }
  LOAD(cuInit);
  LOAD(cuDevicePrimaryCtxRetain);
  LOAD(cuCtxSetCurrent);
  LOAD(cuCtxSynchronize);
  LOAD(cuCtxCreate_v2);
  LOAD(cuCtxDestroy_v2);
  LOAD(cuMemAlloc_v2);
  LOAD(cuMemFree_v2);
  LOAD(cuMemsetD8_v2);
  LOAD(cuStreamCreate);
  LOAD(cuStreamDestroy_v2);
  LOAD(cuStreamSynchronize);
  LOAD(cuLaunchHostFunc);
  LOAD(cuEventCreate);
  LOAD(cuEventRecord);
  LOAD(cuEventSynchronize);
  LOAD(cuEventDestroy_v2);
  LOAD(cuStreamBeginCapture_v2);
  LOAD(cuStreamEndCapture);
  LOAD(cuGraphDestroy);
  LOAD(cuMemcpyHtoD_v2);
  LOAD(cuMemcpyDtoH_v2);
  LOAD(cuMemcpyHtoDAsync_v2);
  LOAD(cuMemcpyDtoHAsync_v2);
  *(void **)&f_fail = sym("fakecuda_fail");
  *(void **)&f_clear_faults = sym("fakecuda_clear_faults");
  *(void **)&f_get_stats = sym("fakecuda_get_stats");
  *(void **)&f_reset_stats = sym("fakecuda_reset_stats");
  *(void **)&f_call_count = sym("fakecuda_call_count");
  *(void **)&f_reset_call_counts = sym("fakecuda_reset_call_counts");
  *(void **)&f_set_bandwidth = sym("fakecuda_set_bandwidth");
  if (f_cuInit(0) != CUDA_SUCCESS || f_cuDevicePrimaryCtxRetain(&g_ctx, 0) != CUDA_SUCCESS ||
      f_cuCtxSetCurrent(g_ctx) != CUDA_SUCCESS)
    return -1;
  return 0;
}

/* ---- helpers ------------------------------------------------------------- */

#define KB ((size_t)1 << 10)
#define MB ((size_t)1 << 20)
#define POOL (1 * MB)
#define CHUNK (64 * KB)
/* Tests of bytes and order must not depend on the scheduler: with a wait
 * this long a chunk always frees in time and every byte is staged.  The
 * bounded wait itself has its own test. */
#define PATIENT_US 2000000L

static char tmpdir[256];

/* Set the engine's options and start from an empty pool, no faults. */
static void stage_env(size_t pool, size_t chunk, long wait_us, const char *d2h) {
  char v[64];
  setenv("PAGELOCK_MODE", "stage", 1);
  setenv("PAGELOCK_STAGE_MIN", "0", 1);
  snprintf(v, sizeof v, "%zu", pool);
  setenv("PAGELOCK_POOL_SIZE", v, 1);
  snprintf(v, sizeof v, "%zu", chunk);
  setenv("PAGELOCK_CHUNK_SIZE", v, 1);
  snprintf(v, sizeof v, "%ld", wait_us);
  setenv("PAGELOCK_WAIT_US", v, 1);
  setenv("PAGELOCK_D2H", d2h, 1);
  pl_config_reset_for_test();
  f_clear_faults();
  assert_int_equal(f_cuCtxSynchronize(), CUDA_SUCCESS);
  pl_stage_reset_for_test();
  f_set_bandwidth(1000, 1000); /* correctness tests: no need to wait on the model */
}

static uint8_t pat(size_t i, unsigned seed) {
  return (uint8_t)((i * 131u) ^ (i >> 9) ^ (seed * 0x9Du) ^ (seed >> 5));
}
static void fill(void *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) ((uint8_t *)p)[i] = pat(i, seed);
}
/* Index of the first byte of p[0..n) that is not pattern `seed`, or n. */
static size_t check_pat(const void *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++)
    if (((const uint8_t *)p)[i] != pat(i, seed)) return i;
  return n;
}
static size_t check_byte(const void *p, size_t n, uint8_t b) {
  for (size_t i = 0; i < n; i++)
    if (((const uint8_t *)p)[i] != b) return i;
  return n;
}

/* The bound, as the engine and as the driver see it.  Nothing else in this
 * program allocates pinned memory. */
static bool bound_ok(void) {
  pl_stage_stats s;
  pl_stage_get_stats(&s);
  struct fakecuda_stats f;
  f_get_stats(&f);
  return s.pool.bytes <= s.pool.bound && s.pool.high_water <= s.pool.bound &&
         f.registered_bytes_live <= s.pool.bound;
}

/* Native thunks like hook_copy.c's, for hand-built pl_copy structs. */
static CUresult nat_htod(const pl_copy *c) {
  CUresult (*f)(CUdeviceptr, const void *, size_t) = pl_hook_real(c->api);
  return f(c->dst, (const void *)(uintptr_t)c->src, c->bytes);
}
static CUresult nat_htod_async(const pl_copy *c) {
  CUresult (*f)(CUdeviceptr, const void *, size_t, CUstream) = pl_hook_real(c->api);
  return f(c->dst, (const void *)(uintptr_t)c->src, c->bytes, c->stream);
}
static CUresult nat_dtoh(const pl_copy *c) {
  CUresult (*f)(void *, CUdeviceptr, size_t) = pl_hook_real(c->api);
  return f((void *)(uintptr_t)c->dst, c->src, c->bytes);
}
static CUresult nat_dtoh_async(const pl_copy *c) {
  CUresult (*f)(void *, CUdeviceptr, size_t, CUstream) = pl_hook_real(c->api);
  return f((void *)(uintptr_t)c->dst, c->src, c->bytes, c->stream);
}

/* A pl_copy for one of the four 1D host<->device entry points, filled the
 * way its wrapper fills it. */
static pl_copy mk_copy(int api, CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  pl_copy c;
  memset(&c, 0, sizeof c);
  c.api = api;
  c.dst = dst;
  c.src = src;
  c.bytes = n;
  switch (api) {
    case PAGELOCK_API_cuMemcpyHtoD_v2:
    case PAGELOCK_API_cuMemcpyHtoD_v2_ptds:
      c.dir = PAGELOCK_DIR_H2D;
      c.dst_mem = PAGELOCK_MEM_DEVICE;
      c.native = nat_htod;
      break;
    case PAGELOCK_API_cuMemcpyHtoDAsync_v2:
    case PAGELOCK_API_cuMemcpyHtoDAsync_v2_ptsz:
      c.dir = PAGELOCK_DIR_H2D;
      c.dst_mem = PAGELOCK_MEM_DEVICE;
      c.native = nat_htod_async;
      c.flags |= PAGELOCK_COPY_ASYNC;
      c.stream = s;
      break;
    case PAGELOCK_API_cuMemcpyDtoH_v2:
    case PAGELOCK_API_cuMemcpyDtoH_v2_ptds:
      c.dir = PAGELOCK_DIR_D2H;
      c.src_mem = PAGELOCK_MEM_DEVICE;
      c.native = nat_dtoh;
      break;
    default:
      c.dir = PAGELOCK_DIR_D2H;
      c.src_mem = PAGELOCK_MEM_DEVICE;
      c.native = nat_dtoh_async;
      c.flags |= PAGELOCK_COPY_ASYNC;
      c.stream = s;
      break;
  }
  if (api == PAGELOCK_API_cuMemcpyHtoD_v2_ptds || api == PAGELOCK_API_cuMemcpyHtoDAsync_v2_ptsz ||
      api == PAGELOCK_API_cuMemcpyDtoH_v2_ptds || api == PAGELOCK_API_cuMemcpyDtoHAsync_v2_ptsz)
    c.flags |= PAGELOCK_COPY_PTDS;
  return c;
}

#define HP(p) ((CUdeviceptr)(uintptr_t)(p))

/* ---- exact bytes, every entry point, sizes and alignments ----------------- */

enum { V_SYNC, V_SYNC_PTDS, V_ASYNC, V_ASYNC_PTSZ0, V_ANY, V_ANY_ASYNC, V_COUNT };
static const char *const vname[V_COUNT] = {"sync",          "sync_ptds", "async",
                                           "async_ptsz(0)", "cuMemcpy",  "cuMemcpyAsync"};

static CUresult do_h2d(int v, CUdeviceptr d, const void *h, size_t n, CUstream s) {
  switch (v) {
    case V_SYNC: return cuMemcpyHtoD_v2(d, h, n);
    case V_SYNC_PTDS: return cuMemcpyHtoD_v2_ptds(d, h, n);
    case V_ASYNC: return cuMemcpyHtoDAsync_v2(d, h, n, s);
    case V_ASYNC_PTSZ0: return cuMemcpyHtoDAsync_v2_ptsz(d, h, n, NULL);
    case V_ANY: return cuMemcpy(d, HP(h), n);
    default: return cuMemcpyAsync(d, HP(h), n, s);
  }
}
static CUresult do_d2h(int v, void *h, CUdeviceptr d, size_t n, CUstream s) {
  switch (v) {
    case V_SYNC: return cuMemcpyDtoH_v2(h, d, n);
    case V_SYNC_PTDS: return cuMemcpyDtoH_v2_ptds(h, d, n);
    case V_ASYNC: return cuMemcpyDtoHAsync_v2(h, d, n, s);
    case V_ASYNC_PTSZ0: return cuMemcpyDtoHAsync_v2_ptsz(h, d, n, NULL);
    case V_ANY: return cuMemcpy(HP(h), d, n);
    default: return cuMemcpyAsync(HP(h), d, n, s);
  }
}
static bool v_async(int v) { return v == V_ASYNC || v == V_ASYNC_PTSZ0 || v == V_ANY_ASYNC; }
/* Wait for the stream variant v used. */
static void v_sync(int v, CUstream s) {
  assert_int_equal(f_cuStreamSynchronize(v == V_ASYNC_PTSZ0 ? CU_STREAM_PER_THREAD : s),
                   CUDA_SUCCESS);
  assert_int_equal(f_cuCtxSynchronize(), CUDA_SUCCESS);
}

static const size_t sizes[] = {0,
                               1,
                               2,
                               7,
                               63,
                               4095,
                               4096,
                               65535,
                               65536,
                               65537,
                               131071,
                               200001,
                               524288,
                               1048575,
                               1048576,
                               1048577,
                               3 * 1048576 + 123,
                               5 * 1048576 + 7};
#define NSIZES (sizeof sizes / sizeof sizes[0])
#define MAXN (5 * MB + 7)
#define GUARD 64

typedef struct bufs {
  CUdeviceptr dev;
  uint8_t *host, *chk;
  CUstream s;
} bufs;

static void bufs_init(bufs *b) {
  assert_int_equal(f_cuMemAlloc_v2(&b->dev, MAXN + 2 * GUARD), CUDA_SUCCESS);
  b->host = malloc(MAXN + 2 * GUARD);
  b->chk = malloc(MAXN + 2 * GUARD);
  assert_non_null(b->host);
  assert_non_null(b->chk);
  assert_int_equal(f_cuStreamCreate(&b->s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
}
static void bufs_fini(bufs *b) {
  assert_int_equal(f_cuStreamDestroy_v2(b->s), CUDA_SUCCESS);
  assert_int_equal(f_cuMemFree_v2(b->dev), CUDA_SUCCESS);
  free(b->host);
  free(b->chk);
}

/* One H2D of n bytes, host offset ho, device offset dof, by variant v;
 * checks the bytes, the guards, that it was staged, and the bound. */
static void one_h2d(bufs *b, int v, size_t n, size_t ho, size_t dof, unsigned seed) {
  size_t span = dof + n + GUARD;
  assert_int_equal(f_cuMemsetD8_v2(b->dev, 0, span), CUDA_SUCCESS);
  fill(b->host + ho, n, seed);
  pl_stage_stats before, after;
  pl_stage_get_stats(&before);
  f_reset_stats();
  CUresult r = do_h2d(v, b->dev + dof, b->host + ho, n, b->s);
  if (r != CUDA_SUCCESS) print_error("h2d %s n=%zu: %d\n", vname[v], n, (int)r);
  assert_int_equal(r, CUDA_SUCCESS);
  struct fakecuda_stats fs;
  f_get_stats(&fs);
  /* The source is ours again the moment the call returns. */
  memset(b->host + ho, 0x5A, n);
  pl_stage_get_stats(&after);
  if (n > 0) {
    /* every byte through the pool, none through the driver's bounce */
    if (after.bytes_staged - before.bytes_staged != n)
      print_error("h2d %s n=%zu: %llu staged\n", vname[v], n,
                  (unsigned long long)(after.bytes_staged - before.bytes_staged));
    assert_int_equal(after.bytes_staged - before.bytes_staged, n);
    assert_int_equal(fs.copies_pageable, 0);
    assert_true(fs.copies_pinned >= 1);
  }
  v_sync(v, b->s);
  assert_int_equal(f_cuMemcpyDtoH_v2(b->chk, b->dev, span), CUDA_SUCCESS);
  assert_int_equal(check_byte(b->chk, dof, 0), dof);
  size_t bad = check_pat(b->chk + dof, n, seed);
  if (bad != n)
    print_error("h2d %s n=%zu ho=%zu do=%zu: byte %zu differs\n", vname[v], n, ho, dof, bad);
  assert_int_equal(bad, n);
  assert_int_equal(check_byte(b->chk + dof + n, GUARD, 0), GUARD);
  assert_true(bound_ok());
}

static void one_d2h(bufs *b, int v, size_t n, size_t ho, size_t dof, unsigned seed,
                    bool async_mode) {
  size_t span = dof + n + GUARD;
  fill(b->chk, span, seed);
  assert_int_equal(f_cuMemcpyHtoD_v2(b->dev, b->chk, span), CUDA_SUCCESS);
  memset(b->host, 0xEE, ho + n + GUARD);
  pl_stage_stats before, after;
  pl_stage_get_stats(&before);
  f_reset_stats();
  CUresult r = do_d2h(v, b->host + ho, b->dev + dof, n, b->s);
  assert_int_equal(r, CUDA_SUCCESS);
  struct fakecuda_stats fs;
  f_get_stats(&fs);
  pl_stage_get_stats(&after);
  if (n > 0) {
    assert_int_equal(after.bytes_staged - before.bytes_staged, n);
    assert_int_equal(fs.copies_pageable, 0);
  }
  /* Pageable semantics: the bytes are there when the call returns, unless
   * the program opted into asynchronous device-to-host on an async call. */
  if (async_mode && v_async(v)) v_sync(v, b->s);
  assert_int_equal(check_byte(b->host, ho, 0xEE), ho);
  size_t bad = n;
  for (size_t i = 0; i < n && bad == n; i++)
    if (b->host[ho + i] != pat(dof + i, seed)) bad = i;
  if (bad != n)
    print_error("d2h %s n=%zu ho=%zu do=%zu: byte %zu differs\n", vname[v], n, ho, dof, bad);
  assert_int_equal(bad, n);
  assert_int_equal(check_byte(b->host + ho + n, GUARD, 0xEE), GUARD);
  v_sync(v, b->s);
  assert_true(bound_ok());
}

static void test_exact_h2d(void **state) {
  (void)state;
  stage_env(POOL, CHUNK, PATIENT_US, "sync");
  bufs b;
  bufs_init(&b);
  unsigned k = 0;
  for (size_t i = 0; i < NSIZES; i++)
    for (int v = 0; v < V_COUNT; v++, k++)
      one_h2d(&b, v, sizes[i], (k * 3) % 8 + (k & 1), (k * 5) % 16 + 1, k);
  bufs_fini(&b);
}

static void exact_d2h(bool async_mode) {
  stage_env(POOL, CHUNK, PATIENT_US, async_mode ? "async" : "sync");
  bufs b;
  bufs_init(&b);
  unsigned k = 7;
  for (size_t i = 0; i < NSIZES; i++)
    for (int v = 0; v < V_COUNT; v++, k++)
      one_d2h(&b, v, sizes[i], (k * 3) % 8 + (k & 1), (k * 5) % 16 + 1, k, async_mode);
  bufs_fini(&b);
}
static void test_exact_d2h_sync(void **state) {
  (void)state;
  exact_d2h(false);
}
static void test_exact_d2h_async(void **state) {
  (void)state;
  exact_d2h(true);
}

/* A chunk bigger than the pool allows is cut to half the pool, and a
 * pool of several megabytes with big chunks still works. */
static void test_chunk_sizes(void **state) {
  (void)state;
  bufs b;
  bufs_init(&b);
  stage_env(POOL, 4 * MB, PATIENT_US, "sync");
  one_h2d(&b, V_ASYNC, 3 * MB + 5, 3, 1, 11);
  one_d2h(&b, V_ASYNC, 3 * MB + 5, 1, 3, 12, false);
  pl_stage_stats s;
  pl_stage_get_stats(&s);
  assert_true(s.pool.high_water <= POOL);
  stage_env(4 * MB, 1 * MB, PATIENT_US, "async");
  one_h2d(&b, V_SYNC, 5 * MB, 0, 0, 13);
  one_d2h(&b, V_ASYNC, 5 * MB, 0, 0, 14, true);
  bufs_fini(&b);
}

/* ---- stream order ---------------------------------------------------------- */

typedef struct probe {
  const uint8_t *dev;
  size_t n;
  unsigned seed;
  atomic_int ok; /* 1 pass, -1 fail */
} probe;

/* Host function between the H2D and the D2H: the device buffer must
 * already hold the H2D's bytes (the fake's device memory is addressable). */
static void CUDA_CB probe_fn(void *arg) {
  probe *p = arg;
  atomic_store(&p->ok, check_pat(p->dev, p->n, p->seed) == p->n ? 1 : -1);
}

static void ordering(const char *mode) {
  stage_env(POOL, CHUNK, PATIENT_US, mode);
  bufs b;
  bufs_init(&b);
  size_t sz[] = {100 * KB, 700 * KB + 3, 3 * MB + 17};
  for (unsigned i = 0; i < 3; i++) {
    size_t n = sz[i];
    unsigned seed = 40 + i;
    fill(b.host, n, seed);
    assert_int_equal(cuMemcpyHtoDAsync_v2(b.dev, b.host, n, b.s), CUDA_SUCCESS);
    memset(b.host, 0, n); /* scribble the source: the copy must not care */
    probe p = {.dev = (const uint8_t *)(uintptr_t)b.dev, .n = n, .seed = seed};
    atomic_init(&p.ok, 0);
    assert_int_equal(f_cuLaunchHostFunc(b.s, probe_fn, &p), CUDA_SUCCESS);
    memset(b.chk, 0xCC, n);
    assert_int_equal(cuMemcpyDtoHAsync_v2(b.chk, b.dev, n, b.s), CUDA_SUCCESS);
    /* Each kind of synchronisation must cover the copy-out. */
    if (i == 0) {
      assert_int_equal(f_cuStreamSynchronize(b.s), CUDA_SUCCESS);
    } else if (i == 1) {
      CUevent ev;
      assert_int_equal(f_cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
      assert_int_equal(f_cuEventRecord(ev, b.s), CUDA_SUCCESS);
      assert_int_equal(f_cuEventSynchronize(ev), CUDA_SUCCESS);
      assert_int_equal(f_cuEventDestroy_v2(ev), CUDA_SUCCESS);
    } else {
      assert_int_equal(f_cuCtxSynchronize(), CUDA_SUCCESS);
    }
    assert_int_equal(atomic_load(&p.ok), 1);
    assert_int_equal(check_pat(b.chk, n, seed), n);
    assert_true(bound_ok());
  }
  assert_int_equal(f_cuStreamSynchronize(b.s), CUDA_SUCCESS);
  bufs_fini(&b);
}
static void test_ordering_sync(void **state) {
  (void)state;
  ordering("sync");
}
static void test_ordering_async(void **state) {
  (void)state;
  ordering("async");
}

/* ---- many threads, streams at once ------------------------------------------ */

#define NTHREADS 8
#define NITER (TSAN ? 6 : 12)
#define TMAX (TSAN ? 600 * KB : 1536 * KB)

static atomic_int t_fail, t_bound;
/* --stress: workers repeat until this CLOCK_MONOTONIC second (0: NITER). */
static time_t t_deadline;
static atomic_long t_copies;

static time_t mono_sec(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec;
}

static void *worker(void *arg) {
  unsigned id = (unsigned)(uintptr_t)arg;
  uint64_t rng = 0x9E3779B97F4A7C15ull * (id + 1);
#define RND() (rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17, rng)
  if (f_cuCtxSetCurrent(g_ctx) != CUDA_SUCCESS) {
    atomic_fetch_add(&t_fail, 1);
    return NULL;
  }
  CUstream s[2];
  CUdeviceptr dev[2];
  uint8_t *src = malloc(TMAX + 16), *dst = malloc(TMAX + 16);
  for (int i = 0; i < 2; i++) {
    /* Blocking streams: a sync copy on the legacy stream orders with them,
     * as the fallback of a sync copy needs. */
    if (f_cuStreamCreate(&s[i], CU_STREAM_DEFAULT) != CUDA_SUCCESS ||
        f_cuMemAlloc_v2(&dev[i], TMAX + 16) != CUDA_SUCCESS) {
      atomic_fetch_add(&t_fail, 1);
      return NULL;
    }
  }
  for (int it = 0; t_deadline ? mono_sec() < t_deadline : it < NITER; it++) {
    int k = (int)(RND() & 1);
    size_t n = 1 + RND() % TMAX;
    size_t ho = RND() % 16, dof = RND() % 16;
    if (ho + n > TMAX + 16) ho = 0;
    if (dof + n > TMAX + 16) dof = 0;
    unsigned seed = id * 1000 + (unsigned)it;
    fill(src + ho, n, seed);
    CUresult r = (RND() & 1) ? cuMemcpyHtoDAsync_v2(dev[k] + dof, src + ho, n, s[k])
                             : cuMemcpyHtoD_v2(dev[k] + dof, src + ho, n);
    memset(src + ho, 0, n);
    memset(dst, 0xEE, TMAX + 16);
    if (r == CUDA_SUCCESS) r = cuMemcpyDtoHAsync_v2(dst + ho, dev[k] + dof, n, s[k]);
    if (r == CUDA_SUCCESS) r = f_cuStreamSynchronize(s[k]);
    if (r != CUDA_SUCCESS || check_pat(dst + ho, n, seed) != n) atomic_fetch_add(&t_fail, 1);
    if (!bound_ok()) atomic_fetch_add(&t_bound, 1);
    atomic_fetch_add(&t_copies, 2);
  }
  for (int i = 0; i < 2; i++) {
    f_cuStreamSynchronize(s[i]);
    f_cuStreamDestroy_v2(s[i]);
    f_cuMemFree_v2(dev[i]);
  }
  free(src);
  free(dst);
  return NULL;
#undef RND
}

static void threads(const char *mode) {
  stage_env(POOL, CHUNK, 2000, mode);
  atomic_store(&t_fail, 0);
  atomic_store(&t_bound, 0);
  pthread_t t[NTHREADS];
  for (unsigned i = 0; i < NTHREADS; i++)
    assert_int_equal(pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)i), 0);
  for (unsigned i = 0; i < NTHREADS; i++) pthread_join(t[i], NULL);
  assert_int_equal(atomic_load(&t_fail), 0);
  assert_int_equal(atomic_load(&t_bound), 0);
  pl_stage_stats s;
  pl_stage_get_stats(&s);
  print_message("%s: %.1f MB staged, %llu waits, %llu fallbacks, pool high water %llu KB\n", mode,
                s.bytes_staged / 1e6, (unsigned long long)s.waits, (unsigned long long)s.fallbacks,
                (unsigned long long)s.pool.high_water >> 10);
  assert_true(s.bytes_staged > 0);
  assert_true(s.pool.high_water <= POOL);
  assert_true(bound_ok());
}
static void test_threads_sync(void **state) {
  (void)state;
  threads("sync");
}
static void test_threads_async(void **state) {
  (void)state;
  threads("async");
}

/* ---- the bounded wait ---------------------------------------------------------- */

static atomic_int gate;
static void CUDA_CB gate_fn(void *arg) {
  (void)arg;
  struct timespec ts = {0, 100000};
  while (!atomic_load(&gate)) nanosleep(&ts, NULL);
}

/* Stream A is held by a host function until after C's copy returns; A's
 * staged copy holds every chunk.  C's copy must stop waiting after
 * PAGELOCK_WAIT_US and finish through the native call: waiting for A would
 * deadlock this program. */
static void test_wait_fallback(void **state) {
  (void)state;
  const long wait_us = 20000;
  stage_env(POOL, CHUNK, wait_us, "sync");
  bufs a, c;
  bufs_init(&a);
  bufs_init(&c);
  atomic_store(&gate, 0);
  assert_int_equal(f_cuLaunchHostFunc(a.s, gate_fn, NULL), CUDA_SUCCESS);
  fill(a.host, POOL, 61);
  assert_int_equal(cuMemcpyHtoDAsync_v2(a.dev, a.host, POOL, a.s), CUDA_SUCCESS);
  pl_stage_stats s;
  pl_stage_get_stats(&s);
  assert_int_equal(s.fallbacks, 0);
  assert_int_equal(s.pool.bytes, POOL);

  size_t n = 256 * KB + 5;
  fill(c.host, n, 62);
  pl_copy cp = mk_copy(PAGELOCK_API_cuMemcpyHtoDAsync_v2, c.dev, HP(c.host), n, c.s);
  uint64_t t0 = pl_now_ns();
  CUresult r = pl_copy_exec(&cp);
  uint64_t dt = pl_now_ns() - t0;
  atomic_store(&gate, 1);
  assert_int_equal(r, CUDA_SUCCESS);
  assert_true(cp.flags & PAGELOCK_COPY_FALLBACK);
  assert_false(cp.flags & PAGELOCK_COPY_STAGED);
  print_message("fallback after %.1f ms (PAGELOCK_WAIT_US=%ld)\n", dt / 1e6, wait_us);
  assert_true(dt >= (uint64_t)wait_us * 1000);
  assert_true(dt < (uint64_t)wait_us * 1000 * (TSAN ? 25 : 5));

  assert_int_equal(f_cuStreamSynchronize(a.s), CUDA_SUCCESS);
  assert_int_equal(f_cuStreamSynchronize(c.s), CUDA_SUCCESS);
  assert_int_equal(f_cuMemcpyDtoH_v2(a.chk, a.dev, POOL), CUDA_SUCCESS);
  assert_int_equal(check_pat(a.chk, POOL, 61), POOL);
  assert_int_equal(f_cuMemcpyDtoH_v2(c.chk, c.dev, n), CUDA_SUCCESS);
  assert_int_equal(check_pat(c.chk, n, 62), n);
  pl_stage_get_stats(&s);
  assert_int_equal(s.fallbacks, 1);
  assert_true(s.waits >= 1);
  assert_true(bound_ok());

  /* The same with a device-to-host copy on C, in both modes. */
  for (int m = 0; m < 2; m++) {
    stage_env(POOL, CHUNK, wait_us, m ? "async" : "sync");
    atomic_store(&gate, 0);
    assert_int_equal(f_cuLaunchHostFunc(a.s, gate_fn, NULL), CUDA_SUCCESS);
    assert_int_equal(cuMemcpyHtoDAsync_v2(a.dev, a.host, POOL, a.s), CUDA_SUCCESS);
    fill(c.chk, n, 63 + m);
    assert_int_equal(f_cuMemcpyHtoD_v2(c.dev, c.chk, n), CUDA_SUCCESS);
    memset(c.host, 0, n);
    cp = mk_copy(PAGELOCK_API_cuMemcpyDtoHAsync_v2, HP(c.host), c.dev, n, c.s);
    t0 = pl_now_ns();
    r = pl_copy_exec(&cp);
    dt = pl_now_ns() - t0;
    atomic_store(&gate, 1);
    assert_int_equal(r, CUDA_SUCCESS);
    assert_true(cp.flags & PAGELOCK_COPY_FALLBACK);
    assert_true(dt < (uint64_t)wait_us * 1000 * (TSAN ? 25 : 5));
    assert_int_equal(f_cuStreamSynchronize(c.s), CUDA_SUCCESS);
    assert_int_equal(check_pat(c.host, n, 63 + m), n);
    assert_int_equal(f_cuStreamSynchronize(a.s), CUDA_SUCCESS);
  }
  bufs_fini(&a);
  bufs_fini(&c);
}

/* Host function: holds its stream until *arg is set. */
static void CUDA_CB gate_on_fn(void *arg) {
  struct timespec ts = {0, 100000};
  while (!atomic_load((atomic_int *)arg)) nanosleep(&ts, NULL);
}

/* Host function: how many pool bytes were free when the stream got here. */
static atomic_llong probe_free = -1;
static void CUDA_CB free_probe_fn(void *arg) {
  (void)arg;
  pl_stage_stats s;
  pl_stage_get_stats(&s);
  atomic_store(&probe_free, (long long)s.pool.free_bytes);
}

/* A context's first device allocation (through the shim's cuMemAlloc_v2)
 * has the shim's thread build the pool in the background; the first
 * staged copy then finds its chunks made.  Once per context, and never in
 * observe mode. */
static void test_prewarm(void **state) {
  (void)state;
  stage_env(POOL, CHUNK, 2000, "sync");
  f_reset_call_counts();
  CUdeviceptr dev;
  assert_int_equal(cuMemAlloc_v2(&dev, POOL), CUDA_SUCCESS);
  pl_pinreg_quiesce_for_test();
  pl_stage_stats st;
  pl_stage_get_stats(&st);
  struct fakecuda_stats fs;
  f_get_stats(&fs);
  assert_int_equal(st.pool.bytes, POOL);
  assert_int_equal(fs.registered_bytes_live, POOL);
  assert_int_equal(f_call_count("cuMemHostRegister_v2"), 1);
  CUdeviceptr dev2;
  assert_int_equal(cuMemAlloc_v2(&dev2, POOL), CUDA_SUCCESS);
  pl_pinreg_quiesce_for_test();
  assert_int_equal(f_call_count("cuMemHostRegister_v2"), 1); /* once per context */
  uint8_t *h = malloc(POOL / 4), *back = malloc(POOL / 4);
  fill(h, POOL / 4, 7);
  pl_copy c = mk_copy(PAGELOCK_API_cuMemcpyHtoD_v2, dev, HP(h), POOL / 4, NULL);
  assert_int_equal(pl_copy_exec(&c), CUDA_SUCCESS);
  assert_true(c.flags & PAGELOCK_COPY_STAGED);
  assert_int_equal(f_call_count("cuMemHostRegister_v2"), 1); /* no slab on the copy's path */
  assert_int_equal(f_cuMemcpyDtoH_v2(back, dev, POOL / 4), CUDA_SUCCESS);
  assert_int_equal(check_pat(back, POOL / 4, 7), POOL / 4);
  assert_int_equal(f_cuMemFree_v2(dev), CUDA_SUCCESS);
  assert_int_equal(f_cuMemFree_v2(dev2), CUDA_SUCCESS);
  /* observe: nothing is built */
  stage_env(POOL, CHUNK, 2000, "sync");
  setenv("PAGELOCK_MODE", "observe", 1);
  pl_config_reset_for_test();
  f_reset_call_counts();
  assert_int_equal(cuMemAlloc_v2(&dev, POOL), CUDA_SUCCESS);
  pl_pinreg_quiesce_for_test();
  assert_int_equal(f_call_count("cuMemHostRegister_v2"), 0);
  pl_stage_get_stats(&st);
  assert_int_equal(st.pool.bytes, 0);
  assert_int_equal(f_cuMemFree_v2(dev), CUDA_SUCCESS);
  free(h);
  free(back);
}

/* Once the driver is initialized (the shim's cuInit) the shim's thread
 * maps and faults in the pool's first slab, and the prewarm at the first
 * device allocation takes that memory and only registers it: the driver
 * finds every page resident, so the lock it holds while registering
 * (which stalls the program's other driver calls) covers no page faults.
 * A slab grown later by a copy is faulted in before it is registered too. */
static void test_prewarm_premapped(void **state) {
  (void)state;
  stage_env(POOL, CHUNK, 2000, "sync");
  f_reset_stats();
  assert_int_equal(pl_pool_spare_for_test(), 0);
  pl_stage_note_driver_init();
  pl_pinreg_quiesce_for_test();
  assert_int_equal(pl_pool_spare_for_test(), POOL); /* the prewarm's size */
  CUdeviceptr dev;
  assert_int_equal(cuMemAlloc_v2(&dev, 4 * POOL), CUDA_SUCCESS);
  pl_pinreg_quiesce_for_test();
  assert_int_equal(pl_pool_spare_for_test(), 0); /* taken */
  struct fakecuda_stats fs;
  f_get_stats(&fs);
  assert_int_equal(fs.host_register_calls, 1);
  assert_int_equal(fs.registered_bytes_live, POOL);
  assert_int_equal(fs.host_register_nonresident_pages, 0);
  assert_int_equal(f_cuMemFree_v2(dev), CUDA_SUCCESS);
  /* More chunks than one slab holds (64): what is mapped ahead is that
   * slab, which the prewarm then takes. */
  stage_env(16 * MB, 64 * KB, 2000, "sync");
  f_reset_stats();
  pl_stage_note_driver_init();
  pl_pinreg_quiesce_for_test();
  assert_int_equal(pl_pool_spare_for_test(), 64 * 64 * KB);
  assert_int_equal(cuMemAlloc_v2(&dev, POOL), CUDA_SUCCESS);
  pl_pinreg_quiesce_for_test();
  assert_int_equal(pl_pool_spare_for_test(), 0);
  f_get_stats(&fs);
  assert_int_equal(fs.registered_bytes_live, 64 * 64 * KB);
  assert_int_equal(fs.host_register_nonresident_pages, 0);
  /* observe: nothing is mapped ahead */
  stage_env(POOL, CHUNK, 2000, "sync");
  setenv("PAGELOCK_MODE", "observe", 1);
  pl_config_reset_for_test();
  pl_stage_note_driver_init();
  pl_pinreg_quiesce_for_test();
  assert_int_equal(pl_pool_spare_for_test(), 0);
  assert_int_equal(f_cuMemFree_v2(dev), CUDA_SUCCESS);
}

/* A copy that finds the pool empty before the prewarm ran (its device
 * memory made where the shim did not see it, or the prewarm still queued
 * behind the shim's thread) takes the memory mapped ahead, all of it, as
 * one slab: one registration, no page faulted inside the driver.  Without
 * that it made slabs of its own from fresh memory, and the first upload of
 * a 256 MiB buffer under auto took 21.7 ms instead of 11.0 (H200 host). */
static void test_prewarm_spare_taken_by_copy(void **state) {
  (void)state;
  stage_env(POOL, CHUNK, 2000, "sync");
  f_reset_stats();
  pl_stage_note_driver_init();
  pl_pinreg_quiesce_for_test();
  assert_int_equal(pl_pool_spare_for_test(), POOL);
  CUdeviceptr dev;
  assert_int_equal(f_cuMemAlloc_v2(&dev, POOL), CUDA_SUCCESS); /* no prewarm */
  uint8_t *h = malloc(2 * CHUNK + 5), *back = malloc(2 * CHUNK + 5);
  fill(h, 2 * CHUNK + 5, 3);
  pl_copy c = mk_copy(PAGELOCK_API_cuMemcpyHtoD_v2, dev, HP(h), 2 * CHUNK + 5, NULL);
  assert_int_equal(pl_copy_exec(&c), CUDA_SUCCESS);
  assert_true(c.flags & PAGELOCK_COPY_STAGED);
  assert_int_equal(pl_pool_spare_for_test(), 0);
  struct fakecuda_stats fs;
  f_get_stats(&fs);
  assert_int_equal(fs.host_register_calls, 1);
  assert_int_equal(fs.registered_bytes_live, POOL);
  assert_int_equal(fs.host_register_nonresident_pages, 0);
  /* The prewarm that comes after finds the pool built: no second slab. */
  CUdeviceptr dev2;
  assert_int_equal(cuMemAlloc_v2(&dev2, POOL), CUDA_SUCCESS);
  pl_pinreg_quiesce_for_test();
  f_get_stats(&fs);
  assert_int_equal(fs.host_register_calls, 1);
  assert_int_equal(f_cuMemcpyDtoH_v2(back, dev, 2 * CHUNK + 5), CUDA_SUCCESS);
  assert_int_equal(check_pat(back, 2 * CHUNK + 5, 3), 2 * CHUNK + 5);
  assert_int_equal(f_cuMemFree_v2(dev), CUDA_SUCCESS);
  assert_int_equal(f_cuMemFree_v2(dev2), CUDA_SUCCESS);
  free(h);
  free(back);
}

/* Asynchronous device-to-host copies several times the pool, queued behind
 * work their streams have not reached: each returns without waiting, every
 * byte staged, nothing landing early.  A copy holds a ring of half the
 * pool; the second copy on stream A takes A's ring over (the first copy's
 * host functions must not free it: a probe between the two sees no chunk
 * free); a copy on stream C takes the other half; a copy on stream D then
 * finds none, waits (bounded) and passes through.  Then bytes exact and
 * every chunk back. */
static void test_d2h_async_ring(void **state) {
  (void)state;
  const long wait_us = 20000;
  stage_env(POOL, CHUNK, wait_us, "async");
  pl_stage_mixed_for_test(); /* rings keep to half the pool (see test_d2h_async_alone) */
  bufs a, c, d;
  bufs_init(&a);
  bufs_init(&c);
  bufs_init(&d);
  const size_t n1 = 2 * POOL + 12345, n2 = 2 * POOL + 999, n3 = POOL + 7, n4 = 256 * KB + 3;
  uint8_t *out2 = malloc(n2);
  assert_non_null(out2);
  fill(a.chk, n1 + n2, 91);
  assert_int_equal(f_cuMemcpyHtoD_v2(a.dev, a.chk, n1 + n2), CUDA_SUCCESS);
  fill(c.chk, n3, 92);
  assert_int_equal(f_cuMemcpyHtoD_v2(c.dev, c.chk, n3), CUDA_SUCCESS);
  fill(d.chk, n4, 93);
  assert_int_equal(f_cuMemcpyHtoD_v2(d.dev, d.chk, n4), CUDA_SUCCESS);
  memset(a.host, 0, n1);
  memset(out2, 0, n2);
  memset(c.host, 0, n3);
  memset(d.host, 0, n4);

  atomic_store(&gate, 0);
  atomic_store(&probe_free, -1);
  assert_int_equal(f_cuLaunchHostFunc(a.s, gate_fn, NULL), CUDA_SUCCESS);
  static atomic_int gate_c;
  atomic_store(&gate_c, 0);
  assert_int_equal(f_cuLaunchHostFunc(c.s, gate_on_fn, &gate_c), CUDA_SUCCESS);
  pl_copy c1 = mk_copy(PAGELOCK_API_cuMemcpyDtoHAsync_v2, HP(a.host), a.dev, n1, a.s);
  f_reset_call_counts();
  assert_int_equal(pl_copy_exec(&c1), CUDA_SUCCESS);
  /* 33 chunks' worth through a ring of 8 chunks made as one slab: five
   * rounds, one DMA and one host function each */
  assert_int_equal(f_call_count("cuMemHostRegister_v2"), 1);
  assert_int_equal(f_call_count("cuMemcpyDtoHAsync_v2"), 5);
  assert_int_equal(f_call_count("cuLaunchHostFunc"), 5);
  assert_int_equal(f_cuLaunchHostFunc(a.s, free_probe_fn, NULL), CUDA_SUCCESS);
  pl_copy c2 = mk_copy(PAGELOCK_API_cuMemcpyDtoHAsync_v2, HP(out2), a.dev + n1, n2, a.s);
  f_reset_call_counts();
  assert_int_equal(pl_copy_exec(&c2), CUDA_SUCCESS);
  assert_int_equal(f_call_count("cuMemHostRegister_v2"), 0); /* the ring taken over */
  assert_int_equal(f_call_count("cuMemcpyDtoHAsync_v2"), 5);
  pl_stage_stats s;
  pl_stage_get_stats(&s);
  assert_int_equal(s.pool.bytes, POOL / 2);
  assert_int_equal(s.pool.free_bytes, 0);
  pl_copy c3 = mk_copy(PAGELOCK_API_cuMemcpyDtoHAsync_v2, HP(c.host), c.dev, n3, c.s);
  assert_int_equal(pl_copy_exec(&c3), CUDA_SUCCESS);
  pl_stage_get_stats(&s);
  for (int i = 0; i < 3; i++) {
    const pl_copy *cp = i == 0 ? &c1 : i == 1 ? &c2 : &c3;
    assert_true(cp->flags & PAGELOCK_COPY_STAGED);
    assert_false(cp->flags & PAGELOCK_COPY_FALLBACK);
  }
  assert_int_equal(s.waits, 0);
  assert_int_equal(s.bytes_staged, n1 + n2 + n3);
  assert_int_equal(s.pool.bytes, POOL);
  assert_int_equal(s.pool.free_bytes, 0);
  assert_true(bound_ok());
  /* the streams are still held: not one byte may have landed */
  assert_int_equal(check_byte(a.host, n1, 0), n1);
  assert_int_equal(check_byte(out2, n2, 0), n2);
  assert_int_equal(check_byte(c.host, n3, 0), n3);

  pl_copy c4 = mk_copy(PAGELOCK_API_cuMemcpyDtoHAsync_v2, HP(d.host), d.dev, n4, d.s);
  uint64_t t0 = pl_now_ns();
  assert_int_equal(pl_copy_exec(&c4), CUDA_SUCCESS);
  uint64_t dt = pl_now_ns() - t0;
  assert_true(c4.flags & PAGELOCK_COPY_FALLBACK);
  assert_false(c4.flags & PAGELOCK_COPY_STAGED);
  assert_true(dt >= (uint64_t)wait_us * 1000);
  assert_true(dt < (uint64_t)wait_us * 1000 * (TSAN ? 25 : 5));
  assert_int_equal(f_cuStreamSynchronize(d.s), CUDA_SUCCESS);
  assert_int_equal(check_pat(d.host, n4, 93), n4);
  assert_int_equal(check_byte(a.host, n1, 0), n1);

  atomic_store(&gate, 1);
  assert_int_equal(f_cuStreamSynchronize(a.s), CUDA_SUCCESS);
  assert_int_equal(atomic_load(&probe_free), 0);
  assert_int_equal(check_pat(a.host, n1, 91), n1);
  assert_memory_equal(out2, a.chk + n1, n2);
  assert_int_equal(check_byte(c.host, n3, 0), n3);
  atomic_store(&gate_c, 1);
  assert_int_equal(f_cuStreamSynchronize(c.s), CUDA_SUCCESS);
  assert_int_equal(check_pat(c.host, n3, 92), n3);
  pl_stage_get_stats(&s);
  assert_int_equal(s.fallbacks, 1);
  assert_int_equal(s.pool.free_bytes, s.pool.bytes);
  assert_true(bound_ok());
  bufs_fini(&d);

  /* One copy at a time on an idle stream, from a third of the pool to
   * 4.7 pools: bytes exact, no fallback, every chunk back. */
  for (int i = 0; i < 14; i++) {
    size_t n = (size_t)(i + 1) * POOL / 3 + (size_t)i; /* up to 4.7 pools, < MAXN */
    fill(a.chk, n, 100 + (unsigned)i);
    assert_int_equal(f_cuMemcpyHtoD_v2(a.dev, a.chk, n), CUDA_SUCCESS);
    memset(a.host, 0, n);
    assert_int_equal(cuMemcpyDtoHAsync_v2(a.host, a.dev, n, a.s), CUDA_SUCCESS);
    assert_int_equal(f_cuStreamSynchronize(a.s), CUDA_SUCCESS);
    assert_int_equal(check_pat(a.host, n, 100 + (unsigned)i), n);
    assert_true(bound_ok());
  }
  pl_stage_get_stats(&s);
  assert_int_equal(s.fallbacks, 1);
  assert_int_equal(s.pool.free_bytes, s.pool.bytes);
  free(out2);
  bufs_fini(&a);
  bufs_fini(&c);
}

/* A process whose staged copies are all asynchronous downloads on one
 * stream has nothing beside its ring: the ring takes the whole pool, half
 * the rounds.  A copy of another kind that comes while the whole pool is
 * queued waits (bounded) and passes through, bytes exact; once copies mix,
 * rings keep to half the pool again.  The bound holds throughout. */
static void test_d2h_async_alone(void **state) {
  (void)state;
  const long wait_us = 20000;
  stage_env(POOL, CHUNK, wait_us, "async");
  bufs a, b;
  bufs_init(&a);
  bufs_init(&b);
  const size_t n = 2 * POOL + 12345, m = 256 * KB + 3; /* 33 chunks; a quarter pool */
  fill(a.chk, n, 71);
  assert_int_equal(f_cuMemcpyHtoD_v2(a.dev, a.chk, n), CUDA_SUCCESS);
  fill(b.chk, m, 72);
  assert_int_equal(f_cuMemcpyHtoD_v2(b.dev, b.chk, m), CUDA_SUCCESS);
  memset(a.host, 0, n);
  memset(b.host, 0, m);

  /* alone: a ring of all 16 chunks, one slab, three rounds */
  atomic_store(&gate, 0);
  assert_int_equal(f_cuLaunchHostFunc(a.s, gate_fn, NULL), CUDA_SUCCESS);
  pl_copy c1 = mk_copy(PAGELOCK_API_cuMemcpyDtoHAsync_v2, HP(a.host), a.dev, n, a.s);
  f_reset_call_counts();
  assert_int_equal(pl_copy_exec(&c1), CUDA_SUCCESS);
  assert_true(c1.flags & PAGELOCK_COPY_STAGED);
  assert_false(c1.flags & PAGELOCK_COPY_FALLBACK);
  assert_int_equal(f_call_count("cuMemHostRegister_v2"), 1);
  assert_int_equal(f_call_count("cuMemcpyDtoHAsync_v2"), 3);
  assert_int_equal(f_call_count("cuLaunchHostFunc"), 3);
  pl_stage_stats s;
  pl_stage_get_stats(&s);
  assert_int_equal(s.pool.bytes, POOL);
  assert_int_equal(s.pool.free_bytes, 0);
  assert_true(bound_ok());

  /* another stream while the whole pool is queued: bounded wait, native */
  pl_copy c2 = mk_copy(PAGELOCK_API_cuMemcpyDtoHAsync_v2, HP(b.host), b.dev, m, b.s);
  uint64_t t0 = pl_now_ns();
  assert_int_equal(pl_copy_exec(&c2), CUDA_SUCCESS);
  uint64_t dt = pl_now_ns() - t0;
  assert_true(c2.flags & PAGELOCK_COPY_FALLBACK);
  assert_false(c2.flags & PAGELOCK_COPY_STAGED);
  assert_true(dt >= (uint64_t)wait_us * 1000);
  assert_int_equal(f_cuStreamSynchronize(b.s), CUDA_SUCCESS);
  assert_int_equal(check_pat(b.host, m, 72), m);
  assert_int_equal(check_byte(a.host, n, 0), n); /* a is still held */
  atomic_store(&gate, 1);
  assert_int_equal(f_cuStreamSynchronize(a.s), CUDA_SUCCESS);
  assert_int_equal(check_pat(a.host, n, 71), n);

  /* copies have mixed: the same download now takes five rounds of half
   * the pool, and leaves the other half to stream b */
  memset(a.host, 0, n);
  memset(b.host, 0, m);
  atomic_store(&gate, 0);
  assert_int_equal(f_cuLaunchHostFunc(a.s, gate_fn, NULL), CUDA_SUCCESS);
  pl_copy c3 = mk_copy(PAGELOCK_API_cuMemcpyDtoHAsync_v2, HP(a.host), a.dev, n, a.s);
  f_reset_call_counts();
  assert_int_equal(pl_copy_exec(&c3), CUDA_SUCCESS);
  assert_int_equal(f_call_count("cuMemcpyDtoHAsync_v2"), 5);
  assert_int_equal(f_call_count("cuLaunchHostFunc"), 5);
  pl_copy c4 = mk_copy(PAGELOCK_API_cuMemcpyDtoHAsync_v2, HP(b.host), b.dev, m, b.s);
  assert_int_equal(pl_copy_exec(&c4), CUDA_SUCCESS);
  assert_true(c4.flags & PAGELOCK_COPY_STAGED);
  assert_false(c4.flags & PAGELOCK_COPY_FALLBACK);
  assert_true(bound_ok());
  assert_int_equal(f_cuStreamSynchronize(b.s), CUDA_SUCCESS);
  assert_int_equal(check_pat(b.host, m, 72), m);
  atomic_store(&gate, 1);
  assert_int_equal(f_cuStreamSynchronize(a.s), CUDA_SUCCESS);
  assert_int_equal(check_pat(a.host, n, 71), n);
  pl_stage_get_stats(&s);
  assert_int_equal(s.fallbacks, 1);
  assert_int_equal(s.pool.free_bytes, s.pool.bytes);
  assert_true(bound_ok());
  bufs_fini(&a);
  bufs_fini(&b);
}

/* Without stream ids (a driver without cuStreamGetId, or failing it)
 * nothing is taken over: a second copy queued behind the first on a held
 * stream takes the other half of the pool, and a third copy, on another
 * stream, finds none, waits (bounded) and passes through.  Bytes exact,
 * every chunk back. */
static void test_d2h_async_no_stream_id(void **state) {
  (void)state;
  const long wait_us = 20000;
  stage_env(POOL, CHUNK, wait_us, "async");
  pl_stage_mixed_for_test();
  assert_int_equal(f_fail("cuStreamGetId", 0, CUDA_ERROR_NOT_SUPPORTED), 0);
  bufs a, b;
  bufs_init(&a);
  bufs_init(&b);
  const size_t n = POOL + 333;
  uint8_t *out[2] = {malloc(n), malloc(n)};
  assert_non_null(out[0]);
  assert_non_null(out[1]);
  fill(a.chk, 2 * n, 95);
  assert_int_equal(f_cuMemcpyHtoD_v2(a.dev, a.chk, 2 * n), CUDA_SUCCESS);
  fill(b.chk, n, 96);
  assert_int_equal(f_cuMemcpyHtoD_v2(b.dev, b.chk, n), CUDA_SUCCESS);
  memset(out[0], 0, n);
  memset(out[1], 0, n);
  memset(b.host, 0, n);

  atomic_store(&gate, 0);
  assert_int_equal(f_cuLaunchHostFunc(a.s, gate_fn, NULL), CUDA_SUCCESS);
  for (int k = 0; k < 2; k++) {
    pl_copy c =
        mk_copy(PAGELOCK_API_cuMemcpyDtoHAsync_v2, HP(out[k]), a.dev + (size_t)k * n, n, a.s);
    assert_int_equal(pl_copy_exec(&c), CUDA_SUCCESS);
    assert_true(c.flags & PAGELOCK_COPY_STAGED);
    assert_false(c.flags & PAGELOCK_COPY_FALLBACK);
  }
  pl_stage_stats s;
  pl_stage_get_stats(&s);
  assert_int_equal(s.pool.bytes, POOL);
  assert_int_equal(s.pool.free_bytes, 0);
  assert_int_equal(s.waits, 0);
  pl_copy c3 = mk_copy(PAGELOCK_API_cuMemcpyDtoHAsync_v2, HP(b.host), b.dev, n, b.s);
  uint64_t t0 = pl_now_ns();
  assert_int_equal(pl_copy_exec(&c3), CUDA_SUCCESS);
  uint64_t dt = pl_now_ns() - t0;
  assert_true(c3.flags & PAGELOCK_COPY_FALLBACK);
  assert_true(dt >= (uint64_t)wait_us * 1000);
  assert_int_equal(f_cuStreamSynchronize(b.s), CUDA_SUCCESS);
  assert_int_equal(check_pat(b.host, n, 96), n);
  assert_int_equal(check_byte(out[0], n, 0), n); /* a is still held */

  atomic_store(&gate, 1);
  assert_int_equal(f_cuStreamSynchronize(a.s), CUDA_SUCCESS);
  assert_memory_equal(out[0], a.chk, n);
  assert_memory_equal(out[1], a.chk + n, n);
  pl_stage_get_stats(&s);
  assert_int_equal(s.pool.free_bytes, s.pool.bytes);
  assert_true(bound_ok());
  f_clear_faults();
  free(out[0]);
  free(out[1]);
  bufs_fini(&a);
  bufs_fini(&b);
}

/* The store policy of uploads: streaming stores for a copy that fits the
 * pool (the copy is what the program waits for), plain stores for one
 * larger than the pool (it recycles chunks: the DMA is). */
static void test_store_policy(void **state) {
  (void)state;
  stage_env(POOL, CHUNK, PATIENT_US, "sync");
  bufs a;
  bufs_init(&a);
  size_t sizes[] = {256 * KB + 5, POOL, POOL + 1, 3 * POOL + 7};
  for (int i = 0; i < 4; i++) {
    size_t n = sizes[i];
    bool want_plain = n > POOL;
    fill(a.host, n, 90 + i);
    pl_stage_stats s0, s1;
    pl_stage_get_stats(&s0);
    assert_int_equal(cuMemcpyHtoDAsync_v2(a.dev, a.host, n, a.s), CUDA_SUCCESS);
    pl_stage_get_stats(&s1);
    assert_int_equal(s1.copies_staged - s0.copies_staged, 1);
    if (want_plain != (s1.copies_plain - s0.copies_plain == 1))
      print_error("%zu bytes: %s stores, expected %s\n", n, want_plain ? "streaming" : "plain",
                  want_plain ? "plain" : "streaming");
    assert_int_equal(s1.copies_plain - s0.copies_plain, want_plain);
    assert_int_equal(f_cuStreamSynchronize(a.s), CUDA_SUCCESS);
    assert_int_equal(f_cuMemcpyDtoH_v2(a.chk, a.dev, n), CUDA_SUCCESS);
    assert_int_equal(check_pat(a.chk, n, 90 + i), n);
  }
  assert_true(bound_ok());
  bufs_fini(&a);
}

/* Opens the gate after a while, from another thread: the caller meanwhile
 * waits inside the engine for a chunk the gated stream holds. */
static void *open_gate_later(void *arg) {
  (void)arg;
  struct timespec ts = {0, 30 * 1000 * 1000};
  nanosleep(&ts, NULL);
  atomic_store(&gate, 1);
  return NULL;
}

/* One upload of n bytes on a.s queued behind the gate, while a POOL-sized
 * upload ahead of it holds every chunk: it finds the device busy with
 * them and waits until the gate opens.  Returns how many uploads were
 * throttled by it. */
static uint64_t busy_upload(bufs *a, size_t n, unsigned seed) {
  atomic_store(&gate, 0);
  assert_int_equal(f_cuLaunchHostFunc(a->s, gate_fn, NULL), CUDA_SUCCESS);
  fill(a->host, POOL, seed);
  assert_int_equal(cuMemcpyHtoDAsync_v2(a->dev, a->host, POOL, a->s), CUDA_SUCCESS);
  pl_stage_stats s0, s1;
  pl_stage_get_stats(&s0);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, open_gate_later, NULL), 0);
  fill(a->host + POOL, n, seed + 1);
  assert_int_equal(cuMemcpyHtoDAsync_v2(a->dev + POOL, a->host + POOL, n, a->s), CUDA_SUCCESS);
  pthread_join(t, NULL);
  pl_stage_get_stats(&s1);
  assert_int_equal(s1.copies_staged - s0.copies_staged, 1);
  assert_true(s1.waits > s0.waits); /* it did find the pool in use */
  assert_int_equal(f_cuStreamSynchronize(a->s), CUDA_SUCCESS);
  assert_int_equal(f_cuMemcpyDtoH_v2(a->chk, a->dev, POOL + n), CUDA_SUCCESS);
  assert_int_equal(check_pat(a->chk, POOL, seed), POOL);
  assert_int_equal(check_pat(a->chk + POOL, n, seed + 1), n);
  assert_true(bound_ok());
  return s1.copies_throttled - s0.copies_throttled;
}

/* Which uploads run with fewer copy threads: those filling chunks with
 * streaming stores that start while the device is still busy with earlier
 * chunks (bound by the DMA), unless PAGELOCK_COPY_THREADS chose the count.
 * Not one that finds the device idle, not one with plain stores (larger
 * than the pool), even one that recycles its own chunks. */
static void test_upload_throttle(void **state) {
  (void)state;
  unsetenv("PAGELOCK_COPY_THREADS");
  stage_env(POOL, CHUNK, PATIENT_US, "sync");
  bufs a;
  bufs_init(&a);
  assert_true(MAXN >= 4 * POOL + 7);
  assert_int_equal(busy_upload(&a, POOL / 2 + 3, 70), 1);
  assert_int_equal(busy_upload(&a, 3 * POOL + 7, 72), 0);
  /* The device idle: every thread helps, to the end. */
  for (int i = 0; i < 2; i++) {
    size_t n = i ? 3 * POOL + 7 : POOL;
    pl_stage_stats s0, s1;
    pl_stage_get_stats(&s0);
    fill(a.host, n, 74u + (unsigned)i);
    assert_int_equal(cuMemcpyHtoDAsync_v2(a.dev, a.host, n, a.s), CUDA_SUCCESS);
    assert_int_equal(f_cuStreamSynchronize(a.s), CUDA_SUCCESS);
    pl_stage_get_stats(&s1);
    assert_int_equal(s1.copies_staged - s0.copies_staged, 1);
    assert_int_equal(s1.copies_throttled - s0.copies_throttled, 0);
    assert_int_equal(f_cuMemcpyDtoH_v2(a.chk, a.dev, n), CUDA_SUCCESS);
    assert_int_equal(check_pat(a.chk, n, 74u + (unsigned)i), n);
  }
  /* The count set by the user holds for every upload. */
  setenv("PAGELOCK_COPY_THREADS", "4", 1);
  stage_env(POOL, CHUNK, PATIENT_US, "sync");
  assert_int_equal(busy_upload(&a, POOL / 2 + 3, 76), 0);
  bufs_fini(&a);
}

/* A job limited to one copy thread never has two inside, and the bytes
 * are the same. */
static void test_job_limit(void **state) {
  (void)state;
  const size_t seg = 4 * MB, nseg = 8;
  char *src = malloc(seg * nseg), *dst = malloc(seg * nseg);
  assert_non_null(src);
  assert_non_null(dst);
  /* One unlimited round to show the threads do crowd in, then several
   * limited ones: whether two would have met is up to the scheduler. */
  for (int round = 0; round < 5; round++) {
    int limited = round > 0;
    fill(src, seg * nseg, 80u + (unsigned)round);
    memset(dst, 0, seg * nseg);
    pl_job j;
    pl_job_open(&j, pl_workers_parallelism());
    if (limited) pl_job_limit(&j, 1);
    /* All segments at once: every sleeping copy thread is woken for them. */
    for (size_t i = 0; i < nseg; i++) pl_job_add(&j, dst + i * seg, src + i * seg, seg, i & 1);
    for (unsigned i = 0; i < nseg; i++) pl_job_wait(&j, i);
    pl_job_close(&j);
    print_message("job %s: at most %u copy threads inside at once\n",
                  limited ? "limited to 1" : "unlimited", j.peak);
    if (limited) assert_true(j.peak <= 1);
    assert_int_equal(check_pat(dst, seg * nseg, 80u + (unsigned)round), seg * nseg);
  }
  free(src);
  free(dst);
}

/* The store policy of downloads: streaming stores from the threshold up
 * (a quarter of the last-level cache; set here to 1 MiB + 5 so the copies
 * stay small), in both modes, and the bytes still exact at odd offsets. */
static void test_download_store_policy(void **state) {
  (void)state;
  /* The derived threshold: a quarter of some cache, never below 4 MiB. */
  assert_false(pl_stage_out_stream(((size_t)4 << 20) - 1));
  assert_true(pl_stage_out_stream((size_t)1 << 40));
  const size_t min = MB + 5;
  pl_stage_set_out_stream_min_for_test(min);
  for (int async_mode = 0; async_mode < 2; async_mode++) {
    stage_env(POOL, CHUNK, PATIENT_US, async_mode ? "async" : "sync");
    bufs b;
    bufs_init(&b);
    size_t sizes[] = {min - 1, min, 3 * min + 4099};
    for (int i = 0; i < 3; i++) {
      size_t n = sizes[i], ho = (size_t)(3 + 2 * i), dof = (size_t)(5 * i + 1);
      pl_stage_stats s0, s1;
      pl_stage_get_stats(&s0);
      uint64_t nt0 = pl_workers_nt_bytes();
      one_d2h(&b, V_ASYNC, n, ho, dof, 40u + (unsigned)i, async_mode);
      uint64_t nt = pl_workers_nt_bytes() - nt0;
      pl_stage_get_stats(&s1);
      assert_int_equal(s1.copies_staged - s0.copies_staged, 1);
      if (nt != (n >= min ? n : 0))
        print_error("%s download of %zu bytes: %llu bytes with streaming stores\n",
                    async_mode ? "async" : "sync", n, (unsigned long long)nt);
      assert_int_equal(nt, n >= min ? n : 0);
    }
    bufs_fini(&b);
  }
  pl_stage_set_out_stream_min_for_test(0);
}

/* ---- failures ------------------------------------------------------------------ */

/* Pinned memory refused: the copy is still right, through the native call,
 * with its result; the context is not asked again. */
static void test_pool_alloc_failure(void **state) {
  (void)state;
  bufs b;
  bufs_init(&b);
  const char *fails[] = {"cuMemHostRegister_v2", "cuEventCreate"};
  for (int f = 0; f < 2; f++) {
    stage_env(POOL, CHUNK, PATIENT_US, "sync");
    assert_int_equal(f_fail(fails[f], 0, CUDA_ERROR_OUT_OF_MEMORY), 0);
    f_reset_call_counts();
    size_t n = 300 * KB + 1;
    fill(b.host, n, 70);
    pl_copy c = mk_copy(PAGELOCK_API_cuMemcpyHtoDAsync_v2, b.dev, HP(b.host), n, b.s);
    assert_int_equal(pl_copy_exec(&c), CUDA_SUCCESS);
    assert_false(c.flags & (PAGELOCK_COPY_STAGED | PAGELOCK_COPY_FALLBACK));
    assert_int_equal(f_cuStreamSynchronize(b.s), CUDA_SUCCESS);
    assert_int_equal(f_cuMemcpyDtoH_v2(b.chk, b.dev, n), CUDA_SUCCESS);
    assert_int_equal(check_pat(b.chk, n, 70), n);
    memset(b.host, 0, n);
    c = mk_copy(PAGELOCK_API_cuMemcpyDtoH_v2, HP(b.host), b.dev, n, NULL);
    assert_int_equal(pl_copy_exec(&c), CUDA_SUCCESS);
    assert_false(c.flags & PAGELOCK_COPY_STAGED);
    assert_int_equal(check_pat(b.host, n, 70), n);
    /* disabled for the context: asked once, not once per copy */
    assert_int_equal(f_call_count(fails[f]), 1);
    struct fakecuda_stats fs;
    f_get_stats(&fs);
    assert_int_equal(fs.host_alloc_bytes_live, 0);
    pl_stage_stats s;
    pl_stage_get_stats(&s);
    assert_int_equal(s.pool.bytes, 0);
    assert_int_equal(s.bytes_staged, 0);
  }
  /* Cleared and reset: staging works again. */
  stage_env(POOL, CHUNK, PATIENT_US, "sync");
  one_h2d(&b, V_ASYNC, 300 * KB, 1, 1, 71);
  bufs_fini(&b);
}

/* A chunk's DMA failing: first chunk -> the engine declines and the native
 * call reports; a later chunk -> the rest goes native, bytes exact. */
static void test_dma_failure(void **state) {
  (void)state;
  bufs b;
  bufs_init(&b);
  const char *names[] = {"cuMemcpyHtoDAsync_v2", "cuMemcpyDtoHAsync_v2"};
  for (int dir = 0; dir < 2; dir++) {
    for (int m = 0; m < 2; m++) {
      /* An asynchronous download makes one DMA per round of its ring (half
       * the pool once copies mix, one slab): three rounds and a bit. */
      size_t n = dir == 1 && m == 1 ? 3 * (POOL / 2) + 100 : 4 * CHUNK + 100;
      stage_env(POOL, CHUNK, PATIENT_US, m ? "async" : "sync");
      pl_stage_mixed_for_test();
      /* the third call is a chunk in the middle of the copy */
      assert_int_equal(f_fail(names[dir], 3, CUDA_ERROR_LAUNCH_FAILED), 0);
      fill(b.chk, n, 80);
      memset(b.host, 0, n);
      pl_copy c;
      if (dir == 0) {
        fill(b.host, n, 80);
        c = mk_copy(PAGELOCK_API_cuMemcpyHtoDAsync_v2, b.dev, HP(b.host), n, b.s);
      } else {
        assert_int_equal(f_cuMemcpyHtoD_v2(b.dev, b.chk, n), CUDA_SUCCESS);
        c = mk_copy(PAGELOCK_API_cuMemcpyDtoHAsync_v2, HP(b.host), b.dev, n, b.s);
      }
      assert_int_equal(pl_copy_exec(&c), CUDA_SUCCESS); /* unshimmed: one call, no failure */
      assert_true(c.flags & PAGELOCK_COPY_STAGED);
      assert_true(c.flags & PAGELOCK_COPY_FALLBACK);
      assert_int_equal(f_cuStreamSynchronize(b.s), CUDA_SUCCESS);
      if (dir == 0) {
        memset(b.chk, 0, n);
        assert_int_equal(f_cuMemcpyDtoH_v2(b.chk, b.dev, n), CUDA_SUCCESS);
        assert_int_equal(check_pat(b.chk, n, 80), n);
      } else {
        assert_int_equal(check_pat(b.host, n, 80), n);
      }

      /* failing every time: the program sees the driver's own error */
      f_clear_faults();
      assert_int_equal(f_fail(names[dir], 0, CUDA_ERROR_INVALID_VALUE), 0);
      c = dir == 0 ? mk_copy(PAGELOCK_API_cuMemcpyHtoDAsync_v2, b.dev, HP(b.host), n, b.s)
                   : mk_copy(PAGELOCK_API_cuMemcpyDtoHAsync_v2, HP(b.host), b.dev, n, b.s);
      assert_int_equal(pl_copy_exec(&c), CUDA_ERROR_INVALID_VALUE);
      assert_false(c.flags & PAGELOCK_COPY_STAGED);
      f_clear_faults();
      assert_int_equal(f_cuStreamSynchronize(b.s), CUDA_SUCCESS);
      assert_true(bound_ok());
      /* Every chunk came back, including the ones filled ahead of the
       * failed DMA and never sent. */
      pl_stage_stats st;
      pl_stage_get_stats(&st);
      assert_true(st.pool.bytes > 0);
      assert_int_equal(st.pool.free_bytes, st.pool.bytes);
    }
  }
  /* The copy-out host function cannot be queued: its round goes native.
   * One host function serves a round of the ring (half the pool), so the
   * second one is in the middle of a copy of a pool and a half. */
  size_t n = POOL + POOL / 2 + 100;
  stage_env(POOL, CHUNK, PATIENT_US, "async");
  pl_stage_mixed_for_test();
  assert_int_equal(f_fail("cuLaunchHostFunc", 2, CUDA_ERROR_OUT_OF_MEMORY), 0);
  fill(b.chk, n, 81);
  assert_int_equal(f_cuMemcpyHtoD_v2(b.dev, b.chk, n), CUDA_SUCCESS);
  memset(b.host, 0, n);
  pl_copy c = mk_copy(PAGELOCK_API_cuMemcpyDtoHAsync_v2, HP(b.host), b.dev, n, b.s);
  assert_int_equal(pl_copy_exec(&c), CUDA_SUCCESS);
  assert_true(c.flags & PAGELOCK_COPY_FALLBACK);
  assert_true(c.flags & PAGELOCK_COPY_STAGED);
  assert_int_equal(f_cuStreamSynchronize(b.s), CUDA_SUCCESS);
  assert_int_equal(check_pat(b.host, n, 81), n);
  /* the failed round's chunks came back once their DMAs were done */
  pl_stage_stats st;
  pl_stage_get_stats(&st);
  assert_int_equal(st.pool.free_bytes, st.pool.bytes);
  f_clear_faults();
  bufs_fini(&b);
}

/* A device range the driver would refuse: the same result as the native
 * call, nothing enqueued by the engine, no byte written. */
static void test_invalid_device(void **state) {
  (void)state;
  stage_env(POOL, CHUNK, PATIENT_US, "sync");
  bufs b;
  bufs_init(&b);
  size_t alloc = MAXN + 2 * GUARD;
  struct {
    CUdeviceptr d;
    size_t n;
  } cases[] = {
      {b.dev + alloc - 100, 1000},     /* runs past the allocation's end */
      {(CUdeviceptr)0x1000, 200 * KB}, /* not device memory at all */
      {b.dev + 16, alloc},             /* 16 bytes too long */
  };
  for (unsigned i = 0; i < 3; i++) {
    memset(b.host, 0xEE, cases[i].n);
    CUresult want_h = f_cuMemcpyHtoDAsync_v2(cases[i].d, b.host, cases[i].n, b.s);
    CUresult want_d = f_cuMemcpyDtoHAsync_v2(b.host, cases[i].d, cases[i].n, b.s);
    assert_int_not_equal(want_h, CUDA_SUCCESS);
    assert_int_not_equal(want_d, CUDA_SUCCESS);
    f_reset_call_counts();
    assert_int_equal(cuMemcpyHtoDAsync_v2(cases[i].d, b.host, cases[i].n, b.s), want_h);
    assert_int_equal(cuMemcpyDtoHAsync_v2(b.host, cases[i].d, cases[i].n, b.s), want_d);
    assert_int_equal(cuMemcpyDtoH_v2(b.host, cases[i].d, cases[i].n),
                     f_cuMemcpyDtoH_v2(b.host, cases[i].d, cases[i].n));
    assert_int_equal(f_call_count("cuMemcpyHtoDAsync_v2"), 1); /* the native call only */
    assert_int_equal(f_call_count("cuMemcpyDtoHAsync_v2"), 1);
    assert_int_equal(f_call_count("cuEventRecord"), 0);
    assert_int_equal(check_byte(b.host, cases[i].n, 0xEE), cases[i].n);
  }
  assert_int_equal(f_cuStreamSynchronize(b.s), CUDA_SUCCESS);
  bufs_fini(&b);
}

/* A capturing stream is declined untouched: graphs are the program's. */
static void test_capture(void **state) {
  (void)state;
  stage_env(POOL, CHUNK, PATIENT_US, "async");
  bufs b;
  bufs_init(&b);
  assert_int_equal(f_cuStreamBeginCapture_v2(b.s, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  f_reset_call_counts();
  int apis[] = {PAGELOCK_API_cuMemcpyHtoDAsync_v2, PAGELOCK_API_cuMemcpyDtoHAsync_v2};
  for (int i = 0; i < 2; i++) {
    pl_copy c = i == 0 ? mk_copy(apis[i], b.dev, HP(b.host), MB, b.s)
                       : mk_copy(apis[i], HP(b.host), b.dev, MB, b.s);
    c.src_mem = c.dst_mem = PAGELOCK_MEM_UNKNOWN;
    c.dir = i == 0 ? PAGELOCK_DIR_H2D : PAGELOCK_DIR_D2H;
    CUresult r = CUDA_ERROR_UNKNOWN;
    assert_false(pl_stage_copy(&c, &r));
    assert_true(c.flags & PAGELOCK_COPY_CAPTURE);
    assert_false(c.flags & PAGELOCK_COPY_STAGED);
  }
  assert_int_equal(f_call_count("cuMemcpyHtoDAsync_v2"), 0);
  assert_int_equal(f_call_count("cuMemcpyDtoHAsync_v2"), 0);
  assert_int_equal(f_call_count("cuEventRecord"), 0);
  assert_int_equal(f_call_count("cuLaunchHostFunc"), 0);
  assert_int_equal(f_call_count("cuMemHostRegister_v2"), 0);
  CUgraph g = NULL;
  assert_int_equal(f_cuStreamEndCapture(b.s, &g), CUDA_SUCCESS);
  if (g) assert_int_equal(f_cuGraphDestroy(g), CUDA_SUCCESS);

  /* No current context: declined as well. */
  assert_int_equal(f_cuCtxSetCurrent(NULL), CUDA_SUCCESS);
  pl_copy c = mk_copy(PAGELOCK_API_cuMemcpyHtoD_v2, b.dev, HP(b.host), MB, NULL);
  CUresult r;
  assert_false(pl_stage_copy(&c, &r));
  assert_int_equal(f_cuCtxSetCurrent(g_ctx), CUDA_SUCCESS);
  bufs_fini(&b);
}

/* A forked child cannot use CUDA: the engine must decline there. */
static void test_fork(void **state) {
  (void)state;
  stage_env(POOL, CHUNK, PATIENT_US, "sync");
  bufs b;
  bufs_init(&b);
  one_h2d(&b, V_ASYNC, 200 * KB, 0, 0, 90); /* the engine is warm */
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    pl_copy c = mk_copy(PAGELOCK_API_cuMemcpyHtoDAsync_v2, b.dev, HP(b.host), 200 * KB, b.s);
    c.src_mem = PAGELOCK_MEM_PAGEABLE;
    CUresult r;
    _exit(pl_stage_copy(&c, &r) ? 1 : 0);
  }
  int st = 0;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
  bufs_fini(&b);
}

/* Exit with copies in flight and copy threads asleep: no crash, no hang.
 * Runs this binary again in a mode that does exactly that. */
static void test_exit_in_flight(void **state) {
  (void)state;
  char *argv[] = {(char *)"/proc/self/exe", (char *)"--exit-in-flight", NULL};
  extern char **environ;
  pid_t pid;
  assert_int_equal(posix_spawn(&pid, "/proc/self/exe", NULL, NULL, argv, environ), 0);
  int st = 0;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  if (!WIFEXITED(st))
    print_error("child died with signal %d\n", WIFSIGNALED(st) ? WTERMSIG(st) : -1);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 7);
}

static int exit_in_flight(void) {
  alarm(30); /* a hang becomes a failure, not a stuck test */
  if (load_driver() != 0) return 2;
  setenv("PAGELOCK_MODE", "stage", 1);
  setenv("PAGELOCK_STAGE_MIN", "0", 1);
  setenv("PAGELOCK_POOL_SIZE", "4M", 1);
  setenv("PAGELOCK_CHUNK_SIZE", "256K", 1);
  setenv("PAGELOCK_D2H", "async", 1);
  pl_config_reset_for_test();
  f_set_bandwidth(0.1, 0.1); /* slow "hardware": the copies are still running at exit */
  CUstream s;
  CUdeviceptr d;
  size_t n = 3 * MB;
  char *h = malloc(n), *o = malloc(n);
  if (f_cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) || f_cuMemAlloc_v2(&d, n)) return 3;
  memset(h, 1, n);
  if (cuMemcpyHtoDAsync_v2(d, h, n, s) != CUDA_SUCCESS) return 4;
  if (cuMemcpyDtoHAsync_v2(o, d, n, s) != CUDA_SUCCESS) return 5;
  exit(7);
}

/* The robustness suite's staged stress (tests/robust/run.sh): the worker
 * threads of test_threads_* for `seconds`, alternating the download
 * mode each round of 5 s, with every copy's bytes and the pool bound
 * checked.  Built under TSan there, so every race it reaches is reported.
 * Prints "stress: N copies, M failed" and exits 1 on any failure. */
static int stress(int seconds) {
  alarm((unsigned)seconds + 120); /* a hang becomes a failure */
  time_t end = mono_sec() + seconds;
  long rounds = 0;
  while (mono_sec() < end) {
    stage_env(POOL, CHUNK, 2000, rounds++ % 2 ? "async" : "sync");
    t_deadline = mono_sec() + 5 < end ? mono_sec() + 5 : end;
    pthread_t t[NTHREADS];
    for (unsigned i = 0; i < NTHREADS; i++)
      if (pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)i) != 0) return 3;
    for (unsigned i = 0; i < NTHREADS; i++) pthread_join(t[i], NULL);
  }
  pl_stage_stats st;
  pl_stage_get_stats(&st);
  int failed = atomic_load(&t_fail) + atomic_load(&t_bound);
  printf(
      "stress: %ld copies, %d failed, %.1f MB staged, %llu fallbacks, pool high water %llu KB of %llu\n",
      atomic_load(&t_copies), failed, st.bytes_staged / 1e6, (unsigned long long)st.fallbacks,
      (unsigned long long)st.pool.high_water >> 10, (unsigned long long)POOL >> 10);
  return failed == 0 && st.bytes_staged > 0 && st.pool.high_water <= POOL ? 0 : 1;
}

/* Two contexts share one bound: the second takes over idle chunks of the
 * first (never more pinned memory in all), and a stream of one context is
 * left to the native call while the other is current. */
static void test_two_contexts(void **state) {
  (void)state;
  stage_env(POOL, CHUNK, PATIENT_US, "sync");
  bufs a;
  bufs_init(&a);
  /* With A's stream held, a copy of the pool's size makes A's pool grow
   * to the whole bound. */
  atomic_store(&gate, 0);
  assert_int_equal(f_cuLaunchHostFunc(a.s, gate_fn, NULL), CUDA_SUCCESS);
  assert_int_equal(cuMemcpyHtoDAsync_v2(a.dev, a.host, POOL, a.s), CUDA_SUCCESS);
  atomic_store(&gate, 1);
  assert_int_equal(f_cuStreamSynchronize(a.s), CUDA_SUCCESS);
  pl_stage_stats s;
  pl_stage_get_stats(&s);
  assert_int_equal(s.pool.bytes, POOL);

  CUcontext b_ctx;
  assert_int_equal(f_cuCtxCreate_v2(&b_ctx, 0, 0), CUDA_SUCCESS); /* current now */
  bufs b;
  bufs_init(&b);
  for (unsigned i = 0; i < 3; i++) {
    one_h2d(&b, V_ASYNC, 3 * CHUNK + 7, 1, 3, 101 + i);
    one_d2h(&b, V_SYNC, 2 * CHUNK + 5, 3, 1, 104 + i, false);
  }
  pl_stage_get_stats(&s);
  assert_int_equal(s.pool.bytes, POOL); /* moved, not added */

  /* B's stream while A is current: declined before anything is queued. */
  assert_int_equal(f_cuCtxSetCurrent(g_ctx), CUDA_SUCCESS);
  pl_copy c = mk_copy(PAGELOCK_API_cuMemcpyHtoDAsync_v2, a.dev, HP(a.host), 200 * KB, b.s);
  CUresult r;
  f_reset_call_counts();
  assert_false(pl_stage_copy(&c, &r));
  assert_int_equal(f_call_count("cuMemcpyHtoDAsync_v2"), 0);
  /* and A, which lost chunks, still stages */
  one_h2d(&a, V_ASYNC, 2 * POOL, 5, 5, 107);

  assert_int_equal(f_cuCtxSetCurrent(b_ctx), CUDA_SUCCESS);
  bufs_fini(&b);
  assert_int_equal(f_cuCtxSynchronize(), CUDA_SUCCESS);
  assert_int_equal(f_cuCtxSetCurrent(g_ctx), CUDA_SUCCESS);
  assert_int_equal(f_cuCtxSynchronize(), CUDA_SUCCESS);
  pl_stage_reset_for_test(); /* free B's chunks while B exists */
  assert_int_equal(f_cuCtxDestroy_v2(b_ctx), CUDA_SUCCESS);
  assert_int_equal(f_cuCtxSetCurrent(g_ctx), CUDA_SUCCESS);
  bufs_fini(&a);
  assert_true(bound_ok());
}

/* A context whose pool took over chunks ends (cuCtxDestroy, as
 * hook_ctx.c sees it): its events died with it, so the shim touches none
 * of them (fakecuda aborts on such a call), and the chunks, still
 * page-locked by the first context's slab, go home to its pool. */
static void test_context_ends(void **state) {
  (void)state;
  stage_env(POOL, CHUNK, PATIENT_US, "sync");
  bufs a;
  bufs_init(&a);
  one_h2d(&a, V_ASYNC, POOL, 0, 0, 121); /* A's pool: the whole bound */
  CUcontext b_ctx;
  assert_int_equal(f_cuCtxCreate_v2(&b_ctx, 0, 0), CUDA_SUCCESS);
  bufs b;
  bufs_init(&b);
  one_h2d(&b, V_ASYNC, 3 * CHUNK + 7, 1, 3, 122); /* takes chunks of A's */
  one_d2h(&b, V_SYNC, 2 * CHUNK + 5, 3, 1, 123, false);
  bufs_fini(&b);
  assert_int_equal(f_cuCtxSynchronize(), CUDA_SUCCESS);
  pl_stage_stats s;
  pl_stage_get_stats(&s);
  assert_int_equal(s.pool.bytes, POOL);
  uint64_t a_free = s.pool.free_bytes;

  pl_stage_note_ctx_ending(b_ctx);
  assert_int_equal(f_cuCtxDestroy_v2(b_ctx), CUDA_SUCCESS);
  pl_stage_note_ctx_gone(b_ctx);
  assert_int_equal(f_cuCtxSetCurrent(g_ctx), CUDA_SUCCESS);
  pl_stage_get_stats(&s);
  assert_int_equal(s.pool.bytes, POOL); /* home again, nothing freed */
  assert_int_equal(s.pool.free_bytes, a_free);
  /* A copy of the bound's size finds every chunk in A's pool: no wait. */
  uint64_t waits = s.waits;
  one_h2d(&a, V_ASYNC, POOL, 0, 0, 126);
  pl_stage_get_stats(&s);
  assert_int_equal(s.waits, waits);
  one_h2d(&a, V_ASYNC, 2 * POOL, 5, 5, 124);
  one_d2h(&a, V_ASYNC, POOL + 9, 2, 7, 125, false);
  pl_stage_get_stats(&s);
  assert_int_equal(s.fallbacks, 0);
  bufs_fini(&a);
  assert_true(bound_ok());
}

/* ---- the COUNTERS record ---------------------------------------------------------- */

static void test_counters_record(void **state) {
  (void)state;
  char path[512];
  snprintf(path, sizeof path, "%s/counters.trace", tmpdir);
  setenv("PAGELOCK_OUTPUT", path, 1);
  stage_env(POOL, CHUNK, PATIENT_US, "sync");
  pl_trace_reset_for_test(); /* a fresh file */
  bufs b;
  bufs_init(&b);
  one_h2d(&b, V_ASYNC, 700 * KB, 0, 0, 95);
  one_d2h(&b, V_SYNC, 300 * KB, 0, 0, 96, false);
  bufs_fini(&b);
  pl_exit_trace();
  pl_trace_reset_for_test(); /* close it */
  plr_reader r;
  assert_int_equal(plr_open(&r, path), PLR_OPEN_OK);
  plr_record rec;
  int counters = 0, staged = 0;
  while (plr_next(&r, &rec)) {
    if (rec.type == PAGELOCK_REC_COPY && (rec.u.copy->flags & PAGELOCK_COPY_STAGED)) staged++;
    if (rec.type != PAGELOCK_REC_COUNTERS) continue;
    counters++;
    assert_int_equal(rec.u.counters->bytes_staged, 1000 * KB);
    assert_int_equal(rec.u.counters->pool_bytes, POOL);
    assert_true(rec.u.counters->pool_high_water > 0);
    assert_true(rec.u.counters->pool_high_water <= POOL);
  }
  plr_close(&r);
  assert_int_equal(counters, 1);
  assert_int_equal(staged, 2);
  snprintf(path, sizeof path, "%s/all.trace", tmpdir);
  setenv("PAGELOCK_OUTPUT", path, 1);
  pl_config_reset_for_test();
}

/* Writes text to path: a /proc/loadavg look-alike. */
static void write_loadavg(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

/* The kernel's load, read: the shim's own runnable threads are not the
 * program's, garbage and a missing file are no answer, and the answer is
 * kept for a while (one read per 10 ms at most). */
static void test_cpuload(void **state) {
  (void)state;
  char path[512];
  pl_cpuload l;
  snprintf(path, sizeof path, "%s/loadavg", tmpdir);
  write_loadavg(path, "15.87 9.12 4.30 17/312 4711\n");
  pl_cpuload_set_for_test(path, 16);
  assert_int_equal(pl_cpuload_idle(1, PL_CPULOAD_EVERY_NS, &l), 0);
  assert_int_equal(l.others, 16);
  assert_int_equal(l.cpus, 16);
  /* Within 10 ms the figures are the last ones, whatever the file says. */
  write_loadavg(path, "0.10 0.20 0.30 1/312 4711\n");
  assert_int_equal(pl_cpuload_idle(1, PL_CPULOAD_EVERY_NS, &l), 0);
  pl_cpuload_set_for_test(path, 16);
  assert_int_equal(pl_cpuload_idle(1, PL_CPULOAD_EVERY_NS, &l), 16);
  assert_int_equal(l.others, 0);
  write_loadavg(path, "0.10 0.20 0.30 9/312 4711\n");
  pl_cpuload_set_for_test(path, 16);
  assert_int_equal(pl_cpuload_idle(4, PL_CPULOAD_EVERY_NS, NULL), 11);
  static const char *const bad[] = {"", "0.1 0.2 0.3 /312 4711\n", "0.1 0.2 0.3 x/312\n",
                                    "0.1 0.2 0.3 12", "0.1 0.2\n"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    write_loadavg(path, bad[i]);
    pl_cpuload_set_for_test(path, 16);
    assert_int_equal(pl_cpuload_idle(1, PL_CPULOAD_EVERY_NS, &l), UINT_MAX);
  }
  snprintf(path, sizeof path, "%s/no-such-loadavg", tmpdir);
  pl_cpuload_set_for_test(path, 16);
  errno = 4242; /* asked inside a copy hook: the program's errno stays */
  assert_int_equal(pl_cpuload_idle(1, PL_CPULOAD_EVERY_NS, NULL), UINT_MAX);
  assert_int_equal(errno, 4242);
  /* The real one: some answer, and this process's mask. */
  pl_cpuload_set_for_test(NULL, 0);
  assert_int_not_equal(pl_cpuload_idle(1, PL_CPULOAD_EVERY_NS, &l), UINT_MAX);
  assert_true(l.cpus >= 1);
}

/* Staged copies of 4 MiB or more that start with fewer idle CPUs than
 * copy threads are counted, the bytes stay exact, and the trace gets one
 * note saying how many and why; smaller copies are not asked about. */
static void test_crowded(void **state) {
  (void)state;
  char path[512], load[512];
  snprintf(path, sizeof path, "%s/crowded.trace", tmpdir);
  snprintf(load, sizeof load, "%s/loadavg", tmpdir);
  setenv("PAGELOCK_OUTPUT", path, 1);
  stage_env(POOL, CHUNK, PATIENT_US, "sync");
  pl_trace_reset_for_test();
  bufs b;
  bufs_init(&b);
  /* Idle: 1 runnable (the caller) on 16 CPUs. */
  write_loadavg(load, "0.00 0.01 0.05 1/300 4711\n");
  pl_cpuload_set_for_test(load, 16);
  one_h2d(&b, V_ASYNC, 4 * MB, 0, 0, 81);
  pl_stage_stats s;
  pl_stage_get_stats(&s);
  assert_int_equal(s.copies_sized, 1);
  assert_int_equal(s.copies_crowded, 0);
  /* Sixteen spinning threads besides the caller and the copy threads. */
  write_loadavg(load, "16.00 9.00 4.00 21/300 4711\n");
  pl_cpuload_set_for_test(load, 16);
  one_h2d(&b, V_SYNC, 4 * MB + 5, 3, 1, 82);
  one_d2h(&b, V_ASYNC, 5 * MB, 0, 0, 83, false);
  one_h2d(&b, V_ASYNC, 4 * MB - 1, 0, 0, 84);
  pl_stage_get_stats(&s);
  assert_int_equal(s.copies_sized, 3);
  assert_int_equal(s.copies_crowded, 2);
  assert_int_equal(s.bytes_crowded, 9 * MB + 5);
  assert_int_equal(s.crowded_cpus, 16);
  assert_true(s.crowded_others >= 16 && s.crowded_others <= 20);
  assert_int_equal(s.crowded_threads, 4); /* PAGELOCK_COPY_THREADS, main() */
  bufs_fini(&b);
  pl_exit_trace();
  pl_trace_reset_for_test();
  pl_cpuload_set_for_test(NULL, 0);
  plr_reader r;
  assert_int_equal(plr_open(&r, path), PLR_OPEN_OK);
  plr_record rec;
  int notes = 0;
  while (plr_next(&r, &rec)) {
    if (rec.type != PAGELOCK_REC_NOTE || !strstr(rec.str1, "idle CPUs")) continue;
    notes++;
    assert_non_null(strstr(rec.str1, "2 of 3 staged copies of 4 MiB or more (9.0 of 13.0 MiB)"));
    assert_non_null(strstr(rec.str1, "their 4 copy threads"));
    assert_non_null(strstr(rec.str1, "on the 16 CPUs"));
    assert_non_null(strstr(rec.str1, "GOMP_SPINCOUNT"));
    assert_non_null(strstr(rec.str1, "OMP_WAIT_POLICY=passive frees them")); /* whole, not cut */
  }
  plr_close(&r);
  assert_int_equal(notes, 1);
  snprintf(path, sizeof path, "%s/all.trace", tmpdir);
  setenv("PAGELOCK_OUTPUT", path, 1);
  pl_config_reset_for_test();
}

/* How many copy threads a staged copy gets: the base count (half the
 * CPUs, at most 8) unless it is wide (4 MiB or more, larger than the pool)
 * and finds more CPUs idle, then one per idle CPU up to three quarters of
 * them and 12; a count the user set holds for every copy. */
static void test_stage_threads(void **state) {
  (void)state;
  unsetenv("PAGELOCK_COPY_THREADS");
  pl_config_reset_for_test();
  pl_workers_set_cpus_for_test(16);
  assert_int_equal(pl_workers_base(), 8);
  assert_int_equal(pl_workers_parallelism(), 12);
  assert_int_equal(pl_stage_threads(false, 16), 8);      /* below 4 MiB: not asked */
  assert_int_equal(pl_stage_threads(true, UINT_MAX), 8); /* the load unknown */
  assert_int_equal(pl_stage_threads(true, 0), 8);        /* crowded: no fewer than before */
  assert_int_equal(pl_stage_threads(true, 8), 8);
  assert_int_equal(pl_stage_threads(true, 10), 10);
  assert_int_equal(pl_stage_threads(true, 16), 12);
  pl_workers_set_cpus_for_test(64);
  assert_int_equal(pl_stage_threads(true, 64), 12);
  assert_int_equal(pl_stage_threads(false, 64), 8);
  pl_workers_set_cpus_for_test(6);
  assert_int_equal(pl_stage_threads(true, 6), 4);
  assert_int_equal(pl_stage_threads(true, 2), 3);
  pl_workers_set_cpus_for_test(2);
  assert_int_equal(pl_stage_threads(true, 2), 1); /* the caller alone */
  setenv("PAGELOCK_COPY_THREADS", "4", 1);
  pl_config_reset_for_test();
  pl_workers_set_cpus_for_test(16);
  assert_int_equal(pl_stage_threads(true, 16), 4);
  assert_int_equal(pl_stage_threads(false, 16), 4);
  pl_workers_set_cpus_for_test(0);
}

/* End to end over fakecuda: an upload and a download of 4 MiB or more,
 * larger than the pool, on idle CPUs get the wider count; a crowded one,
 * a smaller one and one that fits the pool the base count; the bytes stay
 * exact whichever count copied them. */
static void test_wide_copies(void **state) {
  (void)state;
  char load[512];
  snprintf(load, sizeof load, "%s/loadavg.wide", tmpdir);
  unsetenv("PAGELOCK_COPY_THREADS");
  stage_env(POOL, CHUNK, PATIENT_US, "sync");
  pl_workers_set_cpus_for_test(16);
  bufs b;
  bufs_init(&b);
  write_loadavg(load, "0.00 0.01 0.05 1/300 4711\n");
  pl_cpuload_set_for_test(load, 16);
  pl_stage_stats s0, s;
  pl_stage_get_stats(&s0);
  one_h2d(&b, V_SYNC, 4 * MB + 5, 3, 1, 91);
  one_d2h(&b, V_SYNC, 5 * MB, 1, 0, 92, false);
  one_h2d(&b, V_ASYNC, 4 * MB - 1, 0, 0, 93);
  pl_stage_get_stats(&s);
  assert_int_equal(s.copies_wide - s0.copies_wide, 2);
  assert_int_equal(s.widest, 12);
  assert_int_equal(s.copies_crowded - s0.copies_crowded, 0);
  /* Every CPU taken: the base count, and counted as crowded. */
  write_loadavg(load, "16.00 9.00 4.00 21/300 4711\n");
  pl_cpuload_set_for_test(load, 16);
  pl_stage_get_stats(&s0);
  one_h2d(&b, V_SYNC, 5 * MB, 0, 0, 94);
  pl_stage_get_stats(&s);
  assert_int_equal(s.copies_wide - s0.copies_wide, 0);
  assert_int_equal(s.copies_crowded - s0.copies_crowded, 1);
  assert_int_equal(s.crowded_threads, 8);
  /* Idle again, but the copy fits the pool: it runs ahead of the DMA. */
  write_loadavg(load, "0.00 0.01 0.05 1/300 4711\n");
  pl_cpuload_set_for_test(load, 16);
  stage_env(8 * MB, CHUNK, PATIENT_US, "sync");
  pl_stage_get_stats(&s0);
  one_h2d(&b, V_ASYNC, 5 * MB, 0, 0, 95);
  one_d2h(&b, V_SYNC, 4 * MB, 0, 0, 96, false);
  pl_stage_get_stats(&s);
  assert_int_equal(s.copies_staged - s0.copies_staged, 2);
  assert_int_equal(s.copies_wide - s0.copies_wide, 0);
  bufs_fini(&b);
  pl_cpuload_set_for_test(NULL, 0);
  pl_workers_set_cpus_for_test(0);
  setenv("PAGELOCK_COPY_THREADS", "4", 1);
  stage_env(POOL, CHUNK, PATIENT_US, "sync");
}

/* The load file test_widen_midway's copy finds idle once the gate opens. */
static char widen_load[512];

static void *idle_then_open_gate(void *arg) {
  (void)arg;
  struct timespec ts = {0, 10 * 1000 * 1000};
  nanosleep(&ts, NULL);
  write_loadavg(widen_load, "0.00 0.01 0.05 1/300 4711\n");
  nanosleep(&ts, NULL);
  atomic_store(&gate, 1);
  return NULL;
}

/* A wide copy that starts with every CPU taken (a program's threads still
 * spinning after a parallel operation) takes more copy threads once CPUs
 * are idle: it asks again as it takes chunks, at most once a millisecond.
 * Here it starts behind a gated stream, fills the pool, waits for chunks
 * while the load turns idle, and goes on wider; the bytes stay exact. */
static void test_widen_midway(void **state) {
  (void)state;
  unsetenv("PAGELOCK_COPY_THREADS");
  stage_env(POOL, CHUNK, PATIENT_US, "sync");
  pl_workers_set_cpus_for_test(16);
  snprintf(widen_load, sizeof widen_load, "%s/loadavg.midway", tmpdir);
  write_loadavg(widen_load, "16.00 9.00 4.00 21/300 4711\n");
  pl_cpuload_set_for_test(widen_load, 16);
  bufs b;
  bufs_init(&b);
  const size_t n = 5 * MB;
  fill(b.host, n, 97);
  atomic_store(&gate, 0);
  assert_int_equal(f_cuLaunchHostFunc(b.s, gate_fn, NULL), CUDA_SUCCESS);
  pl_stage_stats s0, s;
  pl_stage_get_stats(&s0);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, idle_then_open_gate, NULL), 0);
  assert_int_equal(cuMemcpyHtoDAsync_v2(b.dev, b.host, n, b.s), CUDA_SUCCESS);
  pthread_join(t, NULL);
  pl_stage_get_stats(&s);
  assert_int_equal(s.copies_staged - s0.copies_staged, 1);
  assert_int_equal(s.copies_crowded - s0.copies_crowded, 1); /* as it started */
  assert_int_equal(s.copies_wide - s0.copies_wide, 1);       /* as it went on */
  assert_true(s.waits > s0.waits);
  assert_int_equal(f_cuStreamSynchronize(b.s), CUDA_SUCCESS);
  assert_int_equal(f_cuMemcpyDtoH_v2(b.chk, b.dev, n), CUDA_SUCCESS);
  assert_int_equal(check_pat(b.chk, n, 97), n);
  assert_true(bound_ok());
  bufs_fini(&b);
  pl_cpuload_set_for_test(NULL, 0);
  pl_workers_set_cpus_for_test(0);
  setenv("PAGELOCK_COPY_THREADS", "4", 1);
  stage_env(POOL, CHUNK, PATIENT_US, "sync");
}

int main(int argc, char **argv) {
  /* Engine warnings are expected here (injected failures); keep the
   * output to cmocka's. */
  setenv("PAGELOCK_LOG", "error", 1);
  /* More copy threads than a small CI machine has CPUs: the pool's
   * hand-off must be right with several helpers on every job. */
  setenv("PAGELOCK_COPY_THREADS", "4", 1);
  if (argc > 1 && strcmp(argv[1], "--exit-in-flight") == 0) return exit_in_flight();
  snprintf(tmpdir, sizeof tmpdir, "%s/pagelock-stage.XXXXXX",
           getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  if (mkdtemp(tmpdir) == NULL) return 2;
  char path[512];
  snprintf(path, sizeof path, "%s/all.trace", tmpdir);
  setenv("PAGELOCK_OUTPUT", path, 1);
  pl_config_reset_for_test();
  if (load_driver() != 0) return 2;
  bool stressing = argc > 2 && strcmp(argv[1], "--stress") == 0;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_exact_h2d),
      cmocka_unit_test(test_prewarm),
      cmocka_unit_test(test_prewarm_premapped),
      cmocka_unit_test(test_prewarm_spare_taken_by_copy),
      cmocka_unit_test(test_exact_d2h_sync),
      cmocka_unit_test(test_exact_d2h_async),
      cmocka_unit_test(test_chunk_sizes),
      cmocka_unit_test(test_ordering_sync),
      cmocka_unit_test(test_ordering_async),
      cmocka_unit_test(test_threads_sync),
      cmocka_unit_test(test_threads_async),
      cmocka_unit_test(test_wait_fallback),
      cmocka_unit_test(test_d2h_async_ring),
      cmocka_unit_test(test_d2h_async_alone),
      cmocka_unit_test(test_d2h_async_no_stream_id),
      cmocka_unit_test(test_store_policy),
      cmocka_unit_test(test_download_store_policy),
      cmocka_unit_test(test_upload_throttle),
      cmocka_unit_test(test_job_limit),
      cmocka_unit_test(test_pool_alloc_failure),
      cmocka_unit_test(test_dma_failure),
      cmocka_unit_test(test_invalid_device),
      cmocka_unit_test(test_capture),
      cmocka_unit_test(test_fork),
      cmocka_unit_test(test_exit_in_flight),
      cmocka_unit_test(test_two_contexts),
      cmocka_unit_test(test_context_ends),
      cmocka_unit_test(test_counters_record),
      cmocka_unit_test(test_cpuload),
      cmocka_unit_test(test_crowded),
      cmocka_unit_test(test_stage_threads),
      cmocka_unit_test(test_wide_copies),
      cmocka_unit_test(test_widen_midway),
  };
  int rc =
      stressing ? stress(atoi(argv[2])) : cmocka_run_group_tests_name("stage", tests, NULL, NULL);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  if (system(cmd) != 0) rc = rc ? rc : 1;
  return rc;
}
