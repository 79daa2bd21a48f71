/* Huge blocks (more than half a region): a mapping of their own, with a header at the
 * start of the region-sized chunk before the block, marked in the region map so that
 * free() finds it. Freed ones of moderate size are kept for reuse by purge.c; the rest
 * go back to the OS at free, and realloc resizes them by moving pages, never copying. */

#include "internal.h"

#include <errno.h>
#include <string.h>

static size_t round_up(size_t n, size_t to) { return (n + to - 1) & ~(to - 1); }

#define HUGE_MAGIC 0x68616b6d656d4847ull       /* "hakmemHG" */
#define HUGE_FREED_MAGIC 0x68616b6d656d4846ull /* "hakmemHF": kept after free */
#define HUGE_HEADER 64

typedef struct huge_header {
  uint64_t magic;
  uintptr_t user;     /* the pointer handed out */
  uintptr_t base;     /* the mapping */
  size_t map_size;
  size_t size;        /* requested */
} huge_header_t;

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

static void huge_unmap(uintptr_t base, size_t map_size) { region_map_unmap(base, map_size); }

/* A guard page right after the block's last page, when the mapping goes on past it: a
 * run off the end faults there. Off before the mapping is resized, freed or reused. */
static uintptr_t huge_guard_at(const huge_header_t *h) { return round_up(h->user + h->size, os_page_size()); }
static void huge_guard(const huge_header_t *h, bool on) {
  uintptr_t g = huge_guard_at(h);
  if (g + os_page_size() <= h->base + h->map_size) guard_set(g, os_page_size(), on);
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
    base = purge_take_huge(map_size, off, align);
    pthread_mutex_unlock(&region_lock);
    fresh = base == 0;
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
  huge_guard(h, true);
  pthread_mutex_lock(&region_lock);
  purge_note_huge((ptrdiff_t)huge_resident(h));
  pthread_mutex_unlock(&region_lock);
  atomic_fetch_add_explicit(&hak_gstats.huge_mapped, map_size, memory_order_relaxed);
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
  uintptr_t evicted_base = 0;
  size_t evicted_size = 0, kept_bytes = resident;
  huge_guard(h, false);
  if (HAKMEM_SECURE && hak_opt.purge_delay_ms != 0 && map_size <= HUGE_KEEP_MAX)
    kept_bytes = huge_zero(h);
  atomic_fetch_sub_explicit(&hak_gstats.huge_mapped, map_size, memory_order_relaxed);
  h->magic = HUGE_FREED_MAGIC; /* if kept, still mapped: a second free says "double free" */
  pthread_mutex_lock(&region_lock);
  purge_note_huge(-(ptrdiff_t)resident);
  bool keep = purge_keep_huge(base, map_size, kept_bytes, now, &evicted_base, &evicted_size);
  pthread_mutex_unlock(&region_lock);
  if (evicted_size) huge_unmap(evicted_base, evicted_size);
  if (!keep) {
    h->magic = 0;
    huge_unmap(base, map_size);
  }
}

size_t huge_usable(const void *p, const char *who) {
  huge_header_t *h = huge_checked(p, who);
  return huge_guard_at(h) - h->user;
}

/* The purge budget counts a huge block's bytes in use: a resized block's change. */
static void huge_note_resize(size_t old_resident, const huge_header_t *h) {
  pthread_mutex_lock(&region_lock);
  purge_note_huge((ptrdiff_t)huge_resident(h) - (ptrdiff_t)old_resident);
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
  huge_guard(h, false);
  if (new_size == old_size) {
    h->size = n;
    huge_guard(h, true);
    huge_note_resize(old_resident, h);
    return p;
  }
  if (new_size < old_size) {
    huge_mark(base + new_size, old_size - new_size, 0, MAP_NONE);
    os_unmap((void *)(base + new_size), old_size - new_size);
    h->map_size = new_size;
    h->size = n;
    huge_guard(h, true);
    huge_note_resize(old_resident, h);
    atomic_fetch_sub_explicit(&hak_gstats.huge_mapped, old_size - new_size, memory_order_relaxed);
    return p;
  }
  void *target = os_remap((void *)base, old_size, new_size, NULL);
  if (target == NULL) {
    void *fresh = os_map_block(new_size, REGION_SIZE, 0);
    if (fresh == NULL) {
      huge_guard(h, true);
      errno = ENOMEM;
      return NULL;
    }
    target = os_remap((void *)base, old_size, new_size, fresh);
    if (target == NULL) {
      os_unmap(fresh, new_size);
      huge_guard(h, true);
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
  huge_guard(nh, true);
  huge_note_resize(old_resident, nh);
  atomic_fetch_add_explicit(&hak_gstats.huge_mapped, new_size - old_size, memory_order_relaxed);
  return (void *)(nb + off);
}

