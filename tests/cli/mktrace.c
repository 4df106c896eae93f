/* mktrace.c - writes a synthetic pagelock trace for the CLI tests.
 *
 * usage: mktrace OUT [--copies N] [--sites N] [--no-end] [--cut-mid-record]
 *                    [--simulated] [--mode M] [--pid P] [--rank R]
 *                    [--host H] [--v1 | --v3]
 *        mktrace OUT --scenario NAME [--pid P] [--rank R] [--host H]
 *        mktrace OUT --big N [--late]
 *        mktrace OUT --hostile N
 *        mktrace OUT [--copies N] --copy N:DIR:MEM:ROUTE:WHY:BYTES:NS[:RUN:TIMED[:AT]] ...
 *                    [--counters NAME=V,...] [--cost NAME=V,... [--cost-short]]
 * Any of them but --big and --hostile also takes --checksums K (a CHECK
 * record after every K records, and the CHECKSUMS flag; prints
 * "blocks=S0 S1 ...", the file offset of each block), --flags X (OR X into
 * the header's flags, e.g. 0x2 PAGELOCK_FILE_STOP_DISK_FULL) and
 * --evil-names (terminal escapes and invalid UTF-8 in the program path,
 * host, note and symbol names).
 *
 * The default trace looks like one written by the shim for a program "app"
 * whose copies go through a dynamically linked libcudart: PROCESS, NOTE,
 * STACK records before first use, COPY records cycling over call sites and
 * host memory kinds, then MODULE, SYMBOL, COUNTERS and END at exit.
 * --cut-mid-record drops END and cuts the file inside the last COPY record;
 * mktrace prints "records=N", the number of whole records in the file.
 * --v1 writes trace format version 1 (96-byte COPY records, no GPU
 * records), --v3 version 3 (104-byte COPY records, without count and
 * timed).
 *
 * --copy (repeatable) appends N async copies of BYTES each, NS of host time
 * each, after the classic ones (--copies 0 for none of those), from the
 * first call site: DIR h2d, d2h, d2d or peer, MEM pageable, pinned,
 * registered or none (pagelock_mem; none for d2d and peer, which have no
 * host side, as the shim writes them), ROUTE pass, stage or register (the COPY flags STAGED,
 * REGISTERED), WHY a pagelock_why name (none, mode, small, shape,
 * untracked, shared, cold, pending, budget, failed, capture, edge) or
 * number.  BYTES takes a K, M or G suffix.  RUN and TIMED make each of
 * the N records a run of RUN copies of BYTES each, TIMED of them timed,
 * NS the run's host time (version 4: COPY count and timed).  Records
 * follow one another in time as in the file, unless AT is given: the N
 * records then start AT ns after the first --copy record would (the end of
 * the classic ones), so that records can overlap or come out of start
 * order, as the shim writes runs (when they close).  --counters
 * sets fields of the COUNTERS record by name (every field of
 * pagelock_rec_counters), e.g.
 * --counters registrations=3,registered_bytes_high_water=64M.  --cost
 * writes a COST record with the fields named (pagelock_rec_cost's), e.g.
 * --cost captures=10,capture_ns=2M; --cost-short writes it 8 bytes short
 * (malformed).
 *
 * --scenario writes a trace with GPU (CUPTI) records whose
 * numbers the CLI tests check exactly (times in CUPTI's clock, 500 ms
 * behind CLOCK_MONOTONIC, with a CLOCK record saying so):
 *   made-sync    3 pageable async 16 MiB uploads each blocking the host
 *                3 ms while the GPU copy took 2.8 ms, then a 5 ms kernel;
 *                pinned 16 MiB uploads (0.3 ms) on a copy stream hidden
 *                under the kernels; one pinned 4 MiB download
 *   same-stream  10 pinned async 8 MiB uploads (1 ms) on the kernels'
 *                stream, each followed by a 2 ms kernel: nothing overlaps
 *   one-engine   a GPU with one copy engine: 10 pinned uploads and 10
 *                pinned downloads (1 ms each) under kernels
 *   idle         10 kernels of 1 ms with 5 ms gaps
 *   busy         GPU timing unavailable: another CUPTI client
 *   staged       mode stage: 4 staged 64 MiB uploads, each moved as 4
 *                pinned 16 MiB chunks joined through LINK records (each
 *                LINK written twice, as the shim does)
 *   sampled      sampled GPU timing (GPU_SAMPLE records): two windows, a
 *                pause between them as long as a real idle gap in the
 *                first, a pause lasting to END, a stray resume first,
 *                two malformed samples, copies in the pauses (see
 *                mk_scenario)
 *   sampled-cut  the same without exit records and END, cut inside a
 *                last GPU_SAMPLE (a resume at +22 ms)
 *   staged-shared  mode stage: 4 staged 64 MiB uploads, each moved as 4
 *                pinned 16 MiB chunks (0.3 ms) under ONE correlation named
 *                by one LINK (the last LINK after its chunks), on the
 *                kernels' stream; 4 pinned 8 MiB uploads of the program's
 *                own (1 ms, exposed) on it too, and a 2 ms kernel per call
 * --big N writes N COPY records and their N GPU copy records (GPU records
 * in batches of 1000 after their COPYs, each batch shuffled), plus a
 * kernel per 10 copies, over 50 call sites: the speed test.  --late puts
 * every GPU record after the last COPY (the join's worst case: every call
 * waits for its op).  --hostile N writes N COPY and N GPU records that
 * repeat correlation ids, devices and names (mk_hostile): every writer must
 * stay O(n log n) on it. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace_builder.h"

#define APP_BASE 0x555555554000ull
#define CUDART_BASE 0x7f0000000000ull
#define LIBC_BASE 0x7f2000000000ull
#define MS 1000000ull
#define MIB (1ull << 20)
/* CUPTI's clock in the scenarios: this far behind CLOCK_MONOTONIC. */
#define CUPTI_SKEW (500 * MS)

/* --evil-names: the program path, host, note and a symbol name hold what a
 * terminal would act on (CSI and OSC sequences, CR, BS, an 8-bit CSI byte,
 * a C1 control, invalid UTF-8). */
#define EVIL                   \
  "\033[31m\033]0;t\a\r\b\x9b" \
  "2J\xc2\x9b\xff"
static int evil_names;
/* --module: one more loaded object at exit (libgomp for the OpenMP note). */
static const char *extra_module;
/* --warning: a note of the warning kind. */
static const char *warning_note;

/* --copy and --counters. */
typedef struct extra_copy {
  unsigned long n;
  uint8_t dir, mem, why;
  uint32_t flags, count, timed;
  uint64_t bytes, host_ns;
  int has_at;  /* AT given: */
  uint64_t at; /* ns after the start of the --copy records */
} extra_copy;
#define MAX_EXTRA 64
static extra_copy extra[MAX_EXTRA];
static size_t nextra;
static pagelock_rec_counters counters;
static pagelock_rec_cost cost;
static int have_cost, cost_short;

static const char *const why_names[PAGELOCK_WHY_COUNT] = {
    "none", "mode",    "small",  "shape",  "untracked", "shared",
    "cold", "pending", "budget", "failed", "capture",   "edge"};

/* A count with an optional K, M or G suffix (powers of 1024); -1 on junk. */
static int parse_size(const char *s, uint64_t *v) {
  char *end;
  unsigned long long x = strtoull(s, &end, 10);
  if (end == s) return -1;
  if (*end == 'K')
    x <<= 10, end++;
  else if (*end == 'M')
    x <<= 20, end++;
  else if (*end == 'G')
    x <<= 30, end++;
  if (*end) return -1;
  *v = x;
  return 0;
}

/* Parses N:DIR:MEM:ROUTE:WHY:BYTES:NS[:RUN:TIMED[:AT]] into extra[]. */
static int parse_copy(const char *spec) {
  char buf[256], *f[10], *save = NULL;
  int k = 0;
  snprintf(buf, sizeof buf, "%s", spec);
  for (char *p = strtok_r(buf, ":", &save); p && k < 10; p = strtok_r(NULL, ":", &save)) f[k++] = p;
  if ((k != 7 && k != 9 && k != 10) || nextra == MAX_EXTRA) return -1;
  extra_copy *e = &extra[nextra];
  uint64_t n;
  if (parse_size(f[0], &n)) return -1;
  e->n = (unsigned long)n;
  if (!strcmp(f[1], "h2d"))
    e->dir = PAGELOCK_DIR_H2D;
  else if (!strcmp(f[1], "d2h"))
    e->dir = PAGELOCK_DIR_D2H;
  else if (!strcmp(f[1], "d2d"))
    e->dir = PAGELOCK_DIR_D2D;
  else if (!strcmp(f[1], "peer"))
    e->dir = PAGELOCK_DIR_PEER;
  else
    return -1;
  if (!strcmp(f[2], "pageable"))
    e->mem = PAGELOCK_MEM_PAGEABLE;
  else if (!strcmp(f[2], "pinned"))
    e->mem = PAGELOCK_MEM_PINNED;
  else if (!strcmp(f[2], "registered"))
    e->mem = PAGELOCK_MEM_REGISTERED;
  else if (!strcmp(f[2], "none"))
    e->mem = PAGELOCK_MEM_UNKNOWN;
  else
    return -1;
  e->flags = PAGELOCK_COPY_ASYNC;
  if (!strcmp(f[3], "stage"))
    e->flags |= PAGELOCK_COPY_STAGED;
  else if (!strcmp(f[3], "register"))
    e->flags |= PAGELOCK_COPY_REGISTERED;
  else if (strcmp(f[3], "pass"))
    return -1;
  int w = -1;
  for (int i = 0; i < PAGELOCK_WHY_COUNT; i++)
    if (!strcmp(f[4], why_names[i])) w = i;
  if (w < 0) {
    char *end;
    unsigned long x = strtoul(f[4], &end, 10);
    if (*end || end == f[4] || x > 255) return -1;
    w = (int)x;
  }
  e->why = (uint8_t)w;
  if (parse_size(f[5], &e->bytes) || parse_size(f[6], &e->host_ns)) return -1;
  if (k >= 9) {
    uint64_t run, timed;
    if (parse_size(f[7], &run) || parse_size(f[8], &timed) || run > UINT32_MAX ||
        timed > UINT32_MAX)
      return -1;
    e->count = (uint32_t)run;
    e->timed = (uint32_t)timed;
  }
  if (k == 10) {
    if (parse_size(f[9], &e->at)) return -1;
    e->has_at = 1;
  }
  nextra++;
  return 0;
}

/* A record's u64 field by name. */
typedef struct mk_field {
  const char *name;
  size_t off;
} mk_field;

/* Parses NAME=V,... into the u64 fields of rec (names in fields[0..n)). */
static int parse_fields(const char *spec, const mk_field *fields, size_t n, void *rec) {
  char buf[1024], *save = NULL;
  snprintf(buf, sizeof buf, "%s", spec);
  for (char *p = strtok_r(buf, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
    char *eq = strchr(p, '=');
    if (!eq) return -1;
    *eq = 0;
    size_t i = 0;
    while (i < n && strcmp(fields[i].name, p)) i++;
    uint64_t v;
    if (i == n || parse_size(eq + 1, &v)) return -1;
    memcpy((char *)rec + fields[i].off, &v, sizeof v);
  }
  return 0;
}

static int parse_counters(const char *spec) {
  static const mk_field fields[] = {
#define F(x) {#x, offsetof(pagelock_rec_counters, x)}
      F(bytes_staged),    F(bytes_passthrough), F(fallbacks),     F(waits),
      F(wait_ns),         F(pool_high_water),   F(pool_bytes),    F(registered_bytes_high_water),
      F(dropped_records), F(register_budget),   F(registrations), F(unregistrations),
      F(evictions),       F(register_failures), F(register_ns),   F(registered_bytes),
#undef F
  };
  return parse_fields(spec, fields, sizeof fields / sizeof fields[0], &counters);
}

static int parse_cost(const char *spec) {
  static const mk_field fields[] = {
#define F(x) {#x, offsetof(pagelock_rec_cost, x)}
      F(captures), F(capture_ns), F(unwinds),   F(unwind_ns),
      F(py_walks), F(py_walk_ns), F(py_probes),
#undef F
  };
  have_cost = 1;
  return parse_fields(spec, fields, sizeof fields / sizeof fields[0], &cost);
}

/* The classic trace: COPY records only (plus exit-time records). */
static int mk_classic(tb *b, unsigned long copies, unsigned long sites, int end, int cut,
                      size_t *len, size_t *complete, int v1, int v3) {
  if (sites == 0 || sites > 10000) sites = 1;
  tb_note(b, PAGELOCK_NOTE_INFO, evil_names ? "note " EVIL : "synthetic trace written by mktrace");
  if (warning_note) tb_note(b, PAGELOCK_NOTE_WARNING, warning_note);
  for (unsigned long s = 0; s < sites; s++) {
    /* innermost: cudart's cudaMemcpyAsync, then the user's function */
    uint64_t fr[3] = {CUDART_BASE + 0x1000 + 0x10 * s, APP_BASE + 0x2000 + 0x100 * s + 0x20,
                      APP_BASE + 0x9000};
    tb_stack(b, (uint32_t)s + 1, fr, 3);
  }
  uint64_t t = 1000000000ull + 1000;
  for (unsigned long i = 0; i < copies; i++) {
    unsigned long s = i % sites;
    tb_copy_args c = {0};
    c.start_ns = t;
    c.bytes = 1u << 20;
    c.callsite = CUDART_BASE + 0x1000 + 0x10 * s;
    c.stack_id = (uint32_t)s + 1;
    c.api = PAGELOCK_API_cuMemcpyHtoDAsync_v2;
    c.dir = (i & 1) ? PAGELOCK_DIR_D2H : PAGELOCK_DIR_H2D;
    c.flags = PAGELOCK_COPY_ASYNC;
    /* three of four copies pageable, one pinned */
    c.host_mem = (i % 4 == 3) ? PAGELOCK_MEM_PINNED : PAGELOCK_MEM_PAGEABLE;
    c.host_ns = c.host_mem == PAGELOCK_MEM_PAGEABLE ? 100000 + 1000 * s : 2000;
    c.v1 = v1;
    c.v3 = v3;
    tb_copy(b, &c);
    t += c.host_ns + 500;
  }
  /* t_last: the end of the latest record, for END (AT can go back). */
  uint64_t extra_t0 = t, t_last = t;
  for (size_t e = 0; e < nextra; e++) {
    if (extra[e].has_at) t = extra_t0 + extra[e].at;
    for (unsigned long i = 0; i < extra[e].n; i++) {
      tb_copy_args c = {0};
      c.start_ns = t;
      c.host_ns = extra[e].host_ns;
      c.bytes = extra[e].bytes;
      c.callsite = CUDART_BASE + 0x1000;
      c.stack_id = 1;
      c.dir = extra[e].dir;
      c.api = c.dir == PAGELOCK_DIR_H2D    ? PAGELOCK_API_cuMemcpyHtoDAsync_v2
              : c.dir == PAGELOCK_DIR_D2H  ? PAGELOCK_API_cuMemcpyDtoHAsync_v2
              : c.dir == PAGELOCK_DIR_PEER ? PAGELOCK_API_cuMemcpyPeerAsync
                                           : PAGELOCK_API_cuMemcpyDtoDAsync_v2;
      c.host_mem = extra[e].mem;
      c.flags = extra[e].flags;
      c.why = extra[e].why;
      c.count = extra[e].count;
      c.timed = extra[e].timed;
      c.v1 = v1;
      c.v3 = v3;
      tb_copy(b, &c);
      t += c.host_ns + 500;
      if (t > t_last) t_last = t;
    }
  }
  t = t_last;
  tb_module(b, APP_BASE, APP_BASE + 0x1000, APP_BASE + 0x20000, "");
  tb_module(b, CUDART_BASE, CUDART_BASE, CUDART_BASE + 0x100000,
            "/nonexistent/lib/libcudart.so.13");
  if (extra_module) tb_module(b, LIBC_BASE, LIBC_BASE, LIBC_BASE + 0x100000, extra_module);
  for (unsigned long s = 0; s < sites; s++) {
    char name[64];
    snprintf(name, sizeof name, "step_%lu%s", s, evil_names ? EVIL : "");
    tb_symbol(b, APP_BASE + 0x2000 + 0x100 * s + 0x20, APP_BASE + 0x2000 + 0x100 * s, name);
    tb_symbol(b, CUDART_BASE + 0x1000 + 0x10 * s, CUDART_BASE + 0x1000, "cudaMemcpyAsync");
  }
  tb_counters(b, &counters);
  if (have_cost) tb_cost(b, &cost, cost_short ? sizeof cost - 8 : sizeof cost);
  *len = b->len;
  if (end) tb_end(b, t + 1000), *len = b->len;
  if (cut) {
    /* Cut inside the last COPY record, before the exit-time records. */
    size_t last_copy = 0;
    for (size_t r = 0; r < b->nrec; r++) {
      const pagelock_rec_hdr *h = (const pagelock_rec_hdr *)(b->p + b->offsets[r]);
      if (h->type == PAGELOCK_REC_COPY) last_copy = r;
    }
    *complete = last_copy;
    *len = b->offsets[last_copy] + PAGELOCK_REC_COPY_V1_SIZE / 2;
  }
  return 0;
}

/* ---- scenarios ----------------------------------------------------------- */

/* Call sites and allocation sites of the scenario program. */
enum { ST_LOAD = 1, ST_SAVE = 2, ST_ALLOC_BATCH = 3, ST_ALLOC_OUT = 4 };

static void sc_stacks(tb *b) {
  uint64_t load[] = {CUDART_BASE + 0x1000, APP_BASE + 0x2020, APP_BASE + 0x9000};
  uint64_t save[] = {CUDART_BASE + 0x1010, APP_BASE + 0x2120, APP_BASE + 0x9000};
  uint64_t ab[] = {LIBC_BASE + 0x500, APP_BASE + 0x3030, APP_BASE + 0x9010};
  uint64_t ao[] = {LIBC_BASE + 0x500, APP_BASE + 0x3130, APP_BASE + 0x9010};
  tb_stack(b, ST_LOAD, load, 3);
  tb_stack(b, ST_SAVE, save, 3);
  tb_stack(b, ST_ALLOC_BATCH, ab, 3);
  tb_stack(b, ST_ALLOC_OUT, ao, 3);
}

/* Modules and symbols of the scenario program, at exit. */
static void sc_exit_records(tb *b) {
  tb_module(b, APP_BASE, APP_BASE + 0x1000, APP_BASE + 0x20000, "");
  tb_module(b, CUDART_BASE, CUDART_BASE, CUDART_BASE + 0x100000,
            "/nonexistent/lib/libcudart.so.13");
  tb_module(b, LIBC_BASE, LIBC_BASE, LIBC_BASE + 0x100000, "/nonexistent/lib/libc.so.6");
  tb_symbol(b, CUDART_BASE + 0x1000, CUDART_BASE + 0x1000, "cudaMemcpyAsync");
  tb_symbol(b, CUDART_BASE + 0x1010, CUDART_BASE + 0x1010, "cudaMemcpy");
  tb_symbol(b, APP_BASE + 0x2020, APP_BASE + 0x2000, "load_batch");
  tb_symbol(b, APP_BASE + 0x2120, APP_BASE + 0x2100, "save_output");
  tb_symbol(b, APP_BASE + 0x3030, APP_BASE + 0x3000, "make_batch");
  tb_symbol(b, APP_BASE + 0x3130, APP_BASE + 0x3100, "make_output");
  tb_symbol(b, LIBC_BASE + 0x500, LIBC_BASE + 0x400, "malloc");
}

/* A COPY record of the scenario program.  Pageable ones get the load or
 * save call stack and the matching allocation stack. */
static void sc_copy(tb *b, uint64_t start, uint64_t host_ns, uint64_t bytes, int h2d, uint8_t mem,
                    uint32_t flags, uint64_t seq, uint32_t corr, uint64_t stream) {
  tb_copy_args c = {0};
  c.start_ns = start;
  c.host_ns = host_ns;
  c.bytes = bytes;
  c.dir = h2d ? PAGELOCK_DIR_H2D : PAGELOCK_DIR_D2H;
  c.host_mem = mem;
  c.flags = flags;
  c.api = h2d ? PAGELOCK_API_cuMemcpyHtoDAsync_v2 : PAGELOCK_API_cuMemcpyDtoHAsync_v2;
  c.callsite = h2d ? CUDART_BASE + 0x1000 : CUDART_BASE + 0x1010;
  if (mem == PAGELOCK_MEM_PAGEABLE) {
    c.stack_id = h2d ? ST_LOAD : ST_SAVE;
    c.alloc_stack_id = h2d ? ST_ALLOC_BATCH : ST_ALLOC_OUT;
  }
  c.seq = seq;
  c.gpu_correlation = corr;
  c.stream = stream;
  tb_copy(b, &c);
}

/* Times in the scenarios: CLOCK_MONOTONIC, starting 1 ms after the trace. */
#define T0 (1000000000ull + MS)
/* The same instant in CUPTI's clock. */
#define G(t) ((t)-CUPTI_SKEW)

/* Writes one scenario's records between PROCESS and END; returns the last
 * monotonic time used, 0 for an unknown name. */
static uint64_t mk_scenario(tb *b, const char *name) {
  const uint32_t A = PAGELOCK_COPY_ASYNC;
  const uint8_t PG = PAGELOCK_MEM_PAGEABLE, PN = PAGELOCK_MEM_PINNED;
  sc_stacks(b);
  if (!strcmp(name, "busy")) {
    tb_gpu_status(b, PAGELOCK_GPU_TIMING_BUSY, 0, 0,
                  "another CUPTI client (nsys, ncu or a profiler) is "
                  "attached; copies are still intercepted");
    for (int i = 0; i < 4; i++) sc_copy(b, T0 + i * MS, 500000, 4 * MIB, 1, PG, A, 10 + i, 0, 0);
    sc_exit_records(b);
    tb_gpu_status(b, PAGELOCK_GPU_TIMING_BUSY, 0, 0,
                  "another CUPTI client (nsys, ncu or a profiler) is "
                  "attached; copies are still intercepted");
    return T0 + 5 * MS;
  }
  tb_gpu_status(b, PAGELOCK_GPU_TIMING_ON, 0, 0, "");
  tb_clock(b, G(T0 - MS / 2), T0 - MS / 2);
  uint64_t end = 0, nrec = 0;
  if (!strcmp(name, "made-sync")) {
    tb_device(b, 0, 2, 132, "NVIDIA H200");
    tb_name(b, 1, "_Z10train_stepPfS_");
    for (int i = 0; i < 3; i++) {
      uint64_t t = T0 + (uint64_t)i * 10 * MS;
      sc_copy(b, t, 3 * MS, 16 * MIB, 1, PG, A, 100 + i, 1000 + i, 0x7);
      sc_copy(b, t + 3100000, 2000, 16 * MIB, 1, PN, A, 200 + i, 2000 + i, 0x9);
    }
    sc_copy(b, T0 + 30 * MS, 2000, 4 * MIB, 0, PN, A, 300, 3000, 0x9);
    /* CUPTI's buffer arrives later, in its own order. */
    for (int i = 2; i >= 0; i--) {
      uint64_t t = T0 + (uint64_t)i * 10 * MS;
      tb_kernel(b, 0, 7, G(t + 3 * MS), G(t + 8 * MS), 1);
      tb_gpu_copy(b, 0, 9, 1, PAGELOCK_GPU_MEM_PINNED, 16 * MIB, G(t + 3200000), G(t + 3500000),
                  2000 + i, 1);
      tb_gpu_copy(b, 0, 7, 1, PAGELOCK_GPU_MEM_PAGEABLE, 16 * MIB, G(t + 100000), G(t + 2900000),
                  1000 + i, 1);
    }
    tb_gpu_copy(b, 0, 9, 0, PAGELOCK_GPU_MEM_PINNED, 4 * MIB, G(T0 + 30 * MS + 100000),
                G(T0 + 30 * MS + 200000), 3000, 1);
    nrec = 10;
    end = T0 + 31 * MS;
  } else if (!strcmp(name, "same-stream")) {
    tb_device(b, 0, 2, 132, "NVIDIA H200");
    tb_name(b, 1, "_Z4stepPf");
    for (int i = 0; i < 10; i++)
      sc_copy(b, T0 + (uint64_t)i * 3 * MS - 5000, 2000, 8 * MIB, 1, PN, A, 100 + i, 1000 + i, 0x7);
    for (int i = 0; i < 10; i++) {
      uint64_t t = T0 + (uint64_t)i * 3 * MS;
      tb_gpu_copy(b, 0, 7, 1, PAGELOCK_GPU_MEM_PINNED, 8 * MIB, G(t), G(t + MS), 1000 + i, 1);
      tb_kernel(b, 0, 7, G(t + MS), G(t + 3 * MS), 1);
    }
    nrec = 20;
    end = T0 + 31 * MS;
  } else if (!strcmp(name, "one-engine")) {
    tb_device(b, 0, 1, 40, "Tesla T4");
    tb_name(b, 1, "_Z4stepPf");
    for (int i = 0; i < 10; i++) {
      uint64_t t = T0 + (uint64_t)i * 2 * MS;
      sc_copy(b, t - 5000, 2000, 8 * MIB, 1, PN, A, 100 + i, 1000 + i, 0x9);
      sc_copy(b, t + MS - 5000, 2000, 8 * MIB, 0, PN, A, 200 + i, 2000 + i, 0xa);
    }
    for (int i = 0; i < 10; i++) {
      uint64_t t = T0 + (uint64_t)i * 2 * MS;
      tb_gpu_copy(b, 0, 9, 1, PAGELOCK_GPU_MEM_PINNED, 8 * MIB, G(t), G(t + MS), 1000 + i, 1);
      tb_gpu_copy(b, 0, 10, 0, PAGELOCK_GPU_MEM_PINNED, 8 * MIB, G(t + MS), G(t + 2 * MS), 2000 + i,
                  1);
      tb_kernel(b, 0, 7, G(t), G(t + 2 * MS), 1);
    }
    nrec = 30;
    end = T0 + 21 * MS;
  } else if (!strcmp(name, "idle")) {
    tb_device(b, 0, 2, 132, "NVIDIA H200");
    tb_name(b, 1, "_Z4stepPf");
    for (int i = 0; i < 10; i++) {
      uint64_t t = T0 + (uint64_t)i * 6 * MS;
      tb_kernel(b, 0, 7, G(t), G(t + MS), 1);
    }
    nrec = 10;
    end = T0 + 60 * MS;
  } else if (!strcmp(name, "staged")) {
    tb_device(b, 0, 2, 132, "NVIDIA H200");
    uint32_t corr = 5000;
    for (int i = 0; i < 4; i++) {
      uint64_t t = T0 + (uint64_t)i * 10 * MS;
      /* The engine's chunk calls, linked from the API callback as they
       * are issued, before the app's call returns. */
      for (int k = 0; k < 4; k++) tb_link(b, corr + (uint32_t)(i * 4 + k), 100 + i);
      sc_copy(b, t, 6 * MS, 64 * MIB, 1, PG, A | PAGELOCK_COPY_STAGED, 100 + i, 0, 0x7);
    }
    for (int i = 0; i < 4; i++) {
      uint64_t t = T0 + (uint64_t)i * 10 * MS;
      for (int k = 0; k < 4; k++) {
        uint32_t c = corr + (uint32_t)(i * 4 + k);
        /* CUPTI's external-correlation record links it again. */
        tb_link(b, c, 100 + i);
        tb_gpu_copy(b, 0, 7, 1, PAGELOCK_GPU_MEM_PINNED, 16 * MIB,
                    G(t + MS + (uint64_t)k * 1300000), G(t + MS + (uint64_t)k * 1300000 + 300000),
                    c, 1);
      }
    }
    nrec = 16;
    end = T0 + 40 * MS;
  } else if (!strcmp(name, "staged-shared")) {
    /* As the H200 shim writes them: every chunk of a staged call under
     * the one correlation its LINK names, on the kernels' stream; the
     * program's own pinned uploads share that stream too. */
    tb_device(b, 0, 3, 132, "NVIDIA H200");
    tb_name(b, 1, "_Z4stepPf");
    for (int i = 0; i < 4; i++) {
      uint64_t t = T0 + (uint64_t)i * 10 * MS;
      if (i < 3) tb_link(b, 5000 + (uint32_t)i, 100 + i);
      sc_copy(b, t, 6 * MS, 64 * MIB, 1, PG, A | PAGELOCK_COPY_STAGED, 100 + i, 0, 0x7);
      sc_copy(b, t + 8400000, 2000, 8 * MIB, 1, PN, A, 200 + i, 2000 + i, 0x7);
    }
    for (int i = 0; i < 4; i++) {
      uint64_t t = T0 + (uint64_t)i * 10 * MS;
      for (int k = 0; k < 4; k++)
        tb_gpu_copy(b, 0, 7, 1, PAGELOCK_GPU_MEM_PINNED, 16 * MIB,
                    G(t + MS + (uint64_t)k * 1300000), G(t + MS + (uint64_t)k * 1300000 + 300000),
                    5000 + (uint32_t)i, 1);
      tb_kernel(b, 0, 7, G(t + 6 * MS), G(t + 8 * MS), 1);
      tb_gpu_copy(b, 0, 7, 1, PAGELOCK_GPU_MEM_PINNED, 8 * MIB, G(t + 8500000), G(t + 9500000),
                  2000 + (uint32_t)i, 1);
    }
    /* The last call's LINK comes after its chunks: they wait for it. */
    tb_link(b, 5003, 103);
    nrec = 24;
    end = T0 + 40 * MS;
  } else if (!strcmp(name, "sampled") || !strcmp(name, "sampled-cut")) {
    /* The shim traced in windows (GPU_SAMPLE); times from T0: a stray
     * resume first (ignored), a short and an on=2 GPU_SAMPLE (malformed),
     * tracing from the start, paused at +10 ms (61000 ops/s), resumed at
     * +15 ms, paused again at +20 ms (48000 ops/s) with no resume: that
     * pause lasts to END (+30 ms; sampled-cut: to the last copy's end,
     * +26 ms).  Window 1 has a real 5 ms idle gap (+2 .. +7 ms); the first
     * pause is as long, and the idle bits between it and the kernels
     * around it (0.5 and 0.2 ms) are under the 1 ms threshold.  Copies:
     * A and C joined;
     * B1, B2, B3 in the first pause and D in the second (no correlation,
     * by design), written before, inside and after the samples around
     * them; E and F in the windows without correlation (unjoined). */
    int cut = !strcmp(name, "sampled-cut");
    tb_device(b, 0, 2, 132, "NVIDIA H200");
    tb_name(b, 1, "_Z4stepPf");
    tb_gpu_sample(b, T0 - MS / 2, 1, 0);
    unsigned char junk[16] = {0};
    tb_raw(b, PAGELOCK_REC_GPU_SAMPLE, 16, junk, 8);
    pagelock_rec_gpu_sample bad;
    memset(&bad, 0, sizeof bad);
    bad.mono_ns = T0 + MS;
    bad.on = 2;
    tb_rec(b, PAGELOCK_REC_GPU_SAMPLE, &bad, sizeof bad, NULL, NULL);
    const uint64_t US = MS / 1000;
    sc_copy(b, T0 + 500 * US, 2000, 8 * MIB, 1, PN, A, 100, 1000, 0x9);    /* A */
    sc_copy(b, T0 + 11 * MS, 3 * MS / 10, 4 * MIB, 1, PG, A, 101, 0, 0x7); /* B1 */
    tb_gpu_sample(b, T0 + 10 * MS, 0, 61000);
    sc_copy(b, T0 + 12 * MS, 3 * MS / 10, 4 * MIB, 1, PG, A, 102, 0, 0x7); /* B2 */
    tb_gpu_sample(b, T0 + 15 * MS, 1, 0);
    sc_copy(b, T0 + 13 * MS, 3 * MS / 10, 4 * MIB, 1, PG, A, 103, 0, 0x7); /* B3 */
    sc_copy(b, T0 + 5 * MS, 2000, 8 * MIB, 1, PN, A, 104, 0, 0x9);         /* F */
    sc_copy(b, T0 + 16 * MS, 2000, 8 * MIB, 1, PN, A, 105, 1001, 0x9);     /* C */
    sc_copy(b, T0 + 18 * MS, 2000, 8 * MIB, 1, PN, A, 106, 0, 0x9);        /* E */
    tb_gpu_sample(b, T0 + 20 * MS, 0, 48000);
    sc_copy(b, T0 + 25 * MS, MS, 4 * MIB, 1, PG, A, 107, 0, 0x7); /* D */
    tb_kernel(b, 0, 7, G(T0), G(T0 + 2 * MS), 1);
    tb_gpu_copy(b, 0, 9, 1, PAGELOCK_GPU_MEM_PINNED, 8 * MIB, G(T0 + 600 * US), G(T0 + MS), 1000,
                1);
    tb_kernel(b, 0, 7, G(T0 + 7 * MS), G(T0 + 9500 * US), 1);
    tb_kernel(b, 0, 7, G(T0 + 15200 * US), G(T0 + 17500 * US), 1);
    tb_gpu_copy(b, 0, 9, 1, PAGELOCK_GPU_MEM_PINNED, 8 * MIB, G(T0 + 16100 * US),
                G(T0 + 16500 * US), 1001, 1);
    tb_kernel(b, 0, 7, G(T0 + 18 * MS), G(T0 + 19600 * US), 1);
    nrec = 6;
    end = T0 + 29 * MS;
    if (cut) {
      /* No exit records: the program died; main cuts the resume below. */
      tb_gpu_sample(b, T0 + 22 * MS, 1, 0);
      return end;
    }
  } else {
    return 0;
  }
  sc_exit_records(b);
  tb_clock(b, G(end), end);
  tb_gpu_status(b, PAGELOCK_GPU_TIMING_ON, nrec, 0, "");
  return end;
}

/* ---- the speed test ------------------------------------------------------ */

/* xorshift: deterministic and fast. */
static uint32_t big_rand(uint32_t *s) {
  uint32_t x = *s;
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  return *s = x;
}

/* N COPY + N GPU copy records (+ N/10 kernels), streamed to the file in
 * batches so memory stays flat even for a huge N. */
static int mk_big(const char *out, unsigned long n, uint64_t pid, int late) {
  FILE *f = fopen(out, "wb");
  if (!f) return -1;
  tb b = {0};
  tb_header(&b, pid, 0);
  tb_process(&b, "/opt/app/bin/app", "bighost", 0, -1);
  tb_gpu_status(&b, PAGELOCK_GPU_TIMING_ON, 0, 0, "");
  tb_device(&b, 0, 2, 132, "NVIDIA H200");
  tb_name(&b, 1, "_Z4stepPf");
  enum { SITES = 50, BATCH = 1000 };
  for (unsigned s = 0; s < SITES; s++) {
    uint64_t fr[3] = {CUDART_BASE + 0x1000 + 0x10 * s, APP_BASE + 0x2000 + 0x100 * s + 0x20,
                      APP_BASE + 0x9000};
    tb_stack(&b, s + 1, fr, 3);
  }
  uint32_t rs = 2463534242u;
  uint64_t t = 1000000000ull + 1000;
  typedef struct {
    uint64_t s, e, bytes;
    uint32_t corr;
    int pageable, h2d;
  } op;
  op *all = malloc((late ? n : BATCH) * sizeof *all);
  if (!all) {
    fclose(f);
    return -1;
  }
  for (unsigned long i = 0; i < n; i += BATCH) {
    size_t k = n - i < BATCH ? n - i : BATCH;
    op *ops = late ? all + i : all;
    for (size_t j = 0; j < k; j++) {
      unsigned long id = i + j;
      int pageable = id % 4 != 3;
      int h2d = !(id & 1);
      uint64_t bytes = (uint64_t)(1 + big_rand(&rs) % 16) << 20;
      /* pageable ~8 GB/s and blocking; pinned ~50 GB/s and not */
      uint64_t gpu = bytes / (pageable ? 8 : 50) + big_rand(&rs) % 20000;
      tb_copy_args c = {0};
      c.start_ns = t;
      c.bytes = bytes;
      c.callsite = CUDART_BASE + 0x1000 + 0x10 * (id % SITES);
      c.stack_id = (uint32_t)(id % SITES) + 1;
      c.api = PAGELOCK_API_cuMemcpyHtoDAsync_v2;
      c.dir = h2d ? PAGELOCK_DIR_H2D : PAGELOCK_DIR_D2H;
      c.flags = PAGELOCK_COPY_ASYNC;
      c.host_mem = pageable ? PAGELOCK_MEM_PAGEABLE : PAGELOCK_MEM_PINNED;
      c.host_ns = pageable ? gpu + 5000 : 2000;
      c.seq = id + 1;
      c.gpu_correlation = (uint32_t)(id + 1);
      tb_copy(&b, &c);
      ops[j].s = t + 1000;
      ops[j].e = t + 1000 + gpu;
      ops[j].bytes = bytes;
      ops[j].corr = (uint32_t)(id + 1);
      ops[j].pageable = pageable;
      ops[j].h2d = h2d;
      t += c.host_ns + 3000;
    }
    if (late && i + k < n) goto flush; /* ops all go out after the last COPY */
    if (late) {
      ops = all;
      k = n;
    }
    /* CUPTI's buffer: shuffled within the batch. */
    for (size_t j = k; j > 1; j--) {
      size_t r = big_rand(&rs) % j;
      op tmp = ops[j - 1];
      ops[j - 1] = ops[r];
      ops[r] = tmp;
    }
    for (size_t j = 0; j < k; j++) {
      tb_gpu_copy(&b, 0, ops[j].pageable ? 7 : 9, ops[j].h2d,
                  ops[j].pageable ? PAGELOCK_GPU_MEM_PAGEABLE : PAGELOCK_GPU_MEM_PINNED,
                  ops[j].bytes, ops[j].s, ops[j].e, ops[j].corr, 1);
      if (j % 10 == 0) tb_kernel(&b, 0, 7, ops[j].s, ops[j].e + 500000, 1);
      if (b.len > (8u << 20)) { /* keep the builder small */
        if (fwrite(b.p, 1, b.len, f) != b.len) {
          fclose(f);
          free(all);
          return -1;
        }
        b.len = 0;
        b.nrec = 0;
      }
    }
  flush:
    if (fwrite(b.p, 1, b.len, f) != b.len) {
      fclose(f);
      free(all);
      return -1;
    }
    /* Keep the builder small: drop what is on disk. */
    b.len = 0;
    b.nrec = 0;
  }
  for (unsigned s = 0; s < SITES; s++) {
    char name[64];
    snprintf(name, sizeof name, "step_%u", s);
    tb_symbol(&b, APP_BASE + 0x2000 + 0x100 * s + 0x20, APP_BASE + 0x2000 + 0x100 * s, name);
  }
  for (unsigned s = 0; s < SITES; s++)
    tb_symbol(&b, CUDART_BASE + 0x1000 + 0x10 * s, CUDART_BASE + 0x1000, "cudaMemcpyAsync");
  tb_module(&b, APP_BASE, APP_BASE + 0x1000, APP_BASE + 0x20000, "");
  tb_module(&b, CUDART_BASE, CUDART_BASE, CUDART_BASE + 0x100000,
            "/nonexistent/lib/libcudart.so.13");
  tb_gpu_status(&b, PAGELOCK_GPU_TIMING_ON, n + n / 10, 0, "");
  tb_end(&b, t + 1000);
  int rc = fwrite(b.p, 1, b.len, f) == b.len ? 0 : -1;
  if (fclose(f) != 0) rc = -1;
  tb_free(&b);
  free(all);
  printf("records=%lu\n", 2 * n + n / 10);
  return rc;
}

/* ---- hostile input ------------------------------------------------------- */

/* N COPY records and N GPU copy records that repeat what a writer keeps
 * distinct, so that any writer matching or grouping them in O(n) per record
 * shows it: every call has correlation 1 and gpu_correlation 1 and every
 * GPU copy correlation 1; LINK records (one per two copies) all name
 * correlation 2 with copy_seq values no call has, and one GPU copy in ten
 * has correlation 2; each GPU record and each call is on its own device;
 * host threads, streams, STACK ids, kernel NAMEs and NOTEs repeat. */
static int mk_hostile(const char *out, unsigned long n, uint64_t pid) {
  FILE *f = fopen(out, "wb");
  if (!f) return -1;
  tb b = {0};
  tb_header(&b, pid, 0);
  tb_process(&b, "/opt/app/bin/hostile", "host", 0, -1);
  tb_gpu_status(&b, PAGELOCK_GPU_TIMING_ON, 0, 0, "");
  for (uint32_t id = 1; id <= 1000; id++) {
    char name[64];
    snprintf(name, sizeof name, "_Z6kernelILi%uEEvv", id);
    tb_name(&b, id, name);
  }
  uint64_t t = 1000000000ull + 1000, recs = 0;
  for (unsigned long i = 0; i < n; i++) {
    if (i % 1000 == 0) {
      /* the same stack ids and notes again and again */
      uint64_t fr[2] = {APP_BASE + 0x2000 + 0x10 * (i % 7), APP_BASE + 0x9000};
      tb_stack(&b, (uint32_t)(i / 1000 % 50) + 1, fr, 2);
      char note[64];
      snprintf(note, sizeof note, "hostile note %lu", i / 1000 % 100);
      tb_note(&b, PAGELOCK_NOTE_INFO, note);
    }
    pagelock_rec_copy c;
    memset(&c, 0, sizeof c);
    c.start_ns = t;
    c.host_ns = 5000;
    c.bytes = 1u << 20;
    c.stream = i % 64;
    c.callsite = APP_BASE + 0x2000 + 0x10 * (i % 7);
    c.correlation = 1;
    c.tid = (uint32_t)(i % 4096) + 1;
    c.stack_id = (uint32_t)(i % 50) + 1;
    c.flags = PAGELOCK_COPY_ASYNC;
    c.device = (int32_t)(i % 2000000);
    c.api = PAGELOCK_API_cuMemcpyHtoDAsync_v2;
    c.dir = PAGELOCK_DIR_H2D;
    c.host_mem = PAGELOCK_MEM_PAGEABLE;
    c.src_mem = PAGELOCK_MEM_PAGEABLE;
    c.dst_mem = PAGELOCK_MEM_DEVICE;
    c.gpu_correlation = 1;
    tb_rec(&b, PAGELOCK_REC_COPY, &c, sizeof c, NULL, NULL);
    if (i % 2 == 0) tb_link(&b, 2, 0x100000000ull + i);
    tb_gpu_args g = {0};
    g.kind = PAGELOCK_GPU_MEMCPY;
    g.copy_kind = PAGELOCK_GPU_COPY_HTOD;
    g.src_kind = PAGELOCK_GPU_MEM_PAGEABLE;
    g.dst_kind = PAGELOCK_GPU_MEM_DEVICE;
    g.bytes = 1u << 20;
    g.start_ns = t + 100;
    g.end_ns = t + 4000;
    g.correlation = i % 10 == 9 ? 2 : 1;
    g.device = (uint32_t)i;
    g.stream = (uint32_t)(i % 1000);
    g.flags = PAGELOCK_GPU_ASYNC;
    tb_gpu(&b, &g);
    if (i % 10 == 0) tb_kernel(&b, (uint32_t)(i % 8), 7, t, t + 20000, (uint32_t)(i % 1000) + 1);
    recs += 2 + (i % 2 == 0) + (i % 10 == 0) + 2 * (i % 1000 == 0);
    t += 6000;
    if (b.len > (8u << 20)) {
      if (fwrite(b.p, 1, b.len, f) != b.len) goto fail;
      b.len = 0;
      b.nrec = 0;
    }
  }
  tb_gpu_status(&b, PAGELOCK_GPU_TIMING_ON, n + n / 10, 0, "");
  tb_end(&b, t + 1000);
  if (fwrite(b.p, 1, b.len, f) != b.len) goto fail;
  tb_free(&b);
  if (fclose(f) != 0) return -1;
  printf("records=%llu\n", (unsigned long long)(recs + 1000 + 4));
  return 0;
fail:
  tb_free(&b);
  fclose(f);
  return -1;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr,
            "usage: mktrace OUT [--copies N] [--sites N] [--no-end] "
            "[--cut-mid-record] [--simulated] [--mode M] [--pid P] [--rank R] "
            "[--host H] [--v1 | --v3] [--scenario NAME] [--big N] [--hostile N] "
            "[--checksums K] [--flags X] [--evil-names] [--module PATH] [--warning TEXT] "
            "[--copy N:DIR:MEM:ROUTE:WHY:BYTES:NS[:RUN:TIMED[:AT]]] [--counters NAME=V,...] "
            "[--cost NAME=V,... [--cost-short]]\n");
    return 2;
  }
  const char *out = argv[1], *scenario = NULL, *host = "testhost";
  unsigned long copies = 100, sites = 3, pid = 4242, mode = 0, big = 0, hostile = 0, checksums = 0,
                flags = 0;
  long rank = -1;
  int end = 1, cut = 0, simulated = 0, v1 = 0, v3 = 0, late = 0;
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : "0";
    if (!strcmp(a, "--copies"))
      copies = strtoul(v, NULL, 10), i++;
    else if (!strcmp(a, "--sites"))
      sites = strtoul(v, NULL, 10), i++;
    else if (!strcmp(a, "--pid"))
      pid = strtoul(v, NULL, 10), i++;
    else if (!strcmp(a, "--mode"))
      mode = strtoul(v, NULL, 10), i++;
    else if (!strcmp(a, "--rank"))
      rank = strtol(v, NULL, 10), i++;
    else if (!strcmp(a, "--host"))
      host = v, i++;
    else if (!strcmp(a, "--scenario"))
      scenario = v, i++;
    else if (!strcmp(a, "--big"))
      big = strtoul(v, NULL, 10), i++;
    else if (!strcmp(a, "--hostile"))
      hostile = strtoul(v, NULL, 10), i++;
    else if (!strcmp(a, "--checksums"))
      checksums = strtoul(v, NULL, 10), i++;
    else if (!strcmp(a, "--flags"))
      flags = strtoul(v, NULL, 0), i++;
    else if (!strcmp(a, "--evil-names"))
      evil_names = 1;
    else if (!strcmp(a, "--module"))
      extra_module = v, i++;
    else if (!strcmp(a, "--warning"))
      warning_note = v, i++;
    else if (!strcmp(a, "--copy")) {
      if (parse_copy(v)) {
        fprintf(stderr,
                "mktrace: bad --copy '%s' (N:DIR:MEM:ROUTE:WHY:BYTES:NS[:RUN:TIMED[:AT]])\n", v);
        return 2;
      }
      i++;
    } else if (!strcmp(a, "--cost")) {
      if (parse_cost(v)) {
        fprintf(stderr, "mktrace: bad --cost '%s' (NAME=V,...)\n", v);
        return 2;
      }
      i++;
    } else if (!strcmp(a, "--cost-short")) {
      cost_short = 1;
    } else if (!strcmp(a, "--counters")) {
      if (parse_counters(v)) {
        fprintf(stderr, "mktrace: bad --counters '%s' (NAME=V,...)\n", v);
        return 2;
      }
      i++;
    } else if (!strcmp(a, "--no-end"))
      end = 0;
    else if (!strcmp(a, "--cut-mid-record"))
      end = 0, cut = 1;
    else if (!strcmp(a, "--simulated"))
      simulated = 1;
    else if (!strcmp(a, "--v1"))
      v1 = 1;
    else if (!strcmp(a, "--v3"))
      v3 = 1;
    else if (!strcmp(a, "--late"))
      late = 1;
    else {
      fprintf(stderr, "mktrace: unknown option %s\n", a);
      return 2;
    }
  }
  if (hostile) {
    if (mk_hostile(out, hostile, pid) != 0) {
      perror(out);
      return 1;
    }
    return 0;
  }
  if (big) {
    if (mk_big(out, big, pid, late) != 0) {
      perror(out);
      return 1;
    }
    return 0;
  }
  if (checksums && (cut || v1)) {
    fprintf(stderr,
            "mktrace: --checksums needs a trace of version 3 or later "
            "written whole (cut it afterwards)\n");
    return 2;
  }
  tb b = {0};
  flags |= simulated ? PAGELOCK_FILE_SIMULATED : 0;
  const char *exe = evil_names ? "/opt/" EVIL "/app" : "/opt/app/bin/app";
  if (evil_names) host = "host" EVIL;
  if (v1 || v3)
    tb_header_v(&b, v1 ? 1 : 3, sizeof(pagelock_file_header), pid, (uint32_t)flags);
  else
    tb_header(&b, pid, (uint32_t)flags);
  size_t len = 0, complete = 0;
  if (scenario) {
    if (!strcmp(scenario, "staged") || !strcmp(scenario, "staged-shared"))
      mode = PAGELOCK_MODE_STAGE;
    tb_process(&b, exe, host, (uint32_t)mode, (int32_t)rank);
    uint64_t t = mk_scenario(&b, scenario);
    if (!t) {
      fprintf(stderr, "mktrace: unknown scenario %s\n", scenario);
      return 2;
    }
    if (!strcmp(scenario, "sampled-cut")) {
      /* Cut inside the last record, the resume at +22 ms. */
      len = b.len - 8;
      complete = b.nrec - 1;
      cut = 1;
    } else {
      tb_end(&b, t + MS);
      len = b.len;
    }
  } else {
    tb_process(&b, exe, host, (uint32_t)mode, (int32_t)rank);
    mk_classic(&b, copies, sites, end, cut, &len, &complete, v1, v3);
  }
  if (checksums) {
    tb c;
    size_t nb = 0;
    uint64_t *starts = malloc((b.nrec / checksums + 2) * sizeof *starts);
    if (!starts) return 1;
    tb_checksum(&b, checksums, &c, starts, &nb);
    tb_free(&b);
    b = c;
    len = b.len;
    printf("blocks=");
    for (size_t k = 0; k < nb; k++) printf("%s%llu", k ? " " : "", (unsigned long long)starts[k]);
    printf("\n");
    free(starts);
  }
  printf("records=%zu\n", cut ? complete : b.nrec);
  if (tb_write(&b, len, out) != 0) {
    perror(out);
    return 1;
  }
  tb_free(&b);
  return 0;
}
