/* test_stage_concurrent.c - the staging engine under many threads and
 * streams at once, within its bound; `--stress SECONDS` is the robustness
 * suite's staged stress (tests/robust/run.sh) (stage_fixture.h). */
#define _GNU_SOURCE
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "stage_fixture.h"

#define NTHREADS 8
#define NITER (TSAN ? 6 : 12)
#define TMAX (TSAN ? 600 * KB : 1536 * KB)

static atomic_int t_fail, t_bound;
/* --stress: workers repeat until this CLOCK_MONOTONIC second (0: NITER). */
static time_t t_deadline;
static atomic_long t_copies;

static time_t mono_sec(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec;
}

static void *worker(void *arg) {
  unsigned id = (unsigned)(uintptr_t)arg;
  uint64_t rng = 0x9E3779B97F4A7C15ull * (id + 1);
#define RND() (rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17, rng)
  if (f_cuCtxSetCurrent(g_ctx) != CUDA_SUCCESS) {
    atomic_fetch_add(&t_fail, 1);
    return NULL;
  }
  CUstream s[2];
  CUdeviceptr dev[2];
  uint8_t *src = malloc(TMAX + 16), *dst = malloc(TMAX + 16);
  for (int i = 0; i < 2; i++) {
    /* Blocking streams: a sync copy on the legacy stream orders with them,
     * as the fallback of a sync copy needs. */
    if (f_cuStreamCreate(&s[i], CU_STREAM_DEFAULT) != CUDA_SUCCESS ||
        f_cuMemAlloc_v2(&dev[i], TMAX + 16) != CUDA_SUCCESS) {
      atomic_fetch_add(&t_fail, 1);
      return NULL;
    }
  }
  for (int it = 0; t_deadline ? mono_sec() < t_deadline : it < NITER; it++) {
    int k = (int)(RND() & 1);
    size_t n = 1 + RND() % TMAX;
    size_t ho = RND() % 16, dof = RND() % 16;
    if (ho + n > TMAX + 16) ho = 0;
    if (dof + n > TMAX + 16) dof = 0;
    unsigned seed = id * 1000 + (unsigned)it;
    fill(src + ho, n, seed);
    CUresult r = (RND() & 1) ? cuMemcpyHtoDAsync_v2(dev[k] + dof, src + ho, n, s[k])
                             : cuMemcpyHtoD_v2(dev[k] + dof, src + ho, n);
    memset(src + ho, 0, n);
    memset(dst, 0xEE, TMAX + 16);
    if (r == CUDA_SUCCESS) r = cuMemcpyDtoHAsync_v2(dst + ho, dev[k] + dof, n, s[k]);
    if (r == CUDA_SUCCESS) r = f_cuStreamSynchronize(s[k]);
    if (r != CUDA_SUCCESS || check_pat(dst + ho, n, seed) != n) atomic_fetch_add(&t_fail, 1);
    if (!bound_ok()) atomic_fetch_add(&t_bound, 1);
    atomic_fetch_add(&t_copies, 2);
  }
  for (int i = 0; i < 2; i++) {
    f_cuStreamSynchronize(s[i]);
    f_cuStreamDestroy_v2(s[i]);
    f_cuMemFree_v2(dev[i]);
  }
  free(src);
  free(dst);
  return NULL;
#undef RND
}

static void threads(const char *mode) {
  stage_env(POOL, CHUNK, 2000, mode);
  atomic_store(&t_fail, 0);
  atomic_store(&t_bound, 0);
  pthread_t t[NTHREADS];
  for (unsigned i = 0; i < NTHREADS; i++)
    assert_int_equal(pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)i), 0);
  for (unsigned i = 0; i < NTHREADS; i++) pthread_join(t[i], NULL);
  assert_int_equal(atomic_load(&t_fail), 0);
  assert_int_equal(atomic_load(&t_bound), 0);
  pl_stage_stats s;
  pl_stage_get_stats(&s);
  print_message("%s: %.1f MB staged, %llu waits, %llu fallbacks, pool high water %llu KB\n", mode,
                s.bytes_staged / 1e6, (unsigned long long)s.waits, (unsigned long long)s.fallbacks,
                (unsigned long long)s.pool.high_water >> 10);
  assert_true(s.bytes_staged > 0);
  assert_true(s.pool.high_water <= POOL);
  assert_true(bound_ok());
}
static void test_threads_sync(void **state) {
  (void)state;
  threads("sync");
}
static void test_threads_async(void **state) {
  (void)state;
  threads("async");
}

/* The robustness suite's staged stress (tests/robust/run.sh): the worker
 * threads of test_threads_* for `seconds`, alternating the download
 * mode each round of 5 s, with every copy's bytes and the pool bound
 * checked.  Built under TSan there, so every race it reaches is reported.
 * Prints "stress: N copies, M failed" and exits 1 on any failure. */
static int stress(int seconds) {
  alarm((unsigned)seconds + 120); /* a hang becomes a failure */
  time_t end = mono_sec() + seconds;
  long rounds = 0;
  while (mono_sec() < end) {
    stage_env(POOL, CHUNK, 2000, rounds++ % 2 ? "async" : "sync");
    t_deadline = mono_sec() + 5 < end ? mono_sec() + 5 : end;
    pthread_t t[NTHREADS];
    for (unsigned i = 0; i < NTHREADS; i++)
      if (pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)i) != 0) return 3;
    for (unsigned i = 0; i < NTHREADS; i++) pthread_join(t[i], NULL);
  }
  pl_stage_stats st;
  pl_stage_get_stats(&st);
  int failed = atomic_load(&t_fail) + atomic_load(&t_bound);
  printf(
      "stress: %ld copies, %d failed, %.1f MB staged, %llu fallbacks, pool high water %llu KB of %llu\n",
      atomic_load(&t_copies), failed, st.bytes_staged / 1e6, (unsigned long long)st.fallbacks,
      (unsigned long long)st.pool.high_water >> 10, (unsigned long long)POOL >> 10);
  return failed == 0 && st.bytes_staged > 0 && st.pool.high_water <= POOL ? 0 : 1;
}

int main(int argc, char **argv) {
  stage_fixture_env();
  if (stage_fixture_start() != 0) return 2;
  bool stressing = argc > 2 && strcmp(argv[1], "--stress") == 0;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_threads_sync),
      cmocka_unit_test(test_threads_async),
  };
  int rc = stressing ? stress(atoi(argv[2]))
                     : cmocka_run_group_tests_name("stage_concurrent", tests, NULL, NULL);
  return stage_fixture_end(rc);
}
