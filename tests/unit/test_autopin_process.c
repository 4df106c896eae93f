/* test_autopin_process.c - the registration engine when the driver
 * refuses, under graph capture, across a fork, beside the program's own
 * registration, and the COPY and COUNTERS records it leaves
 * (autopin_fixture.h). */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "autopin_fixture.h"

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
  if (autopin_fixture_start() != 0) return 2;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_failure),
      cmocka_unit_test(test_capture),
      cmocka_unit_test(test_fork),
      cmocka_unit_test(test_yield),
      cmocka_unit_test(test_counters_record),
  };
  return autopin_fixture_end(cmocka_run_group_tests_name("autopin_process", tests, NULL, NULL));
}
