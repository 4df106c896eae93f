/* report_text.c - the human-readable report. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "report.h"
#include "escape.h"
#include "format.h"
#include "units.h"

/* Rows shown per table before "... N more". */
#define PLR_TABLE_ROWS 20

/* ANSI colour for this report: set by plr_report_text when the output is a
 * terminal and NO_COLOR is unset (https://no-color.org). */
static int plr_color;
/* The width its sentences wrap at (plr_text_width). */
static int plr_width = 100;

/* The escape sequence for an SGR code, or "" without colour. */
static const char *plr_sgr(const char *code) {
  if (!plr_color) return "";
  if (!code) return "\033[0m";
  static char buf[4][16];
  static int k;
  k = (k + 1) % 4;
  snprintf(buf[k], sizeof buf[k], "\033[%sm", code);
  return buf[k];
}

/* A table of string cells, columns sized to their widest cell.  align[i]
 * is 'l' or 'r' for column i. */
#define PLR_CELL 96
typedef struct plr_tab {
  size_t ncol, nrow, cap;
  char (*cell)[PLR_CELL];
} plr_tab;

/* Starts a table whose first row is the header. */
static void plr_tab_init(plr_tab *t, size_t ncol) {
  memset(t, 0, sizeof *t);
  t->ncol = ncol;
}

/* Appends a row (ncol strings); silently drops it when out of memory (a
 * report line missing beats no report). */
static void plr_tab_row(plr_tab *t, const char *const *cells) {
  if (t->nrow == t->cap) {
    size_t cap = t->cap ? t->cap * 2 : 16;
    void *p = realloc(t->cell, cap * t->ncol * PLR_CELL);
    if (!p) return;
    t->cell = p;
    t->cap = cap;
  }
  for (size_t c = 0; c < t->ncol; c++)
    snprintf(t->cell[t->nrow * t->ncol + c], PLR_CELL, "%s", cells[c]);
  t->nrow++;
}

/* Prints every row indented by two spaces, and frees the table. */
static void plr_tab_print(FILE *out, plr_tab *t, const char *align) {
  size_t w[32] = {0};
  for (size_t r = 0; r < t->nrow; r++)
    for (size_t c = 0; c < t->ncol && c < 32; c++) {
      size_t l = strlen(t->cell[r * t->ncol + c]);
      if (l > w[c]) w[c] = l;
    }
  for (size_t r = 0; r < t->nrow; r++) {
    fputs("  ", out);
    for (size_t c = 0; c < t->ncol && c < 32; c++) {
      const char *v = t->cell[r * t->ncol + c];
      int last = c + 1 == t->ncol;
      if (align[c] == 'r')
        fprintf(out, "%*s", (int)w[c], v);
      else if (last)
        fputs(v, out); /* no trailing blanks */
      else
        fprintf(out, "%-*s", (int)w[c], v);
      if (!last) fputs("  ", out);
    }
    fputc('\n', out);
  }
  free(t->cell);
  memset(t, 0, sizeof *t);
}

/* Column width: the larger of a and a cell length. */
static int plr_max(int a, size_t b) { return (size_t)a > b ? a : (int)b; }

/* Prints the (direction, host memory) table of non-empty buckets. */
static void plr_print_split(FILE *out, const plr_totals *tot) {
  static const unsigned dirs[] = {PAGELOCK_DIR_H2D,  PAGELOCK_DIR_D2H, PAGELOCK_DIR_D2D,
                                  PAGELOCK_DIR_PEER, PAGELOCK_DIR_H2H, PAGELOCK_DIR_UNKNOWN};
  int header = 0;
  for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
    for (unsigned m = 0; m < PLR_NMEM; m++) {
      const plr_bucket *b = &tot->by[dirs[i]][m];
      if (!b->count) continue;
      if (!header) {
        fprintf(out, "  %-7s  %-10s  %8s  %10s  %12s\n", "dir", "host mem", "copies", "bytes",
                "host time");
        header = 1;
      }
      char by[32], ms[32];
      plr_fmt_bytes(b->bytes, by, sizeof by);
      plr_fmt_ms(b->host_ns, ms, sizeof ms);
      fprintf(out, "  %-7s  %-10s  %8" PRIu64 "  %10s  %9s ms\n", plr_dir_name(dirs[i]),
              plr_mem_name(m), b->count, by, ms);
    }
  }
}

/* One line under a table whose host times are partly estimated (runs of
 * repeated copies), none otherwise. */
static void plr_print_estimated(FILE *out, const plr_bucket *b) {
  char line[192];
  if (plr_fmt_estimated(b, line, sizeof line)) fprintf(out, "  (%s)\n", line);
}

/* One line: how many copies (and bytes) took each route. */
static void plr_print_routes(FILE *out, const plr_totals *tot) {
  char by[PLR_NROUTE][32];
  for (int r = 0; r < PLR_NROUTE; r++) plr_fmt_bytes(tot->routes[r].bytes, by[r], sizeof by[r]);
  fprintf(out,
          "routes: %" PRIu64 " copies passed through (%s), %" PRIu64 " staged (%s), %" PRIu64
          " registered (%s)\n",
          tot->routes[PLR_ROUTE_PASS].count, by[PLR_ROUTE_PASS], tot->routes[PLR_ROUTE_STAGE].count,
          by[PLR_ROUTE_STAGE], tot->routes[PLR_ROUTE_REGISTER].count, by[PLR_ROUTE_REGISTER]);
}

/* One line for the copies with no host side (several GPUs), when there
 * are any: they are never staged, registered nor counted as pageable. */
static void plr_print_d2d(FILE *out, const plr_totals *tot) {
  plr_bucket d = plr_totals_dir(tot, PAGELOCK_DIR_D2D), p = plr_totals_dir(tot, PAGELOCK_DIR_PEER);
  if (!d.count && !p.count) return;
  char db[32], pb[32];
  plr_fmt_bytes(d.bytes, db, sizeof db);
  plr_fmt_bytes(p.bytes, pb, sizeof pb);
  fprintf(out, "device-to-device: %" PRIu64 " copies, %s; peer: %" PRIu64 " copies, %s\n", d.count,
          db, p.count, pb);
}

/* One "not registered:" line per reason pageable copies were not
 * registered, most host time first, the numbers aligned. */
static void plr_print_not_registered(FILE *out, const plr_totals *tot) {
  unsigned order[PAGELOCK_WHY_COUNT];
  size_t n = 0;
  for (unsigned w = 0; w < PAGELOCK_WHY_COUNT; w++)
    if (tot->not_registered[w].count) order[n++] = w;
  /* Insertion sort: at most a dozen reasons. */
  for (size_t i = 1; i < n; i++)
    for (size_t k = i;
         k > 0 && tot->not_registered[order[k]].host_ns > tot->not_registered[order[k - 1]].host_ns;
         k--) {
      unsigned x = order[k];
      order[k] = order[k - 1];
      order[k - 1] = x;
    }
  char cnt[PAGELOCK_WHY_COUNT][24], by[PAGELOCK_WHY_COUNT][32], ms[PAGELOCK_WHY_COUNT][32];
  int wc = 0, wb = 0, wm = 0;
  for (size_t i = 0; i < n; i++) {
    const plr_bucket *b = &tot->not_registered[order[i]];
    snprintf(cnt[i], sizeof cnt[i], "%" PRIu64, b->count);
    plr_fmt_bytes(b->bytes, by[i], sizeof by[i]);
    plr_fmt_ms(b->host_ns, ms[i], sizeof ms[i]);
    wc = plr_max(wc, strlen(cnt[i]));
    wb = plr_max(wb, strlen(by[i]));
    wm = plr_max(wm, strlen(ms[i]));
  }
  for (size_t i = 0; i < n; i++)
    fprintf(out, "not registered: %*s copies  %*s  %*s ms  %s\n", wc, cnt[i], wb, by[i], wm, ms[i],
            plr_why_text(order[i]));
}

/* The totals block: overall line, split table, the routes (when routes
 * says so) and why pageable copies were not registered (when why says
 * so), then one line per noteworthy count that is non-zero. */
static void plr_print_totals(FILE *out, const plr_totals *tot, int routes, int why) {
  char by[32], ms[32];
  plr_fmt_bytes(tot->all.bytes, by, sizeof by);
  plr_fmt_ms(tot->all.host_ns, ms, sizeof ms);
  fprintf(out,
          "copies: %" PRIu64
          " calls, %s, %s ms of host time inside "
          "copy calls\n",
          tot->all.count, by, ms);
  plr_print_split(out, tot);
  plr_print_estimated(out, &tot->all);
  plr_print_d2d(out, tot);
  if (routes) plr_print_routes(out, tot);
  if (why) plr_print_not_registered(out, tot);
  if (tot->pageable_async.count) {
    plr_fmt_ms(tot->pageable_async.host_ns, ms, sizeof ms);
    fprintf(out,
            "%" PRIu64
            " async copies were made synchronous by pageable "
            "memory, blocking the host %s ms\n",
            tot->pageable_async.count, ms);
  }
  if (tot->staged.count) {
    plr_fmt_bytes(tot->staged.bytes, by, sizeof by);
    plr_fmt_ms(tot->staged.host_ns, ms, sizeof ms);
    fprintf(out,
            "%" PRIu64
            " pageable copies (%s) were staged through pinned "
            "memory, %s ms of host time\n",
            tot->staged.count, by, ms);
  }
  if (tot->registered)
    fprintf(out,
            "%" PRIu64
            " copies used host memory page-locked by "
            "pagelock\n",
            tot->registered);
  if (tot->fallbacks)
    fprintf(out,
            "%" PRIu64
            " copies fell back to the native call "
            "(staging gave up)\n",
            tot->fallbacks);
  if (tot->captured)
    fprintf(out,
            "%" PRIu64
            " copies were on a capturing stream (left "
            "untouched)\n",
            tot->captured);
  if (tot->graph_nodes)
    fprintf(out,
            "%" PRIu64 " graph memcpy nodes were defined, %" PRIu64
            " of them with a pageable host side (graphs are left as built; "
            "each launch copies again)\n",
            tot->graph_nodes, tot->graph_nodes_pageable);
  if (tot->failed)
    fprintf(out,
            "%" PRIu64
            " copies returned a CUDA error to the "
            "program\n",
            tot->failed);
}

/* One formatted table cell set, so widths can be measured first.  The
 * site is escaped (escape.h): up to 4 bytes for each byte of the name. */
typedef struct plr_cells {
  char count[24], bytes[32], ms[32], gbps[32], dirs[48], site[4096];
  char native[4096];                /* the native site beneath a Python line, "" none */
  char lib[1024];                   /* the library line that made the call, "" none */
  char gpu[48], sync[24], save[48]; /* with GPU timing only */
} plr_cells;

/* Formats every cell of one table row into c. */
static void plr_row_cells(const plr_row *r, plr_cells *c) {
  snprintf(c->count, sizeof c->count, "%" PRIu64, r->b.count);
  plr_fmt_bytes(r->b.bytes, c->bytes, sizeof c->bytes);
  plr_fmt_ms(r->b.host_ns, c->ms, sizeof c->ms);
  plr_fmt_gbps(r->b.bytes, r->b.host_ns, c->gbps, sizeof c->gbps);
  plr_fmt_dirs(r->dirs, c->dirs, sizeof c->dirs);
  char site[1024];
  plr_site_format(r->frame, r->addr, site, sizeof site);
  c->native[0] = c->lib[0] = 0;
  if (r->py) {
    plr_text_escape(site, c->native, sizeof c->native);
    if (r->py->lib) {
      plr_pyloc_format_lib(r->py->lib, site, sizeof site);
      plr_text_escape(site, c->lib, sizeof c->lib);
    }
    plr_pyloc_format(r->py->f[0], site, sizeof site);
  }
  plr_text_escape(site, c->site, sizeof c->site);
  if (r->g.calls) {
    char ms[32];
    plr_fmt_ms(r->g.gpu_ns, ms, sizeof ms);
    snprintf(c->gpu, sizeof c->gpu, "%s ms", ms);
  } else {
    snprintf(c->gpu, sizeof c->gpu, "-");
  }
  snprintf(c->sync, sizeof c->sync, "%" PRIu64, r->g.made_sync);
  if (r->would_save_ns >= 0) {
    char ms[32];
    plr_fmt_ms((uint64_t)r->would_save_ns, ms, sizeof ms);
    snprintf(c->save, sizeof c->save, "%s ms", ms);
  } else {
    snprintf(c->save, sizeof c->save, "-");
  }
}

/* One site table, columns sized to the rows shown, at most
 * PLR_TABLE_ROWS rows then a "... N more" summary of the rest.  With GPU
 * timing (gpu) three columns join: GPU time of the joined copies, calls
 * made synchronous, and the host time pinned memory would have saved. */
static void plr_print_table(FILE *out, const char *title, const char *what, const plr_rows *rows,
                            int gpu, int moving) {
  /* Under a mode that stages or registers, a row's host time is already
   * what staging left: the column says what remains against pinned. */
  const char *save_head = moving ? "left vs pinned" : "would save";
  if (!rows->n) return;
  size_t shown = rows->n < PLR_TABLE_ROWS ? rows->n : PLR_TABLE_ROWS;
  plr_cells c;
  int wc = 5, wb = 5, wm = 12, wg = 4, wd = 3, wt = 6, ws = 9, wv = (int)strlen(save_head);
  for (size_t i = 0; i < shown; i++) {
    plr_row_cells(&rows->v[i], &c);
    wc = plr_max(wc, strlen(c.count));
    wb = plr_max(wb, strlen(c.bytes));
    wm = plr_max(wm, strlen(c.ms) + 3);
    wg = plr_max(wg, strlen(c.gbps));
    wd = plr_max(wd, strlen(c.dirs));
    wt = plr_max(wt, strlen(c.gpu));
    ws = plr_max(ws, strlen(c.sync));
    wv = plr_max(wv, strlen(c.save));
  }
  fprintf(out, "\n%s:\n", title);
  fprintf(out, "  %*s  %*s  %*s  %*s  %-*s  ", wc, "count", wb, "bytes", wm, "host blocked", wg,
          "GB/s", wd, "dir");
  if (gpu) fprintf(out, "%*s  %*s  %*s  ", wt, "GPU ms", ws, "made sync", wv, save_head);
  fprintf(out, "%s\n", what);
  for (size_t i = 0; i < shown; i++) {
    plr_row_cells(&rows->v[i], &c);
    char ms[40];
    snprintf(ms, sizeof ms, "%s ms", c.ms);
    fprintf(out, "  %*s  %*s  %*s  %*s  %-*s  ", wc, c.count, wb, c.bytes, wm, ms, wg, c.gbps, wd,
            c.dirs);
    if (gpu) fprintf(out, "%*s  %*s  %*s  ", wt, c.gpu, ws, c.sync, wv, c.save);
    fprintf(out, "%s\n", c.site);
    /* A Python line first, the library line that made the call and the
     * native site it went through beneath. */
    int indent =
        2 + wc + 2 + wb + 2 + wm + 2 + wg + 2 + wd + 2 + (gpu ? wt + 2 + ws + 2 + wv + 2 : 0) + 2;
    if (c.lib[0]) fprintf(out, "%*slibrary: %s\n", indent, "", c.lib);
    if (c.native[0]) fprintf(out, "%*snative: %s\n", indent, "", c.native);
    const plr_row *r = &rows->v[i];
    if (r->g.chunks) {
      /* The shim's copies, under the program's call they moved. */
      char by[32], gms[32];
      plr_fmt_bytes(r->g.chunk_bytes, by, sizeof by);
      plr_fmt_ms(r->g.chunk_gpu_ns, gms, sizeof gms);
      fprintf(out,
              "  %*s  staged through %" PRIu64
              " chunks (%s, %s ms of "
              "GPU time)\n",
              wc, "", r->g.chunks, by, gms);
    }
    if (r->g.reg_ops) {
      char by[32], gms[32];
      plr_fmt_bytes(r->g.reg_bytes, by, sizeof by);
      plr_fmt_ms(r->g.reg_gpu_ns, gms, sizeof gms);
      fprintf(out, "  %*s  registered: %" PRIu64 " copies of pagelock's (%s, %s ms of GPU time)\n",
              wc, "", r->g.reg_ops, by, gms);
    }
  }
  if (rows->n > shown) {
    plr_bucket rest = {0};
    for (size_t i = shown; i < rows->n; i++) plr_bucket_add(&rest, &rows->v[i].b);
    char ms[32];
    plr_fmt_ms(rest.host_ns, ms, sizeof ms);
    fprintf(out, "  ... %zu more (%" PRIu64 " copies, %s ms)\n", rows->n - shown, rest.count, ms);
  }
  plr_bucket all = {0};
  for (size_t i = 0; i < rows->n; i++) plr_bucket_add(&all, &rows->v[i].b);
  plr_print_estimated(out, &all);
}

/* The staging and registration engines' counters, a line each, when
 * they did anything. */
static void plr_print_counters(FILE *out, const pagelock_rec_counters *c) {
  int st = plr_counters_staging(c), reg = plr_counters_registration(c);
  if (!st && !reg) return;
  char line[512];
  fputc('\n', out);
  if (st) {
    plr_fmt_counters(c, line, sizeof line);
    fprintf(out, "staging: %s\n", line);
  }
  if (reg) {
    plr_fmt_register_counters(c, line, sizeof line);
    fprintf(out, "registration: %s\n", line);
  }
}

/* One line telling the user what to do about what the trace shows, in
 * the words of the framework that made the buffers (analysis.c). */
static void plr_print_advice(FILE *out, const plr_process *p) {
  const plr_trace *t = &p->t;
  const plr_totals *tot = &t->tot;
  const char *pin = plr_process_pin_words(p);
  uint64_t moved = tot->staged.count + tot->registered;
  char line[1024];
  if (!tot->pageable.count) {
    snprintf(line, sizeof line, "no copy used pageable host memory: nothing for pagelock to fix.");
  } else if (moved >= tot->pageable.count) {
    snprintf(line, sizeof line,
             "pagelock %s every pageable copy; to get the same speed without it, %s.",
             tot->registered ? "staged or registered" : "staged", pin);
  } else if (plr_trace_shows_why(t)) {
    snprintf(line, sizeof line,
             "%s; %" PRIu64
             " pageable copies were neither staged nor registered (see 'not registered' above).",
             pin, tot->pageable.count - moved);
  } else if (t->have_process && t->mode == PAGELOCK_MODE_STAGE) {
    /* Suggesting --mode=stage to a run that used it would be useless.
     * Point at the notes only when there are some to read. */
    snprintf(line, sizeof line,
             "%s; %" PRIu64
             " pageable copies were not staged (smaller than PAGELOCK_STAGE_MIN, 2D/3D or batch "
             "copies, on a capturing stream, or staging unavailable%s).",
             pin, tot->pageable.count - tot->staged.count,
             t->nnotes ? ": see the notes above" : "");
  } else {
    snprintf(line, sizeof line,
             "%s, or run with --mode=auto: it registers buffers copied again and again and stages "
             "the rest through pinned memory.",
             pin);
  }
  plr_text_wrapped(out, plr_width, "advice: ", 8, 8, line);
}

/* The first lines about GPU timing: where it came from, or why there is
 * none and what to do. */
static void plr_print_gpu_status(FILE *out, const plr_gpu_report *g) {
  if (g->status == PAGELOCK_GPU_TIMING_ON) {
    fprintf(out, "GPU timing: CUPTI, %" PRIu64 " records, %" PRIu64 " dropped\n", g->records,
            g->dropped);
    return;
  }
  /* A program that started its own profiler midway took CUPTI over: what
   * came before is still measured. */
  /* The reason comes from the trace: escaped. */
  const char *why = g->reason[0] ? g->reason : plr_gpu_status_name(g->status);
  char label[48], line[1024];
  snprintf(label, sizeof label, "%sGPU timing %s:%s ", plr_sgr("33"),
           g->records ? "partial" : "unavailable", plr_sgr(NULL));
  if (g->records)
    snprintf(line, sizeof line, "CUPTI, %" PRIu64 " records, %" PRIu64 " dropped, then %s",
             g->records, g->dropped, why);
  else
    snprintf(line, sizeof line, "%s", why);
  plr_text_wrapped(out, plr_width, label, g->records ? 20 : 24, 2, line);
  for (size_t i = 0; i < g->nverdicts; i++)
    if (g->verdicts[i].kind == PLR_VERDICT_NO_GPU_TIMING && g->verdicts[i].advice[0])
      plr_text_wrapped(out, plr_width, "  fix: ", 7, 7, g->verdicts[i].advice);
}

/* The SGR colour of a verdict kind: red for time lost to the host, yellow
 * for GPU scheduling problems, green for good news. */
static const char *plr_verdict_color(uint32_t kind) {
  switch (kind) {
    case PLR_VERDICT_GOOD: return "32";
    case PLR_VERDICT_ONE_ENGINE:
    case PLR_VERDICT_IDLE: return "33";
    default: return "1;31";
  }
}

/* One line per verdict (the missing-timing one is in the status lines),
 * each followed by what to do.  Both hold device and site names from the
 * trace: escaped. */
static void plr_print_verdicts(FILE *out, const plr_verdict *vs, size_t n) {
  for (size_t i = 0; i < n; i++) {
    const plr_verdict *v = &vs[i];
    if (v->kind == PLR_VERDICT_NO_GPU_TIMING) continue;
    char label[48];
    snprintf(label, sizeof label, "%sverdict:%s ", plr_sgr(plr_verdict_color(v->kind)),
             plr_sgr(NULL));
    plr_text_wrapped(out, plr_width, label, 9, 9, v->text);
    if (v->advice[0]) plr_text_wrapped(out, plr_width, "  fix: ", 7, 7, v->advice);
  }
}

/* ms with 3 decimals, or "-" for an absent measure. */
static void plr_cell_ms(uint64_t ns, char *buf, size_t len) { plr_fmt_ms(ns, buf, len); }

/* Percent with no decimals, "-" when the whole is 0. */
static void plr_cell_pct(uint64_t part, uint64_t whole, char *buf, size_t len) {
  if (!whole)
    snprintf(buf, len, "-");
  else
    snprintf(buf, len, "%.0f%%", 100.0 * (double)part / (double)whole);
}

/* The per-device table, then each device's longest idle gaps. */
static void plr_print_devices(FILE *out, const plr_gpu_report *g, uint64_t t0) {
  if (!g->ndev) return;
  fprintf(out, "\nGPU devices (GPU time, ms):\n");
  plr_tab tab;
  plr_tab_init(&tab, 14);
  static const char *const head[] = {"device",  "name",    "engines", "window", "kernels",
                                     "H2D",     "D2H",     "other",   "copies", "hidden",
                                     "exposed", "H2D+D2H", "idle",    "gaps"};
  plr_tab_row(&tab, head);
  for (size_t i = 0; i < g->ndev; i++) {
    const plr_device_report *d = &g->dev[i];
    char c[14][PLR_CELL];
    snprintf(c[0], PLR_CELL, "%u", d->device);
    plr_text_escape(d->name[0] ? d->name : "-", c[1], PLR_CELL);
    if (d->copy_engines)
      snprintf(c[2], PLR_CELL, "%u", d->copy_engines);
    else
      snprintf(c[2], PLR_CELL, "-");
    plr_cell_ms(d->window.end - d->window.start, c[3], PLR_CELL);
    plr_cell_ms(d->kernel_busy_ns, c[4], PLR_CELL);
    plr_cell_ms(d->copy_busy_ns[PLR_CDIR_H2D], c[5], PLR_CELL);
    plr_cell_ms(d->copy_busy_ns[PLR_CDIR_D2H], c[6], PLR_CELL);
    plr_cell_ms(d->copy_busy_ns[PLR_CDIR_OTHER], c[7], PLR_CELL);
    plr_cell_ms(d->copy_busy_all_ns, c[8], PLR_CELL);
    plr_cell_pct(d->copy_hidden_ns, d->copy_busy_all_ns, c[9], PLR_CELL);
    plr_cell_ms(d->copy_exposed_ns, c[10], PLR_CELL);
    plr_cell_ms(d->h2d_d2h_together_ns, c[11], PLR_CELL);
    plr_cell_ms(d->idle_ns, c[12], PLR_CELL);
    snprintf(c[13], PLR_CELL, "%" PRIu64, d->gaps_total);
    const char *row[14];
    for (int k = 0; k < 14; k++) row[k] = c[k];
    plr_tab_row(&tab, row);
  }
  plr_tab_print(out, &tab, "rlrrrrrrrrrrrr");
  fprintf(out,
          "  (hidden: share of copy time that ran under kernels; "
          "exposed: copy time with no kernel running)\n");
  for (size_t i = 0; i < g->ndev; i++) {
    const plr_device_report *d = &g->dev[i];
    if (!d->ngaps) continue;
    char thr[32];
    plr_fmt_ms(d->gap_threshold_ns, thr, sizeof thr);
    fprintf(out, "  device %u idle gaps >= %s ms (longest first):", d->device, thr);
    for (size_t k = 0; k < d->ngaps; k++) {
      char len[32], at[32];
      plr_fmt_ms(d->gaps[k].end - d->gaps[k].start, len, sizeof len);
      plr_fmt_ms(d->gaps[k].start > t0 ? d->gaps[k].start - t0 : 0, at, sizeof at);
      fprintf(out, "%s %s ms at +%s ms", k ? "," : "", len, at);
    }
    if (d->gaps_total > d->ngaps) fprintf(out, ", ... %" PRIu64 " more", d->gaps_total - d->ngaps);
    fputc('\n', out);
  }
}

/* Effective bandwidth of GPU copies by kind and size, per device. */
static void plr_print_bandwidth(FILE *out, const plr_gpu_report *g) {
  size_t rows = 0;
  for (size_t i = 0; i < g->ndev; i++) rows += g->dev[i].nbw;
  if (!rows) return;
  fprintf(out, "\nGPU copy bandwidth (bytes / GPU time of each copy):\n");
  int staged = 0, registered = 0;
  plr_tab tab;
  plr_tab_init(&tab, 10);
  static const char *const head[] = {"device", "copy",  "from",   "to",          "size",
                                     "count",  "bytes", "GPU ms", "median GB/s", "p10 GB/s"};
  plr_tab_row(&tab, head);
  for (size_t i = 0; i < g->ndev; i++) {
    const plr_device_report *d = &g->dev[i];
    for (size_t k = 0; k < d->nbw; k++) {
      const plr_bw_row *b = &d->bw[k];
      char c[10][PLR_CELL];
      snprintf(c[0], PLR_CELL, "%u", d->device);
      snprintf(c[1], PLR_CELL, "%s", plr_gpu_copy_name(b->copy_kind));
      /* A chunk's host side is the shim's pinned buffer, not the
       * program's memory: named apart. */
      int hs = b->copy_kind == PAGELOCK_GPU_COPY_HTOD || b->copy_kind == PAGELOCK_GPU_COPY_HTOA;
      int hd = b->copy_kind == PAGELOCK_GPU_COPY_DTOH || b->copy_kind == PAGELOCK_GPU_COPY_ATOH;
      staged |= b->staged;
      registered |= b->registered;
      const char *shim = b->staged ? "staged" : b->registered ? "registered" : NULL;
      snprintf(c[2], PLR_CELL, "%s", shim && hs ? shim : plr_gpu_mem_name(b->src_kind));
      snprintf(c[3], PLR_CELL, "%s", shim && hd ? shim : plr_gpu_mem_name(b->dst_kind));
      snprintf(c[4], PLR_CELL, "%s", plr_size_bucket_name(b->bucket));
      snprintf(c[5], PLR_CELL, "%" PRIu64, b->count);
      plr_fmt_bytes(b->bytes, c[6], PLR_CELL);
      plr_fmt_ms(b->gpu_ns, c[7], PLR_CELL);
      snprintf(c[8], PLR_CELL, "%.2f", b->median_gbps);
      snprintf(c[9], PLR_CELL, "%.2f", b->p10_gbps);
      const char *row[10];
      for (int j = 0; j < 10; j++) row[j] = c[j];
      plr_tab_row(&tab, row);
    }
  }
  plr_tab_print(out, &tab, "rlllrrrrrr");
  if (staged)
    fprintf(out,
            "  (staged: the pinned chunks pagelock moved staged copies "
            "through, not copies the program made)\n");
  if (registered)
    fprintf(out,
            "  (registered: the program's buffers that pagelock page-locked, copied in its "
            "pieces, edges and tail)\n");
}

/* How many copy calls found their GPU op(s). */
static void plr_print_join(FILE *out, const plr_gpu_report *g) {
  const plr_call_join *j = &g->join;
  fprintf(out,
          "GPU join: %" PRIu64 " of %" PRIu64
          " copy calls matched "
          "their GPU copies",
          j->calls, j->calls + j->unjoined);
  /* The shim's chunks are its own GPU copies, not the program's: they
   * are named as what they are and never counted among the calls. */
  if (j->linked && j->registered)
    fprintf(out,
            " (%" PRIu64 " staged through %" PRIu64 " chunks, %" PRIu64 " registered in %" PRIu64
            " copies of pagelock's)",
            j->linked, j->chunks, j->registered, j->reg_ops);
  else if (j->linked)
    fprintf(out, " (%" PRIu64 " staged through %" PRIu64 " chunks)", j->linked, j->chunks);
  else if (j->registered)
    fprintf(out, " (%" PRIu64 " registered, in %" PRIu64 " copies of pagelock's)", j->registered,
            j->reg_ops);
  if (j->gpu_ops_unjoined)
    fprintf(out, "; %" PRIu64 " GPU copies matched no call", j->gpu_ops_unjoined);
  /* Copies made while tracing was paused have no GPU op by design: not
   * among the calls that should have matched. */
  if (j->untimed_paused)
    fprintf(out, "; %" PRIu64 " more copy calls ran while GPU timing was paused",
            j->untimed_paused);
  fputc('\n', out);
  if (j->mem_mismatch)
    fprintf(out,
            "warning: for %" PRIu64
            " calls CUPTI and pagelock "
            "disagree on whether the host memory was pageable\n",
            j->mem_mismatch);
}

/* The whole section of one process. */
static void plr_print_process(FILE *out, const plr_process *p) {
  const plr_trace *t = &p->t;
  char ms[32];
  uint64_t span = t->last_ns > t->first_ns ? t->last_ns - t->first_ns : 0;
  plr_fmt_ms(span, ms, sizeof ms);
  fprintf(out, "== pid %" PRIu64 " ", t->hdr.pid);
  if (t->exe[0])
    plr_text_puts(out, t->exe);
  else
    fputs("(unknown program)", out);
  if (t->host[0]) {
    fputs(" on ", out);
    plr_text_puts(out, t->host);
  }
  fprintf(out, ": mode %s, %s ms traced", t->have_process ? plr_mode_name(t->mode) : "unknown", ms);
  if (t->rank >= 0) fprintf(out, ", rank %d", t->rank);
  if (t->hdr.flags & PAGELOCK_FILE_SIMULATED) fprintf(out, " (simulated timings)");
  if (plr_trace_partial(t)) {
    /* Why, when the trace knows: the writer's stop flags, or the byte where
     * a checksummed trace is damaged. */
    const char *why = plr_trace_stop_reason(t);
    if (t->stop == PLR_STOP_DAMAGED)
      fprintf(out, " [partial trace: corrupt from byte %" PRIu64 "]", t->damage.from);
    else if (why)
      fprintf(out, " [partial trace: %s]", why);
    else
      fprintf(out, " [partial trace]");
  }
  fprintf(out, " ==\n");
  const plr_gpu_report *g = &p->gpu;
  int timed = plr_gpu_report_timed(g);
  /* What pageable memory cost and where to fix it: host timing is enough,
   * so it leads whatever GPU timing there is. */
  plr_print_verdicts(out, g->pageable, g->npageable);
  plr_print_gpu_status(out, g);
  if (g->sampled) {
    char line[512];
    plr_gpu_sampling_sentence(g, line, sizeof line);
    plr_text_wrapped(out, plr_width, "", 0, 2, line);
  }
  for (size_t i = 0; i < t->nnotes; i++) {
    /* One prefix: "warning:" or "note:". */
    int warn = t->notes[i].kind == PAGELOCK_NOTE_WARNING;
    plr_text_wrapped(out, plr_width, warn ? "warning: " : "note: ", warn ? 9 : 6, warn ? 9 : 6,
                     t->notes[i].text);
  }
  if (t->notes_dropped) fprintf(out, "note: ... %" PRIu64 " more notes\n", t->notes_dropped);
  plr_print_verdicts(out, g->verdicts, g->nverdicts);
  plr_print_totals(out, &t->tot, plr_trace_shows_routes(t), plr_trace_shows_why(t));
  if (timed) plr_print_join(out, g);
  plr_print_devices(out, g, t->first_ns);
  plr_print_bandwidth(out, g);
  int moving =
      t->have_process && (t->mode == PAGELOCK_MODE_STAGE || t->mode == PAGELOCK_MODE_REGISTER ||
                          t->mode == PAGELOCK_MODE_AUTO);
  plr_print_table(out, "pageable copies by call site (worst first)", "call site", &p->calls, timed,
                  moving);
  plr_print_table(out, "pageable copies by allocation site (worst first)", "allocation site",
                  &p->allocs, timed, moving);
  if (t->have_counters) plr_print_counters(out, &t->counters);
  if (t->have_cost) {
    char line[512];
    plr_fmt_cost(&t->cost, t->last_ns > t->first_ns ? t->last_ns - t->first_ns : 0, line,
                 sizeof line);
    fputc('\n', out);
    plr_text_wrapped(out, plr_width, "call sites cost: ", 17, 17, line);
  }
  fputc('\n', out);
  plr_print_advice(out, p);
}

/* One row per process when several were reported: where the time went,
 * rank by rank. */
static void plr_print_ranks(FILE *out, const plr_process *ps, size_t n) {
  fprintf(out, "\nper rank:\n");
  plr_tab tab;
  plr_tab_init(&tab, 8);
  static const char *const head[] = {"rank",     "host",         "pid",          "copies",
                                     "pageable", "host blocked", "exposed copy", "hidden"};
  plr_tab_row(&tab, head);
  for (size_t i = 0; i < n; i++) {
    const plr_trace *t = &ps[i].t;
    const plr_gpu_report *g = &ps[i].gpu;
    char c[8][PLR_CELL], ms[32];
    if (t->rank >= 0)
      snprintf(c[0], PLR_CELL, "%d", t->rank);
    else
      snprintf(c[0], PLR_CELL, "-");
    plr_text_escape(t->host[0] ? t->host : "-", c[1], PLR_CELL);
    snprintf(c[2], PLR_CELL, "%" PRIu64, t->hdr.pid);
    snprintf(c[3], PLR_CELL, "%" PRIu64, t->tot.all.count);
    snprintf(c[4], PLR_CELL, "%" PRIu64, t->tot.pageable.count);
    plr_fmt_ms(t->tot.all.host_ns, ms, sizeof ms);
    snprintf(c[5], PLR_CELL, "%s ms", ms);
    if (plr_gpu_report_timed(g)) {
      plr_fmt_ms(g->total_copy_exposed_ns, ms, sizeof ms);
      snprintf(c[6], PLR_CELL, "%s ms", ms);
      plr_cell_pct(g->total_copy_hidden_ns, g->total_copy_busy_ns, c[7], PLR_CELL);
    } else {
      snprintf(c[6], PLR_CELL, "-");
      snprintf(c[7], PLR_CELL, "-");
    }
    const char *row[8];
    for (int k = 0; k < 8; k++) row[k] = c[k];
    plr_tab_row(&tab, row);
  }
  plr_tab_print(out, &tab, "rlrrrrrr");
}

void plr_report_text(FILE *out, const plr_process *ps, size_t n) {
  const char *nc = getenv("NO_COLOR");
  plr_color = isatty(fileno(out)) && !(nc && nc[0]);
  plr_width = plr_text_width(out);
  plr_totals all;
  memset(&all, 0, sizeof all);
  int routes = 0, why = 0;
  for (size_t i = 0; i < n; i++) {
    if (i) fputc('\n', out);
    plr_print_process(out, &ps[i]);
    plr_totals_add(&all, &ps[i].t.tot);
    routes |= plr_trace_shows_routes(&ps[i].t);
    why |= plr_trace_shows_why(&ps[i].t);
  }
  if (n > 1) {
    fprintf(out, "\n== total over %zu processes ==\n", n);
    plr_print_totals(out, &all, routes, why);
    plr_print_ranks(out, ps, n);
  }
}
