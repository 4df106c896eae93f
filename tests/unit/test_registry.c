/* test_registry.c - the allocation registry (rangemap.c, hostmem.c).
 *
 * A model check of the range map (the pinned-range treap) against a
 * brute-force array, the granule map (tracked allocations) likewise, the
 * registry's classification rules, and a 16-thread stress for a fixed time
 * (built again under ThreadSanitizer in CI) that must end consistent and
 * empty.  No driver is loaded: ranges the program pinned answer from the
 * registry, everything else reads "unknown". */
#define _GNU_SOURCE
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "pl_internal.h"
#include "hostmem.h"
#include "granmap.h"
#include "rangemap.h"

/* The model: up to 256 disjoint ranges in a plain array. */
typedef struct {
  uintptr_t b;
  size_t n;
} model_range;

static int model_find(const model_range *m, int k, uintptr_t p) {
  for (int i = 0; i < k; i++)
    if (p >= m[i].b && p - m[i].b < m[i].n) return i;
  return -1;
}

static void test_rangemap_model(void **state) {
  (void)state;
  pl_rangemap map = {0};
  model_range model[512];
  int k = 0;
  unsigned seed = 12345;
  for (int op = 0; op < 20000; op++) {
    uintptr_t b = 0x100000 + (uintptr_t)(rand_r(&seed) % 4096) * 256;
    size_t n = 1 + (size_t)(rand_r(&seed) % 2048);
    switch (rand_r(&seed) % 4) {
      case 0: /* insert: overlapping model ranges go, as in the map */
        if (k < 500) {
          for (int i = 0; i < k;)
            if (model[i].b < b + n && b < model[i].b + model[i].n)
              model[i] = model[--k];
            else
              i++;
          model[k++] = (model_range){b, n};
          assert_non_null(pl_rangemap_insert(&map, b, n));
        }
        break;
      case 1: { /* erase exact */
        int i = k ? rand_r(&seed) % k : -1;
        if (i >= 0) {
          assert_true(pl_rangemap_erase(&map, model[i].b));
          model[i] = model[--k];
        } else {
          assert_false(pl_rangemap_erase(&map, b));
        }
        break;
      }
      case 2: { /* erase overlap */
        size_t erased = 0;
        for (int i = 0; i < k;)
          if (model[i].b < b + n && b < model[i].b + model[i].n) {
            model[i] = model[--k];
            erased++;
          } else
            i++;
        assert_int_equal(pl_rangemap_erase_overlap(&map, b, n), erased);
        break;
      }
      default: { /* lookups */
        for (int t = 0; t < 8; t++) {
          uintptr_t p = 0x100000 + (uintptr_t)(rand_r(&seed) % (4096 * 256 + 4096));
          int i = model_find(model, k, p);
          pl_range *r = pl_rangemap_find(&map, p);
          if (i < 0)
            assert_null(r);
          else {
            assert_non_null(r);
            assert_int_equal(r->base, model[i].b);
            assert_int_equal(r->size, model[i].n);
          }
        }
      }
    }
    assert_int_equal(map.count, (size_t)k);
    if (op % 1000 == 0) assert_true(pl_rangemap_check(&map));
  }
  assert_true(pl_rangemap_check(&map));
  pl_rangemap_clear(&map);
  assert_int_equal(map.count, 0);
}

/* The granule map against the same model: inserts erase stale overlaps,
 * exact erase, erase by overlap, lookups anywhere. */
static void test_granmap_model(void **state) {
  (void)state;
  model_range model[512];
  int k = 0;
  unsigned seed = 777;
  const uintptr_t G = 64 << 10, lo = (uintptr_t)1 << 40;
  for (int op = 0; op < 20000; op++) {
    uintptr_t b = lo + (uintptr_t)(rand_r(&seed) % 2048) * 4096;
    size_t n = G + (size_t)(rand_r(&seed) % (4 * G));
    switch (rand_r(&seed) % 4) {
      case 0:
        if (k < 500) {
          for (int i = 0; i < k;)
            if (model[i].b < b + n && b < model[i].b + model[i].n)
              model[i] = model[--k];
            else
              i++;
          model[k++] = (model_range){b, n};
          assert_non_null(pl_granmap_insert(b, n));
        }
        break;
      case 1: {
        int i = k ? rand_r(&seed) % k : -1;
        if (i >= 0) {
          assert_true(pl_granmap_erase(model[i].b));
          model[i] = model[--k];
        }
        break;
      }
      case 2:
        for (int i = 0; i < k;)
          if (model[i].b < b + n && b < model[i].b + model[i].n)
            model[i] = model[--k];
          else
            i++;
        pl_granmap_erase_overlap(b, n);
        break;
      default:
        for (int t = 0; t < 8; t++) {
          uintptr_t p = lo + (uintptr_t)(rand_r(&seed) % (2048 * 4096 + 5 * G));
          int i = model_find(model, k, p);
          pl_range *r = pl_granmap_find(p);
          if (i < 0)
            assert_null(r);
          else {
            assert_non_null(r);
            assert_int_equal(r->base, model[i].b);
            assert_int_equal(r->size, model[i].n);
          }
        }
    }
    if (op % 500 == 0) {
      assert_int_equal(pl_granmap_count(), (size_t)k);
      assert_true(pl_granmap_check());
    }
  }
  pl_granmap_erase_overlap(lo, 2048 * 4096 + 5 * G);
  assert_int_equal(pl_granmap_count(), 0);
  assert_true(pl_granmap_check());
}

static void test_classify_rules(void **state) {
  (void)state;
  char *buf = malloc(1 << 20);
  pl_hostmem_track(buf, 1 << 20, 7);
  uint32_t site = 0;
  /* no driver: the tracked range still gives its site */
  assert_int_equal(pl_hostmem_classify_site((CUdeviceptr)(uintptr_t)(buf + 100), &site, NULL),
                   PAGELOCK_MEM_UNKNOWN);
  assert_int_equal(site, 7);
  pl_hostmem_pinned_add(buf + 4096, 8192, PAGELOCK_MEM_REGISTERED);
  assert_int_equal(pl_hostmem_classify((CUdeviceptr)(uintptr_t)(buf + 4096)),
                   PAGELOCK_MEM_REGISTERED);
  assert_int_equal(pl_hostmem_classify((CUdeviceptr)(uintptr_t)(buf + 4096 + 8191)),
                   PAGELOCK_MEM_REGISTERED);
  assert_int_equal(pl_hostmem_classify((CUdeviceptr)(uintptr_t)(buf + 4096 + 8192)),
                   PAGELOCK_MEM_UNKNOWN);
  pl_hostmem_pinned_remove(buf + 4096);
  assert_int_equal(pl_hostmem_classify((CUdeviceptr)(uintptr_t)(buf + 4096)), PAGELOCK_MEM_UNKNOWN);
  assert_true(pl_hostmem_untrack(buf));
  assert_false(pl_hostmem_untrack(buf));
  assert_int_equal(pl_hostmem_classify_site((CUdeviceptr)(uintptr_t)(buf + 100), &site, NULL),
                   PAGELOCK_MEM_UNKNOWN);
  assert_int_equal(site, 0); /* freed ranges leave the registry at once */
  pl_hostmem_track(buf, 1 << 20, 9);
  pl_hostmem_untrack_range(buf + 5000, 10); /* munmap of part of it */
  assert_int_equal(pl_hostmem_classify_site((CUdeviceptr)(uintptr_t)buf, &site, NULL),
                   PAGELOCK_MEM_UNKNOWN);
  assert_int_equal(site, 0);
  size_t t, p;
  assert_true(pl_hostmem_check(&t, &p));
  assert_int_equal(t, 0);
  assert_int_equal(p, 0);
  free(buf);
}

/* ---- 16 threads at once ------------------------------------------------- */

static volatile int stop;
static void *stress_worker(void *arg) {
  unsigned seed = (unsigned)(uintptr_t)arg;
  char *mine[8] = {0};
  size_t len[8] = {0};
  int pinned[8] = {0};
  long bad = 0;
  while (!__atomic_load_n(&stop, __ATOMIC_RELAXED)) {
    int i = rand_r(&seed) % 8;
    switch (rand_r(&seed) % 4) {
      case 0:
        if (mine[i]) {
          if (pinned[i]) pl_hostmem_pinned_remove(mine[i]);
          pl_hostmem_untrack(mine[i]);
          free(mine[i]);
        }
        len[i] = 65536 + (size_t)(rand_r(&seed) % 500000);
        mine[i] = malloc(len[i]);
        pinned[i] = 0;
        pl_hostmem_track(mine[i], len[i], (uint32_t)(uintptr_t)arg);
        break;
      case 1:
        if (mine[i] && !pinned[i]) {
          pl_hostmem_pinned_add(mine[i], len[i], PAGELOCK_MEM_REGISTERED);
          pinned[i] = 1;
        }
        break;
      case 2:
        if (mine[i] && pinned[i]) {
          pl_hostmem_pinned_remove(mine[i]);
          pinned[i] = 0;
        }
        break;
      default:
        if (mine[i]) {
          uint32_t site;
          int k =
              pl_hostmem_classify_site((CUdeviceptr)(uintptr_t)(mine[i] + len[i] / 2), &site, NULL);
          /* only this thread changes its own ranges: answers must be exact */
          if (pinned[i] ? k != PAGELOCK_MEM_REGISTERED
                        : (k != PAGELOCK_MEM_UNKNOWN || site != (uint32_t)(uintptr_t)arg))
            bad++;
        }
    }
  }
  for (int i = 0; i < 8; i++)
    if (mine[i]) {
      if (pinned[i]) pl_hostmem_pinned_remove(mine[i]);
      pl_hostmem_untrack(mine[i]);
      free(mine[i]);
    }
  return (void *)bad;
}

static void watchdog(int sig) {
  (void)sig;
  static const char msg[] = "test_registry: watchdog: the stress test hung\n";
  if (write(2, msg, sizeof msg - 1)) {}
  _exit(3);
}

static void test_stress_16_threads(void **state) {
  (void)state;
  signal(SIGALRM, watchdog);
  alarm(60);
  pthread_t t[16];
  stop = 0;
  for (long i = 0; i < 16; i++) pthread_create(&t[i], NULL, stress_worker, (void *)(i + 1));
  struct timespec ts = {1, 0};
  nanosleep(&ts, NULL);
  __atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
  long bad = 0;
  for (int i = 0; i < 16; i++) {
    void *r;
    pthread_join(t[i], &r);
    bad += (long)r;
  }
  alarm(0);
  assert_int_equal(bad, 0);
  size_t tracked, pinned;
  assert_true(pl_hostmem_check(&tracked, &pinned));
  assert_int_equal(tracked, 0);
  assert_int_equal(pinned, 0);
}

int main(void) {
  pl_hostmem_init(64 << 10);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rangemap_model),
      cmocka_unit_test(test_granmap_model),
      cmocka_unit_test(test_classify_rules),
      cmocka_unit_test(test_stress_16_threads),
  };
  return cmocka_run_group_tests_name("registry", tests, NULL, NULL);
}
