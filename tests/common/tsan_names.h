/* Force-included (-include) into the ThreadSanitizer builds of the multi-threaded tests.
 *
 * ThreadSanitizer supplies malloc and free itself (its interceptors track every heap
 * block), so hakmem cannot replace them in a TSan process. The tests instead reach
 * hakmem's core, built with -fsanitize=thread, through its hak_ names: every standard
 * allocation call in the test's own code is renamed here. TSan then sees each of
 * hakmem's loads and stores, and the atomics and locks that order them. */
#ifndef HAKMEM_TSAN_NAMES_H
#define HAKMEM_TSAN_NAMES_H

#include <malloc.h>
#include <stdlib.h>

#include "hakmem.h"

#define malloc hak_malloc
#define calloc hak_calloc
#define realloc hak_realloc
#define reallocarray hak_reallocarray
#define free hak_free
#define free_sized hak_free_sized
#define free_aligned_sized hak_free_aligned_sized
#define posix_memalign hak_posix_memalign
#define aligned_alloc hak_aligned_alloc
#define memalign hak_memalign
#define valloc hak_valloc
#define pvalloc hak_pvalloc
#define malloc_usable_size hak_malloc_usable_size
#define malloc_trim hak_malloc_trim
#define malloc_stats hak_malloc_stats

#endif
