/* report.h - every writer's entry point: text, JSON, the two that show
 * time (a self-contained HTML page with a timeline, a Chrome trace-event
 * file for Perfetto or chrome://tracing) and compare's.
 *
 * The writers print what the analysis computed; they read records only
 * through the walk (walk.h).  The views take the processes already loaded
 * and analysed (plr_process, and the GPU report when there is one) plus a
 * plr_source per process, because the timeline needs every call and GPU op
 * and they re-read the trace rather than keep them in memory. */
#ifndef PLR_REPORT_H
#define PLR_REPORT_H

#include <stddef.h>
#include <stdio.h>

#include "analysis.h"
#include "compare.h"
#include "gpu_analysis.h"
#include "walk.h"

/* The text report of n processes, then totals and a per-rank table when
 * n > 1.  Colour only when out is a terminal and NO_COLOR is unset. */
void plr_report_text(FILE *out, const plr_process *ps, size_t n);

/* The JSON report (schema in docs/trace-format.md). */
void plr_report_json(FILE *out, const plr_process *ps, size_t n);

/* Writes one HTML page for n processes: per process a summary (GPU timing
 * status, verdicts and per-device tables from ps[i].gpu, which shrink to
 * the status line when the trace has no GPU data; copy totals; call-site
 * tables) and an SVG timeline per device.  src[i] is where ps[i]'s trace
 * can be read again. */
void plr_report_html(FILE *out, const plr_process *ps, const plr_source *src, size_t n);

/* Writes {"traceEvents":[...]} for n processes: one pid per process, one
 * track per GPU stream and per host thread, complete events for copy calls
 * and GPU ops and flow arrows from each call to its GPU op(s).  Events are
 * streamed as the traces are re-read. */
void plr_report_chrome(FILE *out, const plr_process *ps, const plr_source *src, size_t n);

/* compare's one-line verdict ("after: 2.4x less host time blocked in
 * copies, 0.86x the wall time", or "after is slower: ..."), and the two
 * after/before ratios it judges: -1 not comparable, HUGE_VAL when only
 * the after run has any. */
typedef struct plr_cmp_verdict {
  char text[256];
  double wall, blocked;
  int slower;
} plr_cmp_verdict;
void plr_compare_verdict(const plr_compare_side *before, const plr_compare_side *after,
                         plr_cmp_verdict *v);

/* --fail-if-worse=pct: 1 with why ("the after run's wall time is 12.0%
 * worse than the before run's") when the wall time or the host time
 * blocked in copies grew by more than pct percent, else 0. */
int plr_compare_worse(const plr_cmp_verdict *v, double pct, char *why, size_t len);

/* Writes the comparison of two sides to out: the verdict, then an aligned
 * table with after/before ratios, or (json) one object. */
void plr_compare_write(FILE *out, int json, const plr_compare_side *before,
                       const plr_compare_side *after);

#endif
