/* One slab: a span carved into blocks of one class, its three free lists (free for
 * allocation and the owner's frees, local_free for the hardened build's slow-path ones,
 * remote for everyone else's), and
 * lazy carving so that untouched blocks never become resident. */
#include "block/block.h"

#include <string.h>

_Noreturn void slab_corrupt_link(const slab_t *s, const void *link) {
  (void)s;
  error_fatal_at("corrupted free list (write after free?) at", link);
}

/* A slab with no block out forgets its carving: its pages can go back to the OS (the
 * caller purges the bytes returned), and the next refill carves it again. */
size_t slab_uncarve(slab_t *s) {
  size_t bytes = (size_t)s->units * UNIT_SIZE;
  s->free = s->local_free = NULL;
  s->capacity = 0;
  tso_store(&s->carved_magic, 0);
  s->aux = 0;
  s->touched = 0;
  atomic_fetch_add_explicit(&gstats.purged_bytes, bytes, memory_order_relaxed);
  return bytes;
}

/* Stale pages of a reused span fewer than this are left for carving to reuse. */
#define STALE_PURGE_MIN 16384

void slab_init(slab_t *s, uint32_t class_idx, uintptr_t owner) {
  uint32_t size = class_size[class_idx];
  size_t bytes = (size_t)s->units * UNIT_SIZE;
  __atomic_store_n(&s->class_idx, class_idx, __ATOMIC_RELAXED); /* stats_walk reads it racily */
  s->block_size = size;
  size_t gap = slab_gap(s->units, size);
  s->start = slab_base(s) + gap;
  /* floor(2^64 / size) + 1, one more than ceil for a power of two (slab_is_carved_block) */
  s->div_magic = UINT64_MAX / size + 1 + ((size & (size - 1)) == 0);
  s->start_magic = s->start * s->div_magic;
  s->reserved = (uint32_t)((bytes - gap) / size);
  s->capacity = 0;
  tso_store(&s->carved_magic, 0);
  s->used = 0;
  s->free = NULL;
  s->local_free = NULL;
  atomic_store_explicit(&s->remote, 0, memory_order_relaxed);
  s->next = s->prev = NULL;
  __atomic_store_n(&s->owner, owner, __ATOMIC_RELEASE);
}

/* Where a slab's written pages should end: its carved blocks, rounded up to a page. */
static size_t stale_keep(const slab_t *s) {
  size_t page = os_page_size();
  return (s->start - slab_base(s) + (size_t)s->capacity * s->block_size + page - 1) & ~(page - 1);
}

bool slab_has_stale(const slab_t *s) { return s->touched >= stale_keep(s) + STALE_PURGE_MIN; }

/* A reused span may still hold pages an earlier use wrote past what this slab has
 * carved. Carving reuses them in time, but a slab carves only as far as its class
 * needs, so they could stay resident, unused, until the slab is given up: on deferred
 * work, those past the carved blocks go back. Returns the bytes given back. */
size_t slab_trim_stale(slab_t *s) {
  if (!slab_has_stale(s)) return 0;
  size_t keep = stale_keep(s), n = s->touched - keep;
  span_purge((void *)(slab_base(s) + keep), n);
  s->touched = (uint32_t)keep;
  return n;
}

/* Carve colouring: the block a carve lists first, of its n. Every slab starts on a unit
 * boundary, so if each carve's list began at its first block, the blocks a class hands
 * out first, which a small working set keeps reusing, would sit at the same offsets
 * within a page in every slab of every class and heap. Starting each slab's carves at a
 * block picked from the slab's address spreads them, and changes no address, so the
 * class's alignment, the pages written and the slab's capacity stay as they were. */
static uint32_t carve_colour(const slab_t *s, uint32_t n) {
  uint32_t h = (uint32_t)(slab_base(s) >> UNIT_SHIFT) * 2654435761u; /* Fibonacci hashing */
  return (uint32_t)((uint64_t)(h >> 8) * n >> 24);
}

/* Blocks of a page or more carve only one or two at a time, to keep first touch
 * proportional to use; where an earlier use of the span already wrote the pages (a
 * reused span, a destroyed heap's slab), up to this many are carved at once. */
#define RESIDENT_CARVE 16

bool slab_extend(slab_t *s) {
  if (s->capacity >= s->reserved) return false;
  uint32_t n = class_carve[s->class_idx];
  uintptr_t first = s->start + (uintptr_t)s->capacity * s->block_size;
  uintptr_t written = slab_base(s) + s->touched;
  if (n < RESIDENT_CARVE && written > first) {
    uintptr_t fit = (written - first) / s->block_size;
    n = fit >= RESIDENT_CARVE ? RESIDENT_CARVE : fit > n ? (uint32_t)fit : n;
  }
  if (n > s->reserved - s->capacity) n = s->reserved - s->capacity;
  s->capacity += n;
  /* Before any carved block is handed out: a free of one checks it against this. */
  tso_store(&s->carved_magic, (uint64_t)s->capacity * (uint64_t)(s->block_size * s->div_magic));
  uint32_t end = (uint32_t)(first + (uintptr_t)n * s->block_size - slab_base(s));
  if (end > s->touched) s->touched = end;
  if (HAKMEM_SECURE) {
    /* Blocks never handed out, and the gap before block 0, read as zero (the check of
     * the block below relies on it): what an earlier use of the span wrote is cleared. */
    uintptr_t stop = first + (uintptr_t)n * s->block_size;
    uintptr_t from = first == s->start ? slab_base(s) : first; /* and the gap before block 0 */
    if (written > from) memset((void *)from, 0, (written < stop ? written : stop) - from);
    secure_carve(s, first, n);
    for (uint32_t i = 0; i < n; i++) /* free, as the default build's carve below leaves them */
      ((block_t *)(first + (uintptr_t)i * s->block_size))->free_tag = block_free_tag(s);
    return true;
  }
  /* The list runs from the coloured block to the carve's end, then from its start up to it.
   * Each block carries the free tag, as a freed one does: a free of a block carved but
   * not handed out yet is a double free, not a second copy of it on the list. */
  uintptr_t size = s->block_size, stop = first + (uintptr_t)n * size, tag = block_free_tag(s);
  block_t *head = (block_t *)(first + carve_colour(s, n) * size), *b = head;
  for (uint32_t i = 0; i + 1 < n; i++) {
    uintptr_t next = (uintptr_t)b + size;
    if (next == stop) next = first;
    b->next = (block_t *)next;
    b->free_tag = tag;
    b = (block_t *)next;
  }
  b->next = s->free;
  b->free_tag = tag;
  s->free = head;
  return true;
}

/* Moves other threads' and the owner's frees onto the allocation list. Returns the
 * number of remote frees accounted (they were still counted in `used`). One exchange
 * takes the list and its count together, so `used` is exact afterwards, and the remote
 * chain is never walked unless free blocks are already listed (its blocks are cold in
 * this thread's cache; the next malloc touches them once). */
uint32_t slab_collect_slow(slab_t *s) {
  uint32_t taken = 0;
  if (slab_has_remote(s)) {
    uintptr_t word = atomic_exchange_explicit(&s->remote, 0, memory_order_acquire);
    block_t *list = (block_t *)(word & REMOTE_LIST_MASK);
    taken = (uint32_t)(word >> REMOTE_COUNT_SHIFT);
    if (list != NULL) {
      if (s->free != NULL) {
        block_t *t = list;
        while (block_next(t)) t = block_next(t);
        block_set_next(t, s->free);
      }
      s->free = list;
    }
    /* Named plain store: a head collects without the heap's lock, which the statistics
     * walk holds as it reads `used`. */
    tso_store(&s->used, (uint16_t)(s->used - taken));
  }
  if (s->local_free != NULL) {
    if (s->free != NULL) {
      block_t *t = s->local_free;
      while (block_next(t)) t = block_next(t);
      block_set_next(t, s->free);
    }
    s->free = s->local_free;
    s->local_free = NULL;
  }
  return taken;
}

_Atomic bool slab_remote_seen; /* see block.h */

void slab_remote_push(slab_t *s, block_t *head, block_t *tail, uint32_t count) {
  slab_note_remote();
  uintptr_t old = atomic_load_explicit(&s->remote, memory_order_relaxed), word;
  do {
    block_set_next(tail, (block_t *)(old & REMOTE_LIST_MASK));
    word = (uintptr_t)head | ((old & ~REMOTE_LIST_MASK) + ((uintptr_t)count << REMOTE_COUNT_SHIFT));
  } while (!atomic_compare_exchange_weak_explicit(&s->remote, &old, word, memory_order_release,
                                                  memory_order_relaxed));
  remote_counter_t *c = remote_counter_of(s); /* once per push of up to 32 blocks */
  atomic_fetch_add_explicit(&c->pushes, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&c->blocks, count, memory_order_relaxed);
}

/* Debug level 2: the whole slab is consistent. Every free block is inside the carved
 * part at a block boundary, the lists hold no cycle, and the count is in range. */
void slab_check(const slab_t *s) {
  if (HAKMEM_DEBUG < 2) return;
  uint32_t listed = 0;
  const block_t *lists[2] = {s->free, s->local_free};
  for (int l = 0; l < 2; l++) {
    for (const block_t *b = lists[l]; b != NULL; b = block_next(b)) {
      uintptr_t a = (uintptr_t)b;
      if (a < s->start || a >= s->start + (uintptr_t)s->capacity * s->block_size ||
          (a - s->start) % s->block_size != 0)
        error_fatal_pointer("corrupt free list (a block outside its slab)", "slab_check", b);
      if (++listed > s->capacity) error_fatal_pointer("corrupt free list (a cycle)", "slab_check", s);
    }
  }
  /* Every carved block is listed or out (remote frees count as out until collected),
   * and the queue head's pin adds one. */
  if (listed + s->used < s->capacity || listed + s->used > s->capacity + 1)
    error_fatal_pointer("slab counts disagree", "slab_check", s);
}
