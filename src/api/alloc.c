/* The hak_ entry points: malloc, free, calloc, realloc and the checks that tell a block's
 * usable size and whether a pointer is one of ours. */

#include "api/api.h"
#include "hakmem.h"

#include <errno.h>
#include <string.h>

/* Each hak_ entry point is HAK_CHECKED_ENTRY: under a checker, checkers.c's instead. */
HAK_CHECKED_ENTRY(void *, hak_malloc, (size_t n)) { return fast_malloc(n); }

HAK_CHECKED_ENTRY(void, hak_free, (void *p)) { fast_free(p); }

size_t block_usable_size(void *p, const char *fn) {
  uintptr_t a = (uintptr_t)p;
  switch (region_map_kind(a)) {
  case MAP_REGION: {
    slab_t *s = region_block_checked(p, fn);
    if (HAKMEM_SECURE && slab_owner(s) != OWNER_LARGE) return secure_usable(p, s);
    return s->block_size;
  }
  case MAP_ZERO: zero_check(p, fn, false); return 0;
  case MAP_HUGE: return huge_usable(p, fn);
  case MAP_HUGE_TAIL: error_fatal_pointer("invalid pointer", fn, p);
  default: return p == NULL ? 0 : foreign_usable(p, fn);
  }
}

HAK_CHECKED_ENTRY(size_t, hak_malloc_usable_size, (void *p)) {
  size_t n = fast_usable_size(p);
  return HAK_LIKELY(n != 0) ? n : block_usable_size(p, "malloc_usable_size");
}

HAK_CHECKED_ENTRY(void *, hak_calloc, (size_t count, size_t size)) {
  size_t total;
  if (HAK_UNLIKELY(__builtin_mul_overflow(count, size, &total))) {
    errno = ENOMEM;
    return NULL;
  }
  if (total <= MID_MAX) {
    if (HAKMEM_SECURE) return secure_calloc(total);
    void *p = fast_malloc(total);
    if (HAK_LIKELY(p != NULL)) memset(p, 0, total);
    return p;
  }
  if (total >= (size_t)PTRDIFF_MAX) {
    errno = ENOMEM;
    return NULL;
  }
  if (heap_get() == NULL) {
    errno = ENOMEM;
    return NULL;
  }
  return prof_large_alloc(total, 0, LARGE_ZERO); /* fresh or purged memory is not cleared again */
}

/* Keep the block when the new size still uses at least half of it. */
static bool fits_in_place(size_t n, size_t usable) { return n <= usable && n * 2 >= usable; }

static void *realloc_move(void *p, size_t old_usable, size_t n) {
  void *q = fast_malloc(n);
  if (q == NULL) return NULL;
  memcpy(q, p, old_usable < n ? old_usable : n);
  fast_free(p);
  return q;
}

HAK_CHECKED_ENTRY(void *, hak_realloc, (void *p, size_t n)) {
  if (p == NULL) return fast_malloc(n);
  if (HAK_UNLIKELY(n >= (size_t)PTRDIFF_MAX)) {
    block_usable_size(p, "realloc"); /* still report a bad pointer */
    errno = ENOMEM;
    return NULL;
  }
  uintptr_t a = (uintptr_t)p;
  switch (region_map_kind(a)) {
  case MAP_REGION: {
    slab_t *s = region_block_checked(p, "realloc");
    if (n == 0) {
      fast_free(p);
      return NULL;
    }
    size_t usable = s->block_size;
    if (HAKMEM_SECURE && slab_owner(s) != OWNER_LARGE) {
      size_t room = usable - SECURE_TAIL;
      usable = secure_usable(p, s);
      if (fits_in_place(n, room)) return secure_resize(p, s, usable, n);
      /* A block that grows moves to one with twice its room, then says n, as below. */
      if (n > room && n < 2 * room && 2 * room <= MID_MAX - SECURE_TAIL) {
        void *q = realloc_move(p, usable, 2 * room);
        if (q == NULL) return NULL;
        slab_t *qs = region_slab_of((uintptr_t)q);
        return slab_owner(qs) == OWNER_LARGE ? q : secure_resize(q, qs, 2 * room, n);
      }
      return realloc_move(p, usable, n);
    }
    if (slab_owner(s) == OWNER_LARGE) { /* usable size n: resized, canary and guard moved */
      if (n == usable) return p;
      if (n > REALLOC_SPAN_MIN && large_realloc_in_place(s, p, n) != NULL) return p;
    } else if (fits_in_place(n, usable) || (n <= usable && usable <= 16)) {
      return p;
    }
    if (n > REALLOC_SPAN_MIN) {
      if (n > usable && n <= LARGE_MAX) {
        void *q = prof_large_alloc(n, 0, LARGE_GROWING);
        if (q == NULL) return NULL;
        memcpy(q, p, usable);
        fast_free(p);
        return q;
      }
    }
    /* A block that grows moves to one at least twice its size: a growing buffer then
     * passes one class per doubling instead of four, and so leaves blocks carved for it
     * in a quarter of the classes. */
    if (n > usable && n < 2 * usable && 2 * usable <= REALLOC_SPAN_MIN) n = 2 * usable;
    return realloc_move(p, usable, n);
  }
  case MAP_HUGE: {
    size_t usable = huge_usable(p, "realloc");
    if (n == 0) {
      prof_free_large(p);
      huge_free(p, "realloc");
      return NULL;
    }
    if (n > LARGE_MAX) {
      prof_free_large(p); /* a sampled block remapped is no longer followed */
      return huge_realloc(p, n);
    }
    return realloc_move(p, usable, n);
  }
  case MAP_HUGE_TAIL: error_fatal_pointer("invalid pointer", "realloc", p);
  case MAP_ZERO: /* a malloc(0) block: nothing to copy */
    zero_check(p, "realloc", n == 0);
    if (n == 0) return NULL;
    p = fast_malloc(n);
    if (p != NULL) zero_check((void *)a, "realloc", true);
    return p;
  default: {
    size_t usable = foreign_usable(p, "realloc");
    if (n == 0) {
      foreign_free(p, "realloc");
      return NULL;
    }
    void *q = fast_malloc(n);
    if (q == NULL) return NULL;
    memcpy(q, p, usable < n ? usable : n);
    foreign_free(p, "realloc");
    return q;
  }
  }
}

HAK_CHECKED_ENTRY(void *, hak_reallocarray, (void *p, size_t count, size_t size)) {
  size_t total;
  if (__builtin_mul_overflow(count, size, &total)) {
    errno = ENOMEM;
    return NULL;
  }
  return hak_realloc(p, total);
}
