/* test_autopin_memory.c - the program's memory under registrations: two
 * allocations sharing a page, the budget and eviction, and no registration
 * outliving a free, munmap, mremap or madvise (autopin_fixture.h). */
#define _GNU_SOURCE
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <cmocka.h>

#include "autopin_fixture.h"

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

int main(void) {
  if (autopin_fixture_start() != 0) return 2;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_neighbours),
      cmocka_unit_test(test_budget),
      cmocka_unit_test(test_release_free),
      cmocka_unit_test(test_release_map),
  };
  return autopin_fixture_end(cmocka_run_group_tests_name("autopin_memory", tests, NULL, NULL));
}
