/* Frees into other threads' slabs, batched. Frees into the same foreign slab are
 * chained in the freeing thread's heap and handed over with one CAS, so the slab's
 * shared line is written once per batch, not once per block. Chains are direct-mapped
 * by slab, so frees of mixed sizes still batch. A chain holds at most REMOTE_BATCH
 * blocks or REMOTE_BATCH_BYTES bytes (its limit, set when it starts): the bytes bound
 * keeps what the chains hold back from their owners small. */

#include "internal.h"

#define REMOTE_BATCH 32
#define REMOTE_BATCH_BYTES 4096

/* The purge thread fences an idle heap's chains with this (heap_trim_idle_locked) while
 * it pushes them itself, holding the heap's lock: a free that meets the fence waits for
 * that lock, and looks again. */
#define REMOTE_FENCE (&hak_slab_empty)

static hak_noinline void remote_fence_wait(void) {
  pthread_mutex_lock(&hak_tls_heap->lock);
  pthread_mutex_unlock(&hak_tls_heap->lock);
}

hak_noinline void remote_chain_flush(struct hak_remote_chain *rc) {
  while (hak_unlikely(__atomic_load_n(&rc->slab, __ATOMIC_ACQUIRE) == REMOTE_FENCE)) remote_fence_wait();
  if (rc->slab == NULL) return;
  slab_remote_push(rc->slab, rc->head, rc->tail, rc->count);
  rc->slab = NULL;
  rc->head = rc->tail = NULL;
  rc->count = 0;
  /* Frees into another thread's slabs: work for the purge thread if that thread idles.
   * Only once the chain is consistent again (see heap_trim_idle_locked). */
  if (hak_unlikely(atomic_load_explicit(&purge_napping, memory_order_relaxed))) purge_wake();
}

void heap_remote_flush(hak_heap_t *h) {
  for (uint32_t i = 0; i < REMOTE_CHAINS; i++) remote_chain_flush(&h->remote[i]);
}

hak_noinline void remote_chain_start(struct hak_remote_chain *rc, hak_slab_t *s,
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
