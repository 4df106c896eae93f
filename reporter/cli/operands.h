/* operands.h - the trace operands of `report` and `compare`: a trace file,
 * or a directory holding a run's *.trace files. */
#ifndef PLR_OPERANDS_H
#define PLR_OPERANDS_H

#include <stddef.h>

/* A growable list of file names, each its own copy. */
typedef struct plr_strv {
  char **v;
  size_t n, cap;
} plr_strv;

/* Adds an operand to files: a file as given (the loader reports a missing
 * or bad one), or every regular *.trace file in a directory, sorted.  cmd
 * names the command in messages.  Returns 0, or prints why not in one line
 * and returns PLR_EXIT_USAGE. */
int plr_trace_operand(plr_strv *files, const char *arg, const char *cmd);
void plr_strv_free(plr_strv *s);

#endif
