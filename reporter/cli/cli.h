/* cli.h - the subcommands of the pagelock executable, what they share
 * (cli.c) and the pipeline from trace files to a report (pipeline.c). */
#ifndef PLR_CLI_H
#define PLR_CLI_H

#include <getopt.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "exit_status.h"

/* project()'s version in CMakeLists.txt, passed by cmake/pagelock_install.cmake
 * so that --version, the man page and the package agree. */
#define PLR_VERSION PAGELOCK_VERSION

typedef enum plr_format {
  PLR_FORMAT_TEXT,
  PLR_FORMAT_JSON,
  PLR_FORMAT_HTML,   /* one self-contained page with timelines */
  PLR_FORMAT_CHROME, /* Chrome trace-event JSON (Perfetto, chrome://tracing) */
} plr_format;

/* Parses a --format value; returns -1 for an unknown name.  allow_views
 * admits html and chrome (report), else only text and json (compare). */
int plr_format_parse(const char *name, int allow_views, plr_format *f);
/* A command's options as getopt_long parses them (-oFILE, -o FILE,
 * --output=FILE, --output FILE, unique prefixes of long names, -- ends
 * them), from the command's table in help.c. */
typedef struct plr_opts {
  const char *cmd;
  int argc;
  char **argv;
  struct option lo[16];
  char optstring[48];
  const char *name; /* the option's long name ("output"), or NULL */
  const char *val;  /* its value, or an operand (PLR_OPT_OPERAND) */
  int sep;          /* "--" ended the options (PLR_ORDER_IN_ORDER) */
} plr_opts;

enum {
  PLR_ORDER_PERMUTE = 0,    /* options anywhere, operands after (report) */
  PLR_ORDER_STOP = '+',     /* options end at the first operand (run) */
  PLR_ORDER_IN_ORDER = '-', /* operands returned where they stand (compare) */
};
enum { PLR_OPT_ERROR = -1, PLR_OPT_END = 0, PLR_OPT_OPTION, PLR_OPT_OPERAND, PLR_OPT_HELP };

/* Starts parsing argv (argv[0] the command's name) as command cmd's
 * options, in the given order. */
void plr_opts_init(plr_opts *o, const char *cmd, int order, int argc, char **argv);
/* The next option (PLR_OPT_OPTION: o->name, o->val), operand
 * (PLR_OPT_OPERAND in PLR_ORDER_IN_ORDER: o->val), PLR_OPT_END (optind at
 * the first operand left), PLR_OPT_HELP after printing the command's help
 * to stdout, or PLR_OPT_ERROR after a usage error (plr_usage_error). */
int plr_opts_next(plr_opts *o);
/* A non-negative number for option name (--max-blocked, --fail-if-worse)
 * into *v; else a usage error, returning PLR_EXIT_USAGE. */
int plr_opt_number(const plr_opts *o, const char *val, const char *unit, double *v);

int plr_cmd_run(int argc, char **argv);
int plr_cmd_report(int argc, char **argv);
int plr_cmd_demo(int argc, char **argv);
int plr_cmd_compare(int argc, char **argv);
int plr_cmd_doctor(int argc, char **argv);

/* What a report's caller decides on besides the report itself. */
typedef struct plr_report_sum {
  uint64_t pageable_host_ns; /* host time inside copies from pageable memory */
  int openmp;                /* a trace lists libgomp among its modules */
} plr_report_sum;

/* Loads, analyses and reports the traces at paths to out; problems go to
 * stderr as "pagelock: ..." lines.  Traces that cannot be read are skipped
 * after their message.  Returns the number of traces reported; *failed
 * counts the ones that could not be read; sum (may be NULL) gets the sums
 * of the ones reported. */
size_t plr_report_paths(FILE *out, char *const *paths, size_t n, plr_format format, size_t *failed,
                        plr_report_sum *sum);

/* --max-blocked: 0 when the pageable copies' host time in sum is at most
 * max_ms (or max_ms < 0: no gate); else says so on stderr and returns
 * PLR_EXIT_GATE. */
int plr_gate_blocked(const plr_report_sum *sum, double max_ms);

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
  double max_blocked; /* run only: --max-blocked in ms, -1 when not given */
  int omp_short;      /* give the program a short GOMP_SPINCOUNT (PAGELOCK_OMP_SPIN) */
} plr_run_opts;

/* Parses the options of cmd ("run": up to the program's name; "demo": no
 * operand) from argv.  Without --mode, PAGELOCK_MODE from the environment
 * is the mode, checked the same way; PAGELOCK_OMP_SPIN is checked too.
 * *first is the index of the first operand.  Returns 0, or prints the
 * problem and returns the exit status (0 with *done set after --help). */
int plr_parse_run_opts(const char *cmd, int argc, char **argv, int *first, plr_run_opts *o,
                       int *done);

/* 1 when libcuda.so.1 loads, initialises and sees a device.  Probed in a
 * child (cmd_demo.c) so a broken driver cannot take pagelock down, and so
 * the driver is not initialised in the process that forks a program. */
int plr_gpu_usable(void);

/* The exit status of run and demo: the program's own, except that a
 * program that exited 0 gives PLR_EXIT_USAGE when traces it wrote were
 * lost (failed of them unreadable, or the manifest itself), saying so on
 * stderr: a script must not take a run without its report for a success. */
struct plr_launch_result;
int plr_run_status(const struct plr_launch_result *res, size_t failed);

#endif
