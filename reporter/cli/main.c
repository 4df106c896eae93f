/* main.c - pagelock command dispatch. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "launch.h"
#include "pagelock/trace_format.h"

int main(int argc, char **argv) {
  if (argc < 2) {
    plr_usage(stderr);
    return PLR_EXIT_USAGE;
  }
  const char *cmd = argv[1];
  if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
    plr_usage(stdout);
    return 0;
  }
  if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0) {
    printf("pagelock %s (trace format %u)\n", PLR_VERSION, PAGELOCK_TRACE_VERSION);
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
