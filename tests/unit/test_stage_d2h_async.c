/* test_stage_d2h_async.c - asynchronous device-to-host copies
 * (PAGELOCK_D2H=async) queued behind work: rings of chunks, returned
 * without waiting, nothing landing early (stage_fixture.h). */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "stage_fixture.h"

/* Host function: holds its stream until *arg is set. */
static void CUDA_CB gate_on_fn(void *arg) {
  struct timespec ts = {0, 100000};
  while (!atomic_load((atomic_int *)arg)) nanosleep(&ts, NULL);
}

/* Host function: how many pool bytes were free when the stream got here. */
static atomic_llong probe_free = -1;
static void CUDA_CB free_probe_fn(void *arg) {
  (void)arg;
  pl_stage_stats s;
  pl_stage_get_stats(&s);
  atomic_store(&probe_free, (long long)s.pool.free_bytes);
}

/* Asynchronous device-to-host copies several times the pool, queued behind
 * work their streams have not reached: each returns without waiting, every
 * byte staged, nothing landing early.  A copy holds a ring of half the
 * pool; the second copy on stream A takes A's ring over (the first copy's
 * host functions must not free it: a probe between the two sees no chunk
 * free); a copy on stream C takes the other half; a copy on stream D then
 * finds none, waits (bounded) and passes through.  Then bytes exact and
 * every chunk back. */
static void test_d2h_async_ring(void **state) {
  (void)state;
  const long wait_us = 20000;
  stage_env(POOL, CHUNK, wait_us, "async");
  pl_stage_mixed_for_test(); /* rings keep to half the pool (see test_d2h_async_alone) */
  bufs a, c, d;
  bufs_init(&a);
  bufs_init(&c);
  bufs_init(&d);
  const size_t n1 = 2 * POOL + 12345, n2 = 2 * POOL + 999, n3 = POOL + 7, n4 = 256 * KB + 3;
  uint8_t *out2 = malloc(n2);
  assert_non_null(out2);
  fill(a.chk, n1 + n2, 91);
  assert_int_equal(f_cuMemcpyHtoD_v2(a.dev, a.chk, n1 + n2), CUDA_SUCCESS);
  fill(c.chk, n3, 92);
  assert_int_equal(f_cuMemcpyHtoD_v2(c.dev, c.chk, n3), CUDA_SUCCESS);
  fill(d.chk, n4, 93);
  assert_int_equal(f_cuMemcpyHtoD_v2(d.dev, d.chk, n4), CUDA_SUCCESS);
  memset(a.host, 0, n1);
  memset(out2, 0, n2);
  memset(c.host, 0, n3);
  memset(d.host, 0, n4);

  atomic_store(&gate, 0);
  atomic_store(&probe_free, -1);
  assert_int_equal(f_cuLaunchHostFunc(a.s, gate_fn, NULL), CUDA_SUCCESS);
  static atomic_int gate_c;
  atomic_store(&gate_c, 0);
  assert_int_equal(f_cuLaunchHostFunc(c.s, gate_on_fn, &gate_c), CUDA_SUCCESS);
  pl_copy c1 = mk_copy(PAGELOCK_API_cuMemcpyDtoHAsync_v2, HP(a.host), a.dev, n1, a.s);
  f_reset_call_counts();
  assert_int_equal(pl_copy_exec(&c1), CUDA_SUCCESS);
  /* 33 chunks' worth through a ring of 8 chunks made as one slab: five
   * rounds, one DMA and one host function each */
  assert_int_equal(f_call_count("cuMemHostRegister_v2"), 1);
  assert_int_equal(f_call_count("cuMemcpyDtoHAsync_v2"), 5);
  assert_int_equal(f_call_count("cuLaunchHostFunc"), 5);
  assert_int_equal(f_cuLaunchHostFunc(a.s, free_probe_fn, NULL), CUDA_SUCCESS);
  pl_copy c2 = mk_copy(PAGELOCK_API_cuMemcpyDtoHAsync_v2, HP(out2), a.dev + n1, n2, a.s);
  f_reset_call_counts();
  assert_int_equal(pl_copy_exec(&c2), CUDA_SUCCESS);
  assert_int_equal(f_call_count("cuMemHostRegister_v2"), 0); /* the ring taken over */
  assert_int_equal(f_call_count("cuMemcpyDtoHAsync_v2"), 5);
  pl_stage_stats s;
  pl_stage_get_stats(&s);
  assert_int_equal(s.pool.bytes, POOL / 2);
  assert_int_equal(s.pool.free_bytes, 0);
  pl_copy c3 = mk_copy(PAGELOCK_API_cuMemcpyDtoHAsync_v2, HP(c.host), c.dev, n3, c.s);
  assert_int_equal(pl_copy_exec(&c3), CUDA_SUCCESS);
  pl_stage_get_stats(&s);
  for (int i = 0; i < 3; i++) {
    const pl_copy *cp = i == 0 ? &c1 : i == 1 ? &c2 : &c3;
    assert_true(cp->flags & PAGELOCK_COPY_STAGED);
    assert_false(cp->flags & PAGELOCK_COPY_FALLBACK);
  }
  assert_int_equal(s.waits, 0);
  assert_int_equal(s.bytes_staged, n1 + n2 + n3);
  assert_int_equal(s.pool.bytes, POOL);
  assert_int_equal(s.pool.free_bytes, 0);
  assert_true(bound_ok());
  /* the streams are still held: not one byte may have landed */
  assert_int_equal(check_byte(a.host, n1, 0), n1);
  assert_int_equal(check_byte(out2, n2, 0), n2);
  assert_int_equal(check_byte(c.host, n3, 0), n3);

  pl_copy c4 = mk_copy(PAGELOCK_API_cuMemcpyDtoHAsync_v2, HP(d.host), d.dev, n4, d.s);
  uint64_t t0 = pl_now_ns();
  assert_int_equal(pl_copy_exec(&c4), CUDA_SUCCESS);
  uint64_t dt = pl_now_ns() - t0;
  assert_true(c4.flags & PAGELOCK_COPY_FALLBACK);
  assert_false(c4.flags & PAGELOCK_COPY_STAGED);
  assert_true(dt >= (uint64_t)wait_us * 1000);
  assert_true(dt < (uint64_t)wait_us * 1000 * (TSAN ? 25 : 5));
  assert_int_equal(f_cuStreamSynchronize(d.s), CUDA_SUCCESS);
  assert_int_equal(check_pat(d.host, n4, 93), n4);
  assert_int_equal(check_byte(a.host, n1, 0), n1);

  atomic_store(&gate, 1);
  assert_int_equal(f_cuStreamSynchronize(a.s), CUDA_SUCCESS);
  assert_int_equal(atomic_load(&probe_free), 0);
  assert_int_equal(check_pat(a.host, n1, 91), n1);
  assert_memory_equal(out2, a.chk + n1, n2);
  assert_int_equal(check_byte(c.host, n3, 0), n3);
  atomic_store(&gate_c, 1);
  assert_int_equal(f_cuStreamSynchronize(c.s), CUDA_SUCCESS);
  assert_int_equal(check_pat(c.host, n3, 92), n3);
  pl_stage_get_stats(&s);
  assert_int_equal(s.fallbacks, 1);
  assert_int_equal(s.pool.free_bytes, s.pool.bytes);
  assert_true(bound_ok());
  bufs_fini(&d);

  /* One copy at a time on an idle stream, from a third of the pool to
   * 4.7 pools: bytes exact, no fallback, every chunk back. */
  for (int i = 0; i < 14; i++) {
    size_t n = (size_t)(i + 1) * POOL / 3 + (size_t)i; /* up to 4.7 pools, < MAXN */
    fill(a.chk, n, 100 + (unsigned)i);
    assert_int_equal(f_cuMemcpyHtoD_v2(a.dev, a.chk, n), CUDA_SUCCESS);
    memset(a.host, 0, n);
    assert_int_equal(cuMemcpyDtoHAsync_v2(a.host, a.dev, n, a.s), CUDA_SUCCESS);
    assert_int_equal(f_cuStreamSynchronize(a.s), CUDA_SUCCESS);
    assert_int_equal(check_pat(a.host, n, 100 + (unsigned)i), n);
    assert_true(bound_ok());
  }
  pl_stage_get_stats(&s);
  assert_int_equal(s.fallbacks, 1);
  assert_int_equal(s.pool.free_bytes, s.pool.bytes);
  free(out2);
  bufs_fini(&a);
  bufs_fini(&c);
}

/* A process whose staged copies are all asynchronous downloads on one
 * stream has nothing beside its ring: the ring takes the whole pool, half
 * the rounds.  A copy of another kind that comes while the whole pool is
 * queued waits (bounded) and passes through, bytes exact; once copies mix,
 * rings keep to half the pool again.  The bound holds throughout. */
static void test_d2h_async_alone(void **state) {
  (void)state;
  const long wait_us = 20000;
  stage_env(POOL, CHUNK, wait_us, "async");
  bufs a, b;
  bufs_init(&a);
  bufs_init(&b);
  const size_t n = 2 * POOL + 12345, m = 256 * KB + 3; /* 33 chunks; a quarter pool */
  fill(a.chk, n, 71);
  assert_int_equal(f_cuMemcpyHtoD_v2(a.dev, a.chk, n), CUDA_SUCCESS);
  fill(b.chk, m, 72);
  assert_int_equal(f_cuMemcpyHtoD_v2(b.dev, b.chk, m), CUDA_SUCCESS);
  memset(a.host, 0, n);
  memset(b.host, 0, m);

  /* alone: a ring of all 16 chunks, one slab, three rounds */
  atomic_store(&gate, 0);
  assert_int_equal(f_cuLaunchHostFunc(a.s, gate_fn, NULL), CUDA_SUCCESS);
  pl_copy c1 = mk_copy(PAGELOCK_API_cuMemcpyDtoHAsync_v2, HP(a.host), a.dev, n, a.s);
  f_reset_call_counts();
  assert_int_equal(pl_copy_exec(&c1), CUDA_SUCCESS);
  assert_true(c1.flags & PAGELOCK_COPY_STAGED);
  assert_false(c1.flags & PAGELOCK_COPY_FALLBACK);
  assert_int_equal(f_call_count("cuMemHostRegister_v2"), 1);
  assert_int_equal(f_call_count("cuMemcpyDtoHAsync_v2"), 3);
  assert_int_equal(f_call_count("cuLaunchHostFunc"), 3);
  pl_stage_stats s;
  pl_stage_get_stats(&s);
  assert_int_equal(s.pool.bytes, POOL);
  assert_int_equal(s.pool.free_bytes, 0);
  assert_true(bound_ok());

  /* another stream while the whole pool is queued: bounded wait, native */
  pl_copy c2 = mk_copy(PAGELOCK_API_cuMemcpyDtoHAsync_v2, HP(b.host), b.dev, m, b.s);
  uint64_t t0 = pl_now_ns();
  assert_int_equal(pl_copy_exec(&c2), CUDA_SUCCESS);
  uint64_t dt = pl_now_ns() - t0;
  assert_true(c2.flags & PAGELOCK_COPY_FALLBACK);
  assert_false(c2.flags & PAGELOCK_COPY_STAGED);
  assert_true(dt >= (uint64_t)wait_us * 1000);
  assert_int_equal(f_cuStreamSynchronize(b.s), CUDA_SUCCESS);
  assert_int_equal(check_pat(b.host, m, 72), m);
  assert_int_equal(check_byte(a.host, n, 0), n); /* a is still held */
  atomic_store(&gate, 1);
  assert_int_equal(f_cuStreamSynchronize(a.s), CUDA_SUCCESS);
  assert_int_equal(check_pat(a.host, n, 71), n);

  /* copies have mixed: the same download now takes five rounds of half
   * the pool, and leaves the other half to stream b */
  memset(a.host, 0, n);
  memset(b.host, 0, m);
  atomic_store(&gate, 0);
  assert_int_equal(f_cuLaunchHostFunc(a.s, gate_fn, NULL), CUDA_SUCCESS);
  pl_copy c3 = mk_copy(PAGELOCK_API_cuMemcpyDtoHAsync_v2, HP(a.host), a.dev, n, a.s);
  f_reset_call_counts();
  assert_int_equal(pl_copy_exec(&c3), CUDA_SUCCESS);
  assert_int_equal(f_call_count("cuMemcpyDtoHAsync_v2"), 5);
  assert_int_equal(f_call_count("cuLaunchHostFunc"), 5);
  pl_copy c4 = mk_copy(PAGELOCK_API_cuMemcpyDtoHAsync_v2, HP(b.host), b.dev, m, b.s);
  assert_int_equal(pl_copy_exec(&c4), CUDA_SUCCESS);
  assert_true(c4.flags & PAGELOCK_COPY_STAGED);
  assert_false(c4.flags & PAGELOCK_COPY_FALLBACK);
  assert_true(bound_ok());
  assert_int_equal(f_cuStreamSynchronize(b.s), CUDA_SUCCESS);
  assert_int_equal(check_pat(b.host, m, 72), m);
  atomic_store(&gate, 1);
  assert_int_equal(f_cuStreamSynchronize(a.s), CUDA_SUCCESS);
  assert_int_equal(check_pat(a.host, n, 71), n);
  pl_stage_get_stats(&s);
  assert_int_equal(s.fallbacks, 1);
  assert_int_equal(s.pool.free_bytes, s.pool.bytes);
  assert_true(bound_ok());
  bufs_fini(&a);
  bufs_fini(&b);
}

/* Without stream ids (a driver without cuStreamGetId, or failing it)
 * nothing is taken over: a second copy queued behind the first on a held
 * stream takes the other half of the pool, and a third copy, on another
 * stream, finds none, waits (bounded) and passes through.  Bytes exact,
 * every chunk back. */
static void test_d2h_async_no_stream_id(void **state) {
  (void)state;
  const long wait_us = 20000;
  stage_env(POOL, CHUNK, wait_us, "async");
  pl_stage_mixed_for_test();
  assert_int_equal(f_fail("cuStreamGetId", 0, CUDA_ERROR_NOT_SUPPORTED), 0);
  bufs a, b;
  bufs_init(&a);
  bufs_init(&b);
  const size_t n = POOL + 333;
  uint8_t *out[2] = {malloc(n), malloc(n)};
  assert_non_null(out[0]);
  assert_non_null(out[1]);
  fill(a.chk, 2 * n, 95);
  assert_int_equal(f_cuMemcpyHtoD_v2(a.dev, a.chk, 2 * n), CUDA_SUCCESS);
  fill(b.chk, n, 96);
  assert_int_equal(f_cuMemcpyHtoD_v2(b.dev, b.chk, n), CUDA_SUCCESS);
  memset(out[0], 0, n);
  memset(out[1], 0, n);
  memset(b.host, 0, n);

  atomic_store(&gate, 0);
  assert_int_equal(f_cuLaunchHostFunc(a.s, gate_fn, NULL), CUDA_SUCCESS);
  for (int k = 0; k < 2; k++) {
    pl_copy c =
        mk_copy(PAGELOCK_API_cuMemcpyDtoHAsync_v2, HP(out[k]), a.dev + (size_t)k * n, n, a.s);
    assert_int_equal(pl_copy_exec(&c), CUDA_SUCCESS);
    assert_true(c.flags & PAGELOCK_COPY_STAGED);
    assert_false(c.flags & PAGELOCK_COPY_FALLBACK);
  }
  pl_stage_stats s;
  pl_stage_get_stats(&s);
  assert_int_equal(s.pool.bytes, POOL);
  assert_int_equal(s.pool.free_bytes, 0);
  assert_int_equal(s.waits, 0);
  pl_copy c3 = mk_copy(PAGELOCK_API_cuMemcpyDtoHAsync_v2, HP(b.host), b.dev, n, b.s);
  uint64_t t0 = pl_now_ns();
  assert_int_equal(pl_copy_exec(&c3), CUDA_SUCCESS);
  uint64_t dt = pl_now_ns() - t0;
  assert_true(c3.flags & PAGELOCK_COPY_FALLBACK);
  assert_true(dt >= (uint64_t)wait_us * 1000);
  assert_int_equal(f_cuStreamSynchronize(b.s), CUDA_SUCCESS);
  assert_int_equal(check_pat(b.host, n, 96), n);
  assert_int_equal(check_byte(out[0], n, 0), n); /* a is still held */

  atomic_store(&gate, 1);
  assert_int_equal(f_cuStreamSynchronize(a.s), CUDA_SUCCESS);
  assert_memory_equal(out[0], a.chk, n);
  assert_memory_equal(out[1], a.chk + n, n);
  pl_stage_get_stats(&s);
  assert_int_equal(s.pool.free_bytes, s.pool.bytes);
  assert_true(bound_ok());
  f_clear_faults();
  free(out[0]);
  free(out[1]);
  bufs_fini(&a);
  bufs_fini(&b);
}

int main(void) {
  stage_fixture_env();
  if (stage_fixture_start() != 0) return 2;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_d2h_async_ring),
      cmocka_unit_test(test_d2h_async_alone),
      cmocka_unit_test(test_d2h_async_no_stream_id),
  };
  return stage_fixture_end(cmocka_run_group_tests_name("stage_d2h_async", tests, NULL, NULL));
}
