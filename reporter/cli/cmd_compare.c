/* cmd_compare.c - `pagelock compare BEFORE AFTER`: two runs side by side.
 *
 * Each side is one trace, several (the processes or ranks of one run), or
 * a directory holding a run's *.trace files.  The numbers are
 * analysis/compare.c's, their writers report/compare_write.c. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "analysis.h"
#include "cli.h"
#include "compare.h"
#include "escape.h"
#include "gpu_analysis.h"
#include "help.h"
#include "launch.h"
#include "operands.h"
#include "report.h"
#include "walk.h"

/* ------------------------------------------------------------------ */
/* The command.                                                        */

/* Loads every file of one side into s.  Returns 0, or PLR_EXIT_USAGE after
 * the loader's one-line message for the first file that cannot be read. */
static int plr_cmp_load(const plr_strv *files, plr_compare_side *s) {
  for (size_t i = 0; i < files->n; i++) {
    char esc[4 * 4096];
    plr_process p;
    memset(&p, 0, sizeof p);
    if (plr_load_process(&p, files->v[i]) != 0) return PLR_EXIT_USAGE;
    plr_gpu_report g;
    memset(&g, 0, sizeof g);
    int gok = plr_gpu_analyze(&p.t, 0, &g) == 0;
    if (!gok)
      fprintf(stderr, "pagelock: '%s': out of memory in the GPU analysis\n",
              plr_text_escape(files->v[i], esc, sizeof esc));
    plr_source src = {files->v[i], NULL, 0};
    plr_compare_add(s, &p.t, gok ? &g : NULL, &src);
    plr_gpu_report_free(&g);
    plr_trace_free(&p.t);
    if (s->oom) {
      fprintf(stderr, "pagelock: out of memory\n");
      return PLR_EXIT_USAGE;
    }
  }
  return 0;
}

int plr_cmd_compare(int argc, char **argv) {
  plr_format format = PLR_FORMAT_TEXT;
  double worse = -1;
  /* Operands in order, so that a "--" between them still splits the runs
   * (getopt would move it); options may stand anywhere before it. */
  const char **pre = calloc((size_t)argc, sizeof *pre);
  if (!pre) {
    fprintf(stderr, "pagelock: out of memory\n");
    return PLR_EXIT_USAGE;
  }
  int npre = 0, k;
  plr_opts op;
  plr_opts_init(&op, "compare", PLR_ORDER_IN_ORDER, argc, argv);
  while ((k = plr_opts_next(&op)) == PLR_OPT_OPTION || k == PLR_OPT_OPERAND) {
    if (k == PLR_OPT_OPERAND) {
      pre[npre++] = op.val;
    } else if (strcmp(op.name, "fail-if-worse") == 0) {
      if (plr_opt_number(&op, op.val, "percent", &worse)) k = PLR_OPT_ERROR;
    } else if (strcmp(op.name, "format") == 0 && plr_format_parse(op.val, 0, &format) != 0) {
      char shown[160];
      plr_escape_ctl(op.val, shown, sizeof shown);
      plr_usage_error("compare", "invalid --format '%s' (valid: text, json)", shown);
      k = PLR_OPT_ERROR;
    }
    if (k == PLR_OPT_ERROR) break;
  }
  if (k == PLR_OPT_HELP || k == PLR_OPT_ERROR) {
    free(pre);
    return k == PLR_OPT_HELP ? 0 : PLR_EXIT_USAGE;
  }
  /* BEFORE AFTER; BEFORE... -- AFTER... for runs of several traces named
   * one by one; or -- BEFORE AFTER, the "--" only ending the options. */
  const char *const *before = pre, *const *after = pre + 1;
  int nb = 1, na = 1, ok = npre == 2;
  if (op.sep && npre) {
    after = (const char *const *)argv + optind;
    nb = npre;
    na = argc - optind;
    ok = na > 0;
  } else if (op.sep) {
    before = (const char *const *)argv + optind;
    after = before + 1;
    ok = argc - optind == 2;
  }
  if (!ok) {
    free(pre);
    return plr_usage_error("compare",
                           "needs two runs: BEFORE AFTER (each a trace file or a directory of "
                           "traces), or BEFORE... -- AFTER...");
  }
  plr_strv fb = {0}, fa = {0};
  plr_compare_side sb, sa;
  memset(&sb, 0, sizeof sb);
  memset(&sa, 0, sizeof sa);
  int rc = 0;
  for (int j = 0; !rc && j < nb; j++) rc = plr_trace_operand(&fb, before[j], "compare");
  for (int j = 0; !rc && j < na; j++) rc = plr_trace_operand(&fa, after[j], "compare");
  if (!rc) rc = plr_cmp_load(&fb, &sb);
  if (!rc) rc = plr_cmp_load(&fa, &sa);
  if (!rc) {
    plr_compare_write(stdout, format == PLR_FORMAT_JSON, &sb, &sa);
    fflush(stdout);
    plr_cmp_verdict v;
    char why[160];
    plr_compare_verdict(&sb, &sa, &v);
    if (worse >= 0 && plr_compare_worse(&v, worse, why, sizeof why)) {
      fprintf(stderr, "pagelock: compare: %s, more than --fail-if-worse=%g: exit status %d\n", why,
              worse, PLR_EXIT_GATE);
      rc = PLR_EXIT_GATE;
    }
  }
  free(pre);
  plr_compare_side_free(&sb);
  plr_compare_side_free(&sa);
  plr_strv_free(&fb);
  plr_strv_free(&fa);
  return rc;
}
