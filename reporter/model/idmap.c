/* idmap.c - the join's id maps, rings and pools (idmap.h). */
#include "idmap.h"

#include <stdlib.h>
#include <string.h>

/* A 64-bit finaliser: correlation ids and seqs are dense integers, which
 * would cluster badly under linear probing without mixing. */
static size_t plr_mix(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdull;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ull;
  k ^= k >> 33;
  return (size_t)k;
}

size_t plr_map_find(const plr_map *m, uint64_t key) {
  if (!m->cap) return SIZE_MAX;
  size_t mask = m->cap - 1;
  for (size_t i = plr_mix(key) & mask;; i = (i + 1) & mask) {
    if (m->vals[i] == PLR_NIL) return SIZE_MAX;
    if (m->keys[i] == key) return i;
  }
}

/* Grows at 70% load so probe runs stay short. */
int plr_map_put(plr_map *m, uint64_t key, uint32_t val) {
  if ((m->n + 1) * 10 > m->cap * 7) {
    size_t cap = m->cap ? m->cap * 2 : 64;
    uint64_t *k = malloc(cap * sizeof *k);
    uint32_t *v = malloc(cap * sizeof *v);
    if (!k || !v) {
      free(k);
      free(v);
      return -1;
    }
    for (size_t i = 0; i < cap; i++) v[i] = PLR_NIL;
    for (size_t i = 0; i < m->cap; i++) {
      if (m->vals[i] == PLR_NIL) continue;
      size_t j = plr_mix(m->keys[i]) & (cap - 1);
      while (v[j] != PLR_NIL) j = (j + 1) & (cap - 1);
      k[j] = m->keys[i];
      v[j] = m->vals[i];
    }
    free(m->keys);
    free(m->vals);
    m->keys = k;
    m->vals = v;
    m->cap = cap;
  }
  size_t mask = m->cap - 1, i = plr_mix(key) & mask;
  while (m->vals[i] != PLR_NIL) i = (i + 1) & mask;
  m->keys[i] = key;
  m->vals[i] = val;
  m->n++;
  return 0;
}

/* Shifts later members of the slot's probe run back so that lookups never
 * stop early (no tombstones to accumulate). */
void plr_map_del(plr_map *m, size_t i) {
  size_t mask = m->cap - 1;
  m->vals[i] = PLR_NIL;
  m->n--;
  for (size_t j = (i + 1) & mask; m->vals[j] != PLR_NIL; j = (j + 1) & mask) {
    size_t home = plr_mix(m->keys[j]) & mask;
    /* j may move to the hole at i unless its home lies cyclically in
     * (i, j]. */
    int stay = i <= j ? (home > i && home <= j) : (home > i || home <= j);
    if (stay) continue;
    m->keys[i] = m->keys[j];
    m->vals[i] = m->vals[j];
    m->vals[j] = PLR_NIL;
    i = j;
  }
}

void plr_map_free(plr_map *m) {
  free(m->keys);
  free(m->vals);
  memset(m, 0, sizeof *m);
}

int plr_ring_init(plr_ring *r, size_t cap) {
  memset(r, 0, sizeof *r);
  r->keys = malloc(cap * sizeof *r->keys);
  if (!r->keys) return -1;
  r->cap = cap;
  return 0;
}

size_t plr_ring_find(const plr_ring *r, uint64_t key) {
  size_t slot = plr_map_find(&r->m, key);
  return slot == SIZE_MAX ? SIZE_MAX : r->m.vals[slot];
}

size_t plr_ring_put(plr_ring *r, uint64_t key) {
  if (r->n == r->cap) {
    size_t slot = plr_map_find(&r->m, r->keys[r->pos]);
    if (slot != SIZE_MAX) plr_map_del(&r->m, slot);
    r->n--;
  }
  size_t at = r->pos;
  if (plr_map_put(&r->m, key, (uint32_t)at)) return SIZE_MAX;
  r->keys[at] = key;
  r->pos = (r->pos + 1) % r->cap;
  r->n++;
  return at;
}

void plr_ring_free(plr_ring *r) {
  plr_map_free(&r->m);
  free(r->keys);
  memset(r, 0, sizeof *r);
}

int plr_pool_grow(void **v, size_t *cap, size_t n, size_t elem) {
  if (n < *cap) return 0;
  if (*cap >= PLR_NIL / 2) return -1; /* indices must stay below PLR_NIL */
  size_t c = *cap ? *cap * 2 : 64;
  void *p = realloc(*v, c * elem);
  if (!p) return -1;
  *v = p;
  *cap = c;
  return 0;
}
