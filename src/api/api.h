/* api/: the entry points (malloc and friends, aligned allocation, hak_heap_*, the
 * standard names, C++ operators, malloc_trim, process set-up), the checkers they are
 * chosen by at load, the hardened build's malloc and free, and the malloc and free fast
 * paths, inlined into every entry point that needs them.
 *
 * Fast-path budget (x86-64, release, read off the disassembly): malloc of <= 1 KiB is 15
 * instructions with one branch on the size, one on the free list and one on the malloc
 * count (see slab_t.used_ticks); free is 24 with five rarely-taken branches
 * (beyond the slab map, not the owner, not a block start carving has reached, already
 * free, the slab emptied). The heap profiler's countdown adds a subtraction and a branch to malloc
 * (prof_countdown). Check any change with `make perfcheck` (callgrind, against
 * bench/perf_baseline.json) and the disassembly. */
#ifndef HAKMEM_API_H
#define HAKMEM_API_H

#include "stats/stats.h"

#pragma GCC visibility push(hidden)

/* ---- checkers.c: valgrind's memcheck and the sanitizers, and HAK_CHECKED_ENTRY, which
 * the entry points are defined with ------------------------------------------------- */

/* Entry points chosen at load by checker (ifuncs), except where hakmem itself is built
 * with a sanitizer, which then sees all of it, and with musl, which has no ifuncs (its
 * static programs call address 0 there). */
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__) || !defined(__ELF__) || !defined(__GLIBC__)
#define HAKMEM_CHECKERS 0
#else
#define HAKMEM_CHECKERS 1
#endif
/* For code that runs while the library is relocated (ifunc resolvers): a static program
 * runs them before its thread-local storage, and so its stack canary, exists. */
#if defined(__has_attribute)
#if __has_attribute(no_stack_protector)
#define HAK_RESOLVER_SAFE __attribute__((no_stack_protector))
#endif
#endif
#ifndef HAK_RESOLVER_SAFE
#define HAK_RESOLVER_SAFE __attribute__((optimize("no-stack-protector")))
#endif
int checker_at_load(void);    /* decides it, once; safe in a resolver */
void checkers_at_start(void); /* process set-up: exits if a sanitizer cannot work */
/* fork: memcheck's table locked (true) after the others by init.c's prepare, or unlocked */
void checkers_atfork(bool prepare);

/* HAK_CHECKED_ENTRY(type, name, (params)) { body }: defines the exported function `name`
 * as an ifunc that resolves, once at load, to the body that follows (with no checker)
 * or to checked_<name>. Callers from other objects reach either through the same GOT
 * slot as a plain function, so the choice costs the fast path nothing. Asked too early
 * (CHECKER_UNKNOWN), a hak_ name gets hakmem's body; a standard name (HAK_FORWARDED_
 * ENTRY) gets checked_<name>, which calls on the process's own allocation functions and
 * so is right under any checker or none. */
#if HAKMEM_CHECKERS
#define HAK_ENTRY_WITH(ret, name, params, when_unknown)                               \
  static ret name##_hakmem params;                                                    \
  HAK_RESOLVER_SAFE static __typeof__(name##_hakmem) *name##_resolve(void) {          \
    int checker = checker_at_load();                                                  \
    if (checker == CHECKER_UNKNOWN) return when_unknown;                              \
    return checker == CHECKER_NONE ? name##_hakmem : checked_##name;                  \
  }                                                                                   \
  HAK_EXPORT __typeof__(name##_hakmem) name __attribute__((ifunc(#name "_resolve"))); \
  static ret name##_hakmem params
#define HAK_CHECKED_ENTRY(ret, name, params) HAK_ENTRY_WITH(ret, name, params, name##_hakmem)
#define HAK_FORWARDED_ENTRY(ret, name, params) HAK_ENTRY_WITH(ret, name, params, checked_##name)
#else
#define HAK_CHECKED_ENTRY(ret, name, params) HAK_EXPORT ret name params
#define HAK_FORWARDED_ENTRY(ret, name, params) HAK_EXPORT ret name params
#endif
void *checked_hak_malloc(size_t n);
void checked_hak_free(void *p);
void *checked_hak_calloc(size_t count, size_t size);
void *checked_hak_realloc(void *p, size_t n);
void *checked_hak_reallocarray(void *p, size_t count, size_t size);
size_t checked_hak_malloc_usable_size(void *p);
int checked_hak_posix_memalign(void **out, size_t align, size_t n);
void *checked_hak_aligned_alloc(size_t align, size_t n);
void *checked_hak_memalign(size_t align, size_t n);
void *checked_hak_valloc(size_t n);
void *checked_hak_pvalloc(size_t n);
void checked_hak_free_sized(void *p, size_t n);
void checked_hak_free_aligned_sized(void *p, size_t align, size_t n);
/* The standard names that memcheck or the sanitizers leave to hakmem: on to theirs. */
void *checked___libc_malloc(size_t n);
void checked___libc_free(void *p);
void *checked___libc_calloc(size_t c, size_t n);
void *checked___libc_realloc(void *p, size_t n);
void *checked___libc_memalign(size_t a, size_t n);
void *checked___libc_valloc(size_t n);
void *checked___libc_pvalloc(size_t n);
void *checked_pvalloc(size_t n);
int checked___posix_memalign(void **out, size_t a, size_t n);
void checked_free_sized(void *p, size_t n);
void checked_free_aligned_sized(void *p, size_t a, size_t n);
void *checked_reallocarray(void *p, size_t c, size_t n);

/* ---- secure.c: the hardened build's malloc and free ----------------------------- */
void secure_init(void);                             /* after list_key is set */
void secure_zero_init(void);                        /* secure_zero.c */
bool secure_all_zero(uintptr_t from, uintptr_t to); /* [from, to) all zero bytes? */
void *secure_arm(void *p, size_t n);                /* a free block handed out: zero, canary, size word */
void *secure_resize(void *p, slab_t *s, size_t n1, size_t n2); /* realloc in the block */
void secure_free(void *p);
size_t secure_usable(void *p, slab_t *s); /* requested size of a small block */
void *secure_malloc(size_t n);
void *secure_calloc(size_t n); /* n <= MID_MAX */
void secure_quarantine_flush(hak_heap_t *h, bool check);

/* ---- alloc.c -------------------------------------------------------------------- */
size_t block_usable_size(void *p, const char *fn);

/* ---- the fast paths ------------------------------------------------------------ */

/* The heap profiler's countdown (prof.c): true when this allocation of n bytes takes
 * h->prof_left below zero, and so may be sampled. Two instructions on x86-64: a
 * subtraction from memory and a branch on its sign. Only a heap with a block to hand
 * out counts here (the static empty heap, shared by threads, never does); the slow
 * paths count the rest, after giving back what this took. */
HAK_INLINE bool prof_countdown(hak_heap_t *h, size_t n) {
#if defined(__x86_64__) && defined(__GCC_ASM_FLAG_OUTPUTS__)
  bool negative;
  __asm__("subq %2, %0" : "+m"(h->prof_left), "=@ccs"(negative) : "r"(n));
  return negative;
#else
  return (h->prof_left -= (int64_t)n) < 0;
#endif
}

HAK_INLINE void *fast_malloc_raw(size_t n) {
  hak_heap_t *h = tls_alloc; /* the thread's heap, or the user heap it chose */
  if (HAK_LIKELY(n <= TINY_MAX)) {
    slab_t *s = h->direct[(n + 15) >> 4];
    block_t *b = s->free;
    if (HAK_LIKELY(b != NULL)) {
      HAK_ASSERT(region_slab_of((uintptr_t)b) == s && slab_is_carved_block(s, (uintptr_t)b));
      if (HAK_UNLIKELY(prof_countdown(h, n))) { /* a sample may be due: the slow path */
        h->prof_left += (int64_t)n;
        return heap_malloc_slow(n);
      }
      return slab_pop(s, b);
    }
  }
  return heap_malloc_slow(n);
}

HAK_INLINE void *fast_malloc(size_t n) {
  if (HAKMEM_SECURE) return secure_malloc(n);
  return fast_malloc_raw(n);
}

HAK_INLINE void fast_free(void *p) {
  if (HAKMEM_SECURE) {
    secure_free(p);
    return;
  }
  uintptr_t a = (uintptr_t)p;
  if (HAK_LIKELY((a >> UNIT_SHIFT) < tso_load(&slab_map_units))) {
    /* slab_map is set before slab_map_units: read it after (x86 keeps loads in order;
     * tso_load says so to ThreadSanitizer). */
    __asm__ volatile("" ::: "memory");
    /* Any pointer below the map's end finds a descriptor: its slab's, or the zero one
     * that no heap owns (NULL, libc's, huge, garbage: heap_free_other sorts them). */
    slab_t *s = slab_map_lookup(a);
    hak_heap_t *h = tls_heap;
    block_t *b = (block_t *)p;
    /* Owner, block start, not already free. The owner word is read plainly: only this
     * thread can make it equal to its own heap. (Its user heaps' slabs name it too.) */
    if (HAK_LIKELY(tso_load(&s->owner) == (uintptr_t)h && slab_is_carved_block(s, a) &&
                   b->free_tag != block_free_tag(s))) {
      /* Straight back on the list malloc pops: the next malloc of the class gets the
       * block just freed, still in cache. */
      if (HAK_LIKELY(slab_owner_push(s, &s->free, b) != 0)) return;
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
HAK_INLINE size_t fast_usable_size(const void *p) {
  uintptr_t a = (uintptr_t)p;
  if (HAKMEM_SECURE || HAK_UNLIKELY((a >> UNIT_SHIFT) >= tso_load(&slab_map_units))) return 0;
  __asm__ volatile("" ::: "memory"); /* slab_map after slab_map_units, as in fast_free */
  const slab_t *s = slab_map_lookup(a);
  uintptr_t owner = slab_owner(s);
  if (HAK_LIKELY((owner > OWNER_CACHED || owner == OWNER_ABANDONED) && slab_is_carved_block(s, a) &&
                 ((const block_t *)p)->free_tag != block_free_tag(s)))
    return s->block_size;
  return 0;
}

#pragma GCC visibility pop

#endif
