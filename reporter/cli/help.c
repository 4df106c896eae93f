/* help.c - the command line's words (help.h) and the two ways they are
 * printed: plain text wrapped at 79 columns for --help, roff for the man
 * page.  The environment part comes from include/pagelock/options.def. */
#include "help.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "exit_status.h"
#include "optdoc.h"

/* ------------------------------------------------------------------ */
/* The words.                                                          */

static const plr_help_opt plr_opts_run[] = {
    {'m', "mode", "M",
     "what the shim does with pageable copies: observe (default), stage, register, auto or off; "
     "without it, PAGELOCK_MODE counts"},
    {'o', "output", "PATTERN",
     "trace file name: %p pid, %h host, %r rank, %% a percent sign (default: PAGELOCK_OUTPUT, else "
     "pagelock.%p.trace in the current directory)"},
    {0, "max-blocked", "MS",
     "exit 3 when the program exited 0 but its pageable copies blocked the host longer than MS "
     "milliseconds in all"},
    {'h', "help", NULL, "print this help and exit"},
};

static const plr_help_opt plr_opts_report[] = {
    {'f', "format", "F",
     "text (default), json, html (one self-contained page with timelines) or chrome (trace events "
     "for Perfetto or chrome://tracing)"},
    {'o', "output", "FILE", "write the report to FILE instead of stdout"},
    {0, "max-blocked", "MS",
     "exit 3 when pageable copies blocked the host longer than MS milliseconds in all (every trace "
     "together)"},
    {'h', "help", NULL, "print this help and exit"},
};

static const plr_help_opt plr_opts_compare[] = {
    {'f', "format", "F", "text (default) or json"},
    {0, "fail-if-worse", "PCT",
     "exit 3 when the after run's wall time or its host time blocked in copies is more than PCT "
     "percent worse than the before run's"},
    {'h', "help", NULL, "print this help and exit"},
};

static const plr_help_opt plr_opts_demo[] = {
    {'m', "mode", "M", "as for run: observe (default), stage, register, auto or off"},
    {'o', "output", "PATTERN", "as for run (default: a fresh directory under TMPDIR or /tmp)"},
    {0, "quick", NULL, "a shorter workload"},
    {'h', "help", NULL, "print this help and exit"},
};

static const plr_help_opt plr_opts_doctor[] = {
    {'h', "help", NULL, "print this help and exit"},
};

#define PLR_N(a) (sizeof a / sizeof a[0])

const plr_help_cmd plr_help_cmds[] = {
    {"run",
     {"[OPTIONS] [--] PROGRAM [ARGS...]"},
     "run a CUDA program with libpagelock.so preloaded, then print a report of its host<->device "
     "copies to stderr",
     "Runs PROGRAM with libpagelock.so first in LD_PRELOAD and waits for it, then prints the report "
     "of the traces it wrote to stderr (stdout belongs to the program), and where they are. Options "
     "end at the program's name: everything after it is the program's. While the program runs, "
     "SIGINT and SIGQUIT are ignored as time(1) does (a terminal's ^C reaches the program itself); "
     "SIGTERM and SIGHUP are forwarded to it.",
     plr_opts_run,
     PLR_N(plr_opts_run),
     "the program's own exit status (128+N when signal N killed it); 127 when it cannot be found or "
     "run; 2 for a usage error, or when the program exited 0 but a trace it wrote could not be read; "
     "3 when the program exited 0 and --max-blocked was exceeded"},
    {"report",
     {"[OPTIONS] TRACE..."},
     "report on trace files written by an earlier run",
     "Reads each TRACE (written by libpagelock.so), analyses it and writes one report of them all: "
     "per process its verdicts and fixes first, then the copies by direction and host memory, GPU "
     "timing, and the pageable copies by call site and allocation site; with several traces "
     "(processes, ranks) totals and a table per rank follow. Options may come before or after the "
     "traces.",
     plr_opts_report,
     PLR_N(plr_opts_report),
     "0; 2 for a usage error, a trace that cannot be read (the others are still reported) or a "
     "report that cannot be written; 3 when --max-blocked was exceeded"},
    {"compare",
     {"[OPTIONS] BEFORE AFTER", "[OPTIONS] BEFORE... -- AFTER..."},
     "two runs side by side, with after/before ratios",
     "Compares two runs, each one trace, a directory of *.trace files, or several traces named one "
     "by one with -- between the runs: a one-line verdict first, then wall time, host time blocked "
     "in copies, pageable copies, exposed copy time, the share of copy time hidden under kernels, "
     "median bandwidths and the copies each route took, with after/before ratios. It says when a "
     "run's timings were simulated (fake CUDA) or its GPU timing sampled.",
     plr_opts_compare,
     PLR_N(plr_opts_compare),
     "0; 2 for a usage error or a trace that cannot be read; 3 when --fail-if-worse was exceeded"},
    {"demo",
     {"[OPTIONS]"},
     "run the bundled workload under the shim (over fake CUDA when no GPU answers) and print its "
     "report",
     "Runs the bundled workload, pageable and pinned copies around kernels, under the shim and "
     "prints its report to stdout. On a machine without a GPU it runs over the fake CUDA shipped "
     "with pagelock and says that its timings are simulated.",
     plr_opts_demo,
     PLR_N(plr_opts_demo),
     "the workload's exit status, as for run"},
    {"doctor",
     {"[PROGRAM]"},
     "check this machine (GPU, CUPTI, limits, clock) and whether the shim can reach PROGRAM",
     "Checks the GPU driver, CUPTI, the memory lock limit and the clock, and given PROGRAM whether "
     "the shim can reach it (not setuid, not static, how it finds CUDA). Each problem comes with its "
     "fix.",
     plr_opts_doctor,
     PLR_N(plr_opts_doctor),
     "0 when nothing blocks recording, 1 when something does, 2 for a usage error"},
};
const size_t plr_help_ncmds = PLR_N(plr_help_cmds);

const plr_help_status plr_help_statuses[] = {
    {"0", "success"},
    {"1", "doctor: something blocks recording"},
    {"2",
     "a usage error, or a trace that could not be read or a report that could not be written (run "
     "and demo: only when the program itself exited 0)"},
    {"3",
     "a gate failed: --max-blocked (report; run when the program exited 0) or --fail-if-worse "
     "(compare)"},
    {"127", "run: the program was not found or is not executable"},
    {"other",
     "run and demo: the program's own exit status, 128+N when signal N killed it (a program's own "
     "2 or 3 reads the same as pagelock's: the line pagelock prints on stderr tells them apart)"},
    {NULL, NULL},
};

static const char plr_help_about[] =
    "pagelock finds and fixes host<->device CUDA copies from pageable memory: they make "
    "cudaMemcpyAsync synchronous and run at a fraction of pinned speed. It preloads libpagelock.so "
    "into an unmodified program (a C or C++ program with a shared or static CUDA runtime, PyTorch, "
    "CuPy, JAX, a driver-API program), which records every copy with the kind of host memory it used, "
    "its call site and where its buffer was allocated, and GPU timing through CUPTI. The report says "
    "first what to fix and where. The modes stage, register and auto also fix the copies while the "
    "program runs.";

static const char *const plr_help_examples[][2] = {
    {"pagelock run -- ./app --epochs 1", "run, then print the report"},
    {"pagelock run --mode=auto -o 'traces/%h-%p.trace' -- python train.py",
     "register the buffers copied often, stage the rest; traces named by host and pid"},
    {"pagelock report --format=html -o report.html traces/*.trace", "one page with timelines"},
    {"pagelock report --max-blocked=50 app.trace",
     "in CI: exit 3 when pageable copies blocked the host more than 50 ms"},
    {"pagelock compare --fail-if-worse=5 before/ after/",
     "in CI: exit 3 when the after run is more than 5% slower or blocks longer"},
    {"LD_LIBRARY_PATH=build/fakecuda pagelock run -- ./app",
     "try it without a GPU, over the fake CUDA of a build tree (timings simulated)"},
};

const plr_help_cmd *plr_help_find(const char *name) {
  for (size_t i = 0; i < plr_help_ncmds; i++)
    if (strcmp(plr_help_cmds[i].name, name) == 0) return &plr_help_cmds[i];
  return NULL;
}

/* ------------------------------------------------------------------ */
/* Plain text.                                                         */

enum { PLR_HELP_WIDTH = 79 };

/* Appends s to buf without markdown's backticks. */
static void plr_cat_plain(char *buf, size_t len, const char *s) {
  size_t n = strlen(buf);
  for (; *s && n + 1 < len; s++)
    if (*s != '`') buf[n++] = *s;
  buf[n] = 0;
}

/* text (backticks dropped) from column col, wrapped at PLR_HELP_WIDTH on
 * spaces, continuation lines indented to hang; a word longer than a line
 * stands whole on its own. */
static void plr_wrap(FILE *out, int col, int hang, const char *text) {
  int first = 1;
  for (const char *p = text; *p;) {
    while (*p == ' ') p++;
    size_t w = strcspn(p, " ");
    if (w == 0) break;
    int vis = 0;
    for (size_t k = 0; k < w; k++) vis += p[k] != '`';
    if (!first && col + 1 + vis > PLR_HELP_WIDTH) {
      fprintf(out, "\n%*s", hang, "");
      col = hang;
    } else if (!first) {
      fputc(' ', out);
      col++;
    }
    for (size_t k = 0; k < w; k++)
      if (p[k] != '`') fputc(p[k], out);
    col += vis;
    first = 0;
    p += w;
  }
  fputc('\n', out);
}

/* "  NAME   text..." with the text from column at. */
static void plr_item(FILE *out, const char *name, int at, const char *text) {
  int col = fprintf(out, "  %s", name);
  if (col + 2 > at) {
    fputc('\n', out);
    col = 0;
  }
  fprintf(out, "%*s", at - col, "");
  plr_wrap(out, at, at, text);
}

/* "-o, --output=PATTERN" or "    --quick". */
static void plr_opt_name(const plr_help_opt *o, char *buf, size_t len) {
  char s[8] = "    ";
  if (o->shrt) snprintf(s, sizeof s, "-%c, ", o->shrt);
  snprintf(buf, len, "%s--%s%s%s", s, o->lng, o->arg ? "=" : "", o->arg ? o->arg : "");
}

/* Every option's line: "PAGELOCK_X   values (default D; note): help". */
static void plr_help_env(FILE *out) {
  for (size_t i = 0; i < plr_option_count; i++) {
    const plr_option_doc *o = &plr_option_docs[i];
    char text[4096] = "", def[64], range[512], name[64], shown[1024] = "";
    plr_option_words(o, "", "", "|", def, sizeof def, range, sizeof range);
    plr_cat_plain(text, sizeof text, range);
    /* The documented default without backticks: "(default 0; a quarter
     * of physical memory)" for "`0` (a quarter of physical memory)", and
     * "(default searched)" for a string's "(searched)". */
    plr_cat_plain(shown, sizeof shown, o->shown);
    const char *note = shown;
    plr_cat_plain(text, sizeof text, " (default ");
    if (def[0]) {
      plr_cat_plain(text, sizeof text, def);
      note = shown + strlen(def);
      while (*note == ' ') note++;
      if (*note) plr_cat_plain(text, sizeof text, "; ");
    }
    size_t l = strlen(note);
    if (l >= 2 && note[0] == '(' && note[l - 1] == ')') {
      shown[note - shown + l - 1] = 0;
      note++;
    }
    plr_cat_plain(text, sizeof text, note);
    plr_cat_plain(text, sizeof text, "): ");
    plr_cat_plain(text, sizeof text, o->help);
    snprintf(name, sizeof name, "PAGELOCK_%s", o->id);
    plr_item(out, name, 27, text);
  }
}

static void plr_help_synopsis(FILE *out, const plr_help_cmd *c, const char *first) {
  for (int k = 0; k < 3 && c->synopsis[k]; k++)
    fprintf(out, "%s pagelock %s %s\n", k == 0 && first ? first : "      ", c->name,
            c->synopsis[k]);
}

void plr_help_main(FILE *out) {
  for (size_t i = 0; i < plr_help_ncmds; i++)
    plr_help_synopsis(out, &plr_help_cmds[i], i == 0 ? "usage:" : NULL);
  fputs("       pagelock --help | --version | CMD --help\n\n", out);
  plr_wrap(out, 0, 0, plr_help_about);
  fputs("\ncommands:\n", out);
  for (size_t i = 0; i < plr_help_ncmds; i++)
    plr_item(out, plr_help_cmds[i].name, 11, plr_help_cmds[i].summary);
  fputs("\n", out);
  plr_wrap(out, 0, 0,
           "'pagelock CMD --help' lists a command's options; 'man pagelock' is the whole manual.");
  fputs("\nexit status:\n", out);
  for (const plr_help_status *s = plr_help_statuses; s->status; s++)
    plr_item(out, s->status, 11, s->text);
  fputs(
      "\nenvironment (read by libpagelock.so once at start, unless marked CLI; a bad\n"
      "value is reported and the default used; sizes take K, M or G):\n",
      out);
  plr_help_env(out);
}

void plr_help_command(FILE *out, const plr_help_cmd *c) {
  plr_help_synopsis(out, c, "usage:");
  fputc('\n', out);
  plr_wrap(out, 0, 0, c->text);
  fputs("\noptions:\n", out);
  for (size_t i = 0; i < c->nopts; i++) {
    char name[64];
    plr_opt_name(&c->opts[i], name, sizeof name);
    plr_item(out, name, 28, c->opts[i].text);
  }
  fputs("\nexit status: ", out);
  plr_wrap(out, 13, 2, c->exit);
  if (strcmp(c->name, "run") == 0 || strcmp(c->name, "demo") == 0)
    fputs("\nThe PAGELOCK_* variables that configure the shim: 'pagelock --help'.\n", out);
}

int plr_usage_error(const char *cmd, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "pagelock: %s%s", cmd ? cmd : "", cmd ? ": " : "");
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\ntry 'pagelock%s%s --help'\n", cmd ? " " : "", cmd ? cmd : "");
  return PLR_EXIT_USAGE;
}

/* ------------------------------------------------------------------ */
/* roff, for man(7).                                                   */

/* s as roff text: backslashes escaped, hyphens as \- (so that options can
 * be searched and copied), `names` in bold; at a line's start, a dot or
 * quote cannot begin a request. */
static void plr_roff(FILE *out, const char *s) {
  int bold = 0;
  if (*s == '.' || *s == '\'') fputs("\\&", out);
  for (; *s; s++) {
    switch (*s) {
      case '\\': fputs("\\e", out); break;
      case '-': fputs("\\-", out); break;
      case '`':
        fputs(bold ? "\\fR" : "\\fB", out);
        bold = !bold;
        break;
      case '\n':
        fputc('\n', out);
        if (s[1] == '.' || s[1] == '\'') fputs("\\&", out);
        break;
      default: fputc(*s, out);
    }
  }
  if (bold) fputs("\\fR", out);
}

/* s as a sentence: with a final stop unless it has one. */
static void plr_roff_sentence(FILE *out, const char *s) {
  plr_roff(out, s);
  size_t l = strlen(s);
  fputs(l && s[l - 1] == '.' ? "\n" : ".\n", out);
}

/* ".B pagelock run" and the synopsis form with its words in italics. */
static void plr_man_synopsis(FILE *out, const plr_help_cmd *c, const char *form) {
  fprintf(out, ".B pagelock %s\n", c->name);
  /* Upper-case words are placeholders; the rest (brackets, --, ...)
   * stays roman. */
  for (const char *p = form; *p;) {
    if (*p >= 'A' && *p <= 'Z') {
      size_t w = strspn(p, "ABCDEFGHIJKLMNOPQRSTUVWXYZ");
      fprintf(out, "\\fI%.*s\\fR", (int)w, p);
      p += w;
    } else if (*p == '-') {
      fputs("\\-", out);
      p++;
    } else {
      fputc(*p++, out);
    }
  }
  fputs("\n.br\n", out);
}

static void plr_man_opt(FILE *out, const plr_help_opt *o) {
  fputs(".TP\n", out);
  if (o->shrt) fprintf(out, "\\fB\\-%c\\fR, ", o->shrt);
  fprintf(out, "\\fB\\-\\-%s\\fR", o->lng);
  if (o->arg) fprintf(out, "=\\fI%s\\fR", o->arg);
  fputc('\n', out);
  plr_roff_sentence(out, o->text);
}

void plr_help_man(FILE *out, const char *version, const char *date) {
  fprintf(out,
          ".\\\" pagelock(1), written by the build from reporter/cli/help.c and\n"
          ".\\\" include/pagelock/options.def: edit those, not this file.\n"
          ".TH PAGELOCK 1 \"%s\" \"pagelock %s\" \"User Commands\"\n"
          ".nh\n",
          date, version);
  fputs(".SH NAME\npagelock \\- find and fix pageable host\\-device CUDA copies\n", out);
  fputs(".SH SYNOPSIS\n", out);
  for (size_t i = 0; i < plr_help_ncmds; i++)
    for (int k = 0; k < 3 && plr_help_cmds[i].synopsis[k]; k++)
      plr_man_synopsis(out, &plr_help_cmds[i], plr_help_cmds[i].synopsis[k]);
  fputs(".B pagelock\n\\fB\\-\\-help\\fR | \\fB\\-\\-version\\fR\n", out);
  fputs(".SH DESCRIPTION\n", out);
  plr_roff(out, plr_help_about);
  fputs(
      "\n.PP\nEach command takes \\fB\\-\\-help\\fR. Options take their value as "
      "\\fB\\-o\\fR\\~\\fIFILE\\fR, \\fB\\-o\\fR\\fIFILE\\fR, \\fB\\-\\-output\\fR\\~\\fIFILE\\fR "
      "or \\fB\\-\\-output\\fR=\\fIFILE\\fR; \\fB\\-\\-\\fR ends them. "
      "\\fBreport\\fR and \\fBcompare\\fR take options after their operands too; "
      "\\fBrun\\fR stops at the program's name.\n",
      out);
  fputs(".SH COMMANDS\n", out);
  for (size_t i = 0; i < plr_help_ncmds; i++) {
    const plr_help_cmd *c = &plr_help_cmds[i];
    fprintf(out, ".SS %s\n", c->name);
    plr_roff(out, c->text);
    fputs("\n.PP\nExit status: ", out);
    plr_roff_sentence(out, c->exit);
  }
  fputs(".SH OPTIONS\n", out);
  for (size_t i = 0; i < plr_help_ncmds; i++) {
    const plr_help_cmd *c = &plr_help_cmds[i];
    fprintf(out, ".SS %s\n", c->name);
    for (size_t k = 0; k < c->nopts; k++) plr_man_opt(out, &c->opts[k]);
  }
  fputs(
      ".SS pagelock\n.TP\n\\fB\\-\\-version\\fR\nprint the version and the trace format it "
      "reads, and exit.\n",
      out);
  fputs(
      ".SH ENVIRONMENT\n"
      "libpagelock.so reads these once at start; the ones marked CLI are read by "
      "\\fBpagelock\\fR itself. A bad value is reported and the default used; an unknown "
      "PAGELOCK_* name is warned about. Sizes take K, M or G.\n",
      out);
  for (size_t i = 0; i < plr_option_count; i++) {
    const plr_option_doc *o = &plr_option_docs[i];
    char def[64], range[512];
    plr_option_words(o, "`", "`", ", ", def, sizeof def, range, sizeof range);
    fprintf(out, ".TP\n.B PAGELOCK_%s\n", o->id);
    plr_roff_sentence(out, o->help);
    fputs(".br\nDefault: ", out);
    plr_roff(out, o->shown);
    fputs(". Values: ", out);
    plr_roff(out, range);
    fputs(".\n", out);
  }
  fputs(".SH \"EXIT STATUS\"\n", out);
  for (const plr_help_status *s = plr_help_statuses; s->status; s++) {
    fprintf(out, ".TP\n.B %s\n", s->status);
    plr_roff_sentence(out, s->text);
  }
  fputs(".SH EXAMPLES\n", out);
  for (size_t i = 0; i < PLR_N(plr_help_examples); i++) {
    fputs(".PP\n", out);
    plr_roff(out, plr_help_examples[i][1]);
    fputs(":\n.RS\n.nf\n", out);
    plr_roff(out, plr_help_examples[i][0]);
    fputs("\n.fi\n.RE\n", out);
  }
  fputs(
      ".SH \"SEE ALSO\"\n"
      ".BR nsys (1),\n.BR heaptrack (1),\n.BR perf (1),\n.BR ld.so (8);\n"
      "README.md and docs/ in /usr/share/doc/pagelock, or in the source tree.\n",
      out);
}
