/* test_shim.c - unit tests of the shim's internals (cmocka).
 *
 * Linked against pagelock_core, the shim's sources as a static library, so
 * hidden functions are callable.  Classification runs over tests/fakecuda
 * (LD_LIBRARY_PATH), the trace round trip through the reporter's reader. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "pl_internal.h"
#include "clock.h"
#include "hostmem.h"
#include "init.h"
#include "pystack.h"
#include "stack.h"
#include "trace.h"
#include "trace_read.h"

static void test_parse_size(void **state) {
  (void)state;
  uint64_t v;
  assert_true(pl_parse_size("4096", &v));
  assert_int_equal(v, 4096);
  assert_true(pl_parse_size("64K", &v));
  assert_int_equal(v, 64 << 10);
  assert_true(pl_parse_size("16m", &v));
  assert_int_equal(v, 16 << 20);
  assert_true(pl_parse_size("2GiB", &v));
  assert_int_equal(v, 2ull << 30);
  assert_true(pl_parse_size("1T", &v)); /* "no allocation tracked", as patterns.sh once wrote it */
  assert_int_equal(v, 1ull << 40);
  assert_true(pl_parse_size("0", &v));
  assert_int_equal(v, 0);
  assert_false(pl_parse_size("", &v));
  assert_false(pl_parse_size("-1", &v));
  assert_false(pl_parse_size("12Q", &v));
  assert_false(pl_parse_size("K", &v));
  assert_false(pl_parse_size("99999999999999999999", &v));
  assert_false(pl_parse_size("18446744073709551615G", &v));
}

/* Run pl_config_reset_for_test with stderr captured into buf. */
static void reload_config(char *buf, size_t len) {
  fflush(stderr);
  int saved = dup(2);
  FILE *tmp = tmpfile();
  dup2(fileno(tmp), 2);
  pl_config_reset_for_test();
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  rewind(tmp);
  size_t n = fread(buf, 1, len - 1, tmp);
  buf[n] = 0;
  fclose(tmp);
}

static void test_config_values(void **state) {
  (void)state;
  char err[4096];
  setenv("PAGELOCK_MODE", "Observe", 1);
  setenv("PAGELOCK_BACKTRACE_DEPTH", "4", 1);
  reload_config(err, sizeof err);
  assert_string_equal(err, "");
  assert_int_equal(pl_opt_long(PL_OPT_MODE), PAGELOCK_MODE_OBSERVE);
  assert_int_equal(pl_opt_long(PL_OPT_BACKTRACE_DEPTH), 4);

  setenv("PAGELOCK_MODE", "fast", 1);
  setenv("PAGELOCK_BACKTRACE_DEPTH", "4x", 1);
  reload_config(err, sizeof err);
  assert_non_null(strstr(
      err,
      "pagelock: invalid PAGELOCK_MODE='fast' (valid: observe,stage,register,auto,off); using 'observe'\n"));
  assert_non_null(strstr(
      err,
      "pagelock: invalid PAGELOCK_BACKTRACE_DEPTH='4x' (valid: an integer from 0 to 16); using 8\n"));
  assert_int_equal(pl_opt_long(PL_OPT_MODE), PAGELOCK_MODE_OBSERVE);
  assert_int_equal(pl_opt_long(PL_OPT_BACKTRACE_DEPTH), 8);

  setenv("PAGELOCK_MODE", "off", 1);
  setenv("PAGELOCK_OUTPTU", "x", 1);
  unsetenv("PAGELOCK_BACKTRACE_DEPTH");
  reload_config(err, sizeof err);
  assert_int_equal(pl_opt_long(PL_OPT_MODE), PAGELOCK_MODE_OFF);
  assert_non_null(strstr(err, "pagelock: unknown variable PAGELOCK_OUTPTU ignored"));

  setenv("PAGELOCK_LOG", "quiet", 1);
  setenv("PAGELOCK_MODE", "nope", 1);
  reload_config(err, sizeof err);
  assert_string_equal(err, ""); /* quiet means quiet */
  unsetenv("PAGELOCK_LOG");
  unsetenv("PAGELOCK_MODE");
  unsetenv("PAGELOCK_OUTPTU");
  reload_config(err, sizeof err);
}

static void test_expand(void **state) {
  (void)state;
  char out[256], want[256], host[128];
  assert_true(pl_trace_expand("a.%p.trace", out, sizeof out));
  snprintf(want, sizeof want, "a.%d.trace", (int)getpid());
  assert_string_equal(out, want);
  gethostname(host, sizeof host);
  assert_true(pl_trace_expand("%h-%%-%", out, sizeof out));
  snprintf(want, sizeof want, "%s-%%-%%", host);
  assert_string_equal(out, want);
  setenv("OMPI_COMM_WORLD_RANK", "3", 1);
  assert_true(pl_trace_expand("r%r", out, sizeof out));
  assert_string_equal(out, "r3");
  setenv("RANK", "5", 1); /* torchrun's wins over MPI's */
  assert_true(pl_trace_expand("r%r", out, sizeof out));
  assert_string_equal(out, "r5");
  unsetenv("RANK");
  unsetenv("OMPI_COMM_WORLD_RANK");
  assert_false(pl_trace_expand("%p%p%p%p", out, 8));
}

/* Write n copy records through the real writer into a fresh file. */
static void write_trace(const char *path, int n) {
  setenv("PAGELOCK_OUTPUT", path, 1);
  pl_config_reset_for_test();
  pl_trace_reset_for_test(); /* forget any earlier file */
  for (int i = 0; i < n; i++) {
    pagelock_rec_copy c;
    memset(&c, 0, sizeof c);
    c.h.type = PAGELOCK_REC_COPY;
    c.h.size = sizeof c;
    c.bytes = 1000 + (uint64_t)i;
    c.host_mem = i % 2 ? PAGELOCK_MEM_PINNED : PAGELOCK_MEM_PAGEABLE;
    c.dir = PAGELOCK_DIR_H2D;
    pl_trace_write(&c, sizeof c);
  }
  pl_trace_note(PAGELOCK_NOTE_WARNING, "a note");
  pl_exit_trace();
  pl_trace_reset_for_test(); /* close it */
  unsetenv("PAGELOCK_OUTPUT");
  pl_config_reset_for_test();
}

static char tmpdir[256];

static void test_trace_roundtrip(void **state) {
  (void)state;
  char path[512];
  snprintf(path, sizeof path, "%s/rt.trace", tmpdir);
  write_trace(path, 5000);
  plr_reader r;
  assert_int_equal(plr_open(&r, path), PLR_OPEN_OK);
  assert_int_equal(r.hdr.pid, (uint64_t)getpid());
  plr_record rec;
  int copies = 0, process = 0, notes = 0, modules = 0;
  uint64_t bytes = 0;
  while (plr_next(&r, &rec)) {
    if (rec.type == PAGELOCK_REC_COPY) {
      copies++;
      bytes += rec.u.copy->bytes;
    }
    if (rec.type == PAGELOCK_REC_PROCESS) {
      process++;
      assert_non_null(strstr(rec.str1, "test_shim_"));
    }
    if (rec.type == PAGELOCK_REC_NOTE) {
      notes++;
      assert_string_equal(rec.str1, "a note");
    }
    if (rec.type == PAGELOCK_REC_MODULE) modules++;
  }
  assert_int_equal(r.stop, PLR_STOP_END);
  assert_int_equal(copies, 5000);
  assert_int_equal(bytes, 5000ull * 1000 + 4999ull * 5000 / 2);
  assert_int_equal(process, 1);
  assert_int_equal(notes, 1);
  assert_true(modules > 1);
  plr_close(&r);
}

static void test_trace_truncated(void **state) {
  (void)state;
  char path[512];
  snprintf(path, sizeof path, "%s/tr.trace", tmpdir);
  write_trace(path, 100);
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  /* Cut inside the 51st copy record: header, PROCESS, 50 copies remain. */
  plr_reader r;
  assert_int_equal(plr_open(&r, path), PLR_OPEN_OK);
  plr_record rec;
  uint64_t cut = 0;
  int copies = 0;
  while (plr_next(&r, &rec))
    if (rec.type == PAGELOCK_REC_COPY && ++copies == 50) cut = r.offset;
  plr_close(&r);
  assert_true(cut > 0);
  assert_int_equal(truncate(path, (off_t)cut + 20), 0);
  assert_int_equal(plr_open(&r, path), PLR_OPEN_OK);
  copies = 0;
  while (plr_next(&r, &rec)) copies += rec.type == PAGELOCK_REC_COPY;
  assert_int_equal(copies, 50);
  assert_int_equal(r.stop, PLR_STOP_TRUNCATED);
  plr_close(&r);
}

/* COPY records the way the copy path writes them: through the thread's
 * ring (or the shared buffer when no ring is free). */
static void put_copy(uint32_t tid, uint64_t seq) {
  pagelock_rec_copy *c = pl_trace_copy_begin();
  if (c == NULL) return;
  memset(c, 0, sizeof *c);
  c->h.type = PAGELOCK_REC_COPY;
  c->h.size = sizeof *c;
  c->tid = tid;
  c->correlation = seq;
  c->bytes = 1;
  pl_trace_copy_end();
}

/* Trace into a fresh file named `name` in tmpdir (path gets its path). */
static void trace_start(const char *name, char *path, size_t n) {
  snprintf(path, n, "%s/%s", tmpdir, name);
  setenv("PAGELOCK_OUTPUT", path, 1);
  pl_config_reset_for_test();
  pl_trace_reset_for_test();
}

static void trace_stop(void) {
  pl_trace_reset_for_test();
  unsetenv("PAGELOCK_OUTPUT");
  pl_config_reset_for_test();
}

/* The COPY records in the file at path, polled every 100 ms until there
 * are `want` (at most 4 s): what has reached the file, not the buffers. */
static int copies_in_file(const char *path, int want) {
  int copies = 0;
  for (int tries = 0; tries < 40 && copies < want; tries++) {
    usleep(100000);
    plr_reader r;
    if (plr_open(&r, path) != PLR_OPEN_OK) continue;
    plr_record rec;
    copies = 0;
    while (plr_next(&r, &rec)) copies += rec.type == PAGELOCK_REC_COPY;
    plr_close(&r);
  }
  return copies;
}

/* The COPY records of the complete file at path, thread by thread (their
 * tid, below `threads`): next[t] counts thread t's records that came in
 * order (correlation 0, 1, ...).  Returns how many did not. */
static int copies_in_order(const char *path, uint64_t *next, uint32_t threads) {
  plr_reader r;
  assert_int_equal(plr_open(&r, path), PLR_OPEN_OK);
  plr_record rec;
  int bad = 0;
  while (plr_next(&r, &rec)) {
    if (rec.type != PAGELOCK_REC_COPY) continue;
    uint32_t t = rec.u.copy->tid;
    if (t >= threads || rec.u.copy->correlation != next[t])
      bad++;
    else
      next[t]++;
  }
  assert_int_equal(r.stop, PLR_STOP_END);
  plr_close(&r);
  return bad;
}

/* Many threads writing at once, through many ring drains and buffer
 * hand-overs to the writer thread: every record arrives, each thread's in
 * its own order.  The threads end before the trace does (their rings are
 * drained as they go); the main thread's records are still in its ring
 * when the trace ends.  Run with a ring for every thread, and with rings
 * for two only (the others write through the shared buffer). */
#define TW_THREADS 5     /* the main thread is number TW_THREADS - 1 */
#define TW_RECORDS 20000 /* 4 x 20000 x 104 B: about 30 buffers */
#define TW_MAIN 10
static void *trace_writer_thread(void *arg) {
  uint32_t t = (uint32_t)(uintptr_t)arg;
  for (uint64_t i = 0; i < TW_RECORDS; i++) put_copy(t, i);
  return NULL;
}

static void trace_threads(unsigned rings) {
  char path[512], name[32];
  snprintf(name, sizeof name, "th%u.trace", rings);
  trace_start(name, path, sizeof path);
  pl_trace_rings_for_test(rings);
  pthread_t th[TW_THREADS - 1];
  for (uintptr_t t = 0; t < TW_THREADS - 1; t++)
    assert_int_equal(pthread_create(&th[t], NULL, trace_writer_thread, (void *)t), 0);
  for (uint64_t i = 0; i < TW_MAIN; i++) put_copy(TW_THREADS - 1, i);
  for (int t = 0; t < TW_THREADS - 1; t++) pthread_join(th[t], NULL);
  assert_true(pl_trace_writer_running());
  pl_exit_trace();
  uint64_t next[TW_THREADS] = {0};
  assert_int_equal(copies_in_order(path, next, TW_THREADS), 0);
  for (int t = 0; t < TW_THREADS - 1; t++) assert_int_equal(next[t], TW_RECORDS);
  assert_int_equal(next[TW_THREADS - 1], TW_MAIN);
  pl_trace_rings_for_test(~0u);
  trace_stop();
}

static void test_trace_threads(void **state) {
  (void)state;
  trace_threads(~0u);
}

static void test_trace_threads_few_rings(void **state) {
  (void)state;
  trace_threads(2);
}

/* A program that stops copying still gets its records into the file
 * within about a second, with no further record and no exit: its first
 * copy opened the file and started the writer thread, which drains the
 * ring of a thread that is still there. */
static void test_trace_streams(void **state) {
  (void)state;
  char path[512];
  trace_start("st.trace", path, sizeof path);
  for (int i = 0; i < 10; i++) put_copy(1, (uint64_t)i);
  assert_int_equal(copies_in_file(path, 10), 10);
  trace_stop();
}

/* A ring the writer drained part-way (its once-a-second drain) fills up
 * from the middle: the drain that follows runs across the ring's end, and
 * every record arrives, whole and in order. */
static void test_trace_ring_wraps(void **state) {
  (void)state;
  char path[512];
  trace_start("wr.trace", path, sizeof path);
  for (uint64_t i = 0; i < 10; i++) put_copy(7, i);
  assert_int_equal(copies_in_file(path, 10), 10);
  for (uint64_t i = 10; i < 300; i++) put_copy(7, i);
  pl_exit_trace();
  uint64_t next[8] = {0};
  assert_int_equal(copies_in_order(path, next, 8), 0);
  assert_int_equal(next[7], 300);
  trace_stop();
}

/* Many live threads whose rings together hold more than one buffer: the
 * writer's once-a-second drain fills and hands over several buffers in one
 * go, and must not wait for itself.  The threads stay alive (no drain at
 * their exit) until every record is in the file. */
#define TD_THREADS 48 /* 48 x 63 x 104 B = 307 KiB, over the 256 KiB buffer */
static pthread_barrier_t td_filled, td_release;
static void *trace_drain_thread(void *arg) {
  uint32_t t = (uint32_t)(uintptr_t)arg;
  for (uint64_t i = 0; i < 63; i++) put_copy(t, i); /* one short of a ring-full drain */
  pthread_barrier_wait(&td_filled);
  pthread_barrier_wait(&td_release);
  return NULL;
}

static void test_trace_writer_drains_many_rings(void **state) {
  (void)state;
  char path[512];
  trace_start("dr.trace", path, sizeof path);
  pthread_barrier_init(&td_filled, NULL, TD_THREADS + 1);
  pthread_barrier_init(&td_release, NULL, TD_THREADS + 1);
  pthread_t th[TD_THREADS];
  for (uintptr_t t = 0; t < TD_THREADS; t++)
    assert_int_equal(pthread_create(&th[t], NULL, trace_drain_thread, (void *)t), 0);
  pthread_barrier_wait(&td_filled);
  int copies = copies_in_file(path, TD_THREADS * 63);
  pthread_barrier_wait(&td_release);
  for (int t = 0; t < TD_THREADS; t++) pthread_join(th[t], NULL);
  assert_int_equal(copies, TD_THREADS * 63);
  trace_stop();
}

/* stderr captured into a file while a test runs: what pl_log printed. */
static int capture_saved = -1;
static FILE *capture_file;
static void capture_begin(void) {
  fflush(stderr);
  capture_saved = dup(2);
  capture_file = tmpfile();
  dup2(fileno(capture_file), 2);
}
static void capture_end(char *buf, size_t len) {
  fflush(stderr);
  dup2(capture_saved, 2);
  close(capture_saved);
  rewind(capture_file);
  size_t n = fread(buf, 1, len - 1, capture_file);
  buf[n] = 0;
  fclose(capture_file);
}

/* A line is never cut, and the format's conversions print as printf's do:
 * a 5,000-character value arrives whole, after what came before it. */
static void test_log_whole_line(void **state) {
  (void)state;
  static char big[5001], got[16384], want[16384];
  memset(big, 'x', 5000);
  big[0] = '/';
  capture_begin();
  pl_log(PL_LOG_ERROR, PL_LK_CONFIG,
         "PAGELOCK_OUTPUT is too long (at most %zu bytes); no trace: PAGELOCK_OUTPUT='%s'",
         (size_t)4079, big);
  pl_log(PL_LOG_ERROR, PL_LK_CONFIG,
         "%d|%5d|%-5d|%ld|%u|%lu|%llu|%x|%#X|%zu|%.1f|%c|%%|%.*s|%-6s|%6s|%hhu|%p|%*d|", -42, 7, 7,
         -1234567890123L, 4000000000u, 18446744073709551615ul, 1ull << 63, 0xbeef, 0xbeef,
         (size_t)99, 2.25, 'q', 3, "abcdef", "ab", "ab", 300, (void *)0x1234, -4, 5);
  capture_end(got, sizeof got);
  int n = snprintf(
      want, sizeof want,
      "pagelock: PAGELOCK_OUTPUT is too long (at most %zu bytes); no trace: PAGELOCK_OUTPUT='%s'\n",
      (size_t)4079, big);
  n += snprintf(
      want + n, sizeof want - (size_t)n,
      "pagelock: %d|%5d|%-5d|%ld|%u|%lu|%llu|%x|%#X|%zu|%.1f|%c|%%|%.*s|%-6s|%6s|%hhu|%p|%*d|\n",
      -42, 7, 7, -1234567890123L, 4000000000u, 18446744073709551615ul, 1ull << 63, 0xbeef, 0xbeef,
      (size_t)99, 2.25, 'q', 3, "abcdef", "ab", "ab", 300, (void *)0x1234, -4, 5);
  assert_string_equal(got, want);
}

/* The raw bytes of a trace file (caller frees). */
static unsigned char *read_file(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  rewind(f);
  unsigned char *b = malloc((size_t)len + 1);
  assert_non_null(b);
  assert_int_equal(fread(b, 1, (size_t)len, f), (size_t)len);
  fclose(f);
  *n = (size_t)len;
  return b;
}

/* Walk a file's records: each CHECK closes the bytes since the previous
 * one (or the header) with their CRC32C.  Returns where the records end
 * (the file's size when they frame it exactly); counts blocks and COPY
 * records. */
static size_t walk_blocks(const unsigned char *b, size_t n, int *blocks, int *copies) {
  size_t off = sizeof(pagelock_file_header), start = off;
  *blocks = *copies = 0;
  while (off + sizeof(pagelock_rec_hdr) <= n) {
    pagelock_rec_hdr h;
    memcpy(&h, b + off, sizeof h);
    if (h.size < sizeof h || h.size % 8 || h.size > n - off) break;
    if (h.type == PAGELOCK_REC_COPY) (*copies)++;
    if (h.type == PAGELOCK_REC_CHECK) {
      pagelock_rec_check c;
      memcpy(&c, b + off, sizeof c);
      assert_int_equal(c.start, start);
      assert_int_equal(c.crc32c, pagelock_crc32c(0, b + start, off - start));
      (*blocks)++;
      start = off + h.size;
    }
    off += h.size;
  }
  return off;
}

/* Every buffer the writer writes is a block closed by a CHECK record; the
 * header says so; the file ends with the CHECK of the block holding END. */
static void test_trace_checksums(void **state) {
  (void)state;
  char path[512];
  snprintf(path, sizeof path, "%s/ck.trace", tmpdir);
  write_trace(path, 5000); /* 520 KB of copies: two blocks at least */
  size_t n;
  unsigned char *b = read_file(path, &n);
  pagelock_file_header h;
  memcpy(&h, b, sizeof h);
  assert_true(h.flags & PAGELOCK_FILE_CHECKSUMS);
  int blocks, copies;
  assert_int_equal(walk_blocks(b, n, &blocks, &copies), n);
  assert_true(blocks >= 2);
  assert_int_equal(copies, 5000);
  pagelock_rec_hdr last, end;
  memcpy(&last, b + n - sizeof(pagelock_rec_check), sizeof last);
  memcpy(&end, b + n - sizeof(pagelock_rec_check) - sizeof(pagelock_rec_end), sizeof end);
  assert_int_equal(last.type, PAGELOCK_REC_CHECK);
  assert_int_equal(end.type, PAGELOCK_REC_END);
  free(b);
}

/* Close the trace's descriptor as a raw system call would: no wrapper
 * in this test binary sees it.  Between two blocks, though: ThreadSanitizer
 * would report a close racing the writer's fstat, the very race that
 * check is there for. */
static int close_behind_the_shim(void) {
  sigset_t s;
  int t = pl_trace_fd_lock(&s);
  assert_true(t >= 3);
  close(t);
  pl_trace_fd_unlock(&s);
  return t;
}

/* The program closes the trace's descriptor behind the shim's back and
 * puts its own file at that number: the writer's check before the next
 * block sees another file there, writes nothing into it, opens the trace
 * again by path and goes on; every record arrives. */
static void test_trace_fd_taken(void **state) {
  (void)state;
  char path[512], data[512];
  trace_start("fd.trace", path, sizeof path);
  for (int i = 0; i < 100; i++) put_copy(1, (uint64_t)i);
  int t = close_behind_the_shim();
  snprintf(data, sizeof data, "%s/fd.data", tmpdir);
  int dfd = open(data, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  assert_true(dfd >= 0);
  assert_int_equal(dup2(dfd, t), t);
  close(dfd);
  assert_int_equal(write(t, "forty bytes of the program's own data..\n", 40), 40);
  for (int i = 100; i < 200; i++) put_copy(1, (uint64_t)i);
  capture_begin();
  pl_exit_trace();
  char err[4096];
  capture_end(err, sizeof err);
  assert_string_equal(err, "");
  struct stat st;
  assert_int_equal(stat(data, &st), 0);
  assert_int_equal(st.st_size, 40);
  assert_true(atomic_load(&pl_trace_fd) != t);
  close(t);
  plr_reader r;
  assert_int_equal(plr_open(&r, path), PLR_OPEN_OK);
  plr_record rec;
  int copies = 0;
  while (plr_next(&r, &rec)) copies += rec.type == PAGELOCK_REC_COPY;
  assert_int_equal(r.stop, PLR_STOP_END);
  assert_int_equal(copies, 200);
  plr_close(&r);
  trace_stop();
}

/* The file cannot be had back: renamed away (stop, said once, nothing
 * written anywhere), or cut short by someone while the descriptor was
 * gone (stop, PAGELOCK_FILE_STOP_FD_LOST in its header). */
static void test_trace_fd_lost(void **state) {
  (void)state;
  char path[512], moved[600], err[4096], want[2048];
  trace_start("fl.trace", path, sizeof path);
  put_copy(1, 0);
  close_behind_the_shim();
  snprintf(moved, sizeof moved, "%s.moved", path);
  assert_int_equal(rename(path, moved), 0);
  pl_log_reset_for_test();
  capture_begin();
  for (int i = 1; i < 100; i++) put_copy(1, (uint64_t)i);
  pl_exit_trace();
  capture_end(err, sizeof err);
  snprintf(
      want, sizeof want,
      "pagelock: the program closed the trace's descriptor and the trace file cannot be opened "
      "again: No such file or directory; the trace stops at byte 64: '%s'\n",
      path);
  assert_string_equal(err, want);
  assert_int_equal(atomic_load(&pl_trace_fd), -1);
  struct stat st;
  assert_int_equal(stat(moved, &st), 0);
  assert_int_equal(st.st_size, 64); /* the header, nothing after it */
  trace_stop();

  /* Cut short: 3000 records fill a buffer, which reaches the file; the
   * file then loses its last 8 bytes while the descriptor is gone. */
  trace_start("fc.trace", path, sizeof path);
  pagelock_rec_copy c;
  memset(&c, 0, sizeof c);
  c.h.type = PAGELOCK_REC_COPY;
  c.h.size = sizeof c;
  for (int i = 0; i < 3000; i++) pl_trace_write(&c, sizeof c);
  for (int tries = 0; tries < 250 && (stat(path, &st) != 0 || st.st_size < (256 << 10)); tries++)
    usleep(20000);
  assert_true(st.st_size >= (256 << 10));
  close_behind_the_shim();
  assert_int_equal(truncate(path, st.st_size - 8), 0);
  pl_log_reset_for_test();
  capture_begin();
  pl_exit_trace();
  capture_end(err, sizeof err);
  assert_non_null(strstr(err, "the trace file was cut short; the trace stops at byte"));
  size_t n;
  unsigned char *b = read_file(path, &n);
  pagelock_file_header h;
  memcpy(&h, b, sizeof h);
  assert_true(h.flags & PAGELOCK_FILE_STOP_FD_LOST);
  free(b);
  trace_stop();
}

/* The file may not grow past RLIMIT_FSIZE: the writer stops short of the
 * limit (a write past it would raise SIGXFSZ, which kills a program that
 * does not ignore it), at a whole record closed by its CHECK, with
 * PAGELOCK_FILE_STOP_DISK_FULL in the header and one line on stderr. */
static void test_trace_file_size_limit(void **state) {
  (void)state;
  char path[512], err[4096];
  struct rlimit old, lim;
  getrlimit(RLIMIT_FSIZE, &old);
  lim = old;
  lim.rlim_cur = 100000;
  void (*xfsz)(int) = signal(SIGXFSZ, SIG_IGN); /* were the shim to raise it */
  pl_log_reset_for_test();
  trace_start("fs.trace", path, sizeof path);
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
  capture_begin();
  pagelock_rec_copy c;
  memset(&c, 0, sizeof c);
  c.h.type = PAGELOCK_REC_COPY;
  c.h.size = sizeof c;
  for (int i = 0; i < 5000; i++) pl_trace_write(&c, sizeof c);
  pl_exit_trace();
  capture_end(err, sizeof err);
  setrlimit(RLIMIT_FSIZE, &old);
  signal(SIGXFSZ, xfsz);
  size_t n;
  unsigned char *b = read_file(path, &n);
  assert_true(n <= 100000 && n > 90000);
  pagelock_file_header h;
  memcpy(&h, b, sizeof h);
  assert_true(h.flags & PAGELOCK_FILE_STOP_DISK_FULL);
  int blocks, copies;
  assert_int_equal(walk_blocks(b, n, &blocks, &copies), n);
  assert_int_equal(blocks, 1);
  assert_true(copies > (int)(90000 / sizeof c));
  char want[1024];
  snprintf(want, sizeof want,
           "pagelock: the file size limit (RLIMIT_FSIZE) is reached (File too large): the trace "
           "stops at its last whole record, byte %zu: '%s'\n",
           n, path);
  assert_string_equal(err, want);
  free(b);
  trace_stop();
}

static uint64_t real_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Reads pl_now_ns for `ms` milliseconds: counts steps back and the worst
 * distance from clock_gettime (read just before and after). */
typedef struct clock_run {
  int ms;
  int back;
  uint64_t worst;
} clock_run;
static void *clock_reader(void *arg) {
  clock_run *cr = arg;
  uint64_t end = real_ns() + (uint64_t)cr->ms * 1000000ull, last = 0;
  for (uint64_t i = 0;; i++) {
    uint64_t a = real_ns(), v = pl_now_ns(), b = real_ns();
    if (v < last) cr->back++;
    last = v;
    uint64_t off = v < a ? a - v : v > b ? v - b : 0;
    if (off > cr->worst) cr->worst = off;
    if ((i & 1023) == 0) usleep(200); /* let anchors age and threads mix */
    if (b > end) break;
  }
  return NULL;
}

/* The TSC map: as CLOCK_MONOTONIC to within microseconds, never back,
 * across re-anchoring (every 100 ms) and from several threads at once. */
static void test_clock(void **state) {
  (void)state;
  bool was = pl_clock_uses_tsc();
  if (!pl_clock_use_tsc_for_test(true)) {
    print_message("no TSC on this machine: skipped\n");
    skip();
  }
  assert_false(pl_clock_calibrated()); /* no rate measured yet */
  clock_run runs[4] = {{.ms = 400}, {.ms = 400}, {.ms = 400}, {.ms = 400}};
  pthread_t th[4];
  for (int t = 0; t < 4; t++)
    assert_int_equal(pthread_create(&th[t], NULL, clock_reader, &runs[t]), 0);
  for (int t = 0; t < 4; t++) pthread_join(th[t], NULL);
  assert_true(pl_clock_calibrated());
  for (int t = 0; t < 4; t++) {
    assert_int_equal(runs[t].back, 0);
    /* A wrong rate would be off by milliseconds within the 400 ms. */
    if (runs[t].worst > 50000)
      print_message("thread %d: %llu ns from clock_gettime\n", t,
                    (unsigned long long)runs[t].worst);
    assert_true(runs[t].worst <= 50000);
  }
  pl_clock_use_tsc_for_test(was);
}

/* Classification over the fake driver: the answer must come from the
 * driver's own attribute query for every kind of memory. */
static void test_classify(void **state) {
  (void)state;
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (h == NULL) {
    print_message("fake libcuda not found: %s\n", dlerror());
    fail();
  }
  CUresult (*init)(unsigned) = dlsym(h, "cuInit");
  CUresult (*retain)(CUcontext *, CUdevice) = dlsym(h, "cuDevicePrimaryCtxRetain");
  CUresult (*setcur)(CUcontext) = dlsym(h, "cuCtxSetCurrent");
  CUresult (*hostalloc)(void **, size_t, unsigned) = dlsym(h, "cuMemHostAlloc");
  CUresult (*alloc)(CUdeviceptr *, size_t) = dlsym(h, "cuMemAlloc_v2");
  CUresult (*reg)(void *, size_t, unsigned) = dlsym(h, "cuMemHostRegister_v2");
  CUresult (*unreg)(void *) = dlsym(h, "cuMemHostUnregister");
  CUresult (*managed)(CUdeviceptr *, size_t, unsigned) = dlsym(h, "cuMemAllocManaged");
  assert_non_null(init);
  assert_non_null(retain);
  assert_non_null(managed);
  CUcontext ctx;
  assert_int_equal(init(0), 0);
  assert_int_equal(retain(&ctx, 0), 0);
  assert_int_equal(setcur(ctx), 0);
  void *pinned;
  CUdeviceptr dev, man;
  assert_int_equal(hostalloc(&pinned, 1 << 20, 0), 0);
  assert_int_equal(alloc(&dev, 1 << 20), 0);
  assert_int_equal(managed(&man, 1 << 20, CU_MEM_ATTACH_GLOBAL), 0);
  char *pageable = malloc(1 << 20);
  assert_int_equal(pl_hostmem_classify((CUdeviceptr)(uintptr_t)pageable), PAGELOCK_MEM_PAGEABLE);
  assert_int_equal(pl_hostmem_classify((CUdeviceptr)(uintptr_t)pinned), PAGELOCK_MEM_PINNED);
  assert_int_equal(pl_hostmem_classify((CUdeviceptr)(uintptr_t)pinned + 4095), PAGELOCK_MEM_PINNED);
  assert_int_equal(pl_hostmem_classify(dev), PAGELOCK_MEM_DEVICE);
  assert_int_equal(pl_hostmem_classify(man), PAGELOCK_MEM_MANAGED);
  assert_int_equal(pl_hostmem_classify(0), PAGELOCK_MEM_UNKNOWN);
  /* Registered behind the shim's back (no dlsym override in this test
   * binary): the per-thread memo of pageable pages answers from memory for
   * at most 64 classifications, then the driver's answer (page-locked)
   * wins.  A registration through the hooks is seen at once (the registry
   * test checks that). */
  assert_int_equal(reg(pageable, 1 << 20, 0), 0);
  int k = PAGELOCK_MEM_PAGEABLE, calls = 0;
  while (k == PAGELOCK_MEM_PAGEABLE && calls < 1000) {
    k = pl_hostmem_classify((CUdeviceptr)(uintptr_t)pageable + 100);
    calls++;
  }
  assert_int_equal(k, PAGELOCK_MEM_PINNED);
  assert_true(calls <= 65);
  assert_int_equal(unreg(pageable), 0);
  pl_hostmem_invalidate(NULL, 0); /* (the hooks would have done this) */
  assert_int_equal(pl_hostmem_classify((CUdeviceptr)(uintptr_t)pageable + 100),
                   PAGELOCK_MEM_PAGEABLE);
  /* What the cuMemHostRegister hook records is seen at the very next call,
   * memo or not. */
  pl_hostmem_pinned_add(pageable, 1 << 20, PAGELOCK_MEM_REGISTERED);
  assert_int_equal(pl_hostmem_classify((CUdeviceptr)(uintptr_t)pageable + 100),
                   PAGELOCK_MEM_REGISTERED);
  pl_hostmem_pinned_remove(pageable);
  assert_int_equal(pl_hostmem_classify((CUdeviceptr)(uintptr_t)pageable + 100),
                   PAGELOCK_MEM_PAGEABLE);
  free(pageable);
}

/* The memo of untracked pageable pages may answer before the registry is
 * asked (hostmem.c): it must never hide an allocation's site, neither one
 * that ends on a page with untracked bytes after it, nor one made on a
 * page the memo already holds.  (test_classify set the driver up.) */
static void test_classify_memo_sites(void **state) {
  (void)state;
  assert_int_equal(pl_hostmem_init(64 << 10), 64 << 10); /* the malloc hook's, in the shim */
  const size_t K = 128 << 10;
  char *m = mmap(NULL, 4 * K, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  assert_true(m != MAP_FAILED);
  uint32_t site = 99;
  /* A block that ends 100 bytes into a page, untracked bytes after it. */
  char *blk = m + 100, *end = blk + K;
  pl_hostmem_track(blk, K, 11);
  for (int i = 0; i < 3; i++) {
    assert_int_equal(pl_hostmem_classify_site((CUdeviceptr)(uintptr_t)(end + 500), &site, NULL),
                     PAGELOCK_MEM_PAGEABLE);
    assert_int_equal(site, 0);
  }
  assert_int_equal(pl_hostmem_classify_site((CUdeviceptr)(uintptr_t)(end - 50), &site, NULL),
                   PAGELOCK_MEM_PAGEABLE);
  assert_int_equal(site, 11);
  /* A page the memo holds as untracked, then an allocation over it. */
  char *q = m + 3 * K;
  for (int i = 0; i < 3; i++) {
    assert_int_equal(pl_hostmem_classify_site((CUdeviceptr)(uintptr_t)q, &site, NULL),
                     PAGELOCK_MEM_PAGEABLE);
    assert_int_equal(site, 0);
  }
  pl_hostmem_track(q - 1000, 64 << 10, 12);
  assert_int_equal(pl_hostmem_classify_site((CUdeviceptr)(uintptr_t)q, &site, NULL),
                   PAGELOCK_MEM_PAGEABLE);
  assert_int_equal(site, 12);
  assert_true(pl_hostmem_untrack(blk));
  assert_true(pl_hostmem_untrack(q - 1000));
  assert_int_equal(munmap(m, 4 * K), 0);
}

/* A fork's child starts a trace of its own, and writes again the STACK
 * record of every stack its records name, though the parent's trace has
 * them already. */
static void test_stack_emit_reset(void **state) {
  (void)state;
  char path[512];
  trace_start("stacks.trace", path, sizeof path);
  uint32_t id = pl_stack_capture(0);
  assert_int_not_equal(id, 0);
  pl_stack_emit(id);
  pl_stack_emit(id);
  pl_stack_reset(); /* what the child of a fork runs */
  pl_stack_emit(id);
  pl_stack_emit(id);
  pl_exit_trace();
  trace_stop();
  plr_reader r;
  assert_int_equal(plr_open(&r, path), PLR_OPEN_OK);
  plr_record rec;
  int stacks = 0;
  while (plr_next(&r, &rec)) stacks += rec.type == PAGELOCK_REC_STACK;
  plr_close(&r);
  assert_int_equal(stacks, 2);
}

/* The device a copy's record names: right for each stream and context,
 * asked of the driver once per stream and not per copy, and asked again
 * after any stream or context is destroyed through the hooks (a handle may
 * then come back naming another, on another device) or after 4096 uses. */
static void test_copy_device(void **state) {
  (void)state;
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  assert_non_null(h);
  CUresult (*init)(unsigned) = dlsym(h, "cuInit");
  CUresult (*retain)(CUcontext *, CUdevice) = dlsym(h, "cuDevicePrimaryCtxRetain");
  CUresult (*setcur)(CUcontext) = dlsym(h, "cuCtxSetCurrent");
  CUresult (*mkstream)(CUstream *, unsigned) = dlsym(h, "cuStreamCreate");
  unsigned long (*calls)(const char *) = dlsym(h, "fakecuda_call_count");
  void (*reset)(void) = dlsym(h, "fakecuda_reset_call_counts");
  assert_non_null(calls);
  assert_non_null(reset);
  CUcontext c0, c1;
  CUstream s0, s1, s2, s3;
  assert_int_equal(init(0), 0);
  /* main() asks the fake for two devices. */
  assert_int_equal(retain(&c0, 0), 0);
  assert_int_equal(retain(&c1, 1), 0);
  assert_int_equal(setcur(c1), 0);
  assert_int_equal(mkstream(&s1, 0), 0);
  assert_int_equal(setcur(c0), 0);
  assert_int_equal(mkstream(&s0, 0), 0);
  assert_int_equal(mkstream(&s2, 0), 0);
  assert_int_equal(mkstream(&s3, 0), 0);

  assert_int_equal(pl_copy_device(s0), 0);
  assert_int_equal(pl_copy_device(s1), 1); /* another context: pushed for the question */
  assert_int_equal(pl_copy_device(NULL), 0);
  assert_int_equal(pl_copy_device(CU_STREAM_PER_THREAD), 0);
  assert_int_equal(setcur(c1), 0);
  assert_int_equal(pl_copy_device(NULL), 1); /* the default stream follows the context */
  assert_int_equal(pl_copy_device(CU_STREAM_LEGACY), 1);
  assert_int_equal(pl_copy_device(s0), 0);
  assert_int_equal(setcur(c0), 0);
  assert_int_equal(pl_copy_device(NULL), 0); /* one context remembered: asked again */
  assert_int_equal(pl_copy_device(s2), 0);
  assert_int_equal(pl_copy_device(s3), 0);

  /* Four known streams and the context: no question to the driver, in
   * whatever order, wherever the fake's allocator put the handles. */
  CUstream all[4] = {s0, s1, s2, s3};
  reset();
  for (int i = 0; i < 1000; i++) {
    assert_int_equal(pl_copy_device(all[i % 4]), i % 4 == 1);
    assert_int_equal(pl_copy_device(all[(i * 3) % 4]), (i * 3) % 4 == 1);
    assert_int_equal(pl_copy_device(NULL), 0);
  }
  assert_int_equal(calls("cuStreamGetCtx"), 0);
  assert_int_equal(calls("cuCtxGetDevice"), 0);

  /* A stream destroyed through the hook: every thread asks again. */
  assert_int_equal(cuStreamDestroy_v2(s2), 0);
  assert_int_equal(pl_copy_device(s0), 0);
  assert_int_equal(calls("cuStreamGetCtx"), 1);
  assert_int_equal(pl_copy_device(s0), 0);
  assert_int_equal(calls("cuStreamGetCtx"), 1);
  assert_int_equal(cuStreamDestroy(s3), 0);
  assert_int_equal(pl_copy_device(s0), 0);
  assert_int_equal(calls("cuStreamGetCtx"), 2);
  /* A context released through the hook: the default stream asks again. */
  reset();
  assert_int_equal(retain(&c1, 1), 0);
  assert_int_equal(cuDevicePrimaryCtxRelease_v2(1), 0);
  assert_int_equal(pl_copy_device(NULL), 0);
  assert_int_equal(calls("cuCtxGetDevice"), 1);

  /* Even with no teardown, an answer is asked again after 4096 uses. */
  assert_int_equal(pl_copy_device(s0), 0); /* asked: the release above */
  reset();
  for (int i = 0; i < 5000; i++) assert_int_equal(pl_copy_device(s0), 0);
  assert_int_equal(calls("cuStreamGetCtx"), 1);

  assert_int_equal(cuStreamDestroy_v2(s0), 0);
  assert_int_equal(cuStreamDestroy_v2(s1), 0);
}

/* The Python walk's cache of pages known readable: an unmap forgets the
 * pages it unmaps, not every page (a Python program maps and unmaps its
 * object arenas all the time, a CUDA program large ranges, and each walk
 * then asked the kernel about every page again), small or large. */
static void test_py_page_cache(void **state) {
  (void)state;
  size_t pg = 4096;
  char *a = mmap(NULL, 4 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  char *b = mmap(NULL, 4 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  assert_true(a != MAP_FAILED && b != MAP_FAILED);
  a[0] = b[0] = 1;
  assert_true(pl_py_page_ok_for_test((uintptr_t)a));
  assert_true(pl_py_page_ok_for_test((uintptr_t)b));
  assert_true(pl_py_page_known_for_test((uintptr_t)a));
  assert_true(pl_py_page_known_for_test((uintptr_t)b));
  pl_py_unmapped((uintptr_t)b, 4 * pg);
  assert_true(pl_py_page_known_for_test((uintptr_t)a)); /* untouched by b's unmap */
  assert_false(pl_py_page_known_for_test((uintptr_t)b));
  assert_int_equal(munmap(b, 4 * pg), 0);
  assert_false(pl_py_page_ok_for_test((uintptr_t)b)); /* asked again: gone */
  /* too large to forget page by page: a pass over the table, which
   * forgets what lies in the range and nothing else */
  pl_py_unmapped((uintptr_t)a + ((size_t)1 << 40), (size_t)64 << 20);
  assert_true(pl_py_page_known_for_test((uintptr_t)a));
  pl_py_unmapped((uintptr_t)a - ((size_t)32 << 20), (size_t)64 << 20);
  assert_false(pl_py_page_known_for_test((uintptr_t)a));
  assert_true(pl_py_page_ok_for_test((uintptr_t)a));
  pl_py_unmapped(UINTPTR_MAX - ((size_t)64 << 20), (size_t)128 << 20); /* wraps: to the top */
  assert_true(pl_py_page_known_for_test((uintptr_t)a));
  assert_int_equal(munmap(a, 4 * pg), 0);
}

/* _exit's hook asks whether it runs in a signal handler (CUPTI's flush is
 * skipped there): no on the test's own stack, yes inside a handler. */
static volatile sig_atomic_t in_handler_seen = -1;
static void note_handler(int sig) {
  (void)sig;
  in_handler_seen = pl_stack_in_handler();
}
static void test_stack_in_handler(void **state) {
  (void)state;
  assert_false(pl_stack_in_handler());
  struct sigaction sa, old;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = note_handler;
  assert_int_equal(sigaction(SIGUSR1, &sa, &old), 0);
  raise(SIGUSR1);
  sigaction(SIGUSR1, &old, NULL);
  assert_int_equal(in_handler_seen, 1);
}

int main(void) {
  /* test_copy_device copies on two devices; the fake reads this at load. */
  setenv("FAKECUDA_DEVICES", "2", 1);
  snprintf(tmpdir, sizeof tmpdir, "%s/pagelock-unit.XXXXXX",
           getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  if (mkdtemp(tmpdir) == NULL) return 2;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_parse_size),
      cmocka_unit_test(test_config_values),
      cmocka_unit_test(test_expand),
      cmocka_unit_test(test_trace_roundtrip),
      cmocka_unit_test(test_trace_truncated),
      cmocka_unit_test(test_trace_threads),
      cmocka_unit_test(test_trace_threads_few_rings),
      cmocka_unit_test(test_trace_streams),
      cmocka_unit_test(test_trace_writer_drains_many_rings),
      cmocka_unit_test(test_trace_ring_wraps),
      cmocka_unit_test(test_log_whole_line),
      cmocka_unit_test(test_trace_checksums),
      cmocka_unit_test(test_trace_fd_taken),
      cmocka_unit_test(test_trace_fd_lost),
      cmocka_unit_test(test_trace_file_size_limit),
      cmocka_unit_test(test_clock),
      cmocka_unit_test(test_classify),
      cmocka_unit_test(test_classify_memo_sites),
      cmocka_unit_test(test_copy_device),
      cmocka_unit_test(test_py_page_cache),
      cmocka_unit_test(test_stack_in_handler),
      cmocka_unit_test(test_stack_emit_reset),
  };
  int rc = cmocka_run_group_tests_name("shim", tests, NULL, NULL);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  if (system(cmd) != 0) rc = rc ? rc : 1;
  return rc;
}
