/* spans.c - interval-set arithmetic over half-open [start, end) spans
 * (spans.h). */
#include "spans.h"

#include <stdlib.h>
#include <string.h>

/* qsort order of spans by start, then end. */
static int plr_cmp_span(const void *a, const void *b) {
  const plr_span *x = a, *y = b;
  if (x->start != y->start) return x->start < y->start ? -1 : 1;
  return x->end < y->end ? -1 : x->end > y->end;
}

/* a < b in plr_cmp_span order, inlined: sorting spans is the hot loop of
 * a big report, and qsort's callback per comparison costs 3x. */
static inline int plr_span_lt(const plr_span *a, const plr_span *b) {
  return a->start < b->start || (a->start == b->start && a->end < b->end);
}

/* Sorts spans: quicksort with a median-of-three pivot (traces arrive
 * nearly sorted), insertion sort for short runs, and qsort once the depth
 * says the input is adversarial, so a hostile trace cannot make it
 * quadratic. */
static void plr_sort_spans(plr_span *v, size_t n, unsigned depth) {
  while (n > 16) {
    if (depth-- == 0) {
      qsort(v, n, sizeof *v, plr_cmp_span);
      return;
    }
    size_t mid = (n - 1) / 2;
    plr_span t;
#define PLR_SWAP(a, b) (t = (a), (a) = (b), (b) = t)
    if (plr_span_lt(&v[mid], &v[0])) PLR_SWAP(v[mid], v[0]);
    if (plr_span_lt(&v[n - 1], &v[mid])) PLR_SWAP(v[n - 1], v[mid]);
    if (plr_span_lt(&v[mid], &v[0])) PLR_SWAP(v[mid], v[0]);
    plr_span p = v[mid];
    ptrdiff_t i = -1, j = (ptrdiff_t)n;
    for (;;) {
      do i++;
      while (plr_span_lt(&v[i], &p));
      do j--;
      while (plr_span_lt(&p, &v[j]));
      if (i >= j) break;
      PLR_SWAP(v[i], v[j]);
    }
#undef PLR_SWAP
    size_t left = (size_t)j + 1;
    /* Recurse into the smaller side, loop on the larger: O(log n) stack. */
    if (left < n - left) {
      plr_sort_spans(v, left, depth);
      v += left;
      n -= left;
    } else {
      plr_sort_spans(v + left, n - left, depth);
      n = left;
    }
  }
  for (size_t i = 1; i < n; i++) {
    plr_span x = v[i];
    size_t k = i;
    while (k > 0 && plr_span_lt(&x, &v[k - 1])) {
      v[k] = v[k - 1];
      k--;
    }
    v[k] = x;
  }
}

size_t plr_spans_normalize(plr_span *v, size_t n) {
  unsigned depth = 0;
  for (size_t k = n; k; k >>= 1) depth += 2;
  plr_sort_spans(v, n, depth);
  size_t m = 0;
  for (size_t i = 0; i < n; i++) {
    if (v[i].end <= v[i].start) continue; /* covers nothing */
    if (m && v[i].start <= v[m - 1].end) {
      if (v[i].end > v[m - 1].end) v[m - 1].end = v[i].end;
    } else {
      v[m++] = v[i];
    }
  }
  return m;
}

uint64_t plr_spans_total(const plr_span *v, size_t n) {
  uint64_t t = 0;
  for (size_t i = 0; i < n; i++) t += v[i].end - v[i].start;
  return t;
}

uint64_t plr_spans_intersect_total(const plr_span *a, size_t na, const plr_span *b, size_t nb) {
  uint64_t t = 0;
  size_t i = 0, j = 0;
  while (i < na && j < nb) {
    uint64_t s = a[i].start > b[j].start ? a[i].start : b[j].start;
    uint64_t e = a[i].end < b[j].end ? a[i].end : b[j].end;
    if (s < e) t += e - s;
    /* The one that ends first cannot meet anything further in the other. */
    if (a[i].end < b[j].end)
      i++;
    else
      j++;
  }
  return t;
}

size_t plr_spans_union(const plr_span *a, size_t na, const plr_span *b, size_t nb, plr_span *out) {
  size_t i = 0, j = 0, m = 0;
  while (i < na || j < nb) {
    plr_span s;
    if (j >= nb || (i < na && a[i].start <= b[j].start))
      s = a[i++];
    else
      s = b[j++];
    if (m && s.start <= out[m - 1].end) {
      if (s.end > out[m - 1].end) out[m - 1].end = s.end;
    } else {
      out[m++] = s;
    }
  }
  return m;
}

/* Inserts gap g into top (longest first, then earlier), keeping max. */
static size_t plr_top_gap(plr_span *top, size_t n, size_t max, plr_span g) {
  uint64_t len = g.end - g.start;
  size_t at = n;
  while (at > 0) {
    uint64_t l = top[at - 1].end - top[at - 1].start;
    /* Gaps arrive in time order, so an equal one already kept is earlier
     * and stays ahead. */
    if (l >= len) break;
    at--;
  }
  if (at >= max) return n;
  size_t keep = n < max ? n : max - 1;
  memmove(top + at + 1, top + at, (keep - at) * sizeof *top);
  top[at] = g;
  return keep + 1;
}

size_t plr_spans_gaps(const plr_span *u, size_t n, plr_span window, uint64_t threshold,
                      plr_span *top, size_t max, uint64_t *count, uint64_t *total) {
  size_t kept = 0;
  *count = 0;
  *total = 0;
  uint64_t cur = window.start;
  for (size_t i = 0; i <= n; i++) {
    uint64_t next = i < n ? u[i].start : window.end;
    if (next > window.end) next = window.end;
    if (next > cur && next - cur >= threshold) {
      plr_span g = {cur, next};
      (*count)++;
      *total += next - cur;
      if (max) kept = plr_top_gap(top, kept, max, g);
    }
    if (i < n && u[i].end > cur) cur = u[i].end;
  }
  return kept;
}

unsigned plr_lane_pick(uint64_t *ends, unsigned *used, unsigned max, uint64_t start, uint64_t end) {
  unsigned l = 0;
  while (l < *used && ends[l] > start) l++;
  if (l == *used && *used < max) {
    ends[(*used)++] = end;
    return l;
  }
  if (l == *used) {
    l = 0;
    for (unsigned k = 1; k < *used; k++)
      if (ends[k] < ends[l]) l = k;
  }
  /* The latest end: an interval forced into a lane can end before the
   * lane's last one. */
  if (end > ends[l]) ends[l] = end;
  return l;
}

int plr_spanvec_add(plr_spanvec *s, uint64_t start, uint64_t end) {
  if (end <= start) return 0;
  if (s->n) {
    plr_span *l = &s->v[s->n - 1];
    if (start <= l->end && l->start <= end) {
      if (start < l->start) l->start = start;
      if (end > l->end) l->end = end;
      return 0;
    }
  }
  if (s->n == s->cap) {
    if (s->n) s->n = plr_spans_normalize(s->v, s->n);
    /* Grow only when merging freed less than half: amortised O(log n)
     * per span, and memory stays near twice the disjoint spans. */
    if (s->n >= s->cap / 2) {
      size_t cap = s->cap ? s->cap * 2 : 16;
      plr_span *v = realloc(s->v, cap * sizeof *v);
      if (!v) return -1;
      s->v = v;
      s->cap = cap;
    }
  }
  s->v[s->n].start = start;
  s->v[s->n].end = end;
  s->n++;
  return 0;
}

void plr_spanvec_free(plr_spanvec *s) {
  free(s->v);
  memset(s, 0, sizeof *s);
}
