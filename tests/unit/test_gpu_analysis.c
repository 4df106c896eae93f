/* test_gpu_analysis.c - cmocka tests of the version-2 (CUPTI) side of the
 * reporter: the reader's validation of GPU records, the streaming join of
 * copy calls to GPU ops, the interval arithmetic and every measure of
 * plr_device_report against a brute-force model on a discretised
 * timeline, the verdicts, and the text/JSON output. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "analysis.h"
#include "callsite.h"
#include "gpu_analysis.h"
#include "report.h"
#include "trace_builder.h"
#include "trace_model.h"
#include "trace_read.h"

#define MIB (1ull << 20)
#define MS 1000000ull

/* Loads b through a real FILE, as the CLI does. */
static int load(plr_trace *t, const tb *b) {
  FILE *f = tmpfile();
  assert_non_null(f);
  if (b->len) assert_int_equal(fwrite(b->p, 1, b->len, f), b->len);
  rewind(f);
  char msg[1024];
  int rc = plr_trace_load_stream(t, f, "mem.trace", msg, sizeof msg);
  if (rc) fprintf(stderr, "load failed: %s\n", msg);
  return rc;
}

static char *report(const plr_process *p, size_t n, int json) {
  char *s = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&s, &len);
  assert_non_null(f);
  if (json)
    plr_report_json(f, p, n);
  else
    plr_report_text(f, p, n);
  fclose(f);
  return s;
}

static void assert_contains(const char *hay, const char *needle) {
  if (!strstr(hay, needle)) {
    fprintf(stderr, "missing: [%s]\nin:\n%s\n", needle, hay);
    fail();
  }
}

/* Deterministic pseudo-random numbers (the test must be reproducible). */
static uint32_t rnd_state;
static uint32_t rnd(void) {
  uint32_t x = rnd_state;
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  return rnd_state = x;
}
static uint32_t rnd_below(uint32_t n) { return n ? rnd() % n : 0; }

/* ---- the interval arithmetic ------------------------------------------- */

#define GRID 96

/* A random span set over [0, GRID): empty, duplicate, nested, touching and
 * overlapping spans on purpose. */
static size_t random_spans(plr_span *v, size_t max) {
  size_t n = rnd_below((uint32_t)max + 1);
  for (size_t i = 0; i < n; i++) {
    uint32_t how = rnd_below(6);
    if (i && how == 0) {
      v[i] = v[rnd_below((uint32_t)i)]; /* duplicate */
    } else if (i && how == 1) {
      plr_span o = v[rnd_below((uint32_t)i)]; /* nested */
      uint64_t len = o.end > o.start ? o.end - o.start : 0;
      v[i].start = o.start + (len ? rnd_below((uint32_t)len) : 0);
      v[i].end = v[i].start + (len ? rnd_below((uint32_t)(o.end - v[i].start) + 1) : 0);
    } else if (i && how == 2) {
      plr_span o = v[rnd_below((uint32_t)i)]; /* touching */
      v[i].start = o.end;
      v[i].end = o.end + rnd_below(10);
      if (v[i].end > GRID) v[i].end = GRID;
    } else if (how == 3) {
      v[i].start = v[i].end = rnd_below(GRID); /* empty */
    } else {
      v[i].start = rnd_below(GRID);
      v[i].end = v[i].start + rnd_below(GRID - (uint32_t)v[i].start + 1);
    }
    if (v[i].start > v[i].end) v[i].end = v[i].start;
  }
  return n;
}

/* Marks the cells a set covers. */
static void cover(const plr_span *v, size_t n, unsigned char *cells) {
  memset(cells, 0, GRID + 64);
  for (size_t i = 0; i < n; i++)
    for (uint64_t c = v[i].start; c < v[i].end; c++) cells[c] = 1;
}

static uint64_t count_cells(const unsigned char *c) {
  uint64_t k = 0;
  for (int i = 0; i < GRID + 64; i++) k += c[i];
  return k;
}

static void assert_normalized(const plr_span *v, size_t n) {
  for (size_t i = 0; i < n; i++) {
    assert_true(v[i].start < v[i].end);
    if (i) assert_true(v[i - 1].end < v[i].start);
  }
}

/* Lanes (plr_lane_pick): intervals in start order never overlap within a
 * lane, and as few lanes are used as intervals are open at once, while
 * that is within the limit (first fit is optimal for intervals). */
static int span_start_cmp(const void *a, const void *b) {
  const plr_span *x = a, *y = b;
  return x->start < y->start ? -1 : x->start > y->start;
}

static void test_lanes_brute_force(void **state) {
  (void)state;
  for (int round = 0; round < 2000; round++) {
    plr_span v[40];
    size_t n = 1 + rnd_below(40);
    for (size_t i = 0; i < n; i++) {
      v[i].start = rnd_below(GRID);
      v[i].end = v[i].start + 1 + rnd_below(GRID / 8);
    }
    qsort(v, n, sizeof v[0], span_start_cmp);
    uint64_t ends[8];
    unsigned used = 0, lane[40], open_max = 0;
    for (size_t i = 0; i < n; i++) {
      lane[i] = plr_lane_pick(ends, &used, 8, v[i].start, v[i].end);
      assert_true(lane[i] < used && used <= 8);
      unsigned open = 0;
      for (size_t j = 0; j <= i; j++) open += v[j].end > v[i].start;
      if (open > open_max) open_max = open;
    }
    if (open_max <= 8) {
      assert_int_equal(used, open_max);
      for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++)
          if (lane[i] == lane[j]) assert_true(v[i].end <= v[j].start);
    }
  }
}

static void test_spans_brute_force(void **state) {
  (void)state;
  rnd_state = 0x12345678u;
  for (int iter = 0; iter < 5000; iter++) {
    plr_span a[24], b[24], u[48], top[PLR_MAX_GAPS];
    size_t na = random_spans(a, 12), nb = random_spans(b, 12);
    unsigned char ca[GRID + 64], cb[GRID + 64];
    cover(a, na, ca);
    cover(b, nb, cb);
    na = plr_spans_normalize(a, na);
    nb = plr_spans_normalize(b, nb);
    assert_normalized(a, na);
    assert_normalized(b, nb);
    unsigned char ca2[GRID + 64];
    cover(a, na, ca2);
    assert_memory_equal(ca, ca2, sizeof ca); /* the same cells */
    assert_int_equal(plr_spans_total(a, na), count_cells(ca));
    uint64_t both = 0, either = 0;
    for (int c = 0; c < GRID + 64; c++) {
      both += ca[c] && cb[c];
      either += ca[c] || cb[c];
    }
    assert_int_equal(plr_spans_intersect_total(a, na, b, nb), both);
    assert_int_equal(plr_spans_intersect_total(b, nb, a, na), both);
    size_t nu = plr_spans_union(a, na, b, nb, u);
    assert_normalized(u, nu);
    assert_int_equal(plr_spans_total(u, nu), either);
    /* gaps of the union inside a random window */
    plr_span w;
    w.start = rnd_below(GRID);
    w.end = w.start + rnd_below(GRID - (uint32_t)w.start + 1);
    /* plr_spans_gaps expects u inside the window: clip it */
    plr_span clip[48];
    size_t nc = 0;
    for (size_t i = 0; i < nu; i++) {
      uint64_t s = u[i].start > w.start ? u[i].start : w.start;
      uint64_t e = u[i].end < w.end ? u[i].end : w.end;
      if (s < e) clip[nc++] = (plr_span){s, e};
    }
    uint64_t thr = 1 + rnd_below(8), cnt, tot;
    size_t ng = plr_spans_gaps(clip, nc, w, thr, top, PLR_MAX_GAPS, &cnt, &tot);
    /* brute force: maximal uncovered runs of the window */
    plr_span all[GRID];
    size_t nall = 0;
    uint64_t bt = 0;
    for (uint64_t c = w.start; c < w.end;) {
      if (ca[c] || cb[c]) {
        c++;
        continue;
      }
      uint64_t s = c;
      while (c < w.end && !ca[c] && !cb[c]) c++;
      if (c - s >= thr) {
        all[nall++] = (plr_span){s, c};
        bt += c - s;
      }
    }
    assert_int_equal(cnt, nall);
    assert_int_equal(tot, bt);
    /* longest first, earlier first among equals (stable selection) */
    size_t want = nall < PLR_MAX_GAPS ? nall : PLR_MAX_GAPS;
    assert_int_equal(ng, want);
    for (size_t k = 0; k < want; k++) {
      size_t best = SIZE_MAX;
      for (size_t i = 0; i < nall; i++) {
        if (all[i].end == 0) continue; /* taken */
        if (best == SIZE_MAX || all[i].end - all[i].start > all[best].end - all[best].start)
          best = i;
      }
      assert_int_equal(top[k].start, all[best].start);
      assert_int_equal(top[k].end, all[best].end);
      all[best].end = 0;
      all[best].start = 0;
    }
  }
}

/* ---- every measure of plr_device_report, brute force -------------------- */

/* One random GPU record of the brute-force traces, in monotonic cells. */
typedef struct bf_rec {
  uint8_t kind, copy_kind, src, dst;
  uint32_t device, stream, flags;
  uint64_t s, e, bytes; /* cells; s may be "bad" (see bad) */
  int bad;              /* written with start 0 or end < start */
} bf_rec;

static unsigned bf_cdir(unsigned k) {
  if (k == PAGELOCK_GPU_COPY_HTOD || k == PAGELOCK_GPU_COPY_HTOA) return 0;
  if (k == PAGELOCK_GPU_COPY_DTOH || k == PAGELOCK_GPU_COPY_ATOH) return 1;
  return 2;
}

static unsigned bf_bucket(uint64_t b) {
  static const uint64_t lim[] = {64 << 10, 1 << 20, 16 << 20, 64 << 20, 256 << 20};
  unsigned k = 0;
  while (k < 5 && b >= lim[k]) k++;
  return k;
}

static int cmp_dbl(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Median and nearest-rank p10, written out independently of the code. */
static double bf_median(double *v, size_t n) {
  if (!n) return 0;
  qsort(v, n, sizeof *v, cmp_dbl);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}
static double bf_p10(double *v, size_t n) {
  if (!n) return 0;
  qsort(v, n, sizeof *v, cmp_dbl);
  size_t r = 1;
  while (r * 10 < n) r++; /* smallest r with r >= n / 10 */
  return v[r - 1];
}

/* The brute-force report of one device over cells [0, GRID). */
static void bf_device(const bf_rec *r, size_t n, uint32_t dev, uint64_t thr, uint64_t base,
                      const plr_device_report *got) {
  unsigned char K[GRID], C[3][GRID], M[GRID];
  memset(K, 0, sizeof K);
  memset(C, 0, sizeof C);
  memset(M, 0, sizeof M);
  uint64_t ws = UINT64_MAX, we = 0, kernels = 0, copies = 0, memsets = 0;
  for (size_t i = 0; i < n; i++) {
    if (r[i].device != dev || r[i].bad) continue;
    if (r[i].kind == PAGELOCK_GPU_SYNC || r[i].kind == PAGELOCK_GPU_OVERHEAD) continue;
    if (r[i].s < ws) ws = r[i].s;
    if (r[i].e > we) we = r[i].e;
    unsigned char *row = r[i].kind == PAGELOCK_GPU_KERNEL   ? K
                         : r[i].kind == PAGELOCK_GPU_MEMSET ? M
                                                            : C[bf_cdir(r[i].copy_kind)];
    if (row == K)
      kernels++;
    else if (row == M)
      memsets++;
    else
      copies++;
    for (uint64_t c = r[i].s; c < r[i].e; c++) row[c] = 1;
  }
  assert_int_equal(got->device, dev);
  assert_int_equal(got->kernels, kernels);
  assert_int_equal(got->copies, copies);
  assert_int_equal(got->memsets, memsets);
  if (ws == UINT64_MAX) {
    assert_int_equal(got->window.start, 0);
    assert_int_equal(got->window.end, 0);
    return;
  }
  assert_int_equal(got->window.start, base + ws);
  assert_int_equal(got->window.end, base + we);
  uint64_t k = 0, cd[3] = {0}, call = 0, hid = 0, tog = 0, busy = 0;
  for (int c = 0; c < GRID; c++) {
    int anyc = C[0][c] || C[1][c] || C[2][c];
    k += K[c];
    for (int d = 0; d < 3; d++) cd[d] += C[d][c];
    call += anyc;
    hid += anyc && K[c];
    tog += C[0][c] && C[1][c];
    busy += anyc || K[c] || M[c];
  }
  assert_int_equal(got->kernel_busy_ns, k);
  for (int d = 0; d < 3; d++) assert_int_equal(got->copy_busy_ns[d], cd[d]);
  assert_int_equal(got->copy_busy_all_ns, call);
  assert_int_equal(got->copy_hidden_ns, hid);
  assert_int_equal(got->copy_exposed_ns, call - hid);
  assert_int_equal(got->kernel_hidden_ns, hid);
  assert_int_equal(got->h2d_d2h_together_ns, tog);
  assert_int_equal(got->idle_ns, (we - ws) - busy);
  assert_int_equal(got->gap_threshold_ns, thr);
  /* gaps: maximal idle runs of the window, >= thr */
  plr_span g[GRID];
  size_t ng = 0;
  uint64_t gt = 0;
  for (uint64_t c = ws; c < we;) {
    int idle = !(K[c] || M[c] || C[0][c] || C[1][c] || C[2][c]);
    if (!idle) {
      c++;
      continue;
    }
    uint64_t s = c;
    while (c < we && !(K[c] || M[c] || C[0][c] || C[1][c] || C[2][c])) c++;
    if (c - s >= thr) {
      g[ng++] = (plr_span){s, c};
      gt += c - s;
    }
  }
  assert_int_equal(got->gaps_total, ng);
  assert_int_equal(got->gaps_ns, gt);
  size_t want = ng < PLR_MAX_GAPS ? ng : PLR_MAX_GAPS;
  assert_int_equal(got->ngaps, want);
  for (size_t i = 0; i < want; i++) {
    size_t best = SIZE_MAX;
    for (size_t j = 0; j < ng; j++)
      if (g[j].end && (best == SIZE_MAX || g[j].end - g[j].start > g[best].end - g[best].start))
        best = j;
    assert_int_equal(got->gaps[i].start, base + g[best].start);
    assert_int_equal(got->gaps[i].end, base + g[best].end);
    g[best].end = 0;
  }
  /* bandwidth rows: one per (copy kind, src, dst, bucket) */
  size_t rows = 0;
  for (size_t i = 0; i < n; i++) {
    if (r[i].device != dev || r[i].bad ||
        (r[i].kind != PAGELOCK_GPU_MEMCPY && r[i].kind != PAGELOCK_GPU_MEMCPY_P2P))
      continue;
    int first = 1;
    for (size_t j = 0; j < i && first; j++)
      if (r[j].device == dev && !r[j].bad &&
          (r[j].kind == PAGELOCK_GPU_MEMCPY || r[j].kind == PAGELOCK_GPU_MEMCPY_P2P) &&
          r[j].copy_kind == r[i].copy_kind && r[j].src == r[i].src && r[j].dst == r[i].dst &&
          bf_bucket(r[j].bytes) == bf_bucket(r[i].bytes))
        first = 0;
    if (!first) continue;
    rows++;
    uint64_t cnt = 0, bytes = 0, ns = 0;
    double v[64], v2[64];
    size_t nv = 0;
    for (size_t j = 0; j < n; j++) {
      if (r[j].device != dev || r[j].bad ||
          (r[j].kind != PAGELOCK_GPU_MEMCPY && r[j].kind != PAGELOCK_GPU_MEMCPY_P2P) ||
          r[j].copy_kind != r[i].copy_kind || r[j].src != r[i].src || r[j].dst != r[i].dst ||
          bf_bucket(r[j].bytes) != bf_bucket(r[i].bytes))
        continue;
      cnt++;
      bytes += r[j].bytes;
      ns += r[j].e - r[j].s;
      if (r[j].e > r[j].s) v[nv++] = (double)r[j].bytes / (double)(r[j].e - r[j].s);
    }
    const plr_bw_row *row = NULL;
    for (size_t k2 = 0; k2 < got->nbw; k2++)
      if (got->bw[k2].copy_kind == r[i].copy_kind && got->bw[k2].src_kind == r[i].src &&
          got->bw[k2].dst_kind == r[i].dst && got->bw[k2].bucket == bf_bucket(r[i].bytes))
        row = &got->bw[k2];
    assert_non_null(row);
    assert_int_equal(row->count, cnt);
    assert_int_equal(row->bytes, bytes);
    assert_int_equal(row->gpu_ns, ns);
    memcpy(v2, v, nv * sizeof *v);
    assert_true(row->median_gbps == bf_median(v, nv));
    assert_true(row->p10_gbps == bf_p10(v2, nv));
  }
  assert_int_equal(got->nbw, rows);
  for (size_t k2 = 1; k2 < got->nbw; k2++) {
    const plr_bw_row *x = &got->bw[k2 - 1], *y = &got->bw[k2];
    uint32_t kx = (uint32_t)x->copy_kind << 24 | (uint32_t)x->src_kind << 16 |
                  (uint32_t)x->dst_kind << 8 | x->bucket;
    uint32_t ky = (uint32_t)y->copy_kind << 24 | (uint32_t)y->src_kind << 16 |
                  (uint32_t)y->dst_kind << 8 | y->bucket;
    assert_true(kx < ky);
  }
  /* pinned reference bandwidth: pinned host side, >= 1 MiB */
  for (unsigned d = 0; d < 2; d++) {
    double v[64];
    size_t nv = 0;
    for (size_t i = 0; i < n; i++) {
      const bf_rec *x = &r[i];
      if (x->device != dev || x->bad || x->e <= x->s || x->bytes < MIB ||
          (x->kind != PAGELOCK_GPU_MEMCPY && x->kind != PAGELOCK_GPU_MEMCPY_P2P))
        continue;
      int ok = d == 0 ? x->copy_kind == PAGELOCK_GPU_COPY_HTOD && x->src == PAGELOCK_GPU_MEM_PINNED
                      : x->copy_kind == PAGELOCK_GPU_COPY_DTOH && x->dst == PAGELOCK_GPU_MEM_PINNED;
      if (ok) v[nv++] = (double)x->bytes / (double)(x->e - x->s);
    }
    assert_true(got->pinned_gbps[d] == bf_median(v, nv));
  }
}

static void test_device_report_brute_force(void **state) {
  (void)state;
  rnd_state = 0x9e3779b9u;
  static const uint8_t kinds[] = {PAGELOCK_GPU_KERNEL, PAGELOCK_GPU_KERNEL, PAGELOCK_GPU_MEMCPY,
                                  PAGELOCK_GPU_MEMCPY, PAGELOCK_GPU_MEMCPY, PAGELOCK_GPU_MEMCPY_P2P,
                                  PAGELOCK_GPU_MEMSET, PAGELOCK_GPU_SYNC};
  static const uint8_t ckinds[] = {PAGELOCK_GPU_COPY_HTOD, PAGELOCK_GPU_COPY_DTOH,
                                   PAGELOCK_GPU_COPY_DTOD, PAGELOCK_GPU_COPY_HTOA,
                                   PAGELOCK_GPU_COPY_ATOH, PAGELOCK_GPU_COPY_PTOP};
  static const uint8_t mems[] = {PAGELOCK_GPU_MEM_PAGEABLE, PAGELOCK_GPU_MEM_PINNED,
                                 PAGELOCK_GPU_MEM_DEVICE};
  static const uint64_t sizes[] = {4096, 100000, MIB, 3 * MIB, 20 * MIB, 100 * MIB, 300 * MIB};
  for (int iter = 0; iter < 3000; iter++) {
    bf_rec r[40];
    size_t n = rnd_below(40);
    int two = iter % 3 == 0;
    for (size_t i = 0; i < n; i++) {
      bf_rec *x = &r[i];
      memset(x, 0, sizeof *x);
      x->kind = kinds[rnd_below(sizeof kinds)];
      x->copy_kind = ckinds[rnd_below(sizeof ckinds)];
      if (x->kind == PAGELOCK_GPU_MEMCPY_P2P) x->copy_kind = PAGELOCK_GPU_COPY_PTOP;
      x->src = mems[rnd_below(3)];
      x->dst = mems[rnd_below(3)];
      x->device = two ? rnd_below(2) : 0;
      x->stream = 1 + rnd_below(3);
      x->flags = rnd_below(2) ? PAGELOCK_GPU_ASYNC : 0;
      x->bytes = sizes[rnd_below(sizeof sizes / sizeof sizes[0])];
      uint32_t how = rnd_below(8);
      if (i && how == 0) { /* duplicate interval */
        x->s = r[i - 1].s;
        x->e = r[i - 1].e;
      } else if (i && how == 1) { /* touching */
        x->s = r[i - 1].e;
        x->e = x->s + rnd_below(12);
      } else if (how == 2) { /* empty */
        x->s = x->e = rnd_below(GRID - 1);
      } else {
        x->s = rnd_below(GRID - 1);
        x->e = x->s + rnd_below(30);
      }
      if (x->e > GRID - 1) x->e = GRID - 1;
      if (x->s > x->e) x->s = x->e;
      x->bad = rnd_below(20) == 0;
    }
    /* Monotonic = cells + base; CUPTI's clock is off by a random skew,
     * told by a CLOCK record (or no record, no skew). */
    const uint64_t base = 5000000000ull;
    int64_t skew = 0;
    int clock = iter % 4;
    if (clock == 1) skew = 1000000000;
    if (clock == 2) skew = -1000000000;
    if (clock == 3) skew = 7;
    uint64_t thr = 1 + rnd_below(6);
    tb b = {0};
    tb_header(&b, 1, 0);
    tb_gpu_status(&b, PAGELOCK_GPU_TIMING_ON, 0, 0, "");
    tb_device(&b, 0, 2, 10, "dev0");
    if (two) tb_device(&b, 1, 1, 10, "dev1");
    if (clock) tb_clock(&b, 3000000000ull, (uint64_t)(3000000000ll + skew));
    /* in no particular order */
    size_t order[40];
    for (size_t i = 0; i < n; i++) order[i] = i;
    for (size_t i = n; i > 1; i--) {
      size_t j = rnd_below((uint32_t)i);
      size_t t = order[i - 1];
      order[i - 1] = order[j];
      order[j] = t;
    }
    for (size_t k = 0; k < n; k++) {
      const bf_rec *x = &r[order[k]];
      tb_gpu_args g = {0};
      g.kind = x->kind;
      g.copy_kind = x->copy_kind;
      g.src_kind = x->src;
      g.dst_kind = x->dst;
      g.device = x->device;
      g.stream = x->stream;
      g.flags = x->flags;
      g.bytes = x->kind == PAGELOCK_GPU_KERNEL ? 0 : x->bytes;
      g.start_ns = (uint64_t)((int64_t)(base + x->s) - skew);
      g.end_ns = (uint64_t)((int64_t)(base + x->e) - skew);
      if (x->bad) {
        if (rnd_below(2))
          g.start_ns = 0;
        else
          g.end_ns = g.start_ns - 1 - rnd_below(5);
      }
      tb_gpu(&b, &g);
    }
    tb_end(&b, base + GRID);
    plr_trace t;
    assert_int_equal(load(&t, &b), 0);
    plr_gpu_report rep;
    assert_int_equal(plr_gpu_analyze(&t, thr, &rep), 0);
    assert_int_equal(rep.ndev, two ? 2 : 1);
    uint64_t bad = 0, syncs = 0;
    for (size_t i = 0; i < n; i++) {
      bad += r[i].bad;
      syncs += !r[i].bad && r[i].kind == PAGELOCK_GPU_SYNC;
    }
    assert_int_equal(rep.records, n);
    assert_int_equal(rep.bad_times, bad);
    assert_int_equal(rep.syncs, syncs);
    uint64_t sum_busy = 0, sum_hid = 0;
    for (size_t d = 0; d < rep.ndev; d++) {
      bf_device(r, n, (uint32_t)d, thr, base, &rep.dev[d]);
      sum_busy += rep.dev[d].copy_busy_all_ns;
      sum_hid += rep.dev[d].copy_hidden_ns;
    }
    assert_int_equal(rep.total_copy_busy_ns, sum_busy);
    assert_int_equal(rep.total_copy_hidden_ns, sum_hid);
    plr_gpu_report_free(&rep);
    plr_trace_free(&t);
    tb_free(&b);
  }
}

/* ---- the reader ---------------------------------------------------------- */

/* Every v2 record type decodes; malformed ones are skipped and counted;
 * enums out of range read as unknown. */
static void test_reader_v2_records(void **state) {
  (void)state;
  tb b = {0};
  tb_header(&b, 1, 0);
  tb_gpu_status(&b, 99, 5, 2, "strange"); /* status clamps to error */
  tb_device(&b, 3, 2, 132, "NVIDIA H200");
  tb_name(&b, 7, "_Z6kernelv");
  tb_link(&b, 11, 22);
  tb_clock(&b, 100, 200);
  tb_gpu_args g = {0};
  g.kind = PAGELOCK_GPU_MEMCPY;
  g.copy_kind = 99; /* absurd: unknown */
  g.src_kind = 200; /* absurd: unknown */
  g.dst_kind = PAGELOCK_GPU_MEM_DEVICE;
  g.start_ns = 1000;
  g.end_ns = 2000;
  g.bytes = 4096;
  g.device = 3;
  tb_gpu(&b, &g);
  /* malformed: short GPU, NAME without NUL, NAME id 0, LINK of corr 0,
   * short CLOCK, DEVICE and GPU_STATUS without NUL */
  unsigned char junk[128];
  memset(junk, 'x', sizeof junk);
  tb_raw(&b, PAGELOCK_REC_GPU, 56, junk, 48);
  tb_raw(&b, PAGELOCK_REC_NAME, 24, junk, 16);
  pagelock_rec_name nm;
  memset(&nm, 0, sizeof nm);
  tb_rec(&b, PAGELOCK_REC_NAME, &nm, sizeof nm, "zero", NULL);
  pagelock_rec_link lk;
  memset(&lk, 0, sizeof lk);
  lk.copy_seq = 5;
  tb_rec(&b, PAGELOCK_REC_LINK, &lk, sizeof lk, NULL, NULL);
  tb_raw(&b, PAGELOCK_REC_LINK, 16, junk, 8);
  tb_raw(&b, PAGELOCK_REC_CLOCK, 16, junk, 8);
  tb_raw(&b, PAGELOCK_REC_DEVICE, 40, junk, 32);
  tb_raw(&b, PAGELOCK_REC_GPU_STATUS, 48, junk, 40);
  tb_end(&b, 5000);

  FILE *f = tmpfile();
  fwrite(b.p, 1, b.len, f);
  rewind(f);
  plr_reader r;
  assert_int_equal(plr_open_stream(&r, f), PLR_OPEN_OK);
  plr_record rec;
  int seen[16] = {0};
  while (plr_next(&r, &rec)) {
    seen[rec.type]++;
    switch (rec.type) {
      case PAGELOCK_REC_GPU_STATUS:
        assert_int_equal(rec.u.gpu_status->status, PAGELOCK_GPU_TIMING_ERROR);
        assert_int_equal(rec.u.gpu_status->records, 5);
        assert_string_equal(rec.str1, "strange");
        break;
      case PAGELOCK_REC_DEVICE:
        assert_int_equal(rec.u.device->device, 3);
        assert_int_equal(rec.u.device->copy_engines, 2);
        assert_string_equal(rec.str1, "NVIDIA H200");
        break;
      case PAGELOCK_REC_NAME:
        assert_int_equal(rec.u.name->id, 7);
        assert_string_equal(rec.str1, "_Z6kernelv");
        break;
      case PAGELOCK_REC_LINK:
        assert_int_equal(rec.u.link->correlation, 11);
        assert_int_equal(rec.u.link->copy_seq, 22);
        break;
      case PAGELOCK_REC_CLOCK:
        assert_int_equal(rec.u.clock->cupti_ns, 100);
        assert_int_equal(rec.u.clock->mono_ns, 200);
        break;
      case PAGELOCK_REC_GPU:
        assert_int_equal(rec.u.gpu->copy_kind, PAGELOCK_GPU_COPY_UNKNOWN);
        assert_int_equal(rec.u.gpu->src_kind, PAGELOCK_GPU_MEM_UNKNOWN);
        assert_int_equal(rec.u.gpu->dst_kind, PAGELOCK_GPU_MEM_DEVICE);
        break;
    }
  }
  assert_int_equal(r.stop, PLR_STOP_END);
  assert_int_equal(r.malformed, 8);
  for (int ty = PAGELOCK_REC_GPU; ty <= PAGELOCK_REC_GPU_STATUS; ty++)
    assert_int_equal(seen[ty], 1);
  plr_close(&r);

  /* The model: clock applied, the unknown copy kind is "other". */
  plr_trace t;
  assert_int_equal(load(&t, &b), 0);
  assert_int_equal(t.malformed_records, 8);
  assert_int_equal(t.gpu.links, 1);
  assert_string_equal(plr_trace_kernel_name(&t, 7), "_Z6kernelv");
  assert_null(plr_trace_kernel_name(&t, 8));
  plr_gpu_report rep;
  assert_int_equal(plr_gpu_analyze(&t, 0, &rep), 0);
  assert_int_equal(rep.status, PAGELOCK_GPU_TIMING_ERROR);
  assert_string_equal(rep.reason, "strange");
  assert_int_equal(rep.dropped, 2);
  assert_int_equal(rep.ndev, 1);
  assert_int_equal(rep.dev[0].device, 3);
  assert_string_equal(rep.dev[0].name, "NVIDIA H200");
  assert_int_equal(rep.dev[0].window.start, 1100);
  assert_int_equal(rep.dev[0].window.end, 2100);
  assert_int_equal(rep.dev[0].copy_busy_ns[PLR_CDIR_OTHER], 1000);
  assert_int_equal(rep.dev[0].nbw, 1);
  assert_int_equal(rep.dev[0].bw[0].copy_kind, PAGELOCK_GPU_COPY_UNKNOWN);
  assert_int_equal(rep.nverdicts, 1);
  assert_int_equal(rep.verdicts[0].kind, PLR_VERDICT_NO_GPU_TIMING);
  /* it has GPU records: "partial", not "unavailable" */
  assert_string_equal(rep.verdicts[0].text, "GPU timing partial: strange");
  plr_gpu_report_free(&rep);
  plr_trace_free(&t);
  tb_free(&b);
}

/* A GPU record of an unknown kind is kept out of every measure. */
static void test_unknown_gpu_kind(void **state) {
  (void)state;
  tb b = {0};
  tb_header(&b, 1, 0);
  tb_gpu_args g = {0};
  g.kind = 77;
  g.start_ns = 10;
  g.end_ns = 20;
  tb_gpu(&b, &g);
  tb_end(&b, 5);
  plr_trace t;
  assert_int_equal(load(&t, &b), 0);
  assert_int_equal(t.gpu.records, 1);
  assert_int_equal(t.gpu.unknown_kind, 1);
  assert_int_equal(t.gpu.ndev, 0);
  plr_trace_free(&t);
  tb_free(&b);
}

/* Version-1 traces: 96-byte COPY records read with gpu_correlation 0 (even
 * right after a longer record left other bytes in the reader's buffer). */
static void test_v1_copies_zero_filled(void **state) {
  (void)state;
  tb b = {0};
  tb_header_v(&b, 1, 64, 1, 0);
  tb_copy_args c = {0};
  c.start_ns = 100;
  c.bytes = 10;
  c.host_ns = 5;
  c.dir = PAGELOCK_DIR_H2D;
  c.host_mem = PAGELOCK_MEM_PAGEABLE;
  c.gpu_correlation = 77; /* a v2-sized record first */
  tb_copy(&b, &c);
  c.v1 = 1;
  c.gpu_correlation = 0;
  tb_copy(&b, &c);
  tb_raw(&b, PAGELOCK_REC_COPY, 88, (unsigned char[80]){0}, 80); /* short */
  tb_end(&b, 5);
  assert_int_equal(((pagelock_rec_hdr *)(b.p + b.offsets[1]))->size, 96);
  FILE *f = tmpfile();
  fwrite(b.p, 1, b.len, f);
  rewind(f);
  plr_reader r;
  assert_int_equal(plr_open_stream(&r, f), PLR_OPEN_OK);
  plr_record rec;
  int n = 0;
  while (plr_next(&r, &rec)) {
    if (rec.type != PAGELOCK_REC_COPY) continue;
    assert_int_equal(rec.u.copy->gpu_correlation, n == 0 ? 77 : 0);
    assert_int_equal(rec.u.copy->why, 0);
    assert_int_equal(rec.u.copy->bytes, 10);
    n++;
  }
  assert_int_equal(n, 2);
  assert_int_equal(r.malformed, 1);
  plr_close(&r);

  plr_process p;
  memset(&p, 0, sizeof p);
  assert_int_equal(load(&p.t, &b), 0);
  assert_int_equal(p.t.tot.all.count, 2);
  assert_int_equal(plr_process_analyze(&p, 0), 0);
  assert_int_equal(p.gpu.status, PAGELOCK_GPU_TIMING_ERROR);
  assert_string_equal(p.gpu.reason, "no GPU_STATUS record");
  char *s = report(&p, 1, 0);
  assert_contains(s,
                  "GPU timing unavailable: no GPU_STATUS record\n"
                  "  fix: this trace was written by an older pagelock "
                  "(trace format 1)");
  /* No GPU columns without GPU timing. */
  assert_contains(s, "  count  bytes  host blocked  GB/s  dir  call site\n");
  free(s);
  s = report(&p, 1, 1);
  assert_contains(s, "\"trace_version\": 1");
  assert_contains(s, "\"status\": \"error\", \"reason\": \"no GPU_STATUS record\"");
  free(s);
  plr_process_free(&p);
  tb_free(&b);
}

static void test_clock_conversion(void **state) {
  (void)state;
  plr_clock c = {0};
  assert_int_equal(plr_clock_to_mono(&c, 123), 123);
  pagelock_rec_clock r = {{0, 0}, 1000, 5000};
  plr_clock_update(&c, &r);
  assert_int_equal(plr_clock_to_mono(&c, 1500), 5500);
  r.cupti_ns = 5000;
  r.mono_ns = 1000;
  plr_clock_update(&c, &r);
  assert_int_equal(plr_clock_to_mono(&c, 6000), 2000);
  assert_int_equal(plr_clock_to_mono(&c, 10), 0); /* saturates */
  r.cupti_ns = 0;
  r.mono_ns = UINT64_MAX - 5;
  plr_clock_update(&c, &r);
  assert_int_equal(plr_clock_to_mono(&c, 100), UINT64_MAX);
}

/* ---- the join -------------------------------------------------------------- */

/* A COPY of the join tests; stack 1 is its call site, stack 2 its buffer. */
static void jcopy(tb *b, uint64_t seq, uint32_t corr, uint32_t flags, uint8_t mem, uint64_t bytes,
                  uint64_t host_ns) {
  tb_copy_args c = {0};
  c.start_ns = 1000000000ull + seq * MS;
  c.host_ns = host_ns;
  c.bytes = bytes;
  c.dir = PAGELOCK_DIR_H2D;
  c.host_mem = mem;
  c.flags = flags;
  c.seq = seq;
  c.gpu_correlation = corr;
  c.callsite = 0x1000;
  if (mem == PAGELOCK_MEM_PAGEABLE) {
    c.stack_id = 1;
    c.alloc_stack_id = 2;
  }
  tb_copy(b, &c);
}

static void jop(tb *b, uint32_t corr, uint8_t gmem, uint64_t bytes, uint64_t start, uint64_t dur) {
  tb_gpu_copy(b, 0, 7, 1, gmem, bytes, start, start + dur, corr, 1);
}

static void jhead(tb *b) {
  tb_header(b, 1, 0);
  tb_process(b, "/bin/app", "h", PAGELOCK_MODE_OBSERVE, -1);
  tb_gpu_status(b, PAGELOCK_GPU_TIMING_ON, 0, 0, "");
  uint64_t s1[] = {0x1000, 0x555555556000ull}, s2[] = {0x555555557000ull};
  tb_stack(b, 1, s1, 2);
  tb_stack(b, 2, s2, 1);
}

/* The made-sync advice speaks the framework that allocated the buffer:
 * decided from the allocation site's module and symbol (stack 2's frame,
 * 0x555555557000), in PyTorch's, CuPy's and Numba's own words, and says
 * what --mode=auto does with that kind of memory. */
static void framework_advice(const char *module, const char *symbol, const char *want,
                             const char *auto_says) {
  const uint32_t A = PAGELOCK_COPY_ASYNC;
  tb b;
  memset(&b, 0, sizeof b);
  jhead(&b);
  tb_module(&b, 0x555555550000ull, 0x555555550000ull, 0x555555560000ull, module);
  tb_symbol(&b, 0x555555557000ull, 0x555555556f00ull, symbol);
  jcopy(&b, 1, 101, A, PAGELOCK_MEM_PAGEABLE, 2 * MIB, 2000000);
  jop(&b, 101, PAGELOCK_GPU_MEM_PAGEABLE, 2 * MIB, 2000000000ull, MS);
  tb_end(&b, 3000000000ull);
  plr_process p;
  memset(&p, 0, sizeof p);
  assert_int_equal(load(&p.t, &b), 0);
  assert_int_equal(plr_process_analyze(&p, 0), 0);
  assert_int_equal(p.gpu.pageable[0].kind, PLR_VERDICT_MADE_SYNC);
  if (!strstr(p.gpu.pageable[0].advice, want) || !strstr(p.gpu.pageable[0].advice, auto_says)) {
    fprintf(stderr, "advice: %s\nwant: %s ... %s\n", p.gpu.pageable[0].advice, want, auto_says);
    fail();
  }
  plr_process_free(&p);
  tb_free(&b);
}

static void test_framework_advice(void **state) {
  (void)state;
  framework_advice("/venv/lib/python3.12/site-packages/torch/lib/libtorch_cpu.so",
                   "at::MapAllocator::MapAllocator(at::WithFd, int)",
                   "is a batch from DataLoader workers (shared memory): pass pin_memory=True to "
                   "the DataLoader",
                   "--mode=auto would stage its copies of 1 MiB or more through pinned chunks "
                   "(shared memory is never registered)");
  framework_advice("/venv/lib/python3.12/site-packages/torch/lib/libc10.so",
                   "c10::alloc_cpu(unsigned long)",
                   "call tensor.pin_memory() once if it lives long",
                   "--mode=auto would register the buffer once it is copied often enough");
  framework_advice("/venv/lib/python3.12/site-packages/cupy/_core/core.cpython-312.so",
                   "__pyx_pw_4cupy_5_core_4core_7ndarray_get", "with cupyx.empty_pinned",
                   "--mode=auto would register");
  framework_advice("/venv/lib/python3.12/site-packages/numba/np/arrayobj.so", "numba_alloc",
                   "with numba.cuda.pinned_array", "--mode=auto would register");
  framework_advice("/usr/bin/app", "make_buffer", "(cudaHostAlloc / cudaHostRegister)",
                   "--mode=auto would register");
}

/* Made synchronous exactly at half the GPU time, not below; sync entry
 * points count apart; pinned never. */
static void test_join_made_sync(void **state) {
  (void)state;
  const uint32_t A = PAGELOCK_COPY_ASYNC;
  const uint8_t PG = PAGELOCK_MEM_PAGEABLE, PN = PAGELOCK_MEM_PINNED;
  tb b = {0};
  jhead(&b);
  jcopy(&b, 1, 101, A, PG, MIB, 500000);  /* 0.5 of 1 ms: made sync */
  jcopy(&b, 2, 102, A, PG, MIB, 499999);  /* just under: not */
  jcopy(&b, 3, 103, A, PG, MIB, 2000000); /* made sync */
  jcopy(&b, 4, 104, 0, PG, MIB, 1000000); /* sync entry point */
  jcopy(&b, 5, 105, A, PN, MIB, 1000);    /* pinned */
  jcopy(&b, 6, 0, A, PG, MIB, 900000);    /* no GPU op: unjoined */
  /* GPU records later, reversed */
  for (uint32_t c = 105; c >= 101; c--)
    jop(&b, c, c == 105 ? PAGELOCK_GPU_MEM_PINNED : PAGELOCK_GPU_MEM_PAGEABLE, MIB,
        2000000000ull + c * MS, MS);
  jop(&b, 999, PAGELOCK_GPU_MEM_PINNED, 4096, 2000000000ull + 106 * MS, 1000); /* no call */
  tb_end(&b, 3000000000ull);
  plr_process p;
  memset(&p, 0, sizeof p);
  assert_int_equal(load(&p.t, &b), 0);
  assert_null(p.t.gpu.pending);
  assert_int_equal(plr_process_analyze(&p, 0), 0);
  const plr_call_join *j = &p.gpu.join;
  assert_int_equal(j->calls, 5);
  assert_int_equal(j->unjoined, 1);
  assert_int_equal(j->pageable, 4);
  assert_int_equal(j->pinned, 1);
  assert_int_equal(j->made_sync, 2);
  assert_int_equal(j->made_sync_host_ns, 2500000);
  assert_int_equal(j->pageable_sync, 1);
  assert_int_equal(j->pageable_sync_host_ns, 1000000);
  assert_int_equal(j->gpu_ns, 5 * MS);
  assert_int_equal(j->gpu_ops, 6);
  assert_int_equal(j->gpu_ops_unjoined, 1);
  assert_int_equal(j->mem_mismatch, 0);
  /* The site rows carry the GPU side. */
  assert_int_equal(p.calls.n, 1);
  assert_int_equal(p.calls.v[0].g.calls, 4);
  assert_int_equal(p.calls.v[0].g.made_sync, 2);
  assert_int_equal(p.calls.v[0].g.made_sync_host_ns, 2500000);
  assert_int_equal(p.calls.v[0].g.gpu_ns, 4 * MS);
  assert_int_equal(p.calls.v[0].g.device, 0);
  /* Pinned bandwidth: the only pinned copy is 1 MiB in 1 ms. */
  assert_true(p.gpu.pinned_gbps[PLR_CDIR_H2D] == (double)MIB / 1e6);
  /* would save = host 4.899999 ms - 5 MiB at 1.048576 B/ns (5 ms): 0 */
  assert_int_equal(p.calls.v[0].would_save_ns, 0);
  /* The verdicts count every pageable async copy by its host time, joined
   * or not (4 of them, 3.9 ms: pinned, their 4 MiB would take 4 ms, so no
   * saving is claimed), and the sync one apart. */
  assert_int_equal(p.gpu.npageable, 2);
  assert_int_equal(p.gpu.pageable[0].kind, PLR_VERDICT_MADE_SYNC);
  assert_string_equal(p.gpu.pageable[0].text,
                      "pageable copies made 4 async calls synchronous, "
                      "blocking the host 3.900 ms; pageable copies left the GPU "
                      "4.000 ms of copy time with no kernel running");
  assert_int_equal(p.gpu.pageable[1].kind, PLR_VERDICT_PAGEABLE_SYNC);
  assert_string_equal(p.gpu.pageable[1].text,
                      "1 synchronous copies from pageable memory blocked the host 1.000 ms at "
                      "1.05 GB/s");
  for (size_t i = 0; i < p.gpu.nverdicts; i++) {
    assert_int_not_equal(p.gpu.verdicts[i].kind, PLR_VERDICT_MADE_SYNC);
    assert_int_not_equal(p.gpu.verdicts[i].kind, PLR_VERDICT_PAGEABLE_SYNC);
  }
  assert_string_equal(p.gpu.pageable[0].advice,
                      "pin the buffer allocated at 0x555555557000 "
                      "(cudaHostAlloc / cudaHostRegister); --mode=auto would "
                      "register the buffer once it is copied often enough "
                      "(PAGELOCK_REGISTER_HOT) and copy it at pinned speed");
  plr_process_free(&p);
  tb_free(&b);
}

/* A copy through a shim registration or the staging pool can still join a
 * pageable GPU record (the registered allocation's partial first and last
 * pages go through the native call): it never counts as a pageable copy
 * the driver made synchronous, nor as a blocking pageable sync call. */
static void test_join_routes_not_pageable(void **state) {
  (void)state;
  const uint32_t A = PAGELOCK_COPY_ASYNC, R = PAGELOCK_COPY_REGISTERED, S = PAGELOCK_COPY_STAGED;
  const uint8_t PG = PAGELOCK_MEM_PAGEABLE;
  tb b = {0};
  jhead(&b);
  jcopy(&b, 1, 101, A | R, PG, MIB, 2000000); /* registered, async */
  jcopy(&b, 2, 102, R, PG, MIB, 2000000);     /* registered, sync */
  jcopy(&b, 3, 103, S, PG, MIB, 2000000);     /* staged, sync */
  jcopy(&b, 4, 104, A, PG, MIB, 2000000);     /* plain: made sync */
  for (uint32_t c = 101; c <= 104; c++)
    jop(&b, c, PAGELOCK_GPU_MEM_PAGEABLE, MIB, 2000000000ull + c * MS, MS);
  tb_end(&b, 3000000000ull);
  plr_process p;
  memset(&p, 0, sizeof p);
  assert_int_equal(load(&p.t, &b), 0);
  assert_int_equal(plr_process_analyze(&p, 0), 0);
  const plr_call_join *j = &p.gpu.join;
  assert_int_equal(j->calls, 4);
  assert_int_equal(j->pageable, 1);
  assert_int_equal(j->made_sync, 1);
  assert_int_equal(j->made_sync_host_ns, 2000000);
  assert_int_equal(j->pageable_sync, 0);
  plr_process_free(&p);
  tb_free(&b);
}

/* Under auto, a copy through a registration of its buffer is linked to
 * the shim's GPU copies as a staged one is to its chunks: each is counted
 * and named as the route it took (a run reported "201 staged through 4363
 * chunks" for 198 registered copies and 3 staged). */
static void test_registered_not_staged(void **state) {
  (void)state;
  const uint32_t A = PAGELOCK_COPY_ASYNC, R = PAGELOCK_COPY_REGISTERED, S = PAGELOCK_COPY_STAGED;
  const uint8_t PG = PAGELOCK_MEM_PAGEABLE;
  tb b = {0};
  jhead(&b);
  tb_link(&b, 501, 1);
  tb_link(&b, 502, 1);
  jcopy(&b, 1, 0, A | R, PG, 2 * MIB, MS); /* registered: two pieces */
  tb_link(&b, 601, 2);
  jcopy(&b, 2, 0, A | S, PG, MIB, MS); /* staged: one chunk */
  jop(&b, 501, PAGELOCK_GPU_MEM_PINNED, MIB, 2000000000ull, MS / 4);
  jop(&b, 502, PAGELOCK_GPU_MEM_PINNED, MIB, 2001000000ull, MS / 4);
  jop(&b, 601, PAGELOCK_GPU_MEM_PINNED, MIB, 2002000000ull, MS / 4);
  tb_end(&b, 3000000000ull);
  plr_process p;
  memset(&p, 0, sizeof p);
  assert_int_equal(load(&p.t, &b), 0);
  assert_int_equal(plr_process_analyze(&p, 0), 0);
  const plr_call_join *j = &p.gpu.join;
  assert_int_equal(j->calls, 2);
  assert_int_equal(j->linked, 1);
  assert_int_equal(j->chunks, 1);
  assert_int_equal(j->registered, 1);
  assert_int_equal(j->reg_ops, 2);
  assert_int_equal(j->reg_bytes, 2 * MIB);
  assert_int_equal(p.gpu.ndev, 1);
  const plr_device_report *d = &p.gpu.dev[0];
  assert_int_equal(d->staged_chunks, 1);
  int staged = 0, reg = 0;
  for (size_t i = 0; i < d->nbw; i++) {
    staged += d->bw[i].staged ? (int)d->bw[i].count : 0;
    reg += d->bw[i].registered ? (int)d->bw[i].count : 0;
    assert_false(d->bw[i].staged && d->bw[i].registered);
  }
  assert_int_equal(staged, 1);
  assert_int_equal(reg, 2);
  assert_int_equal(p.calls.n, 1);
  assert_int_equal(p.calls.v[0].g.chunks, 1);
  assert_int_equal(p.calls.v[0].g.reg_ops, 2);
  char *text = report(&p, 1, 0);
  assert_contains(text,
                  "GPU join: 2 of 2 copy calls matched their GPU copies (1 staged through 1 "
                  "chunks, 1 registered in 2 copies of pagelock's)");
  assert_contains(text, "  HtoD  registered  device  1M-16M      2");
  assert_contains(text, "  HtoD  staged      device  1M-16M      1");
  assert_contains(text, "registered: 2 copies of pagelock's (2.0 MiB, 0.500 ms of GPU time)");
  free(text);
  plr_process_free(&p);
  tb_free(&b);
}

/* Tracing paused once and never resumed: no "0 windows", the sentence
 * says how much of the run was traced before the pause. */
static void test_sampling_no_window(void **state) {
  (void)state;
  tb b = {0};
  jhead(&b);
  jcopy(&b, 1, 101, PAGELOCK_COPY_ASYNC, PAGELOCK_MEM_PAGEABLE, MIB, MS);
  jop(&b, 101, PAGELOCK_GPU_MEM_PAGEABLE, MIB, 1001000000ull, MS);
  tb_gpu_sample(&b, 1090000000ull, 0, 50000);
  jcopy(&b, 90, 0, PAGELOCK_COPY_ASYNC, PAGELOCK_MEM_PAGEABLE, MIB, MS);
  tb_end(&b, 1100000000ull);
  plr_process p;
  memset(&p, 0, sizeof p);
  assert_int_equal(load(&p.t, &b), 0);
  assert_int_equal(plr_process_analyze(&p, 0), 0);
  assert_true(p.gpu.sampled);
  assert_int_equal(p.gpu.windows, 0);
  char line[512];
  plr_gpu_sampling_sentence(&p.gpu, line, sizeof line);
  assert_null(strstr(line, "0 windows"));
  assert_contains(line, "GPU timing paused for good after the first ");
  /* The headline counts both copies, by their host time. */
  assert_int_equal(p.gpu.npageable, 1);
  assert_contains(p.gpu.pageable[0].text,
                  "made 2 async calls synchronous, blocking the host 2.000");
  plr_process_free(&p);
  tb_free(&b);
}

/* The fix names every allocation site that matters (a tenth of the
 * pageable host time or more), not only the worst, and counts the rest. */
static void test_fix_names_every_site(void **state) {
  (void)state;
  tb b = {0};
  tb_header(&b, 1, 0);
  tb_process(&b, "/bin/app", "h", PAGELOCK_MODE_OBSERVE, -1);
  tb_gpu_status(&b, PAGELOCK_GPU_TIMING_DISABLED, 0, 0, "PAGELOCK_CUPTI=0 turned it off");
  uint64_t call[] = {0x1000}, a1[] = {0x2000}, a2[] = {0x3000}, a3[] = {0x4000};
  tb_stack(&b, 1, call, 1);
  tb_stack(&b, 2, a1, 1);
  tb_stack(&b, 3, a2, 1);
  tb_stack(&b, 4, a3, 1);
  tb_symbol(&b, 0x2000, 0x1f00, "load_images");
  tb_symbol(&b, 0x3000, 0x2f00, "load_labels");
  tb_symbol(&b, 0x4000, 0x3f00, "load_meta");
  uint32_t alloc[] = {2, 3, 4};
  uint64_t ns[] = {60 * MS, 35 * MS, 5 * MS};
  for (int i = 0; i < 3; i++) {
    tb_copy_args c = {0};
    c.start_ns = 1000000000ull + (uint64_t)i * 100 * MS;
    c.host_ns = ns[i];
    c.bytes = 8 * MIB;
    c.dir = PAGELOCK_DIR_H2D;
    c.host_mem = PAGELOCK_MEM_PAGEABLE;
    c.flags = PAGELOCK_COPY_ASYNC;
    c.seq = (uint64_t)i + 1;
    c.callsite = 0x1000;
    c.stack_id = 1;
    c.alloc_stack_id = alloc[i];
    tb_copy(&b, &c);
  }
  tb_end(&b, 2000000000ull);
  plr_process p;
  memset(&p, 0, sizeof p);
  assert_int_equal(load(&p.t, &b), 0);
  assert_int_equal(plr_process_analyze(&p, 0), 0);
  assert_int_equal(p.gpu.npageable, 1);
  const char *adv = p.gpu.pageable[0].advice;
  assert_contains(adv, "pin the buffer allocated at load_images+0x100");
  assert_contains(adv, "; also the buffers allocated at load_labels+0x100 (?) (35.000 ms)");
  assert_contains(adv, "; and 1 more allocation sites (5.000 ms)");
  plr_process_free(&p);
  tb_free(&b);
}

/* Ops before their COPY (a buffer completed mid-call), a batch call (one
 * seq, one corr, several entries matched by bytes), LINKs of staged chunks
 * before and after the COPY and written twice. */
static void test_join_orders(void **state) {
  (void)state;
  const uint32_t A = PAGELOCK_COPY_ASYNC;
  const uint8_t PG = PAGELOCK_MEM_PAGEABLE;
  tb b = {0};
  jhead(&b);
  /* op first */
  jop(&b, 201, PAGELOCK_GPU_MEM_PAGEABLE, MIB, 2000000000ull, MS);
  jcopy(&b, 1, 201, A, PG, MIB, MS);
  /* batch: seq 2, corr 202, entries of 1 and 2 MiB; ops in reverse */
  jcopy(&b, 2, 202, A | PAGELOCK_COPY_BATCH, PG, MIB, MS);
  jcopy(&b, 2, 202, A | PAGELOCK_COPY_BATCH, PG, 2 * MIB, MS);
  jop(&b, 202, PAGELOCK_GPU_MEM_PAGEABLE, 2 * MIB, 2100000000ull, 2 * MS);
  jop(&b, 202, PAGELOCK_GPU_MEM_PAGEABLE, MIB, 2200000000ull, MS);
  /* staged call seq 3: chunk 301 linked before the COPY, 302 only after
   * (CUPTI's external correlation), 301 linked again; op 302 before its
   * LINK. */
  tb_link(&b, 301, 3);
  jcopy(&b, 3, 0, A | PAGELOCK_COPY_STAGED, PG, 2 * MIB, 3 * MS);
  jop(&b, 302, PAGELOCK_GPU_MEM_PINNED, MIB, 2300000000ull, MS / 4);
  tb_link(&b, 302, 3);
  jop(&b, 301, PAGELOCK_GPU_MEM_PINNED, MIB, 2400000000ull, MS / 4);
  tb_link(&b, 301, 3); /* duplicate */
  tb_link(&b, 302, 3); /* duplicate */
  /* a capturing stream's copy and a graph node never wait */
  jcopy(&b, 4, 401, A | PAGELOCK_COPY_CAPTURE, PG, MIB, 1000);
  jcopy(&b, 5, 0, PAGELOCK_COPY_GRAPH_NODE, PG, MIB, 0);
  tb_end(&b, 3000000000ull);
  plr_process p;
  memset(&p, 0, sizeof p);
  assert_int_equal(load(&p.t, &b), 0);
  assert_int_equal(plr_process_analyze(&p, 0), 0);
  const plr_call_join *j = &p.gpu.join;
  /* seq 1, the two batch entries, the staged call */
  assert_int_equal(j->calls, 4);
  assert_int_equal(j->linked, 1);
  assert_int_equal(j->made_sync, 3); /* seq 1 and both batch entries */
  assert_int_equal(j->made_sync_host_ns, 3 * MS);
  assert_int_equal(j->gpu_ns, MS + 3 * MS + MS / 2);
  assert_int_equal(j->gpu_ops, 5);
  assert_int_equal(j->gpu_ops_unjoined, 0);
  assert_int_equal(j->unjoined, 1);     /* the captured copy */
  assert_int_equal(j->mem_mismatch, 0); /* staged: pinned chunks by design */
  assert_int_equal(p.t.gpu.links, 4);
  plr_process_free(&p);
  tb_free(&b);
}

/* Without GPU_STATUS "on" a staged COPY does not wait, and a COPY whose op
 * never comes is unjoined at the end. */
static void test_join_leftovers(void **state) {
  (void)state;
  tb b = {0};
  tb_header(&b, 1, 0);
  jcopy(&b, 1, 0, PAGELOCK_COPY_ASYNC | PAGELOCK_COPY_STAGED, PAGELOCK_MEM_PAGEABLE, MIB, MS);
  jcopy(&b, 2, 55, PAGELOCK_COPY_ASYNC, PAGELOCK_MEM_PAGEABLE, MIB, MS);
  tb_link(&b, 66, 7); /* a link whose op never comes */
  tb_end(&b, 5);
  plr_trace t;
  assert_int_equal(load(&t, &b), 0);
  assert_int_equal(t.gpu.join.calls, 0);
  assert_int_equal(t.gpu.join.unjoined, 2);
  plr_trace_free(&t);
  tb_free(&b);
}

/* ---- verdicts and output --------------------------------------------------- */

/* Pinned async copies on the kernels' stream, serialised with them; one
 * copy engine with both directions; long idle gaps. */
static void test_verdicts(void **state) {
  (void)state;
  tb b = {0};
  tb_header(&b, 1, 0);
  tb_process(&b, "/bin/app", "h", PAGELOCK_MODE_OBSERVE, 2);
  tb_gpu_status(&b, PAGELOCK_GPU_TIMING_ON, 0, 0, "");
  tb_device(&b, 0, 1, 40, "Tesla T4");
  uint64_t t0 = 1000000000ull; /* the trace's start: gaps print from it */
  for (uint64_t i = 0; i < 4; i++) {
    uint64_t t = t0 + i * 10 * MS;
    tb_gpu_copy(&b, 0, 7, 1, PAGELOCK_GPU_MEM_PINNED, 4 * MIB, t, t + MS, 0, 1);
    tb_kernel(&b, 0, 7, t + MS, t + 2 * MS, 0);
    tb_gpu_copy(&b, 0, 7, 0, PAGELOCK_GPU_MEM_PINNED, 4 * MIB, t + 2 * MS, t + 3 * MS, 0, 1);
  }
  tb_end(&b, t0 + 50 * MS);
  plr_process p;
  memset(&p, 0, sizeof p);
  assert_int_equal(load(&p.t, &b), 0);
  assert_int_equal(plr_process_analyze(&p, 0), 0);
  const plr_gpu_report *g = &p.gpu;
  assert_int_equal(g->dev[0].same_stream_copies, 8);
  assert_int_equal(g->dev[0].same_stream_id, 7);
  assert_int_equal(g->dev[0].kernel_streams, 1);
  /* idle 4 x 7 ms - 7 of 34: idle 21 ms; exposed 8 ms; one engine: 4 ms */
  assert_int_equal(g->nverdicts, 3);
  assert_int_equal(g->verdicts[0].kind, PLR_VERDICT_IDLE);
  assert_int_equal(g->verdicts[0].ns, 21 * MS);
  assert_int_equal(g->verdicts[1].kind, PLR_VERDICT_SAME_STREAM);
  assert_int_equal(g->verdicts[1].ns, 8 * MS);
  assert_int_equal(g->verdicts[2].kind, PLR_VERDICT_ONE_ENGINE);
  assert_int_equal(g->verdicts[2].device, 0);
  assert_string_equal(g->verdicts[2].text,
                      "one copy engine: uploads and downloads serialise "
                      "(device 0 (Tesla T4): 4.000 ms of H2D and 4.000 ms of "
                      "D2H copies cannot run at the same time)");
  assert_contains(g->verdicts[1].text,
                  "pinned but not overlapped: copies and kernels share a "
                  "stream (device 0 (Tesla T4): 8 of 8 pinned async copies "
                  "ran on stream 7 with kernels; 0% of their time was hidden "
                  "under kernels, 8.000 ms exposed)");
  assert_contains(g->verdicts[1].advice, "cudaStreamNonBlocking");
  char *s = report(&p, 1, 0);
  assert_contains(s,
                  "==\nGPU timing: CUPTI, 12 records, 0 dropped\n"
                  "verdict: the GPU idled for long gaps");
  assert_contains(s,
                  "\nverdict: pinned but not overlapped: copies and "
                  "kernels share a stream");
  assert_contains(s,
                  "  fix: move copies to their own stream with "
                  "cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)");
  assert_contains(s,
                  "GPU devices (GPU time, ms):\n"
                  "  device  name      engines  window  kernels    H2D    "
                  "D2H  other  copies  hidden  exposed  H2D+D2H    idle  "
                  "gaps\n"
                  "       0  Tesla T4        1  33.000    4.000  4.000  "
                  "4.000  0.000   8.000      0%    8.000    0.000  21.000"
                  "     3\n");
  assert_contains(s,
                  "  device 0 idle gaps >= 1.000 ms (longest first): "
                  "7.000 ms at +3.000 ms, 7.000 ms at +13.000 ms, 7.000 ms "
                  "at +23.000 ms\n");
  assert_contains(s,
                  "       0  HtoD  pinned  device  1M-16M      4  "
                  "16.0 MiB   4.000         4.19      4.19\n");
  assert_null(strstr(s, "\033[")); /* not a terminal: no colour */
  free(s);
  /* Several processes: the per-rank table. */
  plr_process two[2];
  memcpy(&two[0], &p, sizeof p);
  memcpy(&two[1], &p, sizeof p);
  s = report(two, 2, 0);
  assert_contains(s,
                  "\nper rank:\n"
                  "  rank  host  pid  copies  pageable  host blocked  "
                  "exposed copy  hidden\n"
                  "     2  h       1       0         0      0.000 ms      "
                  "8.000 ms      0%\n");
  free(s);
  s = report(two, 2, 1);
  assert_contains(s,
                  "\"ranks\": [\n    {\"rank\": 2, \"host\": \"h\", "
                  "\"pid\": 1, \"copies\": 0, \"pageable\": 0, \"host_ns\": "
                  "0, \"exposed_copy_ns\": 8000000, \"hidden_pct\": 0.0}");
  assert_contains(s, "{\"kind\": \"one-engine\", \"ns\": 4000000, \"device\": 0");
  assert_contains(s, "\"h2d_d2h_together_ns\": 0, \"idle_ns\": 21000000");
  free(s);
  plr_process_free(&p);
  tb_free(&b);
}

/* Everything hidden: the good verdict, and nothing to fix. */
static void test_verdict_good(void **state) {
  (void)state;
  tb b = {0};
  tb_header(&b, 1, 0);
  tb_gpu_status(&b, PAGELOCK_GPU_TIMING_ON, 0, 0, "");
  tb_kernel(&b, 0, 7, 1000, 1000 + 10 * MS, 0);
  tb_gpu_copy(&b, 0, 9, 1, PAGELOCK_GPU_MEM_PINNED, MIB, 2000, 2000 + MS, 0, 1);
  tb_end(&b, 5);
  plr_trace t;
  assert_int_equal(load(&t, &b), 0);
  plr_gpu_report g;
  assert_int_equal(plr_gpu_analyze(&t, 0, &g), 0);
  assert_int_equal(g.nverdicts, 1);
  assert_int_equal(g.verdicts[0].kind, PLR_VERDICT_GOOD);
  assert_string_equal(g.verdicts[0].text,
                      "copies overlapped compute: 100% of copy time (1.000 of "
                      "1.000 ms) was hidden under kernels");
  assert_string_equal(g.verdicts[0].advice, "");
  assert_true(plr_gpu_hidden_pct(&g) == 100.0);
  plr_gpu_report_free(&g);
  plr_trace_free(&t);
  tb_free(&b);
}

/* GPU timing off: host timing is enough for the pageable-copy verdict and
 * its fix, which still come first; then the status line and its advice.
 * In JSON the verdict is not under "gpu". */
static void test_no_gpu_timing_first(void **state) {
  (void)state;
  tb b = {0};
  tb_header(&b, 1, 0);
  tb_process(&b, "/bin/app", "h", 0, -1);
  tb_gpu_status(&b, PAGELOCK_GPU_TIMING_DISABLED, 0, 0, "PAGELOCK_CUPTI=0 turned it off");
  jcopy(&b, 1, 0, PAGELOCK_COPY_ASYNC, PAGELOCK_MEM_PAGEABLE, MIB, MS);
  tb_end(&b, 5);
  plr_process p;
  memset(&p, 0, sizeof p);
  assert_int_equal(load(&p.t, &b), 0);
  assert_int_equal(plr_process_analyze(&p, 0), 0);
  char *text = report(&p, 1, 0);
  const char *want =
      "verdict: pageable copies made 1 async calls synchronous, blocking the host 1.000 ms\n"
      "  fix: pin the buffer copied at 0x1000 (cudaHostAlloc / cudaHostRegister)";
  size_t first_len = strcspn(text, "\n");
  assert_memory_equal(text + first_len + 1, want, strlen(want));
  /* Tracked (the copy names an allocation stack): registrable. */
  assert_contains(text, "register the buffer once it is copied often enough");
  assert_contains(text,
                  "\nGPU timing unavailable: PAGELOCK_CUPTI=0 turned it "
                  "off\n  fix: unset PAGELOCK_CUPTI");
  free(text);
  char *json = report(&p, 1, 1);
  assert_contains(json, "\"status\": \"disabled\"");
  assert_contains(json,
                  "\"pageable_verdicts\": [\n        {\"kind\": \"made-sync\", \"ns\": 1000000");
  assert_null(strstr(strstr(json, "\"gpu\": "), "made-sync"));
  assert_contains(json,
                  "{\"kind\": \"no-gpu-timing\", \"ns\": 0, \"device\": "
                  "null, \"text\": \"GPU timing unavailable: "
                  "PAGELOCK_CUPTI=0 turned it off\"");
  free(json);
  plr_process_free(&p);
  tb_free(&b);
}

/* Random corruption of a GPU-rich trace: never a crash (ASan/UBSan). */
static void test_random_corruption_gpu(void **state) {
  (void)state;
  tb ref = {0};
  jhead(&ref);
  tb_device(&ref, 0, 2, 10, "d");
  tb_clock(&ref, 10, 20);
  tb_name(&ref, 1, "k");
  for (uint32_t i = 1; i <= 20; i++) {
    jcopy(&ref, i, 100 + i, PAGELOCK_COPY_ASYNC | (i % 5 ? 0 : PAGELOCK_COPY_STAGED),
          i % 3 ? PAGELOCK_MEM_PAGEABLE : PAGELOCK_MEM_PINNED, MIB * i, MS);
    if (i % 5 == 0) tb_link(&ref, 900 + i, i);
  }
  for (uint32_t i = 20; i >= 1; i--) {
    jop(&ref, 100 + i, i % 3 ? PAGELOCK_GPU_MEM_PAGEABLE : PAGELOCK_GPU_MEM_PINNED, MIB * i,
        2000000000ull + i * MS, MS);
    tb_kernel(&ref, i % 2, 7, 2000000000ull + i * MS, 2000000000ull + i * MS + 500000, 1);
    if (i % 5 == 0) jop(&ref, 900 + i, PAGELOCK_GPU_MEM_PINNED, MIB, 2000000000ull, 1000);
  }
  tb_gpu_status(&ref, PAGELOCK_GPU_TIMING_ON, 40, 1, "");
  tb_end(&ref, 3000000000ull);
  rnd_state = 777;
  for (int iter = 0; iter < 2000; iter++) {
    tb b = {0};
    tb_put(&b, ref.p, ref.len);
    int flips = 1 + iter % 8;
    for (int k = 0; k < flips; k++) {
      size_t at = 64 + rnd_below((uint32_t)(b.len - 64));
      b.p[at] = (iter & 1) ? (unsigned char)rnd() : b.p[at] ^ (1u << rnd_below(8));
    }
    size_t len = iter % 3 == 0 ? rnd_below((uint32_t)b.len + 1) : b.len;
    b.len = len;
    plr_process p;
    memset(&p, 0, sizeof p);
    FILE *f = tmpfile();
    if (len) fwrite(b.p, 1, len, f);
    rewind(f);
    char msg[512];
    if (plr_trace_load_stream(&p.t, f, "x", msg, sizeof msg) == 0) {
      assert_int_equal(plr_process_analyze(&p, 0), 0);
      free(report(&p, 1, 0));
      free(report(&p, 1, 1));
      plr_process_free(&p);
    }
    tb_free(&b);
  }
  tb_free(&ref);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_spans_brute_force),
      cmocka_unit_test(test_lanes_brute_force),
      cmocka_unit_test(test_device_report_brute_force),
      cmocka_unit_test(test_reader_v2_records),
      cmocka_unit_test(test_unknown_gpu_kind),
      cmocka_unit_test(test_v1_copies_zero_filled),
      cmocka_unit_test(test_clock_conversion),
      cmocka_unit_test(test_join_made_sync),
      cmocka_unit_test(test_framework_advice),
      cmocka_unit_test(test_join_routes_not_pageable),
      cmocka_unit_test(test_join_orders),
      cmocka_unit_test(test_join_leftovers),
      cmocka_unit_test(test_verdicts),
      cmocka_unit_test(test_verdict_good),
      cmocka_unit_test(test_no_gpu_timing_first),
      cmocka_unit_test(test_registered_not_staged),
      cmocka_unit_test(test_sampling_no_window),
      cmocka_unit_test(test_fix_names_every_site),
      cmocka_unit_test(test_random_corruption_gpu),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
