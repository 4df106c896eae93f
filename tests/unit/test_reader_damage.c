/* test_reader_damage.c - what the reader makes of a trace that is cut,
 * corrupt, from a future version or not a trace at all: it reads what it
 * can, says why it stopped, and never crashes (reader_fixture.h). */
#define _GNU_SOURCE
#include <errno.h>
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

#include "reader_fixture.h"

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
      cmocka_unit_test(test_truncated_at_every_offset),
      cmocka_unit_test(test_corrupt_record_sizes),
      cmocka_unit_test(test_header_errors),
      cmocka_unit_test(test_header_fields_refused),
      cmocka_unit_test(test_stop_flags_say_why),
      cmocka_unit_test(test_unterminated_strings),
      cmocka_unit_test(test_stack_validation),
      cmocka_unit_test(test_unknown_record_types_skipped),
      cmocka_unit_test(test_end_stops_reading),
      cmocka_unit_test(test_random_corruption_never_crashes),
      cmocka_unit_test(test_open_missing_file),
      cmocka_unit_test(test_open_fifo_at_once),
  };
  return cmocka_run_group_tests_name("reader_damage", tests, NULL, NULL);
}
