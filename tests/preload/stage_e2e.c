/* stage_e2e.c - the staging engine end to end: an ordinary cudart program
 * with pageable buffers, meant to run under LD_PRELOAD=libpagelock.so with
 * PAGELOCK_MODE=stage (fake CUDA in CI, the real toolkit on the GPU host).
 *
 *   stage_e2e            byte-exact round trips: every size class, odd
 *                        offsets, sync/async/default-stream calls, several
 *                        threads with their own streams.  Exit 0 = all exact.
 *   stage_e2e --sweep    median time of one copy + sync, 64 KiB to 64 MiB:
 *                        where staging starts to pay.
 *
 * It knows nothing of pagelock: the same binary runs without the shim, so
 * its output is directly comparable between modes. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#define MB ((size_t)1 << 20)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#define CK(x)                                                                  \
  do {                                                                         \
    cudaError_t e_ = (x);                                                      \
    if (e_ != cudaSuccess) {                                                   \
      fprintf(stderr, "stage_e2e: %s:%d: %s -> %d\n", __FILE__, __LINE__, #x, \
              (int)e_);                                                        \
      exit(2);                                                                 \
    }                                                                          \
  } while (0)

static uint8_t pat(size_t i, unsigned seed) { return (uint8_t)((i * 131u) ^ (i >> 11) ^ (seed * 0x9Du)); }

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
      fprintf(stderr, "stage_e2e: n=%zu how=%d ho=%zu do=%zu: byte %zu is %02x, want %02x\n", n, how,
              ho, dof, i, dst[ho + i], pat(i, seed));
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
      fails += roundtrip(src, dst, dev, sizes[i], (i * 3 + (size_t)how) % 8, (i + 5 * (size_t)how) % 16, how, s,
                         (unsigned)checks);
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
        if (h2d) CK(cudaMemcpyAsync(dev, host, n, cudaMemcpyHostToDevice, s));
        else CK(cudaMemcpyAsync(host, dev, n, cudaMemcpyDeviceToHost, s));
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

int main(int argc, char **argv) {
  CK(cudaSetDevice(0));
  if (argc > 1 && strcmp(argv[1], "--sweep") == 0) return sweep();
  return correctness();
}
