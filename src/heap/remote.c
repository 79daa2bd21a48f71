/* Frees into other threads' slabs, batched. Frees into the same foreign slab are
 * chained in the freeing thread's heap and handed over with one CAS, so the slab's
 * shared line is written once per batch, not once per block. Chains are direct-mapped
 * by slab, so frees of mixed sizes still batch. A chain holds at most REMOTE_BATCH
 * blocks or REMOTE_BATCH_BYTES bytes (its limit, set when it starts): the bytes bound
 * keeps what the chains hold back from their owners small. */

#include "heap/heap.h"

#define REMOTE_BATCH 32
#define REMOTE_BATCH_BYTES 4096

/* The purge thread fences an idle heap's chains with this (heap_trim_idle_locked) while
 * it pushes them itself, holding the heap's lock: a free that meets the fence waits for
 * that lock, and looks again. */
#define REMOTE_FENCE (&empty_slab)

static HAK_NOINLINE void remote_fence_wait(hak_heap_t *h) {
  pthread_mutex_lock(&h->lock);
  pthread_mutex_unlock(&h->lock);
}

HAK_NOINLINE void remote_chain_flush(hak_heap_t *h, struct remote_chain *rc) {
  while (HAK_UNLIKELY(__atomic_load_n(&rc->slab, __ATOMIC_ACQUIRE) == REMOTE_FENCE)) remote_fence_wait(h);
  if (rc->slab == NULL) return;
  slab_remote_push(rc->slab, rc->head, rc->tail, rc->count);
  rc->slab = NULL;
  rc->head = rc->tail = NULL;
  rc->count = 0;
  hak_heap_t **user = &h->remote_user[rc - h->remote];
  if (*user != NULL) { /* pushed: the user heap may now be retired */
    heap_user_unref(*user);
    *user = NULL;
  }
  /* Frees into another thread's slabs: work for the purge thread if that thread idles.
   * Only once the chain is consistent again (see heap_trim_idle_locked). */
  if (HAK_UNLIKELY(atomic_load_explicit(&purge_napping, memory_order_relaxed))) purge_wake();
}

void heap_remote_flush(hak_heap_t *h) {
  for (uint32_t i = 0; i < REMOTE_CHAINS; i++)
    if (h->remote[i].slab != NULL) remote_chain_flush(h, &h->remote[i]);
}

/* A chain into a user heap's slab holds a reference on that heap until it is pushed:
 * a chain can wait a long time (until the freeing thread's next deferred work), and the
 * heap's destruction must not give the slab to another use meanwhile. */
HAK_NOINLINE void remote_chain_start(hak_heap_t *h, struct remote_chain *rc, slab_t *s, block_t *b) {
  remote_chain_flush(h, rc);
  if (HAK_UNLIKELY(slab_user_heap(s) != NULL)) h->remote_user[rc - h->remote] = heap_user_hold(s, b, "free");
  uint32_t limit = REMOTE_BATCH_BYTES / s->block_size;
  rc->slab = s;
  rc->head = rc->tail = b;
  block_set_next(b, NULL);
  rc->count = 1;
  rc->limit = limit < 1 ? 1 : limit > REMOTE_BATCH ? REMOTE_BATCH : limit;
  if (rc->limit == 1) remote_chain_flush(h, rc);
}

/* A free by a thread without a heap: pushed at once, under a reference like a chain's. */
void remote_push_one(slab_t *s, block_t *b) {
  hak_heap_t *u = heap_user_hold(s, b, "free");
  slab_remote_push(s, b, b, 1);
  if (u != NULL) heap_user_unref(u);
}
