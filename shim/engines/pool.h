/* pool.h - the staging engine's pinned chunks and the global bound
 * (pool.c), under stage.c. */
#ifndef PL_POOL_H
#define PL_POOL_H

#include "pl_internal.h"

typedef struct pl_pool pl_pool;
typedef struct pl_chunk pl_chunk;

/* One pinned buffer.  A chunk belongs to exactly one pool (context) at a
 * time and to at most one copy at a time: the copy that acquired it owns
 * every field until it hands the chunk back with pl_pool_release. */
/* One mapping of the shim's own, page-locked with one registration and
 * cut into chunks of one size (pool.c says why not cuMemHostAlloc).
 * Chunks of a slab lie back to back, so a single DMA can fill several. */
typedef struct pl_slab {
  void *base;
  size_t bytes;
  unsigned live;  /* chunks not yet freed: by tests, or as a context ends */
  pl_pool *owner; /* the pool whose context registered it */
} pl_slab;

struct pl_chunk {
  void *host; /* inside slab->base, registered PORTABLE */
  size_t size;
  pl_slab *slab;
  CUevent ev;   /* recorded after the last use on its stream */
  bool pending; /* ev recorded and not yet seen complete */
  pl_pool *pool;
  pl_chunk *next;     /* free or flight list link, under the pool lock */
  pl_chunk *all_next; /* every chunk ever made, for the life of the process */
  /* asynchronous device-to-host copies, under the pool lock: */
  uint64_t ticket;              /* nonzero: the host function holding it frees it */
  unsigned long long stream_id; /* flying: the stream of that host function */
  bool flying;                  /* on the pool's flight list (linked by next) */
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
/* The first time it is called for ctx (current), have the shim's thread
 * build the first chunks of ctx's pool in the background (pool.c says
 * why). */
void pl_pool_prewarm(CUcontext ctx);
/* The driver is initialized: have the shim's thread map and fault in the
 * prewarm's memory now, so that pl_pool_prewarm only registers it. */
void pl_pool_premap(void);
/* Get a chunk whose previous use is complete, growing the pool within the
 * global bound when none is free, and polling for up to wait_ns otherwise.
 * grow: how many chunks the caller is about to need; a pool that must grow
 * makes up to that many at once, as one slab (the others go on the free
 * list).  Must be called with p's context current and no engine lock held;
 * it never blocks in the driver.  *waited_ns gets the time spent polling;
 * *busy says whether earlier work on the pool's chunks was found still
 * running (the device is behind: the caller's copy is bound by the DMA). */
pl_acq pl_pool_acquire(pl_pool *p, unsigned grow, uint64_t wait_ns, pl_chunk **out,
                       uint64_t *waited_ns, bool *busy, CUresult *err);
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
unsigned pl_pool_take_flight(pl_pool *p, unsigned long long stream_id, pl_chunk **out,
                             unsigned max);

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
/* The context `ctx` was destroyed or reset.  The driver freed every event
 * and registration made in it, so its pools are never used again and no
 * handle of theirs is touched: their idle chunks leave the bound now, the
 * rest as they come back (pool.c). */
void pl_pool_ctx_gone(CUcontext ctx);
/* Bytes mapped ahead by pl_pool_premap and not yet taken by a slab. */
size_t pl_pool_spare_for_test(void);

#endif
