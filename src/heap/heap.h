/* heap/: a thread's heap. Its class queues and pinned heads, frees into other threads'
 * slabs, its life cycle (made, parked, taken over, abandoned, adopted), deferred work, the
 * purge thread, the heap profiler's sampling and tables, the malloc and free slow paths,
 * and user heaps. */
#ifndef HAKMEM_HEAP_H
#define HAKMEM_HEAP_H

#include "block/block.h"

#pragma GCC visibility push(hidden)

/* ---- heap_queue.c: a heap's class queues and their pinned heads ------------------ */

/* Drops the pin of class c (before the heap gives its slabs away). */
HAK_INLINE void heap_unpin(hak_heap_t *h, uint32_t c) {
  if (h->pinned[c]) h->pinned[c]->used--;
  h->pinned[c] = NULL;
}
void heap_head_changed(hak_heap_t *h, uint32_t c); /* after anything that may move a head */
void heap_release_slab(hak_heap_t *h, slab_t *s);  /* an empty slab leaves the heap */
void heap_slab_emptied(hak_heap_t *h, slab_t *s);  /* its last block came back (h: the
                                                         thread's heap; s may be a user heap's) */
/* The value h's slabs' owner words hold (see hak_heap_t.owner_id). */
HAK_INLINE uintptr_t heap_owner_word(const hak_heap_t *h) { return h->owner_id; }

/* ---- remote.c: frees into other threads' slabs, batched ------------------------ */
void remote_chain_flush(hak_heap_t *h, struct remote_chain *rc);
void remote_chain_start(hak_heap_t *h, struct remote_chain *rc, slab_t *s, block_t *b);
void remote_push_one(slab_t *s, block_t *b); /* a thread without a heap frees b */
void heap_remote_flush(hak_heap_t *h);       /* push every pending chain */
HAK_INLINE void heap_remote_batch(hak_heap_t *h, slab_t *s, block_t *b) {
  struct remote_chain *rc = &h->remote[((uintptr_t)s >> 7) % REMOTE_CHAINS];
  if (HAK_UNLIKELY(rc->slab != s)) {
    /* Until a first chain, deferred work has none to look for (deferred.c). */
    slab_note_remote();
    remote_chain_start(h, rc, s, b);
    return;
  }
  block_set_next(b, rc->head);
  rc->head = b;
  if (++rc->count >= rc->limit) remote_chain_flush(h, rc);
}

/* ---- heap_lifecycle.c: heaps as objects, thread exit, abandoned slabs ------------ */
extern pthread_mutex_t heaps_lock;
extern hak_heap_t *heaps_all;
extern slab_queue_t heap_abandoned[NUM_CLASSES]; /* under region_lock */
/* The owner word (a heap, SLAB_FULL perhaps or'ed in) of the last block this thread freed
 * before it had a heap of its own; 0 if none. */
extern __thread uintptr_t heap_hint __attribute__((tls_model("initial-exec")));
hak_heap_t *heap_get(void);                           /* this thread's heap: taken over, or new */
hak_heap_t *heap_struct_alloc(void);                  /* cleared, on the list of all heaps */
void heap_struct_free(hak_heap_t *h);                 /* off the list, back to the pool */
void heap_unlist_locked(hak_heap_t *h);               /* off the list of all heaps (idempotent) */
void heap_mark_main(hak_heap_t *h);                   /* the main thread's heap: never waited for */
slab_t *heap_adopt_locked(hak_heap_t *h, uint32_t c); /* an abandoned slab, or NULL */
void heap_sweep_abandoned_locked(uint64_t now, bool all);
size_t heap_reclaim_idle(hak_heap_t *self, uint64_t now, uint64_t last_look, bool all);
void heap_dissolve_parked(uint64_t now, bool all);
void heap_abandon(hak_heap_t *h); /* thread exit */
void heap_atfork_child(void);

/* ---- deferred.c: a heap's periodic work, and trimming --------------------------- */
void heap_deferred_if_due(hak_heap_t *h);             /* on a path slow enough to read the clock */
size_t heap_collect(hak_heap_t *h, bool release_all); /* trim: returns bytes given back */
void heap_limit_reclaim(void); /* limit.c's limit_reclaim: heap_collect of this thread's heap */
/* The purge thread's work on an idle heap (h->lock held): old cached
 * spans go, pending chains are pushed and heads with no block out uncarved, if the owner
 * is provably asleep; returns the uncarved slabs (in *uncarved, at most NUM_CLASSES),
 * whose pages the caller purges before it lets go of h->lock. */
size_t heap_trim_idle_locked(hak_heap_t *h, uint64_t now, slab_t **uncarved);

/* ---- purge_thread.c: memory goes back when the program goes quiet -------------- */
void purge_thread_poke(void); /* from a slow path with no lock held: start it if wanted */
uint64_t purge_thread_started(void);
typedef enum { PT_PASSES, PT_WOKEN, PT_TRIMS } purge_thread_count_t;
/* The thread's passes, those that purge_wake began early, the idle heaps it trimmed. */
uint64_t purge_thread_count(purge_thread_count_t which);
void purge_thread_atfork_child(void);

/* ---- heap.c: the malloc slow path ------------------------------------------------ */
void *heap_malloc_slow(size_t n); /* everything the fast path does not finish */
/* Class c's queue head ran dry (aligned and mid sizes): the owner's own frees, or a
 * refill on the slow path, which also runs deferred work when it is due. */
void *heap_alloc_class_refill(uint32_t c);
void *heap_alloc_class(hak_heap_t *h, uint32_t c);

/* ---- free.c: free() past the fast path, and every bad-pointer report ------------- */
void heap_free_other(void *p, slab_t *s, hak_heap_t *h); /* fast free's miss: h's */
void heap_free_slow(void *p, slab_t *s);
void free_unmapped(void *p); /* a pointer the slab map has no slab for */
void free_outside_regions(void *p, const char *fn);
uintptr_t free_checked(void *p, slab_t *s);            /* OWNER_LARGE: it was large, and is freed */
slab_t *region_block_checked(void *p, const char *fn); /* aborts if not a live block */
_Noreturn void report_not_live(void *p, const char *fn);

/* One reference goes up from this layer: the first allocation of a process runs its
 * set-up (heap_get, before any constructor may have run), in api/init.c. */
void init_process(void);
extern pthread_key_t thread_key;
extern bool thread_key_ready;

/* ---- heap_user.c: user heaps made, destroyed, released; thread exit; fork -------- */
extern __thread hak_heap_t *heap_tls_last __attribute__((tls_model("initial-exec")));
hak_heap_t *heap_user_new(void);       /* NULL when out of memory */
void heap_user_destroy(hak_heap_t *u); /* u checked: the caller's live user heap */
void heap_user_release(hak_heap_t *u);
void heap_user_sweep(void); /* finish retired heaps no longer referenced */
void heap_user_thread_exit(hak_heap_t *home);
void heap_user_atfork_child(void); /* after heap_atfork_child */
/* A user heap's block leaving a quarantine that held a reference on the heap (user):
 * pushed to another thread's slab, or dropped with a destroyed heap (true); false: the
 * caller frees it as its owner. */
bool heap_user_block_release(void *p, slab_t *s, hak_heap_t *h, hak_heap_t *user);

/* ---- prof_table.c and prof.c: the sampling heap profiler (docs/profiling.md) -------
 *
 *   prof_symbols.c  names for return addresses (dynamic symbols, then the ELF .symtab of
 *                   the file on disk), and the leak report's text; no malloc
 *   prof_unwind.c   stacks: libgcc's _Unwind_Backtrace, cached per thread
 *   prof.c          sampling, the stack and live-block tables, the pool of sampled
 *                   blocks, the files (at exit, at peaks, on demand), fork
 *
 * The hooks: every allocation path subtracts its size from its heap's `prof_left`
 * (block.h); when that goes negative the path calls prof_sample(), which returns the
 * block when it sampled the allocation and NULL when the caller should allocate as
 * usual. A sampled small or mid block lives in a slab of the profiler's pool (owner word
 * OWNER_PROF), so its free reaches heap_free_slow and then prof_free_block(); a sampled
 * large or huge block is found in the live table by prof_free_large(). */

#define PROF_STACK_SLOTS ((size_t)1 << 14) /* distinct stacks; 3/4 of them usable */
#define PROF_LIVE_SLOTS ((size_t)1 << 20)  /* live sampled blocks; 3/4 usable */
#define NO_STACK UINT32_MAX
/* ---- prof_table.c: stacks, live blocks, the pool; all under prof_lock ---------- */
typedef struct prof_counts {
  size_t stacks_used, live_used;
  uint64_t samples, stacks_dropped, live_dropped;
  double inuse;               /* estimated live bytes */
  _Atomic uint64_t inuse_est; /* the same, read without the lock */
} prof_counts_t;
extern pthread_mutex_t prof_lock;
extern prof_counts_t prof_counts;
extern prof_stack_t *prof_stacks;
extern uint32_t *prof_stack_order;   /* prof_counts.stacks_used indexes of used slots */
extern _Atomic size_t prof_live_big; /* sampled large/huge blocks live: free looks them up */
bool prof_tables_init(void);         /* maps the tables once; false if it cannot */
size_t prof_table_bytes(void);       /* what they map */
/* A block of class c from the pool, recorded; NULL if out of memory. */
void *prof_record_small(uint32_t c, size_t n, double scale, const uintptr_t *frames, uint32_t depth);
void prof_record_big(void *p, size_t n, double scale, const uintptr_t *frames, uint32_t depth);
/* Every stack as a sample (out: PROF_STACK_SLOTS entries); returns how many. */
size_t prof_snapshot(prof_sample_t *out);
void prof_free_block(void *p, slab_t *s); /* a free of a block in a pool slab */
void prof_forget(void *p);                /* a large or huge block is freed: drop it if sampled */
HAK_INLINE void prof_free_large(void *p) {
  if (HAK_UNLIKELY(atomic_load_explicit(&prof_live_big, memory_order_relaxed) != 0)) prof_forget(p);
}

/* ---- prof.c ------------------------------------------------------------------- */
extern _Atomic bool prof_on;      /* sampling now */
extern _Atomic bool prof_ever_on; /* started once: exit and thread exit have work */
void *prof_sample_on(hak_heap_t *h, size_t n, size_t align, bool zero);
/* Heap h's prof_left went negative on an allocation of n bytes (aligned to align, 0 for
 * malloc's 16; zeroed if zero): resets it and returns the sampled block, or NULL.
 * Inline, as is the next, so that a program not profiling never runs prof.c's code,
 * which the link puts with the cold code (CMakeLists.txt). */
HAK_INLINE void *prof_sample(hak_heap_t *h, size_t n, size_t align, bool zero) {
  if (HAKMEM_SECURE || !atomic_load_explicit(&prof_on, memory_order_relaxed)) {
    h->prof_left = INT64_MAX;
    return NULL;
  }
  return prof_sample_on(h, n, align, zero);
}
/* large_alloc, counted and sampled like any other allocation. */
HAK_INLINE void *prof_large_alloc(size_t n, size_t align, unsigned flags) { /* LARGE_ZERO... */
  hak_heap_t *h = tls_heap;
  if (h != &empty_heap && HAK_UNLIKELY((h->prof_left -= (int64_t)n) < 0)) {
    void *p = prof_sample(h, n, align, flags & LARGE_ZERO);
    if (p != NULL) return p;
  }
  return large_alloc(n, align, flags);
}
void prof_init(void); /* from the constructor, with HAKMEM_PROF=1 */
void prof_exit(void); /* from the destructor: the exit profile and the leak report */

/* ---- heap.c: a tick of the malloc count (see slab_t.used_ticks) -------------- */
/* Every 256th malloc from a slab: deferred work if due; returns b (never NULL, which
 * lets callers that check for NULL after a pop skip the check on this path). */
__attribute__((returns_nonnull)) void *heap_malloc_tick(void *b);
__attribute__((returns_nonnull)) void *heap_malloc_tick_in(struct hak_heap *h, void *b);
HAK_INLINE void *slab_pop(slab_t *s, block_t *b) {
  bool wrapped;
  b = slab_pop_counted(s, b, &wrapped);
  if (HAK_UNLIKELY(wrapped)) return heap_malloc_tick(b);
  return b;
}

#pragma GCC visibility pop

#endif
