/* Aligned allocation and the POSIX/glibc/C23 entry points built on it: posix_memalign,
 * aligned_alloc, memalign, valloc, pvalloc, free_sized, free_aligned_sized. */

#include "alloc_fast.h"
#include "hakmem.h"

#include <errno.h>

size_t block_usable_size(void *p, const char *fn);

static bool is_pow2(size_t x) { return x != 0 && (x & (x - 1)) == 0; }

/* Small and mid sizes: the first class at least n whose every block is aligned to
 * `align` (power-of-two classes always are), so the waste stays below the alignment
 * in the common cases. Beyond that, a large span started at an aligned offset. */
static void *aligned_alloc_impl(size_t align, size_t n) {
  if (align <= 16) return fast_malloc(n);
  if (hak_unlikely(n >= (size_t)PTRDIFF_MAX)) {
    errno = ENOMEM;
    return NULL;
  }
  size_t need = n + SECURE_TAIL;
  if (need <= MID_MAX && align <= MID_MAX) {
    uint32_t c = size_to_class(need < align ? align : need);
    c = class_aligned_from[__builtin_ctzl(align)][c];
    if (c < NUM_CLASSES) {
      hak_slab_t *s = hak_tls_heap->queue[c].head; /* the empty heap has no queue heads */
      void *p = s != NULL && s->free != NULL ? slab_pop(s, s->free) : heap_alloc_class_refill(c);
      if (p == NULL) return NULL;
      return HAKMEM_SECURE ? secure_arm(p, n) : p;
    }
  }
  if (heap_get() == NULL) {
    errno = ENOMEM;
    return NULL;
  }
  return large_alloc(n, align, false);
}

hak_export int hak_posix_memalign(void **out, size_t align, size_t n) {
  if (!is_pow2(align) || align % sizeof(void *) != 0) return EINVAL;
  int saved = errno;
  void *p = aligned_alloc_impl(align, n);
  if (p == NULL) {
    errno = saved;
    return ENOMEM;
  }
  *out = p;
  return 0;
}

hak_export void *hak_aligned_alloc(size_t align, size_t n) {
  if (!is_pow2(align)) {
    errno = EINVAL;
    return NULL;
  }
  return aligned_alloc_impl(align, n);
}

hak_export void *hak_memalign(size_t align, size_t n) { return hak_aligned_alloc(align, n); }

hak_export void *hak_valloc(size_t n) { return aligned_alloc_impl(os_page_size(), n); }

hak_export void *hak_pvalloc(size_t n) {
  size_t page = os_page_size();
  size_t rounded = (n + page - 1) & ~(page - 1);
  if (rounded < n) {
    errno = ENOMEM;
    return NULL;
  }
  return aligned_alloc_impl(page, rounded == 0 ? page : rounded);
}

/* A size given back at free must be one that could have produced this block: no
 * larger than it, and not so small that another class would have been chosen (or, past
 * REALLOC_SPAN_MIN, that realloc would have left it in a span of fewer units). */
static void check_size(void *p, size_t n, size_t align, const char *fn) {
  size_t usable = block_usable_size(p, "free");
  bool ok = n <= usable && (n * 2 >= usable || usable <= 16 || usable <= 2 * align ||
                            (n > REALLOC_SPAN_MIN && usable - n < UNIT_SIZE));
  if (!ok) hak_fatal_pointer("size mismatch", fn, p);
}

hak_export void hak_free_sized(void *p, size_t n) {
  if (p == NULL) return;
  check_size(p, n, 16, "free_sized");
  fast_free(p);
}

hak_export void hak_free_aligned_sized(void *p, size_t align, size_t n) {
  if (p == NULL) return;
  check_size(p, n, align, "free_sized");
  fast_free(p);
}
