/* The standard names. Linking libhakmem or preloading it makes every malloc-family
 * call in the process — including glibc's __libc_* entry points — come here. malloc
 * and free inline the fast paths; the rest forward to the hak_ functions. */

#include "api/api.h"
#include "hakmem.h"

#include <errno.h>
#include <malloc.h>

#define EXPORT HAK_EXPORT

EXPORT void *malloc(size_t n) { return fast_malloc(n); }
EXPORT void free(void *p) { fast_free(p); }
EXPORT void *calloc(size_t c, size_t n) { return hak_calloc(c, n); }
EXPORT void *realloc(void *p, size_t n) { return hak_realloc(p, n); }
/* Under a checker, the names it leaves to hakmem go on to the ones it replaces. */
HAK_FORWARDED_ENTRY(void *, reallocarray, (void *p, size_t c, size_t n)) { return hak_reallocarray(p, c, n); }
EXPORT int posix_memalign(void **out, size_t a, size_t n) { return hak_posix_memalign(out, a, n); }
EXPORT void *aligned_alloc(size_t a, size_t n) { return hak_aligned_alloc(a, n); }
EXPORT void *memalign(size_t a, size_t n) { return hak_memalign(a, n); }
EXPORT void *valloc(size_t n) { return hak_valloc(n); }
HAK_FORWARDED_ENTRY(void *, pvalloc, (size_t n)) { return hak_pvalloc(n); }
EXPORT size_t malloc_usable_size(void *p) {
  size_t n = fast_usable_size(p);
  return HAK_LIKELY(n != 0) ? n : hak_malloc_usable_size(p);
}
HAK_FORWARDED_ENTRY(void, free_sized, (void *p, size_t n)) { hak_free_sized(p, n); }
HAK_FORWARDED_ENTRY(void, free_aligned_sized, (void *p, size_t a, size_t n)) {
  hak_free_aligned_sized(p, a, n);
}
EXPORT int malloc_trim(size_t pad) { return hak_malloc_trim(pad); }
EXPORT void malloc_stats(void) { hak_malloc_stats(); }
#ifdef __GLIBC__ /* musl has neither mallinfo nor mallinfo2 */
EXPORT struct mallinfo2 mallinfo2(void) { return stats_mallinfo2(); }

EXPORT struct mallinfo mallinfo(void) {
  struct mallinfo2 m2 = stats_mallinfo2();
  struct mallinfo m = {0};
  m.arena = (int)m2.arena;
  m.ordblks = (int)m2.ordblks;
  m.hblks = (int)m2.hblks;
  m.hblkhd = (int)m2.hblkhd;
  m.uordblks = (int)m2.uordblks;
  m.fordblks = (int)m2.fordblks;
  m.usmblks = (int)m2.usmblks;
  return m;
}
#endif

/* malloc_info(3): an XML summary, as glibc prints it, with hakmem's figures. */
EXPORT int malloc_info(int options, FILE *fp) {
  if (options != 0) {
    errno = EINVAL;
    return -1;
  }
  hak_info_t info;
  hak_get_info(&info);
  fprintf(fp,
          "<malloc version=\"hakmem-1\">\n<total type=\"in_use\" size=\"%zu\"/>\n"
          "<total type=\"mapped\" size=\"%zu\"/>\n<total type=\"committed\" size=\"%zu\"/>\n"
          "<total type=\"released\" size=\"%zu\"/>\n</malloc>\n",
          info.in_use, info.mapped, info.committed, info.released);
  return 0;
}

/* glibc's internal names, which some programs and libraries call directly. */
HAK_FORWARDED_ENTRY(void *, __libc_malloc, (size_t n)) { return fast_malloc(n); }
HAK_FORWARDED_ENTRY(void, __libc_free, (void *p)) { fast_free(p); }
HAK_FORWARDED_ENTRY(void *, __libc_calloc, (size_t c, size_t n)) { return hak_calloc(c, n); }
HAK_FORWARDED_ENTRY(void *, __libc_realloc, (void *p, size_t n)) { return hak_realloc(p, n); }
HAK_FORWARDED_ENTRY(void *, __libc_memalign, (size_t a, size_t n)) { return hak_memalign(a, n); }
HAK_FORWARDED_ENTRY(void *, __libc_valloc, (size_t n)) { return hak_valloc(n); }
HAK_FORWARDED_ENTRY(void *, __libc_pvalloc, (size_t n)) { return hak_pvalloc(n); }
HAK_FORWARDED_ENTRY(int, __posix_memalign, (void **out, size_t a, size_t n)) {
  return hak_posix_memalign(out, a, n);
}
EXPORT void cfree(void *p) { fast_free(p); }
