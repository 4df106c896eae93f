/* autopin.h - which copies go through a registration of the shim's own
 * (autopin.c, over pinreg.c), for PAGELOCK_MODE register and auto, and how
 * such a copy keeps the contract. */
#ifndef PL_AUTOPIN_H
#define PL_AUTOPIN_H

#include "pinreg.h"
#include "route.h"

/* `ctx` has ended: the events kept for it died with it, and so did its
 * registrations (pl_pinreg_ctx_gone). */
void pl_autopin_ctx_gone(CUcontext ctx);

/* What the route (route.h) found out about one copy by asking the
 * engines, and what the asking took: the hold of a registration (HOLD,
 * FOLLOW), and the registration to ask for once the copy is done (ROOM). */
typedef struct pl_autopin_probe {
  pl_pin_use use;
  uintptr_t h;             /* the copy's host bytes */
  uintptr_t abase, lo, hi; /* SPAN: their allocation, and the part of it a
                              registration covers (pl_reg_span) */
  size_t alen;
  const pl_drv *d; /* CTX */
  CUcontext ctx;
} pl_autopin_probe;
/* Before the first question about a copy whose host bytes start at h. */
void pl_autopin_probe_begin(pl_autopin_probe *p, uintptr_t h);
/* Answer the route's question `ask` (PL_ASK_*) about copy c into *in.
 * HOLD and FOLLOW may hold a registration (p->use), HOT adds the copy's
 * bytes to its allocation's heat, ROOM may evict, FOLLOW waits up to 3 ms
 * for a registration's first pieces. */
void pl_autopin_answer(pl_route_in *in, int ask, const pl_copy *c, pl_autopin_probe *p);

/* After c took a route that asks for a registration (pl_route's
 * `request`), staged or passed: ask for it; c->why says BUDGET when it
 * could not be queued. */
void pl_autopin_after(pl_copy *c, pl_pin_use *use);

/* Run c through the registration in *use, keeping the contract: the
 * bytes outside the registered interior (the allocation's partial first and
 * last pages) go through the native call, in stream order; a
 * host-to-device copy returns once the DMA has read the source (unless
 * PAGELOCK_H2D=async), a device-to-host copy once the data is in the buffer
 * (unless PAGELOCK_D2H=async).  Releases *use.  *r is what the program
 * must see. */
void pl_autopin_copy(pl_copy *c, pl_pin_use *use, CUresult *r);

/* After a native or staged asynchronous copy c whose host side is
 * [host, host+n): if a shim registration (live or in flight) overlaps it,
 * the driver may still be reading or writing those bytes, which a pageable
 * copy never does after returning; wait as pl_autopin_copy does (or, on a
 * capturing stream, pin the registration for the graph). */
void pl_autopin_settle(pl_copy *c, uintptr_t host, size_t n);

/* The program's thread is about to wait for the GPU (a synchronize call,
 * hook_sync.c): returns the time to hand to pl_autopin_wait_end, or 0 when
 * no upload of the thread's may still be running its tail. */
uint64_t pl_autopin_wait_begin(void);
/* The wait that began at t0 (pl_autopin_wait_begin, or a copy call's
 * start) is over: it is left out of the thread's turnaround. */
void pl_autopin_wait_end(uint64_t t0);

/* Tests: forget every allocation's heat, and the calling thread's
 * turnaround (the tail's size). */
void pl_autopin_reset_for_test(void);
/* Tests: how long a copy waits for the next piece of a registration it
 * follows (0: the default). */
void pl_autopin_set_follow_wait_for_test(uint64_t ns);

#endif
