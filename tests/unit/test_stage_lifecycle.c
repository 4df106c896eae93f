/* test_stage_lifecycle.c - the staging engine as processes and contexts
 * come and go: a fork, an exit with copies in flight, two contexts sharing
 * the bound, a context ending, the COUNTERS record at exit
 * (stage_fixture.h). */
#define _GNU_SOURCE
#include <setjmp.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "stage_fixture.h"

/* A forked child cannot use CUDA: the engine must decline there. */
static void test_fork(void **state) {
  (void)state;
  stage_env(POOL, CHUNK, PATIENT_US, "sync");
  bufs b;
  bufs_init(&b);
  one_h2d(&b, V_ASYNC, 200 * KB, 0, 0, 90); /* the engine is warm */
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    pl_copy c = mk_copy(PAGELOCK_API_cuMemcpyHtoDAsync_v2, b.dev, HP(b.host), 200 * KB, b.s);
    c.src_mem = PAGELOCK_MEM_PAGEABLE;
    CUresult r;
    _exit(pl_stage_copy(&c, &r) ? 1 : 0);
  }
  int st = 0;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
  bufs_fini(&b);
}

/* Exit with copies in flight and copy threads asleep: no crash, no hang.
 * Runs this binary again in a mode that does exactly that. */
static void test_exit_in_flight(void **state) {
  (void)state;
  char *argv[] = {(char *)"/proc/self/exe", (char *)"--exit-in-flight", NULL};
  extern char **environ;
  pid_t pid;
  assert_int_equal(posix_spawn(&pid, "/proc/self/exe", NULL, NULL, argv, environ), 0);
  int st = 0;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  if (!WIFEXITED(st))
    print_error("child died with signal %d\n", WIFSIGNALED(st) ? WTERMSIG(st) : -1);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 7);
}

static int exit_in_flight(void) {
  alarm(30); /* a hang becomes a failure, not a stuck test */
  if (load_driver() != 0) return 2;
  setenv("PAGELOCK_MODE", "stage", 1);
  setenv("PAGELOCK_STAGE_MIN", "0", 1);
  setenv("PAGELOCK_POOL_SIZE", "4M", 1);
  setenv("PAGELOCK_CHUNK_SIZE", "256K", 1);
  setenv("PAGELOCK_D2H", "async", 1);
  pl_config_reset_for_test();
  f_set_bandwidth(0.1, 0.1); /* slow "hardware": the copies are still running at exit */
  CUstream s;
  CUdeviceptr d;
  size_t n = 3 * MB;
  char *h = malloc(n), *o = malloc(n);
  if (f_cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) || f_cuMemAlloc_v2(&d, n)) return 3;
  memset(h, 1, n);
  if (cuMemcpyHtoDAsync_v2(d, h, n, s) != CUDA_SUCCESS) return 4;
  if (cuMemcpyDtoHAsync_v2(o, d, n, s) != CUDA_SUCCESS) return 5;
  exit(7);
}

/* Two contexts share one bound: the second takes over idle chunks of the
 * first (never more pinned memory in all), and a stream of one context is
 * left to the native call while the other is current. */
static void test_two_contexts(void **state) {
  (void)state;
  stage_env(POOL, CHUNK, PATIENT_US, "sync");
  bufs a;
  bufs_init(&a);
  /* With A's stream held, a copy of the pool's size makes A's pool grow
   * to the whole bound. */
  atomic_store(&gate, 0);
  assert_int_equal(f_cuLaunchHostFunc(a.s, gate_fn, NULL), CUDA_SUCCESS);
  assert_int_equal(cuMemcpyHtoDAsync_v2(a.dev, a.host, POOL, a.s), CUDA_SUCCESS);
  atomic_store(&gate, 1);
  assert_int_equal(f_cuStreamSynchronize(a.s), CUDA_SUCCESS);
  pl_stage_stats s;
  pl_stage_get_stats(&s);
  assert_int_equal(s.pool.bytes, POOL);

  CUcontext b_ctx;
  assert_int_equal(f_cuCtxCreate_v2(&b_ctx, 0, 0), CUDA_SUCCESS); /* current now */
  bufs b;
  bufs_init(&b);
  for (unsigned i = 0; i < 3; i++) {
    one_h2d(&b, V_ASYNC, 3 * CHUNK + 7, 1, 3, 101 + i);
    one_d2h(&b, V_SYNC, 2 * CHUNK + 5, 3, 1, 104 + i, false);
  }
  pl_stage_get_stats(&s);
  assert_int_equal(s.pool.bytes, POOL); /* moved, not added */

  /* B's stream while A is current: declined before anything is queued. */
  assert_int_equal(f_cuCtxSetCurrent(g_ctx), CUDA_SUCCESS);
  pl_copy c = mk_copy(PAGELOCK_API_cuMemcpyHtoDAsync_v2, a.dev, HP(a.host), 200 * KB, b.s);
  CUresult r;
  f_reset_call_counts();
  assert_false(pl_stage_copy(&c, &r));
  assert_int_equal(f_call_count("cuMemcpyHtoDAsync_v2"), 0);
  /* and A, which lost chunks, still stages */
  one_h2d(&a, V_ASYNC, 2 * POOL, 5, 5, 107);

  assert_int_equal(f_cuCtxSetCurrent(b_ctx), CUDA_SUCCESS);
  bufs_fini(&b);
  assert_int_equal(f_cuCtxSynchronize(), CUDA_SUCCESS);
  assert_int_equal(f_cuCtxSetCurrent(g_ctx), CUDA_SUCCESS);
  assert_int_equal(f_cuCtxSynchronize(), CUDA_SUCCESS);
  pl_stage_reset_for_test(); /* free B's chunks while B exists */
  assert_int_equal(f_cuCtxDestroy_v2(b_ctx), CUDA_SUCCESS);
  assert_int_equal(f_cuCtxSetCurrent(g_ctx), CUDA_SUCCESS);
  bufs_fini(&a);
  assert_true(bound_ok());
}

/* A context whose pool took over chunks ends (cuCtxDestroy, as
 * hook_ctx.c sees it): its events died with it, so the shim touches none
 * of them (fakecuda aborts on such a call), and the chunks, still
 * page-locked by the first context's slab, go home to its pool. */
static void test_context_ends(void **state) {
  (void)state;
  stage_env(POOL, CHUNK, PATIENT_US, "sync");
  bufs a;
  bufs_init(&a);
  one_h2d(&a, V_ASYNC, POOL, 0, 0, 121); /* A's pool: the whole bound */
  CUcontext b_ctx;
  assert_int_equal(f_cuCtxCreate_v2(&b_ctx, 0, 0), CUDA_SUCCESS);
  bufs b;
  bufs_init(&b);
  one_h2d(&b, V_ASYNC, 3 * CHUNK + 7, 1, 3, 122); /* takes chunks of A's */
  one_d2h(&b, V_SYNC, 2 * CHUNK + 5, 3, 1, 123, false);
  bufs_fini(&b);
  assert_int_equal(f_cuCtxSynchronize(), CUDA_SUCCESS);
  pl_stage_stats s;
  pl_stage_get_stats(&s);
  assert_int_equal(s.pool.bytes, POOL);
  uint64_t a_free = s.pool.free_bytes;

  pl_engines_ctx_ending(b_ctx);
  assert_int_equal(f_cuCtxDestroy_v2(b_ctx), CUDA_SUCCESS);
  pl_engines_ctx_gone(b_ctx);
  assert_int_equal(f_cuCtxSetCurrent(g_ctx), CUDA_SUCCESS);
  pl_stage_get_stats(&s);
  assert_int_equal(s.pool.bytes, POOL); /* home again, nothing freed */
  assert_int_equal(s.pool.free_bytes, a_free);
  /* A copy of the bound's size finds every chunk in A's pool: no wait. */
  uint64_t waits = s.waits;
  one_h2d(&a, V_ASYNC, POOL, 0, 0, 126);
  pl_stage_get_stats(&s);
  assert_int_equal(s.waits, waits);
  one_h2d(&a, V_ASYNC, 2 * POOL, 5, 5, 124);
  one_d2h(&a, V_ASYNC, POOL + 9, 2, 7, 125, false);
  pl_stage_get_stats(&s);
  assert_int_equal(s.fallbacks, 0);
  bufs_fini(&a);
  assert_true(bound_ok());
}

/* ---- the COUNTERS record ---------------------------------------------------------- */

static void test_counters_record(void **state) {
  (void)state;
  char path[512];
  snprintf(path, sizeof path, "%s/counters.trace", tmpdir);
  setenv("PAGELOCK_OUTPUT", path, 1);
  stage_env(POOL, CHUNK, PATIENT_US, "sync");
  pl_trace_reset_for_test(); /* a fresh file */
  bufs b;
  bufs_init(&b);
  one_h2d(&b, V_ASYNC, 700 * KB, 0, 0, 95);
  one_d2h(&b, V_SYNC, 300 * KB, 0, 0, 96, false);
  bufs_fini(&b);
  pl_exit_trace();
  pl_trace_reset_for_test(); /* close it */
  plr_reader r;
  assert_int_equal(plr_open(&r, path), PLR_OPEN_OK);
  plr_record rec;
  int counters = 0, staged = 0;
  while (plr_next(&r, &rec)) {
    if (rec.type == PAGELOCK_REC_COPY && (rec.u.copy->flags & PAGELOCK_COPY_STAGED)) staged++;
    if (rec.type != PAGELOCK_REC_COUNTERS) continue;
    counters++;
    assert_int_equal(rec.u.counters->bytes_staged, 1000 * KB);
    assert_int_equal(rec.u.counters->pool_bytes, POOL);
    assert_true(rec.u.counters->pool_high_water > 0);
    assert_true(rec.u.counters->pool_high_water <= POOL);
  }
  plr_close(&r);
  assert_int_equal(counters, 1);
  assert_int_equal(staged, 2);
  snprintf(path, sizeof path, "%s/all.trace", tmpdir);
  setenv("PAGELOCK_OUTPUT", path, 1);
  pl_config_reset_for_test();
}

int main(int argc, char **argv) {
  stage_fixture_env();
  if (argc > 1 && strcmp(argv[1], "--exit-in-flight") == 0) return exit_in_flight();
  if (stage_fixture_start() != 0) return 2;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fork),
      cmocka_unit_test(test_exit_in_flight),
      cmocka_unit_test(test_two_contexts),
      cmocka_unit_test(test_context_ends),
      cmocka_unit_test(test_counters_record),
  };
  return stage_fixture_end(cmocka_run_group_tests_name("stage_lifecycle", tests, NULL, NULL));
}
