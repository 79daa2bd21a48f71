/* The hardened build's hooks into the lower layers: size words written as slabs are
 * carved (in random order), and the inaccessible units of each region (its last, and
 * those no span has taken yet). The default
 * build compiles none of it; its callers' `if (HAKMEM_SECURE)` branches fold away. */

#include "space/space.h"

#if HAKMEM_SECURE

/* New blocks get a size word (so the block after them can check it) and join the
 * free list in random order. */
void secure_carve(slab_t *s, uintptr_t first, uint32_t n) {
  static _Atomic uint64_t rng;
  uint64_t x = atomic_fetch_add_explicit(&rng, 0x9e3779b97f4a7c15ull, memory_order_relaxed) ^ list_key;
  uint16_t order[UNIT_SIZE / 32];
  if (n > sizeof order / sizeof order[0]) n = sizeof order / sizeof order[0];
  for (uint32_t i = 0; i < n; i++) {
    order[i] = (uint16_t)i;
    secure_size_encode(secure_size_word(first + (uintptr_t)i * s->block_size, s->block_size), 0);
  }
  if (first == s->start) secure_size_encode((uintptr_t *)(first - 8), 0); /* guard before block 0 */
  for (uint32_t i = n; i > 1; i--) {                                      /* Fisher-Yates with splitmix64 */
    x += 0x9e3779b97f4a7c15ull;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    uint32_t j = (uint32_t)(z % i);
    uint16_t t = order[i - 1];
    order[i - 1] = order[j];
    order[j] = t;
  }
  for (uint32_t i = 0; i < n; i++) {
    block_t *b = (block_t *)(first + (uintptr_t)order[i] * s->block_size);
    block_set_next(b, s->free);
    s->free = b;
  }
}

void secure_protect(uintptr_t a, size_t len, bool accessible) {
  if (!os_protect((void *)a, len, accessible)) error_fatal("mprotect failed for a guard page");
}

/* A new region's units past its header are inaccessible: the last one for good (a
 * guard), the others until a span first takes them (secure_open_units), so that a run
 * off a block into units no span has used yet faults. A unit stays open once opened. */
void secure_guard_region(region_t *r) {
  uintptr_t from = (uintptr_t)r + (size_t)REGION_HEADER_UNITS * UNIT_SIZE;
  secure_protect(from, ((size_t)r->mapped_units - REGION_HEADER_UNITS) * UNIT_SIZE, false);
}
void secure_open_units(const slab_t *s, size_t from, size_t units) {
  secure_protect(slab_base(s) + from * UNIT_SIZE, units * UNIT_SIZE, true);
  bits_set_range(region_of((uintptr_t)s)->open_bits, s->unit_idx + from, units, true);
}

#endif /* HAKMEM_SECURE */
