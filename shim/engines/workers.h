/* workers.h - the staging engine's copy threads (workers.c), under
 * stage.c. */
#ifndef PL_WORKERS_H
#define PL_WORKERS_H

#include "pl_internal.h"

/* Segments a job may have published and not yet waited for. */
#define PL_JOB_SLOTS 16u

/* One segment of a job: len bytes from src to dst, handed out in pieces.
 * Written by the job's owner before it is published, read by workers. */
typedef struct pl_seg {
  _Atomic uint64_t range; /* first piece << 24 | piece count: one load, never torn */
  char *dst;
  const char *src;
  size_t len;
  bool nt;            /* streaming stores (see pl_job_add) */
  atomic_size_t left; /* pieces not yet copied */
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

/* Start a job copied by `threads` threads, the caller included (1: the
 * caller alone; more than there are: all of them); pl_job_limit lowers
 * it. */
void pl_job_open(pl_job *j, unsigned threads);
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
 * thread once this returns).  threads: how many copy, the caller
 * included (pl_workers_base, or more: see pl_workers_parallelism). */
void pl_workers_memcpy(void *dst, const void *src, size_t n, bool lone, bool nt, unsigned threads);
/* Threads that copy, the caller included, in any copy: PAGELOCK_COPY_THREADS,
 * else half the CPUs this process may run on, at most 8. */
unsigned pl_workers_base(void);
/* The most threads one copy may use, the caller included, and so the
 * copy threads started: PAGELOCK_COPY_THREADS, else three quarters of the
 * CPUs this process may run on, at most 12 (at least the base).  A copy
 * uses more than the base only where it finds the CPUs idle (stage.c). */
unsigned pl_workers_parallelism(void);
/* Whether PAGELOCK_COPY_THREADS chose that number: then every job may use
 * all of them. */
bool pl_workers_explicit(void);

/* Copy threads awake now (copying or polling for the next piece), that
 * is runnable: the shim's own share of the CPUs' load (cpuload.c). */
unsigned pl_workers_awake(void);

/* Bytes the copy threads have written with streaming stores (workers.c). */
uint64_t pl_workers_nt_bytes(void);
/* Tests: take cpus as the affinity mask's size (0: ask again). */
void pl_workers_set_cpus_for_test(unsigned cpus);

#endif
