/* test_repeats.c - runs of repeated copies, one record each (shim/record/run.c).
 *
 * Copies go through the shim's entry points (pagelock_core) over fakecuda.
 * What is checked is the trace as the reporter's reader sees it: every
 * copy counted exactly once, whatever ends a run (another copy, 64
 * copies, a failure, a registry change, the thread's end, a drain while
 * the thread is idle or still copying). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "pl_internal.h"
#include "copy.h"
#include "hostmem.h"
#include "init.h"
#include "run.h"
#include "stack.h"
#include "trace.h"
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
      /* The first copy takes the whole way; its 999 repeats go in runs
       * of 64, each begun again from the same record when full (no copy
       * takes the whole way between them): 1 + 16 records. */
      assert_true(s->records >= 16 && s->records <= 18);
      assert_int_equal(s->max_count, 64);
      /* The first copy, and one in 8 of each run's (8 of each 64, 5 of
       * the last 39). */
      assert_true(s->timed >= 1000 / 8 && s->timed <= 1000 / 8 + 4);
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

/* ---- call paths that share a return address and a stack depth --------- */

/* One helper that copies, called from two functions at the same depth:
 * the same return address into the shim (inside upload) and the same
 * stack pointer, yet two call paths, and each copy must carry its own.
 * The helper notes where each path returns to (the stack's frame 2) and
 * its own frame, which must be one for both paths, or the test would not
 * test what it says. */
static uintptr_t path_ret[2], path_frame[2];

static __attribute__((noipa)) CUresult copy_helper(const void *h, int which) {
  path_ret[which] = (uintptr_t)__builtin_return_address(0);
  path_frame[which] = (uintptr_t)__builtin_frame_address(0);
  CUresult r = upload(h, 256);
  __asm__ volatile("" ::: "memory");
  return r;
}
static __attribute__((noipa)) CUresult path_a(const void *h) {
  CUresult r = copy_helper(h, 0);
  __asm__ volatile("" ::: "memory");
  return r;
}
static __attribute__((noipa)) CUresult path_b(const void *h) {
  CUresult r = copy_helper(h, 1);
  __asm__ volatile("nop" ::: "memory");
  return r;
}

/* Each path n times, in turns. */
static __attribute__((noipa)) void two_paths(const void *h, int n) {
  for (int i = 0; i < n; i++) {
    assert_int_equal(path_a(h), CUDA_SUCCESS);
    assert_int_equal(path_b(h), CUDA_SUCCESS);
  }
  __asm__ volatile("" ::: "memory");
}

/* What a trace says of the two paths: the copies and records of the
 * stacks that return into path_a and into path_b (frame 2), and those of
 * any other stack. */
typedef struct path_counts {
  uint64_t copies[3], records[3];
  int ids[3]; /* distinct stack ids of each */
} path_counts;

static void read_paths(const char *path, path_counts *out) {
  memset(out, 0, sizeof *out);
  plr_reader r;
  assert_int_equal(plr_open(&r, path), PLR_OPEN_OK);
  plr_record rec;
  enum { MAX_IDS = 4096 }; /* the stack table's slots (stack.c) */
  /* Per stack id: which path it is (0, 1; 2 another; -1 unseen), its
   * copies and records. */
  int *of_id = malloc(MAX_IDS * sizeof *of_id);
  uint64_t *copies = calloc(MAX_IDS, sizeof *copies), *records = calloc(MAX_IDS, sizeof *records);
  assert_true(of_id != NULL && copies != NULL && records != NULL);
  for (int i = 0; i < MAX_IDS; i++) of_id[i] = -1;
  while (plr_next(&r, &rec)) {
    if (rec.type == PAGELOCK_REC_STACK) {
      const pagelock_rec_stack *st = rec.u.stack;
      assert_true(st->id < MAX_IDS);
      int which = 2;
      for (uint32_t f = 0; f < st->depth; f++)
        for (int k = 0; k < 2; k++)
          if (rec.frames[f] == path_ret[k]) {
            assert_true(which == 2 || which == k); /* never both */
            which = k;
          }
      of_id[st->id] = which;
    } else if (rec.type == PAGELOCK_REC_COPY) {
      uint32_t id = rec.u.copy->stack_id;
      assert_true(id < MAX_IDS);
      copies[id] += rec.u.copy->count;
      records[id]++;
    }
  }
  plr_close(&r);
  for (int i = 0; i < MAX_IDS; i++) {
    if (records[i] == 0) continue;
    assert_true(of_id[i] >= 0); /* every stack a copy names is in the trace */
    out->copies[of_id[i]] += copies[i];
    out->records[of_id[i]] += records[i];
    out->ids[of_id[i]]++;
  }
  free(of_id);
  free(copies);
  free(records);
}

/* A trace of the two paths, n copies each, run by fn(arg); every stack
 * the trace names is written in it (pl_stack_reset, as in a forked
 * child: the table keeps its stacks, the trace is a new one). */
static void paths_trace(const char *name, const char *repeats, void (*fn)(void *), void *arg,
                        path_counts *out) {
  char path[512];
  trace_start(name, path, sizeof path, repeats);
  pl_stack_reset();
  memset(path_ret, 0, sizeof path_ret);
  memset(path_frame, 0, sizeof path_frame);
  fn(arg);
  pl_exit_trace();
  assert_true(path_ret[0] != 0 && path_ret[1] != 0 && path_ret[0] != path_ret[1]);
  assert_true(path_frame[0] == path_frame[1]); /* one depth, or nothing is tested */
  read_paths(path, out);
}

/* The two paths, 100 copies each, run by fn(arg), in runs (NULL) or each
 * copy alone ("each"): two call sites of 100 copies each.  runs: the
 * frames could be read again there, so the paths ran: a few records for
 * 100 copies (a run of 64 after a copy that took the whole way; a
 * thread's first copy comes before its ring, its first unwind does not
 * look for its stack). */
static void paths_check(const char *name, const char *repeats, void (*fn)(void *), void *arg,
                        bool runs) {
  path_counts c;
  paths_trace(name, repeats, fn, arg, &c);
  assert_int_equal(c.copies[0], 100);
  assert_int_equal(c.copies[1], 100);
  assert_int_equal(c.copies[2], 0);
  assert_int_equal(c.ids[0], 1);
  assert_int_equal(c.ids[1], 1);
  if (repeats != NULL) {
    assert_int_equal(c.records[0], 100);
    assert_int_equal(c.records[1], 100);
  } else if (runs) {
    assert_true(c.records[0] <= 6 && c.records[1] <= 6);
  }
}

static char *paths_buf(void) {
  static char *b;
  if (b == NULL) {
    b = malloc(4096);
    memset(b, 1, 4096);
  }
  return b;
}

static void paths_here(void *arg) {
  (void)arg;
  two_paths(paths_buf(), 100);
}

/* On the main thread: the memo and the runs tell the paths apart. */
static void test_repeats_stack_paths(void **state) {
  (void)state;
  paths_check("paths.trace", NULL, paths_here, NULL, true);
  paths_check("paths-each.trace", "each", paths_here, NULL, true);
}

/* The stack memo itself, as the allocation hooks use it: a hook reached
 * through one helper from two callers at the same depth gets two stacks,
 * and each caller its own again on a repeat (from the memo). */
static __attribute__((noipa)) uint32_t hook_like(void) {
  volatile int frame = 0;
  uint32_t id = pl_stack_capture_at(1, __builtin_return_address(0), (const void *)&frame, NULL);
  __asm__ volatile("" ::: "memory");
  return id;
}
static __attribute__((noipa)) uint32_t alloc_helper(void) {
  uint32_t id = hook_like();
  __asm__ volatile("" ::: "memory");
  return id;
}
static __attribute__((noipa)) uint32_t caller_a(void) {
  uint32_t id = alloc_helper();
  __asm__ volatile("" ::: "memory");
  return id;
}
static __attribute__((noipa)) uint32_t caller_b(void) {
  uint32_t id = alloc_helper();
  __asm__ volatile("nop" ::: "memory");
  return id;
}

static void test_repeats_stack_memo(void **state) {
  (void)state;
  uint32_t a[10], b[10];
  for (int i = 0; i < 10; i++) {
    a[i] = caller_a();
    b[i] = caller_b();
  }
  assert_true(a[0] != 0 && b[0] != 0 && a[0] != b[0]);
  for (int i = 1; i < 10; i++) {
    assert_int_equal(a[i], a[0]);
    assert_int_equal(b[i], b[0]);
  }
}

/* A forked child's thread runs on the stack its parent's did: the two
 * callers keep their stacks there, whether the thread's stack was found
 * before the fork (its second unwind) or is found in the child. */
static __attribute__((noipa)) void callers_both(uint32_t *a, uint32_t *b) {
  *a = caller_a();
  *b = caller_b();
  __asm__ volatile("" ::: "memory");
}

typedef struct fork_case {
  int fork_at; /* before which round the thread forks: 0, before any unwind */
  int status;
} fork_case;

static void *fork_thread(void *arg) {
  fork_case *x = arg;
  uint32_t a[10], b[10];
  pid_t pid = -1;
  for (int i = 0; i < 10; i++) {
    if (i == x->fork_at && (pid = fork()) != 0) break; /* the parent stops */
    callers_both(&a[i], &b[i]);
  }
  if (pid == 0) {
    bool ok = a[0] != 0 && b[0] != 0 && a[0] != b[0];
    for (int i = 1; i < 10; i++) ok = ok && a[i] == a[0] && b[i] == b[0];
    _exit(ok ? 0 : 1);
  }
  if (pid < 0 || waitpid(pid, &x->status, 0) != pid) x->status = -1;
  return NULL;
}

static void test_repeats_stack_fork(void **state) {
  (void)state;
  for (int k = 0; k < 2; k++) {
    fork_case x = {.fork_at = k ? 4 : 0, .status = -1};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, fork_thread, &x), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_true(WIFEXITED(x.status) && WEXITSTATUS(x.status) == 0);
  }
}

/* The same on another thread: its stack is found in /proc/self/maps (the
 * mapping that holds its descriptor, glibc's guard page below). */
static void *paths_thread(void *arg) {
  (void)arg;
  assert_int_equal(setcur(ctx), CUDA_SUCCESS);
  two_paths(paths_buf(), 100);
  return NULL;
}

static void paths_in_thread(void *arg) {
  pthread_attr_t *a = arg;
  pthread_t t;
  assert_int_equal(pthread_create(&t, a, paths_thread, NULL), 0);
  assert_int_equal(pthread_join(t, NULL), 0);
}

static void test_repeats_stack_thread(void **state) {
  (void)state;
  paths_check("paths-thread.trace", NULL, paths_in_thread, NULL, true);
}

/* Finding a thread's own stack reads /proc/self/maps from inside the
 * hooks (a malloc's, a copy's): when that cannot be opened (here: no
 * descriptor left), the program's errno must still be what it was. */
static void *errno_thread(void *arg) {
  int *out = arg;
  int fds[4096], n = 0;
  while (n < 4096 && (fds[n] = dup(0)) >= 0) n++;
  out[2] = n > 0 && n < 4096; /* the descriptors ran out */
  errno = 4242;
  /* The second unwind of a thread looks for its stack. */
  for (int i = 0; i < 2; i++)
    out[i] = (int)(pl_stack_capture_at(0, __builtin_return_address(0), __builtin_frame_address(0),
                                       NULL) != 0);
  out[3] = errno;
  while (n > 0) close(fds[--n]);
  return NULL;
}

static void test_repeats_stack_errno(void **state) {
  (void)state;
  struct rlimit old, low;
  assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
  low = old;
  low.rlim_cur = 256;
  assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
  int out[4] = {0, 0, 0, 0};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, errno_thread, out), 0);
  assert_int_equal(pthread_join(t, NULL), 0);
  assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
  assert_true(out[0] && out[1]); /* stacks were taken */
  assert_true(out[2]);
  assert_int_equal(out[3], 4242);
}

/* A thread on a stack the program gave it (pthread_attr_setstack), here
 * mapped with nothing to guard it: whether or not the shim may read it
 * again (whatever the kernel placed below decides), every copy goes to
 * its own path. */
static void test_repeats_stack_user_stack(void **state) {
  (void)state;
  const size_t size = 1 << 20;
  void *stack = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  assert_true(stack != MAP_FAILED);
  pthread_attr_t a;
  assert_int_equal(pthread_attr_init(&a), 0);
  assert_int_equal(pthread_attr_setstack(&a, stack, size), 0);
  paths_check("paths-user.trace", NULL, paths_in_thread, &a, false);
  paths_check("paths-user-each.trace", "each", paths_in_thread, &a, false);
  pthread_attr_destroy(&a);
  assert_int_equal(munmap(stack, size), 0);
}

/* Deep in the main thread's stack (2 MiB below where the paths were
 * first taken): still its own stack, told apart and run. */
static __attribute__((noipa)) void paths_deep(int level, const void *h) {
  volatile char pad[32 << 10];
  pad[0] = (char)level;
  pad[sizeof pad - 1] = (char)level;
  if (level == 0)
    two_paths(h, 100);
  else
    paths_deep(level - 1, h);
  __asm__ volatile("" ::: "memory");
}

static void paths_deep_here(void *arg) {
  (void)arg;
  paths_deep(64, paths_buf());
}

static void test_repeats_stack_deep(void **state) {
  (void)state;
  paths_check("paths-deep.trace", NULL, paths_deep_here, NULL, true);
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

/* Under auto with no registration anywhere, a small copy across a page
 * boundary passes through, as under observe, and its repeats go in runs
 * (each used to take the whole way: a stack and a record per copy).  One
 * across an edge where a registration of its tracked allocation may begin
 * is cut into two calls there, so each copy takes the whole way: a run
 * would make its repeats in one call. */
static void test_repeats_auto(void **state) {
  (void)state;
  char path[512];
  setenv("PAGELOCK_MODE", "auto", 1);
  trace_start("auto.trace", path, sizeof path, NULL);
  size_t pg = (size_t)sysconf(_SC_PAGESIZE);
  size_t tn = 256 << 10, mn = tn + 2 * pg; /* tracked: at least PAGELOCK_TRACK_MIN */
  char *b = aligned_alloc(pg, 4 * pg);
  char *m = mmap(NULL, mn, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  assert_true(m != MAP_FAILED);
  memset(b, 3, 4 * pg);
  /* an allocation 100 bytes into a page: its interior starts at the next
   * page, t below, and the download crosses that edge */
  char *t = m + pg;
  assert_int_equal(pl_hostmem_init(64 << 10), 64 << 10); /* the malloc hook's, in the shim */
  pl_hostmem_track(m + 100, tn, 0);
  for (int i = 0; i < 200; i++) {
    assert_int_equal(upload(b + 64, 4096), CUDA_SUCCESS);
    assert_int_equal(download(t - 64, 256), CUDA_SUCCESS);
  }
  assert_int_equal(cuStreamSynchronize(stream), CUDA_SUCCESS);
  pl_exit_trace();
  unsetenv("PAGELOCK_MODE");
  pl_hostmem_untrack_range(m, mn);
  sites all;
  read_sites(path, &all);
  assert_int_equal(all.n, 2);
  site *up = &all.s[0], *down = &all.s[1];
  assert_int_equal(up->copies, 200);
  assert_int_equal(up->bytes, 200 * 4096);
  /* the first copy and 199 repeats in runs of 64: 5 records, and a run
   * begun again once */
  assert_true(up->records <= 8);
  assert_int_equal(down->copies, 200);
  assert_int_equal(down->records, 200);
  /* the bytes went where they should, cut or not */
  for (size_t i = 0; i < 256; i++) assert_int_equal(t[i - 64], b[64]);
  free(b);
  assert_int_equal(munmap(m, mn), 0);
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
  /* Both phases copy from the same call instruction: one call path, one
   * run.  (Counts the compiler cannot see, so that it does not make the
   * loop two loops, each with a call of its own.) */
  static volatile int phases = 2, copies[2] = {20, 7};
  for (int phase = 0; phase < phases; phase++) {
    for (int i = 0; i < copies[phase]; i++) upload(x->buf, 256);
    idler_set(x, 2 * phase + 1);
    idler_wait(x, 2 * phase + 2);
  }
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
      cmocka_unit_test(test_repeats_merge),        cmocka_unit_test(test_repeats_each),
      cmocka_unit_test(test_repeats_break),        cmocka_unit_test(test_repeats_idle_thread),
      cmocka_unit_test(test_repeats_drain_race),   cmocka_unit_test(test_repeats_stage),
      cmocka_unit_test(test_repeats_ring_reused),  cmocka_unit_test(test_repeats_parts),
      cmocka_unit_test(test_repeats_unseen_pin),   cmocka_unit_test(test_repeats_nested),
      cmocka_unit_test(test_repeats_stack_paths),  cmocka_unit_test(test_repeats_stack_memo),
      cmocka_unit_test(test_repeats_stack_thread), cmocka_unit_test(test_repeats_stack_user_stack),
      cmocka_unit_test(test_repeats_stack_deep),   cmocka_unit_test(test_repeats_stack_fork),
      cmocka_unit_test(test_repeats_stack_errno),  cmocka_unit_test(test_repeats_auto),
  };
  int rc = cmocka_run_group_tests_name("repeats", tests, setup, NULL);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  if (system(cmd) != 0) rc = rc ? rc : 1;
  return rc;
}
