/* pinreg.h - the shim's own page-locked ranges and the thread that makes
 * them (pinreg.c), for PAGELOCK_MODE register and auto; autopin.h says
 * which copies go through them.
 *
 * A shim registration covers one allocation the shim saw being made and
 * will see being released (hook_alloc.c; pl_reg_span says which pages), made
 * with cuMemHostRegister on the shim's own thread, never on the program's.
 * It lives until the program releases any byte of that allocation, the
 * budget needs its room (eviction), or the program page-locks memory that
 * overlaps it; it is undone before the release reaches the allocator or
 * the kernel (no stale registrations), and the program never sees it
 * (its pointer queries answer as for pageable memory). */
#ifndef PL_PINREG_H
#define PL_PINREG_H

#include "copycall.h"
#include "hostmem.h"

/* ---- pinreg.c: the registrations and the thread that makes them -------- */

/* A registration is made as consecutive pieces of this size, each its
 * own cuMemHostRegister, with a pause between them.  Why: the driver
 * stalls every other thread's copy and event record for as long as one
 * registration call runs (18 ms for 256 MiB of small pages, H100 host,
 * tests/gpu/probe_register.c): the program's staged copies would stop for
 * that long.  In 8 MiB pieces 50 us apart an 8 MiB upload beside them
 * waited at most 1.2 ms, in 32 MiB pieces 2.3 ms.  The driver refuses a
 * copy whose host range runs from one registration into the next
 * (CUDA_ERROR_INVALID_VALUE), so a copy over a registration is cut at
 * piece edges: one more driver call (~3 us) per piece copied, 1% of a
 * 16 MiB DMA. */
#define PL_PIN_PIECE ((size_t)16 << 20)

/* The edges of the pieces of a registration starting at base: every
 * multiple of PL_PIN_PIECE above it. */
static inline uintptr_t pl_pin_piece_end(uintptr_t base, uintptr_t p) {
  return base + ((p - base) / PL_PIN_PIECE + 1) * PL_PIN_PIECE;
}

/* The part of the allocation [abase, abase+alen) of kind `kind` that a
 * registration of it covers: every page its bytes lie in when it owns them
 * (PL_ALLOC_OWN_PAGES), so that a copy of any of it is one registered DMA
 * (a pageable call for each partial page cost ~10-20 us beside a 1 MiB
 * weight's 20 us of DMA); else its page-aligned interior, since a
 * neighbour may share its first and last pages.  Empty when hi <= lo. */
static inline void pl_reg_span(uintptr_t abase, size_t alen, int kind, uintptr_t *lo,
                               uintptr_t *hi) {
  uintptr_t pg = pl_page_size();
  if (kind & PL_ALLOC_OWN_PAGES) {
    *lo = abase & ~(pg - 1);
    *hi = (abase + alen + pg - 1) & ~(pg - 1);
  } else {
    *lo = (abase + pg - 1) & ~(pg - 1);
    *hi = (abase + alen) & ~(pg - 1);
  }
}

/* One copy's hold on a registration: while held, the registration is
 * neither evicted nor undone by the engine (a release by the program
 * during the copy is the program's own race, as without the shim). */
typedef struct pl_pin_use {
  uintptr_t base, end; /* the registered part of the interior: its first
                          pieces while it is being made, else all of it */
  uintptr_t iend;      /* the interior's end */
  uint32_t slot;       /* 0: no hold */
  /* A registration the route will ask for once the copy is done
   * (pl_autopin_after), so that the shim's thread does not register
   * beside the very copy that asked: len 0 when none. */
  struct {
    uintptr_t base, abase;
    size_t len, alen;
    CUcontext ctx;
  } ask;
} pl_pin_use;

/* True when at least one shim registration is live or in flight: one
 * atomic load, the release hooks' fast path. */
bool pl_pinreg_any(void);

/* Hold the registration covering any byte of [p, p+n), live or with its
 * first pieces made, when [p, p+n) starts in its registered part or
 * before it; false when none does (then nothing is held).  Marks it used
 * now (eviction order). */
bool pl_pinreg_hold(uintptr_t p, size_t n, pl_pin_use *use);
void pl_pinreg_unhold(pl_pin_use *use);
/* pl_pinreg_hold, waiting up to wait_ns while the registration covering
 * [p, p+n) is asked for or being made and has not reached p yet. */
bool pl_pinreg_hold_wait(uintptr_t p, size_t n, pl_pin_use *use, uint64_t wait_ns);
/* The held registration is still being made: wait up to wait_ns for its
 * next piece; true with use->end moved up, false when none came (the
 * thread is busy elsewhere, or the registration failed or is undone). */
bool pl_pinreg_follow(pl_pin_use *use, uint64_t wait_ns);

/* The shim-only registration containing p, for the program's own pointer
 * queries (hook_hostalloc.c): true with its range. */
bool pl_pinreg_find(uintptr_t p, uintptr_t *base, size_t *len);

/* Ask the shim's thread to register [base, base+len) (page aligned, the
 * interior of the allocation [abase, abase+alen)) in context ctx.  Never
 * blocks; false when the request cannot be queued (then the copy stages). */
bool pl_pinreg_request(uintptr_t base, size_t len, uintptr_t abase, size_t alen, CUcontext ctx);

/* The program is about to release [p, p+n) (brk/sbrk shrinking, a
 * MAP_FIXED mapping over it): every shim registration overlapping it is
 * undone first; returns when none is left.  Never holds a lock across the
 * driver call.  Where the thread may not wait (see pl_pinreg_unmap) the
 * shim's thread undoes them instead, soon after. */
void pl_pinreg_release(uintptr_t p, size_t n);

/* The release hooks of munmap, madvise (MADV_DONTNEED, _LOCKED, FREE,
 * REMOVE) and mremap.  Each undoes the registrations in the range first
 * and returns false: the hook makes the real call.  Where the program's
 * thread may not wait for the lock or the driver (a signal handler that
 * interrupted the shim or its lock, a host function's thread, where the
 * driver refuses calls) each does the call itself without a lock, a wait
 * or a driver call, and returns true with the call's result: unmapped
 * registered memory becomes inaccessible at once and is unmapped by the
 * shim's thread after its undo (its addresses cannot be reused
 * meanwhile); discarded registered memory is zeroed, as a discarded
 * private page reads; mremap moves by copying.  Async-signal-safe then. */
bool pl_pinreg_unmap(uintptr_t p, size_t n, int *rc);
bool pl_pinreg_discard(uintptr_t p, size_t n, int advice, int *rc);
bool pl_pinreg_remap(uintptr_t old, size_t old_len, size_t new_len, int flags, void *new_addr,
                     void **out);
/* A MAP_FIXED mapping (or an mremap's fixed target) is about to take
 * [p, p+n): a quarantine there is not unmapped later, and the
 * registrations there are undone (pl_pinreg_release). */
void pl_pinreg_map_fixed(uintptr_t p, size_t n);

/* This thread runs the program's host functions: the driver refuses its
 * calls, so its releases never wait for an undo (hook_hostfn.c). */
void pl_pinreg_note_hostfn(void);
/* Whether this thread may wait for a lock and call the driver: not inside
 * the shim, not holding the registrations' lock, not running host
 * functions. */
bool pl_pinreg_may_wait(void);

/* free() of a block whose registration may still be live: true when the
 * engine took the block and will hand it to `next_free` once its
 * registration is undone on the shim's thread (the program's thread never
 * waits on the driver: an unregister can block behind GPU work that this
 * very thread must drive, docs/design.md); false: nothing registered, the
 * caller frees it now. */
bool pl_pinreg_defer_free(void *p, size_t n, void (*next_free)(void *));

/* The program page-locks [p, p+n) itself (cuMemHostRegister,
 * cudaHostRegister): undo every overlapping shim registration first, so
 * the driver gives the program the answer it would give without the shim,
 * and register none of that memory again while the program's own
 * registration lives. */
void pl_pinreg_yield(uintptr_t p, size_t n);

/* A captured copy or a graph memcpy node refers to [p, p+n): the
 * registrations it covers are never evicted while their memory lives (a
 * graph replays the copy as a pinned one). */
void pl_pinreg_pin_for_graph(uintptr_t p, size_t n);

/* Evict least recently used registrations, idle for at least
 * PL_PIN_IDLE_NS and not held or graph-pinned, until `need` more bytes fit
 * in the budget; false when they cannot (the candidate is staged). */
bool pl_pinreg_make_room(size_t need);

/* A registration overlapping [p, p+n) is being made or undone (the
 * copy's why: PENDING). */
bool pl_pinreg_busy(uintptr_t p, size_t n);
/* Any registration, live or in flight, overlaps [p, p+n). */
bool pl_pinreg_touches(uintptr_t p, size_t n);

/* Bytes registered or being registered now. */
uint64_t pl_pinreg_bytes(void);
/* A registration was ever requested (the COUNTERS record carries them). */
bool pl_pinreg_used(void);

/* The counters of the COUNTERS record (registrations, unregistrations,
 * evictions, failures, time spent registering, bytes now and at most). */
void pl_pinreg_counters(pagelock_rec_counters *c);

/* The native call of a pageable 1D copy c that does not go through a
 * registration, cut where a registration of its allocation (or one of its
 * pieces) would begin and end, so that no part straddles a registered
 * range whatever the shim's thread does meanwhile (the real driver refuses
 * such a copy).  Same entry point, same stream, in order; the first
 * failure is the result.  Here, below the engines, because both the
 * staging engine's fallback and the registration route use it. */
CUresult pl_pinreg_native(pl_copy *c);
/* pl_pinreg_native makes one call of host bytes [h, h+n), uncut: no edge
 * of a registration that may ever be made falls inside them.  Edges
 * depend on the allocation only, so the answer holds until the registry
 * changes. */
bool pl_pinreg_whole(uintptr_t h, size_t n);

/* fork: the child forgets every registration without calling the driver
 * (CUDA is unusable there, and the parent's ranges are the parent's). */
void pl_pinreg_atfork_prepare(void);
void pl_pinreg_atfork_parent(void);
void pl_pinreg_atfork_child(void);

/* Have the shim's thread call fn(arg) soon, off the program's threads:
 * driver work another engine wants done before the program needs it (the
 * staging pool's first chunks, pool.c).  False when it cannot be queued
 * (no thread, exiting, forked child, 8 calls already waiting). */
bool pl_pinreg_post(void (*fn)(void *), void *arg);

/* At exit: nothing new is registered, the thread stops (what is
 * registered stays so: the process is ending, and an undo can wait on GPU
 * work). */
void pl_pinreg_stop(void);

/* A teardown is about to end `ctx` (hook_ctx.c): nothing of the thread's
 * may be half done in it.  Drops the requests not started in it, and waits
 * (2 s at most) for the registration or undo under way in it and for the
 * posted calls (a pool's prewarm pushes its context). */
void pl_pinreg_ctx_ending(CUcontext ctx);
/* `ctx` has ended: the driver undid every registration made in it, so its
 * slots are freed here, without a driver call (a deferred free goes on to
 * the next allocator as an undo's does); one a copy still holds is left to
 * the thread, which makes no driver call for it either. */
void pl_pinreg_ctx_gone(CUcontext ctx);

/* Tests: wait until the shim's thread has nothing queued. */
void pl_pinreg_quiesce_for_test(void);
/* Tests: quiesce, undo every registration, zero the counters, re-read the
 * budget, and turn the engine on again (after pl_pinreg_stop). */
void pl_pinreg_reset_for_test(void);
/* Tests: how long a registration must be idle to be evicted (0: the
 * default, PL_PIN_IDLE_NS). */
void pl_pinreg_set_idle_for_test(uint64_t ns);

#endif
