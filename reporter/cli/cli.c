/* cli.c - what every command shares: option parsing (getopt_long over
 * the option tables of help.c), the options of run and demo, and the exit
 * status of run and demo. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli.h"
#include "help.h"
#include "launch.h"
#include "pagelock/trace_format.h"

int plr_format_parse(const char *name, int allow_views, plr_format *f) {
  if (strcmp(name, "text") == 0)
    *f = PLR_FORMAT_TEXT;
  else if (strcmp(name, "json") == 0)
    *f = PLR_FORMAT_JSON;
  else if (allow_views && strcmp(name, "html") == 0)
    *f = PLR_FORMAT_HTML;
  else if (allow_views && strcmp(name, "chrome") == 0)
    *f = PLR_FORMAT_CHROME;
  else
    return -1;
  return 0;
}

void plr_opts_init(plr_opts *o, const char *cmd, int order, int argc, char **argv) {
  memset(o, 0, sizeof *o);
  o->cmd = cmd;
  o->argc = argc;
  o->argv = argv;
  const plr_help_cmd *c = plr_help_find(cmd);
  size_t n = 0, k = 0;
  if (order) o->optstring[k++] = (char)order;
  o->optstring[k++] = ':'; /* a missing value is ':', not '?' */
  for (size_t i = 0; c && i < c->nopts && n + 1 < sizeof o->lo / sizeof o->lo[0]; i++) {
    const plr_help_opt *h = &c->opts[i];
    /* The short letter is the value getopt_long returns; an option
     * without one returns 256 + its place in the table. */
    int val = h->shrt ? h->shrt : 256 + (int)i;
    o->lo[n++] = (struct option){h->lng, h->arg ? required_argument : no_argument, NULL, val};
    if (h->shrt && k + 3 < sizeof o->optstring) {
      o->optstring[k++] = h->shrt;
      if (h->arg) o->optstring[k++] = ':';
    }
  }
  o->optstring[k] = 0;
  /* A fresh scan: getopt keeps its place between calls. */
  optind = 0;
  opterr = 0;
}

/* The long name of the option getopt_long returned as val. */
static const char *plr_opts_name(const plr_opts *o, int val) {
  for (const struct option *l = o->lo; l->name; l++)
    if (l->val == val) return l->name;
  return NULL;
}

int plr_opts_next(plr_opts *o) {
  char shown[160], sv[160];
  int at = optind ? optind : 1;
  int c = getopt_long(o->argc, o->argv, o->optstring, o->lo, NULL);
  o->name = NULL;
  o->val = NULL;
  if (c == -1) {
    /* In order, getopt stops past a "--" (or at the end). */
    o->sep = optind > at;
    return PLR_OPT_END;
  }
  if (c == 1) {
    o->val = optarg;
    return PLR_OPT_OPERAND;
  }
  const char *typed = optind > 0 && optind <= o->argc ? o->argv[optind - 1] : "";
  plr_escape_ctl(typed, shown, sizeof shown);
  if (c == '?') {
    if (optopt && strncmp(typed, "--", 2) == 0) {
      plr_usage_error(o->cmd, "option '--%s' takes no value", plr_opts_name(o, optopt));
      return PLR_OPT_ERROR;
    }
    if (optopt) {
      /* A short option: the letter, wherever it stood in a cluster. */
      snprintf(sv, sizeof sv, "-%c", optopt);
      plr_escape_ctl(sv, shown, sizeof shown);
    }
    plr_usage_error(o->cmd, "unknown option '%s'", shown);
    return PLR_OPT_ERROR;
  }
  if (c == ':') {
    const char *name = plr_opts_name(o, optopt);
    const plr_help_cmd *h = plr_help_find(o->cmd);
    const char *arg = "a value";
    for (size_t i = 0; h && i < h->nopts; i++)
      if (name && strcmp(h->opts[i].lng, name) == 0) arg = h->opts[i].arg;
    /* As typed: -o, or --output (also when given as a prefix, --out). */
    if (strncmp(typed, "--", 2) == 0)
      plr_usage_error(o->cmd, "option '--%s' needs a value (%s)", name ? name : "?", arg);
    else
      plr_usage_error(o->cmd, "option '-%c' needs a value (%s)", optopt, arg);
    return PLR_OPT_ERROR;
  }
  o->name = plr_opts_name(o, c);
  o->val = optarg;
  if (o->name && strcmp(o->name, "help") == 0) {
    plr_help_command(stdout, plr_help_find(o->cmd));
    return PLR_OPT_HELP;
  }
  return PLR_OPT_OPTION;
}

int plr_opt_number(const plr_opts *o, const char *val, const char *unit, double *v) {
  char *end;
  errno = 0;
  double d = strtod(val, &end);
  if (!val[0] || *end || errno || !(d >= 0) || d > 1e15) {
    char shown[160];
    plr_escape_ctl(val, shown, sizeof shown);
    return plr_usage_error(o->cmd, "invalid --%s '%s' (%s: a number, 0 or more)", o->name, shown,
                           unit);
  }
  *v = d;
  return 0;
}

/* Whether the program gets a short GOMP_SPINCOUNT.  An idle OpenMP thread
 * of libgomp spins 300,000 rounds before it sleeps, and PyTorch's 16 of
 * them held every core of the H200 host after each parallel CPU operation:
 * the next staged upload's copy threads then shared cores with them
 * (cpuload.c in the shim).  10,000 rounds gave a staged 256 MiB upload
 * 47 GB/s against 23 and cost a 1M-element sum 18 us against 15, where
 * OMP_WAIT_POLICY=passive, no spinning at all, cost it 56 (H200 host,
 * docs/benchmarks.md).
 * Only the modes that stage get it by default, and never over the
 * program's own choice. */
static int plr_omp_spin(plr_run_opts *o) {
  const char *v = getenv("PAGELOCK_OMP_SPIN");
  int want = strcmp(o->mode, "observe") != 0 && strcmp(o->mode, "off") != 0;
  if (v && v[0]) {
    if (strcasecmp(v, "short") == 0) {
      want = 1;
    } else if (strcasecmp(v, "keep") == 0) {
      want = 0;
    } else {
      char shown[160];
      plr_escape_ctl(v, shown, sizeof shown);
      fprintf(stderr,
              "pagelock: invalid PAGELOCK_OMP_SPIN='%s' in the environment (valid: short, keep)\n",
              shown);
      return 2;
    }
  }
  if (getenv("GOMP_SPINCOUNT") || getenv("OMP_WAIT_POLICY")) want = 0;
  o->omp_short = want;
  return 0;
}

int plr_parse_run_opts(const char *cmd, int argc, char **argv, int *first, plr_run_opts *o,
                       int *done) {
  *done = 0;
  const char *mode = NULL;
  o->mode = "observe";
  o->output = NULL;
  o->quick = 0;
  o->max_blocked = -1;
  o->omp_short = 0;
  int run = strcmp(cmd, "run") == 0;
  plr_opts op;
  plr_opts_init(&op, cmd, run ? PLR_ORDER_STOP : PLR_ORDER_PERMUTE, argc, argv);
  int k;
  while ((k = plr_opts_next(&op)) == PLR_OPT_OPTION) {
    if (strcmp(op.name, "mode") == 0)
      mode = op.val;
    else if (strcmp(op.name, "output") == 0)
      o->output = op.val;
    else if (strcmp(op.name, "quick") == 0)
      o->quick = 1;
    else if (strcmp(op.name, "max-blocked") == 0 &&
             plr_opt_number(&op, op.val, "milliseconds", &o->max_blocked))
      return PLR_EXIT_USAGE;
  }
  if (k == PLR_OPT_HELP) {
    *done = 1;
    return 0;
  }
  if (k == PLR_OPT_ERROR) return PLR_EXIT_USAGE;
  *first = optind;
  /* The environment counts as the shim would read it, unless --mode says
   * otherwise; a bad value stops here rather than in every traced process
   * (where the shim would warn and observe). */
  const char *env = getenv("PAGELOCK_MODE");
  if (mode) {
    o->mode = plr_mode_canonical(mode);
    if (!o->mode) {
      char shown[128];
      plr_escape_ctl(mode, shown, sizeof shown);
      return plr_usage_error(
          cmd, "invalid --mode '%s' (valid: observe, stage, register, auto, off)", shown);
    }
  } else if (env && env[0]) {
    o->mode = plr_mode_canonical(env);
    if (!o->mode) return plr_mode_error("PAGELOCK_MODE", env);
  }
  if (o->output && !o->output[0]) return plr_usage_error(cmd, "-o needs a non-empty pattern");
  return plr_omp_spin(o);
}

int plr_run_status(const plr_launch_result *res, size_t failed) {
  if (res->status != 0 || (!failed && !res->lost)) return res->status;
  if (failed)
    fprintf(stderr,
            "pagelock: the program exited 0, but %zu trace%s it "
            "wrote could not be reported: exit status %d\n",
            failed, failed == 1 ? "" : "s", PLR_EXIT_USAGE);
  return PLR_EXIT_USAGE;
}
