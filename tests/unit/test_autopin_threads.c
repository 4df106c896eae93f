/* test_autopin_threads.c - the registration engine under many threads
 * at once (autopin_fixture.h). */
#define _GNU_SOURCE
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "autopin_fixture.h"

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

int main(void) {
  if (autopin_fixture_start() != 0) return 2;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_threads),
  };
  return autopin_fixture_end(cmocka_run_group_tests_name("autopin_threads", tests, NULL, NULL));
}
