/* cmd_report.c - `pagelock report FILE|DIR...`: its options, its operands
 * (operands.c: a directory stands for its *.trace files, as for compare),
 * then the pipeline (pipeline.c). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "launch.h"
#include "operands.h"

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
    int got = plr_opt_value(argc, argv, &i, "--format", "-f",
                            "a value (text, json, html or chrome)", &val);
    if (got == 0 &&
        (got = plr_opt_value(argc, argv, &i, "--output", "-o", "a file name", &output)) > 0)
      continue;
    if (got < 0) return PLR_EXIT_USAGE;
    if (got == 0) {
      if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
        plr_usage(stdout);
        return 0;
      }
      if (a[0] == '-' && a[1]) {
        fprintf(stderr, "pagelock: report: unknown option '%s'\n", a);
        plr_usage(stderr);
        return PLR_EXIT_USAGE;
      }
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
  plr_strv files = {0};
  for (int k = i; k < argc; k++) {
    int rc = plr_trace_operand(&files, argv[k], "report");
    if (rc) {
      plr_strv_free(&files);
      return rc;
    }
  }
  FILE *out = stdout;
  if (output && strcmp(output, "-") != 0) {
    out = fopen(output, "w");
    if (!out) {
      fprintf(stderr, "pagelock: cannot write '%s': %s\n", output, strerror(errno));
      plr_strv_free(&files);
      return PLR_EXIT_USAGE;
    }
  }
  size_t failed;
  plr_report_paths(out, files.v, files.n, format, &failed);
  plr_strv_free(&files);
  if (out != stdout) {
    /* A full disk shows up here, not in the fprintf calls. */
    int bad = ferror(out);
    if (fclose(out) != 0 || bad) {
      fprintf(stderr, "pagelock: error writing '%s': %s\n", output, strerror(errno ? errno : EIO));
      return PLR_EXIT_USAGE;
    }
  }
  return failed ? PLR_EXIT_USAGE : 0;
}
