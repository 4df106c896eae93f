/* mktrace.c - writes a synthetic pagelock trace for the CLI tests.
 *
 * usage: mktrace OUT [--copies N] [--sites N] [--no-end] [--cut-mid-record]
 *                    [--simulated] [--mode M] [--pid P]
 *
 * The trace looks like one written by the shim for a program "app" whose
 * copies go through a dynamically linked libcudart: PROCESS, NOTE, STACK
 * records before first use, COPY records cycling over call sites and host
 * memory kinds, then MODULE, SYMBOL, COUNTERS and END at exit.
 * --cut-mid-record drops END and cuts the file inside the last COPY record;
 * mktrace prints "records=N", the number of whole records in the file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace_builder.h"

#define APP_BASE 0x555555554000ull
#define CUDART_BASE 0x7f0000000000ull

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: mktrace OUT [--copies N] [--sites N] [--no-end] "
            "[--cut-mid-record] [--simulated] [--mode M] [--pid P]\n");
    return 2;
  }
  const char *out = argv[1];
  unsigned long copies = 100, sites = 3, pid = 4242, mode = 0;
  int end = 1, cut = 0, simulated = 0;
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : "0";
    if (!strcmp(a, "--copies")) copies = strtoul(v, NULL, 10), i++;
    else if (!strcmp(a, "--sites")) sites = strtoul(v, NULL, 10), i++;
    else if (!strcmp(a, "--pid")) pid = strtoul(v, NULL, 10), i++;
    else if (!strcmp(a, "--mode")) mode = strtoul(v, NULL, 10), i++;
    else if (!strcmp(a, "--no-end")) end = 0;
    else if (!strcmp(a, "--cut-mid-record")) end = 0, cut = 1;
    else if (!strcmp(a, "--simulated")) simulated = 1;
    else {
      fprintf(stderr, "mktrace: unknown option %s\n", a);
      return 2;
    }
  }
  if (sites == 0 || sites > 10000) sites = 1;
  tb b = {0};
  tb_header(&b, pid, simulated ? PAGELOCK_FILE_SIMULATED : 0);
  tb_process(&b, "/opt/app/bin/app", "testhost", (uint32_t)mode, -1);
  tb_note(&b, PAGELOCK_NOTE_INFO, "synthetic trace written by mktrace");
  for (unsigned long s = 0; s < sites; s++) {
    /* innermost: cudart's cudaMemcpyAsync, then the user's function */
    uint64_t fr[3] = {CUDART_BASE + 0x1000 + 0x10 * s,
                      APP_BASE + 0x2000 + 0x100 * s + 0x20,
                      APP_BASE + 0x9000};
    tb_stack(&b, (uint32_t)s + 1, fr, 3);
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
    tb_copy(&b, &c);
    t += c.host_ns + 500;
  }
  tb_module(&b, APP_BASE, APP_BASE + 0x1000, APP_BASE + 0x20000, "");
  tb_module(&b, CUDART_BASE, CUDART_BASE, CUDART_BASE + 0x100000,
            "/nonexistent/lib/libcudart.so.13");
  for (unsigned long s = 0; s < sites; s++) {
    char name[64];
    snprintf(name, sizeof name, "step_%lu", s);
    tb_symbol(&b, APP_BASE + 0x2000 + 0x100 * s + 0x20,
              APP_BASE + 0x2000 + 0x100 * s, name);
    tb_symbol(&b, CUDART_BASE + 0x1000 + 0x10 * s, CUDART_BASE + 0x1000,
              "cudaMemcpyAsync");
  }
  pagelock_rec_counters ctr;
  memset(&ctr, 0, sizeof ctr);
  tb_counters(&b, &ctr);
  size_t len = b.len, complete = 0;
  if (end) tb_end(&b, t + 1000), len = b.len;
  if (cut) {
    /* Cut inside the last COPY record, before the exit-time records. */
    size_t last_copy = 0;
    for (size_t r = 0; r < b.nrec; r++) {
      const pagelock_rec_hdr *h = (const pagelock_rec_hdr *)(b.p + b.offsets[r]);
      if (h->type == PAGELOCK_REC_COPY) last_copy = r;
    }
    complete = last_copy;
    len = b.offsets[last_copy] + sizeof(pagelock_rec_copy) / 2;
  }
  printf("records=%zu\n", cut ? complete : b.nrec);
  if (tb_write(&b, len, out) != 0) {
    perror(out);
    return 1;
  }
  tb_free(&b);
  return 0;
}
