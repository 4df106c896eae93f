/* test_stage_cpus.c - the staging engine and the CPUs: the kernel's load
 * read, copies counted as crowded, and how many copy threads a copy gets
 * (stage_fixture.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "stage_fixture.h"

/* Writes text to path: a /proc/loadavg look-alike. */
static void write_loadavg(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

/* The kernel's load, read: the shim's own runnable threads are not the
 * program's, garbage and a missing file are no answer, and the answer is
 * kept for a while (one read per 10 ms at most). */
static void test_cpuload(void **state) {
  (void)state;
  char path[512];
  pl_cpuload l;
  snprintf(path, sizeof path, "%s/loadavg", tmpdir);
  write_loadavg(path, "15.87 9.12 4.30 17/312 4711\n");
  pl_cpuload_set_for_test(path, 16);
  assert_int_equal(pl_cpuload_idle(1, PL_CPULOAD_EVERY_NS, &l), 0);
  assert_int_equal(l.others, 16);
  assert_int_equal(l.cpus, 16);
  /* Within 10 ms the figures are the last ones, whatever the file says. */
  write_loadavg(path, "0.10 0.20 0.30 1/312 4711\n");
  assert_int_equal(pl_cpuload_idle(1, PL_CPULOAD_EVERY_NS, &l), 0);
  pl_cpuload_set_for_test(path, 16);
  assert_int_equal(pl_cpuload_idle(1, PL_CPULOAD_EVERY_NS, &l), 16);
  assert_int_equal(l.others, 0);
  write_loadavg(path, "0.10 0.20 0.30 9/312 4711\n");
  pl_cpuload_set_for_test(path, 16);
  assert_int_equal(pl_cpuload_idle(4, PL_CPULOAD_EVERY_NS, NULL), 11);
  static const char *const bad[] = {"", "0.1 0.2 0.3 /312 4711\n", "0.1 0.2 0.3 x/312\n",
                                    "0.1 0.2 0.3 12", "0.1 0.2\n"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    write_loadavg(path, bad[i]);
    pl_cpuload_set_for_test(path, 16);
    assert_int_equal(pl_cpuload_idle(1, PL_CPULOAD_EVERY_NS, &l), UINT_MAX);
  }
  snprintf(path, sizeof path, "%s/no-such-loadavg", tmpdir);
  pl_cpuload_set_for_test(path, 16);
  errno = 4242; /* asked inside a copy hook: the program's errno stays */
  assert_int_equal(pl_cpuload_idle(1, PL_CPULOAD_EVERY_NS, NULL), UINT_MAX);
  assert_int_equal(errno, 4242);
  /* The real one: some answer, and this process's mask. */
  pl_cpuload_set_for_test(NULL, 0);
  assert_int_not_equal(pl_cpuload_idle(1, PL_CPULOAD_EVERY_NS, &l), UINT_MAX);
  assert_true(l.cpus >= 1);
}

/* Staged copies of 4 MiB or more that start with fewer idle CPUs than
 * copy threads are counted, the bytes stay exact, and the trace gets one
 * note saying how many and why; smaller copies are not asked about. */
static void test_crowded(void **state) {
  (void)state;
  char path[512], load[512];
  snprintf(path, sizeof path, "%s/crowded.trace", tmpdir);
  snprintf(load, sizeof load, "%s/loadavg", tmpdir);
  setenv("PAGELOCK_OUTPUT", path, 1);
  stage_env(POOL, CHUNK, PATIENT_US, "sync");
  pl_trace_reset_for_test();
  bufs b;
  bufs_init(&b);
  /* Idle: 1 runnable (the caller) on 16 CPUs. */
  write_loadavg(load, "0.00 0.01 0.05 1/300 4711\n");
  pl_cpuload_set_for_test(load, 16);
  one_h2d(&b, V_ASYNC, 4 * MB, 0, 0, 81);
  pl_stage_stats s;
  pl_stage_get_stats(&s);
  assert_int_equal(s.copies_sized, 1);
  assert_int_equal(s.copies_crowded, 0);
  /* Sixteen spinning threads besides the caller and the copy threads. */
  write_loadavg(load, "16.00 9.00 4.00 21/300 4711\n");
  pl_cpuload_set_for_test(load, 16);
  one_h2d(&b, V_SYNC, 4 * MB + 5, 3, 1, 82);
  one_d2h(&b, V_ASYNC, 5 * MB, 0, 0, 83, false);
  one_h2d(&b, V_ASYNC, 4 * MB - 1, 0, 0, 84);
  pl_stage_get_stats(&s);
  assert_int_equal(s.copies_sized, 3);
  assert_int_equal(s.copies_crowded, 2);
  assert_int_equal(s.bytes_crowded, 9 * MB + 5);
  assert_int_equal(s.crowded_cpus, 16);
  assert_true(s.crowded_others >= 16 && s.crowded_others <= 20);
  assert_int_equal(s.crowded_threads, 4); /* PAGELOCK_COPY_THREADS, main() */
  bufs_fini(&b);
  pl_exit_trace();
  pl_trace_reset_for_test();
  pl_cpuload_set_for_test(NULL, 0);
  plr_reader r;
  assert_int_equal(plr_open(&r, path), PLR_OPEN_OK);
  plr_record rec;
  int notes = 0;
  while (plr_next(&r, &rec)) {
    if (rec.type != PAGELOCK_REC_NOTE || !strstr(rec.str1, "idle CPUs")) continue;
    notes++;
    assert_non_null(strstr(rec.str1, "2 of 3 staged copies of 4 MiB or more (9.0 of 13.0 MiB)"));
    assert_non_null(strstr(rec.str1, "their 4 copy threads"));
    assert_non_null(strstr(rec.str1, "on the 16 CPUs"));
    assert_non_null(strstr(rec.str1, "GOMP_SPINCOUNT"));
    assert_non_null(strstr(rec.str1, "OMP_WAIT_POLICY=passive frees them")); /* whole, not cut */
  }
  plr_close(&r);
  assert_int_equal(notes, 1);
  snprintf(path, sizeof path, "%s/all.trace", tmpdir);
  setenv("PAGELOCK_OUTPUT", path, 1);
  pl_config_reset_for_test();
}

/* How many copy threads a staged copy gets: the base count (half the
 * CPUs, at most 8) unless it is wide (4 MiB or more, larger than the pool)
 * and finds more CPUs idle, then one per idle CPU up to three quarters of
 * them and 12; a count the user set holds for every copy. */
static void test_stage_threads(void **state) {
  (void)state;
  unsetenv("PAGELOCK_COPY_THREADS");
  pl_config_reset_for_test();
  pl_workers_set_cpus_for_test(16);
  assert_int_equal(pl_workers_base(), 8);
  assert_int_equal(pl_workers_parallelism(), 12);
  assert_int_equal(pl_stage_threads(false, 16), 8);      /* below 4 MiB: not asked */
  assert_int_equal(pl_stage_threads(true, UINT_MAX), 8); /* the load unknown */
  assert_int_equal(pl_stage_threads(true, 0), 8);        /* crowded: no fewer than before */
  assert_int_equal(pl_stage_threads(true, 8), 8);
  assert_int_equal(pl_stage_threads(true, 10), 10);
  assert_int_equal(pl_stage_threads(true, 16), 12);
  pl_workers_set_cpus_for_test(64);
  assert_int_equal(pl_stage_threads(true, 64), 12);
  assert_int_equal(pl_stage_threads(false, 64), 8);
  pl_workers_set_cpus_for_test(6);
  assert_int_equal(pl_stage_threads(true, 6), 4);
  assert_int_equal(pl_stage_threads(true, 2), 3);
  pl_workers_set_cpus_for_test(2);
  assert_int_equal(pl_stage_threads(true, 2), 1); /* the caller alone */
  setenv("PAGELOCK_COPY_THREADS", "4", 1);
  pl_config_reset_for_test();
  pl_workers_set_cpus_for_test(16);
  assert_int_equal(pl_stage_threads(true, 16), 4);
  assert_int_equal(pl_stage_threads(false, 16), 4);
  pl_workers_set_cpus_for_test(0);
}

/* End to end over fakecuda: an upload and a download of 4 MiB or more,
 * larger than the pool, on idle CPUs get the wider count; a crowded one,
 * a smaller one and one that fits the pool the base count; the bytes stay
 * exact whichever count copied them. */
static void test_wide_copies(void **state) {
  (void)state;
  char load[512];
  snprintf(load, sizeof load, "%s/loadavg.wide", tmpdir);
  unsetenv("PAGELOCK_COPY_THREADS");
  stage_env(POOL, CHUNK, PATIENT_US, "sync");
  pl_workers_set_cpus_for_test(16);
  bufs b;
  bufs_init(&b);
  write_loadavg(load, "0.00 0.01 0.05 1/300 4711\n");
  pl_cpuload_set_for_test(load, 16);
  pl_stage_stats s0, s;
  pl_stage_get_stats(&s0);
  one_h2d(&b, V_SYNC, 4 * MB + 5, 3, 1, 91);
  one_d2h(&b, V_SYNC, 5 * MB, 1, 0, 92, false);
  one_h2d(&b, V_ASYNC, 4 * MB - 1, 0, 0, 93);
  pl_stage_get_stats(&s);
  assert_int_equal(s.copies_wide - s0.copies_wide, 2);
  assert_int_equal(s.widest, 12);
  assert_int_equal(s.copies_crowded - s0.copies_crowded, 0);
  /* Every CPU taken: the base count, and counted as crowded. */
  write_loadavg(load, "16.00 9.00 4.00 21/300 4711\n");
  pl_cpuload_set_for_test(load, 16);
  pl_stage_get_stats(&s0);
  one_h2d(&b, V_SYNC, 5 * MB, 0, 0, 94);
  pl_stage_get_stats(&s);
  assert_int_equal(s.copies_wide - s0.copies_wide, 0);
  assert_int_equal(s.copies_crowded - s0.copies_crowded, 1);
  assert_int_equal(s.crowded_threads, 8);
  /* Idle again, but the copy fits the pool: it runs ahead of the DMA. */
  write_loadavg(load, "0.00 0.01 0.05 1/300 4711\n");
  pl_cpuload_set_for_test(load, 16);
  stage_env(8 * MB, CHUNK, PATIENT_US, "sync");
  pl_stage_get_stats(&s0);
  one_h2d(&b, V_ASYNC, 5 * MB, 0, 0, 95);
  one_d2h(&b, V_SYNC, 4 * MB, 0, 0, 96, false);
  pl_stage_get_stats(&s);
  assert_int_equal(s.copies_staged - s0.copies_staged, 2);
  assert_int_equal(s.copies_wide - s0.copies_wide, 0);
  bufs_fini(&b);
  pl_cpuload_set_for_test(NULL, 0);
  pl_workers_set_cpus_for_test(0);
  setenv("PAGELOCK_COPY_THREADS", "4", 1);
  stage_env(POOL, CHUNK, PATIENT_US, "sync");
}

/* The load file test_widen_midway's copy finds idle once the gate opens. */
static char widen_load[512];

static void *idle_then_open_gate(void *arg) {
  (void)arg;
  struct timespec ts = {0, 10 * 1000 * 1000};
  nanosleep(&ts, NULL);
  write_loadavg(widen_load, "0.00 0.01 0.05 1/300 4711\n");
  nanosleep(&ts, NULL);
  atomic_store(&gate, 1);
  return NULL;
}

/* A wide copy that starts with every CPU taken (a program's threads still
 * spinning after a parallel operation) takes more copy threads once CPUs
 * are idle: it asks again as it takes chunks, at most once a millisecond.
 * Here it starts behind a gated stream, fills the pool, waits for chunks
 * while the load turns idle, and goes on wider; the bytes stay exact. */
static void test_widen_midway(void **state) {
  (void)state;
  unsetenv("PAGELOCK_COPY_THREADS");
  stage_env(POOL, CHUNK, PATIENT_US, "sync");
  pl_workers_set_cpus_for_test(16);
  snprintf(widen_load, sizeof widen_load, "%s/loadavg.midway", tmpdir);
  write_loadavg(widen_load, "16.00 9.00 4.00 21/300 4711\n");
  pl_cpuload_set_for_test(widen_load, 16);
  bufs b;
  bufs_init(&b);
  const size_t n = 5 * MB;
  fill(b.host, n, 97);
  atomic_store(&gate, 0);
  assert_int_equal(f_cuLaunchHostFunc(b.s, gate_fn, NULL), CUDA_SUCCESS);
  pl_stage_stats s0, s;
  pl_stage_get_stats(&s0);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, idle_then_open_gate, NULL), 0);
  assert_int_equal(cuMemcpyHtoDAsync_v2(b.dev, b.host, n, b.s), CUDA_SUCCESS);
  pthread_join(t, NULL);
  pl_stage_get_stats(&s);
  assert_int_equal(s.copies_staged - s0.copies_staged, 1);
  assert_int_equal(s.copies_crowded - s0.copies_crowded, 1); /* as it started */
  assert_int_equal(s.copies_wide - s0.copies_wide, 1);       /* as it went on */
  assert_true(s.waits > s0.waits);
  assert_int_equal(f_cuStreamSynchronize(b.s), CUDA_SUCCESS);
  assert_int_equal(f_cuMemcpyDtoH_v2(b.chk, b.dev, n), CUDA_SUCCESS);
  assert_int_equal(check_pat(b.chk, n, 97), n);
  assert_true(bound_ok());
  bufs_fini(&b);
  pl_cpuload_set_for_test(NULL, 0);
  pl_workers_set_cpus_for_test(0);
  setenv("PAGELOCK_COPY_THREADS", "4", 1);
  stage_env(POOL, CHUNK, PATIENT_US, "sync");
}

int main(void) {
  stage_fixture_env();
  if (stage_fixture_start() != 0) return 2;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cpuload),       cmocka_unit_test(test_crowded),
      cmocka_unit_test(test_stage_threads), cmocka_unit_test(test_wide_copies),
      cmocka_unit_test(test_widen_midway),
  };
  return stage_fixture_end(cmocka_run_group_tests_name("stage_cpus", tests, NULL, NULL));
}
