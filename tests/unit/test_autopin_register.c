/* test_autopin_register.c - when a buffer is registered: under register
 * its first copy asks and the copies meanwhile are staged (or follow the
 * registration's pieces), under auto once it is hot (autopin_fixture.h). */
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
  c.src_mem = PAGELOCK_MEM_PAGEABLE;
  pl_autopin_probe q;
  pl_route v = pl_copy_route(&c, PAGELOCK_MODE_REGISTER, &q);
  assert_int_equal(v.kind, PL_ROUTE_STAGE);
  assert_true(v.request);
  assert_int_equal(c.why, PAGELOCK_WHY_PENDING);
  assert_true(q.use.ask.len > 0);
  assert_false(pl_pinreg_busy(lo_of(b.p), interior_len(&b))); /* nothing asked yet */
  pl_autopin_after(&c, &q.use);
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

int main(void) {
  if (autopin_fixture_start() != 0) return 2;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_register_first_copy),
      cmocka_unit_test(test_register_never_waits),
      cmocka_unit_test(test_follow),
      cmocka_unit_test(test_ask_after),
      cmocka_unit_test(test_auto_hot),
      cmocka_unit_test(test_registrable),
  };
  return autopin_fixture_end(cmocka_run_group_tests_name("autopin_register", tests, NULL, NULL));
}
