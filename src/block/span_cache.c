/* A heap's span cache: the last few small spans it freed (emptied slabs, growing
 * blocks; SPAN_CACHE_SPAN_UNITS at most), kept for its next slab or growing block so
 * that steady churn of them never takes region_lock. The heap's lock covers it (the
 * purge thread flushes idle heaps' caches). Bounded in count; spans older than the
 * purge delay go back to their region on deferred work, where purging finds them. */
#include "block/block.h"

/* A span freed here must not pass for a live block: no owner, no valid offset. */
static void mark_cached(slab_t *s, uint64_t now) {
  s->div_magic = 0;
  s->start_magic = 0;
  tso_store(&s->carved_magic, 0);
  s->aux = now;
  __atomic_store_n(&s->owner, OWNER_CACHED, __ATOMIC_RELEASE);
}

static void cache_remove_at(span_cache_t *c, uint32_t i) {
  c->units -= c->spans[i]->units;
  for (uint32_t j = i + 1; j < c->count; j++) c->spans[j - 1] = c->spans[j];
  c->count--;
}

/* The newest span with units..max_units units, or NULL. */
slab_t *span_cache_take(hak_heap_t *h, size_t units, size_t max_units) {
  span_cache_t *c = &h->spans;
  for (uint32_t i = c->count; i-- > 0;) {
    slab_t *s = c->spans[i];
    if (s->units >= units && s->units <= max_units) {
      cache_remove_at(c, i);
      return s;
    }
  }
  return NULL;
}

static void release_to_region(hak_heap_t *h, slab_t **list, uint32_t n, uint64_t now) {
  if (n == 0) return;
  size_t units = 0;
  pthread_mutex_lock(&region_lock);
  for (uint32_t i = 0; i < n; i++) {
    units += list[i]->units;
    span_free(list[i], now);
  }
  pthread_mutex_unlock(&region_lock);
  if (h != &empty_heap) heap_held_add(h, -units * UNIT_SIZE); /* the spans leave the heap */
}

void span_cache_put(hak_heap_t *h, slab_t *s, uint64_t now) {
  span_cache_t *c = &h->spans;
  /* Purge delay 0 means memory goes back at once; big spans go straight back too. */
  if (h == &empty_heap || opt.purge_delay_ms == 0 || s->units > SPAN_CACHE_SPAN_UNITS) {
    release_to_region(h, &s, 1, now);
    return;
  }
  mark_cached(s, now);
  slab_t *evicted[SPAN_CACHE_SLOTS];
  uint32_t n = 0;
  while (c->count == SPAN_CACHE_SLOTS || c->units + s->units > SPAN_CACHE_MAX_UNITS) {
    evicted[n++] = c->spans[0];
    cache_remove_at(c, 0);
  }
  c->spans[c->count++] = s;
  c->units += s->units;
  release_to_region(h, evicted, n, now);
}

size_t span_cache_flush(hak_heap_t *h, uint64_t now, long older_than_ms) {
  span_cache_t *c = &h->spans;
  slab_t *out[SPAN_CACHE_SLOTS];
  uint32_t n = 0;
  size_t bytes = 0;
  for (uint32_t i = 0; i < c->count;) {
    slab_t *s = c->spans[i];
    if (older_than_ms < 0 || now - s->aux >= (uint64_t)older_than_ms) {
      out[n++] = s;
      bytes += (size_t)s->units * UNIT_SIZE;
      cache_remove_at(c, i);
    } else {
      i++;
    }
  }
  release_to_region(h, out, n, now);
  return bytes;
}
