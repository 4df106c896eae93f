/* reader_fixture.c - what the reader and report tests share
 * (reader_fixture.h). */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "reader_fixture.h"

int load_len(plr_trace *t, const tb *b, size_t len, char *msg, size_t msglen) {
  FILE *f = tmpfile();
  assert_non_null(f);
  if (len) assert_int_equal(fwrite(b->p, 1, len, f), len);
  rewind(f);
  return plr_trace_load_stream(t, f, "mem.trace", msg, msglen);
}

int load(plr_trace *t, const tb *b) {
  char msg[1024];
  int rc = load_len(t, b, b->len, msg, sizeof msg);
  if (rc) fprintf(stderr, "load failed: %s\n", msg);
  return rc;
}

void copy(tb *b, uint8_t dir, uint8_t mem, uint32_t flags, uint64_t bytes, uint64_t host_ns,
          uint32_t stack, uint64_t callsite, uint32_t alloc_stack) {
  tb_copy_args c = {0};
  c.start_ns = 1000000000ull + 1000 * (b->nrec + 1);
  c.host_ns = host_ns;
  c.bytes = bytes;
  c.callsite = callsite;
  c.stack_id = stack;
  c.alloc_stack_id = alloc_stack;
  c.flags = flags;
  c.dir = dir;
  c.host_mem = mem;
  tb_copy(b, &c);
}

void build_reference(tb *b, int with_end) {
  tb_header(b, 777, PAGELOCK_FILE_SIMULATED);
  tb_process(b, "/opt/app/bin/app", "node1", PAGELOCK_MODE_OBSERVE, 3);
  tb_note(b, PAGELOCK_NOTE_WARNING, "CUPTI unavailable: no GPU timing");
  /* stack 1: cudart -> load_batch (+0x40) -> main */
  uint64_t s1[] = {CUDART + 0x500, APP + 0x1140, APP + 0x3010};
  /* stack 2: cudart -> load_batch (+0x40) -> other caller: same site */
  uint64_t s2[] = {CUDART + 0x500, APP + 0x1140, APP + 0x3550};
  /* stack 3: static cudart in the app (cudaMemcpy) -> save_result */
  uint64_t s3[] = {APP + 0x8010, APP + 0x2208, APP + 0x3020};
  /* stack 4 (allocation): shim malloc -> libc malloc -> make_buffer */
  uint64_t s4[] = {SHIM + 0x100, LIBC + 0x9000, APP + 0x4030};
  tb_stack(b, 1, s1, 3);
  tb_stack(b, 2, s2, 3);
  tb_stack(b, 3, s3, 3);
  tb_stack(b, 4, s4, 3);
  const uint32_t A = PAGELOCK_COPY_ASYNC;
  /* site load_batch: 3 pageable async H2D, 1 MiB, 1 ms each */
  copy(b, PAGELOCK_DIR_H2D, PAGELOCK_MEM_PAGEABLE, A, 1 << 20, 1000000, 1, CUDART + 0x500, 4);
  copy(b, PAGELOCK_DIR_H2D, PAGELOCK_MEM_PAGEABLE, A, 1 << 20, 1000000, 2, CUDART + 0x500, 4);
  copy(b, PAGELOCK_DIR_H2D, PAGELOCK_MEM_PAGEABLE, A, 1 << 20, 1000000, 1, CUDART + 0x500, 0);
  /* site save_result: 2 pageable sync D2H, 4 MiB, 5 ms each */
  copy(b, PAGELOCK_DIR_D2H, PAGELOCK_MEM_PAGEABLE, 0, 4 << 20, 5000000, 3, APP + 0x8010, 4);
  copy(b, PAGELOCK_DIR_D2H, PAGELOCK_MEM_PAGEABLE, 0, 4 << 20, 5000000, 3, APP + 0x8010, 0);
  /* pinned async H2D from load_batch: not in the pageable tables */
  copy(b, PAGELOCK_DIR_H2D, PAGELOCK_MEM_PINNED, A, 1 << 20, 3000, 1, CUDART + 0x500, 0);
  /* a D2D and a failed registered copy */
  copy(b, PAGELOCK_DIR_D2D, PAGELOCK_MEM_DEVICE, A, 4096, 2000, 0, 0, 0);
  tb_copy_args c = {0};
  c.start_ns = 1000000000ull + 99000;
  c.host_ns = 1500;
  c.bytes = 512;
  c.dir = PAGELOCK_DIR_D2H;
  c.host_mem = PAGELOCK_MEM_REGISTERED;
  c.result = 1;
  tb_copy(b, &c);
  tb_module(b, APP, APP + 0x1000, APP + 0x10000, "");
  tb_module(b, CUDART, CUDART, CUDART + 0x100000, "/nonexistent/libcudart.so.13");
  tb_module(b, LIBC, LIBC, LIBC + 0x100000, "/nonexistent/libc.so.6");
  tb_module(b, SHIM, SHIM, SHIM + 0x10000, "/nonexistent/libpagelock.so");
  tb_symbol(b, CUDART + 0x500, CUDART + 0x400, "cudaMemcpyAsync");
  tb_symbol(b, APP + 0x1140, APP + 0x1100, "load_batch");
  tb_symbol(b, APP + 0x8010, APP + 0x8000, "cudaMemcpy");
  tb_symbol(b, APP + 0x2208, APP + 0x2200, "save_result");
  tb_symbol(b, LIBC + 0x9000, LIBC + 0x8f00, "malloc");
  tb_symbol(b, APP + 0x4030, APP + 0x4000, "make_buffer");
  pagelock_rec_counters ctr;
  memset(&ctr, 0, sizeof ctr);
  tb_counters(b, &ctr);
  if (with_end) tb_end(b, 1000000000ull + 50000000ull);
}

void analyze(plr_process *p) { assert_int_equal(plr_process_analyze(p, 0), 0); }

char *report_text(const plr_process *p, size_t n) {
  char *s = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&s, &len);
  assert_non_null(f);
  plr_report_text(f, p, n);
  fclose(f);
  return s;
}

char *report_json(const plr_process *p, size_t n) {
  char *s = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&s, &len);
  assert_non_null(f);
  plr_report_json(f, p, n);
  fclose(f);
  return s;
}

void assert_contains(const char *hay, const char *needle) {
  if (!strstr(hay, needle)) {
    fprintf(stderr, "missing: [%s]\nin:\n%s\n", needle, hay);
    fail();
  }
}
