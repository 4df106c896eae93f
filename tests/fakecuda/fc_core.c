/*
 * fc_core.c: configuration, load/exit/fork handling, statistics and the
 * time model shared by every part of the fake driver.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fc_internal.h"

atomic_int fc_initialized;
atomic_int fc_shutdown;
atomic_int fc_forked_child;
int fc_ndevices = 1;
size_t fc_device_mem_bytes = (size_t)16 << 30;
int fc_driver_version = 13000;
_Atomic uint64_t fc_pinned_bps = 24000000000ull;
_Atomic uint64_t fc_pageable_bps = 6000000000ull;
uint64_t fc_register_bps = 31000000000ull;
uint64_t fc_hostalloc_bps = 3000000000ull;
__thread int fc_tls_in_callback;
__thread int fc_tls_capture_mode;
pthread_mutex_t fc_bounce_mu = PTHREAD_MUTEX_INITIALIZER;
struct fc_stats_atomic fc_stats;

static pthread_mutex_t fc_sleep_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t fc_sleep_cv;

uint64_t fc_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/*
 * Sleeping on a condition variable rather than nanosleep lets the exit
 * handler cut every modelled transfer and spin kernel short.
 */
int fc_sleep_until(uint64_t deadline_ns) {
  struct timespec ts = {
      .tv_sec = (time_t)(deadline_ns / 1000000000ull),
      .tv_nsec = (long)(deadline_ns % 1000000000ull),
  };
  int rc = 0;
  pthread_mutex_lock(&fc_sleep_mu);
  for (;;) {
    if (atomic_load(&fc_shutdown)) {
      rc = -1;
      break;
    }
    if (fc_now_ns() >= deadline_ns) break;
    pthread_cond_timedwait(&fc_sleep_cv, &fc_sleep_mu, &ts);
  }
  pthread_mutex_unlock(&fc_sleep_mu);
  return rc;
}

void fc_sleep_wake_all(void) {
  pthread_mutex_lock(&fc_sleep_mu);
  pthread_cond_broadcast(&fc_sleep_cv);
  pthread_mutex_unlock(&fc_sleep_mu);
}

void fc_model_time(uint64_t start_ns, uint64_t bytes, uint64_t bps) {
  if (bps == 0 || bytes == 0) return;
  /* bytes * 1e9 / bps without overflowing for multi-GB copies */
  uint64_t ns = (uint64_t)((long double)bytes * 1e9L / (long double)bps);
  fc_sleep_until(start_ns + ns);
}

void fc_stat_registered_add(size_t bytes) {
  unsigned long long now = FC_STAT_ADD(registered_bytes_live, bytes) + bytes;
  unsigned long long hw = atomic_load(&fc_stats.registered_bytes_high_water);
  while (now > hw && !atomic_compare_exchange_weak(&fc_stats.registered_bytes_high_water, &hw, now))
    ;
}

static double fc_env_double(const char *name, double def) {
  const char *v = getenv(name);
  if (v == NULL || *v == '\0') return def;
  char *end;
  double d = strtod(v, &end);
  if (*end != '\0' || d < 0) {
    fprintf(stderr, "fakecuda: ignoring %s=%s\n", name, v);
    return def;
  }
  return d;
}

static uint64_t fc_gbps(double g) { return (uint64_t)(g * 1e9); }

static void fc_atfork_child(void) {
  /*
   * A CUDA context does not survive fork: in the child every call fails
   * with CUDA_ERROR_NOT_INITIALIZED, as the real driver's do.  The
   * workers did not survive either, so nothing here may touch a lock.
   */
  if (atomic_load(&fc_initialized)) atomic_store(&fc_forked_child, 1);
}

__attribute__((constructor)) static void fc_load(void) {
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&fc_sleep_cv, &ca);
  pthread_condattr_destroy(&ca);

  double n = fc_env_double("FAKECUDA_DEVICES", 1);
  fc_ndevices = n > FC_MAX_DEVICES ? FC_MAX_DEVICES : (int)n;
  fc_device_mem_bytes = (size_t)fc_env_double("FAKECUDA_DEVICE_MEM_MB", 16384) << 20;
  fc_driver_version = (int)fc_env_double("FAKECUDA_DRIVER_VERSION", 13000);
  double g = fc_env_double("FAKECUDA_PINNED_GBPS", 24);
  fc_pinned_bps = fc_gbps(g);
  g = fc_env_double("FAKECUDA_PAGEABLE_GBPS", 6);
  fc_pageable_bps = fc_gbps(g);
  fc_register_bps = fc_gbps(fc_env_double("FAKECUDA_REGISTER_GBPS", 31));
  fc_hostalloc_bps = fc_gbps(fc_env_double("FAKECUDA_HOSTALLOC_GBPS", 3));
  fc_fault_parse_env(getenv("FAKECUDA_FAIL"));
  pthread_atfork(NULL, NULL, fc_atfork_child);
  /* A preloaded guard against stale registrations (tests/preload/
   * reg_guard.c) hears that the driver is in the process however it came:
   * linked, or dlopened later by a runtime, after the guard's own
   * constructor looked for it. */
  void (*guard)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "reg_guard_driver_loaded");
  if (guard != NULL) guard();
}

__attribute__((destructor)) static void fc_unload(void) {
  if (atomic_load(&fc_forked_child)) return;
  /*
   * From here on every entry point answers CUDA_ERROR_DEINITIALIZED, as
   * the real driver does once the process is exiting.  Queued work is
   * abandoned; sleeping workers and waiting callers are woken.
   */
  atomic_store(&fc_shutdown, 1);
  fc_sleep_wake_all();
  fc_events_wake_all();
  fc_streams_shutdown();
  /* Give woken callers a moment to leave the API before freeing. */
  for (int i = 0; i < 200 && fc_api_threads_inside() > 0; i++) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  if (fc_api_threads_inside() > 0 || !fc_streams_all_joined())
    return; /* something is still running: leave state reachable */
  fc_graph_fini();
  fc_module_fini();
  fc_streams_fini();
  fc_events_fini();
  fc_ctx_fini();
  fc_ranges_fini();
}

static pthread_once_t fc_init_once = PTHREAD_ONCE_INIT;
static CUresult fc_init_result;

static void fc_init_body(void) {
  for (int d = 0; d < fc_ndevices; d++) {
    pthread_mutex_init(&fc_devices[d].h2d_engine, NULL);
    pthread_mutex_init(&fc_devices[d].d2h_engine, NULL);
    CUresult r = fc_reserve_device_va(d, fc_device_mem_bytes);
    if (r != CUDA_SUCCESS) {
      fc_init_result = r;
      return;
    }
  }
  fc_init_result = CUDA_SUCCESS;
}

CUresult fc_driver_init(void) {
  if (fc_ndevices <= 0) return CUDA_ERROR_NO_DEVICE;
  pthread_once(&fc_init_once, fc_init_body);
  if (fc_init_result == CUDA_SUCCESS) atomic_store(&fc_initialized, 1);
  return fc_init_result;
}

/*
 * The driver's own tool-loading hook: the first successful cuInit loads
 * $CUDA_INJECTION64_PATH and calls its InitializeInjection().  Done outside
 * the init once-block, so the tool may itself call cuInit.
 */
static void fc_load_injection(void) {
  static atomic_int done;
  const char *path = getenv("CUDA_INJECTION64_PATH");
  if (path == NULL || *path == '\0' || atomic_exchange(&done, 1)) return;
  void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
  if (h == NULL) {
    fprintf(stderr, "fakecuda: CUDA_INJECTION64_PATH: %s\n", dlerror());
    return;
  }
  int (*init)(void) = (int (*)(void))(uintptr_t)dlsym(h, "InitializeInjection");
  if (init) init();
}

FC_EXPORT CUresult cuInit(unsigned int Flags) {
  FC_ENTER(cuInit);
  if (Flags != 0) FC_RETURN(CUDA_ERROR_INVALID_VALUE);
  CUresult r = fc_driver_init();
  if (r == CUDA_SUCCESS) fc_load_injection();
  FC_RETURN(r);
}

FC_EXPORT CUresult cuDriverGetVersion(int *driverVersion) {
  FC_ENTER(cuDriverGetVersion);
  if (driverVersion == NULL) FC_RETURN(CUDA_ERROR_INVALID_VALUE);
  *driverVersion = fc_driver_version;
  FC_RETURN(CUDA_SUCCESS);
}

/* ------------------------------------------------------------------ */
/* control interface                                                  */

#define FC_LOAD(f) atomic_load_explicit(&fc_stats.f, memory_order_relaxed)

FC_EXPORT void fakecuda_get_stats(struct fakecuda_stats *s) {
  if (s == NULL) return;
  s->copies_pageable = FC_LOAD(copies_pageable);
  s->copies_pinned = FC_LOAD(copies_pinned);
  s->copies_d2d = FC_LOAD(copies_d2d);
  s->bytes_h2d = FC_LOAD(bytes_h2d);
  s->bytes_d2h = FC_LOAD(bytes_d2h);
  s->bytes_pageable = FC_LOAD(bytes_pageable);
  s->bytes_pinned = FC_LOAD(bytes_pinned);
  s->memsets = FC_LOAD(memsets);
  s->host_allocs_live = FC_LOAD(host_allocs_live);
  s->host_alloc_bytes_live = FC_LOAD(host_alloc_bytes_live);
  s->registered_ranges_live = FC_LOAD(registered_ranges_live);
  s->registered_bytes_live = FC_LOAD(registered_bytes_live);
  s->registered_bytes_high_water = FC_LOAD(registered_bytes_high_water);
  s->device_allocs_live = FC_LOAD(device_allocs_live);
  s->device_bytes_live = FC_LOAD(device_bytes_live);
  s->kernels_launched = FC_LOAD(kernels_launched);
  s->graph_launches = FC_LOAD(graph_launches);
  s->host_funcs_run = FC_LOAD(host_funcs_run);
  s->host_register_calls = FC_LOAD(host_register_calls);
  s->host_unregister_calls = FC_LOAD(host_unregister_calls);
  s->legacy_calls = FC_LOAD(legacy_calls);
  s->event_ctx_mismatches = FC_LOAD(event_ctx_mismatches);
  s->host_register_nonresident_pages = FC_LOAD(host_register_nonresident_pages);
}

FC_EXPORT void fakecuda_reset_stats(void) {
#define FC_ZERO(f) atomic_store(&fc_stats.f, 0)
  FC_ZERO(copies_pageable);
  FC_ZERO(copies_pinned);
  FC_ZERO(copies_d2d);
  FC_ZERO(bytes_h2d);
  FC_ZERO(bytes_d2h);
  FC_ZERO(bytes_pageable);
  FC_ZERO(bytes_pinned);
  FC_ZERO(memsets);
  FC_ZERO(kernels_launched);
  FC_ZERO(graph_launches);
  FC_ZERO(host_funcs_run);
  FC_ZERO(host_register_calls);
  FC_ZERO(host_unregister_calls);
  FC_ZERO(legacy_calls);
  FC_ZERO(event_ctx_mismatches);
  FC_ZERO(host_register_nonresident_pages);
#undef FC_ZERO
  atomic_store(&fc_stats.registered_bytes_high_water, FC_LOAD(registered_bytes_live));
}

FC_EXPORT void fakecuda_set_bandwidth(double pinned_gbps, double pageable_gbps) {
  if (pinned_gbps > 0) atomic_store(&fc_pinned_bps, fc_gbps(pinned_gbps));
  if (pageable_gbps > 0) atomic_store(&fc_pageable_bps, fc_gbps(pageable_gbps));
}

FC_EXPORT void fakecuda_set_register_bandwidth(double gbps) {
  if (gbps > 0) __atomic_store_n(&fc_register_bps, fc_gbps(gbps), __ATOMIC_RELAXED);
}
