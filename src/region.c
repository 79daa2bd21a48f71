/* Regions: 32 MiB aligned mappings cut into 64 KiB units, the unit map that takes any
 * address to its slab descriptor in one load, and purging of free units.
 * Everything here runs under region_lock except the lookups in internal.h. */

#include "internal.h"

#include <stddef.h>
#include <string.h>

#define REGION_MAGIC 0x68616b6d656d5247ull /* "hakmemRG" */

_Static_assert(sizeof(hak_region_t) <= REGION_HEADER_UNITS * UNIT_SIZE, "header too big");
_Static_assert(sizeof(hak_slab_t) == 128, "slab descriptor layout changed");
_Static_assert(offsetof(hak_slab_t, remote) == 64, "remote frees must not share the owner's line");

/* One byte per possible region in the address space: 4 MiB of zero-filled .bss whose
 * pages only become resident where regions exist. A pointer's region kind is one load. */
uint8_t region_map[REGION_MAP_ENTRIES];

/* Units that no span covers (and the header unit) map to this descriptor: its owner
 * matches no heap and its magic rejects every offset, so a free there is reported. */
hak_slab_t region_free_unit_slab = {.owner = OWNER_NONE, .div_magic = 0};

pthread_mutex_t region_lock = PTHREAD_MUTEX_INITIALIZER;
static hak_region_t *regions;  /* all regions, newest first */
static size_t empty_regions;   /* regions with every unit free */
static uint64_t next_purge_ms; /* earliest time a purge pass can find work */
static size_t dirty_units;     /* free units of all regions that may be resident */
static size_t used_units;      /* units in spans */

/* Free memory kept resident for reuse is bounded: beyond 8 MiB plus an eighth of the
 * memory in use, a freed span is purged at once instead of after the delay. */
static bool over_dirty_budget(void) {
  return dirty_units * UNIT_SIZE > ((size_t)8 << 20) + used_units * UNIT_SIZE / 8;
}

static inline bool bit_get(const uint64_t *bits, size_t i) { return (bits[i >> 6] >> (i & 63)) & 1; }

static void bits_set_range(uint64_t *bits, size_t from, size_t n, bool value) {
  for (size_t i = from; i < from + n; i++) {
    uint64_t m = (uint64_t)1 << (i & 63);
    if (value) bits[i >> 6] |= m;
    else bits[i >> 6] &= ~m;
  }
}

/* First run of n free units, or 0 (header units are never free). With `dirty`, only
 * units that may still be resident count, so reuse comes before first touch. */
static size_t find_free_run(const hak_region_t *r, size_t n, bool dirty) {
  size_t run = 0;
  for (size_t w = 0; w < UNITS_PER_REGION / 64; w++) {
    uint64_t word = r->free_bits[w] & (dirty ? r->dirty_bits[w] : ~(uint64_t)0);
    if (word == 0) { run = 0; continue; }
    if (word == ~(uint64_t)0 && run + 64 < n) { run += 64; continue; }
    for (size_t b = 0; b < 64; b++) {
      if ((word >> b) & 1) {
        if (++run == n) return w * 64 + b + 1 - n;
      } else {
        run = 0;
      }
    }
  }
  return 0;
}

static hak_region_t *region_create(void) {
  hak_region_t *r = os_map_aligned(REGION_SIZE, REGION_SIZE);
  if (r == NULL) return NULL;
  os_set_huge_pages(r, REGION_SIZE, hak_opt.thp);
  r->magic = REGION_MAGIC;
  r->free_units = REGION_MAX_SPAN_UNITS;
  r->dirty_free_units = 0;
  for (size_t w = 0; w < UNITS_PER_REGION / 64; w++) r->free_bits[w] = ~(uint64_t)0;
  r->free_bits[0] &= ~(((uint64_t)1 << REGION_HEADER_UNITS) - 1); /* the header */
  if (HAKMEM_SECURE) { /* the last unit guards the next region */
    r->free_bits[UNITS_PER_REGION / 64 - 1] &= ~((uint64_t)1 << 63);
    secure_guard_region(r);
  }
  for (size_t u = 0; u < UNITS_PER_REGION; u++) r->unit_map[u] = &region_free_unit_slab;
  r->next = regions;
  r->prev = NULL;
  if (regions) regions->prev = r;
  regions = r;
  empty_regions++;
  region_map[(uintptr_t)r >> REGION_SHIFT] = MAP_REGION;
  atomic_fetch_add_explicit(&hak_gstats.region_bytes, REGION_SIZE, memory_order_relaxed);
  atomic_fetch_add_explicit(&hak_gstats.committed_est, 2 * os_page_size(), memory_order_relaxed);
  return r;
}

static void region_destroy(hak_region_t *r) {
  if (r->prev) r->prev->next = r->next;
  else regions = r->next;
  if (r->next) r->next->prev = r->prev;
  empty_regions--;
  dirty_units -= r->dirty_free_units;
  size_t committed = (size_t)r->dirty_free_units * UNIT_SIZE + 2 * os_page_size();
  region_map[(uintptr_t)r >> REGION_SHIFT] = MAP_NONE;
  os_unmap(r, REGION_SIZE);
  atomic_fetch_sub_explicit(&hak_gstats.region_bytes, REGION_SIZE, memory_order_relaxed);
  atomic_fetch_sub_explicit(&hak_gstats.committed_est, committed, memory_order_relaxed);
  atomic_fetch_add_explicit(&hak_gstats.released_bytes, committed, memory_order_relaxed);
}

hak_slab_t *region_alloc_span(size_t units) {
  hak_region_t *r = NULL;
  size_t first = 0;
  /* Free units that are still resident first: taking a clean one while a dirty one
   * waits for the purge would make both resident. */
  if (dirty_units >= units) {
    for (r = regions; r != NULL; r = r->next) {
      if (r->dirty_free_units >= units && (first = find_free_run(r, units, true)) != 0) break;
    }
  }
  if (r == NULL) {
    for (r = regions; r != NULL; r = r->next) {
      if (r->free_units >= units && (first = find_free_run(r, units, false)) != 0) break;
    }
  }
  if (r == NULL) {
    r = region_create();
    if (r == NULL) return NULL;
    first = REGION_HEADER_UNITS;
  }
  if (r->free_units == REGION_MAX_SPAN_UNITS) empty_regions--;
  size_t touched = 0;
  for (size_t u = first; u < first + units; u++) {
    if (bit_get(r->dirty_bits, u)) {
      touched = (u - first) * UNIT_SIZE + ((size_t)r->touched_pages[u] << TOUCH_SHIFT);
      r->touched_pages[u] = 0;
      r->dirty_free_units--;
      dirty_units--;
    } else {
      atomic_fetch_add_explicit(&hak_gstats.committed_est, UNIT_SIZE, memory_order_relaxed);
    }
  }
  bits_set_range(r->free_bits, first, units, false);
  bits_set_range(r->dirty_bits, first, units, true); /* its new user will touch it */
  r->free_units -= (uint32_t)units;
  used_units += units;
  hak_slab_t *s = &r->slabs[first];
  memset(s, 0, sizeof *s);
  s->units = (uint16_t)units;
  s->unit_idx = (uint16_t)first;
  s->touched = (uint32_t)touched;
  for (size_t u = first; u < first + units; u++) r->unit_map[u] = s;
  return s;
}

static void purge_units(hak_region_t *r, size_t from, size_t n) {
  os_purge((char *)r + from * UNIT_SIZE, n * UNIT_SIZE);
  bits_set_range(r->dirty_bits, from, n, false);
  memset(&r->touched_pages[from], 0, n);
  r->dirty_free_units -= (uint32_t)n;
  dirty_units -= n;
  atomic_fetch_sub_explicit(&hak_gstats.committed_est, n * UNIT_SIZE, memory_order_relaxed);
  atomic_fetch_add_explicit(&hak_gstats.purged_bytes, n * UNIT_SIZE, memory_order_relaxed);
}

void region_free_span(hak_slab_t *s, uint64_t now_ms) {
  hak_region_t *r = region_of((uintptr_t)s);
  size_t first = s->unit_idx, units = s->units;
  /* The span wrote a prefix of itself: the units past it are free and clean. */
  size_t touched = s->touched, dirty = 0;
  __atomic_store_n(&s->owner, OWNER_NONE, __ATOMIC_RELEASE);
  for (size_t u = first; u < first + units; u++) {
    size_t off = (u - first) * UNIT_SIZE;
    size_t t = touched > off ? touched - off : 0;
    if (t > UNIT_SIZE) t = UNIT_SIZE;
    r->unit_map[u] = &region_free_unit_slab;
    r->freed_ms[u] = (uint32_t)now_ms;
    r->touched_pages[u] = (uint8_t)((t + ((size_t)1 << TOUCH_SHIFT) - 1) >> TOUCH_SHIFT);
    if (t > 0) dirty++;
  }
  if (dirty < units) {
    bits_set_range(r->dirty_bits, first + dirty, units - dirty, false);
    atomic_fetch_sub_explicit(&hak_gstats.committed_est, (units - dirty) * UNIT_SIZE,
                              memory_order_relaxed);
  }
  bits_set_range(r->free_bits, first, units, true);
  r->free_units += (uint32_t)units;
  r->dirty_free_units += (uint32_t)dirty;
  dirty_units += dirty;
  used_units -= units;
  if (dirty == 0) {
    /* nothing to purge */
  } else if (hak_opt.purge_delay_ms == 0 || (hak_opt.purge_delay_ms > 0 && over_dirty_budget())) {
    purge_units(r, first, dirty);
  } else if (hak_opt.purge_delay_ms > 0) {
    uint64_t due = now_ms + (uint64_t)hak_opt.purge_delay_ms;
    if (next_purge_ms == 0 || due < next_purge_ms) next_purge_ms = due;
  }
  if (r->free_units == REGION_MAX_SPAN_UNITS) {
    empty_regions++;
    /* Keep a few empty regions for reuse; give the rest back at once. */
    if (empty_regions > (size_t)hak_opt.region_cache) region_destroy(r);
  }
}

size_t region_purge(uint64_t now_ms, long delay_ms, bool release_regions) {
  if (delay_ms < 0) return 0;
  if (delay_ms > 0 && (next_purge_ms == 0 || now_ms < next_purge_ms)) return 0;
  size_t purged = 0;
  uint64_t next_due = 0;
  hak_region_t *r = regions;
  while (r != NULL) {
    hak_region_t *next = r->next;
    if (release_regions && r->free_units == REGION_MAX_SPAN_UNITS) {
      purged += (size_t)r->dirty_free_units * UNIT_SIZE;
      region_destroy(r);
      r = next;
      continue;
    }
    for (size_t u = 1; r->dirty_free_units > 0 && u < UNITS_PER_REGION;) {
      if (!bit_get(r->free_bits, u) || !bit_get(r->dirty_bits, u)) { u++; continue; }
      size_t run = 0;
      while (u + run < UNITS_PER_REGION && bit_get(r->free_bits, u + run) &&
             bit_get(r->dirty_bits, u + run) &&
             (uint32_t)now_ms - r->freed_ms[u + run] >= (uint32_t)delay_ms)
        run++;
      if (run == 0) { /* not due yet */
        uint64_t due = now_ms + (uint32_t)delay_ms - ((uint32_t)now_ms - r->freed_ms[u]);
        if (next_due == 0 || due < next_due) next_due = due;
        u++;
        continue;
      }
      purge_units(r, u, run);
      purged += run * UNIT_SIZE;
      u += run;
    }
    r = next;
  }
  next_purge_ms = next_due;
  return purged;
}

/* Grow a span in place over the free units right after it. Returns the new unit count
 * or 0 when they are not free. */
size_t region_grow_span(hak_slab_t *s, size_t new_units) {
  hak_region_t *r = region_of((uintptr_t)s);
  size_t end = (size_t)s->unit_idx + s->units, want_end = (size_t)s->unit_idx + new_units;
  if (want_end > UNITS_PER_REGION) return 0;
  for (size_t u = end; u < want_end; u++)
    if (!bit_get(r->free_bits, u)) return 0;
  for (size_t u = end; u < want_end; u++) {
    if (bit_get(r->dirty_bits, u)) {
      r->dirty_free_units--;
      dirty_units--;
      r->touched_pages[u] = 0;
    } else atomic_fetch_add_explicit(&hak_gstats.committed_est, UNIT_SIZE, memory_order_relaxed);
    r->unit_map[u] = s;
  }
  bits_set_range(r->free_bits, end, want_end - end, false);
  bits_set_range(r->dirty_bits, end, want_end - end, true);
  r->free_units -= (uint32_t)(want_end - end);
  used_units += want_end - end;
  s->units = (uint16_t)new_units;
  return new_units;
}

void region_shrink_span(hak_slab_t *s, size_t new_units, uint64_t now_ms) {
  hak_region_t *r = region_of((uintptr_t)s);
  size_t from = (size_t)s->unit_idx + new_units, n = s->units - new_units;
  if (n == 0) return;
  hak_slab_t *tail = &r->slabs[from];
  size_t keep = new_units * UNIT_SIZE;
  memset(tail, 0, sizeof *tail);
  tail->units = (uint16_t)n;
  tail->unit_idx = (uint16_t)from;
  tail->touched = s->touched > keep ? (uint32_t)(s->touched - keep) : 0;
  if (s->touched > keep) s->touched = (uint32_t)keep;
  s->units = (uint16_t)new_units;
  region_free_span(tail, now_ms);
}
