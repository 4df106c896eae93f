/* test_repeats.c - runs of repeated copies, one record each (shim/run.c).
 *
 * Copies go through the shim's entry points (pagelock_core) over fakecuda.
 * What is checked is the trace as the reporter's reader sees it: every
 * copy counted exactly once, whatever ends a run (another copy, 64
 * copies, a failure, a registry change, the thread's end, a drain while
 * the thread is idle or still copying). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "pl_internal.h"
#include "run.h"
#include "trace_read.h"

static char tmpdir[256];
static CUcontext ctx;
static CUresult (*setcur)(CUcontext);
static CUstream stream;
static CUdeviceptr dev;

/* What the trace says of one call site's copies. */
typedef struct site {
  uint64_t callsite;
  uint64_t copies, records, timed, bytes, host_ns;
  uint64_t pinned; /* copies whose host side was program-pinned */
  uint64_t failed; /* copies whose result was not CUDA_SUCCESS */
  uint64_t staged; /* copies the staging engine moved */
  uint32_t max_count;
  uint64_t last_start; /* the site's last record's */
} site;

#define MAX_SITES 8
typedef struct sites {
  site s[MAX_SITES];
  int n;
  uint64_t copies;
} sites;

static site *site_of(sites *all, uint64_t callsite) {
  for (int i = 0; i < all->n; i++)
    if (all->s[i].callsite == callsite) return &all->s[i];
  assert_true(all->n < MAX_SITES);
  site *s = &all->s[all->n++];
  memset(s, 0, sizeof *s);
  s->callsite = callsite;
  return s;
}

/* Every COPY record of the trace at path, by call site, in order of first
 * appearance. */
static void read_sites(const char *path, sites *all) {
  memset(all, 0, sizeof *all);
  plr_reader r;
  assert_int_equal(plr_open(&r, path), PLR_OPEN_OK);
  plr_record rec;
  while (plr_next(&r, &rec)) {
    if (rec.type != PAGELOCK_REC_COPY) continue;
    const pagelock_rec_copy *c = rec.u.copy;
    assert_true(c->count >= 1 && c->count <= 64);
    assert_true(c->timed <= c->count);
    site *s = site_of(all, c->callsite);
    s->copies += c->count;
    s->records++;
    s->timed += c->timed;
    s->bytes += c->bytes * c->count;
    s->host_ns += c->host_ns;
    if (c->host_mem == PAGELOCK_MEM_PINNED || c->host_mem == PAGELOCK_MEM_REGISTERED)
      s->pinned += c->count;
    if (c->result != CUDA_SUCCESS) s->failed += c->count;
    if (c->flags & PAGELOCK_COPY_STAGED) s->staged += c->count;
    if (c->count > s->max_count) s->max_count = c->count;
    s->last_start = c->start_ns;
    all->copies += c->count;
  }
  assert_int_equal(r.stop, PLR_STOP_END);
  plr_close(&r);
}

static void trace_start(const char *name, char *path, size_t n, const char *repeats) {
  snprintf(path, n, "%s/%s", tmpdir, name);
  setenv("PAGELOCK_OUTPUT", path, 1);
  if (repeats)
    setenv("PAGELOCK_REPEATS", repeats, 1);
  else
    unsetenv("PAGELOCK_REPEATS");
  pl_config_reset_for_test();
  pl_trace_reset_for_test();
}

/* One upload of n bytes from h: the call site every loop below repeats
 * (noipa: no clone per constant argument, which would be another site;
 * and no tail call, which would make the caller's line the site). */
static __attribute__((noipa)) CUresult upload(const void *h, size_t n) {
  CUresult r = cuMemcpyHtoDAsync_v2(dev, h, n, stream);
  __asm__ volatile("" ::: "memory"); /* no tail call: the site is here */
  return r;
}
static __attribute__((noipa)) CUresult download(void *h, size_t n) {
  CUresult r = cuMemcpyDtoHAsync_v2(h, dev, n, stream);
  __asm__ volatile("" ::: "memory");
  return r;
}

/* 1000 uploads and 1000 downloads, interleaved, 256 bytes each: two runs
 * side by side, each cut every 64 copies, every copy counted, one in 8
 * timed.  With PAGELOCK_REPEATS=each, one record per copy. */
static void repeats_loop(const char *repeats, bool merged) {
  char path[512];
  trace_start(merged ? "merge.trace" : "each.trace", path, sizeof path, repeats);
  char *b = malloc(4096);
  memset(b, 7, 4096);
  for (int i = 0; i < 1000; i++) {
    assert_int_equal(upload(b, 256), CUDA_SUCCESS);
    assert_int_equal(download(b + 1024, 256), CUDA_SUCCESS);
  }
  pl_exit_trace();
  sites all;
  read_sites(path, &all);
  assert_int_equal(all.n, 2);
  for (int i = 0; i < 2; i++) {
    site *s = &all.s[i];
    assert_int_equal(s->copies, 1000);
    assert_int_equal(s->bytes, 1000 * 256);
    assert_true(s->host_ns > 0);
    if (merged) {
      /* A run of up to 64 after each copy that took the whole way: 1000
       * copies in 16 such pairs (65 copies each), and what is left. */
      assert_true(s->records >= 30 && s->records <= 34);
      assert_int_equal(s->max_count, 64);
      /* The whole-way copies, and one in 8 of each run's. */
      assert_true(s->timed >= 1000 / 8 && s->timed <= 1000 / 8 + 2 * 16 + 2);
    } else {
      assert_int_equal(s->records, 1000);
      assert_int_equal(s->timed, 1000);
    }
  }
  free(b);
}

static void test_repeats_merge(void **state) {
  (void)state;
  repeats_loop(NULL, true);
}

static void test_repeats_each(void **state) {
  (void)state;
  repeats_loop("each", false);
}

/* Whatever decides a record ends a run: a registration of the buffer by
 * the program (its copies are then pinned ones), another size, another
 * stream, a failed call (recorded on its own, with its error). */
static void test_repeats_break(void **state) {
  (void)state;
  char path[512];
  trace_start("break.trace", path, sizeof path, NULL);
  char *b = aligned_alloc(4096, 8192);
  memset(b, 1, 8192);
  for (int i = 0; i < 100; i++) assert_int_equal(upload(b, 512), CUDA_SUCCESS);
  /* Through the shim's hook, as a program's registration comes. */
  assert_int_equal(cuMemHostRegister_v2(b, 8192, 0), CUDA_SUCCESS);
  for (int i = 0; i < 50; i++) assert_int_equal(upload(b, 512), CUDA_SUCCESS);
  assert_int_equal(cuMemHostUnregister(b), CUDA_SUCCESS);
  for (int i = 0; i < 30; i++) assert_int_equal(upload(b, 512), CUDA_SUCCESS);
  for (int i = 0; i < 20; i++) assert_int_equal(upload(b, 300), CUDA_SUCCESS);
  /* An upload past the end of the device buffer fails: alone. */
  assert_int_not_equal(cuMemcpyHtoDAsync_v2(dev + (1 << 20) - 64, b, 512, stream), CUDA_SUCCESS);
  pl_exit_trace();
  sites all;
  read_sites(path, &all);
  assert_int_equal(all.n, 2);
  site *s = &all.s[0];
  assert_int_equal(s->copies, 200);
  assert_int_equal(s->pinned, 50);
  assert_int_equal(s->bytes, 180 * 512 + 20 * 300);
  assert_int_equal(all.copies, 201);
  site *f = &all.s[1];
  assert_int_equal(f->copies, 1);
  assert_int_equal(f->failed, 1);
  free(b);
}

/* Memory page-locked where the hooks did not see it (here libcuda's own
 * entry point, called past the shim) is noticed by the registry's memo
 * within 64 copies of its page, run or not: a run's copies spend the
 * memo's answers as the first one did. */
static void test_repeats_unseen_pin(void **state) {
  (void)state;
  char path[512];
  trace_start("unseen.trace", path, sizeof path, NULL);
  CUresult (*reg)(void *, size_t, unsigned) = dlsym(RTLD_NEXT, "cuMemHostRegister_v2");
  CUresult (*unreg)(void *) = dlsym(RTLD_NEXT, "cuMemHostUnregister");
  assert_non_null(reg);
  char *b = aligned_alloc(4096, 4096);
  memset(b, 2, 4096);
  for (int i = 0; i < 100; i++) assert_int_equal(upload(b, 256), CUDA_SUCCESS);
  assert_int_equal(reg(b, 4096, 0), CUDA_SUCCESS);
  for (int i = 0; i < 200; i++) assert_int_equal(upload(b, 256), CUDA_SUCCESS);
  pl_exit_trace();
  assert_int_equal(unreg(b), CUDA_SUCCESS);
  sites all;
  read_sites(path, &all);
  assert_int_equal(all.n, 1);
  assert_int_equal(all.s[0].copies, 300);
  /* 64 copies on the memo's answer, then the first to ask the driver and
   * the run it opens: at least 200 - 65 - 1 of them pinned. */
  assert_true(all.s[0].pinned >= 134);
  free(b);
}

/* A copy the driver call itself makes on the same thread (a CUPTI
 * subscriber's, another interposer's) is a copy of its own: it neither
 * adds to nor closes the run whose copy is in the driver.  Here the outer
 * copy's driver call makes five uploads of five sizes, more runs than a
 * thread keeps, before the real call. */
static CUresult (*real_htod)(CUdeviceptr, const void *, size_t, CUstream);
static char *nested_buf;

static CUresult outer_native(const pl_copy *c) {
  for (size_t k = 1; k <= 5; k++) assert_int_equal(upload(nested_buf, 64 * k), CUDA_SUCCESS);
  return real_htod(c->dst, (const void *)(uintptr_t)c->src, c->bytes, c->stream);
}

static void outer_site(void) {}

static __attribute__((noipa)) CUresult outer_copy(const void *h) {
  pl_copy c = {.api = PAGELOCK_API_cuMemcpyHtoDAsync_v2,
               .flags = PAGELOCK_COPY_ASYNC,
               .dir = PAGELOCK_DIR_H2D,
               .dst = dev,
               .src = (CUdeviceptr)(uintptr_t)h,
               .bytes = 256,
               .stream = stream,
               .callsite = (void *)(uintptr_t)outer_site,
               .native = outer_native,
               .dst_mem = PAGELOCK_MEM_DEVICE};
  CUresult r = pl_copy_exec(&c);
  __asm__ volatile("" ::: "memory");
  return r;
}

static void test_repeats_nested(void **state) {
  (void)state;
  char path[512];
  trace_start("nested.trace", path, sizeof path, NULL);
  real_htod = dlsym(RTLD_NEXT, "cuMemcpyHtoDAsync_v2");
  assert_non_null(real_htod);
  char *b = malloc(4096);
  nested_buf = malloc(4096);
  memset(b, 6, 4096);
  memset(nested_buf, 8, 4096);
  for (int i = 0; i < 100; i++) assert_int_equal(outer_copy(b), CUDA_SUCCESS);
  pl_exit_trace();
  sites all;
  read_sites(path, &all);
  assert_int_equal(all.copies, 600);
  site *outer = site_of(&all, (uint64_t)(uintptr_t)outer_site);
  assert_int_equal(outer->copies, 100);
  assert_int_equal(outer->bytes, 100 * 256);
  assert_int_equal(all.n, 2);
  site *inner = outer == &all.s[0] ? &all.s[1] : &all.s[0];
  assert_int_equal(inner->copies, 500);
  assert_int_equal(inner->bytes, 100 * 64 * (1 + 2 + 3 + 4 + 5));
  free(b);
  free(nested_buf);
}

/* Under stage, a copy the engine takes is staged every time, never a
 * run's repeat; a smaller one beside it passes through and runs. */
static __attribute__((noipa)) CUresult upload_big(const void *h, size_t n) {
  CUresult r = cuMemcpyHtoDAsync_v2(dev, h, n, stream);
  __asm__ volatile("" ::: "memory");
  return r;
}

static void test_repeats_stage(void **state) {
  (void)state;
  char path[512];
  setenv("PAGELOCK_MODE", "stage", 1);
  setenv("PAGELOCK_STAGE_MIN", "64K", 1);
  trace_start("stage.trace", path, sizeof path, NULL);
  char *b = malloc(256 << 10);
  memset(b, 9, 256 << 10);
  for (int i = 0; i < 50; i++) {
    assert_int_equal(upload_big(b, 128 << 10), CUDA_SUCCESS);
    assert_int_equal(upload(b + (200 << 10), 1024), CUDA_SUCCESS);
  }
  pl_exit_trace();
  unsetenv("PAGELOCK_MODE");
  unsetenv("PAGELOCK_STAGE_MIN");
  sites all;
  read_sites(path, &all);
  assert_int_equal(all.n, 2);
  site *big = &all.s[0], *small = &all.s[1];
  assert_int_equal(big->copies, 50);
  assert_int_equal(big->records, 50);
  assert_int_equal(big->staged, 50);
  assert_int_equal(small->copies, 50);
  assert_int_equal(small->staged, 0);
  assert_true(small->records <= 3);
  free(b);
}

/* A thread's run reaches the file while the thread is idle, and the run
 * it goes on with after such a drain counts only the copies after it. */
typedef struct idler {
  pthread_mutex_t m;
  pthread_cond_t cv;
  int phase;
  char *buf;
} idler;

static void idler_wait(idler *x, int phase) {
  pthread_mutex_lock(&x->m);
  while (x->phase < phase) pthread_cond_wait(&x->cv, &x->m);
  pthread_mutex_unlock(&x->m);
}
static void idler_set(idler *x, int phase) {
  pthread_mutex_lock(&x->m);
  x->phase = phase;
  pthread_cond_broadcast(&x->cv);
  pthread_mutex_unlock(&x->m);
}

static void *idle_thread(void *arg) {
  idler *x = arg;
  assert_int_equal(setcur(ctx), CUDA_SUCCESS);
  for (int i = 0; i < 20; i++) upload(x->buf, 256);
  idler_set(x, 1);
  idler_wait(x, 2);
  for (int i = 0; i < 7; i++) upload(x->buf, 256);
  idler_set(x, 3);
  idler_wait(x, 4);
  return NULL;
}

static void test_repeats_idle_thread(void **state) {
  (void)state;
  char path[512];
  trace_start("idle.trace", path, sizeof path, NULL);
  idler x = {.m = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
  x.buf = malloc(4096);
  memset(x.buf, 3, 4096);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, idle_thread, &x), 0);
  idler_wait(&x, 1);
  pl_trace_drain_for_test(); /* the writer's drain, while the thread waits */
  uint64_t resumed = pl_now_ns();
  idler_set(&x, 2);
  idler_wait(&x, 3);
  /* The thread is alive, idle again, its run open: the exit takes it. */
  pl_exit_trace();
  idler_set(&x, 4);
  pthread_join(t, NULL);
  sites all;
  read_sites(path, &all);
  assert_int_equal(all.n, 1);
  assert_int_equal(all.s[0].copies, 27);
  /* The thread's first copy (its ring comes with its first record, too
   * late to open a run), the second, the run the drain took (18), the
   * rest at exit (7), which began once the thread went on. */
  assert_int_equal(all.s[0].records, 4);
  assert_true(all.s[0].last_start >= resumed);
  free(x.buf);
}

/* A thread that ends leaves its ring to the next thread, which comes
 * back to the same call path (glibc hands it the same stack): its copies
 * must open runs of their own, not add to the last thread's. */
static void *short_thread(void *arg) {
  assert_int_equal(setcur(ctx), CUDA_SUCCESS);
  for (int i = 0; i < 20; i++) assert_int_equal(upload(arg, 256), CUDA_SUCCESS);
  return NULL;
}

static void test_repeats_ring_reused(void **state) {
  (void)state;
  char path[512];
  trace_start("reused.trace", path, sizeof path, NULL);
  char *b = malloc(4096);
  memset(b, 4, 4096);
  for (int t = 0; t < 3; t++) {
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, short_thread, b), 0);
    pthread_join(th, NULL);
  }
  pl_exit_trace();
  sites all;
  read_sites(path, &all);
  assert_int_equal(all.n, 1);
  assert_int_equal(all.s[0].copies, 60);
  free(b);
}

/* Drains racing a thread that copies: no copy lost, none counted twice. */
typedef struct racer {
  char *buf;
  _Atomic bool done;
} racer;

#define RACE_COPIES 20000
static void *race_thread(void *arg) {
  racer *x = arg;
  assert_int_equal(setcur(ctx), CUDA_SUCCESS);
  for (int i = 0; i < RACE_COPIES; i++) upload(x->buf, 128);
  atomic_store(&x->done, true);
  return NULL;
}

static void test_repeats_drain_race(void **state) {
  (void)state;
  char path[512];
  trace_start("race.trace", path, sizeof path, NULL);
  racer x = {.buf = malloc(4096)};
  memset(x.buf, 5, 4096);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, race_thread, &x), 0);
  int drains = 0;
  while (!atomic_load(&x.done)) {
    pl_trace_drain_for_test();
    drains++;
  }
  pthread_join(t, NULL);
  pl_exit_trace();
  sites all;
  read_sites(path, &all);
  assert_int_equal(all.n, 1);
  assert_int_equal(all.s[0].copies, RACE_COPIES);
  assert_int_equal(all.s[0].bytes, (uint64_t)RACE_COPIES * 128);
  assert_true(drains > 0);
  free(x.buf);
}

/* A run's parts, as the owner closes and drainers take them, against a
 * drainer taking without pause: every part's count, timed count, host
 * time and start must agree with each other (the owner here times its
 * copies at exactly 10 ns each, so a part's host time is 10 ns a copy). */
#define PARTS_COPIES 400000
#define PARTS_MAX 20000
typedef struct parts {
  pl_run run;
  _Atomic bool done;
  _Atomic uint64_t clock; /* the owner's copy times, for the drainer */
  pagelock_rec_copy rec[PARTS_MAX];
  _Atomic uint32_t n;
  _Atomic uint64_t copies;
} parts;

static void parts_keep(parts *x, const pagelock_rec_copy *rec) {
  uint32_t i = atomic_fetch_add(&x->n, 1);
  if (i < PARTS_MAX) x->rec[i] = *rec;
  x->copies += rec->count;
}

static void *parts_drainer(void *arg) {
  parts *x = arg;
  pagelock_rec_copy rec;
  while (!atomic_load(&x->done))
    if (pl_run_take(&x->run, atomic_load(&x->clock), &rec)) parts_keep(x, &rec);
  return NULL;
}

static void test_repeats_parts(void **state) {
  (void)state;
  parts *x = calloc(1, sizeof *x);
  pl_run_key key = {.callsite = 1};
  pagelock_rec_copy proto = {.start_ns = 1000, .host_ns = 10, .bytes = 256};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, parts_drainer, x), 0);
  pl_run_open(&x->run, &key, &proto);
  for (uint64_t i = 0; i < PARTS_COPIES; i++) {
    uint64_t at = 1000 + 100 * (i + 1);
    atomic_store(&x->clock, at);
    unsigned how = pl_run_times(&x->run);
    pl_run_add(&x->run, how, at, how != PL_RUN_UNTIMED ? 10 : 0);
    if (i % 9 == 8) { /* runs of nine: many parts that begin and end */
      pagelock_rec_copy rec;
      if (pl_run_close(&x->run, &rec)) parts_keep(x, &rec);
      pl_run_open(&x->run, &key, &proto);
    }
  }
  pagelock_rec_copy rec;
  if (pl_run_close(&x->run, &rec)) parts_keep(x, &rec);
  atomic_store(&x->done, true);
  pthread_join(t, NULL);
  uint32_t n = atomic_load(&x->n) < PARTS_MAX ? atomic_load(&x->n) : PARTS_MAX;
  for (uint32_t i = 0; i < n; i++) {
    const pagelock_rec_copy *c = &x->rec[i];
    assert_true(c->count >= 1 && c->count <= 9);
    assert_true(c->timed <= c->count);
    if (c->timed) assert_int_equal(c->host_ns, 10 * (uint64_t)c->count);
    assert_true(c->start_ns > 1000 && c->start_ns <= 1000 + 100 * (uint64_t)PARTS_COPIES);
  }
  assert_int_equal(x->copies, PARTS_COPIES);
  free(x);
}

static int setup(void **state) {
  (void)state;
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (h == NULL) return -1;
  CUresult (*init)(unsigned) = dlsym(h, "cuInit");
  CUresult (*retain)(CUcontext *, CUdevice) = dlsym(h, "cuDevicePrimaryCtxRetain");
  setcur = dlsym(h, "cuCtxSetCurrent");
  CUresult (*mkstream)(CUstream *, unsigned) = dlsym(h, "cuStreamCreate");
  CUresult (*alloc)(CUdeviceptr *, size_t) = dlsym(h, "cuMemAlloc_v2");
  if (init(0) || retain(&ctx, 0) || setcur(ctx) || mkstream(&stream, 0) || alloc(&dev, 1 << 20))
    return -1;
  return 0;
}

int main(void) {
  snprintf(tmpdir, sizeof tmpdir, "%s/pagelock-repeats.XXXXXX",
           getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  if (mkdtemp(tmpdir) == NULL) return 2;
  setenv("PAGELOCK_LOG", "error", 1);
  /* No GPU timing: CUPTI's tracing would give every copy a record. */
  setenv("PAGELOCK_CUPTI", "0", 1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_repeats_merge),       cmocka_unit_test(test_repeats_each),
      cmocka_unit_test(test_repeats_break),       cmocka_unit_test(test_repeats_idle_thread),
      cmocka_unit_test(test_repeats_drain_race),  cmocka_unit_test(test_repeats_stage),
      cmocka_unit_test(test_repeats_ring_reused), cmocka_unit_test(test_repeats_parts),
      cmocka_unit_test(test_repeats_unseen_pin),  cmocka_unit_test(test_repeats_nested),
  };
  int rc = cmocka_run_group_tests_name("repeats", tests, setup, NULL);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  if (system(cmd) != 0) rc = rc ? rc : 1;
  return rc;
}
