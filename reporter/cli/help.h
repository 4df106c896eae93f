/* help.h - the words of the command line, written once: what each command
 * takes and does, the exit statuses, the environment (from
 * include/pagelock/options.def through optdoc.h).  `pagelock --help`,
 * `pagelock CMD --help`, usage errors and the man page (man.c, written at
 * build time by mkman.c) all print from here, so they cannot disagree. */
#ifndef PLR_HELP_H
#define PLR_HELP_H

#include <stdio.h>

/* One option of a command. */
typedef struct plr_help_opt {
  char shrt;        /* 'o' for -o, 0 for none */
  const char *lng;  /* "output" for --output */
  const char *arg;  /* "FILE", NULL when it takes no value */
  const char *text; /* what it does: one sentence, no final stop */
} plr_help_opt;

/* One command.  Texts are plain words; a `word` in backticks is a name
 * (bold in the man page, plain in --help). */
typedef struct plr_help_cmd {
  const char *name;
  const char *synopsis[3]; /* after "pagelock NAME ", up to 3 forms */
  const char *summary;     /* one line for the list of commands */
  const char *text;        /* a paragraph for its own help */
  const plr_help_opt *opts;
  size_t nopts;
  const char *exit; /* its exit statuses, one sentence */
} plr_help_cmd;

extern const plr_help_cmd plr_help_cmds[];
extern const size_t plr_help_ncmds;

/* The command named name, or NULL. */
const plr_help_cmd *plr_help_find(const char *name);

/* `pagelock --help`: synopsis, commands, exit statuses, environment. */
void plr_help_main(FILE *out);

/* `pagelock CMD --help`. */
void plr_help_command(FILE *out, const plr_help_cmd *c);

/* A usage error of command cmd (NULL: of pagelock itself): "pagelock:
 * CMD: " and the message on one line, then "try 'pagelock CMD --help'",
 * to stderr.  Returns PLR_EXIT_USAGE. */
int plr_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The man page pagelock(1) in roff, for this version and date
 * ("2026-11-28"). */
void plr_help_man(FILE *out, const char *version, const char *date);

/* The exit statuses, as (status, meaning) pairs ending with {NULL, NULL}. */
typedef struct plr_help_status {
  const char *status, *text;
} plr_help_status;
extern const plr_help_status plr_help_statuses[];

#endif
