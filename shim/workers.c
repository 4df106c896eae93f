/* workers.c - the copy thread pool: one job, a big memcpy into or out of a
 * pinned chunk, shared by persistent threads.
 *
 * One thread copies pageable memory at ~11 GB/s on the H200 host, sixteen
 * at ~40 GB/s, and the DMA behind it runs at ~55 GB/s: without parallel
 * copies the host side would be the bottleneck of every staged copy.
 *
 * A job lives on its caller's stack.  Its pieces are claimed with one
 * atomic counter by the caller and by any worker that wakes in time, so a
 * slow or descheduled worker never holds the caller up for more than one
 * piece, and the caller alone finishes the job when no worker is free (the
 * engine never depends on a worker to make progress).  A worker announces
 * itself in job->refs under the lock before touching the job, and the
 * caller returns only once refs is back to zero: the stack frame is never
 * read after it is gone. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif
#include <unistd.h>

#include "stage.h"

#define PL_PIECE_MIN ((size_t)256 << 10) /* smaller pieces cost more to hand out than to copy */
/* Default: half the CPUs the process may use, at most 8.  Measured on the
 * H200 host (docs/benchmarks.md): streaming-store copies into a chunk
 * reach ~80 GB/s well before 16 threads, and 16 busy copy threads starve the
 * program's own threads and the driver's (copy/compute overlap fell from
 * 1.00x to 1.1-1.8x of pinned with 16, and was 1.00x with 4). */
#define PL_THREADS_DEFAULT_MAX 8u
/* How long an idle worker polls before sleeping.  On the H200 host (16
 * cores, 4 MiB chunks, 256 MiB H2D) 0 gave 23 GB/s, 50 us 37 GB/s, 200 us
 * 44 GB/s: the next chunk of a pipelined copy arrives within a DMA. */
#ifndef PL_SPIN_NS
#define PL_SPIN_NS 200000ull
#endif
#define PL_WORKER_STACK ((size_t)256 << 10)

typedef struct pl_job {
  char *dst;
  const char *src;
  size_t n, piece, npieces;
  atomic_size_t next;       /* next piece to claim */
  bool nt;                  /* non-temporal stores (see pl_copy_stream) */
  unsigned refs;            /* workers inside the job, under pl_wk_lock */
  bool queued;              /* on the queue, under pl_wk_lock */
  struct pl_job *link;
} pl_job;

static pthread_mutex_t pl_wk_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pl_wk_wake = PTHREAD_COND_INITIALIZER; /* workers sleep here */
static pthread_cond_t pl_wk_done = PTHREAD_COND_INITIALIZER; /* callers wait for refs == 0 */
static pl_job *pl_wk_head;                                   /* under pl_wk_lock */
static atomic_uint pl_wk_queued;  /* jobs on the queue: what spinning workers poll */
static atomic_uint pl_wk_helpers; /* worker threads running */
static atomic_int pl_wk_state;    /* 0 not started, 1 starting, 2 started */

unsigned pl_workers_parallelism(void) {
  long want = pl_opt_long(PL_OPT_COPY_THREADS);
  if (want > 0) return (unsigned)want;
  cpu_set_t set;
  unsigned cpus = 0;
  if (sched_getaffinity(0, sizeof set, &set) == 0) cpus = (unsigned)CPU_COUNT(&set);
  if (cpus == 0) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    cpus = n > 0 ? (unsigned)n : 1;
  }
  cpus = cpus > 1 ? cpus / 2 : 1;
  return cpus < PL_THREADS_DEFAULT_MAX ? cpus : PL_THREADS_DEFAULT_MAX;
}

/* memcpy with non-temporal (streaming) stores, for filling a pinned chunk
 * that only the DMA engine will read: ordinary stores first read every
 * destination line into the cache (read-for-ownership) and evict the
 * source, so the copy moves three bytes of memory traffic per byte; streaming
 * stores move two.  The caller must sfence before the data is handed on. */
static void pl_copy_stream(char *dst, const char *src, size_t n) {
#if defined(__x86_64__)
  size_t head = (16 - ((uintptr_t)dst & 15)) & 15;
  if (head > n) head = n;
  memcpy(dst, src, head);
  dst += head, src += head, n -= head;
  for (; n >= 64; n -= 64, dst += 64, src += 64) {
    __m128i a = _mm_loadu_si128((const __m128i *)src), b = _mm_loadu_si128((const __m128i *)(src + 16));
    __m128i c = _mm_loadu_si128((const __m128i *)(src + 32)), d = _mm_loadu_si128((const __m128i *)(src + 48));
    _mm_stream_si128((__m128i *)dst, a);
    _mm_stream_si128((__m128i *)(dst + 16), b);
    _mm_stream_si128((__m128i *)(dst + 32), c);
    _mm_stream_si128((__m128i *)(dst + 48), d);
  }
  memcpy(dst, src, n);
#else
  memcpy(dst, src, n);
#endif
}

/* Copy pieces of j until none is left to claim.  Any thread, no lock. */
static void pl_job_run(pl_job *j) {
  size_t i;
  bool streamed = false;
  while ((i = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < j->npieces) {
    size_t off = i * j->piece;
    size_t len = j->n - off < j->piece ? j->n - off : j->piece;
    if (j->nt) { pl_copy_stream(j->dst + off, j->src + off, len); streamed = true; }
    else memcpy(j->dst + off, j->src + off, len);
  }
#if defined(__x86_64__)
  /* Streaming stores are weakly ordered: make them globally visible before
   * this thread reports the job done (the lock release does not). */
  if (streamed) _mm_sfence();
#else
  (void)streamed;
#endif
}

/* Take j off the queue.  Caller holds pl_wk_lock; j is queued. */
static void pl_job_unqueue_locked(pl_job *j) {
  pl_job **pp = &pl_wk_head;
  while (*pp != j) pp = &(*pp)->link;
  *pp = j->link;
  j->queued = false;
  atomic_fetch_sub_explicit(&pl_wk_queued, 1, memory_order_relaxed);
}

/* After a job, poll briefly for the next before sleeping: waking from the
 * condition variable costs tens of microseconds, a chunk's memcpy about a
 * hundred.  Returns with pl_wk_lock held either way. */
static void pl_worker_spin_then_lock(void) {
  uint64_t until = pl_now_ns() + PL_SPIN_NS;
  unsigned k = 0;
  while (atomic_load_explicit(&pl_wk_queued, memory_order_relaxed) == 0) {
    if ((++k & 63) == 0 && pl_now_ns() >= until) break;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
  }
  pthread_mutex_lock(&pl_wk_lock);
}

/* A copy thread: takes the oldest job with pieces left, copies until none
 * is left, and sleeps when the queue is empty.  Never exits (detached: the
 * process may exit with it asleep or mid-piece). */
static void *pl_worker_main(void *arg) {
  (void)arg;
  /* A copy thread is the shim's own: nothing it does is the program's. */
  pl_in_shim++;
  pthread_mutex_lock(&pl_wk_lock);
  for (;;) {
    pl_job *j = pl_wk_head;
    if (j == NULL) {
      pthread_cond_wait(&pl_wk_wake, &pl_wk_lock);
      continue;
    }
    if (atomic_load_explicit(&j->next, memory_order_relaxed) >= j->npieces) {
      pl_job_unqueue_locked(j); /* all claimed: nothing for anyone here */
      continue;
    }
    j->refs++;
    pthread_mutex_unlock(&pl_wk_lock);
    pl_job_run(j);
    pthread_mutex_lock(&pl_wk_lock);
    if (j->queued) pl_job_unqueue_locked(j);
    if (--j->refs == 0) pthread_cond_broadcast(&pl_wk_done);
    /* j may be gone from here on: its caller owns it again. */
    pthread_mutex_unlock(&pl_wk_lock);
    pl_worker_spin_then_lock();
  }
  return NULL;
}

/* Start the helper threads once.  A thread that arrives while another is
 * starting them simply copies alone this time.  Returns helpers running. */
static unsigned pl_workers_start(void) {
  if (PL_LIKELY(atomic_load_explicit(&pl_wk_state, memory_order_acquire) == 2))
    return atomic_load_explicit(&pl_wk_helpers, memory_order_relaxed);
  int expected = 0;
  if (!atomic_compare_exchange_strong(&pl_wk_state, &expected, 1)) return 0;
  unsigned want = pl_workers_parallelism() - 1; /* the caller is one of them */
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, PL_WORKER_STACK);
  /* The program's signals are for the program's threads: created with all
   * blocked, helpers never run its handlers (nor steal its SIGINT). */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  unsigned started = 0;
  int err = 0;
  for (unsigned i = 0; i < want; i++) {
    pthread_t t;
    err = pthread_create(&t, &attr, pl_worker_main, NULL);
    if (err != 0) break;
    pthread_setname_np(t, "pagelock-copy");
    started++;
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  pthread_attr_destroy(&attr);
  if (started < want)
    pl_log(PL_LOG_WARN, PL_LK_STAGE_WORKERS, "started %u of %u copy threads (error %d); staging continues with fewer",
           started, want, err);
  atomic_store_explicit(&pl_wk_helpers, started, memory_order_relaxed);
  atomic_store_explicit(&pl_wk_state, 2, memory_order_release);
  return started;
}

static void pl_workers_copy(void *dst, const void *src, size_t n, bool nt);

void pl_workers_memcpy(void *dst, const void *src, size_t n) { pl_workers_copy(dst, src, n, false); }

void pl_workers_memcpy_to_chunk(void *dst, const void *src, size_t n) {
#ifdef PL_NO_STREAM_STORES /* for comparison runs (tests/bench/diag.sh) */
  pl_workers_copy(dst, src, n, false);
#else
  pl_workers_copy(dst, src, n, true);
#endif
}

/* The parallel copy behind both entry points. */
static void pl_workers_copy(void *dst, const void *src, size_t n, bool nt) {
  unsigned helpers = n >= 2 * PL_PIECE_MIN ? pl_workers_start() : 0;
  if (helpers == 0) {
    pl_job one = {.dst = dst, .src = src, .n = n, .piece = n ? n : 1, .npieces = n ? 1 : 0, .nt = nt};
    atomic_init(&one.next, 0);
    pl_job_run(&one);
    return;
  }
  /* About two pieces per thread: enough to even out threads that wake late,
   * few enough that handing them out costs nothing. */
  size_t piece = n / (2 * ((size_t)helpers + 1));
  piece = (piece + 4095) & ~(size_t)4095;
  if (piece < PL_PIECE_MIN) piece = PL_PIECE_MIN;
  pl_job j = {.dst = dst, .src = src, .n = n, .piece = piece,
              .npieces = (n + piece - 1) / piece, .nt = nt, .queued = true};
  atomic_init(&j.next, 0);
  unsigned wake = j.npieces - 1 < helpers ? (unsigned)(j.npieces - 1) : helpers;

  pthread_mutex_lock(&pl_wk_lock);
  pl_job **pp = &pl_wk_head;
  while (*pp) pp = &(*pp)->link;
  *pp = &j;
  atomic_fetch_add_explicit(&pl_wk_queued, 1, memory_order_relaxed);
  if (wake == helpers) pthread_cond_broadcast(&pl_wk_wake);
  else for (unsigned i = 0; i < wake; i++) pthread_cond_signal(&pl_wk_wake);
  pthread_mutex_unlock(&pl_wk_lock);

  pl_job_run(&j);

  /* Every piece is claimed now; the ones workers claimed are done once no
   * worker is left inside the job. */
  pthread_mutex_lock(&pl_wk_lock);
  if (j.queued) pl_job_unqueue_locked(&j);
  while (j.refs > 0) pthread_cond_wait(&pl_wk_done, &pl_wk_lock);
  pthread_mutex_unlock(&pl_wk_lock);
}
