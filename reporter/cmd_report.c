/* cmd_report.c - `pagelock report` and the report step of run/demo. */
#include <stdlib.h>
#include <string.h>

#include "analysis.h"
#include "cli.h"
#include "launch.h"

size_t plr_report_paths(FILE *out, char *const *paths, size_t n,
                        plr_format format, size_t *failed) {
  *failed = 0;
  plr_process *ps = n ? calloc(n, sizeof *ps) : NULL;
  if (n && !ps) {
    fprintf(stderr, "pagelock: out of memory\n");
    *failed = n;
    return 0;
  }
  int tools = plr_use_tools_from_env();
  size_t ok = 0;
  for (size_t i = 0; i < n; i++) {
    char msg[4096];
    if (plr_trace_load(&ps[ok].t, paths[i], msg, sizeof msg) != 0) {
      fprintf(stderr, "pagelock: %s\n", msg);
      (*failed)++;
      continue;
    }
    plr_process_warnings(stderr, &ps[ok]);
    if (plr_process_analyze(&ps[ok], tools) != 0) {
      fprintf(stderr, "pagelock: '%s': out of memory while analysing\n",
              paths[i]);
      plr_process_free(&ps[ok]);
      (*failed)++;
      continue;
    }
    ok++;
  }
  if (ok || format == PLR_FORMAT_JSON) {
    if (format == PLR_FORMAT_JSON)
      plr_report_json(out, ps, ok);
    else
      plr_report_text(out, ps, ok);
  }
  fflush(out);
  for (size_t i = 0; i < ok; i++) plr_process_free(&ps[i]);
  free(ps);
  return ok;
}

int plr_cmd_report(int argc, char **argv) {
  plr_format format = PLR_FORMAT_TEXT;
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
        fprintf(stderr, "pagelock: %s needs a value (text or json)\n", a);
        return PLR_EXIT_USAGE;
      }
      val = argv[++i];
    } else if (strncmp(a, "--format=", 9) == 0) {
      val = a + 9;
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
    if (strcmp(val, "text") == 0) {
      format = PLR_FORMAT_TEXT;
    } else if (strcmp(val, "json") == 0) {
      format = PLR_FORMAT_JSON;
    } else {
      fprintf(stderr, "pagelock: invalid --format '%s' (valid: text, json)\n",
              val);
      return PLR_EXIT_USAGE;
    }
  }
  if (i >= argc) {
    fprintf(stderr, "pagelock: report: no trace file given\n");
    plr_usage(stderr);
    return PLR_EXIT_USAGE;
  }
  size_t failed;
  plr_report_paths(stdout, argv + i, (size_t)(argc - i), format, &failed);
  return failed ? PLR_EXIT_USAGE : 0;
}
