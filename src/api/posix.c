/* Aligned allocation and the POSIX/glibc/C23 entry points built on it: posix_memalign,
 * aligned_alloc, memalign, valloc, pvalloc, free_sized, free_aligned_sized. */

#include "api/api.h"
#include "hakmem.h"

#include <errno.h>

static bool is_pow2(size_t x) { return x != 0 && (x & (x - 1)) == 0; }

/* The common case, inlined into each entry point: the chosen class's head slab has a
 * free block. Up to 4 KiB the direct table already points at every class's head (at an
 * empty slab before the heap exists), so this is malloc's fast path plus one table
 * load; larger sizes look up the class and its queue head. No errno, no call, no saved
 * register (budget: 35 instructions with the return for posix_memalign, 32 for
 * aligned_alloc). NULL: take the
 * slow path (a refill, a large block, the hardened build). *wrapped: the caller passes
 * the block to heap_malloc_tick — posix_memalign after storing it, so that `out` need
 * not live in a saved register (3 instructions a call) for a call made once in 256. */
HAK_INLINE void *aligned_alloc_fast(size_t align, size_t n, bool *wrapped) {
  if (HAKMEM_SECURE) return NULL; /* the canaries' tail and malloc(0) need the slow path */
  size_t m = n < align ? align : n;
  unsigned bits = (unsigned)__builtin_ctzl(align);
  slab_t *s;
  if (HAK_LIKELY(m <= ALIGNED_DIRECT_MAX)) {
    s = tls_alloc->direct[aligned_direct[bits][(m - 1) >> 4]];
  } else {
    if (HAK_UNLIKELY(m > MID_MAX)) return NULL;
    uint32_t c = class_aligned_from[bits][size_to_class(m)];
    if (HAK_UNLIKELY(c >= NUM_CLASSES)) return NULL;
    s = tls_alloc->queue[c].head; /* the empty heap has no queue heads */
    if (HAK_UNLIKELY(s == NULL)) return NULL;
  }
  block_t *b = s->free;
  if (HAK_UNLIKELY(b == NULL)) return NULL;
  if (HAK_UNLIKELY(prof_countdown(tls_heap, n))) { /* the slow path counts it */
    tls_heap->prof_left += (int64_t)n;
    return NULL;
  }
  return slab_pop_counted(s, b, wrapped);
}

/* Everything else. Small and mid sizes: the first class at least n whose every block is
 * aligned to `align` (power-of-two classes always are), so the waste stays below the
 * alignment in the common cases. Beyond that, a large span started at an aligned offset. */
static HAK_NOINLINE void *aligned_alloc_slow(size_t align, size_t n) {
  if (align <= 16) return fast_malloc(n);
  if (HAK_UNLIKELY(n >= (size_t)PTRDIFF_MAX)) {
    errno = ENOMEM;
    return NULL;
  }
  hak_heap_t *h = tls_heap;
  if (h != &empty_heap && HAK_UNLIKELY((h->prof_left -= (int64_t)n) < 0)) {
    void *p = prof_sample(h, n, align, false);
    if (p != NULL) return p;
  }
  size_t need = n + SECURE_TAIL;
  if (need <= MID_MAX && align <= MID_MAX) {
    uint32_t c = size_to_class(need < align ? align : need);
    c = class_aligned_from[__builtin_ctzl(align)][c];
    if (c < NUM_CLASSES) {
      void *p = heap_alloc_class_refill(c); /* pops the head's free list first */
      if (p == NULL) return NULL;
      return HAKMEM_SECURE ? secure_arm(p, n) : p;
    }
  }
  if (heap_get() == NULL) {
    errno = ENOMEM;
    return NULL;
  }
  return large_alloc(n, align, 0); /* counted above */
}

/* posix_memalign leaves errno alone; only the slow path can touch it. */
static HAK_NOINLINE int posix_memalign_slow(void **out, size_t align, size_t n) {
  int saved = errno;
  void *p = aligned_alloc_slow(align, n);
  if (p == NULL) {
    errno = saved;
    return ENOMEM;
  }
  *out = p;
  return 0;
}

HAK_CHECKED_ENTRY(int, hak_posix_memalign, (void **out, size_t align, size_t n)) {
  if (!is_pow2(align) || align % sizeof(void *) != 0) return EINVAL;
  bool wrapped;
  void *p = aligned_alloc_fast(align, n, &wrapped);
  if (HAK_LIKELY(p != NULL)) {
    *out = p;
    if (HAK_UNLIKELY(wrapped)) heap_malloc_tick(p);
    return 0;
  }
  return posix_memalign_slow(out, align, n);
}

HAK_CHECKED_ENTRY(void *, hak_aligned_alloc, (size_t align, size_t n)) {
  if (!is_pow2(align)) {
    errno = EINVAL;
    return NULL;
  }
  bool wrapped;
  void *p = aligned_alloc_fast(align, n, &wrapped);
  if (HAK_LIKELY(p != NULL)) return HAK_UNLIKELY(wrapped) ? heap_malloc_tick(p) : p;
  return aligned_alloc_slow(align, n);
}

HAK_CHECKED_ENTRY(void *, hak_memalign, (size_t align, size_t n)) { return hak_aligned_alloc(align, n); }

HAK_CHECKED_ENTRY(void *, hak_valloc, (size_t n)) { return aligned_alloc_slow(os_page_size(), n); }

HAK_CHECKED_ENTRY(void *, hak_pvalloc, (size_t n)) {
  size_t page = os_page_size();
  size_t rounded = (n + page - 1) & ~(page - 1);
  if (rounded < n) {
    errno = ENOMEM;
    return NULL;
  }
  return aligned_alloc_slow(page, rounded == 0 ? page : rounded);
}

/* A size given back at free must be one that could have produced this block. Where the
 * block keeps the size it was asked for (a large block; a malloc(0) block; every small
 * block of the hardened build), that size exactly; elsewhere, no larger than the block,
 * and not so small that another class would have been chosen (or, past
 * REALLOC_SPAN_MIN, that realloc would have left it in a span of fewer units). */
static void check_size(void *p, size_t n, size_t align, const char *fn) {
  size_t usable = block_usable_size(p, "free");
  unsigned kind = region_map_kind((uintptr_t)p);
  bool exact =
      kind == MAP_ZERO ||
      (kind == MAP_REGION && (HAKMEM_SECURE || slab_owner(region_slab_of((uintptr_t)p)) == OWNER_LARGE));
  bool ok = exact ? n == usable
                  : n <= usable && (n * 2 >= usable || usable <= 16 || usable <= 2 * align ||
                                    (n > REALLOC_SPAN_MIN && usable - n < UNIT_SIZE));
  if (!ok) error_fatal_pointer("size mismatch", fn, p);
}

HAK_CHECKED_ENTRY(void, hak_free_sized, (void *p, size_t n)) {
  if (p == NULL) return;
  check_size(p, n, 16, "free_sized");
  fast_free(p);
}

HAK_CHECKED_ENTRY(void, hak_free_aligned_sized, (void *p, size_t align, size_t n)) {
  if (p == NULL) return;
  check_size(p, n, align, "free_sized");
  fast_free(p);
}
