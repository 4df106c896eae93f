/* compare_write.c - `pagelock compare`'s two writers: an aligned text table
 * and one JSON object, over the rows analysis/compare.c computes. */
#include <inttypes.h>
#include <stdbool.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "compare.h"
#include "escape.h"
#include "report.h"
#include "units.h"

#define PLR_CMP_SCHEMA_VERSION 1

/* A value as text in its unit ("-" when not measured). */
static void plr_cmp_fmt(const plr_cmp_val *v, plr_cmp_unit u, char *buf, size_t len) {
  if (!v->have) {
    snprintf(buf, len, "-");
    return;
  }
  switch (u) {
    case PLR_UNIT_COUNT: snprintf(buf, len, "%.0f", v->v); break;
    case PLR_UNIT_MS: snprintf(buf, len, "%.3f ms", v->v / 1e6); break;
    case PLR_UNIT_BYTES:
      /* Converting a double at or past 2^64 is undefined; sums of a corrupt
       * trace's byte counts get there. */
      plr_fmt_bytes(v->v < 18446744073709551616.0 ? (uint64_t)v->v : UINT64_MAX, buf, len);
      break;
    case PLR_UNIT_PCT: snprintf(buf, len, "%.1f%%", v->v); break;
    case PLR_UNIT_GBPS: snprintf(buf, len, "%.2f", v->v); break;
  }
}

/* after/before as "0.25x"; a percentage compares as a difference in
 * points.  "-" when either side is missing or before is 0. */
static void plr_cmp_ratio(const plr_cmp_row *r, char *buf, size_t len) {
  if (!r->a.have || !r->b.have) {
    snprintf(buf, len, "-");
    return;
  }
  if (r->unit == PLR_UNIT_PCT) {
    snprintf(buf, len, "%+.1f pts", r->a.v - r->b.v);
    return;
  }
  if (r->b.v == 0) {
    snprintf(buf, len, "-");
    return;
  }
  snprintf(buf, len, "%.2fx", r->a.v / r->b.v);
}

/* The row of key in rows, or NULL. */
static const plr_cmp_row *plr_cmp_find(const plr_cmp_row *rows, size_t n, const char *key) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(rows[i].key, key) == 0) return &rows[i];
  return NULL;
}

/* after/before of a row both runs measured: 0 when both are 0, -1 when
 * not comparable, HUGE_VAL when only after has any. */
static double plr_cmp_change(const plr_cmp_row *r) {
  if (!r || !r->a.have || !r->b.have) return -1;
  if (r->b.v > 0) return r->a.v / r->b.v;
  return r->a.v > 0 ? HUGE_VAL : 0;
}

/* "2.4x less host time blocked in copies": x a ratio after/before. */
static void plr_cmp_clause(double x, const char *what, char *buf, size_t len) {
  if (x < 0)
    snprintf(buf, len, "%s not measured in both runs", what);
  else if (x == HUGE_VAL)
    snprintf(buf, len, "%s where the before run had none", what);
  else if (x == 0)
    snprintf(buf, len, "no %s", what);
  else if (x < 1)
    snprintf(buf, len, "%.*fx less %s", 1 / x < 1.1 ? 2 : 1, 1 / x, what);
  else if (x > 1)
    snprintf(buf, len, "%.*fx more %s", x < 1.1 ? 2 : 1, x, what);
  else
    snprintf(buf, len, "the same %s", what);
}

void plr_compare_verdict(const plr_compare_side *b, const plr_compare_side *a, plr_cmp_verdict *v) {
  plr_cmp_row rows[PLR_CMP_MAX_ROWS];
  size_t n = plr_compare_rows(b, a, rows);
  memset(v, 0, sizeof *v);
  v->wall = plr_cmp_change(plr_cmp_find(rows, n, "wall_ns"));
  v->blocked = plr_cmp_change(plr_cmp_find(rows, n, "host_blocked_ns"));
  /* Slower: a wall time that prints as more than 1.00x, or without wall
   * times, more time blocked. */
  v->slower = v->wall >= 0 ? v->wall >= 1.005 : v->blocked > 1;
  char blocked[96], wall[64];
  plr_cmp_clause(v->blocked, "host time blocked in copies", blocked, sizeof blocked);
  if (v->wall < 0 || v->wall == HUGE_VAL)
    snprintf(wall, sizeof wall, "wall time not comparable");
  else
    snprintf(wall, sizeof wall, "%.2fx the wall time", v->wall);
  snprintf(v->text, sizeof v->text, "%s %s, %s",
           v->slower ? "after is slower:" : "after:", v->slower ? wall : blocked,
           v->slower ? blocked : wall);
}

int plr_compare_worse(const plr_cmp_verdict *v, double pct, char *why, size_t len) {
  double limit = 1 + pct / 100;
  const char *what = v->wall > limit      ? "wall time"
                     : v->blocked > limit ? "host time blocked in copies"
                                          : NULL;
  if (!what) return 0;
  double x = v->wall > limit ? v->wall : v->blocked;
  if (x == HUGE_VAL)
    snprintf(why, len, "the after run's %s is above 0 where the before run's was 0", what);
  else
    snprintf(why, len, "the after run's %s is %.1f%% worse than the before run's", what,
             (x - 1) * 100);
  return 1;
}

/* Both runs ran over the fake CUDA and the after run is slower: a fix
 * can be slower there and not on a GPU, and the reader must not take it
 * for the fix's effect. */
static bool plr_cmp_simulated_slower(const plr_compare_side *b, const plr_compare_side *a,
                                     const plr_cmp_verdict *v) {
  return v->slower && b->simulated_traces && a->simulated_traces;
}

/* Which runs ran over the fake CUDA: their times are the fake driver's. */
static void plr_cmp_simulated(FILE *out, const plr_compare_side *b, const plr_compare_side *a,
                              const plr_cmp_verdict *v) {
  if (!b->simulated_traces && !a->simulated_traces) return;
  const char *which = b->simulated_traces && a->simulated_traces ? "both runs"
                      : b->simulated_traces                      ? "the before run"
                                                                 : "the after run";
  fprintf(out,
          "simulated timings in %s (fake CUDA, no GPU): the times say how the simulation ran, not "
          "a GPU\n",
          which);
  if (plr_cmp_simulated_slower(b, a, v))
    fprintf(out,
            "the after run is slower in simulation: the fake CUDA gives each kind of copy "
            "its speed on a GPU host, but staging and registering take this machine's CPU "
            "beside the program; compare on a GPU before judging the fix\n");
}

/* The text table: label, before, after, after/before. */
static void plr_cmp_text(FILE *out, const plr_compare_side *b, const plr_compare_side *a,
                         const plr_cmp_row *rows, size_t n) {
  plr_cmp_verdict v;
  plr_compare_verdict(b, a, &v);
  fprintf(out, "%s\n", v.text);
  plr_cmp_simulated(out, b, a, &v);
  fputc('\n', out);
  fprintf(out, "%-32s %16s %16s %14s\n", "", "before", "after", "after/before");
  fprintf(out, "%-32s %16zu %16zu\n", "traces", b->traces, a->traces);
  for (size_t i = 0; i < n; i++) {
    char bv[48], av[48], ra[48];
    plr_cmp_fmt(&rows[i].b, rows[i].unit, bv, sizeof bv);
    plr_cmp_fmt(&rows[i].a, rows[i].unit, av, sizeof av);
    plr_cmp_ratio(&rows[i], ra, sizeof ra);
    fprintf(out, "%-32s %16s %16s %14s\n", rows[i].label, bv, av, ra);
  }
  if (!b->gpu_traces || !a->gpu_traces)
    fprintf(out,
            "\nexposed and hidden copy time need GPU timing (CUPTI) in "
            "both runs: '-' where a run has none.\n");
  /* Sampled timing measures the windows only: the GPU rows then compare
   * samples of the runs, not the runs. */
  if (b->sampled_traces || a->sampled_traces) {
    char bs[80] = "", as[80] = "";
    if (b->sampled_traces)
      snprintf(bs, sizeof bs, "the before run (%" PRIu64 " of %zu traces)", b->sampled_traces,
               b->traces);
    if (a->sampled_traces)
      snprintf(as, sizeof as, "the after run (%" PRIu64 " of %zu traces)", a->sampled_traces,
               a->traces);
    fprintf(out,
            "\nGPU timing was sampled in %s%s%s: exposed and hidden copy time and GPU "
            "bandwidths there cover the tracing windows only.\n",
            bs, bs[0] && as[0] ? " and " : "", as);
  }
}

/* One value in JSON: null when not measured. */
static void plr_cmp_json_val(FILE *out, const plr_cmp_val *v, plr_cmp_unit u) {
  if (!v->have)
    fputs("null", out);
  else if (u == PLR_UNIT_PCT || u == PLR_UNIT_GBPS)
    fprintf(out, "%.3f", v->v);
  else
    fprintf(out, "%.0f", v->v);
}

/* "before"/"after": every row's value under its key, plus raw sums. */
static void plr_cmp_json_side(FILE *out, const char *name, const plr_compare_side *s,
                              const plr_cmp_row *rows, size_t n, int after) {
  fprintf(out,
          "  \"%s\": {\"traces\": %zu, \"gpu_traces\": %" PRIu64 ", \"sampled_traces\": %" PRIu64
          ", \"simulated_traces\": %" PRIu64,
          name, s->traces, s->gpu_traces, s->sampled_traces, s->simulated_traces);
  for (size_t i = 0; i < n; i++) {
    fprintf(out, ", \"%s\": ", rows[i].key);
    plr_cmp_json_val(out, after ? &rows[i].a : &rows[i].b, rows[i].unit);
  }
  fprintf(out,
          ", \"pageable_bytes\": %" PRIu64 ", \"staged_copies\": %" PRIu64
          ", \"copy_busy_ns\": %" PRIu64 ", \"copy_hidden_ns\": %" PRIu64
          ", \"kernel_busy_ns\": %" PRIu64 ",\n    \"routes\": {",
          s->pageable_bytes, s->staged_copies, s->copy_busy_ns, s->copy_hidden_ns,
          s->kernel_busy_ns);
  /* The report's totals.routes shape, summed over the side's traces. */
  for (int r = 0; r < PLR_NROUTE; r++)
    fprintf(out, "%s\"%s\": {\"copies\": %" PRIu64 ", \"bytes\": %" PRIu64 "}", r ? ", " : "",
            plr_route_name((unsigned)r), s->route_copies[r], s->route_bytes[r]);
  fputs("}}", out);
}

/* The JSON document: both sides and the ratios. */
static void plr_cmp_json(FILE *out, const plr_compare_side *b, const plr_compare_side *a,
                         const plr_cmp_row *rows, size_t n) {
  fprintf(out,
          "{\n  \"schema\": \"pagelock-compare\", \"schema_version\": "
          "%d,\n",
          PLR_CMP_SCHEMA_VERSION);
  /* The verdict's ratios: null when not comparable, and when the before
   * run had none of what the after run has. */
  plr_cmp_verdict v;
  plr_compare_verdict(b, a, &v);
  fputs("  \"verdict\": {\"text\": ", out);
  plr_json_string(out, v.text, sizeof v.text);
  fprintf(out, ", \"slower\": %s, \"simulated_slower\": %s, \"wall_ratio\": ",
          v.slower ? "true" : "false", plr_cmp_simulated_slower(b, a, &v) ? "true" : "false");
  if (v.wall >= 0 && v.wall != HUGE_VAL)
    fprintf(out, "%.4f", v.wall);
  else
    fputs("null", out);
  fputs(", \"host_blocked_ratio\": ", out);
  if (v.blocked >= 0 && v.blocked != HUGE_VAL)
    fprintf(out, "%.4f", v.blocked);
  else
    fputs("null", out);
  fputs("},\n", out);
  plr_cmp_json_side(out, "before", b, rows, n, 0);
  fputs(",\n", out);
  plr_cmp_json_side(out, "after", a, rows, n, 1);
  /* Ratios after/before; percentages as a difference in points. */
  fputs(",\n  \"ratios\": {", out);
  for (size_t i = 0; i < n; i++) {
    const plr_cmp_row *r = &rows[i];
    fprintf(out, "%s\"%s%s\": ", i ? ", " : "", r->key,
            r->unit == PLR_UNIT_PCT ? "_delta_pts" : "");
    if (!r->a.have || !r->b.have || (r->unit != PLR_UNIT_PCT && r->b.v == 0))
      fputs("null", out);
    else if (r->unit == PLR_UNIT_PCT)
      fprintf(out, "%.3f", r->a.v - r->b.v);
    else
      fprintf(out, "%.4f", r->a.v / r->b.v);
  }
  fputs("}\n}\n", out);
}

void plr_compare_write(FILE *out, int json, const plr_compare_side *before,
                       const plr_compare_side *after) {
  plr_cmp_row rows[PLR_CMP_MAX_ROWS];
  size_t n = plr_compare_rows(before, after, rows);
  if (json)
    plr_cmp_json(out, before, after, rows, n);
  else
    plr_cmp_text(out, before, after, rows, n);
}
