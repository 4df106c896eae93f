/* stage_e2e.c - the staging engine end to end: an ordinary cudart program
 * with pageable buffers, meant to run under LD_PRELOAD=libpagelock.so with
 * PAGELOCK_MODE=stage (fake CUDA in CI, the real toolkit on the GPU host).
 *
 *   stage_e2e            byte-exact round trips: every size class, odd
 *                        offsets, sync/async/default-stream calls, several
 *                        threads with their own streams.  Exit 0 = all exact.
 *   stage_e2e --sweep    median time of one copy + sync, 64 KiB to 64 MiB:
 *                        where staging starts to pay.
 *   stage_e2e --held MB [HOLD]
 *                        asynchronous device-to-host copies of MB MiB queued
 *                        behind a 300 ms kernel, beside a copy on another
 *                        stream, and on the legacy stream: how long the
 *                        calls take, that no byte lands while the kernel
 *                        still runs, that all bytes are exact.  HOLD: two
 *                        copies of HOLD MiB go first behind the kernel (to
 *                        fill a staging pool of 4 x HOLD MiB).  Exit 0 =
 *                        all exact and in order.
 *   stage_e2e --reset N  N rounds of round trips (staged, larger than
 *                        the pool, and one buffer copied often enough to
 *                        be registered under auto), each round ending in
 *                        cudaDeviceReset: the context, its streams, events
 *                        and page-locked ranges go, the host buffers stay.
 *                        Exit 0 = every byte exact in every round.
 *
 * It knows nothing of pagelock: the same binary runs without the shim, so
 * its output is directly comparable between modes. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "../../demo/spin_ptx.h"

#define MB ((size_t)1 << 20)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#define CK(x)                                                                           \
  do {                                                                                  \
    cudaError_t e_ = (x);                                                               \
    if (e_ != cudaSuccess) {                                                            \
      fprintf(stderr, "stage_e2e: %s:%d: %s -> %d\n", __FILE__, __LINE__, #x, (int)e_); \
      exit(2);                                                                          \
    }                                                                                   \
  } while (0)

static uint8_t pat(size_t i, unsigned seed) {
  return (uint8_t)((i * 131u) ^ (i >> 11) ^ (seed * 0x9Du));
}

/* One H2D + D2H round trip of n bytes at host offset ho and device offset
 * dof, through API style `how`; returns 0 when the bytes came back exact. */
static int roundtrip(uint8_t *src, uint8_t *dst, char *dev, size_t n, size_t ho, size_t dof,
                     int how, cudaStream_t s, unsigned seed) {
  for (size_t i = 0; i < n; i++) src[ho + i] = pat(i, seed);
  memset(dst + ho, 0xEE, n);
  switch (how) {
    case 0: /* sync copies */
      CK(cudaMemcpy(dev + dof, src + ho, n, cudaMemcpyHostToDevice));
      memset(src + ho, 0, n);
      CK(cudaMemcpy(dst + ho, dev + dof, n, cudaMemcpyDeviceToHost));
      break;
    case 1: /* async on a stream; the source may be reused on return */
      CK(cudaMemcpyAsync(dev + dof, src + ho, n, cudaMemcpyHostToDevice, s));
      memset(src + ho, 0, n);
      CK(cudaMemcpyAsync(dst + ho, dev + dof, n, cudaMemcpyDeviceToHost, s));
      CK(cudaStreamSynchronize(s));
      break;
    default: /* async on the default stream, direction inferred */
      CK(cudaMemcpyAsync(dev + dof, src + ho, n, cudaMemcpyDefault, 0));
      memset(src + ho, 0, n);
      CK(cudaMemcpyAsync(dst + ho, dev + dof, n, cudaMemcpyDefault, 0));
      CK(cudaStreamSynchronize(0));
      break;
  }
  for (size_t i = 0; i < n; i++)
    if (dst[ho + i] != pat(i, seed)) {
      fprintf(stderr, "stage_e2e: n=%zu how=%d ho=%zu do=%zu: byte %zu is %02x, want %02x\n", n,
              how, ho, dof, i, dst[ho + i], pat(i, seed));
      return 1;
    }
  return 0;
}

#define TMAX (12 * MB + 64)

typedef struct targ {
  unsigned id;
  int fails;
} targ;

static void *thread_main(void *arg) {
  targ *a = arg;
  uint64_t rng = 0x9E3779B97F4A7C15ull * (a->id + 1);
  uint8_t *src = malloc(TMAX), *dst = malloc(TMAX);
  char *dev;
  cudaStream_t s;
  CK(cudaMalloc((void **)&dev, TMAX));
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (unsigned it = 0; it < 12; it++) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    size_t n = 1 + rng % (TMAX - 64);
    a->fails += roundtrip(src, dst, dev, n, rng % 32, (rng >> 8) % 32, 1, s, a->id * 100 + it);
  }
  CK(cudaStreamDestroy(s));
  CK(cudaFree(dev));
  free(src);
  free(dst);
  return NULL;
}

static int correctness(void) {
  static const size_t sizes[] = {1, 4097, 65536, 1 * MB + 3, 4 * MB, 9 * MB + 5, 70 * MB + 1};
  size_t max = 70 * MB + 64;
  uint8_t *src = malloc(max), *dst = malloc(max);
  char *dev;
  cudaStream_t s;
  CK(cudaMalloc((void **)&dev, max));
  CK(cudaStreamCreate(&s));
  int fails = 0, checks = 0;
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
    for (int how = 0; how < 3; how++, checks++)
      fails += roundtrip(src, dst, dev, sizes[i], (i * 3 + (size_t)how) % 8,
                         (i + 5 * (size_t)how) % 16, how, s, (unsigned)checks);
  CK(cudaStreamDestroy(s));
  CK(cudaFree(dev));
  free(src);
  free(dst);

  enum { NT = 4 };
  pthread_t t[NT];
  targ a[NT];
  for (unsigned i = 0; i < NT; i++) {
    a[i] = (targ){.id = i};
    pthread_create(&t[i], NULL, thread_main, &a[i]);
  }
  for (unsigned i = 0; i < NT; i++) {
    pthread_join(t[i], NULL);
    fails += a[i].fails;
    checks += 12;
  }
  printf("stage_e2e: %d round trips, %d wrong\n", checks, fails);
  return fails ? 1 : 0;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static int sweep(void) {
  size_t max = 64 * MB;
  char *host = malloc(max), *dev;
  memset(host, 1, max);
  cudaStream_t s;
  CK(cudaMalloc((void **)&dev, max));
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (size_t n = 64 << 10; n <= max; n *= 4) {
    double med[2];
    for (int h2d = 1; h2d >= 0; h2d--) {
      double t[21];
      for (int rep = 0; rep < 21; rep++) {
        double t0 = now_s();
        if (h2d)
          CK(cudaMemcpyAsync(dev, host, n, cudaMemcpyHostToDevice, s));
        else
          CK(cudaMemcpyAsync(host, dev, n, cudaMemcpyDeviceToHost, s));
        CK(cudaStreamSynchronize(s));
        t[rep] = now_s() - t0;
      }
      qsort(t, 21, sizeof t[0], cmp_d);
      med[h2d] = t[10];
    }
    printf("%8zu KiB  H2D %8.1f us %5.1f GB/s   D2H %8.1f us %5.1f GB/s\n", n >> 10, med[1] * 1e6,
           n / med[1] / 1e9, med[0] * 1e6, n / med[0] / 1e9);
  }
  CK(cudaStreamDestroy(s));
  CK(cudaFree(dev));
  free(host);
  return 0;
}

static int check(const uint8_t *p, size_t n, unsigned seed, const char *what) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != pat(i, seed)) {
      fprintf(stderr, "stage_e2e: %s: byte %zu of %zu is %02x, want %02x\n", what, i, n, p[i],
              pat(i, seed));
      return 1;
    }
  return 0;
}

/* Whether no byte of p[0..n) landed yet: a DMA lands whole pages, so one
 * byte a page tells (a full scan of 256 MiB took longer than the kernel
 * it races). */
static int untouched(const uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; i += 4096)
    if (p[i] != 0xEE) return 0;
  return n == 0 || p[n - 1] == 0xEE;
}

/* Whether bytes of p[0..n) landed while the kernel launched at t_kernel
 * may still run: that is out of stream order (the kernel could still be
 * writing them).  Once the kernel may have ended, anything goes. */
static int early(const uint8_t *p, size_t n, double t_kernel, double spin_s) {
  return now_s() - t_kernel < 0.9 * spin_s && !untouched(p, n);
}

/* Copies queued behind a kernel: the calls' times, whether bytes landed
 * before the stream got there, and when a copy on another stream is
 * done. */
static int held(size_t mb, size_t hold_mb) {
  const unsigned long long spin_ns = 300000000ull;
  size_t n = mb * MB + 3, nb = n / 2 + 5;
  uint8_t *ha = malloc(n), *hb = malloc(nb);
  char *da, *db;
  cudaStream_t a, b;
  CUmodule m;
  CUfunction f;
  void *params[] = {(void *)&spin_ns};
  CK(cudaMalloc((void **)&da, n));
  CK(cudaMalloc((void **)&db, nb));
  CK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
  if (cuModuleLoadData(&m, pagelock_spin_ptx) != CUDA_SUCCESS ||
      cuModuleGetFunction(&f, m, "pagelock_spin") != CUDA_SUCCESS) {
    fprintf(stderr, "stage_e2e: cannot load the spin kernel\n");
    return 2;
  }
  for (size_t i = 0; i < n; i++) ha[i] = pat(i, 7);
  for (size_t i = 0; i < nb; i++) hb[i] = pat(i, 8);
  CK(cudaMemcpy(da, ha, n, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(db, hb, nb, cudaMemcpyHostToDevice));
  int fails = 0;
  /* Warm-up: what a program copying in a loop sees is the steady state
   * (pinned pools, threads, streams made on first use). */
  CK(cudaMemcpyAsync(ha, da, n, cudaMemcpyDeviceToHost, a));
  CK(cudaMemcpyAsync(hb, db, nb, cudaMemcpyDeviceToHost, b));
  CK(cudaDeviceSynchronize());

  /* 1. behind a kernel on stream a, with stream b beside it */
  memset(ha, 0xEE, n);
  memset(hb, 0xEE, nb);
  CK(cudaDeviceSynchronize());
  double t0 = now_s();
  if (cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, (CUstream)a, params, NULL) != CUDA_SUCCESS) return 2;
  double t1 = now_s();
  for (int k = 0; k < 2 && hold_mb && 2 * hold_mb * MB <= n; k++)
    CK(cudaMemcpyAsync(ha + k * hold_mb * MB, da + k * hold_mb * MB, hold_mb * MB,
                       cudaMemcpyDeviceToHost, a));
  double t2 = now_s();
  CK(cudaMemcpyAsync(ha, da, n, cudaMemcpyDeviceToHost, a));
  double call_ms = (now_s() - t2) * 1e3, hold_ms = (t2 - t1) * 1e3;
  CK(cudaMemcpyAsync(hb, db, nb, cudaMemcpyDeviceToHost, b));
  CK(cudaStreamSynchronize(b));
  double b_ms = (now_s() - t0) * 1e3;
  int early_n = early(ha, n, t0, spin_ns / 1e9);
  fails += check(hb, nb, 8, "stream b");
  CK(cudaStreamSynchronize(a));
  double a_ms = (now_s() - t0) * 1e3;
  fails += check(ha, n, 7, "stream a");

  /* 2. the same behind a kernel on the legacy default stream */
  memset(ha, 0xEE, n);
  CK(cudaDeviceSynchronize());
  t0 = now_s();
  if (cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL) != CUDA_SUCCESS) return 2;
  t1 = now_s();
  CK(cudaMemcpyAsync(ha, da, n, cudaMemcpyDeviceToHost, 0));
  double call0_ms = (now_s() - t1) * 1e3;
  early_n += early(ha, n, t0, spin_ns / 1e9);
  CK(cudaStreamSynchronize(0));
  fails += check(ha, n, 7, "legacy stream");

  printf(
      "result mode=held mb=%zu hold_mb=%zu hold_calls_ms=%.3f call_ms=%.3f legacy_call_ms=%.3f other_stream_ms=%.1f behind_kernel_ms=%.1f kernel_ms=%.0f early=%d wrong=%d\n",
      mb, hold_mb, hold_ms, call_ms, call0_ms, b_ms, a_ms, spin_ns / 1e6, early_n, fails);
  CK(cudaStreamDestroy(a));
  CK(cudaStreamDestroy(b));
  CK(cudaFree(da));
  CK(cudaFree(db));
  free(ha);
  free(hb);
  return fails || early_n ? 1 : 0;
}

/* Rounds that each end in cudaDeviceReset, the host buffers kept across
 * them: whatever the shim set up in a context (pool registration, events,
 * registrations of the program's buffers) dies with it. */
static int reset_rounds(int rounds) {
  const size_t sizes[] = {100 << 10, 3 * MB, 20 * MB};
  const size_t hot = 4 * MB;
  uint8_t *src = malloc(20 * MB), *dst = malloc(20 * MB), *h = malloc(hot), *hb = malloc(hot);
  if (src == NULL || dst == NULL || h == NULL || hb == NULL) return 2;
  int fails = 0;
  for (int r = 0; r < rounds; r++) {
    char *dev;
    cudaStream_t s;
    CK(cudaMalloc((void **)&dev, 20 * MB));
    CK(cudaStreamCreate(&s));
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
      for (int how = 0; how < 3; how++)
        fails +=
            roundtrip(src, dst, dev, sizes[k], 0, 0, how, s, (unsigned)(r * 16 + k * 3 + how)) != 0;
    for (int i = 0; i < 12; i++) {
      for (size_t j = 0; j < hot; j++) h[j] = pat(j, (unsigned)(r * 100 + i));
      CK(cudaMemcpyAsync(dev, h, hot, cudaMemcpyHostToDevice, s));
      CK(cudaMemcpyAsync(hb, dev, hot, cudaMemcpyDeviceToHost, s));
      CK(cudaStreamSynchronize(s));
      fails += check(hb, hot, (unsigned)(r * 100 + i), "hot buffer") != 0;
    }
    CK(cudaStreamDestroy(s));
    CK(cudaFree(dev));
    CK(cudaDeviceReset());
  }
  printf("result mode=reset rounds=%d wrong=%d\n", rounds, fails);
  free(src);
  free(dst);
  free(h);
  free(hb);
  return fails ? 1 : 0;
}

int main(int argc, char **argv) {
  CK(cudaSetDevice(0));
  if (argc > 2 && strcmp(argv[1], "--reset") == 0) return reset_rounds(atoi(argv[2]));
  if (argc > 1 && strcmp(argv[1], "--sweep") == 0) return sweep();
  if (argc > 2 && strcmp(argv[1], "--held") == 0)
    return held((size_t)strtoul(argv[2], NULL, 10),
                argc > 3 ? (size_t)strtoul(argv[3], NULL, 10) : 0);
  return correctness();
}
