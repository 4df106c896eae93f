/* gpu_analysis.c - from the GPU records a trace kept (gpu_model.c) to the
 * numbers and verdicts of plr_gpu_report: busy, hidden and exposed times
 * per device by interval arithmetic on normalized span sets, bandwidth
 * percentiles, and plain-sentence verdicts with what to do. */
#include "gpu_analysis.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace_model.h"
#include "units.h"

#define PLR_DEFAULT_GAP_NS 1000000ull /* 1 ms */
#define PLR_MIB (1ull << 20)

int plr_gpu_report_timed(const plr_gpu_report *r) {
  return r->status == PAGELOCK_GPU_TIMING_ON && r->records > 0;
}

double plr_gpu_hidden_pct(const plr_gpu_report *r) {
  if (!r->total_copy_busy_ns) return -1;
  return 100.0 * (double)r->total_copy_hidden_ns / (double)r->total_copy_busy_ns;
}

void plr_gpu_sampling_sentence(const plr_gpu_report *r, char *buf, size_t len) {
  if (!len) return;
  buf[0] = 0;
  if (!r->sampled) return;
  double pct = r->span_ns ? 100.0 * (double)r->traced_ns / (double)r->span_ns : 0;
  /* No resume: tracing ran from the start until its one pause, and never
   * again; there were no windows to speak of. */
  if (!r->windows)
    snprintf(buf, len,
             "GPU timing paused for good after the first %.1f%% of the run (the program "
             "issued up to %u GPU operations a second, more than PAGELOCK_CUPTI_MAX_RATE, where "
             "tracing every one would slow it); GPU times below cover that part only, host "
             "times every copy",
             pct, r->max_ops_per_s);
  else
    snprintf(buf, len,
             "GPU timing sampled: %" PRIu64
             " window%s, %.1f%% of the run traced (the program issued up to %u GPU "
             "operations a second, more than PAGELOCK_CUPTI_MAX_RATE, where tracing every one "
             "would slow it); GPU times below cover the windows only, host times every copy",
             r->windows, r->windows == 1 ? "" : "s", pct, r->max_ops_per_s);
}

/* ---- per device ---------------------------------------------------------- */

/* qsort order of bandwidth rows: copy kind, source, destination, size. */
static int plr_cmp_bw(const void *a, const void *b) {
  const plr_bw_row *x = a, *y = b;
  if (x->copy_kind != y->copy_kind) return x->copy_kind < y->copy_kind ? -1 : 1;
  if (x->src_kind != y->src_kind) return x->src_kind < y->src_kind ? -1 : 1;
  if (x->dst_kind != y->dst_kind) return x->dst_kind < y->dst_kind ? -1 : 1;
  if (x->bucket != y->bucket) return x->bucket < y->bucket ? -1 : 1;
  if (x->staged != y->staged) return x->staged < y->staged ? -1 : 1;
  return x->registered < y->registered ? -1 : x->registered > y->registered;
}

/* Fills one device report from its kept records; pz[0..npz) are the
 * paused stretches of sampled GPU timing, normalized.  -1 when out of
 * memory. */
static int plr_device_fill(const plr_gpu_dev *d, uint64_t thr, const plr_span *pz, size_t npz,
                           plr_device_report *o) {
  memset(o, 0, sizeof *o);
  o->device = d->device;
  snprintf(o->name, sizeof o->name, "%s", d->name);
  o->copy_engines = d->copy_engines;
  o->sm_count = d->sm_count;
  o->pci_gen = d->pci_gen;
  if (d->have_window) {
    o->window.start = d->first_ns;
    o->window.end = d->last_ns;
  }
  o->kernels = d->kernels;
  o->copies = d->copies;
  o->memsets = d->memsets;
  o->gap_threshold_ns = thr;
  const plr_spanvec *k = &d->kern, *m = &d->mset, *c = d->copy;
  o->kernel_busy_ns = plr_spans_total(k->v, k->n);
  for (int i = 0; i < PLR_NCDIR; i++) o->copy_busy_ns[i] = plr_spans_total(c[i].v, c[i].n);

  /* C = H2D | D2H | other, then U = C | K | memsets. */
  size_t nc = c[0].n + c[1].n + c[2].n;
  size_t nu = nc + k->n + m->n;
  plr_span *buf = malloc((2 * nc + 2 * nu + 1) * sizeof *buf);
  if (!buf) return -1;
  plr_span *c01 = buf, *call = c01 + nc, *ck = call + nc, *u = ck + nu;
  size_t n01 = plr_spans_union(c[0].v, c[0].n, c[1].v, c[1].n, c01);
  size_t ncall = plr_spans_union(c01, n01, c[2].v, c[2].n, call);
  o->copy_busy_all_ns = plr_spans_total(call, ncall);
  o->copy_hidden_ns = plr_spans_intersect_total(call, ncall, k->v, k->n);
  o->copy_exposed_ns = o->copy_busy_all_ns - o->copy_hidden_ns;
  o->kernel_hidden_ns = o->copy_hidden_ns; /* |K and C| = |C and K| */
  o->h2d_d2h_together_ns = plr_spans_intersect_total(c[0].v, c[0].n, c[1].v, c[1].n);
  size_t nck = plr_spans_union(call, ncall, k->v, k->n, ck);
  size_t nuu = plr_spans_union(ck, nck, m->v, m->n, u);
  uint64_t busy = plr_spans_total(u, nuu);
  uint64_t wlen = o->window.end - o->window.start;
  /* A pause of the shim's tracing is no idle time: the GPU's work in it
   * went unrecorded by design.  It covers the window like busy time, so a
   * gap is listed only for what is left of it outside pauses. */
  plr_span *up = NULL;
  if (npz && d->have_window) {
    up = malloc((nuu + npz) * sizeof *up);
    if (!up) {
      free(buf);
      return -1;
    }
    nuu = plr_spans_union(u, nuu, pz, npz, up);
    u = up;
    busy = plr_spans_intersect_total(u, nuu, &o->window, 1);
    o->paused_ns = plr_spans_intersect_total(pz, npz, &o->window, 1);
  }
  o->idle_ns = wlen > busy ? wlen - busy : 0;
  if (d->have_window)
    o->ngaps =
        plr_spans_gaps(u, nuu, o->window, thr, o->gaps, PLR_MAX_GAPS, &o->gaps_total, &o->gaps_ns);
  free(up);
  free(buf);

  size_t nbw = HASH_COUNT(d->bw);
  if (nbw) {
    o->bw = calloc(nbw, sizeof *o->bw);
    if (!o->bw) return -1;
    const plr_bw_acc *b, *tmp;
    HASH_ITER(hh, d->bw, b, tmp) {
      plr_bw_row *r = &o->bw[o->nbw++];
      r->copy_kind = (uint8_t)(b->key & 0xff);
      r->src_kind = (uint8_t)(b->key >> 8);
      r->dst_kind = (uint8_t)(b->key >> 16);
      r->bucket = (uint8_t)PLR_BW_BUCKET(b->key);
      r->staged = (b->key & PLR_BW_CHUNK) != 0;
      r->registered = (b->key & PLR_BW_REG) != 0;
      r->count = b->count;
      r->bytes = b->bytes;
      r->gpu_ns = b->gpu_ns;
      r->median_gbps = b->median;
      r->p10_gbps = b->p10;
    }
    qsort(o->bw, o->nbw, sizeof *o->bw, plr_cmp_bw);
  }
  memcpy(o->pinned_gbps, d->pinned_gbps, sizeof o->pinned_gbps);

  /* Streams: which carried kernels, and the program's pinned async copies
   * on them (staged chunks are the shim's: counted apart). */
  const plr_stream_acc *s, *st;
  uint64_t best = 0;
  size_t nss = 0;
  HASH_ITER(hh, d->streams, s, st) {
    o->pinned_async_copies += s->pinned_async;
    o->pinned_async_ns += s->pinned_async_ns;
    o->staged_chunks += s->chunks;
    if (!s->kernels) continue;
    o->kernel_streams++;
    o->same_stream_copies += s->pinned_async;
    o->same_stream_ns += s->pinned_async_ns;
    nss += s->pinned_spans.n;
    if (s->pinned_async && (s->pinned_async_ns > best ||
                            (s->pinned_async_ns == best && s->stream < o->same_stream_id))) {
      best = s->pinned_async_ns;
      o->same_stream_id = s->stream;
    }
  }
  /* The time those copies ran, and ran under no kernel: what the
   * same-stream verdict may cite. */
  if (nss) {
    plr_span *v = malloc(nss * sizeof *v), *at = v;
    if (!v) return -1;
    HASH_ITER(hh, d->streams, s, st) {
      if (!s->kernels || !s->pinned_spans.n) continue;
      memcpy(at, s->pinned_spans.v, s->pinned_spans.n * sizeof *v);
      at += s->pinned_spans.n;
    }
    size_t n = plr_spans_normalize(v, nss);
    o->same_stream_busy_ns = plr_spans_total(v, n);
    o->same_stream_hidden_ns = plr_spans_intersect_total(v, n, k->v, k->n);
    o->same_stream_exposed_ns = o->same_stream_busy_ns - o->same_stream_hidden_ns;
    free(v);
  }
  o->pageable_busy_ns = plr_spans_total(d->pageable.v, d->pageable.n);
  o->pageable_exposed_ns =
      o->pageable_busy_ns - plr_spans_intersect_total(d->pageable.v, d->pageable.n, k->v, k->n);
  return 0;
}

/* ---- verdicts ------------------------------------------------------------ */

#define PLR_MAX_CANDIDATES 64

/* snprintf into a verdict field.  A verdict sentence that does not fit is
 * cut (the numbers come first in every sentence), which is fine: the
 * wrapper exists so that cutting is a decision, not a warning. */
static int plr_say(char *dst, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int plr_say(char *dst, size_t len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(dst, len, fmt, ap);
  va_end(ap);
  return k;
}

typedef struct plr_vlist {
  plr_verdict v[PLR_MAX_CANDIDATES];
  size_t n;
} plr_vlist;

/* Appends a verdict; text and advice are printf formats. */
static plr_verdict *plr_vadd(plr_vlist *l, uint32_t kind, uint64_t ns, int32_t device) {
  if (l->n == PLR_MAX_CANDIDATES) return NULL;
  plr_verdict *v = &l->v[l->n++];
  memset(v, 0, sizeof *v);
  v->kind = kind;
  v->ns = ns;
  v->device = device;
  return v;
}

/* "device 0 (NVIDIA H200)" or "device 0". */
static void plr_dev_label(const plr_device_report *d, char *buf, size_t len) {
  if (d->name[0])
    snprintf(buf, len, "device %u (%s)", d->device, d->name);
  else
    snprintf(buf, len, "device %u", d->device);
}

/* Time pinned copies of the same bytes would take, by direction, with the
 * given bandwidths (GB/s); -1 when a needed bandwidth is unknown. */
static int64_t plr_pinned_cost(const uint64_t bytes[PLR_NCDIR], const double gbps[PLR_NCDIR]) {
  double ns = 0;
  for (unsigned cd = 0; cd < PLR_NCDIR; cd++) {
    if (!bytes[cd]) continue;
    if (cd == PLR_CDIR_OTHER || gbps[cd] <= 0) return -1;
    ns += (double)bytes[cd] / gbps[cd];
  }
  return (int64_t)ns;
}

/* The advice for a missing GPU timing, by status. */
static const char *plr_no_timing_advice(const plr_gpu_report *r, uint32_t v) {
  switch (r->status) {
    case PAGELOCK_GPU_TIMING_DISABLED:
      return "unset PAGELOCK_CUPTI (or set PAGELOCK_CUPTI=1) to record GPU "
             "timing";
    case PAGELOCK_GPU_TIMING_NO_CUPTI:
      return "install CUPTI (it ships with the CUDA toolkit) or set "
             "PAGELOCK_CUPTI_LIB to the path of libcupti.so";
    case PAGELOCK_GPU_TIMING_BUSY:
      return "run without the other profiler (nsys, ncu, torch.profiler) to "
             "get GPU timing; copies are still intercepted and counted";
    case PAGELOCK_GPU_TIMING_VERSION:
      return "use a pagelock built for this CUDA version to get GPU timing";
    case PAGELOCK_GPU_TIMING_NO_CUDA: return "";
    default:
      if (!r->have_status)
        return v < 2 ? "this trace was written by an older pagelock (trace "
                       "format 1): record it again to get GPU timing"
                     : "the program may have ended before CUDA was "
                       "initialised";
      return "see the reason above; copies are still intercepted and counted";
  }
}

/* " (GPU figures from the sampled windows)" when r is sampled and the
 * sentence cites one, else "". */
static const char *plr_sampled_mark(const plr_gpu_report *r) {
  return r->sampled ? " (GPU figures from the sampled windows)" : "";
}

/* The pageable-copy verdicts of r from t's totals (every copy's host
 * time); pinned bandwidth and exposed copy time join when the GPU
 * measured them. */
static void plr_pageable_verdicts(const plr_trace *t, plr_gpu_report *r) {
  char a[64], b[64], c[64];
  const plr_totals *tot = &t->tot;
  int staging =
      t->have_process && (t->mode == PAGELOCK_MODE_STAGE || t->mode == PAGELOCK_MODE_AUTO);
  const char *stage_hint = staging ? "" : " or run `pagelock run --mode=auto`";
  int timed = plr_gpu_report_timed(r);
  uint64_t exposed = timed ? r->total_pageable_exposed_ns : 0;
  r->npageable = 0;
  for (int sync = 0; sync < 2; sync++) {
    const plr_bucket *all = sync ? &tot->pageable_sync : &tot->pageable_async;
    const plr_bucket *dir = sync ? tot->pageable_sync_dir : tot->pageable_async_dir;
    if (!all->count) continue;
    uint64_t bytes[PLR_NCDIR];
    for (int k = 0; k < PLR_NCDIR; k++) bytes[k] = dir[k].bytes;
    int64_t cost = timed ? plr_pinned_cost(bytes, r->pinned_gbps) : -1;
    uint64_t save = cost >= 0 && (uint64_t)cost < all->host_ns ? all->host_ns - (uint64_t)cost : 0;
    plr_verdict *v = &r->pageable[r->npageable++];
    memset(v, 0, sizeof *v);
    v->device = -1;
    v->kind = sync ? PLR_VERDICT_PAGEABLE_SYNC : PLR_VERDICT_MADE_SYNC;
    v->ns = sync && cost >= 0 ? save : all->host_ns;
    plr_fmt_ms(all->host_ns, a, sizeof a);
    int gpu = 0, k;
    if (sync)
      k = plr_say(v->text, sizeof v->text,
                  "%" PRIu64
                  " synchronous copies from pageable memory blocked the host %s ms at "
                  "%.2f GB/s",
                  all->count, a, all->host_ns ? (double)all->bytes / (double)all->host_ns : 0.0);
    else
      k = plr_say(v->text, sizeof v->text,
                  "pageable copies made %" PRIu64
                  " async calls synchronous, blocking the host %s ms",
                  all->count, a);
    if (save && k > 0 && (size_t)k < sizeof v->text) {
      plr_fmt_ms(save, b, sizeof b);
      k += plr_say(v->text + k, sizeof v->text - (size_t)k,
                   sync ? "; pinned, they would take about %s ms less"
                        : " (pinned, they would block about %s ms less)",
                   b);
      gpu = 1;
    }
    /* Exposed copy time of pageable copies is the first verdict's. */
    if (exposed && (!sync || !tot->pageable_async.count) && k > 0 && (size_t)k < sizeof v->text) {
      plr_fmt_ms(exposed, c, sizeof c);
      k += plr_say(v->text + k, sizeof v->text - (size_t)k,
                   "; pageable copies left the GPU %s ms of copy time with no kernel running", c);
      gpu = 1;
    }
    if (gpu && k > 0 && (size_t)k < sizeof v->text)
      plr_say(v->text + k, sizeof v->text - (size_t)k, "%s", plr_sampled_mark(r));
    if (sync)
      plr_say(v->advice, sizeof v->advice,
              "pin these buffers (cudaHostAlloc / cudaHostRegister) to copy at pinned speed%s",
              stage_hint);
    else
      plr_say(v->advice, sizeof v->advice,
              "pin the host buffers (cudaHostAlloc / cudaHostRegister, or torch pin_memory())%s",
              stage_hint);
  }
  if (r->npageable == 2 && r->pageable[1].ns > r->pageable[0].ns) {
    plr_verdict x = r->pageable[0];
    r->pageable[0] = r->pageable[1];
    r->pageable[1] = x;
  }
}

/* qsort order of verdicts: most time at stake first, then kind, device. */
static int plr_cmp_verdict(const void *a, const void *b) {
  const plr_verdict *x = a, *y = b;
  if (x->ns != y->ns) return x->ns > y->ns ? -1 : 1;
  if (x->kind != y->kind) return x->kind < y->kind ? -1 : 1;
  return x->device < y->device ? -1 : x->device > y->device;
}

/* Builds r's verdicts from its numbers. */
static void plr_verdicts(const plr_trace *t, plr_gpu_report *r) {
  plr_vlist l; /* ~40 KiB of candidates: fine on the stack, reentrant */
  l.n = 0;
  char a[64], b[64], c[64], lab[96];

  if (r->status != PAGELOCK_GPU_TIMING_ON) {
    plr_verdict *v = plr_vadd(&l, PLR_VERDICT_NO_GPU_TIMING, 0, -1);
    plr_say(v->text, sizeof v->text, "GPU timing %s: %s", r->records ? "partial" : "unavailable",
            r->reason[0] ? r->reason : plr_gpu_status_name(r->status));
    plr_say(v->advice, sizeof v->advice, "%s", plr_no_timing_advice(r, t->hdr.version));
  }

  for (size_t i = 0; i < r->ndev; i++) {
    const plr_device_report *d = &r->dev[i];
    plr_dev_label(d, lab, sizeof lab);
    int32_t dv = (int32_t)(d->device & 0x7fffffff);
    /* Pinned async copies that still did not overlap: they sat on the
     * kernels' stream, so stream order serialised them. */
    /* ... and only when it matters: at least 1% of the device's window.
     * A training loop's 8-byte loss reads share the kernels' stream by
     * design; 0.05 ms of them in a 450 ms window (the DataLoader golden)
     * is not what slows it. */
    /* Sampled timing: only the traced part of the window counts. */
    uint64_t window = d->window.end > d->window.start ? d->window.end - d->window.start : 0;
    window = window > d->paused_ns ? window - d->paused_ns : 0;
    if (d->kernels && d->same_stream_copies && d->same_stream_busy_ns &&
        d->same_stream_ns * 2 >= d->pinned_async_ns &&
        d->same_stream_hidden_ns * 4 < d->same_stream_busy_ns &&
        d->same_stream_exposed_ns * 100 >= window) {
      /* The time cited is these copies' own: pageable copies and the
       * shim's staged chunks on the same stream are other verdicts'. */
      plr_fmt_ms(d->same_stream_exposed_ns, a, sizeof a);
      plr_verdict *v = plr_vadd(&l, PLR_VERDICT_SAME_STREAM, d->same_stream_exposed_ns, dv);
      if (v) {
        plr_say(v->text, sizeof v->text,
                "pinned but not overlapped: copies and kernels share a "
                "stream (%s: %" PRIu64 " of %" PRIu64
                " pinned async copies ran on stream %u with kernels; %.0f%% "
                "of their time was hidden under kernels, %s ms exposed)",
                lab, d->same_stream_copies, d->pinned_async_copies, d->same_stream_id,
                100.0 * (double)d->same_stream_hidden_ns / (double)d->same_stream_busy_ns, a);
        plr_say(v->advice, sizeof v->advice,
                "move copies to their own stream with "
                "cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) and "
                "order them with cudaEventRecord / cudaStreamWaitEvent");
      }
    }
    if (d->copy_engines == 1 && d->copy_busy_ns[PLR_CDIR_H2D] && d->copy_busy_ns[PLR_CDIR_D2H]) {
      uint64_t h = d->copy_busy_ns[PLR_CDIR_H2D], dd = d->copy_busy_ns[PLR_CDIR_D2H];
      plr_fmt_ms(h, a, sizeof a);
      plr_fmt_ms(dd, b, sizeof b);
      plr_verdict *v = plr_vadd(&l, PLR_VERDICT_ONE_ENGINE, h < dd ? h : dd, dv);
      if (v) {
        plr_say(v->text, sizeof v->text,
                "one copy engine: uploads and downloads serialise (%s: %s ms "
                "of H2D and %s ms of D2H copies cannot run at the same time)",
                lab, a, b);
        plr_say(v->advice, sizeof v->advice,
                "group uploads and downloads into separate phases, and keep "
                "copies few and large; a GPU with two copy engines overlaps "
                "them");
      }
    }
    uint64_t wlen = d->window.end - d->window.start;
    wlen = wlen > d->paused_ns ? wlen - d->paused_ns : 0;
    if (d->gaps_total && wlen && d->gaps_ns * 10 >= wlen) {
      plr_fmt_ms(d->gap_threshold_ns, a, sizeof a);
      plr_fmt_ms(d->gaps_ns, b, sizeof b);
      plr_fmt_ms(d->ngaps ? d->gaps[0].end - d->gaps[0].start : 0, c, sizeof c);
      plr_verdict *v = plr_vadd(&l, PLR_VERDICT_IDLE, d->gaps_ns, dv);
      if (v) {
        plr_say(v->text, sizeof v->text,
                "the GPU idled for long gaps: %s was idle %" PRIu64
                " times for %s ms or more, %s ms in all (%.0f%% of its "
                "active window%s); the longest gap was %s ms",
                lab, d->gaps_total, a, b, 100.0 * (double)d->gaps_ns / (double)wlen,
                d->paused_ns ? " outside tracing pauses" : "", c);
        const plr_bucket *ms = &t->tot.pageable_async;
        if (ms->count && ms->host_ns * 10 >= d->gaps_ns) {
          plr_fmt_ms(ms->host_ns, c, sizeof c);
          plr_say(v->advice, sizeof v->advice,
                  "first fix the %" PRIu64
                  " copy calls that pageable memory "
                  "made synchronous (they blocked the host %s ms), so that "
                  "it can queue work ahead",
                  ms->count, c);
        } else {
          plr_say(v->advice, sizeof v->advice, "%s",
                  "queue work ahead of the GPU: look for host "
                  "synchronisation (cudaDeviceSynchronize, "
                  "cudaStreamSynchronize, .item(), .cpu()) and host work "
                  "between launches");
        }
      }
    }
  }

  if (plr_gpu_report_timed(r) && r->total_copy_busy_ns && !t->tot.pageable_async.count &&
      r->total_copy_hidden_ns * 2 >= r->total_copy_busy_ns) {
    plr_fmt_ms(r->total_copy_hidden_ns, a, sizeof a);
    plr_fmt_ms(r->total_copy_busy_ns, b, sizeof b);
    plr_verdict *v = plr_vadd(&l, PLR_VERDICT_GOOD, r->total_copy_hidden_ns, -1);
    if (v)
      plr_say(v->text, sizeof v->text,
              "copies overlapped compute: %.0f%% of copy time (%s of %s ms) "
              "was hidden under kernels",
              plr_gpu_hidden_pct(r), a, b);
  }

  qsort(l.v, l.n, sizeof l.v[0], plr_cmp_verdict);
  r->nverdicts = l.n < PLR_MAX_VERDICTS ? l.n : PLR_MAX_VERDICTS;
  memcpy(r->verdicts, l.v, r->nverdicts * sizeof l.v[0]);
}

int plr_gpu_analyze(const plr_trace *t, uint64_t thr, plr_gpu_report *r) {
  memset(r, 0, sizeof *r);
  const plr_gpu_data *g = &t->gpu;
  if (!thr) thr = PLR_DEFAULT_GAP_NS;
  r->have_status = g->have_status;
  if (g->have_status) {
    r->status = g->status;
    snprintf(r->reason, sizeof r->reason, "%s", g->reason);
  } else {
    r->status = PAGELOCK_GPU_TIMING_ERROR;
    snprintf(r->reason, sizeof r->reason, "no GPU_STATUS record");
  }
  r->cupti_version = g->cupti_version;
  r->records = g->records;
  r->dropped = g->status_dropped;
  r->buffers = g->status_buffers;
  r->bad_times = g->bad_times;
  r->syncs = g->syncs;
  r->sync_ns = g->sync_ns;
  r->overheads = g->overheads;
  r->overhead_ns = g->overhead_ns;
  r->join = g->join;
  /* Sampled GPU timing: the paused stretches, and how much of the trace's
   * span they took. */
  r->span_ns = t->last_ns > t->first_ns ? t->last_ns - t->first_ns : 0;
  r->sampled = g->npauses > 0;
  r->pauses = g->npauses;
  r->windows = g->windows;
  r->max_ops_per_s = g->max_ops_per_s;
  r->samples_ignored = g->samples_ignored;
  plr_span *pz = NULL;
  size_t npz = 0;
  if (g->npauses) {
    pz = malloc(g->npauses * sizeof *pz);
    if (!pz) return -1;
    for (size_t i = 0; i < g->npauses; i++) {
      pz[i].start = g->pauses[i].start;
      pz[i].end = g->pauses[i].end;
    }
    npz = plr_spans_normalize(pz, g->npauses);
    plr_span run = {t->first_ns, t->first_ns + r->span_ns};
    r->paused_ns = plr_spans_intersect_total(pz, npz, &run, 1);
  }
  if (r->sampled) r->traced_ns = r->span_ns - r->paused_ns;
  if (g->ndev) {
    r->dev = calloc(g->ndev, sizeof *r->dev);
    if (!r->dev) {
      free(pz);
      return -1;
    }
  }
  for (size_t i = 0; i < g->ndev; i++) {
    r->ndev++;
    if (plr_device_fill(&g->dev[i], thr, pz, npz, &r->dev[i])) {
      free(pz);
      return -1;
    }
    const plr_device_report *d = &r->dev[i];
    r->total_copy_busy_ns += d->copy_busy_all_ns;
    r->total_copy_hidden_ns += d->copy_hidden_ns;
    r->total_copy_exposed_ns += d->copy_exposed_ns;
    r->total_kernel_busy_ns += d->kernel_busy_ns;
    r->total_pageable_exposed_ns += d->pageable_exposed_ns;
  }
  free(pz);
  memcpy(r->pinned_gbps, g->pinned_gbps, sizeof r->pinned_gbps);
  plr_verdicts(t, r);
  plr_pageable_verdicts(t, r);
  return 0;
}

void plr_gpu_report_free(plr_gpu_report *r) {
  for (size_t i = 0; i < r->ndev; i++) free(r->dev[i].bw);
  free(r->dev);
  r->dev = NULL;
  r->ndev = 0;
}
