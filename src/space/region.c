/* Regions: 64 MiB aligned mappings cut into 64 KiB units, the header's unit map that
 * takes any address in the region to its slab descriptor in one load (the slow paths';
 * free's fast path reads the same from slab_map.c), and the region map of what each
 * region-sized chunk of the address space is. Mechanism only: which free units to
 * purge, and when, is purge.c's to decide. Everything here runs under region_lock
 * except the lookups in space.h. */

#include "space/space.h"

#include <string.h>

#define REGION_MAGIC 0x68616b6d656d5247ull /* "hakmemRG" */

_Static_assert(sizeof(region_t) <= REGION_HEADER_UNITS * UNIT_SIZE, "header too big");
_Static_assert(sizeof(slab_t) == 128, "slab descriptor layout changed");
_Static_assert(UNIT_SIZE / 16 + 1 < UINT16_MAX, "a slab's `used` (and its pin) must fit 16 bits");
_Static_assert(offsetof(slab_t, free) == 64,
               "the owner's free lists must not share the line other threads read");

/* One byte per possible region in the address space: 2 MiB of zero-filled .bss whose
 * pages only become resident where regions exist. A pointer's region kind is one load.
 * On x86-64 in .lbss, which the linker puts after all of .bss: in the middle, it would
 * split the library's other statics, and the pages of both parts would be resident.
 * (GCC knows .lbss for zero-filled there; elsewhere it would be 2 MiB of file.) */
#if defined(__x86_64__) && !defined(__clang__)
#define REGION_MAP_SECTION __attribute__((section(".lbss")))
#else
#define REGION_MAP_SECTION
#endif
uint8_t region_map[REGION_MAP_ENTRIES] REGION_MAP_SECTION;

/* Units that no span covers (and the header unit) map to this descriptor: its owner
 * matches no heap and its magic rejects every offset, so a free there is reported. */
slab_t region_free_unit_slab = {.owner = OWNER_NONE, .div_magic = 0};

pthread_mutex_t region_lock = PTHREAD_MUTEX_INITIALIZER;
region_t *regions;           /* all regions, newest first */
static size_t empty_regions; /* regions with every unit free */
size_t region_dirty_units;   /* free units of all regions that may be resident */
size_t region_used_units;    /* units in spans */

/* Where a span of n units goes: the place whose units hold the most resident pages
 * (reused memory faults no page in), then the shortest free run (best fit keeps long
 * runs for big spans). Within its run a span sits at one end, so that what is left stays
 * in one piece, unless the run's resident units lie between. A slab-sized span takes
 * the first place that is all resident in a short run; a bigger one looks on for an
 * exact fit. (A slab that took the end of a long run, the place a freed big block left,
 * kept the next big block out of it: fresh pages, and the budget purging others.) */
#define SMALL_SPAN_UNITS 16
#define SHORT_RUN_UNITS (4 * SMALL_SPAN_UNITS)
typedef struct span_place {
  region_t *region;
  size_t first, dirty, run, full; /* full: units in use in the range holding `first` */
} span_place_t;

static bool place_is_final(const span_place_t *p, size_t n) {
  return p->region != NULL && p->dirty == n &&
         (p->run == n || (n <= SMALL_SPAN_UNITS && p->run <= SHORT_RUN_UNITS));
}

static void consider_region(region_t *r, size_t n, span_place_t *best) {
  for (size_t a = next_bit(r->free_bits, 1, true); a < UNITS_PER_REGION;) {
    size_t b = next_bit(r->free_bits, a, false), run = b - a;
    if (run >= n) {
      size_t in_run = r->dirty_free_units ? count_bits(r->dirty_bits, a, run) : 0;
      size_t at = a, dirty = in_run ? count_bits(r->dirty_bits, a, n) : 0;
      size_t end_dirty = in_run ? count_bits(r->dirty_bits, b - n, n) : 0;
      if (end_dirty > dirty) {
        at = b - n;
        dirty = end_dirty;
      }
      if (dirty < n && in_run > dirty) { /* slide a window of n units along the run */
        size_t d = count_bits(r->dirty_bits, a, n);
        for (size_t p = a + 1; p + n <= b; p++) {
          d += (size_t)bit_get(r->dirty_bits, p + n - 1);
          d -= (size_t)bit_get(r->dirty_bits, p - 1);
          if (d > dirty) {
            dirty = d;
            at = p;
          }
        }
      }
      /* Then the shortest run (best fit: large churn faulted 1.3x more with the fullest
       * range first), then the fullest 2 MiB range. */
      size_t full = r->range_used[range_of_unit(at)];
      if (best->region == NULL || dirty > best->dirty ||
          (dirty == best->dirty && (run < best->run || (run == best->run && full > best->full)))) {
        *best = (span_place_t){r, at, dirty, run, full};
        if (place_is_final(best, n)) return;
      }
    }
    a = b < UNITS_PER_REGION ? next_bit(r->free_bits, b, true) : b;
  }
}

static span_place_t find_place(size_t n) {
  span_place_t best = {NULL, 0, 0, 0, 0};
  for (region_t *r = regions; r != NULL; r = r->next) {
    if (r->free_units < n) continue;
    /* A region with fewer resident free units cannot do better. */
    if (best.region != NULL && r->dirty_free_units < best.dirty) continue;
    consider_region(r, n, &best);
    if (place_is_final(&best, n)) break;
  }
  return best;
}
static bool region_is_empty(const region_t *r) { return r->free_units == r->span_units; }
/* 64 MiB, or under an address-space limit (ulimit -v) leaving no room for that and its
 * over-mapping, the largest power of two holding the header and `units` at that alignment. */
static region_t *region_map_new(size_t units, size_t *mapped) {
  region_t *r = os_map_aligned(*mapped = REGION_SIZE, REGION_SIZE);
  for (*mapped /= 2; r == NULL && os_address_space_limited() &&
                     *mapped >= (REGION_HEADER_UNITS + HAKMEM_SECURE + units) * UNIT_SIZE;
       *mapped /= 2)
    if ((r = os_map_aligned_part(*mapped, REGION_SIZE)) != NULL)
      return atomic_fetch_add_explicit(&gstats.short_mappings, 1, memory_order_relaxed), r;
  return *mapped = REGION_SIZE, r;
}
static region_t *region_create(size_t units) {
  size_t mapped;
  region_t *r = region_map_new(units, &mapped);
  if (r == NULL) return NULL;
  slab_map_init();
  if (!slab_map_add_region(r)) {
    os_unmap(r, mapped);
    return NULL;
  }
  /* Faults get small pages whatever the THP mode, a big heap's new regions aside
   * (range_thp.c); a dense range is collapsed (thp.c). */
  if (!opt.thp || os_thp_mode() != OS_THP_MADVISE) os_set_huge_pages(r, mapped, false);
  if (thp_fault_ahead) ranges_advise_new(r, mapped);
  r->magic = REGION_MAGIC;
  r->mapped_units = (uint32_t)(mapped / UNIT_SIZE); /* less the header and hardened guard: */
  r->span_units = r->mapped_units - REGION_HEADER_UNITS - HAKMEM_SECURE;
  r->free_units = r->span_units; /* the rest reads as zero */
  bits_set_range(r->free_bits, REGION_HEADER_UNITS, r->span_units, true);
  r->range_used[0] = REGION_HEADER_UNITS;
  if (HAKMEM_SECURE) r->range_used[(r->mapped_units - 1) / RANGE_UNITS]++; /* the guard */
  if (HAKMEM_SECURE) secure_guard_region(r);
  for (size_t u = 0; u < UNITS_PER_REGION; u++) r->unit_map[u] = &region_free_unit_slab;
  r->next = regions;
  r->prev = NULL;
  if (regions) regions->prev = r;
  regions = r;
  empty_regions++;
  region_map[(uintptr_t)r >> REGION_SHIFT] = MAP_REGION;
  atomic_fetch_add_explicit(&gstats.region_bytes, mapped, memory_order_relaxed);
  atomic_fetch_add_explicit(&gstats.committed_est, 2 * os_page_size(), memory_order_relaxed);
  return r;
}

/* An empty region leaves every list and map; nothing can reach it any more, and the
 * caller unmaps it (region_unmap_detached), with or without region_lock. */
static void region_detach(region_t *r) {
  if (r->prev) r->prev->next = r->next;
  else regions = r->next;
  if (r->next) r->next->prev = r->prev;
  empty_regions--;
  region_dirty_units -= r->dirty_free_units;
  size_t committed = (size_t)r->dirty_free_units * UNIT_SIZE + 2 * os_page_size();
  region_map[(uintptr_t)r >> REGION_SHIFT] = MAP_NONE;
  if (r->huge_ranges) {
    size_t n = popcount64(r->huge_ranges);
    atomic_fetch_sub_explicit(&gstats.thp_huge_bytes, n * HUGE_PAGE_SIZE, memory_order_relaxed);
    atomic_fetch_add_explicit(&gstats.thp_returned_whole, n, memory_order_relaxed);
  }
  slab_map_remove_region(r);
  atomic_fetch_sub_explicit(&gstats.region_bytes, (size_t)r->mapped_units * UNIT_SIZE, memory_order_relaxed);
  atomic_fetch_sub_explicit(&gstats.committed_est, committed, memory_order_relaxed);
  atomic_fetch_add_explicit(&gstats.released_bytes, committed, memory_order_relaxed);
}

void region_unmap_detached(region_t *r) { os_unmap(r, (size_t)r->mapped_units * UNIT_SIZE); }

static void region_destroy(region_t *r) {
  region_detach(r);
  region_unmap_detached(r);
}

/* An empty region beyond HAKMEM_REGION_CACHE is unmapped once it holds no resident
 * free pages; before that it is kept, like any free memory, for reuse. */
bool region_release_if_spare(region_t *r) {
  if (!region_is_empty(r) || r->dirty_free_units != 0 || r->pins != 0 ||
      empty_regions <= (size_t)opt.region_cache)
    return false;
  region_destroy(r);
  return true;
}

static void purge_units(region_t *r, size_t from, size_t n) {
  ranges_purged(r, from, n);
  os_purge((char *)r + from * UNIT_SIZE, n * UNIT_SIZE);
  bits_set_range(r->dirty_bits, from, n, false);
  memset(&r->touched_pages[from], 0, n);
  r->dirty_free_units -= (uint32_t)n;
  region_dirty_units -= n;
  atomic_fetch_sub_explicit(&gstats.committed_est, n * UNIT_SIZE, memory_order_relaxed);
  atomic_fetch_add_explicit(&gstats.purged_bytes, n * UNIT_SIZE, memory_order_relaxed);
}

slab_t *region_alloc_span(size_t units, bool *fresh) {
  span_place_t place = find_place(units);
  region_t *r = place.region;
  size_t first = place.first;
  if (r == NULL) {
    r = region_create(units);
    if (r == NULL) return NULL;
    first = REGION_HEADER_UNITS;
  }
  if (region_is_empty(r)) empty_regions--;
  size_t touched = 0;
  for (size_t u = first; u < first + units; u++) {
    if (bit_get(r->dirty_bits, u)) {
      touched = (u - first) * UNIT_SIZE + ((size_t)r->touched_pages[u] << TOUCH_SHIFT);
      r->touched_pages[u] = 0;
      r->dirty_free_units--;
      region_dirty_units--;
    } else {
      atomic_fetch_add_explicit(&gstats.committed_est, UNIT_SIZE, memory_order_relaxed);
    }
  }
  bits_set_range(r->free_bits, first, units, false);
  bits_set_range(r->dirty_bits, first, units, true); /* its new user will touch it */
  r->free_units -= (uint32_t)units;
  ranges_use(r, first, units, true);
  region_used_units += units;
  *fresh = place.dirty < units;
  if (HAK_UNLIKELY(r->fault_ranges != 0)) region_dirty_units += ranges_fault(r, first, units);
  slab_t *s = &r->slabs[first];
  memset(s, 0, sizeof *s);
  s->units = (uint16_t)units;
  s->unit_idx = (uint16_t)first;
  s->touched = (uint32_t)touched;
  for (size_t u = first; u < first + units; u++)
    __atomic_store_n(&r->unit_map[u], s, __ATOMIC_RELAXED); /* region_slab_of_racy */
  slab_map_set(s, first, units, true);
  return s;
}

void region_free_span(slab_t *s, uint64_t now_ms) {
  region_t *r = region_of((uintptr_t)s);
  size_t first = s->unit_idx, units = s->units;
  /* The span wrote a prefix of itself: the units past it are free and clean. */
  size_t touched = s->touched, dirty = 0, first_dirty = units;
  __atomic_store_n(&s->owner, OWNER_NONE, __ATOMIC_RELEASE);
  for (size_t u = first; u < first + units; u++) {
    size_t off = (u - first) * UNIT_SIZE;
    size_t t = touched > off ? touched - off : 0;
    if (t > UNIT_SIZE) t = UNIT_SIZE;
    __atomic_store_n(&r->unit_map[u], &region_free_unit_slab, __ATOMIC_RELAXED);
    r->freed_ms[u] = (uint32_t)now_ms;
    r->touched_pages[u] = (uint8_t)((t + ((size_t)1 << TOUCH_SHIFT) - 1) >> TOUCH_SHIFT);
    /* In a huge page (or an advised range, which may be one) every page is resident:
     * the unit stays dirty (reading as zero past what it wrote), for the purge to see. */
    if (t > 0 || ((r->huge_ranges | r->advised_ranges) >> range_of_unit(u) & 1)) {
      dirty++;
      if (first_dirty == units) first_dirty = u - first;
    } else {
      bits_set_range(r->dirty_bits, u, 1, false);
    }
  }
  slab_map_set(s, first, units, false);
  if (dirty < units)
    atomic_fetch_sub_explicit(&gstats.committed_est, (units - dirty) * UNIT_SIZE, memory_order_relaxed);
  bits_set_range(r->free_bits, first, units, true);
  r->free_units += (uint32_t)units;
  ranges_use(r, first, units, false);
  r->dirty_free_units += (uint32_t)dirty;
  region_dirty_units += dirty;
  region_used_units -= units;
  if (region_is_empty(r)) empty_regions++;
  if (opt.purge_delay_ms == 0 && dirty > 0)
    for (size_t u = first + first_dirty, run; u < first + units; u += run + 1) {
      for (run = 0; u + run < first + units && bit_get(r->dirty_bits, u + run);) run++;
      if (run) purge_units(r, u, run);
    }
  /* Keep a few empty regions for reuse; give the rest back once their pages are purged
   * (at once if they are, or by the purge pass or the budget). */
  region_release_if_spare(r);
}

/* Were all of r's resident free units freed delay_ms ago or more? */
static bool region_all_due(const region_t *r, uint64_t now_ms, long delay_ms) {
  for (size_t w = 0; w < UNITS_PER_REGION / 64; w++) {
    for (uint64_t m = r->free_bits[w] & r->dirty_bits[w]; m != 0; m &= m - 1) {
      size_t u = w * 64 + (size_t)__builtin_ctzll(m);
      if ((uint32_t)now_ms - r->freed_ms[u] < (uint32_t)delay_ms) return false;
    }
  }
  return true;
}

/* From unit *u on, the next run of resident free units freed delay_ms ago or more: its
 * length, with *u at its start (0: none left in r). Units not due yet lower *next_due. */

static size_t next_due_run(const region_t *r, size_t *u, uint64_t now_ms, long delay_ms, uint64_t *next_due) {
  for (size_t a = *u; r->dirty_free_units > 0 && a < UNITS_PER_REGION; a++) {
    if (!bit_get(r->free_bits, a) || !bit_get(r->dirty_bits, a)) continue;
    size_t run = 0;
    for (uint64_t due; a + run < UNITS_PER_REGION && bit_get(r->free_bits, a + run) &&
                       bit_get(r->dirty_bits, a + run) &&
                       (due = range_unit_due(r, a + run, now_ms, delay_ms)) != 0 && due <= now_ms;)
      run++;
    if (run != 0) {
      *u = a;
      return run;
    }
    uint64_t due = range_unit_due(r, a, now_ms, delay_ms);
    if (due == 0) { /* a huge page held whole: the rest of its range is too */
      a = (range_of_unit(a) + 1) * RANGE_UNITS - 1;
      continue;
    }
    if (*next_due == 0 || due < *next_due) *next_due = due;
  }
  return 0;
}

size_t region_purge_due(uint64_t now_ms, long delay_ms, bool release_regions, uint64_t *next_due) {
  size_t purged = 0;
  region_t *r = regions;
  while (r != NULL) {
    region_t *next = r->next;
    ranges_fold(r);
    /* An empty region that is not kept goes at once when its pages are due: munmap
     * frees them, a purge first would only walk them twice. */
    bool empty = region_is_empty(r);
    if (empty && r->pins == 0 &&
        (release_regions ||
         (empty_regions > (size_t)opt.region_cache && region_all_due(r, now_ms, delay_ms)))) {
      purged += (size_t)r->dirty_free_units * UNIT_SIZE;
      region_destroy(r);
      r = next;
      continue;
    }
    for (size_t u = 1, run; (run = next_due_run(r, &u, now_ms, delay_ms, next_due)) != 0; u += run) {
      purge_units(r, u, run);
      purged += run * UNIT_SIZE;
    }
    region_release_if_spare(r);
    r = next;
  }
  return purged;
}

/* The purge pass of the purge thread, in two steps so that no syscall runs under
 * region_lock: region_take_due takes the due runs of resident free units out of the
 * free units (neither free nor in a span, so nothing can allocate them while their
 * pages go) and detaches the empty regions beyond the cache whose pages are all due;
 * the caller then purges and unmaps them without the lock, and region_return_purged
 * gives the runs back as clean free units. Returns the runs taken; *more: there were
 * more than `max`, or more than REGION_TAKE_UNITS units (call again): what the purge
 * thread holds out of reach at once stays small, so that a slow path's purge pass,
 * should the purge thread be slow to run, still finds the rest. */
#define REGION_TAKE_UNITS 256
size_t region_take_due(uint64_t now_ms, long delay_ms, region_run_t *runs, size_t max, region_t **gone,
                       size_t *gone_count, uint64_t *next_due, bool *more) {
  size_t n = 0, g = 0, taken = 0;
  *more = false;
  region_t *r = regions;
  while (r != NULL) {
    region_t *next = r->next;
    ranges_fold(r);
    bool empty = region_is_empty(r);
    if (empty && r->pins == 0 && empty_regions > (size_t)opt.region_cache &&
        region_all_due(r, now_ms, delay_ms)) {
      if (g == max) {
        *more = true;
        break;
      }
      region_detach(r);
      gone[g++] = r;
      r = next;
      continue;
    }
    for (size_t u = 1, run; (run = next_due_run(r, &u, now_ms, delay_ms, next_due)) != 0; u += run) {
      if (n == max || taken >= REGION_TAKE_UNITS) {
        *more = true;
        *gone_count = g;
        return n;
      }
      if (run > REGION_TAKE_UNITS - taken) { /* cut at a range's end: no huge page split */
        size_t cut = REGION_TAKE_UNITS - taken, end = (u + cut) & ~(RANGE_UNITS - 1);
        run = end > u ? end - u : cut;
      }
      taken += run;
      ranges_purged(r, u, run);
      if (region_is_empty(r)) empty_regions--;
      bits_set_range(r->free_bits, u, run, false);
      r->free_units -= (uint32_t)run;
      runs[n++] = (region_run_t){r, (uint32_t)u, (uint32_t)run};
    }
    r = next;
  }
  *gone_count = g;
  return n;
}

void region_return_purged(const region_run_t *runs, size_t n) {
  for (size_t i = 0; i < n; i++) {
    region_t *r = runs[i].region;
    size_t from = runs[i].first, units = runs[i].units;
    bits_set_range(r->dirty_bits, from, units, false);
    memset(&r->touched_pages[from], 0, units);
    r->dirty_free_units -= (uint32_t)units;
    region_dirty_units -= units;
    bits_set_range(r->free_bits, from, units, true);
    r->free_units += (uint32_t)units;
    if (region_is_empty(r)) empty_regions++;
    atomic_fetch_sub_explicit(&gstats.committed_est, units * UNIT_SIZE, memory_order_relaxed);
    atomic_fetch_add_explicit(&gstats.purged_bytes, units * UNIT_SIZE, memory_order_relaxed);
  }
}

/* The resident free unit freed longest ago (age measured at clock_ms), or false. Units
 * of huge pages held whole come last: the budget breaks one (counted) only when no
 * other resident free memory is left to purge. */
bool region_oldest_dirty(uint32_t clock_ms, region_t **region, size_t *unit, uint32_t *age) {
  region_t *oldest = NULL;
  bool oldest_held = false;
  for (region_t *r = regions; r != NULL; r = r->next) {
    if (r->dirty_free_units == 0) continue;
    for (size_t w = 0; w < UNITS_PER_REGION / 64; w++) {
      for (uint64_t m = r->free_bits[w] & r->dirty_bits[w]; m != 0; m &= m - 1) {
        size_t u = w * 64 + (size_t)__builtin_ctzll(m);
        uint32_t a = clock_ms - r->freed_ms[u];
        bool held = range_held(r, range_of_unit(u));
        if (oldest == NULL || (oldest_held && !held) || (held == oldest_held && a > *age)) {
          oldest_held = held;
          oldest = r;
          *unit = u;
          *age = a;
        }
      }
    }
  }
  *region = oldest;
  return oldest != NULL;
}

/* Purges `need` units from the resident free unit `at` and its resident free
 * neighbours (fewer if the run is shorter); the region goes if it is now spare. */
void region_purge_around(region_t *r, size_t at, size_t need) {
  size_t from = at, to = at + 1;
  atomic_fetch_add_explicit(&gstats.purge_budget_runs, 1, memory_order_relaxed);
  while (to - from < need && to < UNITS_PER_REGION && bit_get(r->free_bits, to) && bit_get(r->dirty_bits, to))
    to++;
  while (to - from < need && bit_get(r->free_bits, from - 1) && bit_get(r->dirty_bits, from - 1)) from--;
  purge_units(r, from, to - from);
  region_release_if_spare(r);
}

/* A huge mapping leaves the region map and goes back to the OS. */
void region_map_unmap(uintptr_t base, size_t map_size) {
  for (uintptr_t c = base; c < base + map_size; c += REGION_SIZE) region_map[c >> REGION_SHIFT] = MAP_NONE;
  os_unmap((void *)base, map_size);
  atomic_fetch_add_explicit(&gstats.released_bytes, map_size, memory_order_relaxed);
}

/* Grow a span in place over the free units right after it. Returns the new unit count
 * or 0 when they are not free. */
size_t region_grow_span(slab_t *s, size_t new_units) {
  region_t *r = region_of((uintptr_t)s);
  size_t end = (size_t)s->unit_idx + s->units, want_end = (size_t)s->unit_idx + new_units;
  if (want_end > UNITS_PER_REGION) return 0;
  for (size_t u = end; u < want_end; u++)
    if (!bit_get(r->free_bits, u)) return 0;
  for (size_t u = end; u < want_end; u++) {
    if (bit_get(r->dirty_bits, u)) {
      r->dirty_free_units--;
      region_dirty_units--;
      r->touched_pages[u] = 0;
    } else atomic_fetch_add_explicit(&gstats.committed_est, UNIT_SIZE, memory_order_relaxed);
    __atomic_store_n(&r->unit_map[u], s, __ATOMIC_RELAXED);
  }
  slab_map_set(s, end, want_end - end, true);
  bits_set_range(r->free_bits, end, want_end - end, false);
  bits_set_range(r->dirty_bits, end, want_end - end, true);
  r->free_units -= (uint32_t)(want_end - end);
  ranges_use(r, end, want_end - end, true);
  region_used_units += want_end - end;
  if (HAK_UNLIKELY(r->fault_ranges != 0)) region_dirty_units += ranges_fault(r, end, want_end - end);
  s->units = (uint16_t)new_units;
  return new_units;
}

/* Cuts s to new_units; returns the tail's descriptor, for the caller to free, or NULL. */
slab_t *region_shrink_span(slab_t *s, size_t new_units) {
  region_t *r = region_of((uintptr_t)s);
  size_t from = (size_t)s->unit_idx + new_units, n = s->units - new_units;
  if (n == 0) return NULL;
  slab_t *tail = &r->slabs[from];
  size_t keep = new_units * UNIT_SIZE;
  memset(tail, 0, sizeof *tail);
  tail->units = (uint16_t)n;
  tail->unit_idx = (uint16_t)from;
  tail->touched = s->touched > keep ? (uint32_t)(s->touched - keep) : 0;
  if (s->touched > keep) s->touched = (uint32_t)keep;
  s->units = (uint16_t)new_units;
  return tail;
}
