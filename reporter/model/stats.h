/* stats.h - size buckets and the percentiles of the bandwidth tables. */
#ifndef PLR_STATS_H
#define PLR_STATS_H

#include <stddef.h>
#include <stdint.h>

#define PLR_NSIZE_BUCKETS 6 /* <64K, <1M, <16M, <64M, <256M, >=256M */
unsigned plr_size_bucket(uint64_t bytes);

/* Percentiles of an ascending array, 0 when n is 0.  Median: the
 * middle value, or the mean of the two middle values when n is even.  p10:
 * nearest rank, the value at index ceil(n / 10) - 1. */
double plr_median_sorted(const double *v, size_t n);
double plr_p10_sorted(const double *v, size_t n);
/* The same two values of an array in any order, in linear time
 * (quickselect); v is reordered. */
double plr_median_select(double *v, size_t n);
double plr_p10_select(double *v, size_t n);

#endif
