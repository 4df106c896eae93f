/* stage_fixture.c - what the staging engine's tests share (stage_fixture.h). */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "stage_fixture.h"

char tmpdir[256];

void stage_fixture_env(void) {
  setenv("PAGELOCK_LOG", "error", 1);
  setenv("PAGELOCK_COPY_THREADS", "4", 1);
}

int stage_fixture_start(void) {
  snprintf(tmpdir, sizeof tmpdir, "%s/pagelock-stage.XXXXXX",
           getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  if (mkdtemp(tmpdir) == NULL) return -1;
  char path[512];
  snprintf(path, sizeof path, "%s/all.trace", tmpdir);
  setenv("PAGELOCK_OUTPUT", path, 1);
  pl_config_reset_for_test();
  return load_driver();
}

int stage_fixture_end(int rc) {
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  if (system(cmd) != 0) rc = rc ? rc : 1;
  return rc;
}

void stage_env(size_t pool, size_t chunk, long wait_us, const char *d2h) {
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

size_t check_byte(const void *p, size_t n, uint8_t b) {
  for (size_t i = 0; i < n; i++)
    if (((const uint8_t *)p)[i] != b) return i;
  return n;
}

bool bound_ok(void) {
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

pl_copy mk_copy(int api, CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
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

const char *const vname[V_COUNT] = {"sync",          "sync_ptds", "async",
                                    "async_ptsz(0)", "cuMemcpy",  "cuMemcpyAsync"};

CUresult do_h2d(int v, CUdeviceptr d, const void *h, size_t n, CUstream s) {
  switch (v) {
    case V_SYNC: return cuMemcpyHtoD_v2(d, h, n);
    case V_SYNC_PTDS: return cuMemcpyHtoD_v2_ptds(d, h, n);
    case V_ASYNC: return cuMemcpyHtoDAsync_v2(d, h, n, s);
    case V_ASYNC_PTSZ0: return cuMemcpyHtoDAsync_v2_ptsz(d, h, n, NULL);
    case V_ANY: return cuMemcpy(d, HP(h), n);
    default: return cuMemcpyAsync(d, HP(h), n, s);
  }
}

CUresult do_d2h(int v, void *h, CUdeviceptr d, size_t n, CUstream s) {
  switch (v) {
    case V_SYNC: return cuMemcpyDtoH_v2(h, d, n);
    case V_SYNC_PTDS: return cuMemcpyDtoH_v2_ptds(h, d, n);
    case V_ASYNC: return cuMemcpyDtoHAsync_v2(h, d, n, s);
    case V_ASYNC_PTSZ0: return cuMemcpyDtoHAsync_v2_ptsz(h, d, n, NULL);
    case V_ANY: return cuMemcpy(HP(h), d, n);
    default: return cuMemcpyAsync(HP(h), d, n, s);
  }
}

bool v_async(int v) { return v == V_ASYNC || v == V_ASYNC_PTSZ0 || v == V_ANY_ASYNC; }

void v_sync(int v, CUstream s) {
  assert_int_equal(f_cuStreamSynchronize(v == V_ASYNC_PTSZ0 ? CU_STREAM_PER_THREAD : s),
                   CUDA_SUCCESS);
  assert_int_equal(f_cuCtxSynchronize(), CUDA_SUCCESS);
}

const size_t sizes[] = {0,
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
_Static_assert(sizeof sizes / sizeof sizes[0] == NSIZES, "NSIZES counts sizes");

void bufs_init(bufs *b) {
  assert_int_equal(f_cuMemAlloc_v2(&b->dev, MAXN + 2 * GUARD), CUDA_SUCCESS);
  b->host = malloc(MAXN + 2 * GUARD);
  b->chk = malloc(MAXN + 2 * GUARD);
  assert_non_null(b->host);
  assert_non_null(b->chk);
  assert_int_equal(f_cuStreamCreate(&b->s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
}

void bufs_fini(bufs *b) {
  assert_int_equal(f_cuStreamDestroy_v2(b->s), CUDA_SUCCESS);
  assert_int_equal(f_cuMemFree_v2(b->dev), CUDA_SUCCESS);
  free(b->host);
  free(b->chk);
}

void one_h2d(bufs *b, int v, size_t n, size_t ho, size_t dof, unsigned seed) {
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

void one_d2h(bufs *b, int v, size_t n, size_t ho, size_t dof, unsigned seed, bool async_mode) {
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

atomic_int gate;

void CUDA_CB gate_fn(void *arg) {
  (void)arg;
  struct timespec ts = {0, 100000};
  while (!atomic_load(&gate)) nanosleep(&ts, NULL);
}
