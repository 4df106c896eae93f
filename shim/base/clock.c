/* clock.c - CLOCK_MONOTONIC, read cheaply.
 *
 * Every copy of the program is timed with two clock reads, and a vDSO
 * clock_gettime costs 21-45 ns in the GPU hosts' VMs: close to half of what
 * the shim adds to a small pageable copy (docs/benchmarks.md).  When the
 * kernel itself keeps CLOCK_MONOTONIC from the TSC (clocksource "tsc",
 * which it chooses only for an invariant TSC that agrees across CPUs), that
 * clock is a linear function of the TSC between the kernel's NTP
 * adjustments, and rdtsc reads it for a fraction of the price.
 *
 * The map is an anchor (tsc, ns, rate) taken from clock_gettime.  A read
 * more than PL_CLK_PERIOD_NS past the anchor takes a new one and measures
 * the rate over the period since the last, so the error stays within what
 * the two clocks can drift apart in one period (the rate is re-measured
 * each time, so an NTP slew is followed within a period), and a new anchor
 * never steps the clock back.  Until a first rate is known (PL_CLK_BASE_NS
 * after load) every read is clock_gettime.
 *
 * Otherwise - another clocksource, not x86-64, or rdtsc no cheaper here
 * (measured once at load: a hypervisor may trap it) - every read is
 * clock_gettime. */
#define _GNU_SOURCE
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "state.h"

#define PL_CLK_PERIOD_NS 100000000ull /* 100 ms: a 0.1 ppm rate error is 10 ns */
#define PL_CLK_BASE_NS 10000000ull    /* the shortest span a rate is measured over */
#define PL_CLK_PAIR_TICKS 20000       /* a (tsc, clock) pair read within this is tight */

/* A seqlock: the one writer (whoever wins pl_clk_busy) makes seq odd while
 * it changes the fields; a reader that saw seq change retries the slow way.
 * ns = ns0 + ((tsc - tsc0) * mult) >> 32; span: ticks the anchor is used for
 * (0 until the first rate is known). */
static _Alignas(64) struct {
  _Atomic unsigned seq;
  _Atomic uint64_t tsc, ns, mult, span;
} pl_clk;
static atomic_flag pl_clk_busy = ATOMIC_FLAG_INIT;
static bool pl_clk_tsc; /* set once, at load, before any thread of ours */

static uint64_t pl_clock_real(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t pl_clk_map(uint64_t d, uint64_t mult) {
  return (uint64_t)(((unsigned __int128)d * mult) >> 32);
}

/* Publish a new anchor (pl_clk_busy held). */
static void pl_clk_set(uint64_t tsc, uint64_t ns, uint64_t mult, uint64_t span) {
  unsigned s = atomic_load_explicit(&pl_clk.seq, memory_order_relaxed);
  /* Release stores (plain moves on x86, and no fence, which TSan cannot
   * follow): a reader that sees a new field also sees the odd seq. */
  atomic_store_explicit(&pl_clk.seq, s + 1, memory_order_relaxed);
  atomic_store_explicit(&pl_clk.tsc, tsc, memory_order_release);
  atomic_store_explicit(&pl_clk.ns, ns, memory_order_release);
  atomic_store_explicit(&pl_clk.mult, mult, memory_order_release);
  atomic_store_explicit(&pl_clk.span, span, memory_order_release);
  atomic_store_explicit(&pl_clk.seq, s + 2, memory_order_release);
}

/* The last real reading the rate was measured from (pl_clk_busy held). */
static uint64_t pl_clk_rt, pl_clk_rn;

/* The slow read: the real clock, and a new anchor when the old one is due
 * and no other thread is making one.  Returns the time now. */
static uint64_t pl_clock_refresh(void) {
  uint64_t t1 = pl_rdtsc(), n = pl_clock_real(), t2 = pl_rdtsc();
  if (atomic_flag_test_and_set_explicit(&pl_clk_busy, memory_order_acquire)) return n;
  uint64_t now = n, t = t1 + (t2 - t1) / 2;
  /* A pair read across a preemption would skew the rate: only a tight
   * pair (a few microseconds at any TSC rate) is used. */
  if (t2 - t1 < PL_CLK_PAIR_TICKS && t > pl_clk_rt && n > pl_clk_rn &&
      n - pl_clk_rn >= PL_CLK_BASE_NS) {
    /* The rate since the last real reading: 32.32 fixed-point ns a tick. */
    uint64_t rate = (uint64_t)(((unsigned __int128)(n - pl_clk_rn) << 32) / (t - pl_clk_rt));
    uint64_t ticks = rate ? (uint64_t)(((unsigned __int128)PL_CLK_PERIOD_NS << 32) / rate) : 0;
    /* Never step back: a reader may already have been given the old map's
     * time for a tick this late.  Start from that instead, and run a little
     * slow so the map meets the real clock at the end of the period.  (A
     * lead of half a period means the clocks no longer agree at all: then
     * take the real time.) */
    uint64_t start = n;
    if (atomic_load_explicit(&pl_clk.span, memory_order_relaxed) != 0) {
      uint64_t t0 = atomic_load_explicit(&pl_clk.tsc, memory_order_relaxed);
      uint64_t v = atomic_load_explicit(&pl_clk.ns, memory_order_relaxed) +
                   pl_clk_map(t - t0, atomic_load_explicit(&pl_clk.mult, memory_order_relaxed));
      if (v > n && v - n < PL_CLK_PERIOD_NS / 2) start = v;
    }
    uint64_t mult =
        ticks ? (uint64_t)(((unsigned __int128)(n + PL_CLK_PERIOD_NS - start) << 32) / ticks) : 0;
    if (mult != 0) {
      pl_clk_set(t, start, mult, ticks);
      now = start;
    }
    pl_clk_rt = t;
    pl_clk_rn = n;
  }
  atomic_flag_clear_explicit(&pl_clk_busy, memory_order_release);
  return now;
}

/* The last time this thread was given from the map.  The slow way can
 * answer with the real clock (another thread is re-anchoring, or the pair
 * read was preempted), which may be a few tens of ns behind the map's
 * last answer: a thread's clock must not step back for that. */
static PL_TLS uint64_t pl_clk_last;

/* The time now; *mult gets the map's rate when the TSC was read through
 * it (the tick in *tick), else 0. */
static inline uint64_t pl_clock_read(uint64_t *tick, uint64_t *mult) {
  *mult = 0;
  if (!pl_clk_tsc) return pl_clock_real();
  unsigned s = atomic_load_explicit(&pl_clk.seq, memory_order_acquire);
  /* Acquire loads keep the second read of seq after them. */
  uint64_t t0 = atomic_load_explicit(&pl_clk.tsc, memory_order_acquire);
  uint64_t n0 = atomic_load_explicit(&pl_clk.ns, memory_order_acquire);
  uint64_t m = atomic_load_explicit(&pl_clk.mult, memory_order_acquire);
  uint64_t span = atomic_load_explicit(&pl_clk.span, memory_order_acquire);
  uint64_t t = pl_rdtsc();
  /* t < t0 (an anchor newer than our tick) wraps to a huge distance and
   * takes the slow way too. */
  if (PL_LIKELY(!(s & 1) && atomic_load_explicit(&pl_clk.seq, memory_order_relaxed) == s &&
                t - t0 < span)) {
    *tick = t;
    *mult = m;
    uint64_t v = n0 + pl_clk_map(t - t0, m);
    return pl_clk_last = v > pl_clk_last ? v : pl_clk_last;
  }
  uint64_t v = pl_clock_refresh();
  return pl_clk_last = v > pl_clk_last ? v : pl_clk_last;
}

uint64_t pl_now_ns(void) {
  uint64_t tick, mult;
  return pl_clock_read(&tick, &mult);
}

void pl_stamp_start(pl_stamp *st) { st->ns = pl_clock_read(&st->tick, &st->mult); }

uint64_t pl_stamp_elapsed_slow(const pl_stamp *st) {
  uint64_t now = pl_now_ns();
  return now > st->ns ? now - st->ns : 0;
}

/* The kernel's clocksource is the TSC. */
static bool pl_clk_kernel_tsc(void) {
  char b[16];
  long n = pl_read_small_file("/sys/devices/system/clocksource/clocksource0/current_clocksource", b,
                              sizeof b);
  return n >= 3 && memcmp(b, "tsc", 3) == 0 && (n == 3 || b[3] == '\n');
}

/* rdtsc costs less than three quarters of a clock_gettime here (best of
 * three rounds of 16 reads each: a hypervisor that traps rdtsc shows at
 * once, and a preemption in one round does not decide). */
static uint64_t pl_clk_cost_clock, pl_clk_cost_tsc; /* ns per 16 reads, best of 3 */
static bool pl_clk_rdtsc_cheaper(void) {
  uint64_t best_clock = UINT64_MAX, best_tsc = UINT64_MAX;
  volatile uint64_t sink = 0;
  for (int r = 0; r < 3; r++) {
    uint64_t a = pl_clock_real();
    for (int i = 0; i < 16; i++) sink += pl_clock_real();
    uint64_t b = pl_clock_real();
    for (int i = 0; i < 16; i++) sink += pl_rdtsc();
    uint64_t c = pl_clock_real();
    if (b - a < best_clock) best_clock = b - a;
    if (c - b < best_tsc) best_tsc = c - b;
  }
  (void)sink;
  pl_clk_cost_clock = best_clock;
  pl_clk_cost_tsc = best_tsc;
  return best_tsc * 4 < best_clock * 3;
}

bool pl_span_tsc;
/* The TSC and the clock when the map started: a rate for pl_span_ns in a
 * process too short for the map to have one. */
static uint64_t pl_clk_t_load, pl_clk_n_load;

/* Start mapping: no rate yet, so reads take the real clock until one is
 * measured over PL_CLK_BASE_NS. */
static void pl_clk_start(void) {
  pl_clk_set(0, 0, 0, 0);
  pl_clk_rt = pl_clk_t_load = pl_rdtsc();
  pl_clk_rn = pl_clk_n_load = pl_clock_real();
  pl_clk_tsc = true;
}

uint64_t pl_span_ns(uint64_t sum) {
  if (!pl_span_tsc) return sum;
  (void)pl_now_ns(); /* a rate, where the process has run long enough */
  uint64_t m = atomic_load_explicit(&pl_clk.mult, memory_order_acquire);
  if (atomic_load_explicit(&pl_clk.span, memory_order_acquire) != 0 && m != 0)
    return pl_clk_map(sum, m);
  uint64_t t = pl_rdtsc(), n = pl_clock_real();
  if (t <= pl_clk_t_load || n <= pl_clk_n_load) return 0;
  return (uint64_t)((unsigned __int128)sum * (n - pl_clk_n_load) / (t - pl_clk_t_load));
}

void pl_clock_init(void) {
#if defined(__x86_64__)
  bool tsc = pl_clk_kernel_tsc();
  if (tsc && pl_clk_rdtsc_cheaper()) pl_clk_start();
  pl_span_tsc = pl_clk_tsc;
  if (!tsc)
    pl_log(PL_LOG_DEBUG, PL_LK_CONFIG,
           "timing with clock_gettime: the kernel's clocksource is not the TSC");
  else
    pl_log(PL_LOG_DEBUG, PL_LK_CONFIG,
           "timing with %s: a read costs %.1f ns with rdtsc, %.1f ns with clock_gettime",
           pl_clk_tsc ? "the TSC" : "clock_gettime", (double)pl_clk_cost_tsc / 16,
           (double)pl_clk_cost_clock / 16);
#endif
}

bool pl_clock_uses_tsc(void) { return pl_clk_tsc; }

bool pl_clock_calibrated(void) { return pl_clk_tsc && atomic_load(&pl_clk.span) != 0; }

bool pl_clock_use_tsc_for_test(bool on) {
#if defined(__x86_64__)
  if (on)
    pl_clk_start();
  else
    pl_clk_tsc = false;
  return true;
#else
  return !on;
#endif
}
