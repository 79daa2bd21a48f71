/* The slab map: one word per 64 KiB unit of the address space, so that free finds a
 * block's slab descriptor with a shift and one load — and finds, with the same load, that
 * a pointer lies in no region (the header's unit map needs the region map's check
 * first: 13 instructions where this takes 7).
 *
 * The map is 16 GiB of address space reserved read-only: no commit charge and no RSS,
 * since untouched pages read as the kernel's zero page. The two pages that cover a region
 * (1024 units, 8 KiB) are made writable when the region is mapped and dropped again when
 * it is unmapped. An entry holds its descriptor's offset from the map's start, so a zero
 * entry leads to the map's first 128 bytes: the entries of the lowest megabyte of the
 * address space, where no region can lie, which stay zero and read as a descriptor no
 * heap owns (owner word OWNER_NONE). Units of a region that no slab covers keep zero
 * entries too: a free there takes the slow path, which asks the region header.
 *
 * Where the reservation fails (an address-space limit), slab_map_units stays 0 and every
 * free takes that slow path. Entries are written under region_lock, read without it. */
#include "space/space.h"

uintptr_t *slab_map;
size_t slab_map_units;

#define SLAB_MAP_UNITS ((size_t)1 << (ADDRESS_BITS - UNIT_SHIFT))
#define MAP_PAGE_BYTES (UNITS_PER_REGION * sizeof(uintptr_t)) /* 8 KiB: one region */

_Static_assert(MAP_PAGE_BYTES % 4096 == 0, "a region's entries must fill whole pages");
_Static_assert(sizeof(slab_t) <= UNITS_PER_REGION * sizeof(uintptr_t),
               "the zero descriptor must lie in the entries of region 0");

/* Once: regions mapped without the map have no writable entries, so a map reserved
 * later could not describe them. */
void slab_map_init(void) {
  static bool tried;
  if (tried) return;
  tried = true;
  void *p = os_reserve_readonly(SLAB_MAP_UNITS * sizeof(uintptr_t));
  if (p == NULL) return;
  slab_map = p;
  __atomic_store_n(&slab_map_units, SLAB_MAP_UNITS, __ATOMIC_RELEASE);
}

static uintptr_t *region_entries(const region_t *r) { return slab_map + ((uintptr_t)r >> UNIT_SHIFT); }

bool slab_map_add_region(const region_t *r) {
  if (slab_map == NULL) return true;
  return os_set_writable(region_entries(r), MAP_PAGE_BYTES, true);
}

void slab_map_remove_region(const region_t *r) {
  if (slab_map == NULL) return;
  uintptr_t *e = region_entries(r);
  os_purge(e, MAP_PAGE_BYTES); /* reads as zero again */
  os_set_writable(e, MAP_PAGE_BYTES, false);
}

void slab_map_set(const slab_t *s, size_t first, size_t units, bool live) {
  if (slab_map == NULL) return;
  uintptr_t *e = region_entries(region_of((uintptr_t)s)) + first;
  uintptr_t v = live ? (uintptr_t)s - (uintptr_t)slab_map : 0;
  for (size_t u = 0; u < units; u++) __atomic_store_n(&e[u], v, __ATOMIC_RELEASE);
}
