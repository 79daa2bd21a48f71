/* Spans taken and given back: the only way above region.c, so that the purge budget
 * (purge.c) sees every change of the memory in use, and the limits (limit.c) every
 * span that may commit memory. The caller holds region_lock. */

#include "space/space.h"

slab_t *span_alloc(size_t units) {
  if (!limit_admit(units * UNIT_SIZE)) return NULL;
  bool fresh;
  slab_t *s = region_alloc_span(units, &fresh);
  if (s == NULL) return NULL;
  if (HAKMEM_SECURE && fresh) secure_open_units(s, 0, units); /* some never taken before */
  purge_note_span_taken(units * UNIT_SIZE, fresh);
  return s;
}

void span_purge(void *p, size_t n) {
  os_purge(p, n);
  ranges_note_purged((uintptr_t)p, n);
}

void span_free(slab_t *s, uint64_t now_ms) { span_free_since(s, now_ms, now_ms); }

void span_free_since(slab_t *s, uint64_t freed_ms, uint64_t now_ms) {
  region_free_span(s, freed_ms);
  purge_note_span_freed(freed_ms, now_ms);
}

bool span_grow(slab_t *s, size_t new_units) {
  if (new_units > s->units && !limit_admit((new_units - s->units) * UNIT_SIZE)) return false;
  size_t old_units = s->units;
  if (region_grow_span(s, new_units) == 0) return false;
  if (HAKMEM_SECURE && new_units > old_units) secure_open_units(s, old_units, new_units - old_units);
  purge_note_span_taken(new_units * UNIT_SIZE, false);
  return true;
}

void span_shrink(slab_t *s, size_t new_units, uint64_t now_ms) {
  slab_t *tail = region_shrink_span(s, new_units);
  if (tail != NULL) span_free(tail, now_ms);
}
