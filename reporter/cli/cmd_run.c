/* cmd_run.c - `pagelock run`: the program under the shim, then the report
 * on stderr (stdout belongs to the program). */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "escape.h"
#include "help.h"
#include "launch.h"
#include "pkgdir.h"

int plr_cmd_run(int argc, char **argv) {
  int i, done;
  plr_run_opts o;
  int rc = plr_parse_run_opts("run", argc, argv, &i, &o, &done);
  if (rc || done) return rc;
  if (i >= argc) return plr_usage_error("run", "no program given");
  plr_launch l = {o.mode, o.output, NULL, argv + i, o.omp_short};
  plr_launch_result res;
  rc = plr_launch_run(&l, &res);
  if (rc) return rc;
  size_t failed = 0;
  plr_report_sum sum = {0, 0};
  if (res.ntraces) {
    fputc('\n', stderr);
    plr_report_paths(stderr, res.traces, res.ntraces, PLR_FORMAT_TEXT, &failed, &sum);
  }
  plr_launch_print_traces(stderr, &res);
  /* No trace on a machine where no GPU answers: the program most likely
   * failed in its first CUDA call; the fake CUDA would run it. */
  char fake[PATH_MAX];
  if (!res.ntraces && plr_pkg_path("fakecuda", fake, sizeof fake) == 0 && !plr_gpu_usable()) {
    fputs(
        "pagelock: no GPU answers here; to try pagelock on this machine, run the program over "
        "the fake CUDA (simulated timings): LD_LIBRARY_PATH=",
        stderr);
    plr_text_puts(stderr, fake);
    fputs(" pagelock run ...\n", stderr);
  }
  /* Said only where it mattered: a program with libgomp loaded. */
  if (o.omp_short && sum.openmp)
    fprintf(
        stderr,
        "pagelock: the program ran with GOMP_SPINCOUNT=" PLR_OMP_SPINCOUNT
        ": idle OpenMP threads spun 30 times less before sleeping, leaving cores to the copy threads "
        "(PAGELOCK_OMP_SPIN=keep leaves it unset)\n");
  int status = plr_run_status(&res, failed);
  /* The gate judges a run that succeeded: a failed program's own status
   * says more. */
  if (status == 0) status = plr_gate_blocked(&sum, o.max_blocked);
  plr_launch_result_free(&res);
  return status;
}
