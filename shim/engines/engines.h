/* engines.h - the engines' one face to the hooks and to start-up
 * (engines.c): what the driver's context events mean to them, their
 * COUNTERS record, shutdown and fork.  No engine calls it: it calls them,
 * so that none has to call another sideways or up for these (the staging
 * engine used to, for the registrations' context events and counters).
 * The copies reach the engines through the route (copy.c), the release
 * hooks the registrations directly (pinreg.h), being theirs alone. */
#ifndef PL_ENGINES_H
#define PL_ENGINES_H

#include "pl_internal.h"

/* The driver is initialized (cuInit succeeded): in the modes that stage
 * or register, the pool's first memory is prepared (pool.c). */
void pl_engines_driver_init(void);
/* The program allocated device memory in the current context: in those
 * modes, the context's pool starts building (pool.c). */
void pl_engines_device_alloc(void);
/* A teardown is about to end `ctx` (hook_ctx.c): the shim's thread
 * finishes what it does there first (pinreg.c).  Then, once it has ended,
 * what the engines made in it is forgotten without a driver call: the
 * pools' chunks, cached events, registrations (pool.c, autopin.c,
 * pinreg.c). */
void pl_engines_ctx_ending(CUcontext ctx);
void pl_engines_ctx_gone(CUcontext ctx);
/* Write the engines' COUNTERS record, and the staging engine's note on
 * crowded copies, when they ever ran (at exit, before END). */
void pl_engines_write_counters(void);
/* At exit: nothing new is registered, the shim's thread stops (pinreg.c). */
void pl_engines_stop(void);
/* Whether this thread may take the shim's locks and call the driver: not
 * inside the shim (a signal handler that interrupted it), not on a host
 * function's thread (pinreg.c). */
bool pl_engines_may_wait(void);
/* fork: the registrations' lock is held across it; a child turns the
 * engines off (CUDA is unusable there) and forgets the parent's
 * registrations without calling the driver. */
void pl_engines_atfork_prepare(void);
void pl_engines_atfork_parent(void);
void pl_engines_atfork_child(void);

#endif
