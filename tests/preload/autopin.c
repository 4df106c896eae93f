/* autopin.c - what a program may do with pageable buffers while pagelock
 * page-locks them behind its back (PAGELOCK_MODE register and auto,
 * issue 18).  An ordinary CUDA runtime program: the same binary runs
 * without the shim, over the fake driver in CI and the real one on the
 * GPU host (tests/gpu/run.sh), and its answers must not change.
 *
 *   autopin churn SECONDS THREADS [MAX]   malloc, calloc, free, realloc,
 *                         mmap, munmap (partial too), mremap, madvise and
 *                         buffers handed between threads, with copies in
 *                         between; SECONDS may be a fraction, MAX the largest
 *                         buffer (default 768K)
 *   autopin overwrite     an upload's source overwritten as soon as
 *                         cudaMemcpyAsync returns: the device has the old bytes
 *   autopin readback      a download's destination read as soon as the call
 *                         returns: the new bytes are there
 *   autopin neighbours    two allocations sharing a page, both registered
 *   autopin reuse         free (or munmap) then malloc (mmap) at the same
 *                         address: the new bytes arrive, not the old pages'
 *   autopin budget        more hot buffers than PAGELOCK_REGISTER_BUDGET
 *                         holds: never more registered, evictions once idle
 *   autopin queries       the program's pointer queries and its own
 *                         cudaHostRegister/Unregister over a buffer the shim
 *                         registered answer as over one never copied
 *   autopin fail          registration refused by the driver (fault
 *                         injection): every copy still right
 *   autopin capture       copies captured into a graph (global mode; a
 *                         registered buffer freed during the capture),
 *                         replayed later: right bytes
 *   autopin fork          fork after registration: the child reads the
 *                         parent's buffers, the parent's copies stay right
 *   autopin hostfn KIND   a host function releases a registered buffer
 *                         (KIND munmap, madvise, madvise_ro: of a read-only
 *                         part, mremap, mremap_none: with an inaccessible
 *                         part, which the kernel refuses, free), where the
 *                         driver refuses calls: gone for the program, never
 *                         left registered, no hang
 *   autopin signal [heap] a 20 kHz signal handler maps and unmaps memory of
 *                         its own, and once unmaps a registered buffer, while
 *                         the main thread copies: no hang, right bytes
 *                         (heap: no registered mapping to unmap, as when
 *                         another allocator serves malloc and the shim
 *                         registers no mapping)
 *   autopin stale KIND    for the guard's own test: page-lock part of a
 *                         buffer, then release it without unregistering
 *                         (KIND free, realloc, munmap, mremap, madvise, sbrk,
 *                         brk) or, KIND ok, after unregistering
 *
 * Each prints one summary line ("<name>: ... wrong=0 pid=N") and exits
 * non-zero on any wrong byte or count.  Checks that need the fake driver's
 * controls (fakecuda_*: is this range registered, fault injection, slowed
 * DMA) are skipped, with a word on the line, when they are absent.  Sizes
 * are small: the preload suite runs with PAGELOCK_TRACK_MIN=16K. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "fakecuda.h" /* struct fakecuda_stats: the controls are looked up, never linked */

#define PG ((size_t)4096)
#define MB ((size_t)1 << 20)

#define CK(x)                                                                             \
  do {                                                                                    \
    cudaError_t e_ = (x);                                                                 \
    if (e_ != cudaSuccess) {                                                              \
      fprintf(stderr, "autopin: %s:%d: %s -> %d (%s)\n", __FILE__, __LINE__, #x, (int)e_, \
              cudaGetErrorString(e_));                                                    \
      exit(2);                                                                            \
    }                                                                                     \
  } while (0)

/* ---- the fake driver's controls, when it is the driver ------------------- */

typedef size_t (*fc_bytes_in_fn)(const void *, size_t, const void **, size_t *);
static struct {
  fc_bytes_in_fn registered_bytes_in;
  int (*fail)(const char *, int, int);
  void (*clear_faults)(void);
  void (*set_bandwidth)(double, double);
  unsigned long (*call_count)(const char *);
  void (*get_stats)(struct fakecuda_stats *);
  void (*reset_stats)(void);
} fc;

/* The shim is in this process, in a mode that registers. */
static int registering;
static int shim_present;

static void setup(void) {
  CK(cudaFree(0)); /* the runtime loads the driver */
  void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (h != NULL) {
    fc.registered_bytes_in = (fc_bytes_in_fn)dlsym(h, "fakecuda_registered_bytes_in");
    *(void **)&fc.fail = dlsym(h, "fakecuda_fail");
    *(void **)&fc.clear_faults = dlsym(h, "fakecuda_clear_faults");
    *(void **)&fc.set_bandwidth = dlsym(h, "fakecuda_set_bandwidth");
    *(void **)&fc.call_count = dlsym(h, "fakecuda_call_count");
    *(void **)&fc.get_stats = dlsym(h, "fakecuda_get_stats");
    *(void **)&fc.reset_stats = dlsym(h, "fakecuda_reset_stats");
  }
  if (!fc.registered_bytes_in || !fc.fail || !fc.clear_faults || !fc.set_bandwidth ||
      !fc.call_count || !fc.get_stats || !fc.reset_stats)
    memset(&fc, 0, sizeof fc);
  shim_present = dlsym(RTLD_DEFAULT, "pagelock_registry_check") != NULL;
  const char *m = getenv("PAGELOCK_MODE");
  registering = shim_present && m != NULL && (!strcmp(m, "register") || !strcmp(m, "auto"));
}

static int fake(void) { return fc.registered_bytes_in != NULL; }

static size_t reg_bytes(const void *p, size_t n) {
  return fake() ? fc.registered_bytes_in(p, n, NULL, NULL) : 0;
}

static struct fakecuda_stats fc_stats(void) {
  struct fakecuda_stats st;
  fc.get_stats(&st);
  return st;
}

/* The pageable-side DMA slowed down, so that a copy the shim lets the
 * driver run from a registration after the call has returned moves its
 * bytes long after the program has touched the buffer (tests/fakecuda:
 * a pinned copy's bytes move at the end of its modelled time). */
static void slow_dma(int on) {
  if (fake()) fc.set_bandwidth(on ? 0.05 : 24, 6);
}

/* ---- bytes ---------------------------------------------------------------- */

static inline uint8_t pat(size_t i, unsigned seed) {
  return (uint8_t)((i * 131u) ^ (i >> 9) ^ (seed * 0x9Du) ^ (seed >> 3));
}
static void fill(uint8_t *p, size_t n, size_t from, unsigned seed) {
  for (size_t i = 0; i < n; i++) p[i] = pat(from + i, seed);
}
/* Bytes compared against what a copy should have delivered (the
 * robustness suite sums the summary lines' bytes_checked=). */
static atomic_ullong checked;

/* Wrong bytes of p[0..n) against pat(from + i, seed); says where the first is. */
static size_t wrong_bytes(const char *what, const uint8_t *p, size_t n, size_t from,
                          unsigned seed) {
  atomic_fetch_add_explicit(&checked, n, memory_order_relaxed);
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < n; i++)
    if (p[i] != pat(from + i, seed) && bad++ == 0) first = i;
  if (bad)
    fprintf(stderr, "autopin: %s: %zu of %zu bytes wrong, first at %zu (0x%02x, expected 0x%02x)\n",
            what, bad, n, first, p[first], pat(from + first, seed));
  return bad;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}
static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

/* Copy p (n bytes) to the device, or the device to p (d2h), until the shim
 * has registered some of it (the fake driver says so; `wait` seconds at
 * most).  Over another driver: a few copies.  1 when seen registered. */
static int warm_for(void *p, size_t n, void *dev, cudaStream_t s, int d2h, double wait) {
  int tries = !registering ? 2 : fake() ? 3000 : 20;
  double until = now_s() + wait;
  for (int i = 0; i < tries && now_s() < until; i++) {
    if (d2h)
      CK(cudaMemcpyAsync(p, dev, n, cudaMemcpyDeviceToHost, s));
    else
      CK(cudaMemcpyAsync(dev, p, n, cudaMemcpyHostToDevice, s));
    CK(cudaStreamSynchronize(s));
    if (reg_bytes(p, n) > 0) {
      /* The fake shows a registration from the start of its call, the
       * shim's copies use it once the call has returned: one more copy,
       * after that, goes through it (the traces' --registered-min 1; on a
       * loaded CI machine autopin_queries' later copies found the range
       * closed to the shim by the program's own registration). */
      sleep_ms(50);
      if (d2h)
        CK(cudaMemcpyAsync(p, dev, n, cudaMemcpyDeviceToHost, s));
      else
        CK(cudaMemcpyAsync(dev, p, n, cudaMemcpyHostToDevice, s));
      CK(cudaStreamSynchronize(s));
      return 1;
    }
    if (registering) sleep_ms(1);
  }
  return 0;
}
static int warm_dir(void *p, size_t n, void *dev, cudaStream_t s, int d2h) {
  return warm_for(p, n, dev, s, d2h, 3);
}
static int warm(void *p, size_t n, void *dev, cudaStream_t s) { return warm_dir(p, n, dev, s, 0); }

/* In a registering mode over the fake, a buffer that never got registered
 * makes the subcommand test nothing: that is a failure. */
static int need_registered(const char *what, int seen) {
  if (seen || !registering || !fake()) return 0;
  fprintf(stderr, "autopin: %s was never registered by the shim: nothing was tested\n", what);
  return 1;
}

static const char *fake_word(void) {
  return fake() ? "" : " (no fakecuda controls: registration not observed)";
}

/* ---- tail ------------------------------------------------------------------- */

/* Registered uploads of 4 MiB or more send their last eighth through the
 * staging pool: the bytes arrive whole, and the source may be overwritten
 * as soon as the call returns. */
static int cmd_tail(void) {
  const size_t n = 8 * MB + 4099;
  uint8_t *p = malloc(n), *back = malloc(n);
  void *dev;
  cudaStream_t s;
  CK(cudaMalloc(&dev, n));
  CK(cudaStreamCreate(&s));
  fill(p, n, 0, 150);
  int bad = need_registered("the 8 MiB buffer", warm(p, n, dev, s));
  size_t wrong = 0;
  for (unsigned r = 0; r < 6; r++) {
    fill(p, n, 0, 151 + r);
    CK(cudaMemcpyAsync(dev, p, n, cudaMemcpyHostToDevice, s));
    memset(p, 0x5a, n); /* the program's own again */
    CK(cudaMemcpyAsync(back, dev, n, cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    wrong += wrong_bytes("tail: upload then overwrite", back, n, 0, 151 + r);
  }
  printf("tail: copies=%d wrong=%zu pid=%d\n", 2 * 6, wrong, (int)getpid());
  free(p);
  free(back);
  CK(cudaFree(dev));
  return wrong || bad;
}

/* ---- overwrite ------------------------------------------------------------- */

/* An upload from a registered buffer, its source overwritten as soon as
 * the call returns (legal for pageable memory: the driver has taken the
 * bytes by then): the device must have the old bytes.  Odd offsets and
 * lengths put the allocation's partial pages in the copy too; async on a
 * stream, async on the legacy stream, and the synchronous call. */
static int cmd_overwrite(void) {
  const size_t n = MB + 3;
  uint8_t *buf = malloc(n), *back = malloc(n);
  void *dev;
  cudaStream_t s;
  CK(cudaMalloc(&dev, n));
  CK(cudaStreamCreate(&s));
  fill(buf, n, 0, 1);
  int bad = need_registered("the source", warm(buf, n, dev, s));
  slow_dma(1);
  size_t wrong = 0;
  int copies = 0;
  for (unsigned k = 0; k < 9; k++) {
    size_t off = (k * 37) % PG, len = n - off - (k * 101) % PG;
    fill(buf + off, len, 0, 10 + k);
    if (k % 3 == 0)
      CK(cudaMemcpyAsync(dev, buf + off, len, cudaMemcpyHostToDevice, s));
    else if (k % 3 == 1)
      CK(cudaMemcpyAsync(dev, buf + off, len, cudaMemcpyHostToDevice, 0));
    else
      CK(cudaMemcpy(dev, buf + off, len, cudaMemcpyHostToDevice));
    memset(buf + off, 0xEE, len);
    memset(back, 0, len);
    CK(cudaStreamSynchronize(s));
    CK(cudaMemcpy(back, dev, len, cudaMemcpyDeviceToHost));
    wrong +=
        wrong_bytes("overwrite: device after the source was overwritten", back, len, 0, 10 + k);
    copies++;
  }
  slow_dma(0);
  printf("overwrite: copies=%d wrong=%zu registered=%s%s pid=%d\n", copies, wrong,
         reg_bytes(buf, n) ? "yes" : "no", fake_word(), (int)getpid());
  free(buf);
  free(back);
  CK(cudaStreamDestroy(s));
  CK(cudaFree(dev));
  return bad || wrong != 0;
}

/* ---- readback -------------------------------------------------------------- */

/* A download into a registered buffer, read as soon as the call returns:
 * the new bytes must be there, and nothing outside the copied range may
 * have changed. */
static int cmd_readback(void) {
  const size_t n = MB + 5;
  uint8_t *buf = malloc(n), *src = malloc(n);
  void *dev;
  cudaStream_t s;
  CK(cudaMalloc(&dev, n));
  CK(cudaStreamCreate(&s));
  int bad = need_registered("the destination", warm_dir(buf, n, dev, s, 1));
  slow_dma(1);
  size_t wrong = 0;
  int copies = 0;
  for (unsigned k = 0; k < 9; k++) {
    size_t off = (k * 53) % PG, len = n - off - (k * 71) % PG;
    fill(src, len, 0, 20 + k);
    CK(cudaMemcpy(dev, src, len, cudaMemcpyHostToDevice));
    memset(buf, 0xAB, n);
    if (k % 3 == 0)
      CK(cudaMemcpyAsync(buf + off, dev, len, cudaMemcpyDeviceToHost, s));
    else if (k % 3 == 1)
      CK(cudaMemcpyAsync(buf + off, dev, len, cudaMemcpyDeviceToHost, 0));
    else
      CK(cudaMemcpy(buf + off, dev, len, cudaMemcpyDeviceToHost));
    /* no synchronisation: a pageable destination is complete on return */
    wrong += wrong_bytes("readback: destination right after the call", buf + off, len, 0, 20 + k);
    for (size_t i = 0; i < n; i++)
      if ((i < off || i >= off + len) && buf[i] != 0xAB && wrong++ == 0)
        fprintf(stderr, "autopin: readback: byte %zu outside the copy changed\n", i);
    copies++;
    CK(cudaStreamSynchronize(s));
  }
  slow_dma(0);
  printf("readback: copies=%d wrong=%zu registered=%s%s pid=%d\n", copies, wrong,
         reg_bytes(buf, n) ? "yes" : "no", fake_word(), (int)getpid());
  free(buf);
  free(src);
  CK(cudaStreamDestroy(s));
  CK(cudaFree(dev));
  return bad || wrong != 0;
}

/* ---- neighbours ------------------------------------------------------------ */

/* One H2D + D2H round trip of p[off, off+len) against pat(seed). */
static size_t roundtrip(const char *what, uint8_t *p, size_t off, size_t len, unsigned seed,
                        void *dev, uint8_t *back, cudaStream_t s) {
  CK(cudaMemcpyAsync(dev, p + off, len, cudaMemcpyHostToDevice, s));
  CK(cudaMemcpyAsync(back, dev, len, cudaMemcpyDeviceToHost, s));
  CK(cudaStreamSynchronize(s));
  return wrong_bytes(what, back, len, off, seed);
}

/* Two heap blocks (below glibc's mmap threshold) that share a page, both
 * hot: their registrations are their page-aligned interiors, so they do
 * not overlap (the driver would refuse the second), and freeing one leaves
 * the other registered and right. */
static int cmd_neighbours(void) {
  const size_t na = 48 * 1024 + 5, nb = 40 * 1024 + 11;
  uint8_t *a = NULL, *b = NULL, *spare[8];
  int nspare = 0, shared = 0;
  for (int t = 0; t < 4; t++) {
    a = malloc(na);
    b = malloc(nb);
    uintptr_t as = (uintptr_t)a, ae = as + na - 1, bs = (uintptr_t)b, be = bs + nb - 1;
    shared = ae / PG == bs / PG || be / PG == as / PG;
    if (shared) break;
    spare[nspare++] = a;
    spare[nspare++] = b;
  }
  for (int i = 0; i < nspare; i++) free(spare[i]);
  if (!shared) {
    printf("neighbours: no two blocks shared a page with this allocator: skipped pid=%d\n",
           (int)getpid());
    return 0;
  }
  void *dev;
  cudaStream_t s;
  uint8_t *back = malloc(na > nb ? na : nb);
  CK(cudaMalloc(&dev, na + nb));
  CK(cudaStreamCreate(&s));
  fill(a, na, 0, 31);
  fill(b, nb, 0, 32);
  int bad = need_registered("the first block", warm(a, na, dev, s));
  bad |= need_registered("the second block", warm(b, nb, dev, s));
  const void *ra = NULL, *rb = NULL;
  size_t la = 0, lb = 0;
  if (fake()) {
    fc.registered_bytes_in(a, na, &ra, &la);
    fc.registered_bytes_in(b, nb, &rb, &lb);
    if (la && lb && (uintptr_t)ra < (uintptr_t)rb + lb && (uintptr_t)rb < (uintptr_t)ra + la) {
      fprintf(stderr, "autopin: neighbours: registrations overlap\n");
      bad = 1;
    }
    /* each registration lies inside its own block */
    if ((la && ((uintptr_t)ra < (uintptr_t)a || (uintptr_t)ra + la > (uintptr_t)a + na)) ||
        (lb && ((uintptr_t)rb < (uintptr_t)b || (uintptr_t)rb + lb > (uintptr_t)b + nb))) {
      fprintf(stderr, "autopin: neighbours: a registration reaches outside its block\n");
      bad = 1;
    }
  }
  size_t wrong = 0;
  for (unsigned k = 0; k < 4; k++) {
    /* whole blocks (their shared page included), then the partial pages alone */
    fill(a, na, 0, 40 + k);
    wrong += roundtrip("neighbours: first block", a, 0, na, 40 + k, dev, back, s);
    wrong += wrong_bytes("neighbours: second block untouched", b, nb, 0, k ? 50 + k - 1 : 32);
    fill(b, nb, 0, 50 + k);
    wrong += roundtrip("neighbours: second block", b, 0, nb, 50 + k, dev, back, s);
    wrong +=
        roundtrip("neighbours: first block's last bytes", a, na - 100, 100, 40 + k, dev, back, s);
    wrong += roundtrip("neighbours: second block's first bytes", b, 0, 100, 50 + k, dev, back, s);
    /* a download into one block's end must not touch the other */
    fill(back, 300, na - 300, 60 + k);
    CK(cudaMemcpy(dev, back, 300, cudaMemcpyHostToDevice));
    CK(cudaMemcpyAsync(a + na - 300, dev, 300, cudaMemcpyDeviceToHost, s));
    wrong += wrong_bytes("neighbours: download into the first block's end", a + na - 300, 300,
                         na - 300, 60 + k);
    wrong += wrong_bytes("neighbours: second block after a download beside it", b, nb, 0, 50 + k);
    CK(cudaStreamSynchronize(s));
  }
  free(a); /* b's registration stays */
  wrong +=
      roundtrip("neighbours: second block after the first was freed", b, 0, nb, 53, dev, back, s);
  int still = reg_bytes(b, nb) > 0;
  printf("neighbours: copies=%d wrong=%zu both_registered=%s second_after_free=%s%s pid=%d\n",
         4 * 6 + 1, wrong, la && lb ? "yes" : "no", still ? "registered" : "not registered",
         fake_word(), (int)getpid());
  free(b);
  free(back);
  CK(cudaStreamDestroy(s));
  CK(cudaFree(dev));
  return bad || wrong != 0;
}

/* ---- reuse ----------------------------------------------------------------- */

/* A registered buffer freed (unmapped), and the next allocation of the
 * same size at the same address: its new bytes must reach the device.  A
 * registration left on the old pages would pin them and the device would
 * get the old bytes (real driver), or the guard stops the program first
 * (fake driver).  glibc serves 1 MiB from mmap, so the address comes back
 * with fresh pages.  The shim may hand the free to its own thread first,
 * so the same address can take a few tries. */
static int cmd_reuse(void) {
  const size_t n = MB + 7;
  void *dev;
  cudaStream_t s;
  uint8_t *back = malloc(n);
  CK(cudaMalloc(&dev, n));
  CK(cudaStreamCreate(&s));
  size_t wrong = 0;
  int same = 0, rounds = 0, bad = 0;
  for (unsigned r = 0; r < 3; r++, rounds++) {
    uint8_t *p = malloc(n);
    fill(p, n, 0, 70 + r);
    bad |= need_registered("the freed block", warm(p, n, dev, s));
    uint8_t *miss[64];
    int nmiss = 0;
    uintptr_t was = (uintptr_t)p;
    free(p);
    uint8_t *q = NULL;
    for (int t = 0; t < 64; t++) {
      q = malloc(n);
      if ((uintptr_t)q == was) break;
      miss[nmiss++] = q;
      q = NULL;
      sleep_ms(2);
    }
    for (int i = 0; i < nmiss; i++) free(miss[i]);
    if (q == NULL) q = malloc(n);
    same += (uintptr_t)q == was;
    fill(q, n, 0, 80 + r);
    wrong += roundtrip("reuse: new block at the old address", q, 0, n, 80 + r, dev, back, s);
    free(q);
  }
  /* The same with mmap/munmap.  The shim registers mapped ranges only
   * when glibc is the allocator after it (not under libpl_reg_guard.so,
   * which takes free, hence the short wait): seen registered or not, the
   * bytes must be right. */
  int msame = 0, mreg = 0;
  for (unsigned r = 0; r < 2; r++) {
    size_t m = 64 * PG;
    uint8_t *p = mmap(NULL, m, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      perror("autopin: mmap");
      return 1;
    }
    fill(p, m, 0, 90 + r);
    mreg += warm_for(p, m, dev, s, 0, 0.3);
    munmap(p, m);
    uint8_t *q = mmap(NULL, m, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (q == MAP_FAILED) {
      perror("autopin: mmap");
      return 1;
    }
    msame += q == p;
    fill(q, m, 0, 95 + r);
    wrong += roundtrip("reuse: new mapping at the old address", q, 0, m, 95 + r, dev, back, s);
    munmap(q, m);
  }
  char mr[16] = "unknown";
  if (fake()) snprintf(mr, sizeof mr, "%d/2", mreg);
  printf(
      "reuse: rounds=%d same_address=%d/%d mmap_same_address=%d/2 mmap_registered=%s wrong=%zu pid=%d\n",
      rounds, same, rounds, msame, mr, wrong, (int)getpid());
  free(back);
  CK(cudaStreamDestroy(s));
  CK(cudaFree(dev));
  return bad || wrong != 0;
}

/* ---- budget ---------------------------------------------------------------- */

static uint64_t parse_size(const char *v) {
  if (v == NULL) return 0;
  char *end;
  uint64_t x = strtoull(v, &end, 10);
  switch (*end) {
    case 'k':
    case 'K': return x << 10;
    case 'm':
    case 'M': return x << 20;
    case 'g':
    case 'G': return x << 30;
    default: return x;
  }
}

/* Staged uploads from shared memory (never registered) through the whole
 * staging pool (PAGELOCK_POOL_SIZE), so that its chunks, page-locked by the
 * same driver entry point as the program's buffers, exist before a test
 * counts registered bytes or makes registration fail.  Returns the bytes
 * the driver holds registered afterwards (the fake's count). */
static unsigned long long warm_pool(void) {
  const char *v = getenv("PAGELOCK_POOL_SIZE");
  size_t n = v ? (size_t)parse_size(v) : (size_t)64 << 20;
  uint8_t *sh = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  void *dev;
  if (sh == MAP_FAILED) {
    fprintf(stderr, "autopin: warm_pool: mmap of %zu bytes failed\n", n);
    exit(2);
  }
  CK(cudaMalloc(&dev, n));
  CK(cudaMemcpy(dev, sh, n, cudaMemcpyHostToDevice));
  CK(cudaDeviceSynchronize());
  CK(cudaFree(dev));
  munmap(sh, n);
  return fake() ? fc_stats().registered_bytes_live : 0;
}

/* Six hot 1 MiB buffers for a budget that holds two.  The first two are
 * registered; the next four, copied at once, find the budget full and
 * nothing idle long enough to evict (staged: two hot sets must not
 * thrash); after a pause the first two are idle and make room for two of
 * them.  Never more registered than the budget, per the fake driver. */
static int cmd_budget(void) {
  const size_t n = MB;
  uint64_t budget = parse_size(getenv("PAGELOCK_REGISTER_BUDGET"));
  enum { NB = 6 };
  uint8_t *buf[NB], *back = malloc(n);
  void *dev;
  cudaStream_t s;
  CK(cudaMalloc(&dev, n));
  CK(cudaStreamCreate(&s));
  unsigned long long pool = warm_pool();
  if (fake()) fc.reset_stats();
  unsigned long long unreg0 = fake() ? fc_stats().host_unregister_calls : 0;
  for (int i = 0; i < NB; i++) {
    buf[i] = malloc(n);
    fill(buf[i], n, 0, 100 + (unsigned)i);
  }
  size_t wrong = 0;
  int bad = need_registered("the first buffer", warm(buf[0], n, dev, s));
  bad |= need_registered("the second buffer", warm(buf[1], n, dev, s));
  for (int rep = 0; rep < 4; rep++)
    for (int i = 2; i < NB; i++)
      wrong += roundtrip("budget: second set", buf[i], 0, n, 100 + (unsigned)i, dev, back, s);
  int first_kept = reg_bytes(buf[0], n) > 0 && reg_bytes(buf[1], n) > 0;
  sleep_ms(1300); /* the first set idle for longer than the eviction hysteresis (1 s) */
  int evicted_room = 0;
  for (int i = 2; i < 4; i++) {
    evicted_room += warm(buf[i], n, dev, s);
    wrong +=
        roundtrip("budget: second set, registered", buf[i], 0, n, 100 + (unsigned)i, dev, back, s);
  }
  for (int i = 0; i < NB; i++)
    wrong += roundtrip("budget: every buffer", buf[i], 0, n, 100 + (unsigned)i, dev, back, s);
  unsigned long long high = fake() ? fc_stats().registered_bytes_high_water : 0;
  unsigned long long unreg = fake() ? fc_stats().host_unregister_calls - unreg0 : 0;
  if (fake() && budget && high > budget + pool) {
    fprintf(
        stderr,
        "autopin: budget: %llu bytes registered at once besides the %llu of the staging pool, the budget is %llu\n",
        high - pool, pool, (unsigned long long)budget);
    bad = 1;
  }
  if (fake() && registering && budget && !first_kept) {
    fprintf(stderr, "autopin: budget: the first set was evicted while it was still hot\n");
    bad = 1;
  }
  if (fake() && registering && budget && (evicted_room < 2 || unreg < 2)) {
    fprintf(
        stderr,
        "autopin: budget: the idle set was not evicted for the hot one (%d registered, %llu unregistered)\n",
        evicted_room, unreg);
    bad = 1;
  }
  if (fake())
    printf(
        "budget: copies=%d wrong=%zu budget=%llu high_water=%llu unregistered_before_free=%llu pid=%d\n",
        2 + 16 + 2 + NB, wrong, (unsigned long long)budget, high, unreg, (int)getpid());
  else
    printf("budget: copies=%d wrong=%zu budget=%llu%s pid=%d\n", 2 + 16 + 2 + NB, wrong,
           (unsigned long long)budget, fake_word(), (int)getpid());
  for (int i = 0; i < NB; i++) free(buf[i]);
  free(back);
  CK(cudaStreamDestroy(s));
  CK(cudaFree(dev));
  return bad || wrong != 0;
}

/* ---- queries --------------------------------------------------------------- */

typedef CUresult (*pga_fn)(void *, CUpointer_attribute, CUdeviceptr);
typedef CUresult (*pgas_fn)(unsigned, CUpointer_attribute *, void **, CUdeviceptr);
typedef CUresult (*hgf_fn)(unsigned *, void *);
typedef CUresult (*hgdp_fn)(CUdeviceptr *, void *, unsigned);
static struct {
  pga_fn pga;
  pgas_fn pgas;
  hgf_fn hgf;
  hgdp_fn hgdp;
} drv;

/* FNV-1a over every answer, so two sequences compare as one number. */
typedef struct {
  uint64_t h;
  int n;
} digest;
static void dg(digest *d, long long v) {
  for (int i = 0; i < 8; i++) {
    d->h ^= (uint8_t)(v >> (8 * i));
    d->h *= 1099511628211ull;
  }
  d->n++;
}
/* An address answer, relative to the queried pointer (addresses differ
 * between runs and buffers, offsets must not). */
static long long rel(uintptr_t v, uintptr_t q) { return v ? (long long)(v - q) : -(1ll << 40); }

/* Every pointer query a program (PyTorch's is_pinned, CuPy, a profiler)
 * might make, at q. */
static void answers(digest *d, uint8_t *q) {
  uintptr_t u = (uintptr_t)q;
  struct cudaPointerAttributes pa;
  memset(&pa, 0x5A, sizeof pa);
  cudaError_t e = cudaPointerGetAttributes(&pa, q);
  dg(d, e);
  if (e == cudaSuccess) {
    dg(d, pa.type);
    dg(d, pa.device);
    dg(d, rel((uintptr_t)pa.devicePointer, u));
    dg(d, rel((uintptr_t)pa.hostPointer, u));
  }
  cudaGetLastError();
  unsigned fl = 77;
  e = cudaHostGetFlags(&fl, q);
  dg(d, e);
  dg(d, e == cudaSuccess ? (long long)fl : -1);
  cudaGetLastError();
  void *dp = NULL;
  e = cudaHostGetDevicePointer(&dp, q, 0);
  dg(d, e);
  dg(d, e == cudaSuccess ? rel((uintptr_t)dp, u) : -1);
  cudaGetLastError();
  if (!drv.pga) return;
  static const CUpointer_attribute attrs[] = {
      CU_POINTER_ATTRIBUTE_MEMORY_TYPE,    CU_POINTER_ATTRIBUTE_CONTEXT,
      CU_POINTER_ATTRIBUTE_DEVICE_POINTER, CU_POINTER_ATTRIBUTE_HOST_POINTER,
      CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CU_POINTER_ATTRIBUTE_IS_MANAGED,
      CU_POINTER_ATTRIBUTE_MAPPED,         CU_POINTER_ATTRIBUTE_SYNC_MEMOPS,
      CU_POINTER_ATTRIBUTE_RANGE_SIZE,
  };
  enum { NA = sizeof attrs / sizeof attrs[0] };
  uint64_t one[NA], many[NA];
  void *data[NA];
  for (int i = 0; i < NA; i++) {
    one[i] = 0x5A5A5A5A5A5A5A5Aull;
    CUresult r = drv.pga(&one[i], attrs[i], (CUdeviceptr)u);
    dg(d, r);
    many[i] = 0x5A5A5A5A5A5A5A5Aull;
    data[i] = &many[i];
  }
  CUresult r = drv.pgas(NA, (CUpointer_attribute *)attrs, data, (CUdeviceptr)u);
  dg(d, r);
  for (int i = 0; i < NA; i++) {
    uint64_t v[2] = {one[i], many[i]};
    for (int k = 0; k < 2; k++) {
      switch (attrs[i]) {
        case CU_POINTER_ATTRIBUTE_CONTEXT:
          dg(d, v[k] == 0x5A5A5A5A5A5A5A5Aull ? 2 : v[k] != 0);
          break;
        case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
        case CU_POINTER_ATTRIBUTE_HOST_POINTER:
          dg(d, v[k] == 0x5A5A5A5A5A5A5A5Aull ? 2 : rel((uintptr_t)v[k], u));
          break;
        case CU_POINTER_ATTRIBUTE_RANGE_SIZE: dg(d, (long long)v[k]); break;
        default: dg(d, (long long)(uint32_t)v[k]); break; /* 4-byte answers */
      }
    }
  }
  unsigned f2 = 77;
  r = drv.hgf(&f2, q);
  dg(d, r);
  dg(d, r == CUDA_SUCCESS ? (long long)f2 : -1);
  CUdeviceptr dd = 0;
  r = drv.hgdp(&dd, q, 0);
  dg(d, r);
  dg(d, r == CUDA_SUCCESS ? rel((uintptr_t)dd, u) : -1);
}

static void answers3(digest *d, uint8_t *p, size_t n) {
  answers(d, p);
  answers(d, p + 2 * PG + 5);
  answers(d, p + n - 1);
}

/* The program's whole sequence over buffer p: its queries, its own
 * cudaHostRegister/Unregister (whole, overlapping, interior, twice), the
 * queries again.  As without the shim, the answers depend only on what the
 * program did, so a buffer the shim registered and one never copied give
 * one digest. */
static digest sequence(uint8_t *p, size_t n) {
  digest d = {1469598103934665603ull, 0};
  answers3(&d, p, n);
  dg(&d, cudaHostUnregister(p)); /* never registered by the program */
  cudaGetLastError();
  dg(&d, cudaHostRegister(p, n, cudaHostRegisterDefault));
  answers3(&d, p, n);
  dg(&d, cudaHostRegister(p + PG, PG, 0)); /* inside its own registration */
  cudaGetLastError();
  dg(&d, cudaHostUnregister(p + PG)); /* not a registration's start */
  cudaGetLastError();
  dg(&d, cudaHostUnregister(p));
  dg(&d, cudaHostUnregister(p));
  cudaGetLastError();
  answers3(&d, p, n);
  dg(&d,
     cudaHostRegister(p + 2 * PG + 100, 3 * PG, cudaHostRegisterPortable)); /* unaligned, inside */
  answers3(&d, p, n);
  dg(&d, cudaHostUnregister(p + 2 * PG + 100));
  cudaGetLastError();
  answers3(&d, p, n);
  return d;
}

static int cmd_queries(void) {
  const size_t n = 256 * 1024 + 9;
  void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (h) {
    drv.pga = (pga_fn)dlsym(h, "cuPointerGetAttribute");
    drv.pgas = (pgas_fn)dlsym(h, "cuPointerGetAttributes");
    drv.hgf = (hgf_fn)dlsym(h, "cuMemHostGetFlags");
    drv.hgdp = (hgdp_fn)dlsym(h, "cuMemHostGetDevicePointer_v2");
  }
  if (!drv.pga || !drv.pgas || !drv.hgf || !drv.hgdp) {
    fprintf(stderr, "autopin: queries: the driver's pointer queries were not found\n");
    return 1;
  }
  uint8_t *a = malloc(n), *c = malloc(n), *back = malloc(n);
  void *dev;
  cudaStream_t s;
  CK(cudaMalloc(&dev, n));
  CK(cudaStreamCreate(&s));
  fill(a, n, 0, 111);
  fill(c, n, 0, 111);
  int bad = need_registered("the queried buffer", warm(a, n, dev, s));
  int was = reg_bytes(a, n) > 0;
  digest da = sequence(a, n), dc = sequence(c, n);
  /* the shim may register it again once copied: still right */
  size_t wrong =
      roundtrip("queries: copied after the program's own registration", a, 0, n, 111, dev, back, s);
  wrong += roundtrip("queries: the control buffer", c, 0, n, 111, dev, back, s);
  if (da.h != dc.h) {
    fprintf(
        stderr,
        "autopin: queries: the answers over the buffer the shim registered differ from those over one"
        " never copied\n");
    bad = 1;
  }
  /* pid last: the case compares everything before it with a run without the shim */
  printf("queries: answers=%016llx count=%d same=%s wrong=%zu shim_registered=%s pid=%d\n",
         (unsigned long long)dc.h, dc.n, da.h == dc.h ? "yes" : "no", wrong,
         fake() ? (was ? "yes" : "no") : "unknown", (int)getpid());
  free(a);
  free(c);
  free(back);
  CK(cudaStreamDestroy(s));
  CK(cudaFree(dev));
  return bad || wrong != 0;
}

/* ---- fail ------------------------------------------------------------------ */

/* The driver refuses every registration (an RLIMIT_MEMLOCK, say): every
 * copy is still right and the program sees no error. */
static int cmd_fail(void) {
  const size_t n = MB + 1;
  if (!fake()) {
    printf("fail: no fakecuda controls: fault injection skipped pid=%d\n", (int)getpid());
    return 0;
  }
  warm_pool();
  fc.fail("cuMemHostRegister_v2", 0, CUDA_ERROR_OUT_OF_MEMORY);
  fc.fail("cuMemHostRegister", 0, CUDA_ERROR_OUT_OF_MEMORY);
  unsigned long before = fc.call_count("cuMemHostRegister_v2") + fc.call_count("cuMemHostRegister");
  uint8_t *buf[3], *back = malloc(n);
  void *dev;
  cudaStream_t s;
  CK(cudaMalloc(&dev, n));
  CK(cudaStreamCreate(&s));
  size_t wrong = 0;
  int copies = 0;
  for (int i = 0; i < 3; i++) {
    buf[i] = malloc(n);
    fill(buf[i], n, 0, 120 + (unsigned)i);
  }
  for (int rep = 0; rep < 12; rep++) {
    for (int i = 0; i < 3; i++) {
      wrong += roundtrip("fail: copy while registration fails", buf[i], 0, n, 120 + (unsigned)i,
                         dev, back, s);
      copies += 2;
    }
    sleep_ms(2);
  }
  unsigned long tried =
      fc.call_count("cuMemHostRegister_v2") + fc.call_count("cuMemHostRegister") - before;
  size_t reg = 0;
  for (int i = 0; i < 3; i++) reg += reg_bytes(buf[i], n);
  fc.clear_faults();
  printf("fail: copies=%d wrong=%zu register_attempts=%lu registered_bytes=%zu pid=%d\n", copies,
         wrong, tried, reg, (int)getpid());
  for (int i = 0; i < 3; i++) free(buf[i]);
  free(back);
  CK(cudaStreamDestroy(s));
  CK(cudaFree(dev));
  if (registering && tried == 0) {
    fprintf(stderr, "autopin: fail: the shim never tried to register\n");
    return 1;
  }
  return wrong != 0 || reg != 0;
}

/* ---- capture --------------------------------------------------------------- */

/* The driver refused a capture step: over the fake that is a failure;
 * over a real driver it may be the driver's own rule (say, pageable
 * memory in a capture), and then there is nothing to replay. */
static int capture_refused(const char *what, cudaError_t e) {
  if (e == cudaSuccess) return 0;
  fprintf(stderr, "autopin: capture: %s -> %d (%s)\n", what, (int)e, cudaGetErrorString(e));
  if (fake()) exit(1);
  printf("capture: the driver refused %s: nothing to replay pid=%d\n", what, (int)getpid());
  exit(0);
}

/* An upload and a download captured into a graph (global mode, as
 * torch.cuda.graph captures) from buffers the shim registered, with a
 * third registered buffer freed during the capture; the graph replayed
 * after the source changed, after a pause and budget pressure that would
 * evict idle registrations: the replays move the new bytes. */
static int cmd_capture(void) {
  const size_t n = MB + 5;
  uint8_t *src = malloc(n), *out = malloc(n), *victim = malloc(n), *back = malloc(n);
  void *dev;
  cudaStream_t s, w;
  CK(cudaMalloc(&dev, n));
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CK(cudaStreamCreate(&w));
  fill(src, n, 0, 130);
  fill(victim, n, 0, 131);
  int bad = need_registered("the captured source", warm(src, n, dev, w));
  bad |= need_registered("the captured destination", warm_dir(out, n, dev, w, 1));
  bad |= need_registered("the buffer freed during capture", warm(victim, n, dev, w));
  cudaGraph_t g = NULL;
  cudaGraphExec_t ge = NULL;
  capture_refused("cudaStreamBeginCapture", cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  capture_refused("a captured upload", cudaMemcpyAsync(dev, src, n, cudaMemcpyHostToDevice, s));
  free(victim); /* legal during a capture: nothing of CUDA is called */
  sleep_ms(50); /* time for a shim's thread to act on that free while the capture runs */
  capture_refused("a captured download", cudaMemcpyAsync(out, dev, n, cudaMemcpyDeviceToHost, s));
  capture_refused("cudaStreamEndCapture", cudaStreamEndCapture(s, &g));
  capture_refused("cudaGraphInstantiate", cudaGraphInstantiate(&ge, g, 0));
  size_t wrong = 0;
  int replays = 0;
  fill(src, n, 0, 132);
  memset(out, 0, n);
  CK(cudaGraphLaunch(ge, s));
  CK(cudaStreamSynchronize(s));
  wrong += wrong_bytes("capture: first replay", out, n, 0, 132);
  replays++;
  /* idle past the eviction hysteresis, then other hot buffers want room */
  sleep_ms(1200);
  enum { NP = 4 };
  uint8_t *press[NP];
  for (int i = 0; i < NP; i++) {
    press[i] = malloc(n);
    fill(press[i], n, 0, 140 + (unsigned)i);
    for (int k = 0; k < 4; k++) {
      wrong +=
          roundtrip("capture: pressure buffer", press[i], 0, n, 140 + (unsigned)i, dev, back, w);
      sleep_ms(2);
    }
  }
  int pinned = reg_bytes(src, n) > 0 && reg_bytes(out, n) > 0;
  fill(src, n, 0, 133);
  memset(out, 0, n);
  CK(cudaGraphLaunch(ge, s));
  CK(cudaStreamSynchronize(s));
  wrong += wrong_bytes("capture: replay after a pause and budget pressure", out, n, 0, 133);
  replays++;
  if (fake() && registering && !pinned) {
    fprintf(
        stderr,
        "autopin: capture: a registration a graph copies from was undone while the graph lives\n");
    bad = 1;
  }
  printf("capture: replays=%d wrong=%zu graph_registrations_kept=%s%s pid=%d\n", replays, wrong,
         pinned ? "yes" : "no", fake_word(), (int)getpid());
  CK(cudaGraphExecDestroy(ge));
  CK(cudaGraphDestroy(g));
  for (int i = 0; i < NP; i++) free(press[i]);
  free(src);
  free(out);
  free(back);
  CK(cudaStreamDestroy(s));
  CK(cudaStreamDestroy(w));
  CK(cudaFree(dev));
  return bad || wrong != 0;
}

/* ---- fork ------------------------------------------------------------------ */

/* fork after registration, as a DataLoader starts its workers: the child
 * reads every buffer (over the fake driver it also frees one and
 * allocates, and makes no driver call the parent's registrations could
 * feel); the parent's copies stay right and its registrations stay. */
static int cmd_fork(void) {
  enum { NF = 4 };
  const size_t n = 512 * 1024 + 3;
  uint8_t *buf[NF], *back = malloc(n);
  void *dev;
  cudaStream_t s;
  CK(cudaMalloc(&dev, n));
  CK(cudaStreamCreate(&s));
  int bad = 0;
  for (int i = 0; i < NF; i++) {
    buf[i] = malloc(n);
    fill(buf[i], n, 0, 150 + (unsigned)i);
    bad |= need_registered("a buffer before fork", warm(buf[i], n, dev, s));
  }
  unsigned long unreg0 = fake() ? fc.call_count("cuMemHostUnregister") : 0;
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    perror("autopin: fork");
    return 1;
  }
  if (pid == 0) {
    size_t w = 0;
    for (int i = 0; i < NF; i++)
      w += wrong_bytes("fork: the child reading the parent's buffer", buf[i], n, 0,
                       150 + (unsigned)i);
    if (!fake()) _exit(w ? 1 : 0); /* a real driver: the child only reads */
    free(buf[0]);
    uint8_t *q = malloc(2 * MB);
    memset(q, 7, 2 * MB);
    free(q);
    if (fc.call_count("cuMemHostUnregister") != unreg0) {
      fprintf(stderr, "autopin: fork: the child called cuMemHostUnregister\n");
      w++;
    }
    exit(w ? 1 : 0);
  }
  int st = 0;
  if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    fprintf(stderr, "autopin: fork: the child failed (status 0x%x)\n", st);
    bad = 1;
  }
  size_t wrong = 0;
  int kept = 0;
  for (int i = 0; i < NF; i++) {
    kept += reg_bytes(buf[i], n) > 0;
    wrong += roundtrip("fork: the parent's copy after the child", buf[i], 0, n, 150 + (unsigned)i,
                       dev, back, s);
  }
  printf("fork: child=%s wrong=%zu registrations_kept=%d/%d%s pid=%d\n", bad ? "failed" : "ok",
         wrong, kept, NF, fake_word(), (int)getpid());
  for (int i = 0; i < NF; i++) free(buf[i]);
  free(back);
  CK(cudaStreamDestroy(s));
  CK(cudaFree(dev));
  return bad || wrong != 0;
}

/* ---- churn ----------------------------------------------------------------- */

enum { SLOTS = 8, XCHG = 16 };
static size_t CHURN_MAX = 768 * 1024;

typedef struct slot {
  uint8_t *p;
  size_t n;
  int mapped; /* 1: mmap'd (n rounded up to pages is the mapping), 0: malloc family */
  unsigned seed;
} slot;

static atomic_int churn_stop;
static atomic_long churn_ops, churn_copies, churn_wrong, churn_seen, churn_seen_mapped;
static pthread_mutex_t xchg_mu = PTHREAD_MUTEX_INITIALIZER;
static slot xchg[XCHG];

static size_t pages(size_t n) { return (n + PG - 1) / PG * PG; }

static void slot_release(slot *s) {
  if (s->p == NULL) return;
  if (s->mapped)
    munmap(s->p, pages(s->n));
  else
    free(s->p);
  s->p = NULL;
  s->n = 0;
}

static long slot_check(const char *what, const slot *s, size_t from, size_t len) {
  return (long)wrong_bytes(what, s->p + from, len, from, s->seed);
}

typedef struct churn_arg {
  unsigned seed;
} churn_arg;

static void *churn_thread(void *arg) {
  unsigned rs = ((churn_arg *)arg)->seed;
  slot sl[SLOTS];
  memset(sl, 0, sizeof sl);
  void *dev;
  cudaStream_t s;
  uint8_t *back = malloc(CHURN_MAX);
  CK(cudaMalloc(&dev, CHURN_MAX));
  CK(cudaStreamCreate(&s));
  long wrong = 0;
  unsigned gen = rs * 7919u;
  while (!atomic_load_explicit(&churn_stop, memory_order_relaxed)) {
    slot *x = &sl[rand_r(&rs) % SLOTS];
    int op = rand_r(&rs) % 16;
    if (x->p == NULL && op >= 2) op = rand_r(&rs) % 2;
    /* A large buffer mostly lives on and is copied: long enough to be
     * registered, its uploads then have a tail through the pool. */
    if (x->p != NULL && x->n >= 4 * MB && op <= 4 && rand_r(&rs) % 4) op = 8;
    switch (op) {
      case 0: { /* malloc or calloc */
        slot_release(x);
        size_t n = 16 * 1024 + (size_t)rand_r(&rs) % (CHURN_MAX - 16 * 1024);
        x->p = rand_r(&rs) % 3 ? malloc(n) : calloc(1, n);
        x->n = n;
        x->mapped = 0;
        x->seed = ++gen;
        fill(x->p, n, 0, x->seed);
        break;
      }
      case 1: { /* mmap */
        slot_release(x);
        size_t n = (4 + (size_t)rand_r(&rs) % (CHURN_MAX / PG - 4)) * PG - (size_t)rand_r(&rs) % PG;
        void *m = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) break;
        x->p = m;
        x->n = n;
        x->mapped = 1;
        x->seed = ++gen;
        fill(x->p, n, 0, x->seed);
        break;
      }
      case 2: /* free or munmap */ slot_release(x); break;
      case 3: /* realloc, or mremap */
        if (!x->mapped) {
          size_t n = 16 * 1024 + (size_t)rand_r(&rs) % (CHURN_MAX - 16 * 1024);
          uint8_t *p = realloc(x->p, n);
          if (p == NULL) break;
          size_t keep = n < x->n ? n : x->n;
          x->p = p;
          wrong += slot_check("churn: bytes kept by realloc", x, 0, keep);
          fill(p + keep, n - keep, keep, x->seed);
          x->n = n;
        } else {
          size_t n = (4 + (size_t)rand_r(&rs) % (CHURN_MAX / PG - 4)) * PG;
          void *p = mremap(x->p, pages(x->n), n, MREMAP_MAYMOVE);
          if (p == MAP_FAILED) break;
          size_t keep = n < x->n ? n : x->n;
          x->p = p;
          wrong += slot_check("churn: bytes kept by mremap", x, 0, keep);
          fill(x->p + keep, n - keep, keep, x->seed);
          x->n = n;
        }
        break;
      case 4: /* munmap of the tail pages, or madvise a middle part away */
        if (x->mapped && x->n > 3 * PG) {
          size_t np = pages(x->n) / PG, from = 1 + (size_t)rand_r(&rs) % (np - 2);
          if (rand_r(&rs) % 2) {
            munmap(x->p + from * PG, (np - from) * PG);
            x->n = from * PG;
          } else {
            size_t len = (1 + (size_t)rand_r(&rs) % (np - from - 1)) * PG;
            int adv = rand_r(&rs) % 3 == 0 ? MADV_FREE : MADV_DONTNEED;
            madvise(x->p + from * PG, len, adv);
            if (adv == MADV_DONTNEED) /* private anonymous: zero pages from now on */
              for (size_t i = 0; i < len; i++)
                if (x->p[from * PG + i] != 0 && wrong++ == 0)
                  fprintf(stderr,
                          "autopin: churn: a page discarded with MADV_DONTNEED is not zero\n");
            fill(x->p + from * PG, len, from * PG, x->seed);
          }
        }
        break;
      case 5: { /* hand the buffer to another thread, take one of theirs */
        int i = rand_r(&rs) % XCHG;
        pthread_mutex_lock(&xchg_mu);
        slot t = xchg[i];
        xchg[i] = *x;
        *x = t;
        pthread_mutex_unlock(&xchg_mu);
        break;
      }
      case 6:
      case 7: { /* a download into the slot, read at once */
        size_t off = rand_r(&rs) % 2 ? 0 : (size_t)rand_r(&rs) % x->n;
        size_t len = off ? 1 + (size_t)rand_r(&rs) % (x->n - off) : x->n;
        unsigned ns = ++gen;
        /* the slot's new content: pat(ns) where copied, its old bytes elsewhere */
        for (size_t i = 0; i < len; i++) back[i] = pat(off + i, ns);
        CK(cudaMemcpyAsync(dev, back, len, cudaMemcpyHostToDevice, s));
        if (rand_r(&rs) % 2)
          CK(cudaMemcpyAsync(x->p + off, dev, len, cudaMemcpyDeviceToHost, s));
        else
          CK(cudaMemcpy(x->p + off, dev, len, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < len; i++)
          if (x->p[off + i] != pat(off + i, ns) && wrong++ == 0)
            fprintf(stderr,
                    "autopin: churn: a download's destination read on return is wrong at %zu\n",
                    off + i);
        atomic_fetch_add_explicit(&checked, len, memory_order_relaxed);
        CK(cudaStreamSynchronize(s));
        /* back to one seed for the whole slot */
        fill(x->p, x->n, 0, x->seed);
        churn_copies += 2;
        break;
      }
      default: { /* an upload, its source sometimes overwritten at once */
        size_t off = rand_r(&rs) % 2 ? 0 : (size_t)rand_r(&rs) % x->n;
        size_t len = off ? 1 + (size_t)rand_r(&rs) % (x->n - off) : x->n;
        if (fake() && fc.registered_bytes_in(x->p + off, len, NULL, NULL)) {
          churn_seen++;
          if (x->mapped) churn_seen_mapped++;
        }
        CK(cudaMemcpyAsync(dev, x->p + off, len, cudaMemcpyHostToDevice, s));
        int clobber = rand_r(&rs) % 4 == 0;
        if (clobber) memset(x->p + off, 0xEE, len);
        CK(cudaMemcpyAsync(back, dev, len, cudaMemcpyDeviceToHost, s));
        CK(cudaStreamSynchronize(s));
        wrong += (long)wrong_bytes("churn: upload", back, len, off, x->seed);
        if (clobber) fill(x->p + off, len, off, x->seed);
        churn_copies += 2;
        break;
      }
    }
    churn_ops++;
  }
  for (int i = 0; i < SLOTS; i++) {
    if (sl[i].p) wrong += slot_check("churn: a slot at the end", &sl[i], 0, sl[i].n);
    slot_release(&sl[i]);
  }
  free(back);
  CK(cudaStreamDestroy(s));
  CK(cudaFree(dev));
  churn_wrong += wrong;
  return NULL;
}

static void watchdog(int sig) {
  (void)sig;
  static const char msg[] = "autopin: watchdog fired: deadlock or hang\n";
  if (write(2, msg, sizeof msg - 1)) {}
  _exit(3);
}

static int cmd_churn(double secs, int threads, size_t max) {
  if (!(secs >= 0.01 && secs <= 3600) || threads < 1 || threads > 64 || max < 64 * 1024) {
    fprintf(stderr,
            "autopin: churn SECONDS THREADS [MAX] (SECONDS 0.01..3600, THREADS 1..64, "
            "MAX at least 64K)\n");
    return 2;
  }
  CHURN_MAX = max;
  signal(SIGALRM, watchdog);
  alarm((unsigned)secs + 60);
  pthread_t t[64];
  churn_arg a[64];
  for (int i = 0; i < threads; i++) {
    a[i].seed = 0x9E3779B9u * (unsigned)(i + 1);
    pthread_create(&t[i], NULL, churn_thread, &a[i]);
  }
  sleep_ms((int)(secs * 1000));
  atomic_store(&churn_stop, 1);
  for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < XCHG; i++) {
    if (xchg[i].p)
      churn_wrong += slot_check("churn: a handed-over slot at the end", &xchg[i], 0, xchg[i].n);
    slot_release(&xchg[i]);
  }
  alarm(0);
  char seen[48] = "unknown";
  if (fake())
    snprintf(seen, sizeof seen, "%ld mapped=%ld", (long)churn_seen, (long)churn_seen_mapped);
  printf(
      "churn: threads=%d ops=%ld copies=%ld wrong=%ld uploads_from_registered=%s "
      "bytes_checked=%llu pid=%d\n",
      threads, (long)churn_ops, (long)churn_copies, (long)churn_wrong, seen,
      (unsigned long long)atomic_load(&checked), (int)getpid());
  return churn_wrong != 0;
}

/* ---- releases where the thread may not wait --------------------------------- */

/* Whether any page of [p, p+n) is still mapped (mincore fails with ENOMEM
 * on an unmapped page). */
static int still_mapped(void *p, size_t n) {
  unsigned char v[64];
  for (size_t off = 0; off < n; off += 64 * PG) {
    size_t len = n - off < 64 * PG ? n - off : 64 * PG;
    for (size_t at = 0; at < len; at += PG)
      if (mincore((uint8_t *)p + off + at, PG, v) == 0) return 1;
  }
  return 0;
}

/* Wait up to 5 s for the shim's thread to finish a release handed to it:
 * nothing of [p, p+n) registered and, when `unmapped`, nothing mapped. */
static int settles(void *p, size_t n, int unmapped) {
  for (int i = 0; i < 5000; i++) {
    if (reg_bytes(p, n) == 0 && (!unmapped || !still_mapped(p, n))) return 1;
    sleep_ms(1);
  }
  return 0;
}

/* Whether the 8 bytes at p can be read, asked of the kernel without
 * touching them (async-signal-safe): rt_sigprocmask copies the new mask in
 * before it checks its other arguments, so EFAULT says unreadable. */
static int readable_now(const void *p) {
  int saved = errno;
  long r = syscall(SYS_rt_sigprocmask, -1L, p, (void *)0, (long)sizeof(uint64_t));
  int e = errno;
  errno = saved;
  return !(r == -1 && e == EFAULT);
}

typedef struct hf_job {
  const char *kind;
  uint8_t *p;
  size_t n;
  void *moved;         /* mremap's result */
  int rc, err;         /* err: mremap's errno */
  void *to, *moved_to; /* mremap_none: a fixed target, and the result */
  int err_to;
  int reads; /* 1: the released range still read right after the release */
} hf_job;

static void CUDART_CB hf_release(void *arg) {
  hf_job *j = arg;
  if (!strcmp(j->kind, "munmap")) {
    j->rc = munmap(j->p, j->n);
    j->reads = readable_now(j->p);
  } else if (!strcmp(j->kind, "madvise") || !strcmp(j->kind, "madvise_ro")) {
    j->rc = madvise(j->p + j->n / 4, j->n / 2, MADV_DONTNEED);
  } else if (!strcmp(j->kind, "mremap") || !strcmp(j->kind, "mremap_none")) {
    j->moved = mremap(j->p, j->n, 2 * j->n, MREMAP_MAYMOVE);
    j->rc = j->moved == MAP_FAILED ? -1 : 0;
    j->err = errno;
    /* Once more to a place of its choosing, which never tries in place. */
    if (j->to != NULL) {
      j->moved_to = mremap(j->p, j->n, 2 * j->n, MREMAP_MAYMOVE | MREMAP_FIXED, j->to);
      j->err_to = errno;
    }
    j->reads = j->moved != MAP_FAILED && j->moved != j->p && readable_now(j->p);
  } else {
    free(j->p);
    j->rc = 0;
  }
}

/* A host function (the driver refuses calls on its thread) releases a
 * buffer the shim has registered: the release must not reach the kernel
 * while the registration lives (the guard's check), must not hang, and
 * must be what the program asked for: unmapped memory faults, discarded
 * memory reads zero, moved memory keeps its bytes at the new address; and
 * the registration is undone, the old addresses freed, soon after. */
static int cmd_hostfn(const char *kind) {
  if (strcmp(kind, "munmap") && strcmp(kind, "madvise") && strcmp(kind, "madvise_ro") &&
      strcmp(kind, "mremap") && strcmp(kind, "mremap_none") && strcmp(kind, "free")) {
    fprintf(stderr,
            "autopin: hostfn KIND: KIND is one of munmap, madvise, madvise_ro, mremap, "
            "mremap_none, free\n");
    return 2;
  }
  const size_t n = 8 * MB;
  int heap = !strcmp(kind, "free");
  uint8_t *p =
      heap ? malloc(n) : mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  uint8_t *back = malloc(2 * n);
  if (p == NULL || p == MAP_FAILED || back == NULL) {
    perror("autopin: hostfn: allocation");
    return 1;
  }
  void *dev;
  cudaStream_t s;
  CK(cudaMalloc(&dev, 2 * n));
  CK(cudaStreamCreate(&s));
  fill(p, n, 0, 60);
  int bad = need_registered("the buffer", warm(p, n, dev, s));
  /* madvise_ro: the part discarded is read-only first, so that the shim's
   * zeroing of it (it cannot discard registered pages there) must not
   * fault. */
  int ro = !strcmp(kind, "madvise_ro");
  if (ro && mprotect(p + n / 4, n / 2, PROT_READ) != 0) perror("autopin: hostfn: mprotect");
  /* mremap_none: part of it inaccessible first, so that it is no longer
   * one mapping: the kernel refuses to move it (EFAULT), and so must the
   * shim's emulation, whose copy must not fault on that part. */
  int none = !strcmp(kind, "mremap_none");
  if (none && mprotect(p + n / 4, n / 2, PROT_NONE) != 0) perror("autopin: hostfn: mprotect");
  hf_job j = {.kind = kind, .p = p, .n = n, .rc = -2};
  if (none) j.to = mmap(NULL, 2 * n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CK(cudaLaunchHostFunc(s, hf_release, &j));
  CK(cudaStreamSynchronize(s));
  size_t wrong = 0;
  const char *what = "ok";
  if (j.rc != 0 && !none) {
    fprintf(stderr, "autopin: hostfn %s: the release failed (%d, errno %d)\n", kind, j.rc, errno);
    bad = 1;
  }
  if (none) {
    if (j.rc != -1 || j.err != EFAULT || j.moved_to != MAP_FAILED || j.err_to != EFAULT) {
      fprintf(stderr,
              "autopin: hostfn mremap_none: rc %d errno %d, to a fixed place %s errno %d, "
              "expected -1 and EFAULT both\n",
              j.rc, j.err, j.moved_to == MAP_FAILED ? "failed" : "moved", j.err_to);
      bad = 1;
    }
    if (j.to != MAP_FAILED) munmap(j.to, 2 * n);
    /* Nothing moved: the bytes are where they were, and uploads from them
     * still right. */
    mprotect(p + n / 4, n / 2, PROT_READ | PROT_WRITE);
    wrong += wrong_bytes("hostfn mremap_none: kept bytes", p, n / 4, 0, 60);
    wrong += wrong_bytes("hostfn mremap_none: kept bytes", p + 3 * n / 4, n / 4, 3 * n / 4, 60);
    fill(p, n, 0, 62);
    CK(cudaMemcpy(dev, p, n, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(back, dev, n, cudaMemcpyDeviceToHost));
    wrong += wrong_bytes("hostfn mremap_none: upload", back, n, 0, 62);
    munmap(p, n);
    what = "refused";
  } else if (!strcmp(kind, "munmap")) {
    /* Asked right after the munmap: by now a driver's own mapping may have
     * taken the addresses (the shim's thread unmapped them soon after). */
    if (j.reads) {
      fprintf(stderr, "autopin: hostfn munmap: the unmapped buffer still reads\n");
      bad = 1;
    }
    if (!settles(p, n, 1)) {
      fprintf(stderr, "autopin: hostfn munmap: still registered or mapped 5 s later\n");
      bad = 1;
    }
  } else if (ro) {
    /* Survived; the bytes around the discarded part are the program's. */
    wrong += wrong_bytes("hostfn madvise_ro: kept bytes", p, n / 4, 0, 60);
    wrong += wrong_bytes("hostfn madvise_ro: kept bytes", p + 3 * n / 4, n / 4, 3 * n / 4, 60);
    mprotect(p + n / 4, n / 2, PROT_READ | PROT_WRITE);
    munmap(p, n);
  } else if (!strcmp(kind, "madvise")) {
    for (size_t i = n / 4; i < n / 4 + n / 2; i++)
      if (p[i] != 0 && wrong++ == 0)
        fprintf(stderr, "autopin: hostfn madvise: discarded byte %zu is not zero\n", i);
    atomic_fetch_add(&checked, n / 2 + n);
    wrong += wrong_bytes("hostfn madvise: kept bytes", p, n / 4, 0, 60);
    wrong += wrong_bytes("hostfn madvise: kept bytes", p + 3 * n / 4, n / 4, 3 * n / 4, 60);
    /* The registration still names these very pages: an upload of all of
     * it delivers what the program now has. */
    CK(cudaMemcpy(dev, p, n, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(back, dev, n, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++)
      if (back[i] != p[i] && wrong++ == 0)
        fprintf(stderr, "autopin: hostfn madvise: uploaded byte %zu differs\n", i);
    munmap(p, n);
  } else if (!strcmp(kind, "mremap")) {
    uint8_t *q = j.moved;
    if (q != MAP_FAILED && q != NULL) {
      /* The old place is gone at once; it is unmapped later, and may be
       * mapped again by anyone by the time this looks. */
      if (q != p && (j.reads || !settles(p, n, 0))) {
        fprintf(stderr, "autopin: hostfn mremap: the old range still reads or stays registered\n");
        bad = 1;
      }
      wrong += wrong_bytes("hostfn mremap: moved bytes", q, n, 0, 60);
      fill(q, 2 * n, 0, 61);
      CK(cudaMemcpy(dev, q, 2 * n, cudaMemcpyHostToDevice));
      CK(cudaMemcpy(back, dev, 2 * n, cudaMemcpyDeviceToHost));
      wrong += wrong_bytes("hostfn mremap: upload from the new place", back, 2 * n, 0, 61);
      munmap(q, 2 * n);
      what = q == p ? "in place" : "moved";
    }
  } else if (!settles(p, n, 0)) {
    fprintf(stderr, "autopin: hostfn free: still registered 5 s later\n");
    bad = 1;
  }
  /* One release the guard sees (the shim's own unmaps are system calls),
   * so that a run shows it was watching. */
  void *scratch = mmap(NULL, PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (scratch != MAP_FAILED) munmap(scratch, PG);
  printf("hostfn: %s %s wrong=%zu%s bytes_checked=%llu pid=%d\n", kind, what, wrong, fake_word(),
         (unsigned long long)atomic_load(&checked), (int)getpid());
  free(back);
  CK(cudaStreamDestroy(s));
  CK(cudaFree(dev));
  return bad || wrong != 0;
}

static uint8_t *sig_victim; /* a registered mapping the handler unmaps once */
static size_t sig_victim_n;
static atomic_int sig_victim_reads = -1; /* 1: readable right after its munmap */

static atomic_long sig_runs, sig_failed;

static void sig_handler(int sig) {
  (void)sig;
  int saved = errno;
  long k = atomic_fetch_add(&sig_runs, 1);
  size_t n = 64 * 1024;
  uint8_t *m = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) {
    atomic_fetch_add(&sig_failed, 1);
  } else {
    m[0] = m[n - 1] = 1;
    if (k % 2) madvise(m, n, MADV_DONTNEED);
    if (munmap(m, n) != 0) atomic_fetch_add(&sig_failed, 1);
  }
  if (k == 2000 && sig_victim) {
    if (munmap(sig_victim, sig_victim_n) != 0) atomic_fetch_add(&sig_failed, 1);
    /* Gone for the program at once: asked here, before anything can map
     * those addresses again (a driver's own mapping did, later). */
    atomic_store(&sig_victim_reads, readable_now(sig_victim));
  }
  errno = saved;
}

static void *sig_watchdog(void *arg) {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, NULL);
  sleep_ms((int)(intptr_t)arg);
  static const char msg[] = "autopin: signal: watchdog fired: deadlock or hang\n";
  if (write(2, msg, sizeof msg - 1)) {}
  _exit(3);
}

/* A signal handler, 20,000 times a second, maps, touches, discards and
 * unmaps memory of its own, and once unmaps a buffer the shim registered,
 * while the main thread copies from and to registered buffers: the hooks
 * it runs must never wait on what the interrupted copy holds. */
static int cmd_signal(bool victim) {
  const size_t n = 2 * MB + 77;
  uint8_t *a = malloc(n), *back = malloc(n);
  void *dev;
  cudaStream_t s;
  CK(cudaMalloc(&dev, n));
  CK(cudaStreamCreate(&s));
  int bad = 0;
  if (victim) {
    sig_victim_n = 2 * MB;
    sig_victim =
        mmap(NULL, sig_victim_n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    fill(sig_victim, sig_victim_n, 0, 70);
    bad = need_registered("the victim", warm(sig_victim, sig_victim_n, dev, s));
  }
  fill(a, n, 0, 71);
  bad |= need_registered("the buffer", warm(a, n, dev, s));
  pthread_t w;
  pthread_create(&w, NULL, sig_watchdog, (void *)(intptr_t)60000);
  pthread_detach(w);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = sig_handler;
  sa.sa_flags = SA_RESTART;
  sigaction(SIGALRM, &sa, NULL);
  struct itimerval it = {{0, 50}, {0, 50}};
  setitimer(ITIMER_REAL, &it, NULL);
  size_t wrong = 0;
  int copies = 0;
  double until = now_s() + 2;
  for (unsigned r = 0; now_s() < until || atomic_load(&sig_runs) <= 2000; r++) {
    fill(a, n, 0, 72 + r % 100);
    CK(cudaMemcpyAsync(dev, a, n, cudaMemcpyHostToDevice, s));
    memset(a, 0xEE, n);
    CK(cudaMemcpyAsync(back, dev, n, cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    wrong += wrong_bytes("signal: upload then overwrite", back, n, 0, 72 + r % 100);
    CK(cudaMemcpy(a, dev, n, cudaMemcpyDeviceToHost));
    wrong += wrong_bytes("signal: download", a, n, 0, 72 + r % 100);
    copies += 3;
  }
  struct itimerval off = {{0, 0}, {0, 0}};
  setitimer(ITIMER_REAL, &off, NULL);
  if (victim && (atomic_load(&sig_victim_reads) != 0 || !settles(sig_victim, sig_victim_n, 0))) {
    fprintf(stderr, "autopin: signal: the buffer the handler unmapped is still there\n");
    bad = 1;
  }
  printf("signal: handler_runs=%ld failed=%ld copies=%d wrong=%zu%s bytes_checked=%llu pid=%d\n",
         (long)atomic_load(&sig_runs), (long)atomic_load(&sig_failed), copies, wrong, fake_word(),
         (unsigned long long)atomic_load(&checked), (int)getpid());
  free(a);
  free(back);
  CK(cudaStreamDestroy(s));
  CK(cudaFree(dev));
  return bad || wrong != 0 || atomic_load(&sig_failed) != 0;
}

/* ---- stale (the guard's own test) ------------------------------------------ */

/* Page-lock the interior of a buffer, then release it by KIND without
 * unregistering: under libpl_reg_guard.so the release must not happen (the
 * guard exits 86 first); stdout says what the guard should report. */
static int cmd_stale(const char *kind) {
  const size_t n = 64 * PG;
  int ok = !strcmp(kind, "ok");
  if (strcmp(kind, "free") && strcmp(kind, "realloc") && strcmp(kind, "munmap") &&
      strcmp(kind, "mremap") && strcmp(kind, "madvise") && strcmp(kind, "sbrk") &&
      strcmp(kind, "brk") && !ok) {
    fprintf(
        stderr,
        "autopin: stale KIND: KIND is one of free, realloc, munmap, mremap, madvise, sbrk, brk, ok\n");
    return 2;
  }
  uint8_t *p;
  size_t span; /* what the release covers, as the guard computes it */
  int heap = !strcmp(kind, "free") || !strcmp(kind, "realloc") || ok;
  int brk_ = !strcmp(kind, "sbrk") || !strcmp(kind, "brk");
  if (heap) {
    p = malloc(n);
    span = malloc_usable_size(p);
  } else if (brk_) {
    p = sbrk((intptr_t)(n + PG));
    if (p == (void *)-1) {
      perror("autopin: sbrk");
      return 1;
    }
    span = n + PG;
  } else {
    p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      perror("autopin: mmap");
      return 1;
    }
    span = n;
  }
  uint8_t *in = (uint8_t *)(((uintptr_t)p + PG - 1) / PG * PG) + PG;
  size_t len = 8 * PG;
  memset(p, 1, heap ? n : span);
  CK(cudaHostRegister(in, len, cudaHostRegisterDefault));
  if (ok) {
    CK(cudaHostUnregister(in));
    free(p);
    printf("stale: ok: released after unregistering pid=%d\n", (int)getpid());
    return 0;
  }
  /* what the guard prints, then the release it must stop */
  const char *call = kind;
  uintptr_t from = (uintptr_t)p;
  if (brk_) span = (uintptr_t)sbrk(0) - from; /* the runtime may have moved the break since */
  if (!strcmp(kind, "madvise")) {
    from = (uintptr_t)in + PG; /* a part in the middle */
    span = PG;
  }
  printf("stale: %s of [%#lx, %#lx) while [%#lx, %#lx) is registered\n", call, (unsigned long)from,
         (unsigned long)(from + span), (unsigned long)in, (unsigned long)(in + len));
  fflush(stdout);
  if (!strcmp(kind, "free"))
    free(p);
  else if (!strcmp(kind, "realloc"))
    p = realloc(p, 2 * n);
  else if (!strcmp(kind, "munmap"))
    munmap(p, n);
  else if (!strcmp(kind, "mremap"))
    p = mremap(p, n, 2 * n, MREMAP_MAYMOVE);
  else if (!strcmp(kind, "madvise"))
    madvise((void *)from, PG, MADV_DONTNEED);
  else if (!strcmp(kind, "sbrk"))
    sbrk(-(intptr_t)span);
  else
    brk(p);
  printf("stale: %s went through\n", kind);
  return 0;
}

int main(int argc, char **argv) {
  const char *cmd = argc > 1 ? argv[1] : "";
  static const char usage[] =
      "usage: autopin churn SECONDS THREADS [MAX] | overwrite | readback | neighbours | reuse | budget |"
      " queries | fail | capture | fork | tail | hostfn KIND | signal [heap] | stale KIND\n";
  if (!strcmp(cmd, "churn") && argc != 4 && argc != 5) {
    fputs(usage, stderr);
    return 2;
  }
  if (((!strcmp(cmd, "stale") || !strcmp(cmd, "hostfn")) && argc != 3) ||
      (!strcmp(cmd, "signal") && argc > 2 && (argc > 3 || strcmp(argv[2], "heap")))) {
    fputs(usage, stderr);
    return 2;
  }
  static const char *const known[] = {"churn",  "overwrite", "readback", "neighbours", "reuse",
                                      "budget", "queries",   "fail",     "capture",    "fork",
                                      "tail",   "stale",     "hostfn",   "signal"};
  int found = 0;
  for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) found |= !strcmp(cmd, known[i]);
  if (!found) {
    fprintf(stderr, "autopin: unknown subcommand '%s'\n", cmd);
    fputs(usage, stderr);
    return 2;
  }
  setup();
  if (!strcmp(cmd, "churn"))
    return cmd_churn(atof(argv[2]), atoi(argv[3]),
                     argc > 4 ? (size_t)parse_size(argv[4]) : 768 * 1024);
  if (!strcmp(cmd, "hostfn")) return cmd_hostfn(argv[2]);
  if (!strcmp(cmd, "signal")) return cmd_signal(argc == 2);
  if (!strcmp(cmd, "overwrite")) return cmd_overwrite();
  if (!strcmp(cmd, "readback")) return cmd_readback();
  if (!strcmp(cmd, "neighbours")) return cmd_neighbours();
  if (!strcmp(cmd, "reuse")) return cmd_reuse();
  if (!strcmp(cmd, "budget")) return cmd_budget();
  if (!strcmp(cmd, "queries")) return cmd_queries();
  if (!strcmp(cmd, "fail")) return cmd_fail();
  if (!strcmp(cmd, "capture")) return cmd_capture();
  if (!strcmp(cmd, "fork")) return cmd_fork();
  if (!strcmp(cmd, "tail")) return cmd_tail();
  return cmd_stale(argv[2]);
}
