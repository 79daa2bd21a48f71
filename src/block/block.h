/* block/: blocks in spans. One slab's lists, a heap's span cache, large blocks (a span
 * each) and huge ones (a mapping each), heap structures as checked slots and the
 * references on user heaps, the hardened build's destroyed heaps' slabs, and the thread's
 * heap pointers with the static empty heap they start at. */
#ifndef HAKMEM_BLOCK_H
#define HAKMEM_BLOCK_H

#include "space/space.h"

#pragma GCC visibility push(hidden)

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
typedef struct span_cache {
  slab_t *spans[SPAN_CACHE_SLOTS]; /* oldest first; aux holds the time it came */
  uint32_t count;
  uint32_t units;
} span_cache_t;

typedef struct hak_heap {
  /* Bytes the heap profiler lets this heap allocate before its next sample (prof.c):
   * malloc subtracts the size and takes the slow path when it goes negative. 0 in a new
   * heap (the first malloc asks prof.c), INT64_MAX while profiling is off. */
  int64_t prof_left;
  /* Fast path: current slab for each 16-byte size step <= 1 KiB, then for each mid class
   * <= ALIGNED_DIRECT_MAX (aligned allocation's). Never NULL: an empty queue points at
   * the static empty slab, so "no heap yet" and "refill" are the same miss. */
  slab_t *direct[ALL_DIRECT_SLOTS];
  slab_queue_t queue[NUM_CLASSES]; /* slabs with (possibly) free blocks */
  slab_queue_t full[NUM_CLASSES];  /* slabs with none, waiting for frees */
  slab_t *pinned[NUM_CLASSES];     /* the queue head, holding one extra `used` */
  span_cache_t spans;
  /* Frees into other threads' slabs, chained here per slab and pushed with one CAS. */
  struct remote_chain {
    slab_t *slab;
    block_t *head, *tail;
    uint32_t count;
    uint32_t limit; /* blocks at which the chain is pushed */
  } remote[REMOTE_CHAINS];
  uint64_t slow_calls; /* drives deferred work */
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
  block_t *quarantine[QUARANTINE_SLOTS];
  uint32_t quarantine_rng;
  uint32_t quarantine_bytes;
  /* ---- heaps as handles (heap_slot.c, heap_user.c) -----------------------------------
   * What its slabs' owner words hold: its own address for a thread's heap, the creating
   * thread's heap for a user heap, 0 once a user heap is gone. */
  uintptr_t owner_id;
  uint32_t kind;        /* HEAP_KIND_*: thread heap, user heap, retired */
  uint32_t retired_how; /* user heap: HEAP_DESTROYED or HEAP_RELEASED */
  bool orphaned;        /* in a forked child: a thread that is not there made it */
  /* The user heaps a reference is held on: one per pending remote chain and (hardened)
   * per quarantine slot, so that their slabs are not reused under it. */
  struct hak_heap *remote_user[REMOTE_CHAINS];
  struct hak_heap *quarantine_user[QUARANTINE_SLOTS];
  struct hak_heap *user_next, *user_prev; /* every user heap; the retired ones waiting */
  slab_queue_t large;                     /* a user heap's large blocks (under `lock`) */
  void *huge;                             /* its huge blocks' headers, a list (huge.c) */
  _Atomic size_t held;                    /* bytes of slabs, cached spans and big blocks */
  size_t peak_held;                       /* the most `held` has been */
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

/* ---- heap_tls.c: the thread's heap pointers ------------------------------------ */
/* The thread's own heap (what its slabs' owner words hold, and free compares), and the
 * heap malloc allocates from: the same, or a user heap chosen by hak_heap_set_default. */
extern __thread hak_heap_t *tls_heap __attribute__((tls_model("initial-exec")));
extern __thread hak_heap_t *tls_alloc __attribute__((tls_model("initial-exec")));
extern hak_heap_t empty_heap; /* every thread's heap until it has one */
extern slab_t empty_slab;

/* ---- slab.c -------------------------------------------------------------------- */
void slab_init(slab_t *s, uint32_t class_idx, uintptr_t owner);
bool slab_extend(slab_t *s); /* carve more blocks; false if none left */
uint32_t slab_collect_slow(slab_t *s);
bool slab_has_stale(const slab_t *s); /* written pages past the carved blocks, enough to purge */
size_t slab_trim_stale(slab_t *s);    /* purge them */
size_t slab_uncarve(slab_t *s);       /* none out: drop the carving; bytes to purge */
/* Pushes the chain head..tail (already linked, `count` blocks) onto s's remote list. */
void slab_remote_push(slab_t *s, block_t *head, block_t *tail, uint32_t count);
/* Has any thread ever chained or pushed a free into another's slab? Set by the first
 * chain (heap.h: heap_remote_batch) or push: until then no full slab can hold remote frees and no
 * heap has a chain, and a program with one thread never looks for them (two cold
 * descriptors on every refill, 64 chains at every deferred pass). Relaxed: a look that
 * misses a push only finds its blocks at a later refill. */
extern _Atomic bool slab_remote_seen;
HAK_INLINE void slab_note_remote(void) {
  if (HAK_UNLIKELY(!atomic_load_explicit(&slab_remote_seen, memory_order_relaxed)))
    atomic_store_explicit(&slab_remote_seen, true, memory_order_relaxed);
}
/* Pushes are counted in a shard picked by the slab's descriptor: threads pushing into
 * different slabs do not write the same counter line. */
HAK_INLINE remote_counter_t *remote_counter_of(const slab_t *s) {
  return &remote_counters[((uintptr_t)s >> 7) % REMOTE_COUNTER_SHARDS];
}
HAK_INLINE bool slab_has_remote(slab_t *s) {
  return atomic_load_explicit(&s->remote, memory_order_relaxed) != 0;
}
/* Moves local and remote frees to `free`; returns the remote frees accounted. Mostly
 * there is nothing to move: that is decided here, without a call. */
HAK_INLINE uint32_t slab_collect(slab_t *s) {
  if ((!HAKMEM_SECURE || s->local_free == NULL) && !slab_has_remote(s)) return 0;
  return slab_collect_slow(s);
}
void slab_check(const slab_t *s); /* debug level 2 */
_Noreturn void slab_corrupt_link(const slab_t *s, const void *link);

/* slab_remote_push of the one block b, inlined: a thread without a heap frees so. */
HAK_INLINE void slab_remote_push_one(slab_t *s, block_t *b) {
  slab_note_remote();
  uintptr_t old = atomic_load_explicit(&s->remote, memory_order_relaxed), next;
  uintptr_t add = (uintptr_t)b + ((uintptr_t)1 << REMOTE_COUNT_SHIFT); /* b, one more */
  do {
    next = old & REMOTE_LIST_MASK;
    block_set_next(b, (block_t *)next);
  } while (!atomic_compare_exchange_weak_explicit(&s->remote, &old, old - next + add, memory_order_release,
                                                  memory_order_relaxed));
  atomic_fetch_add_explicit(&remote_counter_of(s)->singles, 1, memory_order_relaxed);
}
HAK_INLINE void slab_check_link(const slab_t *s, const block_t *n) {
  uintptr_t a = (uintptr_t)n;
  if (n != NULL && !slab_is_carved_block(s, a)) /* a multiplication, not a division */
    slab_corrupt_link(s, n);
}
/* One more block out, one more malloc counted (see slab_t.used_ticks). */
#define SLAB_USED_TICK 0x01000001u
/* Takes b, the head of s->free, off the list; *wrapped: the caller must pass it to
 * heap_malloc_tick before handing it out. */
HAK_INLINE void *slab_pop_counted(slab_t *s, block_t *b, bool *wrapped) {
  block_t *n = block_next(b);
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
/* A free block's second word: the address of its slab's descriptor, which lies in
 * hakmem's region header, where no program keeps pointers; the hardened build xors it
 * with a per-process key, so that a read after free discloses no address (the default
 * build's free fast path cannot afford the load and xor: +3.3% in make perfcheck). The
 * key is odd and a descriptor's address even: a tag is never 0. malloc clears it, so
 * only a block that is free carries it. */
#define BLOCK_TAG_KEY (HAKMEM_SECURE ? tag_key : 0)
HAK_INLINE uintptr_t block_free_tag(const slab_t *s) { return (uintptr_t)s ^ BLOCK_TAG_KEY; }
/* heap.c gives back the whole pages inside big free blocks and marks their third word;
 * those pages then read as zero. */
#define PURGED_MARK 0x5075726765644dull
HAK_INLINE bool block_purged(uintptr_t a) {
  return ((const uintptr_t *)a)[2] == (a ^ process_cookie ^ PURGED_MARK);
}
HAK_INLINE void block_mark_purged(uintptr_t a) { ((uintptr_t *)a)[2] = a ^ process_cookie ^ PURGED_MARK; }

/* The owner's free of b into s: b goes on *list (s->free; the hardened build's
 * local_free), tagged free, and only then the count drops, so that a count seen by
 * another thread means the free is done (see heap_reclaim_idle). Returns the count left,
 * read once: a second read could see a count heap_reclaim_idle has since zeroed. */
HAK_INLINE uint32_t slab_owner_push(slab_t *s, block_t **list, block_t *b) {
  block_set_next(b, *list);
  b->free_tag = block_free_tag(s);
  *list = b;
  compiler_barrier();
  uint16_t left = (uint16_t)(s->used - 1);
  tso_store(&s->used, left);
  return left;
}

/* Queues of slabs (a heap's class queues, the abandoned lists, a user heap's large
 * blocks), linked through the descriptors. */
HAK_INLINE void queue_push_front(slab_queue_t *q, slab_t *s) {
  s->prev = NULL;
  s->next = q->head;
  if (q->head) q->head->prev = s;
  else q->tail = s;
  q->head = s;
  q->count++;
}
HAK_INLINE void queue_push_back(slab_queue_t *q, slab_t *s) {
  s->next = NULL;
  s->prev = q->tail;
  if (q->tail) q->tail->next = s;
  else q->head = s;
  q->tail = s;
  q->count++;
}
/* Puts s right after `after`, or at the front when `after` is NULL. */
HAK_INLINE void queue_insert_after(slab_queue_t *q, slab_t *after, slab_t *s) {
  if (after == NULL) {
    queue_push_front(q, s);
    return;
  }
  s->prev = after;
  s->next = after->next;
  if (after->next) after->next->prev = s;
  else q->tail = s;
  after->next = s;
  q->count++;
}
HAK_INLINE void queue_remove(slab_queue_t *q, slab_t *s) {
  if (s->prev) s->prev->next = s->next;
  else q->head = s->next;
  if (s->next) s->next->prev = s->prev;
  else q->tail = s->prev;
  s->next = s->prev = NULL;
  q->count--;
}

/* ---- span_cache.c: a heap's few free spans, reused without region_lock --------- */
slab_t *span_cache_take(hak_heap_t *h, size_t units, size_t max_units);
void span_cache_put(hak_heap_t *h, slab_t *s, uint64_t now);              /* s: owner already dropped */
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
#define LARGE_ZERO 1u /* large_alloc flags: the block must read as zero */
#define LARGE_GROWING \
  2u /* realloc moves a growing block here: a cached span up to twice
                          * the size will do, as it will soon be needed */
void *large_alloc(size_t n, size_t align, unsigned flags);
void large_free(slab_t *s, void *p);
size_t large_usable(const slab_t *s, const void *p);
void *large_realloc_in_place(slab_t *s, void *p, size_t n); /* NULL if it cannot */

/* ---- heap_slot.c: heap structures as slots (handles), references to user heaps --- */
/* A heap structure slot's state (the handle check), and a heap's kind. */
enum {
  HEAP_SLOT_FREE = 0,
  HEAP_SLOT_THREAD = 1,
  HEAP_SLOT_USER = 2,
  HEAP_SLOT_DEAD = 3,
  HEAP_SLOT_NONE = 255 /* not a heap structure's start */
};
enum { HEAP_KIND_THREAD = 0, HEAP_KIND_USER = 1, HEAP_KIND_RETIRED = 2 };
enum { HEAP_DESTROYED = 1, HEAP_RELEASED = 2 };
hak_heap_t *heap_slot_new(void);         /* a fresh structure, its lock made; under heaps_lock */
unsigned heap_slot_state(const void *p); /* O(1), never reads through p */
void heap_slot_set_state(hak_heap_t *h, unsigned state);
void heap_slot_bury(hak_heap_t *h); /* hardened: never reused, pages given back */
#define HEAP_REFS_RETIRED ((uint64_t)1 << 63)
/* A reference on user heap u, whose generation must still be gen: while one is held,
 * u's slabs are not reused and its structure not recycled. false: u is retired, or was
 * reused since. */
HAK_INLINE bool heap_user_ref(hak_heap_t *u, uint32_t gen) {
  uint64_t old = atomic_fetch_add_explicit(&u->refs, 1, memory_order_seq_cst);
  if (HAK_LIKELY(!(old & HEAP_REFS_RETIRED) && atomic_load_explicit(&u->gen, memory_order_acquire) == gen))
    return true;
  atomic_fetch_sub_explicit(&u->refs, 1, memory_order_release);
  return false;
}
HAK_INLINE void heap_user_unref(hak_heap_t *u) {
  atomic_fetch_sub_explicit(&u->refs, 1, memory_order_release);
}
/* A reference on the user heap of block p's slab s, or NULL for a thread heap's slab
 * (or one a released heap handed over). Aborts if the heap was destroyed: fn freed a
 * block of a destroyed heap. */
hak_heap_t *heap_user_hold(slab_t *s, const void *p, const char *fn);
/* Was user heap u, on which a reference is held, destroyed (its blocks freed with it)? */
HAK_INLINE bool heap_user_destroyed(hak_heap_t *u) {
  return (atomic_load_explicit(&u->refs, memory_order_acquire) & HEAP_REFS_RETIRED) &&
         u->retired_how == HEAP_DESTROYED;
}
/* What a heap holds (slabs, cached spans, big blocks) and, by its owner only, the most
 * it has held. */
HAK_INLINE void heap_held_add(hak_heap_t *h, size_t delta) {
  atomic_fetch_add_explicit(&h->held, delta, memory_order_relaxed);
}
HAK_INLINE void heap_held_grow(hak_heap_t *h, size_t bytes) {
  size_t now = atomic_fetch_add_explicit(&h->held, bytes, memory_order_relaxed) + bytes;
  if (now > h->peak_held) h->peak_held = now;
}
/* A user heap's large blocks: added by its owner (counting `counted` more bytes held),
 * taken off by whichever thread's free claimed one. */
void heap_large_added(hak_heap_t *u, slab_t *s, size_t counted);
void heap_large_freed(slab_t *s);
/* home's spare heap: its slabs back to the regions after the purge delay (all: now). */
size_t heap_spare_trim(hak_heap_t *home, uint64_t now, bool all);

/* ---- huge.c: a user heap's huge blocks, on a list through their headers ----------- */
void huge_set_heap(void *p, hak_heap_t *u);             /* p is user heap u's */
void huge_heap_drop_all(hak_heap_t *u, bool free_them); /* under u->lock: free, or let go */
int huge_heap_each(hak_heap_t *u, int (*fn)(void *p, size_t usable, void *arg), void *arg);

/* ---- heap_dead.c (hardened): destroyed heaps' slabs, out of reuse for a while ------ */
#define DEAD_HEAPS_MIN 1 /* later destructions before a destroyed heap's slab is reused */
#define DEAD_BATCH 128   /* slabs given to heap_dead_add at once */
/* Takes v[0..n), slabs of one destroyed heap (`first`: its first call), and returns
 * their bytes. */
size_t heap_dead_add(slab_t **v, size_t n, bool first, uint64_t now);
/* Slabs that have waited long enough, up to max_units, zero, linked by next. */
slab_t *heap_dead_reuse(size_t max_units);
/* No destruction for the purge delay: the waiting slabs' pages go. Returns their bytes. */
size_t heap_dead_trim(uint64_t now);

#pragma GCC visibility pop

#endif
