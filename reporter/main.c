/* main.c - pagelock command dispatch. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "launch.h"
#include "pagelock_trace.h"

void plr_usage(FILE *out) {
  fprintf(out,
          "usage: pagelock run [--mode M] [-o PATTERN] [--] program [args...]\n"
          "       pagelock report [--format text|json|html|chrome] [-o FILE] "
          "FILE...\n"
          "       pagelock compare [--format text|json] BEFORE AFTER\n"
          "       pagelock compare [--format text|json] BEFORE... -- "
          "AFTER...\n"
          "       pagelock demo [--mode M] [-o PATTERN] [--quick]\n"
          "       pagelock doctor [PROGRAM]\n"
          "       pagelock --help | --version\n"
          "\n"
          "  run     run a CUDA program with libpagelock.so preloaded, then\n"
          "          print a report of its host<->device copies to stderr\n"
          "  report  report on trace files written by an earlier run\n"
          "  compare two runs side by side (each a trace, several traces, or\n"
          "          a directory of *.trace files), with after/before "
          "ratios\n"
          "  demo    run the bundled workload (over fake CUDA when no GPU\n"
          "          answers) and print its report\n"
          "  doctor  check this machine (GPU, CUPTI, limits, clock) and, given\n"
          "          a program, whether the shim can reach it; exits 1 when\n"
          "          something blocks recording\n"
          "\n"
          "  --mode M      observe (default), stage, register, auto or off;\n"
          "                without it, PAGELOCK_MODE counts\n"
          "  -o PATTERN    trace file name; %%p pid, %%h host, %%r rank\n"
          "                (default: pagelock.%%p.trace in the current "
          "directory)\n"
          "  --format F    text (default), json, html (one self-contained "
          "page with\n"
          "                timelines) or chrome (trace events for Perfetto "
          "or\n"
          "                chrome://tracing)\n"
          "  -o FILE       report: write the report to FILE instead of "
          "stdout\n"
          "\n"
          "environment (read by libpagelock.so once at start, unless marked "
          "CLI; a bad\n"
          "value is reported and the default used; sizes take K, M or G):\n"
          "  PAGELOCK_MODE            observe|stage|register|auto|off "
          "(default observe);\n"
          "                           run and demo refuse a bad value; "
          "--mode wins\n"
          "  PAGELOCK_OUTPUT          trace file pattern, %%p %%h %%r, %%%% "
          "a percent sign\n"
          "                           (default pagelock.%%p.trace); -o "
          "wins\n"
          "  PAGELOCK_LOG             quiet|error|warn|info|debug (default "
          "warn)\n"
          "  PAGELOCK_MANIFEST        file each traced process appends its "
          "trace path to\n"
          "                           (set by pagelock run and demo)\n"
          "  PAGELOCK_BACKTRACE_DEPTH frames recorded per call stack, 0-16 "
          "(default 8)\n"
          "  PAGELOCK_TRACK_MIN       smallest host allocation tracked "
          "(default 64K)\n"
          "  PAGELOCK_STAGE_MIN       stage: smallest pageable copy staged "
          "(default 1M)\n"
          "  PAGELOCK_POOL_SIZE       stage: pinned pool, at least 1M "
          "(default 64M)\n"
          "  PAGELOCK_CHUNK_SIZE      stage: pinned chunk size, 64K-1G "
          "(default 8M)\n"
          "  PAGELOCK_COPY_THREADS    stage: host copy threads, 0-256, 0 = "
          "auto (default 0)\n"
          "  PAGELOCK_WAIT_US         stage: longest wait for a pool chunk "
          "before the\n"
          "                           native copy is used, 0-10000000 "
          "(default 2000)\n"
          "  PAGELOCK_D2H             stage, register, auto: sync|async "
          "device-to-host\n"
          "                           (default sync)\n"
          "  PAGELOCK_H2D             register, auto: sync|async "
          "host-to-device from a\n"
          "                           registered buffer (default sync)\n"
          "  PAGELOCK_REGISTER_BUDGET register, auto: most bytes page-locked "
          "at once;\n"
          "                           0 = a quarter of RAM (default 0)\n"
          "  PAGELOCK_REGISTER_HOT    auto: percent of a buffer's size "
          "copied before it is\n"
          "                           registered, 0-100000 (default 100)\n"
          "  PAGELOCK_CUPTI           GPU timing 1|on|yes|true, "
          "0|off|no|false (default 1)\n"
          "  PAGELOCK_CUPTI_LIB       path of libcupti.so (default: "
          "searched)\n"
          "  PAGELOCK_CUPTI_FLUSH_MS  how often CUPTI hands over its "
          "records, 0-600000;\n"
          "                           0 = when buffers fill and at exit "
          "(default 1000)\n"
          "  PAGELOCK_SHIM            CLI: the libpagelock.so to use (default: "
          "beside\n"
          "                           pagelock)\n"
          "  PAGELOCK_NO_ADDR2LINE    CLI: 1 = reports use only names stored "
          "in the trace\n");
}

int main(int argc, char **argv) {
  if (argc < 2) {
    plr_usage(stderr);
    return PLR_EXIT_USAGE;
  }
  const char *cmd = argv[1];
  if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 ||
      strcmp(cmd, "help") == 0) {
    plr_usage(stdout);
    return 0;
  }
  if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0) {
    printf("pagelock %s (trace format %u)\n", PLR_VERSION,
           PAGELOCK_TRACE_VERSION);
    return 0;
  }
  if (strcmp(cmd, "run") == 0) return plr_cmd_run(argc - 1, argv + 1);
  if (strcmp(cmd, "report") == 0) return plr_cmd_report(argc - 1, argv + 1);
  if (strcmp(cmd, "demo") == 0) return plr_cmd_demo(argc - 1, argv + 1);
  if (strcmp(cmd, "compare") == 0) return plr_cmd_compare(argc - 1, argv + 1);
  if (strcmp(cmd, "doctor") == 0) return plr_cmd_doctor(argc - 1, argv + 1);
  fprintf(stderr, "pagelock: unknown command '%s'\n", cmd);
  plr_usage(stderr);
  return PLR_EXIT_USAGE;
}
