/* stack.h - call stacks (stack.c): captured, interned, and told again
 * without unwinding. */
#ifndef PL_STACK_H
#define PL_STACK_H

#include "pl_internal.h"
#include "run.h" /* pl_stack_check */

/* Capture the caller's stack (skipping `skip` shim frames) and intern it.
 * Returns its id (>0), or 0 when stacks are off or the table is full.
 * Writes nothing: see pl_stack_emit. */
uint32_t pl_stack_capture(int skip);
/* pl_stack_capture, memoised per thread on (return address ra of the hooked call,
 * caller's stack pointer sp, and the frames above, read again): a repeat
 * of the same call path costs a few nanoseconds instead of an unwind.
 * *check (when not NULL) gets what tells this call path again: n 0 when
 * there is no stack, PL_CHECK_NONE when it cannot be told (not yet known,
 * or not on the thread's own stack: a coroutine's, a signal stack). */
uint32_t pl_stack_capture_at(int skip, const void *ra, const void *sp, pl_stack_check *check);
/* A one-frame stack: just ra, with the calling thread's Python frames.
 * For the mmap family, which may be entered by an allocator holding its
 * own mutex: no unwinding, no lock, no allocation (interning is
 * lock-free).  0 when stacks are off. */
uint32_t pl_stack_capture_ra(const void *ra);
/* At load: what finding the main thread's stack needs (its thread, the
 * stack limit). */
void pl_stack_init(void);
/* Unwind once, at load, so that the unwinder's first look at the loaded
 * objects (which may allocate) happens before any hook unwinds. */
void pl_stack_warm(void);
/* A NOTE for the trace, written just before its first STACK record (each
 * trace: a forked child's too): about allocation sites, so it goes exactly
 * into the traces that could show one, and opens no file by itself. */
void pl_stack_note(uint32_t kind, const char *text);
/* Make sure stack `id`'s STACK record is in the trace (before a record
 * that refers to it).  id 0 is ignored. */
void pl_stack_emit(uint32_t id);
void pl_stack_atfork_prepare(void);
void pl_stack_atfork_parent(void);
/* Write SYMBOL records for every interned frame (at exit). */
void pl_stack_write_symbols(void);
/* Whether this thread runs a signal handler: a frame the kernel built for
 * one lies below the caller (up to 128 frames down). */
bool pl_stack_in_handler(void);
/* At exit too: the COST record, what the captures cost the program's
 * threads (none when nothing was captured). */
void pl_stack_write_cost(void);
/* Forget all stacks (a forked child starts a new trace). */
void pl_stack_reset(void);

#endif
