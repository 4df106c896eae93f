/* compare.c - the numbers of `pagelock compare` and their two writers.
 *
 * The numbers are the ones a user changes pagelock's mode (or pins
 * buffers) to move: wall time, host time blocked in copies, pageable
 * copies, exposed and hidden copy time, bandwidth by memory kind, bytes
 * staged; each with its after/before ratio. */
#include "compare.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_analysis.h"
#include "timeline.h"
#include "trace_model.h"
#include "util.h"

#define PLR_CMP_SCHEMA_VERSION 1

static const char *const plr_cmp_dir[2] = {"H2D", "D2H"};
static const char *const plr_cmp_mem[2] = {"pageable", "pinned"};

/* Keeps one GPU copy's bandwidth sample. */
static void plr_cmp_sample(plr_compare_side *s, int d, int m, float gbps) {
  if (s->nbw[d][m] == s->capbw[d][m]) {
    size_t cap = s->capbw[d][m] ? s->capbw[d][m] * 2 : 256;
    float *v = realloc(s->bw[d][m], cap * sizeof *v);
    if (!v) {
      s->oom = 1;
      return;
    }
    s->bw[d][m] = v;
    s->capbw[d][m] = cap;
  }
  s->bw[d][m][s->nbw[d][m]++] = gbps;
}

/* Copies smaller than this measure latency, not bandwidth: a staged run
 * still passes its 4 KiB copies through as pageable, and their medians
 * would stand for "pageable bandwidth after". */
#define PLR_CMP_BW_MIN_BYTES (1u << 20)

/* Walk callback: one bandwidth sample per timed H2D/D2H GPU copy of at
 * least PLR_CMP_BW_MIN_BYTES whose host side CUPTI saw as pageable or
 * pinned. */
static int plr_cmp_walk_fn(void *ctx, const plr_event *ev) {
  plr_compare_side *s = ctx;
  if (ev->kind != PLR_EV_GPU || !plr_gpu_is_copy(ev->gpu)) return 0;
  const pagelock_rec_gpu *g = ev->gpu;
  int d;
  if (g->copy_kind == PAGELOCK_GPU_COPY_HTOD)
    d = 0;
  else if (g->copy_kind == PAGELOCK_GPU_COPY_DTOH)
    d = 1;
  else
    return 0;
  unsigned hk = plr_gpu_host_kind(g);
  int m;
  if (hk == PAGELOCK_GPU_MEM_PAGEABLE)
    m = 0;
  else if (hk == PAGELOCK_GPU_MEM_PINNED)
    m = 1;
  else
    return 0;
  if (ev->end <= ev->start || g->bytes < PLR_CMP_BW_MIN_BYTES) return 0;
  plr_cmp_sample(s, d, m, (float)((double)g->bytes / (double)(ev->end - ev->start)));
  return s->oom;
}

void plr_compare_add(plr_compare_side *s, const plr_trace *t,
                     const plr_gpu_report *g, const plr_source *src) {
  s->traces++;
  /* The trace window in wall-clock time, so that processes of one run
   * (ranks on several hosts) make one extent. */
  uint64_t first = t->first_ns, last = t->last_ns > first ? t->last_ns : first;
  uint64_t rt0 = t->hdr.start_realtime_ns + (first - t->hdr.start_mono_ns);
  uint64_t rt1 = rt0 + (last - first);
  if (!s->have_window || rt0 < s->rt_start) s->rt_start = rt0;
  if (!s->have_window || rt1 > s->rt_end) s->rt_end = rt1;
  s->have_window = 1;
  const plr_totals *tot = &t->tot;
  s->copies += tot->all.count;
  s->copy_bytes += tot->all.bytes;
  s->host_blocked_ns += tot->all.host_ns;
  s->pageable_copies += tot->pageable.count;
  s->pageable_bytes += tot->pageable.bytes;
  s->pageable_host_ns += tot->pageable.host_ns;
  s->staged_copies += tot->staged.count;
  s->staged_bytes += tot->staged.bytes;
  for (int r = 0; r < PLR_NROUTE; r++) {
    s->route_copies[r] += tot->routes[r].count;
    s->route_bytes[r] += tot->routes[r].bytes;
  }
  if (g && g->status == PAGELOCK_GPU_TIMING_ON && g->ndev) {
    s->gpu_traces++;
    for (size_t i = 0; i < g->ndev; i++) {
      s->copy_busy_ns += g->dev[i].copy_busy_all_ns;
      s->copy_hidden_ns += g->dev[i].copy_hidden_ns;
      s->copy_exposed_ns += g->dev[i].copy_exposed_ns;
      s->kernel_busy_ns += g->dev[i].kernel_busy_ns;
    }
  }
  if (src) plr_walk(src, plr_cmp_walk_fn, s);
}

void plr_compare_side_free(plr_compare_side *s) {
  for (int d = 0; d < 2; d++)
    for (int m = 0; m < 2; m++) free(s->bw[d][m]);
  memset(s, 0, sizeof *s);
}

/* qsort order of samples. */
static int plr_cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

/* Median of a side's samples (sorts them); -1 when there are none. */
static double plr_cmp_median(const plr_compare_side *s, int d, int m) {
  size_t n = s->nbw[d][m];
  if (!n) return -1;
  float *v = s->bw[d][m];
  qsort(v, n, sizeof *v, plr_cmp_float);
  return n % 2 ? v[n / 2] : ((double)v[n / 2 - 1] + (double)v[n / 2]) / 2;
}

/* One comparable number of a side; have = 0 means "not measured". */
typedef struct plr_cmp_val {
  int have;
  double v;
} plr_cmp_val;

typedef enum plr_cmp_unit {
  PLR_UNIT_COUNT,
  PLR_UNIT_MS,
  PLR_UNIT_BYTES,
  PLR_UNIT_PCT,
  PLR_UNIT_GBPS,
} plr_cmp_unit;

typedef struct plr_cmp_row {
  char label[48]; /* text */
  char key[48];   /* json */
  plr_cmp_unit unit;
  plr_cmp_val b, a;
} plr_cmp_row;

#define PLR_CMP_MAX_ROWS 24

/* The rows both writers print, in order. */
static size_t plr_cmp_rows(const plr_compare_side *b, const plr_compare_side *a,
                           plr_cmp_row *rows) {
  size_t n = 0;
  const plr_compare_side *side[2] = {b, a};
#define PLR_ROW(LABEL, KEY, UNIT, EXPR_HAVE, EXPR)                         \
  do {                                                                     \
    snprintf(rows[n].label, sizeof rows[n].label, "%s", LABEL);            \
    snprintf(rows[n].key, sizeof rows[n].key, "%s", KEY);                  \
    rows[n].unit = UNIT;                                                   \
    for (int k_ = 0; k_ < 2; k_++) {                                       \
      const plr_compare_side *s = side[k_];                                \
      plr_cmp_val *v_ = k_ ? &rows[n].a : &rows[n].b;                      \
      v_->have = (EXPR_HAVE);                                              \
      v_->v = v_->have ? (double)(EXPR) : 0;                               \
    }                                                                      \
    n++;                                                                   \
  } while (0)
  PLR_ROW("wall time (trace window)", "wall_ns", PLR_UNIT_MS, s->have_window,
          s->rt_end - s->rt_start);
  PLR_ROW("host blocked in copies", "host_blocked_ns", PLR_UNIT_MS, 1,
          s->host_blocked_ns);
  PLR_ROW("copy calls", "copies", PLR_UNIT_COUNT, 1, s->copies);
  PLR_ROW("pageable copies", "pageable_copies", PLR_UNIT_COUNT, 1,
          s->pageable_copies);
  PLR_ROW("exposed copy time (GPU)", "exposed_copy_ns", PLR_UNIT_MS,
          s->gpu_traces > 0, s->copy_exposed_ns);
  PLR_ROW("copy time hidden under kernels", "hidden_copy_pct", PLR_UNIT_PCT,
          s->gpu_traces > 0 && s->copy_busy_ns > 0,
          100.0 * (double)s->copy_hidden_ns / (double)s->copy_busy_ns);
  for (int d = 0; d < 2; d++) {
    for (int m = 0; m < 2; m++) {
      /* Only kinds either run used: four empty rows would be noise. */
      if (!b->nbw[d][m] && !a->nbw[d][m]) continue;
      char label[48], key[48];
      snprintf(label, sizeof label, "%s %s GB/s, copies >= 1M", plr_cmp_dir[d],
               plr_cmp_mem[m]);
      snprintf(key, sizeof key, "%s_%s_median_gbps", d ? "d2h" : "h2d",
               plr_cmp_mem[m]);
      PLR_ROW(label, key, PLR_UNIT_GBPS, s->nbw[d][m] > 0,
              plr_cmp_median(s, d, m));
    }
  }
  /* The routes of the copies with a pageable or page-locked host side: what
   * a change of mode moves. */
  PLR_ROW("copies passed through", "pass_copies", PLR_UNIT_COUNT, 1,
          s->route_copies[PLR_ROUTE_PASS]);
  PLR_ROW("bytes passed through", "pass_bytes", PLR_UNIT_BYTES, 1,
          s->route_bytes[PLR_ROUTE_PASS]);
  PLR_ROW("copies staged", "stage_copies", PLR_UNIT_COUNT, 1,
          s->route_copies[PLR_ROUTE_STAGE]);
  PLR_ROW("staged bytes", "staged_bytes", PLR_UNIT_BYTES, 1, s->staged_bytes);
  PLR_ROW("copies registered", "register_copies", PLR_UNIT_COUNT, 1,
          s->route_copies[PLR_ROUTE_REGISTER]);
  PLR_ROW("registered bytes", "register_bytes", PLR_UNIT_BYTES, 1,
          s->route_bytes[PLR_ROUTE_REGISTER]);
#undef PLR_ROW
  return n;
}

/* A value as text in its unit ("-" when not measured). */
static void plr_cmp_fmt(const plr_cmp_val *v, plr_cmp_unit u, char *buf,
                        size_t len) {
  if (!v->have) {
    snprintf(buf, len, "-");
    return;
  }
  switch (u) {
  case PLR_UNIT_COUNT:
    snprintf(buf, len, "%.0f", v->v);
    break;
  case PLR_UNIT_MS:
    snprintf(buf, len, "%.3f ms", v->v / 1e6);
    break;
  case PLR_UNIT_BYTES:
    /* Converting a double at or past 2^64 is undefined; sums of a corrupt
     * trace's byte counts get there. */
    plr_fmt_bytes(v->v < 18446744073709551616.0 ? (uint64_t)v->v : UINT64_MAX,
                  buf, len);
    break;
  case PLR_UNIT_PCT:
    snprintf(buf, len, "%.1f%%", v->v);
    break;
  case PLR_UNIT_GBPS:
    snprintf(buf, len, "%.2f", v->v);
    break;
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

/* The text table: label, before, after, after/before. */
static void plr_cmp_text(FILE *out, const plr_compare_side *b,
                         const plr_compare_side *a, const plr_cmp_row *rows,
                         size_t n) {
  fprintf(out, "%-32s %16s %16s %14s\n", "", "before", "after",
          "after/before");
  fprintf(out, "%-32s %16zu %16zu\n", "traces", b->traces, a->traces);
  for (size_t i = 0; i < n; i++) {
    char bv[48], av[48], ra[48];
    plr_cmp_fmt(&rows[i].b, rows[i].unit, bv, sizeof bv);
    plr_cmp_fmt(&rows[i].a, rows[i].unit, av, sizeof av);
    plr_cmp_ratio(&rows[i], ra, sizeof ra);
    fprintf(out, "%-32s %16s %16s %14s\n", rows[i].label, bv, av, ra);
  }
  if (!b->gpu_traces || !a->gpu_traces)
    fprintf(out, "\nexposed and hidden copy time need GPU timing (CUPTI) in "
            "both runs: '-' where a run has none.\n");
}

/* One value in JSON: null when not measured. */
static void plr_cmp_json_val(FILE *out, const plr_cmp_val *v,
                             plr_cmp_unit u) {
  if (!v->have)
    fputs("null", out);
  else if (u == PLR_UNIT_PCT || u == PLR_UNIT_GBPS)
    fprintf(out, "%.3f", v->v);
  else
    fprintf(out, "%.0f", v->v);
}

/* "before"/"after": every row's value under its key, plus raw sums. */
static void plr_cmp_json_side(FILE *out, const char *name,
                              const plr_compare_side *s,
                              const plr_cmp_row *rows, size_t n, int after) {
  fprintf(out, "  \"%s\": {\"traces\": %zu, \"gpu_traces\": %" PRIu64, name,
          s->traces, s->gpu_traces);
  for (size_t i = 0; i < n; i++) {
    fprintf(out, ", \"%s\": ", rows[i].key);
    plr_cmp_json_val(out, after ? &rows[i].a : &rows[i].b, rows[i].unit);
  }
  fprintf(out, ", \"pageable_bytes\": %" PRIu64 ", \"staged_copies\": %" PRIu64
          ", \"copy_busy_ns\": %" PRIu64 ", \"copy_hidden_ns\": %" PRIu64
          ", \"kernel_busy_ns\": %" PRIu64 ",\n    \"routes\": {",
          s->pageable_bytes, s->staged_copies, s->copy_busy_ns,
          s->copy_hidden_ns, s->kernel_busy_ns);
  /* The report's totals.routes shape, summed over the side's traces. */
  for (int r = 0; r < PLR_NROUTE; r++)
    fprintf(out, "%s\"%s\": {\"copies\": %" PRIu64 ", \"bytes\": %" PRIu64 "}",
            r ? ", " : "", plr_route_name((unsigned)r), s->route_copies[r],
            s->route_bytes[r]);
  fputs("}}", out);
}

/* The JSON document: both sides and the ratios. */
static void plr_cmp_json(FILE *out, const plr_compare_side *b,
                         const plr_compare_side *a, const plr_cmp_row *rows,
                         size_t n) {
  fprintf(out, "{\n  \"schema\": \"pagelock-compare\", \"schema_version\": "
          "%d,\n",
          PLR_CMP_SCHEMA_VERSION);
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
  size_t n = plr_cmp_rows(before, after, rows);
  if (json)
    plr_cmp_json(out, before, after, rows, n);
  else
    plr_cmp_text(out, before, after, rows, n);
}

