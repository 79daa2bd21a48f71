/* What a heap handle is. Heap structures, thread heaps' and user heaps' alike, live in
 * chunks of their own: 64 MiB-aligned reservations marked MAP_HEAPS in the region map,
 * touched lazily, a state byte per slot at the start. So any pointer is checked in O(1),
 * without reading through it: its region-map byte, its offset (a slot's start) and the
 * slot's state. Structures are never unmapped; a retired one keeps its lock, reference
 * count and generation (see hak_heap_t), which late threads may still read.
 *
 * Also the references that keep a user heap's memory from reuse while a free into it
 * is in flight (a pending remote chain, a hardened quarantine slot), and the user heap's
 * list of large blocks, which any thread's free may change. */

#include "block/block.h"

#include <stddef.h>

/* The hardened build gives a dead user heap's pages back and never reuses its slot, so
 * its slots are whole pages. */
#define SLOT_ALIGN (HAKMEM_SECURE ? 4096 : 64)
#define SLOT_STRIDE ((sizeof(hak_heap_t) + SLOT_ALIGN - 1) & ~(size_t)(SLOT_ALIGN - 1))
#define CHUNK_HEADER ((REGION_SIZE / SLOT_STRIDE + 4095) & ~(size_t)4095)
#define CHUNK_SLOTS ((REGION_SIZE - CHUNK_HEADER) / SLOT_STRIDE)

/* Under an address-space limit (ulimit -v) with no room for a whole chunk: 1 MiB of one
 * at the same alignment. The state bytes past its slots read as those of slots not yet
 * handed out, and nothing reads through such an address. */
#define CHUNK_SHORT ((size_t)1 << 20)
_Static_assert(CHUNK_SHORT >= CHUNK_HEADER + 64 * SLOT_STRIDE, "a short chunk holds 64 heaps");

static uint8_t *chunk;     /* the chunk slots are carved from; its state bytes first */
static size_t chunk_next;  /* its next fresh slot */
static size_t chunk_slots; /* its slots: CHUNK_SLOTS, fewer in a short one */

static uint8_t *chunk_map(size_t *slots) {
  *slots = CHUNK_SLOTS;
  uint8_t *c = os_map_aligned(REGION_SIZE, REGION_SIZE);
  if (c != NULL || !os_address_space_limited()) return c;
  c = os_map_aligned_part(CHUNK_SHORT, REGION_SIZE);
  if (c == NULL) return NULL;
  *slots = (CHUNK_SHORT - CHUNK_HEADER) / SLOT_STRIDE;
  atomic_fetch_add_explicit(&gstats.short_mappings, 1, memory_order_relaxed);
  return c;
}

static uint8_t *slot_state_byte(const void *p) {
  uintptr_t a = (uintptr_t)p, base = a & ~(uintptr_t)REGION_MASK;
  if (region_map_kind(a) != MAP_HEAPS || a - base < CHUNK_HEADER) return NULL;
  size_t off = a - base - CHUNK_HEADER;
  if (off % SLOT_STRIDE != 0 || off / SLOT_STRIDE >= CHUNK_SLOTS) return NULL;
  return (uint8_t *)base + off / SLOT_STRIDE;
}

hak_heap_t *heap_slot_new(void) {
  if (chunk == NULL || chunk_next == chunk_slots) {
    size_t slots;
    uint8_t *c = chunk_map(&slots);
    if (c == NULL) return NULL;
    pthread_mutex_lock(&region_lock);
    region_map[(uintptr_t)c >> REGION_SHIFT] = MAP_HEAPS;
    pthread_mutex_unlock(&region_lock);
    chunk = c;
    chunk_next = 0;
    chunk_slots = slots;
  }
  hak_heap_t *h = (hak_heap_t *)(chunk + CHUNK_HEADER + chunk_next++ * SLOT_STRIDE);
  pthread_mutex_init(&h->lock, NULL);
  return h;
}

unsigned heap_slot_state(const void *p) {
  const uint8_t *b = slot_state_byte(p);
  return b ? __atomic_load_n(b, __ATOMIC_ACQUIRE) : HEAP_SLOT_NONE;
}

void heap_slot_set_state(hak_heap_t *h, unsigned state) {
  __atomic_store_n(slot_state_byte(h), (uint8_t)state, __ATOMIC_RELEASE);
}

/* Hardened: a dead user heap's structure is never reused; its pages go back to the
 * OS, and its state byte goes on saying "destroyed". */
void heap_slot_bury(hak_heap_t *h) {
  heap_slot_set_state(h, HEAP_SLOT_DEAD);
  size_t page = os_page_size();
  uintptr_t from = ((uintptr_t)h + page - 1) & ~(page - 1);
  uintptr_t to = ((uintptr_t)h + SLOT_STRIDE) & ~(page - 1);
  if (to > from) os_purge((void *)from, to - from);
}

/* ---- references ------------------------------------------------------------------- */
hak_heap_t *heap_user_hold(slab_t *s, const void *p, const char *fn) {
  for (;;) {
    hak_heap_t *u = __atomic_load_n(&s->user_heap, __ATOMIC_ACQUIRE);
    if (u == NULL) return NULL;
    uint32_t g = __atomic_load_n(&s->user_gen, __ATOMIC_ACQUIRE);
    bool held = heap_user_ref(u, g);
    bool same = __atomic_load_n(&s->user_heap, __ATOMIC_ACQUIRE) == u &&
                __atomic_load_n(&s->user_gen, __ATOMIC_ACQUIRE) == g;
    if (held && same) return u;
    if (held) heap_user_unref(u);
    /* Released heaps hand their slabs over before they retire: a slab still naming a
     * retired heap of the same generation belongs to a destroyed one. */
    else if (same) error_fatal_pointer("block of a destroyed heap", fn, p);
  }
}

/* ---- a user heap's large blocks --------------------------------------------------- */
void heap_large_added(hak_heap_t *u, slab_t *s, size_t counted) {
  pthread_mutex_lock(&u->lock);
  __atomic_store_n(&s->user_gen, atomic_load_explicit(&u->gen, memory_order_relaxed), __ATOMIC_RELAXED);
  __atomic_store_n(&s->user_heap, u, __ATOMIC_RELEASE);
  queue_push_back(&u->large, s);
  heap_held_grow(u, counted);
  pthread_mutex_unlock(&u->lock);
}

/* s was a large block and has just been claimed by its free: it leaves its heap. The
 * heap's lock is never destroyed, so a free that raced with the heap's retirement
 * takes it safely and finds the block already gone (destroy and release empty the
 * list under that lock). */
void heap_large_freed(slab_t *s) {
  hak_heap_t *u = __atomic_load_n(&s->user_heap, __ATOMIC_ACQUIRE);
  if (u == NULL) return;
  pthread_mutex_lock(&u->lock);
  if (u->orphaned) { /* its list may have been mid-change at the fork: left alone */
    __atomic_store_n(&s->user_heap, NULL, __ATOMIC_RELAXED);
  } else if (__atomic_load_n(&s->user_heap, __ATOMIC_RELAXED) == u) {
    queue_remove(&u->large, s);
    __atomic_store_n(&s->user_heap, NULL, __ATOMIC_RELAXED);
    heap_held_add(u, -(size_t)s->units * UNIT_SIZE);
  }
  pthread_mutex_unlock(&u->lock);
}

/* ---- a thread's spare heap -------------------------------------------------------- */
/* The slabs of home's spare heap (a destroyed user heap kept for the next one) go back
 * to their regions once it has waited for the purge delay, or at once with `all`.
 * Returns the bytes. Only home's thread calls this. */
size_t heap_spare_trim(hak_heap_t *home, uint64_t now, bool all) {
  hak_heap_t *u = home->spare;
  if (u == NULL || u->spare_ms == 0) return 0;
  if (!all && (opt.purge_delay_ms < 0 || now - u->spare_ms < (uint64_t)opt.purge_delay_ms)) return 0;
  size_t bytes = span_cache_flush(u, now, -1);
  pthread_mutex_lock(&region_lock);
  for (uint32_t c = 0; c < NUM_CLASSES; c++) {
    for (slab_t *s; (s = u->queue[c].head) != NULL;) {
      queue_remove(&u->queue[c], s);
      bytes += (size_t)s->units * UNIT_SIZE;
      span_free(s, now);
    }
  }
  pthread_mutex_unlock(&region_lock);
  atomic_store_explicit(&u->held, 0, memory_order_relaxed);
  u->spare_ms = 0; /* an empty structure, kept for the next heap */
  return bytes;
}
