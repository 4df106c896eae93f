/* autopin_fixture.h - what the registration engine's tests share
 * (PAGELOCK_MODE register and auto; test_autopin_*.c: one feature a file,
 * each file its own program and ctest).
 *
 * Linked against pagelock_core: the copies go through pl_copy_exec, the
 * very path the shim's wrappers take, from pl_copy structs filled as the
 * wrappers fill them.  The allocation hooks (hook_alloc.c) are not in these
 * binaries, so the tests do what they do: track a buffer when it is made
 * (pl_hostmem_track) and, before it is released, untrack it and call
 * pl_pinreg_defer_free (free) or pl_pinreg_release (munmap, mremap,
 * madvise, brk).  The fake driver (fake_driver.h) reports what the
 * "hardware" saw: registered bytes, their high-water mark, calls per entry
 * point; and it moves a page-locked copy's bytes only at the end of its
 * modelled time, so a copy that returned too early reads an overwritten
 * source.
 *
 * Threads never call cmocka's asserts (they longjmp): they count failures
 * and the main thread asserts the count. */
#ifndef PL_TEST_AUTOPIN_FIXTURE_H
#define PL_TEST_AUTOPIN_FIXTURE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "autopin.h"
#include "copy.h"
#include "fake_driver.h"
#include "hostmem.h"
#include "init.h"
#include "pinreg.h"
#include "pl_internal.h"
#include "stage.h"
#include "trace.h"
#include "trace_read.h"

/* ---- a test program ------------------------------------------------------- */

/* The options every test program starts with (warnings off: faults are
 * injected; registering at 4 GB/s, the H100 host's 1/16 ns a byte slowed
 * down, so that a 1 GiB registration is still under way while copies run
 * beside it), the run's directory (tmpdir; PAGELOCK_OUTPUT is its
 * all.trace), the allocation registry and the fake driver: 0, else -1. */
int autopin_fixture_start(void);
/* Removes tmpdir; returns rc, or 1 when rc was 0 and that failed. */
int autopin_fixture_end(int rc);

extern char tmpdir[256];
/* The page size. */
extern size_t g_pg;

/* ---- helpers ------------------------------------------------------------- */

#define KB ((size_t)1 << 10)
#define MB ((size_t)1 << 20)
#define HP(p) ((CUdeviceptr)(uintptr_t)(p))

uint64_t now_ns(void);
void sleep_ms(unsigned ms);

/* Registrations of program memory the shim made since the last reset
 * (the staging pool's own are not among them). */
uint64_t registrations(void);

/* The fake's pinning speed as the test's environment set it. */
double register_gbps(void);

/* New options while the shim's thread may be reading them (it logs each
 * registration): only once it has nothing left to do. */
void config_reset(void);

/* Options of one test; the engine starts empty: nothing registered, no
 * heat, no faults, counters zero. */
void ap_env(const char *mode, const char *budget, const char *h2d, const char *d2h);

/* The first n bytes at dev, read back: how many lead in matching seed's
 * pattern (n when all do). */
size_t dev_pat(CUdeviceptr dev, size_t n, unsigned seed);

/* ---- copies through pl_copy_exec ------------------------------------------ */

/* Native thunks like hook_copy.c's, for hand-built pl_copy structs. */
CUresult nat_htod(const pl_copy *c);
CUresult nat_htod_async(const pl_copy *c);
CUresult nat_dtoh(const pl_copy *c);
CUresult nat_dtoh_async(const pl_copy *c);

enum { V_SYNC, V_SYNC_PTDS, V_ASYNC, V_ASYNC_PTSZ0, V_COUNT };
/* The entry point of each variant, each way. */
extern const int h2d_api[V_COUNT];
extern const int d2h_api[V_COUNT];

/* One copy through pl_copy_exec, its pl_copy (flags, why) back in *out.
 * The host side is classified as a wrapper leaves it: unknown. */
CUresult xcopy(bool h2d, int v, CUdeviceptr dev, void *host, size_t n, CUstream s, pl_copy *out);
CUresult up(int v, CUdeviceptr dev, void *host, size_t n, CUstream s, pl_copy *out);
CUresult down(int v, void *host, CUdeviceptr dev, size_t n, CUstream s, pl_copy *out);
/* Wait for the stream variant v used. */
void v_sync(int v, CUstream s);

/* Staged uploads from memory that is never registered (shared) until the
 * staging pool holds all its chunks (4M, ap_env), so that a test can then
 * inject faults into registration alone. */
void warm_pool(CUdeviceptr dev);

/* ---- buffers ---------------------------------------------------------------- */

/* A buffer the way the hooks see one: [p, p+n) inside a mapping of its
 * own, `head` bytes into it, tracked as the malloc hook tracks a block. */
typedef struct blk {
  uint8_t *map;
  size_t maplen;
  uint8_t *p;
  size_t n;
} blk;

blk blk_new(size_t n, size_t head);
/* munmap, as its hook does it: forget, undo, then the real call. */
void blk_free(blk *b);
/* Where the whole pages inside [p, p+n) start and end. */
uintptr_t lo_of(const void *p);
uintptr_t hi_of(const void *p, size_t n);
/* Bytes of b's interior the driver holds registered. */
size_t reg_interior(const blk *b);
size_t interior_len(const blk *b);

/* Make b's registration live: one upload in register mode, then the
 * engine's thread does the rest. */
void make_live(blk *b, CUdeviceptr dev);

/* ---- free as the hooks do it ----------------------------------------------- */

/* Blocks freed through counted_free, and those of them that still held a
 * registered byte when the next allocator got them back. */
extern atomic_int g_freed, g_stale;
/* The next allocator's free, as the engine's thread calls it: the block
 * must not hold a registered byte by then. */
void counted_free(void *p);
/* free(), as its hook does it. */
void sim_free(void *p);

/* ---- the shim's log ---------------------------------------------------------- */

/* The shim's stderr, into a file of the test's, at log level `level`:
 * stderr_begin, the code under test, stderr_end; then count its lines. */
typedef struct cap {
  char path[512];
  int fd, saved;
} cap;

void stderr_begin(cap *c, const char *name, const char *level);
void stderr_end(cap *c);
/* Lines of the captured file; those starting with `prefix` (NULL: none)
 * and containing `also` (NULL: anything) in *matched. */
int stderr_lines(const cap *c, const char *prefix, const char *also, int *matched);

#endif
