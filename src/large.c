/* Large blocks (> 128 KiB, up to half a region: 32 MiB): a span of units holding one
 * block, allocated and freed under region_lock and purged with the other free units.
 * Huge blocks (larger still): a mapping of their own, given back to the OS at free. */

#include "internal.h"

#include <errno.h>
#include <string.h>

#define LARGE_CLASS NUM_CLASSES /* class_idx of a large span */

static size_t round_up(size_t n, size_t to) { return (n + to - 1) & ~(to - 1); }

void *large_alloc(size_t n, size_t align, bool zero) {
  if (align < 16) align = 16;
  size_t slack = align > UNIT_SIZE ? align - UNIT_SIZE : 0;
  size_t page = os_page_size();
  if (HAKMEM_SECURE) { /* an inaccessible page before and after the block */
    n = round_up(n ? n : 1, page);
    slack = (align > page ? align : page) + page;
  }
  if (n > LARGE_MAX || n + slack > LARGE_MAX) {
    return huge_alloc(n, align, zero);
  }
  /* At least one byte past the aligned start must be inside the span. */
  size_t units = round_up((n ? n : 1) + slack, UNIT_SIZE) >> UNIT_SHIFT;
  hak_heap_t *h = hak_tls_heap;
  /* A cached span up to a quarter bigger is as good as a new one, and needs no lock. */
  hak_slab_t *s = h != &hak_heap_empty ? span_cache_take(h, units, units + units / 4) : NULL;
  if (s == NULL) {
    pthread_mutex_lock(&region_lock);
    s = region_alloc_span(units);
    pthread_mutex_unlock(&region_lock);
    if (s == NULL) {
      errno = ENOMEM;
      return NULL;
    }
  }
  units = s->units;
  uintptr_t base = slab_base(s);
  uintptr_t p = round_up(HAKMEM_SECURE ? base + page : base, align);
  s->class_idx = LARGE_CLASS;
  s->start = p;
  s->block_size = (uint32_t)(HAKMEM_SECURE ? n : base + units * UNIT_SIZE - p);
  if (HAKMEM_SECURE) secure_guard_large(s, true);
  s->div_magic = 0;
  s->start_magic = 0;
  s->used = 1;
  s->aux = n;
  /* Only what an earlier use wrote needs clearing; the rest reads as zero. */
  size_t dirty = base + s->touched > p ? base + s->touched - p : 0;
  s->touched = (uint32_t)(units * UNIT_SIZE); /* the user may write all of it */
  __atomic_store_n(&s->owner, OWNER_LARGE, __ATOMIC_RELEASE);
  atomic_fetch_add_explicit(&hak_gstats.large_in_use, units * UNIT_SIZE, memory_order_relaxed);
  atomic_fetch_add_explicit(&hak_gstats.large_allocs, 1, memory_order_relaxed);
  stats_note_in_use();
  if (zero && dirty > 0) memset((void *)p, 0, dirty < n ? dirty : n);
  return (void *)p;
}

void large_free(hak_slab_t *s, void *p) {
  if ((uintptr_t)p != s->start) hak_fatal_pointer("invalid pointer", "free", p);
  /* Claim the block: of two threads freeing it at once, one loses here. */
  uintptr_t expect = OWNER_LARGE;
  if (!__atomic_compare_exchange_n(&s->owner, &expect, OWNER_CACHED, false, __ATOMIC_ACQ_REL,
                                   __ATOMIC_RELAXED))
    hak_fatal_pointer("double free", "free", p);
  if (HAKMEM_SECURE) { /* zero on free: the kernel clears the pages, which stay mapped */
    secure_guard_large(s, false);
    os_purge((void *)slab_base(s), (size_t)s->units * UNIT_SIZE);
    s->touched = 0;
  }
  atomic_fetch_sub_explicit(&hak_gstats.large_in_use, (size_t)s->units * UNIT_SIZE,
                            memory_order_relaxed);
  /* Any thread may keep a free span: it belongs to no heap until reused. */
  span_cache_put(hak_tls_heap, s, os_now_ms());
}

size_t large_usable(const hak_slab_t *s, const void *p) {
  if ((uintptr_t)p != s->start) return 0;
  return s->block_size;
}

/* Resize without moving: shrink by giving back tail units, grow over free neighbours. */
void *large_realloc_in_place(hak_slab_t *s, void *p, size_t n) {
  if (HAKMEM_SECURE) return NULL; /* the guard pages stay put: move instead */
  uintptr_t base = slab_base(s);
  size_t head = (uintptr_t)p - base;
  size_t units = round_up(head + n, UNIT_SIZE) >> UNIT_SHIFT;
  if (n > LARGE_MAX || units > REGION_MAX_SPAN_UNITS) return NULL;
  if (units == s->units) return p;
  size_t old_bytes = (size_t)s->units * UNIT_SIZE;
  uint64_t now = os_now_ms();
  pthread_mutex_lock(&region_lock);
  bool ok = true;
  if (units < s->units) region_shrink_span(s, units, now);
  else ok = region_grow_span(s, units) != 0;
  pthread_mutex_unlock(&region_lock);
  if (!ok) return NULL;
  s->block_size = (uint32_t)((size_t)s->units * UNIT_SIZE - head);
  s->touched = (uint32_t)((size_t)s->units * UNIT_SIZE);
  s->aux = n;
  size_t new_bytes = (size_t)s->units * UNIT_SIZE;
  if (new_bytes > old_bytes)
    atomic_fetch_add_explicit(&hak_gstats.large_in_use, new_bytes - old_bytes, memory_order_relaxed);
  else
    atomic_fetch_sub_explicit(&hak_gstats.large_in_use, old_bytes - new_bytes, memory_order_relaxed);
  return p;
}

/* ---- huge ------------------------------------------------------------------------ */
#define HUGE_MAGIC 0x68616b6d656d4847ull /* "hakmemHG" */
#define HUGE_HEADER 64

typedef struct huge_header {
  uint64_t magic;
  uintptr_t user;     /* the pointer handed out */
  uintptr_t base;     /* the mapping */
  size_t map_size;
  size_t size;        /* requested */
} huge_header_t;

_Atomic size_t huge_mapped_bytes;

/* Freed huge blocks in mappings of up to HUGE_KEEP_MAX are kept, like free spans, for
 * the purge delay and within the purge budget, so that a program that frees and
 * allocates big blocks does not fault every page in again: the next huge block that
 * needs a mapping of the same size takes one. Bigger ones are unmapped at free. The
 * list is under region_lock. */
#define HUGE_KEEP_SLOTS 4
#define HUGE_KEEP_MAX ((size_t)64 << 20)
#define HUGE_FREED_MAGIC 0x68616b6d656d4846ull /* "hakmemHF": kept after free */
typedef struct huge_kept {
  uintptr_t base;
  size_t map_size;
  size_t resident; /* the bytes the block could have touched */
  uint64_t freed_ms;
} huge_kept_t;
static huge_kept_t huge_kept[HUGE_KEEP_SLOTS]; /* oldest first */
static uint32_t huge_kept_count;

/* The header sits at the start of the region-sized chunk holding the byte before the
 * user pointer; it is always inside the mapping, whatever the alignment. */
static huge_header_t *huge_header_of(uintptr_t p) {
  return (huge_header_t *)((p - 1) & ~(uintptr_t)REGION_MASK);
}

/* The bytes a huge block can have touched, as the purge budget counts them. */
static size_t huge_resident(const huge_header_t *h) {
  return round_up(h->user - h->base + h->size, os_page_size());
}

static void huge_mark(uintptr_t base, size_t map_size, uintptr_t user, uint8_t kind_tail) {
  for (uintptr_t c = base; c < base + map_size; c += REGION_SIZE)
    region_map[c >> REGION_SHIFT] = kind_tail;
  if (kind_tail != MAP_NONE) region_map[user >> REGION_SHIFT] = MAP_HUGE;
}

static void huge_unmap(uintptr_t base, size_t map_size) {
  huge_mark(base, map_size, 0, MAP_NONE);
  os_unmap((void *)base, map_size);
  atomic_fetch_add_explicit(&hak_gstats.released_bytes, map_size, memory_order_relaxed);
}

/* Slot i leaves the list; the caller now owns its mapping. Caller holds region_lock. */
static huge_kept_t huge_kept_take(uint32_t i) {
  huge_kept_t k = huge_kept[i];
  for (uint32_t j = i + 1; j < huge_kept_count; j++) huge_kept[j - 1] = huge_kept[j];
  huge_kept_count--;
  purge_note_huge(0, -(ptrdiff_t)k.resident);
  atomic_fetch_sub_explicit(&hak_gstats.committed_est, k.resident, memory_order_relaxed);
  return k;
}

size_t huge_purge(uint64_t now_ms, long delay_ms, uint64_t *next_due) {
  size_t purged = 0;
  for (uint32_t i = 0; i < huge_kept_count;) {
    uint64_t due = huge_kept[i].freed_ms + (uint64_t)delay_ms;
    if (now_ms < due) {
      if (*next_due == 0 || due < *next_due) *next_due = due;
      i++;
      continue;
    }
    huge_kept_t k = huge_kept_take(i);
    huge_unmap(k.base, k.map_size);
    purged += k.resident;
  }
  return purged;
}

bool huge_oldest(uint32_t *freed_ms) {
  if (huge_kept_count == 0) return false;
  *freed_ms = (uint32_t)huge_kept[0].freed_ms;
  return true;
}

void huge_purge_oldest(size_t bytes) {
  huge_kept_t *k = &huge_kept[0];
  size_t page = os_page_size(), cut = round_up(bytes, page);
  if (cut + page >= k->resident) { /* all of it (but the header page is left anyway) */
    huge_kept_t whole = huge_kept_take(0);
    huge_unmap(whole.base, whole.map_size);
    return;
  }
  /* Only the end: the block keeps its first pages for the next taker. */
  k->resident -= cut;
  os_purge((void *)(k->base + k->resident), cut);
  purge_note_huge(0, -(ptrdiff_t)cut);
  atomic_fetch_sub_explicit(&hak_gstats.committed_est, cut, memory_order_relaxed);
  atomic_fetch_add_explicit(&hak_gstats.purged_bytes, cut, memory_order_relaxed);
}

void *huge_alloc(size_t n, size_t align, bool zero) {
  if (align < 16) align = 16;
  /* Up to a region's alignment, the mapping's start is aligned to a region and the block
   * starts the alignment's multiple past the header. Beyond, the header has the
   * mapping's first chunk to itself and the mapping is placed so that the block, right
   * after it, is aligned. */
  size_t off = align > REGION_SIZE ? REGION_SIZE : round_up(HUGE_HEADER, align);
  if (n >= (size_t)PTRDIFF_MAX - off - REGION_SIZE || align >= (size_t)PTRDIFF_MAX / 2) {
    errno = ENOMEM;
    return NULL;
  }
  /* Whole chunks, so no foreign mapping ever shares one with a huge block. */
  size_t map_size = round_up(off + n, REGION_SIZE);
  uintptr_t base = 0;
  bool fresh = true;
  if (map_size <= HUGE_KEEP_MAX) {
    pthread_mutex_lock(&region_lock);
    for (uint32_t i = huge_kept_count; i-- > 0;) { /* the newest first */
      if (huge_kept[i].map_size == map_size && ((huge_kept[i].base + off) & (align - 1)) == 0) {
        base = huge_kept_take(i).base;
        fresh = false;
        break;
      }
    }
    pthread_mutex_unlock(&region_lock);
  }
  if (fresh)
    base = align > REGION_SIZE ? (uintptr_t)os_map_block(map_size, align, off)
                               : (uintptr_t)os_map_block(map_size, REGION_SIZE, 0);
  if (base == 0 || ((base + map_size - 1) >> ADDRESS_BITS) != 0) {
    if (base) os_unmap((void *)base, map_size);
    errno = ENOMEM;
    return NULL;
  }
  uintptr_t user = base + off;
  huge_header_t *h = huge_header_of(user);
  h->magic = HUGE_MAGIC;
  h->user = user;
  h->base = base;
  h->map_size = map_size;
  h->size = n;
  huge_mark(base, map_size, user, MAP_HUGE_TAIL);
  pthread_mutex_lock(&region_lock);
  purge_note_huge((ptrdiff_t)huge_resident(h), 0);
  pthread_mutex_unlock(&region_lock);
  atomic_fetch_add_explicit(&huge_mapped_bytes, map_size, memory_order_relaxed);
  atomic_fetch_add_explicit(&hak_gstats.huge_allocs, 1, memory_order_relaxed);
  stats_note_in_use();
  if (zero && !fresh) memset((void *)user, 0, n); /* fresh mappings are zero */
  return (void *)user;
}

static huge_header_t *huge_checked(const void *p, const char *who) {
  huge_header_t *h = huge_header_of((uintptr_t)p);
  if (h->magic == HUGE_FREED_MAGIC && h->user == (uintptr_t)p) hak_fatal_pointer("double free", who, p);
  if (h->magic != HUGE_MAGIC || h->user != (uintptr_t)p) hak_fatal_pointer("invalid pointer", who, p);
  return h;
}

/* The hardened build's zero-on-free for a huge block it keeps mapped: the block's bytes
 * in the header's page are cleared, the pages after it given back to the kernel (they
 * read as zero). Returns the bytes still resident: the header's page. */
static size_t huge_zero(huge_header_t *h) {
  size_t page = os_page_size();
  uintptr_t first_end = h->base + page, end = h->user + h->size;
  if (h->user < first_end) memset((void *)h->user, 0, (end < first_end ? end : first_end) - h->user);
  uintptr_t from = h->user < first_end ? first_end : h->user; /* page-aligned then */
  uintptr_t to = round_up(end, page);
  if (to > from) os_purge((void *)from, to - from);
  return page;
}

void huge_free(void *p, const char *who) {
  huge_header_t *h = huge_checked(p, who);
  uintptr_t base = h->base;
  size_t map_size = h->map_size, resident = huge_resident(h);
  uint64_t now = os_now_ms();
  long delay = hak_opt.purge_delay_ms;
  huge_kept_t evicted = {0, 0, 0, 0};
  bool keep = false;
  size_t kept_bytes = resident;
  if (HAKMEM_SECURE && delay != 0 && map_size <= HUGE_KEEP_MAX) kept_bytes = huge_zero(h);
  atomic_fetch_sub_explicit(&huge_mapped_bytes, map_size, memory_order_relaxed);
  pthread_mutex_lock(&region_lock);
  purge_note_huge(-(ptrdiff_t)resident, 0);
  if (delay != 0 && map_size <= HUGE_KEEP_MAX && (delay < 0 || purge_budget_allows(kept_bytes))) {
    keep = true;
    h->magic = HUGE_FREED_MAGIC; /* still mapped: a second free says "double free" */
    if (huge_kept_count == HUGE_KEEP_SLOTS) evicted = huge_kept_take(0);
    huge_kept[huge_kept_count++] = (huge_kept_t){base, map_size, kept_bytes, now};
    purge_note_huge(0, (ptrdiff_t)kept_bytes);
    atomic_fetch_add_explicit(&hak_gstats.committed_est, kept_bytes, memory_order_relaxed);
    if (delay > 0) purge_schedule(now + (uint64_t)delay);
  }
  pthread_mutex_unlock(&region_lock);
  if (evicted.map_size) huge_unmap(evicted.base, evicted.map_size);
  if (!keep) {
    h->magic = 0;
    huge_unmap(base, map_size);
  }
}

size_t huge_usable(const void *p, const char *who) {
  huge_header_t *h = huge_checked(p, who);
  return h->base + h->map_size - h->user;
}

/* The purge budget counts a huge block's bytes in use: a resized block's change. */
static void huge_note_resize(size_t old_resident, const huge_header_t *h) {
  pthread_mutex_lock(&region_lock);
  purge_note_huge((ptrdiff_t)huge_resident(h) - (ptrdiff_t)old_resident, 0);
  pthread_mutex_unlock(&region_lock);
}

/* Grows or shrinks a huge block by remapping its pages, never by copying them. */
void *huge_realloc(void *p, size_t n) {
  huge_header_t *h = huge_checked(p, "realloc");
  size_t off = h->user - h->base, old_resident = huge_resident(h);
  if (n >= (size_t)PTRDIFF_MAX - off - REGION_SIZE) {
    errno = ENOMEM;
    return NULL;
  }
  size_t new_size = round_up(off + n, REGION_SIZE);
  uintptr_t base = h->base, old_size = h->map_size;
  if (new_size == old_size) {
    h->size = n;
    huge_note_resize(old_resident, h);
    return p;
  }
  if (new_size < old_size) {
    huge_mark(base + new_size, old_size - new_size, 0, MAP_NONE);
    os_unmap((void *)(base + new_size), old_size - new_size);
    h->map_size = new_size;
    h->size = n;
    huge_note_resize(old_resident, h);
    atomic_fetch_sub_explicit(&huge_mapped_bytes, old_size - new_size, memory_order_relaxed);
    return p;
  }
  void *target = os_remap((void *)base, old_size, new_size, NULL);
  if (target == NULL) {
    void *fresh = os_map_block(new_size, REGION_SIZE, 0);
    if (fresh == NULL) {
      errno = ENOMEM;
      return NULL;
    }
    target = os_remap((void *)base, old_size, new_size, fresh);
    if (target == NULL) {
      os_unmap(fresh, new_size);
      errno = ENOMEM;
      return NULL;
    }
    huge_mark(base, old_size, 0, MAP_NONE);
  }
  uintptr_t nb = (uintptr_t)target;
  huge_header_t *nh = (huge_header_t *)((nb + off - 1) & ~(uintptr_t)REGION_MASK);
  nh->user = nb + off;
  nh->base = nb;
  nh->map_size = new_size;
  nh->size = n;
  huge_mark(nb, new_size, nb + off, MAP_HUGE_TAIL);
  huge_note_resize(old_resident, nh);
  atomic_fetch_add_explicit(&huge_mapped_bytes, new_size - old_size, memory_order_relaxed);
  return (void *)(nb + off);
}
