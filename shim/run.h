/* run.h - one COPY record for a run of repeated small copies (run.c).
 *
 * A loop of small copies from one site, one buffer, one size paid ~470
 * instructions a copy in the shim: the classification, the stack, two
 * clock reads, a 112-byte record.  On the GPU hosts that was 1.08-1.10x a
 * 256-byte pageable copy's time (docs/benchmarks.md).  Once a copy has
 * taken the whole way, its exact repeats on the same thread (copy.c says
 * what "exact" means) only add to a run: a count, and one clock pair in
 * PL_RUN_TIME_EVERY.  A run becomes one record of up to PL_RUN_MAX copies.
 *
 * The run lives in the thread's ring (trace.c), so whoever drains the
 * rings, the writer once a second and the exit path, also takes what an
 * idle thread's run has gathered; nothing waits in a run for longer than
 * a ring's records do.  The owner adds without any atomic read-modify-
 * write; only opening and closing a run, once per record, and a drainer's
 * take go through `state`. */
#ifndef PL_RUN_H
#define PL_RUN_H

#include "pl_internal.h"

#define PL_RUN_SLOTS                           \
  4 /* runs kept at once by a thread: a loop's \
       upload and download, and a side copy or two */
#define PL_RUN_MAX                                                           \
  64                        /* copies per record: the registry's memo of a   \
                               pageable page answers 64 times before it asks \
                               again (hostmem.c), and so does a run */
#define PL_RUN_TIME_EVERY 8 /* one copy in 8 is timed */

/* What makes a copy a repeat of the run's first: the same call (entry
 * point, flags, pointers, size, stream, return address and stack depth)
 * while nothing that decided its record has moved (the registry's stamp,
 * the device memo's generation and, for a default stream, the current
 * context; the Python stack's hash). */
typedef struct pl_run_key {
  uintptr_t callsite, sp, src, dst, stream, ctx;
  uint64_t bytes, hm_stamp, py;
  uint32_t api, flags, dev_gen;
  bool py_on;   /* Python frames were read: py is their hash */
  bool autopin; /* register or auto: no registration may exist (copy.c) */
} pl_run_key;

typedef struct pl_run {
  /* The owner's alone: read and written by its thread only. */
  pl_run_key key;
  /* PL_RUN_OPEN, and PL_RUN_OWNER / PL_RUN_THIEF while one side holds the
   * run; PL_RUN_TAKEN once a drainer wrote part of it (taken_* say
   * which).  The proto and the taken_* fields change only while held. */
  _Atomic uint32_t state;
  /* Gathered since the run was opened; written by the owner alone, read by
   * a drainer: each only grows, so a drainer's view may lag, never
   * overcount. */
  _Atomic uint32_t n, timed;
  _Atomic uint64_t ns;    /* the timed copies' host time */
  _Atomic uint64_t start; /* the first copy's start */
  uint32_t taken_n, taken_timed;
  uint64_t taken_ns, taken_at;
  pagelock_rec_copy proto; /* the record of the copy repeated */
} pl_run;

enum { PL_RUN_OPEN = 1u, PL_RUN_OWNER = 2u, PL_RUN_THIEF = 4u, PL_RUN_TAKEN = 8u };

/* This thread's runs: its ring's (trace.c), NULL without one. */
extern PL_TLS pl_run *pl_my_runs;

/* The owner: one more copy of run r, timed (ns from start) or not. */
static inline void pl_run_add(pl_run *r, bool timed, uint64_t start, uint64_t ns) {
  uint32_t n = atomic_load_explicit(&r->n, memory_order_relaxed);
  if (timed) {
    if (n == 0) atomic_store_explicit(&r->start, start, memory_order_relaxed);
    atomic_store_explicit(&r->ns, atomic_load_explicit(&r->ns, memory_order_relaxed) + ns,
                          memory_order_relaxed);
    atomic_store_explicit(&r->timed, atomic_load_explicit(&r->timed, memory_order_relaxed) + 1,
                          memory_order_relaxed);
  }
  atomic_store_explicit(&r->n, n + 1, memory_order_release);
}

/* The owner: start run r at the copy whose record is proto (r closed). */
void pl_run_open(pl_run *r, const pl_run_key *k, const pagelock_rec_copy *proto);
/* The owner: close run r (its key then matches no copy); true when it
 * gathered copies no drainer wrote, and then *out is their record. */
bool pl_run_close(pl_run *r, pagelock_rec_copy *out);
/* A drainer (the trace lock held): what run r gathered that nobody wrote
 * yet, as a record in *out; false when there is none, or while the owner
 * holds the run (it is then closing it itself). */
bool pl_run_take(pl_run *r, uint64_t now, pagelock_rec_copy *out);
/* A forked child, or a ring passed to another thread: the runs it holds
 * are over, and their keys match no copy. */
void pl_run_forget(pl_run *r);

#endif
