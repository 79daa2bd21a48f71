/* A heap's class queues: the slab at each head, which the fast path allocates from and
 * which carries a pin, and slabs leaving a heap when their last block comes back. (The
 * static empty heap and the thread's heap pointers are block/heap_tls.c's.) */

#include "heap/heap.h"

/* An emptied slab's span goes to the heap's span cache (or, past it, to its region). */
void heap_release_slab(hak_heap_t *h, slab_t *s) { span_cache_put(h, s, os_now_ms()); }

/* The head of each class queue is the slab the fast path allocates from. It carries a
 * pin, one extra count in `used`, so freeing its last block never leaves the fast path:
 * a thread that mallocs and frees one block over and over stays there. Call this after
 * anything that may change a queue's head. */
void heap_head_changed(hak_heap_t *h, uint32_t c) {
  slab_queue_t *q = &h->queue[c];
  slab_t *head = q->head, *old = h->pinned[c];
  if (old != head) {
    if (head) {
      head->used++;
      h->pinned_classes |= (uint64_t)1 << c;
    }
    h->pinned[c] = head;
    if (old && --old->used == 0) { /* emptied while pinned: it is still queued */
      queue_remove(q, old);
      heap_release_slab(h, old);
    }
  }
  /* Point the fast paths' direct slots at the head. */
  slab_t *d = head ? head : &empty_slab;
  if (c < TINY_CLASSES) {
    size_t lo = c == 0 ? 1 : class_size[c - 1] / 16 + 1; /* slot 0, malloc(0): slow path */
    size_t hi = class_size[c] / 16;
    for (size_t i = lo; i <= hi; i++) h->direct[i] = d;
  } else if (c < TINY_CLASSES + MID_DIRECT_CLASSES) {
    h->direct[class_direct_slot(c)] = d;
  }
}

void heap_slab_emptied(hak_heap_t *h, slab_t *s) {
  /* The owner's free found its own slab; it may be one of its user heaps'. */
  if (slab_user_heap(s) != NULL) h = slab_user_heap(s);
  HAK_ASSERT(s->used == 0 && h->pinned[s->class_idx] != s);
  if (HAKMEM_DEBUG >= 2) slab_check(s);
  /* Never the queue head: the pin keeps its count above zero. Nor taken by
   * heap_reclaim_idle: with no block out, it had no remote free to wait for. */
  pthread_mutex_lock(&h->lock);
  queue_remove(&h->queue[s->class_idx], s);
  heap_release_slab(h, s);
  pthread_mutex_unlock(&h->lock);
}
