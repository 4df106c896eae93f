/* walk.h - the trace as a stream of timed events, for the writers that
 * draw time (HTML timeline, Chrome trace) and for compare's bandwidths.
 *
 * plr_trace aggregates and forgets each COPY; these writers need every call
 * and GPU op with its times.  Rather than hold them, they read the file
 * again, once per pass, through plr_walk: memory stays bounded by the
 * distinct kernel names, whatever the length of the trace. */
#ifndef PLR_WALK_H
#define PLR_WALK_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "pagelock/trace_format.h"

/* Where a trace's bytes are, so a writer can read them again: a file, or
 * (fuzzer, tests) a buffer in memory. */
typedef struct plr_source {
  const char *path; /* file to open when data is NULL */
  const void *data; /* bytes of the trace, or NULL */
  size_t len;
} plr_source;

/* A new read-only stream over src, or NULL (errno set).  A path is opened
 * with plr_open_trace: anything but a regular file fails at once (EINVAL),
 * never blocks. */
FILE *plr_source_open(const plr_source *src);

typedef enum plr_ev_kind {
  PLR_EV_CALL = 1, /* a host copy call (COPY record) */
  PLR_EV_GPU,      /* a GPU activity (GPU record) */
  PLR_EV_LINK,     /* a shim-issued GPU op belongs to an app call (LINK) */
  PLR_EV_DEVICE,   /* a device's properties (DEVICE record) */
} plr_ev_kind;

/* One event.  Pointers alias the reader's buffer: valid during the
 * callback only. */
typedef struct plr_event {
  plr_ev_kind kind;
  /* CALL: start_ns .. start_ns + host_ns (a run of copies, COPY count
   * above 1: its first copy's start and its summed host time; the trace
   * has no time of the others).  GPU: start/end converted to
   * CLOCK_MONOTONIC through the last CLOCK record seen, end >= start. */
  uint64_t start, end;
  const pagelock_rec_copy *copy;     /* CALL */
  const pagelock_rec_gpu *gpu;       /* GPU */
  const pagelock_rec_link *link;     /* LINK */
  const pagelock_rec_device *device; /* DEVICE */
  const char *name;                  /* GPU kernel: its NAME, else NULL; DEVICE: its name */
} plr_event;

/* Called per event; a nonzero return stops the walk (and is returned). */
typedef int (*plr_event_fn)(void *ctx, const plr_event *ev);

/* Reads the trace at src from the start and hands each event to fn, in
 * file order.  Returns 0 after the last readable record (a truncated or
 * corrupt tail just ends the walk: plr_trace_load already warned), -1 when
 * the trace cannot be opened or memory ran out, or fn's nonzero value. */
int plr_walk(const plr_source *src, plr_event_fn fn, void *ctx);

#endif
