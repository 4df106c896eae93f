/* report_html.c - one self-contained HTML page: inline CSS and inline SVG,
 * no script, nothing fetched from anywhere, so it can be mailed, attached
 * to a ticket or opened from a cluster's shared disk.
 *
 * Per process: a summary (GPU timing status, verdicts, copy totals, per
 * device table, call-site tables) and one SVG timeline per device with a
 * row per host thread's copy calls, rows for its runs of repeated copies
 * (below) and a row per GPU stream.  The timeline stays small for any
 * trace: a device with few ops gets one rectangle (and tooltip) per op;
 * beyond that, ops are binned per pixel column and row, and each run of
 * columns where one kind dominates is one rectangle, so a timeline never
 * has more rectangles than rows x plot width.
 *
 * Runs of repeated copies (COPY count above 1) are one bar from the first
 * copy's start for their summed host time, so one thread's runs can
 * overlap each other (an upload run and a download run open together) and
 * the single calls made meanwhile; on one row the bar drawn last would
 * hide the others and their tooltips.  So runs are drawn on rows of their
 * own, a thread's runs spread over lanes (a row each): the scan keeps
 * each run's row and times (48 bytes a run), sorts them by start and
 * gives each the first lane whose bars all ended by its start, else a new
 * lane, up to PLR_HT_RUN_LANES; past that the lane whose bars end
 * earliest (the least overlap).  The draw pass reads each run's lane back
 * by its order in the file (the shim writes a run when it closes, not in
 * start order). */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <uthash.h>

#include "escape.h"
#include "report.h"
#include "format.h"
#include "spans.h"
#include "units.h"

#define PLR_HT_PLOT_W 1100 /* plot width in px (one bin per px) */
#define PLR_HT_LABEL_W 190 /* row label column */
#define PLR_HT_ROW_H 18
#define PLR_HT_BAR_H 14
#define PLR_HT_AXIS_H 24
#define PLR_HT_MAX_ROWS 40 /* per timeline; the rest share one last row */
#define PLR_HT_MAX_TIMELINES 8
#define PLR_HT_TABLE_ROWS 20
/* Ops per timeline drawn one by one; more are binned.  The fuzzer builds
 * with a tiny value so that binning is exercised too. */
#ifndef PLR_HT_EXACT_MAX
#define PLR_HT_EXACT_MAX 3000
#endif
#define PLR_HT_TITLE 160   /* tooltip bytes kept per op */
#define PLR_HT_RUN_LANES 8 /* rows of runs per thread and device */

/* What a rectangle is, hence its colour: an upload and a download apart,
 * each host memory kind in its own shades (pageable warm, pinned cool). */
enum plr_ht_cat {
  PLR_HT_PAGEABLE_UP = 0, /* copy with a pageable host side, to the device */
  PLR_HT_PAGEABLE_DOWN,   /* ... from the device */
  PLR_HT_PINNED_UP,       /* copy with a pinned / registered host side */
  PLR_HT_PINNED_DOWN,
  PLR_HT_DEVICE, /* device<->device or peer copy */
  PLR_HT_OTHER,  /* managed, array or unknown memory */
  PLR_HT_KERNEL,
  PLR_HT_MEMSET,
  PLR_HT_NCAT
};

static const char *const plr_ht_colour[PLR_HT_NCAT] = {"#d62728", "#ff7f0e", "#1f77b4", "#17becf",
                                                       "#2ca02c", "#8c564b", "#9467bd", "#8c8c8c"};
static const char *const plr_ht_cat_name[PLR_HT_NCAT] = {"pageable upload (H2D)",
                                                         "pageable download (D2H)",
                                                         "pinned upload (H2D)",
                                                         "pinned download (D2H)",
                                                         "device copy",
                                                         "other copy (managed, array, unknown)",
                                                         "kernel",
                                                         "memset"};

/* ------------------------------------------------------------------ */
/* Page furniture.                                                     */

static const char plr_ht_css[] =
    "body{font:14px/1.4 system-ui,-apple-system,'Segoe UI',sans-serif;"
    "margin:24px;color:#222;background:#fff}\n"
    "h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:32px 0 4px;"
    "border-bottom:2px solid #ddd;padding-bottom:4px}\n"
    "h3{font-size:15px;margin:18px 0 6px}\n"
    ".meta{color:#555;margin:2px 0}.note{color:#555}.warn{color:#a40}\n"
    ".banner{background:#fff3cd;border:1px solid #d9a400;border-radius:4px;padding:8px 12px;"
    "margin:8px 0;font-weight:600}\n"
    "table{border-collapse:collapse;margin:6px 0 10px;font-size:13px}\n"
    "th,td{border:1px solid #ddd;padding:3px 8px;text-align:right;"
    "white-space:nowrap}\nth{white-space:normal;vertical-align:bottom}\n"
    "th{background:#f4f4f4}td.l,th.l{text-align:left;white-space:normal}\n"
    ".status{padding:6px 10px;border-radius:4px;display:inline-block}\n"
    ".on{background:#e8f5e9}.off{background:#fff3e0}\n"
    "ol.verdicts li{margin:4px 0}.advice{color:#1b5e20}\n"
    ".legend span{display:inline-block;margin-right:14px}\n"
    ".sw{display:inline-block;width:12px;height:12px;margin-right:4px;"
    "vertical-align:-1px}\n"
    "svg.tl{display:block;margin:4px 0 16px}\n"
    "svg.tl text{font:11px system-ui,sans-serif;fill:#333}\n";

/* Nanoseconds for humans: "850 ns", "12.5 us", "3.20 ms", "1.50 s". */
static void plr_ht_dur(uint64_t ns, char *buf, size_t len) {
  if (ns < 1000)
    snprintf(buf, len, "%" PRIu64 " ns", ns);
  else if (ns < 1000000)
    snprintf(buf, len, "%.3g us", (double)ns / 1e3);
  else if (ns < 1000000000)
    snprintf(buf, len, "%.3g ms", (double)ns / 1e6);
  else
    snprintf(buf, len, "%.3g s", (double)ns / 1e9);
}

/* Table cells: escaped text, a count, bytes, milliseconds. */
static void plr_ht_td(FILE *out, const char *s) {
  fputs("<td>", out);
  plr_html_text(out, s, PLR_ESC_UNLIMITED);
  fputs("</td>", out);
}

static void plr_ht_td_u64(FILE *out, uint64_t v) { fprintf(out, "<td>%" PRIu64 "</td>", v); }

static void plr_ht_td_bytes(FILE *out, uint64_t v) {
  char b[32];
  plr_fmt_bytes(v, b, sizeof b);
  plr_ht_td(out, b);
}

static void plr_ht_td_ms(FILE *out, uint64_t ns) {
  char b[32];
  plr_fmt_ms(ns, b, sizeof b);
  fprintf(out, "<td>%s ms</td>", b);
}

/* The colour legend of the timelines. */
static void plr_ht_legend(FILE *out) {
  fputs("<p class=\"legend\">", out);
  for (int c = 0; c < PLR_HT_NCAT; c++)
    fprintf(out, "<span><i class=\"sw\" style=\"background:%s\"></i>%s</span>", plr_ht_colour[c],
            plr_ht_cat_name[c]);
  fputs("</p>\n", out);
}

/* ------------------------------------------------------------------ */
/* Summary tables.                                                     */

/* The routes table (copies and bytes per route) and, when why says so,
 * the reasons pageable copies were not registered, most host time first. */
static void plr_ht_routes(FILE *out, const plr_totals *tot, int why) {
  static const char *const label[PLR_NROUTE] = {"passed through", "staged", "registered"};
  fputs(
      "<table><tr><th class=\"l\">route</th><th>copies</th><th>bytes</th>"
      "<th>host time</th></tr>\n",
      out);
  for (unsigned r = 0; r < PLR_NROUTE; r++) {
    fprintf(out, "<tr><td class=\"l\">%s</td>", label[r]);
    plr_ht_td_u64(out, tot->routes[r].count);
    plr_ht_td_bytes(out, tot->routes[r].bytes);
    plr_ht_td_ms(out, tot->routes[r].host_ns);
    fputs("</tr>\n", out);
  }
  fputs("</table>\n", out);
  if (!why) return;
  unsigned order[PAGELOCK_WHY_COUNT];
  size_t n = 0;
  for (unsigned w = 0; w < PAGELOCK_WHY_COUNT; w++)
    if (tot->not_registered[w].count) order[n++] = w;
  if (!n) return;
  for (size_t i = 1; i < n; i++)
    for (size_t k = i;
         k > 0 && tot->not_registered[order[k]].host_ns > tot->not_registered[order[k - 1]].host_ns;
         k--) {
      unsigned x = order[k];
      order[k] = order[k - 1];
      order[k - 1] = x;
    }
  fputs(
      "<table><tr><th class=\"l\">not registered because</th>"
      "<th>copies</th><th>bytes</th><th>host time</th></tr>\n",
      out);
  for (size_t i = 0; i < n; i++) {
    const plr_bucket *b = &tot->not_registered[order[i]];
    fputs("<tr><td class=\"l\">", out);
    plr_html_text(out, plr_why_text(order[i]), PLR_ESC_UNLIMITED);
    fputs("</td>", out);
    plr_ht_td_u64(out, b->count);
    plr_ht_td_bytes(out, b->bytes);
    plr_ht_td_ms(out, b->host_ns);
    fputs("</tr>\n", out);
  }
  fputs("</table>\n", out);
}

static void plr_ht_totals(FILE *out, const plr_totals *tot) {
  static const unsigned dirs[] = {PAGELOCK_DIR_H2D, PAGELOCK_DIR_D2H, PAGELOCK_DIR_D2D,
                                  PAGELOCK_DIR_H2H, PAGELOCK_DIR_UNKNOWN};
  char by[32], ms[32];
  plr_fmt_bytes(tot->all.bytes, by, sizeof by);
  plr_fmt_ms(tot->all.host_ns, ms, sizeof ms);
  fprintf(out,
          "<p>%" PRIu64
          " copy calls, %s, %s ms of host time inside copy "
          "calls.</p>\n",
          tot->all.count, by, ms);
  if (!tot->all.count) return;
  fputs(
      "<table><tr><th class=\"l\">direction</th><th class=\"l\">host "
      "memory</th><th>copies</th><th>bytes</th><th>host blocked</th>"
      "<th>GB/s (host view, pageable)</th></tr>\n",
      out);
  for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
    for (unsigned m = 0; m < PLR_NMEM; m++) {
      const plr_bucket *b = &tot->by[dirs[i]][m];
      if (!b->count) continue;
      /* Bytes per host second mean something only where the host waits
       * for the copy: a pinned async call returns at once, and "GB/s" over
       * its call time would read as thousands. */
      char g[32] = "-";
      if (m == PAGELOCK_MEM_PAGEABLE) plr_fmt_gbps(b->bytes, b->host_ns, g, sizeof g);
      fprintf(out, "<tr><td class=\"l\">%s</td><td class=\"l\">%s</td>", plr_dir_name(dirs[i]),
              plr_mem_name(m));
      plr_ht_td_u64(out, b->count);
      plr_ht_td_bytes(out, b->bytes);
      plr_ht_td_ms(out, b->host_ns);
      plr_ht_td(out, g);
      fputs("</tr>\n", out);
    }
  }
  fputs("</table>\n<ul>\n", out);
  if (tot->pageable_async.count) {
    plr_fmt_ms(tot->pageable_async.host_ns, ms, sizeof ms);
    fprintf(out,
            "<li>%" PRIu64
            " async copies were made synchronous by pageable "
            "memory, blocking the host %s ms</li>\n",
            tot->pageable_async.count, ms);
  }
  if (tot->staged.count) {
    plr_fmt_bytes(tot->staged.bytes, by, sizeof by);
    fprintf(out,
            "<li>%" PRIu64
            " pageable copies (%s) were staged through "
            "pinned memory</li>\n",
            tot->staged.count, by);
  }
  if (tot->registered)
    fprintf(out,
            "<li>%" PRIu64
            " copies used host memory page-locked by "
            "pagelock</li>\n",
            tot->registered);
  if (tot->fallbacks)
    fprintf(out, "<li>%" PRIu64 " copies fell back to the native call</li>\n", tot->fallbacks);
  if (tot->captured)
    fprintf(out, "<li>%" PRIu64 " copies were on a capturing stream</li>\n", tot->captured);
  if (tot->graph_nodes)
    fprintf(out,
            "<li>%" PRIu64 " graph memcpy nodes were defined (%" PRIu64
            " with a pageable host side)</li>\n",
            tot->graph_nodes, tot->graph_nodes_pageable);
  if (tot->failed) fprintf(out, "<li>%" PRIu64 " copies returned a CUDA error</li>\n", tot->failed);
  char est[192];
  if (plr_fmt_estimated(&tot->all, est, sizeof est)) fprintf(out, "<li>%s</li>\n", est);
  fputs("</ul>\n", out);
}

/* The staging and registration engines' counters, a paragraph each when
 * they did anything (numbers and fixed words: nothing to escape). */
static void plr_ht_counters(FILE *out, const pagelock_rec_counters *c) {
  char line[512];
  if (plr_counters_staging(c)) {
    plr_fmt_counters(c, line, sizeof line);
    fprintf(out, "<p>Staging: %s.</p>\n", line);
  }
  if (plr_counters_registration(c)) {
    plr_fmt_register_counters(c, line, sizeof line);
    fprintf(out, "<p>Registration: %s.</p>\n", line);
  }
}

/* One site table, worst first, at most PLR_HT_TABLE_ROWS rows.  With GPU
 * timing (gpu) three columns join, as in the text report: GPU time of the
 * joined copies, calls made synchronous, host time pinning would save. */
static void plr_ht_sites(FILE *out, const char *title, const char *what, const plr_rows *rows,
                         int gpu) {
  if (!rows->n) return;
  size_t shown = rows->n < PLR_HT_TABLE_ROWS ? rows->n : PLR_HT_TABLE_ROWS;
  fprintf(out,
          "<h3>%s</h3>\n<table><tr><th>copies</th><th>bytes</th>"
          "<th>host blocked</th><th>GB/s</th><th class=\"l\">dir</th>%s"
          "<th class=\"l\">%s</th></tr>\n",
          title, gpu ? "<th>GPU time</th><th>made sync</th><th>would save</th>" : "", what);
  for (size_t i = 0; i < shown; i++) {
    const plr_row *r = &rows->v[i];
    char g[32], dirs[64], site[1024];
    plr_fmt_gbps(r->b.bytes, r->b.host_ns, g, sizeof g);
    plr_fmt_dirs(r->dirs, dirs, sizeof dirs);
    plr_site_format(r->frame, r->addr, site, sizeof site);
    fputs("<tr>", out);
    plr_ht_td_u64(out, r->b.count);
    plr_ht_td_bytes(out, r->b.bytes);
    plr_ht_td_ms(out, r->b.host_ns);
    plr_ht_td(out, g);
    fprintf(out, "<td class=\"l\">%s</td>", dirs);
    if (gpu) {
      plr_ht_td_ms(out, r->g.gpu_ns);
      plr_ht_td_u64(out, r->g.made_sync);
      if (r->would_save_ns >= 0)
        plr_ht_td_ms(out, (uint64_t)r->would_save_ns);
      else
        plr_ht_td(out, "-");
    }
    fputs("<td class=\"l\">", out);
    if (r->py) {
      /* The Python line first, the native site beneath it. */
      char py[1024];
      plr_pyloc_format(r->py->f[0], py, sizeof py);
      fputs("<b>", out);
      plr_html_text(out, py, PLR_ESC_UNLIMITED);
      fputs("</b><br>", out);
      if (r->py->lib) {
        plr_pyloc_format_lib(r->py->lib, py, sizeof py);
        fputs("library: ", out);
        plr_html_text(out, py, PLR_ESC_UNLIMITED);
        fputs("<br>", out);
      }
      fputs("native: ", out);
    }
    plr_html_text(out, site, PLR_ESC_UNLIMITED);
    fputs("</td></tr>\n", out);
  }
  if (rows->n > shown) {
    plr_bucket rest = {0};
    for (size_t i = shown; i < rows->n; i++) plr_bucket_add(&rest, &rows->v[i].b);
    fprintf(out, "<tr><td>%" PRIu64 "</td>", rest.count);
    plr_ht_td_bytes(out, rest.bytes);
    plr_ht_td_ms(out, rest.host_ns);
    fprintf(out,
            "<td></td><td></td>%s<td class=\"l\">... %zu more</td>"
            "</tr>\n",
            gpu ? "<td></td><td></td><td></td>" : "", rows->n - shown);
  }
  fputs("</table>\n", out);
  plr_bucket all = {0};
  for (size_t i = 0; i < rows->n; i++) plr_bucket_add(&all, &rows->v[i].b);
  char est[192];
  if (plr_fmt_estimated(&all, est, sizeof est)) fprintf(out, "<p class=\"note\">%s</p>\n", est);
}

/* Status line and verdicts. */
static void plr_ht_gpu_head(FILE *out, const plr_gpu_report *g) {
  if (!g) {
    fputs(
        "<p><span class=\"status off\">GPU timing: not analysed</span>"
        "</p>\n",
        out);
    return;
  }
  int on = g->status == PAGELOCK_GPU_TIMING_ON;
  fprintf(out, "<p><span class=\"status %s\">GPU timing: %s", on ? "on" : "off",
          plr_gpu_status_name(g->status));
  if (g->reason[0]) {
    fputs(" (", out);
    plr_html_text(out, g->reason, sizeof g->reason);
    fputs(")", out);
  }
  fprintf(out, ", %" PRIu64 " GPU records", g->records);
  if (g->dropped) fprintf(out, ", %" PRIu64 " dropped by CUPTI", g->dropped);
  fputs("</span></p>\n", out);
  if (g->sampled) {
    char line[512];
    plr_gpu_sampling_sentence(g, line, sizeof line);
    fputs("<p class=\"note\">", out);
    plr_html_text(out, line, sizeof line);
    fputs(".</p>\n", out);
  }

  if (g->nverdicts || g->npageable) {
    fputs("<h3>Verdicts</h3>\n<ol class=\"verdicts\">\n", out);
    /* The pageable-copy verdicts first, as in the text report. */
    for (size_t i = 0; i < g->npageable + g->nverdicts && i < 2 + PLR_MAX_VERDICTS; i++) {
      const plr_verdict *v = i < g->npageable ? &g->pageable[i] : &g->verdicts[i - g->npageable];
      fputs("<li>", out);
      plr_html_text(out, v->text, sizeof v->text);
      if (v->advice[0]) {
        fputs("<br><span class=\"advice\">", out);
        plr_html_text(out, v->advice, sizeof v->advice);
        fputs("</span>", out);
      }
      fputs("</li>\n", out);
    }
    fputs("</ol>\n", out);
  }
}

/* Join counts, per-device table and bandwidth tables. */
static void plr_ht_gpu_tables(FILE *out, const plr_gpu_report *g) {
  if (!g) return;
  const plr_call_join *j = &g->join;
  if (j->calls || j->unjoined) {
    char ms[32];
    plr_fmt_ms(j->made_sync_host_ns, ms, sizeof ms);
    fprintf(out, "<p>%" PRIu64 " copy calls joined to their GPU ops (%" PRIu64 " without one",
            j->calls, j->unjoined);
    if (j->untimed_paused)
      fprintf(out, "; %" PRIu64 " more ran while GPU timing was paused", j->untimed_paused);
    fprintf(out,
            "); %" PRIu64 " pageable by CUPTI; %" PRIu64
            " async calls made synchronous (host blocked %s ms).</p>\n",
            j->pageable, j->made_sync, ms);
  }
  if (!g->ndev) return;
  fputs(
      "<h3>Devices</h3>\n<table><tr><th>GPU</th><th class=\"l\">name</th>"
      "<th>copy engines</th><th>window</th><th>kernels</th><th>copies</th>"
      "<th>kernel busy</th><th>H2D busy</th><th>D2H busy</th>"
      "<th>copy busy</th><th>copy hidden under kernels</th>"
      "<th>copy exposed</th><th>idle</th><th>pinned H2D GB/s</th>"
      "<th>pinned D2H GB/s</th></tr>\n",
      out);
  for (size_t i = 0; i < g->ndev; i++) {
    const plr_device_report *d = &g->dev[i];
    fprintf(out, "<tr><td>%u</td><td class=\"l\">", d->device);
    plr_html_text(out, d->name, sizeof d->name);
    fputs("</td>", out);
    if (d->copy_engines)
      plr_ht_td_u64(out, d->copy_engines);
    else
      plr_ht_td(out, "?");
    plr_ht_td_ms(out, d->window.end > d->window.start ? d->window.end - d->window.start : 0);
    plr_ht_td_u64(out, d->kernels);
    plr_ht_td_u64(out, d->copies);
    plr_ht_td_ms(out, d->kernel_busy_ns);
    plr_ht_td_ms(out, d->copy_busy_ns[PLR_CDIR_H2D]);
    plr_ht_td_ms(out, d->copy_busy_ns[PLR_CDIR_D2H]);
    plr_ht_td_ms(out, d->copy_busy_all_ns);
    if (d->copy_busy_all_ns) {
      char b[64];
      plr_fmt_ms(d->copy_hidden_ns, b, sizeof b);
      fprintf(out, "<td>%s ms (%.0f%%)</td>", b,
              100.0 * (double)d->copy_hidden_ns / (double)d->copy_busy_all_ns);
    } else {
      plr_ht_td(out, "-");
    }
    plr_ht_td_ms(out, d->copy_exposed_ns);
    plr_ht_td_ms(out, d->idle_ns);
    for (int k = PLR_CDIR_H2D; k <= PLR_CDIR_D2H; k++) {
      if (d->pinned_gbps[k] > 0)
        fprintf(out, "<td>%.2f</td>", d->pinned_gbps[k]);
      else
        plr_ht_td(out, "-");
    }
    fputs("</tr>\n", out);
  }
  fputs("</table>\n", out);
  for (size_t i = 0; i < g->ndev; i++) {
    const plr_device_report *d = &g->dev[i];
    if (!d->nbw) continue;
    fprintf(out,
            "<h3>GPU %u copy bandwidth (GPU timestamps)</h3>\n"
            "<table><tr><th class=\"l\">copy</th><th class=\"l\">from</th>"
            "<th class=\"l\">to</th><th class=\"l\">size</th><th>copies</th>"
            "<th>bytes</th><th>GPU time</th><th>median GB/s</th>"
            "<th>p10 GB/s</th></tr>\n",
            d->device);
    for (size_t k = 0; k < d->nbw; k++) {
      const plr_bw_row *b = &d->bw[k];
      /* The shim's own copies are named apart, on their host side. */
      const char *shim = b->staged ? "staged" : b->registered ? "registered" : NULL;
      int hs = b->copy_kind == PAGELOCK_GPU_COPY_HTOD || b->copy_kind == PAGELOCK_GPU_COPY_HTOA;
      int hd = b->copy_kind == PAGELOCK_GPU_COPY_DTOH || b->copy_kind == PAGELOCK_GPU_COPY_ATOH;
      fprintf(out,
              "<tr><td class=\"l\">%s</td><td class=\"l\">%s</td>"
              "<td class=\"l\">%s</td><td class=\"l\">%s</td>",
              plr_gpu_copy_name(b->copy_kind), shim && hs ? shim : plr_gpu_mem_name(b->src_kind),
              shim && hd ? shim : plr_gpu_mem_name(b->dst_kind), plr_size_bucket_name(b->bucket));
      plr_ht_td_u64(out, b->count);
      plr_ht_td_bytes(out, b->bytes);
      plr_ht_td_ms(out, b->gpu_ns);
      fprintf(out, "<td>%.2f</td><td>%.2f</td></tr>\n", b->median_gbps, b->p10_gbps);
    }
    fputs("</table>\n", out);
  }
}

/* ------------------------------------------------------------------ */
/* Timeline: rows, layout and drawing.                                 */

enum plr_ht_row_kind { PLR_HT_ROW_HOST = 0, PLR_HT_ROW_RUNS = 1, PLR_HT_ROW_STREAM = 2 };

typedef struct plr_ht_key {
  int64_t dev;   /* device ordinal as recorded; -1 unknown (calls) */
  uint32_t kind; /* plr_ht_row_kind */
  uint32_t id;   /* tid or CUPTI streamId */
  uint32_t lane; /* runs: the lane; else 0 */
} plr_ht_key;

/* A run of repeated copies as the scan saw it: its row (lane 0 until
 * assigned), its times and its place among the runs of the file. */
typedef struct plr_ht_run {
  plr_ht_key key;
  uint64_t start, end, ord;
} plr_ht_run;

typedef struct plr_ht_row {
  plr_ht_key key;
  uint64_t ops;
  int tl;   /* timeline index after layout, -1 when not drawn */
  int slot; /* row within the timeline */
  UT_hash_handle hh;
} plr_ht_row;

typedef struct plr_ht_op {
  uint64_t start, end;
  int slot;
  int cat;
  char title[PLR_HT_TITLE];
} plr_ht_op;

typedef struct plr_ht_tl {
  int64_t dev; /* -1: calls whose device is unknown */
  uint64_t ops;
  int nslots;   /* rows drawn (the last may hold the overflow) */
  int overflow; /* rows beyond PLR_HT_MAX_ROWS, merged into the last */
  char (*labels)[64];
  int exact; /* ops stored one by one, else binned */
  plr_ht_op *opv;
  size_t nop, capop;
  float *bins; /* [slot][cat][px] coverage in pixels */
} plr_ht_tl;

typedef struct plr_ht {
  plr_ht_row *rows;
  int64_t *gpu_devs; /* distinct devices of GPU records / calls, sorted */
  size_t ngpu_devs;
  int64_t only_dev; /* the one device, when exactly one: calls with
                       device -1 are drawn there */
  uint64_t t0, t1;  /* window of everything drawn */
  int have_window;
  plr_ht_tl tl[PLR_HT_MAX_TIMELINES];
  int ntl;
  size_t tl_dropped; /* devices beyond PLR_HT_MAX_TIMELINES */
  plr_ht_run *runs;  /* the scan's runs, until lanes are assigned */
  size_t nruns, capruns;
  uint8_t *run_lane; /* per run, in file order: its lane */
  size_t runs_seen;  /* runs met so far in the draw pass */
  int oom;
} plr_ht;

/* A GPU record that belongs on a stream row (waits are host time). */
static int plr_ht_gpu_drawn(const pagelock_rec_gpu *g) {
  return g->kind == PAGELOCK_GPU_MEMCPY || g->kind == PAGELOCK_GPU_MEMCPY_P2P ||
         g->kind == PAGELOCK_GPU_MEMSET || g->kind == PAGELOCK_GPU_KERNEL;
}

/* Colour class of a copy call: its host memory kind and direction. */
static int plr_ht_call_cat(const pagelock_rec_copy *c) {
  if (c->dir == PAGELOCK_DIR_D2D) return PLR_HT_DEVICE;
  int down = c->dir == PAGELOCK_DIR_D2H;
  switch (c->host_mem) {
    case PAGELOCK_MEM_PAGEABLE: return down ? PLR_HT_PAGEABLE_DOWN : PLR_HT_PAGEABLE_UP;
    case PAGELOCK_MEM_PINNED:
    case PAGELOCK_MEM_REGISTERED: return down ? PLR_HT_PINNED_DOWN : PLR_HT_PINNED_UP;
    case PAGELOCK_MEM_DEVICE: return PLR_HT_DEVICE;
    default: return PLR_HT_OTHER;
  }
}

/* Colour class of a GPU op: kernel, memset, or the host side's memory
 * kind as CUPTI saw it and the direction. */
static int plr_ht_gpu_cat(const pagelock_rec_gpu *g) {
  if (g->kind == PAGELOCK_GPU_KERNEL) return PLR_HT_KERNEL;
  if (g->kind == PAGELOCK_GPU_MEMSET) return PLR_HT_MEMSET;
  int down = g->copy_kind == PAGELOCK_GPU_COPY_DTOH || g->copy_kind == PAGELOCK_GPU_COPY_ATOH;
  switch (plr_gpu_host_kind(g)) {
    case PAGELOCK_GPU_MEM_PAGEABLE: return down ? PLR_HT_PAGEABLE_DOWN : PLR_HT_PAGEABLE_UP;
    case PAGELOCK_GPU_MEM_PINNED: return down ? PLR_HT_PINNED_DOWN : PLR_HT_PINNED_UP;
    case PAGELOCK_GPU_MEM_DEVICE:
    case PAGELOCK_GPU_MEM_DEVICE_STATIC: return PLR_HT_DEVICE;
    default: return PLR_HT_OTHER;
  }
}

/* Row key of an event, or 0 when the event is not drawn.  A run's lane
 * is left 0: the caller knows it. */
static int plr_ht_key_of(const plr_event *ev, plr_ht_key *k) {
  memset(k, 0, sizeof *k);
  if (ev->kind == PLR_EV_CALL) {
    if (ev->copy->flags & PAGELOCK_COPY_GRAPH_NODE) return 0;
    k->dev = ev->copy->device;
    k->kind = ev->copy->count > 1 ? PLR_HT_ROW_RUNS : PLR_HT_ROW_HOST;
    k->id = ev->copy->tid;
    return 1;
  }
  if (ev->kind == PLR_EV_GPU && plr_ht_gpu_drawn(ev->gpu)) {
    k->dev = ev->gpu->device;
    k->kind = PLR_HT_ROW_STREAM;
    k->id = ev->gpu->stream;
    return 1;
  }
  return 0;
}

/* The row of key k, made when new (NULL when out of memory). */
static plr_ht_row *plr_ht_row_get(plr_ht *h, const plr_ht_key *k) {
  plr_ht_row *r;
  HASH_FIND(hh, h->rows, k, sizeof *k, r);
  if (r) return r;
  r = calloc(1, sizeof *r);
  if (!r) {
    h->oom = 1;
    return NULL;
  }
  memcpy(&r->key, k, sizeof *k); /* with its zeroed padding: a hash key */
  r->tl = -1;
  HASH_ADD(hh, h->rows, key, sizeof r->key, r);
  return r;
}

/* Pass 1: rows, devices and the time window; runs are kept for
 * plr_ht_lanes, which makes their rows. */
static int plr_ht_scan_fn(void *ctx, const plr_event *ev) {
  plr_ht *h = ctx;
  plr_ht_key k;
  if (!plr_ht_key_of(ev, &k)) return 0;
  if (k.kind == PLR_HT_ROW_RUNS) {
    if (h->nruns == h->capruns) {
      size_t cap = h->capruns ? h->capruns * 2 : 64;
      plr_ht_run *v = realloc(h->runs, cap * sizeof *v);
      if (!v) {
        h->oom = 1;
        return 1;
      }
      h->runs = v;
      h->capruns = cap;
    }
    plr_ht_run *run = &h->runs[h->nruns];
    memcpy(&run->key, &k, sizeof k);
    run->start = ev->start;
    run->end = ev->end;
    run->ord = h->nruns++;
  } else {
    plr_ht_row *r = plr_ht_row_get(h, &k);
    if (!r) return 1;
    r->ops++;
  }
  if (!h->have_window || ev->start < h->t0) h->t0 = ev->start;
  if (!h->have_window || ev->end > h->t1) h->t1 = ev->end;
  h->have_window = 1;
  return h->oom;
}

/* Runs by row (device, thread), then start (file order among equal
 * starts). */
static int plr_ht_run_cmp(const void *a, const void *b) {
  const plr_ht_run *x = a, *y = b;
  if (x->key.dev != y->key.dev) return x->key.dev < y->key.dev ? -1 : 1;
  if (x->key.id != y->key.id) return x->key.id < y->key.id ? -1 : 1;
  if (x->start != y->start) return x->start < y->start ? -1 : 1;
  return x->ord < y->ord ? -1 : x->ord > y->ord;
}

/* After the scan: each run's lane (h->run_lane) and the rows of the
 * lanes; the scan's list of runs is freed. */
static void plr_ht_lanes(plr_ht *h) {
  if (!h->nruns) return;
  h->run_lane = malloc(h->nruns);
  if (!h->run_lane) {
    h->oom = 1;
    return;
  }
  qsort(h->runs, h->nruns, sizeof *h->runs, plr_ht_run_cmp);
  uint64_t ends[PLR_HT_RUN_LANES];
  unsigned used = 0;
  for (size_t i = 0; i < h->nruns; i++) {
    plr_ht_run *run = &h->runs[i];
    if (i == 0 || run->key.dev != run[-1].key.dev || run->key.id != run[-1].key.id) used = 0;
    unsigned lane = plr_lane_pick(ends, &used, PLR_HT_RUN_LANES, run->start, run->end);
    h->run_lane[run->ord] = (uint8_t)lane;
    run->key.lane = lane;
    plr_ht_row *r = plr_ht_row_get(h, &run->key);
    if (!r) return;
    r->ops++;
  }
  free(h->runs);
  h->runs = NULL;
}

/* Timeline that a row with this recorded device is drawn in. */
static int64_t plr_ht_dev_of(const plr_ht *h, int64_t dev) {
  return dev < 0 && h->ngpu_devs == 1 ? h->only_dev : (dev < 0 ? -1 : dev);
}

/* Row order inside a timeline: host threads first, by id, each thread's
 * calls then its lanes of runs; then streams, by id. */
static int plr_ht_row_cmp(const void *a, const void *b) {
  const plr_ht_row *x = *(plr_ht_row *const *)a, *y = *(plr_ht_row *const *)b;
  int xs = x->key.kind == PLR_HT_ROW_STREAM, ys = y->key.kind == PLR_HT_ROW_STREAM;
  if (xs != ys) return xs < ys ? -1 : 1;
  if (x->key.id != y->key.id) return x->key.id < y->key.id ? -1 : 1;
  if (x->key.kind != y->key.kind) return x->key.kind < y->key.kind ? -1 : 1;
  if (x->key.lane != y->key.lane) return x->key.lane < y->key.lane ? -1 : 1;
  return x->key.dev < y->key.dev ? -1 : x->key.dev > y->key.dev;
}

/* qsort order of device ordinals. */
static int plr_ht_dev_cmp(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

/* Assigns rows to timelines and slots; allocates what drawing needs. */
static void plr_ht_layout(plr_ht *h) {
  size_t nrows = HASH_COUNT(h->rows);
  plr_ht_row **v = malloc((nrows ? nrows : 1) * sizeof *v);
  h->gpu_devs = malloc((nrows ? nrows : 1) * sizeof *h->gpu_devs);
  if (!v || !h->gpu_devs) {
    free(v);
    h->oom = 1;
    return;
  }
  size_t i = 0;
  plr_ht_row *r, *tmp;
  /* The distinct devices, sorted once: a hostile trace can name a million
   * (one per record), and keeping a sorted set as rows appear would move
   * it a million times. */
  HASH_ITER(hh, h->rows, r, tmp) {
    v[i++] = r;
    if (r->key.dev >= 0) h->gpu_devs[h->ngpu_devs++] = r->key.dev;
  }
  qsort(h->gpu_devs, h->ngpu_devs, sizeof *h->gpu_devs, plr_ht_dev_cmp);
  size_t nd = 0;
  for (i = 0; i < h->ngpu_devs; i++)
    if (!nd || h->gpu_devs[nd - 1] != h->gpu_devs[i]) h->gpu_devs[nd++] = h->gpu_devs[i];
  h->ngpu_devs = nd;
  if (h->ngpu_devs == 1) h->only_dev = h->gpu_devs[0];
  qsort(v, nrows, sizeof *v, plr_ht_row_cmp);
  /* Timelines: each device in order, then "unknown device" calls. */
  int has_unknown = 0;
  for (i = 0; i < nrows; i++)
    if (plr_ht_dev_of(h, v[i]->key.dev) < 0) has_unknown = 1;
  size_t want = h->ngpu_devs + (size_t)has_unknown;
  for (size_t d = 0; d < want; d++) {
    if (h->ntl == PLR_HT_MAX_TIMELINES) {
      h->tl_dropped = want - d;
      break;
    }
    plr_ht_tl *tl = &h->tl[h->ntl++];
    tl->dev = d < h->ngpu_devs ? h->gpu_devs[d] : -1;
  }
  for (int t = 0; t < h->ntl; t++) {
    plr_ht_tl *tl = &h->tl[t];
    int rows = 0;
    for (i = 0; i < nrows; i++)
      if (plr_ht_dev_of(h, v[i]->key.dev) == tl->dev) rows++;
    tl->nslots = rows > PLR_HT_MAX_ROWS ? PLR_HT_MAX_ROWS : rows;
    tl->overflow = rows > PLR_HT_MAX_ROWS ? rows - PLR_HT_MAX_ROWS + 1 : 0;
    tl->labels = calloc(tl->nslots ? (size_t)tl->nslots : 1, sizeof *tl->labels);
    if (!tl->labels) {
      h->oom = 1;
      break;
    }
    int slot = 0;
    for (i = 0; i < nrows; i++) {
      r = v[i];
      if (plr_ht_dev_of(h, r->key.dev) != tl->dev) continue;
      r->tl = t;
      r->slot = slot < tl->nslots - 1 || !tl->overflow ? slot : tl->nslots - 1;
      tl->ops += r->ops;
      if (r->slot == slot) {
        if (r->key.kind == PLR_HT_ROW_HOST)
          snprintf(tl->labels[slot], sizeof tl->labels[slot], "thread %u calls", r->key.id);
        else if (r->key.kind == PLR_HT_ROW_RUNS && r->key.lane)
          snprintf(tl->labels[slot], sizeof tl->labels[slot], "thread %u runs, lane %u", r->key.id,
                   r->key.lane + 1);
        else if (r->key.kind == PLR_HT_ROW_RUNS)
          snprintf(tl->labels[slot], sizeof tl->labels[slot], "thread %u runs", r->key.id);
        else
          /* The count says what the row holds where its ops are too short
           * to see at this scale. */
          snprintf(tl->labels[slot], sizeof tl->labels[slot], "stream %u (%" PRIu64 " op%s)",
                   r->key.id, r->ops, r->ops == 1 ? "" : "s");
      }
      slot++;
    }
    if (tl->overflow)
      snprintf(tl->labels[tl->nslots - 1], sizeof tl->labels[0], "%d more rows", tl->overflow);
    tl->exact = tl->ops <= PLR_HT_EXACT_MAX;
    if (!tl->exact) {
      size_t n = (size_t)tl->nslots * PLR_HT_NCAT * PLR_HT_PLOT_W;
      tl->bins = calloc(n ? n : 1, sizeof *tl->bins);
      if (!tl->bins) h->oom = 1;
    }
  }
  free(v);
}

/* x in [0, PLR_HT_PLOT_W] of time t. */
static double plr_ht_x(const plr_ht *h, uint64_t t) {
  double span = h->t1 > h->t0 ? (double)(h->t1 - h->t0) : 1.0;
  double x = t <= h->t0 ? 0.0 : (double)(t - h->t0) * PLR_HT_PLOT_W / span;
  return x > PLR_HT_PLOT_W ? PLR_HT_PLOT_W : x;
}

/* Adds the pixel coverage of [x0, x1) to one row and category. */
static void plr_ht_bin(plr_ht_tl *tl, int slot, int cat, double x0, double x1) {
  float *b = tl->bins + ((size_t)slot * PLR_HT_NCAT + (size_t)cat) * PLR_HT_PLOT_W;
  if (x1 - x0 < 0.05) {
    /* Instant at this scale: still show that something ran. */
    int px = (int)x0;
    if (px >= PLR_HT_PLOT_W) px = PLR_HT_PLOT_W - 1;
    b[px] += 0.05f;
    return;
  }
  /* x0, x1 >= 0: truncation is floor (and libm stays out of the link). */
  int p0 = (int)x0, p1 = (int)x1;
  if (p1 < x1) p1++;
  if (p1 > PLR_HT_PLOT_W) p1 = PLR_HT_PLOT_W;
  for (int px = p0; px < p1; px++) {
    double lo = px > x0 ? px : x0, hi = px + 1 < x1 ? px + 1 : x1;
    if (hi > lo) b[px] += (float)(hi - lo);
  }
}

/* Tooltip of one op. */
static void plr_ht_title(const plr_event *ev, char *buf, size_t len) {
  char by[32], d[32];
  plr_ht_dur(ev->end - ev->start, d, sizeof d);
  if (ev->kind == PLR_EV_CALL) {
    const pagelock_rec_copy *c = ev->copy;
    plr_fmt_bytes(c->bytes, by, sizeof by);
    const char *staged = (c->flags & PAGELOCK_COPY_STAGED) ? ", staged" : "";
    if (c->count > 1)
      /* A run: one bar for its copies, back to back from the first one's
       * start; the shim kept no time of the others. */
      snprintf(buf, len, "%s x%u %s %s, %s each, host %s, %u of %u copies timed%s",
               plr_api_symbol(c->api), c->count, plr_dir_name(c->dir), plr_mem_name(c->host_mem),
               by, d, c->timed, c->count, staged);
    else
      snprintf(buf, len, "%s %s %s, %s, host %s%s", plr_api_symbol(c->api), plr_dir_name(c->dir),
               plr_mem_name(c->host_mem), by, d, staged);
    return;
  }
  const pagelock_rec_gpu *g = ev->gpu;
  if (g->kind == PAGELOCK_GPU_KERNEL) {
    snprintf(buf, len, "kernel %s, %s", ev->name ? ev->name : "(unnamed)", d);
  } else if (g->kind == PAGELOCK_GPU_MEMSET) {
    plr_fmt_bytes(g->bytes, by, sizeof by);
    snprintf(buf, len, "memset %s, %s", by, d);
  } else {
    plr_fmt_bytes(g->bytes, by, sizeof by);
    char gb[32];
    plr_fmt_gbps(g->bytes, ev->end - ev->start, gb, sizeof gb);
    snprintf(buf, len, "memcpy %s %s->%s, %s, %s, %s GB/s", plr_gpu_copy_name(g->copy_kind),
             plr_gpu_mem_name(g->src_kind), plr_gpu_mem_name(g->dst_kind), by, d, gb);
  }
}

/* Pass 2: ops of exact timelines are kept, the others binned. */
static int plr_ht_draw_fn(void *ctx, const plr_event *ev) {
  plr_ht *h = ctx;
  plr_ht_key k;
  if (!plr_ht_key_of(ev, &k)) return 0;
  if (k.kind == PLR_HT_ROW_RUNS) {
    size_t i = h->runs_seen++;
    if (i >= h->nruns) return 0; /* a run the scan did not see: skip */
    k.lane = h->run_lane[i];
  }
  plr_ht_row *r;
  HASH_FIND(hh, h->rows, &k, sizeof k, r);
  if (!r || r->tl < 0) return 0; /* a row the scan did not see: skip */
  plr_ht_tl *tl = &h->tl[r->tl];
  int cat = ev->kind == PLR_EV_CALL ? plr_ht_call_cat(ev->copy) : plr_ht_gpu_cat(ev->gpu);
  if (!tl->exact) {
    if (tl->bins) plr_ht_bin(tl, r->slot, cat, plr_ht_x(h, ev->start), plr_ht_x(h, ev->end));
    return 0;
  }
  if (tl->nop >= PLR_HT_EXACT_MAX) return 0;
  if (tl->nop == tl->capop) {
    /* Bounded by PLR_HT_EXACT_MAX: the scan counted these ops. */
    size_t cap = tl->capop ? tl->capop * 2 : 64;
    plr_ht_op *v = realloc(tl->opv, cap * sizeof *v);
    if (!v) {
      h->oom = 1;
      return 1;
    }
    tl->opv = v;
    tl->capop = cap;
  }
  plr_ht_op *op = &tl->opv[tl->nop++];
  op->start = ev->start;
  op->end = ev->end;
  op->slot = r->slot;
  op->cat = cat;
  plr_ht_title(ev, op->title, sizeof op->title);
  return 0;
}

/* "Nice" tick step (1, 2 or 5 times a power of ten) giving at most about
 * ten ticks over span ns. */
static uint64_t plr_ht_tick_step(uint64_t span) {
  uint64_t step = 1;
  while (step < UINT64_MAX / 10) {
    if (span / step <= 10) return step;
    if (span / (step * 2) <= 10) return step * 2;
    if (span / (step * 5) <= 10) return step * 5;
    step *= 10;
  }
  return step;
}

/* Bar heights (px) of each kind in one pixel column of a binned row: its
 * share of the column's time, at least 1 px for any kind present so a
 * short op still shows, stacked within the bar height. */
static void plr_ht_column(const plr_ht_tl *tl, int s, int px, int h[PLR_HT_NCAT]) {
  float v[PLR_HT_NCAT], sum = 0;
  for (int c = 0; c < PLR_HT_NCAT; c++) {
    v[c] = tl->bins[((size_t)s * PLR_HT_NCAT + (size_t)c) * PLR_HT_PLOT_W + (size_t)px];
    sum += v[c];
  }
  /* Overlap (the merged "more rows" row) can fill a column more than once. */
  float scale = sum > 1.0f ? 1.0f / sum : 1.0f;
  int left = PLR_HT_BAR_H;
  for (int c = 0; c < PLR_HT_NCAT; c++) {
    int k = 0;
    if (v[c] > 0) {
      k = (int)(v[c] * scale * PLR_HT_BAR_H + 0.5f);
      if (k < 1) k = 1;
      if (k > left) k = left;
    }
    h[c] = k;
    left -= k;
  }
}

/* A binned row as a stacked area per kind: one <path> per kind, one
 * subpath per run of columns with the same height, so a regular workload
 * costs a few runs per period, and never more than a subpath per column. */
static void plr_ht_binned_row(FILE *out, const plr_ht_tl *tl, int s, int ybar) {
  int col[PLR_HT_PLOT_W][PLR_HT_NCAT]; /* 26 KiB */
  for (int px = 0; px < PLR_HT_PLOT_W; px++) plr_ht_column(tl, s, px, col[px]);
  for (int c = 0; c < PLR_HT_NCAT; c++) {
    int open = 0, run_x = 0, run_h = 0, run_y = 0;
    for (int px = 0; px <= PLR_HT_PLOT_W; px++) {
      int hgt = 0, y = 0;
      if (px < PLR_HT_PLOT_W && col[px][c]) {
        hgt = col[px][c];
        int below = 0;
        for (int k = 0; k < c; k++) below += col[px][k];
        y = ybar + PLR_HT_BAR_H - below - hgt;
      }
      if (hgt == run_h && y == run_y) continue;
      if (run_h) {
        if (!open) fprintf(out, "<path fill=\"%s\" d=\"", plr_ht_colour[c]);
        open = 1;
        fprintf(out, "M%d %dh%dv%dh-%dz", PLR_HT_LABEL_W + run_x, run_y, px - run_x, run_h,
                px - run_x);
      }
      run_x = px;
      run_h = hgt;
      run_y = y;
    }
    if (open) fprintf(out, "\"><title>%s</title></path>\n", plr_ht_cat_name[c]);
  }
}

/* One device's <svg>. */
static void plr_ht_svg(FILE *out, const plr_ht *h, const plr_ht_tl *tl) {
  int w = PLR_HT_LABEL_W + PLR_HT_PLOT_W + 20;
  int hgt = PLR_HT_AXIS_H + tl->nslots * PLR_HT_ROW_H + 8;
  if (tl->dev >= 0)
    fprintf(out, "<h3>GPU %" PRId64 " timeline</h3>\n", tl->dev);
  else
    fputs("<h3>Copy calls, device unknown</h3>\n", out);
  char span[32];
  plr_ht_dur(h->t1 - h->t0, span, sizeof span);
  fprintf(out,
          "<p class=\"meta\">%" PRIu64
          " ops over %s%s</p>\n"
          "<svg class=\"tl\" xmlns=\"http://www.w3.org/2000/svg\" "
          "width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
          "shape-rendering=\"crispEdges\">\n",
          tl->ops, span,
          tl->exact ? ""
                    : " (binned per pixel column: bar heights are the "
                      "share of each column's time each kind ran)",
          w, hgt, w, hgt);
  /* Axis: ticks relative to the start of the window. */
  uint64_t sp = h->t1 > h->t0 ? h->t1 - h->t0 : 1;
  uint64_t step = plr_ht_tick_step(sp);
  int y0 = PLR_HT_AXIS_H, y1 = PLR_HT_AXIS_H + tl->nslots * PLR_HT_ROW_H;
  for (uint64_t t = 0; t <= sp; t += step) {
    double x = PLR_HT_LABEL_W + (double)t * PLR_HT_PLOT_W / (double)sp;
    char lab[32];
    plr_ht_dur(t, lab, sizeof lab);
    fprintf(out,
            "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" "
            "stroke=\"#ddd\"/><text x=\"%.1f\" y=\"%d\" "
            "text-anchor=\"middle\">%s</text>\n",
            x, y0 - 4, x, y1, x, y0 - 8, t ? lab : "0");
    if (t > UINT64_MAX - step) break;
  }
  for (int s = 0; s < tl->nslots; s++) {
    int y = PLR_HT_AXIS_H + s * PLR_HT_ROW_H;
    fprintf(out,
            "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" "
            "fill=\"%s\"/><text x=\"4\" y=\"%d\">",
            PLR_HT_LABEL_W, y, PLR_HT_PLOT_W, PLR_HT_ROW_H, s % 2 ? "#fafafa" : "#f2f2f2", y + 13);
    plr_html_text(out, tl->labels[s], sizeof tl->labels[s]);
    fputs("</text>\n", out);
  }
  int pad = (PLR_HT_ROW_H - PLR_HT_BAR_H) / 2;
  if (tl->exact) {
    for (size_t i = 0; i < tl->nop; i++) {
      const plr_ht_op *op = &tl->opv[i];
      double x0 = plr_ht_x(h, op->start), x1 = plr_ht_x(h, op->end);
      /* An op too short for a pixel still shows: 2 px, not a hairline. */
      double wd = x1 - x0 < 2.0 ? 2.0 : x1 - x0;
      if (x0 > PLR_HT_PLOT_W - wd) x0 = PLR_HT_PLOT_W - wd;
      fprintf(out,
              "<rect x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" "
              "fill=\"%s\"><title>",
              PLR_HT_LABEL_W + x0, PLR_HT_AXIS_H + op->slot * PLR_HT_ROW_H + pad, wd, PLR_HT_BAR_H,
              plr_ht_colour[op->cat]);
      plr_html_text(out, op->title, sizeof op->title);
      fputs("</title></rect>\n", out);
    }
  } else if (tl->bins) {
    for (int s = 0; s < tl->nslots; s++)
      plr_ht_binned_row(out, tl, s, PLR_HT_AXIS_H + s * PLR_HT_ROW_H + pad);
  }
  fputs("</svg>\n", out);
}

/* Frees the timeline state of one process. */
static void plr_ht_free(plr_ht *h) {
  plr_ht_row *r, *tmp;
  HASH_ITER(hh, h->rows, r, tmp) {
    HASH_DEL(h->rows, r);
    free(r);
  }
  for (int t = 0; t < h->ntl; t++) {
    free(h->tl[t].labels);
    free(h->tl[t].opv);
    free(h->tl[t].bins);
  }
  free(h->gpu_devs);
  free(h->runs);
  free(h->run_lane);
  memset(h, 0, sizeof *h);
}

/* The timelines of one process: two passes over its trace. */
static void plr_ht_timelines(FILE *out, const plr_source *src) {
  plr_ht h;
  memset(&h, 0, sizeof h);
  int unreadable = plr_walk(src, plr_ht_scan_fn, &h) != 0 && !h.oom;
  if (!h.oom && !unreadable) plr_ht_lanes(&h);
  if (!h.oom && !unreadable) plr_ht_layout(&h);
  if (!h.oom && !unreadable && h.ntl) plr_walk(src, plr_ht_draw_fn, &h);
  fputs("<h3>Timeline</h3>\n", out);
  if (unreadable) {
    /* The file changed since it was loaded (a FIFO or directory in its
     * place: plr_source_open refuses it rather than wait on it). */
    fputs(
        "<p class=\"warn\">The timeline was left out: the trace could not "
        "be read again.</p>\n",
        out);
  } else if (h.oom) {
    fputs("<p class=\"warn\">The timeline was left out: out of memory.</p>\n", out);
  } else if (!h.ntl) {
    fputs("<p class=\"note\">No copy calls or GPU ops to draw.</p>\n", out);
  } else {
    plr_ht_legend(out);
    for (int t = 0; t < h.ntl; t++) plr_ht_svg(out, &h, &h.tl[t]);
    if (h.tl_dropped)
      fprintf(out,
              "<p class=\"note\">The timelines of %zu more devices "
              "are not drawn.</p>\n",
              h.tl_dropped);
  }
  plr_ht_free(&h);
}

/* ------------------------------------------------------------------ */
/* The page.                                                           */

static void plr_ht_process(FILE *out, const plr_process *p, const plr_source *src, size_t i) {
  const plr_trace *t = &p->t;
  const plr_gpu_report *g = &p->gpu;
  fprintf(out, "<section id=\"p%zu\">\n<h2>", i);
  plr_html_text(out, t->exe[0] ? plr_basename(t->exe) : "(unknown program)", PLR_ESC_UNLIMITED);
  fprintf(out, " &mdash; pid %" PRIu64, t->hdr.pid);
  if (t->rank >= 0) fprintf(out, ", rank %d", t->rank);
  if (t->host[0]) {
    fputs(" on ", out);
    plr_html_text(out, t->host, PLR_ESC_UNLIMITED);
  }
  fputs("</h2>\n<p class=\"meta\">", out);
  plr_html_text(out, t->exe, PLR_ESC_UNLIMITED);
  fputs("<br>trace ", out);
  plr_html_text(out, t->path, PLR_ESC_UNLIMITED);
  char span[32];
  plr_fmt_ms(t->last_ns > t->first_ns ? t->last_ns - t->first_ns : 0, span, sizeof span);
  fprintf(out, "<br>mode %s, %s ms traced, %" PRIu64 " records%s",
          t->have_process ? plr_mode_name(t->mode) : "unknown", span, t->complete_records,
          (t->hdr.flags & PAGELOCK_FILE_SIMULATED) ? ", simulated timings" : "");
  if (plr_trace_partial(t)) {
    /* Why, when the trace knows (as in the text report). */
    const char *why = plr_trace_stop_reason(t);
    if (t->stop == PLR_STOP_DAMAGED)
      fprintf(out, " <b class=\"warn\">[partial trace: corrupt from byte %" PRIu64 "]</b>",
              t->damage.from);
    else if (why)
      fprintf(out, " <b class=\"warn\">[partial trace: %s]</b>", why);
    else
      fputs(" <b class=\"warn\">[partial trace]</b>", out);
  }
  fputs("</p>\n", out);
  if (t->hdr.flags & PAGELOCK_FILE_SIMULATED)
    fputs(
        "<p class=\"banner\">Simulated timings: recorded over the fake CUDA, not a GPU. "
        "The copies, sites and verdicts are the program's; every time is the simulation's.</p>\n",
        out);
  for (size_t k = 0; k < t->nnotes; k++) {
    int warn = t->notes[k].kind == PAGELOCK_NOTE_WARNING;
    fprintf(out, "<p class=\"%s\">%s", warn ? "warn" : "note", warn ? "warning: " : "note: ");
    plr_html_text(out, t->notes[k].text, PLR_ESC_UNLIMITED);
    fputs("</p>\n", out);
  }
  /* The verdicts and the picture first: what a reader opens the page for;
   * the tables behind them are the evidence. */
  plr_ht_gpu_head(out, g);
  plr_ht_timelines(out, src);
  plr_ht_gpu_tables(out, g);
  fputs("<h3>Copy calls</h3>\n", out);
  plr_ht_totals(out, &t->tot);
  if (plr_trace_shows_routes(t)) plr_ht_routes(out, &t->tot, plr_trace_shows_why(t));
  if (t->have_counters) plr_ht_counters(out, &t->counters);
  if (t->have_cost) {
    char line[512];
    plr_fmt_cost(&t->cost, t->last_ns > t->first_ns ? t->last_ns - t->first_ns : 0, line,
                 sizeof line);
    fprintf(out, "<p>Call sites cost: %s.</p>\n", line);
  }
  int gpu = g->records > 0;
  plr_ht_sites(out, "Pageable copies by call site (worst first)", "call site", &p->calls, gpu);
  plr_ht_sites(out, "Pageable copies by allocation site (worst first)", "allocation site",
               &p->allocs, gpu);
  fputs("</section>\n", out);
}

/* The table of all processes on top of a multi-process (ranks) page. */
static void plr_ht_overview(FILE *out, const plr_process *ps, size_t n) {
  fputs(
      "<h2>Processes</h2>\n<table><tr><th class=\"l\">process</th>"
      "<th>rank</th><th class=\"l\">host</th><th>copies</th>"
      "<th>pageable</th><th>host blocked</th><th>copy exposed</th>"
      "</tr>\n",
      out);
  for (size_t i = 0; i < n; i++) {
    const plr_trace *t = &ps[i].t;
    fprintf(out, "<tr><td class=\"l\"><a href=\"#p%zu\">", i);
    plr_html_text(out, t->exe[0] ? plr_basename(t->exe) : "?", PLR_ESC_UNLIMITED);
    fprintf(out, " %" PRIu64 "</a></td>", t->hdr.pid);
    if (t->rank >= 0)
      fprintf(out, "<td>%d</td>", t->rank);
    else
      plr_ht_td(out, "-");
    fputs("<td class=\"l\">", out);
    plr_html_text(out, t->host, PLR_ESC_UNLIMITED);
    fputs("</td>", out);
    plr_ht_td_u64(out, t->tot.all.count);
    plr_ht_td_u64(out, t->tot.pageable.count);
    plr_ht_td_ms(out, t->tot.all.host_ns);
    const plr_gpu_report *g = &ps[i].gpu;
    if (g->ndev) {
      uint64_t ex = 0;
      for (size_t d = 0; d < g->ndev; d++) ex += g->dev[d].copy_exposed_ns;
      plr_ht_td_ms(out, ex);
    } else {
      plr_ht_td(out, "-");
    }
    fputs("</tr>\n", out);
  }
  fputs("</table>\n", out);
}

void plr_report_html(FILE *out, const plr_process *ps, const plr_source *src, size_t n) {
  fprintf(out,
          "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta "
          "charset=\"utf-8\">\n<title>pagelock report</title>\n<style>\n%s"
          "</style>\n</head>\n<body>\n<h1>pagelock report</h1>\n"
          "<p class=\"meta\">%zu process%s traced; trace format %u</p>\n",
          plr_ht_css, n, n == 1 ? "" : "es", PAGELOCK_TRACE_VERSION);
  size_t sim = 0;
  for (size_t i = 0; i < n; i++) sim += (ps[i].t.hdr.flags & PAGELOCK_FILE_SIMULATED) != 0;
  /* One banner per simulated process below; a page of several says how
   * many up front. */
  if (sim && n > 1)
    fprintf(out,
            "<p class=\"banner\">Simulated timings: %zu of %zu trace%s recorded over the fake "
            "CUDA, not a GPU.</p>\n",
            sim, n, n == 1 ? "" : "s");
  if (n > 1) plr_ht_overview(out, ps, n);
  for (size_t i = 0; i < n; i++) plr_ht_process(out, &ps[i], &src[i], i);
  if (!n) fputs("<p>No trace could be read.</p>\n", out);
  fputs("</body>\n</html>\n", out);
}
