/* cmd_run.c - `pagelock run`: the program under the shim, then the report
 * on stderr (stdout belongs to the program). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "escape.h"
#include "launch.h"

int plr_parse_run_opts(int argc, char **argv, int *i, plr_run_opts *o,
                       int allow_quick, int *done) {
  *done = 0;
  const char *mode = NULL;
  o->mode = "observe";
  o->output = NULL;
  o->quick = 0;
  for (; *i < argc; (*i)++) {
    const char *a = argv[*i];
    if (strcmp(a, "--") == 0) {
      (*i)++;
      break;
    }
    if (a[0] != '-' || !a[1]) break;
    int is_out = strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0;
    if (is_out || strcmp(a, "--mode") == 0 || strcmp(a, "-m") == 0) {
      if (*i + 1 >= argc) {
        fprintf(stderr, "pagelock: %s needs a value\n", a);
        return 2;
      }
      const char *v = argv[++(*i)];
      if (is_out)
        o->output = v;
      else
        mode = v;
    } else if (strncmp(a, "--mode=", 7) == 0) {
      mode = a + 7;
    } else if (strncmp(a, "--output=", 9) == 0) {
      o->output = a + 9;
    } else if (strncmp(a, "-o", 2) == 0) {
      o->output = a + 2;
    } else if (allow_quick && strcmp(a, "--quick") == 0) {
      o->quick = 1;
    } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      plr_usage(stdout);
      *done = 1;
      return 0;
    } else {
      fprintf(stderr, "pagelock: unknown option '%s'\n", a);
      plr_usage(stderr);
      return 2;
    }
  }
  /* The environment counts as the shim would read it, unless --mode says
   * otherwise; a bad value stops here rather than in every traced process
   * (where the shim would warn and observe). */
  const char *env = getenv("PAGELOCK_MODE");
  if (mode) {
    o->mode = plr_mode_canonical(mode);
    if (!o->mode) return plr_mode_error("--mode", mode);
  } else if (env && env[0]) {
    o->mode = plr_mode_canonical(env);
    if (!o->mode) return plr_mode_error("PAGELOCK_MODE", env);
  }
  if (o->output && !o->output[0]) {
    fprintf(stderr, "pagelock: -o needs a non-empty pattern\n");
    return 2;
  }
  return 0;
}

void plr_print_trace_list(FILE *out, char *const *paths, size_t n) {
  if (!n) {
    fprintf(out,
            "pagelock: no trace was written (the program made no CUDA "
            "copies, or the shim was not loaded: statically linked and "
            "setuid programs ignore LD_PRELOAD)\n");
    return;
  }
  /* A listed file that is gone was already reported as unreadable.  The
   * paths are the manifest's, any bytes the program's pattern produced:
   * escaped (escape.h). */
  for (size_t i = 0; i < n; i++)
    if (access(paths[i], F_OK) == 0) {
      fputs("pagelock: trace written to ", out);
      plr_text_puts(out, paths[i]);
      fputc('\n', out);
    }
}

int plr_run_status(const plr_launch_result *res, size_t failed) {
  if (res->status != 0 || (!failed && !res->lost)) return res->status;
  if (failed)
    fprintf(stderr, "pagelock: the program exited 0, but %zu trace%s it "
            "wrote could not be reported: exit status %d\n", failed,
            failed == 1 ? "" : "s", PLR_EXIT_USAGE);
  return PLR_EXIT_USAGE;
}

int plr_cmd_run(int argc, char **argv) {
  int i = 1, done;
  plr_run_opts o;
  int rc = plr_parse_run_opts(argc, argv, &i, &o, 0, &done);
  if (rc || done) return rc;
  if (i >= argc) {
    fprintf(stderr, "pagelock: run: no program given\n");
    plr_usage(stderr);
    return PLR_EXIT_USAGE;
  }
  plr_launch l = {o.mode, o.output, NULL, argv + i};
  plr_launch_result res;
  rc = plr_launch_run(&l, &res);
  if (rc) return rc;
  size_t failed = 0;
  if (res.ntraces) {
    fputc('\n', stderr);
    plr_report_paths(stderr, res.traces, res.ntraces, PLR_FORMAT_TEXT,
                     &failed);
  }
  plr_print_trace_list(stderr, res.traces, res.ntraces);
  int status = plr_run_status(&res, failed);
  plr_launch_result_free(&res);
  return status;
}
