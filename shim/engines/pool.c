/* pool.c - the pinned chunks and the bound on them.
 *
 * One pool per CUDA context, created empty and grown on demand by as many
 * chunks as the copy at hand needs, in one slab: nobody pays for chunks a
 * program never needs.  A slab is an anonymous mapping of the shim's own,
 * on huge pages where the kernel gives them, page-locked with one
 * cuMemHostRegister.  cuMemHostAlloc took ~22 ms for 64 MiB on the H100
 * host (driver 580), paid by the first staged copies of every program (a
 * third of the demo's staged phase); the mapping and its registration
 * take a fraction of that (docs/benchmarks.md).  The bytes
 * of all pools together never exceed PAGELOCK_POOL_SIZE: they are reserved
 * with one atomic compare-and-swap before the driver is asked, so no
 * interleaving of threads can overshoot.
 *
 * A chunk is free again when the event recorded after its last use on the
 * caller's stream has completed; the free list is oldest first, so the
 * first event asked is the likeliest to be done.  Nothing here waits inside
 * the driver: events are polled (cuEventQuery) and the poll is bounded by
 * the caller, because a program may hold the stream back until after our
 * call returns.
 *
 * No lock is held across a driver call: the free list is detached under the
 * lock, its events queried without it, and the rest put back.  That also
 * keeps the lock safe to take from a CUDA host function (the asynchronous
 * device-to-host copy-out releases its chunk there).
 *
 * Several contexts share the bound.  When it is reached, a pool holding
 * less than its share (bound / pools) takes over an idle chunk of one
 * holding more: the pinned memory is portable, only the event is
 * re-created in the new context, so no pinned memory is ever freed on the
 * copy path (freeing it can synchronise the whole device).
 *
 * A context can end while the program goes on (cudaDeviceReset,
 * cuCtxDestroy, the last primary release): the driver frees its events and
 * the registrations made in it, and using such an event afterwards
 * crashed a program inside the driver (H200 host,
 * docs/bench/2026-11-27-a-context-that-ends.md).  Its pools then die
 * (pl_pool_ctx_gone): never handed out again, their chunks retired
 * without a driver call. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "pool.h"
#include "pinreg.h"

/* Most chunks one slab holds (one event each is made up front). */
#define PL_SLAB_MAX 64u

struct pl_pool {
  CUcontext ctx;
  unsigned long long ctx_id; /* cuCtxGetId: a handle value can be reused */
  pthread_mutex_t lock;
  pl_chunk *head, *tail;      /* free chunks, oldest first; under lock */
  pl_chunk *flight;           /* chunks a host function will free; under lock */
  atomic_uint_fast64_t bytes; /* owned: free, in use or quarantined */
  atomic_bool disabled;
  atomic_bool prewarm; /* its first chunks were asked of the shim's thread */
  atomic_uint growing; /* slabs being made for it right now */
  atomic_bool dead;    /* its context ended: see pl_pool_ctx_gone */
  pl_pool *next;       /* registry link, immutable once published */
};

static _Atomic(pl_pool *) pl_pools;
static pthread_mutex_t pl_pools_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_uint pl_npools;
static atomic_uint_fast64_t pl_bytes; /* reserved by all pools */
static atomic_uint_fast64_t pl_high;
/* Every live chunk, under pl_pools_lock.  A chunk in flight is otherwise
 * known only to the driver's queue (and a host function's argument): this
 * keeps it owned, and visible to leak checkers, when the process exits
 * with copies in flight. */
static pl_chunk *pl_all_chunks;

/* The last pool this thread used: almost every copy of a thread goes to
 * the same context. */
static PL_TLS pl_pool *pl_tls_pool;
static PL_TLS CUcontext pl_tls_ctx;
static PL_TLS unsigned long long pl_tls_id;

pl_pool *pl_pool_get(CUcontext ctx) {
  const pl_drv *d = pl_drv_engines();
  unsigned long long id = 0;
  if (d->CtxGetId != NULL && d->CtxGetId(ctx, &id) != CUDA_SUCCESS) id = 0;
  /* A reset primary context keeps its handle, and may keep its id: a dead
   * pool is never its pool again. */
  if (PL_LIKELY(pl_tls_pool != NULL && pl_tls_ctx == ctx && pl_tls_id == id &&
                !atomic_load_explicit(&pl_tls_pool->dead, memory_order_relaxed)))
    return pl_tls_pool;
  pl_pool *p;
  for (p = atomic_load_explicit(&pl_pools, memory_order_acquire); p; p = p->next)
    if (p->ctx == ctx && p->ctx_id == id && !atomic_load(&p->dead)) break;
  if (p == NULL) {
    pthread_mutex_lock(&pl_pools_lock);
    for (p = atomic_load(&pl_pools); p; p = p->next)
      if (p->ctx == ctx && p->ctx_id == id && !atomic_load(&p->dead)) break;
    if (p == NULL && (p = calloc(1, sizeof *p)) != NULL) {
      p->ctx = ctx;
      p->ctx_id = id;
      pthread_mutex_init(&p->lock, NULL);
      p->next = atomic_load(&pl_pools);
      atomic_store_explicit(&pl_pools, p, memory_order_release);
      atomic_fetch_add(&pl_npools, 1);
    }
    pthread_mutex_unlock(&pl_pools_lock);
    if (p == NULL) return NULL;
  }
  pl_tls_pool = p;
  pl_tls_ctx = ctx;
  pl_tls_id = id;
  return p;
}

bool pl_pool_usable(const pl_pool *p) {
  return !atomic_load_explicit(&p->disabled, memory_order_relaxed) &&
         !atomic_load_explicit(&p->dead, memory_order_relaxed);
}

/* Chunk size for a pool bounded by `bound`: the configured size, but at
 * most half the bound, since with a single chunk nothing overlaps. */
static size_t pl_chunk_bytes(uint64_t bound) {
  uint64_t c = (uint64_t)pl_opt_long(PL_OPT_CHUNK_SIZE);
  if (c > bound / 2) c = bound / 2;
  return (size_t)(c & ~(uint64_t)4095);
}

/* Reserve `size` bytes of the global bound; false when they do not fit. */
static bool pl_reserve(uint64_t size, uint64_t bound) {
  uint64_t cur = atomic_load(&pl_bytes), next;
  do {
    if (size > bound || cur > bound - size) return false;
    next = cur + size;
  } while (!atomic_compare_exchange_weak(&pl_bytes, &cur, next));
  uint64_t h = atomic_load(&pl_high);
  while (next > h && !atomic_compare_exchange_weak(&pl_high, &h, next)) {}
  return true;
}

/* Take the oldest free chunk of p whose last use is complete, or NULL.  On
 * a failed event query *err is set (a sticky context error: the chunk
 * stays where it is).  *busy is set when a chunk's last use was found still
 * running.  No lock held across cuEventQuery. */
static pl_chunk *pl_take_free(pl_pool *p, CUresult *err, bool *busy) {
  const pl_drv *d = pl_drv_engines();
  *err = CUDA_SUCCESS;
  pthread_mutex_lock(&p->lock);
  pl_chunk *list = p->head;
  p->head = p->tail = NULL;
  pthread_mutex_unlock(&p->lock);
  if (list == NULL) return NULL;

  pl_chunk *got = NULL, **link = &list;
  for (pl_chunk *c = list; c; link = &c->next, c = c->next) {
    if (c->pending) {
      CUresult q = d->EventQuery(c->ev);
      if (q == CUDA_ERROR_NOT_READY) {
        *busy = true;
        continue;
      }
      if (q != CUDA_SUCCESS) {
        *err = q;
        break;
      }
      c->pending = false;
    }
    got = c;
    *link = c->next;
    break;
  }
  if (list != NULL) {
    /* What we did not take is older than anything released meanwhile:
     * back to the front. */
    pl_chunk *last = list;
    while (last->next) last = last->next;
    pthread_mutex_lock(&p->lock);
    last->next = p->head;
    if (p->head == NULL) p->tail = last;
    p->head = list;
    pthread_mutex_unlock(&p->lock);
  }
  if (got) got->next = NULL;
  return got;
}

/* Turn a pool off after its context failed to give us pinned memory or an
 * event: retrying on every copy would only repeat the failure. */
static void pl_pool_disable(pl_pool *p, const char *what, CUresult r) {
  atomic_store(&p->disabled, true);
  pl_log(PL_LOG_WARN, PL_LK_STAGE_POOL,
         "%s failed (error %d): staging is off for this context: the copies it would stage, "
         "those of buffers that could not be page-locked included, pass through",
         what, (int)r);
}

/* Move an idle chunk of a pool above its share into p, which is below its
 * share, re-creating the event in p's context (current).  NULL when there
 * is nothing to take. */
static pl_chunk *pl_pool_steal(pl_pool *p, uint64_t bound) {
  const pl_drv *d = pl_drv_engines();
  unsigned n = atomic_load(&pl_npools);
  if (n < 2) return NULL;
  uint64_t share = bound / n;
  if (atomic_load(&p->bytes) >= share) return NULL;
  CUevent ev = NULL;
  for (pl_pool *q = atomic_load_explicit(&pl_pools, memory_order_acquire); q; q = q->next) {
    if (q == p || atomic_load(&q->dead) || atomic_load(&q->bytes) <= share) continue;
    if (ev == NULL && d->EventCreate(&ev, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) return NULL;
    /* q's events are q's context's: ask and destroy them there. */
    if (d->CtxPushCurrent(q->ctx) != CUDA_SUCCESS) continue;
    CUresult err;
    bool busy;
    pl_chunk *c = pl_take_free(q, &err, &busy);
    if (c) d->EventDestroy(c->ev);
    CUcontext popped;
    d->CtxPopCurrent(&popped);
    if (c == NULL) continue;
    atomic_fetch_sub(&q->bytes, c->size);
    atomic_fetch_add(&p->bytes, c->size);
    c->pool = p;
    c->ev = ev;
    c->pending = false;
    return c;
  }
  if (ev) d->EventDestroy(ev);
  return NULL;
}

/* Slabs bypass the shim's own mmap hooks (syscalls): they are not the
 * program's memory and must never be tracked or registered as such. */
#define PL_HUGE (2u << 20)

static void pl_sys_unmap(void *p, size_t n) {
  if (n) syscall(SYS_munmap, p, n);
}

/* Fault the slab in before registering it.  Why: cuMemHostRegister holds
 * a lock of the driver's for as long as it runs, and every driver call of
 * the program's threads waits behind it; registering a fresh 64 MiB slab
 * faults it in inside that call, and PyTorch's first upload then waited
 * 19-22 ms behind the prewarm (H100 host, docs/bench/2026-11-27-pool-at-cuinit.md).  Faulted
 * here, outside the driver, the program runs on meanwhile.
 * MADV_POPULATE_WRITE (Linux 5.14) faults the range in one call; older
 * kernels refuse it (EINVAL), and a write per 4 KiB page does the same. */
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
static void pl_slab_populate(uintptr_t base, size_t bytes) {
  int saved = errno; /* a program's copy may grow the pool on its thread */
  if (syscall(SYS_madvise, (void *)base, bytes, MADV_POPULATE_WRITE) != 0)
    for (size_t off = 0; off < bytes; off += 4096) ((volatile char *)base)[off] = 0;
  errno = saved;
}

/* Map `bytes` (a multiple of 4 KiB) at a 2 MiB boundary, ask for huge pages
 * (a hint: with THP off it changes nothing) and fault it in, for
 * pl_slab_map to page-lock.  Huge pages make both the zeroing faults and
 * the registration's page walk 512 times shorter.  0 on failure, with
 * nothing left mapped. */
static uintptr_t pl_slab_memory(size_t bytes) {
  size_t span = bytes + PL_HUGE;
  void *m = (void *)syscall(SYS_mmap, NULL, span, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return 0;
  uintptr_t base = ((uintptr_t)m + PL_HUGE - 1) & ~(uintptr_t)(PL_HUGE - 1);
  pl_sys_unmap(m, base - (uintptr_t)m);
  pl_sys_unmap((void *)(base + bytes), (uintptr_t)m + span - (base + bytes));
  syscall(SYS_madvise, (void *)base, bytes, MADV_HUGEPAGE);
  pl_slab_populate(base, bytes);
  return base;
}

/* The prewarm slab's memory, mapped and faulted in ahead (pl_pool_premap),
 * until a slab of exactly its size takes it. */
static _Atomic(uintptr_t) pl_spare;
static size_t pl_spare_bytes; /* written before pl_spare is published */

static CUresult pl_slab_map(const pl_drv *d, pl_slab *slab, size_t bytes, uint64_t *register_ns) {
  uintptr_t base =
      atomic_load_explicit(&pl_spare, memory_order_acquire) != 0 && pl_spare_bytes == bytes
          ? atomic_exchange(&pl_spare, 0)
          : 0;
  if (base == 0) base = pl_slab_memory(bytes);
  if (base == 0) return CUDA_ERROR_OUT_OF_MEMORY;
  uint64_t t0 = pl_now_ns();
  CUresult r = d->MemHostRegister((void *)base, bytes, CU_MEMHOSTREGISTER_PORTABLE);
  *register_ns = pl_now_ns() - t0;
  if (r != CUDA_SUCCESS) {
    pl_sys_unmap((void *)base, bytes);
    return r;
  }
  slab->base = (void *)base;
  slab->bytes = bytes;
  return CUDA_SUCCESS;
}

/* Unregister first: the pages must stay mapped while the driver holds them. */
static void pl_slab_unmap(const pl_drv *d, pl_slab *slab) {
  d->MemHostUnregister(slab->base);
  pl_sys_unmap(slab->base, slab->bytes);
}

/* Add up to n chunks to p within the bound, as one slab.  1: *out is a
 * new chunk the caller owns (the others are on p's free list); 0: the
 * bound is reached; -1: the driver refused (*err), p is now disabled.
 * One allocation rather than n: DMAs can then span chunks (stage.c, the
 * asynchronous download), and it costs no more than n small ones. */
static int pl_pool_grow(pl_pool *p, unsigned n, pl_chunk **out, CUresult *err) {
  const pl_drv *d = pl_drv_engines();
  uint64_t bound = (uint64_t)pl_opt_long(PL_OPT_POOL_SIZE);
  size_t size = pl_chunk_bytes(bound);
  if (size == 0) return 0;
  unsigned want = n == 0 ? 1 : n > PL_SLAB_MAX ? PL_SLAB_MAX : n, k = 0;
  /* Memory mapped ahead at cuInit and not yet taken is resident already:
   * a copy that finds the pool empty before the prewarm ran takes all of
   * it, one registration of ~2 ms, rather than mapping, faulting in and
   * registering slabs of its own while the program waits (a first 256 MiB
   * upload under auto took 21.7 ms that way on an H200 host, 11.0 when
   * the prewarm came first, docs/benchmarks.md). */
  if (atomic_load_explicit(&pl_spare, memory_order_acquire) != 0 && pl_spare_bytes / size > want &&
      pl_spare_bytes % size == 0 && pl_spare_bytes / size <= PL_SLAB_MAX)
    want = (unsigned)(pl_spare_bytes / size);
  while (k < want && pl_reserve(size, bound)) k++;
  if (k == 0) return (*out = pl_pool_steal(p, bound)) != NULL;
  pl_slab *slab = calloc(1, sizeof *slab);
  pl_chunk *c = calloc(k, sizeof *c);
  CUevent ev[PL_SLAB_MAX];
  if (slab == NULL || c == NULL) {
    free(slab);
    free(c);
    atomic_fetch_sub(&pl_bytes, (uint64_t)k * size);
    return 0;
  }
  /* A thread capturing in global mode elsewhere makes allocation calls
   * illegal (and would invalidate that capture); relaxed mode for our own
   * call is how CUDA libraries allocate safely meanwhile. */
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  bool swapped = d->ThreadExchangeStreamCaptureMode != NULL &&
                 d->ThreadExchangeStreamCaptureMode(&mode) == CUDA_SUCCESS;
  uint64_t t0 = pl_now_ns();
  uint64_t reg_ns = 0;
  atomic_fetch_add(&p->growing, 1);
  CUresult r = pl_slab_map(d, slab, (size_t)k * size, &reg_ns);
  pl_log(PL_LOG_DEBUG, PL_LK_EVENT,
         "staging slab of %zu MiB mapped, faulted in and registered in %.2f ms "
         "(registering %.2f; error %d) at %.6f s",
         ((size_t)k * size) >> 20, (double)(pl_now_ns() - t0) / 1e6, (double)reg_ns / 1e6, (int)r,
         (double)t0 / 1e9);
  const char *what = "cuMemHostRegister";
  unsigned nev = 0;
  if (r == CUDA_SUCCESS) {
    what = "cuEventCreate";
    while (nev < k && (r = d->EventCreate(&ev[nev], CU_EVENT_DISABLE_TIMING)) == CUDA_SUCCESS)
      nev++;
    if (r != CUDA_SUCCESS) {
      while (nev > 0) d->EventDestroy(ev[--nev]);
      pl_slab_unmap(d, slab);
    }
  }
  if (swapped) d->ThreadExchangeStreamCaptureMode(&mode);
  if (r != CUDA_SUCCESS) {
    atomic_fetch_sub(&p->growing, 1);
    free(slab);
    free(c);
    atomic_fetch_sub(&pl_bytes, (uint64_t)k * size);
    /* A pool that has chunks keeps them: its copies wait for one, as at
     * the bound, rather than all passing through from now on. */
    if (atomic_load(&p->bytes) > 0) {
      pl_log(PL_LOG_WARN, PL_LK_STAGE_GROW,
             "%s failed (error %d): the staging pool stays at %" PRIu64 " MiB", what, (int)r,
             (uint64_t)atomic_load(&p->bytes) >> 20);
      return 0;
    }
    pl_pool_disable(p, what, r);
    *err = r;
    return -1;
  }
  slab->live = k;
  slab->owner = p;
  atomic_fetch_add(&p->bytes, (uint64_t)k * size);
  atomic_fetch_sub(&p->growing, 1);
  pthread_mutex_lock(&pl_pools_lock);
  for (unsigned i = 0; i < k; i++) {
    c[i].host = (char *)slab->base + (size_t)i * size;
    c[i].size = size;
    c[i].slab = slab;
    c[i].ev = ev[i];
    c[i].pool = p;
    c[i].all_next = pl_all_chunks;
    pl_all_chunks = &c[i];
  }
  pthread_mutex_unlock(&pl_pools_lock);
  for (unsigned i = 1; i < k; i++) pl_pool_release(&c[i], false);
  *out = &c[0];
  return 1;
}

/* ---- prewarm --------------------------------------------------------------- */

/* Why: a slab costs ~6.5 ms per 32 MiB to map, fault in and register on
 * the H100 host (the demo's first staged upload took 7.6 ms against 0.9
 * for the next ones), and a pool that grows on demand puts that into the
 * program's first staged copies.  A context's first device allocation
 * announces its copies: the shim's thread then builds the pool, up to its
 * bound or 64 MiB, while the program goes on setting up.  Another
 * context's pool takes chunks over from it when the bound is reached. */
#define PL_PREWARM_MAX ((uint64_t)64 << 20)

/* The prewarm's chunks, as one slab holds them, or 0 when the pool is off
 * (bound below a chunk).  The memory mapped ahead must be exactly that
 * slab's, or no slab would ever take it. */
static unsigned pl_prewarm_chunks(size_t *size) {
  uint64_t bound = (uint64_t)pl_opt_long(PL_OPT_POOL_SIZE);
  *size = pl_chunk_bytes(bound);
  if (*size == 0) return 0;
  uint64_t n = (bound < PL_PREWARM_MAX ? bound : PL_PREWARM_MAX) / *size;
  return n == 0 ? 1 : n > PL_SLAB_MAX ? PL_SLAB_MAX : (unsigned)n;
}

static void pl_pool_prewarm_run(void *arg) {
  pl_pool *p = arg;
  const pl_drv *d = pl_drv_engines();
  size_t size;
  unsigned n = pl_prewarm_chunks(&size);
  /* A copy may have grown the pool meanwhile, or be growing it: then it
   * needs nothing. */
  if (d == NULL || n == 0 || atomic_load(&p->dead) || atomic_load(&p->bytes) > 0 ||
      atomic_load(&p->growing) > 0)
    return;
  if (d->CtxPushCurrent(p->ctx) != CUDA_SUCCESS) return; /* destroyed since */
  /* A handle can be reused by a context created since: then the chunks
   * would carry events of another context than their pool's. */
  unsigned long long id = 0;
  if (d->CtxGetId != NULL && d->CtxGetId(p->ctx, &id) != CUDA_SUCCESS) id = 0; /* as pl_pool_get */
  if (id != p->ctx_id) {
    CUcontext popped;
    d->CtxPopCurrent(&popped);
    return;
  }
  pl_chunk *c = NULL;
  CUresult err;
  if (pl_pool_grow(p, n, &c, &err) > 0) pl_pool_release(c, false);
  CUcontext popped;
  d->CtxPopCurrent(&popped);
}

/* Why: faulting in the prewarm slab's 64 MiB took 11-26 ms on the H100
 * hosts (fresh guest memory), against 1.8-3.1 ms to register it, and the
 * program's first staged copy waits for both when they start at its first
 * device allocation (docs/bench/2026-11-27-pool-at-cuinit.md).  At cuInit the program is only
 * beginning to set CUDA up (a context takes 100 ms and more), so the
 * shim's thread maps and faults the memory in then; the prewarm only
 * registers it.  Nothing here calls the driver. */
static void pl_pool_premap_run(void *arg) {
  (void)arg;
  size_t size;
  unsigned n = pl_prewarm_chunks(&size);
  if (n == 0 || atomic_load(&pl_spare) != 0) return;
  uintptr_t base = pl_slab_memory((size_t)n * size);
  if (base == 0) return;
  pl_spare_bytes = (size_t)n * size;
  uintptr_t none = 0;
  if (!atomic_compare_exchange_strong(&pl_spare, &none, base))
    pl_sys_unmap((void *)base, (size_t)n * size);
}

static atomic_bool pl_premap_posted;

void pl_pool_premap(void) {
  if (!atomic_load_explicit(&pl_premap_posted, memory_order_relaxed) &&
      !atomic_exchange(&pl_premap_posted, true))
    pl_pinreg_post(pl_pool_premap_run, NULL);
}

size_t pl_pool_spare_for_test(void) { return atomic_load(&pl_spare) ? pl_spare_bytes : 0; }

void pl_pool_prewarm(CUcontext ctx) {
  pl_pool *p = pl_pool_get(ctx);
  if (p == NULL || !pl_pool_usable(p) || atomic_load_explicit(&p->prewarm, memory_order_relaxed))
    return;
  if (atomic_exchange(&p->prewarm, true) || atomic_load(&p->bytes) > 0) return;
  pl_pinreg_post(pl_pool_prewarm_run, p);
}

/* How long a wait for a chunk polls before it sleeps.  A chunk frees
 * within one DMA (~76 us for 4 MiB at 55 GB/s), and a sleep costs at least
 * the timer slack (50 us): sleeping early stalls the pipeline once a copy
 * outgrows the pool.  The caller would be spinning in the driver's own
 * pageable copy otherwise, so polling costs no CPU the program had. */
#ifndef PL_WAIT_POLL_NS
#define PL_WAIT_POLL_NS 1000000ull
#endif

/* Pause between two polls of a wait that started waited_ns ago and may go
 * on for left_ns more. */
static void pl_backoff(uint64_t waited_ns, uint64_t left_ns) {
  if (waited_ns < PL_WAIT_POLL_NS) {
    for (int i = 0; i < 64; i++) pl_cpu_relax(); /* ~1 us: an event query is ~150 ns */
    return;
  }
  uint64_t ns = left_ns < 50000 ? left_ns : 50000;
  struct timespec ts = {0, (long)ns};
  nanosleep(&ts, NULL);
}

pl_acq pl_pool_acquire(pl_pool *p, unsigned grow, uint64_t wait_ns, pl_chunk **out,
                       uint64_t *waited_ns, bool *busy, CUresult *err) {
  uint64_t t0 = 0;
  *waited_ns = 0;
  *busy = false;
  for (;;) {
    pl_chunk *c = pl_take_free(p, err, busy);
    if (c) {
      *out = c;
      break;
    }
    if (*err != CUDA_SUCCESS) return PL_ACQ_ERROR;
    int g = pl_pool_grow(p, grow, out, err);
    if (g > 0) break;
    if (g < 0) return PL_ACQ_ERROR;
    *busy = true; /* nothing free, nothing to grow: all of it is in use */
    uint64_t now = pl_now_ns();
    if (t0 == 0) t0 = now;
    if (now - t0 >= wait_ns) {
      *waited_ns = now - t0;
      return PL_ACQ_TIMEOUT;
    }
    pl_backoff(now - t0, wait_ns - (now - t0));
  }
  if (t0 != 0) *waited_ns = pl_now_ns() - t0;
  return PL_ACQ_OK;
}

/* Chunk c of a dead pool, taken over from `owner`, whose context lives:
 * its memory is still page-locked there, so it goes back to that pool
 * with an event of that context (the old one died with c's).  Where no
 * event can be made, c stays counted, unused, until exit. */
static void pl_chunk_home(pl_chunk *c, pl_pool *owner) {
  const pl_drv *d = pl_drv_engines();
  CUevent ev = NULL;
  if (d == NULL || d->CtxPushCurrent(owner->ctx) != CUDA_SUCCESS) return;
  CUresult r = d->EventCreate(&ev, CU_EVENT_DISABLE_TIMING);
  CUcontext popped;
  d->CtxPopCurrent(&popped);
  if (r != CUDA_SUCCESS) return;
  atomic_fetch_sub(&c->pool->bytes, c->size);
  atomic_fetch_add(&owner->bytes, c->size);
  c->pool = owner;
  c->ev = ev;
  pl_pool_release(c, false);
}

/* Forget chunk c of a dead pool; its event died with the context.  Memory
 * of a slab registered in that context is page-locked no more: it leaves
 * the bound, and the slab is unmapped with its last chunk.  `driver`:
 * false inside a CUDA host function, which may call no CUDA function (a
 * chunk taken over then stays counted, unused). */
static void pl_chunk_retire(pl_chunk *c, bool driver) {
  pl_pool *p = c->pool;
  pl_slab *slab = c->slab;
  if (!atomic_load(&slab->owner->dead)) {
    if (driver) pl_chunk_home(c, slab->owner);
    return;
  }
  atomic_fetch_sub(&p->bytes, c->size);
  atomic_fetch_sub(&pl_bytes, c->size);
  pthread_mutex_lock(&pl_pools_lock);
  pl_chunk **pp = &pl_all_chunks;
  while (*pp != c) pp = &(*pp)->all_next;
  *pp = c->all_next;
  bool last = --slab->live == 0;
  pthread_mutex_unlock(&pl_pools_lock);
  if (!last) return;
  /* A slab's chunk structs are one array: they go with the last chunk.
   * No cuMemHostUnregister: the registration is gone.  Memory of the
   * prewarm's size becomes the spare again, faulted in already, for the
   * next context's pool: mapped afresh, the first copies after a
   * cudaDeviceReset waited 20 ms for it and fell back (fakecuda). */
  pl_chunk *first = c - ((char *)c->host - (char *)slab->base) / c->size;
  size_t size;
  uintptr_t none = 0;
  bool spare =
      slab->bytes == (size_t)pl_prewarm_chunks(&size) * size && atomic_load(&pl_spare) == 0;
  if (spare) pl_spare_bytes = slab->bytes; /* the one size it ever holds */
  if (!spare || !atomic_compare_exchange_strong(&pl_spare, &none, (uintptr_t)slab->base))
    pl_sys_unmap(slab->base, slab->bytes);
  free(first);
  free(slab);
}

void pl_pool_ctx_gone(CUcontext ctx) {
  for (pl_pool *p = atomic_load_explicit(&pl_pools, memory_order_acquire); p; p = p->next) {
    if (p->ctx != ctx || atomic_exchange(&p->dead, true)) continue;
    atomic_fetch_sub(&pl_npools, 1);
    pthread_mutex_lock(&p->lock);
    pl_chunk *list = p->head;
    p->head = p->tail = NULL;
    pthread_mutex_unlock(&p->lock);
    while (list) {
      pl_chunk *c = list;
      list = c->next;
      pl_chunk_retire(c, true);
    }
  }
}

void pl_pool_release(pl_chunk *c, bool pending) {
  pl_pool *p = c->pool;
  if (PL_UNLIKELY(atomic_load_explicit(&p->dead, memory_order_relaxed))) {
    pl_chunk_retire(c, true);
    return;
  }
  c->pending = pending;
  c->next = NULL;
  pthread_mutex_lock(&p->lock);
  if (p->tail)
    p->tail->next = c;
  else
    p->head = c;
  p->tail = c;
  pthread_mutex_unlock(&p->lock);
}

size_t pl_pool_chunk_size(void) { return pl_chunk_bytes((uint64_t)pl_opt_long(PL_OPT_POOL_SIZE)); }

/* Tickets are never reused, so a host function can never free a chunk
 * that was taken over and handed to a later host function. */
static atomic_uint_fast64_t pl_tickets;

uint64_t pl_pool_ticket(pl_chunk *c) {
  uint64_t t = atomic_fetch_add(&pl_tickets, 1) + 1;
  pthread_mutex_lock(&c->pool->lock);
  c->ticket = t;
  pthread_mutex_unlock(&c->pool->lock);
  return t;
}

void pl_pool_unticket(pl_chunk *c) {
  pthread_mutex_lock(&c->pool->lock);
  c->ticket = 0;
  pthread_mutex_unlock(&c->pool->lock);
}

void pl_pool_fly(pl_chunk *c, uint64_t ticket, unsigned long long stream_id) {
  pl_pool *p = c->pool;
  if (stream_id == 0) return;
  pthread_mutex_lock(&p->lock);
  /* Not if its host function has already freed it. */
  if (c->ticket == ticket) {
    c->stream_id = stream_id;
    c->flying = true;
    c->next = p->flight;
    p->flight = c;
  }
  pthread_mutex_unlock(&p->lock);
}

/* Take c off p's flight list.  Caller: p's lock held, c flying. */
static void pl_unfly(pl_pool *p, pl_chunk *c) {
  pl_chunk **pp = &p->flight;
  while (*pp != c) pp = &(*pp)->next;
  *pp = c->next;
  c->flying = false;
  c->next = NULL;
}

void pl_pool_land(pl_chunk *c, uint64_t ticket) {
  pl_pool *p = c->pool;
  pthread_mutex_lock(&p->lock);
  if (c->ticket == ticket && atomic_load(&p->dead)) {
    c->ticket = 0;
    if (c->flying) pl_unfly(p, c);
    pthread_mutex_unlock(&p->lock);
    pl_chunk_retire(c, false); /* in a host function */
    return;
  }
  if (c->ticket == ticket) {
    c->ticket = 0;
    if (c->flying) pl_unfly(p, c);
    c->pending = false;
    c->next = NULL;
    if (p->tail)
      p->tail->next = c;
    else
      p->head = c;
    p->tail = c;
  }
  pthread_mutex_unlock(&p->lock);
}

unsigned pl_pool_take_flight(pl_pool *p, unsigned long long stream_id, pl_chunk **out,
                             unsigned max) {
  unsigned n = 0;
  if (stream_id == 0 || max == 0) return 0;
  pthread_mutex_lock(&p->lock);
  for (pl_chunk *c = p->flight, *next; c && n < max; c = next) {
    next = c->next;
    if (c->stream_id != stream_id) continue;
    pl_unfly(p, c);
    c->ticket = 0;
    out[n++] = c;
  }
  pthread_mutex_unlock(&p->lock);
  return n;
}

void pl_pool_quarantine(pl_chunk *c) {
  /* Its DMA may still run: freeing or reusing it could corrupt memory.
   * The chunk struct stays allocated on purpose. */
  pl_log(PL_LOG_WARN, PL_LK_STAGE_ERROR,
         "a staging chunk could not be tracked (event record failed); it is retired");
  (void)c;
}

void pl_pool_get_stats(pl_pool_stats *s) {
  s->bytes = atomic_load(&pl_bytes);
  s->high_water = atomic_load(&pl_high);
  s->bound = (uint64_t)pl_opt_long(PL_OPT_POOL_SIZE);
  s->free_bytes = 0;
  for (pl_pool *p = atomic_load_explicit(&pl_pools, memory_order_acquire); p; p = p->next) {
    pthread_mutex_lock(&p->lock);
    for (pl_chunk *c = p->head; c; c = c->next) s->free_bytes += c->size;
    pthread_mutex_unlock(&p->lock);
  }
}

void pl_pool_reset_for_test(void) {
  const pl_drv *d = pl_drv_engines();
  uintptr_t spare = atomic_exchange(&pl_spare, 0);
  if (spare) pl_sys_unmap((void *)spare, pl_spare_bytes);
  atomic_store(&pl_premap_posted, false);
  for (pl_pool *p = atomic_load(&pl_pools); p && d; p = p->next) {
    if (atomic_load(&p->dead)) continue; /* its chunks went with its context */
    pthread_mutex_lock(&p->lock);
    pl_chunk *list = p->head;
    p->head = p->tail = NULL;
    pthread_mutex_unlock(&p->lock);
    if (list && d->CtxPushCurrent(p->ctx) == CUDA_SUCCESS) {
      while (list) {
        pl_chunk *c = list;
        list = c->next;
        if (c->pending) d->EventSynchronize(c->ev);
        d->EventDestroy(c->ev);
        atomic_fetch_sub(&p->bytes, c->size);
        atomic_fetch_sub(&pl_bytes, c->size);
        pthread_mutex_lock(&pl_pools_lock);
        pl_chunk **pp = &pl_all_chunks;
        while (*pp != c) pp = &(*pp)->all_next;
        *pp = c->all_next;
        pthread_mutex_unlock(&pl_pools_lock);
        /* A slab's chunk structs are one array: it and the memory go
         * with the last of them. */
        pl_slab *slab = c->slab;
        if (--slab->live == 0) {
          pl_chunk *first = c - ((char *)c->host - (char *)slab->base) / c->size;
          pl_slab_unmap(d, slab);
          free(first);
          free(slab);
        }
      }
      CUcontext popped;
      d->CtxPopCurrent(&popped);
    }
    atomic_store(&p->disabled, false);
    atomic_store(&p->prewarm, false);
  }
  atomic_store(&pl_high, atomic_load(&pl_bytes));
}
