/* A thread's heap: per-class queues of the slabs it owns, the malloc and free slow
 * paths, handing the heap over to the next thread at exit or abandoning its slabs and
 * adopting them again, deferred work (collecting remote frees, purging) and trimming. */

#include "internal.h"

#include <errno.h>
#include <sched.h>
#include <string.h>
#include <time.h>

/* The empty slab and heap make "no heap yet" look like "free list empty": the fast
 * path needs no initialisation check. */
hak_slab_t hak_slab_empty = {.owner = OWNER_NONE};
hak_heap_t hak_heap_empty = {.direct = {[0 ... ALL_DIRECT_SLOTS - 1] = &hak_slab_empty}};
__thread hak_heap_t *hak_tls_heap __attribute__((tls_model("initial-exec"))) = &hak_heap_empty;

pthread_mutex_t heaps_lock = PTHREAD_MUTEX_INITIALIZER;
hak_heap_t *heaps_all;
static hak_heap_t *heaps_pool;
static char *heaps_chunk;
static size_t heaps_chunk_left;

/* Slabs whose owner exited while blocks were live, per class; under region_lock. */
static hak_slab_queue_t abandoned[NUM_CLASSES];

/* How often a heap looks at its full slabs and the purge clock, at most. */
#define DEFERRED_PERIOD_MS 10

/* The purge delay, but no shorter than a deferred period: how often the per-delay work
 * (purging inside free blocks, the idle-heap scan) runs, and how long a heap must go
 * without deferred work to count as idle. Purging off (< 0) is for callers to check. */
static uint64_t purge_period_ms(void) {
  return (uint64_t)(hak_opt.purge_delay_ms > DEFERRED_PERIOD_MS ? hak_opt.purge_delay_ms
                                                                 : DEFERRED_PERIOD_MS);
}
/* Full slabs inspected for remote frees before a new slab is taken. */
#define FULL_SCAN_LIMIT 8
/* Full slabs inspected before the queue head carves more blocks. */
#define PRE_CARVE_SCAN_LIMIT 2

/* ---- queues ------------------------------------------------------------------- */
static void queue_push_front(hak_slab_queue_t *q, hak_slab_t *s) {
  s->prev = NULL;
  s->next = q->head;
  if (q->head) q->head->prev = s;
  else q->tail = s;
  q->head = s;
  q->count++;
}

static void queue_push_back(hak_slab_queue_t *q, hak_slab_t *s) {
  s->next = NULL;
  s->prev = q->tail;
  if (q->tail) q->tail->next = s;
  else q->head = s;
  q->tail = s;
  q->count++;
}

static void queue_remove(hak_slab_queue_t *q, hak_slab_t *s) {
  if (s->prev) s->prev->next = s->next;
  else q->head = s->next;
  if (s->next) s->next->prev = s->prev;
  else q->tail = s->prev;
  s->next = s->prev = NULL;
  q->count--;
}

static void heap_release_slab(hak_heap_t *h, hak_slab_t *s);

/* The head of each class queue is the slab the fast path allocates from. It carries a
 * pin, one extra count in `used`, so freeing its last block never leaves the fast path:
 * a thread that mallocs and frees one block over and over stays there. Call this after
 * anything that may change a queue's head. */
static void heap_head_changed(hak_heap_t *h, uint32_t c) {
  hak_slab_queue_t *q = &h->queue[c];
  hak_slab_t *head = q->head, *old = h->pinned[c];
  if (old != head) {
    if (head) head->used++;
    h->pinned[c] = head;
    if (old && --old->used == 0) { /* emptied while pinned: it is still queued */
      queue_remove(q, old);
      heap_release_slab(h, old);
    }
  }
  /* Point the fast paths' direct slots at the head. */
  hak_slab_t *d = head ? head : &hak_slab_empty;
  if (c < TINY_CLASSES) {
    size_t lo = c == 0 ? 0 : class_size[c - 1] / 16 + 1;
    size_t hi = class_size[c] / 16;
    for (size_t i = lo; i <= hi; i++) h->direct[i] = d;
  } else if (c < TINY_CLASSES + MID_DIRECT_CLASSES) {
    h->direct[class_direct_slot(c)] = d;
  }
}

/* Drops the pin of class c (before the heap gives its slabs away). */
static void heap_unpin(hak_heap_t *h, uint32_t c) {
  if (h->pinned[c]) h->pinned[c]->used--;
  h->pinned[c] = NULL;
}

/* ---- heap life cycle ---------------------------------------------------------------- */
static hak_heap_t *heap_struct_alloc(void) {
  hak_heap_t *h = NULL;
  pthread_mutex_lock(&heaps_lock);
  if (heaps_pool) {
    h = heaps_pool;
    heaps_pool = h->pool_next;
  } else {
    size_t sz = (sizeof(hak_heap_t) + 63) & ~(size_t)63;
    if (heaps_chunk_left < sz) {
      size_t chunk = 64 * sz;
      heaps_chunk = os_map(chunk);
      heaps_chunk_left = heaps_chunk ? chunk : 0;
    }
    if (heaps_chunk_left >= sz) {
      h = (hak_heap_t *)heaps_chunk;
      heaps_chunk += sz;
      heaps_chunk_left -= sz;
    }
  }
  if (h) {
    memset(h, 0, sizeof *h);
    pthread_mutex_init(&h->lock, NULL);
    h->all_next = heaps_all;
    if (heaps_all) heaps_all->all_prev = h;
    heaps_all = h;
  }
  pthread_mutex_unlock(&heaps_lock);
  return h;
}

static void heap_struct_free(hak_heap_t *h) {
  pthread_mutex_lock(&heaps_lock);
  if (h->all_prev) h->all_prev->all_next = h->all_next;
  else heaps_all = h->all_next;
  if (h->all_next) h->all_next->all_prev = h->all_prev;
  h->pool_next = heaps_pool;
  heaps_pool = h;
  pthread_mutex_unlock(&heaps_lock);
}

/* ---- heaps handed over --------------------------------------------------------------
 * A thread that exits leaves its heap whole (queues, pinned heads, full slabs, span
 * cache) and the next thread to start takes it over. Owner words name the heap, not the
 * thread, so no slab changes hands: the new thread starts with warm queue heads instead
 * of adopting slabs class by class, and the blocks it frees there are its own, freed on
 * the fast path. While a heap is parked, other threads' frees into it are remote pushes,
 * as into any heap but their own, and heap_reclaim_idle may take the slabs that came
 * back. The oldest parked heap is taken first: a thread's successor (larson's next
 * generation, a pool's next worker) frees the blocks it left, so the longer a heap has
 * been parked, the more of it is free. Taking the newest instead left the oldest ones,
 * mostly free, unused until dissolved: larson t=8's peak RSS was 14% and 17% above that
 * of abandoning every slab at exit, where oldest first gave 11%, 5% and 0% below (sets
 * of 5-7 interleaved runs). More than PARKED_MAX, or one parked for the purge period,
 * is dissolved: its slabs go to the abandoned lists. Under heaps_lock. */
#define PARKED_MAX 16
/* Oldest first, linked by pool_next: parked in order of time, so the heaps due to be
 * dissolved are always at the front. */
static hak_heap_t *heaps_parked, *heaps_parked_newest;
static uint32_t heaps_parked_count;
/* Signalled by heap_park when a new thread waits for a heap to be parked
 * (heap_take_parked); under heaps_lock, as is the count of those waiting. */
static pthread_cond_t heaps_parked_cond = PTHREAD_COND_INITIALIZER;
static uint32_t heaps_park_waiters;

/* Takes h, parked after prev (NULL: h is the oldest), off the list. */
static hak_heap_t *parked_unlink(hak_heap_t *prev, hak_heap_t *h) {
  if (prev != NULL) prev->pool_next = h->pool_next;
  else heaps_parked = h->pool_next;
  if (heaps_parked_newest == h) heaps_parked_newest = prev;
  h->pool_next = NULL;
  heaps_parked_count--;
  return h;
}

static hak_heap_t *parked_pop_oldest(void) { return parked_unlink(NULL, heaps_parked); }

/* Parks h. Returns a heap for the caller to dissolve: h itself when the purge delay is 0
 * (exit then gives empty slabs back at once), the oldest parked one when there are too
 * many, or NULL. */
static hak_heap_t *heap_park(hak_heap_t *h, uint64_t now) {
  if (hak_opt.purge_delay_ms == 0) return h;
  pthread_mutex_lock(&heaps_lock);
  h->parked_ms = now;
  h->hint_wait_failed = false; /* its owner did exit: worth waiting for again */
  h->pool_next = NULL;
  if (heaps_parked_newest != NULL) heaps_parked_newest->pool_next = h;
  else heaps_parked = h;
  heaps_parked_newest = h;
  heaps_parked_count++;
  hak_heap_t *excess = heaps_parked_count > PARKED_MAX ? parked_pop_oldest() : NULL;
  if (heaps_park_waiters > 0) pthread_cond_broadcast(&heaps_parked_cond);
  pthread_mutex_unlock(&heaps_lock);
  return excess;
}

/* The main thread's heap is parked only if main calls pthread_exit: a new thread that
 * starts by freeing one of its blocks (a worker freeing the argument main allocated
 * for it, a common start) would wait the whole HINT_WAIT_NS for it, in vain. So it
 * starts out as a heap waited for in vain (heap_park clears the mark). */
void heap_mark_main(hak_heap_t *h) {
  pthread_mutex_lock(&heaps_lock);
  h->hint_wait_failed = true;
  pthread_mutex_unlock(&heaps_lock);
}

/* The heap of the last block this thread freed before it had a heap of its own. */
static __thread hak_heap_t *heap_hint __attribute__((tls_model("initial-exec")));

/* Takes `want` off the parked list if it is there (at most PARKED_MAX to look at). */
static hak_heap_t *parked_take(hak_heap_t *want) {
  hak_heap_t *prev = NULL, *h;
  for (h = heaps_parked; h != NULL && h != want; h = h->pool_next) prev = h;
  return h != NULL ? parked_unlink(prev, h) : NULL;
}

/* How long a new thread waits for the heap of the blocks it freed first to be parked:
 * HINT_WAIT_YIELDS yields (each lets every other runnable thread run, so under load the
 * exiting owner gets its turn), and sleeping until HINT_WAIT_NS have passed (an idle
 * machine yields at once, and a woken thread takes tens of microseconds to run). It
 * ends as soon as the heap is parked. */
#define HINT_WAIT_YIELDS 8
#define HINT_WAIT_NS 1000000L
/* How often waits pay, over all heaps: a moving average out of 256 that moves an eighth
 * of the way at each wait. Below a quarter (about 11 waits in vain in a row: a program
 * whose threads start their successors long before they exit), a new thread waits only
 * once in HINT_WAIT_PROBE. Under heaps_lock. */
#define HINT_WAIT_PROBE 16
static uint32_t hint_wait_score = 256, hint_wait_skipped;

/* Waits, under heaps_lock, until `want` can be taken off the parked list or the time is
 * up. Returns it, or NULL. The condition wait is a cancellation point, and malloc must
 * not be one: a thread cancelled there would unwind holding heaps_lock. */
static hak_heap_t *parked_wait_for(hak_heap_t *want) {
  struct timespec deadline = os_monotonic_after(HINT_WAIT_NS);
  hak_heap_t *h = NULL;
  int cancel_state;
  pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel_state);
  heaps_park_waiters++;
  for (int i = 0; h == NULL && i < HINT_WAIT_YIELDS; i++) {
    pthread_mutex_unlock(&heaps_lock);
    sched_yield();
    pthread_mutex_lock(&heaps_lock);
    h = parked_take(want);
  }
  while (h == NULL && pthread_cond_clockwait(&heaps_parked_cond, &heaps_lock, CLOCK_MONOTONIC,
                                             &deadline) == 0)
    h = parked_take(want);
  if (h == NULL) h = parked_take(want); /* parked right at the deadline */
  heaps_park_waiters--;
  pthread_setcancelstate(cancel_state, NULL);
  return h;
}

/* The parked heap a new thread takes over: the one the last block it freed before its
 * first malloc came from, or else the oldest. A thread that starts by freeing what an
 * exited thread handed it (larson's next generation, a pool's next worker) so gets its
 * predecessor's heap, and frees the rest of those blocks on the fast path, where they
 * would otherwise wait in a parked heap's remote lists until some later thread took it
 * over. The choice is made at the first malloc, not at a free: a thread that only frees
 * takes no heap over, so it cannot keep an exited thread's slabs from being dissolved.
 * The new thread often gets there before its predecessor, which started it, has
 * finished exiting; taking the oldest then mixes the lanes' blocks across heaps, with
 * frees waiting in the parked ones (larson t=8: one take-over in three, and a peak RSS
 * of 29 MiB). So it waits a little for that heap to be parked (parked_wait_for). A heap
 * whose owner is not exiting (a long-lived producer) would make every such thread wait
 * in vain, so a heap waited for in vain is not waited for again until it has been
 * parked (the main thread's is marked so from the start: heap_mark_main); and when
 * waits keep failing whatever the heap, few threads wait. */
static hak_heap_t *heap_take_parked(void) {
  hak_heap_t *want = heap_hint, *h = NULL;
  heap_hint = NULL;
  pthread_mutex_lock(&heaps_lock);
  if (want != NULL) {
    h = parked_take(want);
    /* With purge delay 0 exiting heaps are dissolved, never parked. */
    if (h == NULL && !want->hint_wait_failed && hak_opt.purge_delay_ms != 0 &&
        (hint_wait_score >= 64 || ++hint_wait_skipped % HINT_WAIT_PROBE == 0)) {
      h = parked_wait_for(want);
      want->hint_wait_failed = h == NULL;
      if (h != NULL) hint_wait_score += (256 - hint_wait_score) / 8;
      else hint_wait_score -= hint_wait_score / 8;
      atomic_fetch_add_explicit(&hak_gstats.heap_waits, 1, memory_order_relaxed);
      if (h == NULL) atomic_fetch_add_explicit(&hak_gstats.heap_waits_in_vain, 1, memory_order_relaxed);
    }
  }
  bool hinted = h != NULL;
  if (h == NULL && heaps_parked != NULL) h = parked_pop_oldest();
  pthread_mutex_unlock(&heaps_lock);
  if (h != NULL) atomic_fetch_add_explicit(&hak_gstats.heaps_taken_over, 1, memory_order_relaxed);
  if (hinted) atomic_fetch_add_explicit(&hak_gstats.heaps_taken_by_free, 1, memory_order_relaxed);
  return h;
}

hak_heap_t *heap_get(void) {
  hak_heap_t *h = hak_tls_heap;
  if (hak_likely(h != &hak_heap_empty)) return h;
  hak_process_init();
  h = hak_tls_heap; /* initialisation may have allocated, and so made the heap */
  if (h != &hak_heap_empty) return h;
  h = heap_take_parked();
  if (h == NULL) {
    h = heap_struct_alloc();
    if (h == NULL) return NULL;
    for (size_t i = 0; i < ALL_DIRECT_SLOTS; i++) h->direct[i] = &hak_slab_empty;
    atomic_fetch_add_explicit(&hak_gstats.heaps_created, 1, memory_order_relaxed);
  }
  hak_tls_heap = h;
  /* Registers the thread-exit hook; may itself allocate, which now finds the heap. */
  if (hak_key_ready) pthread_setspecific(hak_thread_key, h);
  return h;
}

/* ---- slabs coming and going ------------------------------------------------------ */
static void release_span_locked(hak_slab_t *s, uint64_t now) { region_free_span(s, now); }

static void heap_release_slab(hak_heap_t *h, hak_slab_t *s) {
  span_cache_put(h, s, os_now_ms());
}

/* Looks at up to ABANDONED_SCAN_LIMIT abandoned slabs of class c: the first with room
 * becomes h's — an empty one too, so that a new thread takes over the blocks an exited
 * one carved rather than carving a span of another class's pages again. Caller holds
 * region_lock. */
#define ABANDONED_SCAN_LIMIT 16
static hak_slab_t *adopt_locked(hak_heap_t *h, uint32_t c) {
  hak_slab_t *s = abandoned[c].head;
  for (int i = 0; s != NULL && i < ABANDONED_SCAN_LIMIT; i++) {
    hak_slab_t *next = s->next;
    slab_collect(s);
    if (s->free != NULL || s->capacity < s->reserved) {
      queue_remove(&abandoned[c], s);
      s->aux = 0;
      __atomic_store_n(&s->owner, (uintptr_t)h, __ATOMIC_RELEASE);
      atomic_fetch_add_explicit(&hak_gstats.slabs_adopted, 1, memory_order_relaxed);
      return s;
    }
    s = next;
  }
  return NULL;
}

/* A full slab of ours that other threads have freed into, taken off the full list. */
static hak_noinline hak_slab_t *heap_reclaim_full_scan(hak_heap_t *h, uint32_t c, int limit) {
  hak_slab_queue_t *full = &h->full[c];
  hak_slab_t *s = full->head;
  for (int i = 0; s != NULL && i < limit; i++) {
    hak_slab_t *next = s->next;
    if (slab_has_remote(s)) {
      slab_collect(s);
      if (s->free != NULL) { /* (a count alone may arrive after its blocks were taken) */
        queue_remove(full, s);
        __atomic_store_n(&s->owner, (uintptr_t)h, __ATOMIC_RELEASE);
        return s;
      }
    }
    /* Rotate so that the next scan looks at other slabs. */
    queue_remove(full, s);
    queue_push_back(full, s);
    s = next;
  }
  return NULL;
}

hak_inline hak_slab_t *heap_reclaim_full(hak_heap_t *h, uint32_t c, int limit) {
  if (!atomic_load_explicit(&slab_remote_seen, memory_order_relaxed) || h->full[c].head == NULL)
    return NULL;
  return heap_reclaim_full_scan(h, c, limit);
}

/* The slab to take over from the queue head s, or NULL: one of the next few slabs that
 * holds at least two carves' worth of free blocks (capacity - used: the owner's frees,
 * and other threads' once collected). With fewer, the refills that switching heads
 * brings cost more instructions than the pages they save (random_mixed: +7% with any
 * free block, +0.5% with this bound, and most of the saving kept). Counting frees still
 * waiting in the remote list changed no peak RSS measured (producer_consumer,
 * thread_churn, larson t=2). Blocks of a page or more carve one or two at a time, so the
 * bound is raised to 8 blocks there (slabs of at least 16): with 2, a 4 KiB class
 * switched heads every third allocation (bench_aligned: 4.4 fewer instructions per op,
 * +2% peak RSS).
 * The slab right after the head was the head before it (see heap_alloc_class): the
 * blocks it got back since were freed last and are still in cache, so it comes first.
 * A class whose live blocks need a bit more than one slab then alternates between two
 * warm slabs instead of pulling cold blocks from the rest of the queue (after a mass
 * free that left 1% live, the classes near 1 KiB switched heads 27,000 times a second,
 * each time to a cold slab). Otherwise the fullest of them, to let the others empty. */
#define REUSE_SCAN_LIMIT 8
static hak_slab_t *queue_next_head(hak_slab_t *s) {
  hak_slab_t *best = NULL;
  uint32_t enough = 2 * class_carve[s->class_idx];
  if (enough < 8 && s->reserved >= 16) enough = 8;
  s = s->next;
  if (s != NULL && s->capacity - s->used >= enough) return s;
  for (int i = 0; s != NULL && i < REUSE_SCAN_LIMIT; i++, s = s->next) {
    if (s->capacity - s->used < enough) continue;
    if (best == NULL || s->used > best->used) best = s;
  }
  return best;
}

static hak_slab_t *heap_new_slab(hak_heap_t *h, uint32_t c) {
  /* 1. A full slab of ours that other threads have freed into. */
  hak_slab_t *s = heap_reclaim_full(h, c, FULL_SCAN_LIMIT);
  if (s != NULL) return s;
  /* 2. A span from our cache; 3. an abandoned slab of this class; 4. a new span. Each
   * may hold pages an earlier use wrote: if so, the next deferred pass looks at the
   * class. */
  s = span_cache_take(h, class_units[c], class_units[c]);
  if (s != NULL) {
    slab_init(s, c, (uintptr_t)h);
  } else {
    pthread_mutex_lock(&region_lock);
    s = adopt_locked(h, c);
    if (s == NULL) {
      s = region_alloc_span(class_units[c]);
      if (s) slab_init(s, c, (uintptr_t)h);
    }
    pthread_mutex_unlock(&region_lock);
    if (s == NULL) return NULL;
    stats_note_in_use();
  }
  if (slab_has_stale(s)) h->stale_classes |= (uint64_t)1 << c;
  return s;
}

static void heap_deferred(hak_heap_t *h, uint64_t now);

/* On a path slow enough to look at the clock: deferred work, when it is due. */
static void heap_deferred_if_due(hak_heap_t *h) {
  uint64_t now = os_now_ms();
  if (hak_unlikely(now >= h->next_deferred_ms)) heap_deferred(h, now);
}

/* The refill path: the current slab of class c has nothing on its free list. Returns
 * the new head with blocks listed, or NULL. Caller holds h->lock. */
static hak_slab_t *heap_refill_locked(hak_heap_t *h, uint32_t c) {
  hak_slab_queue_t *q = &h->queue[c];
  hak_slab_t *s;
  for (;;) {
    s = q->head;
    if (s == NULL) {
      s = heap_new_slab(h, c);
      if (s == NULL) return NULL;
      queue_push_front(q, s);
      break;
    }
    if (s->free) break;
    slab_collect(s);
    if (s->free) break;
    /* Blocks other threads gave back come before carving new memory. */
    hak_slab_t *back = heap_reclaim_full(h, c, PRE_CARVE_SCAN_LIMIT);
    if (back != NULL) {
      queue_push_front(q, back);
      s = back;
      break;
    }
    /* So do blocks freed into the class's other slabs: one of them becomes the head,
     * and the old head, with its uncarved room, comes right after it, where the next
     * switch looks first. Carving first would let every slab of the class hold free
     * blocks while the head writes new pages. */
    hak_slab_t *other = queue_next_head(s);
    if (other != NULL) {
      slab_collect(other);
      if (other->free != NULL) {
        queue_remove(q, other);
        queue_push_front(q, other);
        s = other;
        break;
      }
    }
    if (slab_extend(s)) break;
    /* Nothing left: park it on the full list until a free arrives. */
    queue_remove(q, s);
    queue_push_back(&h->full[c], s);
    __atomic_store_n(&s->owner, (uintptr_t)h | SLAB_FULL, __ATOMIC_RELEASE);
  }
  if (s->free == NULL && !slab_extend(s)) return NULL;
  heap_head_changed(h, c);
  HAK_ASSERT(slab_owner(s) == (uintptr_t)h && s->class_idx == c);
  if (HAKMEM_DEBUG >= 2) slab_check(s);
  return s;
}

void *heap_alloc_class(hak_heap_t *h, uint32_t c) {
  pthread_mutex_lock(&h->lock);
  hak_slab_t *s = heap_refill_locked(h, c);
  pthread_mutex_unlock(&h->lock);
  if (s == NULL) {
    errno = ENOMEM;
    return NULL;
  }
  /* The head is the owner's alone: popped outside the lock, whose holder must not run
   * the deferred work a pop may call for. */
  return slab_pop(s, s->free);
}

/* Every SWAP_CHECK_EVERY-th refill from local frees also looks at the clock for
 * deferred work, so a thread living on its own frees still purges and collects. */
#define SWAP_CHECK_EVERY 64

static void *heap_malloc_generic(size_t n);

void *heap_malloc_slow(size_t n) {
  hak_heap_t *h = hak_tls_heap;
  hak_slab_t *s;
  if (hak_likely(n <= TINY_MAX)) {
    s = h->direct[(n + 15) >> 4];
  } else if (n <= MID_MAX) { /* mid sizes: the fast path, one level out */
    return heap_alloc_class_refill(size_to_class(n));
  } else {
    return heap_malloc_generic(n);
  }
  /* The hardened build's common refill: the owner's own frees become the allocation
   * list. (The default build never fills local_free.) */
  hak_block_t *b = HAKMEM_SECURE ? s->local_free : NULL;
  if (b != NULL && (++h->slow_calls % SWAP_CHECK_EVERY) != 0) {
    s->local_free = NULL;
    return slab_pop(s, b);
  }
  return heap_malloc_generic(n);
}

void *heap_alloc_class_refill(uint32_t c) {
  hak_heap_t *h = hak_tls_heap;
  hak_slab_t *s = h->queue[c].head; /* NULL in the empty heap */
  if (s != NULL) {
    if (s->free != NULL) return slab_pop(s, s->free);
    hak_block_t *b = HAKMEM_SECURE ? s->local_free : NULL;
    if (b != NULL && (++h->slow_calls % SWAP_CHECK_EVERY) != 0) {
      s->local_free = NULL;
      return slab_pop(s, b);
    }
  }
  if ((h = heap_get()) == NULL) {
    errno = ENOMEM;
    return NULL;
  }
  heap_deferred_if_due(h);
  return heap_alloc_class(h, c);
}

static hak_noinline void *heap_malloc_generic(size_t n) {
  hak_heap_t *h = heap_get();
  if (hak_unlikely(h == NULL)) {
    errno = ENOMEM;
    return NULL;
  }
  if (hak_unlikely(n >= (size_t)PTRDIFF_MAX)) {
    errno = ENOMEM;
    return NULL;
  }
  heap_deferred_if_due(h); /* a refill or a large block */
  return n <= MID_MAX ? heap_alloc_class(h, size_to_class(n)) : large_alloc(n, 0, false);
}

/* ---- the free slow path -------------------------------------------------------------- */
void heap_slab_emptied(hak_heap_t *h, hak_slab_t *s) {
  HAK_ASSERT(s->used == 0 && h->pinned[s->class_idx] != s);
  if (HAKMEM_DEBUG >= 2) slab_check(s);
  /* Never the queue head: the pin keeps its count above zero. Nor taken by
   * heap_reclaim_idle: with no block out, it had no remote free to wait for. */
  pthread_mutex_lock(&h->lock);
  queue_remove(&h->queue[s->class_idx], s);
  heap_release_slab(h, s);
  pthread_mutex_unlock(&h->lock);
}

void *heap_malloc_tick(void *b) {
  heap_deferred_if_due(hak_tls_heap);
  return b;
}

/* ---- remote frees, batched ---------------------------------------------------- */
/* Frees into the same foreign slab are chained locally and handed over with one CAS:
 * the slab's shared line is written once per batch, not once per block. Chains are
 * direct-mapped by slab, so frees of mixed sizes still batch. A chain holds at most
 * this many blocks or bytes (its limit, set when it starts): the bytes bound keeps what
 * 64 chains hold back from their owners small (pending 1 KiB blocks added 12% peak RSS). */
#define REMOTE_BATCH 32
#define REMOTE_BATCH_BYTES 4096

static hak_noinline void remote_chain_flush(struct hak_remote_chain *rc) {
  if (rc->slab == NULL) return;
  slab_remote_push(rc->slab, rc->head, rc->tail, rc->count);
  rc->slab = NULL;
  rc->head = rc->tail = NULL;
  rc->count = 0;
}

void heap_remote_flush(hak_heap_t *h) {
  for (uint32_t i = 0; i < REMOTE_CHAINS; i++) remote_chain_flush(&h->remote[i]);
}

static hak_noinline void remote_chain_start(struct hak_remote_chain *rc, hak_slab_t *s,
                                            hak_block_t *b) {
  remote_chain_flush(rc);
  uint32_t limit = REMOTE_BATCH_BYTES / s->block_size;
  rc->slab = s;
  rc->head = rc->tail = b;
  block_set_next(b, NULL);
  rc->count = 1;
  rc->limit = limit < 1 ? 1 : limit > REMOTE_BATCH ? REMOTE_BATCH : limit;
  if (rc->limit == 1) remote_chain_flush(rc);
}

hak_inline void heap_remote_batch(hak_heap_t *h, hak_slab_t *s, hak_block_t *b) {
  struct hak_remote_chain *rc = &h->remote[((uintptr_t)s >> 7) % REMOTE_CHAINS];
  if (hak_unlikely(rc->slab != s)) {
    remote_chain_start(rc, s, b);
    return;
  }
  block_set_next(b, rc->head);
  rc->head = b;
  if (++rc->count >= rc->limit) remote_chain_flush(rc);
}

/* The free fast path ended here: the block is not in this thread's own, unflagged
 * slab. Another thread's block, the common case of a cross-thread free, is checked and
 * chained in about as few instructions as the owner's free takes; every other case goes
 * to heap_free_slow. */
void heap_free_other(void *p, hak_slab_t *s, hak_heap_t *h) {
  uintptr_t a = (uintptr_t)p, owner = slab_owner(s), tag = block_free_tag(s);
  hak_block_t *b = p;
  if (hak_likely((owner > OWNER_CACHED || owner == OWNER_ABANDONED) &&
                 (owner & ~SLAB_FULL) != (uintptr_t)h && h != &hak_heap_empty &&
                 slab_is_block_start_owned(s, a) && b->free_tag != tag)) {
    b->free_tag = tag;
    heap_remote_batch(h, s, b);
    return;
  }
  if (slab_map_none(s)) free_unmapped(p);
  else heap_free_slow(p, s);
}

/* p is in a region but in no live slab: a block freed twice (its span since given
 * back), or a pointer that never was a block. The old descriptor and the free tag
 * tell which, without touching anything outside the region. */
_Noreturn void report_not_live(void *p, const char *fn) {
  uintptr_t a = (uintptr_t)p;
  hak_region_t *r = region_of(a);
  size_t unit = (a >> UNIT_SHIFT) & (UNITS_PER_REGION - 1);
  const hak_slab_t *d = &r->slabs[unit];
  bool was_large = d->class_idx == NUM_CLASSES && d->start == a;
  /* A freed block's tag names the descriptor of a slab that covered it: one of the
   * SLAB_MAX_UNITS descriptors up to its own unit's. */
  uintptr_t tag = (a & 15) == 0 ? ((const hak_block_t *)a)->free_tag : 0;
  uintptr_t lowest = (uintptr_t)&r->slabs[unit >= SLAB_MAX_UNITS ? unit - SLAB_MAX_UNITS + 1 : 0];
  bool tagged = tag >= lowest && tag <= (uintptr_t)d && (tag - lowest) % sizeof *d == 0;
  hak_fatal_pointer(was_large || tagged ? "double free" : "invalid pointer", fn, p);
}

/* The checks every free of a region pointer makes off the fast path. Returns the
 * slab's owner word, or OWNER_LARGE once a large block has been freed. */
uintptr_t free_checked(void *p, hak_slab_t *s) {
  uintptr_t a = (uintptr_t)p;
  uintptr_t owner = slab_owner(s);
  if (owner == OWNER_LARGE) {
    large_free(s, p);
    return OWNER_LARGE;
  }
  if (owner == OWNER_NONE || owner == OWNER_CACHED) report_not_live(p, "free");
  if (!slab_is_block_start(s, a)) hak_fatal_pointer("invalid pointer", "free", p);
  /* A block carries the tag only between free and the next malloc: a match is a double
   * free. (The owner cannot rule it out by walking its lists: the first free may sit in
   * another thread's pending remote chain.) */
  if (((hak_block_t *)p)->free_tag == block_free_tag(s)) hak_fatal_pointer("double free", "free", p);
  return owner;
}

void heap_free_slow(void *p, hak_slab_t *s) {
  uintptr_t owner = free_checked(p, s);
  if (owner == OWNER_LARGE) return;
  hak_heap_t *h = hak_tls_heap;
  hak_block_t *b = p;
  uintptr_t tag = block_free_tag(s);
  if (h == &hak_heap_empty && owner > OWNER_CACHED) heap_hint = (hak_heap_t *)(owner & ~SLAB_FULL);
  bool mine = (owner & ~SLAB_FULL) == (uintptr_t)h;
  if (!mine) {
    b->free_tag = tag;
    if (h != &hak_heap_empty) heap_remote_batch(h, s, b);
    else slab_remote_push(s, b, b, 1);
    return;
  }
  /* Onto the list malloc pops, as the fast path does: a block on local_free would cost
   * the slab's next turn as head one more refill. The hardened build's frees all go to
   * local_free. */
  hak_block_t **list = HAKMEM_SECURE ? &s->local_free : &s->free;
  /* A full slab moves lists: locked before its count drops, or heap_reclaim_idle
   * could take it off the full list first. */
  bool full = owner & SLAB_FULL;
  if (full) pthread_mutex_lock(&h->lock);
  block_set_next(b, *list);
  b->free_tag = tag;
  *list = b;
  hak_compiler_barrier(); /* the list before the count: see heap_reclaim_idle */
  /* The count this free left, kept: once it is down to the remote frees, the slab may
   * be taken and its count zeroed by heap_reclaim_idle, and a second read of it would
   * release the slab again. */
  uint32_t left = (uint16_t)(s->used - 1);
  hak_tso_store(&s->used, (uint16_t)left);
  if (full) { /* it has room again: back to the class queue */
    uint32_t c = s->class_idx;
    queue_remove(&h->full[c], s);
    queue_push_back(&h->queue[c], s);
    __atomic_store_n(&s->owner, (uintptr_t)h, __ATOMIC_RELEASE);
    if (h->queue[c].head == s) heap_head_changed(h, c); /* the queue was empty */
    pthread_mutex_unlock(&h->lock);
  }
  if (left == 0) heap_slab_emptied(h, s);
}

/* ---- idle heaps ------------------------------------------------------------------------
 * A thread that stopped allocating (blocked, or done with its part of the work) still
 * owns its slabs, and other threads' frees into them wait in their remote lists until
 * it takes a slow path again, which it may never do (memory_idle_owner, library of
 * 4b3fd1e: RSS stayed at 57.4 MiB after another thread freed all 48 MiB of an idle
 * owner's blocks). So a thread doing its deferred work also looks, at most once per
 * purge delay, at the heaps whose owners have done none for that long, and gives back
 * to the regions every slab of theirs, other than a queue head, whose blocks have all
 * come back as remote frees. (Queue heads stay: larson's main thread, which fills every
 * lane and then waits, keeps its 1.1 MiB at 2 threads and 4.3 MiB at 8 in them.)
 *
 * Why it is safe without the owner: the thief holds the owner's lock, which the owner
 * holds on every slow path that changes its lists or reads a slab other than a queue
 * head. The owner's fast paths take no lock. Its malloc pops only queue heads, which
 * are never taken. Its free writes only a slab holding one of its live blocks, and a
 * slab whose `used` equals its remote count holds none: every block out is on the
 * remote list. No other thread can push to that list either, since it holds no block.
 * The owner's last free into such a slab may still be in flight when the thief looks.
 * That is why every free stores the list before the count: on x86 the stores become
 * visible in that order, so the count seen means the free is done. */
static bool slab_all_remote(const hak_slab_t *s) {
  uintptr_t word = atomic_load_explicit(&s->remote, memory_order_acquire);
  uint32_t waiting = (uint32_t)(word >> REMOTE_COUNT_SHIFT);
  return waiting != 0 && __atomic_load_n(&s->used, __ATOMIC_ACQUIRE) == waiting;
}

/* Takes h's slabs whose blocks all came back, chaining them on *out. Caller holds
 * h->lock. */
static void heap_take_remote_freed(hak_heap_t *h, hak_slab_t **out) {
  for (uint32_t c = 0; c < NUM_CLASSES; c++) {
    hak_slab_queue_t *lists[2] = {&h->queue[c], &h->full[c]};
    for (int l = 0; l < 2; l++) {
      hak_slab_t *s = lists[l]->head;
      if (l == 0 && s != NULL) s = s->next; /* the head is the fast path's */
      while (s != NULL) {
        hak_slab_t *next = s->next;
        if (slab_all_remote(s)) {
          slab_collect(s);
          HAK_ASSERT(s->used == 0);
          queue_remove(lists[l], s);
          s->next = *out;
          *out = s;
        }
        s = next;
      }
    }
  }
}

/* Every slab of other heaps whose blocks all came back goes to its region: from idle
 * heaps, or from every heap whose owner is not on a slow path right now with `all`
 * (malloc_trim). A busy owner's heap is left alone (its lock is only tried). Returns the
 * bytes given back. */
size_t heap_reclaim_idle(hak_heap_t *self, uint64_t now, bool all) {
  if (pthread_mutex_trylock(&heaps_lock) != 0) return 0;
  uint64_t idle_ms = purge_period_ms();
  hak_slab_t *taken = NULL;
  for (hak_heap_t *h = heaps_all; h != NULL; h = h->all_next) {
    if (h == self || pthread_mutex_trylock(&h->lock) != 0) continue;
    if (all || h->next_deferred_ms + idle_ms <= now) heap_take_remote_freed(h, &taken);
    pthread_mutex_unlock(&h->lock);
  }
  size_t released = 0, count = 0;
  if (taken != NULL) {
    pthread_mutex_lock(&region_lock);
    while (taken != NULL) {
      hak_slab_t *s = taken;
      taken = s->next;
      s->next = NULL;
      released += (size_t)s->units * UNIT_SIZE;
      count++;
      release_span_locked(s, now);
    }
    pthread_mutex_unlock(&region_lock);
    atomic_fetch_add_explicit(&hak_gstats.slabs_reclaimed_idle, count, memory_order_relaxed);
  }
  pthread_mutex_unlock(&heaps_lock);
  return released;
}

static void heap_dissolve_parked(uint64_t now, bool all);

/* Work on other threads' heaps, by one thread at a time, at most once per purge period:
 * parked heaps past the period are dissolved, and idle heaps' slabs that came back are
 * taken (not with purging off). */
static void heap_others_if_due(hak_heap_t *self, uint64_t now) {
  static _Atomic uint64_t next_ms;
  uint64_t due = atomic_load_explicit(&next_ms, memory_order_relaxed);
  if (now < due) return;
  if (!atomic_compare_exchange_strong_explicit(&next_ms, &due, now + purge_period_ms(),
                                               memory_order_relaxed, memory_order_relaxed))
    return;
  heap_dissolve_parked(now, false);
  if (hak_opt.purge_delay_ms >= 0) heap_reclaim_idle(self, now, false);
}

/* ---- deferred work, trimming, thread exit ------------------------------------------- */

/* Full slabs with remote frees go back to their queue; empty ones to the region. */
static size_t heap_collect_full(hak_heap_t *h, uint32_t c) {
  size_t released = 0;
  hak_slab_t *s = h->full[c].head;
  while (s != NULL) {
    hak_slab_t *next = s->next;
    if (slab_has_remote(s)) {
      slab_collect(s);
      if (s->used == 0 || s->free != NULL) {
        queue_remove(&h->full[c], s);
        __atomic_store_n(&s->owner, (uintptr_t)h, __ATOMIC_RELEASE);
        if (s->used == 0) {
          released += (size_t)s->units * UNIT_SIZE;
          heap_release_slab(h, s);
        } else {
          queue_push_back(&h->queue[c], s);
        }
      }
    }
    s = next;
  }
  heap_head_changed(h, c);
  return released;
}

/* Abandoned slabs whose blocks were all freed go back to regions once they were
 * abandoned for the purge delay (aux: when), or at once with `all`. Caller holds
 * region_lock. */
static void sweep_abandoned_locked(uint64_t now, bool all) {
  for (uint32_t c = 0; c < NUM_CLASSES; c++) {
    hak_slab_t *s = abandoned[c].head;
    while (s != NULL) {
      hak_slab_t *next = s->next;
      if (slab_has_remote(s)) slab_collect(s);
      if (s->used == 0 && (all || now - s->aux >= (uint64_t)hak_opt.purge_delay_ms)) {
        queue_remove(&abandoned[c], s);
        release_span_locked(s, now);
      }
      s = next;
    }
  }
}

/* A queue head that stayed empty for the purge delay gives its pages back but stays the
 * head, so a thread that went quiet holds no dirty memory and one that did not loses
 * nothing. aux holds when the head was first seen empty (only the pin in `used`). */
static void heap_purge_idle_heads(hak_heap_t *h, uint64_t now) {
  if (hak_opt.purge_delay_ms < 0) return;
  for (uint32_t c = 0; c < NUM_CLASSES; c++) {
    hak_slab_t *s = h->pinned[c];
    if (s == NULL || s->used != 1 || s->capacity == 0) {
      if (s) s->aux = 0;
      continue;
    }
    if (s->aux == 0) s->aux = now;
    if (now - s->aux < (uint64_t)hak_opt.purge_delay_ms) continue;
    s->free = s->local_free = NULL;
    s->capacity = 0;
    s->aux = 0;
    s->touched = 0;
    os_purge((void *)slab_base(s), (size_t)s->units * UNIT_SIZE);
    atomic_fetch_add_explicit(&hak_gstats.purged_bytes, (size_t)s->units * UNIT_SIZE,
                              memory_order_relaxed);
  }
}

/* Free blocks of a page or more keep only their first words (list link, free tag, the
 * mark below) resident: the whole pages inside them go back to the OS, so a few live
 * blocks no longer hold a slab's worth of memory. The mark in the third word saves
 * purging a block twice; a block handed out and freed again that kept its third word
 * unwritten is simply skipped. */
static void heap_purge_free_blocks(hak_heap_t *h) {
  size_t page = os_page_size();
  for (uint32_t c = TINY_CLASSES; c < NUM_CLASSES; c++) {
    if (class_size[c] < 2 * page) continue;
    for (hak_slab_t *s = h->queue[c].head; s != NULL; s = s->next) {
      hak_block_t *lists[2] = {s->free, s->local_free};
      for (int l = 0; l < 2; l++) {
        for (hak_block_t *b = lists[l]; b != NULL; b = block_next(b)) {
          uintptr_t a = (uintptr_t)b;
          if (block_purged(a)) continue;
          uintptr_t from = (a + 24 + page - 1) & ~(page - 1);
          uintptr_t to = (a + s->block_size - SECURE_TAIL) & ~(page - 1);
          if (to > from) {
            os_purge((void *)from, to - from);
            atomic_fetch_add_explicit(&hak_gstats.purged_bytes, to - from, memory_order_relaxed);
          }
          block_mark_purged(a);
        }
      }
    }
  }
}

/* Pages that an earlier use of a slab's span wrote past what the slab has carved. A
 * slab has such pages only when it is made (carving raises `touched` no further than
 * what it keeps), so one pass over the classes that got such a slab finds them all.
 * Walking every queued slab on every pass touched thousands of cold descriptors per
 * 10 ms after a mass free that left 1% of the blocks live; walking every class that got
 * any new slab still walked, in class_shift, the 16,000 slabs of 64-byte blocks at every
 * pass while the 4 KiB class grew on fresh spans. */
static void heap_trim_stale(hak_heap_t *h) {
  uint64_t classes = h->stale_classes;
  if (classes == 0) return;
  h->stale_classes = 0;
  size_t purged = 0;
  for (; classes != 0; classes &= classes - 1) {
    uint32_t c = (uint32_t)__builtin_ctzll(classes);
    for (hak_slab_t *s = h->queue[c].head; s != NULL; s = s->next) purged += slab_trim_stale(s);
  }
  if (purged) atomic_fetch_add_explicit(&hak_gstats.purged_bytes, purged, memory_order_relaxed);
}

static void heap_deferred(hak_heap_t *h, uint64_t now) {
  pthread_mutex_lock(&h->lock);
  h->next_deferred_ms = now + DEFERRED_PERIOD_MS;
  heap_remote_flush(h);
  heap_purge_idle_heads(h, now);
  if (hak_opt.purge_delay_ms >= 0) heap_trim_stale(h);
  if (hak_opt.purge_delay_ms >= 0 && now >= h->next_block_purge_ms) {
    h->next_block_purge_ms = now + purge_period_ms();
    heap_purge_free_blocks(h);
  }
  if (h->spans.count) span_cache_flush(h, now, hak_opt.purge_delay_ms < 0 ? INT32_MAX : hak_opt.purge_delay_ms);
  /* Only other threads' frees change a full slab: until a first one, there is nothing to
   * find (memory_behaviour's single thread walked thousands of full slabs at every pass:
   * heap_collect_full, 1.3% of perf samples). */
  if (atomic_load_explicit(&slab_remote_seen, memory_order_relaxed))
    for (uint32_t c = 0; c < NUM_CLASSES; c++)
      if (h->full[c].head) heap_collect_full(h, c);
  if (pthread_mutex_trylock(&region_lock) == 0) {
    sweep_abandoned_locked(now, false);
    region_purge(now, hak_opt.purge_delay_ms, false);
    pthread_mutex_unlock(&region_lock);
  }
  pthread_mutex_unlock(&h->lock);
  heap_others_if_due(h, now);
}

size_t heap_collect(hak_heap_t *h, bool release_all) {
  size_t released = 0;
  if (h != &hak_heap_empty) {
    if (HAKMEM_SECURE) secure_quarantine_flush(h, true);
    pthread_mutex_lock(&h->lock);
    heap_remote_flush(h);
    heap_purge_free_blocks(h);
    for (uint32_t c = 0; c < NUM_CLASSES; c++) {
      released += heap_collect_full(h, c);
      if (release_all) heap_unpin(h, c);
      hak_slab_t *s = h->queue[c].head;
      while (s != NULL) {
        hak_slab_t *next = s->next;
        slab_collect(s);
        if (s->used == 0) {
          queue_remove(&h->queue[c], s);
          released += (size_t)s->units * UNIT_SIZE;
          heap_release_slab(h, s);
        }
        s = next;
      }
      heap_head_changed(h, c);
    }
    pthread_mutex_unlock(&h->lock);
  }
  uint64_t now = os_now_ms();
  if (h != &hak_heap_empty) released += span_cache_flush(h, now, -1);
  heap_dissolve_parked(now, true); /* their empty slabs: by the sweep below */
  released += heap_reclaim_idle(h, now, true);
  pthread_mutex_lock(&region_lock);
  sweep_abandoned_locked(now, true);
  released += region_purge(now, 0, true);
  pthread_mutex_unlock(&region_lock);
  return released;
}

/* Gives every slab of h away to the abandoned lists, where a free from any thread, a
 * sweep or another heap's refill finds them; with no purge delay, empty ones go to
 * their region at once. Slabs never carved go back to their region. */
static void heap_release_all_locked(hak_heap_t *h, uint64_t now) {
  for (uint32_t c = 0; c < NUM_CLASSES; c++) {
    heap_unpin(h, c);
    hak_slab_queue_t *lists[2] = {&h->queue[c], &h->full[c]};
    for (int l = 0; l < 2; l++) {
      hak_slab_t *s;
      while ((s = lists[l]->head) != NULL) {
        queue_remove(lists[l], s);
        slab_collect(s);
        if (s->used == 0 && (s->capacity == 0 || hak_opt.purge_delay_ms <= 0)) {
          release_span_locked(s, now);
        } else {
          s->aux = now;
          __atomic_store_n(&s->owner, OWNER_ABANDONED, __ATOMIC_RELEASE);
          queue_push_back(&abandoned[c], s);
        }
      }
    }
  }
}

/* h's slabs go to the abandoned lists and its structure to the pool. */
static void heap_dissolve(hak_heap_t *h, uint64_t now) {
  span_cache_flush(h, now, -1);
  pthread_mutex_lock(&h->lock);
  pthread_mutex_lock(&region_lock);
  heap_release_all_locked(h, now);
  sweep_abandoned_locked(now, false);
  pthread_mutex_unlock(&region_lock);
  pthread_mutex_unlock(&h->lock);
  atomic_fetch_add_explicit(&hak_gstats.heaps_dissolved, 1, memory_order_relaxed);
  heap_struct_free(h);
}

/* Thread exit: the heap is parked for the next thread, or dissolved. */
void heap_abandon(hak_heap_t *h) {
  if (h == NULL || h == &hak_heap_empty) return;
  if (HAKMEM_SECURE) secure_quarantine_flush(h, true);
  heap_remote_flush(h);
  hak_tls_heap = &hak_heap_empty;
  uint64_t now = os_now_ms();
  hak_heap_t *excess = heap_park(h, now);
  if (excess != NULL) heap_dissolve(excess, now);
}

/* Dissolves the heaps parked for the purge period, or all of them with `all`. */
static void heap_dissolve_parked(uint64_t now, bool all) {
  if (all) pthread_mutex_lock(&heaps_lock);
  else if (pthread_mutex_trylock(&heaps_lock) != 0) return;
  hak_heap_t *stale = NULL;
  while (heaps_parked != NULL && (all || now - heaps_parked->parked_ms >= purge_period_ms())) {
    hak_heap_t *h = parked_pop_oldest();
    h->pool_next = stale;
    stale = h;
  }
  pthread_mutex_unlock(&heaps_lock);
  while (stale != NULL) {
    hak_heap_t *h = stale;
    stale = h->pool_next;
    heap_dissolve(h, now);
  }
}

/* In a forked child only the forking thread survives, and the others may have been
 * frozen in the middle of an operation on their own lists: half-pushed chains, counts
 * off by one. The child never walks those lists. It drops the other heaps from the heap
 * list and never reuses their structures, so no new thread can ever match their owner
 * words: every free into their slabs is a remote push, always safe, and their memory
 * (a copy of the parent's) is simply not reused in the child. */
void heap_atfork_child(void) {
  hak_heap_t *mine = hak_tls_heap;
  heaps_all = mine != &hak_heap_empty ? mine : NULL;
  if (heaps_all) {
    heaps_all->all_next = heaps_all->all_prev = NULL;
    heap_mark_main(mine); /* this thread is the child's main thread */
  }
  heaps_parked = heaps_parked_newest = NULL; /* their structures are not reused either */
  heaps_parked_count = 0;
  /* Threads waiting for a heap to be parked are gone with the rest. */
  heaps_park_waiters = 0;
  pthread_cond_init(&heaps_parked_cond, NULL);
}

/* ---- statistics walk ------------------------------------------------------------ */
static void walk_queue(const hak_slab_queue_t *q, const hak_slab_t *pinned, uint32_t c,
                       uint64_t *used, uint64_t *slabs) {
  size_t limit = q->count + 1;
  for (const hak_slab_t *s = q->head; s != NULL && limit-- > 0; s = s->next) {
    /* Neither the pin nor frees waiting in the remote list are live blocks. */
    uintptr_t remote = atomic_load_explicit(&s->remote, memory_order_relaxed);
    uint32_t waiting = (uint32_t)(remote >> REMOTE_COUNT_SHIFT);
    uint32_t live = __atomic_load_n(&s->used, __ATOMIC_RELAXED) - (s == pinned);
    used[c] += live > waiting ? live - waiting : 0;
    slabs[c]++;
  }
}

/* Figures for the report. Other threads keep running, so they are a snapshot, not an
 * exact count. Each heap is walked under its lock, which its owner holds whenever it
 * changes its lists (and which keeps their slabs from being given away); the counts
 * and quarantine slots the owner also writes on its fast paths are read as relaxed
 * atomics. The abandoned lists belong to region_lock. */
void heap_walk(uint64_t used[NUM_CLASSES + 1], uint64_t slabs[NUM_CLASSES + 1]) {
  if (atomic_load_explicit(&hak_init_state, memory_order_acquire) != 2) return;
  /* The caller's own frees into other heaps' slabs count as done: hand them over. */
  if (hak_tls_heap != &hak_heap_empty) heap_remote_flush(hak_tls_heap);
  pthread_mutex_lock(&heaps_lock);
  for (hak_heap_t *h = heaps_all; h != NULL; h = h->all_next) {
    pthread_mutex_lock(&h->lock);
    for (uint32_t c = 0; c < NUM_CLASSES; c++) {
      walk_queue(&h->queue[c], h->pinned[c], c, used, slabs);
      walk_queue(&h->full[c], h->pinned[c], c, used, slabs);
    }
    for (uint32_t i = 0; HAKMEM_SECURE && i < QUARANTINE_SLOTS; i++) { /* freed, not reusable */
      hak_block_t *q = __atomic_load_n(&h->quarantine[i], __ATOMIC_RELAXED);
      if (q != NULL) used[region_slab_of((uintptr_t)q)->class_idx]--;
    }
    pthread_mutex_unlock(&h->lock);
  }
  pthread_mutex_lock(&region_lock);
  for (uint32_t c = 0; c < NUM_CLASSES; c++) walk_queue(&abandoned[c], NULL, c, used, slabs);
  pthread_mutex_unlock(&region_lock);
  pthread_mutex_unlock(&heaps_lock);
}
