/* report_json.c - the machine-readable report (schema: docs/trace-format.md).
 * Hand-written: the schema is small and flat, and a JSON library would be
 * the reporter's only dependency beyond libc. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "analysis.h"
#include "util.h"

#define PLR_JSON_SCHEMA_VERSION 1

/* Writes s as a JSON string literal; bytes >= 0x80 pass through (paths and
 * symbol names are UTF-8 or opaque bytes on Linux). */
static void plr_json_str(FILE *out, const char *s) {
  if (!s) {
    fputs("null", out);
    return;
  }
  fputc('"', out);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    switch (*p) {
    case '"':
      fputs("\\\"", out);
      break;
    case '\\':
      fputs("\\\\", out);
      break;
    case '\n':
      fputs("\\n", out);
      break;
    case '\t':
      fputs("\\t", out);
      break;
    case '\r':
      fputs("\\r", out);
      break;
    default:
      if (*p < 0x20)
        fprintf(out, "\\u%04x", *p);
      else
        fputc(*p, out);
    }
  }
  fputc('"', out);
}

/* Writes "name": {copies, bytes, host_ns} (no trailing comma). */
static void plr_json_bucket(FILE *out, const char *name, const plr_bucket *b) {
  fprintf(out,
          "\"%s\": {\"copies\": %" PRIu64 ", \"bytes\": %" PRIu64
          ", \"host_ns\": %" PRIu64 "}",
          name, b->count, b->bytes, b->host_ns);
}

/* Writes a TOTALS object; ind is the indentation of its opening line. */
static void plr_json_totals(FILE *out, const plr_totals *t, const char *ind) {
  fprintf(out,
          "{\n%s  \"copies\": %" PRIu64 ", \"bytes\": %" PRIu64
          ", \"host_ns\": %" PRIu64 ",\n%s  \"failed\": %" PRIu64
          ", \"fallbacks\": %" PRIu64 ", \"captured\": %" PRIu64
          ", \"registered\": %" PRIu64 ", \"graph_nodes\": %" PRIu64
          ", \"graph_nodes_pageable\": %" PRIu64 ",\n%s  ",
          ind, t->all.count, t->all.bytes, t->all.host_ns, ind, t->failed,
          t->fallbacks, t->captured, t->registered, t->graph_nodes,
          t->graph_nodes_pageable, ind);
  plr_json_bucket(out, "pageable", &t->pageable);
  fprintf(out, ",\n%s  ", ind);
  plr_json_bucket(out, "pageable_async", &t->pageable_async);
  fprintf(out, ",\n%s  ", ind);
  plr_json_bucket(out, "staged", &t->staged);
  fprintf(out, ",\n%s  \"by_kind\": [", ind);
  int first = 1;
  for (unsigned d = 0; d < PLR_NDIR; d++) {
    for (unsigned m = 0; m < PLR_NMEM; m++) {
      const plr_bucket *b = &t->by[d][m];
      if (!b->count) continue;
      fprintf(out,
              "%s\n%s    {\"dir\": \"%s\", \"mem\": \"%s\", \"copies\": "
              "%" PRIu64 ", \"bytes\": %" PRIu64 ", \"host_ns\": %" PRIu64
              "}",
              first ? "" : ",", ind, plr_dir_name(d), plr_mem_name(m),
              b->count, b->bytes, b->host_ns);
      first = 0;
    }
  }
  if (!first) fprintf(out, "\n%s  ", ind);
  fprintf(out, "]\n%s}", ind);
}

/* Writes a SITE array with every row (JSON is not truncated at 20). */
static void plr_json_rows(FILE *out, const plr_rows *rows) {
  fputc('[', out);
  for (size_t i = 0; i < rows->n; i++) {
    const plr_row *r = &rows->v[i];
    const plr_frame *f = r->frame;
    char site[1024], dirs[64];
    plr_site_format(f, r->addr, site, sizeof site);
    plr_fmt_dirs(r->dirs, dirs, sizeof dirs);
    fprintf(out,
            "%s\n      {\"copies\": %" PRIu64 ", \"bytes\": %" PRIu64
            ", \"host_ns\": %" PRIu64 ", \"gbps\": ",
            i ? "," : "", r->b.count, r->b.bytes, r->b.host_ns);
    if (r->b.host_ns)
      fprintf(out, "%.3f", (double)r->b.bytes / (double)r->b.host_ns);
    else
      fputs("null", out);
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
    fprintf(out, ", \"line\": %u}", f ? f->line : 0);
  }
  fputs(rows->n ? "\n    ]" : "]", out);
}

/* Writes one element of "processes". */
static void plr_json_process(FILE *out, const plr_process *p) {
  const plr_trace *t = &p->t;
  uint64_t span = t->last_ns > t->first_ns ? t->last_ns - t->first_ns : 0;
  fputs("    {\n      \"file\": ", out);
  plr_json_str(out, t->path);
  fprintf(out, ",\n      \"pid\": %" PRIu64 ", \"ppid\": %" PRIu64
          ", \"rank\": %d,\n      \"exe\": ",
          t->hdr.pid, t->ppid, t->rank);
  plr_json_str(out, t->exe);
  fputs(", \"host\": ", out);
  plr_json_str(out, t->host);
  fprintf(out,
          ",\n      \"mode\": \"%s\", \"simulated\": %s, \"partial\": %s, "
          "\"complete_records\": %" PRIu64 ", \"malformed_records\": %" PRIu64
          ",\n      \"start_realtime_ns\": %" PRIu64 ", \"span_ns\": %" PRIu64
          ",\n      \"notes\": [",
          t->have_process ? plr_mode_name(t->mode) : "unknown",
          (t->hdr.flags & PAGELOCK_FILE_SIMULATED) ? "true" : "false",
          plr_trace_partial(t) ? "true" : "false", t->complete_records,
          t->malformed_records, t->hdr.start_realtime_ns, span);
  for (size_t i = 0; i < t->nnotes; i++) {
    fprintf(out, "%s{\"kind\": \"%s\", \"text\": ", i ? ", " : "",
            plr_note_kind_name(t->notes[i].kind));
    plr_json_str(out, t->notes[i].text);
    fputc('}', out);
  }
  fputs("],\n      \"totals\": ", out);
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
            ", \"fallbacks\": %" PRIu64 ", \"waits\": %" PRIu64
            ", \"wait_ns\": %" PRIu64 ", \"pool_high_water\": %" PRIu64
            ", \"pool_bytes\": %" PRIu64
            ", \"registered_bytes_high_water\": %" PRIu64
            ", \"dropped_records\": %" PRIu64 "}",
            c->bytes_staged, c->bytes_passthrough, c->fallbacks, c->waits,
            c->wait_ns, c->pool_high_water, c->pool_bytes,
            c->registered_bytes_high_water, c->dropped_records);
  } else {
    fputs("null", out);
  }
  fputs("\n    }", out);
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
  fputs("\n}\n", out);
}
