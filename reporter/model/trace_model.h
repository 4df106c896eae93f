/* trace_model.h - one trace file read and aggregated as it streams
 * (what it holds: trace_data.h), and the questions the report asks of it. */
#ifndef PLR_TRACE_MODEL_H
#define PLR_TRACE_MODEL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "trace_data.h"

/* Reads and aggregates path (opened with plr_open_trace: a FIFO or any
 * other file that is not regular is refused at once).  Returns 0 when the
 * file is a trace (the result may still be partial: see
 * plr_trace_partial), -1 when it cannot be reported at all; msg then holds
 * the reason without the "pagelock: " prefix.  t must be plr_trace_free'd
 * after a 0 return only. */
int plr_trace_load(plr_trace *t, const char *path, char *msg, size_t len);

/* Same over an open stream (taken over and closed), for tests; path is the
 * name used in messages. */
int plr_trace_load_stream(plr_trace *t, FILE *f, const char *path, char *msg, size_t len);

/* 1 when the writer did not close the trace cleanly, or said in the header
 * that it stopped writing early. */
int plr_trace_partial(const plr_trace *t);

/* Why the writer stopped early, from the header's stop flags: "the disk
 * filled up", "a write to the trace failed", "the program closed the shim's
 * trace file"; NULL when no flag says. */
const char *plr_trace_stop_reason(const plr_trace *t);

/* How the trace ends, one word for JSON: "end" (closed cleanly),
 * "disk-full", "write-error", "fd-lost" (the header's stop flags), "no-end"
 * (the file ends between records, without END: the program may have died),
 * "truncated" (inside a record), "corrupt" (a record size no writer
 * produces), "damaged" (a checksummed block failed its check),
 * "read-error". */
const char *plr_trace_end_name(const plr_trace *t);

/* Writes why the trace is partial (no prefix): "'f' is corrupt from byte N
 * (...); the report covers ...", or "'f' ends after N complete records
 * (the disk filled up): report is partial", or "... (the program may have
 * died) ..."; an empty string when it is not partial. */
void plr_trace_partial_message(const plr_trace *t, char *buf, size_t len);

const plr_stack *plr_trace_stack(const plr_trace *t, uint32_t id);

/* The module whose executable range holds addr, or NULL. */
const plr_module *plr_trace_module(const plr_trace *t, uint64_t addr);

void plr_trace_free(plr_trace *t);

/* The kernel name of a NAME id, or NULL. */
const char *plr_trace_kernel_name(const plr_trace *t, uint32_t id);

/* 1 when the report should say which route copies took: the mode
 * registers (register, auto), or some copy was staged or registered. */
int plr_trace_shows_routes(const plr_trace *t);

/* 1 when the report should say why pageable copies were not registered:
 * the mode is register or auto. */
int plr_trace_shows_why(const plr_trace *t);

#endif
