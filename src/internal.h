/* Cross-file internal interface, in the order of the layers (docs/design.md): each
 * section's file calls only the sections above it, with the exceptions named there.
 * Every name here is hidden from the library's users. */
#ifndef HAKMEM_INTERNAL_H
#define HAKMEM_INTERNAL_H

#include "types.h"

#include <pthread.h>
#include <stdio.h>

#include "lockstat.h"

#pragma GCC visibility push(hidden)

/* ---- error.c: one-line reports, then abort; calls nothing of hakmem's ------------ */
void hak_write_stderr(const char *msg, size_t len); /* write(2) all of it, no allocation */
size_t hak_fmt_dec(char *buf, uint64_t v); /* digits at buf, no NUL; returns how many */
size_t hak_fmt_hex(char *buf, uint64_t v); /* "0x" and hex digits, no NUL */
_Noreturn void hak_fatal(const char *msg);
_Noreturn void hak_fatal_pointer(const char *what, const char *fn, const void *p);
_Noreturn void hak_fatal_at(const char *what, const void *p);

/* ---- os.c: the only file that talks to the kernel about memory ------------------ */
void *os_map(size_t size);                       /* NULL on failure */
void *os_map_aligned(size_t size, size_t align); /* NULL on failure */
/* A huge block's mapping, charged like the C library's: its byte at `offset` aligned to
 * `align`. NULL on failure. */
void *os_map_block(size_t size, size_t align, size_t offset);
void os_unmap(void *p, size_t size);
void os_purge(void *p, size_t size);             /* give pages back; they read as zero */
void os_set_huge_pages(void *p, size_t size, bool enable);
/* Huge pages (thp.c's, on the purge thread only). os_thp_allowed: the system lets this
 * process have them (THP not `never`, no PR_SET_THP_DISABLE). os_resident_pages: of
 * [p, p + size), by mincore. os_collapse: makes a 2 MiB range, advised MADV_NOHUGEPAGE,
 * one huge page (MADV_COLLAPSE, the advice lifted for the call), with `fail`: as a
 * kernel without MADV_COLLAPSE (the test switch). On EINVAL (no MADV_COLLAPSE) the
 * range is left MADV_HUGEPAGE, for khugepaged. */
typedef enum { OS_COLLAPSED, OS_COLLAPSE_ADVISED, OS_COLLAPSE_FAILED } os_collapse_t;
bool os_thp_allowed(void);
size_t os_resident_pages(void *p, size_t size);
os_collapse_t os_collapse(void *p, size_t size, bool fail);
/* Faults the pages in, writable, in one call (MADV_POPULATE_WRITE): the same pages, the
 * same minor faults as a program writing them, without a trap each. False if it failed
 * (a kernel without it: never asked again). */
bool os_populate(void *p, size_t size);
bool os_page_resident(const void *p); /* mincore of the page holding p */
void *os_remap(void *old, size_t old_size, size_t new_size, void *to); /* NULL if it cannot */
bool os_protect(void *p, size_t size, bool accessible);
/* Address space that reads as zero and costs no commit charge until made writable. */
void *os_reserve_readonly(size_t size); /* NULL on failure */
bool os_set_writable(void *p, size_t size, bool writable); /* read-write, or read-only */
size_t os_page_size(void);
uint64_t os_now_ms(void);
struct timespec os_monotonic_after(long ns); /* CLOCK_MONOTONIC now + ns: a wait's deadline */
bool os_thread_asleep(int tid, uint64_t *mark); /* asleep in the kernel; mark: its CPU time */
int os_thread_id(void);
/* pthread_atfork without libc_nonshared's stub, which the link puts after the cold code
 * (CMakeLists.txt: the link order). */
int os_atfork(void (*prepare)(void), void (*parent)(void), void (*child)(void));
/* Every os_purge: the madvise(MADV_DONTNEED) calls and the bytes they covered (relaxed). */
extern _Atomic uint64_t os_purge_calls, os_purge_bytes;

/* ---- options.c: HAKMEM_* read once at start-up ---------------------------------- */
typedef struct hak_options {
  long purge_delay_ms;  /* HAKMEM_PURGE_DELAY_MS: 0 at once, -1 never */
  long region_cache;    /* HAKMEM_REGION_CACHE: empty regions kept mapped */
  bool thp;             /* HAKMEM_THP: dense 2 MiB ranges become huge pages (thp.c) */
  bool thp_no_collapse; /* tests: MADV_COLLAPSE fails with EINVAL */
  bool stats;           /* HAKMEM_STATS: print a report at exit */
  bool background;      /* HAKMEM_BACKGROUND: a purge thread may run (purge_thread.c) */
  bool background_fails; /* tests: creating it fails */
  bool stats_json;      /* HAKMEM_STATS=json: the report at exit in JSON (ctl.c) */
  bool prof;            /* HAKMEM_PROF: sample allocations from the start (prof.c) */
  bool prof_leaks;      /* HAKMEM_PROF_LEAKS: the leak report at exit */
  long prof_rate;       /* HAKMEM_PROF_RATE: mean bytes between samples; 1 every one */
  long prof_peak_step;  /* HAKMEM_PROF_PEAK_STEP: bytes past the last peak written; 0 off */
  const char *prof_prefix; /* HAKMEM_PROF_PREFIX: files are prefix.<pid>[.what].heap */
} hak_options_t;
extern hak_options_t hak_opt;
/* How often a heap looks at its full slabs and the purge clock, at most. */
#define DEFERRED_PERIOD_MS 10
/* The purge delay, but no shorter than a deferred period: how often the per-delay work
 * (purging inside free blocks, the idle-heap scan) runs, and how long a heap must go
 * without deferred work to count as idle. Purging off (< 0) is for callers to check. */
hak_inline uint64_t purge_period_ms(void) {
  return (uint64_t)(hak_opt.purge_delay_ms > DEFERRED_PERIOD_MS ? hak_opt.purge_delay_ms
                                                                 : DEFERRED_PERIOD_MS);
}
void options_init(void);

/* ---- size_class.c -------------------------------------------------------------- */
extern uint32_t class_size[NUM_CLASSES];
extern uint8_t class_units[NUM_CLASSES];
extern uint16_t class_carve[NUM_CLASSES]; /* blocks one carve of a slab makes */
extern uint8_t class_of_direct[DIRECT_SLOTS];
extern uint8_t class_of_mid[MID_MAX / MID_SIZE_STEP]; /* by (n - 1) / MID_SIZE_STEP */
extern uint32_t class_align[NUM_CLASSES]; /* every block of the class is aligned to this */
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

hak_inline uint32_t size_to_class(size_t n) {
  if (n <= TINY_MAX) return class_of_direct[(n + 15) >> 4];
  return class_of_mid[(n - 1) / MID_SIZE_STEP]; /* n <= MID_MAX */
}

/* The heap's direct slot that points at class c's head, for c below
 * TINY_CLASSES + MID_DIRECT_CLASSES: a tiny class's last size step, or a mid class's
 * own slot after them. */
hak_inline size_t class_direct_slot(uint32_t c) {
  return c < TINY_CLASSES ? class_size[c] / 16 : DIRECT_SLOTS + (c - TINY_CLASSES);
}

/* ---- counters.c: process-wide counters every layer bumps off the fast paths ------ */
typedef struct hak_global_stats {
  _Atomic size_t region_bytes;   /* mapped in regions */
  _Atomic size_t purged_bytes;   /* cumulative, given back */
  _Atomic size_t released_bytes; /* cumulative, regions and huge unmapped */
  _Atomic size_t committed_est;  /* region bytes that may be resident */
  _Atomic size_t peak_in_use;
  _Atomic size_t large_in_use;
  _Atomic size_t huge_mapped;    /* bytes of live huge mappings */
  _Atomic uint64_t large_allocs, huge_allocs;
  _Atomic size_t large_prefaulted; /* bytes of large blocks faulted in at malloc (large.c) */
  _Atomic uint64_t heaps_created, heaps_taken_over, heaps_taken_by_free, heaps_dissolved,
      slabs_adopted, slabs_reclaimed_idle;
  _Atomic uint64_t heap_waits, heap_waits_in_vain; /* see heap_take_parked */
  _Atomic uint64_t threads_started, threads_exited;  /* threads that got a heap; that left it */
  _Atomic uint64_t purge_passes;      /* purge passes that ran (purge.c: timed and malloc_trim) */
  _Atomic uint64_t purge_budget_runs; /* purges forced by the budget (region_purge_around) */
  /* Huge pages (region.c, thp.c): bytes of ranges collapsed and whole; ranges collapsed;
   * failed collapses; ranges left to khugepaged; huge pages given back whole; huge pages
   * broken by a purge of part of them. */
  _Atomic size_t thp_huge_bytes;
  _Atomic uint64_t thp_collapsed, thp_failed, thp_advised, thp_returned_whole, thp_broken;
} hak_global_stats_t;
extern hak_global_stats_t hak_gstats;
extern uintptr_t hak_cookie;   /* random per process (init.c) */
extern uintptr_t hak_list_key; /* hardened build: free-list links are xor-encoded */
extern _Atomic int hak_init_state; /* 0 not started, 1 running, 2 done (init.c) */
void stats_note_in_use(void); /* raises peak_in_use to what is committed now */
/* Frees into other threads' slabs, counted by slab_remote_push in shards (summed when read). */
#define REMOTE_COUNTER_SHARDS 16
typedef struct {
  _Alignas(64) _Atomic uint64_t pushes, blocks;
  _Atomic uint64_t singles; /* pushes of one block by a thread without a heap: both */
} hak_remote_counter_t;
extern hak_remote_counter_t hak_remote_counters[REMOTE_COUNTER_SHARDS];
uint64_t stats_remote_total(bool blocks); /* the shards summed: pushes, or blocks */

/* ---- foreign.c: pointers that are not ours ------------------------------------ */
/* A pointer not in any region: NULL, a libc block, or garbage. */
void foreign_free(void *p, const char *fn);
size_t foreign_usable(const void *p, const char *fn);

/* ---- slab_map.c: unit -> slab descriptor, flat over the address space ----------- */
extern uintptr_t *slab_map;    /* entry: descriptor address - map address; 0: none */
extern size_t slab_map_units;  /* 0 until reserved (or if it could not be) */
void slab_map_init(void);      /* tries once; caller holds region_lock */
bool slab_map_add_region(const hak_region_t *r);
void slab_map_remove_region(const hak_region_t *r);
void slab_map_set(const hak_slab_t *s, size_t first, size_t units, bool live);
/* The slab of a region pointer, or the zero descriptor at the map's start (owner word
 * OWNER_NONE) for any other pointer below the map's end. The caller has checked
 * a >> UNIT_SHIFT < slab_map_units. */
hak_inline hak_slab_t *slab_map_lookup(uintptr_t a) {
  return (hak_slab_t *)((uintptr_t)slab_map + hak_tso_load(&slab_map[a >> UNIT_SHIFT]));
}
hak_inline bool slab_map_none(const hak_slab_t *s) { return s == (const hak_slab_t *)slab_map; }
hak_inline uintptr_t slab_owner(const hak_slab_t *s) {
  return __atomic_load_n(&s->owner, __ATOMIC_ACQUIRE);
}
/* The user heap whose slab s is, or NULL (see hak_slab_t.user_heap). */
hak_inline struct hak_heap *slab_user_heap(const hak_slab_t *s) {
  return __atomic_load_n(&s->user_heap, __ATOMIC_RELAXED);
}
hak_inline uintptr_t slab_base(const hak_slab_t *s) {
  return ((uintptr_t)s & ~(uintptr_t)REGION_MASK) + ((uintptr_t)s->unit_idx << UNIT_SHIFT);
}

/* ---- secure_hooks.c: the hardened build's hooks into the lower layers ----------- */
/* A hardened small block's size word: its last 8 bytes, n ^ key ^ its address. Relaxed
 * atomics (plain moves on x86): a free checks the size word of the block below its
 * own, which a thread without a heap may be rewriting as it frees that block; either
 * value passes the check. */
hak_inline uintptr_t *secure_size_word(uintptr_t block, size_t S) { return (uintptr_t *)(block + S - 8); }
hak_inline size_t secure_size_decode(const uintptr_t *w) {
  return __atomic_load_n(w, __ATOMIC_RELAXED) ^ hak_list_key ^ (uintptr_t)w;
}
hak_inline void secure_size_encode(uintptr_t *w, size_t n) {
  __atomic_store_n(w, n ^ hak_list_key ^ (uintptr_t)w, __ATOMIC_RELAXED);
}
void secure_carve(hak_slab_t *s, uintptr_t first, uint32_t n); /* shuffled, with size words */
void secure_guard_region(void *region);
void secure_protect(uintptr_t a, size_t len, bool accessible); /* aborts if it cannot */

#include "range.h" /* 2 MiB ranges, huge pages: range.c, the regions' candidates */

/* ---- region.c ------------------------------------------------------------------ */
extern uint8_t region_map[REGION_MAP_ENTRIES];
extern hak_slab_t region_free_unit_slab; /* what the unit map shows for unused units */
extern pthread_mutex_t region_lock;
extern hak_region_t *regions; /* all regions, newest first (thp.c walks them) */
bool region_release_if_spare(hak_region_t *r); /* an empty one beyond the cache goes */

hak_inline hak_region_t *region_of(uintptr_t a) {
  return (hak_region_t *)(a & ~(uintptr_t)REGION_MASK);
}
hak_inline hak_slab_t *region_slab_of(uintptr_t a) {
  return region_of(a)->unit_map[(a >> UNIT_SHIFT) & (UNITS_PER_REGION - 1)];
}
/* For a reader that holds nothing that keeps a's span (the statistics walkers reading
 * another thread's quarantine, whose blocks it may release at any time): the unit map is
 * written under region_lock, so what comes back may be stale, or the free-unit slab. */
hak_inline hak_slab_t *region_slab_of_racy(uintptr_t a) {
  return __atomic_load_n(&region_of(a)->unit_map[(a >> UNIT_SHIFT) & (UNITS_PER_REGION - 1)],
                         __ATOMIC_RELAXED);
}
hak_inline unsigned region_map_kind(uintptr_t a) {
  uintptr_t i = a >> REGION_SHIFT;
  if (hak_unlikely(i >= REGION_MAP_ENTRIES)) return MAP_NONE;
  return region_map[i];
}
/* Is a the start of a block of s? (offset divisible by the size, by multiplication) */
hak_inline bool slab_is_block_start(const hak_slab_t *s, uintptr_t a) {
  return a * s->div_magic - s->start_magic < s->div_magic;
}
/* The same answer for a slab that a heap owns (blocks of at most MID_MAX bytes, fewer
 * than 2^16 of them), with one load fewer: for a = start + k * size + r,
 * a * m - start * m = k * (size * m - 2^64) + r * m, which is below 2^33 when r = 0 and
 * at least m >= 2^47 otherwise. */
hak_inline bool slab_is_block_start_owned(const hak_slab_t *s, uintptr_t a) {
  return (a * s->div_magic - s->start_magic) >> 40 == 0;
}
_Static_assert((MID_MAX << 16) < ((uint64_t)1 << 40) && UINT64_MAX / MID_MAX >= ((uint64_t)1 << 40),
               "slab_is_block_start_owned: block starts below 2^40, other offsets above");

/* Spans, for purge.c only (everything else goes through span_alloc and friends); the
 * caller holds region_lock. region_alloc_span returns the span's descriptor with
 * units/unit_idx set and the unit map pointing at it (its `touched` says what is not
 * zero), or NULL when out of memory; *fresh: it took pages that were not resident. */
extern size_t region_used_units;  /* units in spans */
extern size_t region_dirty_units; /* free units that may be resident */
hak_slab_t *region_alloc_span(size_t units, bool *fresh);
void region_free_span(hak_slab_t *s, uint64_t now_ms);
size_t region_grow_span(hak_slab_t *s, size_t new_units); /* in place, or 0 */
hak_slab_t *region_shrink_span(hak_slab_t *s, size_t new_units); /* the tail, to free */
/* Purges free units freed delay_ms ago or more (and unmaps empty regions beyond the
 * cache, or all with release_regions); later ones lower *next_due. Returns the bytes. */
size_t region_purge_due(uint64_t now_ms, long delay_ms, bool release_regions, uint64_t *next_due);
bool region_oldest_dirty(uint32_t clock_ms, hak_region_t **region, size_t *unit, uint32_t *age);
void region_purge_around(hak_region_t *r, size_t at, size_t need);
void region_map_unmap(uintptr_t base, size_t map_size); /* a huge mapping goes */
/* The purge thread's two steps (see region.c). */
typedef struct region_run {
  hak_region_t *region;
  uint32_t first, units;
} region_run_t;
size_t region_take_due(uint64_t now_ms, long delay_ms, region_run_t *runs, size_t max,
                       hak_region_t **gone, size_t *gone_count, uint64_t *next_due, bool *more);
void region_return_purged(const region_run_t *runs, size_t n);
void region_unmap_detached(hak_region_t *r);

/* ---- guard.c: inaccessible memory, both builds ----------------------------------- */
/* Hardened build: guard pages over [a, a + len), page-aligned, on or off; their pages
 * are dropped when they go on, so they read as zero once off. */
void guard_set(uintptr_t a, size_t len, bool on);
void *zero_alloc(void); /* malloc(0): a distinct address where any access faults */
void zero_check(void *p, const char *fn, bool release); /* aborts unless a live one */

/* ---- purge.c: what free memory stays resident, and when it goes back ------------- */
/* Freed huge mappings of up to HUGE_KEEP_MAX are kept for reuse in HUGE_KEEP_SLOTS. */
#define HUGE_KEEP_SLOTS 4
#define HUGE_KEEP_MAX ((size_t)64 << 20)
/* The only way spans are taken and given back above region.c (caller holds
 * region_lock), so the budget sees every change. */
hak_slab_t *span_alloc(size_t units);
void span_free(hak_slab_t *s, uint64_t now_ms);
/* The same, for a span whose blocks all came back at some time since freed_ms. */
void span_free_since(hak_slab_t *s, uint64_t freed_ms, uint64_t now_ms);
bool span_grow(hak_slab_t *s, size_t new_units); /* in place, or false */
void span_shrink(hak_slab_t *s, size_t new_units, uint64_t now_ms);
/* Purge what was freed delay_ms ago or more (delay 0: all; < 0: nothing); caller holds
 * region_lock. Returns the bytes given back. */
size_t purge_pass(uint64_t now_ms, long delay_ms, bool release_regions);
void purge_to_budget(void);
bool purge_budget_allows(size_t bytes); /* may `bytes` more free memory stay resident? */
void purge_schedule(uint64_t due_ms);   /* a time by which the purge pass must run */
void purge_note_huge(ptrdiff_t in_use); /* a huge block's bytes in use changed by this */
size_t purge_pass_background(uint64_t now_ms); /* purge_pass without a syscall under the lock */
bool purge_pass_due(uint64_t now_ms);          /* has it work now? caller holds region_lock */
bool purge_wait(uint64_t max_ms); /* until the pass is due, or max_ms; the purge thread's;
                                   * true if purge_wake ended its nap */
extern _Atomic bool purge_napping;  /* the purge thread sleeps long: wake it on activity */
void purge_wake(void);
void purge_atfork_child(void);
/* Keeps a freed huge mapping if the delay and budget allow (false: unmap it); a kept one
 * it had to drop comes back in *evicted_*, for the caller to unmap. */
bool purge_keep_huge(uintptr_t base, size_t map_size, size_t resident, uint64_t now,
                     uintptr_t *evicted_base, size_t *evicted_size);
/* A kept mapping of map_size whose base + offset is aligned to align, or 0. */
uintptr_t purge_take_huge(size_t map_size, size_t offset, size_t align);

/* ---- thp.c: which ranges become huge pages (the purge thread's) ------------------ */
size_t thp_pass(uint64_t now_ms); /* collapses dense ranges; returns how many */

/* ---- slab.c -------------------------------------------------------------------- */
void slab_init(hak_slab_t *s, uint32_t class_idx, uintptr_t owner);
bool slab_extend(hak_slab_t *s);          /* carve more blocks; false if none left */
uint32_t slab_collect_slow(hak_slab_t *s);
bool slab_has_stale(const hak_slab_t *s); /* written pages past the carved blocks, enough to purge */
size_t slab_trim_stale(hak_slab_t *s);    /* purge them */
size_t slab_uncarve(hak_slab_t *s);       /* none out: drop the carving; bytes to purge */
/* Pushes the chain head..tail (already linked, `count` blocks) onto s's remote list. */
void slab_remote_push(hak_slab_t *s, hak_block_t *head, hak_block_t *tail, uint32_t count);
/* Has any thread ever chained or pushed a free into another's slab? Set by the first
 * chain (internal_heap.h) or push: until then no full slab can hold remote frees and no
 * heap has a chain, and a program with one thread never looks for them (two cold
 * descriptors on every refill, 64 chains at every deferred pass). Relaxed: a look that
 * misses a push only finds its blocks at a later refill. */
extern _Atomic bool slab_remote_seen;
hak_inline void slab_note_remote(void) {
  if (hak_unlikely(!atomic_load_explicit(&slab_remote_seen, memory_order_relaxed)))
    atomic_store_explicit(&slab_remote_seen, true, memory_order_relaxed);
}
/* Pushes are counted in a shard picked by the slab's descriptor: threads pushing into
 * different slabs do not write the same counter line. */
hak_inline hak_remote_counter_t *remote_counter_of(const hak_slab_t *s) {
  return &hak_remote_counters[((uintptr_t)s >> 7) % REMOTE_COUNTER_SHARDS];
}
hak_inline bool slab_has_remote(hak_slab_t *s) {
  return atomic_load_explicit(&s->remote, memory_order_relaxed) != 0;
}
/* Moves local and remote frees to `free`; returns the remote frees accounted. Mostly
 * there is nothing to move: that is decided here, without a call. */
hak_inline uint32_t slab_collect(hak_slab_t *s) {
  if ((!HAKMEM_SECURE || s->local_free == NULL) && !slab_has_remote(s)) return 0;
  return slab_collect_slow(s);
}
void slab_check(const hak_slab_t *s); /* debug level 2 */
_Noreturn void slab_corrupt_link(const hak_slab_t *s, const void *link);

/* Free-list links. The hardened build stores next ^ key ^ own address, and checks that
 * a decoded link lands on a carved block of the same slab before following it. */
hak_inline hak_block_t *block_next(const hak_block_t *b) {
  if (!HAKMEM_SECURE) return b->next;
  return (hak_block_t *)((uintptr_t)b->next ^ hak_list_key ^ (uintptr_t)b);
}
hak_inline void block_set_next(hak_block_t *b, hak_block_t *next) {
  if (!HAKMEM_SECURE) b->next = next;
  else b->next = (hak_block_t *)((uintptr_t)next ^ hak_list_key ^ (uintptr_t)b);
}
/* slab_remote_push of the one block b, inlined: a thread without a heap frees so. */
hak_inline void slab_remote_push_one(hak_slab_t *s, hak_block_t *b) {
  slab_note_remote();
  uintptr_t old = atomic_load_explicit(&s->remote, memory_order_relaxed), next;
  uintptr_t add = (uintptr_t)b + ((uintptr_t)1 << REMOTE_COUNT_SHIFT); /* b, one more */
  do {
    next = old & REMOTE_LIST_MASK;
    block_set_next(b, (hak_block_t *)next);
  } while (!atomic_compare_exchange_weak_explicit(&s->remote, &old, old - next + add,
                                                  memory_order_release, memory_order_relaxed));
  atomic_fetch_add_explicit(&remote_counter_of(s)->singles, 1, memory_order_relaxed);
}
hak_inline void slab_check_link(const hak_slab_t *s, const hak_block_t *n) {
  uintptr_t a = (uintptr_t)n;
  if (n != NULL && (a - s->start >= (uintptr_t)s->capacity * s->block_size ||
                    !slab_is_block_start_owned(s, a))) /* a multiplication, not a division */
    slab_corrupt_link(s, n);
}
/* One more block out, one more malloc counted (see hak_slab_t.used_ticks). */
#define SLAB_USED_TICK 0x01000001u
/* Every 256th malloc from a slab: deferred work if due; returns b (never NULL, which
 * lets callers that check for NULL after a pop skip the check on this path). */
__attribute__((returns_nonnull)) void *heap_malloc_tick(void *b);
__attribute__((returns_nonnull)) void *heap_malloc_tick_in(struct hak_heap *h, void *b);
/* Takes b, the head of s->free, off the list; *wrapped: the caller must pass it to
 * heap_malloc_tick before handing it out. */
hak_inline void *slab_pop_counted(hak_slab_t *s, hak_block_t *b, bool *wrapped) {
  hak_block_t *n = block_next(b);
  if (HAKMEM_SECURE) slab_check_link(s, n);
#if defined(__x86_64__) && defined(__GCC_ASM_FLAG_OUTPUTS__)
  /* One add to memory and a branch on its carry (the compiler would load, add, store);
   * b is pinned to the return register, saving a move. */
  __asm__("addl %3, %0" : "+m"(s->used_ticks), "=@ccc"(*wrapped), "+a"(b) : "i"(SLAB_USED_TICK));
#else
  *wrapped = __builtin_add_overflow(s->used_ticks, (uint32_t)SLAB_USED_TICK, &s->used_ticks);
#endif
  s->free = n;
  b->free_tag = 0;
  return b;
}
/* Takes b, the head of s->free, off the list and hands it out. */
hak_inline void *slab_pop(hak_slab_t *s, hak_block_t *b) {
  bool wrapped;
  b = slab_pop_counted(s, b, &wrapped);
  if (hak_unlikely(wrapped)) return heap_malloc_tick(b);
  return b;
}

/* A free block's second word: the address of its slab's descriptor, which lies in
 * hakmem's region header, where no program keeps pointers, and costs free no
 * arithmetic. malloc clears it, so only a block that is free carries it. */
hak_inline uintptr_t block_free_tag(const hak_slab_t *s) { return (uintptr_t)s; }
/* heap.c gives back the whole pages inside big free blocks and marks their third word;
 * those pages then read as zero. */
#define PURGED_MARK 0x5075726765644dull
hak_inline bool block_purged(uintptr_t a) {
  return ((const uintptr_t *)a)[2] == (a ^ hak_cookie ^ PURGED_MARK);
}
hak_inline void block_mark_purged(uintptr_t a) { ((uintptr_t *)a)[2] = a ^ hak_cookie ^ PURGED_MARK; }

/* The owner's free of b into s: b goes on *list (s->free; the hardened build's
 * local_free), tagged free, and only then the count drops, so that a count seen by
 * another thread means the free is done (see heap_reclaim_idle). Returns the count left,
 * read once: a second read could see a count heap_reclaim_idle has since zeroed. */
hak_inline uint32_t slab_owner_push(hak_slab_t *s, hak_block_t **list, hak_block_t *b) {
  block_set_next(b, *list);
  b->free_tag = block_free_tag(s);
  *list = b;
  hak_compiler_barrier();
  uint16_t left = (uint16_t)(s->used - 1);
  hak_tso_store(&s->used, left);
  return left;
}

/* ---- span_cache.c: a heap's few free spans, reused without region_lock --------- */
hak_slab_t *span_cache_take(hak_heap_t *h, size_t units, size_t max_units);
void span_cache_put(hak_heap_t *h, hak_slab_t *s, uint64_t now); /* s: owner already dropped */
size_t span_cache_flush(hak_heap_t *h, uint64_t now, long older_than_ms); /* -1: all */

/* ---- huge.c: blocks in mappings of their own ----------------------------------- */
void *huge_alloc(size_t n, size_t align, bool zero);
void huge_free(void *p, const char *who);
size_t huge_usable(const void *p, const char *who);
void *huge_realloc(void *p, size_t n);

/* ---- large.c: a span holding one block ------------------------------------------ */
/* A block that realloc grows past this moves to a span of its own (a large block),
 * where further growth and shrinking happen in place and only the pages written
 * become resident. Through the mid classes instead, a growing buffer would leave a
 * block behind in each class it passes, and each class would keep its own. So a large
 * block's usable size can exceed its size by up to a unit from this size on. */
#define REALLOC_SPAN_MIN ((size_t)8 * 1024)
#define LARGE_ZERO 1u    /* large_alloc flags: the block must read as zero */
#define LARGE_GROWING 2u /* realloc moves a growing block here: a cached span up to twice
                          * the size will do, as it will soon be needed */
void *large_alloc(size_t n, size_t align, unsigned flags);
void large_free(hak_slab_t *s, void *p);
size_t large_usable(const hak_slab_t *s, const void *p);
void *large_realloc_in_place(hak_slab_t *s, void *p, size_t n); /* NULL if it cannot */

#pragma GCC visibility pop

/* The thread-heap layer and the entry points, bottom-up. */
#include "internal_heap.h"


#define HAK_ASSERT(cond)                                                              \
  do {                                                                                \
    if (HAKMEM_DEBUG && hak_unlikely(!(cond))) hak_fatal("assertion failed: " #cond); \
  } while (0)

#endif
