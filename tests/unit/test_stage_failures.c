/* test_stage_failures.c - the staging engine when the driver refuses:
 * pinned memory, a chunk's DMA, a device range, a capturing stream
 * (stage_fixture.h). */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "stage_fixture.h"

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

int main(void) {
  stage_fixture_env();
  if (stage_fixture_start() != 0) return 2;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_pool_alloc_failure),
      cmocka_unit_test(test_dma_failure),
      cmocka_unit_test(test_invalid_device),
      cmocka_unit_test(test_capture),
  };
  return stage_fixture_end(cmocka_run_group_tests_name("stage_failures", tests, NULL, NULL));
}
