/* report_text.c - the human-readable report. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "analysis.h"
#include "util.h"

/* Rows shown per table before "... N more". */
#define PLR_TABLE_ROWS 20

/* Prints the (direction, host memory) table of non-empty buckets. */
static void plr_print_split(FILE *out, const plr_totals *tot) {
  static const unsigned dirs[] = {PAGELOCK_DIR_H2D, PAGELOCK_DIR_D2H,
                                  PAGELOCK_DIR_D2D, PAGELOCK_DIR_H2H,
                                  PAGELOCK_DIR_UNKNOWN};
  int header = 0;
  for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
    for (unsigned m = 0; m < PLR_NMEM; m++) {
      const plr_bucket *b = &tot->by[dirs[i]][m];
      if (!b->count) continue;
      if (!header) {
        fprintf(out, "  %-7s  %-10s  %8s  %10s  %12s\n", "dir", "host mem",
                "copies", "bytes", "host time");
        header = 1;
      }
      char by[32], ms[32];
      plr_fmt_bytes(b->bytes, by, sizeof by);
      plr_fmt_ms(b->host_ns, ms, sizeof ms);
      fprintf(out, "  %-7s  %-10s  %8" PRIu64 "  %10s  %9s ms\n",
              plr_dir_name(dirs[i]), plr_mem_name(m), b->count, by, ms);
    }
  }
}

/* The totals block: overall line, split table, then one line per
 * noteworthy count that is non-zero. */
static void plr_print_totals(FILE *out, const plr_totals *tot) {
  char by[32], ms[32];
  plr_fmt_bytes(tot->all.bytes, by, sizeof by);
  plr_fmt_ms(tot->all.host_ns, ms, sizeof ms);
  fprintf(out, "copies: %" PRIu64 " calls, %s, %s ms of host time inside "
          "copy calls\n", tot->all.count, by, ms);
  plr_print_split(out, tot);
  if (tot->pageable_async.count) {
    plr_fmt_ms(tot->pageable_async.host_ns, ms, sizeof ms);
    fprintf(out,
            "%" PRIu64 " async copies were made synchronous by pageable "
            "memory, blocking the host %s ms\n",
            tot->pageable_async.count, ms);
  }
  if (tot->staged.count) {
    plr_fmt_bytes(tot->staged.bytes, by, sizeof by);
    plr_fmt_ms(tot->staged.host_ns, ms, sizeof ms);
    fprintf(out,
            "%" PRIu64 " pageable copies (%s) were staged through pinned "
            "memory, %s ms of host time\n",
            tot->staged.count, by, ms);
  }
  if (tot->registered)
    fprintf(out, "%" PRIu64 " copies used host memory page-locked by "
            "pagelock\n", tot->registered);
  if (tot->fallbacks)
    fprintf(out, "%" PRIu64 " copies fell back to the native call "
            "(staging gave up)\n", tot->fallbacks);
  if (tot->captured)
    fprintf(out, "%" PRIu64 " copies were on a capturing stream (left "
            "untouched)\n", tot->captured);
  if (tot->graph_nodes)
    fprintf(out, "%" PRIu64 " graph memcpy nodes were defined, %" PRIu64
            " of them with a pageable host side (graphs are left as built; "
            "each launch copies again)\n", tot->graph_nodes, tot->graph_nodes_pageable);
  if (tot->failed)
    fprintf(out, "%" PRIu64 " copies returned a CUDA error to the "
            "program\n", tot->failed);
}

/* One formatted table cell set, so widths can be measured first. */
typedef struct plr_cells {
  char count[24], bytes[32], ms[32], gbps[32], dirs[48], site[1024];
} plr_cells;

/* Formats every cell of one table row into c. */
static void plr_row_cells(const plr_row *r, plr_cells *c) {
  snprintf(c->count, sizeof c->count, "%" PRIu64, r->b.count);
  plr_fmt_bytes(r->b.bytes, c->bytes, sizeof c->bytes);
  plr_fmt_ms(r->b.host_ns, c->ms, sizeof c->ms);
  plr_fmt_gbps(r->b.bytes, r->b.host_ns, c->gbps, sizeof c->gbps);
  plr_fmt_dirs(r->dirs, c->dirs, sizeof c->dirs);
  plr_site_format(r->frame, r->addr, c->site, sizeof c->site);
}

/* Column width: the larger of a and a cell length. */
static int plr_max(int a, size_t b) { return (size_t)a > b ? a : (int)b; }

/* One site table, columns sized to the rows shown, at most
 * PLR_TABLE_ROWS rows then a "... N more" summary of the rest. */
static void plr_print_table(FILE *out, const char *title, const char *what,
                            const plr_rows *rows) {
  if (!rows->n) return;
  size_t shown = rows->n < PLR_TABLE_ROWS ? rows->n : PLR_TABLE_ROWS;
  plr_cells c;
  int wc = 5, wb = 5, wm = 12, wg = 4, wd = 3;
  for (size_t i = 0; i < shown; i++) {
    plr_row_cells(&rows->v[i], &c);
    wc = plr_max(wc, strlen(c.count));
    wb = plr_max(wb, strlen(c.bytes));
    wm = plr_max(wm, strlen(c.ms));
    wg = plr_max(wg, strlen(c.gbps));
    wd = plr_max(wd, strlen(c.dirs));
  }
  fprintf(out, "\n%s:\n", title);
  fprintf(out, "  %*s  %*s  %*s  %*s  %-*s  %s\n", wc, "count", wb, "bytes",
          wm, "host blocked", wg, "GB/s", wd, "dir", what);
  for (size_t i = 0; i < shown; i++) {
    plr_row_cells(&rows->v[i], &c);
    char ms[40];
    snprintf(ms, sizeof ms, "%s ms", c.ms);
    fprintf(out, "  %*s  %*s  %*s  %*s  %-*s  %s\n", wc, c.count, wb,
            c.bytes, wm, ms, wg, c.gbps, wd, c.dirs, c.site);
  }
  if (rows->n > shown) {
    plr_bucket rest = {0, 0, 0};
    for (size_t i = shown; i < rows->n; i++) plr_bucket_add(&rest, &rows->v[i].b);
    char ms[32];
    plr_fmt_ms(rest.host_ns, ms, sizeof ms);
    fprintf(out, "  ... %zu more (%" PRIu64 " copies, %s ms)\n",
            rows->n - shown, rest.count, ms);
  }
}

/* The staging engine counters, one line. */
static void plr_print_counters(FILE *out, const pagelock_rec_counters *c) {
  char staged[32], pass[32], hw[32], pool[32], reg[32], ms[32];
  plr_fmt_bytes(c->bytes_staged, staged, sizeof staged);
  plr_fmt_bytes(c->bytes_passthrough, pass, sizeof pass);
  plr_fmt_bytes(c->pool_high_water, hw, sizeof hw);
  plr_fmt_bytes(c->pool_bytes, pool, sizeof pool);
  plr_fmt_bytes(c->registered_bytes_high_water, reg, sizeof reg);
  plr_fmt_ms(c->wait_ns, ms, sizeof ms);
  fprintf(out,
          "\nstaging: %s staged, %s passed through, %" PRIu64
          " fallbacks, %" PRIu64 " waits for a pool slot (%s ms), pool "
          "high water %s of %s",
          staged, pass, c->fallbacks, c->waits, ms, hw, pool);
  if (c->registered_bytes_high_water)
    fprintf(out, ", registered high water %s", reg);
  fputc('\n', out);
}

/* One line telling the user what to do about what the trace shows. */
static void plr_print_advice(FILE *out, const plr_trace *t) {
  const plr_totals *tot = &t->tot;
  if (!tot->pageable.count) {
    fprintf(out, "advice: no copy used pageable host memory: nothing for "
            "pagelock to fix.\n");
    return;
  }
  if (tot->staged.count && tot->staged.count == tot->pageable.count) {
    fprintf(out,
            "advice: pagelock staged every pageable copy; to get the same "
            "speed without it, allocate these buffers with "
            "cudaHostAlloc/cudaMallocHost (or torch pin_memory()).\n");
    return;
  }
  if (t->have_process &&
      (t->mode == PAGELOCK_MODE_STAGE || t->mode == PAGELOCK_MODE_AUTO)) {
    /* Suggesting --mode=stage to a run that used it would be useless. */
    fprintf(out,
            "advice: allocate these buffers with cudaHostAlloc/cudaMallocHost "
            "(or torch pin_memory()); %" PRIu64 " pageable copies were not "
            "staged (too small, on a capturing stream, or staging "
            "unavailable: see the notes above).\n",
            tot->pageable.count - tot->staged.count);
    return;
  }
  fprintf(out,
          "advice: allocate these buffers with cudaHostAlloc/cudaMallocHost "
          "(or torch pin_memory()), or run with --mode=stage to stage them "
          "through pinned memory.\n");
}

/* The whole section of one process. */
static void plr_print_process(FILE *out, const plr_process *p) {
  const plr_trace *t = &p->t;
  char ms[32];
  uint64_t span = t->last_ns > t->first_ns ? t->last_ns - t->first_ns : 0;
  plr_fmt_ms(span, ms, sizeof ms);
  fprintf(out, "== pid %" PRIu64 " %s", t->hdr.pid,
          t->exe[0] ? t->exe : "(unknown program)");
  if (t->host[0]) fprintf(out, " on %s", t->host);
  fprintf(out, ": mode %s, %s ms traced",
          t->have_process ? plr_mode_name(t->mode) : "unknown", ms);
  if (t->rank >= 0) fprintf(out, ", rank %d", t->rank);
  if (t->hdr.flags & PAGELOCK_FILE_SIMULATED)
    fprintf(out, " (simulated timings)");
  if (plr_trace_partial(t)) fprintf(out, " [partial trace]");
  fprintf(out, " ==\n");
  for (size_t i = 0; i < t->nnotes; i++)
    fprintf(out, "note: %s%s\n",
            t->notes[i].kind == PAGELOCK_NOTE_WARNING ? "warning: " : "",
            t->notes[i].text);
  if (t->notes_dropped)
    fprintf(out, "note: ... %" PRIu64 " more notes\n", t->notes_dropped);
  plr_print_totals(out, &t->tot);
  plr_print_table(out, "pageable copies by call site (worst first)",
                  "call site", &p->calls);
  plr_print_table(out, "pageable copies by allocation site (worst first)",
                  "allocation site", &p->allocs);
  if (t->have_counters &&
      (t->counters.bytes_staged || t->counters.fallbacks ||
       t->counters.registered_bytes_high_water))
    plr_print_counters(out, &t->counters);
  fputc('\n', out);
  plr_print_advice(out, t);
}

void plr_report_text(FILE *out, const plr_process *ps, size_t n) {
  plr_totals all;
  memset(&all, 0, sizeof all);
  for (size_t i = 0; i < n; i++) {
    if (i) fputc('\n', out);
    plr_print_process(out, &ps[i]);
    plr_totals_add(&all, &ps[i].t.tot);
  }
  if (n > 1) {
    fprintf(out, "\n== total over %zu processes ==\n", n);
    plr_print_totals(out, &all);
  }
}
