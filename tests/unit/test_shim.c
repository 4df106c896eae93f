/* test_shim.c - unit tests of the shim's internals (cmocka).
 *
 * Linked against pagelock_core, the shim's sources as a static library, so
 * hidden functions are callable.  Classification runs over tests/fakecuda
 * (LD_LIBRARY_PATH), the trace round trip through the reporter's reader. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "pl_internal.h"
#include "trace_read.h"

static void test_parse_size(void **state) {
  (void)state;
  uint64_t v;
  assert_true(pl_parse_size("4096", &v)); assert_int_equal(v, 4096);
  assert_true(pl_parse_size("64K", &v)); assert_int_equal(v, 64 << 10);
  assert_true(pl_parse_size("16m", &v)); assert_int_equal(v, 16 << 20);
  assert_true(pl_parse_size("2GiB", &v)); assert_int_equal(v, 2ull << 30);
  assert_true(pl_parse_size("0", &v)); assert_int_equal(v, 0);
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
  assert_non_null(strstr(err, "pagelock: invalid PAGELOCK_MODE='fast' (valid: observe,stage,register,auto,off); using 'observe'\n"));
  assert_non_null(strstr(err, "pagelock: invalid PAGELOCK_BACKTRACE_DEPTH='4x' (valid: an integer from 0 to 16); using 8\n"));
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
  pl_trace_atfork_child(); /* forget any earlier file */
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
  pl_trace_finish();
  pl_trace_atfork_child(); /* close it */
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
    if (rec.type == PAGELOCK_REC_COPY) { copies++; bytes += rec.u.copy->bytes; }
    if (rec.type == PAGELOCK_REC_PROCESS) { process++; assert_non_null(strstr(rec.str1, "test_shim_unit")); }
    if (rec.type == PAGELOCK_REC_NOTE) { notes++; assert_string_equal(rec.str1, "a note"); }
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

/* Classification over the fake driver: the answer must come from the
 * driver's own attribute query for every kind of memory. */
static void test_classify(void **state) {
  (void)state;
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (h == NULL) { print_message("fake libcuda not found: %s\n", dlerror()); fail(); }
  CUresult (*init)(unsigned) = dlsym(h, "cuInit");
  CUresult (*retain)(CUcontext *, CUdevice) = dlsym(h, "cuDevicePrimaryCtxRetain");
  CUresult (*setcur)(CUcontext) = dlsym(h, "cuCtxSetCurrent");
  CUresult (*hostalloc)(void **, size_t, unsigned) = dlsym(h, "cuMemHostAlloc");
  CUresult (*alloc)(CUdeviceptr *, size_t) = dlsym(h, "cuMemAlloc_v2");
  CUresult (*reg)(void *, size_t, unsigned) = dlsym(h, "cuMemHostRegister_v2");
  CUresult (*unreg)(void *) = dlsym(h, "cuMemHostUnregister");
  CUresult (*managed)(CUdeviceptr *, size_t, unsigned) = dlsym(h, "cuMemAllocManaged");
  assert_non_null(init); assert_non_null(retain); assert_non_null(managed);
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
  pl_hostmem_invalidate(); /* (the hooks would have done this) */
  assert_int_equal(pl_hostmem_classify((CUdeviceptr)(uintptr_t)pageable + 100), PAGELOCK_MEM_PAGEABLE);
  /* What the cuMemHostRegister hook records is seen at the very next call,
   * memo or not. */
  pl_hostmem_pinned_add(pageable, 1 << 20, PAGELOCK_MEM_REGISTERED);
  assert_int_equal(pl_hostmem_classify((CUdeviceptr)(uintptr_t)pageable + 100), PAGELOCK_MEM_REGISTERED);
  pl_hostmem_pinned_remove(pageable);
  assert_int_equal(pl_hostmem_classify((CUdeviceptr)(uintptr_t)pageable + 100), PAGELOCK_MEM_PAGEABLE);
  free(pageable);
}

int main(void) {
  snprintf(tmpdir, sizeof tmpdir, "%s/pagelock-unit.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  if (mkdtemp(tmpdir) == NULL) return 2;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_parse_size),
      cmocka_unit_test(test_config_values),
      cmocka_unit_test(test_expand),
      cmocka_unit_test(test_trace_roundtrip),
      cmocka_unit_test(test_trace_truncated),
      cmocka_unit_test(test_classify),
  };
  int rc = cmocka_run_group_tests_name("shim", tests, NULL, NULL);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  if (system(cmd) != 0) rc = rc ? rc : 1;
  return rc;
}
