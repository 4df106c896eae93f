/* stage_fixture.h - what the staging engine's tests share (test_stage_*.c:
 * one feature a file, each file its own program and ctest).
 *
 * Linked against pagelock_core, so the exported copy wrappers
 * (cuMemcpyHtoDAsync_v2, ...) in these binaries are the shim's own: calling
 * them runs exactly what a preloaded program runs (classification, the
 * decision point, the engine).  Everything else of the driver, and the
 * reference copies the results are checked with, come from the fake
 * libcuda.so.1 around the shim (fake_driver.h).
 *
 * Threads never call cmocka's asserts (they longjmp): they count failures
 * and the main thread asserts the count. */
#ifndef PL_TEST_STAGE_FIXTURE_H
#define PL_TEST_STAGE_FIXTURE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "copy.h"
#include "cpuload.h"
#include "engines.h"
#include "fake_driver.h"
#include "init.h"
#include "pinreg.h"
#include "pl_internal.h"
#include "stage.h"
#include "trace.h"
#include "trace_read.h"

/* The shim's wrappers of the per-thread twins (cuda.h declares only some). */
CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr, const void *, size_t);
CUresult cuMemcpyDtoH_v2_ptds(void *, CUdeviceptr, size_t);
CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr, const void *, size_t, CUstream);
CUresult cuMemcpyDtoHAsync_v2_ptsz(void *, CUdeviceptr, size_t, CUstream);

/* ---- a test program ------------------------------------------------------- */

/* The options every stage test program starts with: warnings off (faults
 * are injected), and more copy threads than a small CI machine has CPUs,
 * so the pool's hand-off is right with several helpers on every job. */
void stage_fixture_env(void);
/* The run's directory (tmpdir; PAGELOCK_OUTPUT is its all.trace) and the
 * fake driver loaded: 0, else -1. */
int stage_fixture_start(void);
/* Removes tmpdir; returns rc, or 1 when rc was 0 and that failed. */
int stage_fixture_end(int rc);

extern char tmpdir[256];

/* ---- the engine's options, its bound -------------------------------------- */

#define KB ((size_t)1 << 10)
#define MB ((size_t)1 << 20)
#define POOL (1 * MB)
#define CHUNK (64 * KB)
/* Tests of bytes and order must not depend on the scheduler: with a wait
 * this long a chunk always frees in time and every byte is staged.  The
 * bounded wait itself has its own test. */
#define PATIENT_US 2000000L

/* Set the engine's options and start from an empty pool, no faults. */
void stage_env(size_t pool, size_t chunk, long wait_us, const char *d2h);

/* Index of the first byte of p[0..n) that is not b, or n. */
size_t check_byte(const void *p, size_t n, uint8_t b);

/* The bound, as the engine and as the driver see it.  Nothing else in this
 * program allocates pinned memory. */
bool bound_ok(void);

/* A pl_copy for one of the four 1D host<->device entry points, filled the
 * way its wrapper fills it. */
pl_copy mk_copy(int api, CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s);

#define HP(p) ((CUdeviceptr)(uintptr_t)(p))

/* ---- exact bytes, every entry point, sizes and alignments ----------------- */

enum { V_SYNC, V_SYNC_PTDS, V_ASYNC, V_ASYNC_PTSZ0, V_ANY, V_ANY_ASYNC, V_COUNT };
extern const char *const vname[V_COUNT];

CUresult do_h2d(int v, CUdeviceptr d, const void *h, size_t n, CUstream s);
CUresult do_d2h(int v, void *h, CUdeviceptr d, size_t n, CUstream s);
bool v_async(int v);
/* Wait for the stream variant v used. */
void v_sync(int v, CUstream s);

#define NSIZES 18
extern const size_t sizes[NSIZES];
#define MAXN (5 * MB + 7)
#define GUARD 64

typedef struct bufs {
  CUdeviceptr dev;
  uint8_t *host, *chk;
  CUstream s;
} bufs;

void bufs_init(bufs *b);
void bufs_fini(bufs *b);

/* One H2D of n bytes, host offset ho, device offset dof, by variant v;
 * checks the bytes, the guards, that it was staged, and the bound. */
void one_h2d(bufs *b, int v, size_t n, size_t ho, size_t dof, unsigned seed);
void one_d2h(bufs *b, int v, size_t n, size_t ho, size_t dof, unsigned seed, bool async_mode);

/* ---- a stream held back ---------------------------------------------------- */

/* A host function that holds its stream until gate is set. */
extern atomic_int gate;
void CUDA_CB gate_fn(void *arg);

#endif
