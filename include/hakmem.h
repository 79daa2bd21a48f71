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
  size_t in_use;      /* bytes in live blocks (block sizes, not requests) */
  size_t peak_in_use; /* highest in_use seen */
  size_t mapped;      /* address space currently mapped by hakmem */
  size_t committed;   /* mapped and not returned to the OS (an upper bound on RSS) */
  size_t released;    /* bytes returned to the OS so far (purges and unmaps) */
} hak_info_t;
HAK_API void hak_get_info(hak_info_t *info);

/* ---- Statistics and control by name ----------------------------------------------
 * Every figure of the statistics report, and every option in force, has a stable dotted
 * name: "total.in_use", "tier.large.live_bytes", "class.5.live_blocks",
 * "remote.pushes", "purge.madvise_calls", "threads.alive", "opt.purge_delay_ms", ...
 * (hak_ctl_describe lists them; so does docs/stats.md). Every value is a 64-bit
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
/* The report in JSON (docs/stats.md; schema: docs/stats-schema.json): to `out`, which
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
  const char *name; /* "total.in_use", "class.<n>.live_blocks", ... */
  const char *unit; /* "bytes", "blocks", "slabs", "calls", "threads", "ms", ... */
  const char *doc;  /* what it is, in one line */
  int is_signed;    /* 1: int64_t; 0: uint64_t */
  int exact;        /* 1: exact; 0: approximate (a snapshot or an estimate) */
  int writable;     /* 1: hak_ctl_set can change it */
} hak_ctl_desc_t;
HAK_API const hak_ctl_desc_t *hak_ctl_describe(size_t index);

/* The sampling heap profiler (docs/profiling.md). Off unless
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

/* ---- Heaps ------------------------------------------------------------------------
 * A heap holds blocks that are dropped together: make one for a request, a pass, a
 * frame, allocate into it, and destroy it, which frees every block in it at once, at a
 * cost proportional to the memory it holds (its slabs and big blocks), not to its
 * blocks. Its memory goes back to the process for reuse at once (the thread keeps up to
 * 16 MiB of slabs for its next heap, for the purge delay), and to the OS after the purge
 * delay (HAKMEM_PURGE_DELAY_MS), like any free memory.
 *
 * Threads. A heap belongs to the thread that made it: only that thread may allocate
 * from it, destroy or release it, make it its default or visit it; any other thread
 * doing so is reported. The result of every hak_heap_ allocation is an ordinary block:
 * free() and realloc() take it, from any thread, and the owner frees it as fast as a
 * block of its own heap. Other threads' frees are cross-thread frees as usual; until
 * they are handed over (in batches of up to 32 blocks or 4 KiB per slab, or when that
 * thread next takes a slow path or exits), the destroyed heap's memory is not reused.
 *
 * Destroy and the blocks in flight. A block of a destroyed heap is freed: using it is a
 * use after free, and freeing it, from any thread, is reported ("hakmem: free(): invalid
 * pointer", "double free" or "block of a destroyed heap") as long as its memory has not
 * been reused; a free that races with the destruction itself is reported or harmless.
 * The hardened library keeps the last 64 MiB of destroyed heaps' memory from reuse, and
 * never reuses a destroyed heap's handle.
 *
 * Thread exit: a thread's heaps that are still alive are released (below): their
 * blocks stay valid and go wherever the exiting thread's own blocks go; their handles
 * read as destroyed. fork(): the child keeps the heaps of the thread that forked, with
 * their blocks; the other threads' heaps are, in the child, as if those threads had
 * exited: their blocks stay valid (freeing them is safe), their handles read as
 * destroyed.
 *
 * Misuse of a handle (not a heap, destroyed, another thread's, destroying the thread's
 * own heap) prints one line ("hakmem: hak_heap_destroy(): destroyed heap 0x...") and
 * aborts. The default library checks handles in O(1) from the memory heaps live in, so
 * a destroyed heap's handle is recognised until a new heap reuses its structure (the
 * thread's next one often does). */
typedef struct hak_heap hak_heap_t;

/* A new, empty heap owned by the calling thread; NULL with errno = ENOMEM. */
HAK_API hak_heap_t *hak_heap_new(void);
/* Frees every block of the heap and the heap. */
HAK_API void hak_heap_destroy(hak_heap_t *heap);
/* Drops the heap but keeps its blocks alive: they move to the thread's own heap (the one
 * malloc used before any hak_heap_set_default), to be freed one by one. */
HAK_API void hak_heap_release(hak_heap_t *heap);

/* Allocation from a heap: the same size classes, alignment (16 bytes), limits and errno
 * rules as hak_malloc and friends. A block realloc can keep in place stays in its heap
 * (whichever that is); one it moves comes from `heap`. */
HAK_API HAK_MALLOC_ATTR void *hak_heap_malloc(hak_heap_t *heap, size_t size);
HAK_API HAK_MALLOC_ATTR void *hak_heap_calloc(hak_heap_t *heap, size_t count, size_t size);
HAK_API void *hak_heap_realloc(hak_heap_t *heap, void *p, size_t size);
HAK_API HAK_MALLOC_ATTR void *hak_heap_aligned_alloc(hak_heap_t *heap, size_t alignment, size_t size);
HAK_API int hak_heap_posix_memalign(hak_heap_t *heap, void **out, size_t alignment, size_t size);

/* The heap plain malloc (calloc, realloc, aligned allocation, operator new) allocates
 * from on the calling thread: its own heap unless set otherwise. set_default makes
 * `heap` (NULL: the thread's own) the default and returns the previous one; destroying
 * or releasing the default heap makes the thread's own heap the default again. */
HAK_API hak_heap_t *hak_heap_set_default(hak_heap_t *heap);
HAK_API hak_heap_t *hak_heap_get_default(void);

/* On the heap's thread (a user heap, or the thread's own heap): calls visitor on every
 * live block with its usable size, until it returns non-zero; returns that value, or 0.
 * The visitor must not allocate from the heap, free its blocks or destroy it. Blocks
 * that other threads freed but have not handed over yet are not visited. */
HAK_API int hak_heap_visit(hak_heap_t *heap, int (*visitor)(void *block, size_t size, void *arg), void *arg);

/* A heap's figures (a snapshot), from any thread, provided the heap is not destroyed or
 * released meanwhile. Blocks other threads freed that still wait to be handed over
 * count as live. */
typedef struct hak_heap_stats {
  size_t in_use;   /* bytes in live blocks (block sizes, as hak_info_t counts them) */
  size_t blocks;   /* live blocks */
  size_t reserved; /* bytes the heap holds: its slabs, spans it keeps, its big blocks */
  size_t peak;     /* the most it has held at once (a user heap; else `reserved`): an
                      upper bound on its peak bytes in use */
  size_t slabs;    /* slabs of small and mid blocks */
} hak_heap_stats_t;
HAK_API void hak_heap_stats(hak_heap_t *heap, hak_heap_stats_t *stats);

#ifdef __cplusplus
}
#endif

#endif /* HAKMEM_H */
