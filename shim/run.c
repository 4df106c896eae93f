/* run.c - a run of repeated copies, written as one COPY record (run.h).
 *
 * Two sides may write a run's record: its owner, when the run ends (a
 * different copy, PL_RUN_MAX copies, the thread's end), and a drainer,
 * when the owner has been idle across a drain (trace.c).  `state` keeps
 * them apart without costing the owner's copies anything: each side first
 * sets its bit with a compare-and-swap, which fails while the other's is
 * set.  The owner then waits for a drainer to finish (it holds the run for
 * the time it takes to build one record); a drainer skips a run its owner
 * holds, since the owner is then about to write it. */
#define _GNU_SOURCE
#include <sched.h>
#include <string.h>

#include "pl_internal.h"
#include "run.h"

/* The record for the copies (n, timed, ns) of a run from start on. */
static void pl_run_fill(const pl_run *r, uint32_t n, uint32_t timed, uint64_t ns, uint64_t start,
                        pagelock_rec_copy *out) {
  *out = r->proto;
  out->count = n;
  out->timed = timed;
  out->start_ns = start;
  /* The timed copies' mean, for every copy.  A part with none timed (a
   * drain took the run between two timed copies) gets the proto's time:
   * the first copy's, which took the whole way. */
  out->host_ns = timed ? (uint64_t)((unsigned __int128)ns * n / timed) : r->proto.host_ns * n;
  out->correlation = pl_next_correlation();
  out->gpu_correlation = 0;
}

/* Hold the run as owner: wait out a drainer that holds it. */
static uint32_t pl_run_hold(pl_run *r) {
  uint32_t s = atomic_load_explicit(&r->state, memory_order_acquire);
  for (unsigned spins = 0;; spins++) {
    if (!(s & PL_RUN_THIEF) &&
        atomic_compare_exchange_weak_explicit(&r->state, &s, s | PL_RUN_OWNER, memory_order_acquire,
                                              memory_order_acquire))
      return s;
    if (s & PL_RUN_THIEF) {
      /* The drainer writes into the trace buffer, which may wait for the
       * writer's write(2): yield after a short spin. */
      if (spins < 64)
        pl_cpu_relax();
      else
        sched_yield();
      s = atomic_load_explicit(&r->state, memory_order_acquire);
    }
  }
}

void pl_run_open(pl_run *r, const pl_run_key *k, const pagelock_rec_copy *proto) {
  /* Closed, so no drainer looks at it until the store of state below. */
  r->key = *k;
  r->proto = *proto;
  r->proto.count = r->proto.timed = 1;
  r->taken_n = r->taken_timed = 0;
  r->taken_ns = r->taken_at = 0;
  atomic_store_explicit(&r->n, 0, memory_order_relaxed);
  atomic_store_explicit(&r->timed, 0, memory_order_relaxed);
  atomic_store_explicit(&r->ns, 0, memory_order_relaxed);
  atomic_store_explicit(&r->start, 0, memory_order_relaxed);
  atomic_store_explicit(&r->state, PL_RUN_OPEN, memory_order_release);
}

bool pl_run_close(pl_run *r, pagelock_rec_copy *out) {
  r->key.callsite = 0; /* closed: matches no copy */
  if (!(atomic_load_explicit(&r->state, memory_order_relaxed) & PL_RUN_OPEN)) return false;
  uint32_t s = pl_run_hold(r);
  uint32_t n = atomic_load_explicit(&r->n, memory_order_relaxed);
  uint32_t timed = atomic_load_explicit(&r->timed, memory_order_relaxed);
  uint64_t ns = atomic_load_explicit(&r->ns, memory_order_relaxed);
  uint64_t start = atomic_load_explicit(&r->start, memory_order_relaxed);
  if (s & PL_RUN_TAKEN) {
    /* A drainer wrote the first taken_n: the rest began after its take. */
    n -= r->taken_n;
    timed -= r->taken_timed;
    ns -= r->taken_ns;
    start = r->taken_at;
  }
  bool any = n > 0;
  if (any) pl_run_fill(r, n, timed, ns, start, out);
  atomic_store_explicit(&r->n, 0, memory_order_relaxed);
  atomic_store_explicit(&r->state, 0, memory_order_release);
  return any;
}

bool pl_run_take(pl_run *r, uint64_t now, pagelock_rec_copy *out) {
  uint32_t s = atomic_load_explicit(&r->state, memory_order_acquire);
  if (s != PL_RUN_OPEN && s != (PL_RUN_OPEN | PL_RUN_TAKEN)) return false;
  if (!atomic_compare_exchange_strong_explicit(&r->state, &s, s | PL_RUN_THIEF,
                                               memory_order_acquire, memory_order_relaxed))
    return false;
  /* n last: the owner stores it last, so the copies it counts include
   * every timed one seen here but, at most, one in flight. */
  uint32_t timed = atomic_load_explicit(&r->timed, memory_order_acquire);
  uint64_t ns = atomic_load_explicit(&r->ns, memory_order_acquire);
  uint64_t start = atomic_load_explicit(&r->start, memory_order_acquire);
  uint32_t n = atomic_load_explicit(&r->n, memory_order_acquire);
  bool taken = s & PL_RUN_TAKEN;
  uint32_t pn = taken ? r->taken_n : 0, pt = taken ? r->taken_timed : 0;
  uint64_t pns = taken ? r->taken_ns : 0;
  /* That one in flight, timed but not yet counted, must not make a part
   * with more timed copies than copies: the next part counts it. */
  if (timed - pt > n - pn) timed = pt + (n - pn);
  bool any = n > pn;
  if (any) {
    pl_run_fill(r, n - pn, timed - pt, ns - pns, taken ? r->taken_at : start, out);
    r->taken_n = n;
    r->taken_timed = timed;
    r->taken_ns = ns;
    r->taken_at = now;
  }
  atomic_store_explicit(&r->state, any ? (s | PL_RUN_TAKEN) : s, memory_order_release);
  return any;
}

void pl_run_forget(pl_run *r) {
  /* The next owner of the ring may come back to the same call path (a
   * thread pool's next thread, on the same stack): no key may match. */
  r->key.callsite = 0;
  atomic_store_explicit(&r->state, 0, memory_order_relaxed);
  atomic_store_explicit(&r->n, 0, memory_order_relaxed);
}
