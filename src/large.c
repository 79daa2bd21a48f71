/* Large blocks (> 128 KiB, up to half a region: 32 MiB): a span of units holding one
 * block, taken from the heap's span cache or from a region, freed back to the cache,
 * resized in place where the neighbouring units allow. Bigger blocks are huge.c's. */

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
  /* The heap malloc allocates from: a user heap keeps its big blocks on lists. */
  hak_heap_t *h = hak_tls_alloc;
  bool user = h->kind == HEAP_KIND_USER;
  if (n > LARGE_MAX || n + slack > LARGE_MAX) {
    void *p = huge_alloc(n, align, zero);
    if (user && p != NULL) huge_set_heap(p, h);
    return p;
  }
  /* At least one byte past the aligned start must be inside the span. */
  size_t units = round_up((n ? n : 1) + slack, UNIT_SIZE) >> UNIT_SHIFT;
  /* A cached span up to a quarter bigger is as good as a new one, and needs no lock. */
  hak_slab_t *s = NULL;
  if (h != &hak_heap_empty) { /* the purge thread may flush the cache of an idle heap */
    pthread_mutex_lock(&h->lock);
    s = span_cache_take(h, units, units + units / 4);
    pthread_mutex_unlock(&h->lock);
  }
  size_t counted = s != NULL ? 0 : units * UNIT_SIZE; /* new to the heap */
  if (s == NULL) {
    pthread_mutex_lock(&region_lock);
    s = span_alloc(units);
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
  __atomic_store_n(&s->user_heap, NULL, __ATOMIC_RELAXED); /* a cached span's may be stale */
  if (user) heap_large_added(h, s, counted);
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
  heap_large_freed(s); /* if a user heap's */
  if (HAKMEM_SECURE) { /* zero on free: the kernel clears the pages, which stay mapped */
    secure_guard_large(s, false);
    os_purge((void *)slab_base(s), (size_t)s->units * UNIT_SIZE);
    s->touched = 0;
  }
  atomic_fetch_sub_explicit(&hak_gstats.large_in_use, (size_t)s->units * UNIT_SIZE,
                            memory_order_relaxed);
  /* Any thread may keep a free span: it belongs to no heap until reused. */
  hak_heap_t *h = hak_tls_heap;
  if (h != &hak_heap_empty) pthread_mutex_lock(&h->lock);
  span_cache_put(h, s, os_now_ms());
  if (h != &hak_heap_empty) pthread_mutex_unlock(&h->lock);
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
  if (units < s->units) span_shrink(s, units, now);
  else ok = span_grow(s, units);
  pthread_mutex_unlock(&region_lock);
  if (!ok) return NULL;
  s->block_size = (uint32_t)((size_t)s->units * UNIT_SIZE - head);
  s->touched = (uint32_t)((size_t)s->units * UNIT_SIZE);
  s->aux = n;
  size_t new_bytes = (size_t)s->units * UNIT_SIZE;
  hak_heap_t *u = slab_user_heap(s);
  if (u != NULL) heap_held_add(u, new_bytes - old_bytes);
  if (new_bytes > old_bytes)
    atomic_fetch_add_explicit(&hak_gstats.large_in_use, new_bytes - old_bytes, memory_order_relaxed);
  else
    atomic_fetch_sub_explicit(&hak_gstats.large_in_use, old_bytes - new_bytes, memory_order_relaxed);
  return p;
}
