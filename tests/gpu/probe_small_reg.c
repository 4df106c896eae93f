/* probe_small_reg.c - whether a process that holds page-locked memory pays
 * more for each small pageable copy.  Under PAGELOCK_MODE=stage the PyTorch
 * small-copy loop (4 KiB up, a kernel, 8 B down, a synchronize) ran 1.38x
 * its time without pagelock in 3 of 4 processes, though those copies pass
 * through exactly as under observe (1.09x); what stage adds to such a
 * process is the staging pool, one 64 MiB registration of a huge-page
 * mapping made at the first device allocation (docs/bench/2026-11-27-huge-pages.md, run X).
 *
 * The loop here is that pattern without the kernel: a 4 KiB pageable
 * upload, an 8 B pageable download, a stream synchronize.  It is timed in
 * turns, in one process, while the process holds nothing page-locked, a
 * 64 MiB registered huge-page mapping (the pool's slab), and a 64 MiB
 * cudaHostAlloc buffer; each state 5 times, 2000 iterations a time.
 * Prints one line per state: the median microseconds per iteration and
 * the ratio to holding nothing.
 * Build: nvcc -O2 -o probe_small_reg probe_small_reg.c (tests/gpu/run.sh). */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include <cuda_runtime_api.h>

#define MIB ((size_t)1 << 20)
#define SLAB (64 * MIB)
#define ITERS 2000
#define TURNS 5

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

#define CK(call)                                                                   \
  do {                                                                             \
    cudaError_t e_ = (call);                                                       \
    if (e_ != cudaSuccess) {                                                       \
      fprintf(stderr, "probe_small_reg: %s: %s\n", #call, cudaGetErrorString(e_)); \
      exit(1);                                                                     \
    }                                                                              \
  } while (0)

static char *up, *down;
static void *dev;
static cudaStream_t st;

/* Microseconds per iteration of the small-copy loop. */
static double loop(void) {
  double t = now_us();
  for (int i = 0; i < ITERS; i++) {
    CK(cudaMemcpyAsync(dev, up, 4096, cudaMemcpyHostToDevice, st));
    CK(cudaMemcpyAsync(down, dev, 8, cudaMemcpyDeviceToHost, st));
    CK(cudaStreamSynchronize(st));
  }
  return (now_us() - t) / ITERS;
}

int main(void) {
  CK(cudaSetDevice(0));
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  CK(cudaMalloc(&dev, 4096));
  up = malloc(4096);
  down = malloc(4096);
  memset(up, 1, 4096);
  /* The pool's slab, as shim/engines/pool.c makes it: 2 MiB aligned, huge pages. */
  char *m = mmap(NULL, SLAB + 2 * MIB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return 1;
  char *slab = (char *)(((uintptr_t)m + 2 * MIB - 1) & ~(uintptr_t)(2 * MIB - 1));
  madvise(slab, SLAB, MADV_HUGEPAGE);
  loop(); /* warm-up */
  const char *names[] = {"nothing page-locked", "64 MiB registered (the pool's slab)",
                         "64 MiB cudaHostAlloc"};
  double t[3][TURNS];
  for (int r = 0; r < TURNS; r++) {
    t[0][r] = loop();
    CK(cudaHostRegister(slab, SLAB, cudaHostRegisterPortable));
    t[1][r] = loop();
    CK(cudaHostUnregister(slab));
    void *h = NULL;
    CK(cudaHostAlloc(&h, SLAB, cudaHostAllocPortable));
    t[2][r] = loop();
    CK(cudaFreeHost(h));
  }
  double base = 0;
  for (int s = 0; s < 3; s++) {
    qsort(t[s], TURNS, sizeof t[s][0], cmp);
    double med = t[s][TURNS / 2];
    if (s == 0) base = med;
    printf("probe_small_reg: %-38s %7.2f us/iter [%.2f-%.2f]  %.3fx\n", names[s], med, t[s][0],
           t[s][TURNS - 1], med / base);
  }
  return 0;
}
