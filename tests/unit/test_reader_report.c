/* test_reader_report.c - a good trace aggregated exactly and reported:
 * the text and JSON reports, escaping, tables cut to size, several
 * processes, the call-site rules, symbols named (reader_fixture.h). */
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

#include "reader_fixture.h"

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
  if (p.calls.v[0].frame->file) assert_contains(p.calls.v[0].frame->file, "test_reader_report.c");
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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_good_trace_aggregates_exactly),
      cmocka_unit_test(test_report_text_lines),
      cmocka_unit_test(test_report_json),
      cmocka_unit_test(test_text_escapes),
      cmocka_unit_test(test_many_sites_truncated_table),
      cmocka_unit_test(test_counters_and_staging),
      cmocka_unit_test(test_several_processes_total),
      cmocka_unit_test(test_skip_rules),
      cmocka_unit_test(test_addr2line_symbolizes),
      cmocka_unit_test(test_site_device_from_copies),
  };
  return cmocka_run_group_tests_name("reader_report", tests, NULL, NULL);
}
