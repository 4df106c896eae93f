/* spans.h - sets of half-open time intervals: what the GPU was busy with,
 * hidden or exposed is their union, intersection and gaps. */
#ifndef PLR_SPANS_H
#define PLR_SPANS_H

#include <stddef.h>
#include <stdint.h>

/* A half-open interval [start, end). */
typedef struct plr_span {
  uint64_t start, end;
} plr_span;

/* Interval-set arithmetic.  Inputs need not be sorted or disjoint;
 * plr_spans_normalize sorts in place and merges overlapping/touching spans,
 * returning the new count.  The measures take normalized sets. */
size_t plr_spans_normalize(plr_span *v, size_t n);
uint64_t plr_spans_total(const plr_span *v, size_t n);
uint64_t plr_spans_intersect_total(const plr_span *a, size_t na, const plr_span *b, size_t nb);
/* plr_spans_normalize also drops empty spans (start >= end):
 * they cover nothing, and keeping them would split idle gaps.
 * plr_spans_union writes the union of two normalized sets, normalized, to
 * out (room for na + nb) and returns its count. */
size_t plr_spans_union(const plr_span *a, size_t na, const plr_span *b, size_t nb, plr_span *out);
/* Idle gaps: the parts of window that the normalized set u does
 * not cover, of length >= threshold.  Keeps the max longest in top
 * (longest first, earlier first among equals) and returns how many were
 * kept; *count and *total get the number and summed length of all of
 * them. */
size_t plr_spans_gaps(const plr_span *u, size_t n, plr_span window, uint64_t threshold,
                      plr_span *top, size_t max, uint64_t *count, uint64_t *total);

/* A growable span set, compacted as it grows: a span touching the last
 * one extends it, and a full array is normalized before it is grown. */
typedef struct plr_spanvec {
  plr_span *v;
  size_t n, cap;
} plr_spanvec;

/* Adds [start, end) to s, ignoring an empty span; -1 when out of memory. */
int plr_spanvec_add(plr_spanvec *s, uint64_t start, uint64_t end);
void plr_spanvec_free(plr_spanvec *s);

/* Lanes: intervals, taken in start order, spread over rows so that none
 * overlaps another of its row.  ends[] holds the latest end of each of
 * the *used lanes so far (start with *used 0); returns the lane of
 * [start, end): the first whose intervals all ended by start, else a new
 * one while fewer than max, else the one that ends earliest (the least
 * overlap; only more than max intervals open at once overlap). */
unsigned plr_lane_pick(uint64_t *ends, unsigned *used, unsigned max, uint64_t start, uint64_t end);

#endif
