/* space/: the address space. The slab map (unit -> slab, flat, for free's fast path),
 * 64 MiB regions of units with their bitmaps and spans, guard pages and malloc(0) blocks,
 * the hardened build's hooks, and the purge budget: what free memory stays resident and
 * when it goes back. Spans come and go above this layer only through span.c's span_*. */
#ifndef HAKMEM_SPACE_H
#define HAKMEM_SPACE_H

#include "profile/profile.h"

#pragma GCC visibility push(hidden)

typedef struct block {
  struct block *next;
  uintptr_t free_tag; /* its slab descriptor's address while free; 0 once allocated */
} block_t;

struct hak_heap;

typedef struct slab {
  /* --- what every free reads, and what other threads write once per batch of frees.
   * The owner's allocations never write this line, so a thread that frees another's
   * blocks reads it without pulling it away from the owner at every block. --- */
  uintptr_t owner; /* see "Owner word"; written with __atomic_store_n */
  uint32_t block_size;
  /* The user heap's generation when it took the slab (see user_heap below). */
  uint32_t user_gen;
  uint64_t div_magic;   /* floor(2^64 / block_size) + 1 */
  uint64_t start_magic; /* start * div_magic: a block start has
                               a * div_magic - start_magic < div_magic */
  /* capacity * (block_size * div_magic - 2^64): a block start has
   * a * div_magic - start_magic = k * (block_size * div_magic - 2^64) for block k, so
   * the carved ones are those below this (slab_is_carved_block). Written by the owner
   * as it carves, with tso_store; 0 where nothing is carved. */
  uint64_t carved_magic;
  uintptr_t start; /* address of block 0 (a large block's user pointer) */
  /* Frees from other threads: the list's head, with the number of blocks on it in the
   * top bits (see REMOTE_COUNT_SHIFT), so that one compare-and-swap pushes a chain and
   * counts it, and one exchange takes both. */
  _Atomic uintptr_t remote;
  /* The user heap whose slab (or large block) this is, NULL for a thread heap's, and
   * (user_gen, above) that heap's generation when it took the slab: a free checks both
   * before it keeps a reference to the heap (heap_user_ref). Written with relaxed
   * atomics. */
  struct hak_heap *user_heap;
  /* --- the owner's line: its free lists and counts, written by every malloc --- */
  _Alignas(64) block_t *free; /* blocks to allocate from (owner only) */
  block_t *local_free;        /* hardened build: the owner's frees that took the slow
                               path (blocks out of its quarantine go on `free`, as the
                               default build's owner frees all do) */
  /* `used` and a count of mallocs in one word, bumped by one add whose carry out of
   * the top byte, every 256 mallocs from the slab, sends malloc to look at the clock
   * for deferred work: the owner's frees go straight back on the list malloc pops, so
   * a thread that frees as much as it allocates may otherwise never leave the fast
   * path. (A slab holds at most UNIT_SIZE / 16 blocks, so `used` fits its 16 bits.) */
  union {
    struct {
      uint16_t used;    /* blocks out (remote frees count until collected) */
      uint8_t used_pad; /* stays zero: `used` never carries into it */
      uint8_t malloc_ticks;
    };
    uint32_t used_ticks;
  };
  uint32_t capacity; /* blocks carved so far */
  uint32_t reserved; /* blocks that fit */
  uint16_t units;    /* span length in units */
  uint16_t unit_idx; /* first unit inside the region */
  uint32_t touched;  /* bytes from the span's start that may be resident: what
                               any use of the span has written since it was last purged */
  uint32_t class_idx;
  struct slab *next; /* heap queue / abandoned list */
  struct slab *prev;
  uint64_t aux; /* large: requested size */
} slab_t;

typedef struct slab_queue {
  slab_t *head;
  slab_t *tail;
  size_t count;
} slab_queue_t;

typedef struct region {
  uint64_t magic;
  struct region *next, *prev; /* all regions */
  uint32_t free_units;        /* units past the header not in any span */
  uint32_t dirty_free_units;  /* free units that may still hold committed pages */
  /* Units mapped, and of them the ones spans may take: all but the header (and the
   * guard). Fewer than UNITS_PER_REGION where an address-space limit left no room for
   * a whole region (region_map_new): the units past them are never free. */
  uint32_t mapped_units, span_units;
  /* Its 2 MiB ranges (bit g: units 32 g .. 32 g + 31): collapsed into a huge page and not
   * purged in part since; left MADV_HUGEPAGE for khugepaged (a kernel without
   * MADV_COLLAPSE); advised ones purged since, to be advised MADV_NOHUGEPAGE again. */
  uint32_t huge_ranges, advised_ranges, unadvise_ranges;
  /* Advised MADV_HUGEPAGE when the region was mapped for a big heap (thp.c), and not
   * used since: the first span taken in one makes the whole range resident (a huge page
   * at its first fault), and its free units are counted so then. */
  uint32_t fault_ranges;
  /* Ranges whose pages a slab or block purged past region.c (span_purge): a huge page
   * there is broken, an advised range advised back; folded in by the next pass. */
  uint32_t broken_ranges;
  uint32_t pins;                             /* the purge thread works on a range without region_lock */
  uint8_t range_used[RANGES_PER_REGION];     /* units in spans (the header's count) */
  uint8_t range_purges[RANGES_PER_REGION];   /* bumped whenever a range's units are purged */
  uint32_t range_look_ms[RANGES_PER_REGION]; /* the purge thread's last look for a collapse */
  /* What that look saw: resident pages + 1 (0: not looked at), and units in spans. A
   * range is collapsed only when a second look finds both unchanged (thp.c). */
  uint16_t range_seen_pages[RANGES_PER_REGION];
  uint8_t range_seen_used[RANGES_PER_REGION];
  uint64_t free_bits[UNITS_PER_REGION / 64];  /* 1 = unit free */
  uint64_t dirty_bits[UNITS_PER_REGION / 64]; /* 1 = unit touched since last purge */
  uint64_t open_bits[UNITS_PER_REGION / 64];  /* hardened: 1 = accessible (secure_hooks.c) */
  uint32_t freed_ms[UNITS_PER_REGION];        /* when each free unit was freed (ms, wraps) */
  uint8_t touched_pages[UNITS_PER_REGION];    /* free unit: 4 KiB steps from its start
                                                  that may be resident (0: reads as zero) */
  slab_t *unit_map[UNITS_PER_REGION];         /* unit -> its slab descriptor */
  slab_t slabs[UNITS_PER_REGION];             /* descriptor of the span starting here */
} region_t;

/* ---- slab_map.c: unit -> slab descriptor, flat over the address space ----------- */
extern uintptr_t *slab_map;   /* entry: descriptor address - map address; 0: none */
extern size_t slab_map_units; /* 0 until reserved (or if it could not be) */
void slab_map_init(void);     /* tries once; caller holds region_lock */
bool slab_map_add_region(const region_t *r);
void slab_map_remove_region(const region_t *r);
void slab_map_set(const slab_t *s, size_t first, size_t units, bool live);
/* The slab of a region pointer, or the zero descriptor at the map's start (owner word
 * OWNER_NONE) for any other pointer below the map's end. The caller has checked
 * a >> UNIT_SHIFT < slab_map_units. */
HAK_INLINE slab_t *slab_map_lookup(uintptr_t a) {
  return (slab_t *)((uintptr_t)slab_map + tso_load(&slab_map[a >> UNIT_SHIFT]));
}
HAK_INLINE bool slab_map_none(const slab_t *s) { return s == (const slab_t *)slab_map; }
HAK_INLINE uintptr_t slab_owner(const slab_t *s) { return __atomic_load_n(&s->owner, __ATOMIC_ACQUIRE); }
/* The user heap whose slab s is, or NULL (see slab_t.user_heap). Acquire: a heap's
 * release clears it (release) before the slab can be freed and its descriptor reused by
 * another thread (a plain load on x86). */
HAK_INLINE struct hak_heap *slab_user_heap(const slab_t *s) {
  return __atomic_load_n(&s->user_heap, __ATOMIC_ACQUIRE);
}
HAK_INLINE uintptr_t slab_base(const slab_t *s) {
  return ((uintptr_t)s & ~(uintptr_t)REGION_MASK) + ((uintptr_t)s->unit_idx << UNIT_SHIFT);
}

/* ---- secure_hooks.c: the hardened build's hooks into the lower layers ----------- */
/* A hardened small block's size word: its last 8 bytes, (n * SIZE_MUL mod 2^56) ^ key ^
 * its address. The product spreads n over the low 7 bytes, so that a change to any one
 * of them decodes to a size far beyond any block's (a plain n would take a new low byte
 * for another sane size); the top byte is the key's alone, and decodes to a size of at
 * least 2^56 once changed. Relaxed atomics (plain moves on x86): a free checks the size
 * word of the block below its own, which a thread without a heap may be rewriting as
 * it frees that block; either value passes the check. */
#define SIZE_MUL 0x9e3779b97f4a7c15ull     /* odd: a bijection mod 2^56 */
#define SIZE_MUL_INV 0xf1de83e19937733dull /* SIZE_MUL * SIZE_MUL_INV = 1 mod 2^64 */
#define SIZE_LOW (((uint64_t)1 << 56) - 1)
HAK_INLINE uintptr_t *secure_size_word(uintptr_t block, size_t S) { return (uintptr_t *)(block + S - 8); }
HAK_INLINE size_t secure_size_decode(const uintptr_t *w) {
  uint64_t v = __atomic_load_n(w, __ATOMIC_RELAXED) ^ list_key ^ (uintptr_t)w;
  return (size_t)(((v * SIZE_MUL_INV) & SIZE_LOW) | (v & ~SIZE_LOW));
}
HAK_INLINE void secure_size_encode(uintptr_t *w, size_t n) {
  __atomic_store_n(w, (((uint64_t)n * SIZE_MUL) & SIZE_LOW) ^ list_key ^ (uintptr_t)w, __ATOMIC_RELAXED);
}
/* Free-list links. The hardened build stores next ^ key ^ own address, and checks that
 * a decoded link lands on a carved block of the same slab before following it. */
HAK_INLINE block_t *block_next(const block_t *b) {
  if (!HAKMEM_SECURE) return b->next;
  return (block_t *)((uintptr_t)b->next ^ list_key ^ (uintptr_t)b);
}
HAK_INLINE void block_set_next(block_t *b, block_t *next) {
  if (!HAKMEM_SECURE) b->next = next;
  else b->next = (block_t *)((uintptr_t)next ^ list_key ^ (uintptr_t)b);
}
void secure_carve(slab_t *s, uintptr_t first, uint32_t n); /* shuffled, with size words */
void secure_guard_region(region_t *r);
void secure_open_units(const slab_t *s, size_t from, size_t units); /* span.c */
void secure_protect(uintptr_t a, size_t len, bool accessible);      /* aborts if it cannot */

#include "range.h" /* 2 MiB ranges, huge pages: range.c, the regions' candidates */

/* ---- region.c ------------------------------------------------------------------ */
extern uint8_t region_map[REGION_MAP_ENTRIES];
extern slab_t region_free_unit_slab; /* what the unit map shows for unused units */
extern pthread_mutex_t region_lock;
extern region_t *regions;                  /* all regions, newest first (thp.c walks them) */
bool region_release_if_spare(region_t *r); /* an empty one beyond the cache goes */

HAK_INLINE region_t *region_of(uintptr_t a) { return (region_t *)(a & ~(uintptr_t)REGION_MASK); }
HAK_INLINE slab_t *region_slab_of(uintptr_t a) {
  return region_of(a)->unit_map[(a >> UNIT_SHIFT) & (UNITS_PER_REGION - 1)];
}
/* For a reader that holds nothing that keeps a's span (the statistics walkers reading
 * another thread's quarantine, whose blocks it may release at any time): the unit map is
 * written under region_lock, so what comes back may be stale, or the free-unit slab. */
HAK_INLINE slab_t *region_slab_of_racy(uintptr_t a) {
  return __atomic_load_n(&region_of(a)->unit_map[(a >> UNIT_SHIFT) & (UNITS_PER_REGION - 1)],
                         __ATOMIC_RELAXED);
}
HAK_INLINE unsigned region_map_kind(uintptr_t a) {
  uintptr_t i = a >> REGION_SHIFT;
  if (HAK_UNLIKELY(i >= REGION_MAP_ENTRIES)) return MAP_NONE;
  return region_map[i];
}
/* The start of a block that carving has reached, in a slab that a heap owns or owned
 * (blocks of at most MID_MAX bytes, fewer than 2^16 of them; a descriptor with nothing
 * carved answers no), with one load fewer than a bounds check and the division. For
 * a = start + k * size + r, a * m - start * m = k * e + r * m, where e = size * m - 2^64
 * lies in [1, size] (m = div_magic is floor(2^64 / size) + 1, so e is not 0 for a
 * power of two): k * e grows with k and stays below the slab's bytes when r = 0, and
 * with r != 0 the sum is at least m - 2^20 >= 2^46. So one compare with carved_magic
 * takes the carved block starts only: a slot carving has not reached yet, freed,
 * would go on the list and later be carved, and handed out, a second time. */
HAK_INLINE bool slab_is_carved_block(const slab_t *s, uintptr_t a) {
  return a * s->div_magic - s->start_magic < tso_load(&s->carved_magic);
}

/* Spans, for span.c only (everything else goes through span_alloc and friends); the
 * caller holds region_lock. region_alloc_span returns the span's descriptor with
 * units/unit_idx set and the unit map pointing at it (its `touched` says what is not
 * zero), or NULL when out of memory; *fresh: it took pages that were not resident. */
extern size_t region_used_units;  /* units in spans */
extern size_t region_dirty_units; /* free units that may be resident */
slab_t *region_alloc_span(size_t units, bool *fresh);
void region_free_span(slab_t *s, uint64_t now_ms);
size_t region_grow_span(slab_t *s, size_t new_units);    /* in place, or 0 */
slab_t *region_shrink_span(slab_t *s, size_t new_units); /* the tail, to free */
/* Purges free units freed delay_ms ago or more (and unmaps empty regions beyond the
 * cache, or all with release_regions); later ones lower *next_due. Returns the bytes. */
size_t region_purge_due(uint64_t now_ms, long delay_ms, bool release_regions, uint64_t *next_due);
void thp_atfork_child(void); /* thp.c: the regions' pins dropped (no collapse runs in a child) */
bool region_oldest_dirty(uint32_t clock_ms, region_t **region, size_t *unit, uint32_t *age);
void region_purge_around(region_t *r, size_t at, size_t need);
void region_map_unmap(uintptr_t base, size_t map_size); /* a huge mapping goes */
/* The purge thread's two steps (see region.c). */
typedef struct region_run {
  region_t *region;
  uint32_t first, units;
} region_run_t;
size_t region_take_due(uint64_t now_ms, long delay_ms, region_run_t *runs, size_t max, region_t **gone,
                       size_t *gone_count, uint64_t *next_due, bool *more);
void region_return_purged(const region_run_t *runs, size_t n);
void region_unmap_detached(region_t *r);

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
/* Purge what was freed delay_ms ago or more (delay 0: all; < 0: nothing); caller holds
 * region_lock. Returns the bytes given back. */
size_t purge_pass(uint64_t now_ms, long delay_ms, bool release_regions);
void purge_to_budget(void);
bool purge_budget_allows(size_t bytes);        /* may `bytes` more free memory stay resident? */
void purge_schedule(uint64_t due_ms);          /* a time by which the purge pass must run */
void purge_note_huge(ptrdiff_t in_use);        /* a huge block's bytes in use changed by this */
size_t purge_huge_in_use(void);                /* the live huge blocks' pages that may be resident */
size_t purge_pass_background(uint64_t now_ms); /* purge_pass without a syscall under the lock */
bool purge_pass_due(uint64_t now_ms);          /* has it work now? caller holds region_lock */
bool purge_scheduled(void);                    /* is free memory waiting for its purge delay? */
bool purge_wait(uint64_t max_ms);              /* until the pass is due, or max_ms; the purge thread's;
                                   * true if purge_wake ended its nap */
extern _Atomic bool purge_napping;             /* the purge thread sleeps long: wake it on activity */
void purge_wake(void);
void purge_atfork_child(void);
void purge_bg_pass_mark(void); /* the purge thread, as a pass begins and as it ends */
bool purge_bg_pass_wait(void); /* until a pass in progress ends (at most 1 s); true if one was */
int purge_debug_hold(int set); /* debug.hold_purge_thread: 1 asks, 0 ends; returns the state */
/* Keeps a freed huge mapping if the delay and budget allow (false: unmap it); a kept one
 * it had to drop comes back in *evicted_*, for the caller to unmap. */
bool purge_keep_huge(uintptr_t base, size_t map_size, size_t resident, uint64_t now, uintptr_t *evicted_base,
                     size_t *evicted_size);
/* A kept mapping of map_size whose base + offset is aligned to align, or 0. */
uintptr_t purge_take_huge(size_t map_size, size_t offset, size_t align);
/* ---- thp.c: which ranges become huge pages (the purge thread's) ------------------ */
/* Collapses dense ranges, and huge blocks' dense ranges; returns how many. */
size_t thp_pass(uint64_t now_ms);
/* ---- thp_blocks.c: huge blocks' dense ranges made huge pages (under region_lock) -- */
/* How a live huge block gets huge pages: its dense ranges collapsed later; faulted huge
 * from its first write if the heap is big (a malloc'd block, before its first byte is
 * written); or faulted huge again (a resized block that was). */
typedef enum { THP_BLOCK_LATER, THP_BLOCK_IF_BIG, THP_BLOCK_AGAIN } thp_block_how_t;
void thp_block_note(uintptr_t base, uintptr_t end, thp_block_how_t how); /* its mapping, to its end */
bool thp_block_forget(uintptr_t base); /* before unmap or resize; may wait; true: it faults huge */
size_t thp_blocks_pass(void);          /* the purge thread's; returns the collapses */
void thp_blocks_atfork_child(void);
#define THP_MIN_IN_USE ((size_t)16 << 20) /* in spans, before any range is collapsed */
/* Has thp_pass anything to do? Asked inline, so that thp.c, cold code, runs only in a
 * process with a big heap, or with ranges left to khugepaged to advise back. Committed
 * memory (an atomic) bounds what is in spans from above; thp_pass checks the latter
 * under region_lock. */
HAK_INLINE bool thp_pass_wanted(void) {
  return opt.thp && (atomic_load_explicit(&gstats.committed_est, memory_order_relaxed) >= THP_MIN_IN_USE ||
                     atomic_load_explicit(&gstats.huge_mapped, memory_order_relaxed) != 0 ||
                     atomic_load_explicit(&gstats.thp_advised, memory_order_relaxed) != 0);
}

/* span.c's changes: bytes came into use (fresh: pages that were not resident), or a
 * span freed at freed_ms went back to its region. */
void purge_note_span_taken(size_t bytes, bool fresh);
void purge_note_span_freed(uint64_t freed_ms, uint64_t now_ms);

/* ---- span.c: spans taken and given back, the budget kept ------------------------ */
/* The only way spans are taken and given back above region.c (caller holds
 * region_lock), so the budget sees every change. */
slab_t *span_alloc(size_t units);
void span_purge(void *p, size_t n); /* pages of a span given back by its user (slab, block) */
void span_free(slab_t *s, uint64_t now_ms);
/* The same, for a span whose blocks all came back at some time since freed_ms. */
void span_free_since(slab_t *s, uint64_t freed_ms, uint64_t now_ms);
bool span_grow(slab_t *s, size_t new_units); /* in place, or false */
void span_shrink(slab_t *s, size_t new_units, uint64_t now_ms);

/* ---- limit.c: the soft and hard limits on committed memory (opt.limit_*) ----- */
extern _Atomic uint64_t limit_refused;    /* allocations refused at the hard limit */
extern _Atomic uint64_t limit_give_backs; /* purges of all free memory the limits forced */
size_t limit_committed(void);             /* what the limits compare (limit.committed) */
/* Is a limit set? Read inline where spans are taken, so that limit.c, cold code, runs
 * only in a process that set one (CMakeLists.txt: HAKMEM_COLD_SOURCES). */
HAK_INLINE bool limits_set(void) {
  return (__atomic_load_n(&opt.limit_soft, __ATOMIC_RELAXED) |
          __atomic_load_n(&opt.limit_hard, __ATOMIC_RELAXED)) != 0;
}
bool limit_near_set(size_t bytes);
/* Would `bytes` more pass the lower limit set? */
HAK_INLINE bool limit_near(size_t bytes) { return limits_set() && limit_near_set(bytes); }
/* May `bytes` more be committed? Over the lower limit, free memory goes back first.
 * Caller holds region_lock. */
bool limit_admit_set(size_t bytes);
HAK_INLINE bool limit_admit(size_t bytes) { return !limits_set() || limit_admit_set(bytes); }
/* The same for a huge mapping, taking region_lock: the bytes held until limit_settle
 * (once huge_mapped counts them, or the mapping failed), 0 if none; *ok: admitted. */
size_t limit_admit_huge(size_t bytes, bool *ok);
void limit_settle(size_t held);
/* The heap layer's: gives back what heaps hold (api/init.c sets it). With no lock held,
 * before `bytes` more are committed: near a limit, limit_reclaim runs (for a span at
 * most once per DEFERRED_PERIOD_MS), or, `refused` at the hard limit, always. True: it ran, so that
 * a refused allocation is worth one more try. */
extern void (*limit_reclaim)(void);
bool limit_give_back_set(size_t bytes, bool refused);
HAK_INLINE bool limit_give_back(size_t bytes, bool refused) {
  return limits_set() && limit_give_back_set(bytes, refused);
}
bool limit_from_cgroup(void);         /* soft just below memory.max; false: no limit found */
int limit_set(int which, uint64_t v); /* ctl: 0 soft, 1 hard, 2 from_cgroup; 0 or -EINVAL */
uint64_t limit_value(int which);      /* ctl: those, then committed, give_backs, refused */

#pragma GCC visibility pop

#endif
