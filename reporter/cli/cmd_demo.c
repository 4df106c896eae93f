/* cmd_demo.c - `pagelock demo`: the bundled workload under the shim, over
 * the real GPU when one answers, else over the fake CUDA. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "help.h"
#include "launch.h"
#include "pkgdir.h"

/* A driver that hangs in cuInit must not hang the demo. */
#define PLR_PROBE_TIMEOUT_S 60

int plr_gpu_usable(void) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) return 0;
  if (pid == 0) {
    alarm(PLR_PROBE_TIMEOUT_S);
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) _exit(1);
    int (*init)(unsigned) = (int (*)(unsigned))dlsym(h, "cuInit");
    int (*count)(int *) = (int (*)(int *))dlsym(h, "cuDeviceGetCount");
    int n = 0;
    if (!init || !count || init(0) != 0 || count(&n) != 0 || n <= 0) _exit(1);
    _exit(0);
  }
  int status;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

int plr_cmd_demo(int argc, char **argv) {
  int i, done;
  plr_run_opts o;
  int rc = plr_parse_run_opts("demo", argc, argv, &i, &o, &done);
  if (rc || done) return rc;
  if (i < argc) {
    char shown[160];
    plr_escape_ctl(argv[i], shown, sizeof shown);
    return plr_usage_error("demo", "unexpected argument '%s'", shown);
  }
  /* Two builds of the demo (cmake/pagelock_demo.cmake): pagelock-demo on
   * the toolkit's runtime for a GPU that answers, fakecuda/pagelock-demo
   * with the fake driver first in LD_LIBRARY_PATH otherwise. */
  char demo[PATH_MAX + 32];
  char fake[PATH_MAX + 32];
  const char *ld_prepend = NULL;
  int gpu = plr_gpu_usable();
  if (!gpu || plr_pkg_path("pagelock-demo", demo, sizeof demo) != 0) {
    if (plr_pkg_path("fakecuda", fake, sizeof fake) != 0 ||
        (size_t)snprintf(demo, sizeof demo, "%s/pagelock-demo", fake) >= sizeof demo) {
      fprintf(stderr,
              "pagelock: %s, and there is no fake CUDA at '%s' to run the "
              "demo over\n",
              gpu ? "this build has no demo for the real GPU" : "no GPU found", fake);
      return PLR_EXIT_USAGE;
    }
    ld_prepend = fake;
    if (gpu)
      printf(
          "pagelock: this build has no demo for the real GPU (no "
          "libcudart_static.a when it was built): running the demo over "
          "fake CUDA; timings are simulated.\n");
    else
      printf(
          "pagelock: no GPU found: running the demo over fake CUDA; "
          "timings are simulated.\n");
  }

  char tmpl[PATH_MAX];
  char pattern[PATH_MAX + 32];
  /* -o, else PAGELOCK_OUTPUT as `run` honours it (the launcher reads it),
   * else a fresh directory so that demo runs never collide. */
  const char *output = o.output;
  const char *env_out = getenv("PAGELOCK_OUTPUT");
  int own_dir = !output && !(env_out && env_out[0]);
  if (own_dir) {
    const char *tmp = getenv("TMPDIR");
    snprintf(tmpl, sizeof tmpl, "%s/pagelock-demo.XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(tmpl)) {
      fprintf(stderr,
              "pagelock: cannot create a directory for the demo "
              "traces: %s\n",
              strerror(errno));
      return PLR_EXIT_USAGE;
    }
    snprintf(pattern, sizeof pattern, "%s/pagelock.%%p.trace", tmpl);
    output = pattern;
  }

  char *args[3] = {demo, o.quick ? "--quick" : NULL, NULL};
  plr_launch l = {o.mode, output, ld_prepend, args, o.omp_short};
  plr_launch_result res;
  rc = plr_launch_run(&l, &res);
  if (rc) return rc;
  size_t failed = 0;
  if (res.ntraces) {
    putchar('\n');
    plr_report_paths(stdout, res.traces, res.ntraces, PLR_FORMAT_TEXT, &failed, NULL);
    putchar('\n');
  }
  plr_launch_print_traces(stdout, &res);
  /* Nothing to keep: leave no empty directory behind. */
  if (own_dir && !res.ntraces) rmdir(tmpl);
  int status = plr_run_status(&res, failed);
  plr_launch_result_free(&res);
  return status;
}
