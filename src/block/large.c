/* Large blocks (> 128 KiB, up to half a region: 32 MiB): a span of units holding one
 * block, taken from a region and freed back to it (a growing block of up to 2 units:
 * from and to the heap's span cache), resized in place where the neighbouring units
 * allow. Bigger blocks are huge.c's. Its usable size is n, which also makes a sized
 * free's size exact.
 *
 * Default build: 32 canary bytes right before the block and right after its last
 * requested byte, which free checks (64 bytes compared on a large block's slow path; no
 * system call), so that a write 1 to 32 bytes off either end is reported. A run past them goes unseen; the default build puts no guard inside a
 * region: a guard page costs two system calls per block, and the kernel's guard markers
 * hide a region from core dumps (docs/design.md).
 *
 * Hardened build: the block ends flush against a guard page (guard.c), up to its
 * 64-byte alignment, and a guard page sits below the head slack:
 *   [guard page | head slack, < 1 page | block of n bytes | tail slack, < 64 | guard page | rest]
 * Every byte of both slacks holds canary bytes that free checks, so a write at any
 * offset before or after the block either faults at once (a guard page) or is reported
 * at free (a slack byte). The whole block is guarded when it is freed (its pages are
 * dropped: they read as zero, and a write after free faults) and held in a quarantine of
 * LARGE_QUARANTINE blocks, released in random order. */

#include "block/block.h"

#include <errno.h>
#include <string.h>

#define LARGE_CLASS NUM_CLASSES                          /* class_idx of a large span */
#define LARGE_CANARY 32                                  /* canary bytes on either side (default build) */
#define LARGE_HEAD 64                                    /* the block's least alignment */
#define LARGE_GUARD (HAKMEM_SECURE ? os_page_size() : 0) /* guard page bytes, each side */

/* The canary bytes at a: they depend on the process and the address. */
static void canary_words(uintptr_t a, uint64_t w[2]) {
  w[0] = process_cookie ^ (a * 0x9e3779b97f4a7c15ull);
  w[1] = ~w[0] ^ process_cookie;
}
/* Slack (the hardened build's; the default build's canaries): every byte in [from, to)
 * holds the canary byte of its address, byte a % 16 of canary_words(a rounded down to
 * 16). */
static void slack_fill(uintptr_t from, uintptr_t to) {
  for (uintptr_t c = from & ~(uintptr_t)15; c < to; c += 16) {
    uint64_t w[2];
    canary_words(c, w);
    uintptr_t lo = c < from ? from : c, hi = c + 16 > to ? to : c + 16;
    memcpy((void *)lo, (const char *)w + (lo - c), hi - lo);
  }
}
static bool slack_intact(uintptr_t from, uintptr_t to) {
  for (uintptr_t c = from & ~(uintptr_t)15; c < to; c += 16) {
    uint64_t w[2];
    canary_words(c, w);
    uintptr_t lo = c < from ? from : c, hi = c + 16 > to ? to : c + 16;
    if (memcmp((const void *)lo, (const char *)w + (lo - c), hi - lo) != 0) return false;
  }
  return true;
}

/* The default build's canaries: the LARGE_CANARY bytes from a, filled as slack is. */
static void canary_write(uintptr_t a) { slack_fill(a, a + LARGE_CANARY); }
static bool canary_intact(uintptr_t a) { return slack_intact(a, a + LARGE_CANARY); }

/* The guard page after a block of n bytes at p (hardened build): the block ends less
 * than its alignment before it. */
static uintptr_t tail_guard(uintptr_t p, size_t n) { return align_up(p + n, os_page_size()); }

/* Where a block of n bytes aligned to `align` starts in the span at base: default build,
 * LARGE_HEAD bytes past the span's start (its head canary below it); hardened, as late
 * as lets it end before a page boundary, its tail guard. */
static uintptr_t block_start(uintptr_t base, size_t n, size_t align) {
  uintptr_t p = align_up(base + LARGE_GUARD + LARGE_HEAD, align);
  if (!HAKMEM_SECURE) return p;
  p = align_up(base + LARGE_GUARD, align);
  return (align_up(p + n, os_page_size()) - n) & ~(uintptr_t)(align - 1);
}

/* Prefaulting. The pages of a large block that no earlier use left resident fault in
 * one at a time as the program writes them, a trap each; where the program writes its
 * large blocks whole, one MADV_POPULATE_WRITE at malloc faults the same pages in for a
 * fifth less CPU time (counted as minor faults all the same). Whether it does is learnt
 * per thread: each block's last fresh page that the tail canary is not on, its sentinel,
 * is left to the program and looked at (mincore) at the thread's next large malloc or at
 * the block's free, whichever comes first. The next block is prefaulted if the sentinels
 * of the last two were written (PREFAULT_STREAK: one block written whole, a structure
 * initialised at start-up say, is no habit: barnes's next table is 13 MB it never
 * writes whole), so a block the program leaves mostly unwritten is prefaulted at most
 * once per change of habit (and its own sentinel, left alone, turns prefaulting off). Not for
 * calloc (sparse tables that read as zero), nor for realloc's growing blocks, nor with
 * transparent huge pages (a fault fills 2 MiB). */
static __thread uintptr_t prefault_sentinel __attribute__((tls_model("initial-exec")));
static __thread uint8_t prefault_streak __attribute__((tls_model("initial-exec")));
#define PREFAULT_STREAK 2 /* sentinels written in a row before a block is prefaulted */

/* Looks at the last block's sentinel, if not looked at yet. */
static void prefault_look(void) {
  uintptr_t sentinel = prefault_sentinel;
  if (sentinel == 0) return;
  prefault_sentinel = 0;
  if (!os_page_resident((const void *)sentinel)) prefault_streak = 0;
  else if (prefault_streak < PREFAULT_STREAK) prefault_streak++;
}

/* The block of n bytes at p in a span at base whose first `resident` bytes an earlier use
 * may have left resident: its fresh pages up to the sentinel are faulted in if `on`, and
 * the sentinel kept for the next look. A block with no fresh sentinel teaches nothing. */
static void prefault(uintptr_t base, size_t resident, uintptr_t p, size_t n, bool on) {
  size_t page = os_page_size();
  uintptr_t from = (p - LARGE_CANARY) & ~(page - 1); /* the head canary's page */
  if (base + resident > from) from = align_up(base + resident, page);
  uintptr_t sentinel = ((p + n) & ~(page - 1)) - page;
  if (sentinel < from || sentinel < p) return;
  prefault_sentinel = sentinel;
  if (on && sentinel > from && os_populate((void *)from, sentinel - from))
    atomic_fetch_add_explicit(&gstats.large_prefaulted, sentinel - from, memory_order_relaxed);
}

/* Units for n bytes aligned to `align`: head canary or guard and slack, the block, tail
 * canary or slack and guard. */
static size_t units_for(size_t n, size_t align) {
  size_t head = HAKMEM_SECURE ? align_up(LARGE_GUARD, align) : align_up(LARGE_HEAD, align);
  size_t tail = HAKMEM_SECURE ? 2 * LARGE_GUARD : LARGE_CANARY;
  return align_up(head + n + tail, UNIT_SIZE) >> UNIT_SHIFT;
}

/* Arms the block's end: tail canary (hardened: slack and guard). */
static void arm_tail(slab_t *s, size_t n) {
  s->aux = n;
  s->block_size = (uint32_t)n;
  if (!HAKMEM_SECURE) {
    canary_write(s->start + n);
    return;
  }
  uintptr_t guard = tail_guard(s->start, n);
  slack_fill(s->start + n, guard);
  guard_set(guard, os_page_size(), true);
}

/* Arms the block's start: head canary (hardened: guard and slack). */
static void arm_head(slab_t *s) {
  if (!HAKMEM_SECURE) {
    canary_write(s->start - LARGE_CANARY);
    return;
  }
  uintptr_t base = slab_base(s);
  guard_set(base, LARGE_GUARD, true);
  slack_fill(base + LARGE_GUARD, s->start);
}

/* Are the bytes on either side of the block as armed? */
static bool ends_intact(const slab_t *s) {
  uintptr_t p = s->start;
  if (!HAKMEM_SECURE) return canary_intact(p - LARGE_CANARY) && canary_intact(p + s->aux);
  return slack_intact(slab_base(s) + LARGE_GUARD, p) && slack_intact(p + s->aux, tail_guard(p, s->aux));
}

void *large_alloc(size_t n, size_t align, unsigned flags) {
  bool zero = flags & LARGE_ZERO;
  if (align < LARGE_HEAD) align = LARGE_HEAD;
  /* The heap malloc allocates from: a user heap keeps its big blocks on lists. */
  hak_heap_t *h = tls_alloc;
  bool user = h->kind == HEAP_KIND_USER;
  if (n > LARGE_MAX || align > LARGE_MAX / 2 || units_for(n, align) > REGION_MAX_SPAN_UNITS) {
    void *p = huge_alloc(n, align, zero);
    if (user && p != NULL) huge_set_heap(p, h);
    return p;
  }
  size_t units = units_for(n, align);
  bool learn = !(flags & (LARGE_ZERO | LARGE_GROWING));
  if (learn) prefault_look();
  bool prefault_now = learn && prefault_streak >= PREFAULT_STREAK;
  /* A cached span up to a quarter bigger is as good as a new one; a growing block will
   * fill one twice as big (its written pages are resident anyway while cached). */
  slab_t *s = NULL;
  if (h != &empty_heap) { /* the purge thread may flush the cache of an idle heap */
    pthread_mutex_lock(&h->lock);
    s = span_cache_take(h, units, flags & LARGE_GROWING ? 2 * units : units + units / 4);
    pthread_mutex_unlock(&h->lock);
  }
  size_t counted = s != NULL ? 0 : units * UNIT_SIZE; /* new to the heap */
  if (s == NULL) {
    limit_give_back(units * UNIT_SIZE, false); /* near a memory limit: heaps give back first */
    pthread_mutex_lock(&region_lock);
    s = span_alloc(units);
    pthread_mutex_unlock(&region_lock);
    if (s == NULL && limit_give_back(units * UNIT_SIZE, true)) {
      pthread_mutex_lock(&region_lock);
      s = span_alloc(units);
      pthread_mutex_unlock(&region_lock);
    }
    if (s == NULL) {
      errno = ENOMEM;
      return NULL;
    }
  }
  units = s->units;
  uintptr_t base = slab_base(s);
  uintptr_t p = block_start(base, n, align);
  __atomic_store_n(&s->class_idx, LARGE_CLASS, __ATOMIC_RELAXED); /* as slab_init */
  s->start = p;
  s->div_magic = 0;
  s->start_magic = 0;
  tso_store(&s->carved_magic, 0);
  s->used = 1;
  /* Only what an earlier use wrote needs clearing; the rest reads as zero. */
  size_t dirty = base + s->touched > p ? base + s->touched - p : 0;
  if (learn) prefault(base, s->touched, p, n, prefault_now);
  s->touched = (uint32_t)(units * UNIT_SIZE);              /* the user may write all of it */
  __atomic_store_n(&s->user_heap, NULL, __ATOMIC_RELAXED); /* a cached span's may be stale */
  if (zero && dirty > 0) memset((void *)p, 0, dirty < n ? dirty : n);
  arm_head(s);
  arm_tail(s, n);
  if (user) heap_large_added(h, s, counted); /* its list's readers see it whole */
  __atomic_store_n(&s->owner, OWNER_LARGE, __ATOMIC_RELEASE);
  atomic_fetch_add_explicit(&gstats.large_in_use, units * UNIT_SIZE, memory_order_relaxed);
  atomic_fetch_add_explicit(&gstats.large_allocs, 1, memory_order_relaxed);
  stats_note_in_use();
  return (void *)p;
}

/* Back to the span cache; the hardened build lifts its guards first (the pages read as
 * zero then): all of the span up to guarded_to. */
static void large_release(slab_t *s, uintptr_t guarded_to) {
  if (HAKMEM_SECURE) guard_set(slab_base(s), guarded_to - slab_base(s), false);
  /* Any thread may keep a free span: it belongs to no heap until reused. */
  hak_heap_t *h = tls_heap;
  if (h != &empty_heap) pthread_mutex_lock(&h->lock);
  span_cache_put(h, s, os_now_ms());
  if (h != &empty_heap) pthread_mutex_unlock(&h->lock);
}

#if HAKMEM_SECURE
#define LARGE_QUARANTINE 16
static slab_t *large_quarantine[LARGE_QUARANTINE]; /* under region_lock */
static uint64_t large_quarantine_rng;

/* Takes s in, returns the block it evicts (or NULL), chosen at random. */
static slab_t *large_quarantine_swap(slab_t *s) {
  pthread_mutex_lock(&region_lock);
  uint64_t x = large_quarantine_rng + 0x9e3779b97f4a7c15ull + process_cookie;
  large_quarantine_rng = x;
  x = (x ^ (x >> 31)) * 0xbf58476d1ce4e5b9ull;
  size_t i = (size_t)((x ^ (x >> 29)) % LARGE_QUARANTINE);
  slab_t *old = large_quarantine[i];
  large_quarantine[i] = s;
  pthread_mutex_unlock(&region_lock);
  return old;
}
#endif

void large_free(slab_t *s, void *p) {
  uintptr_t a = (uintptr_t)p;
  if (a != s->start) error_fatal_pointer("invalid pointer", "free", p);
  /* Claim the block: of two threads freeing it at once, one loses here. */
  uintptr_t expect = OWNER_LARGE;
  if (!__atomic_compare_exchange_n(&s->owner, &expect, OWNER_CACHED, false, __ATOMIC_ACQ_REL,
                                   __ATOMIC_RELAXED))
    error_fatal_pointer("double free", "free", p);
  if (!ends_intact(s)) error_fatal_at("heap overflow detected", p);
  if (prefault_sentinel - a < s->aux) prefault_look(); /* this block's */
  heap_large_freed(s);                                 /* if a user heap's */
  atomic_fetch_sub_explicit(&gstats.large_in_use, (size_t)s->units * UNIT_SIZE, memory_order_relaxed);
  uintptr_t guarded_to = 0;
#if HAKMEM_SECURE
  /* Zero on free: the whole span is guarded, its pages dropped. */
  uintptr_t base = slab_base(s);
  guarded_to = base + (size_t)s->units * UNIT_SIZE;
  guard_set(base + os_page_size(), guarded_to - base - os_page_size(), true);
  s->touched = 0;
  s = large_quarantine_swap(s);
  if (s == NULL) return;
  guarded_to = slab_base(s) + (size_t)s->units * UNIT_SIZE;
#endif
  large_release(s, guarded_to);
}

size_t large_usable(const slab_t *s, const void *p) {
  if ((uintptr_t)p != s->start) return 0;
  return s->block_size;
}

/* Resize without moving (default build): shrink by giving back tail units, grow over
 * free neighbours. A block that grows keeps the units it has beyond its need (a span
 * taken bigger for growth, LARGE_GROWING). The tail canary moves with the end. */
void *large_realloc_in_place(slab_t *s, void *p, size_t n) {
  if (HAKMEM_SECURE) return NULL; /* a moved block is zeroed and quarantined */
  uintptr_t base = slab_base(s), a = (uintptr_t)p;
  size_t head = a - base;
  size_t units = align_up(head + n + LARGE_CANARY, UNIT_SIZE) >> UNIT_SHIFT;
  if (n > LARGE_MAX || units > REGION_MAX_SPAN_UNITS) return NULL;
  if (!canary_intact(a + s->aux)) error_fatal_at("heap overflow detected", p);
  size_t old_bytes = (size_t)s->units * UNIT_SIZE;
  if (units < s->units && n > s->aux) units = s->units;
  if (units != s->units) {
    uint64_t now = os_now_ms();
    pthread_mutex_lock(&region_lock);
    bool ok = true;
    if (units < s->units) span_shrink(s, units, now);
    else ok = span_grow(s, units);
    pthread_mutex_unlock(&region_lock);
    if (!ok) return NULL;
  }
  s->touched = (uint32_t)((size_t)s->units * UNIT_SIZE);
  /* A user heap's statistics read the size under its lock. */
  hak_heap_t *u = slab_user_heap(s);
  if (u != NULL) pthread_mutex_lock(&u->lock);
  arm_tail(s, n);
  if (u != NULL) pthread_mutex_unlock(&u->lock);
  size_t new_bytes = (size_t)s->units * UNIT_SIZE;
  if (u != NULL) heap_held_add(u, new_bytes - old_bytes);
  if (new_bytes > old_bytes)
    atomic_fetch_add_explicit(&gstats.large_in_use, new_bytes - old_bytes, memory_order_relaxed);
  else atomic_fetch_sub_explicit(&gstats.large_in_use, old_bytes - new_bytes, memory_order_relaxed);
  return p;
}
