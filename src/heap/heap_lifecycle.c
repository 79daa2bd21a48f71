/* Heaps as objects: their structures, the list of all heaps, and what happens to a
 * heap when its thread ends. A thread that exits leaves its heap parked whole for the
 * next thread to take over; too many parked heaps, or one parked too long, are
 * dissolved: their slabs go to per-class abandoned lists, where any heap may adopt
 * them. Also the idle-heap reclaim (slabs of a quiet owner whose blocks all came back)
 * and the fork child's view of the heaps. */

#include "heap/heap.h"

#include <sched.h>
#include <stddef.h>
#include <string.h>
#include <time.h>

pthread_mutex_t heaps_lock = PTHREAD_MUTEX_INITIALIZER;
hak_heap_t *heaps_all;
static hak_heap_t *heaps_pool;

/* Slabs whose owner exited while blocks were live, per class; under region_lock. Bit c
 * of heap_abandoned_classes is set while class c's list may be non-empty (cleared by
 * the sweep), so a program whose threads never exit sweeps nothing. */
slab_queue_t heap_abandoned[NUM_CLASSES];
static uint64_t heap_abandoned_classes;

/* ---- heap life cycle ---------------------------------------------------------------- */
/* A cleared heap structure on the list of all heaps (heap_slot.c's slots, recycled
 * through the pool). Its lock, reference count and generation are kept: a thread that
 * read an old user heap's address may still take the lock or count a reference. */
hak_heap_t *heap_struct_alloc(void) {
  pthread_mutex_lock(&heaps_lock);
  hak_heap_t *h = heaps_pool;
  if (h != NULL) heaps_pool = h->pool_next;
  else h = heap_slot_new();
  if (h) {
    memset(h, 0, offsetof(hak_heap_t, lock));
    h->owner_id = (uintptr_t)h;
    heap_slot_set_state(h, HEAP_SLOT_THREAD);
    h->all_next = heaps_all;
    if (heaps_all) heaps_all->all_prev = h;
    heaps_all = h;
  }
  pthread_mutex_unlock(&heaps_lock);
  return h;
}

/* Takes h off the list of all heaps, if it is on it. Caller holds heaps_lock. */
void heap_unlist_locked(hak_heap_t *h) {
  if (h->all_next == h) return;
  if (h->all_prev) h->all_prev->all_next = h->all_next;
  else heaps_all = h->all_next;
  if (h->all_next) h->all_next->all_prev = h->all_prev;
  h->all_next = h->all_prev = h; /* unlisted */
}

void heap_struct_free(hak_heap_t *h) {
  pthread_mutex_lock(&heaps_lock);
  heap_unlist_locked(h);
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
 * back. The oldest parked heap is taken first: a thread's successor (a pool's next
 * worker) frees the blocks it left, so the longer a heap has been parked, the more of
 * it is free; taking the newest would leave the oldest ones, mostly free, unused until
 * dissolved. More than PARKED_MAX, or one parked for the purge period, is dissolved:
 * its slabs go to the abandoned lists. Under heaps_lock. */
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
  if (opt.purge_delay_ms == 0) return h;
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

__thread uintptr_t heap_hint __attribute__((tls_model("initial-exec")));

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
  while (h == NULL &&
         pthread_cond_clockwait(&heaps_parked_cond, &heaps_lock, CLOCK_MONOTONIC, &deadline) == 0)
    h = parked_take(want);
  if (h == NULL) h = parked_take(want); /* parked right at the deadline */
  heaps_park_waiters--;
  pthread_setcancelstate(cancel_state, NULL);
  return h;
}

/* The parked heap a new thread takes over: the one the last block it freed before its
 * first malloc came from, or else the oldest. A thread that starts by freeing what an
 * exited thread handed it (a pool's next worker, a server's next connection thread) so gets its
 * predecessor's heap, and frees the rest of those blocks on the fast path, where they
 * would otherwise wait in a parked heap's remote lists until some later thread took it
 * over. The choice is made at the first malloc, not at a free: a thread that only frees
 * takes no heap over, so it cannot keep an exited thread's slabs from being dissolved.
 * The new thread often gets there before its predecessor, which started it, has
 * finished exiting; taking the oldest then mixes the lanes' blocks across heaps, with
 * frees waiting in the parked ones. So it waits a little for that heap to be parked
 * (parked_wait_for). A heap
 * whose owner is not exiting (a long-lived producer) would make every such thread wait
 * in vain, so a heap waited for in vain is not waited for again until it has been
 * parked (the main thread's is marked so from the start: heap_mark_main); and when
 * waits keep failing whatever the heap, few threads wait. */
static hak_heap_t *heap_take_parked(void) {
  hak_heap_t *want = (hak_heap_t *)(heap_hint & ~SLAB_FULL), *h = NULL;
  heap_hint = 0;
  pthread_mutex_lock(&heaps_lock);
  if (want != NULL) {
    h = parked_take(want);
    /* With purge delay 0 exiting heaps are dissolved, never parked. */
    if (h == NULL && !want->hint_wait_failed && opt.purge_delay_ms != 0 &&
        (hint_wait_score >= 64 || ++hint_wait_skipped % HINT_WAIT_PROBE == 0)) {
      h = parked_wait_for(want);
      want->hint_wait_failed = h == NULL;
      if (h != NULL) hint_wait_score += (256 - hint_wait_score) / 8;
      else hint_wait_score -= hint_wait_score / 8;
      atomic_fetch_add_explicit(&gstats.heap_waits, 1, memory_order_relaxed);
      if (h == NULL) atomic_fetch_add_explicit(&gstats.heap_waits_in_vain, 1, memory_order_relaxed);
    }
  }
  bool hinted = h != NULL;
  if (h == NULL && heaps_parked != NULL) h = parked_pop_oldest();
  pthread_mutex_unlock(&heaps_lock);
  if (h != NULL) atomic_fetch_add_explicit(&gstats.heaps_taken_over, 1, memory_order_relaxed);
  if (hinted) atomic_fetch_add_explicit(&gstats.heaps_taken_by_free, 1, memory_order_relaxed);
  return h;
}

hak_heap_t *heap_get(void) {
  hak_heap_t *h = tls_heap;
  if (HAK_LIKELY(h != &empty_heap)) return h;
  init_process();
  h = tls_heap; /* initialisation may have allocated, and so made the heap */
  if (h != &empty_heap) return h;
  h = heap_take_parked();
  if (h == NULL) {
    h = heap_struct_alloc();
    if (h == NULL) return NULL;
    for (size_t i = 0; i < ALL_DIRECT_SLOTS; i++) h->direct[i] = &empty_slab;
    atomic_fetch_add_explicit(&gstats.heaps_created, 1, memory_order_relaxed);
  } else {
    /* A heap taken over: the purge thread may be trimming it (it holds the heap's lock
     * for that, and saw no owner); wait for it before using the heap. */
    pthread_mutex_lock(&h->lock);
    pthread_mutex_unlock(&h->lock);
  }
  __atomic_store_n(&h->tid, os_thread_id(), __ATOMIC_RELAXED);
  tls_heap = tls_alloc = h;
  atomic_fetch_add_explicit(&gstats.threads_started, 1, memory_order_relaxed);
  /* Registers the thread-exit hook; may itself allocate, which now finds the heap. */
  if (thread_key_ready) pthread_setspecific(thread_key, h);
  return h;
}

/* Looks at up to ABANDONED_SCAN_LIMIT abandoned slabs of class c: the first with room
 * becomes h's — an empty one too, so that a new thread takes over the blocks an exited
 * one carved rather than carving a span of another class's pages again. Caller holds
 * region_lock. */
#define ABANDONED_SCAN_LIMIT 16
slab_t *heap_adopt_locked(hak_heap_t *h, uint32_t c) {
  slab_t *s = heap_abandoned[c].head;
  for (int i = 0; s != NULL && i < ABANDONED_SCAN_LIMIT; i++) {
    slab_t *next = s->next;
    slab_collect(s);
    if (s->free != NULL || s->capacity < s->reserved) {
      queue_remove(&heap_abandoned[c], s);
      s->aux = 0;
      __atomic_store_n(&s->owner, (uintptr_t)h, __ATOMIC_RELEASE);
      atomic_fetch_add_explicit(&gstats.slabs_adopted, 1, memory_order_relaxed);
      return s;
    }
    s = next;
  }
  return NULL;
}

/* Abandoned slabs whose blocks were all freed go back to regions once they were
 * abandoned for the purge delay (aux: when), or at once with `all`. Caller holds
 * region_lock. */
void heap_sweep_abandoned_locked(uint64_t now, bool all) {
  for (uint64_t classes = heap_abandoned_classes; classes != 0; classes &= classes - 1) {
    uint32_t c = (uint32_t)__builtin_ctzll(classes);
    slab_t *s = heap_abandoned[c].head;
    if (s == NULL) heap_abandoned_classes &= ~((uint64_t)1 << c);
    while (s != NULL) {
      slab_t *next = s->next;
      if (slab_has_remote(s)) slab_collect(s);
      if (s->used == 0 && (all || now - s->aux >= (uint64_t)opt.purge_delay_ms)) {
        queue_remove(&heap_abandoned[c], s);
        span_free(s, now);
      }
      s = next;
    }
  }
}

/* ---- idle heaps ------------------------------------------------------------------------
 * A thread that stopped allocating (blocked, or done with its part of the work) still
 * owns its slabs, and other threads' frees into them wait in their remote lists until
 * it takes a slow path again, which it may never do. So a thread doing its deferred
 * work also looks, at most once per
 * purge delay, at the heaps whose owners have done none for that long, and gives back
 * to the regions every slab of theirs, other than a queue head, whose blocks have all
 * come back as remote frees. (Queue heads stay: they are the owner's fast path.)
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
static bool slab_all_remote(const slab_t *s) {
  uintptr_t word = atomic_load_explicit(&s->remote, memory_order_acquire);
  uint32_t waiting = (uint32_t)(word >> REMOTE_COUNT_SHIFT);
  return waiting != 0 && __atomic_load_n(&s->used, __ATOMIC_ACQUIRE) == waiting;
}

/* Takes h's slabs whose blocks all came back, chaining them on *out. Caller holds
 * h->lock. */
static void heap_take_remote_freed(hak_heap_t *h, slab_t **out) {
  for (uint32_t c = 0; c < NUM_CLASSES; c++) {
    slab_queue_t *lists[2] = {&h->queue[c], &h->full[c]};
    for (int l = 0; l < 2; l++) {
      slab_t *s = lists[l]->head;
      if (l == 0 && s != NULL) s = s->next; /* the head is the fast path's */
      while (s != NULL) {
        slab_t *next = s->next;
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
 * bytes given back. A slab taken counts as freed at the caller's last look (the purge
 * thread looks every half period), but no more than half a period ago: its last block
 * came back since, and the purge delay need not wait for the look as well. */
size_t heap_reclaim_idle(hak_heap_t *self, uint64_t now, uint64_t last_look, bool all) {
  uint64_t half = purge_period_ms() / 2, freed_since = last_look > now ? now : last_look;
  if (now - freed_since > half) freed_since = now - half;
  if (pthread_mutex_trylock(&heaps_lock) != 0) return 0;
  uint64_t idle_ms = purge_period_ms();
  slab_t *taken = NULL;
  for (hak_heap_t *h = heaps_all; h != NULL; h = h->all_next) {
    /* (A user heap gives its memory back when it is destroyed.) */
    if (h == self || h->kind == HEAP_KIND_USER || pthread_mutex_trylock(&h->lock) != 0) continue;
    if (all || h->next_deferred_ms + idle_ms <= now) heap_take_remote_freed(h, &taken);
    pthread_mutex_unlock(&h->lock);
  }
  size_t released = 0, count = 0;
  if (taken != NULL) {
    pthread_mutex_lock(&region_lock);
    while (taken != NULL) {
      slab_t *s = taken;
      taken = s->next;
      s->next = NULL;
      released += (size_t)s->units * UNIT_SIZE;
      count++;
      span_free_since(s, freed_since, now);
    }
    pthread_mutex_unlock(&region_lock);
    atomic_fetch_add_explicit(&gstats.slabs_reclaimed_idle, count, memory_order_relaxed);
  }
  pthread_mutex_unlock(&heaps_lock);
  return released;
}

/* Gives every slab of h away to the abandoned lists, where a free from any thread, a
 * sweep or another heap's refill finds them; with no purge delay, empty ones go to
 * their region at once. Slabs never carved go back to their region. */
static void heap_release_all_locked(hak_heap_t *h, uint64_t now) {
  for (uint32_t c = 0; c < NUM_CLASSES; c++) {
    heap_unpin(h, c);
    slab_queue_t *lists[2] = {&h->queue[c], &h->full[c]};
    for (int l = 0; l < 2; l++) {
      slab_t *s;
      while ((s = lists[l]->head) != NULL) {
        queue_remove(lists[l], s);
        slab_collect(s);
        if (s->used == 0 && (s->capacity == 0 || opt.purge_delay_ms <= 0)) {
          span_free(s, now);
        } else {
          s->aux = now;
          __atomic_store_n(&s->owner, OWNER_ABANDONED, __ATOMIC_RELEASE);
          queue_push_back(&heap_abandoned[c], s);
          heap_abandoned_classes |= (uint64_t)1 << c;
        }
      }
    }
  }
}

/* h's slabs go to the abandoned lists and its structure to the pool. */
static void heap_dissolve(hak_heap_t *h, uint64_t now) {
  pthread_mutex_lock(&h->lock);
  span_cache_flush(h, now, -1);
  pthread_mutex_lock(&region_lock);
  heap_release_all_locked(h, now);
  heap_sweep_abandoned_locked(now, false);
  pthread_mutex_unlock(&region_lock);
  pthread_mutex_unlock(&h->lock);
  atomic_fetch_add_explicit(&gstats.heaps_dissolved, 1, memory_order_relaxed);
  heap_struct_free(h);
}

/* Thread exit: the heap is parked for the next thread, or dissolved. */
void heap_abandon(hak_heap_t *h) {
  if (h == NULL || h == &empty_heap) return;
  atomic_fetch_add_explicit(&gstats.threads_exited, 1, memory_order_relaxed);
  heap_remote_flush(h);
  tls_heap = tls_alloc = &empty_heap;
  __atomic_store_n(&h->tid, 0, __ATOMIC_RELAXED); /* no thread owns it any more */
  uint64_t now = os_now_ms();
  hak_heap_t *excess = heap_park(h, now);
  if (excess != NULL) heap_dissolve(excess, now);
}

/* Dissolves the heaps parked for the purge period, or all of them with `all`. */
void heap_dissolve_parked(uint64_t now, bool all) {
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
  hak_heap_t *mine = tls_heap;
  heaps_all = mine != &empty_heap ? mine : NULL;
  if (heaps_all) {
    heaps_all->all_next = heaps_all->all_prev = NULL;
    heap_mark_main(mine); /* this thread is the child's main thread */
    __atomic_store_n(&mine->tid, os_thread_id(), __ATOMIC_RELAXED);
  }
  heaps_parked = heaps_parked_newest = NULL; /* their structures are not reused either */
  /* The child's one thread is alive; the others are gone without exiting. */
  atomic_store_explicit(&gstats.threads_started, atomic_load(&gstats.threads_exited) + (heaps_all != NULL),
                        memory_order_relaxed);
  heaps_parked_count = 0;
  /* Threads waiting for a heap to be parked are gone with the rest. */
  heaps_park_waiters = 0;
  pthread_cond_init(&heaps_parked_cond, NULL);
}
