/* Huge blocks (more than half a region): a mapping of their own, with a header at the
 * start of the region-sized chunk before the block, marked in the region map so that
 * free() finds it. Freed ones of moderate size are kept for reuse by purge.c; the rest
 * go back to the OS at free, and realloc resizes them by moving pages, never copying. */

#include "block/block.h"

#include <errno.h>
#include <string.h>

#define HUGE_MAGIC 0x68616b6d656d4847ull       /* "hakmemHG" */
#define HUGE_FREED_MAGIC 0x68616b6d656d4846ull /* "hakmemHF": kept after free */
#define HUGE_HEADER 64

typedef struct huge_header {
  uint64_t magic;
  uintptr_t user; /* the pointer handed out */
  uintptr_t base; /* the mapping */
  size_t map_size;
  size_t size; /* requested */
  /* A user heap's huge block: the heap, and its list of them (under the heap's lock). */
  hak_heap_t *heap;
  struct huge_header *next, *prev;
} huge_header_t;
_Static_assert(sizeof(huge_header_t) <= HUGE_HEADER, "the huge header must fit before the block");

/* The header sits at the start of the region-sized chunk holding the byte before the
 * user pointer; it is always inside the mapping, whatever the alignment. */
static huge_header_t *huge_header_of(uintptr_t p) {
  return (huge_header_t *)((p - 1) & ~(uintptr_t)REGION_MASK);
}

/* The bytes a huge block can have touched, as the purge budget counts them. */
static size_t huge_resident(const huge_header_t *h) {
  return align_up(h->user - h->base + h->size, os_page_size());
}

static void huge_mark(uintptr_t base, size_t map_size, uintptr_t user, uint8_t kind_tail) {
  for (uintptr_t c = base; c < base + map_size; c += REGION_SIZE) region_map[c >> REGION_SHIFT] = kind_tail;
  if (kind_tail != MAP_NONE) region_map[user >> REGION_SHIFT] = MAP_HUGE;
}

static void huge_unmap(uintptr_t base, size_t map_size) { region_map_unmap(base, map_size); }

/* A guard page right after the block's last page, when the mapping goes on past it: a
 * run off the end faults there. It is made inaccessible (PROT_NONE: a mapping of its
 * own, which core dumps skip cleanly) when the mapping is made, stays while a freed
 * mapping is kept, and moves only when a block of another size reuses the mapping or a
 * resize moves its end: a block of the size just freed costs no system call. */
static uintptr_t huge_guard_at(uintptr_t user, size_t size) { return align_up(user + size, os_page_size()); }
/* False if the kernel refused (ENOMEM: too many mappings). A guard not set costs only
 * the check; a guard not removed would leave a hole in the next block, so the callers
 * that remove one give up when this fails. */
static bool huge_guard(uintptr_t base, size_t map_size, uintptr_t g, bool on) {
  size_t page = os_page_size();
  if (g + page > base + map_size) return true; /* the block ends the mapping */
  if (HAKMEM_SECURE) secure_protect(g, page, !on);
  else return os_protect((void *)g, page, !on);
  return true;
}
/* The guard of a kept mapping's last block, if its header says where it is. */
static uintptr_t huge_kept_guard(uintptr_t base, size_t map_size);

void *huge_alloc(size_t n, size_t align, bool zero) {
  if (align < 16) align = 16;
  /* Up to a region's alignment, the mapping's start is aligned to a region and the block
   * starts the alignment's multiple past the header. Beyond, the header has the
   * mapping's first chunk to itself and the mapping is placed so that the block, right
   * after it, is aligned. */
  size_t off = align > REGION_SIZE ? REGION_SIZE : align_up(HUGE_HEADER, align);
  if (n >= (size_t)PTRDIFF_MAX - off - REGION_SIZE || align >= (size_t)PTRDIFF_MAX / 2) {
    errno = ENOMEM;
    return NULL;
  }
  /* Whole chunks, so no foreign mapping ever shares one with a huge block. */
  size_t map_size = align_up(off + n, REGION_SIZE);
  uintptr_t base = 0;
  bool fresh = true, admitted;
  /* Before a kept mapping is taken: over a limit, kept ones go back first. */
  size_t pages = align_up(off + n, os_page_size()); /* what the block can make resident */
  limit_give_back(pages, false);
  size_t held = limit_admit_huge(pages, &admitted);
  if (!admitted && limit_give_back(pages, true)) held = limit_admit_huge(pages, &admitted);
  if (!admitted) {
    errno = ENOMEM;
    return NULL;
  }
  if (map_size <= HUGE_KEEP_MAX) {
    pthread_mutex_lock(&region_lock);
    base = purge_take_huge(map_size, off, align);
    pthread_mutex_unlock(&region_lock);
    fresh = base == 0;
  }
  for (int tries = 0; fresh && base == 0 && tries < 2; tries++) {
    base = align > REGION_SIZE ? (uintptr_t)os_map_block(map_size, align, off)
                               : (uintptr_t)os_map_block(map_size, REGION_SIZE, 0);
    if (base != 0 || tries > 0) break;
    /* Refused (an address-space or overcommit limit): what hakmem keeps mapped for
     * reuse, empty regions and freed huge blocks, goes back, and the kernel is asked
     * once more. Out-of-memory paths only. */
    pthread_mutex_lock(&region_lock);
    purge_pass(os_now_ms(), 0, true);
    pthread_mutex_unlock(&region_lock);
  }
  if (base == 0 || ((base + map_size - 1) >> ADDRESS_BITS) != 0) {
    if (base) os_unmap((void *)base, map_size);
    limit_settle(held);
    errno = ENOMEM;
    return NULL;
  }
  uintptr_t user = base + off, guard = huge_guard_at(user, n);
  uintptr_t old_guard = fresh ? 0 : huge_kept_guard(base, map_size);
  if (old_guard != guard) {
    if (old_guard == UINTPTR_MAX || (old_guard != 0 && !huge_guard(base, map_size, old_guard, false))) {
      huge_unmap(base, map_size); /* a kept mapping with a guard that cannot go */
      limit_settle(held);
      errno = ENOMEM;
      return NULL;
    }
    huge_guard(base, map_size, guard, true);
  }
  /* Before the header's write faults the first page in: a fresh malloc'd block of a big
   * heap faults huge pages (thp_blocks.c); any other waits for its dense ranges. */
  thp_block_note(base, user + n, fresh && !zero ? THP_BLOCK_IF_BIG : THP_BLOCK_LATER);
  huge_header_t *h = huge_header_of(user);
  h->magic = HUGE_MAGIC;
  h->user = user;
  h->base = base;
  h->map_size = map_size;
  h->size = n;
  h->heap = NULL; /* huge_set_heap names its user heap */
  huge_mark(base, map_size, user, MAP_HUGE_TAIL);
  pthread_mutex_lock(&region_lock);
  purge_note_huge((ptrdiff_t)huge_resident(h));
  pthread_mutex_unlock(&region_lock);
  atomic_fetch_add_explicit(&gstats.huge_mapped, map_size, memory_order_relaxed);
  limit_settle(held);
  atomic_fetch_add_explicit(&gstats.huge_allocs, 1, memory_order_relaxed);
  stats_note_in_use();
  if (zero && !fresh) memset((void *)user, 0, n); /* fresh mappings are zero */
  return (void *)user;
}

static uintptr_t huge_kept_guard(uintptr_t base, size_t map_size) {
  const huge_header_t *h = (const huge_header_t *)base;
  if (h->magic == HUGE_FREED_MAGIC && h->base == base && h->map_size == map_size)
    return huge_guard_at(h->user, h->size);
  /* not known: none anywhere (UINTPTR_MAX: the kernel refused, the mapping is unusable) */
  return os_protect((void *)base, map_size, true) ? 0 : UINTPTR_MAX;
}

static huge_header_t *huge_checked(const void *p, const char *who) {
  huge_header_t *h = huge_header_of((uintptr_t)p);
  /* p at the start of its chunk: the header's chunk is the one before, which may be no
   * huge mapping's (the mapping starts at p's chunk), and is not read then. */
  unsigned kind = region_map_kind((uintptr_t)h);
  if (kind != MAP_HUGE && kind != MAP_HUGE_TAIL) error_fatal_pointer("invalid pointer", who, p);
  if (h->magic == HUGE_FREED_MAGIC && h->user == (uintptr_t)p) error_fatal_pointer("double free", who, p);
  if (h->magic != HUGE_MAGIC || h->user != (uintptr_t)p) error_fatal_pointer("invalid pointer", who, p);
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
  uintptr_t to = align_up(end, page);
  if (to > from) os_purge((void *)from, to - from);
  return page;
}

/* ---- a user heap's huge blocks: a list through their headers, under its lock ------- */
static void heap_list_remove(hak_heap_t *u, huge_header_t *h) {
  if (h->prev) h->prev->next = h->next;
  else u->huge = h->next;
  if (h->next) h->next->prev = h->prev;
  __atomic_store_n(&h->heap, NULL, __ATOMIC_RELAXED);
  heap_held_add(u, -h->map_size);
}

void huge_set_heap(void *p, hak_heap_t *u) {
  huge_header_t *h = huge_header_of((uintptr_t)p);
  pthread_mutex_lock(&u->lock);
  __atomic_store_n(&h->heap, u, __ATOMIC_RELEASE);
  h->prev = NULL;
  h->next = u->huge;
  if (h->next) h->next->prev = h;
  u->huge = h;
  heap_held_grow(u, h->map_size);
  pthread_mutex_unlock(&u->lock);
}

/* The block leaves its user heap, if it has one. The heap's lock outlives the heap (see
 * heap_large_freed), and its destruction or release empties the list under it. */
static void huge_leave_heap(huge_header_t *h) {
  hak_heap_t *u = __atomic_load_n(&h->heap, __ATOMIC_ACQUIRE);
  if (u == NULL) return;
  pthread_mutex_lock(&u->lock);
  if (u->orphaned) __atomic_store_n(&h->heap, NULL, __ATOMIC_RELAXED); /* see heap_large_freed */
  else if (h->heap == u) heap_list_remove(u, h);
  pthread_mutex_unlock(&u->lock);
}

/* Under u's lock: free every huge block of u (destroy), or let them go their own way
 * (release). */
void huge_heap_drop_all(hak_heap_t *u, bool free_them) {
  while (u->huge != NULL) {
    huge_header_t *h = u->huge;
    heap_list_remove(u, h);
    if (free_them) huge_free((void *)h->user, "hak_heap_destroy");
  }
}

/* Under u's lock: calls fn on each huge block of u until it returns non-zero. */
int huge_heap_each(hak_heap_t *u, int (*fn)(void *p, size_t usable, void *arg), void *arg) {
  for (huge_header_t *h = u->huge; h != NULL; h = h->next) {
    int r = fn((void *)h->user, h->base + h->map_size - h->user, arg);
    if (r != 0) return r;
  }
  return 0;
}

void huge_free(void *p, const char *who) {
  huge_header_t *h = huge_checked(p, who);
  huge_leave_heap(h);
  thp_block_forget(h->base); /* no collapse in flight on it from here on */
  uintptr_t base = h->base;
  size_t map_size = h->map_size, resident = huge_resident(h);
  uint64_t now = os_now_ms();
  uintptr_t evicted_base = 0;
  size_t evicted_size = 0, kept_bytes = resident;
  if (HAKMEM_SECURE && opt.purge_delay_ms != 0 && map_size <= HUGE_KEEP_MAX) kept_bytes = huge_zero(h);
  atomic_fetch_sub_explicit(&gstats.huge_mapped, map_size, memory_order_relaxed);
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
  return huge_guard_at(h->user, h->size) - h->user;
}

/* The purge budget counts a huge block's bytes in use: a resized block's change. */
static void huge_note_resize(size_t old_resident, const huge_header_t *h) {
  pthread_mutex_lock(&region_lock);
  purge_note_huge((ptrdiff_t)huge_resident(h) - (ptrdiff_t)old_resident);
  pthread_mutex_unlock(&region_lock);
}

/* Grows or shrinks a huge block by remapping its pages, never by copying them. */
static void *huge_remap_pages(void *p, size_t n);
/* The same, with no collapse in flight on the block meanwhile (thp_blocks.c). */
static void *huge_remap(void *p, size_t n) {
  huge_header_t *h = huge_checked(p, "realloc");
  bool faulted = thp_block_forget(h->base);
  void *q = huge_remap_pages(p, n);
  const huge_header_t *now = q != NULL ? huge_header_of((uintptr_t)q) : h;
  thp_block_note(now->base, now->user + now->size, faulted ? THP_BLOCK_AGAIN : THP_BLOCK_LATER);
  return q;
}

/* A user heap's block is resized under the heap's lock, which walkers of its list take:
 * its header may move with its pages, and the list is then linked to it again. */
void *huge_realloc(void *p, size_t n) {
  huge_header_t *h = huge_checked(p, "realloc");
  hak_heap_t *u = __atomic_load_n(&h->heap, __ATOMIC_ACQUIRE);
  if (u == NULL) return huge_remap(p, n);
  pthread_mutex_lock(&u->lock);
  if (h->heap != u || u->orphaned) { /* its heap went meanwhile */
    pthread_mutex_unlock(&u->lock);
    return huge_remap(p, n);
  }
  size_t old_map = h->map_size;
  void *q = huge_remap(p, n);
  if (q != NULL) {
    huge_header_t *nh = huge_header_of((uintptr_t)q);
    if (nh->prev) nh->prev->next = nh;
    else u->huge = nh;
    if (nh->next) nh->next->prev = nh;
    heap_held_add(u, nh->map_size - old_map);
  }
  pthread_mutex_unlock(&u->lock);
  return q;
}

static void *huge_remap_pages(void *p, size_t n) {
  huge_header_t *h = huge_checked(p, "realloc");
  size_t off = h->user - h->base, old_resident = huge_resident(h);
  if (n >= (size_t)PTRDIFF_MAX - off - REGION_SIZE) {
    errno = ENOMEM;
    return NULL;
  }
  size_t new_size = align_up(off + n, REGION_SIZE);
  uintptr_t base = h->base, old_size = h->map_size, old_guard = huge_guard_at(h->user, h->size);
  if (new_size == old_size) {
    if (huge_guard_at(h->user, n) != old_guard) {
      if (!huge_guard(base, old_size, old_guard, false)) {
        errno = ENOMEM; /* the block as it was, guard and all */
        return NULL;
      }
      huge_guard(base, old_size, huge_guard_at(h->user, n), true);
    }
    h->size = n;
    huge_note_resize(old_resident, h);
    return p;
  }
  if (!huge_guard(base, old_size, old_guard, false)) { /* mremap moves one mapping, not two */
    errno = ENOMEM;
    return NULL;
  }
  if (new_size < old_size) {
    huge_mark(base + new_size, old_size - new_size, 0, MAP_NONE);
    os_unmap((void *)(base + new_size), old_size - new_size);
    h->map_size = new_size;
    h->size = n;
    huge_guard(base, new_size, huge_guard_at(h->user, n), true);
    huge_note_resize(old_resident, h);
    atomic_fetch_sub_explicit(&gstats.huge_mapped, old_size - new_size, memory_order_relaxed);
    return p;
  }
  bool admitted;
  size_t held = limit_admit_huge(new_size - old_size, &admitted);
  if (!admitted && limit_give_back(new_size - old_size, true))
    held = limit_admit_huge(new_size - old_size, &admitted);
  void *target = admitted ? os_remap((void *)base, old_size, new_size, NULL) : NULL;
  if (target == NULL) {
    void *fresh = admitted ? os_map_block(new_size, REGION_SIZE, 0) : NULL;
    if (fresh != NULL) target = os_remap((void *)base, old_size, new_size, fresh);
    if (target == NULL) {
      if (fresh != NULL) os_unmap(fresh, new_size);
      huge_guard(base, old_size, old_guard, true);
      limit_settle(held);
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
  huge_guard(nb, new_size, huge_guard_at(nb + off, n), true);
  huge_note_resize(old_resident, nh);
  atomic_fetch_add_explicit(&gstats.huge_mapped, new_size - old_size, memory_order_relaxed);
  limit_settle(held);
  return (void *)(nb + off);
}
