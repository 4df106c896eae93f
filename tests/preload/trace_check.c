/* trace_check.c - assert what a trace contains, for the preload tests.
 *
 * usage: trace_check FILE [--pageable N] [--pageable-bytes B] [--pinned N]
 *                         [--copies N] [--bytes B] (copies of any kind)
 *                         [--graph-nodes N] (graph memcpy node records)
 *                         [--pinned-bytes B] [--simulated 0|1] [--complete]
 *                         [--api-min NAME=N]...
 *   Devices (several GPUs):
 *                         [--device-copies D=N]... exactly N host<->device
 *                           copies name device D
 *                         [--thread-one-device] every thread's
 *                           host<->device copies name one device only
 *                         [--d2d N] [--d2d-min N] exactly (at least) N
 *                           device-to-device copies, none staged or
 *                           registered (route: passed through)
 *                         [--peer N] exactly N peer copies (cuMemcpyPeer*),
 *                           none staged or registered
 *   Routes (PAGELOCK_MODE register, auto):
 *                         [--registered-min N] [--registered-max N] copies
 *                           through a shim registration (COPY flag
 *                           PAGELOCK_COPY_REGISTERED)
 *                         [--captured-min N] copies made while their
 *                           stream captured (COPY flag PAGELOCK_COPY_CAPTURE)
 *                         [--why-min WHY=N]... at least N copies not
 *                           registered for that reason (WHY: MODE, SMALL,
 *                           SHAPE, UNTRACKED, SHARED, COLD, PENDING, BUDGET,
 *                           FAILED, CAPTURE, EDGE)
 *                         [--cost-min NAME=N] [--cost-max NAME=N] the COST
 *                           record's (what finding call sites cost): captures,
 *                           capture_ns, unwinds, unwind_ns, py_walks,
 *                           py_walk_ns, py_probes; --cost-max
 *                           captures=0 also passes when there is none
 *                         [--counter-min NAME=N] [--counter-max NAME=N]
 *                           the registration engine's COUNTERS (largest
 *                           value over the records): registrations,
 *                           unregistrations, evictions, register_failures,
 *                           registered_bytes, registered_bytes_high_water,
 *                           register_budget
 *   GPU side (CUPTI records):
 *                         [--gpu-status S] (last GPU_STATUS; -1 = none)
 *                         [--gpu-status-records N] [--gpu-memcpy-min N]
 *                         [--gpu-kernels-min N] [--gpu-syncs-max N] [--gpu-links-min N]
 *                         [--gpu-dropped-min N]
 *                         [--gpu-kernel-name S] a kernel record names S
 *   GPU timing sampled (GPU_SAMPLE records, PAGELOCK_CUPTI_MAX_RATE):
 *                         [--gpu-pauses-min N] [--gpu-pauses-max N]
 *                         [--gpu-resumes-min N] pause and resume records
 *                         [--gpu-pause-rate-min R] every pause names at
 *                           least R operations a second
 *                         [--gpu-sampled] pauses and resumes alternate, a
 *                           pause first, in time order; no copy call that
 *                           lies inside a pause carries a CUPTI
 *                           correlation, and no GPU record starts inside
 *                           one (but in its first 50 ms: an op queued
 *                           before may run late on a loaded machine);
 *                           some copy inside a window does; no two GPU
 *                           memcpy records share a correlation id
 *                         [--gpu-joined] every successful, non-empty,
 *                           non-graph copy joins a GPU memcpy record (by
 *                           its correlation or through a LINK), CUPTI's
 *                           memory kind agrees with ours (pageable iff
 *                           pageable, unless the shim staged it), and
 *                           every GPU record lies inside the traced window
 * Counts COPY records by host memory kind and compares; prints every
 * mismatch and exits 1 if any.  Uses the reporter's reader, so the trace is
 * checked by the same code users run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace_read.h"

/* One successful copy call, kept for the join. */
typedef struct tc_copy {
  uint64_t seq;
  uint64_t t0, t1; /* the call, CLOCK_MONOTONIC */
  uint32_t gpu_corr;
  uint8_t host_mem, staged;
} tc_copy;

/* One GPU memcpy record by correlation. */
typedef struct tc_gpu {
  uint32_t corr;
  uint8_t pageable;
} tc_gpu;

typedef struct tc_link {
  uint64_t seq;
  uint32_t corr;
} tc_link;

#define TC_PUSH(arr, n, cap, val)                        \
  do {                                                   \
    if ((n) == (cap)) {                                  \
      (cap) = (cap) ? 2 * (cap) : 256;                   \
      void *p_ = realloc((arr), (cap) * sizeof *(arr));  \
      if (!p_) {                                         \
        fprintf(stderr, "trace_check: out of memory\n"); \
        exit(2);                                         \
      }                                                  \
      (arr) = p_;                                        \
    }                                                    \
    (arr)[(n)++] = (val);                                \
  } while (0)

static int tc_cmp_gpu(const void *a, const void *b) {
  uint32_t x = ((const tc_gpu *)a)->corr, y = ((const tc_gpu *)b)->corr;
  return x < y ? -1 : x > y;
}
static int tc_cmp_link(const void *a, const void *b) {
  uint64_t x = ((const tc_link *)a)->seq, y = ((const tc_link *)b)->seq;
  return x < y ? -1 : x > y;
}
static const tc_gpu *tc_find_gpu(const tc_gpu *v, size_t n, uint32_t corr) {
  tc_gpu key = {corr, 0};
  return corr ? bsearch(&key, v, n, sizeof *v, tc_cmp_gpu) : NULL;
}

static const char *const why_names[PAGELOCK_WHY_COUNT] = {
    "NONE", "MODE",    "SMALL",  "SHAPE",  "UNTRACKED", "SHARED",
    "COLD", "PENDING", "BUDGET", "FAILED", "CAPTURE",   "EDGE",
};

/* The registration engine's counters trace_check knows, by name. */
enum { TC_CTR_N = 7 };
static const char *const ctr_names[TC_CTR_N] = {
    "registrations",     "unregistrations",  "evictions",
    "register_failures", "registered_bytes", "registered_bytes_high_water",
    "register_budget",
};
static void tc_counters(const pagelock_rec_counters *c, uint64_t *v) {
  const uint64_t now[TC_CTR_N] = {c->registrations,    c->unregistrations,
                                  c->evictions,        c->register_failures,
                                  c->registered_bytes, c->registered_bytes_high_water,
                                  c->register_budget};
  for (int i = 0; i < TC_CTR_N; i++)
    if (now[i] > v[i]) v[i] = now[i];
}

/* The COST record's fields, by name. */
enum { TC_COST_N = 7 };
static const char *const cost_names[TC_COST_N] = {
    "captures", "capture_ns", "unwinds", "unwind_ns", "py_walks", "py_walk_ns", "py_probes",
};
static void tc_cost(const pagelock_rec_cost *c, uint64_t *v) {
  const uint64_t now[TC_COST_N] = {c->captures, c->capture_ns, c->unwinds,  c->unwind_ns,
                                   c->py_walks, c->py_walk_ns, c->py_probes};
  for (int i = 0; i < TC_COST_N; i++) v[i] = now[i];
}

/* "NAME=N" against a table of names: its index (or -1) and N. */
static int tc_named(const char *arg, const char *const *names, int count, unsigned long *n) {
  const char *eq = strchr(arg, '=');
  size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
  *n = eq ? strtoul(eq + 1, 0, 10) : 1;
  for (int k = 0; k < count; k++)
    if (names[k] && strlen(names[k]) == len && !strncmp(names[k], arg, len)) return k;
  return -1;
}

/* --WHAT-min or --WHAT-max NAME=N (min: at least) against vals[] named by
 * names[0..n); have: the record they come from was seen.  1 on a miss,
 * said on stderr. */
static int tc_bound(const char *file, const char *what, const char *spec, int min,
                    const char *const *names, int n, const uint64_t *vals, int have) {
  unsigned long want;
  int k = tc_named(spec, names, n, &want);
  if (k < 0) {
    fprintf(stderr, "trace_check: unknown %s %s (valid:", what, spec);
    for (int i = 0; i < n; i++) fprintf(stderr, "%s %s", i ? "," : "", names[i]);
    fprintf(stderr, ")\n");
    return 1;
  }
  if (!have) {
    fprintf(stderr, "trace_check: %s: no record with the %s %s\n", file, what, names[k]);
    return 1;
  }
  if (min ? vals[k] < want : vals[k] > want) {
    fprintf(stderr, "trace_check: %s: %s %s is %llu, expected %s %lu\n", file, what, names[k],
            (unsigned long long)vals[k], min ? "at least" : "at most", want);
    return 1;
  }
  return 0;
}

static const char *const api_names[] = {
#define N(n) #n,
    PAGELOCK_API_LIST(N)
#undef N
};

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: trace_check FILE [expectations]\n");
    return 2;
  }
  plr_reader r;
  plr_open_status st = plr_open(&r, argv[1]);
  if (st != PLR_OPEN_OK) {
    char msg[512];
    plr_open_strerror(&r, st, argv[1], msg, sizeof msg);
    fprintf(stderr, "trace_check: %s\n", msg);
    return 1;
  }
  unsigned long n[8] = {0}, bytes[8] = {0}, api[PAGELOCK_API_COUNT] = {0}, failed = 0, stacks = 0;
  unsigned long pageable_no_stack = 0, total = 0, total_bytes = 0, graph_nodes = 0;
  unsigned long registered = 0, captured = 0, why[PAGELOCK_WHY_COUNT] = {0};
  /* Host<->device copies per device ordinal (8: what the fake models at
   * most), and each thread's first device, to catch a copy recorded
   * against another thread's device. */
  enum { TC_DEV_N = 8, TC_TID_N = 64 };
  unsigned long dev_copies[TC_DEV_N] = {0}, dev_other = 0, d2d = 0, d2d_routed = 0, peer = 0,
                peer_routed = 0;
  uint32_t tid_v[TC_TID_N];
  int32_t tid_dev[TC_TID_N];
  unsigned long tid_n = 0, tid_mixed = 0;
  uint64_t ctr[TC_CTR_N] = {0}, cost[TC_COST_N] = {0};
  int have_counters = 0;
  tc_copy *cv = NULL;
  tc_gpu *gv = NULL;
  tc_link *lv = NULL;
  size_t nc = 0, cc = 0, ng = 0, cg = 0, nl = 0, cl = 0;
  long gpu_status = -1;
  unsigned long gpu_status_records = 0, gpu_memcpy = 0, gpu_kernels = 0, gpu_syncs = 0,
                gpu_dropped = 0, gpu_outside = 0;
  uint64_t win_lo = UINT64_MAX, win_hi = 0;
  plr_clock clk = {0};
  uint64_t *gstart = NULL;
  const char *want_kernel = NULL;
  for (int i = 2; i + 1 < argc; i++)
    if (!strcmp(argv[i], "--gpu-kernel-name")) want_kernel = argv[i + 1];
  uint32_t want_kernel_id = 0;
  unsigned long kernels_named = 0;
  size_t ngs = 0, cgs = 0;
  /* GPU_SAMPLE records: time and on, in file order. */
  typedef struct tc_sample {
    uint64_t t;
    uint32_t on, rate;
  } tc_sample;
  tc_sample *sv = NULL;
  size_t ns = 0, cs = 0;
  plr_record rec;
  while (plr_next(&r, &rec)) {
    if (rec.type == PAGELOCK_REC_GPU_SAMPLE && rec.size >= sizeof(pagelock_rec_gpu_sample)) {
      const pagelock_rec_gpu_sample *g = (const pagelock_rec_gpu_sample *)rec.u.hdr;
      tc_sample x = {g->mono_ns, g->on, g->ops_per_s};
      TC_PUSH(sv, ns, cs, x);
    }
    if (rec.type == PAGELOCK_REC_STACK) stacks++;
    if (rec.type == PAGELOCK_REC_CLOCK) plr_clock_update(&clk, rec.u.clock);
    if (rec.type == PAGELOCK_REC_GPU_STATUS) {
      gpu_status = rec.u.gpu_status->status;
      gpu_dropped = rec.u.gpu_status->dropped;
      gpu_status_records++;
    }
    if (rec.type == PAGELOCK_REC_NAME && want_kernel && rec.str1 && strstr(rec.str1, want_kernel))
      want_kernel_id = rec.u.name->id;
    if (rec.type == PAGELOCK_REC_LINK) {
      tc_link l = {rec.u.link->copy_seq, rec.u.link->correlation};
      TC_PUSH(lv, nl, cl, l);
    }
    if (rec.type == PAGELOCK_REC_GPU) {
      const pagelock_rec_gpu *g = rec.u.gpu;
      if (g->kind == PAGELOCK_GPU_KERNEL) gpu_kernels++;
      if (g->kind == PAGELOCK_GPU_SYNC) gpu_syncs++;
      if (g->kind == PAGELOCK_GPU_KERNEL && want_kernel_id && g->name_id == want_kernel_id)
        kernels_named++;
      if (g->kind == PAGELOCK_GPU_MEMCPY) {
        gpu_memcpy++;
        tc_gpu x = {g->correlation, g->src_kind == PAGELOCK_GPU_MEM_PAGEABLE ||
                                        g->dst_kind == PAGELOCK_GPU_MEM_PAGEABLE};
        TC_PUSH(gv, ng, cg, x);
      }
      if (g->kind <= PAGELOCK_GPU_KERNEL) {
        uint64_t t = plr_clock_to_mono(&clk, g->start_ns);
        TC_PUSH(gstart, ngs, cgs, t);
      }
    }
    if (rec.type == PAGELOCK_REC_COUNTERS) {
      tc_counters(rec.u.counters, ctr);
      have_counters = 1;
    }
    if (rec.type == PAGELOCK_REC_COST) tc_cost(rec.u.cost, cost);
    if (rec.type == PAGELOCK_REC_END && rec.u.end->end_mono_ns > win_hi)
      win_hi = rec.u.end->end_mono_ns;
    if (rec.type != PAGELOCK_REC_COPY) continue;
    if (rec.u.copy->start_ns < win_lo) win_lo = rec.u.copy->start_ns;
    if (rec.u.copy->start_ns + rec.u.copy->host_ns > win_hi)
      win_hi = rec.u.copy->start_ns + rec.u.copy->host_ns;
    const pagelock_rec_copy *c = rec.u.copy;
    if (c->flags & PAGELOCK_COPY_GRAPH_NODE) { /* a definition, not a copy */
      graph_nodes++;
      continue;
    }
    if (c->host_mem < 8) {
      n[c->host_mem]++;
      bytes[c->host_mem] += c->bytes;
    }
    total++;
    total_bytes += c->bytes;
    if (c->api < PAGELOCK_API_COUNT) api[c->api]++;
    if (c->result != 0) failed++;
    if (c->flags & PAGELOCK_COPY_REGISTERED) registered++;
    if (c->flags & PAGELOCK_COPY_CAPTURE) captured++;
    if (c->why < PAGELOCK_WHY_COUNT) why[c->why]++;
    if (c->host_mem == PAGELOCK_MEM_PAGEABLE && c->stack_id == 0) pageable_no_stack++;
    if (c->dir == PAGELOCK_DIR_D2D) {
      d2d++;
      if (c->flags & (PAGELOCK_COPY_STAGED | PAGELOCK_COPY_REGISTERED)) d2d_routed++;
    }
    if (c->dir == PAGELOCK_DIR_PEER) {
      peer++;
      if (c->flags & (PAGELOCK_COPY_STAGED | PAGELOCK_COPY_REGISTERED)) peer_routed++;
    }
    if (c->dir == PAGELOCK_DIR_H2D || c->dir == PAGELOCK_DIR_D2H) {
      if (c->device >= 0 && c->device < TC_DEV_N)
        dev_copies[c->device]++;
      else
        dev_other++;
      unsigned long k = 0;
      while (k < tid_n && tid_v[k] != c->tid) k++;
      if (k == tid_n && tid_n < TC_TID_N) {
        tid_v[tid_n] = c->tid;
        tid_dev[tid_n++] = c->device;
      } else if (k < tid_n && tid_dev[k] != c->device && tid_mixed++ < 3) {
        fprintf(stderr, "trace_check: copy %lu of thread %u names device %d, its earlier ones %d\n",
                (unsigned long)c->correlation, c->tid, c->device, tid_dev[k]);
      }
    }
    if (c->result == 0 && c->bytes > 0 && c->dir != PAGELOCK_DIR_H2H &&
        !(c->flags & PAGELOCK_COPY_BATCH)) {
      tc_copy x = {c->correlation,     c->start_ns, c->start_ns + c->host_ns,
                   c->gpu_correlation, c->host_mem, (c->flags & PAGELOCK_COPY_STAGED) != 0};
      TC_PUSH(cv, nc, cc, x);
    }
  }
  /* The join, as the reporter does it: by the call's own correlation or a
   * LINK from one of the shim's chunk ops. */
  qsort(gv, ng, sizeof *gv, tc_cmp_gpu);
  qsort(lv, nl, sizeof *lv, tc_cmp_link);
  /* One copy call, one GPU memcpy record: two sharing an id would join one
   * call to another call's copy (CUPTI numbers calls from 1 again each
   * time it is attached). */
  unsigned long dup_corr = 0;
  for (size_t i = 1; i < ng; i++) dup_corr += gv[i].corr != 0 && gv[i].corr == gv[i - 1].corr;
  unsigned long unjoined = 0, kind_mismatch = 0;
  for (size_t i = 0; i < nc; i++) {
    const tc_gpu *g = tc_find_gpu(gv, ng, cv[i].gpu_corr);
    int joined = g != NULL, pageable = g && g->pageable;
    tc_link key = {cv[i].seq, 0};
    const tc_link *l = nl ? bsearch(&key, lv, nl, sizeof *lv, tc_cmp_link) : NULL;
    if (l) {
      while (l > lv && l[-1].seq == cv[i].seq) l--;
      for (; l < lv + nl && l->seq == cv[i].seq; l++) {
        const tc_gpu *lg = tc_find_gpu(gv, ng, l->corr);
        if (lg) {
          joined = 1;
          pageable |= lg->pageable;
        }
      }
    }
    if (!joined) {
      if (unjoined++ < 3)
        fprintf(stderr, "trace_check: copy %lu (gpu correlation %u) has no GPU record\n",
                (unsigned long)cv[i].seq, cv[i].gpu_corr);
      continue;
    }
    int ours = cv[i].host_mem == PAGELOCK_MEM_PAGEABLE && !cv[i].staged;
    if (ours != pageable && kind_mismatch++ < 3)
      fprintf(stderr, "trace_check: copy %lu: ours %s, CUPTI %s\n", (unsigned long)cv[i].seq,
              ours ? "pageable" : "not pageable", pageable ? "pageable" : "not pageable");
  }
  /* CUPTI's clock is ours (or converted by CLOCK): every op must fall in
   * the traced window, give or take a second for ops queued before the
   * first copy call (kernels) or after the last. */
  for (size_t i = 0; i < ngs; i++)
    if (win_lo == UINT64_MAX || gstart[i] + 1000000000ull < win_lo ||
        gstart[i] > win_hi + 1000000000ull)
      gpu_outside++;
  /* Sampling: the paused spans [pause, resume), the last one open to the
   * end; what fell inside them and inside the windows. */
  unsigned long pauses = 0, resumes = 0, order_bad = 0, slow_pauses = 0, corr_in_pause = 0,
                copies_in_pause = 0, corr_in_window = 0, gpu_in_pause = 0;
  unsigned long want_rate = 0;
  for (int i = 2; i + 1 < argc; i++)
    if (!strcmp(argv[i], "--gpu-pause-rate-min")) want_rate = strtoul(argv[i + 1], 0, 10);
  for (size_t i = 0; i < ns; i++) {
    if (sv[i].on != (i % 2) || (i && sv[i].t < sv[i - 1].t)) order_bad++;
    if (sv[i].on) {
      resumes++;
    } else {
      pauses++;
      if (sv[i].rate < want_rate) slow_pauses++;
    }
  }
  for (size_t k = 0; k < nc; k++) {
    int in_pause = 0, in_window = ns > 0 && cv[k].t0 < sv[0].t;
    for (size_t i = 0; i < ns; i += 2) {
      uint64_t lo = sv[i].t, hi = i + 1 < ns ? sv[i + 1].t : UINT64_MAX;
      uint64_t next = i + 2 < ns ? sv[i + 2].t : UINT64_MAX;
      if (cv[k].t0 > lo && cv[k].t1 < hi) in_pause = 1;
      if (i + 1 < ns && cv[k].t0 > hi && cv[k].t1 < next) in_window = 1;
    }
    copies_in_pause += in_pause;
    if (in_pause && cv[k].gpu_corr != 0 && corr_in_pause++ < 3)
      fprintf(stderr, "trace_check: copy %lu inside a pause carries correlation %u\n",
              (unsigned long)cv[k].seq, cv[k].gpu_corr);
    if (in_window && cv[k].gpu_corr != 0) corr_in_window++;
  }
  for (size_t g = 0; g < ngs; g++)
    for (size_t i = 0; i < ns; i += 2) {
      uint64_t lo = sv[i].t + 50000000u, hi = i + 1 < ns ? sv[i + 1].t : UINT64_MAX;
      if (gstart[g] > lo && gstart[g] < hi && gpu_in_pause++ < 3)
        fprintf(stderr, "trace_check: a GPU record starts %.3f ms into a pause\n",
                (double)(gstart[g] - sv[i].t) / 1e6);
    }
  int bad = 0;
#define EXPECT(name, got, want)                                                    \
  do {                                                                             \
    if ((unsigned long)(got) != (unsigned long)(want)) {                           \
      fprintf(stderr, "trace_check: %s: %s is %lu, expected %lu\n", argv[1], name, \
              (unsigned long)(got), (unsigned long)(want));                        \
      bad = 1;                                                                     \
    }                                                                              \
  } while (0)
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : "0";
    if (!strcmp(a, "--pageable")) {
      EXPECT("pageable copies", n[PAGELOCK_MEM_PAGEABLE], strtoul(v, 0, 10));
      i++;
    } else if (!strcmp(a, "--pageable-bytes")) {
      EXPECT("pageable bytes", bytes[PAGELOCK_MEM_PAGEABLE], strtoul(v, 0, 10));
      i++;
    } else if (!strcmp(a, "--pinned")) {
      EXPECT("pinned copies", n[PAGELOCK_MEM_PINNED], strtoul(v, 0, 10));
      i++;
    } else if (!strcmp(a, "--pinned-bytes")) {
      EXPECT("pinned bytes", bytes[PAGELOCK_MEM_PINNED], strtoul(v, 0, 10));
      i++;
    } else if (!strcmp(a, "--copies")) {
      EXPECT("copies (any host memory)", total, strtoul(v, 0, 10));
      i++;
    } else if (!strcmp(a, "--bytes")) {
      EXPECT("bytes (any host memory)", total_bytes, strtoul(v, 0, 10));
      i++;
    } else if (!strcmp(a, "--graph-nodes")) {
      EXPECT("graph memcpy nodes", graph_nodes, strtoul(v, 0, 10));
      i++;
    } else if (!strcmp(a, "--failed")) {
      EXPECT("failed copies", failed, strtoul(v, 0, 10));
      i++;
    } else if (!strcmp(a, "--registered-min")) {
      if (registered < strtoul(v, 0, 10))
        EXPECT("registered copies (at least)", registered, strtoul(v, 0, 10));
      i++;
    } else if (!strcmp(a, "--registered-max")) {
      if (registered > strtoul(v, 0, 10))
        EXPECT("registered copies (at most)", registered, strtoul(v, 0, 10));
      i++;
    } else if (!strcmp(a, "--captured-min")) {
      if (captured < strtoul(v, 0, 10))
        EXPECT("captured copies (at least)", captured, strtoul(v, 0, 10));
      i++;
    } else if (!strcmp(a, "--why-min")) {
      unsigned long want;
      int k = tc_named(v, why_names, PAGELOCK_WHY_COUNT, &want);
      if (k < 0) {
        fprintf(
            stderr,
            "trace_check: unknown reason %s (valid: MODE, SMALL, SHAPE, UNTRACKED, SHARED, COLD, PENDING, BUDGET, FAILED, CAPTURE, EDGE)\n",
            v);
        bad = 1;
      } else if (why[k] < want) {
        fprintf(stderr,
                "trace_check: %s: %lu copies not registered because %s, expected at least %lu\n",
                argv[1], why[k], why_names[k], want);
        bad = 1;
      }
      i++;
    } else if (!strcmp(a, "--cost-min") || !strcmp(a, "--cost-max")) {
      bad |= tc_bound(argv[1], "cost", v, !strcmp(a, "--cost-min"), cost_names, TC_COST_N, cost, 1);
      i++;
    } else if (!strcmp(a, "--counter-min") || !strcmp(a, "--counter-max")) {
      bad |= tc_bound(argv[1], "counter", v, !strcmp(a, "--counter-min"), ctr_names, TC_CTR_N, ctr,
                      have_counters);
      i++;
    } else if (!strcmp(a, "--simulated")) {
      EXPECT("simulated flag", (r.hdr.flags & PAGELOCK_FILE_SIMULATED) != 0, strtoul(v, 0, 10));
      i++;
    } else if (!strcmp(a, "--complete"))
      EXPECT("clean END record", r.stop == PLR_STOP_END, 1);
    else if (!strcmp(a, "--gpu-status")) {
      if (gpu_status != strtol(v, 0, 10)) {
        fprintf(stderr, "trace_check: %s: GPU timing status is %ld, expected %s\n", argv[1],
                gpu_status, v);
        bad = 1;
      }
      i++;
    } else if (!strcmp(a, "--gpu-status-records")) {
      EXPECT("GPU_STATUS records", gpu_status_records, strtoul(v, 0, 10));
      i++;
    } else if (!strcmp(a, "--gpu-memcpy-min")) {
      if (gpu_memcpy < strtoul(v, 0, 10))
        EXPECT("GPU memcpy records (at least)", gpu_memcpy, strtoul(v, 0, 10));
      i++;
    } else if (!strcmp(a, "--gpu-kernels-min")) {
      if (gpu_kernels < strtoul(v, 0, 10))
        EXPECT("GPU kernel records (at least)", gpu_kernels, strtoul(v, 0, 10));
      i++;
    } else if (!strcmp(a, "--gpu-syncs-max")) {
      if (gpu_syncs > strtoul(v, 0, 10))
        EXPECT("GPU synchronization records (at most)", gpu_syncs, strtoul(v, 0, 10));
      i++;
    } else if (!strcmp(a, "--gpu-links-min")) {
      if (nl < strtoul(v, 0, 10)) EXPECT("LINK records (at least)", nl, strtoul(v, 0, 10));
      i++;
    } else if (!strcmp(a, "--gpu-dropped-min")) {
      if (gpu_dropped < strtoul(v, 0, 10))
        EXPECT("dropped GPU records (at least)", gpu_dropped, strtoul(v, 0, 10));
      i++;
    } else if (!strcmp(a, "--gpu-kernel-name")) {
      if (kernels_named == 0) {
        fprintf(stderr, "trace_check: %s: no kernel record named '%s'\n", argv[1], v);
        bad = 1;
      }
      i++;
    } else if (!strcmp(a, "--gpu-pauses-min")) {
      if (pauses < strtoul(v, 0, 10))
        EXPECT("GPU timing pauses (at least)", pauses, strtoul(v, 0, 10));
      i++;
    } else if (!strcmp(a, "--gpu-pauses-max")) {
      if (pauses > strtoul(v, 0, 10))
        EXPECT("GPU timing pauses (at most)", pauses, strtoul(v, 0, 10));
      i++;
    } else if (!strcmp(a, "--gpu-resumes-min")) {
      if (resumes < strtoul(v, 0, 10))
        EXPECT("GPU timing resumes (at least)", resumes, strtoul(v, 0, 10));
      i++;
    } else if (!strcmp(a, "--gpu-pause-rate-min")) {
      EXPECT("pauses naming a lower rate", slow_pauses, 0);
      i++;
    } else if (!strcmp(a, "--gpu-sampled")) {
      EXPECT("GPU_SAMPLE records out of order", order_bad, 0);
      EXPECT("copies inside a pause with a CUPTI correlation", corr_in_pause, 0);
      EXPECT("GPU records starting inside a pause", gpu_in_pause, 0);
      EXPECT("GPU memcpy records sharing a correlation id", dup_corr, 0);
      if (copies_in_pause == 0 || corr_in_window == 0) {
        fprintf(stderr,
                "trace_check: %s: %lu copies inside pauses, %lu correlated inside windows; "
                "expected some of each\n",
                argv[1], copies_in_pause, corr_in_window);
        bad = 1;
      }
    } else if (!strcmp(a, "--gpu-joined")) {
      EXPECT("copies without a GPU record", unjoined, 0);
      EXPECT("copies whose CUPTI memory kind disagrees", kind_mismatch, 0);
      EXPECT("GPU records outside the traced window", gpu_outside, 0);
      if (nc == 0) {
        fprintf(stderr, "trace_check: %s: no copies to join\n", argv[1]);
        bad = 1;
      }
    } else if (!strcmp(a, "--stacks")) {
      EXPECT("pageable copies without a stack", pageable_no_stack, 0);
      if (stacks == 0) {
        fprintf(stderr, "trace_check: %s: no STACK records\n", argv[1]);
        bad = 1;
      }
    } else if (!strcmp(a, "--device-copies")) {
      unsigned long want = 0;
      char *eq = strchr(v, '=');
      long d = strtol(v, 0, 10);
      if (eq) want = strtoul(eq + 1, 0, 10);
      if (!eq || d < 0 || d >= TC_DEV_N) {
        fprintf(stderr, "trace_check: bad --device-copies '%s' (valid: D=N, D from 0 to %d)\n", v,
                TC_DEV_N - 1);
        bad = 1;
      } else {
        char name[64];
        snprintf(name, sizeof name, "host<->device copies on device %ld", d);
        EXPECT(name, dev_copies[d], want);
      }
      i++;
    } else if (!strcmp(a, "--thread-one-device")) {
      EXPECT("copies naming another device than their thread's first", tid_mixed, 0);
      EXPECT("host<->device copies with no device", dev_other, 0);
    } else if (!strcmp(a, "--d2d")) {
      EXPECT("device-to-device copies", d2d, strtoul(v, 0, 10));
      EXPECT("device-to-device copies staged or registered", d2d_routed, 0);
      i++;
    } else if (!strcmp(a, "--peer")) {
      EXPECT("peer copies", peer, strtoul(v, 0, 10));
      EXPECT("peer copies staged or registered", peer_routed, 0);
      i++;
    } else if (!strcmp(a, "--d2d-min")) {
      if (d2d < strtoul(v, 0, 10)) {
        fprintf(stderr, "trace_check: %s: device-to-device copies is %lu, expected at least %s\n",
                argv[1], d2d, v);
        bad = 1;
      }
      EXPECT("device-to-device copies staged or registered", d2d_routed, 0);
      i++;
    } else if (!strcmp(a, "--api-min")) {
      char name[128];
      snprintf(name, sizeof name, "%s", v);
      char *eq = strchr(name, '=');
      unsigned long want = eq ? strtoul(eq + 1, 0, 10) : 1;
      if (eq) *eq = 0;
      int found = -1;
      for (int k = 0; k < PAGELOCK_API_COUNT; k++)
        if (!strcmp(api_names[k], name)) found = k;
      if (found < 0) {
        fprintf(stderr, "trace_check: unknown api %s\n", name);
        bad = 1;
      } else if (api[found] < want) {
        fprintf(stderr, "trace_check: %s: %s seen %lu times, expected at least %lu\n", argv[1],
                name, api[found], want);
        bad = 1;
      }
      i++;
    } else {
      fprintf(stderr, "trace_check: unknown option %s\n", a);
      bad = 1;
    }
  }
  printf(
      "trace_check: %s: pageable=%lu (%lu B) pinned=%lu (%lu B) device=%lu unknown=%lu failed=%lu"
      " registered=%lu gpu: status=%ld memcpy=%lu kernels=%lu links=%zu joined=%lu/%zu dropped=%lu\n",
      argv[1], n[PAGELOCK_MEM_PAGEABLE], bytes[PAGELOCK_MEM_PAGEABLE], n[PAGELOCK_MEM_PINNED],
      bytes[PAGELOCK_MEM_PINNED], n[PAGELOCK_MEM_DEVICE], n[PAGELOCK_MEM_UNKNOWN], failed,
      registered, gpu_status, gpu_memcpy, gpu_kernels, nl, (unsigned long)(nc - unjoined), nc,
      gpu_dropped);
  free(cv);
  free(gv);
  free(lv);
  free(gstart);
  free(sv);
  plr_close(&r);
  return bad;
}
