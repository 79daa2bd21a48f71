/* Helpers for the multi-threaded stress tests (C only): pattern-checked items that move
 * between threads, a size mix, and a bounded blocking queue.
 *
 * A corrupted item aborts the process at once (after printing the block, offset and
 * bytes), so the state is still there for a debugger or a core dump.
 */
#ifndef HAKMEM_TEST_STRESS_UTIL_H
#define HAKMEM_TEST_STRESS_UTIL_H

#include <malloc.h>
#include <pthread.h>

#include "test_util.h"

#define TU_KiB ((size_t)1 << 10)
#define TU_MiB ((size_t)1 << 20)

/* A block in flight, with what is needed to check it wherever it ends up. */
typedef struct tu_item {
  void *p;
  size_t n;
  uintptr_t origin; /* address the pattern was written at */
  uint64_t seed;
} tu_item;

/* Mostly small sizes: 85% up to 256 B, 13% up to 4 KiB, the rest up to 256 KiB, and
 * when big_per_million > 0 that many in a million up to 4 MiB. */
static inline size_t tu_stress_size(tu_rng *r, unsigned big_per_million) {
  uint64_t x = tu_below(r, 1000000);
  if (x < big_per_million) return tu_range(r, 256 * TU_KiB + 1, 4 * TU_MiB);
  x = tu_below(r, 100);
  if (x < 85) return tu_range(r, 1, 256);
  if (x < 98) return tu_range(r, 257, 4 * TU_KiB);
  return tu_range(r, 4 * TU_KiB + 1, 256 * TU_KiB);
}

/* Allocates and fills an item of n bytes; aborts when malloc fails. */
static inline tu_item tu_item_make(size_t n, uint64_t seed) {
  tu_item it = {malloc(n), n, 0, seed};
  REQUIRE(it.p != NULL, "malloc(%zu) returned NULL (errno %d)", n, errno);
  REQUIRE(n <= 8 || tu_aligned(it.p, 16), "malloc(%zu) = %p not 16-aligned", n, it.p);
  it.origin = (uintptr_t)it.p;
  tu_fill(it.p, n, it.origin, seed);
  return it;
}

/* Verifies the item's pattern; aborts on corruption. */
static inline void tu_item_check(const char *what, const tu_item *it) {
  if (!tu_verify(what, it->p, it->n, it->origin, it->seed)) abort();
}

/* Verifies and frees. */
static inline void tu_item_release(const char *what, tu_item *it) {
  tu_item_check(what, it);
  free(it->p);
  it->p = NULL;
}

/* Verifies, reallocs to m bytes, verifies the kept prefix and refills the whole block. */
static inline void tu_item_realloc(const char *what, tu_item *it, size_t m) {
  tu_item_check(what, it);
  void *q = realloc(it->p, m);
  REQUIRE(q != NULL, "realloc(%p, %zu -> %zu) returned NULL (errno %d)", it->p, it->n, m, errno);
  if (!tu_verify("prefix kept by realloc", q, it->n < m ? it->n : m, it->origin, it->seed)) abort();
  it->p = q;
  it->n = m;
  it->origin = (uintptr_t)q;
  tu_fill(q, m, it->origin, it->seed);
}

/* A boxed item: the tu_item itself in a malloc'd box, so that both travel between
 * threads through a single pointer (e.g. a slot swapped with atomic exchange). */
static inline tu_item *tu_box_new(tu_rng *r, unsigned big_per_million) {
  tu_item *box = (tu_item *)malloc(sizeof *box);
  REQUIRE(box != NULL, "malloc(box) failed");
  *box = tu_item_make(tu_stress_size(r, big_per_million), tu_rand(r));
  return box;
}

static inline void tu_box_free(const char *what, tu_item *box) {
  tu_item_release(what, box);
  free(box);
}

/* ---- a bounded blocking queue of items (mutex and condition variables) ---- */

typedef struct tu_queue {
  pthread_mutex_t mu;
  pthread_cond_t not_empty, not_full;
  tu_item *ring; /* capacity slots, allocated by tu_queue_init */
  size_t capacity, head, count;
  bool closed;
} tu_queue;

static inline void tu_queue_init(tu_queue *q, size_t capacity) {
  pthread_mutex_init(&q->mu, NULL);
  pthread_cond_init(&q->not_empty, NULL);
  pthread_cond_init(&q->not_full, NULL);
  q->ring = (tu_item *)calloc(capacity, sizeof(tu_item));
  REQUIRE(q->ring != NULL, "queue of %zu items", capacity);
  q->capacity = capacity;
  q->head = q->count = 0;
  q->closed = false;
}

static inline void tu_queue_destroy(tu_queue *q) {
  free(q->ring);
  pthread_mutex_destroy(&q->mu);
  pthread_cond_destroy(&q->not_empty);
  pthread_cond_destroy(&q->not_full);
}

/* Pushes all n items, waiting for room as needed. */
static inline void tu_queue_push(tu_queue *q, const tu_item *items, size_t n) {
  pthread_mutex_lock(&q->mu);
  for (size_t i = 0; i < n;) {
    while (q->count == q->capacity) pthread_cond_wait(&q->not_full, &q->mu);
    for (; i < n && q->count < q->capacity; i++, q->count++)
      q->ring[(q->head + q->count) % q->capacity] = items[i];
    pthread_cond_broadcast(&q->not_empty);
  }
  pthread_mutex_unlock(&q->mu);
}

/* Pops up to max items, waiting for at least one; returns 0 once the queue is closed
 * and empty. */
static inline size_t tu_queue_pop(tu_queue *q, tu_item *out, size_t max) {
  pthread_mutex_lock(&q->mu);
  while (q->count == 0 && !q->closed) pthread_cond_wait(&q->not_empty, &q->mu);
  size_t n = 0;
  for (; n < max && q->count > 0; n++, q->count--) {
    out[n] = q->ring[q->head];
    q->head = (q->head + 1) % q->capacity;
  }
  if (n) pthread_cond_broadcast(&q->not_full);
  pthread_mutex_unlock(&q->mu);
  return n;
}

/* No more pushes: poppers drain what is left, then get 0. */
static inline void tu_queue_close(tu_queue *q) {
  pthread_mutex_lock(&q->mu);
  q->closed = true;
  pthread_cond_broadcast(&q->not_empty);
  pthread_mutex_unlock(&q->mu);
}

/* Pops, verifies and frees items until the queue is closed and empty; returns how many. */
static inline uint64_t tu_queue_release_all(tu_queue *q, const char *what) {
  tu_item batch[64];
  size_t n;
  uint64_t released = 0;
  while ((n = tu_queue_pop(q, batch, 64)) > 0)
    for (size_t i = 0; i < n; i++, released++) tu_item_release(what, &batch[i]);
  return released;
}

/* Starts n threads running fn(&args[i]) (args spaced `stride` bytes apart); aborts
 * when one cannot be created. */
static inline void tu_start_threads(pthread_t *tids, size_t n, void *(*fn)(void *), void *args,
                                    size_t stride) {
  for (size_t i = 0; i < n; i++) {
    int rc = pthread_create(&tids[i], NULL, fn, (char *)args + i * stride);
    REQUIRE(rc == 0, "pthread_create #%zu: %s", i, strerror(rc));
  }
}

static inline void tu_join_threads(pthread_t *tids, size_t n) {
  for (size_t i = 0; i < n; i++) pthread_join(tids[i], NULL);
}

#endif /* HAKMEM_TEST_STRESS_UTIL_H */
