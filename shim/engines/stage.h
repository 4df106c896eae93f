/* stage.h - the staging engine's internal interface: stage.c over its two
 * parts below it, the pinned pool (pool.h) and the copy threads
 * (workers.h), for the copy funnel (copy.c), the registration engine
 * (autopin.c, a registered upload's tail) and the engines' face
 * (engines.c: context events, the counters); the hooks and start-up reach
 * it only through that face.  The test hooks at the end are
 * tests/unit/test_stage_*.c's.  The driver entry points it calls are
 * driver.c's (pl_drv_engines). */
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
/* Not a forked child's engine (pl_stage_atfork_child): the pool may be
 * built and used. */
bool pl_stage_usable(void);
/* A copy was ever handed to the engine (its counters are worth writing). */
bool pl_stage_ran(void);
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

/* ---- counters and test hooks ------------------------------------------------ */

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
/* The engine's fields of the COUNTERS record, from *s (engines.c writes
 * the record). */
void pl_stage_counters(const pl_stage_stats *s, pagelock_rec_counters *rec);
/* The trace's note on staged copies that found fewer idle CPUs than their
 * copy threads (s->copies_crowded of them, not 0). */
void pl_stage_note_crowded(const pl_stage_stats *s);
/* Tests only: zero the counters, reset the pool (see
 * pl_pool_reset_for_test) and re-enable the engine. */
void pl_stage_reset_for_test(void);
/* Tests only: as if staged copies of two kinds had just been made, so
 * asynchronous rings keep to their share of the pool (see pl_alone). */
void pl_stage_mixed_for_test(void);

#endif
