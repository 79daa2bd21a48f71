/* A thread's heap at work: the malloc slow path. When the head slab of a class has no
 * free block, refill finds the next blocks in this order: the head's own frees and
 * collected remote frees, a full slab that other threads freed into, another queued
 * slab with enough free blocks, more carving of the head, and only then a new slab
 * (from the heap's span cache, an abandoned slab of the class, or a new span). */

#include "heap/heap.h"

#include <errno.h>

/* Full slabs inspected for remote frees before a new slab is taken. */
#define FULL_SCAN_LIMIT 8
/* Full slabs inspected before the queue head carves more blocks. */
#define PRE_CARVE_SCAN_LIMIT 2

/* A full slab of ours that other threads have freed into, taken off the full list. */
static HAK_NOINLINE slab_t *heap_reclaim_full_scan(hak_heap_t *h, uint32_t c, int limit) {
  slab_queue_t *full = &h->full[c];
  slab_t *s = full->head;
  for (int i = 0; s != NULL && i < limit; i++) {
    slab_t *next = s->next;
    if (slab_has_remote(s)) {
      slab_collect(s);
      if (s->free != NULL) { /* (a count alone may arrive after its blocks were taken) */
        queue_remove(full, s);
        __atomic_store_n(&s->owner, heap_owner_word(h), __ATOMIC_RELEASE);
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

HAK_INLINE slab_t *heap_reclaim_full(hak_heap_t *h, uint32_t c, int limit) {
  if (!atomic_load_explicit(&slab_remote_seen, memory_order_relaxed) || h->full[c].head == NULL) return NULL;
  return heap_reclaim_full_scan(h, c, limit);
}

/* The slab to take over from the queue head s, or NULL: one of the next few slabs that
 * holds at least two carves' worth of free blocks (capacity - used: the owner's frees,
 * and other threads' once collected). With fewer, the refills that switching heads
 * brings cost more instructions than the pages they save. Blocks of a page or more
 * carve one or two at a time, so the bound is raised to 8 blocks there (slabs of at
 * least 16): with 2, a 4 KiB class would switch heads every third allocation.
 * The slab right after the head was the head before it (see heap_alloc_class): the
 * blocks it got back since were freed last and are still in cache, so it comes first.
 * A class whose live blocks need a bit more than one slab then alternates between two
 * warm slabs instead of pulling cold blocks from the rest of the queue. Otherwise the
 * fullest of them, to let the others empty. */
#define REUSE_SCAN_LIMIT 8
static slab_t *queue_next_head(slab_t *s) {
  slab_t *best = NULL;
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

static slab_t *heap_new_slab(hak_heap_t *h, uint32_t c) {
  /* 1. A full slab of ours that other threads have freed into. */
  slab_t *s = heap_reclaim_full(h, c, FULL_SCAN_LIMIT);
  if (s != NULL) return s;
  /* 2. A span from our cache; 3. an abandoned slab of this class (a thread heap only:
   * one holds other heaps' live blocks, which destroying a user heap would free); 4. a
   * new span. Each may hold pages an earlier use wrote: if so, the next deferred pass
   * looks at the class. */
  bool user = h->kind == HEAP_KIND_USER;
  s = span_cache_take(h, class_units[c], class_units[c]);
  if (s != NULL) {
    slab_init(s, c, heap_owner_word(h));
  } else {
    /* Near a memory limit, the cached spans go back before a new one is taken. */
    if (h->spans.count && limit_near((size_t)class_units[c] * UNIT_SIZE))
      span_cache_flush(h, os_now_ms(), -1);
    pthread_mutex_lock(&region_lock);
    s = user ? NULL : heap_adopt_locked(h, c);
    if (s == NULL) {
      s = span_alloc(class_units[c]);
      if (s) slab_init(s, c, heap_owner_word(h));
    }
    pthread_mutex_unlock(&region_lock);
    if (s == NULL) return NULL;
    stats_note_in_use();
    if (user) heap_held_grow(h, (size_t)s->units * UNIT_SIZE);
  }
  __atomic_store_n(&s->user_gen, user ? atomic_load_explicit(&h->gen, memory_order_relaxed) : 0,
                   __ATOMIC_RELAXED);
  __atomic_store_n(&s->user_heap, user ? h : NULL, __ATOMIC_RELEASE);
  if (slab_has_stale(s)) h->stale_classes |= (uint64_t)1 << c;
  return s;
}

/* The refill path: the current slab of class c has nothing on its free list. Returns
 * the new head with blocks listed, or NULL. Caller holds h->lock. */
static slab_t *heap_refill_locked(hak_heap_t *h, uint32_t c) {
  slab_queue_t *q = &h->queue[c];
  slab_t *s;
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
    slab_t *back = heap_reclaim_full(h, c, PRE_CARVE_SCAN_LIMIT);
    if (back != NULL) {
      queue_push_front(q, back);
      s = back;
      break;
    }
    /* So do blocks freed into the class's other slabs: one of them becomes the head,
     * and the old head, with its uncarved room, comes right after it, where the next
     * switch looks first. Carving first would let every slab of the class hold free
     * blocks while the head writes new pages. */
    slab_t *other = queue_next_head(s);
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
    __atomic_store_n(&s->owner, heap_owner_word(h) | SLAB_FULL, __ATOMIC_RELEASE);
  }
  if (s->free == NULL && !slab_extend(s)) return NULL;
  heap_head_changed(h, c);
  HAK_ASSERT(slab_owner(s) == heap_owner_word(h) && s->class_idx == c);
  if (HAKMEM_DEBUG >= 2) slab_check(s);
  return s;
}

void *heap_alloc_class(hak_heap_t *h, uint32_t c) {
  pthread_mutex_lock(&h->lock);
  slab_t *s = heap_refill_locked(h, c);
  pthread_mutex_unlock(&h->lock);
  /* Refused at the hard limit: what heaps hold goes back, and one more try. */
  if (HAK_UNLIKELY(s == NULL) && limit_give_back((size_t)class_units[c] * UNIT_SIZE, true)) {
    pthread_mutex_lock(&h->lock);
    s = heap_refill_locked(h, c);
    pthread_mutex_unlock(&h->lock);
  }
  if (s == NULL) {
    errno = ENOMEM;
    return NULL;
  }
  /* The head is the owner's alone: popped outside the lock, whose holder must not run
   * the deferred work a pop may call for. */
  void *p = slab_pop(s, s->free);
  /* No lock held, and nothing half done (the poke may sleep in the kernel): the moment
   * to start the purge thread if it is wanted. */
  purge_thread_poke();
  return p;
}

/* Every SWAP_CHECK_EVERY-th refill from local frees also looks at the clock for
 * deferred work, so a thread living on its own frees still purges and collects. */
#define SWAP_CHECK_EVERY 64

static void *heap_malloc_generic(size_t n);

/* The head s ran dry, but other threads have freed into it: their blocks, taken by one
 * exchange, refill it here, without the lock or the clock (a thread fed by another's
 * frees would otherwise take the whole refill path once per batch). As safe as a pop:
 * only the owner changes a head's lists; idle reclaim never takes a head; and the
 * purge thread's trim touches heads only while the owner sleeps in the kernel, which
 * this path never does. Returns s with blocks listed, or NULL. */
static slab_t *heap_head_collect(slab_t *s) {
  if (!slab_has_remote(s)) return NULL;
  slab_collect_slow(s);
  return s->free != NULL ? s : NULL;
}

/* User heap h's head s has nothing listed and nothing came back, but room to carve,
 * and the refill would find nothing better (no other slab with blocks to reuse, no full
 * slab that others freed into): carve it here, without the lock or the clock. A heap
 * being filled (what a user heap mostly is) would otherwise refill once per page of
 * blocks, and for blocks of a page or more at every one or two. Only the owner changes
 * a user heap's lists (idle reclaim leaves user heaps alone), so they are read here
 * without the lock. */
static slab_t *heap_carve_head(hak_heap_t *h, slab_t *s) {
  if (h->kind != HEAP_KIND_USER || s->capacity >= s->reserved || slab_has_remote(s) ||
      (HAKMEM_SECURE && s->local_free != NULL))
    return NULL;
  if (s->next != NULL && s->next->capacity != 0) return NULL; /* queue_next_head's turn */
  if (h->full[s->class_idx].head != NULL && atomic_load_explicit(&slab_remote_seen, memory_order_relaxed))
    return NULL;
  slab_extend(s);
  return s;
}

void *heap_malloc_slow(size_t n) {
  hak_heap_t *h = tls_alloc;
  slab_t *s;
  /* Every size the fast path did not count: the profiler's countdown (prof.c). A
   * thread's first allocation takes its heap here, so that it is counted too. */
  if (HAK_UNLIKELY(h == &empty_heap) && (h = heap_get()) == NULL) {
    errno = ENOMEM;
    return NULL;
  }
  if (n < (size_t)PTRDIFF_MAX && HAK_UNLIKELY((h->prof_left -= (int64_t)n) < 0)) {
    void *p = prof_sample(h, n, 0, false);
    if (p != NULL) return p;
  }
  if (HAK_LIKELY(n <= TINY_MAX)) {
    s = h->direct[(n + 15) >> 4];
  } else if (n <= MID_MAX) { /* mid sizes: the fast path, one level out */
    return heap_alloc_class_refill(size_to_class(n));
  } else {
    return heap_malloc_generic(n);
  }
  /* Here with blocks listed: a countdown that sampled nothing, or a heap just taken. */
  if (s->free != NULL) return slab_pop(s, s->free);
  /* The hardened build's refill: the owner's slow-path frees become the allocation
   * list. (The default build never fills local_free.) */
  block_t *b = HAKMEM_SECURE ? s->local_free : NULL;
  if (b != NULL && (++h->slow_calls % SWAP_CHECK_EVERY) != 0) {
    s->local_free = NULL;
    return slab_pop(s, b);
  }
  if (heap_head_collect(s) != NULL) return slab_pop(s, s->free);
  if (s != &empty_slab && heap_carve_head(h, s) != NULL) return slab_pop(s, s->free);
  return heap_malloc_generic(n);
}

/* The heap malloc allocates from, the thread's own made first if need be; NULL when
 * there is no memory for one. */
static hak_heap_t *heap_alloc_get(void) {
  hak_heap_t *h = tls_alloc;
  if (HAK_LIKELY(h != &empty_heap)) return h;
  if (heap_get() == NULL) return NULL;
  return tls_alloc;
}

/* Deferred work for the heap allocated from and, when that is a user heap, for the
 * thread's own, whose remote chains hold the thread's frees into other heaps. */
static void heap_alloc_deferred(hak_heap_t *h) {
  heap_deferred_if_due(h);
  hak_heap_t *home = tls_heap;
  /* (h is a user heap; once both have run, they fall due together: one clock read) */
  if (HAK_UNLIKELY(h != home) && home->next_deferred_ms < h->next_deferred_ms) heap_deferred_if_due(home);
}

static HAK_NOINLINE void *heap_alloc_class_miss(hak_heap_t *h, uint32_t c, slab_t *s);

/* Small enough to inline into malloc's slow path: mid sizes pop their head here. */
void *heap_alloc_class_refill(uint32_t c) {
  hak_heap_t *h = tls_alloc;
  slab_t *s = h->queue[c].head; /* NULL in the empty heap */
  if (HAK_LIKELY(s != NULL && s->free != NULL)) return slab_pop(s, s->free);
  return heap_alloc_class_miss(h, c, s);
}

static HAK_NOINLINE void *heap_alloc_class_miss(hak_heap_t *h, uint32_t c, slab_t *s) {
  if (s != NULL) {
    block_t *b = HAKMEM_SECURE ? s->local_free : NULL;
    if (b != NULL && (++h->slow_calls % SWAP_CHECK_EVERY) != 0) {
      s->local_free = NULL;
      return slab_pop(s, b);
    }
    if (heap_head_collect(s) != NULL || heap_carve_head(h, s) != NULL) return slab_pop(s, s->free);
  }
  if ((h = heap_alloc_get()) == NULL) {
    errno = ENOMEM;
    return NULL;
  }
  heap_alloc_deferred(h);
  return heap_alloc_class(h, c);
}

static HAK_NOINLINE void *heap_malloc_generic(size_t n) {
  if (n == 0) return zero_alloc(); /* direct slot 0 is never a class head */
  hak_heap_t *h = heap_alloc_get();
  if (HAK_UNLIKELY(h == NULL)) {
    errno = ENOMEM;
    return NULL;
  }
  if (HAK_UNLIKELY(n >= (size_t)PTRDIFF_MAX)) {
    errno = ENOMEM;
    return NULL;
  }
  heap_alloc_deferred(h); /* a refill or a large block */
  if (n <= MID_MAX) return heap_alloc_class(h, size_to_class(n));
  void *p = large_alloc(n, 0, 0);
  purge_thread_poke();
  return p;
}

void *heap_malloc_tick(void *b) {
  hak_heap_t *h = tls_alloc;
  if (HAK_UNLIKELY(h != tls_heap)) return heap_malloc_tick_in(h, b);
  heap_deferred_if_due(h);
  return b;
}

/* The same for a block popped from user heap h's slab through hak_heap_malloc, which
 * need not be the heap malloc allocates from. */
HAK_NOINLINE void *heap_malloc_tick_in(hak_heap_t *h, void *b) {
  heap_alloc_deferred(h);
  return b;
}
