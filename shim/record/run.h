/* run.h - one COPY record for a run of repeated small copies (run.c).
 *
 * The whole way (the classification, the stack, two clock reads, a
 * record) costs a small pageable copy close to a tenth of its time
 * (docs/bench/2026-11-27-runs-of-repeated-copies.md).  So once a copy has
 * taken it, its exact repeats on the same thread (copy.c says what
 * "exact" means) only add to a run: a count, and one clock pair in
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

/* How a run tells its call path again without unwinding: where the frames
 * above the hook keep their return addresses, in this thread's own stack,
 * and what they held.  Here, with the run that holds one, though stack.c
 * makes it: pl_stack_check_empty or pl_stack_capture_at, never zeroed:
 * f[0] is always read. */
#define PL_CHECK_FRAMES (PAGELOCK_MAX_FRAMES - 1)
#define PL_CHECK_NONE UINT32_MAX /* a stack was taken that cannot be told again */
typedef struct pl_stack_check {
  uint32_t n;
  struct {
    const uintptr_t *at;
    uintptr_t val;
  } f[PL_CHECK_FRAMES];
} pl_stack_check;
/* A check of no frames (a copy with no stack): its first entry reads a
 * word that holds what it expects, so the nearest frame's read below
 * needs no test of n. */
extern const uintptr_t pl_check_pad;
static inline void pl_stack_check_empty(pl_stack_check *k) {
  k->n = 0;
  k->f[0].at = &pl_check_pad;
  k->f[0].val = pl_check_pad;
}
/* Whether the call path is still the one check k was made from (k->n is
 * not PL_CHECK_NONE), in two parts: the nearest frame, where two paths of
 * one run key part most often (two lines of main: the run looked at first
 * may be the other line's), and the rest.  On every repeat of a run, so
 * the rest is unrolled: four instructions a frame (a loop spent seven). */
static PL_ALWAYS_INLINE bool pl_stack_check_near(const pl_stack_check *k) {
  return *k->f[0].at == k->f[0].val;
}
static PL_ALWAYS_INLINE bool pl_stack_check_far(const pl_stack_check *k) {
#define PL_FRAME_DIFF(i) (*k->f[i].at ^ k->f[i].val)
  _Static_assert(PL_CHECK_FRAMES == 15, "one case per frame below");
  uintptr_t d = 0;
  switch (k->n) {
    case 15: d |= PL_FRAME_DIFF(14); /* fall through */
    case 14: d |= PL_FRAME_DIFF(13); /* fall through */
    case 13: d |= PL_FRAME_DIFF(12); /* fall through */
    case 12: d |= PL_FRAME_DIFF(11); /* fall through */
    case 11: d |= PL_FRAME_DIFF(10); /* fall through */
    case 10: d |= PL_FRAME_DIFF(9);  /* fall through */
    case 9: d |= PL_FRAME_DIFF(8);   /* fall through */
    case 8: d |= PL_FRAME_DIFF(7);   /* fall through */
    case 7: d |= PL_FRAME_DIFF(6);   /* fall through */
    case 6: d |= PL_FRAME_DIFF(5);   /* fall through */
    case 5: d |= PL_FRAME_DIFF(4);   /* fall through */
    case 4: d |= PL_FRAME_DIFF(3);   /* fall through */
    case 3: d |= PL_FRAME_DIFF(2);   /* fall through */
    case 2: d |= PL_FRAME_DIFF(1);   /* fall through */
    case 1:                          /* fall through */
    case 0: break;
    /* A run's check has at most PL_CHECK_FRAMES (never PL_CHECK_NONE: no
     * run opens then), so the jump needs no test of its bounds. */
    default: __builtin_unreachable();
  }
#undef PL_FRAME_DIFF
  return d == 0;
}
/* What makes a copy a repeat of the run's first: the same call (entry
 * point, flags, pointers, size, stream, return address, stack depth and
 * the frames above) while nothing that decided its record has moved (the
 * registry's stamp, the device memo's generation and, for a default
 * stream, the current context; the Python stack's hash). */
typedef struct pl_run_key {
  uintptr_t callsite, sp, src, dst, stream, ctx;
  uint64_t bytes, hm_stamp, py;
  uint32_t api, flags, dev_gen;
  bool py_on;   /* Python frames were read: py is their hash */
  bool autopin; /* register or auto: no registration may exist (copy.c) */
  /* The call path above the return address, for a copy whose stack was
   * taken: one helper called from two places at one depth, or
   * cudaMemcpy from two lines of main, has one return address and one
   * stack pointer on both paths. */
  pl_stack_check check;
} pl_run_key;

/* A run's tally, one word: copies (8 bits), timed ones (8), their host
 * time in ns (48, saturating at 78 hours).  The owner stores it once a
 * copy, so a drainer reads the three consistent with each other. */
#define PL_ACC_NS_BITS 48
#define PL_ACC_NS_MAX ((UINT64_C(1) << PL_ACC_NS_BITS) - 1)
static inline uint32_t pl_acc_n(uint64_t a) { return (uint32_t)(a >> 56); }
static inline uint32_t pl_acc_timed(uint64_t a) { return (uint32_t)(a >> 48) & 0xffu; }
static inline uint64_t pl_acc_ns(uint64_t a) { return a & PL_ACC_NS_MAX; }
_Static_assert(PL_RUN_MAX < 256, "a run's count fits the tally's 8 bits");

typedef struct pl_run {
  /* The owner's alone: read and written by its thread only. */
  pl_run_key key;
  uint32_t base; /* the copy (its index) that began the current part */
  uint32_t seen; /* `took` as the owner last acted on it */
  bool busy;     /* a copy of this run is in the driver: a copy the driver
                    call makes on this thread must leave the run alone */
  /* PL_RUN_OPEN, and PL_RUN_OWNER / PL_RUN_THIEF while one side holds the
   * run; PL_RUN_TAKEN once a drainer wrote part of it (taken and taken_at
   * say how much, and when).  The proto and taken* change only while
   * held. */
  _Atomic uint32_t state;
  /* Parts a drainer wrote: the owner's next copy begins a new part, timed,
   * so the next record starts at a copy's own start. */
  _Atomic uint32_t took;
  /* The tally (pl_acc_*), written by the owner alone, with release: a
   * drainer that reads it also sees `mark` as of that copy or later. */
  _Atomic uint64_t acc;
  /* The current part: its first copy's index (8 bits) and start, in ns
   * after proto.start_ns (56 bits: 2.2 years). */
  _Atomic uint64_t mark;
  uint64_t taken; /* the tally as of the last take */
  uint64_t taken_at;
  pagelock_rec_copy proto; /* the record of the copy repeated */
} pl_run;

enum { PL_RUN_OPEN = 1u, PL_RUN_OWNER = 2u, PL_RUN_THIEF = 4u, PL_RUN_TAKEN = 8u };

/* This thread's runs: its ring's (trace.c), NULL without one. */
extern PL_TLS pl_run *pl_my_runs;

/* The owner: the copies run r holds so far. */
static inline uint32_t pl_run_count(const pl_run *r) {
  return pl_acc_n(atomic_load_explicit(&r->acc, memory_order_relaxed));
}

/* What pl_run_times says of the owner's next copy of a run. */
enum { PL_RUN_UNTIMED = 0, PL_RUN_TIMED = 1, PL_RUN_PART = 3 /* timed, and begins a part */ };

/* The owner, before one more copy of run r: whether to time it.  One in
 * PL_RUN_TIME_EVERY is, counted from the part's first copy, which always
 * is: the first of the run, and the first after a drainer wrote a part. */
static inline unsigned pl_run_times(pl_run *r) {
  uint32_t n = pl_run_count(r);
  uint32_t took = atomic_load_explicit(&r->took, memory_order_relaxed);
  if (PL_UNLIKELY(n == 0 || took != r->seen)) {
    r->seen = took;
    r->base = n;
    return PL_RUN_PART;
  }
  return (n - r->base) % PL_RUN_TIME_EVERY == 0 ? PL_RUN_TIMED : PL_RUN_UNTIMED;
}

/* The owner: one more copy of run r, as pl_run_times said (`how`); timed
 * ones began at start and took ns. */
static inline void pl_run_add(pl_run *r, unsigned how, uint64_t start, uint64_t ns) {
  uint64_t a = atomic_load_explicit(&r->acc, memory_order_relaxed);
  if (how == PL_RUN_PART) {
    uint64_t off = start > r->proto.start_ns ? start - r->proto.start_ns : 0;
    if (off >> 56) off = (UINT64_C(1) << 56) - 1;
    atomic_store_explicit(&r->mark, (uint64_t)pl_acc_n(a) << 56 | off, memory_order_relaxed);
  }
  /* Added in place: no field can carry into the next (count and timed
   * stay below PL_RUN_MAX, ns is capped at what its field has left). */
  uint64_t inc = UINT64_C(1) << 56;
  if (how != PL_RUN_UNTIMED) {
    uint64_t room = PL_ACC_NS_MAX - pl_acc_ns(a);
    inc += (UINT64_C(1) << 48) + (ns < room ? ns : room);
  }
  atomic_store_explicit(&r->acc, a + inc, memory_order_release);
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
