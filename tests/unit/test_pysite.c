/* test_pysite.c - cmocka tests of PYCODE/PYSTACK records in the reader
 * and of the site tables they key: validation of every field, grouping by
 * the innermost Python line with the library line and the native sites
 * beneath, and what the text and JSON reports print. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "analysis.h"
#include "report.h"
#include "trace_builder.h"

static int load(plr_trace *t, const tb *b) {
  char msg[1024];
  FILE *f = fmemopen((void *)b->p, b->len, "rb");
  assert_non_null(f);
  int rc = plr_trace_load_stream(t, f, "mem.trace", msg, sizeof msg);
  if (rc) fprintf(stderr, "load failed: %s\n", msg);
  return rc;
}

static void pycode(tb *b, uint32_t id, uint32_t flags, const char *file, const char *func) {
  pagelock_rec_pycode r;
  memset(&r, 0, sizeof r);
  r.id = id;
  r.firstlineno = 1;
  r.flags = flags;
  tb_rec(b, PAGELOCK_REC_PYCODE, &r, sizeof r, file, func);
}

/* A PYSTACK of n (code, line) pairs; depth as given (a lie, for tests). */
static void pystack(tb *b, uint32_t stack, uint16_t depth, uint16_t flags, const uint32_t *cl,
                    size_t n) {
  struct {
    pagelock_rec_pystack r;
    pagelock_py_frame f[16];
  } r;
  memset(&r, 0, sizeof r);
  r.r.stack_id = stack;
  r.r.depth = depth;
  r.r.flags = flags;
  for (size_t i = 0; i < n; i++) r.f[i] = (pagelock_py_frame){cl[2 * i], cl[2 * i + 1]};
  tb_rec(b, PAGELOCK_REC_PYSTACK, &r, sizeof r.r + n * sizeof r.f[0], NULL, NULL);
}

static void copy(tb *b, uint32_t stack, uint64_t host_ns) {
  tb_copy_args c = {0};
  c.start_ns = 1000000000ull + 1000 * (b->nrec + 1);
  c.host_ns = host_ns;
  c.bytes = 1 << 20;
  c.stack_id = stack;
  c.alloc_stack_id = stack;
  c.dir = PAGELOCK_DIR_H2D;
  c.host_mem = PAGELOCK_MEM_PAGEABLE;
  tb_copy(b, &c);
}

/* Not inlined: GCC 12 then takes the memstream's pointer for a dangling one. */
__attribute__((noinline)) static char *report(const plr_process *p, int json) {
  char *s = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&s, &len);
  assert_non_null(f);
  if (json)
    plr_report_json(f, p, 1);
  else
    plr_report_text(f, p, 1);
  fclose(f);
  return s;
}

static void assert_contains(const char *hay, const char *needle) {
  if (!strstr(hay, needle)) {
    fprintf(stderr, "missing: [%s]\nin:\n%s\n", needle, hay);
    fail();
  }
}

static void build(tb *b) {
  tb_header(b, 7, 0);
  uint64_t n1[] = {0x1000}, n2[] = {0x2000}, n3[] = {0x3000};
  tb_stack(b, 1, n1, 1);
  pycode(b, 1, 0, "/src/train.py", "main");
  pycode(b, 2, PAGELOCK_PYCODE_LIBRARY, "/usr/lib/python3.11/threading.py", "Thread.run");
  uint32_t s1[] = {1, 42, 1, 7};
  pystack(b, 1, 2, 0, s1, 2);
  tb_stack(b, 2, n1, 1); /* the same native path from another line */
  uint32_t s2[] = {1, 43};
  pystack(b, 2, 1, 0, s2, 1);
  tb_stack(b, 3, n2, 1); /* line 42 again, through another native site */
  pystack(b, 3, 1, 0, s1, 1);
  tb_stack(b, 4, n3, 1); /* no Python frames */
  tb_stack(b, 5, n3, 1);
  uint32_t s5[] = {2, 1010};
  pystack(b, 5, 1, PAGELOCK_PY_LIBRARY, s5, 1);
  /* Malformed, each skipped and counted: */
  uint32_t nine[18] = {0};
  pystack(b, 6, 9, 0, nine, 9);      /* depth over the cap */
  pystack(b, 6, 0, 0, nine, 0);      /* depth 0 */
  pystack(b, 6, 3, 0, nine, 1);      /* depth past the record */
  pystack(b, 0, 1, 0, s2, 1);        /* stack id 0 */
  pycode(b, 0, 0, "/src/x.py", "f"); /* code id 0 */
  pagelock_rec_pycode half;
  memset(&half, 0, sizeof half);
  half.id = 9;
  /* no name: the file name's NUL ends the record (24 + 8 bytes) */
  tb_rec(b, PAGELOCK_REC_PYCODE, &half, sizeof half, "/a/b.py", NULL);
  copy(b, 1, 100);
  copy(b, 1, 100);
  copy(b, 2, 150);
  copy(b, 3, 10);
  copy(b, 4, 500);
  copy(b, 5, 5);
  tb_end(b, 1000000000ull + 50000000ull);
}

static void test_rows_group_by_python_line(void **state) {
  (void)state;
  tb b = {0};
  build(&b);
  plr_process p;
  memset(&p, 0, sizeof p);
  assert_int_equal(load(&p.t, &b), 0);
  assert_int_equal(p.t.malformed_records, 6);
  assert_int_equal(plr_process_analyze(&p, 0), 0);
  /* 500 alone; line 42 (200 + 10, two native sites); line 43 (150);
   * threading (5).  Stacks 1 and 2 share their native frame but not their
   * line: two rows. */
  assert_int_equal(p.calls.n, 5);
  const plr_row *v = p.calls.v;
  assert_null(v[0].py);
  assert_int_equal(v[0].b.host_ns, 500);
  assert_non_null(v[1].py);
  assert_int_equal(v[1].py->f[0]->line, 42);
  assert_int_equal(v[1].addr, 0x1000);
  assert_int_equal(v[1].b.host_ns, 200);
  assert_int_equal(v[1].py->depth, 2);
  assert_int_equal(v[1].py->f[1]->line, 7);
  assert_int_equal(v[2].py->f[0]->line, 42);
  assert_int_equal(v[2].addr, 0x2000);
  assert_int_equal(v[3].py->f[0]->line, 43);
  assert_int_equal(v[3].b.host_ns, 150);
  assert_true(v[4].py->f[0]->library);
  assert_true(v[4].py->flags & PAGELOCK_PY_LIBRARY);

  char *s = report(&p, 0);
  assert_contains(s, "train.py:42 in main\n");
  assert_contains(s, "threading.py:1010 in Thread.run\n");
  /* The native site on the next line, beneath the Python line. */
  size_t at = (size_t)(strstr(s, "train.py:42 in main\n") - s) + strlen("train.py:42 in main\n");
  at += strspn(s + at, " ");
  assert_true(strncmp(s + at, "native: 0x1000", 14) == 0);
  free(s);
  s = report(&p, 1);
  assert_contains(
      s,
      "\"python\": {\"file\": \"/src/train.py\", \"line\": 42, \"function\": \"main\", "
      "\"library\": false, \"library_line\": null, \"truncated\": false, \"frames\": "
      "[{\"file\": \"/src/train.py\", "
      "\"line\": 42, \"function\": \"main\", \"library\": false}, {\"file\": \"/src/train.py\", "
      "\"line\": 7, \"function\": \"main\", \"library\": false}]}");
  /* The native-only row keeps its exact shape. */
  assert_contains(s, "\"line\": 0, \"gpu_calls\"");
  free(s);
  plr_process_free(&p);
  tb_free(&b);
}

/* PAGELOCK_PY_CALLER: the first frame is the library line that made the
 * call; rows of one user line split by it, and every report names it
 * beneath the user's line. */
static void test_library_line(void **state) {
  (void)state;
  tb b = {0};
  tb_header(&b, 7, 0);
  uint64_t n1[] = {0x1000};
  pycode(&b, 1, 0, "/src/train.py", "main");
  pycode(&b, 3, PAGELOCK_PYCODE_LIBRARY, "/venv/lib/python3.12/site-packages/accelerate/hooks.py",
         "AlignDevicesHook.pre_forward");
  pycode(&b, 4, PAGELOCK_PYCODE_LIBRARY,
         "/venv/lib/python3.12/site-packages/lightning/fabric/utilities/apply_func.py",
         "move_data_to_device.<locals>.batch_to");
  tb_stack(&b, 1, n1, 1);
  uint32_t s1[] = {3, 170, 1, 42, 1, 7};
  pystack(&b, 1, 3, PAGELOCK_PY_CALLER, s1, 3);
  tb_stack(&b, 2, n1, 1); /* the same user line through another library line */
  uint32_t s2[] = {4, 100, 1, 42};
  pystack(&b, 2, 2, PAGELOCK_PY_CALLER, s2, 2);
  tb_stack(&b, 3, n1, 1); /* the flag with nothing after it: a plain frame */
  uint32_t s3[] = {3, 171};
  pystack(&b, 3, 1, PAGELOCK_PY_CALLER, s3, 1);
  copy(&b, 1, 100);
  copy(&b, 2, 50);
  copy(&b, 3, 10);
  tb_end(&b, 1000000000ull + 50000000ull);
  plr_process p;
  memset(&p, 0, sizeof p);
  assert_int_equal(load(&p.t, &b), 0);
  assert_int_equal(plr_process_analyze(&p, 0), 0);
  assert_int_equal(p.calls.n, 3);
  const plr_row *v = p.calls.v;
  assert_int_equal(v[0].py->f[0]->line, 42);
  assert_int_equal(v[0].py->depth, 2);
  assert_int_equal(v[0].py->f[1]->line, 7);
  assert_non_null(v[0].py->lib);
  assert_int_equal(v[0].py->lib->line, 170);
  assert_int_equal(v[1].py->f[0]->line, 42);
  assert_string_equal(v[1].py->lib->func, "move_data_to_device.<locals>.batch_to");
  assert_null(v[2].py->lib);
  assert_int_equal(v[2].py->f[0]->line, 171);

  char *s = report(&p, 0);
  const char *at = strstr(s, "train.py:42 in main\n");
  assert_non_null(at);
  at += strlen("train.py:42 in main\n");
  at += strspn(at, " ");
  const char *lib = "library: accelerate/hooks.py:170 in AlignDevicesHook.pre_forward\n";
  assert_true(strncmp(at, lib, strlen(lib)) == 0);
  at += strlen(lib);
  at += strspn(at, " ");
  assert_true(strncmp(at, "native: 0x1000", 14) == 0);
  assert_contains(s,
                  "library: lightning/fabric/utilities/apply_func.py:100 in "
                  "move_data_to_device.<locals>.batch_to\n");
  free(s);
  s = report(&p, 1);
  assert_contains(s,
                  "\"library_line\": {\"file\": "
                  "\"/venv/lib/python3.12/site-packages/accelerate/hooks.py\", \"line\": 170, "
                  "\"function\": \"AlignDevicesHook.pre_forward\", \"library\": true}");
  free(s);
  plr_process_free(&p);
  tb_free(&b);
}

/* Without PYSTACK records the tables are exactly those of before. */
static void test_no_python_no_change(void **state) {
  (void)state;
  tb b = {0};
  tb_header(&b, 7, 0);
  uint64_t n1[] = {0x1000}, n2[] = {0x2000};
  tb_stack(&b, 1, n1, 1);
  tb_stack(&b, 2, n1, 1);
  tb_stack(&b, 3, n2, 1);
  copy(&b, 1, 100);
  copy(&b, 2, 150);
  copy(&b, 3, 300);
  tb_end(&b, 1000000000ull + 50000000ull);
  plr_process p;
  memset(&p, 0, sizeof p);
  assert_int_equal(load(&p.t, &b), 0);
  assert_int_equal(plr_process_analyze(&p, 0), 0);
  assert_int_equal(p.calls.n, 2);
  assert_int_equal(p.calls.v[0].addr, 0x2000);
  assert_int_equal(p.calls.v[1].addr, 0x1000);
  assert_int_equal(p.calls.v[1].b.host_ns, 250);
  char *s = report(&p, 1);
  assert_null(strstr(s, "\"python\""));
  free(s);
  plr_process_free(&p);
  tb_free(&b);
}

/* A long site in a fix sentence loses its native frame whole, never a
 * word in the middle (a real accelerate report read "(libc10.s is
 * PyTorch's"). */
static void test_site_shorten(void **state) {
  (void)state;
  char site[256];
  snprintf(site, sizeof site, "%s",
           "accelerate_offload.py:25 in main (via transformers/models/llama/modeling_llama.py:171 "
           "in LlamaMLP.__init__; native: c10::alloc_cpu(unsigned long)+0x8b (libc10.so))");
  plr_site_shorten(site);
  assert_string_equal(site,
                      "accelerate_offload.py:25 in main (via "
                      "transformers/models/llama/modeling_llama.py:171 in LlamaMLP.__init__)");
  char longer[256];
  memset(longer, 0, sizeof longer);
  for (int i = 0; i < 30; i++) strcat(longer, "word_ab ");
  plr_site_shorten(longer);
  assert_true(strlen(longer) <= 160);
  assert_string_equal(longer + strlen(longer) - 10, "word_ab..."); /* whole words */
  snprintf(site, sizeof site, "%s", "main+0x10 (app) app.c:3");
  plr_site_shorten(site);
  assert_string_equal(site, "main+0x10 (app) app.c:3");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rows_group_by_python_line),
      cmocka_unit_test(test_library_line),
      cmocka_unit_test(test_site_shorten),
      cmocka_unit_test(test_no_python_no_change),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
