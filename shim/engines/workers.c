/* workers.c - the copy thread pool: big memcpys into or out of pinned
 * chunks, shared by persistent threads.
 *
 * One thread copies pageable memory at ~11 GB/s on the H200 host, eight
 * at ~80 GB/s (streaming stores), and the DMA behind them runs at ~55
 * GB/s: without parallel copies the host side would be the bottleneck of
 * every staged copy.
 *
 * A job (workers.h) is a sequence of segments, each cut into pieces that
 * the threads claim with one atomic counter, in order.  The job's owner
 * publishes segment k+1 while segment k is still being copied and waits
 * for segments in order, so a pipelined upload has no barrier between
 * chunks: when one chunk's last piece is done, the threads are already
 * inside the next chunk, and the owner enqueues the finished chunk's DMA.
 * (A fork-join per chunk lost a straggler's piece and a condition-variable
 * wake-up at every chunk: on the H200 host, 16 MiB uploads went from 0.61
 * to 0.74 of pinned without it.)
 *
 * The owner copies the unclaimed pieces of the segment it waits for
 * itself, so a job finishes even when no worker ever runs (the engine
 * never depends on a worker to make progress).  A worker announces itself
 * in job->refs under the lock before touching the job, and the owner's
 * close returns only once refs is back to zero: the stack frame is never
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

#include "workers.h"

/* Piece size: small enough that eight threads share a 1 MiB segment and
 * a straggler holds a segment up for ~25 us at most, big enough that
 * claiming costs nothing next to copying. */
#define PL_PIECE ((size_t)256 << 10)
#define PL_PIECE_SHIFT 24 /* seg->range: first piece << 24 | count */
/* Copy threads, the caller included, unless PAGELOCK_COPY_THREADS says.
 *
 * Base: half the CPUs the process may use, at most 8.  Every copy may use
 * that many.  Measured on the H200 host (docs/benchmarks.md):
 * streaming-store copies into a chunk reach ~80 GB/s well before 16
 * threads, and 16 busy copy threads starve the program's own threads and
 * the driver's (copy/compute overlap fell from 1.00x to 1.1-1.8x of pinned
 * with 16, and was 1.00x with 4).
 *
 * Wide: three quarters of those CPUs, at most 12, for a copy larger than
 * the pool that finds that many idle (stage.c asks cpuload.c).  Such a
 * copy recycles its chunks and fills them with plain stores, and only
 * keeps up with the DMA if its threads copy faster.  One thread copies
 * only 5.4-7.7 GB/s on the H100 host (a VM: each thread is bound by memory
 * latency, not bandwidth), so 8 fill chunks at ~36 GB/s, behind a 54 GB/s
 * DMA, and 12 at ~57; 16 took memory bandwidth from the DMA (44 GB/s
 * instead of 49).  Staged 256 MiB uploads went from 0.73 to 0.84 of
 * pinned with 12 on the H100 host, from 0.86 to 0.91 on the H200 host; a
 * copy that fits the pool runs ahead of the DMA into free chunks, and
 * uploads of 16 MiB beside kernels (bench_copy overlap) took 3.12 ms
 * instead of 2.96 with 12 threads (docs/bench/2026-11-27-copy-threads-larger-than-the-pool.md). */
#define PL_THREADS_DEFAULT_MAX 8u
#define PL_THREADS_WIDE_MAX 12u
/* How long an idle worker polls before sleeping.  On the H200 host (16
 * cores, 4 MiB chunks, 256 MiB H2D) 0 gave 23 GB/s, 50 us 37 GB/s, 200 us
 * 44 GB/s: the next chunk of a pipelined copy arrives within a DMA. */
#ifndef PL_SPIN_NS
#define PL_SPIN_NS 200000ull
#endif
/* Whether the copy threads poll after a lone job as well (an experiment
 * switch; docs/benchmarks.md has both).  The next asynchronous copy-out
 * comes a DMA later at the soonest, so polling for it only takes CPU from
 * the program: on the H200 host, with it, 64 MiB asynchronous downloads in
 * a loop returned in 12.6-35.1 us (three processes), without it in
 * 11.5-19.2 us. */
#ifndef PL_LONE_SPIN
#define PL_LONE_SPIN 0
#endif
#define PL_WORKER_STACK ((size_t)256 << 10)

static pthread_mutex_t pl_wk_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pl_wk_wake = PTHREAD_COND_INITIALIZER; /* workers sleep here */
static pthread_cond_t pl_wk_done = PTHREAD_COND_INITIALIZER; /* owners wait for refs == 0 */
static pl_job *pl_wk_head;                                   /* under pl_wk_lock */
static atomic_uint pl_wk_gen;      /* bumped at every publish: what spinning workers poll */
static atomic_uint pl_wk_sleepers; /* workers in (or entering) the condition wait */
static atomic_uint pl_wk_helpers;  /* worker threads running */
static atomic_int pl_wk_state;     /* 0 not started, 1 starting, 2 started */
static atomic_uint_fast64_t pl_wk_nt_bytes; /* copied with streaming stores, for tests */

bool pl_workers_explicit(void) { return pl_opt_long(PL_OPT_COPY_THREADS) > 0; }

/* The CPUs this process may run on (its affinity mask), at least 1, as
 * the first staged copy found them: the copy threads are started then,
 * and every staged copy asks, where the system call would cost ~0.3 us. */
static atomic_uint pl_wk_cpus; /* 0: not asked yet */

static unsigned pl_workers_cpus(void) {
  unsigned cpus = atomic_load_explicit(&pl_wk_cpus, memory_order_relaxed);
  if (PL_LIKELY(cpus != 0)) return cpus;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) cpus = (unsigned)CPU_COUNT(&set);
  if (cpus == 0) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    cpus = n > 0 ? (unsigned)n : 1;
  }
  atomic_store_explicit(&pl_wk_cpus, cpus, memory_order_relaxed);
  return cpus;
}

void pl_workers_set_cpus_for_test(unsigned cpus) { atomic_store(&pl_wk_cpus, cpus); }

unsigned pl_workers_base(void) {
  long want = pl_opt_long(PL_OPT_COPY_THREADS);
  if (want > 0) return (unsigned)want;
  unsigned cpus = pl_workers_cpus();
  cpus = cpus > 1 ? cpus / 2 : 1;
  return cpus < PL_THREADS_DEFAULT_MAX ? cpus : PL_THREADS_DEFAULT_MAX;
}

unsigned pl_workers_parallelism(void) {
  long want = pl_opt_long(PL_OPT_COPY_THREADS);
  if (want > 0) return (unsigned)want;
  unsigned wide = pl_workers_cpus() * 3 / 4, base = pl_workers_base();
  if (wide > PL_THREADS_WIDE_MAX) wide = PL_THREADS_WIDE_MAX;
  return wide > base ? wide : base;
}

/* memcpy with non-temporal (streaming) stores, for filling a pinned chunk
 * that only the DMA engine will read: ordinary stores first read every
 * destination line into the cache (read-for-ownership) and evict the
 * source, so the copy moves three bytes of memory traffic per byte; streaming
 * stores move two.  The caller must sfence before the data is handed on. */
static void pl_copy_nt(char *dst, const char *src, size_t n) {
#if defined(__x86_64__)
  size_t head = (16 - ((uintptr_t)dst & 15)) & 15;
  if (head > n) head = n;
  memcpy(dst, src, head);
  dst += head, src += head, n -= head;
  for (; n >= 64; n -= 64, dst += 64, src += 64) {
    __m128i a = _mm_loadu_si128((const __m128i *)src),
            b = _mm_loadu_si128((const __m128i *)(src + 16));
    __m128i c = _mm_loadu_si128((const __m128i *)(src + 32)),
            d = _mm_loadu_si128((const __m128i *)(src + 48));
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

/* Streaming stores are weakly ordered: the fence makes them globally
 * visible before the copy counts as done (a DMA, or the program reading
 * its download, may come right after). */
static void pl_copy_nt_fenced(char *dst, const char *src, size_t n) {
  pl_copy_nt(dst, src, n);
#if defined(__x86_64__)
  _mm_sfence();
#endif
  atomic_fetch_add_explicit(&pl_wk_nt_bytes, n, memory_order_relaxed);
}

uint64_t pl_workers_nt_bytes(void) { return atomic_load(&pl_wk_nt_bytes); }

unsigned pl_workers_awake(void) {
  unsigned all = atomic_load_explicit(&pl_wk_helpers, memory_order_relaxed),
           asleep = atomic_load_explicit(&pl_wk_sleepers, memory_order_relaxed);
  return all > asleep ? all - asleep : 0;
}

/* Claim the next piece of j below `limit`; false when none is claimable
 * now.  Any thread, no lock. */
static bool pl_claim(pl_job *j, size_t limit, size_t *out) {
  if (atomic_load_explicit(&j->closed, memory_order_relaxed)) return false;
  size_t pub = atomic_load_explicit(&j->published, memory_order_acquire);
  if (limit > pub) limit = pub;
  size_t cur = atomic_load_explicit(&j->next, memory_order_relaxed);
  while (cur < limit)
    if (atomic_compare_exchange_weak_explicit(&j->next, &cur, cur + 1, memory_order_relaxed,
                                              memory_order_relaxed)) {
      *out = cur;
      return true;
    }
  return false;
}

/* Copy claimed piece i of j and count it done.  Its segment cannot be
 * reused before this returns (the owner waits for the count), so the slot
 * found here is stable; other slots may be rewritten meanwhile, which is
 * why a slot's range is one atomic word. */
static void pl_piece_copy(pl_job *j, size_t i) {
  pl_seg *s = NULL;
  uint64_t first = 0;
  for (unsigned k = 0; k < PL_JOB_SLOTS; k++) {
    uint64_t r = atomic_load_explicit(&j->seg[k].range, memory_order_acquire);
    uint64_t f = r >> PL_PIECE_SHIFT, n = r & ((1u << PL_PIECE_SHIFT) - 1);
    if (i >= f && i < f + n) {
      s = &j->seg[k];
      first = f;
      break;
    }
  }
  if (s == NULL) return; /* unreachable: a published piece has a live segment */
  size_t off = (size_t)(i - first) * PL_PIECE;
  size_t len = s->len - off < PL_PIECE ? s->len - off : PL_PIECE;
  if (s->nt) {
    pl_copy_nt_fenced(s->dst + off, s->src + off, len);
  } else {
    memcpy(s->dst + off, s->src + off, len);
  }
  atomic_fetch_sub_explicit(&s->left, 1, memory_order_release);
}

/* The first queued job with a piece claimable now and room for one more
 * copy thread.  Caller holds pl_wk_lock. */
static pl_job *pl_find_locked(void) {
  for (pl_job *j = pl_wk_head; j; j = j->link)
    if (!atomic_load(&j->closed) && atomic_load(&j->next) < atomic_load(&j->published) &&
        (j->helpers == 0 || j->refs < j->helpers))
      return j;
  return NULL;
}

/* After running dry, poll briefly for more work before sleeping: waking
 * from the condition variable costs tens of microseconds, a chunk's
 * memcpy about a hundred. */
static void pl_worker_spin(void) {
  unsigned gen = atomic_load_explicit(&pl_wk_gen, memory_order_relaxed);
  uint64_t until = pl_now_ns() + PL_SPIN_NS;
  unsigned k = 0;
  while (atomic_load_explicit(&pl_wk_gen, memory_order_relaxed) == gen) {
    if ((++k & 63) == 0 && pl_now_ns() >= until) break;
    pl_cpu_relax();
  }
}

/* A copy thread: copies pieces of the first job that has some, polls a
 * while when it runs dry, and sleeps when nothing comes.  Never exits
 * (detached: the process may exit with it asleep or mid-piece). */
static void *pl_worker_main(void *arg) {
  (void)arg;
  pl_shim_own_thread(); /* a copy thread */
  pthread_mutex_lock(&pl_wk_lock);
  for (;;) {
    pl_job *j = pl_find_locked();
    if (j == NULL) {
      /* Announce the sleep before the last look: a publisher stores
       * `published` and then reads pl_wk_sleepers (both sequentially
       * consistent), so either it sees us and wakes us, or we see it. */
      atomic_fetch_add(&pl_wk_sleepers, 1);
      j = pl_find_locked();
      if (j == NULL) pthread_cond_wait(&pl_wk_wake, &pl_wk_lock);
      atomic_fetch_sub(&pl_wk_sleepers, 1);
      continue;
    }
    if (++j->refs > j->peak) j->peak = j->refs;
    bool spin = !j->lone;
    pthread_mutex_unlock(&pl_wk_lock);
    size_t i;
    while (pl_claim(j, SIZE_MAX, &i)) pl_piece_copy(j, i);
    pthread_mutex_lock(&pl_wk_lock);
    if (--j->refs == 0) pthread_cond_broadcast(&pl_wk_done);
    /* j may be gone from here on: its owner may close it. */
    pthread_mutex_unlock(&pl_wk_lock);
    if (spin) pl_worker_spin();
    pthread_mutex_lock(&pl_wk_lock);
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
    pl_log(PL_LOG_WARN, PL_LK_STAGE_WORKERS,
           "started %u of %u copy threads (error %d); staging continues with fewer", started, want,
           err);
  atomic_store_explicit(&pl_wk_helpers, started, memory_order_relaxed);
  atomic_store_explicit(&pl_wk_state, 2, memory_order_release);
  return started;
}

/* Start a job for `threads` threads, the caller included; lone: see
 * pl_job.  The flag and the limit are set before the job is visible to
 * the workers, who read them under their lock. */
static void pl_job_open_as(pl_job *j, unsigned threads, bool lone) {
  memset(j, 0, sizeof *j);
  j->lone = lone;
  for (unsigned k = 0; k < PL_JOB_SLOTS; k++) {
    atomic_init(&j->seg[k].range, 0);
    atomic_init(&j->seg[k].left, 0);
  }
  atomic_init(&j->next, 0);
  atomic_init(&j->published, 0);
  atomic_init(&j->closed, false);
  if (threads <= 1) return; /* the owner copies alone */
  unsigned running = pl_workers_start();
  if (running == 0) return;
  if (threads - 1 < running) j->helpers = threads - 1;
  pthread_mutex_lock(&pl_wk_lock);
  pl_job **pp = &pl_wk_head;
  while (*pp) pp = &(*pp)->link;
  *pp = j;
  j->queued = true;
  pthread_mutex_unlock(&pl_wk_lock);
}

void pl_job_open(pl_job *j, unsigned threads) { pl_job_open_as(j, threads, false); }

void pl_job_limit(pl_job *j, unsigned helpers) {
  if (!j->queued) {
    j->helpers = helpers;
    return;
  }
  pthread_mutex_lock(&pl_wk_lock);
  j->helpers = helpers;
  pthread_mutex_unlock(&pl_wk_lock);
}

unsigned pl_job_add(pl_job *j, void *dst, const void *src, size_t len, bool nt) {
  unsigned k = j->nseg++;
  pl_seg *s = &j->seg[k % PL_JOB_SLOTS];
  size_t first = atomic_load_explicit(&j->published, memory_order_relaxed);
  size_t n = len ? (len + PL_PIECE - 1) / PL_PIECE : 1; /* an empty segment is one empty piece */
  s->dst = dst;
  s->src = src;
  s->len = len;
  s->nt = nt;
  atomic_store_explicit(&s->left, n, memory_order_relaxed);
  atomic_store_explicit(&s->range, (uint64_t)first << PL_PIECE_SHIFT | n, memory_order_release);
  atomic_store(&j->published, first + n); /* seq_cst: see pl_worker_main */
  if (j->queued) {
    atomic_fetch_add_explicit(&pl_wk_gen, 1, memory_order_relaxed);
    if (atomic_load(&pl_wk_sleepers) > 0) {
      pthread_mutex_lock(&pl_wk_lock);
      /* A limited job wakes only the threads it may still take: the others
       * would wake, find no room and sleep again, at every segment. */
      if (j->helpers == 0)
        pthread_cond_broadcast(&pl_wk_wake);
      else
        for (unsigned i = j->refs; i < j->helpers; i++) pthread_cond_signal(&pl_wk_wake);
      pthread_mutex_unlock(&pl_wk_lock);
    }
  }
  return k;
}

void pl_job_wait(pl_job *j, unsigned k) {
  pl_seg *s = &j->seg[k % PL_JOB_SLOTS];
  uint64_t r = atomic_load_explicit(&s->range, memory_order_relaxed);
  size_t end = (size_t)((r >> PL_PIECE_SHIFT) + (r & ((1u << PL_PIECE_SHIFT) - 1)));
  while (atomic_load_explicit(&s->left, memory_order_acquire) != 0) {
    /* Only this segment's pieces: a later one would delay its DMA. */
    size_t i;
    if (pl_claim(j, end, &i))
      pl_piece_copy(j, i);
    else
      pl_cpu_relax();
  }
}

void pl_job_close(pl_job *j) {
  atomic_store(&j->closed, true);
  if (!j->queued) return;
  pthread_mutex_lock(&pl_wk_lock);
  pl_job **pp = &pl_wk_head;
  while (*pp != j) pp = &(*pp)->link;
  *pp = j->link;
  j->queued = false;
  while (j->refs > 0) pthread_cond_wait(&pl_wk_done, &pl_wk_lock);
  pthread_mutex_unlock(&pl_wk_lock);
}

void pl_workers_memcpy(void *dst, const void *src, size_t n, bool lone, bool nt, unsigned threads) {
  if (n < 2 * PL_PIECE) {
    if (nt)
      pl_copy_nt_fenced(dst, src, n);
    else
      memcpy(dst, src, n);
    return;
  }
  pl_job j;
  pl_job_open_as(&j, threads, lone && !PL_LONE_SPIN);
  pl_job_wait(&j, pl_job_add(&j, dst, src, n, nt));
  pl_job_close(&j);
}
