/* stage.h - the staging engine's internal interface: stage.c over its two
 * parts below it, the pinned pool (pool.h) and the copy threads
 * (workers.h).  Nothing here leaves the engine except the test hooks at
 * the end, which tests/unit/test_stage.c uses to check the pool bound.
 * The driver entry points it calls are driver.c's (pl_drv_engines). */
#ifndef PL_STAGE_H
#define PL_STAGE_H

#include "copycall.h"
#include "pool.h"
#include "workers.h"

/* ---- stage.c ---------------------------------------------------------------- */

/* Move copy `c` (pageable host side, H2D or D2H, 1D) through the shim's
 * pinned pool, keeping the contract (docs/design.md).  Returns true when it
 * handled the copy: *r is what the program must see and c->flags gained
 * PAGELOCK_COPY_STAGED and/or PAGELOCK_COPY_FALLBACK.  Returns false, having
 * enqueued nothing, when the caller must run the native call itself
 * (capturing stream, no context, engine disabled...); it may set
 * PAGELOCK_COPY_CAPTURE in c->flags. */
bool pl_stage_copy(pl_copy *c, CUresult *r);
/* The driver is initialized (cuInit succeeded): in the modes that stage,
 * the pool's first memory is prepared (pool.c). */
void pl_stage_note_driver_init(void);
/* The program allocated device memory in the current context: in the
 * modes that stage, the context's pool starts building (pool.c). */
void pl_stage_note_device_alloc(void);
/* A teardown is about to end `ctx` (hook_ctx.c): the shim's thread
 * finishes what it does there first.  Then, once it has ended, what the
 * engines made in it is forgotten without a driver call: the pools'
 * chunks, cached events, registrations (pool.c, autopin.c, pinreg.c). */
void pl_stage_note_ctx_ending(CUcontext ctx);
void pl_stage_note_ctx_gone(CUcontext ctx);
/* Write the engine's COUNTERS record (at exit, before END). */
void pl_stage_write_counters(void);
/* A forked child: CUDA is unusable there; the engine turns itself off. */
void pl_stage_atfork_child(void);

/* Whether a download of n bytes is copied out of the chunks with streaming
 * stores (stage.c): when n is at least a quarter of the last-level cache
 * (4 MiB at least; 32 MiB when the cache size is unknown).  Plain stores
 * first read every line of the program's buffer into the cache
 * (read-for-ownership): a download that fits the cache lands there, and a
 * buffer the program downloads into again and again is written in cache,
 * faster than memory; a larger one sweeps the cache and pays three bytes
 * of memory traffic per byte instead of two (measured on the H200 host:
 * docs/bench/2026-11-23-streaming-copy-out.md). */
bool pl_stage_out_stream(size_t n);

/* Copy threads, the caller included, for a staged copy: the base count
 * (pl_workers_base), or, for a copy larger than the pool (wide: it
 * recycles its chunks, see workers.c) that finds more CPUs of its mask
 * idle than that (idle, from cpuload.c; UINT_MAX when unknown), one per
 * idle CPU, at most pl_workers_parallelism. */
unsigned pl_stage_threads(bool wide, unsigned idle);

/* ---- test hooks ------------------------------------------------------------ */

/* Replace the cache-derived threshold of pl_stage_out_stream (0: derive
 * it again). */
void pl_stage_set_out_stream_min_for_test(size_t n);

typedef struct pl_stage_stats {
  uint64_t copies_staged;             /* calls that used the pool (fully or in part) */
  uint64_t copies_plain;              /* of them, uploads filled with plain stores */
  uint64_t copies_throttled;          /* of them, uploads that went on with fewer copy threads */
  uint64_t bytes_staged;              /* bytes moved through chunks */
  uint64_t bytes_passthrough;         /* bytes the engine left to the native call */
  uint64_t fallbacks;                 /* copies finished by the native call */
  uint64_t waits, wait_ns;            /* waits for a free chunk, and their total */
  uint64_t copies_sized, bytes_sized; /* staged copies of PL_CROWD_MIN or more */
  uint64_t copies_crowded,
      bytes_crowded; /* of them, started with fewer idle CPUs than copy threads */
  unsigned crowded_others,
      crowded_cpus;         /* the most runnable threads of others seen then, of CPUs */
  unsigned crowded_threads; /* the copy threads such a copy had */
  uint64_t copies_wide;     /* sized copies given more than the base copy threads */
  unsigned widest;          /* the most copy threads a staged copy was given */
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
