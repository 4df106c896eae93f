/* test_autopin_copy.c - the copy over a registration: bytes exact, the
 * stream's order, when the call returns, the partial pages and the tail
 * (autopin_fixture.h). */
#define _GNU_SOURCE
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "autopin_fixture.h"

/* The shim's wrapper (pagelock_core), which cuda.h declares under another name. */
CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *, CUstream);

/* ---- helpers ------------------------------------------------------------- */

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

int main(void) {
  if (autopin_fixture_start() != 0) return 2;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bytes_exact),
      cmocka_unit_test(test_h2d_returns_after_read),
      cmocka_unit_test(test_h2d_tail_staged),
      cmocka_unit_test(test_h2d_tail_fallback),
      cmocka_unit_test(test_own_pages),
      cmocka_unit_test(test_h2d_tail_turnaround),
      cmocka_unit_test(test_h2d_tail_wait_excluded),
      cmocka_unit_test(test_d2h_returns_with_bytes),
      cmocka_unit_test(test_native_cut),
      cmocka_unit_test(test_settle),
  };
  return autopin_fixture_end(cmocka_run_group_tests_name("autopin_copy", tests, NULL, NULL));
}
