/* report_chrome.c - the trace as Chrome trace-event JSON, the format that
 * Perfetto UI and chrome://tracing open:
 *
 *   {"traceEvents":[ {...}, ... ], "displayTimeUnit":"ns"}
 *
 * One pid per traced process, one tid (track) per GPU stream (CUPTI
 * streamId), per host thread that made copy calls, per lane of a host
 * thread's runs of repeated copies (COPY count above 1; see "Runs" below)
 * and per host thread that waited (CUPTI SYNCHRONIZATION / OVERHEAD
 * records), and one for the pauses of sampled GPU timing (GPU_SAMPLE).
 * Copy calls and GPU ops are complete events ("ph":"X"); flow arrows
 * ("ph":"s" at the call, "f" with "bp":"e" at the GPU op) join each call
 * to its GPU op(s).
 *
 * Events are written as the trace is re-read (walk.h).  Flows need to
 * know, at a call, which GPU ops exist for it and, at a GPU op, whether a
 * call claims it, and GPU records come later than the calls they join: a
 * first pass therefore keeps the correlation ids alone (4 to 8 bytes per
 * call and GPU op, sorted arrays), never the events.
 *
 * Runs.  A run's slice lasts the summed host time of its copies from its
 * first copy's start, so it can overlap another run of the same thread
 * (an upload run and a download run of one loop are open together) and
 * the single calls made meanwhile.  Viewers draw complete events of one
 * track right only when they are disjoint or properly nested, so runs
 * never go on the copy-calls track: each thread's runs are spread over
 * lanes, a track each.  Pass 1 keeps each run's thread and times (32
 * bytes a run), sorts them by start and assigns lanes greedily: the first
 * lane whose slices all ended by the run's start, else a new lane, up to
 * PLR_CT_RUN_LANES; past that the lane whose slices end earliest (the
 * least overlap; only a thread with that many runs open at once gets an
 * overlap).  Pass 2 reads each run's lane back by its order in the file,
 * since the shim writes a run when it closes, not in start order. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <uthash.h>

#include "escape.h"
#include "report.h"
#include "format.h"
#include "spans.h"
#include "units.h"

/* Track ids.  Host threads keep their kernel tid (below 2^22 on Linux);
 * GPU streams and CUPTI wait threads live in ranges above it so they can
 * never merge with a thread's track. */
#define PLR_CT_STREAM_BASE 0x40000000u
#define PLR_CT_WAIT_BASE 0x20000000u
/* The track of sampled GPU timing's pauses: one per process. */
#define PLR_CT_SAMPLE_TID 0x30000000u
/* Tracks of runs: RUN_BASE | thread << 3 | lane, so that viewers which
 * order tracks by tid show a thread's lanes together and in order. */
#define PLR_CT_RUN_BASE 0x10000000u
#define PLR_CT_RUN_LANES 8 /* per thread */
/* Linux tids are below 2^22; a corrupt one folds (lanes are assigned per
 * folded thread, so folding merges tracks but never overlaps slices). */
#define PLR_CT_RUN_THREAD_MASK 0x3fffffu
_Static_assert(PLR_CT_RUN_LANES <= 8, "a run track's tid has 3 bits of lane");

/* Kernel names of templated code run to kilobytes; the viewer shows one
 * line. */
#define PLR_CT_MAX_NAME 1024

/* ------------------------------------------------------------------ */
/* Pass 1: the correlation index that pairs calls with GPU ops.        */

typedef struct plr_ct_link {
  uint32_t corr;
  uint64_t seq;
} plr_ct_link;

/* A run of repeated copies as pass 1 saw it: its thread (as its tracks
 * fold it), its times and its place among the runs of the file. */
typedef struct plr_ct_run {
  uint64_t start, end, ord;
  uint32_t thread;
} plr_ct_run;

typedef struct plr_ct_vec {
  void *v;
  size_t n, cap, elem;
} plr_ct_vec;

/* Appends one element; returns -1 when out of memory. */
static int plr_ct_push(plr_ct_vec *a, const void *e) {
  if (a->n == a->cap) {
    size_t cap = a->cap ? a->cap * 2 : 256;
    void *v = realloc(a->v, cap * a->elem);
    if (!v) return -1;
    a->v = v;
    a->cap = cap;
  }
  memcpy((char *)a->v + a->n * a->elem, e, a->elem);
  a->n++;
  return 0;
}

typedef struct plr_ct_index {
  int ok;            /* 0: no flows for this trace (out of memory) */
  uint32_t *hc;      /* gpu_correlation of calls, sorted */
  uint32_t *hc_seen; /* per hc slot: occurrences met in pass 2 */
  size_t nhc;
  uint64_t *hs; /* correlation (sequence) of calls, sorted */
  uint32_t *hs_seen;
  size_t nhs;
  uint32_t *gc; /* correlation of GPU ops, sorted */
  uint32_t *gc_seen;
  size_t ngc;
  plr_ct_link *by_seq;  /* LINK records sorted by (seq, corr) */
  plr_ct_link *by_corr; /* the same sorted by (corr, seq) */
  size_t *corr_pick;    /* at the first by_corr index of each corr: the
                           index of plr_ct_link_for's answer, or SIZE_MAX */
  size_t nlinks;
  uint64_t flow_base; /* flow ids of this trace: flow_base + 1 + GPU slot */
  uint8_t *run_lane;  /* per run, in file order: its lane; NULL when out
                         of memory (every run then on lane 0) */
  size_t nruns;
  size_t runs_seen; /* runs met so far in pass 2 */
} plr_ct_index;

typedef struct plr_ct_pass1 {
  plr_ct_vec hc, hs, gc, links, runs;
  int oom;
} plr_ct_pass1;

/* 1 for GPU records that a copy call can queue: the ones flows end at. */
static int plr_ct_gpu_joinable(const pagelock_rec_gpu *g) {
  return g->correlation != 0 && g->kind != PAGELOCK_GPU_SYNC && g->kind != PAGELOCK_GPU_OVERHEAD;
}

/* Pass-1 callback: collects the correlation ids of calls, GPU ops and
 * LINKs; stops the walk when memory runs out (flows are then left out). */
static int plr_ct_pass1_fn(void *ctx, const plr_event *ev) {
  plr_ct_pass1 *p = ctx;
  int rc = 0;
  if (ev->kind == PLR_EV_CALL) {
    const pagelock_rec_copy *c = ev->copy;
    if (c->count > 1) {
      plr_ct_run r = {ev->start, ev->end, p->runs.n, c->tid & PLR_CT_RUN_THREAD_MASK};
      rc |= plr_ct_push(&p->runs, &r);
    }
    if (!(c->flags & PAGELOCK_COPY_GRAPH_NODE)) {
      if (c->gpu_correlation) rc |= plr_ct_push(&p->hc, &c->gpu_correlation);
      rc |= plr_ct_push(&p->hs, &c->correlation);
    }
  } else if (ev->kind == PLR_EV_GPU) {
    if (plr_ct_gpu_joinable(ev->gpu)) rc |= plr_ct_push(&p->gc, &ev->gpu->correlation);
  } else if (ev->kind == PLR_EV_LINK) {
    plr_ct_link l = {ev->link->correlation, ev->link->copy_seq};
    rc |= plr_ct_push(&p->links, &l);
  }
  if (rc) {
    p->oom = 1;
    return 1; /* stop: flows for this trace are given up */
  }
  return 0;
}

/* qsort orders for the index arrays. */
static int plr_cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}

static int plr_cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static int plr_cmp_link_seq(const void *a, const void *b) {
  const plr_ct_link *x = a, *y = b;
  if (x->seq != y->seq) return x->seq < y->seq ? -1 : 1;
  return x->corr < y->corr ? -1 : x->corr > y->corr;
}

static int plr_cmp_link_corr(const void *a, const void *b) {
  const plr_ct_link *x = a, *y = b;
  if (x->corr != y->corr) return x->corr < y->corr ? -1 : 1;
  return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Runs by thread, then start (file order among equal starts). */
static int plr_cmp_run(const void *a, const void *b) {
  const plr_ct_run *x = a, *y = b;
  if (x->thread != y->thread) return x->thread < y->thread ? -1 : 1;
  if (x->start != y->start) return x->start < y->start ? -1 : 1;
  return x->ord < y->ord ? -1 : x->ord > y->ord;
}

/* Assigns every run of pass 1 its lane (x->run_lane); sorts runs. */
static void plr_ct_lanes_build(plr_ct_index *x, plr_ct_run *runs, size_t n) {
  x->nruns = n;
  if (!n) return;
  x->run_lane = malloc(n);
  if (!x->run_lane) return;
  qsort(runs, n, sizeof *runs, plr_cmp_run);
  uint64_t ends[PLR_CT_RUN_LANES];
  unsigned used = 0;
  for (size_t i = 0; i < n; i++) {
    if (i == 0 || runs[i].thread != runs[i - 1].thread) used = 0;
    x->run_lane[runs[i].ord] =
        (uint8_t)plr_lane_pick(ends, &used, PLR_CT_RUN_LANES, runs[i].start, runs[i].end);
  }
}

/* First index in sorted v[0..n) whose value is >= key. */
static size_t plr_lb_u32(const uint32_t *v, size_t n, uint32_t key) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (v[mid] < key)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/* plr_lb_u32 for 64-bit keys. */
static size_t plr_lb_u64(const uint64_t *v, size_t n, uint64_t key) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (v[mid] < key)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/* How many of sorted v[0..n) equal key, and where they start (*at).  Two
 * binary searches: a hostile trace can repeat one id a million times, and
 * a scan over the repeats for every call would be quadratic. */
static size_t plr_count_u32(const uint32_t *v, size_t n, uint32_t key, size_t *at) {
  size_t lo = plr_lb_u32(v, n, key);
  *at = lo;
  if (lo == n || v[lo] != key) return 0;
  size_t hi = key == UINT32_MAX ? n : plr_lb_u32(v + lo, n - lo, key + 1) + lo;
  return hi - lo;
}

/* First index in by_corr of the links of corr (nlinks when none). */
static size_t plr_ct_corr_at(const plr_ct_index *x, uint32_t corr) {
  size_t lo = 0, hi = x->nlinks;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (x->by_corr[mid].corr < corr)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < x->nlinks && x->by_corr[lo].corr == corr ? lo : x->nlinks;
}

/* First link (in by_corr order) for corr whose call exists, or NULL: the
 * one call a shim-issued GPU op is drawn from.  Chosen once per
 * correlation when the index is built (corr_pick). */
static const plr_ct_link *plr_ct_link_for(const plr_ct_index *x, uint32_t corr) {
  size_t at = plr_ct_corr_at(x, corr);
  if (at == x->nlinks || x->corr_pick[at] == SIZE_MAX) return NULL;
  return &x->by_corr[x->corr_pick[at]];
}

/* Frees the index of one trace. */
static void plr_ct_index_free(plr_ct_index *x) {
  free(x->hc);
  free(x->hc_seen);
  free(x->hs);
  free(x->hs_seen);
  free(x->gc);
  free(x->gc_seen);
  free(x->by_seq);
  free(x->by_corr);
  free(x->corr_pick);
  free(x->run_lane);
  memset(x, 0, sizeof *x);
}

/* Runs pass 1 over src and builds the index; x->ok says whether flows can
 * be drawn for this trace. */
static void plr_ct_index_build(plr_ct_index *x, const plr_source *src) {
  memset(x, 0, sizeof *x);
  plr_ct_pass1 p;
  memset(&p, 0, sizeof p);
  p.hc.elem = sizeof(uint32_t);
  p.hs.elem = sizeof(uint64_t);
  p.gc.elem = sizeof(uint32_t);
  p.links.elem = sizeof(plr_ct_link);
  p.runs.elem = sizeof(plr_ct_run);
  plr_walk(src, plr_ct_pass1_fn, &p);
  /* Lanes only from a complete list of runs: pass 2 finds each by its
   * order in the file. */
  if (!p.oom) plr_ct_lanes_build(x, p.runs.v, p.runs.n);
  free(p.runs.v);
  x->hc = p.hc.v;
  x->nhc = p.hc.n;
  x->hs = p.hs.v;
  x->nhs = p.hs.n;
  x->gc = p.gc.v;
  x->ngc = p.gc.n;
  x->by_seq = p.links.v;
  x->nlinks = p.links.n;
  if (p.oom) return;
  x->hc_seen = calloc(x->nhc ? x->nhc : 1, sizeof *x->hc_seen);
  x->hs_seen = calloc(x->nhs ? x->nhs : 1, sizeof *x->hs_seen);
  x->gc_seen = calloc(x->ngc ? x->ngc : 1, sizeof *x->gc_seen);
  x->by_corr = malloc((x->nlinks ? x->nlinks : 1) * sizeof *x->by_corr);
  x->corr_pick = malloc((x->nlinks ? x->nlinks : 1) * sizeof *x->corr_pick);
  if (!x->hc_seen || !x->hs_seen || !x->gc_seen || !x->by_corr || !x->corr_pick) return;
  if (x->nlinks) memcpy(x->by_corr, x->by_seq, x->nlinks * sizeof *x->by_corr);
  if (x->nhc) qsort(x->hc, x->nhc, sizeof *x->hc, plr_cmp_u32);
  if (x->nhs) qsort(x->hs, x->nhs, sizeof *x->hs, plr_cmp_u64);
  if (x->ngc) qsort(x->gc, x->ngc, sizeof *x->gc, plr_cmp_u32);
  if (x->nlinks) {
    qsort(x->by_seq, x->nlinks, sizeof *x->by_seq, plr_cmp_link_seq);
    qsort(x->by_corr, x->nlinks, sizeof *x->by_corr, plr_cmp_link_corr);
  }
  /* Per correlation, the first link whose call exists: one pass, one
   * binary search per link. */
  for (size_t i = 0; i < x->nlinks;) {
    size_t j = i;
    x->corr_pick[i] = SIZE_MAX;
    for (; j < x->nlinks && x->by_corr[j].corr == x->by_corr[i].corr; j++) {
      if (x->corr_pick[i] != SIZE_MAX) continue;
      size_t at = plr_lb_u64(x->hs, x->nhs, x->by_corr[j].seq);
      if (at < x->nhs && x->hs[at] == x->by_corr[j].seq) x->corr_pick[i] = j;
    }
    i = j;
  }
  x->ok = 1;
}

/* ------------------------------------------------------------------ */
/* Pass 2: the events.                                                */

typedef struct plr_ct_track {
  uint32_t tid;
  UT_hash_handle hh;
} plr_ct_track;

typedef struct plr_ct {
  FILE *out;
  int first; /* no event written yet: no comma before the next */
  uint64_t pid;
  uint64_t start_mono; /* this trace's clock origin ... */
  uint64_t shift;      /* ... and its realtime minus the earliest trace's */
  plr_ct_index x;
  plr_ct_track *tracks; /* tids that have their metadata written */
  int oom;
  uint64_t flows;     /* flow pairs written (stats for tests) */
  const plr_trace *t; /* the trace being written: Python sites */
} plr_ct;

/* Starts the next array element. */
static void plr_ct_sep(plr_ct *c) {
  fputs(c->first ? "\n" : ",\n", c->out);
  c->first = 0;
}

/* Writes a CLOCK_MONOTONIC time of this trace as microseconds with three
 * decimals (nanosecond precision), relative to the earliest trace's start,
 * so that the traces of several ranks line up by wall clock. */
static void plr_ct_ts(plr_ct *c, uint64_t mono) {
  /* Modular, then one conversion to signed: a time before the origin
   * (a corrupt record, or a GPU clock behind) prints negative. */
  uint64_t u = mono - c->start_mono + c->shift;
  int64_t s = (int64_t)u;
  uint64_t mag = s < 0 ? 0 - u : u;
  fprintf(c->out, "%s%" PRIu64 ".%03u", s < 0 ? "-" : "", mag / 1000, (unsigned)(mag % 1000));
}

/* Writes a duration in microseconds with nanosecond precision. */
static void plr_ct_dur(plr_ct *c, uint64_t ns) {
  fprintf(c->out, "%" PRIu64 ".%03u", ns / 1000, (unsigned)(ns % 1000));
}

/* Writes the thread_name / thread_sort_index metadata of a track the
 * first time it is used. */
static void plr_ct_track_use(plr_ct *c, uint32_t tid, const char *name, unsigned sort) {
  plr_ct_track *t;
  HASH_FIND(hh, c->tracks, &tid, sizeof tid, t);
  if (t) return;
  t = calloc(1, sizeof *t);
  if (!t) {
    c->oom = 1; /* the metadata may then repeat: harmless to viewers */
  } else {
    t->tid = tid;
    HASH_ADD(hh, c->tracks, tid, sizeof t->tid, t);
  }
  plr_ct_sep(c);
  fprintf(c->out,
          "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%" PRIu64
          ",\"tid\":%u,\"args\":{\"name\":",
          c->pid, tid);
  plr_json_string(c->out, name, PLR_ESC_UNLIMITED);
  fputs("}}", c->out);
  plr_ct_sep(c);
  fprintf(c->out,
          "{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":%" PRIu64
          ",\"tid\":%u,\"args\":{\"sort_index\":%u}}",
          c->pid, tid, sort);
}

/* Forgets the tracks of one trace (the next trace is another pid). */
static void plr_ct_tracks_free(plr_ct *c) {
  plr_ct_track *t, *tmp;
  HASH_ITER(hh, c->tracks, t, tmp) {
    HASH_DEL(c->tracks, t);
    free(t);
  }
}

/* Track of a GPU stream.  A corrupt device or stream number folds into the
 * range rather than colliding with host threads. */
static uint32_t plr_ct_stream_tid(uint32_t device, uint32_t stream) {
  return PLR_CT_STREAM_BASE | ((device & 0x3ffu) << 20) | (stream & 0xfffffu);
}

/* Writes one flow event ("s" start at a call, "f" finish at a GPU op). */
static void plr_ct_flow(plr_ct *c, char ph, uint64_t id, uint32_t tid, uint64_t ts) {
  plr_ct_sep(c);
  fprintf(c->out,
          "{\"ph\":\"%c\",\"name\":\"copy\",\"cat\":\"flow\",\"id\":%" PRIu64 ",\"pid\":%" PRIu64
          ",\"tid\":%u,\"ts\":",
          ph, id, c->pid, tid);
  plr_ct_ts(c, ts);
  /* "e": bind to the enclosing slice (the GPU op itself), not the next. */
  fputs(ph == 'f' ? ",\"bp\":\"e\"}" : "}", c->out);
}

/* Flow starts at a call for GPU slot range [at, at+k). */
static void plr_ct_flow_starts(plr_ct *c, size_t at, size_t k, uint32_t tid, uint64_t ts) {
  for (size_t j = at; j < at + k; j++) {
    plr_ct_flow(c, 's', c->x.flow_base + 1 + j, tid, ts);
    c->flows++;
  }
}

/* The flow arrows that leave one call.  A call with gpu_correlation c takes
 * the GPU ops with correlation c in order (occurrence k of c takes op k;
 * the last occurrence takes the rest, e.g. ops of a batch); a staged call
 * takes the ops of every chunk LINKed to it. */
static void plr_ct_call_flows(plr_ct *c, const pagelock_rec_copy *cp, uint32_t tid, uint64_t ts) {
  plr_ct_index *x = &c->x;
  if (!x->ok) return;
  if (cp->gpu_correlation) {
    size_t hat, gat;
    size_t h = plr_count_u32(x->hc, x->nhc, cp->gpu_correlation, &hat);
    size_t g = plr_count_u32(x->gc, x->ngc, cp->gpu_correlation, &gat);
    uint32_t k = h ? x->hc_seen[hat]++ : 0;
    if (h && k < g) plr_ct_flow_starts(c, gat + k, k + 1 == h ? g - k : 1, tid, ts);
  }
  if (!x->nlinks) return;
  size_t sat = plr_lb_u64(x->hs, x->nhs, cp->correlation);
  /* Only the first call with this sequence number (a corrupt trace may
   * repeat one) owns the chunks. */
  if (sat >= x->nhs || x->hs[sat] != cp->correlation || x->hs_seen[sat]++) return;
  size_t lo = 0, hi = x->nlinks;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (x->by_seq[mid].seq < cp->correlation)
      lo = mid + 1;
    else
      hi = mid;
  }
  for (; lo < x->nlinks && x->by_seq[lo].seq == cp->correlation; lo++) {
    uint32_t corr = x->by_seq[lo].corr;
    size_t at;
    /* Directly joined ops belong to the call that queued them. */
    if (plr_count_u32(x->hc, x->nhc, corr, &at)) continue;
    /* A repeated LINK names the op once. */
    if (lo > 0 && x->by_seq[lo - 1].seq == cp->correlation && x->by_seq[lo - 1].corr == corr)
      continue;
    const plr_ct_link *l = plr_ct_link_for(x, corr);
    if (!l || l->seq != cp->correlation) continue;
    size_t g = plr_count_u32(x->gc, x->ngc, corr, &at);
    plr_ct_flow_starts(c, at, g, tid, ts);
  }
}

/* The flow arrow that ends at a GPU op, if a call claims it. */
static void plr_ct_gpu_flow(plr_ct *c, const pagelock_rec_gpu *g, uint32_t tid, uint64_t ts) {
  plr_ct_index *x = &c->x;
  if (!x->ok || !plr_ct_gpu_joinable(g)) return;
  size_t at, hat;
  size_t n = plr_count_u32(x->gc, x->ngc, g->correlation, &at);
  if (!n) return;
  uint32_t k = x->gc_seen[at]++;
  if (k >= n) return;
  if (!plr_count_u32(x->hc, x->nhc, g->correlation, &hat) && !plr_ct_link_for(x, g->correlation))
    return;
  plr_ct_flow(c, 'f', x->flow_base + 1 + at + k, tid, ts);
}

/* Comma-separated names of pagelock_copy_flags bits. */
static void plr_ct_copy_flags(uint32_t flags, char *buf, size_t len) {
  size_t used = 0;
  buf[0] = 0;
  for (unsigned i = 0; plr_copy_flag_name(i); i++) {
    if (!(flags & (1u << i))) continue;
    int k = snprintf(buf + used, len - used, "%s%s", used ? "," : "", plr_copy_flag_name(i));
    if (k < 0 || (size_t)k >= len - used) return;
    used += (size_t)k;
  }
}

/* ,"key":"train.py:42 in main": the innermost user line of stack id's
 * Python frames, when it has any; then ,"key_library":"..." when a
 * library's line made the call. */
static void plr_ct_python(plr_ct *c, const char *key, uint32_t stack_id) {
  const plr_pysite *py = c->t ? plr_py_site(c->t, stack_id) : NULL;
  if (!py) return;
  char buf[1024];
  plr_pyloc_format(py->f[0], buf, sizeof buf);
  fprintf(c->out, ",\"%s\":", key);
  plr_json_string(c->out, buf, PLR_ESC_UNLIMITED);
  if (!py->lib) return;
  plr_pyloc_format_lib(py->lib, buf, sizeof buf);
  fprintf(c->out, ",\"%s_library\":", key);
  plr_json_string(c->out, buf, PLR_ESC_UNLIMITED);
}

/* The track of one copy call: its thread's copy-calls track, or for a run
 * the track of its lane (see "Runs" at the top). */
static uint32_t plr_ct_call_track(plr_ct *c, const pagelock_rec_copy *cp) {
  char tname[96];
  if (cp->count <= 1) {
    snprintf(tname, sizeof tname, "thread %u (copy calls)", cp->tid);
    plr_ct_track_use(c, cp->tid, tname, 0);
    return cp->tid;
  }
  size_t k = c->x.runs_seen++;
  unsigned lane = c->x.run_lane && k < c->x.nruns ? c->x.run_lane[k] : 0;
  uint32_t tid = PLR_CT_RUN_BASE | (cp->tid & PLR_CT_RUN_THREAD_MASK) << 3 | lane;
  /* Sort index 0, as the copy-calls tracks: viewers that order equal
   * indexes by name (the trace-event format's rule) then show a thread's
   * lanes right after its copy calls. */
  if (lane)
    snprintf(tname, sizeof tname, "thread %u (runs of repeated copies, lane %u)", cp->tid,
             lane + 1);
  else
    snprintf(tname, sizeof tname, "thread %u (runs of repeated copies)", cp->tid);
  plr_ct_track_use(c, tid, tname, 0);
  return tid;
}

/* Writes one copy call: its slice on its thread's track (a run: on a lane
 * of its own), then its flow starts. */
static void plr_ct_call(plr_ct *c, const plr_event *ev) {
  const pagelock_rec_copy *cp = ev->copy;
  char flags[128];
  uint32_t tid = plr_ct_call_track(c, cp);
  plr_ct_copy_flags(cp->flags, flags, sizeof flags);
  /* A run of repeated copies is one slice from the first one's start for
   * their summed host time (the shim kept no time of the others), named
   * for its count: "cuMemcpyHtoDAsync_v2 x64". */
  char name[96];
  if (cp->count > 1)
    snprintf(name, sizeof name, "%s x%u", plr_api_symbol(cp->api), cp->count);
  else
    snprintf(name, sizeof name, "%s", plr_api_symbol(cp->api));
  plr_ct_sep(c);
  fputs("{\"ph\":\"X\",\"name\":", c->out);
  plr_json_string(c->out, name, PLR_ESC_UNLIMITED);
  fprintf(c->out, ",\"cat\":\"copy_call\",\"pid\":%" PRIu64 ",\"tid\":%u,\"ts\":", c->pid, tid);
  plr_ct_ts(c, ev->start);
  fputs(",\"dur\":", c->out);
  plr_ct_dur(c, ev->end - ev->start);
  /* Chrome's reserved colour names; Perfetto colours by name instead. */
  if (cp->host_mem == PAGELOCK_MEM_PAGEABLE) fputs(",\"cname\":\"terrible\"", c->out);
  fprintf(c->out,
          ",\"args\":{\"bytes\":%" PRIu64
          ",\"dir\":\"%s\",\"host_mem\":\"%s\""
          ",\"stream\":\"0x%" PRIx64 "\",\"device\":%d,\"correlation\":%" PRIu64
          ",\"gpu_correlation\":%u,\"result\":%d,\"flags\":\"%s\"",
          cp->bytes, plr_dir_name(cp->dir), plr_mem_name(cp->host_mem), cp->stream, cp->device,
          cp->correlation, cp->gpu_correlation, cp->result, flags);
  if (cp->count > 1)
    fprintf(c->out, ",\"copies\":%u,\"timed\":%u,\"total_bytes\":%" PRIu64, cp->count, cp->timed,
            plr_copy_bucket(cp).bytes);
  plr_ct_python(c, "python", cp->stack_id);
  plr_ct_python(c, "python_alloc", cp->alloc_stack_id);
  fputs("}}", c->out);
  if (!(cp->flags & PAGELOCK_COPY_GRAPH_NODE)) plr_ct_call_flows(c, cp, tid, ev->start);
}

/* "memcpy HtoD pageable" and the like: what a GPU op is, for its name. */
static void plr_ct_gpu_name(const plr_event *ev, char *buf, size_t len) {
  const pagelock_rec_gpu *g = ev->gpu;
  switch (g->kind) {
    case PAGELOCK_GPU_MEMCPY:
    case PAGELOCK_GPU_MEMCPY_P2P:
      snprintf(buf, len, "memcpy %s %s", plr_gpu_copy_name(g->copy_kind),
               plr_gpu_mem_name(plr_gpu_host_kind(g)));
      break;
    case PAGELOCK_GPU_MEMSET: snprintf(buf, len, "memset"); break;
    case PAGELOCK_GPU_KERNEL: snprintf(buf, len, "kernel"); break;
    case PAGELOCK_GPU_SYNC: snprintf(buf, len, "synchronize"); break;
    case PAGELOCK_GPU_OVERHEAD: snprintf(buf, len, "profiler overhead"); break;
    default: snprintf(buf, len, "gpu activity %u", g->kind);
  }
}

/* Writes one GPU activity: its slice on its stream's (or, for waits, its
 * CUPTI thread's) track, then the flow that ends there. */
static void plr_ct_gpu(plr_ct *c, const plr_event *ev) {
  const pagelock_rec_gpu *g = ev->gpu;
  char tname[96], name[96];
  uint32_t tid;
  int wait = g->kind == PAGELOCK_GPU_SYNC || g->kind == PAGELOCK_GPU_OVERHEAD;
  if (wait) {
    /* Host-side intervals on a CUPTI thread id, which need not be the
     * kernel tid of the COPY records: their own tracks. */
    tid = PLR_CT_WAIT_BASE | (g->thread & 0x0fffffffu);
    snprintf(tname, sizeof tname, "CUPTI thread %u (waits)", g->thread);
    plr_ct_track_use(c, tid, tname, 1);
  } else {
    tid = plr_ct_stream_tid(g->device, g->stream);
    snprintf(tname, sizeof tname, "GPU %u stream %u", g->device, g->stream);
    plr_ct_track_use(c, tid, tname, 2 + (g->device & 0x3ffu));
  }
  plr_ct_gpu_name(ev, name, sizeof name);
  plr_ct_sep(c);
  fputs("{\"ph\":\"X\",\"name\":", c->out);
  plr_json_string(c->out, ev->name ? ev->name : name, PLR_CT_MAX_NAME);
  static const char *const cats[] = {"gpu",    "gpu_copy", "gpu_copy", "gpu_memset",
                                     "kernel", "sync",     "overhead"};
  fprintf(c->out, ",\"cat\":\"%s\",\"pid\":%" PRIu64 ",\"tid\":%u,\"ts\":",
          g->kind < sizeof cats / sizeof cats[0] ? cats[g->kind] : "gpu", c->pid, tid);
  plr_ct_ts(c, ev->start);
  fputs(",\"dur\":", c->out);
  plr_ct_dur(c, ev->end - ev->start);
  if (plr_gpu_is_copy(g)) {
    unsigned hk = plr_gpu_host_kind(g);
    if (hk == PAGELOCK_GPU_MEM_PAGEABLE) fputs(",\"cname\":\"terrible\"", c->out);
    fprintf(c->out,
            ",\"args\":{\"bytes\":%" PRIu64
            ",\"copy\":\"%s\",\"src\":\"%s\""
            ",\"dst\":\"%s\",\"device\":%u,\"stream\":%u,\"correlation\":%u",
            g->bytes, plr_gpu_copy_name(g->copy_kind), plr_gpu_mem_name(g->src_kind),
            plr_gpu_mem_name(g->dst_kind), g->device, g->stream, g->correlation);
    if (ev->end > ev->start)
      fprintf(c->out, ",\"gbps\":%.3f", (double)g->bytes / (double)(ev->end - ev->start));
    fputs("}}", c->out);
  } else {
    fprintf(c->out, ",\"args\":{\"device\":%u,\"stream\":%u,\"correlation\":%u", g->device,
            g->stream, g->correlation);
    if (g->kind == PAGELOCK_GPU_MEMSET) fprintf(c->out, ",\"bytes\":%" PRIu64, g->bytes);
    if (g->kind == PAGELOCK_GPU_KERNEL && ev->name) {
      /* The full name, where the event name may have been shortened. */
      fputs(",\"kernel\":", c->out);
      plr_json_string(c->out, ev->name, PLR_ESC_UNLIMITED);
    }
    fputs("}}", c->out);
  }
  plr_ct_gpu_flow(c, g, tid, ev->start);
}

/* Pass-2 callback: every call and GPU op becomes events. */
static int plr_ct_pass2_fn(void *ctx, const plr_event *ev) {
  plr_ct *c = ctx;
  if (ev->kind == PLR_EV_CALL)
    plr_ct_call(c, ev);
  else if (ev->kind == PLR_EV_GPU)
    plr_ct_gpu(c, ev);
  return 0;
}

/* Writes the process_name / process_sort_index / labels of trace i. */
static void plr_ct_process_meta(plr_ct *c, const plr_trace *t, size_t i) {
  char name[512];
  const char *exe = t->exe && t->exe[0] ? plr_basename(t->exe) : "process";
  if (t->rank >= 0)
    snprintf(name, sizeof name, "%s rank %d (pid %" PRIu64 ")", exe, t->rank, t->hdr.pid);
  else
    snprintf(name, sizeof name, "%s (pid %" PRIu64 ")", exe, t->hdr.pid);
  plr_ct_sep(c);
  fprintf(c->out,
          "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%" PRIu64
          ",\"tid\":0,\"args\":{\"name\":",
          c->pid);
  plr_json_string(c->out, name, PLR_ESC_UNLIMITED);
  fputs("}}", c->out);
  plr_ct_sep(c);
  fprintf(c->out,
          "{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":%" PRIu64
          ",\"tid\":0,\"args\":{\"sort_index\":%zu}}",
          c->pid, i);
  plr_ct_sep(c);
  fprintf(c->out,
          "{\"ph\":\"M\",\"name\":\"process_labels\",\"pid\":%" PRIu64
          ",\"tid\":0,\"args\":{\"labels\":",
          c->pid);
  char labels[4096];
  snprintf(labels, sizeof labels, "%s%s%s", t->host && t->host[0] ? t->host : "",
           t->host && t->host[0] ? ", " : "", t->path ? t->path : "");
  plr_json_string(c->out, labels, PLR_ESC_UNLIMITED);
  fputs("}}", c->out);
}

/* Sampled GPU timing: a slice per stretch in which the shim had paused
 * CUPTI's tracing, on a track of its own, so that a viewer sees why the
 * GPU tracks are empty there (clipped to the trace's span). */
static void plr_ct_pauses(plr_ct *c, const plr_trace *t) {
  const plr_gpu_data *g = &t->gpu;
  for (size_t i = 0; i < g->npauses; i++) {
    uint64_t s = g->pauses[i].start > t->first_ns ? g->pauses[i].start : t->first_ns;
    uint64_t e = g->pauses[i].end < t->last_ns ? g->pauses[i].end : t->last_ns;
    if (e <= s) continue;
    plr_ct_track_use(c, PLR_CT_SAMPLE_TID, "GPU timing (sampled)", 2);
    plr_ct_sep(c);
    fprintf(c->out,
            "{\"ph\":\"X\",\"name\":\"GPU timing paused\",\"cat\":\"gpu_sampling\",\"pid\":%" PRIu64
            ",\"tid\":%u,\"ts\":",
            c->pid, PLR_CT_SAMPLE_TID);
    plr_ct_ts(c, s);
    fputs(",\"dur\":", c->out);
    plr_ct_dur(c, e - s);
    fprintf(c->out, ",\"args\":{\"ops_per_s\":%u}}", g->pauses[i].ops_per_s);
  }
}

/* A trace's pid and its index, sorted to find repeated pids. */
typedef struct plr_ct_pid_at {
  uint64_t pid;
  size_t i;
} plr_ct_pid_at;

static int plr_cmp_pid_at(const void *a, const void *b) {
  const plr_ct_pid_at *x = a, *y = b;
  if (x->pid != y->pid) return x->pid < y->pid ? -1 : 1;
  return x->i < y->i ? -1 : x->i > y->i;
}

/* The pid each trace is shown under: its own, unless an earlier trace of
 * this file used it (two hosts can run processes with one pid, and
 * Perfetto would merge their tracks) or it is past what viewers read (they
 * read pids as 32-bit ints); then 0x7f000000 + its index.  NULL when out of
 * memory. */
static uint64_t *plr_ct_pids(const plr_process *ps, size_t n) {
  uint64_t *pids = malloc((n ? n : 1) * sizeof *pids);
  plr_ct_pid_at *v = malloc((n ? n : 1) * sizeof *v);
  if (!pids || !v) {
    free(pids);
    free(v);
    return NULL;
  }
  for (size_t i = 0; i < n; i++) {
    v[i].pid = ps[i].t.hdr.pid;
    v[i].i = i;
  }
  qsort(v, n, sizeof *v, plr_cmp_pid_at);
  for (size_t k = 0; k < n; k++) {
    size_t i = v[k].i;
    int repeat = k > 0 && v[k - 1].pid == v[k].pid;
    pids[i] = !repeat && v[k].pid <= 0x7fffffffu ? v[k].pid : 0x7f000000u + i;
  }
  free(v);
  return pids;
}

void plr_report_chrome(FILE *out, const plr_process *ps, const plr_source *src, size_t n) {
  /* Align traces by wall clock: the earliest start is time 0. */
  uint64_t base = UINT64_MAX;
  for (size_t i = 0; i < n; i++)
    if (ps[i].t.hdr.start_realtime_ns < base) base = ps[i].t.hdr.start_realtime_ns;
  fputs("{\"traceEvents\":[", out);
  plr_ct c;
  memset(&c, 0, sizeof c);
  c.out = out;
  c.first = 1;
  uint64_t flow_base = 0;
  uint64_t *pids = plr_ct_pids(ps, n);
  for (size_t i = 0; i < n; i++) {
    const plr_trace *t = &ps[i].t;
    c.t = t;
    c.pid = pids ? pids[i] : 0x7f000000u + i;
    c.start_mono = t->hdr.start_mono_ns;
    c.shift = t->hdr.start_realtime_ns - base;
    plr_ct_process_meta(&c, t, i);
    plr_ct_pauses(&c, t);
    plr_ct_index_build(&c.x, &src[i]);
    c.x.flow_base = flow_base;
    flow_base += c.x.ngc;
    plr_walk(&src[i], plr_ct_pass2_fn, &c);
    plr_ct_index_free(&c.x);
    plr_ct_tracks_free(&c);
  }
  free(pids);
  fprintf(out,
          "\n],\"displayTimeUnit\":\"ns\",\"otherData\":{\"generator\":"
          "\"pagelock\",\"flows\":%" PRIu64 "}}\n",
          c.flows);
}
