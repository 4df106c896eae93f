/* cli.h - the subcommands of the pagelock executable, what they share
 * (cli.c) and the pipeline from trace files to a report (pipeline.c). */
#ifndef PLR_CLI_H
#define PLR_CLI_H

#include <stddef.h>
#include <stdio.h>

/* project()'s version in CMakeLists.txt, passed by cmake/pagelock_install.cmake
 * so that --version, the man page and the package agree. */
#define PLR_VERSION PAGELOCK_VERSION

/* Exit statuses of the CLI itself (the child's own status passes through). */
#define PLR_EXIT_USAGE 2
#define PLR_EXIT_NOT_FOUND 127

typedef enum plr_format {
  PLR_FORMAT_TEXT,
  PLR_FORMAT_JSON,
  PLR_FORMAT_HTML,   /* one self-contained page with timelines */
  PLR_FORMAT_CHROME, /* Chrome trace-event JSON (Perfetto, chrome://tracing) */
} plr_format;

/* Parses a --format value; returns -1 for an unknown name.  allow_views
 * admits html and chrome (report), else only text and json (compare). */
int plr_format_parse(const char *name, int allow_views, plr_format *f);
/* Whether argv[*i] is option lng (or shrt, may be NULL), as "--lng V",
 * "SHRT V" or "--lng=V": 1 with *val set (*i past a separate value), 0
 * when it is another argument, -1 when its value is missing (one line,
 * "pagelock: OPT needs WHAT", printed). */
int plr_opt_value(int argc, char **argv, int *i, const char *lng, const char *shrt,
                  const char *what, const char **val);

int plr_cmd_run(int argc, char **argv);
int plr_cmd_report(int argc, char **argv);
int plr_cmd_demo(int argc, char **argv);
int plr_cmd_compare(int argc, char **argv);
int plr_cmd_doctor(int argc, char **argv);

/* Loads, analyses and reports the traces at paths to out; problems go to
 * stderr as "pagelock: ..." lines.  Traces that cannot be read are skipped
 * after their message.  Returns the number of traces reported; *failed
 * counts the ones that could not be read. */
size_t plr_report_paths(FILE *out, char *const *paths, size_t n, plr_format format, size_t *failed);

/* Loads the trace at path into p->t, then prints the warnings about how
 * complete it is (pipeline.c).  Returns 0, or -1 after the loader's
 * one-line message. */
struct plr_process;
int plr_load_process(struct plr_process *p, const char *path);

/* Prints, to err, the warnings a user must see about how complete the
 * trace is (partial, malformed records skipped), each line prefixed
 * "pagelock: warning: ". */
void plr_process_warnings(FILE *err, const struct plr_process *p);

/* Options shared by run and demo. */
typedef struct plr_run_opts {
  const char *mode;   /* --mode, else PAGELOCK_MODE, else "observe" */
  const char *output; /* NULL unless -o */
  int quick;          /* demo only: --quick */
  int omp_short;      /* give the program a short GOMP_SPINCOUNT (PAGELOCK_OMP_SPIN) */
} plr_run_opts;

/* Parses options from argv[*i] on, stopping at "--" (consumed) or the
 * first non-option.  allow_quick accepts --quick (demo).  Without --mode,
 * PAGELOCK_MODE from the environment is the mode, checked the same way;
 * PAGELOCK_OMP_SPIN is checked too.
 * Returns 0, or prints the problem and returns the exit status (0 after
 * --help). */
int plr_parse_run_opts(int argc, char **argv, int *i, plr_run_opts *o, int allow_quick, int *done);

/* Prints the "trace written" lines, or the "no trace was written" line. */
void plr_print_trace_list(FILE *out, char *const *paths, size_t n);

/* The exit status of run and demo: the program's own, except that a
 * program that exited 0 gives PLR_EXIT_USAGE when traces it wrote were
 * lost (failed of them unreadable, or the manifest itself), saying so on
 * stderr: a script must not take a run without its report for a success. */
struct plr_launch_result;
int plr_run_status(const struct plr_launch_result *res, size_t failed);

/* The usage text, to out. */
void plr_usage(FILE *out);

#endif
