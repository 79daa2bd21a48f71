/* Cross-file internal interface, continued (internal.h includes it at its end): the
 * thread-heap layer and the entry points, in the order of the layers. Every name here is
 * hidden from the library's users. */
#ifndef HAKMEM_INTERNAL_HEAP_H
#define HAKMEM_INTERNAL_HEAP_H

#pragma GCC visibility push(hidden)

/* ---- heap_queue.c: a heap's class queues and their pinned heads ------------------ */
/* The thread's own heap (what its slabs' owner words hold, and free compares), and the
 * heap malloc allocates from: the same, or a user heap chosen by hak_heap_set_default. */
extern __thread hak_heap_t *hak_tls_heap __attribute__((tls_model("initial-exec")));
extern __thread hak_heap_t *hak_tls_alloc __attribute__((tls_model("initial-exec")));
extern hak_heap_t hak_heap_empty; /* every thread's heap until it has one */
extern hak_slab_t hak_slab_empty;

hak_inline void queue_push_front(hak_slab_queue_t *q, hak_slab_t *s) {
  s->prev = NULL;
  s->next = q->head;
  if (q->head) q->head->prev = s;
  else q->tail = s;
  q->head = s;
  q->count++;
}
hak_inline void queue_push_back(hak_slab_queue_t *q, hak_slab_t *s) {
  s->next = NULL;
  s->prev = q->tail;
  if (q->tail) q->tail->next = s;
  else q->head = s;
  q->tail = s;
  q->count++;
}
/* Puts s right after `after`, or at the front when `after` is NULL. */
hak_inline void queue_insert_after(hak_slab_queue_t *q, hak_slab_t *after, hak_slab_t *s) {
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
hak_inline void queue_remove(hak_slab_queue_t *q, hak_slab_t *s) {
  if (s->prev) s->prev->next = s->next;
  else q->head = s->next;
  if (s->next) s->next->prev = s->prev;
  else q->tail = s->prev;
  s->next = s->prev = NULL;
  q->count--;
}
/* Drops the pin of class c (before the heap gives its slabs away). */
hak_inline void heap_unpin(hak_heap_t *h, uint32_t c) {
  if (h->pinned[c]) h->pinned[c]->used--;
  h->pinned[c] = NULL;
}
void heap_head_changed(hak_heap_t *h, uint32_t c); /* after anything that may move a head */
void heap_release_slab(hak_heap_t *h, hak_slab_t *s); /* an empty slab leaves the heap */
void heap_slab_emptied(hak_heap_t *h, hak_slab_t *s); /* its last block came back (h: the
                                                         thread's heap; s may be a user heap's) */
/* The value h's slabs' owner words hold (see hak_heap_t.owner_id). */
hak_inline uintptr_t heap_owner_word(const hak_heap_t *h) { return h->owner_id; }

/* ---- remote.c: frees into other threads' slabs, batched ------------------------ */
void remote_chain_flush(hak_heap_t *h, struct hak_remote_chain *rc);
void remote_chain_start(hak_heap_t *h, struct hak_remote_chain *rc, hak_slab_t *s, hak_block_t *b);
void remote_push_one(hak_slab_t *s, hak_block_t *b); /* a thread without a heap frees b */
void heap_remote_flush(hak_heap_t *h); /* push every pending chain */
hak_inline void heap_remote_batch(hak_heap_t *h, hak_slab_t *s, hak_block_t *b) {
  struct hak_remote_chain *rc = &h->remote[((uintptr_t)s >> 7) % REMOTE_CHAINS];
  if (hak_unlikely(rc->slab != s)) {
    /* Until a first chain, deferred work has none to look for (deferred.c). */
    slab_note_remote();
    remote_chain_start(h, rc, s, b);
    return;
  }
  block_set_next(b, rc->head);
  rc->head = b;
  if (++rc->count >= rc->limit) remote_chain_flush(h, rc);
}

/* ---- heap_handover.c: heaps as objects, thread exit, abandoned slabs ------------- */
extern pthread_mutex_t heaps_lock;
extern hak_heap_t *heaps_all;
extern hak_slab_queue_t heap_abandoned[NUM_CLASSES]; /* under region_lock */
/* The owner word (a heap, SLAB_FULL perhaps or'ed in) of the last block this thread freed
 * before it had a heap of its own; 0 if none. */
extern __thread uintptr_t heap_hint __attribute__((tls_model("initial-exec")));
hak_heap_t *heap_get(void); /* this thread's heap: taken over, or new */
hak_heap_t *heap_struct_alloc(void); /* cleared, on the list of all heaps */
void heap_struct_free(hak_heap_t *h); /* off the list, back to the pool */
void heap_unlist_locked(hak_heap_t *h); /* off the list of all heaps (idempotent) */
void heap_mark_main(hak_heap_t *h); /* the main thread's heap: never waited for */
hak_slab_t *heap_adopt_locked(hak_heap_t *h, uint32_t c); /* an abandoned slab, or NULL */
void heap_sweep_abandoned_locked(uint64_t now, bool all);
size_t heap_reclaim_idle(hak_heap_t *self, uint64_t now, uint64_t last_look, bool all);
void heap_dissolve_parked(uint64_t now, bool all);
void heap_abandon(hak_heap_t *h); /* thread exit */
void heap_atfork_child(void);

/* ---- deferred.c: a heap's periodic work, and trimming --------------------------- */
void heap_deferred_if_due(hak_heap_t *h); /* on a path slow enough to read the clock */
size_t heap_collect(hak_heap_t *h, bool release_all); /* trim: returns bytes given back */
/* The purge thread's work on an idle heap (h->lock held): old cached
 * spans go, pending chains are pushed and heads with no block out uncarved, if the owner
 * is provably asleep; returns the uncarved slabs (in *uncarved, at most NUM_CLASSES),
 * whose pages the caller purges before it lets go of h->lock. */
size_t heap_trim_idle_locked(hak_heap_t *h, uint64_t now, hak_slab_t **uncarved);

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
void heap_free_other(void *p, hak_slab_t *s, hak_heap_t *h); /* fast free's miss: h's */
void heap_free_slow(void *p, hak_slab_t *s);
void free_unmapped(void *p); /* a pointer the slab map has no slab for */
void free_outside_regions(void *p, const char *fn);
uintptr_t free_checked(void *p, hak_slab_t *s); /* OWNER_LARGE: it was large, and is freed */
hak_slab_t *region_block_checked(void *p, const char *fn); /* aborts if not a live block */
_Noreturn void report_not_live(void *p, const char *fn);

/* ---- secure.c: the hardened build's malloc and free ----------------------------- */
void secure_init(void); /* after hak_list_key is set */
void *secure_arm(void *p, size_t n); /* a free block handed out: zero, canary, size word */
void *secure_resize(void *p, hak_slab_t *s, size_t n1, size_t n2); /* realloc in the block */
void secure_free(void *p);
size_t secure_usable(void *p, hak_slab_t *s); /* requested size of a small block */
void *secure_malloc(size_t n);
void *secure_calloc(size_t n); /* n <= MID_MAX */
void secure_quarantine_flush(hak_heap_t *h, bool check);

/* ---- checkers.c: valgrind's memcheck and the sanitizers (declared in checkers.h) -- */
#include "checkers.h"

/* ---- alloc.c -------------------------------------------------------------------- */
size_t block_usable_size(void *p, const char *fn);

/* ---- stats.c: the report, read on demand ------------------------------------------ */
/* Live blocks and slabs of classes [first, end) (the rest stay zero), walking every heap
 * and the abandoned lists: a snapshot, as other threads keep allocating. */
typedef struct stats_walk {
  uint64_t live[NUM_CLASSES], slabs[NUM_CLASSES];
} stats_walk_t;
void stats_walk(stats_walk_t *w, uint32_t first, uint32_t end);
void stats_print(FILE *out);
void stats_print_at_exit(void); /* HAKMEM_STATS=1 */
struct mallinfo2 hak_mallinfo2(void);

/* ---- ctl.c: figures and options by name ------------------------------------------ */
void ctl_ensure_init(void); /* the figures need the process set up */
/* Entry `index` of the table of names (hak_ctl_describe), for class cls. */
uint64_t ctl_value(size_t index, uint32_t cls, const stats_walk_t *w);

/* ---- init.c ---------------------------------------------------------------------- */
void hak_process_init(void);
extern pthread_key_t hak_thread_key;
extern bool hak_key_ready;

#include "heap_user.h" /* heaps as handles: heap_handle.c, heap_user.c, their hooks */

#pragma GCC visibility pop

#endif
