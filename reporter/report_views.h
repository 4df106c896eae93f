/* report_views.h - the writers that show time: a self-contained HTML page
 * with a timeline, and a Chrome trace-event file (Perfetto, chrome://tracing).
 *
 * Both take the processes already loaded and analysed (plr_process, and the
 * GPU report when there is one) plus a plr_source per process, because the
 * timeline needs every call and GPU op and they re-read the trace rather
 * than keep them in memory. */
#ifndef PLR_REPORT_VIEWS_H
#define PLR_REPORT_VIEWS_H

#include <stddef.h>
#include <stdio.h>

#include "analysis.h"
#include "gpu_analysis.h"
#include "timeline.h"

/* Writes one HTML page for n processes: per process a summary (GPU timing
 * status, verdicts and per-device tables from ps[i].gpu, which shrink to
 * the status line when the trace has no GPU data; copy totals; call-site
 * tables) and an SVG timeline per device.  src[i] is where ps[i]'s trace
 * can be read again. */
void plr_report_html(FILE *out, const plr_process *ps, const plr_source *src,
                     size_t n);

/* Writes {"traceEvents":[...]} for n processes: one pid per process, one
 * track per GPU stream and per host thread, complete events for copy calls
 * and GPU ops and flow arrows from each call to its GPU op(s).  Events are
 * streamed as the traces are re-read. */
void plr_report_chrome(FILE *out, const plr_process *ps,
                       const plr_source *src, size_t n);

#endif
