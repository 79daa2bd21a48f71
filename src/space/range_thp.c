/* 2 MiB ranges that fault huge pages, and huge pages broken behind region.c's back:
 * the bookkeeping region.c calls under region_lock, kept out of the hot text (cold
 * code: only a heap past 32 MiB, or one with huge pages, runs it).
 *
 * A big heap that grows gets huge pages at its first faults: thp.c sets thp_fault_ahead
 * at each purge-thread pass, and while it is set every region mapped is advised
 * MADV_HUGEPAGE past its header's range (ranges_advise_new; thp.c advises the unused
 * ranges of older regions). So a fill pays neither a copy nor 512 faults per 2 MiB,
 * and the purge thread has nothing to collapse there. The first span taken in such a
 * range makes all of it resident, so its free units are counted resident from then on
 * (ranges_fault), and the range is an advised one: held while half in use, given back
 * whole, advised back to small pages once purged in part. */

#include "space/space.h"

bool thp_fault_ahead;

void ranges_advise_new(region_t *r, size_t mapped) {
  if (!thp_fault_ahead || mapped < 2 * HUGE_PAGE_SIZE) return;
  os_set_huge_pages((char *)r + HUGE_PAGE_SIZE, mapped - HUGE_PAGE_SIZE, true);
  size_t ranges = mapped / HUGE_PAGE_SIZE;
  r->fault_ranges = (ranges >= 32 ? ~(uint32_t)0 : ((uint32_t)1 << ranges) - 1) & ~(uint32_t)1;
}

size_t ranges_fault(region_t *r, size_t from, size_t n) {
  uint32_t now = (uint32_t)os_now_ms();
  size_t marked = 0;
  for (size_t g = range_of_unit(from); g <= range_of_unit(from + n - 1); g++) {
    uint32_t bit = (uint32_t)1 << g;
    if (!(r->fault_ranges & bit)) continue;
    r->fault_ranges &= ~bit;
    r->advised_ranges |= bit;
    atomic_fetch_add_explicit(&gstats.thp_faulted, 1, memory_order_relaxed);
    for (size_t u = g * RANGE_UNITS; u < (g + 1) * RANGE_UNITS; u++) {
      if (!bit_get(r->free_bits, u) || bit_get(r->dirty_bits, u)) continue;
      bits_set_range(r->dirty_bits, u, 1, true);
      r->touched_pages[u] = 0; /* a fresh huge page reads as zero */
      r->freed_ms[u] = now;
      r->dirty_free_units++;
      marked++;
    }
  }
  atomic_fetch_add_explicit(&gstats.committed_est, marked * UNIT_SIZE, memory_order_relaxed);
  return marked;
}

/* What span_purge noted (range.c: ranges_note_purged): a huge page there is broken
 * (counted), an advised range is advised back to small pages. */
void ranges_fold_broken(region_t *r, uint32_t broken) {
  for (; broken != 0; broken &= broken - 1) {
    uint32_t g = (uint32_t)__builtin_ctz(broken), bit = (uint32_t)1 << g;
    r->range_purges[g]++; /* a collapse in flight there must not count it whole */
    if (r->huge_ranges & bit) {
      r->huge_ranges &= ~bit;
      atomic_fetch_sub_explicit(&gstats.thp_huge_bytes, HUGE_PAGE_SIZE, memory_order_relaxed);
      atomic_fetch_add_explicit(&gstats.thp_broken, 1, memory_order_relaxed);
    }
    if (r->advised_ranges & bit) {
      r->advised_ranges &= ~bit;
      r->unadvise_ranges |= bit;
    }
  }
}
