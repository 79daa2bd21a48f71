/* Part of internal.h (included there, in layer order): what checkers.c offers the entry
 * points above it, and HAK_CHECKED_ENTRY, which they are defined with. */
#ifndef HAKMEM_CHECKERS_H
#define HAKMEM_CHECKERS_H

#include <stddef.h>

#ifndef HAKMEM_VALGRIND
#define HAKMEM_VALGRIND 0 /* 1: <valgrind/memcheck.h> was found (CMakeLists.txt) */
#endif
/* Entry points chosen at load by checker (ifuncs), except where hakmem itself is built
 * with a sanitizer, which then sees all of it. */
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__) || !defined(__ELF__)
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
/* CHECKER_UNKNOWN: asked by another object's relocation before this library's own (the
 * weak references that tell a sanitizer are not bound yet); not kept. */
enum { CHECKER_UNKNOWN = -1, CHECKER_NONE, CHECKER_MEMCHECK, CHECKER_SANITIZER };
extern int hak_checker;      /* which one, set at load */
int checker_at_load(void);   /* decides it, once; safe in a resolver */
void checkers_at_start(void); /* process set-up: exits if a sanitizer cannot work */

/* HAK_CHECKED_ENTRY(type, name, (params)) { body }: defines the exported function `name`
 * as an ifunc that resolves, once at load, to the body that follows (with no checker)
 * or to checked_<name>. Callers from other objects reach either through the same GOT
 * slot as a plain function, so the choice costs the fast path nothing. Asked too early
 * (CHECKER_UNKNOWN), a hak_ name gets hakmem's body; a standard name (HAK_FORWARDED_
 * ENTRY) gets checked_<name>, which calls on the process's own allocation functions and
 * so is right under any checker or none. */
#if HAKMEM_CHECKERS
#define HAK_ENTRY_WITH(ret, name, params, when_unknown)                                    \
  static ret name##_hakmem params;                                                         \
  HAK_RESOLVER_SAFE static __typeof__(name##_hakmem) *name##_resolve(void) {               \
    int checker = checker_at_load();                                                       \
    if (checker == CHECKER_UNKNOWN) return when_unknown;                                   \
    return checker == CHECKER_NONE ? name##_hakmem : checked_##name;                       \
  }                                                                                        \
  hak_export __typeof__(name##_hakmem) name __attribute__((ifunc(#name "_resolve")));      \
  static ret name##_hakmem params
#define HAK_CHECKED_ENTRY(ret, name, params) HAK_ENTRY_WITH(ret, name, params, name##_hakmem)
#define HAK_FORWARDED_ENTRY(ret, name, params) HAK_ENTRY_WITH(ret, name, params, checked_##name)
#else
#define HAK_CHECKED_ENTRY(ret, name, params) hak_export ret name params
#define HAK_FORWARDED_ENTRY(ret, name, params) hak_export ret name params
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

#endif
