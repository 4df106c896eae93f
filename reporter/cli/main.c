/* main.c - pagelock command dispatch. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "escape.h"
#include "help.h"
#include "launch.h"
#include "pagelock/trace_format.h"

int main(int argc, char **argv) {
  if (argc < 2)
    return plr_usage_error(NULL, "no command given (run, report, compare, demo, doctor)");
  const char *cmd = argv[1];
  if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
    plr_help_main(stdout);
    return 0;
  }
  if (strcmp(cmd, "help") == 0) {
    /* `pagelock help CMD`, as git and cargo take it. */
    const plr_help_cmd *c = argc > 2 ? plr_help_find(argv[2]) : NULL;
    if (c)
      plr_help_command(stdout, c);
    else
      plr_help_main(stdout);
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
  char shown[160];
  plr_escape_ctl(cmd, shown, sizeof shown);
  return plr_usage_error(NULL, "unknown command '%s' (valid: run, report, compare, demo, doctor)",
                         shown);
}
