/* mkgputrace.c - writes a synthetic version-2 trace (copy calls plus the
 * CUPTI records the shim adds: GPU, NAME, LINK, CLOCK, DEVICE, GPU_STATUS)
 * with round numbers, for the CLI tests of compare, html and chrome.
 *
 * usage: mkgputrace OUT SCENARIO [--pid P] [--rank R] [--iters N]
 *
 * Scenarios (one thread, tid 100, device 0; N iterations, default 4):
 *   before  pageable: each iteration an H2D call of 80e6 bytes blocking
 *           10.2 ms whose GPU copy takes 10 ms (8 GB/s), then a 10 ms kernel,
 *           then a D2H call of 40e6 bytes blocking 5.2 ms, GPU 5 ms (8 GB/s);
 *           everything on CUPTI stream 7, nothing overlaps.
 *   after   pinned: the same copies take 1.6 ms and 0.8 ms on the GPU
 *           (50 GB/s) on stream 8, each call blocks 10 us, and a 10 ms
 *           kernel on stream 7 covers both copies.
 *   staged  stage mode: one pageable H2D call of 64e6 bytes moved as four
 *           16e6-byte pinned chunks (shim calls tied to the app's call by
 *           LINK records, each written twice as the shim does), a kernel.
 *
 * GPU times are written in a CUPTI clock 5 s ahead of CLOCK_MONOTONIC, with
 * a CLOCK record saying so.  One kernel per trace is named with characters
 * HTML and JSON must escape and an invalid UTF-8 byte; the program path
 * has some too. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace_builder.h"

#define MS 1000000ull
#define US 1000ull
#define CUPTI_AHEAD (5000 * MS)
#define T0 (1000 * MS + 1 * MS) /* the header says mono 1000 ms at open */

/* A COPY record of thread 100 on device 0. */
static void mg_copy(tb *b, uint64_t start, uint64_t host_ns, uint64_t bytes, uint8_t dir,
                    uint8_t mem, uint32_t flags, uint64_t stream, uint64_t seq, uint32_t gpu_corr) {
  pagelock_rec_copy r;
  memset(&r, 0, sizeof r);
  r.start_ns = start;
  r.host_ns = host_ns;
  r.bytes = bytes;
  r.stream = stream;
  r.host_ptr = 0x7f1000000000ull;
  r.callsite = 0x555555556000ull;
  r.correlation = seq;
  r.tid = 100;
  r.flags = flags;
  r.device = 0;
  r.api = dir == PAGELOCK_DIR_H2D ? PAGELOCK_API_cuMemcpyHtoDAsync_v2
                                  : PAGELOCK_API_cuMemcpyDtoHAsync_v2;
  r.dir = dir;
  r.host_mem = mem;
  r.src_mem = dir == PAGELOCK_DIR_H2D ? mem : PAGELOCK_MEM_DEVICE;
  r.dst_mem = dir == PAGELOCK_DIR_D2H ? mem : PAGELOCK_MEM_DEVICE;
  r.gpu_correlation = gpu_corr;
  tb_rec(b, PAGELOCK_REC_COPY, &r, sizeof r, NULL, NULL);
}

/* A GPU record with times given in CLOCK_MONOTONIC (written CUPTI-side). */
static void mg_gpu(tb *b, uint8_t kind, uint64_t start, uint64_t end, uint64_t bytes, uint32_t corr,
                   uint32_t stream, uint8_t copy_kind, uint8_t src, uint8_t dst, uint32_t name_id) {
  pagelock_rec_gpu g;
  memset(&g, 0, sizeof g);
  g.start_ns = start + CUPTI_AHEAD;
  g.end_ns = end + CUPTI_AHEAD;
  g.bytes = bytes;
  g.correlation = corr;
  g.stream = stream;
  g.device = 0;
  g.context = 1;
  g.name_id = name_id;
  g.flags = kind == PAGELOCK_GPU_MEMCPY ? PAGELOCK_GPU_ASYNC : 0;
  g.kind = kind;
  g.copy_kind = copy_kind;
  g.src_kind = src;
  g.dst_kind = dst;
  tb_rec(b, PAGELOCK_REC_GPU, &g, sizeof g, NULL, NULL);
}

/* A NAME record (kernel name). */
static void mg_name(tb *b, uint32_t id, const char *name) {
  pagelock_rec_name n;
  memset(&n, 0, sizeof n);
  n.id = id;
  tb_rec(b, PAGELOCK_REC_NAME, &n, sizeof n, name, NULL);
}

/* A LINK record: the shim's GPU op corr belongs to the app call seq. */
static void mg_link(tb *b, uint32_t corr, uint64_t seq) {
  pagelock_rec_link l;
  memset(&l, 0, sizeof l);
  l.correlation = corr;
  l.copy_seq = seq;
  tb_rec(b, PAGELOCK_REC_LINK, &l, sizeof l, NULL, NULL);
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr,
            "usage: mkgputrace OUT before|after|staged [--pid P] "
            "[--rank R] [--iters N]\n");
    return 2;
  }
  const char *out = argv[1], *scen = argv[2];
  unsigned long pid = 4242, iters = 4;
  long rank = -1;
  for (int i = 3; i < argc; i++) {
    const char *v = i + 1 < argc ? argv[i + 1] : "0";
    if (!strcmp(argv[i], "--pid"))
      pid = strtoul(v, NULL, 10), i++;
    else if (!strcmp(argv[i], "--rank"))
      rank = strtol(v, NULL, 10), i++;
    else if (!strcmp(argv[i], "--iters"))
      iters = strtoul(v, NULL, 10), i++;
    else {
      fprintf(stderr, "mkgputrace: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  int before = !strcmp(scen, "before"), after = !strcmp(scen, "after"),
      staged = !strcmp(scen, "staged");
  if (!before && !after && !staged) {
    fprintf(stderr, "mkgputrace: unknown scenario %s\n", scen);
    return 2;
  }
  tb b = {0};
  tb_header(&b, pid, 0);
  tb_process(&b, "/opt/app/bin/app<&>\"", "gpuhost",
             staged ? PAGELOCK_MODE_STAGE : PAGELOCK_MODE_OBSERVE, (int32_t)rank);
  {
    pagelock_rec_clock c;
    memset(&c, 0, sizeof c);
    c.cupti_ns = 1000 * MS + CUPTI_AHEAD;
    c.mono_ns = 1000 * MS;
    tb_rec(&b, PAGELOCK_REC_CLOCK, &c, sizeof c, NULL, NULL);
  }
  {
    pagelock_rec_device d;
    memset(&d, 0, sizeof d);
    d.device = 0;
    d.copy_engines = 2;
    d.sm_count = 132;
    d.pci_gen = 5;
    tb_rec(&b, PAGELOCK_REC_DEVICE, &d, sizeof d, "Test GPU <H200>", NULL);
  }
  {
    pagelock_rec_gpu_status s;
    memset(&s, 0, sizeof s);
    s.status = PAGELOCK_GPU_TIMING_ON;
    s.cupti_version = 26;
    tb_rec(&b, PAGELOCK_REC_GPU_STATUS, &s, sizeof s, "", NULL);
  }
  mg_name(&b, 1, "_Z4stepPfi");
  mg_name(&b, 2, "void evil<\"&'>(float*) \xff</title><script>x()</script>");

  uint64_t t = T0, seq = 1;
  uint32_t corr = 1000;
  if (staged) {
    /* One app call, four chunks issued by the shim (its own calls, own
     * correlation ids), LINKed to the app call's seq. */
    uint64_t call_seq = seq++;
    for (uint32_t k = 0; k < 4; k++) {
      mg_link(&b, 2000 + k, call_seq);
      mg_link(&b, 2000 + k, call_seq); /* the shim writes each twice */
    }
    mg_copy(&b, t, 8 * MS, 64000000, PAGELOCK_DIR_H2D, PAGELOCK_MEM_PAGEABLE,
            PAGELOCK_COPY_ASYNC | PAGELOCK_COPY_STAGED, 0x10, call_seq, 0);
    for (uint32_t k = 0; k < 4; k++)
      mg_gpu(&b, PAGELOCK_GPU_MEMCPY, t + 1 * MS + k * 2 * MS, t + 1 * MS + k * 2 * MS + 320 * US,
             16000000, 2000 + k, 8, PAGELOCK_GPU_COPY_HTOD, PAGELOCK_GPU_MEM_PINNED,
             PAGELOCK_GPU_MEM_DEVICE, 0);
    mg_gpu(&b, PAGELOCK_GPU_KERNEL, t, t + 9 * MS, 0, corr++, 7, 0, 0, 0, 2);
    t += 10 * MS;
  }
  for (unsigned long i = 0; !staged && i < iters; i++) {
    uint32_t name = i + 1 == iters ? 2 : 1;
    if (before) {
      uint32_t c1 = corr++, c2 = corr++, ck = corr++;
      mg_copy(&b, t, 10200 * US, 80000000, PAGELOCK_DIR_H2D, PAGELOCK_MEM_PAGEABLE,
              PAGELOCK_COPY_ASYNC, 0x10, seq++, c1);
      mg_copy(&b, t + 20300 * US, 5200 * US, 40000000, PAGELOCK_DIR_D2H, PAGELOCK_MEM_PAGEABLE,
              PAGELOCK_COPY_ASYNC, 0x10, seq++, c2);
      mg_gpu(&b, PAGELOCK_GPU_MEMCPY, t + 100 * US, t + 10100 * US, 80000000, c1, 7,
             PAGELOCK_GPU_COPY_HTOD, PAGELOCK_GPU_MEM_PAGEABLE, PAGELOCK_GPU_MEM_DEVICE, 0);
      mg_gpu(&b, PAGELOCK_GPU_KERNEL, t + 10200 * US, t + 20200 * US, 0, ck, 7, 0, 0, 0, name);
      mg_gpu(&b, PAGELOCK_GPU_MEMCPY, t + 20400 * US, t + 25400 * US, 40000000, c2, 7,
             PAGELOCK_GPU_COPY_DTOH, PAGELOCK_GPU_MEM_DEVICE, PAGELOCK_GPU_MEM_PAGEABLE, 0);
      t += 30 * MS;
    } else {
      uint32_t c1 = corr++, c2 = corr++, ck = corr++;
      mg_copy(&b, t, 10 * US, 80000000, PAGELOCK_DIR_H2D, PAGELOCK_MEM_PINNED, PAGELOCK_COPY_ASYNC,
              0x20, seq++, c1);
      mg_copy(&b, t + 2 * MS, 10 * US, 40000000, PAGELOCK_DIR_D2H, PAGELOCK_MEM_PINNED,
              PAGELOCK_COPY_ASYNC, 0x20, seq++, c2);
      mg_gpu(&b, PAGELOCK_GPU_KERNEL, t, t + 10 * MS, 0, ck, 7, 0, 0, 0, name);
      mg_gpu(&b, PAGELOCK_GPU_MEMCPY, t + 50 * US, t + 1650 * US, 80000000, c1, 8,
             PAGELOCK_GPU_COPY_HTOD, PAGELOCK_GPU_MEM_PINNED, PAGELOCK_GPU_MEM_DEVICE, 0);
      mg_gpu(&b, PAGELOCK_GPU_MEMCPY, t + 2050 * US, t + 2850 * US, 40000000, c2, 8,
             PAGELOCK_GPU_COPY_DTOH, PAGELOCK_GPU_MEM_DEVICE, PAGELOCK_GPU_MEM_PINNED, 0);
      t += 10500 * US;
    }
  }
  {
    pagelock_rec_gpu_status s;
    memset(&s, 0, sizeof s);
    s.status = PAGELOCK_GPU_TIMING_ON;
    s.cupti_version = 26;
    s.records = 3 * iters;
    s.buffers = 1;
    tb_rec(&b, PAGELOCK_REC_GPU_STATUS, &s, sizeof s, "", NULL);
  }
  pagelock_rec_counters ctr;
  memset(&ctr, 0, sizeof ctr);
  if (staged) ctr.bytes_staged = 64000000;
  tb_counters(&b, &ctr);
  tb_end(&b, t + 1 * MS);
  if (tb_write(&b, b.len, out) != 0) {
    perror(out);
    return 1;
  }
  tb_free(&b);
  return 0;
}
