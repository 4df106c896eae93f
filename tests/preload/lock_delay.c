/* lock_delay.c - preloaded after the shim: holds one thread back, once, at
 * its next pthread_mutex_lock called from libpagelock.so, as a preemption
 * at that point would.  The program arms it on the thread that is to wait
 * (lockdelay_arm, found with dlsym), e.g. from a thread-specific data
 * destructor that runs just before the shim's own.  Every other call goes
 * straight to the next pthread_mutex_lock.  (tests/preload/repeats.sh,
 * case_thread_end_exit.) */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

static int (*next_lock)(pthread_mutex_t *);
static __thread unsigned delay_ms;

__attribute__((constructor)) static void lockdelay_init(void) {
  next_lock = (int (*)(pthread_mutex_t *))dlsym(RTLD_NEXT, "pthread_mutex_lock");
}

__attribute__((visibility("default"))) void lockdelay_arm(unsigned ms) { delay_ms = ms; }

__attribute__((visibility("default"))) int pthread_mutex_lock(pthread_mutex_t *m) {
  if (next_lock == NULL) lockdelay_init();
  if (delay_ms) {
    Dl_info i;
    if (dladdr(__builtin_return_address(0), &i) && i.dli_fname &&
        strstr(i.dli_fname, "libpagelock")) {
      unsigned ms = delay_ms;
      delay_ms = 0;
      struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
      while (nanosleep(&ts, &ts) != 0) {}
    }
  }
  return next_lock(m);
}
