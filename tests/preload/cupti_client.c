/* cupti_client.c - a program that starts its own CUPTI client midway, as
 * the PyTorch profiler does (or a tool nsys injects).
 *
 *   test_cupti_client linked|dlsym [subscribe-only|sampled|activity|early]
 *
 * Copies (so pagelock's CUPTI session is running), then subscribes to CUPTI
 * itself, through the libcupti it was linked with ("linked") or one it
 * dlopens and dlsyms ("dlsym", as Python bindings do), enables a callback
 * and MEMCPY records, copies again and checks that it got exactly what it
 * would without pagelock: the subscription succeeds, its callback sees its
 * copies, its records arrive, and every buffer CUPTI hands back is one it
 * gave out.  Prints "pinned=N pinned_bytes=B" for the trace check.
 * subscribe-only stops after the subscription (for runs where CUPTI's
 * activity API is made to fail).  sampled first copies 4 KiB of pageable
 * memory up and down 2000 times, so that pagelock's GPU timing pauses
 * (shim/record/cupti.c), and after subscribing goes on for 300 ms with memsets
 * among its copies: a sampling window of pagelock's opening inside the
 * program's session would hand it records of kinds it never enabled
 * (counted as "other").  Every mode also checks that no two of its
 * memcpy records in a row share a correlation id (each copy is a call).
 * activity never subscribes: after the same fast start it registers
 * activity buffers of its own and enables MEMCPY records (a tool of the
 * activity API alone), then copies for 1.2 s, past pagelock's next
 * sampling window: every copy must come back as a record in its own
 * buffers, and nothing else (a window of pagelock's would register its
 * own buffers again, or hand the program records it never enabled).
 * early (linked only) registers its buffers and enables MEMCPY records
 * before its first CUDA call: pagelock's CUPTI session must never start,
 * and the program gets the records of its own 8 copies, nothing else. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>
#include <cupti_activity.h>
#include <cupti_callbacks.h>
#include <cupti_driver_cbid.h>
#include <cupti_result.h>

#define CHECK(x)                                                             \
  do {                                                                       \
    cudaError_t e_ = (x);                                                    \
    if (e_ != cudaSuccess) {                                                 \
      fprintf(stderr, "cupti_client: %s: %s\n", #x, cudaGetErrorString(e_)); \
      exit(2);                                                               \
    }                                                                        \
  } while (0)

#define BUFSZ (1u << 20)
#define NBUF 64

static uint8_t *given[NBUF];
static int ngiven, foreign, records, callbacks, other, shared_ids;
static uint32_t last_id; /* of the memcpy record before */
static CUptiResult (*next_record)(uint8_t *, size_t, CUpti_Activity **);

static void CUPTIAPI requested(uint8_t **buf, size_t *size, size_t *max) {
  *buf = NULL;
  *size = 0;
  *max = 0;
  if (ngiven == NBUF) return;
  *buf = aligned_alloc(8, BUFSZ);
  given[ngiven++] = *buf;
  *size = BUFSZ;
}

static void CUPTIAPI completed(CUcontext c, uint32_t s, uint8_t *buf, size_t size, size_t valid) {
  (void)c;
  (void)s;
  (void)size;
  int mine = 0;
  for (int i = 0; i < ngiven; i++) mine |= given[i] == buf;
  if (!mine) {
    foreign++; /* not ours: whoever allocated it would free it twice */
    return;
  }
  CUpti_Activity *a = NULL;
  while (next_record(buf, valid, &a) == CUPTI_SUCCESS) {
    if (a->kind != CUPTI_ACTIVITY_KIND_MEMCPY) {
      other++;
      continue;
    }
    /* Each copy a call of its own: two records in a row on one id are two
     * calls CUPTI took for one. */
    uint32_t id = ((const CUpti_ActivityMemcpy6 *)(const void *)a)->correlationId;
    shared_ids += records > 0 && id == last_id;
    last_id = id;
    records++;
  }
}

static void CUPTIAPI on_api(void *ud, CUpti_CallbackDomain d, CUpti_CallbackId id,
                            const void *data) {
  (void)ud;
  (void)d;
  (void)id;
  if (((const CUpti_CallbackData *)data)->callbackSite == CUPTI_API_ENTER) callbacks++;
}

static void copies(void *host, void *dev, size_t n, int times, cudaStream_t st) {
  for (int i = 0; i < times; i++) {
    memset(host, i, n);
    CHECK(cudaMemcpyAsync(dev, host, n, cudaMemcpyHostToDevice, st));
    CHECK(cudaMemcpyAsync(host, dev, n, cudaMemcpyDeviceToHost, st));
    CHECK(cudaStreamSynchronize(st));
    if (((unsigned char *)host)[n - 1] != (unsigned char)i) {
      fprintf(stderr, "cupti_client: bytes differ\n");
      exit(1);
    }
  }
}

/* What the program's client got: at least (exactly, if `exact`) `want`
 * memcpy records, nothing else, and only its own buffers back.  Prints
 * what the trace check wants (`pinned` copies of n bytes); returns the
 * exit status. */
static int verdict(int want, int exact, int pinned, size_t n) {
  int bad = 0;
  if (records < want || (exact && records != want))
    fprintf(stderr, "cupti_client: %d memcpy records for %d copies\n", records, want), bad = 1;
  if (other)
    fprintf(stderr, "cupti_client: %d records of kinds it never enabled\n", other), bad = 1;
  if (shared_ids)
    fprintf(stderr, "cupti_client: %d memcpy records on the id of the one before\n", shared_ids),
        bad = 1;
  if (foreign)
    fprintf(stderr, "cupti_client: CUPTI handed back %d buffers that are not ours\n", foreign),
        bad = 1;
  printf("pinned=%d pinned_bytes=%zu\n", pinned, (size_t)pinned * n);
  return bad;
}

int main(int argc, char **argv) {
  int use_dlsym = argc > 1 && strcmp(argv[1], "dlsym") == 0;
  const char *mode = argc > 2 ? argv[2] : "";
  if (strcmp(mode, "early") == 0) {
    next_record = cuptiActivityGetNextRecord;
    cuptiActivityRegisterCallbacks(requested, completed);
    cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY);
  }
  const size_t n = 1 << 20;
  void *host, *dev;
  cudaStream_t st;
  CHECK(cudaMallocHost(&host, n));
  CHECK(cudaMalloc(&dev, n));
  CHECK(cudaStreamCreate(&st));
  copies(host, dev, n, 3, st);
  int sampled = strcmp(mode, "sampled") == 0, activity = strcmp(mode, "activity") == 0;
  if (strcmp(mode, "early") == 0) {
    copies(host, dev, n, 1, st); /* 3 round trips above, 1 here: 8 copies */
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    return verdict(8, 1, 8, n);
  }
  if (sampled || activity) {
    /* Far above 2000 a second, from pageable memory: the thread spends
     * its time inside the copy calls, where a pause of pagelock's finds
     * it. */
    void *pg = malloc(4096);
    if (pg == NULL) return 2;
    for (int i = 0; i < 2000; i++) copies(pg, dev, 4096, 1, st);
    free(pg);
  }

  /* linked: the addresses the dynamic linker bound for us (the PLT's
   * answer); dlsym: a private copy of the library, as Python loads it. */
  void *h = NULL;
  if (use_dlsym && (h = dlopen("libcupti.so.13", RTLD_NOW | RTLD_LOCAL)) == NULL) {
    fprintf(stderr, "cupti_client: %s\n", dlerror());
    return 2;
  }
#define SYM(name) (use_dlsym ? dlsym(h, #name) : (void *)name)
  CUptiResult (*subscribe)(CUpti_SubscriberHandle *, CUpti_CallbackFunc, void *) =
      SYM(cuptiSubscribe);
  CUptiResult (*unsubscribe)(CUpti_SubscriberHandle) = SYM(cuptiUnsubscribe);
  CUptiResult (*enable_cb)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain,
                           CUpti_CallbackId) = SYM(cuptiEnableCallback);
  CUptiResult (*reg)(CUpti_BuffersCallbackRequestFunc, CUpti_BuffersCallbackCompleteFunc) =
      SYM(cuptiActivityRegisterCallbacks);
  CUptiResult (*enable)(CUpti_ActivityKind) = SYM(cuptiActivityEnable);
  CUptiResult (*flush)(uint32_t) = SYM(cuptiActivityFlushAll);
  next_record = SYM(cuptiActivityGetNextRecord);
  if (!subscribe || !unsubscribe || !enable_cb || !reg || !enable || !flush || !next_record) {
    fprintf(stderr, "cupti_client: libcupti lacks a function\n");
    return 2;
  }
  if (activity) {
    struct timespec ts = {0, 50000000}; /* a pause of pagelock's detaches CUPTI */
    nanosleep(&ts, NULL);
    reg(requested, completed);
    enable(CUPTI_ACTIVITY_KIND_MEMCPY);
    copies(host, dev, n, 4, st);
    for (int i = 0; i < 120; i++) {
      copies(host, dev, 64, 1, st);
      ts.tv_nsec = 10000000;
      nanosleep(&ts, NULL);
    }
    flush(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    return verdict(248, 1, 14, n);
  }
  CUpti_SubscriberHandle sub;
  CUptiResult r = subscribe(&sub, on_api, NULL);
  if (r != CUPTI_SUCCESS) {
    fprintf(stderr, "cupti_client: cuptiSubscribe returned %d\n", (int)r);
    return 1;
  }
  if (strcmp(mode, "subscribe-only") == 0) {
    unsubscribe(sub);
    printf("pinned=%d pinned_bytes=%zu\n", 6, 6 * n);
    return 0;
  }
  enable_cb(1, sub, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2);
  reg(requested, completed);
  enable(CUPTI_ACTIVITY_KIND_MEMCPY);
  copies(host, dev, n, 4, st);
  for (int i = 0; sampled && i < 30; i++) { /* 300 ms: past pagelock's next window */
    CHECK(cudaMemsetAsync(dev, i, 4096, st));
    CHECK(cudaStreamSynchronize(st));
    struct timespec ts = {0, 10000000};
    nanosleep(&ts, NULL);
  }
  flush(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  unsubscribe(sub);
  int bad = callbacks < 4;
  if (bad) fprintf(stderr, "cupti_client: %d callbacks for 4 uploads\n", callbacks);
  return verdict(8, 0, 14, n) | bad;
}
