/* test_invisible.c - the shim's own registrations are invisible to the
 * program (cmocka, over the fake driver).
 *
 * Linked against pagelock_core, so the exported driver wrappers
 * (cuPointerGetAttribute, cuMemHostRegister_v2, ...) in this binary are the
 * shim's own: calling them is what a preloaded program does.  The answers
 * they must give come from the fake libcuda.so.1 itself, reached through
 * the real dlsym: the same question about malloc memory nobody registered.
 * The runtime path (cudaPointerGetAttributes, PyTorch's is_pinned) goes
 * through the fake static cudart, whose dlsym(libcuda, "cuGetProcAddress_v2")
 * is given the shim's cuGetProcAddress_v2, as the preloaded shim's dlsym
 * does (hook_dl.c; the link wraps dlsym for the static objects only).
 *
 * Runs with PAGELOCK_MODE=register (the ctest environment: the mode is read
 * when the library loads). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "fake_driver.h"
#include "pl_internal.h"
#include "hostmem.h"
#include "pinreg.h"

#include <cuda_runtime_api.h>

/* What the preloaded shim's dlsym hands out for the driver's lookup entry
 * point: its own cuGetProcAddress_v2, which swaps every answer it wraps. */
void *__real_dlsym(void *handle, const char *name);
void *__wrap_dlsym(void *handle, const char *name) {
  void *r = __real_dlsym(handle, name);
  if (r != NULL && strcmp(name, "cuGetProcAddress_v2") == 0) return (void *)cuGetProcAddress_v2;
  return r;
}

/* ---- regions --------------------------------------------------------------- */

#define PAGE ((size_t)4096)
#define LEN (16 * PAGE)

typedef struct region {
  uintptr_t p; /* page aligned, LEN bytes */
  void *block;
} region;

/* LEN bytes the shim registered itself (live when this returns). */
static region shim_region(void) {
  region g;
  assert_int_equal(posix_memalign(&g.block, PAGE, LEN), 0);
  memset(g.block, 0x5a, LEN);
  g.p = (uintptr_t)g.block;
  pl_hostmem_track(g.block, LEN, 0);
  assert_true(pl_pinreg_request(g.p, LEN, g.p, LEN, g_ctx));
  pl_pinreg_quiesce_for_test();
  uintptr_t base = 0;
  size_t len = 0;
  assert_true(pl_pinreg_find(g.p + LEN / 2, &base, &len));
  assert_true(base == g.p && len == LEN);
  /* The driver itself calls it page-locked: the answers below that say
   * otherwise come from the wrappers. */
  assert_true(f_is_registered(g.block, LEN));
  unsigned type = 0;
  assert_int_equal(f_cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, g.p),
                   CUDA_SUCCESS);
  assert_int_equal(type, CU_MEMORYTYPE_HOST);
  return g;
}

/* LEN bytes of malloc memory nobody registers: the reference answers. */
static region plain_region(void) {
  region g;
  assert_int_equal(posix_memalign(&g.block, PAGE, LEN), 0);
  memset(g.block, 0x3c, LEN);
  g.p = (uintptr_t)g.block;
  assert_false(f_is_registered(g.block, 1));
  return g;
}

static void region_free(region *g) {
  pl_pinreg_release(g->p, LEN);
  assert_false(f_is_registered(g->block, 1));
  pl_hostmem_untrack(g->block);
  free(g->block);
}

/* Offsets probed in every region: the base, inside a page, the last byte. */
static const size_t offs[] = {0, 5 * PAGE + 17, LEN - 1};
#define NOFFS (sizeof offs / sizeof offs[0])

/* An answer: the result and every byte of the caller's buffer, which starts
 * filled with a pattern so that what the driver leaves alone counts too. */
#define SLOT 64
typedef struct answer {
  CUresult r;
  unsigned char out[SLOT];
} answer;

static void same_answer(const answer *got, const answer *want, const char *what, int attr,
                        size_t off) {
  if (got->r != want->r || memcmp(got->out, want->out, SLOT) != 0) {
    fprintf(stderr, "%s (attribute %d, offset %zu): result %d, want %d%s\n", what, attr, off,
            (int)got->r, (int)want->r, got->r == want->r ? "; the bytes differ" : "");
    fail();
  }
}

/* ---- setup ----------------------------------------------------------------- */

static char tmpdir[64];

static int setup(void **state) {
  (void)state;
  if (load_driver() != 0) return -1;
  if (!pl_active()) {
    fprintf(stderr, "the shim is off: run with PAGELOCK_MODE=register\n");
    return -1;
  }
  snprintf(tmpdir, sizeof tmpdir, "/tmp/pl_invisible.XXXXXX");
  if (mkdtemp(tmpdir) == NULL) return -1;
  char out[128];
  snprintf(out, sizeof out, "%s/t.pagelock", tmpdir);
  setenv("PAGELOCK_OUTPUT", out, 1);
  setenv("PAGELOCK_CUPTI", "off", 1);
  pl_config_reset_for_test();
  if (pl_hostmem_init(64 << 10) == 0) return -1;
  return 0;
}

static int teardown(void **state) {
  (void)state;
  char cmd[96];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  return system(cmd) == 0 ? 0 : -1;
}

/* Each test from no registration and no range closed to the shim (a
 * program's register closes its range for a while, pinreg.c). */
static int fresh(void **state) {
  (void)state;
  pl_pinreg_reset_for_test();
  return pl_pinreg_any() ? -1 : 0;
}

/* ---- the pointer queries ----------------------------------------------------- */

/* Every attribute there is, one unknown, and 0. */
static const int attrs_all[] = {0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11,
                                12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 99};
#define NATTRS (sizeof attrs_all / sizeof attrs_all[0])

static void test_pointer_attribute(void **state) {
  (void)state;
  region s = shim_region(), q = plain_region();
  for (size_t i = 0; i < NOFFS; i++)
    for (size_t k = 0; k < NATTRS; k++) {
      CUpointer_attribute a = (CUpointer_attribute)attrs_all[k];
      answer got, want;
      memset(got.out, 0xa5, SLOT);
      memset(want.out, 0xa5, SLOT);
      got.r = cuPointerGetAttribute(got.out, a, s.p + offs[i]);
      want.r = f_cuPointerGetAttribute(want.out, a, q.p + offs[i]);
      same_answer(&got, &want, "cuPointerGetAttribute", (int)a, offs[i]);
    }
  /* A NULL destination too. */
  assert_int_equal(cuPointerGetAttribute(NULL, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, s.p),
                   f_cuPointerGetAttribute(NULL, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, q.p));
  region_free(&s);
  free(q.block);
}

/* cuPointerGetAttributes with `n` of the attributes from `first` on. */
static void attributes_agree(uintptr_t sp, uintptr_t qp, const int *first, unsigned n, size_t off) {
  CUpointer_attribute a[NATTRS];
  unsigned char bs[NATTRS][SLOT], bq[NATTRS][SLOT];
  void *ds[NATTRS], *dq[NATTRS];
  for (unsigned k = 0; k < n; k++) {
    a[k] = (CUpointer_attribute)first[k];
    memset(bs[k], 0xa5, SLOT);
    memset(bq[k], 0xa5, SLOT);
    ds[k] = bs[k];
    dq[k] = bq[k];
  }
  CUresult rs = cuPointerGetAttributes(n, a, ds, sp + off);
  CUresult rq = f_cuPointerGetAttributes(n, a, dq, qp + off);
  if (rs != rq || memcmp(bs, bq, sizeof bs[0] * n) != 0) {
    fprintf(stderr,
            "cuPointerGetAttributes (%u from attribute %d, offset %zu): result %d, want %d%s\n", n,
            first[0], off, (int)rs, (int)rq, rs == rq ? "; the values differ" : "");
    fail();
  }
}

static void test_pointer_attributes(void **state) {
  (void)state;
  region s = shim_region(), q = plain_region();
  /* Every known attribute but P2P_TOKENS (5, not supported), at once: the
   * call succeeds with the defaults; then everything (5 makes it fail);
   * then none. */
  static const int known[] = {1,  2,  3,  4,  6,  7,  8,  9,  10, 11,
                              12, 13, 14, 15, 16, 17, 18, 19, 20, 21};
  for (size_t i = 0; i < NOFFS; i++) {
    attributes_agree(s.p, q.p, known, sizeof known / sizeof known[0], offs[i]);
    attributes_agree(s.p, q.p, attrs_all + 1, NATTRS - 1, offs[i]);
    attributes_agree(s.p, q.p, known, 0, offs[i]);
  }
  region_free(&s);
  free(q.block);
}

static void test_host_flags_and_device_pointer(void **state) {
  (void)state;
  region s = shim_region(), q = plain_region();
  for (size_t i = 0; i < NOFFS; i++) {
    answer got, want;
    memset(got.out, 0xa5, SLOT);
    memset(want.out, 0xa5, SLOT);
    got.r = cuMemHostGetFlags((unsigned *)(void *)got.out, (void *)(s.p + offs[i]));
    want.r = f_cuMemHostGetFlags((unsigned *)(void *)want.out, (void *)(q.p + offs[i]));
    same_answer(&got, &want, "cuMemHostGetFlags", 0, offs[i]);
    for (unsigned flags = 0; flags < 2; flags++) {
      memset(got.out, 0xa5, SLOT);
      memset(want.out, 0xa5, SLOT);
      got.r = cuMemHostGetDevicePointer_v2((CUdeviceptr *)(void *)got.out, (void *)(s.p + offs[i]),
                                           flags);
      want.r = f_cuMemHostGetDevicePointer_v2((CUdeviceptr *)(void *)want.out,
                                              (void *)(q.p + offs[i]), flags);
      same_answer(&got, &want, "cuMemHostGetDevicePointer_v2", (int)flags, offs[i]);
    }
  }
  assert_int_equal(cuMemHostGetFlags(NULL, (void *)s.p), f_cuMemHostGetFlags(NULL, (void *)q.p));
  region_free(&s);
  free(q.block);
}

/* PyTorch's is_pinned(): cudaPointerGetAttributes(...).type == cudaMemoryTypeHost. */
static void test_is_pinned_through_cudart(void **state) {
  (void)state;
  region s = shim_region(), q = plain_region();
  for (size_t i = 0; i < NOFFS; i++) {
    struct cudaPointerAttributes as, aq;
    memset(&as, 0xa5, sizeof as);
    memset(&aq, 0xa5, sizeof aq);
    assert_int_equal(cudaPointerGetAttributes(&as, (void *)(s.p + offs[i])), cudaSuccess);
    assert_int_equal(cudaPointerGetAttributes(&aq, (void *)(q.p + offs[i])), cudaSuccess);
    assert_int_equal(as.type, cudaMemoryTypeUnregistered);
    /* The runtime reports the pointer itself as the host pointer of
     * unregistered memory; everything else is the same answer. */
    assert_ptr_equal(as.hostPointer, (void *)(s.p + offs[i]));
    assert_ptr_equal(aq.hostPointer, (void *)(q.p + offs[i]));
    as.hostPointer = aq.hostPointer = NULL;
    assert_memory_equal(&as, &aq, sizeof as);
    /* The runtime's other questions, to the driver's wrapped entry points. */
    unsigned fs = 0xa5a5a5a5u, fq = 0xa5a5a5a5u;
    assert_int_equal(cudaHostGetFlags(&fs, (void *)(s.p + offs[i])),
                     cudaHostGetFlags(&fq, (void *)(q.p + offs[i])));
    assert_int_equal(fs, fq);
    void *ds = (void *)1, *dq = (void *)1;
    assert_int_equal(cudaHostGetDevicePointer(&ds, (void *)(s.p + offs[i]), 0),
                     cudaHostGetDevicePointer(&dq, (void *)(q.p + offs[i]), 0));
    assert_ptr_equal(ds, dq);
  }
  assert_int_not_equal(cudaHostGetFlags(&(unsigned){0}, (void *)s.p), cudaSuccess);
  region_free(&s);
  free(q.block);
}

/* ---- the program's own register and unregister ------------------------------ */

typedef CUresult (*register_fn)(void *, size_t, unsigned);

static void program_registers_over(register_fn reg) {
  region s = shim_region(), q = plain_region();
  void *ps = (void *)(s.p + 4 * PAGE), *pq = (void *)(q.p + 4 * PAGE);
  /* As without the shim: the driver's answer for memory nobody registered. */
  CUresult want = f_cuMemHostRegister_v2(pq, 3 * PAGE, 0);
  assert_int_equal(want, CUDA_SUCCESS);
  assert_int_equal(f_cuMemHostUnregister(pq), CUDA_SUCCESS);
  assert_int_equal(reg(ps, 3 * PAGE, 0), want);
  /* The program's registration is the program's: its queries say so. */
  unsigned type = 0, flags = 99;
  assert_int_equal(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                         (CUdeviceptr)(uintptr_t)ps + 5),
                   CUDA_SUCCESS);
  assert_int_equal(type, CU_MEMORYTYPE_HOST);
  assert_int_equal(cuMemHostGetFlags(&flags, ps), CUDA_SUCCESS);
  assert_int_equal(flags, 0);
  CUdeviceptr d = 0;
  assert_int_equal(cuMemHostGetDevicePointer_v2(&d, ps, 0), CUDA_SUCCESS);
  assert_true(d == (CUdeviceptr)(uintptr_t)ps);
  struct cudaPointerAttributes a;
  assert_int_equal(cudaPointerGetAttributes(&a, ps), cudaSuccess);
  assert_int_equal(a.type, cudaMemoryTypeHost);
  /* The shim's registration made way: nothing of it is left. */
  uintptr_t base;
  size_t len;
  assert_false(pl_pinreg_find(s.p, &base, &len));
  assert_false(f_is_registered((void *)s.p, 1));
  assert_int_equal(cuMemHostUnregister(ps), CUDA_SUCCESS);
  assert_false(f_is_registered(ps, 1));
  assert_int_equal(cudaPointerGetAttributes(&a, ps), cudaSuccess);
  assert_int_equal(a.type, cudaMemoryTypeUnregistered);
  region_free(&s);
  free(q.block);
}

static CUresult cudart_register(void *p, size_t n, unsigned flags) {
  /* The runtime's error for success is cudaSuccess == CUDA_SUCCESS. */
  return cudaHostRegister(p, n, flags) == cudaSuccess ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN;
}

static void test_program_registers_v2(void **state) {
  (void)state;
  program_registers_over(cuMemHostRegister_v2);
}

static void test_program_registers_v1(void **state) {
  (void)state;
  program_registers_over(cuMemHostRegister);
}

static void test_program_registers_cudart(void **state) {
  (void)state;
  program_registers_over(cudart_register);
}

static void test_program_unregisters_shim_only(void **state) {
  (void)state;
  region s = shim_region(), q = plain_region();
  for (size_t i = 0; i < NOFFS; i++)
    assert_int_equal(cuMemHostUnregister((void *)(s.p + offs[i])),
                     f_cuMemHostUnregister((void *)(q.p + offs[i])));
  assert_int_equal(f_cuMemHostUnregister((void *)q.p), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
  assert_int_equal(cudaHostUnregister((void *)s.p), cudaErrorHostMemoryNotRegistered);
  /* The driver's own answer, whatever it is: with no context current. */
  assert_int_equal(f_cuCtxSetCurrent(NULL), CUDA_SUCCESS);
  CUresult want = f_cuMemHostUnregister((void *)q.p);
  assert_int_equal(want, CUDA_ERROR_INVALID_CONTEXT);
  assert_int_equal(cuMemHostUnregister((void *)s.p), want);
  assert_int_equal(f_cuCtxSetCurrent(g_ctx), CUDA_SUCCESS);
  /* The shim's registration is untouched. */
  uintptr_t base;
  size_t len;
  assert_true(pl_pinreg_find(s.p, &base, &len));
  assert_true(base == s.p && len == LEN);
  assert_true(f_is_registered((void *)s.p, LEN));
  region_free(&s);
  free(q.block);
}

/* The program's register closes its range to the shim even when the shim
 * has registered nothing yet: a copy on another thread cannot get a
 * registration in before the program's call. */
static void test_program_register_closes_range(void **state) {
  (void)state;
  region q = plain_region();
  assert_false(pl_pinreg_any());
  assert_int_equal(cuMemHostRegister_v2((void *)(q.p + PAGE), PAGE, 0), CUDA_SUCCESS);
  pl_hostmem_track(q.block, LEN, 0);
  assert_false(pl_pinreg_request(q.p, LEN, q.p, LEN, g_ctx));
  pl_pinreg_quiesce_for_test();
  assert_false(pl_pinreg_any());
  assert_int_equal(cuMemHostUnregister((void *)(q.p + PAGE)), CUDA_SUCCESS);
  pl_hostmem_untrack(q.block);
  free(q.block);
}

/* With no shim registration, every wrapper is one driver call: the truth. */
static void test_pass_through(void **state) {
  (void)state;
  region q = plain_region();
  assert_false(pl_pinreg_any());
  assert_int_equal(cuMemHostRegister_v2((void *)q.p, LEN, 0), CUDA_SUCCESS);
  unsigned long n0 = f_call_count("cuPointerGetAttribute");
  unsigned long m0 = f_call_count("cuPointerGetAttributes");
  unsigned type = 0;
  assert_int_equal(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, q.p),
                   CUDA_SUCCESS);
  assert_int_equal(type, CU_MEMORYTYPE_HOST);
  struct cudaPointerAttributes a;
  assert_int_equal(cudaPointerGetAttributes(&a, (void *)q.p), cudaSuccess);
  assert_int_equal(a.type, cudaMemoryTypeHost);
  assert_int_equal(f_call_count("cuPointerGetAttribute") - n0, 1);
  assert_int_equal(f_call_count("cuPointerGetAttributes") - m0, 1);
  assert_int_equal(cuMemHostUnregister((void *)q.p), CUDA_SUCCESS);
  assert_int_equal(cuMemHostUnregister((void *)q.p), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
  free(q.block);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(test_pass_through, fresh),
      cmocka_unit_test_setup(test_pointer_attribute, fresh),
      cmocka_unit_test_setup(test_pointer_attributes, fresh),
      cmocka_unit_test_setup(test_host_flags_and_device_pointer, fresh),
      cmocka_unit_test_setup(test_is_pinned_through_cudart, fresh),
      cmocka_unit_test_setup(test_program_registers_v2, fresh),
      cmocka_unit_test_setup(test_program_registers_v1, fresh),
      cmocka_unit_test_setup(test_program_registers_cudart, fresh),
      cmocka_unit_test_setup(test_program_register_closes_range, fresh),
      cmocka_unit_test_setup(test_program_unregisters_shim_only, fresh),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
