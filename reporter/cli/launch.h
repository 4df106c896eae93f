/* launch.h - runs a program under the shim and collects the traces it
 * wrote: the part `pagelock run` and `pagelock demo` share. */
#ifndef PLR_LAUNCH_H
#define PLR_LAUNCH_H

#include <stddef.h>
#include <stdio.h>

/* The GOMP_SPINCOUNT that `run` and `demo` give the program under the
 * modes that stage (PAGELOCK_OMP_SPIN; cli.c says why this value). */
#define PLR_OMP_SPINCOUNT "10000"

typedef struct plr_launch {
  const char *mode;       /* validated PAGELOCK_MODE value */
  const char *output;     /* -o pattern, NULL for the shim's default */
  const char *ld_prepend; /* directory put first in LD_LIBRARY_PATH, or NULL */
  char *const *argv;      /* program and arguments, NULL-terminated */
  int omp_short;          /* give it a short GOMP_SPINCOUNT (plr_run_opts) */
} plr_launch;

typedef struct plr_launch_result {
  int status;    /* the child's exit status, 128+N when killed by N */
  char **traces; /* absolute trace paths from the manifest, deduplicated */
  size_t ntraces;
  int lost; /* the manifest could not be read (said on stderr) */
  /* The output named a character device (/dev/null): the traces went to
   * this private directory, for the report only; freeing the result
   * deletes them.  discard_name is the output as the user gave it. */
  char *discard_dir, *discard_name;
} plr_launch_result;

/* Checks the program, the output directory and the shim, runs the program
 * with the shim first in LD_PRELOAD and waits for it, then reads the
 * manifest.  While it waits, SIGINT and SIGQUIT are ignored, as time(1)
 * does: a terminal's ^C and ^\ reach the whole foreground process group,
 * so the program gets them itself and decides, and pagelock lives on to
 * report what it wrote; SIGTERM and SIGHUP are forwarded to the program.
 * Returns 0 with *res filled when the program ran, or the CLI's exit
 * status after printing why it could not (nothing to free then). */
int plr_launch_run(const plr_launch *l, plr_launch_result *res);

/* Deletes the traces of a discarded output (see discard_dir) too. */
void plr_launch_result_free(plr_launch_result *res);

/* After the report: where the traces are, or that none was kept because
 * the output discards them. */
void plr_launch_print_traces(FILE *out, const plr_launch_result *res);

/* The canonical name of mode (observe|stage|register|auto|off), matched
 * without regard to case as the shim does; NULL for anything else. */
const char *plr_mode_canonical(const char *mode);

/* Prints the message for an invalid mode from the environment variable
 * source ("PAGELOCK_MODE"; a bad --mode is a usage error, help.h);
 * returns PLR_EXIT_USAGE. */
int plr_mode_error(const char *source, const char *mode);

/* s with control characters written as \n, \r, \t or \xNN, so a message
 * about it stays on one line; truncated to fit len. */
void plr_escape_ctl(const char *s, char *buf, size_t len);

#endif
