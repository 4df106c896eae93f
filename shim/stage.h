/* stage.h - the staging engine's internal interface (stage.c, pool.c,
 * workers.c).  Nothing here leaves the engine except the test hooks at the
 * end, which tests/unit/test_stage.c uses to check the pool bound.  The
 * driver entry points it calls are driver.c's (pl_stage_drv_get). */
#ifndef PL_STAGE_H
#define PL_STAGE_H

#include "pl_internal.h"

/* A spin-wait hint to the core (frees the sibling hyperthread). */
static inline void pl_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

/* ---- pool.c: pinned chunks and the global bound ------------------------- */

typedef struct pl_pool pl_pool;
typedef struct pl_chunk pl_chunk;

/* One pinned buffer.  A chunk belongs to exactly one pool (context) at a
 * time and to at most one copy at a time: the copy that acquired it owns
 * every field until it hands the chunk back with pl_pool_release. */
/* One cuMemHostAlloc, cut into chunks of one size.  Chunks of a slab lie
 * back to back, so a single DMA can fill several of them. */
typedef struct pl_slab {
  void *base;
  unsigned live;       /* chunks not yet freed (tests only free them) */
} pl_slab;

struct pl_chunk {
  void *host;          /* inside slab->base, CU_MEMHOSTALLOC_PORTABLE */
  size_t size;
  pl_slab *slab;
  CUevent ev;          /* recorded after the last use on its stream */
  bool pending;        /* ev recorded and not yet seen complete */
  pl_pool *pool;
  pl_chunk *next;      /* free or flight list link, under the pool lock */
  pl_chunk *all_next;  /* every chunk ever made, for the life of the process */
  /* asynchronous device-to-host copies, under the pool lock: */
  uint64_t ticket;     /* nonzero: the host function holding it frees it */
  unsigned long long stream_id; /* flying: the stream of that host function */
  bool flying;         /* on the pool's flight list (linked by next) */
};

typedef enum pl_acq {
  PL_ACQ_OK,      /* *out holds a chunk the caller now owns */
  PL_ACQ_TIMEOUT, /* none became free within the wait: fall back */
  PL_ACQ_ERROR,   /* a driver call failed (*err): staging this copy must stop */
} pl_acq;

/* The pool of the calling thread's current context `ctx`, created empty on
 * first use (chunks come later, on demand).  NULL only when out of memory
 * for the bookkeeping itself.  Pools live until the process exits. */
pl_pool *pl_pool_get(CUcontext ctx);
/* False once the pool's context could not allocate pinned memory or
 * events: the engine declines that context's copies from then on. */
bool pl_pool_usable(const pl_pool *p);
/* Get a chunk whose previous use is complete, growing the pool within the
 * global bound when none is free, and polling for up to wait_ns otherwise.
 * grow: how many chunks the caller is about to need; a pool that must grow
 * makes up to that many at once, as one slab (the others go on the free
 * list).  Must be called with p's context current and no engine lock held;
 * it never blocks in the driver.  *waited_ns gets the time spent polling;
 * *busy says whether earlier work on the pool's chunks was found still
 * running (the device is behind: the caller's copy is bound by the DMA). */
pl_acq pl_pool_acquire(pl_pool *p, unsigned grow, uint64_t wait_ns, pl_chunk **out, uint64_t *waited_ns, bool *busy,
                       CUresult *err);
/* Whether b's memory directly follows a's, in one allocation. */
static inline bool pl_chunk_adjacent(const pl_chunk *a, const pl_chunk *b) {
  return a->slab == b->slab && (const char *)a->host + a->size == (const char *)b->host;
}
/* Hand a chunk back.  pending: its event was recorded after its last use
 * and must complete before the next use.  Callable from a CUDA host
 * function (takes only the pool lock, calls no CUDA). */
void pl_pool_release(pl_chunk *c, bool pending);
/* Give up on a chunk whose last use can no longer be tracked (its event
 * could not be recorded): it is never reused and its bytes stay counted,
 * so the bound still holds. */
void pl_pool_quarantine(pl_chunk *c);

/* The size of every chunk the pools make (options are fixed at startup). */
size_t pl_pool_chunk_size(void);

/* Chunks in flight (asynchronous device-to-host, stage.c).  A copy hands
 * the last use of a chunk to the host function that copies it out, which
 * frees it with pl_pool_land.  Until then another copy on the same stream
 * may take it over (pl_pool_take_flight): the stream runs that copy's DMAs
 * only after the host function, so no wait on the host is needed.  The
 * ticket tells the host function whether the chunk is still its to free.
 *
 * Order: t = pl_pool_ticket(c) before launching the host function with t;
 * after a successful launch pl_pool_fly(c, t, stream_id) (stream_id 0:
 * never taken over); after a failed one pl_pool_unticket(c).  Flying a
 * chunk only after the launch is what keeps a takeover's DMA behind the
 * host function, even when two threads use the stream. */
uint64_t pl_pool_ticket(pl_chunk *c);
void pl_pool_fly(pl_chunk *c, uint64_t ticket, unsigned long long stream_id);
void pl_pool_unticket(pl_chunk *c);
/* Host function: free c, unless a copy took it over meanwhile.  Calls no
 * CUDA; takes only the pool lock. */
void pl_pool_land(pl_chunk *c, uint64_t ticket);
/* Take up to max chunks of p flying on stream stream_id (nonzero) into
 * out; returns how many.  The caller owns them, and their last queued use
 * is still ahead on that stream. */
unsigned pl_pool_take_flight(pl_pool *p, unsigned long long stream_id, pl_chunk **out, unsigned max);

typedef struct pl_pool_stats {
  uint64_t bytes;      /* pinned bytes held by all pools now */
  uint64_t high_water; /* most ever held at once */
  uint64_t bound;      /* PAGELOCK_POOL_SIZE */
  uint64_t free_bytes; /* of bytes, the chunks on free lists (tests: none lost) */
} pl_pool_stats;
void pl_pool_get_stats(pl_pool_stats *s);
/* Tests only: wait for every free chunk's last use, free all chunks,
 * re-enable disabled pools and reset the high-water mark.  The caller
 * guarantees no copy is in flight in any thread. */
void pl_pool_reset_for_test(void);

/* ---- workers.c: the copy thread pool ------------------------------------ */

/* Segments a job may have published and not yet waited for. */
#define PL_JOB_SLOTS 16u

/* One segment of a job: len bytes from src to dst, handed out in pieces.
 * Written by the job's owner before it is published, read by workers. */
typedef struct pl_seg {
  _Atomic uint64_t range; /* first piece << 24 | piece count: one load, never torn */
  char *dst;
  const char *src;
  size_t len;
  bool nt;                /* streaming stores (see pl_job_add) */
  atomic_size_t left;     /* pieces not yet copied */
} pl_seg;

/* A copy job on its owner's stack: segments published one after another
 * (each typically a pinned chunk), copied piece by piece by the copy
 * threads and the owner, waited for in order.  The owner can wait for one
 * segment while the threads already copy the next: no barrier between
 * chunks.  Fields are the engine's; use the functions below. */
typedef struct pl_job {
  pl_seg seg[PL_JOB_SLOTS];
  atomic_size_t next;      /* next piece to claim */
  atomic_size_t published; /* pieces that may be claimed */
  atomic_bool closed;      /* no more claims */
  bool queued;             /* visible to the workers, under their lock */
  unsigned nseg;           /* segments published (owner only) */
  unsigned refs;           /* workers inside, under their lock */
  bool lone;               /* no job follows soon: its workers sleep at once */
  unsigned helpers;        /* most copy threads inside at once; 0: no limit */
  unsigned peak;           /* most copy threads that were inside at once (tests) */
  struct pl_job *link;
} pl_job;

/* Start a job; every copy thread may work on it (see pl_job_limit). */
void pl_job_open(pl_job *j);
/* From now on no copy thread joins j while `helpers` (> 0) are inside;
 * those inside stay until they find no piece to claim. */
void pl_job_limit(pl_job *j, unsigned helpers);
/* Publish the next segment; returns its number (0, 1, ...).  At most
 * PL_JOB_SLOTS segments may be published and not yet waited for.  nt:
 * write dst with streaming stores, which bypass the cache (for a pinned
 * chunk the DMA engine reads next; stage.c says when). */
unsigned pl_job_add(pl_job *j, void *dst, const void *src, size_t len, bool nt);
/* Return once every byte of segment k is copied and visible to the
 * device, copying its unclaimed pieces on the calling thread.  Segments
 * are waited for in order. */
void pl_job_wait(pl_job *j, unsigned k);
/* End the job: nothing more is handed out, and once this returns no copy
 * thread touches it (segments published and not waited for may be
 * partly copied).  Must be called before the job's memory is reused. */
void pl_job_close(pl_job *j);

/* memcpy(dst, src, n) as a one-segment job.  Calls no CUDA and takes no
 * engine lock across the copy, so it is safe inside a CUDA host function.
 * lone: no copy follows within a DMA's time (the asynchronous copy-out),
 * so the copy threads go to sleep after it instead of polling.
 * nt: streaming stores (the bytes bypass the cache; visible to every
 * thread once this returns). */
void pl_workers_memcpy(void *dst, const void *src, size_t n, bool lone, bool nt);
/* Threads that copy, the caller included (PAGELOCK_COPY_THREADS, 0 means
 * half the CPUs this process may run on, at most 8). */
unsigned pl_workers_parallelism(void);
/* Whether PAGELOCK_COPY_THREADS chose that number: then every job may use
 * all of them. */
bool pl_workers_explicit(void);

/* Whether a download of n bytes is copied out of the chunks with streaming
 * stores (stage.c): when n is at least a quarter of the last-level cache
 * (4 MiB at least; 32 MiB when the cache size is unknown).  Plain stores
 * first read every line of the program's buffer into the cache
 * (read-for-ownership): a download that fits the cache lands there, and a
 * buffer the program downloads into again and again is written in cache,
 * faster than memory; a larger one sweeps the cache and pays three bytes
 * of memory traffic per byte instead of two.  On the H200 host (300 MiB
 * L3, docs/benchmarks.md) staged downloads with streaming stores ran at
 * 23-27 GB/s at 16 MiB (plain: 35-37), 49 at 64 MiB (49), and 53 at
 * 256 MiB (plain: 38-41). */
bool pl_stage_out_stream(size_t n);

/* ---- test hooks ------------------------------------------------------------ */

/* Bytes the copy threads have written with streaming stores (workers.c). */
uint64_t pl_workers_nt_bytes(void);
/* Replace the cache-derived threshold of pl_stage_out_stream (0: derive
 * it again). */
void pl_stage_set_out_stream_min_for_test(size_t n);

typedef struct pl_stage_stats {
  uint64_t copies_staged;     /* calls that used the pool (fully or in part) */
  uint64_t copies_plain;      /* of them, uploads filled with plain stores */
  uint64_t copies_throttled;  /* of them, uploads that went on with fewer copy threads */
  uint64_t bytes_staged;      /* bytes moved through chunks */
  uint64_t bytes_passthrough; /* bytes the engine left to the native call */
  uint64_t fallbacks;         /* copies finished by the native call */
  uint64_t waits, wait_ns;    /* waits for a free chunk, and their total */
  pl_pool_stats pool;
} pl_stage_stats;
void pl_stage_get_stats(pl_stage_stats *s);
/* Tests only: zero the counters, reset the pool (see
 * pl_pool_reset_for_test) and re-enable the engine. */
void pl_stage_reset_for_test(void);
/* Tests only: as if staged copies of two kinds had just been made, so
 * asynchronous rings keep to their share of the pool (see pl_alone). */
void pl_stage_mixed_for_test(void);

#endif
