/* repeats.c - programs of repeated small copies, for the runs of repeated
 * copies (docs/design.md, "Runs of repeated copies"; shim/record/run.c).
 *
 * Each scenario makes copies the shim counts into runs (the same call, the
 * same pointers, size and stream, again and again on one thread) and
 * breaks those runs every way a program can: many threads (more than the
 * shim's rings), threads that end mid-loop or are reused, fork, buffers
 * freed and reallocated or page-locked midway, contexts switched behind
 * the default stream, more distinct copies than a thread's run slots,
 * failures inside a run, idle periods the writer's drain falls into.
 *
 * The program tallies every copy call it made by what the trace must say
 * of it (direction, host memory kind, device, success, bytes) and writes
 * the tally to $RP_OUT/expect.<pid> (a forked child writes its own), with
 * the CLOCK_MONOTONIC time before its first copy and after its last.
 * repeats_check compares a trace with it exactly (tests/preload/repeats.sh).
 *
 * usage: repeats SCENARIO [ARGS...]   (see main) */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#define CHECK(x)                                                                 \
  do {                                                                           \
    cudaError_t e_ = (x);                                                        \
    if (e_ != cudaSuccess) {                                                     \
      fprintf(stderr, "repeats: %s:%d: %s failed: %s\n", __FILE__, __LINE__, #x, \
              cudaGetErrorString(e_));                                           \
      exit(2);                                                                   \
    }                                                                            \
  } while (0)

enum { H2D = 1, D2H = 2, D2D = 3 };
enum { PAGEABLE = 1, PINNED = 2, REGISTERED = 3 };
static const char *const dir_names[] = {"?", "H2D", "D2H", "D2D"};
static const char *const mem_names[] = {"unknown",    "pageable", "pinned",
                                        "registered", "managed",  "device"};

/* ---- the tally ----------------------------------------------------------- */

/* One line of the expectation: copies of one kind.  mem and dev -1: any
 * (a failed copy's classification is the shim's business). */
typedef struct tally_row {
  int dir, mem, dev, ok;
  size_t bytes;
  unsigned long n;
} tally_row;
#define MAX_ROWS 4096
static tally_row rows[MAX_ROWS];
static int nrows;
static pthread_mutex_t tally_mu = PTHREAD_MUTEX_INITIALIZER;
static _Atomic uint64_t first_ns, last_ns;

static uint64_t mono_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* The kernel's ids of the threads that copied: every record names one. */
#define MAX_TIDS 2048
static int tids[MAX_TIDS], ntids;
static __thread int tid_listed;

static void tally(int dir, int mem, int dev, int ok, size_t bytes) {
  if (!ok) mem = dev = -1;
  pthread_mutex_lock(&tally_mu);
  if (!tid_listed && ntids < MAX_TIDS) {
    tids[ntids++] = (int)syscall(SYS_gettid);
    tid_listed = 1;
  }
  int i;
  for (i = 0; i < nrows; i++)
    if (rows[i].dir == dir && rows[i].mem == mem && rows[i].dev == dev && rows[i].ok == ok &&
        rows[i].bytes == bytes)
      break;
  if (i == nrows) {
    if (nrows == MAX_ROWS) {
      fprintf(stderr, "repeats: tally full\n");
      abort();
    }
    rows[nrows++] = (tally_row){dir, mem, dev, ok, bytes, 0};
  }
  rows[i].n++;
  pthread_mutex_unlock(&tally_mu);
}

/* Before a copy: the program's first copy time. */
static void before(void) {
  uint64_t z = 0, t = mono_ns();
  atomic_compare_exchange_strong(&first_ns, &z, t);
}
static void after(void) {
  uint64_t t = mono_ns(), l = atomic_load(&last_ns);
  while (t > l && !atomic_compare_exchange_weak(&last_ns, &l, t)) {}
}

/* Written with write(2) only: a child that leaves with _exit has no stdio
 * to flush. */
static void write_expect(void) {
  const char *dir = getenv("RP_OUT");
  if (dir == NULL) dir = ".";
  char path[4096], line[256];
  snprintf(path, sizeof path, "%s/expect.%d", dir, (int)getpid());
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) {
    perror(path);
    _exit(3);
  }
  pthread_mutex_lock(&tally_mu);
  int n = snprintf(line, sizeof line, "t0 %llu\nt1 %llu\n", (unsigned long long)first_ns,
                   (unsigned long long)last_ns);
  if (write(fd, line, (size_t)n) != n) _exit(3);
  for (int i = 0; i < ntids; i++) {
    n = snprintf(line, sizeof line, "tid %d\n", tids[i]);
    if (write(fd, line, (size_t)n) != n) _exit(3);
  }
  for (int i = 0; i < nrows; i++) {
    const tally_row *r = &rows[i];
    if (r->mem < 0)
      n = snprintf(line, sizeof line, "copy %s * * %d %zu %lu\n", dir_names[r->dir], r->ok,
                   r->bytes, r->n);
    else
      n = snprintf(line, sizeof line, "copy %s %s %d %d %zu %lu\n", dir_names[r->dir],
                   mem_names[r->mem], r->dev, r->ok, r->bytes, r->n);
    if (write(fd, line, (size_t)n) != n) _exit(3);
  }
  pthread_mutex_unlock(&tally_mu);
  close(fd);
}

/* ---- copies, each tallied by what it returned ---------------------------- */

static int cur_dev(void) {
  int d = -1;
  if (cudaGetDevice(&d) != cudaSuccess) return -1;
  return d;
}

/* One call site each (the run's key holds the return address): a loop
 * around up() repeats one copy. */
static __attribute__((noinline)) int up(void *d, const void *h, size_t n, int mem, int dev) {
  before();
  cudaError_t e = cudaMemcpy(d, h, n, cudaMemcpyHostToDevice);
  after();
  tally(H2D, mem, dev, e == cudaSuccess, n);
  return e;
}
static __attribute__((noinline)) int down(void *h, const void *d, size_t n, int mem, int dev) {
  before();
  cudaError_t e = cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost);
  after();
  tally(D2H, mem, dev, e == cudaSuccess, n);
  return e;
}
static __attribute__((noinline)) int up_async(void *d, const void *h, size_t n, cudaStream_t s,
                                              int mem, int dev) {
  before();
  cudaError_t e = cudaMemcpyAsync(d, h, n, cudaMemcpyHostToDevice, s);
  after();
  tally(H2D, mem, dev, e == cudaSuccess, n);
  return e;
}
static __attribute__((noinline)) int down_async(void *h, const void *d, size_t n, cudaStream_t s,
                                                int mem, int dev) {
  before();
  cudaError_t e = cudaMemcpyAsync(h, d, n, cudaMemcpyDeviceToHost, s);
  after();
  tally(D2H, mem, dev, e == cudaSuccess, n);
  return e;
}
static __attribute__((noinline)) int d2d(void *d, const void *s, size_t n, int dev) {
  before();
  cudaError_t e = cudaMemcpy(d, s, n, cudaMemcpyDeviceToDevice);
  after();
  tally(D2D, 0 /* no host side */, dev, e == cudaSuccess, n);
  return e;
}

/* The driver's entry points: in a forked child the runtime fails before it
 * calls the driver, the driver's own calls reach the shim and fail. */
static __attribute__((noinline)) int up_drv(void *d, const void *h, size_t n, int mem, int dev) {
  before();
  CUresult e = cuMemcpyHtoD((CUdeviceptr)(uintptr_t)d, h, n);
  after();
  tally(H2D, mem, dev, e == CUDA_SUCCESS, n);
  return e;
}
static __attribute__((noinline)) int down_drv(void *h, const void *d, size_t n, int mem, int dev) {
  before();
  CUresult e = cuMemcpyDtoH(h, (CUdeviceptr)(uintptr_t)d, n);
  after();
  tally(D2H, mem, dev, e == CUDA_SUCCESS, n);
  return e;
}

static void *dev_alloc(size_t n) {
  void *d;
  CHECK(cudaMalloc(&d, n));
  return d;
}

/* ---- scenarios ----------------------------------------------------------- */

/* threads N ITERS: N threads at once (more than the shim's 256 rings: the
 * rest write each copy on its own), each looping an upload and a download
 * of its own size; every third ends mid-loop.  Then a pool of 4 threads
 * taking 96 tasks, each a loop of its own; then 40 threads one after the
 * other from one call path (glibc hands the next the same stack). */
static int nthreads, iters;
static pthread_barrier_t start_bar;
static atomic_int failed_setup;

static void *thread_loop(void *arg) {
  int id = (int)(intptr_t)arg;
  size_t n = 64 + (size_t)id * 8;
  int pinned = id % 2;
  unsigned char *h;
  if (pinned) {
    if (cudaMallocHost((void **)&h, n) != cudaSuccess) failed_setup++;
  } else {
    h = malloc(n);
  }
  void *d = NULL;
  if (cudaMalloc(&d, n) != cudaSuccess) failed_setup++;
  memset(h, id, n);
  int mem = pinned ? PINNED : PAGEABLE;
  int dev = cur_dev();
  pthread_barrier_wait(&start_bar);
  int stop_at = id % 3 == 0 ? id % iters : iters;
  for (int i = 0; i < iters; i++) {
    if (i == stop_at) return NULL; /* ends mid-loop, its runs open */
    up(d, h, n, mem, dev);
    down(h, d, n, mem, dev);
  }
  return NULL;
}

typedef struct task_q {
  pthread_mutex_t mu;
  int next, total;
} task_q;
static task_q tq = {PTHREAD_MUTEX_INITIALIZER, 0, 96};
static unsigned char *pool_h[4];
static void *pool_d;

static void *pool_worker(void *arg) {
  (void)arg;
  int dev = cur_dev();
  for (;;) {
    pthread_mutex_lock(&tq.mu);
    int t = tq.next < tq.total ? tq.next++ : -1;
    pthread_mutex_unlock(&tq.mu);
    if (t < 0) return NULL;
    /* Tasks share buffers and sizes: a task repeats what another task
     * did on this thread just before, or on another. */
    unsigned char *h = pool_h[t % 4];
    size_t n = 1000 + (size_t)(t % 3) * 24;
    for (int i = 0; i < 10 + t % 7; i++) {
      up(pool_d, h, n, PAGEABLE, dev);
      if (i % 4 == 3) down(h, pool_d, n, PAGEABLE, dev);
    }
  }
}

static unsigned char *serial_h;
static void *serial_d;
static void *serial_one(void *arg) {
  int k = (int)(intptr_t)arg;
  int dev = cur_dev();
  for (int i = 0; i < 5 + k % 11; i++) up(serial_d, serial_h, 2048, PAGEABLE, dev);
  return NULL;
}

static int scen_threads(int argc, char **argv) {
  nthreads = argc > 0 ? atoi(argv[0]) : 300;
  iters = argc > 1 ? atoi(argv[1]) : 20;
  CHECK(cudaFree(0));
  pthread_t *t = calloc((size_t)nthreads, sizeof *t);
  pthread_barrier_init(&start_bar, NULL, (unsigned)nthreads);
  pthread_attr_t a;
  pthread_attr_init(&a);
  pthread_attr_setstacksize(&a, 256u << 10);
  for (int i = 0; i < nthreads; i++)
    if (pthread_create(&t[i], &a, thread_loop, (void *)(intptr_t)i) != 0) {
      fprintf(stderr, "repeats: pthread_create %d failed\n", i);
      return 2;
    }
  for (int i = 0; i < nthreads; i++) pthread_join(t[i], NULL);
  pthread_barrier_destroy(&start_bar);
  if (failed_setup) {
    fprintf(stderr, "repeats: %d allocations failed\n", (int)failed_setup);
    return 2;
  }
  /* The pool. */
  for (int i = 0; i < 4; i++) pool_h[i] = calloc(1, 4096);
  pool_d = dev_alloc(4096);
  pthread_t p[4];
  for (int i = 0; i < 4; i++) pthread_create(&p[i], NULL, pool_worker, NULL);
  for (int i = 0; i < 4; i++) pthread_join(p[i], NULL);
  /* One thread after another, from one call path. */
  serial_h = calloc(1, 2048);
  serial_d = dev_alloc(2048);
  for (int k = 0; k < 40; k++) {
    pthread_t s;
    pthread_create(&s, NULL, serial_one, (void *)(intptr_t)k);
    pthread_join(s, NULL);
  }
  return 0;
}

/* fork EXIT|_EXIT: the main thread and a helper loop repeated copies; the
 * main thread forks in the middle of its loop and the child goes on with
 * the very same loop (same call, same pointers: in the child every call
 * fails, as CUDA in a forked child does), then leaves with exit() or, after
 * a pause the writer drains in, with _exit().  The parent goes on and
 * forks a second child the same way from the helper's ring's neighbour. */
static atomic_int helper_go, helper_stop;
static unsigned char *fk_h;
static void *fk_d;
static void *fork_helper(void *arg) {
  (void)arg;
  unsigned char *h = malloc(512);
  void *d = dev_alloc(512);
  int dev = cur_dev();
  atomic_store(&helper_go, 1);
  for (int i = 0; i < 200 && !atomic_load(&helper_stop); i++) up(d, h, 512, PAGEABLE, dev);
  return NULL;
}

static int scen_fork(int argc, char **argv) {
  int use_exit = argc > 0 && strcmp(argv[0], "exit") == 0;
  fk_h = calloc(1, 4096);
  fk_d = dev_alloc(4096);
  int dev = cur_dev();
  pthread_t th;
  pthread_create(&th, NULL, fork_helper, NULL);
  while (!atomic_load(&helper_go)) usleep(100);
  pid_t kids[2];
  int nk = 0;
  for (int i = 0; i < 90; i++) {
    up_drv(fk_d, fk_h, 3000, PAGEABLE, dev);
    down_drv(fk_h, fk_d, 700, PAGEABLE, dev);
    if (i == 30 || i == 60) {
      fflush(stdout);
      pid_t pid = fork();
      if (pid < 0) {
        perror("fork");
        return 2;
      }
      if (pid == 0) {
        /* The child: its tally starts empty, and every call it makes
         * fails; it runs the rest of the loop, the same calls. */
        pthread_mutex_init(&tally_mu, NULL);
        nrows = ntids = tid_listed = 0;
        first_ns = last_ns = 0;
        for (int k = i + 1; k < i + 25; k++) {
          up_drv(fk_d, fk_h, 3000, PAGEABLE, dev);
          down_drv(fk_h, fk_d, 700, PAGEABLE, dev);
        }
        write_expect();
        if (use_exit) exit(0);
        usleep(2200 * 1000); /* the child's writer drains its ring */
        _exit(0);
      }
      kids[nk++] = pid;
    }
  }
  atomic_store(&helper_stop, 1);
  pthread_join(th, NULL);
  int bad = 0;
  for (int k = 0; k < nk; k++) {
    int st;
    if (waitpid(kids[k], &st, 0) != kids[k] || !WIFEXITED(st) || WEXITSTATUS(st) != 0) bad = 1;
  }
  if (bad) fprintf(stderr, "repeats: a child failed\n");
  return bad;
}

/* memswap: the buffer behind a loop changes between iterations at the
 * same address (freed and allocated again, small and tracked), or changes
 * kind (registered, unregistered) in the middle of a loop, by the looping
 * thread and by another one while it waits. */
static pthread_mutex_t sw_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t sw_cv = PTHREAD_COND_INITIALIZER;
static int sw_step;
static unsigned char *sw_buf;
static void sw_wait(int step) {
  pthread_mutex_lock(&sw_mu);
  while (sw_step < step) pthread_cond_wait(&sw_cv, &sw_mu);
  pthread_mutex_unlock(&sw_mu);
}
static void sw_set(int step) {
  pthread_mutex_lock(&sw_mu);
  sw_step = step;
  pthread_cond_broadcast(&sw_cv);
  pthread_mutex_unlock(&sw_mu);
}
static void *sw_registrar(void *arg) {
  (void)arg;
  sw_wait(1);
  CHECK(cudaHostRegister(sw_buf, 65536, cudaHostRegisterDefault));
  sw_set(2);
  sw_wait(3);
  CHECK(cudaHostUnregister(sw_buf));
  sw_set(4);
  return NULL;
}

static int scen_memswap(int argc, char **argv) {
  (void)argc;
  (void)argv;
  int dev = cur_dev();
  void *d = dev_alloc(1 << 20);
  int same = 0;
  /* Small blocks (not tracked), freed and allocated again each round. */
  void *prev = NULL;
  for (int i = 0; i < 40; i++) {
    unsigned char *h = malloc(3000);
    memset(h, i, 3000);
    if (h == prev) same++;
    up(d, h, 3000, PAGEABLE, dev);
    down(h, d, 3000, PAGEABLE, dev);
    prev = h;
    free(h);
  }
  /* Tracked blocks (at least PAGELOCK_TRACK_MIN, 64K), below the 256 KiB
   * a run takes. */
  prev = NULL;
  for (int i = 0; i < 40; i++) {
    unsigned char *h = malloc(100000);
    memset(h, i, 100000);
    if (h == prev) same++;
    up(d, h, 100000, PAGEABLE, dev);
    down(h, d, 100000, PAGEABLE, dev);
    prev = h;
    free(h);
  }
  /* Registered in the middle of the loop, then unregistered, by this
   * thread: the kind changes at exactly that copy. */
  unsigned char *r = aligned_alloc(4096, 65536);
  memset(r, 1, 65536);
  for (int i = 0; i < 90; i++) {
    if (i == 30) CHECK(cudaHostRegister(r, 65536, cudaHostRegisterDefault));
    if (i == 60) CHECK(cudaHostUnregister(r));
    int mem = i >= 30 && i < 60 ? REGISTERED : PAGEABLE;
    up(d, r, 4096, mem, dev);
    down(r, d, 4096, mem, dev);
  }
  /* A small block inside a page of its own, registered and unregistered
   * every 7 copies. */
  unsigned char *s = aligned_alloc(4096, 4096);
  for (int i = 0; i < 70; i++) {
    int k = i / 7;
    if (i % 7 == 0 && k % 2 == 1) CHECK(cudaHostRegister(s, 4096, cudaHostRegisterDefault));
    if (i % 7 == 0 && k % 2 == 0 && k > 0) CHECK(cudaHostUnregister(s));
    up(d, s, 100, k % 2 ? REGISTERED : PAGEABLE, dev);
  }
  if ((70 / 7 - 1) % 2 == 1) CHECK(cudaHostUnregister(s));
  /* By another thread, while this one waits between two copies. */
  sw_buf = aligned_alloc(4096, 65536);
  memset(sw_buf, 2, 65536);
  pthread_t th;
  pthread_create(&th, NULL, sw_registrar, NULL);
  for (int i = 0; i < 90; i++) {
    if (i == 30) {
      sw_set(1);
      sw_wait(2);
    }
    if (i == 60) {
      sw_set(3);
      sw_wait(4);
    }
    int mem = i >= 30 && i < 60 ? REGISTERED : PAGEABLE;
    up(d, sw_buf, 512, mem, dev);
  }
  pthread_join(th, NULL);
  /* Pinned by cudaMallocHost, freed, and the same size malloc'd: a new
   * buffer of another kind, maybe at the same address. */
  for (int round = 0; round < 3; round++) {
    unsigned char *p;
    CHECK(cudaMallocHost((void **)&p, 8192));
    for (int i = 0; i < 20; i++) up(d, p, 8192, PINNED, dev);
    CHECK(cudaFreeHost(p));
    unsigned char *q = malloc(8192);
    if (q == p) same++;
    for (int i = 0; i < 20; i++) up(d, q, 8192, PAGEABLE, dev);
    free(q);
  }
  /* An anonymous mapping replaced at the same address by one the driver
   * page-locks (cudaHostRegister), and back. */
  unsigned char *m = mmap(NULL, 65536, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  for (int round = 0; round < 4; round++) {
    void *again =
        mmap(m, 65536, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (again != m) return 2;
    if (round % 2) CHECK(cudaHostRegister(m, 65536, cudaHostRegisterDefault));
    for (int i = 0; i < 20; i++) down(m, d, 30000, round % 2 ? REGISTERED : PAGEABLE, dev);
    if (round % 2) CHECK(cudaHostUnregister(m));
  }
  munmap(m, 65536);
  printf("same_address=%d\n", same);
  return 0;
}

/* ctx: the legacy and per-thread default streams, the device switched
 * between iterations (cudaSetDevice; FAKECUDA_DEVICES=2), and contexts
 * switched with cuCtxSetCurrent: every copy names the device current when
 * it was made. */
static int scen_ctx(int argc, char **argv) {
  (void)argc;
  (void)argv;
  int ndev = 0;
  CHECK(cudaGetDeviceCount(&ndev));
  if (ndev < 2) {
    printf("skipped=1\n");
    return 0;
  }
  unsigned char *h = calloc(1, 8192);
  unsigned char *pin;
  CHECK(cudaSetDevice(0));
  CHECK(cudaMallocHost((void **)&pin, 8192));
  void *d[2];
  for (int k = 0; k < 2; k++) {
    CHECK(cudaSetDevice(k));
    d[k] = dev_alloc(8192);
  }
  /* The same copy, to device 0's memory, while device 0 or 1 is current:
   * a driver with unified addressing copies it whatever is current, and
   * the shim names the current device. */
  int ok_cross = 1;
  for (int i = 0; i < 80; i++) {
    int k = (i / 5) % 2;
    CHECK(cudaSetDevice(k));
    if (up(d[0], h, 1500, PAGEABLE, k) != cudaSuccess) ok_cross = 0;
    if (down_async(pin, d[0], 1500, cudaStreamPerThread, PINNED, k) != cudaSuccess) ok_cross = 0;
    CHECK(cudaStreamSynchronize(cudaStreamPerThread));
  }
  /* Each device's own memory, switching every iteration. */
  for (int i = 0; i < 60; i++) {
    int k = i % 2;
    CHECK(cudaSetDevice(k));
    up(d[k], h, 1500, PAGEABLE, k);
  }
  /* Driver contexts of the two devices' primary contexts, switched with
   * cuCtxSetCurrent every 3 copies. */
  CUcontext c[2];
  for (int k = 0; k < 2; k++) {
    CUdevice dv;
    if (cuDeviceGet(&dv, k) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&c[k], dv) != CUDA_SUCCESS)
      return 2;
  }
  for (int i = 0; i < 60; i++) {
    int k = (i / 3) % 2;
    if (cuCtxSetCurrent(c[k]) != CUDA_SUCCESS) return 2;
    before();
    CUresult r = cuMemcpyHtoD((CUdeviceptr)(uintptr_t)d[k], h, 900);
    after();
    tally(H2D, PAGEABLE, k, r == CUDA_SUCCESS, 900);
  }
  printf("cross_device_ok=%d\n", ok_cross);
  return 0;
}

/* slots: more distinct repeated copies than a thread keeps runs for (4),
 * round robin and in bursts, uploads and downloads, pinned and pageable,
 * sync and async, device to device. */
static int scen_slots(int argc, char **argv) {
  (void)argc;
  (void)argv;
  int dev = cur_dev();
  enum { K = 7 };
  unsigned char *h[K];
  void *d = dev_alloc(1 << 20), *d2 = dev_alloc(1 << 20);
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  for (int k = 0; k < K; k++) {
    if (k % 3 == 2)
      CHECK(cudaMallocHost((void **)&h[k], 4096));
    else
      h[k] = calloc(1, 4096);
  }
#define MEMK(k) ((k) % 3 == 2 ? PINNED : PAGEABLE)
  /* Round robin over 5, 6, 7 distinct copies. */
  for (int width = 5; width <= K; width++)
    for (int round = 0; round < 30; round++)
      for (int k = 0; k < width; k++) {
        size_t n = 100 + (size_t)k;
        if (k % 2)
          down(h[k], d, n, MEMK(k), dev);
        else
          up(d, h[k], n, MEMK(k), dev);
      }
  /* Bursts: 3 hot copies repeated, 4 cold ones now and then. */
  for (int round = 0; round < 40; round++) {
    for (int j = 0; j < 5; j++) {
      up_async(d, h[0], 256, s, PAGEABLE, dev);
      down_async(h[1], d, 256, s, PAGEABLE, dev);
      up_async(d, h[2], 256, s, PINNED, dev);
    }
    int k = 3 + round % 4;
    down(h[k], d, 77, MEMK(k), dev);
    d2d(d2, d, 4096, dev);
  }
  CHECK(cudaStreamSynchronize(s));
  /* Sizes around the run's limit, 256 KiB, and an empty copy. */
  unsigned char *big = calloc(1, (256u << 10) + 64);
  void *dbig = dev_alloc((256u << 10) + 64);
  static const size_t sizes[] = {0, 1, 256u << 10, (256u << 10) + 1};
  for (int z = 0; z < 4; z++)
    for (int i = 0; i < 70; i++) up(dbig, big, sizes[z], PAGEABLE, dev);
  /* Exactly 64, 65, 128 and 129 repeats, each then broken by another copy. */
  static const int lens[] = {64, 65, 128, 129, 63};
  for (int l = 0; l < 5; l++) {
    for (int i = 0; i < lens[l]; i++) up(d, h[0], 333, PAGEABLE, dev);
    down(h[0], d, 333, PAGEABLE, dev);
  }
  return 0;
}

/* fail: calls that fail in the middle of a run (an injected driver error,
 * where the fake driver is loaded) and a bad device pointer in between. */
static int scen_fail(int argc, char **argv) {
  (void)argc;
  (void)argv;
  int dev = cur_dev();
  unsigned char *h = calloc(1, 4096);
  unsigned char *p;
  CHECK(cudaMallocHost((void **)&p, 4096));
  void *d = dev_alloc(4096);
  void *lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  int (*fail)(const char *, int, int) =
      lib ? (int (*)(const char *, int, int))dlsym(lib, "fakecuda_fail") : NULL;
  int injected = 0;
  for (int round = 0; round < 6; round++) {
    if (fail) {
      /* The 20th upload and the 33rd download from now fail. */
      injected += fail("cuMemcpyHtoD_v2", 20, CUDA_ERROR_LAUNCH_FAILED) == 0;
      injected += fail("cuMemcpyDtoH_v2", 33, CUDA_ERROR_ILLEGAL_ADDRESS) == 0;
    }
    unsigned char *hh = round % 2 ? p : h;
    int mem = round % 2 ? PINNED : PAGEABLE;
    for (int i = 0; i < 50; i++) {
      up(d, hh, 1024, mem, dev);
      down(hh, d, 1024, mem, dev);
      /* Past the end of the device allocation: refused, without copying. */
      if (i == 25) up((char *)d + 4000, hh, 1024, mem, dev);
    }
  }
  /* Failures on every call for a while (nth 0), in the middle of a run. */
  if (fail) {
    for (int i = 0; i < 30; i++) up(d, h, 2000, PAGEABLE, dev);
    fail("cuMemcpyHtoD_v2", 0, CUDA_ERROR_OUT_OF_MEMORY);
    for (int i = 0; i < 10; i++) up(d, h, 2000, PAGEABLE, dev);
    fail("cuMemcpyHtoD_v2", 0, 0);
    for (int i = 0; i < 30; i++) up(d, h, 2000, PAGEABLE, dev);
  }
  printf("injected=%d\n", injected);
  return 0;
}

/* idle: loops of repeated copies with idle periods longer than the
 * writer's one-second drain between them, and a loop that copies through
 * a drain; a second thread that ends while its run is drained. */
static void *idle_thread(void *arg) {
  (void)arg;
  unsigned char *h = calloc(1, 1024);
  void *d = dev_alloc(1024);
  int dev = cur_dev();
  for (int i = 0; i < 10; i++) up(d, h, 1024, PAGEABLE, dev);
  usleep(1200 * 1000);
  for (int i = 0; i < 10; i++) up(d, h, 1024, PAGEABLE, dev);
  return NULL;
}

static int scen_idle(int argc, char **argv) {
  int secs = argc > 0 ? atoi(argv[0]) : 1;
  int dev = cur_dev();
  unsigned char *h = calloc(1, 4096);
  void *d = dev_alloc(4096);
  pthread_t th;
  pthread_create(&th, NULL, idle_thread, NULL);
  for (int i = 0; i < 30; i++) {
    up(d, h, 2222, PAGEABLE, dev);
    down(h, d, 1111, PAGEABLE, dev);
  }
  usleep(1300 * 1000);
  for (int i = 0; i < 30; i++) {
    up(d, h, 2222, PAGEABLE, dev);
    down(h, d, 1111, PAGEABLE, dev);
  }
  /* Copying through the writer's drain. */
  uint64_t until = mono_ns() + (uint64_t)secs * 1100000000u;
  while (mono_ns() < until) up(d, h, 2222, PAGEABLE, dev);
  usleep(1100 * 1000);
  for (int i = 0; i < 5; i++) up(d, h, 2222, PAGEABLE, dev);
  pthread_join(th, NULL);
  return 0;
}

/* exits: the ways a thread or the process ends with runs open: a thread
 * that leaves with the raw exit system call (no thread-exit handlers), a
 * thread that calls pthread_exit, copies in an atexit handler, and the
 * main thread leaving by pthread_exit while a last thread still copies. */
static unsigned char *ex_h;
static void *ex_d;
static int ex_dev;
static void *raw_exit_thread(void *arg) {
  (void)arg;
  for (int i = 0; i < 30; i++) up(ex_d, ex_h, 640, PAGEABLE, ex_dev);
  /* Leaves without thread-specific destructors: the ring stays owned. */
  syscall(SYS_exit, 0);
  return NULL;
}
static void *pthread_exit_thread(void *arg) {
  (void)arg;
  for (int i = 0; i < 30; i++) down(ex_h, ex_d, 640, PAGEABLE, ex_dev);
  pthread_exit(NULL);
}
static void at_exit_copies(void) {
  for (int i = 0; i < 25; i++) up(ex_d, ex_h, 96, PAGEABLE, ex_dev);
  write_expect();
}
static void *last_thread(void *arg) {
  pthread_t main_t = *(pthread_t *)arg;
  pthread_join(main_t, NULL);
  for (int i = 0; i < 40; i++) down(ex_h, ex_d, 48, PAGEABLE, ex_dev);
  /* The driver's threads would keep the process alive: exit. */
  exit(0);
}

static int scen_exits(int argc, char **argv) {
  int main_pthread_exit = argc > 0 && strcmp(argv[0], "pthread_exit") == 0;
  ex_h = calloc(1, 4096);
  ex_d = dev_alloc(4096);
  ex_dev = cur_dev();
  pthread_t t;
  /* The raw exit: the kernel still clears the thread id, so join works. */
  pthread_create(&t, NULL, raw_exit_thread, NULL);
  pthread_join(t, NULL);
  pthread_create(&t, NULL, pthread_exit_thread, NULL);
  pthread_join(t, NULL);
  for (int i = 0; i < 45; i++) up(ex_d, ex_h, 1280, PAGEABLE, ex_dev);
  atexit(at_exit_copies);
  if (main_pthread_exit) {
    static pthread_t self;
    self = pthread_self();
    pthread_create(&t, NULL, last_thread, &self);
    pthread_exit(NULL);
  }
  return 0;
}

/* churn SECONDS HOGS: HOGS threads hold a ring each (a copy, then they
 * wait), so the 6 churning threads share what rings are left: each makes
 * runs of random length of one of 3 copies with pauses the writer's
 * drains fall into, and ends after a random while, its place taken by a
 * new thread (its ring and, from glibc's cache, its stack). */
static atomic_int churn_stop;
static pthread_barrier_t hog_bar;
static unsigned char *churn_h[3];
static void *churn_d;
static void *hog(void *arg) {
  (void)arg;
  up(churn_d, churn_h[0], 8, PAGEABLE, cur_dev());
  pthread_barrier_wait(&hog_bar); /* holds its ring until the end */
  return NULL;
}
static void *churner(void *arg) {
  unsigned seed = (unsigned)(uintptr_t)arg * 2654435761u + (unsigned)mono_ns();
  int dev = cur_dev();
  int life = 3 + rand_r(&seed) % 40;
  for (int r = 0; r < life && !atomic_load(&churn_stop); r++) {
    int k = rand_r(&seed) % 3, len = 1 + rand_r(&seed) % 150;
    for (int i = 0; i < len; i++) {
      if (k == 1)
        down(churn_h[1], churn_d, 200, PAGEABLE, dev);
      else
        up(churn_d, churn_h[k], 100 + (size_t)k, PAGEABLE, dev);
    }
    if (rand_r(&seed) % 8 == 0) usleep((useconds_t)(rand_r(&seed) % 3000));
  }
  return NULL;
}
static int scen_churn(int argc, char **argv) {
  int secs = argc > 0 ? atoi(argv[0]) : 2, hogs = argc > 1 ? atoi(argv[1]) : 250;
  for (int k = 0; k < 3; k++) churn_h[k] = calloc(1, 4096);
  churn_d = dev_alloc(4096);
  pthread_barrier_init(&hog_bar, NULL, (unsigned)hogs + 1);
  pthread_attr_t a;
  pthread_attr_init(&a);
  pthread_attr_setstacksize(&a, 128u << 10);
  pthread_t *ht = calloc((size_t)hogs + 1, sizeof *ht);
  for (int i = 0; i < hogs; i++) pthread_create(&ht[i], &a, hog, NULL);
  enum { W = 6 };
  pthread_t w[W];
  int made = 0;
  for (int i = 0; i < W; i++) pthread_create(&w[i], NULL, churner, (void *)(intptr_t)made++);
  uint64_t until = mono_ns() + (uint64_t)secs * 1000000000u;
  while (mono_ns() < until) {
    for (int i = 0; i < W; i++) {
      if (pthread_tryjoin_np(w[i], NULL) == 0)
        pthread_create(&w[i], NULL, churner, (void *)(intptr_t)made++);
    }
    usleep(500);
  }
  atomic_store(&churn_stop, 1);
  for (int i = 0; i < W; i++) pthread_join(w[i], NULL);
  pthread_barrier_wait(&hog_bar);
  for (int i = 0; i < hogs; i++) pthread_join(ht[i], NULL);
  printf("churners=%d\n", made);
  return 0;
}

/* thread_end: a thread repeats one copy 40 times, tells the main thread
 * it is done and returns; the main thread waits for it to be done, then
 * returns from main.  The thread's end is held back at its next lock in the
 * shim (lock_delay.c, armed by a destructor of the program's that runs
 * just before the shim's), as a preemption there would: its copies were
 * made and acknowledged before the process exits, so the trace must hold
 * them all. */
static pthread_key_t te_key;
static atomic_int te_done;
static void te_arm(void *v) {
  (void)v;
  void (*arm)(unsigned) = (void (*)(unsigned))dlsym(RTLD_DEFAULT, "lockdelay_arm");
  if (arm) arm(400);
}
static void *te_worker(void *arg) {
  (void)arg;
  pthread_setspecific(te_key, (void *)1);
  unsigned char *h = calloc(1, 256);
  void *d = dev_alloc(256);
  int dev = cur_dev();
  for (int i = 0; i < 40; i++) up(d, h, 256, PAGEABLE, dev);
  atomic_store(&te_done, 1);
  return NULL; /* the program's destructor, then the shim's */
}
static int scen_thread_end(int argc, char **argv) {
  (void)argc;
  (void)argv;
  pthread_t t;
  pthread_create(&t, NULL, te_worker, NULL);
  pthread_detach(t);
  while (!atomic_load(&te_done)) usleep(100);
  usleep(50 * 1000); /* the thread is well into its end */
  printf("lock_delay=%d\n", dlsym(RTLD_DEFAULT, "lockdelay_arm") != NULL);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(
        stderr,
        "usage: repeats threads|fork|memswap|ctx|slots|fail|idle|churn|exits|thread_end [ARGS]\n");
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  /* Before the shim's key (made at the first copy): its destructor runs
   * first. */
  if (pthread_key_create(&te_key, te_arm) != 0) return 2;
  CHECK(cudaFree(0));
  const char *s = argv[1];
  int rc;
  if (!strcmp(s, "threads"))
    rc = scen_threads(argc - 2, argv + 2);
  else if (!strcmp(s, "fork"))
    rc = scen_fork(argc - 2, argv + 2);
  else if (!strcmp(s, "memswap"))
    rc = scen_memswap(argc - 2, argv + 2);
  else if (!strcmp(s, "ctx"))
    rc = scen_ctx(argc - 2, argv + 2);
  else if (!strcmp(s, "slots"))
    rc = scen_slots(argc - 2, argv + 2);
  else if (!strcmp(s, "fail"))
    rc = scen_fail(argc - 2, argv + 2);
  else if (!strcmp(s, "idle"))
    rc = scen_idle(argc - 2, argv + 2);
  else if (!strcmp(s, "churn"))
    rc = scen_churn(argc - 2, argv + 2);
  else if (!strcmp(s, "exits"))
    rc = scen_exits(argc - 2, argv + 2);
  else if (!strcmp(s, "thread_end"))
    rc = scen_thread_end(argc - 2, argv + 2);
  else {
    fprintf(stderr, "repeats: unknown scenario %s\n", s);
    return 2;
  }
  /* exits writes its tally from its atexit handler, after its copies. */
  if (strcmp(s, "exits") != 0) write_expect();
  return rc;
}
