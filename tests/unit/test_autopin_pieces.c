/* test_autopin_pieces.c - a registration made in pieces on the shim's
 * thread: pieces that fail, an undo after shutdown, the debug log's events
 * (autopin_fixture.h). */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <cmocka.h>

#include "autopin_fixture.h"

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

int main(void) {
  if (autopin_fixture_start() != 0) return 2;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_pieces),
      cmocka_unit_test(test_pieces_fail),
      cmocka_unit_test(test_undo_after_shutdown),
      cmocka_unit_test(test_debug_events),
  };
  return autopin_fixture_end(cmocka_run_group_tests_name("autopin_pieces", tests, NULL, NULL));
}
