/* Deferred work: what a heap does every DEFERRED_PERIOD_MS at most, on a slow path it
 * takes anyway (a refill, a large block, every 256th malloc from a slab): hand over
 * pending remote frees, take back full slabs that other threads freed into, give back
 * pages that free memory no longer needs (idle queue heads, whole pages inside big
 * free blocks, stale pages of reused spans, the heap's old cached spans), run the purge
 * pass, and once per purge period look at other threads' heaps. heap_collect does all
 * of it at once (api/trim.c: malloc_trim). */

#include "heap/heap.h"
#include "hakmem.h"

/* Work on other threads' heaps, by one thread at a time, at most once per purge period:
 * parked heaps past the period are dissolved, and idle heaps' slabs that came back are
 * taken (not with purging off). */
static void heap_others_if_due(hak_heap_t *self, uint64_t now) {
  static _Atomic uint64_t next_ms;
  uint64_t due = atomic_load_explicit(&next_ms, memory_order_relaxed);
  if (now < due) return;
  if (!atomic_compare_exchange_strong_explicit(&next_ms, &due, now + purge_period_ms(), memory_order_relaxed,
                                               memory_order_relaxed))
    return;
  heap_dissolve_parked(now, false);
  if (opt.purge_delay_ms >= 0) heap_reclaim_idle(self, now, due - purge_period_ms(), false);
}

/* ---- deferred work, trimming, thread exit ------------------------------------------- */

/* Full slabs with remote frees go back to their queue; empty ones to the region. */
static size_t heap_collect_full(hak_heap_t *h, uint32_t c) {
  size_t released = 0;
  slab_t *s = h->full[c].head;
  while (s != NULL) {
    slab_t *next = s->next;
    if (slab_has_remote(s)) {
      slab_collect(s);
      if (s->used == 0 || s->free != NULL) {
        queue_remove(&h->full[c], s);
        __atomic_store_n(&s->owner, heap_owner_word(h), __ATOMIC_RELEASE);
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

/* A queue head that stayed empty for the purge delay gives its pages back but stays the
 * head, so a thread that went quiet holds no dirty memory and one that did not loses
 * nothing. aux holds when the head was first seen empty (only the pin in `used`). */
static void heap_purge_idle_heads(hak_heap_t *h, uint64_t now) {
  for (uint64_t classes = h->pinned_classes; classes != 0; classes &= classes - 1) {
    uint32_t c = (uint32_t)__builtin_ctzll(classes);
    slab_t *s = h->pinned[c];
    if (s == NULL) {
      h->pinned_classes &= ~((uint64_t)1 << c);
      continue;
    }
    if (s->used != 1 || s->capacity == 0) {
      if (s->aux) s->aux = 0;
      continue;
    }
    if (s->aux == 0) s->aux = now;
    if (now - s->aux < (uint64_t)opt.purge_delay_ms) continue;
    span_purge((void *)slab_base(s), slab_uncarve(s));
  }
}

/* Free blocks of a page or more keep only their first words (list link, free tag, the
 * mark below) resident: the whole pages inside them go back to the OS, so a few live
 * blocks no longer hold a slab's worth of memory. Only blocks that two passes in a row
 * (a purge period apart) found free, or all with `all` (malloc_trim): the first pass
 * marks a block seen, so that one freed just before a pass and soon reused keeps its
 * pages (the hardened build, whose free blocks must read zero past the tag, purges at
 * once). The marks in the third word also save purging a block twice; a block handed
 * out and freed again that kept its third word unwritten keeps its mark. */
#define SEEN_MARK 0x5365656e467265ull
static void heap_purge_free_blocks(hak_heap_t *h, bool all) {
  size_t page = os_page_size();
  for (uint32_t c = TINY_CLASSES; c < NUM_CLASSES; c++) {
    if (class_size[c] < 2 * page) continue;
    for (slab_t *s = h->queue[c].head; s != NULL; s = s->next) {
      block_t *lists[2] = {s->free, s->local_free};
      for (int l = 0; l < 2; l++) {
        for (block_t *b = lists[l]; b != NULL; b = block_next(b)) {
          uintptr_t a = (uintptr_t)b, *mark = &((uintptr_t *)a)[2];
          if (block_purged(a)) continue;
          if (!HAKMEM_SECURE && !all && *mark != (a ^ process_cookie ^ SEEN_MARK)) {
            *mark = a ^ process_cookie ^ SEEN_MARK;
            continue;
          }
          uintptr_t from = (a + 24 + page - 1) & ~(page - 1);
          uintptr_t to = (a + s->block_size - SECURE_TAIL) & ~(page - 1);
          if (to > from) {
            span_purge((void *)from, to - from);
            atomic_fetch_add_explicit(&gstats.purged_bytes, to - from, memory_order_relaxed);
          }
          block_mark_purged(a);
        }
      }
    }
  }
}

/* Pages that an earlier use of a slab's span wrote past what the slab has carved. A
 * slab has such pages only when it is made (carving raises `touched` no further than
 * what it keeps), so one pass over the classes that got such a slab finds them all,
 * without walking the many cold descriptors of classes that got none. */
static void heap_trim_stale(hak_heap_t *h) {
  uint64_t classes = h->stale_classes;
  if (classes == 0) return;
  h->stale_classes = 0;
  size_t purged = 0;
  for (; classes != 0; classes &= classes - 1) {
    uint32_t c = (uint32_t)__builtin_ctzll(classes);
    for (slab_t *s = h->queue[c].head; s != NULL; s = s->next) purged += slab_trim_stale(s);
  }
  if (purged) atomic_fetch_add_explicit(&gstats.purged_bytes, purged, memory_order_relaxed);
}

static void heap_deferred(hak_heap_t *h, uint64_t now) {
  pthread_mutex_lock(&h->lock);
  h->next_deferred_ms = now + DEFERRED_PERIOD_MS;
  /* A single-threaded program has no chain to push and no abandoned slab to sweep:
   * looking costs it a walk of 64 chains and of every class's abandoned list per pass. */
  if (atomic_load_explicit(&slab_remote_seen, memory_order_relaxed)) heap_remote_flush(h);
  /* Heads are looked at every quarter of the delay, not at every pass: a busy heap
   * reads its heads' descriptors less often, and a head is still purged within a delay
   * and a half of its last use. */
  if (opt.purge_delay_ms >= 0 && now >= h->next_idle_heads_ms) {
    uint64_t step = (uint64_t)opt.purge_delay_ms / 4;
    h->next_idle_heads_ms = now + (step > DEFERRED_PERIOD_MS ? step : DEFERRED_PERIOD_MS);
    heap_purge_idle_heads(h, now);
  }
  if (opt.purge_delay_ms >= 0) heap_trim_stale(h);
  if (opt.purge_delay_ms >= 0 && now >= h->next_block_purge_ms) {
    h->next_block_purge_ms = now + purge_period_ms();
    heap_purge_free_blocks(h, false);
  }
  /* Over a memory limit the cached spans go back at once (limit.c). */
  if (h->spans.count)
    span_cache_flush(h, now, limit_near(0) ? -1 : opt.purge_delay_ms < 0 ? INT32_MAX : opt.purge_delay_ms);
  /* Only other threads' frees change a full slab: until a first one, there is nothing to
   * find, and a single-threaded program need not walk its full slabs at every pass. */
  if (atomic_load_explicit(&slab_remote_seen, memory_order_relaxed))
    for (uint32_t c = 0; c < NUM_CLASSES; c++)
      if (h->full[c].head) heap_collect_full(h, c);
  bool purge = false;
  if (pthread_mutex_trylock(&region_lock) == 0) {
    heap_sweep_abandoned_locked(now, false);
    purge = purge_pass_due(now);
    pthread_mutex_unlock(&region_lock);
  }
  pthread_mutex_unlock(&h->lock);
  /* The due memory goes back with neither lock held across the madvise and munmap
   * calls: under region_lock they would stall every thread that needs a span, for
   * milliseconds when many megabytes are due (docs/scaling.md). */
  if (purge) purge_pass_background(now);
  if (h->spare != NULL) heap_spare_trim(h, now, false);
  heap_others_if_due(h, now);
}

/* On a path slow enough to look at the clock: deferred work, when it is due. */
void heap_deferred_if_due(hak_heap_t *h) {
  uint64_t now = os_now_ms();
  if (HAK_UNLIKELY(now >= h->next_deferred_ms)) heap_deferred(h, now);
}

/* limit.c's limit_reclaim: near a memory limit, what the heaps hold goes back as at
 * malloc_trim. Called with no lock held. */
void heap_limit_reclaim(void) { heap_collect(tls_heap, true); }

/* Other threads' memory, for heap_collect: parked heaps dissolved, idle heaps' freed
 * slabs taken, abandoned slabs swept, and every free page purged. */
static size_t heap_collect_others(hak_heap_t *self, uint64_t now) {
  heap_dissolve_parked(now, true); /* their empty slabs: by the sweep below */
  size_t released = heap_reclaim_idle(self, now, now, true);
  pthread_mutex_lock(&region_lock);
  heap_sweep_abandoned_locked(now, true);
  released += purge_pass(now, 0, true);
  pthread_mutex_unlock(&region_lock);
  return released;
}

size_t heap_collect(hak_heap_t *h, bool release_all) {
  size_t released = 0;
  if (h != &empty_heap) {
    pthread_mutex_lock(&h->lock);
    heap_remote_flush(h);
    heap_purge_free_blocks(h, true);
    for (uint32_t c = 0; c < NUM_CLASSES; c++) {
      released += heap_collect_full(h, c);
      if (release_all) heap_unpin(h, c);
      slab_t *s = h->queue[c].head;
      while (s != NULL) {
        slab_t *next = s->next;
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
    released += span_cache_flush(h, os_now_ms(), -1);
    pthread_mutex_unlock(&h->lock);
  }
  uint64_t now = os_now_ms();
  if (h != &empty_heap) released += heap_spare_trim(h, now, true);
  released += heap_collect_others(h, now);
  /* What a purge-thread pass in progress holds lands after the look above: wait the
   * pass out and look again (purge.c). */
  if (purge_bg_pass_wait()) released += heap_collect_others(h, os_now_ms());
  return released;
}

/* ---- an idle heap, trimmed by the purge thread ------------------------------------
 * A thread that went quiet (blocked, asleep) may never take a slow path again, and its
 * heap keeps what its deferred work would have given back: queue heads with every block
 * free, pending remote chains that keep other heaps' slabs from emptying, cached spans.
 * The purge thread does that work for it, holding the heap's lock, which the owner holds
 * on every slow path (and a thread taking the heap over waits for). The cached spans need nothing more. The heads and
 * chains are also written on the owner's fast paths, without a lock, so the purge
 * thread first fences them (empty direct slots and queue heads send the owner's malloc
 * to the slow path, where it waits for the heap's lock; chains marked with a fence send
 * its cross-thread frees there too, see remote.c), and then makes sure that the owner
 * was not in the middle of a fast path when the fence went up: the owner must be asleep
 * in the kernel, having run no instruction, both before and after it (os_thread_asleep).
 * The fast paths make no system call, so an owner asleep is not inside one. Only then are
 * the chains pushed and the heads with no block out uncarved; their pages go back after
 * the fence comes down, still under the heap's lock (only its idle owner can want it). */
static bool heap_trim_worth(const hak_heap_t *h) {
  for (uint32_t i = 0; i < REMOTE_CHAINS; i++)
    if (h->remote[i].slab != NULL) return true;
  for (uint32_t c = 0; c < NUM_CLASSES; c++) {
    const slab_t *s = h->pinned[c];
    if (s == NULL || s->capacity == 0) continue;
    uintptr_t remote = atomic_load_explicit(&s->remote, memory_order_relaxed);
    if (s->used == 1 + (uint32_t)(remote >> REMOTE_COUNT_SHIFT)) return true;
  }
  return false;
}

size_t heap_trim_idle_locked(hak_heap_t *h, uint64_t now, slab_t **uncarved) {
  size_t n = 0;
  int tid = __atomic_load_n(&h->tid, __ATOMIC_RELAXED);
  if (h->spans.count) span_cache_flush(h, now, opt.purge_delay_ms);
  uint64_t before, after;
  if (HAKMEM_TSAN || tid == 0 || !heap_trim_worth(h) || !os_thread_asleep(tid, &before)) return 0;
  slab_t *heads[NUM_CLASSES], *chains[REMOTE_CHAINS];
  for (uint32_t c = 0; c < NUM_CLASSES; c++) {
    heads[c] = h->queue[c].head;
    __atomic_store_n(&h->queue[c].head, NULL, __ATOMIC_RELAXED);
  }
  for (uint32_t i = 0; i < ALL_DIRECT_SLOTS; i++)
    __atomic_store_n(&h->direct[i], &empty_slab, __ATOMIC_RELAXED);
  for (uint32_t i = 0; i < REMOTE_CHAINS; i++) {
    chains[i] = h->remote[i].slab;
    __atomic_store_n(&h->remote[i].slab, &empty_slab, __ATOMIC_RELEASE);
  }
  atomic_thread_fence(memory_order_seq_cst);
  bool quiet = os_thread_asleep(tid, &after) && after == before;
  if (quiet) {
    for (uint32_t i = 0; i < REMOTE_CHAINS; i++) {
      struct remote_chain *rc = &h->remote[i];
      if (chains[i] != NULL) slab_remote_push(chains[i], rc->head, rc->tail, rc->count);
      rc->head = rc->tail = NULL;
      rc->count = 0;
      chains[i] = NULL;
      if (h->remote_user[i] != NULL) { /* pushed: as remote_chain_flush does */
        heap_user_unref(h->remote_user[i]);
        h->remote_user[i] = NULL;
      }
    }
    for (uint32_t c = 0; c < NUM_CLASSES; c++) {
      slab_t *s = h->pinned[c];
      if (s == NULL || s->capacity == 0) continue;
      slab_collect(s);
      if (s->used == 1) {
        slab_uncarve(s);
        uncarved[n++] = s;
      }
    }
  }
  for (uint32_t c = 0; c < NUM_CLASSES; c++) h->queue[c].head = heads[c];
  for (uint32_t i = 0; i < REMOTE_CHAINS; i++)
    __atomic_store_n(&h->remote[i].slab, chains[i], __ATOMIC_RELEASE);
  for (uint32_t c = 0; c < NUM_CLASSES; c++) heap_head_changed(h, c); /* the direct slots */
  return n;
}
