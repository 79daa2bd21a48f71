/* Hardened build: the slabs of destroyed user heaps, kept out of reuse for a while.
 *
 * A free of a destroyed heap's block is reported while its span is not reused (its
 * owner word is OWNER_NONE). At the destruction, with no lock held, each slab is zeroed
 * over what it wrote (`touched`, while those bytes are still in the cache) and joins
 * the resident queue, oldest first, tagged with the destruction's number. A slab is
 * reused once DEAD_HEAPS_MIN later heaps were destroyed: the thread's next new heap
 * takes such slabs for their classes (heap_user.c), after checking that the first bytes
 * of every block they had carved are still zero (a byte that is not was written after
 * the destruction, and is reported), and carves where the pages are resident already:
 * no page fault. Slabs a heap took and did not carve have their pages dropped instead.
 * The queue holds at most DEAD_RESIDENT_MAX written bytes; what must leave it sooner
 * goes back to its region zeroed and checked, or, if DEAD_HEAPS_MIN destructions have
 * not passed (a big heap), is purged whole (sorted by address, one madvise per run of
 * adjacent spans; a write past the carved blocks goes too) and waits in the purged
 * queue, up to DEAD_PURGED_MAX bytes of spans. Once no heap has been destroyed for the
 * purge delay, the purge thread drops the resident queue's pages (heap_dead_trim): its
 * slabs wait on, and fault in when reused. The default build compiles none of it. */

#include "block/block.h"

#include <string.h>

#if HAKMEM_SECURE

#define DEAD_RESIDENT_MAX ((size_t)4 << 20)
#define DEAD_PURGED_MAX ((size_t)64 << 20)
#define DEAD_OUT_MAX 64 /* slabs leaving at one time; the rest leave at the next */

typedef struct dead_queue {
  slab_t *oldest, *newest; /* linked by next */
  size_t bytes;            /* resident: written bytes; purged: span bytes */
} dead_queue_t;
static dead_queue_t dead_resident, dead_purged; /* under region_lock */
static uint64_t dead_seq;                       /* destructions so far, under region_lock */
static uint64_t dead_last_ms;                   /* the latest one's time, under region_lock */

static size_t span_bytes(const slab_t *s) { return (size_t)s->units * UNIT_SIZE; }

static void dead_push(dead_queue_t *q, slab_t *s, size_t bytes) {
  s->next = NULL;
  if (q->newest) q->newest->next = s;
  else q->oldest = s;
  q->newest = s;
  q->bytes += bytes;
}

static slab_t *dead_pop(dead_queue_t *q, size_t bytes) {
  slab_t *s = q->oldest;
  q->oldest = s->next;
  if (q->oldest == NULL) q->newest = NULL;
  q->bytes -= bytes;
  s->next = NULL;
  return s;
}

/* Has s, on the resident queue, waited long enough to be reused? */
static bool dead_due(const slab_t *s) { return s->aux + DEAD_HEAPS_MIN <= dead_seq; }

/* Purges v[0..n) whole, one madvise per run of adjacent spans. (An insertion sort:
 * qsort may call malloc.) */
static void purge_runs(slab_t **v, size_t n) {
  for (size_t i = 1; i < n; i++) {
    slab_t *s = v[i];
    size_t j = i;
    for (; j > 0 && slab_base(v[j - 1]) > slab_base(s); j--) v[j] = v[j - 1];
    v[j] = s;
  }
  for (size_t i = 0; i < n;) {
    uintptr_t from = slab_base(v[i]), to = from + span_bytes(v[i]);
    size_t j = i + 1;
    for (; j < n && to == slab_base(v[j]); j++) to += span_bytes(v[j]);
    span_purge((void *)from, to - from);
    for (; i < j; i++) v[i]->touched = 0;
  }
}

/* A slab leaving the resident queue: the first 32 bytes of every block it carved (16
 * in the 16-byte class), where a dangling pointer's writes land most often, must still
 * be zero. (All written bytes: 30% more time in heap_requests, reading them back.) */
static void dead_check(const slab_t *s) {
  if (s->touched == 0) return; /* purged since: it reads as zero */
  size_t size = s->block_size, words = size >= 32 ? 4 : 2;
  uintptr_t a = s->start, end = a + (size_t)s->capacity * size;
  for (; a < end; a += size) {
    const uint64_t *w = (const uint64_t *)a;
    if (HAK_LIKELY((w[0] | w[1] | (words > 2 ? w[2] | w[3] : 0)) == 0)) continue;
    for (;; w++)
      if (*w != 0) error_fatal_at("write to a destroyed heap's memory at", w);
  }
}

size_t heap_dead_add(slab_t **v, size_t n, bool first, uint64_t now) {
  size_t bytes = 0, nidle = 0;
  slab_t *idle[DEAD_BATCH];
  for (size_t i = 0; i < n; i++) {
    bytes += span_bytes(v[i]);
    if (v[i]->capacity == 0) { /* taken from here and not used: its pages go */
      if (v[i]->touched > 0) idle[nidle++] = v[i];
      continue;
    }
    v[i]->touched = (uint32_t)((v[i]->touched + 63) & ~(size_t)63); /* whole lines */
    memset((void *)slab_base(v[i]), 0, v[i]->touched);
  }
  purge_runs(idle, nidle);
  slab_t *out[DEAD_OUT_MAX], *purge[DEAD_OUT_MAX];
  size_t nout = 0, npurge = 0;
  pthread_mutex_lock(&region_lock);
  dead_seq += first;
  dead_last_ms = now;
  for (size_t i = 0; i < n; i++) {
    v[i]->aux = dead_seq; /* its destruction */
    dead_push(&dead_resident, v[i], v[i]->touched);
  }
  while (dead_resident.bytes > DEAD_RESIDENT_MAX && nout < DEAD_OUT_MAX && npurge < DEAD_OUT_MAX) {
    slab_t *s = dead_pop(&dead_resident, dead_resident.oldest->touched);
    if (dead_due(s)) out[nout++] = s;
    else purge[npurge++] = s;
  }
  pthread_mutex_unlock(&region_lock);
  if (nout + npurge == 0) return bytes;
  for (size_t i = 0; i < nout; i++) dead_check(out[i]);
  purge_runs(purge, npurge);
  pthread_mutex_lock(&region_lock);
  for (size_t i = 0; i < nout; i++) span_free(out[i], now);
  for (size_t i = 0; i < npurge; i++) dead_push(&dead_purged, purge[i], span_bytes(purge[i]));
  while (dead_purged.bytes > DEAD_PURGED_MAX)
    span_free(dead_pop(&dead_purged, span_bytes(dead_purged.oldest)), now);
  pthread_mutex_unlock(&region_lock);
  return bytes;
}

slab_t *heap_dead_reuse(size_t max_units) {
  slab_t *list = NULL;
  size_t units = 0;
  pthread_mutex_lock(&region_lock);
  while (dead_resident.oldest != NULL && dead_due(dead_resident.oldest) &&
         units + dead_resident.oldest->units <= max_units) {
    slab_t *s = dead_pop(&dead_resident, dead_resident.oldest->touched);
    units += s->units;
    s->next = list;
    list = s;
  }
  pthread_mutex_unlock(&region_lock);
  for (slab_t *s = list; s != NULL; s = s->next) dead_check(s);
  return list;
}

size_t heap_dead_trim(uint64_t now) {
  slab_t *v[DEAD_BATCH];
  size_t n = 0, bytes = 0;
  pthread_mutex_lock(&region_lock);
  if (dead_resident.bytes > 0 && now - dead_last_ms >= (uint64_t)opt.purge_delay_ms)
    while (n < DEAD_BATCH && dead_resident.oldest != NULL)
      v[n++] = dead_pop(&dead_resident, dead_resident.oldest->touched);
  pthread_mutex_unlock(&region_lock);
  if (n == 0) return 0;
  for (size_t i = 0; i < n; i++) bytes += v[i]->touched;
  purge_runs(v, n); /* sorted by address now: back in the order they came */
  for (size_t i = 1; i < n; i++) {
    slab_t *s = v[i];
    size_t j = i;
    for (; j > 0 && v[j - 1]->aux > s->aux; j--) v[j] = v[j - 1];
    v[j] = s;
  }
  pthread_mutex_lock(&region_lock); /* ahead of any that came meanwhile */
  for (size_t i = n; i-- > 0;) {
    v[i]->next = dead_resident.oldest;
    dead_resident.oldest = v[i];
    if (dead_resident.newest == NULL) dead_resident.newest = v[i];
  }
  pthread_mutex_unlock(&region_lock);
  return bytes;
}

#endif /* HAKMEM_SECURE */
