/* Everything free() does after the inlined fast path (api.h), in the order a
 * pointer is classified:
 *   1. another thread's block in a live slab: chained for its owner (remote.c);
 *   2. any other region pointer: the checks (invalid pointer, double free, a large
 *      block), then the owner's slow free or a remote push;
 *   3. a pointer outside every region: NULL, a huge block (huge.c), a malloc(0) block
 *      (guard.c), a block of the C library (foreign.c), or garbage.
 * Every invalid or double free ends here, with one line on stderr and abort(). */

#include "heap/heap.h"

/* free() of a pointer outside every region: NULL, a huge block, libc's, or garbage. */
void free_outside_regions(void *p, const char *fn) {
  uintptr_t a = (uintptr_t)p;
  switch (region_map_kind(a)) {
  case MAP_HUGE:
    prof_free_large(p);
    huge_free(p, fn);
    return;
  case MAP_HUGE_TAIL: error_fatal_pointer("invalid pointer", fn, p);
  case MAP_ZERO: zero_check(p, fn, true); return;
  default:
    if (p != NULL) foreign_free(p, fn);
  }
}

/* free() of a pointer the slab map has no slab for: one in no region (the zero
 * descriptor, or past the map's end), in a region unit that no slab covers, or any
 * pointer where the map could not be reserved. The region header answers. */
void free_unmapped(void *p) {
  uintptr_t a = (uintptr_t)p;
  if (p == NULL) return;
  if (region_map_kind(a) == MAP_REGION) heap_free_other(p, region_slab_of(a), tls_heap);
  else free_outside_regions(p, "free");
}

/* The block p points at inside a region (for realloc and malloc_usable_size); aborts
 * with fn's name if p is not one handed out: not a block start carving has reached, or
 * a block that is free (its tag, as free checks it). */
slab_t *region_block_checked(void *p, const char *fn) {
  uintptr_t a = (uintptr_t)p;
  slab_t *s = region_slab_of(a);
  uintptr_t owner = slab_owner(s);
  if (owner == OWNER_LARGE) {
    if (a != s->start) error_fatal_pointer("invalid pointer", fn, p);
  } else if (owner == OWNER_NONE || owner == OWNER_CACHED) {
    report_not_live(p, fn);
  } else if (!slab_is_carved_block(s, a) || ((block_t *)p)->free_tag == block_free_tag(s)) {
    error_fatal_pointer("invalid pointer", fn, p);
  }
  return s;
}

/* A free by a thread without a heap (one that has only freed): another heap's block is
 * pushed alone, as there are no chains to batch it in, and its owner noted as the heap
 * this thread's first malloc may take over (heap_take_parked). Everything else, and a
 * user heap's block (pushed under a reference), takes heap_free_slow. */
static HAK_NOINLINE void heap_free_heapless(void *p, slab_t *s) {
  uintptr_t owner = slab_owner(s), tag = block_free_tag(s);
  block_t *b = p;
  if (HAK_LIKELY(owner > OWNER_CACHED && slab_is_carved_block(s, (uintptr_t)p) && b->free_tag != tag &&
                 slab_user_heap(s) == NULL)) {
    heap_hint = owner;
    b->free_tag = tag;
    slab_remote_push_one(s, b);
    return;
  }
  if (slab_map_none(s)) free_unmapped(p);
  else heap_free_slow(p, s);
}

/* The free fast path ended here: the block is not in this thread's own, unflagged
 * slab. Another thread's block, the common case of a cross-thread free, is checked and
 * chained in about as few instructions as the owner's free takes; every other case goes
 * to heap_free_slow. */
void heap_free_other(void *p, slab_t *s, hak_heap_t *h) {
  uintptr_t a = (uintptr_t)p, owner = slab_owner(s), tag = block_free_tag(s);
  block_t *b = p;
  if (HAK_UNLIKELY(h == &empty_heap)) {
    heap_free_heapless(p, s);
    return;
  }
  if (HAK_LIKELY((owner > OWNER_CACHED || owner == OWNER_ABANDONED) && (owner & ~SLAB_FULL) != (uintptr_t)h &&
                 slab_is_carved_block(s, a) && b->free_tag != tag)) {
    b->free_tag = tag;
    heap_remote_batch(h, s, b);
    return;
  }
  if (slab_map_none(s)) free_unmapped(p);
  else heap_free_slow(p, s);
}

/* p is in a region but in no live slab: a block freed twice (its span since given
 * back), or a pointer that never was a block. The old descriptor and the free tag
 * tell which, without touching anything outside the region (nor a unit no span has
 * taken yet, inaccessible in the hardened build). */
_Noreturn void report_not_live(void *p, const char *fn) {
  uintptr_t a = (uintptr_t)p;
  region_t *r = region_of(a);
  size_t unit = (a >> UNIT_SHIFT) & (UNITS_PER_REGION - 1);
  const slab_t *d = &r->slabs[unit];
  bool was_large = d->class_idx == NUM_CLASSES && d->start == a;
  /* A freed block's tag names the descriptor of a slab that covered it: one of the
   * SLAB_MAX_UNITS descriptors up to its own unit's. (A freed large block is not read.
   * Hardened: a unit no span has taken is inaccessible, and so is every byte of a freed
   * large block while quarantined, its span's map entries still naming it.) */
  bool readable =
      !HAKMEM_SECURE || (bit_get(r->open_bits, unit) &&
                         __atomic_load_n(&region_slab_of(a)->class_idx, __ATOMIC_RELAXED) != NUM_CLASSES);
  uintptr_t tag =
      (a & 15) == 0 && !was_large && readable ? ((const block_t *)a)->free_tag ^ BLOCK_TAG_KEY : 0;
  uintptr_t lowest = (uintptr_t)&r->slabs[unit >= SLAB_MAX_UNITS ? unit - SLAB_MAX_UNITS + 1 : 0];
  bool tagged = tag >= lowest && tag <= (uintptr_t)d && (tag - lowest) % sizeof *d == 0;
  error_fatal_pointer(was_large || tagged ? "double free" : "invalid pointer", fn, p);
}

/* The checks every free of a region pointer makes off the fast path. Returns the
 * slab's owner word, or OWNER_LARGE once a large block has been freed. */
uintptr_t free_checked(void *p, slab_t *s) {
  uintptr_t a = (uintptr_t)p;
  uintptr_t owner = slab_owner(s);
  if (owner == OWNER_LARGE) {
    prof_free_large(p);
    large_free(s, p);
    return OWNER_LARGE;
  }
  if (owner == OWNER_NONE || owner == OWNER_CACHED) report_not_live(p, "free");
  if (!slab_is_carved_block(s, a)) error_fatal_pointer("invalid pointer", "free", p);
  /* A block carries the tag only between free and the next malloc: a match is a double
   * free. (The owner cannot rule it out by walking its lists: the first free may sit in
   * another thread's pending remote chain.) */
  if (((block_t *)p)->free_tag == block_free_tag(s)) error_fatal_pointer("double free", "free", p);
  return owner;
}

void heap_free_slow(void *p, slab_t *s) {
  uintptr_t owner = free_checked(p, s);
  if (owner == OWNER_LARGE) return;
  if (owner == OWNER_PROF) { /* a sampled block: back to the profiler's pool */
    prof_free_block(p, s);
    return;
  }
  hak_heap_t *h = tls_heap;
  block_t *b = p;
  uintptr_t tag = block_free_tag(s);
  if (h == &empty_heap && owner > OWNER_CACHED) heap_hint = owner;
  bool mine = (owner & ~SLAB_FULL) == (uintptr_t)h;
  if (!mine) {
    b->free_tag = tag;
    if (h != &empty_heap) heap_remote_batch(h, s, b);
    else remote_push_one(s, b);
    return;
  }
  if (slab_user_heap(s) != NULL) h = slab_user_heap(s); /* one of this thread's user heaps */
  /* Onto the list malloc pops, as the fast path does: a block on local_free would cost
   * the slab's next turn as head one more refill. The hardened build's frees all go to
   * local_free. */
  block_t **list = HAKMEM_SECURE ? &s->local_free : &s->free;
  /* A full slab moves lists: locked before its count drops, or heap_reclaim_idle
   * could take it off the full list first. */
  bool full = owner & SLAB_FULL;
  if (full) pthread_mutex_lock(&h->lock);
  uint32_t left = slab_owner_push(s, list, b);
  if (full) { /* it has room again: back to the class queue */
    uint32_t c = s->class_idx;
    queue_remove(&h->full[c], s);
    queue_push_back(&h->queue[c], s);
    __atomic_store_n(&s->owner, heap_owner_word(h), __ATOMIC_RELEASE);
    if (h->queue[c].head == s) heap_head_changed(h, c); /* the queue was empty */
    pthread_mutex_unlock(&h->lock);
  }
  if (left == 0) heap_slab_emptied(h, s);
}
