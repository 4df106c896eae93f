/* stats.c - size buckets and percentiles (stats.h). */
#include "stats.h"

#include <stdlib.h>

#define PLR_MIB (1ull << 20)

unsigned plr_size_bucket(uint64_t bytes) {
  if (bytes < (64ull << 10)) return 0;
  if (bytes < PLR_MIB) return 1;
  if (bytes < 16 * PLR_MIB) return 2;
  if (bytes < 64 * PLR_MIB) return 3;
  if (bytes < 256 * PLR_MIB) return 4;
  return 5;
}

double plr_median_sorted(const double *v, size_t n) {
  if (!n) return 0;
  if (n % 2) return v[n / 2];
  return (v[n / 2 - 1] + v[n / 2]) / 2;
}

double plr_p10_sorted(const double *v, size_t n) {
  if (!n) return 0;
  size_t rank = (n + 9) / 10; /* ceil(n / 10), >= 1 */
  return v[rank - 1];
}

/* qsort order of doubles, ascending. */
static int plr_cmp_dbl(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The k-th smallest of v[0..n) (0-based), moving it to v[k] with no larger
 * value before it and no smaller after: quickselect, median-of-three
 * pivots, qsort past a depth limit. */
static double plr_select(double *v, size_t n, size_t k) {
  size_t lo = 0, hi = n - 1;
  unsigned depth = 0;
  for (size_t m = n; m; m >>= 1) depth += 2;
  while (hi > lo) {
    if (depth-- == 0) {
      qsort(v + lo, hi - lo + 1, sizeof *v, plr_cmp_dbl);
      break;
    }
    size_t mid = lo + (hi - lo) / 2;
    double t;
#define PLR_SWAP(a, b) (t = (a), (a) = (b), (b) = t)
    if (v[mid] < v[lo]) PLR_SWAP(v[mid], v[lo]);
    if (v[hi] < v[mid]) PLR_SWAP(v[hi], v[mid]);
    if (v[mid] < v[lo]) PLR_SWAP(v[mid], v[lo]);
    double p = v[mid];
    ptrdiff_t i = (ptrdiff_t)lo - 1, j = (ptrdiff_t)hi + 1;
    for (;;) {
      do i++;
      while (v[i] < p);
      do j--;
      while (p < v[j]);
      if (i >= j) break;
      PLR_SWAP(v[i], v[j]);
    }
#undef PLR_SWAP
    /* v[lo..j] <= p <= v[j+1..hi] */
    if (k <= (size_t)j)
      hi = (size_t)j;
    else
      lo = (size_t)j + 1;
  }
  return v[k];
}

double plr_median_select(double *v, size_t n) {
  if (!n) return 0;
  double hi = plr_select(v, n, n / 2);
  if (n % 2) return hi;
  /* Everything before index n/2 is <= hi now: the other middle value is
   * their maximum. */
  double lo = v[0];
  for (size_t i = 1; i < n / 2; i++)
    if (v[i] > lo) lo = v[i];
  return (lo + hi) / 2;
}

double plr_p10_select(double *v, size_t n) {
  if (!n) return 0;
  return plr_select(v, n, (n + 9) / 10 - 1);
}
