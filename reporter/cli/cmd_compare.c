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
  int i = 1;
  for (; i < argc; i++) {
    const char *a = argv[i];
    const char *val = NULL;
    if (strcmp(a, "--") == 0) {
      i++;
      break;
    }
    int got = plr_opt_value(argc, argv, &i, "--format", "-f", "a value (text or json)", &val);
    if (got < 0) return PLR_EXIT_USAGE;
    if (got == 0) {
      if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
        plr_usage(stdout);
        return 0;
      }
      if (a[0] == '-' && a[1]) {
        fprintf(stderr, "pagelock: compare: unknown option '%s'\n", a);
        plr_usage(stderr);
        return PLR_EXIT_USAGE;
      }
      break;
    }
    if (plr_format_parse(val, 0, &format) != 0) {
      fprintf(stderr,
              "pagelock: invalid --format '%s' for compare (valid: "
              "text, json)\n",
              val);
      return PLR_EXIT_USAGE;
    }
  }
  /* Operands: BEFORE AFTER, or BEFORE... -- AFTER... for runs of several
   * traces named one by one. */
  int sep = -1;
  for (int k = i; k < argc; k++)
    if (strcmp(argv[k], "--") == 0) {
      sep = k;
      break;
    }
  int nb = sep < 0 ? 1 : sep - i;
  int na = sep < 0 ? argc - i - 1 : argc - sep - 1;
  if ((sep < 0 && argc - i != 2) || nb < 1 || na < 1) {
    fprintf(stderr,
            "pagelock: compare needs two runs: BEFORE AFTER (each a "
            "trace file or a directory of traces), or BEFORE... -- "
            "AFTER...\n");
    plr_usage(stderr);
    return PLR_EXIT_USAGE;
  }
  int first_after = sep < 0 ? i + 1 : sep + 1;
  plr_strv fb = {0}, fa = {0};
  plr_compare_side sb, sa;
  memset(&sb, 0, sizeof sb);
  memset(&sa, 0, sizeof sa);
  int rc = 0;
  for (int k = i; !rc && k < i + nb; k++) rc = plr_trace_operand(&fb, argv[k], "compare");
  for (int k = first_after; !rc && k < argc; k++) rc = plr_trace_operand(&fa, argv[k], "compare");
  if (!rc) rc = plr_cmp_load(&fb, &sb);
  if (!rc) rc = plr_cmp_load(&fa, &sa);
  if (!rc) {
    plr_compare_write(stdout, format == PLR_FORMAT_JSON, &sb, &sa);
    fflush(stdout);
  }
  plr_compare_side_free(&sb);
  plr_compare_side_free(&sa);
  plr_strv_free(&fb);
  plr_strv_free(&fa);
  return rc;
}
