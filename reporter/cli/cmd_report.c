/* cmd_report.c - `pagelock report FILE...`: its options, then the pipeline
 * (pipeline.c). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "launch.h"

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
    if (strcmp(a, "--format") == 0 || strcmp(a, "-f") == 0) {
      if (i + 1 >= argc) {
        fprintf(stderr, "pagelock: %s needs a value (text, json, html or chrome)\n", a);
        return PLR_EXIT_USAGE;
      }
      val = argv[++i];
    } else if (strncmp(a, "--format=", 9) == 0) {
      val = a + 9;
    } else if (strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0) {
      if (i + 1 >= argc) {
        fprintf(stderr, "pagelock: %s needs a file name\n", a);
        return PLR_EXIT_USAGE;
      }
      output = argv[++i];
      continue;
    } else if (strncmp(a, "--output=", 9) == 0) {
      output = a + 9;
      continue;
    } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      plr_usage(stdout);
      return 0;
    } else if (a[0] == '-' && a[1]) {
      fprintf(stderr, "pagelock: report: unknown option '%s'\n", a);
      plr_usage(stderr);
      return PLR_EXIT_USAGE;
    } else {
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
  FILE *out = stdout;
  if (output && strcmp(output, "-") != 0) {
    out = fopen(output, "w");
    if (!out) {
      fprintf(stderr, "pagelock: cannot write '%s': %s\n", output, strerror(errno));
      return PLR_EXIT_USAGE;
    }
  }
  size_t failed;
  plr_report_paths(out, argv + i, (size_t)(argc - i), format, &failed);
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
