/* clock.h - time (clock.c): CLOCK_MONOTONIC read from the TSC where the
 * kernel's own clock is, and timing one call for the copy path (its end is
 * inline and reads clock.c's map). */
#ifndef PL_CLOCK_H
#define PL_CLOCK_H

#include "pl_defs.h"

/* Decide once, at load, how pl_now_ns reads the clock. */
void pl_clock_init(void);
/* CLOCK_MONOTONIC in nanoseconds, from the TSC when the kernel's own clock
 * is (a few ns per read instead of a clock_gettime).  Never steps back on
 * one thread; across threads, reads agree to within a few tens of ns. */
uint64_t pl_now_ns(void);

#if defined(__x86_64__)
static inline uint64_t pl_rdtsc(void) {
  uint32_t lo, hi;
  __asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
  return ((uint64_t)hi << 32) | lo;
}
#else
static inline uint64_t pl_rdtsc(void) { return 0; }
#endif
/* Timing one call: its start, and the map that timed it.  The end is read
 * against the same map, so it costs an rdtsc and a multiply (the call is
 * far shorter than the map's period, and the rate is the same). */
typedef struct pl_stamp {
  uint64_t ns;   /* the start, as pl_now_ns */
  uint64_t tick; /* the TSC at the start, when mult != 0 */
  uint64_t mult; /* ns per tick, 32.32 fixed point; 0: read the clock again */
} pl_stamp;
void pl_stamp_start(pl_stamp *st);
uint64_t pl_stamp_elapsed_slow(const pl_stamp *st);
/* Nanoseconds since pl_stamp_start(st); never negative. */
static inline uint64_t pl_stamp_elapsed(const pl_stamp *st) {
  if (PL_LIKELY(st->mult != 0))
    return (uint64_t)(((unsigned __int128)(pl_rdtsc() - st->tick) * st->mult) >> 32);
  return pl_stamp_elapsed_slow(st);
}
/* Spans summed over many calls (what finding call sites cost): raw TSC
 * ticks where the clock maps the TSC (chosen at load), so that a span
 * costs two rdtsc, else nanoseconds; pl_span_ns turns a sum into
 * nanoseconds when it is written. */
extern bool pl_span_tsc;
static inline uint64_t pl_span_now(void) { return pl_span_tsc ? pl_rdtsc() : pl_now_ns(); }
uint64_t pl_span_ns(uint64_t sum);
/* True when pl_now_ns maps the TSC; calibrated: and reads it (a rate is
 * known). */
bool pl_clock_uses_tsc(void);
bool pl_clock_calibrated(void);
/* Tests: map the TSC (from now, with no rate yet) or stop; false when this
 * machine cannot. */
bool pl_clock_use_tsc_for_test(bool on);

#endif
