/* Heaps as handles and user heaps: the declarations of heap_handle.c (a layer below
 * huge.c) and heap_user.c (the top of the thread-heap layer), and the hooks huge.c
 * keeps for a user heap's huge blocks. Included at the end of internal.h, whose
 * sections these would be. */
#ifndef HAKMEM_HEAP_USER_H
#define HAKMEM_HEAP_USER_H

/* ---- heap_handle.c: heap structures as handles, references to user heaps -------- */
/* A heap structure slot's state (the handle check), and a heap's kind. */
enum { HEAP_SLOT_FREE = 0, HEAP_SLOT_THREAD = 1, HEAP_SLOT_USER = 2, HEAP_SLOT_DEAD = 3,
       HEAP_SLOT_NONE = 255 /* not a heap structure's start */ };
enum { HEAP_KIND_THREAD = 0, HEAP_KIND_USER = 1, HEAP_KIND_RETIRED = 2 };
enum { HEAP_DESTROYED = 1, HEAP_RELEASED = 2 };
hak_heap_t *heap_slot_new(void); /* a fresh structure, its lock made; under heaps_lock */
unsigned heap_slot_state(const void *p); /* O(1), never reads through p */
void heap_slot_set_state(hak_heap_t *h, unsigned state);
void heap_slot_bury(hak_heap_t *h); /* hardened: never reused, pages given back */
#define HEAP_REFS_RETIRED ((uint64_t)1 << 63)
/* A reference on user heap u, whose generation must still be gen: while one is held,
 * u's slabs are not reused and its structure not recycled. false: u is retired, or was
 * reused since. */
hak_inline bool heap_user_ref(hak_heap_t *u, uint32_t gen) {
  uint64_t old = atomic_fetch_add_explicit(&u->refs, 1, memory_order_seq_cst);
  if (hak_likely(!(old & HEAP_REFS_RETIRED) &&
                 atomic_load_explicit(&u->gen, memory_order_acquire) == gen))
    return true;
  atomic_fetch_sub_explicit(&u->refs, 1, memory_order_release);
  return false;
}
hak_inline void heap_user_unref(hak_heap_t *u) {
  atomic_fetch_sub_explicit(&u->refs, 1, memory_order_release);
}
/* A reference on the user heap of block p's slab s, or NULL for a thread heap's slab
 * (or one a released heap handed over). Aborts if the heap was destroyed: fn freed a
 * block of a destroyed heap. */
hak_heap_t *heap_user_hold(hak_slab_t *s, const void *p, const char *fn);
/* Was user heap u, on which a reference is held, destroyed (its blocks freed with it)? */
hak_inline bool heap_user_destroyed(hak_heap_t *u) {
  return (atomic_load_explicit(&u->refs, memory_order_acquire) & HEAP_REFS_RETIRED) &&
         u->retired_how == HEAP_DESTROYED;
}
/* What a heap holds (slabs, cached spans, big blocks) and, by its owner only, the most
 * it has held. */
hak_inline void heap_held_add(hak_heap_t *h, size_t delta) {
  atomic_fetch_add_explicit(&h->held, delta, memory_order_relaxed);
}
hak_inline void heap_held_grow(hak_heap_t *h, size_t bytes) {
  size_t now = atomic_fetch_add_explicit(&h->held, bytes, memory_order_relaxed) + bytes;
  if (now > h->peak_held) h->peak_held = now;
}
/* A user heap's large blocks: added by its owner (counting `counted` more bytes held),
 * taken off by whichever thread's free claimed one. */
void heap_large_added(hak_heap_t *u, hak_slab_t *s, size_t counted);
void heap_large_freed(hak_slab_t *s);
/* home's spare heap: its slabs back to the regions after the purge delay (all: now). */
size_t heap_spare_trim(hak_heap_t *home, uint64_t now, bool all);

/* ---- huge.c: a user heap's huge blocks, on a list through their headers ----------- */
void huge_set_heap(void *p, hak_heap_t *u); /* p is user heap u's */
void huge_heap_drop_all(hak_heap_t *u, bool free_them); /* under u->lock: free, or let go */
int huge_heap_each(hak_heap_t *u, int (*fn)(void *p, size_t usable, void *arg), void *arg);

/* ---- heap_dead.c (hardened): destroyed heaps' slabs, out of reuse for a while ------ */
#define DEAD_HEAPS_MIN 1 /* later destructions before a destroyed heap's slab is reused */
#define DEAD_BATCH 128   /* slabs given to heap_dead_add at once */
/* Takes v[0..n), slabs of one destroyed heap (`first`: its first call), and returns
 * their bytes. */
size_t heap_dead_add(hak_slab_t **v, size_t n, bool first, uint64_t now);
/* Slabs that have waited long enough, up to max_units, zero, linked by next. */
hak_slab_t *heap_dead_reuse(size_t max_units);
/* No destruction for the purge delay: the waiting slabs' pages go. Returns their bytes. */
size_t heap_dead_trim(uint64_t now);

/* ---- heap_user.c: user heaps made, destroyed, released; thread exit; fork -------- */
extern __thread hak_heap_t *heap_tls_last __attribute__((tls_model("initial-exec")));
hak_heap_t *heap_user_new(void); /* NULL when out of memory */
void heap_user_destroy(hak_heap_t *u); /* u checked: the caller's live user heap */
void heap_user_release(hak_heap_t *u);
void heap_user_sweep(void); /* finish retired heaps no longer referenced */
void heap_user_thread_exit(hak_heap_t *home);
void heap_user_atfork_child(void); /* after heap_atfork_child */
/* A user heap's block leaving a quarantine that held a reference on the heap (user):
 * pushed to another thread's slab, or dropped with a destroyed heap (true); false: the
 * caller frees it as its owner. */
bool heap_user_block_release(void *p, hak_slab_t *s, hak_heap_t *h, hak_heap_t *user);

#endif
