/* test_stage_stores.c - how the staging engine fills and drains chunks:
 * the store policy of uploads and downloads, and the copy threads a job
 * gets (stage_fixture.h). */
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
#include <time.h>

#include <cmocka.h>

#include "stage_fixture.h"

/* The store policy of uploads: streaming stores for a copy that fits the
 * pool (the copy is what the program waits for), plain stores for one
 * larger than the pool (it recycles chunks: the DMA is). */
static void test_store_policy(void **state) {
  (void)state;
  stage_env(POOL, CHUNK, PATIENT_US, "sync");
  bufs a;
  bufs_init(&a);
  size_t sizes[] = {256 * KB + 5, POOL, POOL + 1, 3 * POOL + 7};
  for (int i = 0; i < 4; i++) {
    size_t n = sizes[i];
    bool want_plain = n > POOL;
    fill(a.host, n, 90 + i);
    pl_stage_stats s0, s1;
    pl_stage_get_stats(&s0);
    assert_int_equal(cuMemcpyHtoDAsync_v2(a.dev, a.host, n, a.s), CUDA_SUCCESS);
    pl_stage_get_stats(&s1);
    assert_int_equal(s1.copies_staged - s0.copies_staged, 1);
    if (want_plain != (s1.copies_plain - s0.copies_plain == 1))
      print_error("%zu bytes: %s stores, expected %s\n", n, want_plain ? "streaming" : "plain",
                  want_plain ? "plain" : "streaming");
    assert_int_equal(s1.copies_plain - s0.copies_plain, want_plain);
    assert_int_equal(f_cuStreamSynchronize(a.s), CUDA_SUCCESS);
    assert_int_equal(f_cuMemcpyDtoH_v2(a.chk, a.dev, n), CUDA_SUCCESS);
    assert_int_equal(check_pat(a.chk, n, 90 + i), n);
  }
  assert_true(bound_ok());
  bufs_fini(&a);
}

/* Opens the gate after a while, from another thread: the caller meanwhile
 * waits inside the engine for a chunk the gated stream holds. */
static void *open_gate_later(void *arg) {
  (void)arg;
  struct timespec ts = {0, 30 * 1000 * 1000};
  nanosleep(&ts, NULL);
  atomic_store(&gate, 1);
  return NULL;
}

/* One upload of n bytes on a.s queued behind the gate, while a POOL-sized
 * upload ahead of it holds every chunk: it finds the device busy with
 * them and waits until the gate opens.  Returns how many uploads were
 * throttled by it. */
static uint64_t busy_upload(bufs *a, size_t n, unsigned seed) {
  atomic_store(&gate, 0);
  assert_int_equal(f_cuLaunchHostFunc(a->s, gate_fn, NULL), CUDA_SUCCESS);
  fill(a->host, POOL, seed);
  assert_int_equal(cuMemcpyHtoDAsync_v2(a->dev, a->host, POOL, a->s), CUDA_SUCCESS);
  pl_stage_stats s0, s1;
  pl_stage_get_stats(&s0);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, open_gate_later, NULL), 0);
  fill(a->host + POOL, n, seed + 1);
  assert_int_equal(cuMemcpyHtoDAsync_v2(a->dev + POOL, a->host + POOL, n, a->s), CUDA_SUCCESS);
  pthread_join(t, NULL);
  pl_stage_get_stats(&s1);
  assert_int_equal(s1.copies_staged - s0.copies_staged, 1);
  assert_true(s1.waits > s0.waits); /* it did find the pool in use */
  assert_int_equal(f_cuStreamSynchronize(a->s), CUDA_SUCCESS);
  assert_int_equal(f_cuMemcpyDtoH_v2(a->chk, a->dev, POOL + n), CUDA_SUCCESS);
  assert_int_equal(check_pat(a->chk, POOL, seed), POOL);
  assert_int_equal(check_pat(a->chk + POOL, n, seed + 1), n);
  assert_true(bound_ok());
  return s1.copies_throttled - s0.copies_throttled;
}

/* Which uploads run with fewer copy threads: those filling chunks with
 * streaming stores that start while the device is still busy with earlier
 * chunks (bound by the DMA), unless PAGELOCK_COPY_THREADS chose the count.
 * Not one that finds the device idle, not one with plain stores (larger
 * than the pool), even one that recycles its own chunks. */
static void test_upload_throttle(void **state) {
  (void)state;
  unsetenv("PAGELOCK_COPY_THREADS");
  stage_env(POOL, CHUNK, PATIENT_US, "sync");
  bufs a;
  bufs_init(&a);
  assert_true(MAXN >= 4 * POOL + 7);
  assert_int_equal(busy_upload(&a, POOL / 2 + 3, 70), 1);
  assert_int_equal(busy_upload(&a, 3 * POOL + 7, 72), 0);
  /* The device idle: every thread helps, to the end. */
  for (int i = 0; i < 2; i++) {
    size_t n = i ? 3 * POOL + 7 : POOL;
    pl_stage_stats s0, s1;
    pl_stage_get_stats(&s0);
    fill(a.host, n, 74u + (unsigned)i);
    assert_int_equal(cuMemcpyHtoDAsync_v2(a.dev, a.host, n, a.s), CUDA_SUCCESS);
    assert_int_equal(f_cuStreamSynchronize(a.s), CUDA_SUCCESS);
    pl_stage_get_stats(&s1);
    assert_int_equal(s1.copies_staged - s0.copies_staged, 1);
    assert_int_equal(s1.copies_throttled - s0.copies_throttled, 0);
    assert_int_equal(f_cuMemcpyDtoH_v2(a.chk, a.dev, n), CUDA_SUCCESS);
    assert_int_equal(check_pat(a.chk, n, 74u + (unsigned)i), n);
  }
  /* The count set by the user holds for every upload. */
  setenv("PAGELOCK_COPY_THREADS", "4", 1);
  stage_env(POOL, CHUNK, PATIENT_US, "sync");
  assert_int_equal(busy_upload(&a, POOL / 2 + 3, 76), 0);
  bufs_fini(&a);
}

/* A job limited to one copy thread never has two inside, and the bytes
 * are the same. */
static void test_job_limit(void **state) {
  (void)state;
  const size_t seg = 4 * MB, nseg = 8;
  char *src = malloc(seg * nseg), *dst = malloc(seg * nseg);
  assert_non_null(src);
  assert_non_null(dst);
  /* One unlimited round to show the threads do crowd in, then several
   * limited ones: whether two would have met is up to the scheduler. */
  for (int round = 0; round < 5; round++) {
    int limited = round > 0;
    fill(src, seg * nseg, 80u + (unsigned)round);
    memset(dst, 0, seg * nseg);
    pl_job j;
    pl_job_open(&j, pl_workers_parallelism());
    if (limited) pl_job_limit(&j, 1);
    /* All segments at once: every sleeping copy thread is woken for them. */
    for (size_t i = 0; i < nseg; i++) pl_job_add(&j, dst + i * seg, src + i * seg, seg, i & 1);
    for (unsigned i = 0; i < nseg; i++) pl_job_wait(&j, i);
    pl_job_close(&j);
    print_message("job %s: at most %u copy threads inside at once\n",
                  limited ? "limited to 1" : "unlimited", j.peak);
    if (limited) assert_true(j.peak <= 1);
    assert_int_equal(check_pat(dst, seg * nseg, 80u + (unsigned)round), seg * nseg);
  }
  free(src);
  free(dst);
}

/* The store policy of downloads: streaming stores from the threshold up
 * (a quarter of the last-level cache; set here to 1 MiB + 5 so the copies
 * stay small), in both modes, and the bytes still exact at odd offsets. */
static void test_download_store_policy(void **state) {
  (void)state;
  /* The derived threshold: a quarter of some cache, never below 4 MiB. */
  assert_false(pl_stage_out_stream(((size_t)4 << 20) - 1));
  assert_true(pl_stage_out_stream((size_t)1 << 40));
  const size_t min = MB + 5;
  pl_stage_set_out_stream_min_for_test(min);
  for (int async_mode = 0; async_mode < 2; async_mode++) {
    stage_env(POOL, CHUNK, PATIENT_US, async_mode ? "async" : "sync");
    bufs b;
    bufs_init(&b);
    size_t sizes[] = {min - 1, min, 3 * min + 4099};
    for (int i = 0; i < 3; i++) {
      size_t n = sizes[i], ho = (size_t)(3 + 2 * i), dof = (size_t)(5 * i + 1);
      pl_stage_stats s0, s1;
      pl_stage_get_stats(&s0);
      uint64_t nt0 = pl_workers_nt_bytes();
      one_d2h(&b, V_ASYNC, n, ho, dof, 40u + (unsigned)i, async_mode);
      uint64_t nt = pl_workers_nt_bytes() - nt0;
      pl_stage_get_stats(&s1);
      assert_int_equal(s1.copies_staged - s0.copies_staged, 1);
      if (nt != (n >= min ? n : 0))
        print_error("%s download of %zu bytes: %llu bytes with streaming stores\n",
                    async_mode ? "async" : "sync", n, (unsigned long long)nt);
      assert_int_equal(nt, n >= min ? n : 0);
    }
    bufs_fini(&b);
  }
  pl_stage_set_out_stream_min_for_test(0);
}

int main(void) {
  stage_fixture_env();
  if (stage_fixture_start() != 0) return 2;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_store_policy),
      cmocka_unit_test(test_download_store_policy),
      cmocka_unit_test(test_upload_throttle),
      cmocka_unit_test(test_job_limit),
  };
  return stage_fixture_end(cmocka_run_group_tests_name("stage_stores", tests, NULL, NULL));
}
