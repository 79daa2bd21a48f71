/* The heap API (hak_heap_*): handles checked, allocation from a chosen heap, the
 * per-thread default, statistics and the walk over a heap's live blocks. The life cycle
 * itself is heap_user.c's.
 *
 * hak_heap_malloc's fast path is malloc's with one difference: instead of loading the
 * thread's heap, it compares the heap given with the one this thread last used through
 * the API (a TLS word, folded into the compare), so it never reads through a handle it
 * has not checked. Budget: malloc's plus one instruction (`make perfcheck`, and the
 * heap loop of bench_fastpath_loop). Everything else checks the handle in O(1)
 * (heap_slot.c), points the thread's allocation heap at it for the call, and takes
 * the ordinary entry point. */

#include "api/api.h"
#include "hakmem.h"

#include <errno.h>
#include <string.h>

/* Aborts unless h is a live heap of the calling thread: a user heap, or with
 * thread_heap_ok its own heap. */
static hak_heap_t *heap_checked(hak_heap_t *h, const char *fn, bool thread_heap_ok) {
  unsigned state = heap_slot_state(h);
  if (state == HEAP_SLOT_DEAD) error_fatal_pointer("destroyed heap", fn, h);
  if (state == HEAP_SLOT_THREAD && !thread_heap_ok)
    error_fatal_pointer("not a heap made by hak_heap_new", fn, h);
  if (state != HEAP_SLOT_USER && state != HEAP_SLOT_THREAD) error_fatal_pointer("not a heap", fn, h);
  if (__atomic_load_n(&h->owner_id, __ATOMIC_RELAXED) != (uintptr_t)tls_heap || tls_heap == &empty_heap)
    error_fatal_pointer("heap of another thread", fn, h);
  return h;
}

/* The heap an allocation through the API goes to, checked (once per switch of heap). */
static hak_heap_t *heap_for_alloc(hak_heap_t *h, const char *fn) {
  if (h != heap_tls_last) {
    if (tls_heap == &empty_heap) heap_get(); /* a new thread: not its heap, surely */
    heap_tls_last = heap_checked(h, fn, true);
  }
  return h;
}

/* Runs an allocation entry point with h as the thread's allocation heap. */
#define WITH_HEAP(h, fn, expr)             \
  ({                                       \
    hak_heap_t *saved_ = tls_alloc;        \
    tls_alloc = heap_for_alloc((h), (fn)); \
    __typeof__(expr) r_ = (expr);          \
    tls_alloc = saved_;                    \
    r_;                                    \
  })

/* Past the inlined path: mid sizes pop their class's head as malloc's slow path does;
 * the rest runs malloc's own slow path with h as the allocation heap. */
static HAK_NOINLINE void *heap_malloc_in(hak_heap_t *h, size_t n) {
  if (!HAKMEM_SECURE && h == heap_tls_last && n - (TINY_MAX + 1) < MID_MAX - TINY_MAX) {
    uint32_t c = size_to_class(n);
    slab_t *s = h->queue[c].head;
    if (s != NULL && s->free != NULL) {
      bool wrapped;
      void *b = slab_pop_counted(s, s->free, &wrapped);
      return HAK_UNLIKELY(wrapped) ? heap_malloc_tick_in(h, b) : b;
    }
    return WITH_HEAP(h, "hak_heap_malloc", heap_alloc_class_refill(c));
  }
  return WITH_HEAP(h, "hak_heap_malloc", fast_malloc(n));
}

HAK_EXPORT void *hak_heap_malloc(hak_heap_t *h, size_t n) {
  if (!HAKMEM_SECURE && HAK_LIKELY(n <= TINY_MAX) && HAK_LIKELY(h == heap_tls_last)) {
    slab_t *s = h->direct[(n + 15) >> 4];
    block_t *b = s->free;
    if (HAK_LIKELY(b != NULL)) {
      bool wrapped;
      b = slab_pop_counted(s, b, &wrapped);
      if (HAK_UNLIKELY(wrapped)) return heap_malloc_tick_in(h, b);
      return b;
    }
  }
  return heap_malloc_in(h, n);
}

HAK_EXPORT void *hak_heap_calloc(hak_heap_t *h, size_t count, size_t size) {
  return WITH_HEAP(h, "hak_heap_calloc", hak_calloc(count, size));
}

HAK_EXPORT void *hak_heap_realloc(hak_heap_t *h, void *p, size_t n) {
  return WITH_HEAP(h, "hak_heap_realloc", hak_realloc(p, n));
}

HAK_EXPORT void *hak_heap_aligned_alloc(hak_heap_t *h, size_t align, size_t n) {
  return WITH_HEAP(h, "hak_heap_aligned_alloc", hak_aligned_alloc(align, n));
}

HAK_EXPORT int hak_heap_posix_memalign(hak_heap_t *h, void **out, size_t align, size_t n) {
  return WITH_HEAP(h, "hak_heap_posix_memalign", hak_posix_memalign(out, align, n));
}

/* ---- life cycle and the default ----------------------------------------------------- */
HAK_EXPORT hak_heap_t *hak_heap_new(void) {
  hak_heap_t *h = heap_user_new();
  if (h == NULL) errno = ENOMEM;
  return h;
}

HAK_EXPORT void hak_heap_destroy(hak_heap_t *h) {
  heap_user_destroy(heap_checked(h, "hak_heap_destroy", false));
}

HAK_EXPORT void hak_heap_release(hak_heap_t *h) {
  heap_user_release(heap_checked(h, "hak_heap_release", false));
}

HAK_EXPORT hak_heap_t *hak_heap_get_default(void) {
  if (heap_get() == NULL) return NULL;
  return tls_alloc;
}

HAK_EXPORT hak_heap_t *hak_heap_set_default(hak_heap_t *h) {
  hak_heap_t *home = heap_get();
  if (home == NULL) return NULL;
  if (h == NULL) h = home;
  else heap_checked(h, "hak_heap_set_default", true);
  hak_heap_t *old = tls_alloc;
  tls_alloc = heap_tls_last = h;
  return old;
}

/* ---- statistics --------------------------------------------------------------------- */
/* Hardened: the slabs of the blocks that wait in the owner's quarantine, sorted, so that
 * each slab's count of live blocks drops by its own quarantined blocks (the owner changes
 * both as we read, so one slab's count must never pay for another's). */
typedef struct {
  const slab_t *slab[QUARANTINE_SLOTS];
  uint32_t n;
} quarantined_t;

/* Insertion sort: no qsort, which may call malloc, under these locks. */
static void quarantined_sort(quarantined_t *q) {
  for (uint32_t i = 1; i < q->n; i++) {
    const slab_t *s = q->slab[i];
    uint32_t j = i;
    for (; j > 0 && (uintptr_t)q->slab[j - 1] > (uintptr_t)s; j--) q->slab[j] = q->slab[j - 1];
    q->slab[j] = s;
  }
}

static uint32_t quarantined_in(const quarantined_t *q, const slab_t *s) {
  uint32_t lo = 0, hi = q->n, n = 0;
  while (lo < hi) { /* the first entry not below s */
    uint32_t mid = (lo + hi) / 2;
    if ((uintptr_t)q->slab[mid] < (uintptr_t)s) lo = mid + 1;
    else hi = mid;
  }
  while (lo + n < q->n && q->slab[lo + n] == s) n++;
  return n;
}

static void count_slabs(const slab_queue_t *q, const slab_t *pinned, const quarantined_t *qd,
                        hak_heap_stats_t *st) {
  for (const slab_t *s = q->head; s != NULL; s = s->next) {
    uintptr_t remote = atomic_load_explicit(&s->remote, memory_order_relaxed);
    uint32_t waiting = (uint32_t)(remote >> REMOTE_COUNT_SHIFT) + quarantined_in(qd, s);
    uint32_t out = __atomic_load_n(&s->used, __ATOMIC_RELAXED) - (s == pinned);
    uint32_t live = out > waiting ? out - waiting : 0;
    st->blocks += live;
    st->in_use += (size_t)live * s->block_size;
    st->slabs++;
    st->reserved += (size_t)s->units * UNIT_SIZE;
  }
}

static int count_big(void *p, size_t usable, void *arg) {
  hak_heap_stats_t *st = arg;
  (void)p;
  st->blocks++;
  st->in_use += usable;
  return 0;
}

/* Any thread may ask, while the heap lives: heaps_lock keeps it from being retired
 * meanwhile, its lock keeps its lists still. Blocks other threads freed that still wait
 * in their remote chains count as live. */
HAK_EXPORT void hak_heap_stats(hak_heap_t *h, hak_heap_stats_t *st) {
  memset(st, 0, sizeof *st);
  pthread_mutex_lock(&heaps_lock);
  unsigned state = heap_slot_state(h);
  if (state != HEAP_SLOT_USER && state != HEAP_SLOT_THREAD) {
    pthread_mutex_unlock(&heaps_lock);
    error_fatal_pointer(state == HEAP_SLOT_DEAD ? "destroyed heap" : "not a heap", "hak_heap_stats", h);
  }
  pthread_mutex_lock(&h->lock);
  quarantined_t qd = {.n = 0};
  hak_heap_t *home = (hak_heap_t *)__atomic_load_n(&h->owner_id, __ATOMIC_RELAXED);
  for (uint32_t i = 0; HAKMEM_SECURE && home != NULL && i < QUARANTINE_SLOTS; i++) {
    block_t *b = __atomic_load_n(&home->quarantine[i], __ATOMIC_RELAXED);
    slab_t *s = b != NULL ? region_slab_of_racy((uintptr_t)b) : NULL; /* compared only */
    if (s != NULL) qd.slab[qd.n++] = s;
  }
  quarantined_sort(&qd);
  for (uint32_t c = 0; c < NUM_CLASSES; c++) {
    count_slabs(&h->queue[c], h->pinned[c], &qd, st);
    count_slabs(&h->full[c], h->pinned[c], &qd, st);
  }
  if (state == HEAP_SLOT_USER) {
    for (const slab_t *s = h->large.head; s != NULL; s = s->next) count_big(NULL, s->block_size, st);
    huge_heap_each(h, count_big, st);
    st->reserved = atomic_load_explicit(&h->held, memory_order_relaxed);
    st->peak = h->peak_held > st->reserved ? h->peak_held : st->reserved;
  } else {
    st->peak = st->reserved; /* a thread's heap keeps no history */
  }
  pthread_mutex_unlock(&h->lock);
  pthread_mutex_unlock(&heaps_lock);
}

/* ---- the live blocks ---------------------------------------------------------------- */
#define VISIT_MAX_BLOCKS (UNIT_SIZE / 16) /* the most blocks a slab holds */

/* Calls fn on every live block of s: carved, and neither on the owner's free lists
 * (where carving put blocks never handed out) nor tagged free (every freed block is,
 * wherever it waits: another thread's remote chain, the remote list, a quarantine). */
static int visit_slab(slab_t *s, int (*fn)(void *, size_t, void *), void *arg) {
  uint64_t listed[VISIT_MAX_BLOCKS / 64];
  uint32_t cap = s->capacity;
  HAK_ASSERT(cap <= VISIT_MAX_BLOCKS);
  memset(listed, 0, (cap + 63) / 64 * sizeof listed[0]);
  const block_t *lists[2] = {s->free, s->local_free};
  for (int l = 0; l < 2; l++) {
    for (const block_t *b = lists[l]; b != NULL; b = block_next(b)) {
      size_t i = ((uintptr_t)b - s->start) / s->block_size;
      listed[i / 64] |= (uint64_t)1 << (i % 64);
    }
  }
  for (uint32_t i = 0; i < cap; i++) {
    if (listed[i / 64] >> (i % 64) & 1) continue;
    block_t *b = (block_t *)(s->start + (uintptr_t)i * s->block_size);
    if (b->free_tag == block_free_tag(s)) continue;
    size_t usable = s->block_size;
#if HAKMEM_SECURE
    usable = secure_usable(b, s);
#endif
    int r = fn(b, usable, arg);
    if (r != 0) return r;
  }
  return 0;
}

HAK_EXPORT int hak_heap_visit(hak_heap_t *h, int (*fn)(void *block, size_t size, void *arg), void *arg) {
  heap_checked(h, "hak_heap_visit", true);
  int r = 0;
  pthread_mutex_lock(&h->lock);
  for (uint32_t c = 0; c < NUM_CLASSES && r == 0; c++)
    for (int l = 0; l < 2 && r == 0; l++)
      for (slab_t *s = (l ? h->full : h->queue)[c].head; s != NULL && r == 0; s = s->next)
        r = visit_slab(s, fn, arg);
  for (slab_t *s = h->large.head; s != NULL && r == 0; s = s->next)
    r = fn((void *)s->start, s->block_size, arg);
  if (r == 0) r = huge_heap_each(h, fn, arg);
  pthread_mutex_unlock(&h->lock);
  return r;
}
