/* test_reader.c - cmocka tests of the trace reader, the aggregation, the
 * call-site choice and the report writers (pl_reader).  Traces are built
 * byte by byte with tests/cli/trace_builder.h, including every kind of
 * corruption the reader must survive. */
#define _GNU_SOURCE
#include <link.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "analysis.h"
#include "callsite.h"
#include "trace_builder.h"
#include "trace_model.h"
#include "trace_read.h"

#define APP 0x555555554000ull    /* main program load bias */
#define CUDART 0x7f1000000000ull /* libcudart.so.13 */
#define LIBC 0x7f2000000000ull   /* libc.so.6 */
#define SHIM 0x7f3000000000ull   /* libpagelock.so */

/* Loads the first len bytes of b through a real FILE, as the CLI does. */
static int load_len(plr_trace *t, const tb *b, size_t len, char *msg,
                    size_t msglen) {
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

static void copy(tb *b, uint8_t dir, uint8_t mem, uint32_t flags,
                 uint64_t bytes, uint64_t host_ns, uint32_t stack,
                 uint64_t callsite, uint32_t alloc_stack) {
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
  copy(b, PAGELOCK_DIR_H2D, PAGELOCK_MEM_PAGEABLE, A, 1 << 20, 1000000, 1,
       CUDART + 0x500, 4);
  copy(b, PAGELOCK_DIR_H2D, PAGELOCK_MEM_PAGEABLE, A, 1 << 20, 1000000, 2,
       CUDART + 0x500, 4);
  copy(b, PAGELOCK_DIR_H2D, PAGELOCK_MEM_PAGEABLE, A, 1 << 20, 1000000, 1,
       CUDART + 0x500, 0);
  /* site save_result: 2 pageable sync D2H, 4 MiB, 5 ms each */
  copy(b, PAGELOCK_DIR_D2H, PAGELOCK_MEM_PAGEABLE, 0, 4 << 20, 5000000, 3,
       APP + 0x8010, 4);
  copy(b, PAGELOCK_DIR_D2H, PAGELOCK_MEM_PAGEABLE, 0, 4 << 20, 5000000, 3,
       APP + 0x8010, 0);
  /* pinned async H2D from load_batch: not in the pageable tables */
  copy(b, PAGELOCK_DIR_H2D, PAGELOCK_MEM_PINNED, A, 1 << 20, 3000, 1,
       CUDART + 0x500, 0);
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
  tb_module(b, CUDART, CUDART, CUDART + 0x100000,
            "/nonexistent/libcudart.so.13");
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

static void analyze(plr_process *p) {
  assert_int_equal(plr_process_analyze(p, 0), 0);
}

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
  assert_int_equal(t.tot.all.bytes, 3 * (1 << 20) + 2 * (4 << 20) +
                                        (1 << 20) + 4096 + 512);
  assert_int_equal(t.tot.pageable.count, 5);
  assert_int_equal(t.tot.pageable.host_ns, 13000000);
  assert_int_equal(t.tot.pageable_async.count, 3);
  assert_int_equal(t.tot.pageable_async.host_ns, 3000000);
  assert_int_equal(t.tot.by[PAGELOCK_DIR_H2D][PAGELOCK_MEM_PAGEABLE].count, 3);
  assert_int_equal(t.tot.by[PAGELOCK_DIR_D2H][PAGELOCK_MEM_PAGEABLE].bytes,
                   8 << 20);
  assert_int_equal(t.tot.by[PAGELOCK_DIR_H2D][PAGELOCK_MEM_PINNED].count, 1);
  assert_int_equal(t.tot.by[PAGELOCK_DIR_D2D][PAGELOCK_MEM_DEVICE].count, 1);
  assert_int_equal(
      t.tot.by[PAGELOCK_DIR_D2H][PAGELOCK_MEM_REGISTERED].host_ns, 1500);
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
  assert_contains(s, "== pid 777 /opt/app/bin/app on node1: mode observe, "
                     "50.000 ms traced, rank 3 (simulated timings) ==\n");
  assert_contains(s, "\nnote: warning: CUPTI unavailable: no GPU timing\n");
  assert_contains(s, "copies: 8 calls, 12.0 MiB, 13.007 ms of host time "
                     "inside copy calls\n");
  assert_contains(s, "  dir      host mem      copies       bytes     host "
                     "time\n"
                     "  H2D      pageable           3     3.0 MiB      3.000 "
                     "ms\n");
  assert_contains(s, "3 async copies were made synchronous by pageable "
                     "memory, blocking the host 3.000 ms\n");
  assert_contains(s, "1 copies returned a CUDA error to the program\n");
  assert_contains(s, "pageable copies by call site (worst first):\n"
                     "  count    bytes  host blocked  GB/s  dir  call site\n"
                     "      2  8.0 MiB     10.000 ms  0.84  D2H  "
                     "save_result+0x8 (app)\n"
                     "      3  3.0 MiB      3.000 ms  1.05  H2D  "
                     "load_batch+0x40 (app)\n");
  assert_contains(s, "pageable copies by allocation site (worst first):\n");
  assert_contains(s, "make_buffer+0x30 (app)\n");
  assert_contains(s, "advice: allocate these buffers with "
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
  assert_contains(s, "\"copies\": 2, \"bytes\": 8388608, \"host_ns\": "
                     "10000000, \"gbps\": 0.839, \"dirs\": [\"D2H\"]");
  assert_contains(s, "\"function\": \"save_result\", \"module\": \"app\"");
  assert_contains(s, "\"pageable_async\": {\"copies\": 3, \"bytes\": "
                     "3145728, \"host_ns\": 3000000}");
  assert_contains(s, "\"counters\": {\"bytes_staged\": 0");
  /* Brackets and braces balance outside strings. */
  int depth = 0, in_str = 0;
  for (const char *c = s; *c; c++) {
    if (in_str) {
      if (*c == '\\') c++;
      else if (*c == '"') in_str = 0;
      continue;
    }
    if (*c == '"') in_str = 1;
    else if (*c == '{' || *c == '[') depth++;
    else if (*c == '}' || *c == ']') assert_true(--depth >= 0);
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
        assert_string_equal(msg, "'mem.trace' is empty (the traced program "
                                 "may have died before writing its trace "
                                 "header)");
      else
        assert_string_equal(msg, "'mem.trace' is truncated: its trace header "
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
      int at_boundary = len == sizeof(pagelock_file_header) ||
                        (whole < b.nrec && b.offsets[whole] == len);
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
static void check_corrupt_tail(uint32_t type, uint32_t size,
                               const void *body, size_t body_len,
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
  check_corrupt_tail(PAGELOCK_REC_COPY, PAGELOCK_TRACE_MAX_RECORD + 8, junk,
                     64, PLR_STOP_CORRUPT);
  check_corrupt_tail(PAGELOCK_REC_COPY, 0xfffffff8u, junk, 64,
                     PLR_STOP_CORRUPT);
  /* Plausible size, but the file ends first. */
  check_corrupt_tail(PAGELOCK_REC_NOTE, 1u << 16, junk, 64,
                     PLR_STOP_TRUNCATED);
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
  const char *text = "not a trace file, just some text that is long enough "
                     "to fill a header";
  tb_put(&b, text, strlen(text));
  check_open_error(&b, "'mem.trace' is not a pagelock trace");
  tb_free(&b);
  tb_put(&b, "PGLX", 4);
  check_open_error(&b, "'mem.trace' is not a pagelock trace");
  tb_free(&b);
  tb_put(&b, "PGLK", 4);
  check_open_error(&b, "'mem.trace' is truncated: its trace header is "
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
  tb_header_v(&b, 0, 64, 1, 0);
  check_open_error(&b, "'mem.trace' has an invalid trace format version 0");
  tb_free(&b);
  tb_header_v(&b, 1, 8, 1, 0);
  check_open_error(&b, "'mem.trace' is corrupt: trace header size 8 is "
                       "invalid");
  tb_free(&b);
  tb_header_v(&b, 1, 0, 1, 0);
  check_open_error(&b, "'mem.trace' is corrupt: trace header size 0 is "
                       "invalid");
  tb_free(&b);
  /* absurdly large: refused without reading that much */
  tb_header_v(&b, 1, 64, 1, 0);
  ((pagelock_file_header *)b.p)->header_size = 0x7fffffff;
  check_open_error(&b, "'mem.trace' is corrupt: trace header size "
                       "2147483647 is invalid");
  tb_free(&b);
  tb_header_v(&b, 1, 68, 1, 0);
  check_open_error(&b, "'mem.trace' is corrupt: trace header size 68 is "
                       "invalid");
  tb_free(&b);
  /* header claims an extension the file does not hold */
  tb_header_v(&b, 1, 64, 1, 0);
  ((pagelock_file_header *)b.p)->header_size = 128;
  check_open_error(&b, "'mem.trace' is truncated: its trace header is "
                       "incomplete");
  tb_free(&b);
}

/* A future, longer header is skipped; the records after it still read. */
static void test_longer_header_accepted(void **state) {
  (void)state;
  tb b = {0};
  tb_header_v(&b, 1, 128, 9, 0);
  tb_process(&b, "/bin/x", "h", 0, -1);
  copy(&b, PAGELOCK_DIR_H2D, PAGELOCK_MEM_PAGEABLE, 0, 100, 10, 0, 0x1234, 0);
  tb_end(&b, 5);
  plr_trace t;
  assert_int_equal(load(&t, &b), 0);
  assert_false(plr_trace_partial(&t));
  assert_int_equal(t.tot.all.count, 1);
  assert_string_equal(t.exe, "/bin/x");
  plr_trace_free(&t);
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
  tb_raw(&b, PAGELOCK_REC_PROCESS, sizeof pr, (char *)&pr + 8,
         sizeof pr - 8);
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
  tb_raw(&b, PAGELOCK_REC_STACK, sizeof big, (char *)&big + 8,
         sizeof big - 8);
  /* depth larger than the record holds */
  struct {
    pagelock_rec_stack r;
    uint64_t f[2];
  } lie;
  memset(&lie, 0, sizeof lie);
  lie.r.id = 6;
  lie.r.depth = 5;
  tb_raw(&b, PAGELOCK_REC_STACK, sizeof lie, (char *)&lie + 8,
         sizeof lie - 8);
  /* id 0 is reserved for "no stack" */
  lie.r.id = 0;
  lie.r.depth = 2;
  tb_raw(&b, PAGELOCK_REC_STACK, sizeof lie, (char *)&lie + 8,
         sizeof lie - 8);
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
    copy(&b, PAGELOCK_DIR_H2D, PAGELOCK_MEM_PAGEABLE, PAGELOCK_COPY_ASYNC,
         1000, 1000 * (i + 1), 0, 0x10000 + 16 * i, 0);
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
  copy(&b, PAGELOCK_DIR_H2D, PAGELOCK_MEM_PAGEABLE,
       PAGELOCK_COPY_ASYNC | PAGELOCK_COPY_STAGED, 1 << 20, 50000, 0, 0x10,
       0);
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
  assert_contains(s, "1 pageable copies (1.0 MiB) were staged through pinned "
                     "memory, 0.050 ms of host time\n");
  assert_contains(s, "staging: 1.0 MiB staged, 4.0 KiB passed through, 2 "
                     "fallbacks, 3 waits for a pool slot (1.500 ms), pool "
                     "high water 16.0 MiB of 64.0 MiB\n");
  assert_contains(s, "advice: pagelock staged every pageable copy");
  assert_null(strstr(s, "made synchronous"));
  free(s);
  /* one more pageable copy that was not staged: no --mode=auto advice */
  p.t.tot.pageable.count++;
  s = report_text(&p, 1);
  assert_contains(s, "advice: allocate these buffers with "
                     "cudaHostAlloc/cudaMallocHost (or torch pin_memory()); 1 "
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
  assert_contains(s, "== total over 2 processes ==\ncopies: 16 calls, "
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
  const char *skip_fn[] = {"cudaMemcpyAsync", "cudaMemcpy", "__cudaRegister",
                           "cuMemcpyHtoD_v2", "cuLaunchKernel",
                           "_ZN6cudart21cudaApiMemcpyAsyncEPv",
                           "cudart::cudaApiMemcpy(void*)"};
  const char *keep_fn[] = {"main", "cute_copy", "cu", "c", "", "load_batch",
                           "at::native::copy_", "curl_easy"};
  for (size_t i = 0; i < sizeof skip_fn / sizeof *skip_fn; i++)
    assert_true(plr_skip_function(skip_fn[i], PLR_SITE_CALL));
  for (size_t i = 0; i < sizeof keep_fn / sizeof *keep_fn; i++)
    assert_false(plr_skip_function(keep_fn[i], PLR_SITE_CALL));
  const char *skip_mod[] = {"libpagelock.so", "libcudart.so.13",
                            "libcuda.so.1", "libcupti.so.2025.1"};
  const char *keep_mod[] = {"libtorch_cuda.so", "libcudnn.so.9", "app",
                            "libc.so.6", "libcublas.so.13"};
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
__attribute__((noinline)) void plr_test_marker_fn(void) {
  __asm__ volatile("" ::: "memory");
}

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
  copy(&b, PAGELOCK_DIR_H2D, PAGELOCK_MEM_PAGEABLE, 0, 10, 5, 0,
       0x7e0000000100ull, 0);
  tb_module(&b, bias, fn - 0x10, fn + 0x1000, "");
  tb_module(&b, 0x7e0000000000ull, 0x7e0000000000ull, 0x7e0000100000ull,
            "/nonexistent/libgone.so");
  tb_end(&b, 5);
  plr_process p;
  memset(&p, 0, sizeof p);
  assert_int_equal(load(&p.t, &b), 0);
  assert_int_equal(plr_process_analyze(&p, 1), 0);
  assert_int_equal(p.calls.n, 2);
  assert_non_null(p.calls.v[0].frame);
  assert_non_null(p.calls.v[0].frame->func);
  assert_string_equal(p.calls.v[0].frame->func, "plr_test_marker_fn");
  if (p.calls.v[0].frame->file)
    assert_contains(p.calls.v[0].frame->file, "test_reader.c");
  char site[512];
  plr_site_format(p.calls.v[1].frame, p.calls.v[1].addr, site, sizeof site);
  assert_string_equal(site, "libgone.so+0x100");
  plr_process_free(&p);
  tb_free(&b);
}

static void test_open_missing_file(void **state) {
  (void)state;
  plr_trace t;
  char msg[512];
  assert_int_equal(
      plr_trace_load(&t, "/nonexistent/dir/x.trace", msg, sizeof msg), -1);
  assert_string_equal(msg, "cannot open '/nonexistent/dir/x.trace': No such "
                           "file or directory");
  plr_reader r;
  assert_int_equal(plr_open(&r, "/nonexistent/x"), PLR_OPEN_ERRNO);
  plr_open_strerror(&r, PLR_OPEN_ERRNO, "/nonexistent/x", msg, sizeof msg);
  assert_string_equal(msg, "cannot open '/nonexistent/x': No such file or "
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
      cmocka_unit_test(test_longer_header_accepted),
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
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
