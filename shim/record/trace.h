/* trace.h - the per-process trace file (trace.c). */
#ifndef PL_TRACE_H
#define PL_TRACE_H

#include <signal.h>

#include "pl_internal.h"

/* Append one record; the file is created on first use.  Never blocks on
 * anything but the trace lock and write(2). */
void pl_trace_write(const void *rec, size_t size);
/* The per-copy path's variant: a slot of `size` bytes (a multiple of 8)
 * in the buffer, with the trace lock held, for the caller to fill in
 * place, every byte, and hand back with pl_trace_commit(); NULL, lock not
 * held, when nothing is being traced.  Fill it without taking any other
 * lock. */
void *pl_trace_reserve(size_t size);
void pl_trace_commit(void);
/* The COPY record's own way (once per copy of the program): a slot in the
 * calling thread's ring, to fill in place, every byte, and hand back with
 * pl_trace_copy_end(); NULL when nothing is being traced.  Takes no lock
 * (except once per thread and once per ring-full); the record reaches the
 * file in a batch, within a second. */
pagelock_rec_copy *pl_trace_copy_begin(void);
void pl_trace_copy_end(void);
/* A whole COPY record, made elsewhere (a run's, run.h), the same way. */
void pl_trace_copy_put(const pagelock_rec_copy *rec);
/* Append several whole records at once (one lock round). */
void pl_trace_write_many(const void *recs, size_t size);
/* Append a record made of a fixed part and a NUL-terminated string. */
void pl_trace_write_str(const void *fixed, size_t fixed_size, uint32_t type, const char *str);
/* At exit: begin writes the MODULE records and returns true when the trace
 * is open; the caller then writes what the modules above know (symbols,
 * counters: init.c's pl_exit_trace), and end writes END and flushes. */
bool pl_trace_finish_begin(void);
void pl_trace_finish_end(void);
/* fork: hold the trace lock across fork; the child drops the parent's file
 * and buffer and starts afresh. */
void pl_trace_atfork_prepare(void);
void pl_trace_atfork_parent(void);
void pl_trace_atfork_child(void);
/* Tests: stop the writer thread once it has written what it was handed,
 * then forget the file, as a forked child does. */
void pl_trace_reset_for_test(void);
/* Tests: let at most n threads have a ring (the rest write through the
 * shared buffer). */
void pl_trace_rings_for_test(unsigned n);
/* Tests: drain every ring and run now, as the writer does once a second. */
void pl_trace_drain_for_test(void);
/* A writer thread writes the trace (false: the filling threads do). */
bool pl_trace_writer_running(void);
/* Take the start timestamps (at load). */
void pl_trace_init_clock(void);
/* Expand %p %h %r %% in pattern into out; false if it does not fit. */
bool pl_trace_expand(const char *pattern, char *out, size_t outsz);
/* CLOCK_MONOTONIC when the shim was loaded (or the fork child started). */
uint64_t pl_trace_start_ns(void);
/* The path of the open trace file ("" if none yet). */
const char *pl_trace_path(void);
/* A note for the report (once per text). */
void pl_trace_note(uint32_t kind, const char *text);

/* The trace's descriptor, for the close/dup wrappers of hook_fd.c.  The
 * number is published so that every close(2) of the program pays one
 * relaxed load and one compare; -1 while there is none (no file yet, a
 * forked child, a stopped trace). */
extern _Atomic int pl_trace_fd;
/* fd is the trace's number and still holds the trace's file (fstat): the
 * program never opened it, and closing it is for the program as closing a
 * number that is not open. */
bool pl_trace_fd_owned(int fd);
/* The wrappers' slow path, for a call that names or covers the trace's
 * number: returns that number with the descriptor locked (the writer
 * waits) and this thread's signals blocked into *saved, or -1, holding
 * nothing, when this process has no trace descriptor (a vfork child shares
 * our memory but not our descriptor table). */
int pl_trace_fd_lock(sigset_t *saved);
void pl_trace_fd_unlock(const sigset_t *saved);
/* Locked: the program is about to put its own file at the trace's number
 * (dup2/dup3): the trace moves to another number.  The old number still
 * holds the trace's file until the program's call replaces it; if that
 * call fails, the caller closes it, as it would not have been open. */
void pl_trace_fd_move(void);

#endif
