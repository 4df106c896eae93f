/* test_autopin.c - the registration engine (PAGELOCK_MODE register and
 * auto) over the fake driver (cmocka).
 *
 * Linked against pagelock_core: the copies go through pl_copy_exec, the
 * very path the shim's wrappers take, from pl_copy structs filled as the
 * wrappers fill them.  The allocation hooks (hook_alloc.c) are not in this
 * binary, so the tests do what they do: track a buffer when it is made
 * (pl_hostmem_track) and, before it is released, untrack it and call
 * pl_pinreg_defer_free (free) or pl_pinreg_release (munmap, mremap,
 * madvise, brk).  The fake driver reports what the "hardware" saw:
 * registered bytes, their high-water mark, calls per entry point; and it
 * moves a page-locked copy's bytes only at the end of its modelled time, so
 * a copy that returned too early reads an overwritten source.
 *
 * Threads never call cmocka's asserts (they longjmp): they count failures
 * and the main thread asserts the count. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "fakecuda.h"
#include "autopin.h"
#include "copy.h"
#include "hostmem.h"
#include "init.h"
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

/* The shim's wrapper (pagelock_core), which cuda.h declares under another name. */
CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *, CUstream);

/* ---- the fake driver, reached around the shim ----------------------------- */

static void *g_cuda;
static CUcontext g_ctx;

#define DRV(name, ...) static CUresult (*f_##name)(__VA_ARGS__)
DRV(cuInit, unsigned);
DRV(cuDevicePrimaryCtxRetain, CUcontext *, CUdevice);
DRV(cuCtxSetCurrent, CUcontext);
DRV(cuCtxSynchronize, void);
DRV(cuMemAlloc_v2, CUdeviceptr *, size_t);
DRV(cuMemFree_v2, CUdeviceptr);
DRV(cuMemsetD8_v2, CUdeviceptr, unsigned char, size_t);
DRV(cuStreamCreate, CUstream *, unsigned);
DRV(cuStreamDestroy_v2, CUstream);
DRV(cuStreamSynchronize, CUstream);
DRV(cuLaunchHostFunc, CUstream, CUhostFn, void *);
DRV(cuStreamBeginCapture_v2, CUstream, CUstreamCaptureMode);
DRV(cuStreamEndCapture, CUstream, CUgraph *);
DRV(cuGraphDestroy, CUgraph);
DRV(cuMemcpyHtoD_v2, CUdeviceptr, const void *, size_t);
DRV(cuMemcpyDtoH_v2, void *, CUdeviceptr, size_t);
DRV(cuMemHostRegister_v2, void *, size_t, unsigned);
DRV(cuMemHostUnregister, void *);
DRV(cuStreamQuery, CUstream);
static int (*f_fail)(const char *, int, int);
static void (*f_clear_faults)(void);
static void (*f_get_stats)(struct fakecuda_stats *);
static void (*f_reset_stats)(void);
static unsigned long (*f_call_count)(const char *);
static void (*f_reset_call_counts)(void);
static void (*f_set_bandwidth)(double, double);
static void (*f_set_register_bandwidth)(double);
static size_t (*f_reg_bytes_in)(const void *, size_t, const void **, size_t *);

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
  LOAD(cuMemAlloc_v2);
  LOAD(cuMemFree_v2);
  LOAD(cuMemsetD8_v2);
  LOAD(cuStreamCreate);
  LOAD(cuStreamDestroy_v2);
  LOAD(cuStreamSynchronize);
  LOAD(cuLaunchHostFunc);
  LOAD(cuStreamBeginCapture_v2);
  LOAD(cuStreamEndCapture);
  LOAD(cuGraphDestroy);
  LOAD(cuMemcpyHtoD_v2);
  LOAD(cuMemcpyDtoH_v2);
  LOAD(cuMemHostRegister_v2);
  LOAD(cuMemHostUnregister);
  LOAD(cuStreamQuery);
  *(void **)&f_fail = sym("fakecuda_fail");
  *(void **)&f_clear_faults = sym("fakecuda_clear_faults");
  *(void **)&f_get_stats = sym("fakecuda_get_stats");
  *(void **)&f_reset_stats = sym("fakecuda_reset_stats");
  *(void **)&f_call_count = sym("fakecuda_call_count");
  *(void **)&f_reset_call_counts = sym("fakecuda_reset_call_counts");
  *(void **)&f_set_bandwidth = sym("fakecuda_set_bandwidth");
  *(void **)&f_set_register_bandwidth = sym("fakecuda_set_register_bandwidth");
  *(void **)&f_reg_bytes_in = sym("fakecuda_registered_bytes_in");
  if (f_cuInit(0) != CUDA_SUCCESS || f_cuDevicePrimaryCtxRetain(&g_ctx, 0) != CUDA_SUCCESS ||
      f_cuCtxSetCurrent(g_ctx) != CUDA_SUCCESS)
    return -1;
  return 0;
}

/* ---- helpers ------------------------------------------------------------- */

#define KB ((size_t)1 << 10)
#define MB ((size_t)1 << 20)
#define HP(p) ((CUdeviceptr)(uintptr_t)(p))

static size_t g_pg;
static char tmpdir[256];

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}
static void sleep_ms(unsigned ms) {
  struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

/* Registrations of program memory the shim made since the last reset
 * (the staging pool's own are not among them). */
static uint64_t registrations(void) {
  pagelock_rec_counters k;
  memset(&k, 0, sizeof k);
  pl_pinreg_counters(&k);
  return k.registrations;
}

/* The fake's pinning speed as the test's environment set it. */
static double register_gbps(void) {
  const char *e = getenv("FAKECUDA_REGISTER_GBPS");
  return e && atof(e) > 0 ? atof(e) : 31;
}

/* New options while the shim's thread may be reading them (it logs each
 * registration): only once it has nothing left to do. */
static void config_reset(void) {
  pl_pinreg_quiesce_for_test();
  pl_config_reset_for_test();
}

/* Options of one test; the engine starts empty: nothing registered, no
 * heat, no faults, counters zero. */
static void ap_env(const char *mode, const char *budget, const char *h2d, const char *d2h) {
  setenv("PAGELOCK_MODE", mode, 1);
  setenv("PAGELOCK_STAGE_MIN", "64K", 1);
  setenv("PAGELOCK_POOL_SIZE", "4M", 1);
  setenv("PAGELOCK_CHUNK_SIZE", "256K", 1);
  setenv("PAGELOCK_WAIT_US", "2000000", 1);
  setenv("PAGELOCK_REGISTER_BUDGET", budget, 1);
  setenv("PAGELOCK_REGISTER_HOT", "100", 1);
  setenv("PAGELOCK_H2D", h2d, 1);
  setenv("PAGELOCK_D2H", d2h, 1);
  f_set_register_bandwidth(register_gbps());
  config_reset();
  f_clear_faults();
  assert_int_equal(f_cuCtxSynchronize(), CUDA_SUCCESS);
  pl_pinreg_set_idle_for_test(0);
  pl_autopin_set_follow_wait_for_test(0);
  pl_pinreg_reset_for_test();
  pl_autopin_reset_for_test();
  pl_stage_reset_for_test();
  f_set_bandwidth(1000, 1000);
  f_reset_stats();
  f_reset_call_counts();
}

static uint8_t pat(size_t i, unsigned seed) {
  return (uint8_t)((i * 131u) ^ (i >> 9) ^ (seed * 0x9Du) ^ (seed >> 5));
}
static void fill(void *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) ((uint8_t *)p)[i] = pat(i, seed);
}
static size_t check_pat(const void *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++)
    if (((const uint8_t *)p)[i] != pat(i, seed)) return i;
  return n;
}
/* The first n bytes at dev, read back: how many lead in matching seed's
 * pattern (n when all do). */
static size_t dev_pat(CUdeviceptr dev, size_t n, unsigned seed) {
  uint8_t *chk = malloc(n);
  assert_non_null(chk);
  assert_int_equal(f_cuMemcpyDtoH_v2(chk, dev, n), CUDA_SUCCESS);
  size_t ok = check_pat(chk, n, seed);
  free(chk);
  return ok;
}

/* Native thunks like hook_copy.c's. */
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

enum { V_SYNC, V_SYNC_PTDS, V_ASYNC, V_ASYNC_PTSZ0, V_COUNT };
static const int h2d_api[V_COUNT] = {
    PAGELOCK_API_cuMemcpyHtoD_v2, PAGELOCK_API_cuMemcpyHtoD_v2_ptds,
    PAGELOCK_API_cuMemcpyHtoDAsync_v2, PAGELOCK_API_cuMemcpyHtoDAsync_v2_ptsz};
static const int d2h_api[V_COUNT] = {
    PAGELOCK_API_cuMemcpyDtoH_v2, PAGELOCK_API_cuMemcpyDtoH_v2_ptds,
    PAGELOCK_API_cuMemcpyDtoHAsync_v2, PAGELOCK_API_cuMemcpyDtoHAsync_v2_ptsz};

/* One copy through pl_copy_exec, its pl_copy (flags, why) back in *out.
 * The host side is classified as a wrapper leaves it: unknown. */
static CUresult xcopy(bool h2d, int v, CUdeviceptr dev, void *host, size_t n, CUstream s,
                      pl_copy *out) {
  pl_copy c;
  memset(&c, 0, sizeof c);
  c.api = h2d ? h2d_api[v] : d2h_api[v];
  c.bytes = n;
  bool async = v == V_ASYNC || v == V_ASYNC_PTSZ0;
  if (h2d) {
    c.dst = dev;
    c.src = HP(host);
    c.dst_mem = PAGELOCK_MEM_DEVICE;
    c.native = async ? nat_htod_async : nat_htod;
  } else {
    c.dst = HP(host);
    c.src = dev;
    c.src_mem = PAGELOCK_MEM_DEVICE;
    c.native = async ? nat_dtoh_async : nat_dtoh;
  }
  if (async) {
    c.flags |= PAGELOCK_COPY_ASYNC;
    c.stream = v == V_ASYNC_PTSZ0 ? NULL : s;
  }
  if (v == V_SYNC_PTDS || v == V_ASYNC_PTSZ0) c.flags |= PAGELOCK_COPY_PTDS;
  CUresult r = pl_copy_exec(&c);
  if (out) *out = c;
  return r;
}
static CUresult up(int v, CUdeviceptr dev, void *host, size_t n, CUstream s, pl_copy *out) {
  return xcopy(true, v, dev, host, n, s, out);
}

/* Staged uploads from memory that is never registered (shared) until the
 * staging pool holds all its chunks (4M, ap_env), so that a test can then
 * inject faults into registration alone. */
static void warm_pool(CUdeviceptr dev) {
  const size_t n = 4 * MB;
  uint8_t *sh = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  assert_true(sh != MAP_FAILED);
  pl_copy c;
  assert_int_equal(up(V_SYNC, dev, sh, n, NULL, &c), CUDA_SUCCESS);
  assert_true(c.flags & PAGELOCK_COPY_STAGED);
  assert_int_equal(f_cuCtxSynchronize(), CUDA_SUCCESS);
  munmap(sh, n);
}
static CUresult down(int v, void *host, CUdeviceptr dev, size_t n, CUstream s, pl_copy *out) {
  return xcopy(false, v, dev, host, n, s, out);
}
static void v_sync(int v, CUstream s) {
  assert_int_equal(f_cuStreamSynchronize(v == V_ASYNC_PTSZ0 ? CU_STREAM_PER_THREAD : s),
                   CUDA_SUCCESS);
  assert_int_equal(f_cuCtxSynchronize(), CUDA_SUCCESS);
}

/* A buffer the way the hooks see one: [p, p+n) inside a mapping of its
 * own, `head` bytes into it, tracked as the malloc hook tracks a block. */
typedef struct blk {
  uint8_t *map;
  size_t maplen;
  uint8_t *p;
  size_t n;
} blk;

static blk blk_new(size_t n, size_t head) {
  blk b;
  b.maplen = (head + n + g_pg - 1) / g_pg * g_pg + g_pg;
  b.map = mmap(NULL, b.maplen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  assert_true(b.map != MAP_FAILED);
  b.p = b.map + head;
  b.n = n;
  pl_hostmem_track(b.p, n, 0);
  return b;
}
/* munmap, as its hook does it: forget, undo, then the real call. */
static void blk_free(blk *b) {
  pl_hostmem_untrack_range(b->map, b->maplen);
  pl_pinreg_release((uintptr_t)b->map, b->maplen);
  assert_int_equal(f_reg_bytes_in(b->map, b->maplen, NULL, NULL), 0);
  assert_int_equal(munmap(b->map, b->maplen), 0);
}
static uintptr_t lo_of(const void *p) { return ((uintptr_t)p + g_pg - 1) & ~(uintptr_t)(g_pg - 1); }
static uintptr_t hi_of(const void *p, size_t n) {
  return ((uintptr_t)p + n) & ~(uintptr_t)(g_pg - 1);
}
/* Bytes of b's interior the driver holds registered. */
static size_t reg_interior(const blk *b) {
  return f_reg_bytes_in((void *)lo_of(b->p), hi_of(b->p, b->n) - lo_of(b->p), NULL, NULL);
}
static size_t interior_len(const blk *b) { return hi_of(b->p, b->n) - lo_of(b->p); }

/* Make b's registration live: one upload in register mode, then the
 * engine's thread does the rest. */
static void make_live(blk *b, CUdeviceptr dev) {
  pl_copy c;
  assert_int_equal(up(V_SYNC, dev, b->p, b->n, NULL, &c), CUDA_SUCCESS);
  pl_pinreg_quiesce_for_test();
  assert_int_equal(reg_interior(b), interior_len(b));
}

/* What the copy tests start from: n bytes of device memory, a stream of
 * their own, and block b (n bytes, `head` into its mapping) with its
 * registration live. */
typedef struct live {
  CUdeviceptr dev;
  CUstream s;
  blk b;
} live;
static live live_new(size_t n, size_t head) {
  live l;
  assert_int_equal(f_cuMemAlloc_v2(&l.dev, n), CUDA_SUCCESS);
  assert_int_equal(f_cuStreamCreate(&l.s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  l.b = blk_new(n, head);
  make_live(&l.b, l.dev);
  return l;
}
static void live_free(live *l) {
  blk_free(&l->b);
  assert_int_equal(f_cuStreamDestroy_v2(l->s), CUDA_SUCCESS);
  assert_int_equal(f_cuMemFree_v2(l->dev), CUDA_SUCCESS);
}

/* The shim's stderr, into a file of the test's, at log level `level`:
 * stderr_begin, the code under test, stderr_end; then count its lines. */
typedef struct cap {
  char path[512];
  int fd, saved;
} cap;

static void stderr_begin(cap *c, const char *name, const char *level) {
  setenv("PAGELOCK_LOG", level, 1);
  config_reset();
  pl_log_reset_for_test();
  snprintf(c->path, sizeof c->path, "%s/%s", tmpdir, name);
  c->fd = open(c->path, O_CREAT | O_TRUNC | O_WRONLY, 0600);
  c->saved = dup(2);
  assert_true(c->fd >= 0 && c->saved >= 0);
  dup2(c->fd, 2);
}

static void stderr_end(cap *c) {
  dup2(c->saved, 2);
  close(c->saved);
  close(c->fd);
  setenv("PAGELOCK_LOG", "error", 1);
  config_reset();
}

/* Lines of the captured file; those starting with `prefix` (NULL: none)
 * and containing `also` (NULL: anything) in *matched. */
static int stderr_lines(const cap *c, const char *prefix, const char *also, int *matched) {
  FILE *f = fopen(c->path, "r");
  assert_non_null(f);
  char line[1024];
  int lines = 0, m = 0;
  while (fgets(line, sizeof line, f)) {
    lines++;
    if (prefix && strncmp(line, prefix, strlen(prefix)) == 0 && (!also || strstr(line, also))) m++;
  }
  fclose(f);
  if (matched) *matched = m;
  return lines;
}

/* ---- register: the first copy asks, the copies meanwhile stage ------------- */

static void test_register_first_copy(void **state) {
  (void)state;
  ap_env("register", "0", "sync", "sync");
  CUdeviceptr dev;
  size_t n = 2 * MB + 300;
  assert_int_equal(f_cuMemAlloc_v2(&dev, n), CUDA_SUCCESS);
  blk b = blk_new(n, 48);
  fill(b.p, n, 1);
  pl_copy c;
  assert_int_equal(up(V_SYNC, dev, b.p, n, NULL, &c), CUDA_SUCCESS);
  assert_int_equal(c.why, PAGELOCK_WHY_PENDING);
  assert_true(c.flags & PAGELOCK_COPY_STAGED);
  assert_false(c.flags & PAGELOCK_COPY_REGISTERED);
  pl_pinreg_quiesce_for_test();
  /* The page-aligned interior, on the shim's thread, with its flags. */
  assert_int_equal(reg_interior(&b), interior_len(&b));
  assert_int_equal(f_reg_bytes_in(b.map, lo_of(b.p) - (uintptr_t)b.map, NULL, NULL), 0);
  assert_int_equal(registrations(), 1);
  fill(b.p, n, 2);
  struct fakecuda_stats fs;
  f_reset_stats();
  assert_int_equal(up(V_SYNC, dev, b.p, n, NULL, &c), CUDA_SUCCESS);
  f_get_stats(&fs);
  assert_true(c.flags & PAGELOCK_COPY_REGISTERED);
  assert_false(c.flags & PAGELOCK_COPY_STAGED);
  assert_int_equal(c.why, PAGELOCK_WHY_NONE);
  assert_int_equal(fs.bytes_pinned, interior_len(&b));
  assert_int_equal(fs.bytes_pageable, n - interior_len(&b));
  assert_int_equal(dev_pat(dev, n, 2), n);
  /* To the registry (and the report) it is still pageable memory. */
  assert_int_equal(pl_hostmem_classify(HP(b.p + n / 2)), PAGELOCK_MEM_PAGEABLE);
  blk_free(&b);
  assert_int_equal(f_cuMemFree_v2(dev), CUDA_SUCCESS);
}

/* A registration takes the shim's thread a while (268 ms here); the copies
 * meanwhile neither wait for it nor behind its lock: they are staged, and
 * it is still under way when they are done. */
static void test_register_never_waits(void **state) {
  (void)state;
  ap_env("register", "0", "sync", "sync");
  CUdeviceptr dev;
  assert_int_equal(f_cuMemAlloc_v2(&dev, MB), CUDA_SUCCESS);
  blk b = blk_new((size_t)1 << 30, 0); /* address space only: never touched but the first MiB */
  fill(b.p, MB, 3);
  pl_copy c;
  assert_int_equal(up(V_SYNC, dev, b.p, MB, NULL, &c), CUDA_SUCCESS);
  assert_int_equal(c.why, PAGELOCK_WHY_PENDING);
  /* Staged, or through the registration's first pieces once they are
   * made (pinreg.h, PL_PIN_PIECE). */
  for (int i = 0; i < 4; i++) {
    assert_int_equal(up(V_ASYNC, dev, b.p, MB, NULL, &c), CUDA_SUCCESS);
    assert_true(((c.flags & PAGELOCK_COPY_STAGED) && c.why == PAGELOCK_WHY_PENDING) ||
                (c.flags & PAGELOCK_COPY_REGISTERED));
  }
  /* Still registering after all five (FAKECUDA_REGISTER_GBPS=4). */
  assert_true(pl_pinreg_busy(lo_of(b.p), MB));
  pl_pinreg_quiesce_for_test();
  assert_false(pl_pinreg_busy(lo_of(b.p), MB));
  assert_int_equal(up(V_SYNC, dev, b.p, MB, NULL, &c), CUDA_SUCCESS);
  assert_true(c.flags & PAGELOCK_COPY_REGISTERED);
  uint8_t chk[256];
  assert_int_equal(f_cuMemcpyDtoH_v2(chk, dev + MB - sizeof chk, sizeof chk), CUDA_SUCCESS);
  for (size_t i = 0; i < sizeof chk; i++) assert_int_equal(chk[i], pat(MB - sizeof chk + i, 3));
  blk_free(&b);
  assert_int_equal(f_cuMemFree_v2(dev), CUDA_SUCCESS);
}

/* A large copy that finds its buffer's registration being made follows
 * its pieces as the shim's thread makes them (each piece's DMA under the
 * next one's registration) instead of being staged beside it, where the
 * driver holds back the staged DMAs for as long as each piece registers.
 * The copy that asks for the registration is staged, as fast as under
 * stage; the next, with the registration slowed so that it is still being
 * made, goes registered, none of it staged, bytes right, upload and
 * download alike. */
static void test_follow(void **state) {
  (void)state;
  ap_env("register", "0", "sync", "sync");
  pl_autopin_set_follow_wait_for_test(2000000000ull); /* whatever the machine's load */
  /* 16 MiB pieces: 320 ms each, so that a sanitizer build's first copy
   * is over long before the registration is. */
  f_set_register_bandwidth(0.05);
  size_t n = 40 * MB + 300;
  CUdeviceptr dev;
  assert_int_equal(f_cuMemAlloc_v2(&dev, n), CUDA_SUCCESS);
  uint8_t *src = malloc(n);
  fill(src, n, 61);
  for (int h2d = 1; h2d >= 0; h2d--) {
    blk b = blk_new(n, 48);
    pl_stage_stats st0, st1;
    pl_copy c;
    assert_int_equal(f_cuMemcpyHtoD_v2(dev, src, n), CUDA_SUCCESS);
    memcpy(b.p, src, n); /* what both uploads send */
    for (int k = 0; k < 2; k++) {
      pl_stage_get_stats(&st0);
      CUresult r = h2d ? up(V_SYNC, dev, b.p, n, NULL, &c) : down(V_SYNC, b.p, dev, n, NULL, &c);
      assert_int_equal(r, CUDA_SUCCESS);
      pl_stage_get_stats(&st1);
      if (k == 0) {                                  /* asked for the registration: staged */
        assert_true(pl_pinreg_busy(lo_of(b.p), MB)); /* still being made */
        assert_int_equal(c.why, PAGELOCK_WHY_PENDING);
        assert_true(c.flags & PAGELOCK_COPY_STAGED);
      } else {
        assert_true(c.flags & PAGELOCK_COPY_REGISTERED);
        assert_int_equal(c.why, PAGELOCK_WHY_NONE);
        assert_int_equal(st1.bytes_staged - st0.bytes_staged, 0);
      }
    }
    /* The bytes once both copies are over: checked between them, a slow
     * build let the registration finish first. */
    if (h2d)
      assert_int_equal(dev_pat(dev, n, 61), n);
    else
      assert_int_equal(check_pat(b.p, n, 61), n);
    pl_pinreg_quiesce_for_test();
    blk_free(&b);
  }
  free(src);
  pl_autopin_set_follow_wait_for_test(0);
  f_set_register_bandwidth(register_gbps());
  assert_int_equal(f_cuMemFree_v2(dev), CUDA_SUCCESS);
}

/* The copy that decides its buffer should be registered asks for it only
 * once it is done (pl_autopin_after): the shim's thread registering beside
 * it held its staged DMAs back (a buffer's first 256 MiB upload took
 * 8.5-10.4 ms under auto against 6.9-7.1 under stage, H200). */
static void test_ask_after(void **state) {
  (void)state;
  ap_env("register", "0", "sync", "sync");
  size_t n = 8 * MB;
  blk b = blk_new(n, 64);
  pl_copy c;
  memset(&c, 0, sizeof c);
  c.api = PAGELOCK_API_cuMemcpyHtoD_v2;
  c.dir = PAGELOCK_DIR_H2D;
  c.src = HP(b.p);
  c.bytes = n;
  pl_pin_use use;
  assert_int_equal(pl_autopin_route(&c, &use), PL_ROUTE_STAGE);
  assert_int_equal(c.why, PAGELOCK_WHY_PENDING);
  assert_true(use.ask.len > 0);
  assert_false(pl_pinreg_busy(lo_of(b.p), interior_len(&b))); /* nothing asked yet */
  pl_autopin_after(&c, &use);
  assert_int_equal(c.why, PAGELOCK_WHY_PENDING);
  assert_true(pl_pinreg_touches(lo_of(b.p), interior_len(&b)));
  pl_pinreg_quiesce_for_test();
  assert_int_equal(reg_interior(&b), interior_len(&b));
  blk_free(&b);
}

/* ---- auto: registered once hot ------------------------------------------------ */

static void test_auto_hot(void **state) {
  (void)state;
  ap_env("auto", "0", "sync", "sync");
  CUdeviceptr dev;
  size_t n = 4 * MB;
  assert_int_equal(f_cuMemAlloc_v2(&dev, n), CUDA_SUCCESS);
  blk b = blk_new(n, 16);
  fill(b.p, n, 4);
  pl_copy c;
  /* Three quarters of its size copied: cold, staged. */
  for (int i = 0; i < 3; i++) {
    assert_int_equal(up(V_ASYNC, dev, b.p + i * MB, MB, NULL, &c), CUDA_SUCCESS);
    assert_int_equal(c.why, PAGELOCK_WHY_COLD);
    assert_true(c.flags & PAGELOCK_COPY_STAGED);
  }
  pl_pinreg_quiesce_for_test();
  assert_int_equal(reg_interior(&b), 0);
  /* Small copies pass through and count for nothing. */
  assert_int_equal(up(V_SYNC, dev, b.p, 4 * KB, NULL, &c), CUDA_SUCCESS);
  assert_int_equal(c.why, PAGELOCK_WHY_SMALL);
  assert_false(c.flags & (PAGELOCK_COPY_STAGED | PAGELOCK_COPY_REGISTERED));
  /* The fourth reaches 100 %: asked for. */
  assert_int_equal(up(V_ASYNC, dev, b.p + 3 * MB, MB, NULL, &c), CUDA_SUCCESS);
  assert_int_equal(c.why, PAGELOCK_WHY_PENDING);
  pl_pinreg_quiesce_for_test();
  assert_int_equal(reg_interior(&b), interior_len(&b));
  assert_int_equal(up(V_ASYNC, dev, b.p, n, NULL, &c), CUDA_SUCCESS);
  assert_true(c.flags & PAGELOCK_COPY_REGISTERED);
  /* A small copy over the registration goes through it too. */
  assert_int_equal(up(V_ASYNC, dev, b.p + MB, 8 * KB, NULL, &c), CUDA_SUCCESS);
  assert_true(c.flags & PAGELOCK_COPY_REGISTERED);
  /* So does one inside a single page, the kind that passes at once while
   * no registration exists anywhere. */
  assert_int_equal(up(V_ASYNC, dev, b.p + MB + 64, 256, NULL, &c), CUDA_SUCCESS);
  assert_true(c.flags & PAGELOCK_COPY_REGISTERED);
  blk_free(&b);
  /* With none left, it passes through as small. */
  blk b2 = blk_new(n, 16);
  assert_int_equal(up(V_ASYNC, dev, b2.p + 64, 256, NULL, &c), CUDA_SUCCESS);
  assert_int_equal(c.why, PAGELOCK_WHY_SMALL);
  assert_false(c.flags & (PAGELOCK_COPY_STAGED | PAGELOCK_COPY_REGISTERED));
  blk_free(&b2);

  /* PAGELOCK_REGISTER_HOT=50: half the size is enough. */
  setenv("PAGELOCK_REGISTER_HOT", "50", 1);
  config_reset();
  b = blk_new(n, 0);
  assert_int_equal(up(V_ASYNC, dev, b.p, MB, NULL, &c), CUDA_SUCCESS);
  assert_int_equal(c.why, PAGELOCK_WHY_COLD);
  assert_int_equal(up(V_ASYNC, dev, b.p, MB, NULL, &c), CUDA_SUCCESS);
  assert_int_equal(c.why, PAGELOCK_WHY_PENDING);
  pl_pinreg_quiesce_for_test();
  assert_int_equal(reg_interior(&b), n);
  blk_free(&b);
  assert_int_equal(f_cuCtxSynchronize(), CUDA_SUCCESS);
  assert_int_equal(f_cuMemFree_v2(dev), CUDA_SUCCESS);
}

/* What may be registered: tracked memory only, never shared or
 * file-backed mappings, nor mappings while another allocator serves
 * malloc; and never the partial pages. */
static void test_registrable(void **state) {
  (void)state;
  ap_env("register", "0", "sync", "sync");
  CUdeviceptr dev;
  assert_int_equal(f_cuMemAlloc_v2(&dev, 2 * MB), CUDA_SUCCESS);
  pl_copy c;
  static uint8_t untracked[256 * KB];
  assert_int_equal(up(V_SYNC, dev, untracked, sizeof untracked, NULL, &c), CUDA_SUCCESS);
  assert_int_equal(c.why, PAGELOCK_WHY_UNTRACKED);
  assert_true(c.flags & PAGELOCK_COPY_STAGED);
  uint8_t *sh = mmap(NULL, MB, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  assert_true(sh != MAP_FAILED);
  pl_hostmem_track_as(sh, MB, 0, PL_ORIGIN_SHARED);
  assert_int_equal(up(V_SYNC, dev, sh, MB, NULL, &c), CUDA_SUCCESS);
  assert_int_equal(c.why, PAGELOCK_WHY_SHARED);
  assert_true(c.flags & PAGELOCK_COPY_STAGED);
  pl_hostmem_track_as(sh, MB, 0, PL_ORIGIN_MAPONLY);
  assert_int_equal(up(V_SYNC, dev, sh, MB, NULL, &c), CUDA_SUCCESS);
  assert_int_equal(c.why, PAGELOCK_WHY_UNTRACKED);
  pl_hostmem_untrack(sh);
  munmap(sh, MB);
  /* Bytes only in the allocation's partial first page. */
  blk b = blk_new(MB, 100);
  assert_int_equal(up(V_SYNC, dev, b.p, 128, NULL, &c), CUDA_SUCCESS);
  assert_int_equal(c.why, PAGELOCK_WHY_EDGE);
  pl_pinreg_quiesce_for_test();
  assert_int_equal(registrations(), 0);
  assert_int_equal(f_reg_bytes_in(b.map, b.maplen, NULL, NULL), 0);
  blk_free(&b);
  assert_int_equal(f_cuMemFree_v2(dev), CUDA_SUCCESS);
}

/* ---- the copy over a registration: bytes, order, when it returns ------------- */

/* Every entry point, both directions, copies starting and ending inside
 * the partial first and last pages, inside the interior only, and
 * spanning all of it. */
static void test_bytes_exact(void **state) {
  (void)state;
  ap_env("register", "0", "sync", "sync");
  size_t n = 3 * MB + 1234;
  live l = live_new(n, 1000);
  CUdeviceptr dev = l.dev;
  CUstream s = l.s;
  blk b = l.b;
  uint8_t *chk = malloc(n);
  size_t head = lo_of(b.p) - (uintptr_t)b.p, tail = (uintptr_t)b.p + n - hi_of(b.p, n);
  struct {
    size_t off, len;
  } cases[] = {
      {0, n},                                       /* all of it */
      {7, n - 19},                                  /* inside both partial pages */
      {head, interior_len(&b)},                     /* the interior exactly */
      {head + 4096 + 5, 2 * MB + 3},                /* inside the interior */
      {head - 1, 70 * KB},                          /* one byte of the first page */
      {n - tail - 64 * KB - 1, 64 * KB + 1 + tail}, /* up to the end */
  };
  unsigned seed = 10;
  for (unsigned k = 0; k < sizeof cases / sizeof cases[0]; k++)
    for (int v = 0; v < V_COUNT; v++, seed++) {
      size_t off = cases[k].off, len = cases[k].len;
      pl_copy c;
      /* up */
      memset(chk, 0, n);
      assert_int_equal(f_cuMemcpyHtoD_v2(dev, chk, n), CUDA_SUCCESS);
      fill(b.p + off, len, seed);
      assert_int_equal(up(v, dev + off, b.p + off, len, s, &c), CUDA_SUCCESS);
      assert_true(c.flags & PAGELOCK_COPY_REGISTERED);
      memset(b.p, 0x5A, n); /* the source is the program's again */
      v_sync(v, s);
      assert_int_equal(f_cuMemcpyDtoH_v2(chk, dev, n), CUDA_SUCCESS);
      for (size_t i = 0; i < off; i++) assert_int_equal(chk[i], 0);
      size_t bad = check_pat(chk + off, len, seed);
      if (bad != len) print_error("up case %u v %d: byte %zu differs\n", k, v, bad);
      assert_int_equal(bad, len);
      for (size_t i = off + len; i < n; i++) assert_int_equal(chk[i], 0);
      /* down */
      fill(chk, n, seed + 100);
      assert_int_equal(f_cuMemcpyHtoD_v2(dev, chk, n), CUDA_SUCCESS);
      memset(b.p, 0xEE, n);
      assert_int_equal(down(v, b.p + off, dev + off, len, s, &c), CUDA_SUCCESS);
      assert_true(c.flags & PAGELOCK_COPY_REGISTERED);
      /* Read at once: the bytes are there when the call returns. */
      for (size_t i = 0; i < off; i++) assert_int_equal(b.p[i], 0xEE);
      bad = len;
      for (size_t i = 0; i < len && bad == len; i++)
        if (b.p[off + i] != pat(off + i, seed + 100)) bad = i;
      if (bad != len) print_error("down case %u v %d: byte %zu differs\n", k, v, bad);
      assert_int_equal(bad, len);
      for (size_t i = off + len; i < n; i++) assert_int_equal(b.p[i], 0xEE);
      v_sync(v, s);
    }
  free(chk);
  live_free(&l);
}

/* Keeps its stream busy for a while: a DMA queued behind it runs late. */
static void CUDA_CB hold_stream(void *arg) { sleep_ms((unsigned)(uintptr_t)arg); }

/* An upload returns only once the DMA has read the source: overwrite it
 * right after the call, with the stream held back and the bandwidth low
 * (the fake moves a page-locked copy's bytes at the end of its time). */
static void returns_after(bool h2d) {
  ap_env("register", "0", "sync", "sync");
  size_t n = 2 * MB;
  live l = live_new(n, 0);
  CUdeviceptr dev = l.dev;
  CUstream s = l.s;
  blk b = l.b;
  uint8_t *chk = malloc(n);
  f_set_bandwidth(0.5, 1000); /* 2 MiB: 4 ms */
  for (int async_mode = 0; async_mode < 2; async_mode++) {
    if (async_mode) {
      setenv(h2d ? "PAGELOCK_H2D" : "PAGELOCK_D2H", "async", 1);
      config_reset();
    }
    pl_copy c;
    if (h2d) {
      fill(b.p, n, 20 + async_mode);
    } else {
      fill(chk, n, 30 + async_mode);
      assert_int_equal(f_cuMemcpyHtoD_v2(dev, chk, n), CUDA_SUCCESS);
      memset(b.p, 0, n);
    }
    assert_int_equal(f_cuLaunchHostFunc(s, hold_stream, (void *)(uintptr_t)100), CUDA_SUCCESS);
    uint64_t t0 = now_ns();
    CUresult r = h2d ? up(V_ASYNC, dev, b.p, n, s, &c) : down(V_ASYNC, b.p, dev, n, s, &c);
    uint64_t dt = now_ns() - t0;
    assert_int_equal(r, CUDA_SUCCESS);
    if (h2d && !async_mode) memset(b.p, 0x33, n); /* the program's own again */
    if (!h2d && !async_mode) assert_int_equal(check_pat(b.p, n, 30), n); /* there at once */
    assert_true(c.flags & PAGELOCK_COPY_REGISTERED);
    if (async_mode)
      assert_true(dt < 80000000ull); /* did not wait behind the stream */
    else
      assert_true(dt >= 80000000ull);
    assert_int_equal(f_cuStreamSynchronize(s), CUDA_SUCCESS);
    if (h2d) {
      assert_int_equal(f_cuMemcpyDtoH_v2(chk, dev, n), CUDA_SUCCESS);
      assert_int_equal(check_pat(chk, n, 20 + async_mode), n);
    } else {
      assert_int_equal(check_pat(b.p, n, 30 + async_mode), n);
    }
  }
  free(chk);
  live_free(&l);
}
static void test_h2d_returns_after_read(void **state) {
  (void)state;
  returns_after(true);
}
static void test_d2h_returns_with_bytes(void **state) {
  (void)state;
  returns_after(false);
}

/* A large upload from a registration: its last eighth goes through the
 * staging pool, so that its DMA is still queued when the call returns
 * (the copy engine stays busy until the program's next call), while the
 * call still returns only once the registered bytes have been read. */
static void test_h2d_tail_staged(void **state) {
  (void)state;
  ap_env("register", "0", "sync", "sync");
  setenv("PAGELOCK_POOL_SIZE", "4M", 1);
  setenv("PAGELOCK_CHUNK_SIZE", "1M", 1);
  config_reset();
  size_t n = 8 * MB + 300;
  live l = live_new(n, 48);
  pl_autopin_reset_for_test(); /* the first upload below is the thread's first over a registration
                                */
  CUdeviceptr dev = l.dev;
  CUstream s = l.s;
  blk b = l.b;
  size_t interior = interior_len(&b), tail = (interior / 8) & ~(size_t)4095;
  uint8_t *chk = malloc(n);
  fill(b.p, n, 41);
  f_set_bandwidth(0.2, 1000); /* the tail's 1 MiB: 5 ms */
  assert_int_equal(f_cuLaunchHostFunc(s, hold_stream, (void *)(uintptr_t)50), CUDA_SUCCESS);
  pl_stage_stats st0, st1;
  pl_stage_get_stats(&st0);
  pl_copy c;
  uint64_t t0 = now_ns();
  assert_int_equal(up(V_ASYNC, dev, b.p, n, s, &c), CUDA_SUCCESS);
  uint64_t dt = now_ns() - t0;
  CUresult q = f_cuStreamQuery(s);
  memset(b.p, 0x33, n); /* the program's own again */
  pl_stage_get_stats(&st1);
  assert_true(c.flags & PAGELOCK_COPY_REGISTERED);
  assert_true(dt >= 50000000ull);            /* waited for the head's read */
  assert_int_equal(q, CUDA_ERROR_NOT_READY); /* the tail's DMA still queued */
  assert_int_equal(st1.bytes_staged - st0.bytes_staged, tail);
  assert_int_equal(f_cuStreamSynchronize(s), CUDA_SUCCESS);
  assert_int_equal(f_cuMemcpyDtoH_v2(chk, dev, n), CUDA_SUCCESS);
  assert_int_equal(check_pat(chk, n, 41), n);
  /* Below 4 MiB of registered span: no tail. */
  pl_stage_get_stats(&st0);
  fill(b.p, n, 42);
  assert_int_equal(up(V_ASYNC, dev, b.p, 3 * MB, s, &c), CUDA_SUCCESS);
  pl_stage_get_stats(&st1);
  assert_int_equal(st1.bytes_staged, st0.bytes_staged);
  assert_int_equal(f_cuStreamSynchronize(s), CUDA_SUCCESS);
  assert_int_equal(f_cuMemcpyDtoH_v2(chk, dev, 3 * MB), CUDA_SUCCESS);
  assert_int_equal(check_pat(chk, 3 * MB, 42), 3 * MB);
  free(chk);
  live_free(&l);
}

/* The tail finds the pool full (another stream's staged upload holds every
 * chunk) and the staging engine gives it to the native call, which reads
 * the registered tail asynchronously: the call must still return only once
 * the tail's bytes are read.  Before the fix the mark waited on was the
 * head's, and the tail's DMA read the program's next bytes. */
static void test_h2d_tail_fallback(void **state) {
  (void)state;
  ap_env("register", "0", "sync", "sync");
  setenv("PAGELOCK_CHUNK_SIZE", "1M", 1);
  setenv("PAGELOCK_WAIT_US", "1", 1);
  config_reset();
  size_t n = 8 * MB + 300;
  live l = live_new(n, 48);
  CUdeviceptr dev = l.dev, dev2;
  CUstream s = l.s, s2;
  blk b = l.b;
  assert_int_equal(f_cuMemAlloc_v2(&dev2, 4 * MB), CUDA_SUCCESS);
  assert_int_equal(f_cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  uint8_t *sh = mmap(NULL, 4 * MB, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  assert_true(sh != MAP_FAILED);
  uint8_t *chk = malloc(n);
  for (unsigned round = 0; round < 2; round++) {
    fill(b.p, n, 44 + round); /* first: slow in a sanitizer build */
    /* Every chunk of the pool waits behind s2's held stream. */
    assert_int_equal(f_cuLaunchHostFunc(s2, hold_stream, (void *)(uintptr_t)1000), CUDA_SUCCESS);
    pl_copy c2;
    assert_int_equal(up(V_ASYNC, dev2, sh, 3 * MB, s2, &c2), CUDA_SUCCESS);
    assert_int_equal(c2.flags & (PAGELOCK_COPY_STAGED | PAGELOCK_COPY_FALLBACK),
                     PAGELOCK_COPY_STAGED);
    f_set_bandwidth(0.2, 1000); /* the tail's 1 MiB: 5 ms after the head */
    assert_int_equal(f_cuLaunchHostFunc(s, hold_stream, (void *)(uintptr_t)30), CUDA_SUCCESS);
    pl_copy c;
    pl_stage_stats q0, q1;
    pl_stage_get_stats(&q0);
    assert_int_equal(up(round ? V_SYNC : V_ASYNC, dev, b.p, n, s, &c), CUDA_SUCCESS);
    pl_stage_get_stats(&q1);
    /* The case under test: the tail went to the native call. */
    assert_int_equal(q1.fallbacks - q0.fallbacks, 1);
    memset(b.p, 0x33, n); /* the program's own again */
    assert_true(c.flags & PAGELOCK_COPY_REGISTERED);
    assert_int_equal(f_cuCtxSynchronize(), CUDA_SUCCESS);
    f_set_bandwidth(1000, 1000);
    assert_int_equal(f_cuMemcpyDtoH_v2(chk, dev, n), CUDA_SUCCESS);
    size_t bad = check_pat(chk, n, 44 + round);
    if (bad != n) print_error("round %u: byte %zu of %zu differs\n", round, bad, n);
    assert_int_equal(bad, n);
  }
  free(chk);
  munmap(sh, 4 * MB);
  assert_int_equal(f_cuStreamDestroy_v2(s2), CUDA_SUCCESS);
  assert_int_equal(f_cuMemFree_v2(dev2), CUDA_SUCCESS);
  live_free(&l);
}

/* An allocation that owns its pages (a glibc mmapped chunk: its bytes
 * start 16 or 64 bytes into a mapping of its own) is registered whole
 * pages and all, so a copy of all of it is registered DMA only: no
 * pageable call for its partial first and last pages.  A heap block,
 * whose neighbours may share those pages, keeps to its interior. */
static void test_own_pages(void **state) {
  (void)state;
  ap_env("register", "0", "sync", "sync");
  size_t n = 3 * MB + 300;
  CUdeviceptr dev;
  CUstream s;
  assert_int_equal(f_cuMemAlloc_v2(&dev, n), CUDA_SUCCESS);
  assert_int_equal(f_cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  for (int own = 0; own < 2; own++) {
    blk b = blk_new(n, 64);
    if (own) {
      pl_hostmem_untrack_range(b.map, b.maplen);
      pl_hostmem_track_as(b.p, n, 0, PL_ORIGIN_HEAP | PL_ALLOC_OWN_PAGES);
    }
    make_live(&b, dev);
    size_t whole = hi_of(b.p, n) + g_pg - (uintptr_t)b.map; /* every page of its bytes */
    if (own) assert_int_equal(f_reg_bytes_in(b.map, b.maplen, NULL, NULL), whole);
    fill(b.p, n, 50 + own);
    struct fakecuda_stats st0, st1;
    f_get_stats(&st0);
    pl_copy c;
    assert_int_equal(up(V_ASYNC, dev, b.p, n, s, &c), CUDA_SUCCESS);
    memset(b.p, 0x33, n);
    f_get_stats(&st1);
    assert_true(c.flags & PAGELOCK_COPY_REGISTERED);
    /* a pageable call per partial page for the heap block, none for its own pages */
    assert_int_equal(st1.copies_pageable - st0.copies_pageable, own ? 0 : 2);
    v_sync(V_ASYNC, s);
    assert_int_equal(dev_pat(dev, n, 50 + own), n);
    blk_free(&b);
  }
  assert_int_equal(f_cuStreamDestroy_v2(s), CUDA_SUCCESS);
  assert_int_equal(f_cuMemFree_v2(dev), CUDA_SUCCESS);
}

/* The tail's size follows how soon the thread comes back with its next
 * copy: an eighth of the span before it has come back once, a quarter
 * (the cap) after a long pause, less again once it comes straight back
 * call after call; and each thread keeps its own measure. */
static size_t staged_by(int v, CUdeviceptr dev, void *host, size_t n, CUstream s) {
  pl_stage_stats st0, st1;
  pl_copy c;
  pl_stage_get_stats(&st0);
  assert_int_equal(up(v, dev, host, n, s, &c), CUDA_SUCCESS);
  pl_stage_get_stats(&st1);
  assert_true(c.flags & PAGELOCK_COPY_REGISTERED);
  return (size_t)(st1.bytes_staged - st0.bytes_staged);
}
typedef struct tail_arg {
  CUdeviceptr dev;
  void *host;
  size_t n, staged;
  bool ok;
} tail_arg;
/* No cmocka asserts off the test's thread: the main thread checks. */
static void *tail_thread(void *p) {
  tail_arg *a = p;
  pl_stage_stats st0, st1;
  pl_copy c;
  pl_stage_get_stats(&st0);
  a->ok = f_cuCtxSetCurrent(g_ctx) == CUDA_SUCCESS &&
          up(V_SYNC, a->dev, a->host, a->n, NULL, &c) == CUDA_SUCCESS &&
          (c.flags & PAGELOCK_COPY_REGISTERED);
  pl_stage_get_stats(&st1);
  a->staged = (size_t)(st1.bytes_staged - st0.bytes_staged);
  return NULL;
}
static void test_h2d_tail_turnaround(void **state) {
  (void)state;
  ap_env("register", "0", "sync", "sync");
  /* A quarter of this span is the 32 MiB cap: 0.67 ms of turnaround, far
   * above what the test's own loop takes even under the sanitizers. */
  size_t n = 128 * MB + 300;
  CUdeviceptr dev;
  assert_int_equal(f_cuMemAlloc_v2(&dev, n), CUDA_SUCCESS);
  blk b = blk_new(n, 48);
  make_live(&b, dev);
  fill(b.p, n, 43);
  size_t span = interior_len(&b), eighth = (span / 8) & ~(size_t)4095,
         quarter = (span / 4) & ~(size_t)4095;
  assert_int_equal(staged_by(V_SYNC, dev, b.p, n, NULL), eighth);
  usleep(3000); /* beyond the turnaround's 2 ms clamp: a quarter */
  assert_int_equal(staged_by(V_SYNC, dev, b.p, n, NULL), quarter);
  /* Another thread has not come back yet: an eighth. */
  tail_arg a = {.dev = dev, .host = b.p, .n = n};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, tail_thread, &a), 0);
  assert_int_equal(pthread_join(t, NULL), 0);
  assert_true(a.ok);
  assert_int_equal(a.staged, eighth);
  /* Straight back, call after call: the smoothed turnaround falls from 2
   * ms to what the loop takes (microseconds; a quarter is 0.67 ms). */
  size_t last = 0;
  for (int i = 0; i < 16; i++) last = staged_by(V_SYNC, dev, b.p, n, NULL);
  assert_true(last < quarter);
  assert_int_equal(dev_pat(dev, n, 43), n);
  blk_free(&b);
  assert_int_equal(f_cuMemFree_v2(dev), CUDA_SUCCESS);
}

/* A loop that waits for the stream after each upload waits for the
 * tail's DMA too: the wait is left out of the turnaround (through the
 * shim's own cuStreamSynchronize, hook_sync.c), or the tail would grow to
 * its cap on a gap it made itself. */
static void test_h2d_tail_wait_excluded(void **state) {
  (void)state;
  ap_env("register", "0", "sync", "sync");
  size_t n = 128 * MB + 300; /* a quarter: the 32 MiB cap, 0.67 ms of turnaround */
  live l = live_new(n, 48);
  CUdeviceptr dev = l.dev;
  CUstream s = l.s;
  blk b = l.b;
  fill(b.p, n, 44);
  size_t span = interior_len(&b), quarter = (span / 4) & ~(size_t)4095;
  f_set_bandwidth(4, 1000); /* an eighth's tail (16 MiB): 4 ms of DMA */
  assert_int_equal(staged_by(V_ASYNC, dev, b.p, n, s), (span / 8) & ~(size_t)4095);
  /* With the wait counted, every call would find a 4 ms gap and stage
   * the capped quarter.  Left out, a call stages less, unless the host
   * itself stalled this thread for 0.67 ms between two calls (a loaded CI
   * machine, a sanitizer): most of six calls, not all of them. */
  int below = 0;
  for (int i = 0; i < 6; i++) {
    uint64_t t0 = now_ns();
    assert_int_equal(cuStreamSynchronize(s), CUDA_SUCCESS);
    size_t staged = staged_by(V_ASYNC, dev, b.p, n, s);
    if (i == 0) assert_true(now_ns() - t0 > 1000000ull); /* it did wait for the tail */
    below += staged < quarter;
  }
  assert_true(below >= 4);
  assert_int_equal(cuStreamSynchronize(s), CUDA_SUCCESS);
  assert_int_equal(dev_pat(dev, n, 44), n);
  live_free(&l);
}

/* A copy that passes through while its allocation's interior is (or is
 * about to be) registered must never reach the driver crossing the
 * interior's edge: the driver refuses a host range that starts inside a
 * registered range and runs past its end (fakecuda models it).  The race
 * that makes a pass-through copy meet a live registration (the shim's
 * thread finishing between the route and the call) is played here
 * deterministically: the registration is live, and the copy is handed to
 * pl_pinreg_native as the route's fallback would hand it. */
static void test_native_cut(void **state) {
  (void)state;
  ap_env("register", "0", "sync", "sync");
  size_t n = MB + 100;
  blk b = blk_new(n, 100);
  CUdeviceptr dev;
  assert_int_equal(f_cuMemAlloc_v2(&dev, n), CUDA_SUCCESS);
  make_live(&b, dev);
  /* from inside the interior to the allocation's partial last page */
  uint8_t *from = (uint8_t *)lo_of(b.p) + 300;
  size_t len = (size_t)(b.p + n - from);
  for (int v = 0; v < V_COUNT; v++) {
    bool async = v == V_ASYNC || v == V_ASYNC_PTSZ0;
    pl_copy c;
    memset(&c, 0, sizeof c);
    c.api = h2d_api[v];
    c.dir = PAGELOCK_DIR_H2D;
    c.dst = dev;
    c.src = HP(from);
    c.bytes = len;
    c.native = async ? nat_htod_async : nat_htod;
    if (async) c.flags |= PAGELOCK_COPY_ASYNC;
    if (v == V_SYNC_PTDS || v == V_ASYNC_PTSZ0) c.flags |= PAGELOCK_COPY_PTDS;
    /* the uncut call is what the driver refuses */
    assert_int_equal(c.native(&c), CUDA_ERROR_INVALID_VALUE);
    fill(from, len, 40u + (unsigned)v);
    assert_int_equal(pl_pinreg_native(&c), CUDA_SUCCESS);
    v_sync(v, NULL);
    uint8_t *back = malloc(len);
    assert_int_equal(f_cuMemcpyDtoH_v2(back, dev, len), CUDA_SUCCESS);
    assert_int_equal(check_pat(back, len, 40u + (unsigned)v), len);
    free(back);
  }
  blk_free(&b);
  f_cuMemFree_v2(dev);
}

/* A copy that does not go through the registration but touches it (a
 * small one passing through while the registration is made) must not
 * return before the driver is done with the bytes either. */
static void test_settle(void **state) {
  (void)state;
  ap_env("auto", "0", "sync", "sync");
  size_t n = 2 * MB;
  CUdeviceptr dev;
  CUstream s;
  assert_int_equal(f_cuMemAlloc_v2(&dev, n), CUDA_SUCCESS);
  assert_int_equal(f_cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  blk b = blk_new(n, 0);
  pl_copy c;
  for (int i = 0; i < 2; i++) assert_int_equal(up(V_ASYNC, dev, b.p, n, s, &c), CUDA_SUCCESS);
  pl_pinreg_quiesce_for_test();
  assert_int_equal(reg_interior(&b), n);
  /* A 2D upload of the registered buffer, behind a held stream. */
  f_set_bandwidth(0.5, 1000);
  fill(b.p, n, 40);
  assert_int_equal(f_cuLaunchHostFunc(s, hold_stream, (void *)(uintptr_t)20), CUDA_SUCCESS);
  CUDA_MEMCPY2D m;
  memset(&m, 0, sizeof m);
  m.srcMemoryType = CU_MEMORYTYPE_HOST;
  m.srcHost = b.p;
  m.srcPitch = 4096;
  m.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  m.dstDevice = dev;
  m.dstPitch = 4096;
  m.WidthInBytes = 4096;
  m.Height = n / 4096;
  assert_int_equal(cuMemcpy2DAsync_v2(&m, s), CUDA_SUCCESS);
  memset(b.p, 0x77, n);
  assert_int_equal(f_cuStreamSynchronize(s), CUDA_SUCCESS);
  assert_int_equal(dev_pat(dev, n, 40), n);
  blk_free(&b);
  assert_int_equal(f_cuStreamDestroy_v2(s), CUDA_SUCCESS);
  assert_int_equal(f_cuMemFree_v2(dev), CUDA_SUCCESS);
}

/* ---- a registration in pieces ---------------------------------------------------- */

/* A registration is made as pieces of PL_PIN_PIECE, each its own driver
 * registration (one long call would stall every other thread's copies in
 * the real driver), and the driver refuses a copy that runs from one into
 * the next (fakecuda models it): every copy over the registration, through
 * it, passed through or while it is still being made, is cut at the
 * pieces' edges, with its bytes exact.  While it is being made, the pieces
 * made so far already serve a copy, and the rest of the copy is staged. */
static void test_pieces(void **state) {
  (void)state;
  ap_env("register", "0", "sync", "sync");
  size_t n = 2 * PL_PIN_PIECE + 8 * MB + 300;
  CUdeviceptr dev;
  CUstream s;
  assert_int_equal(f_cuMemAlloc_v2(&dev, n), CUDA_SUCCESS);
  assert_int_equal(f_cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  warm_pool(dev);
  blk b = blk_new(n, 100);
  uint8_t *chk = malloc(n);
  /* Slow pinning (16 MiB: 160 ms a piece): the copy below lands while the
   * first piece is live and the second is being made (the fake shows a
   * range from the start of its call). */
  f_set_register_bandwidth(0.1);
  pl_copy c;
  fill(b.p, n, 91); /* first: slow in a sanitizer build */
  /* A short copy asks for the registration (a slow sanitizer build staged
   * the whole buffer for longer than two pieces took). */
  assert_int_equal(up(V_SYNC, dev, b.p, MB, NULL, &c), CUDA_SUCCESS);
  assert_true(c.flags & PAGELOCK_COPY_STAGED);
  assert_int_equal(c.why, PAGELOCK_WHY_PENDING);
  uint64_t t0 = now_ns();
  while (reg_interior(&b) < 2 * PL_PIN_PIECE && now_ns() - t0 < 5000000000ull) sleep_ms(1);
  const void *first = NULL;
  size_t first_len = 0,
         held = f_reg_bytes_in((void *)lo_of(b.p), interior_len(&b), &first, &first_len);
  assert_true(held >= PL_PIN_PIECE && held < interior_len(&b));
  assert_ptr_equal(first, (void *)lo_of(b.p));
  assert_int_equal(first_len, PL_PIN_PIECE);
  pl_stage_stats st0, st1;
  pl_stage_get_stats(&st0);
  assert_int_equal(up(V_ASYNC, dev, b.p, n, s, &c), CUDA_SUCCESS);
  memset(b.p, 0x5a, n); /* the program's own again as soon as it returns */
  pl_stage_get_stats(&st1);
  assert_true(c.flags & PAGELOCK_COPY_REGISTERED);
  /* The pieces made went through the registration, the rest was staged. */
  uint64_t staged = st1.bytes_staged - st0.bytes_staged;
  size_t head = lo_of(b.p) - (uintptr_t)b.p;
  assert_true(staged + held >= n - head && staged <= n - head - PL_PIN_PIECE);
  assert_int_equal(f_cuStreamSynchronize(s), CUDA_SUCCESS);
  assert_int_equal(f_cuMemcpyDtoH_v2(chk, dev, n), CUDA_SUCCESS);
  assert_int_equal(check_pat(chk, n, 91), n);
  f_set_register_bandwidth(register_gbps());
  pl_pinreg_quiesce_for_test();
  /* Three pieces: 16 MiB, 16 MiB, the rest of the interior. */
  assert_int_equal(reg_interior(&b), interior_len(&b));
  assert_int_equal(f_reg_bytes_in((void *)lo_of(b.p), interior_len(&b), &first, &first_len),
                   interior_len(&b));
  assert_int_equal(first_len, PL_PIN_PIECE);
  assert_true(f_reg_bytes_in((void *)(lo_of(b.p) + 2 * PL_PIN_PIECE - 1), 2, &first, &first_len) ==
              2);
  assert_ptr_equal(first, (void *)(lo_of(b.p) + PL_PIN_PIECE));
  /* Live: whole-buffer copies both ways, every variant, through it. */
  for (int v = 0; v < V_COUNT; v++) {
    fill(b.p, n, 92u + (unsigned)v);
    assert_int_equal(up(v, dev, b.p, n, s, &c), CUDA_SUCCESS);
    assert_true(c.flags & PAGELOCK_COPY_REGISTERED);
    memset(b.p, 0, n);
    assert_int_equal(down(v, b.p, dev, n, s, &c), CUDA_SUCCESS);
    assert_true(c.flags & PAGELOCK_COPY_REGISTERED);
    v_sync(v, s);
    assert_int_equal(check_pat(b.p, n, 92u + (unsigned)v), n);
  }
  /* The driver refuses the second piece's call (once): the native call,
   * cut, does the rest in stream order, and the program sees what it
   * returns (success here) with every byte there. */
  fill(b.p, n, 98);
  f_fail("cuMemcpyHtoDAsync_v2", 3, CUDA_ERROR_INVALID_VALUE); /* edge, piece 1, piece 2 */
  assert_int_equal(up(V_ASYNC, dev, b.p, n, s, &c), CUDA_SUCCESS);
  f_clear_faults();
  assert_true(c.flags & PAGELOCK_COPY_REGISTERED);
  assert_int_equal(f_cuStreamSynchronize(s), CUDA_SUCCESS);
  assert_int_equal(f_cuMemcpyDtoH_v2(chk, dev, n), CUDA_SUCCESS);
  assert_int_equal(check_pat(chk, n, 98), n);
  /* Passed through from inside the first piece to the allocation's end:
   * uncut, the driver refuses it; cut, its bytes arrive. */
  uint8_t *from = (uint8_t *)lo_of(b.p) + 300;
  size_t len = (size_t)(b.p + n - from);
  pl_copy nc;
  memset(&nc, 0, sizeof nc);
  nc.api = h2d_api[V_SYNC];
  nc.dir = PAGELOCK_DIR_H2D;
  nc.dst = dev;
  nc.src = HP(from);
  nc.bytes = len;
  nc.native = nat_htod;
  assert_int_equal(nc.native(&nc), CUDA_ERROR_INVALID_VALUE);
  fill(from, len, 99);
  assert_int_equal(pl_pinreg_native(&nc), CUDA_SUCCESS);
  assert_int_equal(f_cuMemcpyDtoH_v2(chk, dev, len), CUDA_SUCCESS);
  assert_int_equal(check_pat(chk, len, 99), len);
  /* Released: every piece undone before the memory goes. */
  free(chk);
  blk_free(&b);
  assert_int_equal(f_cuStreamDestroy_v2(s), CUDA_SUCCESS);
  assert_int_equal(f_cuMemFree_v2(dev), CUDA_SUCCESS);
}

/* The driver refuses a piece after the first ones were made: those are
 * undone, the buffer is staged from then on, and the program sees no
 * error. */
static void test_pieces_fail(void **state) {
  (void)state;
  ap_env("register", "0", "sync", "sync");
  size_t n = 2 * PL_PIN_PIECE + MB;
  CUdeviceptr dev;
  assert_int_equal(f_cuMemAlloc_v2(&dev, n), CUDA_SUCCESS);
  warm_pool(dev);
  f_fail("cuMemHostRegister_v2", 2, CUDA_ERROR_OUT_OF_MEMORY);
  blk b = blk_new(n, 0);
  pl_copy c;
  fill(b.p, n, 70);
  assert_int_equal(up(V_SYNC, dev, b.p, n, NULL, &c), CUDA_SUCCESS);
  pl_pinreg_quiesce_for_test();
  assert_int_equal(reg_interior(&b), 0);
  assert_false(pl_pinreg_any());
  fill(b.p, n, 71);
  assert_int_equal(up(V_SYNC, dev, b.p, n, NULL, &c), CUDA_SUCCESS);
  assert_int_equal(c.why, PAGELOCK_WHY_FAILED);
  assert_true(c.flags & PAGELOCK_COPY_STAGED);
  assert_int_equal(dev_pat(dev, n, 71), n);
  pagelock_rec_counters k;
  memset(&k, 0, sizeof k);
  pl_pinreg_counters(&k);
  assert_int_equal(k.register_failures, 1);
  assert_int_equal(k.registrations, 0);
  assert_int_equal(k.registered_bytes, 0);
  f_clear_faults();
  blk_free(&b);
  assert_int_equal(f_cuMemFree_v2(dev), CUDA_SUCCESS);
}

/* An undo after the driver has shut down (a buffer freed from an atexit
 * handler or a destructor after CUDA's own teardown): the driver answers
 * CUDA_ERROR_DEINITIALIZED and has dropped every registration with its
 * contexts, so there is nothing to warn about (the demo printed "could not
 * undo a registration of its own (error 4)" at exit on the H100 host). */
static void test_undo_after_shutdown(void **state) {
  (void)state;
  ap_env("register", "0", "sync", "sync");
  CUdeviceptr dev;
  size_t n = 2 * MB;
  assert_int_equal(f_cuMemAlloc_v2(&dev, n), CUDA_SUCCESS);
  blk b = blk_new(n, 0);
  make_live(&b, dev);
  cap c;
  stderr_begin(&c, "stderr_shutdown", "warn");
  f_fail("cuMemHostUnregister", 0, CUDA_ERROR_DEINITIALIZED);
  pl_hostmem_untrack_range(b.map, b.maplen);
  pl_pinreg_release((uintptr_t)b.map, b.maplen);
  f_clear_faults();
  stderr_end(&c);
  assert_false(pl_pinreg_any());
  assert_int_equal(stderr_lines(&c, NULL, NULL, NULL), 0);
  /* The fake still holds what the "shut down" driver was told to drop. */
  f_cuMemHostUnregister((void *)lo_of(b.p));
  assert_int_equal(munmap(b.map, b.maplen), 0);
  assert_int_equal(f_cuMemFree_v2(dev), CUDA_SUCCESS);
}

/* PAGELOCK_LOG=debug prints each registration and undo with its time, and
 * every one of them (engine events are never deduplicated). */
static void test_debug_events(void **state) {
  (void)state;
  ap_env("register", "0", "sync", "sync");
  CUdeviceptr dev;
  size_t n = 2 * MB;
  assert_int_equal(f_cuMemAlloc_v2(&dev, n), CUDA_SUCCESS);
  cap c;
  stderr_begin(&c, "stderr_debug", "debug");
  for (int i = 0; i < 2; i++) {
    blk b = blk_new(n, 0);
    make_live(&b, dev);
    blk_free(&b);
  }
  stderr_end(&c);
  int reg = 0, unreg = 0;
  stderr_lines(&c, "pagelock: registered 2048 of 2048 KiB in ", "(error 0) at ", &reg);
  stderr_lines(&c, "pagelock: unregistered 2048 KiB in ", NULL, &unreg);
  assert_int_equal(reg, 2);
  assert_int_equal(unreg, 2);
  assert_int_equal(f_cuMemFree_v2(dev), CUDA_SUCCESS);
}

/* ---- two allocations sharing a page ---------------------------------------------- */

static void test_neighbours(void **state) {
  (void)state;
  ap_env("register", "0", "sync", "sync");
  size_t len = 48 * g_pg;
  uint8_t *map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  assert_true(map != MAP_FAILED);
  /* Page 20 holds the end of a and the start of b (both at least
   * PAGELOCK_TRACK_MIN, 64 KiB, so tracked). */
  uint8_t *a = map + 100, *bb = map + 20 * g_pg + 333;
  size_t na = (size_t)(bb - a), nb = 20 * g_pg;
  pl_hostmem_track(a, na, 0);
  pl_hostmem_track(bb, nb, 0);
  CUdeviceptr dev;
  assert_int_equal(f_cuMemAlloc_v2(&dev, len), CUDA_SUCCESS);
  pl_copy c;
  fill(a, na, 50);
  fill(bb, nb, 51);
  assert_int_equal(up(V_SYNC, dev, a, na, NULL, &c), CUDA_SUCCESS);
  assert_int_equal(up(V_SYNC, dev + na, bb, nb, NULL, &c), CUDA_SUCCESS);
  pl_pinreg_quiesce_for_test();
  const void *first;
  size_t flen;
  assert_int_equal(f_reg_bytes_in(map, len, &first, &flen), 19 * g_pg + 19 * g_pg);
  assert_ptr_equal(first, map + g_pg);
  assert_int_equal(flen, 19 * g_pg);
  assert_int_equal(f_reg_bytes_in(map + 20 * g_pg, g_pg, NULL, NULL), 0); /* the shared page */
  assert_int_equal(f_reg_bytes_in(map + 21 * g_pg, 19 * g_pg, NULL, NULL), 19 * g_pg);
  fill(a, na, 52);
  fill(bb, nb, 53);
  assert_int_equal(up(V_SYNC, dev, a, na, NULL, &c), CUDA_SUCCESS);
  assert_true(c.flags & PAGELOCK_COPY_REGISTERED);
  assert_int_equal(up(V_SYNC, dev + na, bb, nb, NULL, &c), CUDA_SUCCESS);
  assert_true(c.flags & PAGELOCK_COPY_REGISTERED);
  uint8_t *chk = malloc(na + nb);
  assert_int_equal(f_cuMemcpyDtoH_v2(chk, dev, na + nb), CUDA_SUCCESS);
  assert_int_equal(check_pat(chk, na, 52), na);
  assert_int_equal(check_pat(chk + na, nb, 53), nb);
  /* Both downloads back, the shared page written by both. */
  memset(map, 0, len);
  assert_int_equal(down(V_ASYNC, a, dev, na, NULL, &c), CUDA_SUCCESS);
  assert_int_equal(down(V_ASYNC, bb, dev + na, nb, NULL, &c), CUDA_SUCCESS);
  assert_int_equal(check_pat(a, na, 52), na);
  assert_int_equal(check_pat(bb, nb, 53), nb);
  /* free(a): b's registration stays. */
  pl_hostmem_untrack(a);
  pl_pinreg_release((uintptr_t)a, na);
  assert_int_equal(f_reg_bytes_in(map, 21 * g_pg, NULL, NULL), 0);
  assert_int_equal(f_reg_bytes_in(map + 21 * g_pg, 19 * g_pg, NULL, NULL), 19 * g_pg);
  pl_hostmem_untrack(bb);
  pl_pinreg_release((uintptr_t)map, len);
  assert_int_equal(f_reg_bytes_in(map, len, NULL, NULL), 0);
  free(chk);
  munmap(map, len);
  assert_int_equal(f_cuMemFree_v2(dev), CUDA_SUCCESS);
}

/* ---- the budget, eviction, hysteresis ---------------------------------------------- */

static void test_budget(void **state) {
  (void)state;
  ap_env("auto", "8M", "sync", "sync");
  setenv("PAGELOCK_REGISTER_HOT", "0", 1);
  config_reset();
  CUdeviceptr dev;
  size_t n = 6 * MB;
  assert_int_equal(f_cuMemAlloc_v2(&dev, n), CUDA_SUCCESS);
  blk a = blk_new(n, 0), b = blk_new(n, 0);
  pl_copy c;
  assert_int_equal(up(V_SYNC, dev, a.p, MB, NULL, &c), CUDA_SUCCESS);
  assert_int_equal(c.why, PAGELOCK_WHY_PENDING);
  pl_pinreg_quiesce_for_test();
  /* Two hot sets, 12 MiB against 8: a, copied all the time, stays; b is
   * staged, and nothing is evicted (the default: idle 1 s first). */
  uint64_t t0 = now_ns();
  int rounds = 0;
  while (now_ns() - t0 < 300000000ull) {
    assert_int_equal(up(V_ASYNC, dev, a.p, MB, NULL, &c), CUDA_SUCCESS);
    assert_true(c.flags & PAGELOCK_COPY_REGISTERED);
    assert_int_equal(up(V_ASYNC, dev, b.p, MB, NULL, &c), CUDA_SUCCESS);
    assert_int_equal(c.why, PAGELOCK_WHY_BUDGET);
    assert_true(c.flags & PAGELOCK_COPY_STAGED);
    rounds++;
  }
  assert_true(rounds > 2);
  pl_pinreg_quiesce_for_test();
  pagelock_rec_counters k;
  memset(&k, 0, sizeof k);
  pl_pinreg_counters(&k);
  assert_int_equal(k.evictions, 0);
  assert_int_equal(k.registrations, 1);
  assert_int_equal(k.register_budget, 8 * MB);
  /* Once a has been idle long enough (50 ms here), b takes its room. */
  pl_pinreg_set_idle_for_test(50000000ull);
  sleep_ms(60);
  assert_int_equal(up(V_ASYNC, dev, b.p, MB, NULL, &c), CUDA_SUCCESS);
  assert_int_equal(c.why, PAGELOCK_WHY_PENDING);
  pl_pinreg_quiesce_for_test();
  assert_int_equal(reg_interior(&b), n);
  assert_int_equal(reg_interior(&a), 0);
  /* and a, hot again, waits for b to idle in its turn */
  assert_int_equal(up(V_ASYNC, dev, a.p, MB, NULL, &c), CUDA_SUCCESS);
  assert_int_equal(c.why, PAGELOCK_WHY_BUDGET);
  pl_pinreg_counters(&k);
  assert_int_equal(k.evictions, 1);
  assert_int_equal(k.registrations, 2);
  assert_int_equal(k.unregistrations, 1);
  assert_int_equal(k.registered_bytes, n);
  assert_true(k.registered_bytes_high_water <= 8 * MB);
  struct fakecuda_stats fs;
  f_get_stats(&fs);
  assert_true(fs.registered_bytes_high_water <= 8 * MB);
  /* Larger than the whole budget: never. */
  blk big = blk_new(9 * MB, 0);
  assert_int_equal(up(V_ASYNC, dev, big.p, MB, NULL, &c), CUDA_SUCCESS);
  assert_int_equal(c.why, PAGELOCK_WHY_BUDGET);
  blk_free(&big);
  blk_free(&a);
  blk_free(&b);
  f_get_stats(&fs);
  assert_true(fs.registered_bytes_high_water <= 8 * MB);
  assert_int_equal(f_cuCtxSynchronize(), CUDA_SUCCESS);
  assert_int_equal(f_cuMemFree_v2(dev), CUDA_SUCCESS);
}

/* ---- no stale registration ----------------------------------------------------------- */

static atomic_int g_freed, g_stale;
/* The next allocator's free, as the engine's thread calls it: the block
 * must not hold a registered byte by then. */
static void counted_free(void *p) {
  if (f_reg_bytes_in(p, malloc_usable_size(p), NULL, NULL) != 0) atomic_fetch_add(&g_stale, 1);
  atomic_fetch_add(&g_freed, 1);
  free(p);
}
/* free(), as its hook does it. */
static void sim_free(void *p) {
  pl_hostmem_untrack(p);
  if (!pl_pinreg_defer_free(p, 0, counted_free)) counted_free(p);
}

static void test_release_free(void **state) {
  (void)state;
  ap_env("register", "0", "sync", "sync");
  atomic_store(&g_freed, 0);
  atomic_store(&g_stale, 0);
  CUdeviceptr dev;
  size_t n = 3 * MB;
  assert_int_equal(f_cuMemAlloc_v2(&dev, n), CUDA_SUCCESS);
  uint8_t *p = malloc(n);
  pl_hostmem_track(p, n, 0);
  pl_copy c;
  assert_int_equal(up(V_SYNC, dev, p, n, NULL, &c), CUDA_SUCCESS);
  pl_pinreg_quiesce_for_test();
  assert_true(f_reg_bytes_in(p, n, NULL, NULL) > 2 * MB);
  unsigned long unreg = f_call_count("cuMemHostUnregister");
  sim_free(p);
  /* Handed to the shim's thread, which undoes the registration and then
   * really frees the block. */
  pl_pinreg_quiesce_for_test();
  assert_int_equal(atomic_load(&g_freed), 1);
  assert_int_equal(atomic_load(&g_stale), 0);
  assert_int_equal(f_call_count("cuMemHostUnregister"), unreg + 1);
  assert_false(pl_pinreg_any());
  /* Free, then malloc at the same place: the new bytes are copied. */
  uint8_t *q = malloc(n);
  pl_hostmem_track(q, n, 0);
  fill(q, n, 60);
  assert_int_equal(up(V_SYNC, dev, q, n, NULL, &c), CUDA_SUCCESS);
  pl_pinreg_quiesce_for_test();
  fill(q, n, 61);
  assert_int_equal(up(V_SYNC, dev, q, n, NULL, &c), CUDA_SUCCESS);
  assert_true(c.flags & PAGELOCK_COPY_REGISTERED);
  assert_int_equal(dev_pat(dev, n, 61), n);
  /* A free while a copy holds the registration: undone after the copy. */
  pl_pin_use use;
  assert_true(pl_pinreg_hold((uintptr_t)q + MB, 1, &use));
  sim_free(q);
  pl_pinreg_quiesce_for_test();
  assert_int_equal(atomic_load(&g_freed), 1);
  assert_true(f_reg_bytes_in(q, n, NULL, NULL) > 0);
  pl_pinreg_unhold(&use);
  pl_pinreg_quiesce_for_test();
  assert_int_equal(atomic_load(&g_freed), 2);
  assert_int_equal(atomic_load(&g_stale), 0);
  /* A free while the registration is being made. */
  uint8_t *r = malloc(n);
  pl_hostmem_track(r, n, 0);
  assert_int_equal(up(V_SYNC, dev, r, n, NULL, &c), CUDA_SUCCESS);
  sim_free(r);
  pl_pinreg_quiesce_for_test();
  assert_int_equal(atomic_load(&g_freed), 3);
  assert_int_equal(atomic_load(&g_stale), 0);
  assert_false(pl_pinreg_any());
  assert_int_equal(f_cuMemFree_v2(dev), CUDA_SUCCESS);
}

struct rel_arg {
  uintptr_t p;
  size_t n;
  atomic_int done;
};
static void *release_thread(void *arg) {
  struct rel_arg *a = arg;
  pl_pinreg_release(a->p, a->n);
  atomic_store(&a->done, 1);
  return NULL;
}

/* munmap, mremap, madvise(DONTNEED): undone before the call, synchronously,
 * on the caller's thread. */
static void test_release_map(void **state) {
  (void)state;
  ap_env("register", "0", "sync", "sync");
  CUdeviceptr dev;
  size_t n = 2 * MB;
  assert_int_equal(f_cuMemAlloc_v2(&dev, n), CUDA_SUCCESS);
  pl_copy c;
  /* munmap of a part in the middle */
  blk b = blk_new(n, 0);
  make_live(&b, dev);
  pl_pinreg_release((uintptr_t)b.p + MB, g_pg);
  assert_int_equal(f_reg_bytes_in(b.map, b.maplen, NULL, NULL), 0);
  blk_free(&b);
  /* mremap (grow and move) */
  b = blk_new(n, 0);
  make_live(&b, dev);
  pl_hostmem_untrack_range(b.p, n);
  pl_pinreg_release((uintptr_t)b.p, n);
  assert_int_equal(f_reg_bytes_in(b.map, b.maplen, NULL, NULL), 0);
  uint8_t *m = mremap(b.map, b.maplen, 2 * b.maplen, MREMAP_MAYMOVE);
  assert_true(m != MAP_FAILED);
  munmap(m, 2 * b.maplen);
  /* madvise(MADV_DONTNEED) of a page: its contents go */
  b = blk_new(n, 0);
  make_live(&b, dev);
  pl_pinreg_release((uintptr_t)b.p + 5 * g_pg, g_pg);
  assert_int_equal(f_reg_bytes_in(b.map, b.maplen, NULL, NULL), 0);
  assert_int_equal(madvise(b.p + 5 * g_pg, g_pg, MADV_DONTNEED), 0);
  /* The allocation lives on and is registered again at its next copy. */
  fill(b.p, n, 70);
  assert_int_equal(up(V_SYNC, dev, b.p, n, NULL, &c), CUDA_SUCCESS);
  assert_int_equal(c.why, PAGELOCK_WHY_PENDING);
  pl_pinreg_quiesce_for_test();
  assert_int_equal(reg_interior(&b), n);
  /* A release while a copy holds it waits for the copy. */
  pl_pin_use use;
  assert_true(pl_pinreg_hold((uintptr_t)b.p, n, &use));
  pthread_t t;
  struct rel_arg rl = {.p = (uintptr_t)b.p, .n = n};
  atomic_init(&rl.done, 0);
  assert_int_equal(pthread_create(&t, NULL, release_thread, &rl), 0);
  sleep_ms(20);
  assert_int_equal(atomic_load(&rl.done), 0);
  assert_int_equal(reg_interior(&b), n);
  pl_pinreg_unhold(&use);
  pthread_join(t, NULL);
  assert_int_equal(atomic_load(&rl.done), 1);
  assert_int_equal(f_reg_bytes_in(b.map, b.maplen, NULL, NULL), 0);
  blk_free(&b);
  assert_int_equal(f_cuMemFree_v2(dev), CUDA_SUCCESS);
}

/* ---- failure, capture, fork, the program's own registration ---------------------------- */

static void test_failure(void **state) {
  (void)state;
  ap_env("register", "0", "sync", "sync");
  cap cp;
  stderr_begin(&cp, "stderr", "warn");
  CUdeviceptr dev;
  size_t n = 2 * MB;
  assert_int_equal(f_cuMemAlloc_v2(&dev, 4 * MB), CUDA_SUCCESS);
  /* The staging pool is page-locked by the same entry point: let it exist
   * first, so that what fails below is the registration of the program's
   * buffers alone. */
  warm_pool(dev);
  f_fail("cuMemHostRegister_v2", 0, CUDA_ERROR_OUT_OF_MEMORY);
  blk a = blk_new(n, 0), b = blk_new(n, 0);
  pl_copy c;
  CUresult ra = up(V_SYNC, dev, a.p, n, NULL, &c);
  pl_pinreg_quiesce_for_test();
  CUresult rb = up(V_SYNC, dev, b.p, n, NULL, &c);
  pl_pinreg_quiesce_for_test();
  fill(a.p, n, 80);
  CUresult r2 = up(V_ASYNC, dev, a.p, n, NULL, &c);
  stderr_end(&cp);
  assert_int_equal(ra, CUDA_SUCCESS);
  assert_int_equal(rb, CUDA_SUCCESS);
  assert_int_equal(r2, CUDA_SUCCESS);
  assert_int_equal(c.why, PAGELOCK_WHY_FAILED);
  assert_true(c.flags & PAGELOCK_COPY_STAGED);
  assert_int_equal(dev_pat(dev, n, 80), n);
  pagelock_rec_counters k;
  memset(&k, 0, sizeof k);
  pl_pinreg_counters(&k);
  assert_int_equal(k.register_failures, 2);
  assert_int_equal(k.registrations, 0);
  assert_false(pl_pinreg_any());
  /* One line for both. */
  int ours = 0;
  assert_int_equal(stderr_lines(&cp, "pagelock: could not page-lock", NULL, &ours), 1);
  assert_int_equal(ours, 1);
  f_clear_faults();
  blk_free(&a);
  blk_free(&b);
  assert_int_equal(f_cuMemFree_v2(dev), CUDA_SUCCESS);
}

static void test_capture(void **state) {
  (void)state;
  ap_env("register", "8M", "sync", "sync");
  CUdeviceptr dev;
  size_t n = 6 * MB;
  CUstream s;
  assert_int_equal(f_cuMemAlloc_v2(&dev, n), CUDA_SUCCESS);
  assert_int_equal(f_cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  blk a = blk_new(n, 0), b = blk_new(n, 0);
  make_live(&a, dev);
  pl_copy c;
  assert_int_equal(f_cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  /* No registration during a capture. */
  assert_int_equal(up(V_ASYNC, dev, b.p, MB, s, &c), CUDA_SUCCESS);
  assert_int_equal(c.why, PAGELOCK_WHY_CAPTURE);
  assert_true(c.flags & PAGELOCK_COPY_CAPTURE);
  assert_false(pl_pinreg_touches((uintptr_t)b.p, n));
  /* A captured copy over a live registration pins it for the graph. */
  assert_int_equal(up(V_ASYNC, dev, a.p, MB, s, &c), CUDA_SUCCESS);
  assert_true(c.flags & PAGELOCK_COPY_CAPTURE);
  assert_true(c.flags & PAGELOCK_COPY_REGISTERED);
  CUgraph g = NULL;
  assert_int_equal(f_cuStreamEndCapture(s, &g), CUDA_SUCCESS);
  assert_non_null(g);
  /* Idle or not, it is never evicted while its memory lives. */
  pl_pinreg_set_idle_for_test(1000000ull);
  sleep_ms(5);
  assert_int_equal(up(V_ASYNC, dev, b.p, MB, s, &c), CUDA_SUCCESS);
  assert_int_equal(c.why, PAGELOCK_WHY_BUDGET);
  assert_int_equal(reg_interior(&a), n);
  assert_int_equal(f_cuGraphDestroy(g), CUDA_SUCCESS);
  blk_free(&a);
  assert_int_equal(up(V_ASYNC, dev, b.p, MB, s, &c), CUDA_SUCCESS);
  assert_int_equal(c.why, PAGELOCK_WHY_PENDING);
  assert_int_equal(f_cuStreamSynchronize(s), CUDA_SUCCESS);
  pl_pinreg_quiesce_for_test();
  blk_free(&b);
  assert_int_equal(f_cuStreamDestroy_v2(s), CUDA_SUCCESS);
  assert_int_equal(f_cuMemFree_v2(dev), CUDA_SUCCESS);
}

/* A child forked after registration reads the buffers, and never undoes
 * the parent's registrations. */
static void test_fork(void **state) {
  (void)state;
  ap_env("register", "0", "sync", "sync");
  CUdeviceptr dev;
  size_t n = 2 * MB;
  assert_int_equal(f_cuMemAlloc_v2(&dev, n), CUDA_SUCCESS);
  blk b = blk_new(n, 0);
  fill(b.p, n, 90);
  make_live(&b, dev);
  uint8_t *q = malloc(n);
  pl_hostmem_track(q, n, 0);
  pl_copy c;
  assert_int_equal(up(V_SYNC, dev, q, n, NULL, &c), CUDA_SUCCESS);
  pl_pinreg_quiesce_for_test();
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    alarm(20); /* a lock inherited held would hang here */
    unsigned long before = f_call_count("cuMemHostUnregister");
    int bad = check_pat(b.p, n, 90) != n;
    bad |= pl_pinreg_any() ? 2 : 0;
    pl_hostmem_untrack(q);
    bad |= pl_pinreg_defer_free(q, n, free) ? 4 : 0;
    free(q);
    pl_pinreg_release((uintptr_t)b.map, b.maplen);
    munmap(b.map, b.maplen);
    bad |= f_call_count("cuMemHostUnregister") != before ? 8 : 0;
    _exit(bad);
  }
  int st = 0;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
  /* The parent's registrations are intact and in use. */
  assert_int_equal(reg_interior(&b), n);
  assert_int_equal(up(V_SYNC, dev, b.p, n, NULL, &c), CUDA_SUCCESS);
  assert_true(c.flags & PAGELOCK_COPY_REGISTERED);
  sim_free(q);
  pl_pinreg_quiesce_for_test();
  blk_free(&b);
  assert_int_equal(f_cuMemFree_v2(dev), CUDA_SUCCESS);
}

/* The program page-locks memory the shim registered: the shim's goes
 * first, the program's call succeeds, and the shim does not register it
 * again meanwhile. */
static void test_yield(void **state) {
  (void)state;
  ap_env("register", "0", "sync", "sync");
  CUdeviceptr dev;
  size_t n = 2 * MB;
  assert_int_equal(f_cuMemAlloc_v2(&dev, n), CUDA_SUCCESS);
  blk b = blk_new(n, 0);
  make_live(&b, dev);
  pl_pinreg_yield((uintptr_t)b.p + MB, 100);
  assert_int_equal(f_reg_bytes_in(b.map, b.maplen, NULL, NULL), 0);
  pl_copy c;
  assert_int_equal(up(V_SYNC, dev, b.p, n, NULL, &c), CUDA_SUCCESS);
  assert_int_equal(c.why, PAGELOCK_WHY_BUDGET);
  pl_pinreg_quiesce_for_test();
  assert_int_equal(f_cuMemHostRegister_v2(b.p + MB, 100, 0), CUDA_SUCCESS);
  assert_int_equal(f_cuMemHostUnregister(b.p + MB), CUDA_SUCCESS);
  blk_free(&b);
  assert_int_equal(f_cuMemFree_v2(dev), CUDA_SUCCESS);
}

/* ---- many threads --------------------------------------------------------------------- */

#define NTHREADS 4
#define NITER (TSAN ? 6 : 20)
static atomic_int t_fail;

static void *worker(void *arg) {
  unsigned id = (unsigned)(uintptr_t)arg;
  CUdeviceptr dev;
  size_t n = MB + 4096 * id + 77;
  if (f_cuCtxSetCurrent(g_ctx) != CUDA_SUCCESS || f_cuMemAlloc_v2(&dev, n) != CUDA_SUCCESS) {
    atomic_fetch_add(&t_fail, 1);
    return NULL;
  }
  uint8_t *chk = malloc(n);
  for (unsigned it = 0; it < NITER; it++) {
    uint8_t *p = malloc(n);
    pl_hostmem_track(p, n, 0);
    for (unsigned k = 0; k < 3; k++) {
      unsigned seed = id * 1000 + it * 10 + k;
      fill(p, n, seed);
      pl_copy c;
      if (xcopy(true, (int)(k % V_COUNT), dev, p, n, NULL, &c) != CUDA_SUCCESS)
        atomic_fetch_add(&t_fail, 1);
      memset(p, 0, n);
      if (xcopy(false, (int)((k + 1) % V_COUNT), dev, p, n, NULL, &c) != CUDA_SUCCESS)
        atomic_fetch_add(&t_fail, 1);
      if (f_cuStreamSynchronize(CU_STREAM_PER_THREAD) != CUDA_SUCCESS) atomic_fetch_add(&t_fail, 1);
      if (check_pat(p, n, seed) != n) atomic_fetch_add(&t_fail, 1);
    }
    if (it % 2) {
      sim_free(p);
    } else {
      pl_hostmem_untrack(p);
      pl_pinreg_release((uintptr_t)p, n);
      if (f_reg_bytes_in(p, n, NULL, NULL) != 0) atomic_fetch_add(&t_fail, 1);
      free(p);
    }
  }
  free(chk);
  f_cuMemFree_v2(dev);
  return NULL;
}

static void test_threads(void **state) {
  (void)state;
  ap_env("register", "6M", "sync", "sync");
  pl_pinreg_set_idle_for_test(1000000ull);
  atomic_store(&t_fail, 0);
  atomic_store(&g_stale, 0);
  pthread_t t[NTHREADS];
  for (unsigned i = 0; i < NTHREADS; i++)
    assert_int_equal(pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)i), 0);
  for (unsigned i = 0; i < NTHREADS; i++) pthread_join(t[i], NULL);
  pl_pinreg_quiesce_for_test();
  assert_int_equal(atomic_load(&t_fail), 0);
  assert_int_equal(atomic_load(&g_stale), 0);
  assert_false(pl_pinreg_any());
  struct fakecuda_stats fs;
  /* Registered at most: the budget plus the staging pool (4M, ap_env);
   * nothing once the pool is gone. */
  f_get_stats(&fs);
  assert_true(fs.registered_bytes_high_water <= 6 * MB + 4 * MB);
  pl_stage_reset_for_test();
  f_get_stats(&fs);
  assert_int_equal(fs.registered_bytes_live, 0);
  pagelock_rec_counters k;
  memset(&k, 0, sizeof k);
  pl_pinreg_counters(&k);
  assert_true(k.registrations > 0);
  assert_int_equal(k.registrations, k.unregistrations);
}

/* ---- the trace: COPY records and COUNTERS ------------------------------------------------ */

static void test_counters_record(void **state) {
  (void)state;
  char path[512];
  snprintf(path, sizeof path, "%s/counters.trace", tmpdir);
  setenv("PAGELOCK_OUTPUT", path, 1);
  ap_env("register", "16M", "sync", "sync");
  pl_trace_reset_for_test();
  CUdeviceptr dev;
  size_t n = 2 * MB;
  assert_int_equal(f_cuMemAlloc_v2(&dev, n), CUDA_SUCCESS);
  blk b = blk_new(n, 0);
  pl_copy c;
  assert_int_equal(up(V_SYNC, dev, b.p, n, NULL, &c), CUDA_SUCCESS); /* PENDING, staged */
  pl_pinreg_quiesce_for_test();
  assert_int_equal(up(V_SYNC, dev, b.p, n, NULL, &c), CUDA_SUCCESS);   /* REGISTERED */
  assert_int_equal(down(V_SYNC, b.p, dev, n, NULL, &c), CUDA_SUCCESS); /* REGISTERED */
  blk_free(&b);
  pl_exit_trace();
  pl_trace_reset_for_test();
  plr_reader r;
  assert_int_equal(plr_open(&r, path), PLR_OPEN_OK);
  plr_record rec;
  int counters = 0, copies = 0, registered = 0, pending = 0;
  while (plr_next(&r, &rec)) {
    if (rec.type == PAGELOCK_REC_COPY) {
      copies++;
      if (rec.u.copy->flags & PAGELOCK_COPY_REGISTERED) {
        registered++;
        assert_int_equal(rec.u.copy->why, PAGELOCK_WHY_NONE);
      }
      if (rec.u.copy->why == PAGELOCK_WHY_PENDING) {
        pending++;
        assert_true(rec.u.copy->flags & PAGELOCK_COPY_STAGED);
      }
    }
    if (rec.type != PAGELOCK_REC_COUNTERS) continue;
    counters++;
    assert_int_equal(rec.u.counters->register_budget, 16 * MB);
    assert_int_equal(rec.u.counters->registrations, 1);
    assert_int_equal(rec.u.counters->unregistrations, 1);
    assert_int_equal(rec.u.counters->evictions, 0);
    assert_int_equal(rec.u.counters->register_failures, 0);
    assert_int_equal(rec.u.counters->registered_bytes, 0);
    assert_int_equal(rec.u.counters->registered_bytes_high_water, n);
    assert_true(rec.u.counters->register_ns > 0);
    assert_int_equal(rec.u.counters->bytes_staged, n);
  }
  plr_close(&r);
  assert_int_equal(counters, 1);
  assert_int_equal(copies, 3);
  assert_int_equal(registered, 2);
  assert_int_equal(pending, 1);
  snprintf(path, sizeof path, "%s/all.trace", tmpdir);
  setenv("PAGELOCK_OUTPUT", path, 1);
  config_reset();
  assert_int_equal(f_cuMemFree_v2(dev), CUDA_SUCCESS);
}

int main(void) {
  /* Injected failures log; keep the output to cmocka's. */
  setenv("PAGELOCK_LOG", "error", 1);
  setenv("PAGELOCK_COPY_THREADS", "2", 1);
  /* Registering costs 1/4 ns a byte (the H100 host: 1/16): a 1 GiB
   * registration is still under way while copies run beside it. */
  setenv("FAKECUDA_REGISTER_GBPS", "4", 1);
  g_pg = (size_t)sysconf(_SC_PAGESIZE);
  snprintf(tmpdir, sizeof tmpdir, "%s/pagelock-autopin.XXXXXX",
           getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  if (mkdtemp(tmpdir) == NULL) return 2;
  char path[512];
  snprintf(path, sizeof path, "%s/all.trace", tmpdir);
  setenv("PAGELOCK_OUTPUT", path, 1);
  config_reset();
  pl_hostmem_init(64 << 10);
  if (load_driver() != 0) return 2;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_register_first_copy),
      cmocka_unit_test(test_register_never_waits),
      cmocka_unit_test(test_follow),
      cmocka_unit_test(test_ask_after),
      cmocka_unit_test(test_auto_hot),
      cmocka_unit_test(test_registrable),
      cmocka_unit_test(test_bytes_exact),
      cmocka_unit_test(test_h2d_returns_after_read),
      cmocka_unit_test(test_h2d_tail_staged),
      cmocka_unit_test(test_h2d_tail_fallback),
      cmocka_unit_test(test_own_pages),
      cmocka_unit_test(test_h2d_tail_turnaround),
      cmocka_unit_test(test_h2d_tail_wait_excluded),
      cmocka_unit_test(test_d2h_returns_with_bytes),
      cmocka_unit_test(test_native_cut),
      cmocka_unit_test(test_pieces),
      cmocka_unit_test(test_pieces_fail),
      cmocka_unit_test(test_undo_after_shutdown),
      cmocka_unit_test(test_debug_events),
      cmocka_unit_test(test_settle),
      cmocka_unit_test(test_neighbours),
      cmocka_unit_test(test_budget),
      cmocka_unit_test(test_release_free),
      cmocka_unit_test(test_release_map),
      cmocka_unit_test(test_failure),
      cmocka_unit_test(test_capture),
      cmocka_unit_test(test_fork),
      cmocka_unit_test(test_yield),
      cmocka_unit_test(test_threads),
      cmocka_unit_test(test_counters_record),
  };
  int rc = cmocka_run_group_tests_name("autopin", tests, NULL, NULL);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  if (system(cmd) != 0) rc = rc ? rc : 1;
  return rc;
}
