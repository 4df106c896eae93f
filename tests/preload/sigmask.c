/* sigmask.c - the shim's threads and the program's signals (issue 39).
 *
 *   sigmask threads [NAME_PREFIX]
 *                     copies enough to start every thread the mode uses
 *                     (trace writer, CUPTI's, staging's copy threads, the
 *                     registration thread), comparing each round trip
 *                     (bytes_checked=B), then lists every thread of the
 *                     process but its main one, which is the program's only
 *                     thread (from /proc/self/task/N/{comm,status}): a line
 *                     "thread NAME blocked=all" or "thread NAME unblocked=
 *                     SIGALRM,..." for each (the shim's pagelock-*, CUPTI's
 *                     fakecupti, the fake driver's stream threads), then
 *                     "threads=NAME,..." (the names, sorted, once each).
 *                     Exits 1 when one of them leaves a signal unblocked
 *                     that the program could receive: every signal but
 *                     SIGKILL, SIGSTOP and glibc's own two (32, 33), which
 *                     pthread_sigmask never blocks.  With NAME_PREFIX, only
 *                     the threads whose names start with it (over a real
 *                     driver, whose own threads are not the shim's doing).
 *   sigmask reattach MS
 *                     small round trips for MS milliseconds, each compared,
 *                     fast enough for the shim to pause GPU timing, detach
 *                     CUPTI and attach it again from its own thread; each
 *                     millisecond every fake CUPTI thread is looked at.
 *                     Prints "reattach: round_trips=N wrong=W
 *                     cupti_threads=K unblocked=U bytes_checked=B" (K: the
 *                     CUPTI threads seen, U: those that left a signal
 *                     unblocked); exits 1 when W > 0 or U > 0.
 *   sigmask alarm MS  a single-threaded program (as far as it knows) whose
 *                     SIGALRM handler, on 128 KiB of its own stack, checks
 *                     that it runs on the main thread, while a 50 us
 *                     interval timer fires and the main thread copies for
 *                     MS milliseconds, comparing each round trip.  Prints
 *                     "alarm: handled=N elsewhere=M round_trips=R wrong=W
 *                     bytes_checked=B"; exits 1 when M > 0, W > 0 or N == 0.
 *
 * The fake driver's stream threads block every signal;
 * FAKECUPTI_WORKER_SIGNALS=inherit makes fake CUPTI's thread keep the mask
 * of the thread whose call started it, as a CUPTI that blocks nothing
 * itself would. */
#define _GNU_SOURCE
#include <dirent.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#define BIG (4u << 20)

static void check(cudaError_t e, const char *what) {
  if (e != cudaSuccess) {
    fprintf(stderr, "sigmask: %s: %s\n", what, cudaGetErrorString(e));
    exit(2);
  }
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* ---- threads --------------------------------------------------------- */

static int sig_must_block(int s) { return s != SIGKILL && s != SIGSTOP && s != 32 && s != 33; }

/* Reads one thread's comm and SigBlk; 0 when the thread is gone. */
static int read_task(const char *tid, char *comm, size_t clen, unsigned long long *blk) {
  char p[300];
  snprintf(p, sizeof p, "/proc/self/task/%.200s/comm", tid);
  FILE *f = fopen(p, "r");
  if (!f) return 0;
  if (!fgets(comm, (int)clen, f)) comm[0] = 0;
  fclose(f);
  comm[strcspn(comm, "\n")] = 0;
  snprintf(p, sizeof p, "/proc/self/task/%.200s/status", tid);
  f = fopen(p, "r");
  if (!f) return 0;
  char line[256];
  int got = 0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "SigBlk: %llx", blk) == 1) got = 1;
  fclose(f);
  return got;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int list_threads(const char *only) {
  DIR *d = opendir("/proc/self/task");
  if (!d) {
    perror("sigmask: /proc/self/task");
    return 1;
  }
  static char names[256][32];
  char *sorted[256];
  int n = 0, bad = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL && n < 256) {
    if (e->d_name[0] == '.') continue;
    char comm[32];
    unsigned long long blk = 0;
    if (!read_task(e->d_name, comm, sizeof comm, &blk)) continue;
    if (atoi(e->d_name) == getpid()) continue; /* the program's own thread */
    if (only && strncmp(comm, only, strlen(only)) != 0) continue;
    char miss[512] = "";
    size_t ml = 0;
    for (int s = 1; s <= 64; s++)
      if (sig_must_block(s) && !(blk & (1ull << (s - 1)))) {
        char nm[32];
        if (s < SIGRTMIN)
          snprintf(nm, sizeof nm, "SIG%s", sigabbrev_np(s));
        else
          snprintf(nm, sizeof nm, "SIGRTMIN+%d", s - SIGRTMIN);
        ml += (size_t)snprintf(miss + ml, sizeof miss - ml, "%s%s", ml ? "," : "", nm);
        if (ml >= sizeof miss) ml = sizeof miss - 1;
      }
    if (miss[0]) {
      printf("thread %s unblocked=%s\n", comm, miss);
      bad = 1;
    } else {
      printf("thread %s blocked=all\n", comm);
    }
    snprintf(names[n], sizeof names[n], "%s", comm);
    sorted[n] = names[n];
    n++;
  }
  closedir(d);
  qsort(sorted, (size_t)n, sizeof *sorted, cmp_str);
  printf("threads=");
  for (int i = 0, k = 0; i < n; i++)
    if (i == 0 || strcmp(sorted[i], sorted[i - 1]) != 0) printf("%s%s", k++ ? "," : "", sorted[i]);
  printf("\n");
  return bad;
}

/* Uploads and downloads of a big malloc'd buffer, several times over (the
 * registration threshold of auto), so every mode starts what it uses. */
static void copy_big(int rounds) {
  unsigned char *h = malloc(BIG), *back = malloc(BIG);
  void *d;
  if (!h || !back) exit(2);
  check(cudaMalloc(&d, BIG), "cudaMalloc");
  for (size_t i = 0; i < BIG; i++) h[i] = (unsigned char)(i * 7 + 1);
  for (int r = 0; r < rounds; r++) {
    h[r] ^= 0xff; /* each round's bytes differ */
    check(cudaMemcpy(d, h, BIG, cudaMemcpyHostToDevice), "upload");
    check(cudaMemcpy(back, d, BIG, cudaMemcpyDeviceToHost), "download");
    if (memcmp(h, back, BIG) != 0) {
      fprintf(stderr, "sigmask: the round trip changed the bytes\n");
      exit(2);
    }
  }
  printf("bytes_checked=%llu\n", (unsigned long long)rounds * BIG);
  cudaFree(d);
  free(h);
  free(back);
}

static int threads_main(const char *only) {
  copy_big(12);
  /* The registration thread works behind the copies: a moment for it to
   * have been asked and started. */
  struct timespec ts = {0, 200 * 1000 * 1000};
  nanosleep(&ts, NULL);
  return list_threads(only);
}

/* ---- reattach ---------------------------------------------------------- */

/* CUPTI's threads (fakecupti) now: each new one's tid joins seen[], and
 * one that leaves a signal unblocked counts in *bad. */
static void scan_cupti(long *seen, int *nseen, long *bad) {
  DIR *d = opendir("/proc/self/task");
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char comm[32];
    unsigned long long blk = 0;
    if (!read_task(e->d_name, comm, sizeof comm, &blk) || strcmp(comm, "fakecupti") != 0) continue;
    long tid = atol(e->d_name);
    int known = 0;
    for (int i = 0; i < *nseen; i++) known |= seen[i] == tid;
    if (known) continue;
    if (*nseen < 256) seen[(*nseen)++] = tid;
    for (int sg = 1; sg <= 64; sg++)
      if (sig_must_block(sg) && !(blk & (1ull << (sg - 1)))) {
        (*bad)++;
        break;
      }
  }
  if (d) closedir(d);
}

/* Small round trips for ms milliseconds, fast enough for the shim to pause
 * GPU timing, detach CUPTI and attach it again for its windows (from its
 * own thread), every CUPTI thread looked at each millisecond. */
static int reattach_main(long ms) {
  unsigned char up[4096], down[4096];
  void *dev;
  cudaStream_t st;
  check(cudaMalloc(&dev, sizeof up), "cudaMalloc");
  check(cudaStreamCreate(&st), "cudaStreamCreate");
  static long seen[256];
  int nseen = 0;
  long bad = 0, trips = 0, wrong = 0;
  double next = 0;
  for (double end = now_ms() + (double)ms, t; (t = now_ms()) < end; trips++) {
    memset(up, (int)(trips & 0xff), sizeof up);
    check(cudaMemcpyAsync(dev, up, sizeof up, cudaMemcpyHostToDevice, st), "upload");
    check(cudaMemcpyAsync(down, dev, sizeof down, cudaMemcpyDeviceToHost, st), "download");
    check(cudaStreamSynchronize(st), "sync");
    if (memcmp(up, down, sizeof up) != 0) wrong++;
    if (t >= next) {
      scan_cupti(seen, &nseen, &bad);
      next = t + 1;
    }
  }
  printf("reattach: round_trips=%ld wrong=%ld cupti_threads=%d unblocked=%ld bytes_checked=%llu\n",
         trips, wrong, nseen, bad, (unsigned long long)trips * sizeof up);
  return wrong > 0 || bad > 0;
}

/* ---- alarm ----------------------------------------------------------- */

static pid_t main_tid;
static atomic_long handled, elsewhere;

static void on_alarm(int sig) {
  (void)sig;
  /* Something on this stack, as a real handler has. */
  volatile char use[512];
  use[0] = 1;
  (void)use[0];
  if ((pid_t)syscall(SYS_gettid) != main_tid) atomic_fetch_add(&elsewhere, 1);
  atomic_fetch_add(&handled, 1);
}

static int alarm_main(long ms) {
  main_tid = (pid_t)syscall(SYS_gettid);
  if (main_tid != getpid()) return 2;
  static char stack[128 << 10];
  stack_t ss = {.ss_sp = stack, .ss_size = sizeof stack};
  sigaltstack(&ss, NULL);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_alarm;
  sa.sa_flags = SA_RESTART | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGALRM, &sa, NULL);
  size_t n = 256u << 10;
  unsigned char *h = malloc(n), *back = malloc(n);
  void *d;
  if (!h || !back) return 2;
  check(cudaMalloc(&d, n), "cudaMalloc");
  memset(h, 0x5a, n);
  struct itimerval it = {{0, 50}, {0, 50}};
  setitimer(ITIMER_REAL, &it, NULL);
  long copies = 0, wrong = 0;
  for (double end = now_ms() + (double)ms; now_ms() < end; copies++) {
    h[copies % n] ^= 0xff; /* each round's bytes differ */
    check(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice), "upload");
    check(cudaMemcpy(back, d, n, cudaMemcpyDeviceToHost), "download");
    if (memcmp(h, back, n) != 0) wrong++;
  }
  struct itimerval off = {{0, 0}, {0, 0}};
  setitimer(ITIMER_REAL, &off, NULL);
  printf("alarm: handled=%ld elsewhere=%ld round_trips=%ld wrong=%ld bytes_checked=%llu\n",
         atomic_load(&handled), atomic_load(&elsewhere), copies, wrong,
         (unsigned long long)copies * n);
  return wrong > 0 || atomic_load(&elsewhere) > 0 || atomic_load(&handled) == 0;
}

int main(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "threads") == 0) return threads_main(argc > 2 ? argv[2] : NULL);
  if (argc >= 3 && strcmp(argv[1], "alarm") == 0) return alarm_main(atol(argv[2]));
  if (argc >= 3 && strcmp(argv[1], "reattach") == 0) return reattach_main(atol(argv[2]));
  fprintf(stderr,
          "usage: sigmask threads [NAME_PREFIX] | sigmask alarm MS | sigmask reattach MS\n");
  return 2;
}
