/* cmd_report.c - `pagelock report` and the report step of run/demo. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "analysis.h"
#include "cli.h"
#include "escape.h"
#include "launch.h"
#include "report_views.h"

int plr_format_parse(const char *name, int allow_views, plr_format *f) {
  if (strcmp(name, "text") == 0)
    *f = PLR_FORMAT_TEXT;
  else if (strcmp(name, "json") == 0)
    *f = PLR_FORMAT_JSON;
  else if (allow_views && strcmp(name, "html") == 0)
    *f = PLR_FORMAT_HTML;
  else if (allow_views && strcmp(name, "chrome") == 0)
    *f = PLR_FORMAT_CHROME;
  else
    return -1;
  return 0;
}

/* The view formats read the traces again: they need where each is. */
static void plr_write_views(FILE *out, const plr_process *ps,
                            char *const *paths, const size_t *idx, size_t n,
                            plr_format format) {
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

size_t plr_report_paths(FILE *out, char *const *paths, size_t n,
                        plr_format format, size_t *failed) {
  *failed = 0;
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
    /* Paths come from the command line or a run's manifest (any bytes
     * the program chose): every line quoting one is escaped (escape.h). */
    char msg[4096], esc[4 * sizeof msg];
    FILE *f = plr_open_trace(paths[i], msg, sizeof msg);
    if (!f || plr_trace_load_stream(&ps[ok].t, f, paths[i], msg,
                                    sizeof msg) != 0) {
      fprintf(stderr, "pagelock: %s\n", plr_text_escape(msg, esc, sizeof esc));
      (*failed)++;
      continue;
    }
    plr_process_warnings(stderr, &ps[ok]);
    if (plr_process_analyze(&ps[ok], tools) != 0) {
      fprintf(stderr, "pagelock: '%s': out of memory while analysing\n",
              plr_text_escape(paths[i], esc, sizeof esc));
      plr_process_free(&ps[ok]);
      (*failed)++;
      continue;
    }
    idx[ok++] = i;
  }
  /* Machine formats are written even for no trace, so a consumer always
   * gets a well-formed document. */
  switch (format) {
  case PLR_FORMAT_JSON:
    plr_report_json(out, ps, ok);
    break;
  case PLR_FORMAT_HTML:
  case PLR_FORMAT_CHROME:
    plr_write_views(out, ps, paths, idx, ok, format);
    break;
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

int plr_cmd_report(int argc, char **argv) {
  plr_format format = PLR_FORMAT_TEXT;
  const char *output = NULL;
  int i = 1;
  for (; i < argc; i++) {
    const char *a = argv[i];
    const char *val = NULL;
    if (strcmp(a, "--") == 0) {
      i++;
      break;
    }
    if (strcmp(a, "--format") == 0 || strcmp(a, "-f") == 0) {
      if (i + 1 >= argc) {
        fprintf(stderr,
                "pagelock: %s needs a value (text, json, html or chrome)\n",
                a);
        return PLR_EXIT_USAGE;
      }
      val = argv[++i];
    } else if (strncmp(a, "--format=", 9) == 0) {
      val = a + 9;
    } else if (strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0) {
      if (i + 1 >= argc) {
        fprintf(stderr, "pagelock: %s needs a file name\n", a);
        return PLR_EXIT_USAGE;
      }
      output = argv[++i];
      continue;
    } else if (strncmp(a, "--output=", 9) == 0) {
      output = a + 9;
      continue;
    } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      plr_usage(stdout);
      return 0;
    } else if (a[0] == '-' && a[1]) {
      fprintf(stderr, "pagelock: report: unknown option '%s'\n", a);
      plr_usage(stderr);
      return PLR_EXIT_USAGE;
    } else {
      break;
    }
    if (plr_format_parse(val, 1, &format) != 0) {
      fprintf(stderr,
              "pagelock: invalid --format '%s' (valid: text, json, html, "
              "chrome)\n",
              val);
      return PLR_EXIT_USAGE;
    }
  }
  if (i >= argc) {
    fprintf(stderr, "pagelock: report: no trace file given\n");
    plr_usage(stderr);
    return PLR_EXIT_USAGE;
  }
  FILE *out = stdout;
  if (output && strcmp(output, "-") != 0) {
    out = fopen(output, "w");
    if (!out) {
      fprintf(stderr, "pagelock: cannot write '%s': %s\n", output,
              strerror(errno));
      return PLR_EXIT_USAGE;
    }
  }
  size_t failed;
  plr_report_paths(out, argv + i, (size_t)(argc - i), format, &failed);
  if (out != stdout) {
    /* A full disk shows up here, not in the fprintf calls. */
    int bad = ferror(out);
    if (fclose(out) != 0 || bad) {
      fprintf(stderr, "pagelock: error writing '%s': %s\n", output,
              strerror(errno ? errno : EIO));
      return PLR_EXIT_USAGE;
    }
  }
  return failed ? PLR_EXIT_USAGE : 0;
}
