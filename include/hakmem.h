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
#include <stdint.h>
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

/* ---- Statistics and control by name ----------------------------------------------
 * Every figure of the statistics report, and every option in force, has a stable dotted
 * name: "total.in_use", "tier.large.live_bytes", "class.5.live_blocks",
 * "remote.pushes", "purge.madvise_calls", "threads.alive", "opt.purge_delay_ms", ...
 * (hak_ctl_describe lists them; so does the README's table). Every value is a 64-bit
 * integer: an int64_t for a signed name (only opt.purge_delay_ms, whose -1 means
 * "never"), a uint64_t for the others. A figure marked exact counts every event; an
 * approximate one is a snapshot taken while other threads run, or an estimate.
 *
 * Errors are negative errno values, never a crash: -ENOENT for a name that does not
 * exist, -EINVAL for a NULL argument, a length other than 8, a value out of range or
 * the wrong type, -EPERM for a name that cannot change at run time, -ERANGE for a
 * buffer too small. Reading a counter takes no lock; a per-class or total figure walks
 * the heaps, holding each heap's lock for at most a few hundred slabs at a time. */

/* Reads the figure `name` (not a signed one) into *value. 0 or a negative errno. */
HAK_API int hak_stats_get(const char *name, uint64_t *value);
/* Reads any name. out == NULL asks for the size: *len = 8. Otherwise *len must be 8;
 * *out receives an int64_t or uint64_t (see the name's is_signed). */
HAK_API int hak_ctl_get(const char *name, void *out, size_t *len);
/* Changes an option at run time: len must be 8, *in an int64_t (signed names) or a
 * uint64_t. Writable: opt.purge_delay_ms (-1, or 0 .. 2^31-1), opt.region_cache
 * (0 .. 2^20), opt.stats (0 off, 1 text, 2 JSON at exit); the others give -EPERM. */
HAK_API int hak_ctl_set(const char *name, const void *in, size_t len);
/* The report in JSON (schema: README, "Monitoring and debugging"): to `out`, which
 * stays open; 0, -EINVAL for a NULL stream, or -EIO if writing failed. */
HAK_API int hak_stats_json(FILE *out);
/* The same into buf, NUL-terminated. *needed (if not NULL) receives the bytes the whole
 * report takes, the NUL included. Returns 0, or -ERANGE when it did not fit (buf then
 * holds as much as fitted). buf may be NULL with len 0, to ask for the size only; the
 * figures change between calls, so leave some room. */
HAK_API int hak_stats_json_buf(char *buf, size_t len, size_t *needed);

/* The table of names: entry i, or NULL past the last. A name with "<n>" stands for one
 * per size class, <n> from 0 to the value of "build.class_count" - 1. */
typedef struct hak_ctl_desc {
  const char *name;  /* "total.in_use", "class.<n>.live_blocks", ... */
  const char *unit;  /* "bytes", "blocks", "slabs", "calls", "threads", "ms", ... */
  const char *doc;   /* what it is, in one line */
  int is_signed;     /* 1: int64_t; 0: uint64_t */
  int exact;         /* 1: exact; 0: approximate (a snapshot or an estimate) */
  int writable;      /* 1: hak_ctl_set can change it */
} hak_ctl_desc_t;
HAK_API const hak_ctl_desc_t *hak_ctl_describe(size_t index);

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
