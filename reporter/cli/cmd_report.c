/* cmd_report.c - `pagelock report FILE|DIR...`: its options, its operands
 * (operands.c: a directory stands for its *.trace files, as for compare),
 * then the pipeline (pipeline.c). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "help.h"
#include "launch.h"
#include "operands.h"

int plr_cmd_report(int argc, char **argv) {
  plr_format format = PLR_FORMAT_TEXT;
  const char *output = NULL;
  double max_blocked = -1;
  plr_opts op;
  plr_opts_init(&op, "report", PLR_ORDER_PERMUTE, argc, argv);
  int k;
  while ((k = plr_opts_next(&op)) == PLR_OPT_OPTION) {
    if (strcmp(op.name, "output") == 0) {
      output = op.val;
    } else if (strcmp(op.name, "max-blocked") == 0) {
      if (plr_opt_number(&op, op.val, "milliseconds", &max_blocked)) return PLR_EXIT_USAGE;
    } else if (strcmp(op.name, "format") == 0 && plr_format_parse(op.val, 1, &format) != 0) {
      char shown[160];
      plr_escape_ctl(op.val, shown, sizeof shown);
      return plr_usage_error("report", "invalid --format '%s' (valid: text, json, html, chrome)",
                             shown);
    }
  }
  if (k == PLR_OPT_HELP) return 0;
  if (k == PLR_OPT_ERROR) return PLR_EXIT_USAGE;
  int i = optind;
  if (i >= argc) return plr_usage_error("report", "no trace file given");
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
  plr_report_sum sum;
  plr_report_paths(out, files.v, files.n, format, &failed, &sum);
  plr_strv_free(&files);
  if (out != stdout) {
    /* A full disk shows up here, not in the fprintf calls. */
    int bad = ferror(out);
    if (fclose(out) != 0 || bad) {
      fprintf(stderr, "pagelock: error writing '%s': %s\n", output, strerror(errno ? errno : EIO));
      return PLR_EXIT_USAGE;
    }
  }
  if (failed) return PLR_EXIT_USAGE;
  return plr_gate_blocked(&sum, max_blocked);
}
