/* hakmem — a fast, lean, misuse-resistant general-purpose memory allocator.
 *
 * Two ways to use it:
 *   1. Replace malloc: LD_PRELOAD=libhakmem.so, or link with -lhakmem. The standard
 *      names (malloc, free, ..., operator new/delete) then go to hakmem.
 *   2. Side by side: call the hak_-prefixed functions below. They behave exactly like
 *      their standard counterparts and work whether or not malloc is replaced.
 *
 * Every hak_ function is thread-safe. Blocks from one family may not be freed by the
 * other allocator's free unless malloc is replaced (then both names are the same code).
 */
#ifndef HAKMEM_H
#define HAKMEM_H

#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HAKMEM_VERSION_MAJOR 0
#define HAKMEM_VERSION_MINOR 1
#define HAKMEM_VERSION_PATCH 0

#if defined(__GNUC__)
#define HAK_API __attribute__((visibility("default")))
#define HAK_MALLOC_ATTR __attribute__((malloc, warn_unused_result))
#else
#define HAK_API
#define HAK_MALLOC_ATTR
#endif

/* Allocation. Sizes >= PTRDIFF_MAX, overflowing counts and exhausted memory give NULL
 * with errno = ENOMEM. Every block is 16-byte aligned. */
HAK_API HAK_MALLOC_ATTR void *hak_malloc(size_t size);
HAK_API HAK_MALLOC_ATTR void *hak_calloc(size_t count, size_t size);
HAK_API void *hak_realloc(void *p, size_t size);
HAK_API void *hak_reallocarray(void *p, size_t count, size_t size);

/* Release. NULL is ignored. An invalid or double free prints one line on stderr
 * ("hakmem: free(): invalid pointer 0x..." / "hakmem: free(): double free 0x...")
 * and aborts. The sized forms also check that the size fits the block. */
HAK_API void hak_free(void *p);
HAK_API void hak_free_sized(void *p, size_t size);
HAK_API void hak_free_aligned_sized(void *p, size_t alignment, size_t size);

/* Aligned allocation. hak_posix_memalign returns EINVAL for an alignment that is not a
 * power of two multiple of sizeof(void*); the others return NULL with errno = EINVAL. */
HAK_API int hak_posix_memalign(void **out, size_t alignment, size_t size);
HAK_API HAK_MALLOC_ATTR void *hak_aligned_alloc(size_t alignment, size_t size);
HAK_API HAK_MALLOC_ATTR void *hak_memalign(size_t alignment, size_t size);
HAK_API HAK_MALLOC_ATTR void *hak_valloc(size_t size);
HAK_API HAK_MALLOC_ATTR void *hak_pvalloc(size_t size);

/* Introspection and control (glibc extensions). */
HAK_API size_t hak_malloc_usable_size(void *p);
/* Returns free memory to the OS now; 1 if memory was released, 0 if not. */
HAK_API int hak_malloc_trim(size_t pad);
/* Prints the statistics report (same as HAKMEM_STATS=1 at exit) to `out`. */
HAK_API void hak_stats_print(FILE *out);
HAK_API void hak_malloc_stats(void);

/* Process-wide figures, in bytes. */
typedef struct hak_info {
  size_t in_use;        /* bytes in live blocks (block sizes, not requests) */
  size_t peak_in_use;   /* highest in_use seen */
  size_t mapped;        /* address space currently mapped by hakmem */
  size_t committed;     /* mapped and not returned to the OS (an upper bound on RSS) */
  size_t released;      /* bytes returned to the OS so far (purges and unmaps) */
} hak_info_t;
HAK_API void hak_get_info(hak_info_t *info);

/* The sampling heap profiler (README "Profiling", docs/profiling.md). Off unless
 * HAKMEM_PROF=1 or hak_prof_start. It records the call stack of one allocation per
 * `rate` bytes on average (1: every allocation) and writes pprof heap profiles.
 * hak_prof_start: rate 0 keeps HAKMEM_PROF_RATE (default 512 KiB); returns 0, ENOMEM if
 * its tables cannot be mapped, ENOTSUP in the hardened library. hak_prof_stop: no new
 * samples; frees of sampled blocks are still followed. hak_prof_dump writes the
 * profile to path (NULL: HAKMEM_PROF_PREFIX.<pid>.<n>.heap); 0 or an errno value. */
HAK_API int hak_prof_start(size_t rate);
HAK_API void hak_prof_stop(void);
HAK_API int hak_prof_dump(const char *path);
typedef struct hak_prof_info {
  int active;                 /* sampling now */
  size_t rate;                /* mean bytes between samples */
  unsigned long long samples; /* taken since start */
  size_t stacks;              /* distinct stacks recorded */
  size_t live_samples;        /* sampled blocks not freed yet */
  unsigned long long dropped; /* samples a full table could not keep */
  size_t live_bytes_estimate; /* live bytes the samples stand for */
  size_t table_bytes;         /* memory mapped for the profiler's tables (a fixed bound) */
} hak_prof_info_t;
HAK_API void hak_prof_get_info(hak_prof_info_t *info);

#ifdef __cplusplus
}
#endif

#endif /* HAKMEM_H */
