/* The malloc and free fast paths, inlined into every entry point that needs them.
 *
 * Budget (x86-64, release, read off the disassembly): malloc of <= 1 KiB is 15
 * instructions with one branch on the size, one on the free list and one on the malloc
 * count (see hak_slab_t.used_ticks); free is 24 with five rarely-taken branches
 * (beyond the slab map, not the owner, not a block start carving has reached, already
 * free, the slab emptied). The heap profiler's countdown adds a subtraction and a branch to malloc
 * (prof_countdown). Check any change with `make perfcheck` (callgrind, against
 * bench/perf_baseline.json) and the disassembly. */
#ifndef HAKMEM_ALLOC_FAST_H
#define HAKMEM_ALLOC_FAST_H

#include "internal.h"

/* The heap profiler's countdown (prof.c): true when this allocation of n bytes takes
 * h->prof_left below zero, and so may be sampled. Two instructions on x86-64: a
 * subtraction from memory and a branch on its sign. Only a heap with a block to hand
 * out counts here (the static empty heap, shared by threads, never does); the slow
 * paths count the rest, after giving back what this took. */
hak_inline bool prof_countdown(hak_heap_t *h, size_t n) {
#if defined(__x86_64__) && defined(__GCC_ASM_FLAG_OUTPUTS__)
  bool negative;
  __asm__("subq %2, %0" : "+m"(h->prof_left), "=@ccs"(negative) : "r"(n));
  return negative;
#else
  return (h->prof_left -= (int64_t)n) < 0;
#endif
}

hak_inline void *fast_malloc_raw(size_t n) {
  hak_heap_t *h = hak_tls_alloc; /* the thread's heap, or the user heap it chose */
  if (hak_likely(n <= TINY_MAX)) {
    hak_slab_t *s = h->direct[(n + 15) >> 4];
    hak_block_t *b = s->free;
    if (hak_likely(b != NULL)) {
      HAK_ASSERT(region_slab_of((uintptr_t)b) == s && slab_is_carved_block(s, (uintptr_t)b));
      if (hak_unlikely(prof_countdown(h, n))) { /* a sample may be due: the slow path */
        h->prof_left += (int64_t)n;
        return heap_malloc_slow(n);
      }
      return slab_pop(s, b);
    }
  }
  return heap_malloc_slow(n);
}

hak_inline void *fast_malloc(size_t n) {
  if (HAKMEM_SECURE) return secure_malloc(n);
  return fast_malloc_raw(n);
}

hak_inline void fast_free(void *p) {
  if (HAKMEM_SECURE) {
    secure_free(p);
    return;
  }
  uintptr_t a = (uintptr_t)p;
  if (hak_likely((a >> UNIT_SHIFT) < hak_tso_load(&slab_map_units))) {
    /* slab_map is set before slab_map_units: read it after (x86 keeps loads in order;
     * hak_tso_load says so to ThreadSanitizer). */
    __asm__ volatile("" ::: "memory");
    /* Any pointer below the map's end finds a descriptor: its slab's, or the zero one
     * that no heap owns (NULL, libc's, huge, garbage: heap_free_other sorts them). */
    hak_slab_t *s = slab_map_lookup(a);
    hak_heap_t *h = hak_tls_heap;
    hak_block_t *b = (hak_block_t *)p;
    /* Owner, block start, not already free. The owner word is read plainly: only this
     * thread can make it equal to its own heap. (Its user heaps' slabs name it too.) */
    if (hak_likely(hak_tso_load(&s->owner) == (uintptr_t)h && slab_is_carved_block(s, a) &&
                   b->free_tag != block_free_tag(s))) {
      /* Straight back on the list malloc pops: the next malloc of the class gets the
       * block just freed, still in cache. */
      if (hak_likely(slab_owner_push(s, &s->free, b) != 0)) return;
      heap_slab_emptied(h, s);
      return;
    }
    heap_free_other(p, s, h);
    return;
  }
  free_unmapped(p);
}

/* malloc_usable_size of a block in a slab that a heap owns (its class size), found and
 * checked as free's fast path finds it (a carved block start, not free); 0 for every
 * other pointer, which block_usable_size sorts out (a heap block's size is never 0). */
hak_inline size_t fast_usable_size(const void *p) {
  uintptr_t a = (uintptr_t)p;
  if (HAKMEM_SECURE || hak_unlikely((a >> UNIT_SHIFT) >= hak_tso_load(&slab_map_units))) return 0;
  __asm__ volatile("" ::: "memory"); /* slab_map after slab_map_units, as in fast_free */
  const hak_slab_t *s = slab_map_lookup(a);
  uintptr_t owner = slab_owner(s);
  if (hak_likely((owner > OWNER_CACHED || owner == OWNER_ABANDONED) &&
                 slab_is_carved_block(s, a) && ((const hak_block_t *)p)->free_tag != block_free_tag(s)))
    return s->block_size;
  return 0;
}

#endif
