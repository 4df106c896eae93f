/* bench_fill.c - how fast THREADS threads fill a ring of chunks from a
 * large pageable source, without a GPU: the host side of a staged upload
 * larger than the pool, alone.  The source is cut into 256 KiB pieces (the
 * copy threads' piece, shim/engines/workers.c) claimed with one atomic counter and
 * copied into a 64 MiB ring, with plain stores (memcpy) or streaming
 * stores.  It tells whether one thread is bound by memory latency (the
 * total grows with threads) or the host by bandwidth (it does not): on the
 * H100 host one thread copied 5.4 GB/s and 12 copied 57, which set the
 * staging engine's wide thread count (docs/bench/2026-11-27-copy-threads-larger-than-the-pool.md).
 *
 * usage: bench_fill THREADS [NT [HUGE [SIZE_MIB [REPS]]]]
 *   NT 1: streaming stores; HUGE 1: the source advised huge pages
 *   (MADV_HUGEPAGE) before its first touch, 0: advised against them;
 *   defaults 0, 0, 256 MiB, 9.  Prints the median GB/s of REPS passes over
 *   the source; exits 1 when the ring does not hold the source's bytes
 *   (checked when the source fits the ring: beyond, two pieces share a
 *   place in the ring, and which lands last is up to the threads). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#define BENCH_NAME "bench_fill"
#include "bench_util.h"

#define PIECE ((size_t)256 << 10)
#define RING_MAX ((size_t)64 << 20)
#define MAX_THREADS 64
#define MAX_REPS 100

static char *src, *ring;
static size_t size, ring_size;
static int nt;
static atomic_size_t next_piece;
static pthread_barrier_t go, done;

static void copy_stream(char *d, const char *s, size_t n) {
#if defined(__x86_64__)
  for (; n >= 64; n -= 64, d += 64, s += 64) {
    __m128i a = _mm_loadu_si128((const __m128i *)s), b = _mm_loadu_si128((const __m128i *)(s + 16));
    __m128i c = _mm_loadu_si128((const __m128i *)(s + 32)),
            e = _mm_loadu_si128((const __m128i *)(s + 48));
    _mm_stream_si128((__m128i *)d, a);
    _mm_stream_si128((__m128i *)(d + 16), b);
    _mm_stream_si128((__m128i *)(d + 32), c);
    _mm_stream_si128((__m128i *)(d + 48), e);
  }
  _mm_sfence();
#endif
  memcpy(d, s, n);
}

/* Claim pieces until the source is used up. */
static void fill(void) {
  for (;;) {
    size_t k = atomic_fetch_add(&next_piece, 1), off = k * PIECE;
    if (off >= size) return;
    size_t n = size - off < PIECE ? size - off : PIECE;
    char *d = ring + off % ring_size;
    if (nt)
      copy_stream(d, src + off, n);
    else
      memcpy(d, src + off, n);
  }
}

static void *filler(void *arg) {
  (void)arg;
  for (;;) {
    pthread_barrier_wait(&go);
    fill();
    pthread_barrier_wait(&done);
  }
  return NULL;
}

/* n bytes at a 2 MiB boundary, advised as asked, then touched. */
static char *map(size_t n, int huge, int byte) {
  size_t align = (size_t)2 << 20;
  char *p = mmap(NULL, n + align, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    perror(BENCH_NAME ": mmap");
    exit(2);
  }
  p = (char *)(((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1));
  madvise(p, n, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  for (size_t i = 0; i < n; i++) p[i] = (char)(byte + i * 7 / 4096);
  return p;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: bench_fill THREADS [NT [HUGE [SIZE_MIB [REPS]]]]\n");
    return 2;
  }
  int threads = atoi(argv[1]);
  nt = argc > 2 ? atoi(argv[2]) : 0;
  int huge = argc > 3 ? atoi(argv[3]) : 0;
  long mib = argc > 4 ? atol(argv[4]) : 256;
  int reps = argc > 5 ? atoi(argv[5]) : 9;
  if (threads < 1 || threads > MAX_THREADS || mib < 1 || mib > (1l << 20) || reps < 1 ||
      reps > MAX_REPS || (nt != 0 && nt != 1) || (huge != 0 && huge != 1)) {
    fprintf(stderr, "bench_fill: THREADS 1-%d, NT and HUGE 0 or 1, SIZE_MIB >= 1, REPS 1-%d\n",
            MAX_THREADS, MAX_REPS);
    return 2;
  }
  size = (size_t)mib << 20;
  ring_size = size < RING_MAX ? size : RING_MAX;
  src = map(size, huge, 1);
  ring = map(ring_size, 1, 0);
  pthread_barrier_init(&go, NULL, (unsigned)threads);
  pthread_barrier_init(&done, NULL, (unsigned)threads);
  for (int i = 1; i < threads; i++) {
    pthread_t t;
    if (pthread_create(&t, NULL, filler, NULL) != 0) {
      fprintf(stderr, "bench_fill: pthread_create failed\n");
      return 2;
    }
    pthread_detach(t);
  }
  double v[MAX_REPS];
  for (int r = 0; r < reps; r++) {
    atomic_store(&next_piece, 0);
    double t0 = now_s();
    pthread_barrier_wait(&go);
    fill();
    pthread_barrier_wait(&done);
    v[r] = (double)size / (now_s() - t0) / 1e9;
  }
  int same = size > ring_size || memcmp(ring, src, size) == 0;
  printf("result mode=fill threads=%d nt=%d huge=%d size=%zu gbps=%.2f same=%d\n", threads, nt,
         huge, size, median(v, reps), same);
  return same ? 0 : 1;
}
