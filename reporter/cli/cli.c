/* cli.c - what every command shares: the usage text (its environment part
 * from include/pagelock/options.def), option parsing, and the exit status
 * of run and demo. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cli.h"
#include "escape.h"
#include "launch.h"
#include "optdoc.h"
#include "pagelock/trace_format.h"

/* Appends s to the help text being wrapped, without markdown's backticks;
 * a '\n' in buf never happens: words are split on spaces only. */
static void plr_cat_plain(char *buf, size_t len, const char *s) {
  size_t n = strlen(buf);
  for (; *s && n + 1 < len; s++)
    if (*s != '`') buf[n++] = *s;
  buf[n] = 0;
}

/* "  NAME                     text..." wrapped at 79 columns, continuation
 * lines indented to the text's column (27). */
static void plr_print_wrapped(FILE *out, const char *name, const char *text) {
  enum { COL = 27, WIDTH = 79 };
  int col = fprintf(out, "  %-24s ", name);
  int first = 1;
  for (const char *p = text; *p;) {
    while (*p == ' ') p++;
    size_t w = strcspn(p, " ");
    if (w == 0) break;
    if (!first && col + 1 + (int)w > WIDTH) {
      fprintf(out, "\n%*s", COL, "");
      col = COL;
    } else if (!first) {
      fputc(' ', out);
      col++;
    }
    fwrite(p, 1, w, out);
    col += (int)w;
    first = 0;
    p += w;
  }
  fputc('\n', out);
}

static void plr_usage_options(FILE *out) {
  for (size_t i = 0; i < plr_option_count; i++) {
    const plr_option_doc *o = &plr_option_docs[i];
    char text[1024] = "", def[64], range[512], name[64];
    plr_option_words(o, "", "", "|", def, sizeof def, range, sizeof range);
    plr_cat_plain(text, sizeof text, range);
    /* The documented default without backticks: "(default 0; a quarter
     * of physical memory)" for "`0` (a quarter of physical memory)", and
     * "(default searched)" for a string's "(searched)". */
    char shown[256] = "";
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
    plr_print_wrapped(out, name, text);
  }
}

void plr_usage(FILE *out) {
  fprintf(out,
          "usage: pagelock run [--mode M] [-o PATTERN] [--] program [args...]\n"
          "       pagelock report [--format text|json|html|chrome] [-o FILE] "
          "FILE|DIR...\n"
          "       pagelock compare [--format text|json] BEFORE AFTER\n"
          "       pagelock compare [--format text|json] BEFORE... -- "
          "AFTER...\n"
          "       pagelock demo [--mode M] [-o PATTERN] [--quick]\n"
          "       pagelock doctor [PROGRAM]\n"
          "       pagelock --help | --version\n"
          "\n"
          "  run     run a CUDA program with libpagelock.so preloaded, then\n"
          "          print a report of its host<->device copies to stderr\n"
          "  report  report on trace files written by an earlier run (a\n"
          "          directory stands for its *.trace files)\n"
          "  compare two runs side by side (each a trace, several traces, or\n"
          "          a directory of *.trace files), with after/before "
          "ratios\n"
          "  demo    run the bundled workload (over fake CUDA when no GPU\n"
          "          answers) and print its report\n"
          "  doctor  check this machine (GPU, CUPTI, limits, clock) and, given\n"
          "          a program, whether the shim can reach it; exits 1 when\n"
          "          something blocks recording\n"
          "\n"
          "  --mode M      observe (default), stage, register, auto or off;\n"
          "                without it, PAGELOCK_MODE counts\n"
          "  -o PATTERN    trace file name; %%p pid, %%h host, %%r rank\n"
          "                (default: pagelock.%%p.trace in the current "
          "directory)\n"
          "  --format F    text (default), json, html (one self-contained "
          "page with\n"
          "                timelines) or chrome (trace events for Perfetto "
          "or\n"
          "                chrome://tracing)\n"
          "  -o FILE       report: write the report to FILE instead of "
          "stdout\n"
          "\n"
          "environment (read by libpagelock.so once at start, unless marked "
          "CLI; a bad\n"
          "value is reported and the default used; sizes take K, M or G):\n");
  plr_usage_options(out);
}

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

int plr_opt_value(int argc, char **argv, int *i, const char *lng, const char *shrt,
                  const char *what, const char **val) {
  const char *a = argv[*i];
  size_t n = strlen(lng);
  if (strncmp(a, lng, n) == 0 && a[n] == '=') {
    *val = a + n + 1;
    return 1;
  }
  if (strcmp(a, lng) != 0 && (shrt == NULL || strcmp(a, shrt) != 0)) return 0;
  if (*i + 1 >= argc) {
    fprintf(stderr, "pagelock: %s needs %s\n", a, what);
    return -1;
  }
  *val = argv[++(*i)];
  return 1;
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

int plr_parse_run_opts(int argc, char **argv, int *i, plr_run_opts *o, int allow_quick, int *done) {
  *done = 0;
  const char *mode = NULL;
  o->mode = "observe";
  o->output = NULL;
  o->quick = 0;
  o->omp_short = 0;
  for (; *i < argc; (*i)++) {
    const char *a = argv[*i];
    if (strcmp(a, "--") == 0) {
      (*i)++;
      break;
    }
    if (a[0] != '-' || !a[1]) break;
    int got = plr_opt_value(argc, argv, i, "--output", "-o", "a value", &o->output);
    if (got == 0) got = plr_opt_value(argc, argv, i, "--mode", "-m", "a value", &mode);
    if (got < 0) return 2;
    if (got > 0) {
      continue;
    } else if (strncmp(a, "-o", 2) == 0) {
      o->output = a + 2;
    } else if (allow_quick && strcmp(a, "--quick") == 0) {
      o->quick = 1;
    } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      plr_usage(stdout);
      *done = 1;
      return 0;
    } else {
      fprintf(stderr, "pagelock: unknown option '%s'\n", a);
      plr_usage(stderr);
      return 2;
    }
  }
  /* The environment counts as the shim would read it, unless --mode says
   * otherwise; a bad value stops here rather than in every traced process
   * (where the shim would warn and observe). */
  const char *env = getenv("PAGELOCK_MODE");
  if (mode) {
    o->mode = plr_mode_canonical(mode);
    if (!o->mode) return plr_mode_error("--mode", mode);
  } else if (env && env[0]) {
    o->mode = plr_mode_canonical(env);
    if (!o->mode) return plr_mode_error("PAGELOCK_MODE", env);
  }
  if (o->output && !o->output[0]) {
    fprintf(stderr, "pagelock: -o needs a non-empty pattern\n");
    return 2;
  }
  return plr_omp_spin(o);
}

void plr_print_trace_list(FILE *out, char *const *paths, size_t n) {
  if (!n) {
    fprintf(out,
            "pagelock: no trace was written (the program made no CUDA "
            "copies, or the shim was not loaded: statically linked and "
            "setuid programs ignore LD_PRELOAD)\n");
    return;
  }
  /* A listed file that is gone was already reported as unreadable.  The
   * paths are the manifest's, any bytes the program's pattern produced:
   * escaped (escape.h). */
  for (size_t i = 0; i < n; i++)
    if (access(paths[i], F_OK) == 0) {
      fputs("pagelock: trace written to ", out);
      plr_text_puts(out, paths[i]);
      fputc('\n', out);
    }
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
