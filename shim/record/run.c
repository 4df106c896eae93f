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

/* What an empty check reads (run.h, pl_stack_check_empty). */
const uintptr_t pl_check_pad = 0;

/* The record for the part of run r between tallies from and to: the
 * copies counted in `to` and not in `from`.  A part's start is its first
 * copy's own when the owner marked that copy (mark, read after `to`);
 * else that copy was under way when a drainer took the part before, at
 * taken_at. */
static void pl_run_fill(const pl_run *r, uint64_t from, uint64_t to, uint64_t mark,
                        pagelock_rec_copy *out) {
  uint32_t first = pl_acc_n(from), n = pl_acc_n(to) - first;
  uint32_t timed = pl_acc_timed(to) - pl_acc_timed(from);
  uint64_t ns = pl_acc_ns(to) - pl_acc_ns(from);
  *out = r->proto;
  out->count = n;
  out->timed = timed;
  out->start_ns = (uint32_t)(mark >> 56) == first
                      ? r->proto.start_ns + (mark & ((UINT64_C(1) << 56) - 1))
                      : r->taken_at;
  /* The timed copies' mean, for every copy.  A part with none timed (the
   * copy under way at a drain, alone) gets the proto's time: the first
   * copy's, which took the whole way. */
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
  r->base = r->seen = 0;
  r->busy = false;
  r->taken = r->taken_at = 0;
  atomic_store_explicit(&r->took, 0, memory_order_relaxed);
  atomic_store_explicit(&r->acc, 0, memory_order_relaxed);
  atomic_store_explicit(&r->mark, 0, memory_order_relaxed);
  atomic_store_explicit(&r->state, PL_RUN_OPEN, memory_order_release);
}

bool pl_run_close(pl_run *r, pagelock_rec_copy *out) {
  r->key.callsite = 0; /* closed: matches no copy */
  if (!(atomic_load_explicit(&r->state, memory_order_relaxed) & PL_RUN_OPEN)) return false;
  uint32_t s = pl_run_hold(r);
  uint64_t to = atomic_load_explicit(&r->acc, memory_order_relaxed);
  uint64_t mark = atomic_load_explicit(&r->mark, memory_order_relaxed);
  /* A drainer wrote the copies up to `taken`: the rest are this part. */
  uint64_t from = s & PL_RUN_TAKEN ? r->taken : 0;
  bool any = pl_acc_n(to) > pl_acc_n(from);
  if (any) pl_run_fill(r, from, to, mark, out);
  atomic_store_explicit(&r->acc, 0, memory_order_relaxed);
  atomic_store_explicit(&r->state, 0, memory_order_release);
  return any;
}

bool pl_run_take(pl_run *r, uint64_t now, pagelock_rec_copy *out) {
  uint32_t s = atomic_load_explicit(&r->state, memory_order_acquire);
  if (s != PL_RUN_OPEN && s != (PL_RUN_OPEN | PL_RUN_TAKEN)) return false;
  if (!atomic_compare_exchange_strong_explicit(&r->state, &s, s | PL_RUN_THIEF,
                                               memory_order_acquire, memory_order_relaxed))
    return false;
  /* The tally first, then the mark: the mark is then the one of the last
   * copy counted, or a later one (pl_run_fill tells them apart). */
  uint64_t to = atomic_load_explicit(&r->acc, memory_order_acquire);
  uint64_t mark = atomic_load_explicit(&r->mark, memory_order_acquire);
  uint64_t from = s & PL_RUN_TAKEN ? r->taken : 0;
  bool any = pl_acc_n(to) > pl_acc_n(from);
  if (any) {
    pl_run_fill(r, from, to, mark, out);
    r->taken = to;
    r->taken_at = now;
    atomic_store_explicit(&r->took, atomic_load_explicit(&r->took, memory_order_relaxed) + 1,
                          memory_order_relaxed);
  }
  atomic_store_explicit(&r->state, any ? (s | PL_RUN_TAKEN) : s, memory_order_release);
  return any;
}

void pl_run_forget(pl_run *r) {
  /* The next owner of the ring may come back to the same call path (a
   * thread pool's next thread, on the same stack): no key may match. */
  r->key.callsite = 0;
  r->busy = false;
  atomic_store_explicit(&r->state, 0, memory_order_relaxed);
  atomic_store_explicit(&r->acc, 0, memory_order_relaxed);
}
