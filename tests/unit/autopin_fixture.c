/* autopin_fixture.c - what the registration engine's tests share
 * (autopin_fixture.h). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <malloc.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "autopin_fixture.h"

char tmpdir[256];
size_t g_pg;

int autopin_fixture_start(void) {
  setenv("PAGELOCK_LOG", "error", 1);
  setenv("PAGELOCK_COPY_THREADS", "2", 1);
  setenv("FAKECUDA_REGISTER_GBPS", "4", 1);
  g_pg = (size_t)sysconf(_SC_PAGESIZE);
  snprintf(tmpdir, sizeof tmpdir, "%s/pagelock-autopin.XXXXXX",
           getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  if (mkdtemp(tmpdir) == NULL) return -1;
  char path[512];
  snprintf(path, sizeof path, "%s/all.trace", tmpdir);
  setenv("PAGELOCK_OUTPUT", path, 1);
  config_reset();
  pl_hostmem_init(64 << 10);
  return load_driver();
}

int autopin_fixture_end(int rc) {
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  if (system(cmd) != 0) rc = rc ? rc : 1;
  return rc;
}

uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

void sleep_ms(unsigned ms) {
  struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

uint64_t registrations(void) {
  pagelock_rec_counters k;
  memset(&k, 0, sizeof k);
  pl_pinreg_counters(&k);
  return k.registrations;
}

double register_gbps(void) {
  const char *e = getenv("FAKECUDA_REGISTER_GBPS");
  return e && atof(e) > 0 ? atof(e) : 31;
}

void config_reset(void) {
  pl_pinreg_quiesce_for_test();
  pl_config_reset_for_test();
}

void ap_env(const char *mode, const char *budget, const char *h2d, const char *d2h) {
  setenv("PAGELOCK_MODE", mode, 1);
  setenv("PAGELOCK_STAGE_MIN", "64K", 1);
  setenv("PAGELOCK_POOL_SIZE", "4M", 1);
  setenv("PAGELOCK_CHUNK_SIZE", "256K", 1);
  setenv("PAGELOCK_WAIT_US", "2000000", 1);
  setenv("PAGELOCK_REGISTER_BUDGET", budget, 1);
  setenv("PAGELOCK_REGISTER_HOT", "100", 1);
  setenv("PAGELOCK_H2D", h2d, 1);
  setenv("PAGELOCK_D2H", d2h, 1);
  f_set_register_bandwidth(register_gbps());
  config_reset();
  f_clear_faults();
  assert_int_equal(f_cuCtxSynchronize(), CUDA_SUCCESS);
  pl_pinreg_set_idle_for_test(0);
  pl_autopin_set_follow_wait_for_test(0);
  pl_pinreg_reset_for_test();
  pl_autopin_reset_for_test();
  pl_stage_reset_for_test();
  f_set_bandwidth(1000, 1000);
  f_reset_stats();
  f_reset_call_counts();
}

size_t dev_pat(CUdeviceptr dev, size_t n, unsigned seed) {
  uint8_t *chk = malloc(n);
  assert_non_null(chk);
  assert_int_equal(f_cuMemcpyDtoH_v2(chk, dev, n), CUDA_SUCCESS);
  size_t ok = check_pat(chk, n, seed);
  free(chk);
  return ok;
}

CUresult nat_htod(const pl_copy *c) {
  CUresult (*f)(CUdeviceptr, const void *, size_t) = pl_hook_real(c->api);
  return f(c->dst, (const void *)(uintptr_t)c->src, c->bytes);
}

CUresult nat_htod_async(const pl_copy *c) {
  CUresult (*f)(CUdeviceptr, const void *, size_t, CUstream) = pl_hook_real(c->api);
  return f(c->dst, (const void *)(uintptr_t)c->src, c->bytes, c->stream);
}

CUresult nat_dtoh(const pl_copy *c) {
  CUresult (*f)(void *, CUdeviceptr, size_t) = pl_hook_real(c->api);
  return f((void *)(uintptr_t)c->dst, c->src, c->bytes);
}

CUresult nat_dtoh_async(const pl_copy *c) {
  CUresult (*f)(void *, CUdeviceptr, size_t, CUstream) = pl_hook_real(c->api);
  return f((void *)(uintptr_t)c->dst, c->src, c->bytes, c->stream);
}

const int h2d_api[V_COUNT] = {PAGELOCK_API_cuMemcpyHtoD_v2, PAGELOCK_API_cuMemcpyHtoD_v2_ptds,
                              PAGELOCK_API_cuMemcpyHtoDAsync_v2,
                              PAGELOCK_API_cuMemcpyHtoDAsync_v2_ptsz};

const int d2h_api[V_COUNT] = {PAGELOCK_API_cuMemcpyDtoH_v2, PAGELOCK_API_cuMemcpyDtoH_v2_ptds,
                              PAGELOCK_API_cuMemcpyDtoHAsync_v2,
                              PAGELOCK_API_cuMemcpyDtoHAsync_v2_ptsz};

CUresult xcopy(bool h2d, int v, CUdeviceptr dev, void *host, size_t n, CUstream s, pl_copy *out) {
  pl_copy c;
  memset(&c, 0, sizeof c);
  c.api = h2d ? h2d_api[v] : d2h_api[v];
  c.bytes = n;
  bool async = v == V_ASYNC || v == V_ASYNC_PTSZ0;
  if (h2d) {
    c.dst = dev;
    c.src = HP(host);
    c.dst_mem = PAGELOCK_MEM_DEVICE;
    c.native = async ? nat_htod_async : nat_htod;
  } else {
    c.dst = HP(host);
    c.src = dev;
    c.src_mem = PAGELOCK_MEM_DEVICE;
    c.native = async ? nat_dtoh_async : nat_dtoh;
  }
  if (async) {
    c.flags |= PAGELOCK_COPY_ASYNC;
    c.stream = v == V_ASYNC_PTSZ0 ? NULL : s;
  }
  if (v == V_SYNC_PTDS || v == V_ASYNC_PTSZ0) c.flags |= PAGELOCK_COPY_PTDS;
  CUresult r = pl_copy_exec(&c);
  if (out) *out = c;
  return r;
}

CUresult up(int v, CUdeviceptr dev, void *host, size_t n, CUstream s, pl_copy *out) {
  return xcopy(true, v, dev, host, n, s, out);
}

CUresult down(int v, void *host, CUdeviceptr dev, size_t n, CUstream s, pl_copy *out) {
  return xcopy(false, v, dev, host, n, s, out);
}

void v_sync(int v, CUstream s) {
  assert_int_equal(f_cuStreamSynchronize(v == V_ASYNC_PTSZ0 ? CU_STREAM_PER_THREAD : s),
                   CUDA_SUCCESS);
  assert_int_equal(f_cuCtxSynchronize(), CUDA_SUCCESS);
}

void warm_pool(CUdeviceptr dev) {
  const size_t n = 4 * MB;
  uint8_t *sh = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  assert_true(sh != MAP_FAILED);
  pl_copy c;
  assert_int_equal(up(V_SYNC, dev, sh, n, NULL, &c), CUDA_SUCCESS);
  assert_true(c.flags & PAGELOCK_COPY_STAGED);
  assert_int_equal(f_cuCtxSynchronize(), CUDA_SUCCESS);
  munmap(sh, n);
}

blk blk_new(size_t n, size_t head) {
  blk b;
  b.maplen = (head + n + g_pg - 1) / g_pg * g_pg + g_pg;
  b.map = mmap(NULL, b.maplen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  assert_true(b.map != MAP_FAILED);
  b.p = b.map + head;
  b.n = n;
  pl_hostmem_track(b.p, n, 0);
  return b;
}

void blk_free(blk *b) {
  pl_hostmem_untrack_range(b->map, b->maplen);
  pl_pinreg_release((uintptr_t)b->map, b->maplen);
  assert_int_equal(f_reg_bytes_in(b->map, b->maplen, NULL, NULL), 0);
  assert_int_equal(munmap(b->map, b->maplen), 0);
}

uintptr_t lo_of(const void *p) { return ((uintptr_t)p + g_pg - 1) & ~(uintptr_t)(g_pg - 1); }

uintptr_t hi_of(const void *p, size_t n) { return ((uintptr_t)p + n) & ~(uintptr_t)(g_pg - 1); }

size_t reg_interior(const blk *b) {
  return f_reg_bytes_in((void *)lo_of(b->p), hi_of(b->p, b->n) - lo_of(b->p), NULL, NULL);
}

size_t interior_len(const blk *b) { return hi_of(b->p, b->n) - lo_of(b->p); }

void make_live(blk *b, CUdeviceptr dev) {
  pl_copy c;
  assert_int_equal(up(V_SYNC, dev, b->p, b->n, NULL, &c), CUDA_SUCCESS);
  pl_pinreg_quiesce_for_test();
  assert_int_equal(reg_interior(b), interior_len(b));
}

atomic_int g_freed, g_stale;

void counted_free(void *p) {
  if (f_reg_bytes_in(p, malloc_usable_size(p), NULL, NULL) != 0) atomic_fetch_add(&g_stale, 1);
  atomic_fetch_add(&g_freed, 1);
  free(p);
}

void sim_free(void *p) {
  pl_hostmem_untrack(p);
  if (!pl_pinreg_defer_free(p, 0, counted_free)) counted_free(p);
}

void stderr_begin(cap *c, const char *name, const char *level) {
  setenv("PAGELOCK_LOG", level, 1);
  config_reset();
  pl_log_reset_for_test();
  snprintf(c->path, sizeof c->path, "%s/%s", tmpdir, name);
  c->fd = open(c->path, O_CREAT | O_TRUNC | O_WRONLY, 0600);
  c->saved = dup(2);
  assert_true(c->fd >= 0 && c->saved >= 0);
  dup2(c->fd, 2);
}

void stderr_end(cap *c) {
  dup2(c->saved, 2);
  close(c->saved);
  close(c->fd);
  setenv("PAGELOCK_LOG", "error", 1);
  config_reset();
}

int stderr_lines(const cap *c, const char *prefix, const char *also, int *matched) {
  FILE *f = fopen(c->path, "r");
  assert_non_null(f);
  char line[1024];
  int lines = 0, m = 0;
  while (fgets(line, sizeof line, f)) {
    lines++;
    if (prefix && strncmp(line, prefix, strlen(prefix)) == 0 && (!also || strstr(line, also))) m++;
  }
  fclose(f);
  if (matched) *matched = m;
  return lines;
}
