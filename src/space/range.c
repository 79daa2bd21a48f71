/* 2 MiB ranges of a region, the grain of huge pages: the units in use in each, and what
 * purging one means for its huge page. region.c calls these under region_lock; thp.c
 * decides which ranges become huge pages. */

#include "space/space.h"

/* ---- 2 MiB ranges ---------------------------------------------------------------
 * Each range counts its units in spans, so that placement can fill the fullest range
 * first and the purge thread (thp.c) can find the dense ones to collapse. A range that
 * is a huge page (huge_ranges) stays whole while at least half of it is in use: the
 * timed purge passes it by, and only the budget (region_purge_around) may break it,
 * counted. A range that is all free goes back whole once all of it is due. */
bool range_held(const region_t *r, size_t g) {
  return ((r->huge_ranges | r->advised_ranges) >> g & 1) && r->range_used[g] >= RANGE_UNITS / 2;
}

void ranges_use(region_t *r, size_t from, size_t n, bool add) {
  for (size_t u = from; u < from + n;) {
    size_t g = range_of_unit(u), end = (g + 1) * RANGE_UNITS, take = (end < from + n ? end : from + n) - u;
    r->range_used[g] = (uint8_t)(add ? r->range_used[g] + take : r->range_used[g] - take);
    u += take;
  }
}

/* Units [from, from + n) are being purged: a huge page there goes back whole when the
 * run covers its range, else it is broken (both counted); an advised range is advised
 * back to small pages by the purge thread. */
void ranges_purged(region_t *r, size_t from, size_t n) {
  for (size_t g = range_of_unit(from); g <= range_of_unit(from + n - 1); g++) {
    uint32_t bit = (uint32_t)1 << g;
    r->range_purges[g]++;
    if (r->huge_ranges & bit) {
      bool whole = from <= g * RANGE_UNITS && from + n >= (g + 1) * RANGE_UNITS;
      r->huge_ranges &= ~bit;
      atomic_fetch_sub_explicit(&gstats.thp_huge_bytes, HUGE_PAGE_SIZE, memory_order_relaxed);
      atomic_fetch_add_explicit(whole ? &gstats.thp_returned_whole : &gstats.thp_broken, 1,
                                memory_order_relaxed);
    }
    if (r->advised_ranges & bit) {
      r->advised_ranges &= ~bit;
      r->unadvise_ranges |= bit;
    }
  }
}

/* Pages inside a span purged by its user (uncarved slab heads, a slab's stale tail,
 * free blocks' inner pages): a huge page there is no longer whole, whatever the range's
 * bits say, and while it was taken as whole (range_held) the range's free units stayed
 * resident. Noted without region_lock, which those callers may not take. */
void ranges_note_purged(uintptr_t p, size_t n) {
  region_t *r = region_of(p);
  size_t g0 = (p - (uintptr_t)r) / HUGE_PAGE_SIZE, g1 = (p + n - 1 - (uintptr_t)r) / HUGE_PAGE_SIZE;
  uint32_t mask = (g1 >= 31 ? ~(uint32_t)0 : ((uint32_t)2 << g1) - 1) & ~(((uint32_t)1 << g0) - 1);
  __atomic_fetch_or(&r->broken_ranges, mask, __ATOMIC_RELAXED);
}

/* When unit u, free and resident, may be purged (0: not by the timed pass, a huge page
 * mostly in use; else a time, which may have passed): a huge or advised range that is
 * all free goes whole, when its last unit is due. */
uint64_t range_unit_due(const region_t *r, size_t u, uint64_t now_ms, long delay_ms) {
  size_t g = range_of_unit(u);
  if (range_held(r, g)) return 0;
  uint32_t latest = r->freed_ms[u];
  if (((r->huge_ranges | r->advised_ranges) >> g & 1) && r->range_used[g] == 0) {
    for (size_t v = g * RANGE_UNITS; v < (g + 1) * RANGE_UNITS; v++)
      if (bit_get(r->dirty_bits, v) && (int32_t)(r->freed_ms[v] - latest) > 0) latest = r->freed_ms[v];
  }
  return now_ms + (uint32_t)delay_ms - ((uint32_t)now_ms - latest);
}
