/* The bottom of hakmem's internal interface (base/, below), and its glossary.
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
 *           second word holds the "free tag" (its slab descriptor's address; hardened:
 *           xor a per-process key) that makes double frees visible in one compare.
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
#ifndef HAKMEM_BASE_H
#define HAKMEM_BASE_H

/* base/: what every layer above uses and that calls nothing of hakmem's above it:
 * errors, the OS calls, options, size classes, process-wide counters and keys, foreign
 * pointers, and (instrumented builds) lock statistics. The bottom of the chain of folder
 * headers: base.h <- profile.h <- space.h <- block.h <- heap.h <- stats.h <- api.h. */

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* ---- attributes and build switches --------------------------------------------- */
#define HAK_LIKELY(x) __builtin_expect(!!(x), 1)
#define HAK_UNLIKELY(x) __builtin_expect(!!(x), 0)
/* Keeps the compiler from moving memory accesses across it; emits nothing. */
#define compiler_barrier() __asm__ volatile("" ::: "memory")

/* Words read or written plainly on a fast path while other threads use atomics on them
 * (the owner word and a slab's `used` on free; the slab map's size and entries). The
 * protocol relies on x86 keeping stores in order and loads in order, plus a compiler
 * barrier, for fewer instructions per free than C11 atomics. A ThreadSanitizer build
 * turns them into the acquire loads and release stores x86 gives, so that what it
 * reports is a race in the protocol, not these. */
#if defined(__SANITIZE_THREAD__)
#define tso_load(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define tso_store(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#else
#define tso_load(p) (*(p))
#define tso_store(p, v) (*(p) = (v))
#endif
#define HAK_NOINLINE __attribute__((noinline))
#define HAK_COLD __attribute__((cold, noinline))
#define HAK_INLINE static inline __attribute__((always_inline))
#define HAK_INTERNAL __attribute__((visibility("hidden")))
#define HAK_EXPORT __attribute__((visibility("default")))

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
 * the grain in which the purge thread turns dense memory into huge pages (space/thp.c). */
#define HUGE_PAGE_SHIFT 21
#define HUGE_PAGE_SIZE ((size_t)1 << HUGE_PAGE_SHIFT)
#define RANGE_UNITS (HUGE_PAGE_SIZE / UNIT_SIZE)           /* 32 */
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
  MAP_HEAPS = 5,     /* heap structures (heap_slot.c): a heap handle is checked here */
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
#define SLAB_FULL ((uintptr_t)1)  /* or'ed into a heap address */
#define OWNER_NONE ((uintptr_t)0) /* free unit, region header: never a valid block */
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

/* ---- C libraries without pthread_cond_clockwait (glibc 2.30; not musl) ------------
 * The waits use the default-clock conditions of PTHREAD_COND_INITIALIZER: the deadline
 * on `clk` becomes the realtime one pthread_cond_timedwait takes. */
#if !defined(__GLIBC__)
#include <time.h>
static inline int cond_clockwait(pthread_cond_t *c, pthread_mutex_t *m, clockid_t clk,
                                 const struct timespec *t) {
  struct timespec now, real;
  clock_gettime(clk, &now);
  clock_gettime(CLOCK_REALTIME, &real);
  long long ns = (long long)(t->tv_sec - now.tv_sec) * 1000000000LL + (t->tv_nsec - now.tv_nsec);
  ns = (ns < 0 ? 0 : ns) + real.tv_nsec;
  real.tv_sec += (time_t)(ns / 1000000000LL);
  real.tv_nsec = (long)(ns % 1000000000LL);
  return pthread_cond_timedwait(c, m, &real);
}
#define HAK_COND_CLOCKWAIT cond_clockwait
#else
#define HAK_COND_CLOCKWAIT pthread_cond_clockwait
#endif

/* ---- lock hooks: every mutex call of the library, in the builds that check or count
 * them. lock_order.c (HAKMEM_LOCK_ORDER, on in Debug builds) checks each lock taken
 * against the ranks of those the thread holds and aborts on a wrong order; lockstat.c
 * (the CMake option HAKMEM_LOCKSTAT=ON, docs/scaling.md) counts, per lock class (the
 * region lock, the heap-list lock, heap locks, others), acquisitions, contended
 * acquisitions, time held (total and its median) and waited, and per call site the
 * acquisitions and time held, and prints them at exit. With either, the pthread_mutex_
 * calls and the cond wait are macros that name their site; release builds compile none
 * of it. */
#ifndef HAKMEM_LOCK_ORDER
#define HAKMEM_LOCK_ORDER (HAKMEM_DEBUG > 0)
#endif
#ifndef HAKMEM_LOCKSTAT
#define HAKMEM_LOCKSTAT 0
#endif
#if HAKMEM_LOCK_ORDER || HAKMEM_LOCKSTAT
#include <time.h>

/* A call site: "file:line &lock" as written, and what each module made of it at its
 * first call (a race makes it twice, alike). */
typedef struct lock_site {
  const char *text;
  int stat; /* lockstat.c's number for the site; -1: not yet */
  int rank; /* lock_order.c's rank of the lock it names; -1: not yet */
} lock_site_t;

#pragma GCC visibility push(hidden)
int lockstat_lock(pthread_mutex_t *m, const char *site, int *id);
int lockstat_trylock(pthread_mutex_t *m, const char *site, int *id);
int lockstat_unlock(pthread_mutex_t *m);
int lockstat_clockwait(pthread_cond_t *c, pthread_mutex_t *m, clockid_t clk, const struct timespec *t);
void lock_order_check(pthread_mutex_t *m, lock_site_t *s); /* before blocking on m */
void lock_order_push(pthread_mutex_t *m, lock_site_t *s);  /* m taken: held from now */
void lock_order_pop(pthread_mutex_t *m, lock_site_t *s);   /* m released; must be held */
void lock_order_forget(pthread_mutex_t *m);                /* m made anew: held by none */
/* A cond wait releases m and takes it back: m must be held, and retaking it must be in
 * order with the rest. Returns the site that took m, which holds it again after. */
lock_site_t *lock_order_wait(pthread_mutex_t *m, lock_site_t *s);
#pragma GCC visibility pop

/* Trylock never waits, so it may come in any order; what it takes counts as held. */
static inline int lock_hook_take(pthread_mutex_t *m, lock_site_t *s, bool trying) {
  if (HAKMEM_LOCK_ORDER && !trying) lock_order_check(m, s);
  int r = HAKMEM_LOCKSTAT ? (trying ? lockstat_trylock : lockstat_lock)(m, s->text, &s->stat)
                          : (trying ? pthread_mutex_trylock(m) : pthread_mutex_lock(m));
  if (HAKMEM_LOCK_ORDER && r == 0) lock_order_push(m, s);
  return r;
}

static inline int lock_hook_release(pthread_mutex_t *m, lock_site_t *s) {
  if (HAKMEM_LOCK_ORDER) lock_order_pop(m, s);
  return HAKMEM_LOCKSTAT ? lockstat_unlock(m) : pthread_mutex_unlock(m);
}

static inline int lock_hook_init(pthread_mutex_t *m, const pthread_mutexattr_t *a) {
  if (HAKMEM_LOCK_ORDER) lock_order_forget(m); /* fork children make held locks anew */
  return pthread_mutex_init(m, a);
}

static inline int lock_hook_wait(pthread_cond_t *c, pthread_mutex_t *m, clockid_t clk,
                                 const struct timespec *t, lock_site_t *s) {
  lock_site_t *took = HAKMEM_LOCK_ORDER ? lock_order_wait(m, s) : NULL;
  int r = HAKMEM_LOCKSTAT ? lockstat_clockwait(c, m, clk, t) : HAK_COND_CLOCKWAIT(c, m, clk, t);
  if (HAKMEM_LOCK_ORDER) lock_order_push(m, took);
  return r;
}

#define HAK_LOCK_STR2(x) #x
#define HAK_LOCK_STR(x) HAK_LOCK_STR2(x)
#define HAK_LOCK_SITE(m)                                                             \
  ({                                                                                 \
    static lock_site_t site_ = {__FILE__ ":" HAK_LOCK_STR(__LINE__) " " #m, -1, -1}; \
    &site_;                                                                          \
  })
#define pthread_mutex_lock(m) lock_hook_take((m), HAK_LOCK_SITE(m), false)
#define pthread_mutex_trylock(m) lock_hook_take((m), HAK_LOCK_SITE(m), true)
#define pthread_mutex_unlock(m) lock_hook_release((m), HAK_LOCK_SITE(m))
#define pthread_mutex_init(m, a) lock_hook_init((m), (a))
#define pthread_cond_clockwait(c, m, clk, t) lock_hook_wait((c), (m), (clk), (t), HAK_LOCK_SITE(m))
#elif !defined(__GLIBC__)
#define pthread_cond_clockwait cond_clockwait
#endif

/* n rounded up to a multiple of to, a power of two. */
static inline size_t align_up(size_t n, size_t to) { return (n + to - 1) & ~(to - 1); }

#pragma GCC visibility push(hidden)

/* ---- error.c: one-line reports, then abort; calls nothing of hakmem's ------------ */
void error_write_stderr(const char *msg, size_t len); /* write(2) all of it, no allocation */
void error_write_str(const char *s);                  /* the same for a C string */
/* s appended at buf[at], cut to leave one byte of size free (no NUL); the new end. */
size_t error_append(char *buf, size_t at, size_t size, const char *s);
void error_write_fd(int fd, const char *msg, size_t len); /* the same to fd */
size_t error_fmt_dec(char *buf, uint64_t v);              /* digits at buf, no NUL; returns how many */
size_t error_fmt_hex(char *buf, uint64_t v);              /* "0x" and hex digits, no NUL */
_Noreturn void error_fatal(const char *msg);
_Noreturn void error_fatal_pointer(const char *what, const char *fn, const void *p);
_Noreturn void error_fatal_at(const char *what, const void *p);

/* ---- os.c: the only file that talks to the kernel about memory ------------------ */
/* The primitives that injected failures (Debug builds, HAKMEM_FAULT) can refuse. */
enum os_prim {
  OS_MMAP,
  OS_MUNMAP,
  OS_MREMAP,
  OS_MPROTECT,
  OS_DONTNEED,
  OS_POPULATE,
  OS_HUGEPAGE,
  OS_PRIM_COUNT
};
void os_fault_arm(bool on);                      /* off from now on, or on with calls counted from now */
uint64_t os_fault_count(bool failed);            /* calls seen, or failures injected, in all */
extern _Atomic uint64_t os_kept_bytes;           /* refused munmaps: still mapped, pages given back */
void *os_map(size_t size);                       /* NULL on failure */
void *os_map_aligned(size_t size, size_t align); /* NULL on failure */
/* The same without over-mapping by align (an address-space limit): NULL if not found. */
void *os_map_aligned_part(size_t size, size_t align);
bool os_address_space_limited(void); /* a finite RLIMIT_AS (ulimit -v) */
/* A huge block's mapping, charged like the C library's: its byte at `offset` aligned to
 * `align`. NULL on failure. */
void *os_map_block(size_t size, size_t align, size_t offset);
void os_unmap(void *p, size_t size);
void os_purge(void *p, size_t size); /* give pages back (or clear them); they read as zero */
void os_set_huge_pages(void *p, size_t size, bool enable);
/* Huge pages (space/thp.c's, on the purge thread only). os_thp_allowed: the system lets
 * this process have them (THP not `never`, no PR_SET_THP_DISABLE). os_resident_pages: of
 * [p, p + size), by mincore. os_collapse: makes a 2 MiB range, advised MADV_NOHUGEPAGE,
 * one huge page (MADV_COLLAPSE, the advice lifted for the call), with `fail`: as a
 * kernel without MADV_COLLAPSE (the test switch). On EINVAL (no MADV_COLLAPSE) the
 * range is left MADV_HUGEPAGE, for khugepaged. */
typedef enum { OS_COLLAPSED, OS_COLLAPSE_ADVISED, OS_COLLAPSE_FAILED } os_collapse_t;
typedef enum { OS_THP_NEVER, OS_THP_MADVISE, OS_THP_ALWAYS } os_thp_mode_t;
os_thp_mode_t os_thp_mode(void); /* /sys/kernel/mm/transparent_hugepage/enabled */
bool os_thp_allowed(void);
size_t os_resident_pages(void *p, size_t size);
os_collapse_t os_collapse(void *p, size_t size, bool fail);
/* Faults the pages in, writable, in one call (MADV_POPULATE_WRITE): the same pages, the
 * same minor faults as a program writing them, without a trap each. False if it failed
 * (a kernel without it: never asked again). */
bool os_populate(void *p, size_t size);
bool os_page_resident(const void *p);                                  /* mincore of the page holding p */
void *os_remap(void *old, size_t old_size, size_t new_size, void *to); /* NULL if it cannot */
bool os_protect(void *p, size_t size, bool accessible);
/* Address space that reads as zero and costs no commit charge until made writable. */
void *os_reserve_readonly(size_t size);                    /* NULL on failure */
bool os_set_writable(void *p, size_t size, bool writable); /* read-write, or read-only */
size_t os_page_size(void);
uint64_t os_now_ms(void);
struct timespec os_monotonic_after(long ns);    /* CLOCK_MONOTONIC now + ns: a wait's deadline */
bool os_thread_asleep(int tid, uint64_t *mark); /* asleep in the kernel; mark: its CPU time */
int os_thread_id(void);
/* pthread_atfork without libc_nonshared's stub, which the link puts after the cold code
 * (CMakeLists.txt: the link order). */
int os_atfork(void (*prepare)(void), void (*parent)(void), void (*child)(void));
/* A small /proc or /sys file read whole into buf (NUL-terminated); 0 if not. */
size_t os_read_proc(const char *path, char *buf, size_t size);
/* The cgroup v2 memory.max that bounds this process (the lowest of its cgroup and their
 * parents'), 0 where there is none or it cannot be read. */
uint64_t os_cgroup_memory_max(void);
/* Resident anonymous memory of the process as the kernel counts it (RssAnon), 0 if unknown. */
uint64_t os_rss_anon(void);
/* Every os_purge: the madvise(MADV_DONTNEED) calls and the bytes they covered (relaxed). */
extern _Atomic uint64_t os_purge_calls, os_purge_bytes;

/* ---- options.c: HAKMEM_* read once at start-up ---------------------------------- */
typedef struct options {
  long purge_delay_ms;     /* HAKMEM_PURGE_DELAY_MS: 0 at once, -1 never */
  long region_cache;       /* HAKMEM_REGION_CACHE: empty regions kept mapped */
  bool thp;                /* HAKMEM_THP: dense 2 MiB ranges become huge pages (space/thp.c) */
  bool thp_no_collapse;    /* tests: MADV_COLLAPSE fails with EINVAL */
  bool thp_collapse_only;  /* HAKMEM_THP=collapse: nothing faults huge; collapses only */
  bool stats;              /* HAKMEM_STATS: print a report at exit */
  bool background;         /* HAKMEM_BACKGROUND: a purge thread may run (purge_thread.c) */
  bool background_fails;   /* tests: creating it fails */
  bool stats_json;         /* HAKMEM_STATS=json: the report at exit in JSON (ctl.c) */
  bool prof;               /* HAKMEM_PROF: sample allocations from the start (prof.c) */
  bool prof_leaks;         /* HAKMEM_PROF_LEAKS: the leak report at exit */
  long prof_rate;          /* HAKMEM_PROF_RATE: mean bytes between samples; 1 every one */
  long prof_peak_step;     /* HAKMEM_PROF_PEAK_STEP: bytes past the last peak written; 0 off */
  const char *prof_prefix; /* HAKMEM_PROF_PREFIX: files are prefix.<pid>[.what].heap */
  const char *stats_file;  /* HAKMEM_STATS_FILE: the report at exit there (%p: the pid) */
  /* Memory limits (space/limit.c), bytes of total.committed, 0 for none: written at
   * start-up and by hak_ctl_set, read with relaxed atomics on the slow paths that commit. */
  long limit_soft;        /* HAKMEM_LIMIT_SOFT: above it, free memory goes back first */
  long limit_hard;        /* HAKMEM_LIMIT_HARD: past it, allocation fails (ENOMEM) */
  bool limit_from_cgroup; /* HAKMEM_LIMIT_FROM_CGROUP: soft just below memory.max */
} options_t;
/* What a limit takes: 0 (none), or 1 MiB .. 2^50 bytes. */
#define LIMIT_MIN ((uint64_t)1 << 20)
#define LIMIT_MAX ((uint64_t)1 << 50)
HAK_INLINE bool limit_value_ok(uint64_t v) { return v == 0 || (v >= LIMIT_MIN && v <= LIMIT_MAX); }
extern options_t opt;
/* Where the report at exit goes: HAKMEM_STATS_FILE opened afresh (*own_file: a file of
 * this process's own, its name has %p), else the stderr the process started with (a
 * private duplicate, close-on-exec, taken when a report is asked for), else fd 2; -1: none.
 * options_report_done closes what options_report_fd opened. */
void options_keep_stderr(void);
int options_report_fd(bool *own_file);
void options_report_done(int fd);
/* How often a heap looks at its full slabs and the purge clock, at most. */
#define DEFERRED_PERIOD_MS 10
/* The purge delay, but no shorter than a deferred period: how often the per-delay work
 * (purging inside free blocks, the idle-heap scan) runs, and how long a heap must go
 * without deferred work to count as idle. Purging off (< 0) is for callers to check. */
HAK_INLINE uint64_t purge_period_ms(void) {
  return (uint64_t)(opt.purge_delay_ms > DEFERRED_PERIOD_MS ? opt.purge_delay_ms : DEFERRED_PERIOD_MS);
}
void options_init(void);

/* ---- size_class.c -------------------------------------------------------------- */
extern uint32_t class_size[NUM_CLASSES];
extern uint8_t class_units[NUM_CLASSES];
extern uint16_t class_carve[NUM_CLASSES]; /* blocks one carve of a slab makes */
extern uint8_t class_of_direct[DIRECT_SLOTS];
extern uint8_t class_of_mid[MID_MAX / MID_SIZE_STEP]; /* by (n - 1) / MID_SIZE_STEP */
extern uint32_t class_align[NUM_CLASSES];             /* every block of the class is aligned to this */
/* The first class >= c whose blocks are all aligned to 1 << bits (NUM_CLASSES: none),
 * for alignments 32 .. MID_MAX. */
#define ALIGN_BITS_MAX 17
extern uint8_t class_aligned_from[ALIGN_BITS_MAX + 1][NUM_CLASSES];
/* For sizes in (16 j, 16 j + 16] and alignment 1 << bits, both at most
 * ALIGNED_DIRECT_MAX: the direct slot (class_direct_slot) of the first class at least
 * that size aligned to 1 << bits. (An alignment is at least 1, so a size of 0 is never
 * asked.) */
#define ALIGNED_DIRECT_BITS_MAX 12
extern uint8_t aligned_direct[ALIGNED_DIRECT_BITS_MAX + 1][ALIGNED_DIRECT_MAX / 16];
void size_class_init(void);
size_t slab_gap(size_t units, uint32_t size); /* bytes before block 0 of a slab */

HAK_INLINE uint32_t size_to_class(size_t n) {
  if (n <= TINY_MAX) return class_of_direct[(n + 15) >> 4];
  return class_of_mid[(n - 1) / MID_SIZE_STEP]; /* n <= MID_MAX */
}

/* The heap's direct slot that points at class c's head, for c below
 * TINY_CLASSES + MID_DIRECT_CLASSES: a tiny class's last size step, or a mid class's
 * own slot after them. */
HAK_INLINE size_t class_direct_slot(uint32_t c) {
  return c < TINY_CLASSES ? class_size[c] / 16 : DIRECT_SLOTS + (c - TINY_CLASSES);
}

/* ---- counters.c: process-wide counters every layer bumps off the fast paths ------ */
typedef struct global_stats {
  _Atomic size_t region_bytes;   /* mapped in regions */
  _Atomic size_t purged_bytes;   /* cumulative, given back */
  _Atomic size_t released_bytes; /* cumulative, regions and huge unmapped */
  _Atomic size_t committed_est;  /* region bytes that may be resident */
  _Atomic size_t peak_in_use;
  _Atomic size_t large_in_use;
  _Atomic size_t huge_mapped; /* bytes of live huge mappings */
  _Atomic uint64_t large_allocs, huge_allocs;
  _Atomic size_t large_prefaulted; /* bytes of large blocks faulted in at malloc (large.c) */
  _Atomic uint64_t heaps_created, heaps_taken_over, heaps_taken_by_free, heaps_dissolved, slabs_adopted,
      slabs_reclaimed_idle;
  _Atomic uint64_t heap_waits, heap_waits_in_vain;  /* see heap_take_parked */
  _Atomic uint64_t threads_started, threads_exited; /* threads that got a heap; that left it */
  _Atomic uint64_t purge_passes;      /* purge passes that ran (purge.c: timed and malloc_trim) */
  _Atomic uint64_t purge_budget_runs; /* purges forced by the budget (region_purge_around) */
  _Atomic uint64_t short_mappings;    /* regions and heap chunks mapped short (ulimit -v) */
  /* Huge pages (space/range.c, space/thp.c): bytes of ranges collapsed and whole; ranges
   * collapsed; fresh ranges made huge before use; failed collapses; ranges left to khugepaged; huge pages given back whole;
   * huge pages broken by a purge of part of them. */
  _Atomic size_t thp_huge_bytes;
  _Atomic uint64_t thp_collapsed, thp_fresh, thp_faulted, thp_failed, thp_advised, thp_returned_whole,
      thp_broken;
  _Atomic uint64_t thp_block_collapsed; /* of thp_collapsed: huge blocks' ranges (space/thp_blocks.c) */
  _Atomic uint64_t thp_block_faulted;   /* huge blocks' ranges advised at malloc (space/thp_blocks.c) */
} global_stats_t;
extern global_stats_t gstats;
extern uintptr_t process_cookie; /* random per process (init.c) */
extern uintptr_t list_key;       /* hardened build: free-list links are xor-encoded */
extern uintptr_t tag_key;        /* hardened build: free tags are xor-encoded (block.h) */
extern _Atomic int init_state;   /* 0 not started, 1 running, 2 done (init.c) */
void stats_note_in_use(void);    /* raises peak_in_use to what is committed now */
/* Frees into other threads' slabs, counted by slab_remote_push in shards (summed when read). */
#define REMOTE_COUNTER_SHARDS 16
typedef struct {
  _Alignas(64) _Atomic uint64_t pushes, blocks;
  _Atomic uint64_t singles; /* pushes of one block by a thread without a heap: both */
} remote_counter_t;
extern remote_counter_t remote_counters[REMOTE_COUNTER_SHARDS];
uint64_t stats_remote_total(bool blocks); /* the shards summed: pushes, or blocks */

/* ---- foreign.c: pointers that are not ours ------------------------------------ */
/* A pointer not in any region: NULL, a libc block, or garbage. */
void foreign_free(void *p, const char *fn);
size_t foreign_usable(const void *p, const char *fn);

/* ---- counters.c: the checker the process runs under --------------------------------
 * Set at load by api/checkers.c (its ifunc resolvers), read by the figures (ctl.c). */
#ifndef HAKMEM_VALGRIND
#define HAKMEM_VALGRIND 0 /* 1: <valgrind/memcheck.h> was found (CMakeLists.txt) */
#endif
/* CHECKER_UNKNOWN: asked by another object's relocation before this library's own (the
 * weak references that tell a sanitizer are not bound yet); not kept. */
enum { CHECKER_UNKNOWN = -1, CHECKER_NONE, CHECKER_MEMCHECK, CHECKER_SANITIZER };
extern int checker_mode; /* which one, set at load */

#pragma GCC visibility pop

#define HAK_ASSERT(cond)                                                                \
  do {                                                                                  \
    if (HAKMEM_DEBUG && HAK_UNLIKELY(!(cond))) error_fatal("assertion failed: " #cond); \
  } while (0)

#endif
