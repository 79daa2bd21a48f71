/* Huge pages: which 2 MiB ranges of the regions become transparent huge pages, and when.
 *
 * Regions are advised MADV_NOHUGEPAGE when they are mapped, so that every fault, on any
 * system THP mode, gets a small page and never waits for the kernel to compact memory,
 * and a process that holds a few MiB has no huge page at all. The purge thread, once
 * THP_MIN_IN_USE is in spans, looks for ranges that are dense (region.c: 3/4 of their
 * units in spans, 7/8 in spans or resident free units; here: 7/8 of their pages
 * resident) and collapses each into one huge page with MADV_COLLAPSE, off every malloc
 * path. Placement (region.c) fills the fullest range first, so ranges fill up and fall
 * free together; purging gives a huge page back whole and breaks one only when the
 * budget needs its free units (counted). A range whose units are all in spans and
 * whose pages are all resident is collapsed at its first look: it is no frontier.
 *
 * A heap that grows fast past THP_GROW_MIN gets huge pages before it writes them: at
 * each pass the purge thread makes as many fresh ranges (no unit in a span, no page
 * resident) huge pages as the heap grew by since the pass before (at most 1/32 of what
 * is in spans, THP_FRESH_MAX), with one page populated and MADV_COLLAPSE, which fills
 * the rest with zeros: no copy, and no fault for the 511 other pages. Their units are
 * then resident free units, which placement takes first; what the heap does not take
 * within the purge delay goes back whole. A process below THP_GROW_MIN, one that
 * stopped growing, or one under a memory limit (limit.soft/hard) gets none.
 *
 * Huge blocks (over 32 MiB, mappings of their own) are thp_blocks.c's.
 *
 * Off with HAKMEM_THP=0, THP `never` or PR_SET_THP_DISABLE (asked at every pass), and
 * without the purge thread. */

#include "space/space.h"

/* Ranges looked at per pass: a collapse copies 2 MiB (1-4 ms here), and the pass must
 * not keep the purge thread from purging for long. */
#define THP_BATCH 8
#define THP_MIN_RESIDENT_PAGES (HUGE_PAGE_SIZE / 4096 * 7 / 8)

/* ---- candidates, under region_lock ------------------------------------------------
 * A range is worth a collapse when at least 3/4 of its units are in spans and 7/8 are
 * in spans or resident free units (reused first, by placement); thp.c then asks the
 * kernel how many of its pages are resident before it collapses. Each range is looked
 * at once per THP_LOOK_MS at most, and collapsed only when the look before found the
 * same resident pages and units in spans: a range still being written (the frontier of
 * a growing heap) is left alone, because every access to a range waits while it is
 * collapsed (the kernel clears its page table entry for the copy). A candidate's region
 * is pinned (never unmapped) until region_thp_done. */
#define COLLAPSE_MIN_USED (RANGE_UNITS * 3 / 4)
/* Hardened build: all of them, since units no span has taken yet are inaccessible
 * (secure_hooks.c), and a collapse fails on a range that holds one. */
#define COLLAPSE_MIN_RESIDENT (HAKMEM_SECURE ? RANGE_UNITS : RANGE_UNITS * 7 / 8)
#define THP_LOOK_MS 1000u
#define THP_LOOK_FULL_MS 100u           /* a range all in spans: looked at again this soon */
#define THP_GROW_MIN ((size_t)32 << 20) /* in spans, before fresh ranges are made huge */
#define THP_FRESH_MAX 16                /* fresh ranges made huge in a pass, at most */

size_t region_thp_candidates(uint32_t now_ms, bool collapse, region_range_t *out, size_t max) {
  size_t n = 0;
  for (region_t *r = regions; r != NULL && n < max; r = r->next) {
    ranges_fold(r);
    for (size_t g = 0; g < RANGES_PER_REGION && n < max; g++) {
      uint32_t bit = (uint32_t)1 << g;
      bool unadvise = r->unadvise_ranges & bit;
      if (!unadvise) {
        uint32_t look_ms = r->range_used[g] == RANGE_UNITS ? THP_LOOK_FULL_MS : THP_LOOK_MS;
        if (!collapse || ((r->huge_ranges | r->advised_ranges) & bit) ||
            r->range_used[g] < COLLAPSE_MIN_USED ||
            (r->range_look_ms[g] != 0 && now_ms - r->range_look_ms[g] < look_ms))
          continue;
        size_t first = g * RANGE_UNITS, resident = r->range_used[g];
        for (size_t u = first; u < first + RANGE_UNITS; u++)
          resident += bit_get(r->free_bits, u) && bit_get(r->dirty_bits, u);
        if (resident < COLLAPSE_MIN_RESIDENT) continue;
        r->range_look_ms[g] = now_ms | 1;
      }
      r->unadvise_ranges &= ~bit;
      r->pins++;
      out[n++] = (region_range_t){r,     (uint32_t)g,      r->range_purges[g],     unadvise,
                                  false, r->range_used[g], r->range_seen_pages[g], r->range_seen_used[g],
                                  0};
    }
  }
  return n;
}

/* A forked child has no pass in flight: the parent's pins are not its, and would keep
 * their regions mapped for good. */
void thp_atfork_child(void) {
  for (region_t *r = regions; r != NULL; r = r->next) r->pins = 0;
}

size_t region_thp_fresh(region_range_t *out, size_t max) {
  size_t n = 0;
  for (region_t *r = regions; r != NULL && n < max; r = r->next) {
    if (r->free_units < RANGE_UNITS || r->dirty_free_units + RANGE_UNITS > r->free_units) continue;
    for (size_t g = 1; g < RANGES_PER_REGION && n < max; g++) {
      uint32_t bit = (uint32_t)1 << g;
      size_t first = g * RANGE_UNITS;
      if (r->range_used[g] != 0 ||
          ((r->huge_ranges | r->advised_ranges | r->unadvise_ranges | r->fault_ranges) & bit) ||
          first + RANGE_UNITS > r->mapped_units ||
          count_bits(r->free_bits, first, RANGE_UNITS) != RANGE_UNITS ||
          count_bits(r->dirty_bits, first, RANGE_UNITS) != 0 ||
          /* Hardened: a unit no span has opened is inaccessible, and MADV_COLLAPSE of a
           * range split by protections collapses nothing yet returns 0. */
          (HAKMEM_SECURE && count_bits(r->open_bits, first, RANGE_UNITS) != RANGE_UNITS))
        continue;
      r->pins++;
      out[n++] = (region_range_t){r, (uint32_t)g, r->range_purges[g], false, true, 0, 0, 0, 0};
    }
  }
  return n;
}

/* Regions mapped before the heap was big: the ranges of theirs that no span has used
 * yet (all free, none resident, never purged, so no page table under them) are advised
 * too, as new regions are (region.c), off region_lock. Each region is pinned meanwhile. */
typedef struct fault_advice {
  region_t *region;
  uint32_t ranges;
} fault_advice_t;
#define FAULT_ADVICE_MAX 16

static size_t region_thp_fault_ahead(fault_advice_t *out) {
  size_t n = 0;
  for (region_t *r = regions; r != NULL && n < FAULT_ADVICE_MAX; r = r->next) {
    uint32_t mask = 0, skip = r->huge_ranges | r->advised_ranges | r->unadvise_ranges | r->fault_ranges;
    for (size_t g = 1; g < RANGES_PER_REGION && (g + 1) * RANGE_UNITS <= r->mapped_units; g++) {
      size_t first = g * RANGE_UNITS;
      if ((skip >> g & 1) || r->range_used[g] != 0 || r->range_purges[g] != 0 ||
          count_bits(r->free_bits, first, RANGE_UNITS) != RANGE_UNITS ||
          count_bits(r->dirty_bits, first, RANGE_UNITS) != 0)
        continue;
      mask |= (uint32_t)1 << g;
    }
    if (mask == 0) continue;
    r->fault_ranges |= mask;
    r->pins++;
    out[n++] = (fault_advice_t){r, mask};
  }
  return n;
}

static void thp_advise_ahead(const fault_advice_t *a, size_t n) {
  for (size_t i = 0; i < n; i++) {
    for (uint32_t m = a[i].ranges; m != 0;) {
      uint32_t g = (uint32_t)__builtin_ctz(m), len = (uint32_t)__builtin_ctz(~(m >> g));
      os_set_huge_pages((char *)a[i].region + (size_t)g * HUGE_PAGE_SIZE, (size_t)len * HUGE_PAGE_SIZE, true);
      m &= ~((len >= 32 ? ~(uint32_t)0 : ((uint32_t)1 << len) - 1) << g);
    }
  }
}

void region_thp_done(const region_range_t *c, region_thp_outcome_t outcome, uint32_t now_ms) {
  region_t *r = c->region;
  size_t g = c->range;
  uint32_t bit = (uint32_t)1 << g;
  bool unchanged = r->range_purges[g] == c->purges; /* nothing in it purged meanwhile */
  if (outcome == THP_NOT_DONE && c->pages != 0) {   /* what this look saw, for the next */
    r->range_seen_pages[g] = c->pages;
    r->range_seen_used[g] = c->used;
  }
  if (outcome == THP_COLLAPSED && unchanged) {
    /* Every page of the range is resident now; the ones no span wrote read as zero. */
    r->huge_ranges |= bit;
    atomic_fetch_add_explicit(&gstats.thp_huge_bytes, HUGE_PAGE_SIZE, memory_order_relaxed);
    for (size_t u = g * RANGE_UNITS; u < (g + 1) * RANGE_UNITS; u++) {
      if (!bit_get(r->free_bits, u) || bit_get(r->dirty_bits, u)) continue;
      /* Hardened: a unit never opened stays clean, so that the span that takes it
       * opens it (span_alloc); marked dirty, it would be handed out inaccessible. */
      if (HAKMEM_SECURE && !bit_get(r->open_bits, u)) continue;
      bits_set_range(r->dirty_bits, u, 1, true);
      r->touched_pages[u] = 0;
      r->freed_ms[u] = now_ms;
      r->dirty_free_units++;
      region_dirty_units++;
      atomic_fetch_add_explicit(&gstats.committed_est, UNIT_SIZE, memory_order_relaxed);
    }
  } else if (outcome == THP_ADVISED) {
    if (unchanged) r->advised_ranges |= bit;
    else r->unadvise_ranges |= bit; /* purged meanwhile: small pages again */
  }
  r->pins--;
  region_release_if_spare(r);
}

/* Is the candidate's range as it was when picked, after the collapses before it in the
 * batch (no span taken or given back there, nothing purged)? */
bool region_thp_still_dense(const region_range_t *c) {
  pthread_mutex_lock(&region_lock);
  bool dense = c->region->range_used[c->range] == c->used && c->region->range_purges[c->range] == c->purges;
  pthread_mutex_unlock(&region_lock);
  return dense;
}

bool region_thp_min_in_use(size_t bytes) { return region_used_units * UNIT_SIZE >= bytes; }

/* MADV_COLLAPSE failed with EINVAL while THP was allowed: the kernel lacks it, and dense
 * ranges are advised MADV_HUGEPAGE instead, for khugepaged (no further tries). */
static _Atomic bool collapse_missing;

static region_thp_outcome_t thp_do(region_range_t *c) {
  void *p = (char *)c->region + (size_t)c->range * HUGE_PAGE_SIZE;
  if (c->unadvise) {
    os_set_huge_pages(p, HUGE_PAGE_SIZE, false);
    return THP_NOT_DONE;
  }
  bool missing = opt.thp_no_collapse || atomic_load_explicit(&collapse_missing, memory_order_relaxed);
  if (c->fresh) {
    /* Populating a page, and collapsing, keep what a span taken meanwhile wrote there. */
    if (missing || !os_populate(p, os_page_size())) return THP_NOT_DONE;
    os_collapse_t how = os_collapse(p, HUGE_PAGE_SIZE, false);
    if (how != OS_COLLAPSED) {
      atomic_fetch_add_explicit(&gstats.thp_failed, 1, memory_order_relaxed);
      if (how == OS_COLLAPSE_ADVISED) { /* no MADV_COLLAPSE: no advice left for faults there */
        os_set_huge_pages(p, HUGE_PAGE_SIZE, false);
        if (os_thp_allowed()) atomic_store_explicit(&collapse_missing, true, memory_order_relaxed);
      }
      return THP_NOT_DONE;
    }
    atomic_fetch_add_explicit(&gstats.thp_fresh, 1, memory_order_relaxed);
    return THP_COLLAPSED;
  }
  if (!region_thp_still_dense(c)) return THP_NOT_DONE;
  size_t pages = os_resident_pages(p, HUGE_PAGE_SIZE);
  c->pages = (uint16_t)(pages + 1);
  bool full = c->used == RANGE_UNITS && pages == HUGE_PAGE_SIZE / 4096;
  if (!full && (pages < THP_MIN_RESIDENT_PAGES || c->pages != c->seen_pages || c->used != c->seen_used))
    return THP_NOT_DONE; /* not dense, or still changing: looked at again later */
  switch (os_collapse(p, HUGE_PAGE_SIZE, missing)) {
  case OS_COLLAPSED:
    atomic_fetch_add_explicit(&gstats.thp_collapsed, 1, memory_order_relaxed);
    return THP_COLLAPSED;
  case OS_COLLAPSE_ADVISED:
    atomic_fetch_add_explicit(&gstats.thp_failed, 1, memory_order_relaxed);
    if (!os_thp_allowed()) { /* PR_SET_THP_DISABLE since the pass began */
      os_set_huge_pages(p, HUGE_PAGE_SIZE, false);
      return THP_NOT_DONE;
    }
    atomic_store_explicit(&collapse_missing, true, memory_order_relaxed);
    atomic_fetch_add_explicit(&gstats.thp_advised, 1, memory_order_relaxed);
    return THP_ADVISED;
  case OS_COLLAPSE_FAILED: /* no free huge page now (EAGAIN, ENOMEM): later, maybe */
    atomic_fetch_add_explicit(&gstats.thp_failed, 1, memory_order_relaxed);
    return THP_NOT_DONE;
  }
  return THP_NOT_DONE;
}

/* Units in spans at the last pass (the purge thread's own). */
static size_t thp_last_used;

/* How many fresh ranges to make huge now, under region_lock: enough for the growth since
 * the last pass, less the resident free units placement takes first. */
static size_t fresh_wanted(bool allowed) {
  size_t used = region_used_units, grown = used > thp_last_used ? used - thp_last_used : 0;
  thp_last_used = used;
  /* Under a memory limit nothing is made resident ahead of use: no limit admits it. */
  if (!allowed || limits_set() || opt.thp_no_collapse ||
      atomic_load_explicit(&collapse_missing, memory_order_relaxed) || used * UNIT_SIZE < THP_GROW_MIN)
    return 0;
  size_t target = grown < used / 32 ? grown : used / 32;
  if (target > THP_FRESH_MAX * RANGE_UNITS) target = THP_FRESH_MAX * RANGE_UNITS;
  return target > region_dirty_units ? (target - region_dirty_units + RANGE_UNITS - 1) / RANGE_UNITS : 0;
}

size_t thp_pass(uint64_t now_ms) {
  if (!opt.thp) return 0;
  bool allowed = os_thp_allowed();
  region_range_t c[THP_FRESH_MAX + THP_BATCH];
  region_thp_outcome_t out[THP_FRESH_MAX + THP_BATCH];
  pthread_mutex_lock(&region_lock);
  /* HAKMEM_THP=collapse: a huge fault costs the malloc that takes it the zeroing of 2 MiB,
   * and on a VM the host's backing of it (huge-pages.md, "Costs"); collapses do not. */
  thp_fault_ahead = allowed && !HAKMEM_SECURE && !opt.thp_collapse_only && !limits_set() &&
                    region_used_units * UNIT_SIZE >= THP_GROW_MIN;
  fault_advice_t ahead[FAULT_ADVICE_MAX];
  size_t n_ahead = thp_fault_ahead ? region_thp_fault_ahead(ahead) : 0;
  size_t n = region_thp_fresh(c, fresh_wanted(allowed));
  n += region_thp_candidates((uint32_t)now_ms, allowed && region_thp_min_in_use(THP_MIN_IN_USE), c + n,
                             THP_BATCH);
  pthread_mutex_unlock(&region_lock);
  if (n_ahead != 0) {
    thp_advise_ahead(ahead, n_ahead);
    pthread_mutex_lock(&region_lock);
    for (size_t i = 0; i < n_ahead; i++) {
      ahead[i].region->pins--;
      region_release_if_spare(ahead[i].region);
    }
    pthread_mutex_unlock(&region_lock);
  }
  size_t collapsed = 0;
  for (size_t i = 0; i < n; i++) {
    out[i] = thp_do(&c[i]);
    collapsed += out[i] == THP_COLLAPSED;
  }
  if (n != 0) {
    pthread_mutex_lock(&region_lock);
    for (size_t i = 0; i < n; i++) region_thp_done(&c[i], out[i], (uint32_t)now_ms);
    pthread_mutex_unlock(&region_lock);
  }
  /* Huge blocks: not where collapses are only advised (no MADV_COLLAPSE). */
  if (allowed && !opt.thp_no_collapse && !atomic_load_explicit(&collapse_missing, memory_order_relaxed))
    collapsed += thp_blocks_pass();
  return collapsed;
}
