/* test_stage_pool.c - the staging engine's pool: built ahead of the first
 * copy, and the bounded wait for a chunk (stage_fixture.h). */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "stage_fixture.h"

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
  pl_engines_driver_init();
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
  pl_engines_driver_init();
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
  pl_engines_driver_init();
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
  pl_engines_driver_init();
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

int main(void) {
  stage_fixture_env();
  if (stage_fixture_start() != 0) return 2;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_prewarm),
      cmocka_unit_test(test_prewarm_premapped),
      cmocka_unit_test(test_prewarm_spare_taken_by_copy),
      cmocka_unit_test(test_wait_fallback),
  };
  return stage_fixture_end(cmocka_run_group_tests_name("stage_pool", tests, NULL, NULL));
}
