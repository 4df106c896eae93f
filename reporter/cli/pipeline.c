/* pipeline.c - one way from trace files to a report: load each (its
 * problem, if any, in one line), warn about what is incomplete, analyse,
 * then hand every process to the writer of the format. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "analysis.h"
#include "cli.h"
#include "escape.h"
#include "report.h"
#include "units.h"

void plr_process_warnings(FILE *err, const plr_process *p) {
  const plr_trace *t = &p->t;
  /* The path comes from the command line or a run's manifest, and the
   * messages quote it: escaped, as the report's names are (escape.h). */
  char msg[4096], esc[4 * sizeof msg];
  plr_trace_partial_message(t, msg, sizeof msg);
  if (msg[0]) fprintf(err, "pagelock: warning: %s\n", plr_text_escape(msg, esc, sizeof esc));
  plr_text_escape(t->path, esc, sizeof esc);
  if (t->malformed_records)
    fprintf(err, "pagelock: warning: '%s': %llu malformed records were skipped\n", esc,
            (unsigned long long)t->malformed_records);
  if (t->have_counters && t->counters.dropped_records)
    fprintf(err,
            "pagelock: warning: '%s': the shim dropped %llu records: counts "
            "are low\n",
            esc, (unsigned long long)t->counters.dropped_records);
  else if (t->have_end && t->end.dropped)
    fprintf(err,
            "pagelock: warning: '%s': the shim dropped %llu records: counts "
            "are low\n",
            esc, (unsigned long long)t->end.dropped);
}

int plr_load_process(plr_process *p, const char *path) {
  /* Paths come from the command line or a run's manifest (any bytes the
   * program chose): every line quoting one is escaped (escape.h). */
  char msg[4096], esc[4 * sizeof msg];
  FILE *f = plr_open_trace(path, msg, sizeof msg);
  if (!f || plr_trace_load_stream(&p->t, f, path, msg, sizeof msg) != 0) {
    fprintf(stderr, "pagelock: %s\n", plr_text_escape(msg, esc, sizeof esc));
    return -1;
  }
  plr_process_warnings(stderr, p);
  return 0;
}

/* The view formats read the traces again: they need where each is. */
static void plr_write_views(FILE *out, const plr_process *ps, char *const *paths, const size_t *idx,
                            size_t n, plr_format format) {
  plr_source *src = calloc(n ? n : 1, sizeof *src);
  if (!src) {
    fprintf(stderr, "pagelock: out of memory\n");
    return;
  }
  for (size_t i = 0; i < n; i++) src[i].path = paths[idx[i]];
  if (format == PLR_FORMAT_HTML)
    plr_report_html(out, ps, src, n);
  else
    plr_report_chrome(out, ps, src, n);
  free(src);
}

/* Whether the trace's modules (written at exit) hold libgomp: GOMP_SPINCOUNT
 * speaks to its threads only.  The trace lists what was loaded, not
 * whether its threads ever started. */
static int plr_trace_has_libgomp(const plr_trace *t) {
  for (size_t i = 0; i < t->nmodules; i++) {
    const char *base = strrchr(t->modules[i].path, '/');
    base = base ? base + 1 : t->modules[i].path;
    /* libgomp.so.1, and the wheels' libgomp-<hash>.so.1 (PyTorch's). */
    if (strncmp(base, "libgomp", 7) == 0 && (base[7] == '.' || base[7] == '-')) return 1;
  }
  return 0;
}

int plr_gate_blocked(const plr_report_sum *sum, double max_ms) {
  if (max_ms < 0 || (double)sum->pageable_host_ns <= max_ms * 1e6) return 0;
  char ms[32];
  plr_fmt_ms(sum->pageable_host_ns, ms, sizeof ms);
  fprintf(stderr,
          "pagelock: pageable copies blocked the host %s ms in all, more than --max-blocked=%g: "
          "exit status %d\n",
          ms, max_ms, PLR_EXIT_GATE);
  return PLR_EXIT_GATE;
}

size_t plr_report_paths(FILE *out, char *const *paths, size_t n, plr_format format, size_t *failed,
                        plr_report_sum *sum) {
  *failed = 0;
  if (sum) memset(sum, 0, sizeof *sum);
  plr_process *ps = n ? calloc(n, sizeof *ps) : NULL;
  size_t *idx = n ? calloc(n, sizeof *idx) : NULL;
  if (n && (!ps || !idx)) {
    fprintf(stderr, "pagelock: out of memory\n");
    free(ps);
    free(idx);
    *failed = n;
    return 0;
  }
  int tools = plr_use_tools_from_env();
  size_t ok = 0;
  for (size_t i = 0; i < n; i++) {
    if (plr_load_process(&ps[ok], paths[i]) != 0) {
      (*failed)++;
      continue;
    }
    if (plr_process_analyze(&ps[ok], tools) != 0) {
      char esc[4 * 4096];
      fprintf(stderr, "pagelock: '%s': out of memory while analysing\n",
              plr_text_escape(paths[i], esc, sizeof esc));
      plr_process_free(&ps[ok]);
      (*failed)++;
      continue;
    }
    if (sum) {
      sum->pageable_host_ns += ps[ok].t.tot.pageable.host_ns;
      sum->openmp |= plr_trace_has_libgomp(&ps[ok].t);
    }
    idx[ok++] = i;
  }
  /* Machine formats are written even for no trace, so a consumer always
   * gets a well-formed document. */
  switch (format) {
    case PLR_FORMAT_JSON: plr_report_json(out, ps, ok); break;
    case PLR_FORMAT_HTML:
    case PLR_FORMAT_CHROME: plr_write_views(out, ps, paths, idx, ok, format); break;
    case PLR_FORMAT_TEXT:
      if (ok) plr_report_text(out, ps, ok);
      break;
  }
  fflush(out);
  for (size_t i = 0; i < ok; i++) plr_process_free(&ps[i]);
  free(ps);
  free(idx);
  return ok;
}
