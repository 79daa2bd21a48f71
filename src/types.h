/* hakmem core types.
 *
 * Glossary (bottom-up, as the files are layered):
 *   unit    64 KiB of address space, the grain in which regions hand out memory.
 *   region  a 64 MiB, 64 MiB-aligned mapping (a "superslab"). Its first units hold the
 *           region header: the unit map and one slab descriptor per unit. Any address
 *           inside a region finds its slab with a mask and one load (region_slab_of).
 *   span    a run of free or used units inside one region.
 *   slab    a span carved into blocks of one size class. Small/mid blocks live here.
 *           A large block is a slab holding exactly one block.
 *   block   what malloc returns. A free block's first word links the free list, its
 *           second word holds the "free tag" (its slab descriptor's address) that makes
 *           double frees visible in one compare.
 *   class   a block size. Tiny classes cover <= 1 KiB, mid classes <= 128 KiB.
 *   heap    one thread's allocation state: per-class queues of the slabs it owns.
 *           Only the owning thread touches a slab's non-atomic fields; other threads
 *           push frees onto the slab's atomic remote list. A user heap (hak_heap_new)
 *           is one more heap of its creating thread, destroyed or released whole.
 *   huge    a block over half a region (32 MiB): mapped on its own; a few freed ones of
 *           up to 64 MiB are kept for reuse (purge.c), the rest unmapped at free.
 *
 * Owner word: every slab descriptor's `owner` is the owning thread heap's address, with
 * SLAB_FULL or'ed in when the slab has no free block, or a small constant for the
 * states no heap owns. So "freed by the owner, nothing special" is one compare. A user
 * heap's slabs carry its thread's heap there too (so that thread frees them on the fast
 * path) and name the user heap in `user_heap`.
 */
#ifndef HAKMEM_TYPES_H
#define HAKMEM_TYPES_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- attributes and build switches --------------------------------------------- */
#define hak_likely(x) __builtin_expect(!!(x), 1)
#define hak_unlikely(x) __builtin_expect(!!(x), 0)
/* Keeps the compiler from moving memory accesses across it; emits nothing. */
#define hak_compiler_barrier() __asm__ volatile("" ::: "memory")

/* Words read or written plainly on a fast path while other threads use atomics on them
 * (the owner word and a slab's `used` on free; the slab map's size and entries). The
 * protocol relies on x86 keeping stores in order and loads in order, plus a compiler
 * barrier, for fewer instructions per free than C11 atomics. A ThreadSanitizer build
 * turns them into the acquire loads and release stores x86 gives, so that what it
 * reports is a race in the protocol, not these. */
#if defined(__SANITIZE_THREAD__)
#define hak_tso_load(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define hak_tso_store(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#else
#define hak_tso_load(p) (*(p))
#define hak_tso_store(p, v) (*(p) = (v))
#endif
#define hak_noinline __attribute__((noinline))
#define hak_cold __attribute__((cold, noinline))
#define hak_inline static inline __attribute__((always_inline))
#define hak_internal __attribute__((visibility("hidden")))
#define hak_export __attribute__((visibility("default")))

/* Compile-time debug level: 0 release, 1 cheap assertions, 2 whole-slab walks.
 * Used in plain ifs so every configuration compiles in every build. */
#ifndef HAKMEM_DEBUG
#define HAKMEM_DEBUG 0
#endif
/* The hardened build (libhakmem-secure): encoded free lists, canaries, quarantine,
 * guard pages, zero-on-free, randomised carving. Also a plain-if constant. */
#ifndef HAKMEM_SECURE
#define HAKMEM_SECURE 0
#endif
/* ThreadSanitizer builds leave out what only the kernel's view of a thread makes safe
 * (the purge thread's fencing of an idle heap): TSan cannot see that order. */
#if defined(__SANITIZE_THREAD__)
#define HAKMEM_TSAN 1
#else
#define HAKMEM_TSAN 0
#endif
/* Hardened small blocks end in canary bytes and an encoded size word. */
#define SECURE_TAIL (HAKMEM_SECURE ? 16 : 0)
#define QUARANTINE_SLOTS (HAKMEM_SECURE ? 256 : 1)
#define QUARANTINE_BYTES ((uint32_t)128 << 10)

/* ---- geometry ------------------------------------------------------------------- */
#define UNIT_SHIFT 16
#define UNIT_SIZE ((size_t)1 << UNIT_SHIFT)
/* 64 MiB: a large block of up to 32 MiB leaves room in its region for others. */
#define REGION_SHIFT 26
#define REGION_SIZE ((size_t)1 << REGION_SHIFT)
#define REGION_MASK (REGION_SIZE - 1)
#define UNITS_PER_REGION (REGION_SIZE / UNIT_SIZE) /* 1024 */
/* What a free unit has written is tracked in 4 KiB steps (touched_pages). */
#define TOUCH_SHIFT 12
/* Units 0..2 hold the header; the hardened build keeps the last unit as a guard. */
#define REGION_HEADER_UNITS 3
#define REGION_MAX_SPAN_UNITS (UNITS_PER_REGION - REGION_HEADER_UNITS - HAKMEM_SECURE)
/* A region is 32 ranges of 2 MiB, each the size and alignment of an x86-64 huge page:
 * the grain in which the purge thread turns dense memory into huge pages (thp.c). */
#define HUGE_PAGE_SHIFT 21
#define HUGE_PAGE_SIZE ((size_t)1 << HUGE_PAGE_SHIFT)
#define RANGE_UNITS (HUGE_PAGE_SIZE / UNIT_SIZE)          /* 32 */
#define RANGES_PER_REGION (UNITS_PER_REGION / RANGE_UNITS) /* 32 */

/* The region map covers the 47-bit user address space, one byte per region. */
#define ADDRESS_BITS 47
#define REGION_MAP_ENTRIES ((size_t)1 << (ADDRESS_BITS - REGION_SHIFT))

enum region_map_kind {
  MAP_NONE = 0,      /* not hakmem's */
  MAP_REGION = 1,    /* a region: slabs and large blocks */
  MAP_HUGE = 2,      /* a huge block whose header is at this region-sized chunk's start */
  MAP_HUGE_TAIL = 3, /* the rest of a huge mapping */
  MAP_ZERO = 4,      /* hardened build: inaccessible home of malloc(0) blocks */
  MAP_HEAPS = 5,     /* heap structures (heap_handle.c): a heap handle is checked here */
};

/* ---- size classes -------------------------------------------------------------- */
#define TINY_MAX 1024
#define MID_MAX ((size_t)128 * 1024)
#define TINY_CLASSES 20 /* 16..128 by 16, then 4 per doubling to 1024 */
/* Mid classes: 4 per doubling, 1280 .. 128 KiB, and in the doublings of MID_EIGHTHS (a
 * bit per power of two) one more at a power of two plus an eighth (size_class.c). */
#define MID_EIGHTHS ((1u << 10) | (1u << 11) | (1u << 12)) /* 1152, 2304, 4608 */
#define MID_CLASSES 31
#define MID_SIZE_STEP 128 /* every mid class is a multiple: size_to_class's table step */
#define NUM_CLASSES (TINY_CLASSES + MID_CLASSES)
_Static_assert(NUM_CLASSES <= 64, "hak_heap_t's class bit masks have a bit per class");
#define DIRECT_SLOTS (TINY_MAX / 16 + 1)
/* Aligned allocation up to this size (and so alignment) goes through direct slots: the
 * tiny ones, and one more per mid class up to it (1152 .. 4096), after them. */
#define ALIGNED_DIRECT_MAX 4096
#define MID_DIRECT_CLASSES 10
#define ALL_DIRECT_SLOTS (DIRECT_SLOTS + MID_DIRECT_CLASSES)
/* Large spans live inside regions up to half a region; bigger blocks get a mapping of
 * their own, which realloc can grow by moving pages instead of copying them. */
#define LARGE_MAX (REGION_SIZE / 2)
#define SLAB_MAX_UNITS 8 /* the largest mid class: 4 blocks of 128 KiB */

/* ---- owner word values ---------------------------------------------------------- */
#define SLAB_FULL ((uintptr_t)1)   /* or'ed into a heap address */
#define OWNER_NONE ((uintptr_t)0)  /* free unit, region header: never a valid block */
/* A slab of the heap profiler's pool (prof.c): its blocks were sampled. Below
 * OWNER_ABANDONED, so every free of one leaves the fast paths for heap_free_slow. */
#define OWNER_PROF ((uintptr_t)0x08)
#define OWNER_ABANDONED ((uintptr_t)0x10) /* owner thread exited; live blocks remain */
#define OWNER_LARGE ((uintptr_t)0x20)     /* one large block; freed on the slow path */
#define OWNER_CACHED ((uintptr_t)0x30)    /* a free span in a heap's span cache */

/* The remote list word: block addresses fit in ADDRESS_BITS, and the count of a slab's
 * blocks in the 16 bits above (like `used`: a slab holds at most UNIT_SIZE / 16). */
#define REMOTE_COUNT_SHIFT 48
#define REMOTE_LIST_MASK (((uintptr_t)1 << REMOTE_COUNT_SHIFT) - 1)
_Static_assert(ADDRESS_BITS <= REMOTE_COUNT_SHIFT, "block addresses must leave the count's bits free");
_Static_assert(UNIT_SIZE / 16 < ((uintptr_t)1 << (64 - REMOTE_COUNT_SHIFT)),
               "a slab's blocks must fit the remote count");

typedef struct hak_block {
  struct hak_block *next;
  uintptr_t free_tag; /* its slab descriptor's address while free; 0 once allocated */
} hak_block_t;

struct hak_heap;

typedef struct hak_slab {
  /* --- what every free reads, and what other threads write once per batch of frees.
   * The owner's allocations never write this line, so a thread that frees another's
   * blocks reads it without pulling it away from the owner at every block. --- */
  uintptr_t owner;          /* see "Owner word"; written with __atomic_store_n */
  uint32_t class_idx;
  uint32_t block_size;
  uint64_t div_magic;       /* ceil(2^64 / block_size) */
  uint64_t start_magic;     /* start * div_magic: a block start has
                               a * div_magic - start_magic < div_magic */
  uintptr_t start;          /* address of block 0 (a large block's user pointer) */
  /* Frees from other threads: the list's head, with the number of blocks on it in the
   * top bits (see REMOTE_COUNT_SHIFT), so that one compare-and-swap pushes a chain and
   * counts it, and one exchange takes both. */
  _Atomic uintptr_t remote;
  /* The user heap whose slab (or large block) this is, NULL for a thread heap's, and
   * that heap's generation when it took the slab: a free checks both before it keeps
   * a reference to the heap (heap_user_ref). Written with relaxed atomics. */
  struct hak_heap *user_heap;
  uint32_t user_gen;
  /* --- the owner's line: its free lists and counts, written by every malloc --- */
  _Alignas(64) hak_block_t *free; /* blocks to allocate from (owner only) */
  hak_block_t *local_free;  /* hardened build: the owner's frees that took the slow
                               path (blocks out of its quarantine go on `free`, as the
                               default build's owner frees all do) */
  /* `used` and a count of mallocs in one word, bumped by one add whose carry out of
   * the top byte, every 256 mallocs from the slab, sends malloc to look at the clock
   * for deferred work: the owner's frees go straight back on the list malloc pops, so
   * a thread that frees as much as it allocates may otherwise never leave the fast
   * path. (A slab holds at most UNIT_SIZE / 16 blocks, so `used` fits its 16 bits.) */
  union {
    struct {
      uint16_t used;        /* blocks out (remote frees count until collected) */
      uint8_t used_pad;     /* stays zero: `used` never carries into it */
      uint8_t malloc_ticks;
    };
    uint32_t used_ticks;
  };
  uint32_t capacity;        /* blocks carved so far */
  uint32_t reserved;        /* blocks that fit */
  uint16_t units;           /* span length in units */
  uint16_t unit_idx;        /* first unit inside the region */
  uint32_t touched;         /* bytes from the span's start that may be resident: what
                               any use of the span has written since it was last purged */
  struct hak_slab *next;    /* heap queue / abandoned list */
  struct hak_slab *prev;
  uint64_t aux;             /* large: requested size */
} hak_slab_t;

typedef struct hak_slab_queue {
  hak_slab_t *head;
  hak_slab_t *tail;
  size_t count;
} hak_slab_queue_t;

typedef struct hak_region {
  uint64_t magic;
  struct hak_region *next, *prev; /* all regions */
  uint32_t free_units;            /* units past the header not in any span */
  uint32_t dirty_free_units;      /* free units that may still hold committed pages */
  /* Its 2 MiB ranges (bit g: units 32 g .. 32 g + 31): collapsed into a huge page and not
   * purged in part since; left MADV_HUGEPAGE for khugepaged (a kernel without
   * MADV_COLLAPSE); advised ones purged since, to be advised MADV_NOHUGEPAGE again. */
  uint32_t huge_ranges, advised_ranges, unadvise_ranges;
  uint32_t pins;                  /* the purge thread works on a range without region_lock */
  uint8_t range_used[RANGES_PER_REGION];    /* units in spans (the header's count) */
  uint8_t range_purges[RANGES_PER_REGION];  /* bumped whenever a range's units are purged */
  uint32_t range_look_ms[RANGES_PER_REGION]; /* the purge thread's last look for a collapse */
  uint64_t free_bits[UNITS_PER_REGION / 64];  /* 1 = unit free */
  uint64_t dirty_bits[UNITS_PER_REGION / 64]; /* 1 = unit touched since last purge */
  uint32_t freed_ms[UNITS_PER_REGION];         /* when each free unit was freed (ms, wraps) */
  uint8_t touched_pages[UNITS_PER_REGION];     /* free unit: 4 KiB steps from its start
                                                  that may be resident (0: reads as zero) */
  hak_slab_t *unit_map[UNITS_PER_REGION];     /* unit -> its slab descriptor */
  hak_slab_t slabs[UNITS_PER_REGION];         /* descriptor of the span starting here */
} hak_region_t;

/* Pending chains of frees into other threads' slabs, direct-mapped by slab. 64, so
 * that the slabs of every tiny class of one owner seldom share a chain. */
#define REMOTE_CHAINS 64

/* Free spans a heap keeps for reuse without taking region_lock: emptied slabs and
 * growing blocks of at most 2 units. A bigger span goes back to its region at once,
 * where any span, of any size, can reuse its resident pages: cached, it waited for one
 * of its own size, and a short-lived program's one-off buffers stayed resident. */
#define SPAN_CACHE_SLOTS 8
#define SPAN_CACHE_SPAN_UNITS 2
#define SPAN_CACHE_MAX_UNITS (SPAN_CACHE_SLOTS * SPAN_CACHE_SPAN_UNITS)
typedef struct hak_span_cache {
  hak_slab_t *spans[SPAN_CACHE_SLOTS]; /* oldest first; aux holds the time it came */
  uint32_t count;
  uint32_t units;
} hak_span_cache_t;

typedef struct hak_heap {
  /* Bytes the heap profiler lets this heap allocate before its next sample (prof.c):
   * malloc subtracts the size and takes the slow path when it goes negative. 0 in a new
   * heap (the first malloc asks prof.c), INT64_MAX while profiling is off. */
  int64_t prof_left;
  /* Fast path: current slab for each 16-byte size step <= 1 KiB, then for each mid class
   * <= ALIGNED_DIRECT_MAX (aligned allocation's). Never NULL: an empty queue points at
   * the static empty slab, so "no heap yet" and "refill" are the same miss. */
  hak_slab_t *direct[ALL_DIRECT_SLOTS];
  hak_slab_queue_t queue[NUM_CLASSES]; /* slabs with (possibly) free blocks */
  hak_slab_queue_t full[NUM_CLASSES];  /* slabs with none, waiting for frees */
  hak_slab_t *pinned[NUM_CLASSES];     /* the queue head, holding one extra `used` */
  hak_span_cache_t spans;
  /* Frees into other threads' slabs, chained here per slab and pushed with one CAS. */
  struct hak_remote_chain {
    hak_slab_t *slab;
    hak_block_t *head, *tail;
    uint32_t count;
    uint32_t limit; /* blocks at which the chain is pushed */
  } remote[REMOTE_CHAINS];
  uint64_t slow_calls;                  /* drives deferred work */
  uint64_t next_deferred_ms;
  uint64_t next_block_purge_ms;
  uint64_t next_idle_heads_ms;          /* the next look at empty queue heads */
  uint64_t pinned_classes;              /* bit c set when pinned[c] was last made non-NULL
                                           (cleared by that look when it finds NULL) */
  uint64_t stale_classes;               /* classes given a slab with stale pages since the
                                           last heap_trim_stale (bit c: class c) */
  struct hak_heap *all_next, *all_prev; /* every live heap, for trim/stats/fork */
  struct hak_heap *pool_next;           /* recycled heap structures; parked heaps */
  uint64_t parked_ms;                   /* when its thread exited and left it whole */
  /* A new thread waited for it to be parked in vain (heap_take_parked), or it is the
   * main thread's (heap_mark_main); under heaps_lock, like the parked list. */
  bool hint_wait_failed;
  /* The owning thread's id, 0 while parked (the purge thread's idle trim asks the kernel
   * whether that thread is asleep); and the last purge-thread pass that looked at it. */
  int32_t tid;
  uint32_t trim_pass;
  /* Hardened build: freed blocks wait here, zeroed, before they can be reused; each free
   * takes the place of one picked at random (quarantine_rng), which is released, and
   * more go while the blocks held exceed QUARANTINE_BYTES. */
  hak_block_t *quarantine[QUARANTINE_SLOTS];
  uint32_t quarantine_rng;
  uint32_t quarantine_bytes;
  /* ---- heaps as handles (heap_handle.c, heap_user.c) ---------------------------------
   * What its slabs' owner words hold: its own address for a thread's heap, the creating
   * thread's heap for a user heap, 0 once a user heap is gone. */
  uintptr_t owner_id;
  uint32_t kind;                      /* HEAP_KIND_*: thread heap, user heap, retired */
  uint32_t retired_how;               /* user heap: HEAP_DESTROYED or HEAP_RELEASED */
  bool orphaned;                      /* in a forked child: a thread that is not there made it */
  /* The user heaps a reference is held on: one per pending remote chain and (hardened)
   * per quarantine slot, so that their slabs are not reused under it. */
  struct hak_heap *remote_user[REMOTE_CHAINS];
  struct hak_heap *quarantine_user[QUARANTINE_SLOTS];
  struct hak_heap *user_next, *user_prev; /* every user heap; the retired ones waiting */
  hak_slab_queue_t large;             /* a user heap's large blocks (under `lock`) */
  void *huge;                         /* its huge blocks' headers, a list (huge.c) */
  _Atomic size_t held;                /* bytes of slabs, cached spans and big blocks */
  size_t peak_held;                   /* the most `held` has been */
  /* Thread heap: its last destroyed user heap, slabs reset, for the next one it makes
   * (heap_user.c), since spare_ms; given back after the purge delay (heap_spare_trim). */
  struct hak_heap *spare;
  uint64_t spare_ms;
  /* ---- kept when the structure is reused: what a thread that read an old owner may
   * still touch (heap_struct_alloc clears everything above `lock`) ---- */
  /* Held by the owner on every slow path that changes its lists, by another thread
   * taking an idle heap's freed slabs back (see heap_reclaim_idle), and (user heaps)
   * by any thread adding or removing one of its big blocks. */
  pthread_mutex_t lock;
  /* User heap: references (heap_user_ref) in the low bits, HEAP_REFS_RETIRED once it
   * is destroyed or released; its generation, counted up at each reuse. */
  _Atomic uint64_t refs;
  _Atomic uint32_t gen;
} hak_heap_t;

#endif
