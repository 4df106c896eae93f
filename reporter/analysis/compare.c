/* compare.c - the numbers of `pagelock compare` (report/compare_write.c
 * writes them).
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
#include "trace_model.h"
#include "units.h"
#include "walk.h"

/* The host memory kind of bw[][m]: 0 pageable, 1 pinned. */
static const char *plr_cmp_mem(int m) {
  return plr_gpu_mem_name(m ? PAGELOCK_GPU_MEM_PINNED : PAGELOCK_GPU_MEM_PAGEABLE);
}

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

void plr_compare_add(plr_compare_side *s, const plr_trace *t, const plr_gpu_report *g,
                     const plr_source *src) {
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
  if (g && g->sampled) s->sampled_traces++;
  if (t->hdr.flags & PAGELOCK_FILE_SIMULATED) s->simulated_traces++;
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

size_t plr_compare_rows(const plr_compare_side *b, const plr_compare_side *a, plr_cmp_row *rows) {
  size_t n = 0;
  const plr_compare_side *side[2] = {b, a};
#define PLR_ROW(LABEL, KEY, UNIT, EXPR_HAVE, EXPR)              \
  do {                                                          \
    snprintf(rows[n].label, sizeof rows[n].label, "%s", LABEL); \
    snprintf(rows[n].key, sizeof rows[n].key, "%s", KEY);       \
    rows[n].unit = UNIT;                                        \
    for (int k_ = 0; k_ < 2; k_++) {                            \
      const plr_compare_side *s = side[k_];                     \
      plr_cmp_val *v_ = k_ ? &rows[n].a : &rows[n].b;           \
      v_->have = (EXPR_HAVE);                                   \
      v_->v = v_->have ? (double)(EXPR) : 0;                    \
    }                                                           \
    n++;                                                        \
  } while (0)
  PLR_ROW("wall time (trace window)", "wall_ns", PLR_UNIT_MS, s->have_window,
          s->rt_end - s->rt_start);
  PLR_ROW("host blocked in copies", "host_blocked_ns", PLR_UNIT_MS, 1, s->host_blocked_ns);
  PLR_ROW("copy calls", "copies", PLR_UNIT_COUNT, 1, s->copies);
  PLR_ROW("pageable copies", "pageable_copies", PLR_UNIT_COUNT, 1, s->pageable_copies);
  PLR_ROW("exposed copy time (GPU)", "exposed_copy_ns", PLR_UNIT_MS, s->gpu_traces > 0,
          s->copy_exposed_ns);
  PLR_ROW("copy time hidden under kernels", "hidden_copy_pct", PLR_UNIT_PCT,
          s->gpu_traces > 0 && s->copy_busy_ns > 0,
          100.0 * (double)s->copy_hidden_ns / (double)s->copy_busy_ns);
  for (int d = 0; d < 2; d++) {
    for (int m = 0; m < 2; m++) {
      /* Only kinds either run used: four empty rows would be noise. */
      if (!b->nbw[d][m] && !a->nbw[d][m]) continue;
      char label[48], key[48];
      snprintf(label, sizeof label, "%s %s GB/s, copies >= 1M", plr_cdir_name((unsigned)d),
               plr_cmp_mem(m));
      snprintf(key, sizeof key, "%s_%s_median_gbps", d ? "d2h" : "h2d", plr_cmp_mem(m));
      PLR_ROW(label, key, PLR_UNIT_GBPS, s->nbw[d][m] > 0, plr_cmp_median(s, d, m));
    }
  }
  /* The routes of the copies with a pageable or page-locked host side: what
   * a change of mode moves. */
  PLR_ROW("copies passed through", "pass_copies", PLR_UNIT_COUNT, 1,
          s->route_copies[PLR_ROUTE_PASS]);
  PLR_ROW("bytes passed through", "pass_bytes", PLR_UNIT_BYTES, 1, s->route_bytes[PLR_ROUTE_PASS]);
  PLR_ROW("copies staged", "stage_copies", PLR_UNIT_COUNT, 1, s->route_copies[PLR_ROUTE_STAGE]);
  PLR_ROW("staged bytes", "staged_bytes", PLR_UNIT_BYTES, 1, s->staged_bytes);
  PLR_ROW("copies registered", "register_copies", PLR_UNIT_COUNT, 1,
          s->route_copies[PLR_ROUTE_REGISTER]);
  PLR_ROW("registered bytes", "register_bytes", PLR_UNIT_BYTES, 1,
          s->route_bytes[PLR_ROUTE_REGISTER]);
#undef PLR_ROW
  return n;
}
