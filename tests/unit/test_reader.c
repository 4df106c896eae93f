/* test_reader.c - cmocka tests of the trace reader, the aggregation, the
 * call-site choice and the report writers (pl_reader).  Traces are built
 * byte by byte with tests/cli/trace_builder.h, including every kind of
 * corruption the reader must survive. */
#define _GNU_SOURCE
#include <errno.h>
#include <link.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "analysis.h"
#include "callsite.h"
#include "compare.h"
#include "escape.h"
#include "report.h"
#include "walk.h"
#include "trace_builder.h"
#include "trace_model.h"
#include "trace_read.h"

#define APP 0x555555554000ull    /* main program load bias */
#define CUDART 0x7f1000000000ull /* libcudart.so.13 */
#define LIBC 0x7f2000000000ull   /* libc.so.6 */
#define SHIM 0x7f3000000000ull   /* libpagelock.so */

/* Loads the first len bytes of b through a real FILE, as the CLI does. */
static int load_len(plr_trace *t, const tb *b, size_t len, char *msg, size_t msglen) {
  FILE *f = tmpfile();
  assert_non_null(f);
  if (len) assert_int_equal(fwrite(b->p, 1, len, f), len);
  rewind(f);
  return plr_trace_load_stream(t, f, "mem.trace", msg, msglen);
}

static int load(plr_trace *t, const tb *b) {
  char msg[1024];
  int rc = load_len(t, b, b->len, msg, sizeof msg);
  if (rc) fprintf(stderr, "load failed: %s\n", msg);
  return rc;
}

static void copy(tb *b, uint8_t dir, uint8_t mem, uint32_t flags, uint64_t bytes, uint64_t host_ns,
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

/* The reference trace: a program "app" with two user call sites reached
 * through libcudart, one of them from two different callers (two stacks),
 * a static-cudart frame inside the main program, pinned copies, a D2D, a
 * failed copy, allocation stacks, and the exit-time records. */
static void build_reference(tb *b, int with_end) {
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

static void analyze(plr_process *p) { assert_int_equal(plr_process_analyze(p, 0), 0); }

static char *report_text(const plr_process *p, size_t n) {
  char *s = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&s, &len);
  assert_non_null(f);
  plr_report_text(f, p, n);
  fclose(f);
  return s;
}

static char *report_json(const plr_process *p, size_t n) {
  char *s = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&s, &len);
  assert_non_null(f);
  plr_report_json(f, p, n);
  fclose(f);
  return s;
}

static void assert_contains(const char *hay, const char *needle) {
  if (!strstr(hay, needle)) {
    fprintf(stderr, "missing: [%s]\nin:\n%s\n", needle, hay);
    fail();
  }
}

static void test_good_trace_aggregates_exactly(void **state) {
  (void)state;
  tb b = {0};
  build_reference(&b, 1);
  plr_trace t;
  assert_int_equal(load(&t, &b), 0);
  assert_false(plr_trace_partial(&t));
  assert_int_equal(t.complete_records, b.nrec);
  assert_int_equal(t.malformed_records, 0);
  assert_int_equal(t.hdr.pid, 777);
  assert_string_equal(t.exe, "/opt/app/bin/app");
  assert_string_equal(t.host, "node1");
  assert_int_equal(t.rank, 3);
  assert_int_equal(t.tot.all.count, 8);
  assert_int_equal(t.tot.all.bytes, 3 * (1 << 20) + 2 * (4 << 20) + (1 << 20) + 4096 + 512);
  assert_int_equal(t.tot.pageable.count, 5);
  assert_int_equal(t.tot.pageable.host_ns, 13000000);
  assert_int_equal(t.tot.pageable_async.count, 3);
  assert_int_equal(t.tot.pageable_async.host_ns, 3000000);
  assert_int_equal(t.tot.by[PAGELOCK_DIR_H2D][PAGELOCK_MEM_PAGEABLE].count, 3);
  assert_int_equal(t.tot.by[PAGELOCK_DIR_D2H][PAGELOCK_MEM_PAGEABLE].bytes, 8 << 20);
  assert_int_equal(t.tot.by[PAGELOCK_DIR_H2D][PAGELOCK_MEM_PINNED].count, 1);
  assert_int_equal(t.tot.by[PAGELOCK_DIR_D2D][PAGELOCK_MEM_DEVICE].count, 1);
  assert_int_equal(t.tot.by[PAGELOCK_DIR_D2H][PAGELOCK_MEM_REGISTERED].host_ns, 1500);
  assert_int_equal(t.tot.failed, 1);
  assert_int_equal(t.nnotes, 1);
  assert_int_equal(t.nmodules, 4);
  assert_int_equal(t.first_ns, 1000000000ull);
  assert_int_equal(t.last_ns, 1050000000ull);

  plr_process p;
  memset(&p, 0, sizeof p);
  p.t = t;
  analyze(&p);
  /* Stacks 1 and 2 differ but show the same frame: one row. */
  assert_int_equal(p.calls.n, 2);
  const plr_row *r0 = &p.calls.v[0], *r1 = &p.calls.v[1];
  assert_int_equal(r0->addr, APP + 0x2208); /* save_result, worst */
  assert_int_equal(r0->b.count, 2);
  assert_int_equal(r0->b.bytes, 8 << 20);
  assert_int_equal(r0->b.host_ns, 10000000);
  assert_int_equal(r0->dirs, 1u << PAGELOCK_DIR_D2H);
  assert_string_equal(r0->frame->func, "save_result");
  assert_int_equal(r1->addr, APP + 0x1140);
  assert_int_equal(r1->b.count, 3);
  assert_int_equal(r1->b.bytes, 3 << 20);
  assert_int_equal(r1->b.host_ns, 3000000);
  char site[256];
  plr_site_format(r1->frame, r1->addr, site, sizeof site);
  assert_string_equal(site, "load_batch+0x40 (app)");
  /* Allocation sites: past the shim and libc's malloc. */
  assert_int_equal(p.allocs.n, 1);
  assert_int_equal(p.allocs.v[0].addr, APP + 0x4030);
  assert_int_equal(p.allocs.v[0].b.count, 3);
  assert_int_equal(p.allocs.v[0].b.host_ns, 7000000);
  plr_process_free(&p);
  tb_free(&b);
}

static void test_report_text_lines(void **state) {
  (void)state;
  tb b = {0};
  build_reference(&b, 1);
  plr_process p;
  memset(&p, 0, sizeof p);
  assert_int_equal(load(&p.t, &b), 0);
  analyze(&p);
  char *s = report_text(&p, 1);
  assert_contains(s,
                  "== pid 777 /opt/app/bin/app on node1: mode observe, "
                  "50.000 ms traced, rank 3 (simulated timings) ==\n");
  assert_contains(s, "\nwarning: CUPTI unavailable: no GPU timing\n");
  assert_contains(s,
                  "copies: 8 calls, 12.0 MiB, 13.007 ms of host time "
                  "inside copy calls\n");
  assert_contains(s,
                  "  dir      host mem      copies       bytes     host "
                  "time\n"
                  "  H2D      pageable           3     3.0 MiB      3.000 "
                  "ms\n");
  assert_contains(s,
                  "3 async copies were made synchronous by pageable "
                  "memory, blocking the host 3.000 ms\n");
  assert_contains(s, "1 copies returned a CUDA error to the program\n");
  assert_contains(s,
                  "pageable copies by call site (worst first):\n"
                  "  count    bytes  host blocked  GB/s  dir  call site\n"
                  "      2  8.0 MiB     10.000 ms  0.84  D2H  "
                  "save_result+0x8 (app)\n"
                  "      3  3.0 MiB      3.000 ms  1.05  H2D  "
                  "load_batch+0x40 (app)\n");
  assert_contains(s, "pageable copies by allocation site (worst first):\n");
  assert_contains(s, "make_buffer+0x30 (app)\n");
  assert_contains(s,
                  "advice: allocate these buffers with "
                  "cudaHostAlloc/cudaMallocHost");
  assert_null(strstr(s, "cudaMemcpy"));
  assert_null(strstr(s, "staging:")); /* counters all zero */
  assert_null(strstr(s, "partial"));
  free(s);
  plr_process_free(&p);
  tb_free(&b);
}

static void test_report_json(void **state) {
  (void)state;
  tb b = {0};
  build_reference(&b, 1);
  plr_process p;
  memset(&p, 0, sizeof p);
  assert_int_equal(load(&p.t, &b), 0);
  analyze(&p);
  char *s = report_json(&p, 1);
  assert_contains(s, "\"schema\": \"pagelock-report\", \"schema_version\": 1");
  assert_contains(s, "\"pid\": 777, \"ppid\": 1, \"rank\": 3");
  assert_contains(s, "\"simulated\": true, \"partial\": false");
  assert_contains(s, "\"kind\": \"warning\", \"text\": \"CUPTI unavailable");
  assert_contains(s,
                  "\"copies\": 2, \"bytes\": 8388608, \"host_ns\": "
                  "10000000, \"gbps\": 0.839, \"dirs\": [\"D2H\"]");
  assert_contains(s, "\"function\": \"save_result\", \"module\": \"app\"");
  assert_contains(s,
                  "\"pageable_async\": {\"copies\": 3, \"bytes\": "
                  "3145728, \"host_ns\": 3000000}");
  assert_contains(s, "\"counters\": {\"bytes_staged\": 0");
  /* Brackets and braces balance outside strings. */
  int depth = 0, in_str = 0;
  for (const char *c = s; *c; c++) {
    if (in_str) {
      if (*c == '\\')
        c++;
      else if (*c == '"')
        in_str = 0;
      continue;
    }
    if (*c == '"')
      in_str = 1;
    else if (*c == '{' || *c == '[')
      depth++;
    else if (*c == '}' || *c == ']')
      assert_true(--depth >= 0);
  }
  assert_int_equal(depth, 0);
  free(s);
  plr_process_free(&p);
  tb_free(&b);
}

/* Cutting the file at every byte: short headers are refused, anything
 * longer reports exactly the records that are whole. */
static void test_truncated_at_every_offset(void **state) {
  (void)state;
  tb b = {0};
  build_reference(&b, 1);
  for (size_t len = 0; len <= b.len; len++) {
    plr_trace t;
    char msg[1024];
    int rc = load_len(&t, &b, len, msg, sizeof msg);
    if (len < sizeof(pagelock_file_header)) {
      assert_int_equal(rc, -1);
      if (len == 0)
        assert_string_equal(msg,
                            "'mem.trace' is empty (the traced program "
                            "may have died before writing its trace "
                            "header)");
      else
        assert_string_equal(msg,
                            "'mem.trace' is truncated: its trace header "
                            "is incomplete");
      continue;
    }
    assert_int_equal(rc, 0);
    size_t whole = 0;
    while (whole < b.nrec) {
      size_t end = whole + 1 < b.nrec ? b.offsets[whole + 1] : b.len;
      if (end > len) break;
      whole++;
    }
    assert_int_equal(t.complete_records, whole);
    if (len == b.len) {
      assert_false(plr_trace_partial(&t));
    } else {
      assert_true(plr_trace_partial(&t));
      int at_boundary =
          len == sizeof(pagelock_file_header) || (whole < b.nrec && b.offsets[whole] == len);
      assert_int_equal(t.stop, at_boundary ? PLR_STOP_EOF : PLR_STOP_TRUNCATED);
      char w[1024], want[1024];
      plr_trace_partial_message(&t, w, sizeof w);
      snprintf(want, sizeof want,
               "'mem.trace' ends after %zu complete records (the program may "
               "have died): report is partial",
               whole);
      assert_string_equal(w, want);
    }
    plr_trace_free(&t);
  }
  tb_free(&b);
}

/* A valid prefix of n records followed by a bad record header. */
static void check_corrupt_tail(uint32_t type, uint32_t size, const void *body, size_t body_len,
                               plr_stop want_stop) {
  tb b = {0};
  tb_header(&b, 1, 0);
  tb_process(&b, "/bin/x", "h", 0, -1);
  copy(&b, PAGELOCK_DIR_H2D, PAGELOCK_MEM_PAGEABLE, 0, 100, 10, 0, 0x1234, 0);
  size_t good = b.nrec;
  tb_raw(&b, type, size, body, body_len);
  copy(&b, PAGELOCK_DIR_H2D, PAGELOCK_MEM_PAGEABLE, 0, 100, 10, 0, 0x1234, 0);
  tb_end(&b, 5);
  plr_trace t;
  assert_int_equal(load(&t, &b), 0);
  assert_true(plr_trace_partial(&t));
  assert_int_equal(t.stop, want_stop);
  assert_int_equal(t.complete_records, good);
  assert_int_equal(t.tot.all.count, 1);
  plr_trace_free(&t);
  tb_free(&b);
}

static void test_corrupt_record_sizes(void **state) {
  (void)state;
  char junk[64];
  memset(junk, 0xab, sizeof junk);
  check_corrupt_tail(PAGELOCK_REC_COPY, 0, NULL, 0, PLR_STOP_CORRUPT);
  check_corrupt_tail(PAGELOCK_REC_COPY, 4, NULL, 0, PLR_STOP_CORRUPT);
  check_corrupt_tail(PAGELOCK_REC_COPY, 12, junk, 8, PLR_STOP_CORRUPT);
  check_corrupt_tail(PAGELOCK_REC_COPY, 100, junk, 64, PLR_STOP_CORRUPT);
  check_corrupt_tail(PAGELOCK_REC_COPY, PAGELOCK_TRACE_MAX_RECORD + 8, junk, 64, PLR_STOP_CORRUPT);
  check_corrupt_tail(PAGELOCK_REC_COPY, 0xfffffff8u, junk, 64, PLR_STOP_CORRUPT);
  /* Plausible size, but the file ends first. */
  check_corrupt_tail(PAGELOCK_REC_NOTE, 1u << 16, junk, 64, PLR_STOP_TRUNCATED);
}

static void check_open_error(const tb *b, const char *want) {
  plr_trace t;
  char msg[1024];
  assert_int_equal(load_len(&t, b, b->len, msg, sizeof msg), -1);
  assert_string_equal(msg, want);
}

static void test_header_errors(void **state) {
  (void)state;
  tb b = {0};
  const char *text =
      "not a trace file, just some text that is long enough "
      "to fill a header";
  tb_put(&b, text, strlen(text));
  check_open_error(&b, "'mem.trace' is not a pagelock trace");
  tb_free(&b);
  tb_put(&b, "PGLX", 4);
  check_open_error(&b, "'mem.trace' is not a pagelock trace");
  tb_free(&b);
  tb_put(&b, "PGLK", 4);
  check_open_error(&b,
                   "'mem.trace' is truncated: its trace header is "
                   "incomplete");
  tb_free(&b);
  tb_header_v(&b, PAGELOCK_TRACE_VERSION + 1, 64, 1, 0);
  char want[256];
  snprintf(want, sizeof want,
           "'mem.trace' uses trace format version %u; this pagelock reads "
           "version %u or older: use a newer pagelock to report it",
           PAGELOCK_TRACE_VERSION + 1, PAGELOCK_TRACE_VERSION);
  check_open_error(&b, want);
  tb_free(&b);
}

/* One header field set to value in an otherwise good version-v trace with
 * records: refused with exactly want. */
static void check_header_field(uint32_t v, size_t off, size_t width, uint64_t value,
                               const char *want) {
  tb b = {0};
  tb_header_v(&b, v, 64, 1, 0);
  tb_process(&b, "/bin/x", "h", 0, -1);
  copy(&b, PAGELOCK_DIR_H2D, PAGELOCK_MEM_PAGEABLE, 0, 100, 10, 0, 0x1234, 0);
  tb_end(&b, 5);
  memcpy(b.p + off, &value, width); /* little-endian: the low bytes */
  check_open_error(&b, want);
  tb_free(&b);
}

/* Every header field is checked, and the refusal names the field, its
 * value and what is valid.  A header of any size but 64 is refused even
 * when the bytes are there: no version ever wrote another size, and
 * skipping "extra" bytes would read a damaged file from the wrong offset. */
static void test_header_fields_refused(void **state) {
  (void)state;
#define F(field) offsetof(pagelock_file_header, field), sizeof(((pagelock_file_header *)0)->field)
  check_header_field(3, F(version), 0,
                     "'mem.trace' is corrupt: its trace header's version is "
                     "0 (valid: 1 to 4)");
  check_header_field(3, F(header_size), 72,
                     "'mem.trace' is corrupt: its trace header's header_size "
                     "is 72 (valid: 64 in trace format version 3)");
  check_header_field(1, F(header_size), 128,
                     "'mem.trace' is corrupt: its trace header's header_size "
                     "is 128 (valid: 64 in trace format version 1)");
  check_header_field(2, F(header_size), 0,
                     "'mem.trace' is corrupt: its trace header's header_size "
                     "is 0 (valid: 64 in trace format version 2)");
  check_header_field(3, F(header_size), 0x7fffffff,
                     "'mem.trace' is corrupt: its trace header's header_size "
                     "is 2147483647 (valid: 64 in trace format version 3)");
  check_header_field(3, F(pid), 0,
                     "'mem.trace' is corrupt: its trace header's pid is 0 "
                     "(valid: 1 to 4194304)");
  check_header_field(3, F(pid), 4194305,
                     "'mem.trace' is corrupt: its trace header's pid is "
                     "4194305 (valid: 1 to 4194304)");
  check_header_field(3, F(start_realtime_ns), 0,
                     "'mem.trace' is corrupt: its trace header's "
                     "start_realtime_ns is 0 (valid: 1 to "
                     "9223372036854775807)");
  check_header_field(3, F(start_realtime_ns), UINT64_MAX,
                     "'mem.trace' is corrupt: its trace header's "
                     "start_realtime_ns is 18446744073709551615 (valid: 1 to "
                     "9223372036854775807)");
  check_header_field(3, F(start_mono_ns), 0,
                     "'mem.trace' is corrupt: its trace header's "
                     "start_mono_ns is 0 (valid: 1 to 9223372036854775807)");
  check_header_field(3, F(start_mono_ns), 1ull << 63,
                     "'mem.trace' is corrupt: its trace header's "
                     "start_mono_ns is 9223372036854775808 (valid: 1 to "
                     "9223372036854775807)");
  check_header_field(3, F(flags), 0x20,
                     "'mem.trace' is corrupt: its trace header's flags are "
                     "0x20 (valid: bits 0x1f in trace format version 3)");
  /* The stop flags and CHECK records came with version 3. */
  check_header_field(2, F(flags), PAGELOCK_FILE_STOP_DISK_FULL,
                     "'mem.trace' is corrupt: its trace header's flags are "
                     "0x2 (valid: bits 0x1 in trace format version 2)");
  check_header_field(1, F(flags), PAGELOCK_FILE_CHECKSUMS,
                     "'mem.trace' is corrupt: its trace header's flags are "
                     "0x10 (valid: bits 0x1 in trace format version 1)");
  check_header_field(3, F(reserved0), 5,
                     "'mem.trace' is corrupt: its trace header's reserved0 "
                     "is 0x5 (valid: 0)");
  check_header_field(3, F(reserved[0]), 1ull << 40,
                     "'mem.trace' is corrupt: its trace header's reserved[0] "
                     "is 0x10000000000 (valid: 0)");
  check_header_field(3, offsetof(pagelock_file_header, reserved) + 8, 8, 0x80,
                     "'mem.trace' is corrupt: its trace header's reserved[1] "
                     "is 0x80 (valid: 0)");
#undef F
  /* The edges of each range are accepted. */
  tb b = {0};
  tb_header_v(&b, 1, 64, PLR_PID_MAX, PAGELOCK_FILE_SIMULATED);
  ((pagelock_file_header *)b.p)->start_realtime_ns = INT64_MAX;
  ((pagelock_file_header *)b.p)->start_mono_ns = 1;
  tb_end(&b, 5);
  plr_trace t;
  assert_int_equal(load(&t, &b), 0);
  assert_int_equal(t.hdr.pid, PLR_PID_MAX);
  plr_trace_free(&t);
  tb_free(&b);
}

/* Loads bytes through fmemopen (fast enough to do thousands of times). */
static int load_mem(plr_trace *t, const unsigned char *p, size_t len, char *msg, size_t msglen) {
  FILE *f = fmemopen((void *)p, len, "rb");
  assert_non_null(f);
  return plr_trace_load_stream(t, f, "mem.trace", msg, msglen);
}

/* A checksummed trace reads exactly like the same trace without CHECK
 * records: same records, same numbers, not partial. */
static void test_checksummed_reads_the_same(void **state) {
  (void)state;
  tb plain = {0}, ck = {0};
  build_reference(&plain, 1);
  size_t nblocks;
  tb_checksum(&plain, 3, &ck, NULL, &nblocks);
  plr_trace a, c;
  assert_int_equal(load(&a, &plain), 0);
  assert_int_equal(load(&c, &ck), 0);
  assert_false(plr_trace_partial(&c));
  assert_int_equal(c.stop, PLR_STOP_END);
  assert_int_equal(c.blocks, nblocks);
  assert_false(c.unverified);
  assert_int_equal(c.malformed_records, 0);
  assert_int_equal(c.unknown_records, 0);
  /* END is in the last block: every CHECK before it is counted. */
  assert_int_equal(c.complete_records, a.complete_records + nblocks - 1);
  assert_memory_equal(&c.tot, &a.tot, sizeof a.tot);
  assert_int_equal(c.nmodules, a.nmodules);
  assert_string_equal(c.exe, a.exe);
  plr_trace_free(&a);
  plr_trace_free(&c);
  tb_free(&plain);
  tb_free(&ck);
}

/* The block of a checksummed trace that holds file offset `at`. */
static size_t block_of(const uint64_t *starts, size_t n, uint64_t at) {
  size_t k = 0;
  while (k + 1 < n && starts[k + 1] <= at) k++;
  return k;
}

/* The "about 60% of corruptions in the middle of a trace go
 * unnoticed", turned around: every single-byte change after the header of
 * a checksummed trace (three values at every offset) is reported as damage
 * from the start of the block that holds it, and the report keeps exactly
 * the records before that block.  The same changes to the trace without
 * CHECK records are counted for comparison. */
static void test_checksum_catches_every_byte(void **state) {
  (void)state;
  tb plain = {0}, ck = {0};
  build_reference(&plain, 1);
  uint64_t starts[64];
  size_t nb;
  tb_checksum(&plain, 2, &ck, starts, &nb);
  assert_true(nb < 64);
  /* What the report must keep when block k is damaged: the trace cut at
   * its start, which reads cleanly (EOF at a boundary). */
  plr_trace before[64];
  char msg[1024];
  for (size_t k = 0; k < nb; k++) {
    assert_int_equal(load_mem(&before[k], ck.p, starts[k], msg, sizeof msg), 0);
    assert_int_equal(before[k].stop, PLR_STOP_EOF);
  }
  static const unsigned char how[3] = {0x01, 0x80, 0xff}; /* xor masks */
  unsigned char *m = malloc(ck.len);
  assert_non_null(m);
  size_t tried = 0;
  for (size_t at = sizeof(pagelock_file_header); at < ck.len; at++) {
    size_t k = block_of(starts, nb, at);
    for (int v = 0; v < 3; v++) {
      memcpy(m, ck.p, ck.len);
      m[at] ^= how[v];
      plr_trace t;
      assert_int_equal(load_mem(&t, m, ck.len, msg, sizeof msg), 0);
      if (t.stop != PLR_STOP_DAMAGED || t.damage.from != starts[k]) {
        fprintf(stderr,
                "byte %zu ^ 0x%02x (block %zu at %llu): stop %d from "
                "%llu\n",
                at, how[v], k, (unsigned long long)starts[k], t.stop,
                (unsigned long long)t.damage.from);
        fail();
      }
      assert_true(plr_trace_partial(&t));
      assert_int_equal(t.complete_records, before[k].complete_records);
      assert_int_equal(t.damage.records, before[k].complete_records);
      assert_memory_equal(&t.tot, &before[k].tot, sizeof t.tot);
      plr_trace_free(&t);
      tried++;
    }
  }
  /* The same changes without checksums: how many leave a report that looks
   * complete and clean (no partial, no malformed record)? */
  size_t unnoticed = 0, plain_tried = 0;
  unsigned char *q = malloc(plain.len);
  assert_non_null(q);
  for (size_t at = sizeof(pagelock_file_header); at < plain.len; at++)
    for (int v = 0; v < 3; v++) {
      memcpy(q, plain.p, plain.len);
      q[at] ^= how[v];
      plr_trace t;
      plain_tried++;
      if (load_mem(&t, q, plain.len, msg, sizeof msg) != 0) continue;
      if (!plr_trace_partial(&t) && !t.malformed_records) unnoticed++;
      plr_trace_free(&t);
    }
  printf(
      "single-byte changes: %zu of %zu unnoticed without CHECK records "
      "(%.0f%%), 0 of %zu with them\n",
      unnoticed, plain_tried, 100.0 * (double)unnoticed / (double)plain_tried, tried);
  assert_true(unnoticed > plain_tried / 4);
  free(q);
  free(m);
  for (size_t k = 0; k < nb; k++) plr_trace_free(&before[k]);
  tb_free(&plain);
  tb_free(&ck);
}

/* A trace cut anywhere (a killed writer, a full disk) is a cut, never
 * damage: the whole blocks and the whole records of the unclosed tail are
 * reported, exactly as for a trace without checksums. */
static void test_checksum_cut_anywhere_is_not_damage(void **state) {
  (void)state;
  tb plain = {0}, ck = {0};
  build_reference(&plain, 1);
  tb_checksum(&plain, 3, &ck, NULL, NULL);
  char msg[1024];
  for (size_t len = sizeof(pagelock_file_header); len < ck.len; len++) {
    plr_trace t;
    assert_int_equal(load_mem(&t, ck.p, len, msg, sizeof msg), 0);
    size_t whole = 0, copies = 0;
    while (whole < ck.nrec) {
      size_t end = whole + 1 < ck.nrec ? ck.offsets[whole + 1] : ck.len;
      if (end > len) break;
      const pagelock_rec_hdr *h = (const pagelock_rec_hdr *)(ck.p + ck.offsets[whole]);
      copies += h->type == PAGELOCK_REC_COPY;
      whole++;
    }
    if (t.stop != PLR_STOP_EOF && t.stop != PLR_STOP_TRUNCATED && t.stop != PLR_STOP_END) {
      fprintf(stderr, "cut at %zu: stop %d\n", len, t.stop);
      fail();
    }
    assert_int_equal(t.tot.all.count + t.tot.graph_nodes, copies);
    if (t.stop != PLR_STOP_END) assert_int_equal(t.complete_records, whole);
    plr_trace_free(&t);
  }
  tb_free(&plain);
  tb_free(&ck);
}

/* The other kinds of damage, each with its message. */
static void test_checksum_damage_kinds(void **state) {
  (void)state;
  char msg[1024], w[1024];
  plr_trace t;
  /* A CHECK whose start is not where the previous block ended: the
   * checksum itself is right. */
  tb b = {0};
  tb_header(&b, 1, PAGELOCK_FILE_CHECKSUMS);
  uint64_t start = b.len;
  tb_process(&b, "/bin/x", "h", 0, -1);
  tb_check(&b, &start);
  uint64_t second = start;
  copy(&b, PAGELOCK_DIR_H2D, PAGELOCK_MEM_PAGEABLE, 0, 100, 10, 0, 0x1234, 0);
  start -= 8;
  pagelock_rec_check c;
  memset(&c, 0, sizeof c);
  c.start = start;
  c.crc32c = pagelock_crc32c(0, b.p + second, b.len - second);
  tb_rec(&b, PAGELOCK_REC_CHECK, &c, sizeof c, NULL, NULL);
  assert_int_equal(load_mem(&t, b.p, b.len, msg, sizeof msg), 0);
  assert_int_equal(t.stop, PLR_STOP_DAMAGED);
  assert_int_equal(t.damage.kind, PLR_DAMAGE_START);
  plr_trace_partial_message(&t, w, sizeof w);
  snprintf(msg, sizeof msg,
           "'mem.trace' is corrupt from byte %llu (the CHECK record at byte "
           "%llu says its block starts at byte %llu); the report covers the "
           "2 records before it",
           (unsigned long long)second, (unsigned long long)(second + sizeof(pagelock_rec_copy)),
           (unsigned long long)(second - 8));
  assert_string_equal(w, msg);
  assert_int_equal(t.tot.all.count, 0);
  assert_string_equal(t.exe, "/bin/x");
  plr_trace_free(&t);
  tb_free(&b);

  /* A checksum mismatch: the wording the CLI prints. */
  tb_header(&b, 1, PAGELOCK_FILE_CHECKSUMS);
  start = b.len;
  tb_process(&b, "/bin/x", "h", 0, -1);
  tb_check(&b, &start);
  second = start;
  copy(&b, PAGELOCK_DIR_H2D, PAGELOCK_MEM_PAGEABLE, 0, 100, 10, 0, 0x1234, 0);
  tb_check(&b, &start);
  b.p[second + 30] ^= 4;
  assert_int_equal(load_mem(&t, b.p, b.len, msg, sizeof msg), 0);
  plr_trace_partial_message(&t, w, sizeof w);
  snprintf(msg, sizeof msg,
           "'mem.trace' is corrupt from byte %llu (checksum mismatch in the "
           "block of bytes %llu..%llu); the report covers the 2 records "
           "before it",
           (unsigned long long)second, (unsigned long long)second,
           (unsigned long long)(second + sizeof(pagelock_rec_copy) - 1));
  assert_string_equal(w, msg);
  plr_trace_free(&t);
  tb_free(&b);

  /* No CHECK within PLR_MAX_BLOCK: five 1 MiB notes. */
  tb_header(&b, 1, PAGELOCK_FILE_CHECKSUMS);
  start = b.len;
  char *big = malloc(1u << 20);
  assert_non_null(big);
  memset(big, 'n', (1u << 20) - 64);
  big[(1u << 20) - 64] = 0;
  for (int i = 0; i < 5; i++) tb_note(&b, 0, big);
  tb_check(&b, &start);
  free(big);
  assert_int_equal(load_mem(&t, b.p, b.len, msg, sizeof msg), 0);
  assert_int_equal(t.stop, PLR_STOP_DAMAGED);
  assert_int_equal(t.damage.kind, PLR_DAMAGE_LONG);
  plr_trace_partial_message(&t, w, sizeof w);
  assert_string_equal(w,
                      "'mem.trace' is corrupt from byte 64 (no CHECK record "
                      "closes the block within 4 MiB); the report covers "
                      "the 0 records before it");
  plr_trace_free(&t);
  tb_free(&b);

  /* A CHECK record in a version-3 trace whose header does not say it has
   * checksums: the flag was lost.  In version 2, type 15 was nobody's: an
   * unknown record, skipped. */
  for (uint32_t v = 2; v <= 3; v++) {
    tb_header_v(&b, v, 64, 1, 0);
    start = b.len;
    tb_process(&b, "/bin/x", "h", 0, -1);
    tb_check(&b, &start);
    copy(&b, PAGELOCK_DIR_H2D, PAGELOCK_MEM_PAGEABLE, 0, 100, 10, 0, 0x1234, 0);
    tb_end(&b, 5);
    assert_int_equal(load_mem(&t, b.p, b.len, msg, sizeof msg), 0);
    if (v == 2) {
      assert_int_equal(t.stop, PLR_STOP_END);
      assert_int_equal(t.unknown_records, 1);
      assert_int_equal(t.tot.all.count, 1);
    } else {
      assert_int_equal(t.stop, PLR_STOP_DAMAGED);
      plr_trace_partial_message(&t, w, sizeof w);
      assert_string_equal(w,
                          "'mem.trace' is corrupt: a CHECK record at byte "
                          "120, but its header's flags (0x0) say it has no "
                          "checksums; the report covers the 1 records "
                          "before it");
      assert_int_equal(t.tot.all.count, 0);
    }
    plr_trace_free(&t);
    tb_free(&b);
  }
}

/* The header's stop flags say why a trace ends early: the warning, the
 * text header, JSON and the writers' words follow them, instead of
 * guessing that the program died. */
static void test_stop_flags_say_why(void **state) {
  (void)state;
  static const struct {
    uint32_t flag;
    const char *why, *json;
  } cases[] = {
      {PAGELOCK_FILE_STOP_DISK_FULL, "the disk filled up", "disk-full"},
      {PAGELOCK_FILE_STOP_WRITE_ERROR, "a write to the trace failed", "write-error"},
      {PAGELOCK_FILE_STOP_FD_LOST, "the program closed the shim's trace file", "fd-lost"},
      {0, "the program may have died", "no-end"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    tb b = {0};
    tb_header(&b, 9, cases[i].flag);
    tb_process(&b, "/bin/x", "h", 0, -1);
    copy(&b, PAGELOCK_DIR_H2D, PAGELOCK_MEM_PAGEABLE, 0, 100, 10, 0, 0x1234, 0);
    plr_process p;
    memset(&p, 0, sizeof p);
    assert_int_equal(load(&p.t, &b), 0);
    analyze(&p);
    assert_true(plr_trace_partial(&p.t));
    char w[512], want[512];
    plr_trace_partial_message(&p.t, w, sizeof w);
    snprintf(want, sizeof want,
             "'mem.trace' ends after 2 complete records (%s): report is "
             "partial",
             cases[i].why);
    assert_string_equal(w, want);
    char *s = report_text(&p, 1);
    if (cases[i].flag)
      snprintf(want, sizeof want, " [partial trace: %s] ==\n", cases[i].why);
    else
      snprintf(want, sizeof want, " [partial trace] ==\n");
    assert_contains(s, want);
    assert_null(strstr(s, "died"));
    free(s);
    s = report_json(&p, 1);
    snprintf(want, sizeof want, "\"trace_end\": \"%s\", \"corrupt_from\": null", cases[i].json);
    assert_contains(s, want);
    free(s);
    plr_process_free(&p);
    tb_free(&b);
  }
}

/* Trace strings reach a terminal escaped: no byte a terminal acts on. */
static void test_text_escapes(void **state) {
  (void)state;
  char buf[256];
  assert_string_equal(plr_text_escape("a\033[31mred\r\b\t\x7f", buf, sizeof buf),
                      "a\\x1b[31mred\\x0d\\x08\\x09\\x7f");
  /* C1 controls as code points; a lone 0x9b (CSI in 8-bit terminals) and
   * other invalid UTF-8 as bytes; a backslash doubled; bidi overrides. */
  assert_string_equal(plr_text_escape("\xc2\x9b"
                                      "1m \x9b \xff\xc3 \\x1b",
                                      buf, sizeof buf),
                      "\\u009b1m \\x9b \\xff\\xc3 \\\\x1b");
  assert_string_equal(plr_text_escape("\xe2\x80\xae"
                                      "abc\xe2\x81\xa6",
                                      buf, sizeof buf),
                      "\\u202eabc\\u2066");
  /* valid UTF-8 passes: é, €, 𝄞, U+00A0 */
  assert_string_equal(
      plr_text_escape("\xc3\xa9\xe2\x82\xac\xf0\x9d\x84\x9e\xc2\xa0", buf, sizeof buf),
      "\xc3\xa9\xe2\x82\xac\xf0\x9d\x84\x9e\xc2\xa0");
  /* cut between characters, never inside an escape */
  assert_string_equal(plr_text_escape("ab\033cd", buf, 6), "ab");
  assert_string_equal(plr_text_escape("ab\033cd", buf, 7), "ab\\x1b");

  const char *evil =
      "\033]0;owned\a\033[2J\r\b\x9b"
      "31m\xc2\x9b"
      "1m\xff";
  tb b = {0};
  tb_header(&b, 1, 0);
  char exe[128], host[64], note[128], sym[128];
  snprintf(exe, sizeof exe, "/opt/%s/app", evil);
  snprintf(host, sizeof host, "h%s", evil);
  snprintf(note, sizeof note, "note %s", evil);
  snprintf(sym, sizeof sym, "fn%s", evil);
  tb_process(&b, exe, host, 0, 2);
  tb_note(&b, PAGELOCK_NOTE_WARNING, note);
  copy(&b, PAGELOCK_DIR_H2D, PAGELOCK_MEM_PAGEABLE, PAGELOCK_COPY_ASYNC, 1 << 20, 1000, 0,
       APP + 0x1140, 0);
  tb_module(&b, APP, APP + 0x1000, APP + 0x10000, "");
  tb_symbol(&b, APP + 0x1140, APP + 0x1100, sym);
  tb_end(&b, 5);
  plr_process p[2];
  memset(p, 0, sizeof p);
  assert_int_equal(load(&p[0].t, &b), 0);
  assert_int_equal(load(&p[1].t, &b), 0);
  analyze(&p[0]);
  analyze(&p[1]);
  char *s = report_text(p, 2); /* two: the per-rank table shows the host */
  for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
    assert_true(*c >= 0x20 || *c == '\n');
    assert_true(*c != 0x7f);
    assert_true(*c < 0x80); /* nothing here needs more than ASCII */
  }
  const char *esc = "\\x1b]0;owned\\x07\\x1b[2J\\x0d\\x08\\x9b31m\\u009b1m\\xff";
  char want[256];
  snprintf(want, sizeof want, "== pid 1 /opt/%s/app on h%s: ", esc, esc);
  assert_contains(s, want);
  snprintf(want, sizeof want, "\nwarning: note %s\n", esc);
  assert_contains(s, want);
  snprintf(want, sizeof want, "fn%s+0x40 (app)\n", esc);
  assert_contains(s, want);
  snprintf(want, sizeof want, "  2  h%s", esc);
  assert_contains(s, want);
  free(s);
  plr_process_free(&p[0]);
  plr_process_free(&p[1]);
  tb_free(&b);
}

/* Strings that run to the end of their record without a NUL. */
static void test_unterminated_strings(void **state) {
  (void)state;
  tb b = {0};
  tb_header(&b, 1, 0);
  struct {
    pagelock_rec_process r;
    char s[16];
  } pr;
  memset(&pr, 'A', sizeof pr);
  tb_raw(&b, PAGELOCK_REC_PROCESS, sizeof pr, (char *)&pr + 8, sizeof pr - 8);
  struct {
    pagelock_rec_module r;
    char s[8];
  } mo;
  memset(&mo, 'B', sizeof mo);
  tb_raw(&b, PAGELOCK_REC_MODULE, sizeof mo, (char *)&mo + 8, sizeof mo - 8);
  struct {
    pagelock_rec_symbol r;
    char s[8];
  } sy;
  memset(&sy, 'C', sizeof sy);
  tb_raw(&b, PAGELOCK_REC_SYMBOL, sizeof sy, (char *)&sy + 8, sizeof sy - 8);
  struct {
    pagelock_rec_note r;
    char s[8];
  } no;
  memset(&no, 'D', sizeof no);
  tb_raw(&b, PAGELOCK_REC_NOTE, sizeof no, (char *)&no + 8, sizeof no - 8);
  /* process: exe terminated, host not */
  struct {
    pagelock_rec_process r;
    char s[16];
  } p2;
  memset(&p2, 0, sizeof p2);
  memcpy(p2.s, "/x\0hosthosthost", 16);
  p2.s[15] = 'h';
  tb_raw(&b, PAGELOCK_REC_PROCESS, sizeof p2, (char *)&p2 + 8, sizeof p2 - 8);
  /* records too short for their fixed part */
  char z[8] = {0};
  tb_raw(&b, PAGELOCK_REC_COPY, 16, z, 8);
  tb_raw(&b, PAGELOCK_REC_PROCESS, 16, z, 8);
  tb_raw(&b, PAGELOCK_REC_COUNTERS, 16, z, 8);
  tb_raw(&b, PAGELOCK_REC_END, 16, z, 8);
  tb_raw(&b, PAGELOCK_REC_STACK, 8, NULL, 0);
  copy(&b, PAGELOCK_DIR_H2D, PAGELOCK_MEM_PAGEABLE, 0, 100, 10, 0, 0x1234, 0);
  tb_end(&b, 5);
  plr_trace t;
  assert_int_equal(load(&t, &b), 0);
  assert_false(plr_trace_partial(&t));
  assert_int_equal(t.malformed_records, 10);
  assert_int_equal(t.complete_records, b.nrec);
  assert_false(t.have_process);
  assert_string_equal(t.exe, "");
  assert_int_equal(t.nmodules, 0);
  assert_int_equal(t.nnotes, 0);
  assert_int_equal(t.tot.all.count, 1);
  plr_process p;
  memset(&p, 0, sizeof p);
  p.t = t;
  analyze(&p);
  char *s = report_text(&p, 1);
  assert_contains(s, "== pid 1 (unknown program): mode unknown");
  assert_contains(s, "0x1234");
  free(s);
  plr_process_free(&p);
  tb_free(&b);
}

static void test_stack_validation(void **state) {
  (void)state;
  tb b = {0};
  tb_header(&b, 1, 0);
  /* depth over PAGELOCK_MAX_FRAMES */
  struct {
    pagelock_rec_stack r;
    uint64_t f[PAGELOCK_MAX_FRAMES + 1];
  } big;
  memset(&big, 0, sizeof big);
  big.r.id = 5;
  big.r.depth = PAGELOCK_MAX_FRAMES + 1;
  tb_raw(&b, PAGELOCK_REC_STACK, sizeof big, (char *)&big + 8, sizeof big - 8);
  /* depth larger than the record holds */
  struct {
    pagelock_rec_stack r;
    uint64_t f[2];
  } lie;
  memset(&lie, 0, sizeof lie);
  lie.r.id = 6;
  lie.r.depth = 5;
  tb_raw(&b, PAGELOCK_REC_STACK, sizeof lie, (char *)&lie + 8, sizeof lie - 8);
  /* id 0 is reserved for "no stack" */
  lie.r.id = 0;
  lie.r.depth = 2;
  tb_raw(&b, PAGELOCK_REC_STACK, sizeof lie, (char *)&lie + 8, sizeof lie - 8);
  /* id 7 twice: the first definition wins */
  uint64_t f1[] = {0x1000}, f2[] = {0x2000};
  tb_stack(&b, 7, f1, 1);
  tb_stack(&b, 7, f2, 1);
  copy(&b, PAGELOCK_DIR_H2D, PAGELOCK_MEM_PAGEABLE, 0, 10, 10, 7, 0x1000, 0);
  /* references to the rejected stacks fall back to the call site */
  copy(&b, PAGELOCK_DIR_H2D, PAGELOCK_MEM_PAGEABLE, 0, 10, 20, 5, 0x5000, 0);
  copy(&b, PAGELOCK_DIR_H2D, PAGELOCK_MEM_PAGEABLE, 0, 10, 30, 6, 0x6000, 0);
  /* no stack at all, no call site */
  copy(&b, PAGELOCK_DIR_H2D, PAGELOCK_MEM_PAGEABLE, 0, 10, 40, 0, 0, 0);
  tb_end(&b, 5);
  plr_process p;
  memset(&p, 0, sizeof p);
  assert_int_equal(load(&p.t, &b), 0);
  assert_int_equal(p.t.malformed_records, 3);
  assert_int_equal(p.t.duplicate_stacks, 1);
  const plr_stack *st = plr_trace_stack(&p.t, 7);
  assert_non_null(st);
  assert_int_equal(st->frames[0], 0x1000);
  analyze(&p);
  assert_int_equal(p.calls.n, 4);
  assert_int_equal(p.calls.v[0].addr, 0); /* 40 ns, unknown */
  assert_int_equal(p.calls.v[1].addr, 0x6000);
  assert_int_equal(p.calls.v[2].addr, 0x5000);
  assert_int_equal(p.calls.v[3].addr, 0x1000);
  char *s = report_text(&p, 1);
  assert_contains(s, "(unknown call site)");
  free(s);
  plr_process_free(&p);
  tb_free(&b);
}

static void test_unknown_record_types_skipped(void **state) {
  (void)state;
  tb b = {0};
  tb_header(&b, 1, 0);
  copy(&b, PAGELOCK_DIR_H2D, PAGELOCK_MEM_PAGEABLE, 0, 100, 10, 0, 0x1234, 0);
  char body[40];
  memset(body, 0x5a, sizeof body);
  tb_raw(&b, 99, 48, body, 40);
  tb_raw(&b, 0, 8, NULL, 0);
  tb_raw(&b, 0xffffffffu, 16, body, 8);
  copy(&b, PAGELOCK_DIR_D2H, PAGELOCK_MEM_PAGEABLE, 0, 50, 10, 0, 0x1234, 0);
  tb_end(&b, 5);
  plr_trace t;
  assert_int_equal(load(&t, &b), 0);
  assert_false(plr_trace_partial(&t));
  assert_int_equal(t.unknown_records, 3);
  assert_int_equal(t.malformed_records, 0);
  assert_int_equal(t.tot.all.count, 2);
  assert_int_equal(t.tot.all.bytes, 150);
  plr_trace_free(&t);
  tb_free(&b);
}

/* END stops reading: bytes after it are never parsed. */
static void test_end_stops_reading(void **state) {
  (void)state;
  tb b = {0};
  tb_header(&b, 1, 0);
  copy(&b, PAGELOCK_DIR_H2D, PAGELOCK_MEM_PAGEABLE, 0, 100, 10, 0, 0x1234, 0);
  tb_end(&b, 5);
  tb_put(&b, "garbage!", 8);
  plr_trace t;
  assert_int_equal(load(&t, &b), 0);
  assert_false(plr_trace_partial(&t));
  assert_int_equal(t.complete_records, 2);
  plr_trace_free(&t);
  tb_free(&b);
}

static void test_many_sites_truncated_table(void **state) {
  (void)state;
  tb b = {0};
  tb_header(&b, 1, 0);
  for (unsigned i = 0; i < 25; i++)
    copy(&b, PAGELOCK_DIR_H2D, PAGELOCK_MEM_PAGEABLE, PAGELOCK_COPY_ASYNC, 1000, 1000 * (i + 1), 0,
         0x10000 + 16 * i, 0);
  tb_end(&b, 5);
  plr_process p;
  memset(&p, 0, sizeof p);
  assert_int_equal(load(&p.t, &b), 0);
  analyze(&p);
  assert_int_equal(p.calls.n, 25);
  char *s = report_text(&p, 1);
  /* rows 21..25 are the 5 cheapest: 1+2+3+4+5 us */
  assert_contains(s, "  ... 5 more (5 copies, 0.015 ms)\n");
  assert_contains(s, "0x10180"); /* worst: i = 24 */
  assert_null(strstr(s, "0x10000\n"));
  free(s);
  plr_process_free(&p);
  tb_free(&b);
}

static void test_counters_and_staging(void **state) {
  (void)state;
  tb b = {0};
  tb_header(&b, 1, 0);
  tb_process(&b, "/bin/x", "h", PAGELOCK_MODE_STAGE, -1);
  copy(&b, PAGELOCK_DIR_H2D, PAGELOCK_MEM_PAGEABLE, PAGELOCK_COPY_ASYNC | PAGELOCK_COPY_STAGED,
       1 << 20, 50000, 0, 0x10, 0);
  pagelock_rec_counters c;
  memset(&c, 0, sizeof c);
  c.bytes_staged = 1 << 20;
  c.bytes_passthrough = 4096;
  c.fallbacks = 2;
  c.waits = 3;
  c.wait_ns = 1500000;
  c.pool_high_water = 16 << 20;
  c.pool_bytes = 64 << 20;
  tb_counters(&b, &c);
  tb_end(&b, 5);
  plr_process p;
  memset(&p, 0, sizeof p);
  assert_int_equal(load(&p.t, &b), 0);
  analyze(&p);
  assert_int_equal(p.t.tot.pageable_async.count, 0); /* staged: not blocked */
  char *s = report_text(&p, 1);
  assert_contains(s,
                  "1 pageable copies (1.0 MiB) were staged through pinned "
                  "memory, 0.050 ms of host time\n");
  assert_contains(s,
                  "staging: 1.0 MiB staged, 4.0 KiB passed through, 2 "
                  "fallbacks, 3 waits for a pool slot (1.500 ms), pool "
                  "high water 16.0 MiB of 64.0 MiB\n");
  assert_contains(s, "advice: pagelock staged every pageable copy");
  assert_null(strstr(s, "made synchronous"));
  free(s);
  /* one more pageable copy that was not staged: no --mode=auto advice */
  p.t.tot.pageable.count++;
  s = report_text(&p, 1);
  assert_contains(s,
                  "advice: allocate these buffers with "
                  "cudaHostAlloc/cudaMallocHost; 1 "
                  "pageable copies were not staged");
  free(s);
  plr_process_free(&p);
  tb_free(&b);
}

static void test_several_processes_total(void **state) {
  (void)state;
  tb a = {0}, b = {0};
  build_reference(&a, 1);
  build_reference(&b, 0);
  ((pagelock_file_header *)b.p)->pid = 778;
  plr_process p[2];
  memset(p, 0, sizeof p);
  assert_int_equal(load(&p[0].t, &a), 0);
  assert_int_equal(load(&p[1].t, &b), 0);
  analyze(&p[0]);
  analyze(&p[1]);
  char *s = report_text(p, 2);
  assert_contains(s, "== pid 777 ");
  assert_contains(s, "== pid 778 ");
  assert_contains(s, "[partial trace]");
  assert_contains(s,
                  "== total over 2 processes ==\ncopies: 16 calls, "
                  "24.0 MiB, 26.013 ms");
  assert_contains(s, "6 async copies were made synchronous");
  free(s);
  s = report_json(p, 2);
  assert_contains(s, "\"partial\": true");
  free(s);
  plr_process_free(&p[0]);
  plr_process_free(&p[1]);
  tb_free(&a);
  tb_free(&b);
}

static void test_skip_rules(void **state) {
  (void)state;
  const char *skip_fn[] = {"cudaMemcpyAsync",
                           "cudaMemcpy",
                           "__cudaRegister",
                           "cuMemcpyHtoD_v2",
                           "cuLaunchKernel",
                           "_ZN6cudart21cudaApiMemcpyAsyncEPv",
                           "cudart::cudaApiMemcpy(void*)"};
  const char *keep_fn[] = {"main",       "cute_copy",         "cu",       "c", "",
                           "load_batch", "at::native::copy_", "curl_easy"};
  for (size_t i = 0; i < sizeof skip_fn / sizeof *skip_fn; i++)
    assert_true(plr_skip_function(skip_fn[i], PLR_SITE_CALL));
  for (size_t i = 0; i < sizeof keep_fn / sizeof *keep_fn; i++)
    assert_false(plr_skip_function(keep_fn[i], PLR_SITE_CALL));
  const char *skip_mod[] = {"libpagelock.so", "libcudart.so.13", "libcuda.so.1",
                            "libcupti.so.2025.1"};
  const char *keep_mod[] = {"libtorch_cuda.so", "libcudnn.so.9", "app", "libc.so.6",
                            "libcublas.so.13"};
  for (size_t i = 0; i < sizeof skip_mod / sizeof *skip_mod; i++)
    assert_true(plr_skip_module(skip_mod[i], PLR_SITE_CALL));
  for (size_t i = 0; i < sizeof keep_mod / sizeof *keep_mod; i++)
    assert_false(plr_skip_module(keep_mod[i], PLR_SITE_CALL));
  assert_true(plr_skip_module("libc.so.6", PLR_SITE_ALLOC));
  assert_true(plr_skip_module("libstdc++.so.6", PLR_SITE_ALLOC));
  assert_true(plr_skip_function("malloc", PLR_SITE_ALLOC));
  assert_true(plr_skip_function("operator new(unsigned long)", PLR_SITE_ALLOC));
  assert_true(plr_skip_function("_Znwm", PLR_SITE_ALLOC));
  assert_false(plr_skip_function("malloc_user_thing", PLR_SITE_ALLOC));
  assert_false(plr_skip_function("malloc", PLR_SITE_CALL));
}

/* Deterministic random corruption: the reader may refuse or cut short, but
 * must never crash or read out of bounds (run under ASan). */
static void test_random_corruption_never_crashes(void **state) {
  (void)state;
  tb ref = {0};
  build_reference(&ref, 1);
  uint32_t x = 12345;
  for (int iter = 0; iter < 3000; iter++) {
    tb b = {0};
    tb_put(&b, ref.p, ref.len);
    int flips = 1 + iter % 8;
    for (int k = 0; k < flips; k++) {
      x = x * 1664525u + 1013904223u;
      size_t at = (x >> 8) % b.len;
      x = x * 1664525u + 1013904223u;
      b.p[at] = (iter & 1) ? (unsigned char)(x >> 24) : b.p[at] ^ (1u << (x % 8));
    }
    x = x * 1664525u + 1013904223u;
    size_t len = (iter % 3 == 0) ? (x >> 4) % (b.len + 1) : b.len;
    plr_process p;
    memset(&p, 0, sizeof p);
    char msg[1024];
    if (load_len(&p.t, &b, len, msg, sizeof msg) == 0) {
      analyze(&p);
      free(report_text(&p, 1));
      free(report_json(&p, 1));
      plr_process_free(&p);
    }
    tb_free(&b);
  }
  tb_free(&ref);
}

/* Something addr2line can resolve: a real function of this program. */
__attribute__((noinline)) void plr_test_marker_fn(void) { __asm__ volatile("" ::: "memory"); }

static int find_main_bias(struct dl_phdr_info *info, size_t sz, void *arg) {
  (void)sz;
  if (info->dlpi_name && info->dlpi_name[0]) return 0;
  *(uint64_t *)arg = info->dlpi_addr;
  return 1;
}

static void test_addr2line_symbolizes(void **state) {
  (void)state;
  if (system("command -v addr2line >/dev/null 2>&1") != 0) skip();
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  assert_true(n > 0);
  exe[n] = 0;
  uint64_t bias = 0;
  dl_iterate_phdr(find_main_bias, &bias);
  uint64_t fn = (uint64_t)(uintptr_t)&plr_test_marker_fn;
  tb b = {0};
  tb_header(&b, 1, 0);
  tb_process(&b, exe, "h", 0, -1);
  copy(&b, PAGELOCK_DIR_H2D, PAGELOCK_MEM_PAGEABLE, 0, 10, 10, 0, fn + 1, 0);
  /* a vanished module must not break anything */
  copy(&b, PAGELOCK_DIR_H2D, PAGELOCK_MEM_PAGEABLE, 0, 10, 5, 0, 0x7e0000000100ull, 0);
  tb_module(&b, bias, fn - 0x10, fn + 0x1000, "");
  tb_module(&b, 0x7e0000000000ull, 0x7e0000000000ull, 0x7e0000100000ull, "/nonexistent/libgone.so");
  tb_end(&b, 5);
  plr_process p;
  memset(&p, 0, sizeof p);
  assert_int_equal(load(&p.t, &b), 0);
  assert_int_equal(plr_process_analyze(&p, 1), 0);
  assert_int_equal(p.calls.n, 2);
  assert_non_null(p.calls.v[0].frame);
  assert_non_null(p.calls.v[0].frame->func);
  assert_string_equal(p.calls.v[0].frame->func, "plr_test_marker_fn");
  if (p.calls.v[0].frame->file) assert_contains(p.calls.v[0].frame->file, "test_reader.c");
  char site[512];
  plr_site_format(p.calls.v[1].frame, p.calls.v[1].addr, site, sizeof site);
  assert_string_equal(site, "libgone.so+0x100");
  plr_process_free(&p);
  tb_free(&b);
}

/* Several devices: a site's device is what its COPY records name (no GPU
 * record needed), -2 when they name several; a record naming none (-1, as
 * every shim before issue 23 wrote) leaves it as it is. */
static void test_site_device_from_copies(void **state) {
  (void)state;
  tb b = {0};
  tb_header(&b, 1, 0);
  tb_process(&b, "/opt/app/bin/app", "node1", PAGELOCK_MODE_OBSERVE, -1);
  static const struct {
    uint64_t callsite;
    int32_t device;
  } cp[] = {{CUDART + 0x100, 1}, {CUDART + 0x100, -1}, {CUDART + 0x100, 1},
            {CUDART + 0x200, 0}, {CUDART + 0x200, 1},  {CUDART + 0x300, -1}};
  for (size_t i = 0; i < sizeof cp / sizeof cp[0]; i++) {
    tb_copy_args c = {0};
    c.start_ns = 1000000000ull + 1000 * (b.nrec + 1);
    c.host_ns = 1000;
    c.bytes = 1 << 20;
    c.callsite = cp[i].callsite;
    c.stack_id = 0;
    c.dir = PAGELOCK_DIR_H2D;
    c.host_mem = PAGELOCK_MEM_PAGEABLE;
    c.device = cp[i].device;
    tb_copy(&b, &c);
  }
  tb_end(&b, 1000000000ull + 50000000ull);
  plr_process p;
  memset(&p, 0, sizeof p);
  assert_int_equal(load(&p.t, &b), 0);
  int seen = 0;
  for (const plr_site *s = p.t.sites; s; s = s->hh.next) {
    int32_t want = s->key.callsite == CUDART + 0x100   ? 1
                   : s->key.callsite == CUDART + 0x200 ? -2
                                                       : -1;
    assert_int_equal(s->device, want);
    seen++;
  }
  assert_int_equal(seen, 3);
  analyze(&p);
  char *j = report_json(&p, 1);
  /* The JSON's sites name the device of the one-device site only. */
  int ones = 0;
  for (const char *q = j; (q = strstr(q, "\"device\": 1}")) != NULL; q++) ones++;
  assert_int_equal(ones, 1);
  assert_null(strstr(j, "\"device\": -"));
  free(j);
  plr_process_free(&p);
  tb_free(&b);
}

/* One copy with a route flag and a reason, from stack 1. */
static void route_copy(tb *b, uint8_t dir, uint8_t mem, uint32_t flags, uint8_t why, uint64_t bytes,
                       uint64_t host_ns) {
  tb_copy_args c = {0};
  c.start_ns = 1000000000ull + 1000 * (b->nrec + 1);
  c.host_ns = host_ns;
  c.bytes = bytes;
  c.callsite = CUDART + 0x500;
  c.stack_id = 1;
  c.flags = flags;
  c.dir = dir;
  c.host_mem = mem;
  c.why = why;
  c.seq = 100 + b->nrec;
  tb_copy(b, &c);
}

/* A run under --mode auto: registered, staged (each staged copy moved as
 * four chunks of the shim's, which have LINK and GPU records but no COPY
 * record of their own) and passed copies, with their reasons, and the
 * registration engine's counters. */
static void build_routes(tb *b, uint32_t version, uint32_t mode) {
  const uint32_t A = PAGELOCK_COPY_ASYNC, S = PAGELOCK_COPY_STAGED, R = PAGELOCK_COPY_REGISTERED;
  const uint8_t PG = PAGELOCK_MEM_PAGEABLE, H2D = PAGELOCK_DIR_H2D, D2H = PAGELOCK_DIR_D2H;
  tb_header_v(b, version, sizeof(pagelock_file_header), 900, 0);
  tb_process(b, "/opt/app/bin/app", "node1", mode, -1);
  tb_gpu_status(b, PAGELOCK_GPU_TIMING_ON, 0, 0, "");
  uint64_t s1[] = {CUDART + 0x500, APP + 0x1140, APP + 0x3010};
  tb_stack(b, 1, s1, 3);
  for (int i = 0; i < 3; i++) route_copy(b, H2D, PG, A | R, PAGELOCK_WHY_NONE, 64 << 20, 2000000);
  for (int i = 0; i < 3; i++) {
    uint64_t seq = 100 + b->nrec;
    for (uint32_t k = 0; k < 4; k++) tb_link(b, 5000 + (uint32_t)i * 4 + k, seq + 4);
    route_copy(b, H2D, PG, A | S, i < 2 ? PAGELOCK_WHY_SHARED : PAGELOCK_WHY_BUDGET,
               i < 2 ? 16 << 20 : 32 << 20, i < 2 ? 3000000 : 4000000);
    for (uint32_t k = 0; k < 4; k++)
      tb_gpu_copy(b, 0, 7, 1, PAGELOCK_GPU_MEM_PINNED, i < 2 ? 4 << 20 : 8 << 20,
                  1000100000ull + k * 1000, 1000100500ull + k * 1000, 5000 + (uint32_t)i * 4 + k,
                  1);
  }
  for (int i = 0; i < 2; i++) route_copy(b, D2H, PG, A, PAGELOCK_WHY_SMALL, 4096, 10000);
  route_copy(b, H2D, PG, A, PAGELOCK_WHY_COLD, 1 << 20, 200000);
  route_copy(b, H2D, PG, A, 200, 1 << 20, 300000); /* a reason we do not know */
  for (int i = 0; i < 2; i++)
    route_copy(b, H2D, PAGELOCK_MEM_PINNED, A, PAGELOCK_WHY_NONE, 8 << 20, 2000);
  route_copy(b, D2H, PAGELOCK_MEM_REGISTERED, 0, PAGELOCK_WHY_NONE, 4096, 1500);
  /* no route: device, managed memory, a graph node */
  route_copy(b, PAGELOCK_DIR_D2D, PAGELOCK_MEM_DEVICE, A, 0, 4096, 1000);
  route_copy(b, H2D, PAGELOCK_MEM_MANAGED, A, 0, 4096, 1000);
  route_copy(b, H2D, PG, PAGELOCK_COPY_GRAPH_NODE, PAGELOCK_WHY_CAPTURE, 1 << 20, 0);
  tb_module(b, APP, APP + 0x1000, APP + 0x10000, "");
  tb_symbol(b, APP + 0x1140, APP + 0x1100, "load_batch");
  pagelock_rec_counters c;
  memset(&c, 0, sizeof c);
  c.bytes_staged = 64 << 20;
  c.pool_bytes = 64 << 20;
  c.pool_high_water = 32 << 20;
  c.register_budget = 32ull << 30;
  c.registrations = 4;
  c.unregistrations = 3;
  c.evictions = 1;
  c.register_failures = 2;
  c.register_ns = 65000000;
  c.registered_bytes = 64 << 20;
  c.registered_bytes_high_water = 192 << 20;
  tb_counters(b, &c);
  tb_end(b, 1000000000ull + 50000000ull);
}

static void test_route_totals(void **state) {
  (void)state;
  tb b = {0};
  build_routes(&b, PAGELOCK_TRACE_VERSION, PAGELOCK_MODE_AUTO);
  plr_process p[2];
  memset(p, 0, sizeof p);
  assert_int_equal(load(&p[0].t, &b), 0);
  const plr_totals *t = &p[0].t.tot;
  /* One per copy of the program's: the twelve chunks of the staged copies
   * are not. */
  assert_int_equal(t->routes[PLR_ROUTE_REGISTER].count, 3);
  assert_int_equal(t->routes[PLR_ROUTE_REGISTER].bytes, 3 * (64 << 20));
  assert_int_equal(t->routes[PLR_ROUTE_STAGE].count, 3);
  assert_int_equal(t->routes[PLR_ROUTE_STAGE].bytes, 64 << 20);
  assert_int_equal(t->routes[PLR_ROUTE_STAGE].host_ns, 10000000);
  assert_int_equal(t->routes[PLR_ROUTE_PASS].count, 7);
  assert_int_equal(t->routes[PLR_ROUTE_PASS].bytes,
                   2 * 4096 + 2 * (1 << 20) + 2 * (8 << 20) + 4096);
  assert_int_equal(t->routes[PLR_ROUTE_PASS].host_ns, 525500);
  assert_int_equal(t->not_registered[PAGELOCK_WHY_SHARED].count, 2);
  assert_int_equal(t->not_registered[PAGELOCK_WHY_BUDGET].bytes, 32 << 20);
  assert_int_equal(t->not_registered[PAGELOCK_WHY_SMALL].count, 2);
  assert_int_equal(t->not_registered[PAGELOCK_WHY_COLD].count, 1);
  assert_int_equal(t->not_registered[0].count, 1);                    /* reason 200 */
  assert_int_equal(t->not_registered[PAGELOCK_WHY_CAPTURE].count, 0); /* a node */
  uint64_t nr = 0;
  for (int w = 0; w < PAGELOCK_WHY_COUNT; w++) nr += t->not_registered[w].count;
  assert_int_equal(nr, t->pageable.count - t->registered);
  /* Registered and staged copies did not make the host wait. */
  assert_int_equal(t->pageable_async.count, 4);
  assert_int_equal(p[0].t.counters.registrations, 4);
  analyze(&p[0]);
  char *s = report_text(p, 1);
  assert_contains(s,
                  "routes: 7 copies passed through (18.0 MiB), 3 staged (64.0 MiB), 3 "
                  "registered (192.0 MiB)\n"
                  "not registered: 2 copies  32.0 MiB  6.000 ms  shared memory or a file "
                  "mapping (DataLoader workers' batches): staged\n"
                  "not registered: 1 copies  32.0 MiB  4.000 ms  budget full "
                  "(PAGELOCK_REGISTER_BUDGET), nothing idle to evict: staged\n"
                  "not registered: 1 copies   1.0 MiB  0.300 ms  unknown: the trace gives "
                  "none (an older pagelock wrote it)\n"
                  "not registered: 1 copies   1.0 MiB  0.200 ms  cold: copied less than "
                  "PAGELOCK_REGISTER_HOT of the buffer\n"
                  "not registered: 2 copies   8.0 KiB  0.020 ms  small: below "
                  "PAGELOCK_STAGE_MIN, passed through\n"
                  "4 async copies were made synchronous");
  assert_contains(s,
                  "\nstaging: 64.0 MiB staged, 0 B passed through, 0 "
                  "fallbacks, 0 waits for a pool slot (0.000 ms), pool high "
                  "water 32.0 MiB of 64.0 MiB\n"
                  "registration: 4 ranges registered (65.000 ms), 3 "
                  "unregistered, 1 evicted, 2 failed; 64.0 MiB still "
                  "registered at exit, high water 192.0 MiB of a 32.0 GiB "
                  "budget\n");
  assert_contains(s,
                  "advice: allocate these buffers with cudaHostAlloc/"
                  "cudaMallocHost; 4 pageable copies "
                  "were neither staged nor registered (see 'not registered' "
                  "above).\n");
  free(s);
  s = report_json(p, 1);
  assert_contains(s,
                  "\"routes\": {\"pass\": {\"copies\": 7, \"bytes\": "
                  "18886656, \"host_ns\": 525500},\n"
                  "                   \"stage\": {\"copies\": 3, \"bytes\": "
                  "67108864, \"host_ns\": 10000000},\n"
                  "                   \"register\": {\"copies\": 3, "
                  "\"bytes\": 201326592, \"host_ns\": 6000000}},\n");
  assert_contains(s, "\"not_registered\": {\"unknown\": {\"copies\": 1, ");
  assert_contains(s,
                  "\"budget\": {\"copies\": 1, \"bytes\": 33554432, "
                  "\"host_ns\": 4000000}");
  assert_contains(s,
                  "\"register_budget\": 34359738368, \"registrations\": 4, "
                  "\"unregistrations\": 3, \"evictions\": 1, "
                  "\"register_failures\": 2, \"register_ns\": 65000000, "
                  "\"registered_bytes\": 67108864}");
  free(s);
  /* Two processes: the totals add up, routes and reasons included. */
  assert_int_equal(load(&p[1].t, &b), 0);
  analyze(&p[1]);
  s = report_text(p, 2);
  assert_contains(s, "== total over 2 processes ==\n");
  assert_contains(s,
                  "routes: 14 copies passed through (36.0 MiB), 6 staged "
                  "(128.0 MiB), 6 registered (384.0 MiB)\n"
                  "not registered: 4 copies  64.0 MiB  12.000 ms  shared");
  free(s);
  plr_process_free(&p[0]);
  plr_process_free(&p[1]);
  tb_free(&b);

  /* Under observe, with nothing staged or registered: no routes line. */
  tb o = {0};
  tb_header(&o, 5, 0);
  tb_process(&o, "/bin/x", "h", PAGELOCK_MODE_OBSERVE, -1);
  copy(&o, PAGELOCK_DIR_H2D, PAGELOCK_MEM_PAGEABLE, PAGELOCK_COPY_ASYNC, 1 << 20, 50000, 0, 0x10,
       0);
  tb_end(&o, 5);
  memset(p, 0, sizeof p);
  assert_int_equal(load(&p[0].t, &o), 0);
  analyze(&p[0]);
  s = report_text(p, 1);
  assert_null(strstr(s, "routes:"));
  assert_null(strstr(s, "not registered"));
  assert_null(strstr(s, "registration:"));
  free(s);
  plr_process_free(&p[0]);
  tb_free(&o);
}

/* Versions 1 and 2 had reserved bytes where version 3 keeps a copy's
 * reason and the registration counters: whatever they hold reads as no
 * reason and no count. */
static void test_routes_old_versions(void **state) {
  (void)state;
  tb b = {0};
  build_routes(&b, 2, PAGELOCK_MODE_STAGE);
  plr_process p;
  memset(&p, 0, sizeof p);
  assert_int_equal(load(&p.t, &b), 0);
  const plr_totals *t = &p.t.tot;
  assert_int_equal(t->routes[PLR_ROUTE_STAGE].count, 3);
  assert_int_equal(t->not_registered[0].count, 7);
  for (int w = 1; w < PAGELOCK_WHY_COUNT; w++) assert_int_equal(t->not_registered[w].count, 0);
  assert_int_equal(p.t.counters.registrations, 0);
  assert_int_equal(p.t.counters.register_budget, 0);
  assert_int_equal(p.t.counters.registered_bytes, 0);
  assert_int_equal(p.t.counters.registered_bytes_high_water, 192 << 20);
  assert_int_equal(p.t.counters.bytes_staged, 64 << 20);
  analyze(&p);
  char *s = report_text(&p, 1);
  /* Stage mode: the routes, but no registration reasons to give. */
  assert_contains(s, "routes: 7 copies passed through");
  assert_null(strstr(s, "not registered"));
  assert_contains(s,
                  "registration: 0 ranges registered (0.000 ms), 0 "
                  "unregistered, 0 evicted, 0 failed; 0 B still registered "
                  "at exit, high water 192.0 MiB\n");
  free(s);
  plr_process_free(&p);
  tb_free(&b);
}

/* A run of `count` back-to-back copies in one COPY record (version 4),
 * `timed` of them timed, host_ns their total; count 0 writes one copy. */
static void run_copy(tb *b, uint64_t start, uint8_t dir, uint8_t mem, uint32_t flags, uint8_t why,
                     uint32_t count, uint32_t timed, uint64_t bytes, uint64_t host_ns,
                     uint32_t stack) {
  tb_copy_args c = {0};
  c.start_ns = start;
  c.host_ns = host_ns;
  c.bytes = bytes;
  c.callsite = CUDART + 0x500;
  c.stack_id = stack;
  c.flags = flags;
  c.dir = dir;
  c.host_mem = mem;
  c.why = why;
  c.api = dir == PAGELOCK_DIR_H2D ? PAGELOCK_API_cuMemcpyHtoDAsync_v2
                                  : PAGELOCK_API_cuMemcpyDtoHAsync_v2;
  c.count = count;
  c.timed = timed;
  tb_copy(b, &c);
}

/* Under --mode auto: a run of 64 pageable 4 KiB uploads (8 timed) from
 * load_batch, one 1 MiB upload and a run of 3 registered 64 KiB downloads
 * (1 timed) from save_result, a run of 10 pinned downloads all timed. */
static void build_runs(tb *b) {
  const uint32_t A = PAGELOCK_COPY_ASYNC;
  const uint8_t PG = PAGELOCK_MEM_PAGEABLE, H2D = PAGELOCK_DIR_H2D, D2H = PAGELOCK_DIR_D2H;
  tb_header(b, 901, 0);
  tb_process(b, "/opt/app/bin/app", "node1", PAGELOCK_MODE_AUTO, -1);
  uint64_t s1[] = {CUDART + 0x500, APP + 0x1140, APP + 0x3010};
  uint64_t s2[] = {CUDART + 0x500, APP + 0x2208, APP + 0x3020};
  tb_stack(b, 1, s1, 3);
  tb_stack(b, 2, s2, 3);
  const uint64_t t0 = 1000000000ull + 1000000;
  run_copy(b, t0, H2D, PG, A, PAGELOCK_WHY_SMALL, 64, 8, 4096, 640000, 1);
  run_copy(b, t0 + 1000000, H2D, PG, A, PAGELOCK_WHY_COLD, 0, 0, 1 << 20, 1000000, 2);
  run_copy(b, t0 + 3000000, D2H, PG, A | PAGELOCK_COPY_REGISTERED, PAGELOCK_WHY_NONE, 3, 1, 65536,
           30000, 2);
  run_copy(b, t0 + 4000000, D2H, PAGELOCK_MEM_PINNED, A, PAGELOCK_WHY_NONE, 10, 10, 8192, 20000, 1);
  tb_module(b, APP, APP + 0x1000, APP + 0x10000, "");
  tb_module(b, CUDART, CUDART, CUDART + 0x100000, "/nonexistent/libcudart.so.13");
  tb_symbol(b, CUDART + 0x500, CUDART + 0x400, "cudaMemcpyAsync");
  tb_symbol(b, APP + 0x1140, APP + 0x1100, "load_batch");
  tb_symbol(b, APP + 0x2208, APP + 0x2200, "save_result");
  tb_end(b, 1000000000ull + 10000000);
}

/* What a writer prints of p: chrome or html, the trace read again from b. */
static char *report_view(const plr_process *p, const tb *b, int html) {
  plr_source src = {NULL, b->p, b->len};
  char *s = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&s, &len);
  assert_non_null(f);
  if (html)
    plr_report_html(f, p, &src, 1);
  else
    plr_report_chrome(f, p, &src, 1);
  fclose(f);
  return s;
}

/* A COPY record that stands for a run counts as its count copies, and
 * its bytes as count times each copy's, in every total, route, reason and
 * site row; its host time is already the run's; the writers say which
 * host times are estimates. */
static void test_copy_runs_count_each_copy(void **state) {
  (void)state;
  tb b = {0};
  build_runs(&b);
  plr_process p;
  memset(&p, 0, sizeof p);
  assert_int_equal(load(&p.t, &b), 0);
  const plr_totals *t = &p.t.tot;
  assert_int_equal(t->all.count, 64 + 1 + 3 + 10);
  assert_int_equal(t->all.bytes, 64 * 4096 + (1 << 20) + 3 * 65536 + 10 * 8192);
  assert_int_equal(t->all.host_ns, 640000 + 1000000 + 30000 + 20000);
  /* The 10 pinned downloads were all timed: nothing of theirs estimated. */
  assert_int_equal(t->all.est_count, 64 + 3);
  assert_int_equal(t->all.est_timed, 8 + 1);
  assert_int_equal(t->by[PAGELOCK_DIR_H2D][PAGELOCK_MEM_PAGEABLE].count, 65);
  assert_int_equal(t->by[PAGELOCK_DIR_D2H][PAGELOCK_MEM_PINNED].bytes, 10 * 8192);
  assert_int_equal(t->pageable.count, 68);
  assert_int_equal(t->pageable_async.count, 65);
  assert_int_equal(t->registered, 3);
  assert_int_equal(t->routes[PLR_ROUTE_PASS].count, 64 + 1 + 10);
  assert_int_equal(t->routes[PLR_ROUTE_PASS].bytes, 64 * 4096 + (1 << 20) + 10 * 8192);
  assert_int_equal(t->routes[PLR_ROUTE_REGISTER].count, 3);
  assert_int_equal(t->routes[PLR_ROUTE_REGISTER].bytes, 3 * 65536);
  assert_int_equal(t->not_registered[PAGELOCK_WHY_SMALL].count, 64);
  assert_int_equal(t->not_registered[PAGELOCK_WHY_SMALL].bytes, 64 * 4096);
  assert_int_equal(t->not_registered[PAGELOCK_WHY_SMALL].host_ns, 640000);
  assert_int_equal(t->not_registered[PAGELOCK_WHY_COLD].count, 1);
  analyze(&p);
  assert_int_equal(p.calls.n, 2);
  /* save_result: 1 MiB in 1 ms beats 192 KiB in 30 us for the worst row. */
  assert_int_equal(p.calls.v[0].b.count, 4);
  assert_int_equal(p.calls.v[0].b.bytes, (1 << 20) + 3 * 65536);
  assert_int_equal(p.calls.v[0].routes[PLR_ROUTE_REGISTER].count, 3);
  assert_int_equal(p.calls.v[1].b.count, 64);
  assert_int_equal(p.calls.v[1].b.bytes, 64 * 4096);
  assert_int_equal(p.calls.v[1].b.est_count, 64);
  assert_int_equal(p.calls.v[1].b.est_timed, 8);
  /* Sizes are each copy's: none of these is 1 MiB but the single one. */
  assert_int_equal(p.calls.v[1].big.count, 0);
  assert_int_equal(p.calls.v[0].big.count, 1);

  char *s = report_text(&p, 1);
  assert_contains(s, "copies: 78 calls, 1.5 MiB, 1.690 ms of host time inside copy calls\n");
  assert_contains(s, "  H2D      pageable          65     1.2 MiB      1.640 ms\n");
  assert_contains(s,
                  "  (host time of 67 copies estimated from 9 timed: repeated small copies, 1 in 7 "
                  "timed)\n");
  assert_contains(s,
                  "routes: 75 copies passed through (1.3 MiB), 0 staged (0 B), 3 registered "
                  "(192.0 KiB)\n");
  assert_contains(s, "not registered: 64 copies  256.0 KiB  0.640 ms  small:");
  assert_contains(s, "     64  256.0 KiB      0.640 ms  0.41  H2D      load_batch+0x40 (app)\n");
  assert_contains(s,
                  "load_batch+0x40 (app)\n"
                  "  (host time of 67 copies estimated from 9 timed: repeated small copies, 1 in "
                  "7 timed)\n");
  free(s);

  s = report_json(&p, 1);
  assert_contains(s,
                  "\"copies\": 78, \"bytes\": 1589248, \"host_ns\": 1690000, \"estimated\": "
                  "{\"copies\": 67, \"timed\": 9},\n");
  assert_contains(s,
                  "{\"copies\": 64, \"bytes\": 262144, \"host_ns\": 640000, \"gbps\": 0.410, "
                  "\"estimated\": {\"copies\": 64, \"timed\": 8}, \"dirs\": [\"H2D\"]");
  assert_contains(s,
                  "\"routes\": {\"pass\": {\"copies\": 75, \"bytes\": 1392640, \"host_ns\": "
                  "1660000},");
  assert_contains(s, "\"small\": {\"copies\": 64, \"bytes\": 262144, \"host_ns\": 640000}");
  free(s);

  /* One event per record: the run starts at its first copy and lasts its
   * host time, named for its count, on a track of the thread's runs
   * (0x10000000 | 42 << 3, lane 0), not its copy calls' (it could overlap
   * them). */
  s = report_view(&p, &b, 0);
  assert_contains(s,
                  "{\"ph\":\"X\",\"name\":\"cuMemcpyHtoDAsync_v2 x64\",\"cat\":\"copy_call\","
                  "\"pid\":901,\"tid\":268435792,\"ts\":1000.000,\"dur\":640.000");
  assert_contains(s,
                  "\"tid\":268435792,\"args\":{\"name\":\"thread 42 (runs of repeated "
                  "copies)\"}");
  assert_contains(s, ",\"copies\":64,\"timed\":8,\"total_bytes\":262144");
  assert_contains(s, "\"name\":\"cuMemcpyDtoHAsync_v2 x10\"");
  assert_contains(s, "\"name\":\"cuMemcpyHtoDAsync_v2\",");
  size_t events = 0;
  for (const char *q = s; (q = strstr(q, "\"cat\":\"copy_call\"")) != NULL; q++) events++;
  assert_int_equal(events, 4);
  free(s);
  s = report_view(&p, &b, 1);
  assert_contains(
      s,
      "<title>cuMemcpyHtoDAsync_v2 x64 H2D pageable, 4.0 KiB each, host 640 us, 8 of 64 "
      "copies timed</title>");
  assert_contains(s,
                  "<li>host time of 67 copies estimated from 9 timed: repeated small copies, 1 in "
                  "7 timed</li>");
  free(s);

  /* compare: the run's 64 copies against 64 single ones. */
  tb o = {0};
  tb_header(&o, 902, 0);
  tb_process(&o, "/opt/app/bin/app", "node1", PAGELOCK_MODE_OBSERVE, -1);
  for (int i = 0; i < 64; i++)
    run_copy(&o, 1000000000ull + 1000000 + 10000 * (uint64_t)i, PAGELOCK_DIR_H2D,
             PAGELOCK_MEM_PAGEABLE, PAGELOCK_COPY_ASYNC, PAGELOCK_WHY_MODE, 0, 0, 4096, 10000, 1);
  tb_end(&o, 1000000000ull + 10000000);
  plr_trace ot;
  assert_int_equal(load(&ot, &o), 0);
  plr_compare_side bs, as;
  memset(&bs, 0, sizeof bs);
  memset(&as, 0, sizeof as);
  plr_compare_add(&bs, &ot, NULL, NULL);
  plr_compare_add(&as, &p.t, NULL, NULL);
  plr_cmp_row rows[PLR_CMP_MAX_ROWS];
  size_t n = plr_compare_rows(&bs, &as, rows);
  int seen = 0;
  for (size_t i = 0; i < n; i++) {
    if (!strcmp(rows[i].key, "copies")) {
      assert_true(rows[i].b.v == 64 && rows[i].a.v == 78);
      seen++;
    } else if (!strcmp(rows[i].key, "pass_copies")) {
      assert_true(rows[i].b.v == 64 && rows[i].a.v == 75);
      seen++;
    } else if (!strcmp(rows[i].key, "pass_bytes")) {
      assert_true(rows[i].b.v == 64 * 4096 && rows[i].a.v == 64 * 4096 + (1 << 20) + 10 * 8192);
      seen++;
    } else if (!strcmp(rows[i].key, "register_copies")) {
      assert_true(rows[i].b.v == 0 && rows[i].a.v == 3);
      seen++;
    }
  }
  assert_int_equal(seen, 4);
  plr_compare_side_free(&bs);
  plr_compare_side_free(&as);
  plr_trace_free(&ot);
  tb_free(&o);
  plr_process_free(&p);
  tb_free(&b);
}

/* The count and timed the reader hands out of the only COPY record of b. */
static void read_count(const tb *b, uint32_t *count, uint32_t *timed) {
  FILE *f = tmpfile();
  assert_non_null(f);
  assert_int_equal(fwrite(b->p, 1, b->len, f), b->len);
  rewind(f);
  plr_reader r;
  assert_int_equal(plr_open_stream(&r, f), PLR_OPEN_OK);
  plr_record rec;
  int copies = 0;
  while (plr_next(&r, &rec))
    if (rec.type == PAGELOCK_REC_COPY) {
      *count = rec.u.copy->count;
      *timed = rec.u.copy->timed;
      copies++;
    }
  assert_int_equal(copies, 1);
  assert_int_equal(r.malformed, 0);
  plr_close(&r);
}

/* A version-`version` trace of one COPY record (v1, v3: of the size of
 * those versions, else today's), its count and timed as given. */
static void build_one(tb *b, uint32_t version, int v1, int v3, uint32_t count, uint32_t timed) {
  tb_header_v(b, version, sizeof(pagelock_file_header), 903, 0);
  tb_copy_args c = {0};
  c.start_ns = 1000001000ull;
  c.host_ns = 5000;
  c.bytes = 4096;
  c.dir = PAGELOCK_DIR_H2D;
  c.host_mem = PAGELOCK_MEM_PAGEABLE;
  c.count = count;
  c.timed = timed;
  c.v1 = v1;
  c.v3 = v3;
  tb_copy(b, &c);
  tb_end(b, 1000002000ull);
}

/* Older records end before count: one copy, timed.  So does a record of
 * an older version that is longer (its bytes there are no field of its
 * version), and a version-4 count of 0; timed never exceeds count. */
static void test_copy_count_versions(void **state) {
  (void)state;
  static const struct {
    uint32_t version;
    int v1, v3;
    uint32_t count, timed, want_count, want_timed;
  } cases[] = {
      {1, 1, 0, 64, 8, 1, 1},  /* 96 bytes */
      {2, 0, 1, 64, 8, 1, 1},  /* 104 bytes */
      {3, 0, 1, 64, 8, 1, 1},  /* 104 bytes, as golden traces */
      {3, 0, 0, 64, 8, 1, 1},  /* 112 bytes in a version-3 trace */
      {4, 0, 0, 64, 8, 64, 8}, /* a run */
      {4, 0, 0, 0, 0, 1, 1},   /* a single copy */
      {4, 0, 0, 5, 9, 5, 5},   /* more timed than copies */
      {4, 0, 0, 7, 0, 7, 0},   /* none timed: kept */
      {4, 0, 1, 64, 8, 1, 1},  /* a 104-byte record in a version-4 trace */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    tb b = {0};
    build_one(&b, cases[i].version, cases[i].v1, cases[i].v3, cases[i].count, cases[i].timed);
    uint32_t count = 0, timed = 0;
    read_count(&b, &count, &timed);
    if (count != cases[i].want_count || timed != cases[i].want_timed)
      fail_msg("case %zu: count %u timed %u, want %u and %u", i, count, timed, cases[i].want_count,
               cases[i].want_timed);
    plr_trace t;
    assert_int_equal(load(&t, &b), 0);
    assert_int_equal(t.tot.all.count, cases[i].want_count);
    assert_int_equal(t.tot.all.bytes, 4096ull * cases[i].want_count);
    assert_int_equal(t.tot.all.host_ns, 5000);
    plr_trace_free(&t);
    tb_free(&b);
  }
  /* A count of 0 written by the builder's writer path: patched in place. */
  tb b = {0};
  build_one(&b, 4, 0, 0, 64, 8);
  uint32_t zero = 0;
  memcpy(b.p + b.offsets[0] + offsetof(pagelock_rec_copy, count), &zero, sizeof zero);
  uint32_t count = 0, timed = 0;
  read_count(&b, &count, &timed);
  assert_int_equal(count, 1);
  assert_int_equal(timed, 1);
  tb_free(&b);
  /* count times bytes saturates instead of wrapping. */
  tb_header(&b, 904, 0);
  tb_copy_args c = {0};
  c.start_ns = 1000001000ull;
  c.bytes = 1ull << 62;
  c.count = 8;
  c.timed = 1;
  c.dir = PAGELOCK_DIR_H2D;
  c.host_mem = PAGELOCK_MEM_PAGEABLE;
  tb_copy(&b, &c);
  plr_trace t;
  assert_int_equal(load(&t, &b), 0);
  assert_int_equal(t.tot.all.count, 8);
  assert_true(t.tot.all.bytes == UINT64_MAX);
  plr_trace_free(&t);
  tb_free(&b);
}

/* Runs form while CUPTI is not tracing, so a run that started in a pause
 * of sampled GPU timing is that many copies without a GPU op by design,
 * whether its record comes before or after the samples around it. */
static void test_copy_runs_in_pause(void **state) {
  (void)state;
  tb b = {0};
  tb_header(&b, 905, 0);
  tb_process(&b, "/opt/app/bin/app", "node1", PAGELOCK_MODE_OBSERVE, -1);
  tb_gpu_status(&b, PAGELOCK_GPU_TIMING_ON, 0, 0, "");
  const uint64_t t0 = 1000000000ull;
  const uint8_t H2D = PAGELOCK_DIR_H2D, PG = PAGELOCK_MEM_PAGEABLE;
  tb_kernel(&b, 0, 7, t0 + 1000000, t0 + 1500000, 0);
  tb_gpu_sample(&b, t0 + 2000000, 0, 90000);
  /* Read after the pause, later than every sample so far: it waits. */
  run_copy(&b, t0 + 3000000, H2D, PG, PAGELOCK_COPY_ASYNC, 0, 64, 8, 4096, 640000, 0);
  tb_gpu_sample(&b, t0 + 6000000, 1, 0);
  /* Read after the resume, started in the pause: settled at once. */
  run_copy(&b, t0 + 4000000, H2D, PG, PAGELOCK_COPY_ASYNC, 0, 32, 4, 4096, 320000, 0);
  /* After the resume: no op, and it should have had one. */
  run_copy(&b, t0 + 7000000, H2D, PG, PAGELOCK_COPY_ASYNC, 0, 0, 0, 4096, 10000, 0);
  tb_end(&b, t0 + 9000000);
  plr_process p;
  memset(&p, 0, sizeof p);
  assert_int_equal(load(&p.t, &b), 0);
  assert_int_equal(p.t.tot.all.count, 97);
  assert_int_equal(p.t.gpu.join.untimed_paused, 96);
  assert_int_equal(p.t.gpu.join.unjoined, 1);
  analyze(&p);
  char *s = report_text(&p, 1);
  assert_contains(s,
                  "GPU join: 0 of 1 copy calls matched their GPU copies; 96 more copy calls ran "
                  "while GPU timing was paused\n");
  free(s);
  plr_process_free(&p);
  tb_free(&b);
}

/* A FIFO where a trace was (swapped in after the CLI's check, before a
 * writer reads the file again) is refused at once: every opener of the
 * reader would otherwise block in open() until some writer came.  alarm()
 * turns a hang into a failure. */
static void test_open_fifo_at_once(void **state) {
  (void)state;
  char dir[] = "/tmp/pagelock-fifo.XXXXXX";
  assert_non_null(mkdtemp(dir));
  char path[64];
  snprintf(path, sizeof path, "%s/t.trace", dir);
  assert_int_equal(mkfifo(path, 0600), 0);
  alarm(10);
  plr_source src = {path, NULL, 0};
  errno = 0;
  assert_null(plr_source_open(&src));
  assert_int_equal(errno, EINVAL);
  plr_trace t;
  char msg[512], want[512];
  assert_int_equal(plr_trace_load(&t, path, msg, sizeof msg), -1);
  snprintf(want, sizeof want,
           "'%s' is a FIFO, not a trace file (a trace is a "
           "regular file written by libpagelock.so)",
           path);
  assert_string_equal(msg, want);
  assert_null(plr_open_trace(path, msg, sizeof msg));
  assert_string_equal(msg, want);
  plr_reader r;
  assert_int_equal(plr_open(&r, path), PLR_OPEN_NOT_REGULAR);
  plr_open_strerror(&r, PLR_OPEN_NOT_REGULAR, path, msg, sizeof msg);
  assert_string_equal(msg, want);
  assert_int_equal(plr_walk(&src, NULL, NULL), -1);
  /* The HTML page of a trace loaded before the swap says why its timeline
   * is missing. */
  tb b = {0};
  build_reference(&b, 1);
  plr_process p;
  memset(&p, 0, sizeof p);
  assert_int_equal(load(&p.t, &b), 0);
  analyze(&p);
  char *h = NULL;
  size_t hl = 0;
  FILE *f = open_memstream(&h, &hl);
  assert_non_null(f);
  plr_report_html(f, &p, &src, 1);
  fclose(f);
  assert_contains(h,
                  "The timeline was left out: the trace could not be read "
                  "again.");
  free(h);
  alarm(0);
  plr_process_free(&p);
  tb_free(&b);
  unlink(path);
  rmdir(dir);
}

static void test_open_missing_file(void **state) {
  (void)state;
  plr_trace t;
  char msg[512];
  assert_int_equal(plr_trace_load(&t, "/nonexistent/dir/x.trace", msg, sizeof msg), -1);
  assert_string_equal(msg,
                      "cannot open '/nonexistent/dir/x.trace': No such "
                      "file or directory");
  plr_reader r;
  assert_int_equal(plr_open(&r, "/nonexistent/x"), PLR_OPEN_ERRNO);
  plr_open_strerror(&r, PLR_OPEN_ERRNO, "/nonexistent/x", msg, sizeof msg);
  assert_string_equal(msg,
                      "cannot open '/nonexistent/x': No such file or "
                      "directory");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_good_trace_aggregates_exactly),
      cmocka_unit_test(test_report_text_lines),
      cmocka_unit_test(test_report_json),
      cmocka_unit_test(test_truncated_at_every_offset),
      cmocka_unit_test(test_corrupt_record_sizes),
      cmocka_unit_test(test_header_errors),
      cmocka_unit_test(test_header_fields_refused),
      cmocka_unit_test(test_checksummed_reads_the_same),
      cmocka_unit_test(test_checksum_catches_every_byte),
      cmocka_unit_test(test_checksum_cut_anywhere_is_not_damage),
      cmocka_unit_test(test_checksum_damage_kinds),
      cmocka_unit_test(test_stop_flags_say_why),
      cmocka_unit_test(test_text_escapes),
      cmocka_unit_test(test_unterminated_strings),
      cmocka_unit_test(test_stack_validation),
      cmocka_unit_test(test_unknown_record_types_skipped),
      cmocka_unit_test(test_end_stops_reading),
      cmocka_unit_test(test_many_sites_truncated_table),
      cmocka_unit_test(test_counters_and_staging),
      cmocka_unit_test(test_several_processes_total),
      cmocka_unit_test(test_skip_rules),
      cmocka_unit_test(test_random_corruption_never_crashes),
      cmocka_unit_test(test_addr2line_symbolizes),
      cmocka_unit_test(test_open_missing_file),
      cmocka_unit_test(test_route_totals),
      cmocka_unit_test(test_site_device_from_copies),
      cmocka_unit_test(test_routes_old_versions),
      cmocka_unit_test(test_copy_runs_count_each_copy),
      cmocka_unit_test(test_copy_count_versions),
      cmocka_unit_test(test_copy_runs_in_pause),
      cmocka_unit_test(test_open_fifo_at_once),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
