/* idmap.h - the tables the GPU join keeps its calls in (gpu_model.c):
 * 64-bit ids (CUPTI correlations, copy seqs) mapped to 32-bit slots of
 * arrays that grow as pools.
 *
 * Not uthash: a trace whose GPU records come last keeps every call of
 * the run in these at once, and they take 12 bytes a slot in two flat
 * arrays, where a uthash entry carries a 56-byte handle and an allocation
 * of its own. */
#ifndef PLR_IDMAP_H
#define PLR_IDMAP_H

#include <stddef.h>
#include <stdint.h>

/* The value no slot has: marks an empty map slot and the end of a chain
 * of pool slots. */
#define PLR_NIL UINT32_MAX

/* An open-addressing map u64 -> u32, linear probing. */
typedef struct plr_map {
  uint64_t *keys;
  uint32_t *vals; /* PLR_NIL marks an empty slot */
  size_t cap;     /* power of two, or 0 */
  size_t n;
} plr_map;

/* The slot holding key, or SIZE_MAX. */
size_t plr_map_find(const plr_map *m, uint64_t key);
/* Inserts key (which must be absent) with val; -1 when out of memory. */
int plr_map_put(plr_map *m, uint64_t key, uint32_t val);
/* Empties slot i (a slot plr_map_find returned). */
void plr_map_del(plr_map *m, size_t i);
/* Frees the map's arrays and leaves it empty. */
void plr_map_free(plr_map *m);

/* A map whose oldest key is forgotten when it holds cap keys: a key's
 * value is its slot in the ring, where the caller keeps its payload (an
 * array of cap elements). */
typedef struct plr_ring {
  plr_map m;
  uint64_t *keys;
  size_t cap, pos, n;
} plr_ring;

/* An empty ring of cap keys; -1 when out of memory. */
int plr_ring_init(plr_ring *r, size_t cap);
/* The ring slot of key, or SIZE_MAX. */
size_t plr_ring_find(const plr_ring *r, uint64_t key);
/* Adds key (absent), forgetting the oldest key when full; returns its ring
 * slot, or SIZE_MAX when out of memory. */
size_t plr_ring_put(plr_ring *r, uint64_t key);
void plr_ring_free(plr_ring *r);

/* Grows a pool array *v of *cap elements of elem bytes, n of them used, so
 * that it holds one more; -1 when out of memory, or when a slot index
 * would reach PLR_NIL. */
int plr_pool_grow(void **v, size_t *cap, size_t n, size_t elem);

#endif
