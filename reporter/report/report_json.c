/* report_json.c - the machine-readable report (schema: docs/trace-format.md).
 * Hand-written: the schema is small and flat, and a JSON library would be
 * the reporter's only dependency beyond libc. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "report.h"
#include "escape.h"
#include "format.h"
#include "units.h"
#include "pysite.h"

#define PLR_JSON_SCHEMA_VERSION 1

/* Writes s as a JSON string literal, or null.  Paths and symbol names are
 * opaque bytes on Linux: invalid UTF-8 becomes U+FFFD so the document stays
 * valid JSON (escape.c). */
static void plr_json_str(FILE *out, const char *s) {
  if (!s) {
    fputs("null", out);
    return;
  }
  plr_json_string(out, s, PLR_ESC_UNLIMITED);
}

/* Writes "name": {copies, bytes, host_ns} (no trailing comma). */
static void plr_json_bucket(FILE *out, const char *name, const plr_bucket *b) {
  fprintf(out,
          "\"%s\": {\"copies\": %" PRIu64 ", \"bytes\": %" PRIu64 ", \"host_ns\": %" PRIu64 "}",
          name, b->count, b->bytes, b->host_ns);
}

/* Writes , "estimated": {"copies": N, "timed": M} when some host time of
 * b is an estimate (runs of repeated copies), nothing otherwise: reports
 * of traces without runs keep their exact shape. */
static void plr_json_estimated(FILE *out, const plr_bucket *b) {
  if (!b->est_count) return;
  fprintf(out, ", \"estimated\": {\"copies\": %" PRIu64 ", \"timed\": %" PRIu64 "}", b->est_count,
          b->est_timed);
}

/* Writes a TOTALS object; ind is the indentation of its opening line. */
static void plr_json_totals(FILE *out, const plr_totals *t, const char *ind) {
  fprintf(out, "{\n%s  \"copies\": %" PRIu64 ", \"bytes\": %" PRIu64 ", \"host_ns\": %" PRIu64, ind,
          t->all.count, t->all.bytes, t->all.host_ns);
  plr_json_estimated(out, &t->all);
  fprintf(out,
          ",\n%s  \"failed\": %" PRIu64 ", \"fallbacks\": %" PRIu64 ", \"captured\": %" PRIu64
          ", \"registered\": %" PRIu64 ", \"graph_nodes\": %" PRIu64
          ", \"graph_nodes_pageable\": %" PRIu64 ",\n%s  ",
          ind, t->failed, t->fallbacks, t->captured, t->registered, t->graph_nodes,
          t->graph_nodes_pageable, ind);
  plr_json_bucket(out, "pageable", &t->pageable);
  fprintf(out, ",\n%s  ", ind);
  plr_json_bucket(out, "pageable_async", &t->pageable_async);
  fprintf(out, ",\n%s  ", ind);
  plr_json_bucket(out, "staged", &t->staged);
  plr_bucket d2d = plr_totals_dir(t, PAGELOCK_DIR_D2D), peer = plr_totals_dir(t, PAGELOCK_DIR_PEER);
  fprintf(out, ",\n%s  ", ind);
  plr_json_bucket(out, "device_to_device", &d2d);
  fprintf(out, ",\n%s  ", ind);
  plr_json_bucket(out, "peer", &peer);
  fprintf(out, ",\n%s  \"routes\": {", ind);
  for (unsigned r = 0; r < PLR_NROUTE; r++) {
    if (r) fprintf(out, ",\n%s             ", ind);
    plr_json_bucket(out, plr_route_name(r), &t->routes[r]);
  }
  fprintf(out, "},\n%s  \"not_registered\": {", ind);
  int any = 0;
  for (unsigned w = 0; w < PAGELOCK_WHY_COUNT; w++) {
    if (!t->not_registered[w].count) continue;
    if (any) fprintf(out, ",\n%s                     ", ind);
    plr_json_bucket(out, plr_why_name(w), &t->not_registered[w]);
    any = 1;
  }
  fprintf(out, "},\n%s  \"by_kind\": [", ind);
  int first = 1;
  for (unsigned d = 0; d < PLR_NDIR; d++) {
    for (unsigned m = 0; m < PLR_NMEM; m++) {
      const plr_bucket *b = &t->by[d][m];
      if (!b->count) continue;
      fprintf(out,
              "%s\n%s    {\"dir\": \"%s\", \"mem\": \"%s\", \"copies\": "
              "%" PRIu64 ", \"bytes\": %" PRIu64 ", \"host_ns\": %" PRIu64 "}",
              first ? "" : ",", ind, plr_dir_name(d), plr_mem_name(m), b->count, b->bytes,
              b->host_ns);
      first = 0;
    }
  }
  if (!first) fprintf(out, "\n%s  ", ind);
  fprintf(out, "]\n%s}", ind);
}

/* Writes a SITE array with every row (JSON is not truncated at 20). */
/* A row's Python frames (docs/trace-format.md, "python"). */
static void plr_pyloc_json(FILE *out, const plr_pyloc *l) {
  fputs("\"file\": ", out);
  plr_json_string(out, l->file, PLR_ESC_UNLIMITED);
  fprintf(out, ", \"line\": %u, \"function\": ", l->line);
  plr_json_string(out, l->func, PLR_ESC_UNLIMITED);
  fprintf(out, ", \"library\": %s", l->library ? "true" : "false");
}

static void plr_pysite_json(FILE *out, const plr_pysite *s) {
  if (!s) {
    fputs("null", out);
    return;
  }
  fputc('{', out);
  plr_pyloc_json(out, s->f[0]);
  /* The library line that made the call below the user's code. */
  fputs(", \"library_line\": ", out);
  if (s->lib) {
    fputc('{', out);
    plr_pyloc_json(out, s->lib);
    fputc('}', out);
  } else {
    fputs("null", out);
  }
  fprintf(out, ", \"truncated\": %s, \"frames\": [",
          s->flags & PAGELOCK_PY_TRUNCATED ? "true" : "false");
  for (uint32_t i = 0; i < s->depth; i++) {
    fputs(i ? ", {" : "{", out);
    plr_pyloc_json(out, s->f[i]);
    fputc('}', out);
  }
  fputs("]}", out);
}

static void plr_json_rows(FILE *out, const plr_rows *rows) {
  fputc('[', out);
  for (size_t i = 0; i < rows->n; i++) {
    const plr_row *r = &rows->v[i];
    const plr_frame *f = r->frame;
    char site[1024], dirs[64];
    plr_site_format(f, r->addr, site, sizeof site);
    plr_fmt_dirs(r->dirs, dirs, sizeof dirs);
    fprintf(out,
            "%s\n      {\"copies\": %" PRIu64 ", \"bytes\": %" PRIu64 ", \"host_ns\": %" PRIu64
            ", \"gbps\": ",
            i ? "," : "", r->b.count, r->b.bytes, r->b.host_ns);
    if (r->b.host_ns)
      fprintf(out, "%.3f", (double)r->b.bytes / (double)r->b.host_ns);
    else
      fputs("null", out);
    plr_json_estimated(out, &r->b);
    fputs(", \"dirs\": [", out);
    int first = 1;
    for (char *tok = strtok(dirs, ","); tok; tok = strtok(NULL, ",")) {
      if (strcmp(tok, "-") == 0) continue;
      fprintf(out, "%s\"%s\"", first ? "" : ", ", tok);
      first = 0;
    }
    fprintf(out, "], \"address\": \"0x%" PRIx64 "\", \"site\": ", r->addr);
    plr_json_str(out, site);
    fputs(", \"function\": ", out);
    plr_json_str(out, f ? f->func : NULL);
    fputs(", \"module\": ", out);
    plr_json_str(out, f ? f->module : NULL);
    fputs(", \"file\": ", out);
    plr_json_str(out, f ? f->file : NULL);
    fprintf(out, ", \"line\": %u", f ? f->line : 0);
    /* Only for sites with Python frames: reports of native programs keep
     * their exact shape. */
    if (r->py) {
      fputs(", \"python\": ", out);
      plr_pysite_json(out, r->py);
    }
    fprintf(out,
            ", \"gpu_calls\": %" PRIu64 ", \"gpu_ns\": %" PRIu64 ", \"made_sync\": %" PRIu64
            ", \"made_sync_host_ns\": %" PRIu64 ", \"would_save_ns\": ",
            r->g.calls, r->g.gpu_ns, r->g.made_sync, r->g.made_sync_host_ns);
    if (r->would_save_ns >= 0)
      fprintf(out, "%" PRId64, r->would_save_ns);
    else
      fputs("null", out);
    fprintf(out,
            ", \"staged_chunks\": %" PRIu64 ", \"staged_chunk_bytes\": %" PRIu64
            ", \"staged_chunk_gpu_ns\": %" PRIu64 ", \"registered_ops\": %" PRIu64
            ", \"registered_op_bytes\": %" PRIu64 ", \"registered_op_gpu_ns\": %" PRIu64,
            r->g.chunks, r->g.chunk_bytes, r->g.chunk_gpu_ns, r->g.reg_ops, r->g.reg_bytes,
            r->g.reg_gpu_ns);
    fputs(", \"device\": ", out);
    if (plr_row_device(r) >= 0)
      fprintf(out, "%d", plr_row_device(r));
    else
      fputs("null", out);
    fputc('}', out);
  }
  fputs(rows->n ? "\n    ]" : "]", out);
}

/* A bandwidth in GB/s, null when unmeasured (0). */
static void plr_json_gbps(FILE *out, double v) {
  if (v > 0)
    fprintf(out, "%.3f", v);
  else
    fputs("null", out);
}

/* {"H2D": x, "D2H": y} of per-direction pinned bandwidths. */
static void plr_json_pinned(FILE *out, const double *v) {
  fputs("{\"H2D\": ", out);
  plr_json_gbps(out, v[PLR_CDIR_H2D]);
  fputs(", \"D2H\": ", out);
  plr_json_gbps(out, v[PLR_CDIR_D2H]);
  fputc('}', out);
}

/* {"H2D": a, "D2H": b, "other": c} of a per-direction u64 array. */
static void plr_json_cdirs(FILE *out, const uint64_t *v) {
  fprintf(out, "{\"H2D\": %" PRIu64 ", \"D2H\": %" PRIu64 ", \"other\": %" PRIu64 "}",
          v[PLR_CDIR_H2D], v[PLR_CDIR_D2H], v[PLR_CDIR_OTHER]);
}

/* One element of gpu.devices: every field of plr_device_report. */
static void plr_json_device(FILE *out, const plr_device_report *d) {
  fprintf(out, "\n          {\"device\": %u, \"name\": ", d->device);
  plr_json_str(out, d->name);
  fprintf(out,
          ", \"copy_engines\": %u, \"sm_count\": %u, \"pci_gen\": %u,"
          "\n           \"window\": {\"start_ns\": %" PRIu64 ", \"end_ns\": %" PRIu64
          "}, \"window_ns\": %" PRIu64 ", \"kernels\": %" PRIu64 ", \"copies\": %" PRIu64
          ", \"memsets\": %" PRIu64 ",\n           \"kernel_busy_ns\": %" PRIu64
          ", \"copy_busy_ns\": ",
          d->copy_engines, d->sm_count, d->pci_gen, d->window.start, d->window.end,
          d->window.end - d->window.start, d->kernels, d->copies, d->memsets, d->kernel_busy_ns);
  plr_json_cdirs(out, d->copy_busy_ns);
  fprintf(out,
          ", \"copy_busy_all_ns\": %" PRIu64 ",\n           \"copy_hidden_ns\": %" PRIu64
          ", \"copy_exposed_ns\": %" PRIu64 ", \"kernel_hidden_ns\": %" PRIu64
          ", \"h2d_d2h_together_ns\": %" PRIu64 ", \"idle_ns\": %" PRIu64
          ",\n           \"gap_threshold_ns\": %" PRIu64 ", \"gaps_total\": %" PRIu64
          ", \"gaps_ns\": %" PRIu64 ", \"gaps\": [",
          d->copy_busy_all_ns, d->copy_hidden_ns, d->copy_exposed_ns, d->kernel_hidden_ns,
          d->h2d_d2h_together_ns, d->idle_ns, d->gap_threshold_ns, d->gaps_total, d->gaps_ns);
  for (size_t i = 0; i < d->ngaps; i++)
    fprintf(out, "%s{\"start_ns\": %" PRIu64 ", \"end_ns\": %" PRIu64 ", \"ns\": %" PRIu64 "}",
            i ? ", " : "", d->gaps[i].start, d->gaps[i].end, d->gaps[i].end - d->gaps[i].start);
  fprintf(out,
          "],\n           \"kernel_streams\": %" PRIu64 ", \"pinned_async_copies\": %" PRIu64
          ", \"pinned_async_ns\": %" PRIu64 ", \"same_stream_copies\": %" PRIu64
          ", \"same_stream_ns\": %" PRIu64
          ", \"same_stream_id\": %u,\n           \"same_stream_busy_ns\": %" PRIu64
          ", \"same_stream_hidden_ns\": %" PRIu64 ", \"same_stream_exposed_ns\": %" PRIu64
          ", \"pageable_busy_ns\": %" PRIu64 ", \"pageable_exposed_ns\": %" PRIu64
          ", \"staged_chunks\": %" PRIu64 ",\n           \"pinned_gbps\": ",
          d->kernel_streams, d->pinned_async_copies, d->pinned_async_ns, d->same_stream_copies,
          d->same_stream_ns, d->same_stream_id, d->same_stream_busy_ns, d->same_stream_hidden_ns,
          d->same_stream_exposed_ns, d->pageable_busy_ns, d->pageable_exposed_ns, d->staged_chunks);
  plr_json_pinned(out, d->pinned_gbps);
  fputs(", \"bandwidth\": [", out);
  for (size_t i = 0; i < d->nbw; i++) {
    const plr_bw_row *b = &d->bw[i];
    fprintf(out,
            "%s\n             {\"copy\": \"%s\", \"src\": \"%s\", \"dst\": "
            "\"%s\", \"size\": \"%s\", \"count\": %" PRIu64 ", \"bytes\": %" PRIu64
            ", \"gpu_ns\": %" PRIu64 ", \"median_gbps\": ",
            i ? "," : "", plr_gpu_copy_name(b->copy_kind), plr_gpu_mem_name(b->src_kind),
            plr_gpu_mem_name(b->dst_kind), plr_size_bucket_name(b->bucket), b->count, b->bytes,
            b->gpu_ns);
    plr_json_gbps(out, b->median_gbps);
    fputs(", \"p10_gbps\": ", out);
    plr_json_gbps(out, b->p10_gbps);
    fprintf(out, ", \"staged_chunks\": %s, \"registered\": %s}", b->staged ? "true" : "false",
            b->registered ? "true" : "false");
  }
  fputs(d->nbw ? "\n           ]}" : "]}", out);
}

/* The "gpu" object of one process (schema in docs/trace-format.md). */
/* The elements of a verdict array, each on its own line after indent. */
static void plr_json_verdicts(FILE *out, const plr_verdict *vs, size_t n, const char *indent) {
  for (size_t i = 0; i < n; i++) {
    const plr_verdict *v = &vs[i];
    fprintf(out, "%s\n%s{\"kind\": \"%s\", \"ns\": %" PRIu64 ", \"device\": ", i ? "," : "", indent,
            plr_verdict_kind_name(v->kind), v->ns);
    if (v->device >= 0)
      fprintf(out, "%d", v->device);
    else
      fputs("null", out);
    fputs(", \"text\": ", out);
    plr_json_str(out, v->text);
    fputs(", \"advice\": ", out);
    plr_json_str(out, v->advice);
    fputc('}', out);
  }
}

static void plr_json_gpu(FILE *out, const plr_gpu_report *g) {
  fprintf(out, "{\n        \"status\": \"%s\", \"reason\": ", plr_gpu_status_name(g->status));
  plr_json_str(out, g->reason);
  fprintf(out,
          ", \"cupti_version\": %u, \"records\": %" PRIu64 ", \"dropped\": %" PRIu64
          ", \"buffers\": %" PRIu64 ", \"bad_times\": %" PRIu64 ",\n        \"syncs\": %" PRIu64
          ", \"sync_ns\": %" PRIu64 ", \"overheads\": %" PRIu64 ", \"overhead_ns\": %" PRIu64
          ",\n        \"kernel_busy_ns\": %" PRIu64 ", \"copy_busy_ns\": %" PRIu64
          ", \"copy_hidden_ns\": %" PRIu64 ", \"copy_exposed_ns\": %" PRIu64
          ", \"pageable_exposed_ns\": %" PRIu64 ", \"hidden_pct\": ",
          g->cupti_version, g->records, g->dropped, g->buffers, g->bad_times, g->syncs, g->sync_ns,
          g->overheads, g->overhead_ns, g->total_kernel_busy_ns, g->total_copy_busy_ns,
          g->total_copy_hidden_ns, g->total_copy_exposed_ns, g->total_pageable_exposed_ns);
  double pct = plr_gpu_hidden_pct(g);
  if (pct >= 0)
    fprintf(out, "%.1f", pct);
  else
    fputs("null", out);
  fputs(", \"pinned_gbps\": ", out);
  plr_json_pinned(out, g->pinned_gbps);
  fprintf(out,
          ",\n        \"sampling\": {\"sampled\": %s, \"pauses\": %" PRIu64
          ", \"windows\": %" PRIu64 ", \"paused_ns\": %" PRIu64 ", \"traced_ns\": %" PRIu64
          ", \"max_ops_per_s\": %u, \"untimed_copies\": %" PRIu64 ", \"ignored\": %" PRIu64 "}",
          g->sampled ? "true" : "false", g->pauses, g->windows, g->paused_ns, g->traced_ns,
          g->max_ops_per_s, g->join.untimed_paused, g->samples_ignored);
  fputs(",\n        \"devices\": [", out);
  for (size_t i = 0; i < g->ndev; i++) {
    if (i) fputc(',', out);
    plr_json_device(out, &g->dev[i]);
  }
  fputs(g->ndev ? "\n        ],\n" : "],\n", out);
  const plr_call_join *j = &g->join;
  fprintf(out,
          "        \"join\": {\"calls\": %" PRIu64 ", \"unjoined\": %" PRIu64
          ", \"pageable\": %" PRIu64 ", \"pinned\": %" PRIu64 ", \"linked\": %" PRIu64
          ", \"gpu_ns\": %" PRIu64 ",\n          \"made_sync\": %" PRIu64
          ", \"made_sync_host_ns\": %" PRIu64 ", \"made_sync_bytes\": %" PRIu64
          ", \"made_sync_gpu_ns\": %" PRIu64 ",\n          \"pageable_sync\": %" PRIu64
          ", \"pageable_sync_host_ns\": %" PRIu64 ", \"pageable_sync_bytes\": %" PRIu64
          ", \"pageable_sync_gpu_ns\": %" PRIu64 ",\n          \"mem_mismatch\": %" PRIu64
          ", \"gpu_ops\": %" PRIu64 ", \"gpu_ops_unjoined\": %" PRIu64 ", \"chunks\": %" PRIu64
          ", \"chunk_bytes\": %" PRIu64 ", \"chunk_gpu_ns\": %" PRIu64
          ",\n          \"registered\": %" PRIu64 ", \"registered_ops\": %" PRIu64
          ", \"registered_op_bytes\": %" PRIu64 ", \"registered_op_gpu_ns\": %" PRIu64
          "},\n        \"verdicts\": [",
          j->calls, j->unjoined, j->pageable, j->pinned, j->linked, j->gpu_ns, j->made_sync,
          j->made_sync_host_ns, j->made_sync_bytes, j->made_sync_gpu_ns, j->pageable_sync,
          j->pageable_sync_host_ns, j->pageable_sync_bytes, j->pageable_sync_gpu_ns,
          j->mem_mismatch, j->gpu_ops, j->gpu_ops_unjoined, j->chunks, j->chunk_bytes,
          j->chunk_gpu_ns, j->registered, j->reg_ops, j->reg_bytes, j->reg_gpu_ns);
  plr_json_verdicts(out, g->verdicts, g->nverdicts, "          ");
  fputs(g->nverdicts ? "\n        ]\n      }" : "]\n      }", out);
}

/* Writes one element of "processes". */
static void plr_json_process(FILE *out, const plr_process *p) {
  const plr_trace *t = &p->t;
  uint64_t span = t->last_ns > t->first_ns ? t->last_ns - t->first_ns : 0;
  fputs("    {\n      \"file\": ", out);
  plr_json_str(out, t->path);
  fprintf(out,
          ",\n      \"pid\": %" PRIu64 ", \"ppid\": %" PRIu64 ", \"rank\": %d,\n      \"exe\": ",
          t->hdr.pid, t->ppid, t->rank);
  plr_json_str(out, t->exe);
  fputs(", \"host\": ", out);
  plr_json_str(out, t->host);
  fprintf(out,
          ",\n      \"mode\": \"%s\", \"trace_version\": %u, "
          "\"simulated\": %s, \"partial\": %s, "
          "\"complete_records\": %" PRIu64 ", \"malformed_records\": %" PRIu64
          ",\n      \"trace_end\": \"%s\", \"corrupt_from\": ",
          t->have_process ? plr_mode_name(t->mode) : "unknown", t->hdr.version,
          (t->hdr.flags & PAGELOCK_FILE_SIMULATED) ? "true" : "false",
          plr_trace_partial(t) ? "true" : "false", t->complete_records, t->malformed_records,
          plr_trace_end_name(t));
  if (t->stop == PLR_STOP_DAMAGED)
    fprintf(out, "%" PRIu64, t->damage.from);
  else
    fputs("null", out);
  fprintf(out,
          ",\n      \"start_realtime_ns\": %" PRIu64 ", \"span_ns\": %" PRIu64
          ",\n      \"notes\": [",
          t->hdr.start_realtime_ns, span);
  for (size_t i = 0; i < t->nnotes; i++) {
    fprintf(out, "%s{\"kind\": \"%s\", \"text\": ", i ? ", " : "",
            plr_note_kind_name(t->notes[i].kind));
    plr_json_str(out, t->notes[i].text);
    fputc('}', out);
  }
  /* Host timing is enough for these: not under "gpu". */
  fputs("],\n      \"pageable_verdicts\": [", out);
  plr_json_verdicts(out, p->gpu.pageable, p->gpu.npageable, "        ");
  fputs(p->gpu.npageable ? "\n      ],\n      \"totals\": " : "],\n      \"totals\": ", out);
  plr_json_totals(out, &t->tot, "      ");
  fputs(",\n      \"call_sites\": ", out);
  plr_json_rows(out, &p->calls);
  fputs(",\n      \"alloc_sites\": ", out);
  plr_json_rows(out, &p->allocs);
  fputs(",\n      \"counters\": ", out);
  if (t->have_counters) {
    const pagelock_rec_counters *c = &t->counters;
    fprintf(out,
            "{\"bytes_staged\": %" PRIu64 ", \"bytes_passthrough\": %" PRIu64
            ", \"fallbacks\": %" PRIu64 ", \"waits\": %" PRIu64 ", \"wait_ns\": %" PRIu64
            ", \"pool_high_water\": %" PRIu64 ", \"pool_bytes\": %" PRIu64
            ", \"registered_bytes_high_water\": %" PRIu64 ", \"dropped_records\": %" PRIu64
            ",\n                   \"register_budget\": %" PRIu64 ", \"registrations\": %" PRIu64
            ", \"unregistrations\": %" PRIu64 ", \"evictions\": %" PRIu64
            ", \"register_failures\": %" PRIu64 ", \"register_ns\": %" PRIu64
            ", \"registered_bytes\": %" PRIu64 "}",
            c->bytes_staged, c->bytes_passthrough, c->fallbacks, c->waits, c->wait_ns,
            c->pool_high_water, c->pool_bytes, c->registered_bytes_high_water, c->dropped_records,
            c->register_budget, c->registrations, c->unregistrations, c->evictions,
            c->register_failures, c->register_ns, c->registered_bytes);
  } else {
    fputs("null", out);
  }
  fputs(",\n      \"call_site_cost\": ", out);
  if (t->have_cost) {
    const pagelock_rec_cost *c = &t->cost;
    fprintf(out,
            "{\"captures\": %" PRIu64 ", \"capture_ns\": %" PRIu64 ", \"unwinds\": %" PRIu64
            ", \"unwind_ns\": %" PRIu64 ", \"py_walks\": %" PRIu64 ", \"py_walk_ns\": %" PRIu64
            ", \"py_probes\": %" PRIu64 "}",
            c->captures, c->capture_ns, c->unwinds, c->unwind_ns, c->py_walks, c->py_walk_ns,
            c->py_probes);
  } else {
    fputs("null", out);
  }
  fputs(",\n      \"gpu\": ", out);
  plr_json_gpu(out, &p->gpu);
  fputs("\n    }", out);
}

/* The "ranks" array: the per-rank table of the text report. */
static void plr_json_ranks(FILE *out, const plr_process *ps, size_t n) {
  fputs(",\n  \"ranks\": [", out);
  for (size_t i = 0; i < n; i++) {
    const plr_trace *t = &ps[i].t;
    const plr_gpu_report *g = &ps[i].gpu;
    fprintf(out, "%s\n    {\"rank\": %d, \"host\": ", i ? "," : "", t->rank);
    plr_json_str(out, t->host);
    fprintf(out,
            ", \"pid\": %" PRIu64 ", \"copies\": %" PRIu64 ", \"pageable\": %" PRIu64
            ", \"host_ns\": %" PRIu64 ", \"exposed_copy_ns\": ",
            t->hdr.pid, t->tot.all.count, t->tot.pageable.count, t->tot.all.host_ns);
    double pct = plr_gpu_hidden_pct(g);
    if (plr_gpu_report_timed(g))
      fprintf(out, "%" PRIu64, g->total_copy_exposed_ns);
    else
      fputs("null", out);
    fputs(", \"hidden_pct\": ", out);
    if (plr_gpu_report_timed(g) && pct >= 0)
      fprintf(out, "%.1f", pct);
    else
      fputs("null", out);
    fputc('}', out);
  }
  fputs(n ? "\n  ]" : "]", out);
}

void plr_report_json(FILE *out, const plr_process *ps, size_t n) {
  plr_totals all;
  memset(&all, 0, sizeof all);
  fprintf(out,
          "{\n  \"schema\": \"pagelock-report\", \"schema_version\": %d, "
          "\"trace_format_version\": %u,\n  \"processes\": [",
          PLR_JSON_SCHEMA_VERSION, PAGELOCK_TRACE_VERSION);
  for (size_t i = 0; i < n; i++) {
    fputs(i ? ",\n" : "\n", out);
    plr_json_process(out, &ps[i]);
    plr_totals_add(&all, &ps[i].t.tot);
  }
  fputs(n ? "\n  ],\n  \"totals\": " : "],\n  \"totals\": ", out);
  plr_json_totals(out, &all, "  ");
  plr_json_ranks(out, ps, n);
  fputs("\n}\n", out);
}
