/* Cross-file internal interface. Every name here is hidden from the library's users. */
#ifndef HAKMEM_INTERNAL_H
#define HAKMEM_INTERNAL_H

#include "types.h"

#include <pthread.h>
#include <stdio.h>

#pragma GCC visibility push(hidden)

/* ---- os.c: the only file that talks to the kernel about memory ------------------ */
void *os_map(size_t size);                       /* NULL on failure */
void *os_map_aligned(size_t size, size_t align); /* NULL on failure */
/* A huge block's mapping, charged like the C library's: its byte at `offset` aligned to
 * `align`. NULL on failure. */
void *os_map_block(size_t size, size_t align, size_t offset);
void os_unmap(void *p, size_t size);
void os_purge(void *p, size_t size);             /* give pages back; they read as zero */
void os_set_huge_pages(void *p, size_t size, bool enable);
void *os_remap(void *old, size_t old_size, size_t new_size, void *to); /* NULL if it cannot */
bool os_protect(void *p, size_t size, bool accessible);
/* Address space that reads as zero and costs no commit charge until made writable. */
void *os_reserve_readonly(size_t size); /* NULL on failure */
bool os_set_writable(void *p, size_t size, bool writable); /* read-write, or read-only */
size_t os_page_size(void);
uint64_t os_now_ms(void);
struct timespec os_monotonic_after(long ns); /* CLOCK_MONOTONIC now + ns: a wait's deadline */
void os_write_stderr(const char *msg, size_t len);

/* ---- options.c: HAKMEM_* read once at start-up ---------------------------------- */
typedef struct hak_options {
  long purge_delay_ms;  /* HAKMEM_PURGE_DELAY_MS: 0 at once, -1 never */
  long region_cache;    /* HAKMEM_REGION_CACHE: empty regions kept mapped */
  bool thp;             /* HAKMEM_THP: allow transparent huge pages on regions */
  bool stats;           /* HAKMEM_STATS: print a report at exit */
} hak_options_t;
extern hak_options_t hak_opt;
void options_init(void);

/* ---- size_class.c -------------------------------------------------------------- */
extern uint32_t class_size[NUM_CLASSES];
extern uint8_t class_units[NUM_CLASSES];
extern uint16_t class_carve[NUM_CLASSES]; /* blocks one carve of a slab makes */
extern uint8_t class_of_direct[DIRECT_SLOTS];
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

hak_inline uint32_t size_to_class(size_t n) {
  if (n <= TINY_MAX) return class_of_direct[(n + 15) >> 4];
  size_t m = n - 1;
  unsigned bit = 63u - (unsigned)__builtin_clzl(m);
  return (uint32_t)(TINY_CLASSES + (bit - 10) * 4 + ((m >> (bit - 2)) & 3));
}

/* The heap's direct slot that points at class c's head, for c below
 * TINY_CLASSES + MID_DIRECT_CLASSES: a tiny class's last size step, or a mid class's
 * own slot after them. */
hak_inline size_t class_direct_slot(uint32_t c) {
  return c < TINY_CLASSES ? class_size[c] / 16 : DIRECT_SLOTS + (c - TINY_CLASSES);
}

/* ---- region.c ------------------------------------------------------------------ */
extern uint8_t region_map[REGION_MAP_ENTRIES];
extern hak_slab_t region_free_unit_slab; /* what the unit map shows for unused units */
extern pthread_mutex_t region_lock;

hak_inline hak_region_t *region_of(uintptr_t a) {
  return (hak_region_t *)(a & ~(uintptr_t)REGION_MASK);
}
hak_inline hak_slab_t *region_slab_of(uintptr_t a) {
  return region_of(a)->unit_map[(a >> UNIT_SHIFT) & (UNITS_PER_REGION - 1)];
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
hak_inline uintptr_t slab_base(const hak_slab_t *s) {
  return ((uintptr_t)s & ~(uintptr_t)REGION_MASK) + ((uintptr_t)s->unit_idx << UNIT_SHIFT);
}

/* Span allocation; the caller holds region_lock. Returns the span's descriptor with
 * units/unit_idx set and the unit map pointing at it, or NULL when out of memory. */
hak_slab_t *region_alloc_span(size_t units); /* its `touched` says what is not zero */
void region_free_span(hak_slab_t *s, uint64_t now_ms);
/* Purge free spans freed before now - delay (delay 0: all). Caller holds region_lock.
 * Returns the bytes given back. */
size_t region_purge(uint64_t now_ms, long delay_ms, bool release_regions);
size_t region_grow_span(hak_slab_t *s, size_t new_units); /* in place, or 0 */
/* The purge budget also covers huge blocks (caller holds region_lock): their bytes in
 * use and the freed ones kept; whether `bytes` more free memory may stay resident; and
 * a time by which the purge pass must run. */
void purge_note_huge(ptrdiff_t in_use, ptrdiff_t kept);
bool purge_budget_allows(size_t bytes);
void purge_schedule(uint64_t due_ms);
void region_shrink_span(hak_slab_t *s, size_t new_units, uint64_t now_ms);

/* ---- slab.c -------------------------------------------------------------------- */
void slab_init(hak_slab_t *s, uint32_t class_idx, uintptr_t owner);
bool slab_extend(hak_slab_t *s);          /* carve more blocks; false if none left */
uint32_t slab_collect_slow(hak_slab_t *s);
bool slab_has_stale(const hak_slab_t *s); /* written pages past the carved blocks, enough to purge */
size_t slab_trim_stale(hak_slab_t *s);    /* purge them */
void slab_remote_push(hak_slab_t *s, hak_block_t *head, hak_block_t *tail, uint32_t count);
extern _Atomic bool slab_remote_seen; /* has any thread ever freed into another's slab? */
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
extern uintptr_t hak_cookie;
extern uintptr_t hak_list_key; /* hardened build: free-list links are xor-encoded */
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
hak_inline void slab_check_link(const hak_slab_t *s, const hak_block_t *n) {
  uintptr_t a = (uintptr_t)n;
  if (n != NULL && (a - s->start >= (uintptr_t)s->capacity * s->block_size ||
                    (a - s->start) % s->block_size != 0))
    slab_corrupt_link(s, n);
}
/* One more block out, one more malloc counted (see hak_slab_t.used_ticks). */
#define SLAB_USED_TICK 0x01000001u
/* Every 256th malloc from a slab: deferred work if due; returns b (never NULL, which
 * lets callers that check for NULL after a pop skip the check on this path). */
__attribute__((returns_nonnull)) void *heap_malloc_tick(void *b);
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

/* ---- heap.c -------------------------------------------------------------------- */
extern __thread hak_heap_t *hak_tls_heap __attribute__((tls_model("initial-exec")));
extern hak_heap_t hak_heap_empty;
extern hak_slab_t hak_slab_empty;
extern pthread_mutex_t heaps_lock;
extern hak_heap_t *heaps_all;

hak_heap_t *heap_get(void);              /* this thread's heap, created on first use */
void *heap_malloc_slow(size_t n);        /* everything the fast path does not finish */
/* Class c's queue head ran dry (aligned and mid sizes): the owner's own frees, or a
 * refill on the slow path, which also runs deferred work when it is due. */
void *heap_alloc_class_refill(uint32_t c);
void heap_free_slow(void *p, hak_slab_t *s);
void heap_free_other(void *p, hak_slab_t *s, hak_heap_t *h); /* fast free's miss: h's */
void free_unmapped(void *p); /* alloc.c: free of a pointer the slab map has no slab for */
uintptr_t free_checked(void *p, hak_slab_t *s); /* OWNER_LARGE: it was large, and is freed */
_Noreturn void report_not_live(void *p, const char *fn);
void heap_slab_emptied(hak_heap_t *h, hak_slab_t *s);
void heap_abandon(hak_heap_t *h);        /* thread exit */
void heap_remote_flush(hak_heap_t *h);   /* push the pending remote chain */
size_t heap_collect(hak_heap_t *h, bool release_all); /* trim this thread's heap */
size_t heap_reclaim_idle(hak_heap_t *self, uint64_t now, bool all);
void heap_atfork_child(void);
void heap_mark_main(hak_heap_t *h); /* the main thread's heap: never waited for */
void *heap_alloc_class(hak_heap_t *h, uint32_t c);

/* ---- span_cache.c: a heap's few free spans, reused without region_lock --------- */
hak_slab_t *span_cache_take(hak_heap_t *h, size_t units, size_t max_units);
void span_cache_put(hak_heap_t *h, hak_slab_t *s, uint64_t now); /* s: owner already dropped */
size_t span_cache_flush(hak_heap_t *h, uint64_t now, long older_than_ms); /* -1: all */

/* ---- large.c: large spans and huge mappings --------------------------------------- */
/* A block that realloc grows past this moves to a span of its own (a large block),
 * where further growth and shrinking happen in place and only the pages written
 * become resident. Through the mid classes instead, a growing buffer would leave a
 * block behind in each class it passes, and each class would keep its own. So a large
 * block's usable size can exceed its size by up to a unit from this size on. 8 KiB
 * rather than 16: realloc_growth (3000 rounds to 64 KiB, 8 buffers) peaks at 2.33
 * instead of 2.52 MiB, and a buffer that stops at 8-16 KiB holds whole pages of its
 * own (under 4 KiB past its size) and a unit of address space. */
#define REALLOC_SPAN_MIN ((size_t)8 * 1024)
void *large_alloc(size_t n, size_t align, bool zero);
void large_free(hak_slab_t *s, void *p);
size_t large_usable(const hak_slab_t *s, const void *p);
void *large_realloc_in_place(hak_slab_t *s, void *p, size_t n); /* NULL if it cannot */
void *huge_alloc(size_t n, size_t align, bool zero);
void huge_free(void *p, const char *who);
size_t huge_usable(const void *p, const char *who);
void *huge_realloc(void *p, size_t n);
/* Unmaps kept huge blocks freed delay_ms ago or more; earlier ones lower *next_due. */
size_t huge_purge(uint64_t now_ms, long delay_ms, uint64_t *next_due);
bool huge_oldest(uint32_t *freed_ms); /* is a huge block kept? when the oldest was freed */
void huge_purge_oldest(size_t bytes); /* at least `bytes` of the oldest, or all of it */
extern _Atomic size_t huge_mapped_bytes;

/* ---- secure.c: the hardened build's checks ------------------------------------- */
void *secure_arm(void *p, size_t n);  /* writes canary and size word; returns p */
void secure_free(void *p);
void secure_init(void); /* after hak_list_key is set */
size_t secure_usable(void *p, hak_slab_t *s); /* requested size of a small block */
void *secure_malloc_zero(void);
void *secure_malloc(size_t n);
void *secure_calloc(size_t n); /* n <= MID_MAX */
size_t slab_gap(size_t units, uint32_t size); /* bytes before block 0 */
void secure_quarantine_flush(hak_heap_t *h, bool check);
void secure_guard_large(hak_slab_t *s, bool on);
void secure_guard_region(void *region);
void secure_carve(hak_slab_t *s, uintptr_t first, uint32_t n); /* shuffled, with size words */

/* ---- foreign.c: pointers that are not ours ------------------------------------ */
_Noreturn void hak_fatal_pointer(const char *what, const char *fn, const void *p);
_Noreturn void hak_fatal(const char *msg);
_Noreturn void hak_fatal_at(const char *what, const void *p);
/* A pointer not in any region: NULL, a libc block, or garbage. */
void foreign_free(void *p, const char *fn);
size_t foreign_usable(const void *p, const char *fn);

/* ---- stats.c -------------------------------------------------------------------- */
typedef struct hak_global_stats {
  _Atomic size_t region_bytes;   /* mapped in regions */
  _Atomic size_t purged_bytes;   /* cumulative, given back */
  _Atomic size_t released_bytes; /* cumulative, regions and huge unmapped */
  _Atomic size_t committed_est;  /* region bytes that may be resident */
  _Atomic size_t peak_in_use;
  _Atomic size_t large_in_use;
  _Atomic uint64_t large_allocs, huge_allocs;
  _Atomic uint64_t heaps_created, heaps_taken_over, heaps_taken_by_free, heaps_dissolved,
      slabs_adopted, slabs_reclaimed_idle;
  _Atomic uint64_t heap_waits, heap_waits_in_vain; /* see heap_take_parked */
} hak_global_stats_t;
extern hak_global_stats_t hak_gstats;
void stats_note_in_use(void); /* recompute peak on slow paths */
void stats_print(FILE *out);

/* ---- init.c ---------------------------------------------------------------------- */
void hak_process_init(void);
extern _Atomic int hak_init_state;
extern pthread_key_t hak_thread_key;
extern bool hak_key_ready;

#pragma GCC visibility pop

#define HAK_ASSERT(cond)                                                              \
  do {                                                                                \
    if (HAKMEM_DEBUG && hak_unlikely(!(cond))) hak_fatal("assertion failed: " #cond); \
  } while (0)

#endif
