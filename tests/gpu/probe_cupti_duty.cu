/* probe_cupti_duty.cu - what CUPTI costs a loop of small copies and tiny
 * kernels in each state it can be in, and what moving between the states
 * costs: the measurements behind shim/record/cupti.c's duty cycle (issue 22).
 *
 * The loop is patterns.py small's, in C: 4 KiB up from pageable memory, a
 * one-thread kernel, 8 bytes down, a stream synchronize.  Usage:
 *   probe_cupti_duty VARIANT [ITERS]
 * VARIANT: native | all | sub | off | unsub | fin | duty | kduty | finduty
 *          | abphase | ids | enablecost
 *   all     subscribed, the shim's copy callbacks and activity kinds on
 *   sub     subscribed, nothing enabled
 *   off     all, then kinds and callbacks disabled, subscription kept
 *   unsub   all, then disabled and unsubscribed
 *   fin     all, then disabled, flushed and detached (cuptiFinalize)
 *   duty    all, with kinds and callbacks on 5 ms of every 100
 *   kduty   all, with only CONCURRENT_KERNEL on 5 ms of every 100
 *   finduty attached 5 ms of every 100, detached (cuptiFinalize) between
 *   abphase the states taking turns inside one process, PHASE_MS (default
 *           3000) each, in rotated order: det (detached: never
 *           attached, or cuptiFinalize'd), sub (subscribed, nothing on:
 *           the shim's pause), w1 (everything on 25 ms of every 1000: the
 *           shim's windows), w4 (25 ms of every 4000), w10 (100 ms of
 *           every 10000); AB_STATES names the states besides det,
 *           AB_CYCLES the cycles; prints each state's us/iter per cycle and
 *           its ratio to det in the same cycle, and the first correlation
 *           id after each attach (they start again at 1 after a detach)
 *   ids     the correlation ids after tracing is turned off and on again
 *           while attached (IDS_TOGGLE, see ids() below)
 * Prints "probe_cupti_duty VARIANT us_per_iter=X (first half Y) records=R
 * toggles=T toggle_us_max=M": the second half of the loop is the one timed
 * for off/unsub/fin (the first half runs with everything on). */
#include <cuda_runtime_api.h>
#include <cupti.h>
#include <pthread.h>
#include <algorithm>
#include <atomic>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

__global__ void add1(float *acc, const float *g) { acc[1] += 1.0f + 0.0f * g[0]; }

static const CUpti_ActivityKind kinds[] = {
    CUPTI_ACTIVITY_KIND_MEMCPY,   CUPTI_ACTIVITY_KIND_MEMCPY2,
    CUPTI_ACTIVITY_KIND_MEMSET,   CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
    CUPTI_ACTIVITY_KIND_OVERHEAD, CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION};
#define NKINDS (sizeof kinds / sizeof kinds[0])
static const CUpti_CallbackId cbids[] = {
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2, CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync, CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2};
#define NCB (sizeof cbids / sizeof cbids[0])

static CUpti_SubscriberHandle sub;
static std::atomic<long> records;
static std::atomic<int> stop;
static int ntoggles;
static double toggle_max;

static void CUPTIAPI req(uint8_t **b, size_t *sz, size_t *max) {
  *sz = 1 << 20;
  *b = (uint8_t *)aligned_alloc(8, *sz);
  *max = 0;
}
/* ids: the correlation ids of the memcpy records of the current phase */
static std::atomic<uint32_t> rec_lo{UINT32_MAX}, rec_hi, rec_same;
static std::atomic<long> memcpys;
static void CUPTIAPI done(CUcontext c, uint32_t s, uint8_t *b, size_t sz, size_t valid) {
  (void)c, (void)s, (void)sz;
  CUpti_Activity *r = NULL;
  static uint32_t prev;
  while (cuptiActivityGetNextRecord(b, valid, &r) == CUPTI_SUCCESS) {
    records++;
    if (r->kind != CUPTI_ACTIVITY_KIND_MEMCPY) continue;
    uint32_t id = ((const CUpti_ActivityMemcpy6 *)(const void *)r)->correlationId;
    memcpys++;
    if (id < rec_lo) rec_lo = id;
    if (id > rec_hi) rec_hi = id;
    if (id == prev) rec_same++;
    prev = id;
  }
  free(b);
}
static std::atomic<uint32_t> first_corr, last_corr;
static void CUPTIAPI cb(void *u, CUpti_CallbackDomain d, CUpti_CallbackId id, const void *data) {
  (void)u, (void)d, (void)id;
  uint32_t c = ((const CUpti_CallbackData *)data)->correlationId;
  uint32_t z = 0;
  first_corr.compare_exchange_strong(z, c);
  last_corr = c;
}

static void set_cbs(int on) {
  for (size_t i = 0; i < NCB; i++) cuptiEnableCallback(on, sub, CUPTI_CB_DOMAIN_DRIVER_API, cbids[i]);
}
static void set_kinds(int on, int kernel_only) {
  for (size_t i = 0; i < NKINDS; i++) {
    if (kernel_only && kinds[i] != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
    if (on)
      cuptiActivityEnable(kinds[i]);
    else
      cuptiActivityDisable(kinds[i]);
  }
}
static void attach(void) {
  if (cuptiSubscribe(&sub, (CUpti_CallbackFunc)cb, NULL) != CUPTI_SUCCESS)
    fprintf(stderr, "probe_cupti_duty: subscribe failed\n");
  cuptiActivityRegisterCallbacks(req, done);
  set_cbs(1);
  set_kinds(1, 0);
}
static void detach(int how) { /* 1 off, 2 unsub, 3 finalize */
  set_kinds(0, 0);
  set_cbs(0);
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  if (how >= 2) cuptiUnsubscribe(sub);
  if (how >= 3) cuptiFinalize();
}

static const char *variant;
static void timed_toggle(void (*f)(void)) {
  double t0 = now_us();
  f();
  double dt = now_us() - t0;
  if (dt > toggle_max) toggle_max = dt;
  ntoggles++;
}
static void k_on(void) { set_kinds(1, 1); }
static void k_off(void) { set_kinds(0, 1); }
static void all_on(void) { set_kinds(1, 0), set_cbs(1); }
static void all_off(void) { set_kinds(0, 0), set_cbs(0), cuptiActivityFlushAll(0); }
static void fin_on(void) { attach(); }
static void fin_off(void) { detach(3); }

static int on_ms = 5, period_ms = 100;
static void *duty(void *arg) {
  (void)arg;
  int k = !strcmp(variant, "kduty"), f = !strcmp(variant, "finduty");
  while (!stop.load()) {
    usleep(on_ms * 1000);
    timed_toggle(k ? k_off : f ? fin_off : all_off);
    usleep((period_ms - on_ms) * 1000);
    if (stop.load()) break;
    timed_toggle(k ? k_on : f ? fin_on : all_on);
  }
  return NULL;
}

/* abphase: one state's phase of the loop, us per iteration. */
static float *ab_x, *ab_out, *ab_g, *ab_acc;
static cudaStream_t ab_s;
static long ab_iters;
static double ab_phase(int ms) {
  double t0 = now_us(), t;
  long n = 0;
  do {
    for (int i = 0; i < 64; i++, n++) {
      cudaMemcpyAsync(ab_g, ab_x, 4096, cudaMemcpyHostToDevice, ab_s);
      add1<<<1, 1, 0, ab_s>>>(ab_acc, ab_g);
      cudaMemcpyAsync(ab_out, ab_acc, 8, cudaMemcpyDeviceToHost, ab_s);
      cudaStreamSynchronize(ab_s);
    }
  } while ((t = now_us()) - t0 < ms * 1000.0);
  ab_iters += n;
  return (t - t0) / n;
}
static void *ab_duty(void *arg) { /* on at once for on_ms, then off for the rest of each period */
  (void)arg;
  for (;;) {
    for (int i = 0; i < on_ms; i++)
      if (stop.load()) return NULL; else usleep(1000);
    all_off();
    for (int i = 0; i < period_ms - on_ms; i++)
      if (stop.load()) return NULL; else usleep(1000);
    all_on();
  }
}
static int abphase(int phase_ms) {
  static const char *names[] = {"det", "sub", "w1", "w4", "w10"};
  static const int on[] = {0, 0, 25, 25, 100}, per[] = {0, 0, 1000, 4000, 10000};
  enum { NALL = 5, MAXC = 64 };
  /* AB_STATES picks the states (det always first), AB_CYCLES the cycles */
  int states[NALL] = {0}, ns = 1, cycles = getenv("AB_CYCLES") ? atoi(getenv("AB_CYCLES")) : 5;
  const char *want = getenv("AB_STATES") ? getenv("AB_STATES") : "sub w1 w4 w10";
  for (int st = 1; st < NALL; st++) {
    const char *f = strstr(want, names[st]);
    if (f && (f[strlen(names[st])] == ' ' || f[strlen(names[st])] == 0)) states[ns++] = st;
  }
  if (cycles < 1 || cycles > MAXC) cycles = 5;
  static double us[MAXC][NALL];
  int attached = 0;
  for (int c = 0; c < cycles; c++) {
    for (int j = 0; j < ns; j++) {
      int st = states[(j + c) % ns];
      double a = now_us();
      if (st == 0 && attached) {
        detach(3);
        attached = 0;
        printf("abphase detach_ms=%.1f last_corr=%u\n", (now_us() - a) / 1e3, last_corr.load());
      } else if (st != 0 && !attached) {
        first_corr = 0;
        attach();
        all_off();
        attached = 1;
        printf("abphase attach_ms=%.1f\n", (now_us() - a) / 1e3);
      }
      pthread_t th;
      if (on[st]) {
        on_ms = on[st], period_ms = per[st];
        stop = 0;
        all_on();
        pthread_create(&th, NULL, ab_duty, NULL);
      }
      us[c][st] = ab_phase(phase_ms);
      if (on[st]) {
        stop = 1;
        pthread_join(th, NULL);
        all_off();
      }
      printf("abphase cycle=%d %s us_per_iter=%.3f first_corr=%u\n", c, names[st], us[c][st],
             st ? first_corr.load() : 0);
    }
  }
  if (attached) detach(3);
  for (int j = 0; j < ns; j++) {
    int st = states[j];
    double r[MAXC], u[MAXC];
    for (int c = 0; c < cycles; c++) r[c] = us[c][st] / us[c][0], u[c] = us[c][st];
    std::sort(r, r + cycles), std::sort(u, u + cycles);
    printf("abphase %-4s us_per_iter=%.3f [%.3f-%.3f] vs_det=%.4f [%.4f-%.4f] quartiles %.4f-%.4f\n",
           names[st], u[cycles / 2], u[0], u[cycles - 1], r[cycles / 2], r[0], r[cycles - 1],
           r[cycles / 4], r[3 * cycles / 4]);
  }
  cudaStreamSynchronize(ab_s);
  int ok = ab_out[1] == (float)(ab_iters + 500);
  printf("abphase iters=%ld ok=%d\n", ab_iters, ok);
  return ok ? 0 : 1;
}

/* ids: the correlation ids CUPTI gives after tracing is turned off and on
 * again while attached (the shim's pauses with PAGELOCK_CUPTI_DETACH=0).
 * IDS_TOGGLE: both (kinds and callbacks, the shim's way), kinds or cbs
 * turned off and on between phases of 200 iterations on this thread; or
 * thread (both) and threadkinds (kinds alone) turned off and on 40 times
 * by another thread while this one copies, as the shim's CUPTI thread
 * does; or fin, finkeep, unsub, unsubkeep (ids_ender).  Per phase with everything on: the callbacks' first and last id,
 * the memcpy records' count and range, and how many repeat the id of the
 * record before (two records per call share none). */
static int ids_kinds_only;
static void *ids_toggler(void *arg) {
  (void)arg;
  for (int i = 0; i < 80; i++) {
    usleep(2500);
    set_kinds(i % 2, 0);
    if (!ids_kinds_only) set_cbs(i % 2);
  }
  stop = 1;
  return NULL;
}
static void ids_phase(const char *how, int phase, int on, float *g, float *x, float *out,
                      float *acc, cudaStream_t s) {
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  first_corr = 0, rec_lo = UINT32_MAX, rec_hi = 0, rec_same = 0, memcpys = 0;
  for (int i = 0; i < 200; i++) {
    cudaMemcpyAsync(g, x, 4096, cudaMemcpyHostToDevice, s);
    add1<<<1, 1, 0, s>>>(acc, g);
    cudaMemcpyAsync(out, acc, 8, cudaMemcpyDeviceToHost, s);
    cudaStreamSynchronize(s);
  }
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  printf("ids toggle=%s phase=%d %s callbacks %u-%u memcpy records=%ld ids %u-%u repeats=%u\n", how,
         phase, on ? "on " : "off", first_corr.load(), last_corr.load(), memcpys.load(),
         rec_lo.load() == UINT32_MAX ? 0 : rec_lo.load(), rec_hi.load(), rec_same.load());
}
/* What another thread does to CUPTI in the ids modes below that end a
 * session: 1 cuptiFinalize, 2 cuptiUnsubscribe; callbacks turned off
 * first unless ids_keep_cbs. */
static int ids_end, ids_keep_cbs;
static void *ids_ender(void *arg) {
  (void)arg;
  usleep(3000);
  set_kinds(0, 0);
  if (!ids_keep_cbs) set_cbs(0);
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  if (ids_end == 1)
    cuptiFinalize();
  else
    cuptiUnsubscribe(sub);
  stop = 1;
  return NULL;
}
/* Copies up and down on this thread until `other`, run on a thread of its
 * own, sets stop. */
static void copy_beside(void *(*other)(void *), float *g, float *x, float *out, float *acc,
                        cudaStream_t s) {
  pthread_t th;
  stop = 0;
  pthread_create(&th, NULL, other, NULL);
  while (!stop.load()) {
    cudaMemcpyAsync(g, x, 4096, cudaMemcpyHostToDevice, s);
    cudaMemcpyAsync(out, acc, 8, cudaMemcpyDeviceToHost, s);
    cudaStreamSynchronize(s);
  }
  pthread_join(th, NULL);
}
static int ids(float *g, float *x, float *out, float *acc, cudaStream_t s) {
  const char *how = getenv("IDS_TOGGLE") ? getenv("IDS_TOGGLE") : "both";
  ids_end = !strncmp(how, "fin", 3) ? 1 : !strncmp(how, "unsub", 5) ? 2 : 0;
  if (ids_end) {
    /* fin, finkeep, unsub, unsubkeep: 10 times another thread ends the
     * session while this one copies, and this one starts a new one (as
     * the shim's window does after a detach, or the program's own client
     * after the shim handed CUPTI over) */
    ids_keep_cbs = strstr(how, "keep") != NULL;
    ids_phase(how, 0, 1, g, x, out, acc, s);
    for (int k = 0; k < 10; k++) {
      copy_beside(ids_ender, g, x, out, acc, s);
      attach();
    }
    ids_phase(how, 1, 1, g, x, out, acc, s);
    return 0;
  }
  if (!strncmp(how, "thread", 6)) {
    ids_kinds_only = !strcmp(how, "threadkinds");
    ids_phase(how, 0, 1, g, x, out, acc, s);
    copy_beside(ids_toggler, g, x, out, acc, s);
    ids_phase(how, 1, 1, g, x, out, acc, s);
    return 0;
  }
  int kinds_too = strcmp(how, "cbs") != 0, cbs_too = strcmp(how, "kinds") != 0;
  for (int phase = 0; phase < 6; phase++) {
    int on = phase % 2 == 0;
    if (phase > 0) {
      if (kinds_too) set_kinds(on, 0);
      if (cbs_too) set_cbs(on);
    }
    ids_phase(how, phase, on, g, x, out, acc, s);
  }
  return 0;
}

int main(int argc, char **argv) {
  variant = argc > 1 ? argv[1] : "native";
  int iters = argc > 2 ? atoi(argv[2]) : 20000;
  if (getenv("DUTY_ON_MS")) on_ms = atoi(getenv("DUTY_ON_MS"));
  if (getenv("DUTY_PERIOD_MS")) period_ms = atoi(getenv("DUTY_PERIOD_MS"));
  static float lat[1 << 20];
  float *x = (float *)malloc(4096), *out = (float *)malloc(8), *g, *acc;
  for (int i = 0; i < 1024; i++) x[i] = (float)i;
  cudaStream_t s;
  int is_native = !strcmp(variant, "native") || !strcmp(variant, "abphase"), is_sub = !strcmp(variant, "sub");
  int half = !strcmp(variant, "off") ? 1 : !strcmp(variant, "unsub") ? 2 : !strcmp(variant, "fin") ? 3 : 0;
  if (!is_native) {
    if (is_sub) {
      cuptiSubscribe(&sub, (CUpti_CallbackFunc)cb, NULL);
      cuptiActivityRegisterCallbacks(req, done);
    } else {
      attach();
    }
  }
  cudaFree(0);
  cudaMalloc(&g, 4096);
  cudaMalloc(&acc, 8);
  cudaMemset(acc, 0, 8);
  cudaStreamCreate(&s);
  pthread_t th;
  int dutyv = !strcmp(variant, "duty") || !strcmp(variant, "kduty") || !strcmp(variant, "finduty");
  for (int i = 0; i < 500; i++) { /* warm-up */
    cudaMemcpyAsync(g, x, 4096, cudaMemcpyHostToDevice, s);
    add1<<<1, 1, 0, s>>>(acc, g);
    cudaMemcpyAsync(out, acc, 8, cudaMemcpyDeviceToHost, s);
    cudaStreamSynchronize(s);
  }
  if (!strcmp(variant, "abphase")) {
    ab_x = x, ab_out = out, ab_g = g, ab_acc = acc, ab_s = s;
    return abphase(getenv("PHASE_MS") ? atoi(getenv("PHASE_MS")) : 3000);
  }
  if (!strcmp(variant, "ids")) return ids(g, x, out, acc, s);
  if (!strcmp(variant, "enablecost")) { /* what turning each kind back on costs */
    detach(1);
    for (int rep = 0; rep < 3; rep++)
      for (size_t k = 0; k < NKINDS; k++) {
        double a = now_us();
        cuptiActivityEnable(kinds[k]);
        double b = now_us();
        cudaMemcpyAsync(g, x, 4096, cudaMemcpyHostToDevice, s);
        add1<<<1, 1, 0, s>>>(acc, g);
        cudaStreamSynchronize(s);
        double c = now_us();
        cuptiActivityDisable(kinds[k]);
        printf("probe_cupti_enable kind=%d enable_us=%.0f next_iter_us=%.0f disable_us=%.0f\n", (int)kinds[k],
               b - a, c - b, now_us() - c);
      }
    return 0;
  }
  if (dutyv) pthread_create(&th, NULL, duty, NULL);
  double t0 = now_us(), tmid = 0, tmid2 = 0;
  for (int i = 0; i < iters; i++) {
    if (i == iters / 2) {
      tmid = now_us();
      if (half) {
        double a = now_us();
        detach(half);
        toggle_max = now_us() - a;
        ntoggles = 1;
      }
      tmid2 = now_us();
    }
    double a = now_us();
    cudaMemcpyAsync(g, x, 4096, cudaMemcpyHostToDevice, s);
    add1<<<1, 1, 0, s>>>(acc, g);
    cudaMemcpyAsync(out, acc, 8, cudaMemcpyDeviceToHost, s);
    cudaStreamSynchronize(s);
    if (i < (1 << 20)) lat[i] = (float)(now_us() - a);
  }
  double t1 = now_us();
  stop = 1;
  if (dutyv) pthread_join(th, NULL);
  int nl = iters < (1 << 20) ? iters : (1 << 20), slow = 0;
  double lmax = 0;
  for (int i = 0; i < nl; i++) {
    if (lat[i] > 200) slow++;
    if (lat[i] > lmax) lmax = lat[i];
  }
  printf("probe_cupti_duty_lat %s iters_over_200us=%d max_iter_us=%.0f\n", variant, slow, lmax);
  int ok = out[1] == (float)(iters + 500);
  double first = (tmid - t0) / (iters / 2), second = (t1 - tmid2) / (iters - iters / 2);
  double whole = (t1 - t0 - (tmid2 - tmid)) / iters;
  if (!is_native && !half && strcmp(variant, "finduty")) cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  printf("probe_cupti_duty %s us_per_iter=%.2f first_half=%.2f second_half=%.2f records=%ld toggles=%d "
         "toggle_us_max=%.0f ok=%d\n",
         variant, half ? second : whole, first, second, records.load(), ntoggles,
         toggle_max, ok);
  return ok ? 0 : 1;
}
