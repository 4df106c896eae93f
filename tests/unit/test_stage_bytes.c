/* test_stage_bytes.c - the staging engine moves every byte exactly: every
 * entry point, sizes and alignments, chunks cut to the pool, and the
 * stream's order kept around its copies (stage_fixture.h). */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "stage_fixture.h"

static void test_exact_h2d(void **state) {
  (void)state;
  stage_env(POOL, CHUNK, PATIENT_US, "sync");
  bufs b;
  bufs_init(&b);
  unsigned k = 0;
  for (size_t i = 0; i < NSIZES; i++)
    for (int v = 0; v < V_COUNT; v++, k++)
      one_h2d(&b, v, sizes[i], (k * 3) % 8 + (k & 1), (k * 5) % 16 + 1, k);
  bufs_fini(&b);
}

static void exact_d2h(bool async_mode) {
  stage_env(POOL, CHUNK, PATIENT_US, async_mode ? "async" : "sync");
  bufs b;
  bufs_init(&b);
  unsigned k = 7;
  for (size_t i = 0; i < NSIZES; i++)
    for (int v = 0; v < V_COUNT; v++, k++)
      one_d2h(&b, v, sizes[i], (k * 3) % 8 + (k & 1), (k * 5) % 16 + 1, k, async_mode);
  bufs_fini(&b);
}
static void test_exact_d2h_sync(void **state) {
  (void)state;
  exact_d2h(false);
}
static void test_exact_d2h_async(void **state) {
  (void)state;
  exact_d2h(true);
}

/* A chunk bigger than the pool allows is cut to half the pool, and a
 * pool of several megabytes with big chunks still works. */
static void test_chunk_sizes(void **state) {
  (void)state;
  bufs b;
  bufs_init(&b);
  stage_env(POOL, 4 * MB, PATIENT_US, "sync");
  one_h2d(&b, V_ASYNC, 3 * MB + 5, 3, 1, 11);
  one_d2h(&b, V_ASYNC, 3 * MB + 5, 1, 3, 12, false);
  pl_stage_stats s;
  pl_stage_get_stats(&s);
  assert_true(s.pool.high_water <= POOL);
  stage_env(4 * MB, 1 * MB, PATIENT_US, "async");
  one_h2d(&b, V_SYNC, 5 * MB, 0, 0, 13);
  one_d2h(&b, V_ASYNC, 5 * MB, 0, 0, 14, true);
  bufs_fini(&b);
}

/* ---- stream order ---------------------------------------------------------- */

typedef struct probe {
  const uint8_t *dev;
  size_t n;
  unsigned seed;
  atomic_int ok; /* 1 pass, -1 fail */
} probe;

/* Host function between the H2D and the D2H: the device buffer must
 * already hold the H2D's bytes (the fake's device memory is addressable). */
static void CUDA_CB probe_fn(void *arg) {
  probe *p = arg;
  atomic_store(&p->ok, check_pat(p->dev, p->n, p->seed) == p->n ? 1 : -1);
}

static void ordering(const char *mode) {
  stage_env(POOL, CHUNK, PATIENT_US, mode);
  bufs b;
  bufs_init(&b);
  size_t sz[] = {100 * KB, 700 * KB + 3, 3 * MB + 17};
  for (unsigned i = 0; i < 3; i++) {
    size_t n = sz[i];
    unsigned seed = 40 + i;
    fill(b.host, n, seed);
    assert_int_equal(cuMemcpyHtoDAsync_v2(b.dev, b.host, n, b.s), CUDA_SUCCESS);
    memset(b.host, 0, n); /* scribble the source: the copy must not care */
    probe p = {.dev = (const uint8_t *)(uintptr_t)b.dev, .n = n, .seed = seed};
    atomic_init(&p.ok, 0);
    assert_int_equal(f_cuLaunchHostFunc(b.s, probe_fn, &p), CUDA_SUCCESS);
    memset(b.chk, 0xCC, n);
    assert_int_equal(cuMemcpyDtoHAsync_v2(b.chk, b.dev, n, b.s), CUDA_SUCCESS);
    /* Each kind of synchronisation must cover the copy-out. */
    if (i == 0) {
      assert_int_equal(f_cuStreamSynchronize(b.s), CUDA_SUCCESS);
    } else if (i == 1) {
      CUevent ev;
      assert_int_equal(f_cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
      assert_int_equal(f_cuEventRecord(ev, b.s), CUDA_SUCCESS);
      assert_int_equal(f_cuEventSynchronize(ev), CUDA_SUCCESS);
      assert_int_equal(f_cuEventDestroy_v2(ev), CUDA_SUCCESS);
    } else {
      assert_int_equal(f_cuCtxSynchronize(), CUDA_SUCCESS);
    }
    assert_int_equal(atomic_load(&p.ok), 1);
    assert_int_equal(check_pat(b.chk, n, seed), n);
    assert_true(bound_ok());
  }
  assert_int_equal(f_cuStreamSynchronize(b.s), CUDA_SUCCESS);
  bufs_fini(&b);
}
static void test_ordering_sync(void **state) {
  (void)state;
  ordering("sync");
}
static void test_ordering_async(void **state) {
  (void)state;
  ordering("async");
}

int main(void) {
  stage_fixture_env();
  if (stage_fixture_start() != 0) return 2;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_exact_h2d),       cmocka_unit_test(test_exact_d2h_sync),
      cmocka_unit_test(test_exact_d2h_async), cmocka_unit_test(test_chunk_sizes),
      cmocka_unit_test(test_ordering_sync),   cmocka_unit_test(test_ordering_async),
  };
  return stage_fixture_end(cmocka_run_group_tests_name("stage_bytes", tests, NULL, NULL));
}
