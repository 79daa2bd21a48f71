/* The heap profiler's tables and pool (heap.h): distinct stacks with their counts, the
 * live sampled blocks, and the slabs sampled small and mid blocks live in.
 *
 * Both tables are os_map memory of fixed size, mapped once when profiling first starts
 * (pages are touched as entries are used) and never grown: when either is full a sample
 * is counted as dropped. Stacks are open-addressed by the stack's hash; an entry, once
 * made, never changes its frames, so a profile writer reads them without the lock. Live
 * blocks are open-addressed by address, removed by moving the rest of their run back.
 *
 * Sampled small and mid blocks come from the profiler's own slabs (owner word
 * OWNER_PROF): the same classes, block sizes and alignment as any other block, but every
 * free of one leaves the fast path for heap_free_slow, which hands it here. Large and
 * huge ones are ordinary blocks, looked up in the live table on free while any is live.
 * prof_lock covers tables, counts and pool; the lock order is prof -> region. */

#include "heap/heap.h"

#include <string.h>

typedef struct prof_live {
  uintptr_t addr; /* 0: slot unused */
  uint32_t stack; /* index in the stack table, or NO_STACK (that table was full) */
  uint32_t big;   /* a large or huge block */
  uint64_t size;
  double scale; /* blocks this sample stands for */
} prof_live_t;

pthread_mutex_t prof_lock = PTHREAD_MUTEX_INITIALIZER;
prof_counts_t prof_counts;
_Atomic size_t prof_live_big;
prof_stack_t *prof_stacks;
uint32_t *prof_stack_order; /* the used slots, in the order they were taken */
#define STACKS_BYTES (PROF_STACK_SLOTS * (sizeof(prof_stack_t) + sizeof(uint32_t)))
static prof_live_t *live;
static slab_queue_t pool_avail[NUM_CLASSES], pool_full[NUM_CLASSES];
#define stacks prof_stacks

bool prof_tables_init(void) {
  if (prof_stacks != NULL) return true;
  prof_stacks = os_map(STACKS_BYTES);
  live = os_map(PROF_LIVE_SLOTS * sizeof(prof_live_t));
  if (prof_stacks != NULL && live != NULL) {
    prof_stack_order = (uint32_t *)(prof_stacks + PROF_STACK_SLOTS);
    return true;
  }
  if (prof_stacks) os_unmap(prof_stacks, STACKS_BYTES);
  if (live) os_unmap(live, PROF_LIVE_SLOTS * sizeof(prof_live_t));
  prof_stacks = NULL;
  live = NULL;
  return false;
}

size_t prof_table_bytes(void) {
  return prof_stacks == NULL ? 0 : STACKS_BYTES + PROF_LIVE_SLOTS * sizeof(prof_live_t);
}

static uint64_t stack_hash(const uintptr_t *f, uint32_t depth) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ depth;
  for (uint32_t i = 0; i < depth; i++) h = (h ^ f[i]) * 0x100000001B3ull + (h >> 29);
  return h ? h : 1;
}

/* The stack's entry, added if new; NO_STACK if the table is full. Under prof_lock. */
static uint32_t stack_find(const uintptr_t *f, uint32_t depth) {
  uint64_t h = stack_hash(f, depth);
  for (size_t i = h & (PROF_STACK_SLOTS - 1);; i = (i + 1) & (PROF_STACK_SLOTS - 1)) {
    prof_stack_t *st = &stacks[i];
    if (st->hash == 0) {
      if (prof_counts.stacks_used >= PROF_STACK_SLOTS / 4 * 3) return NO_STACK;
      prof_stack_order[prof_counts.stacks_used++] = (uint32_t)i;
      st->hash = h;
      st->depth = depth;
      memcpy(st->frames, f, depth * sizeof *f);
      return (uint32_t)i;
    }
    if (st->hash == h && st->depth == depth && memcmp(st->frames, f, depth * sizeof *f) == 0)
      return (uint32_t)i;
  }
}

/* ---- live blocks ------------------------------------------------------------------- */
static size_t live_slot(uintptr_t a) { return (size_t)((a >> 4) * 0x9E3779B97F4A7C15ull >> 44); }
_Static_assert(PROF_LIVE_SLOTS == (size_t)1 << 20, "live_slot keeps 20 bits");

static prof_live_t *live_find(uintptr_t a) {
  for (size_t i = live_slot(a);; i = (i + 1) & (PROF_LIVE_SLOTS - 1)) {
    if (live[i].addr == a) return &live[i];
    if (live[i].addr == 0) return NULL;
  }
}

static bool live_add(const prof_live_t *e) {
  if (prof_counts.live_used >= PROF_LIVE_SLOTS / 4 * 3) return false;
  size_t i = live_slot(e->addr);
  while (live[i].addr != 0) i = (i + 1) & (PROF_LIVE_SLOTS - 1);
  live[i] = *e;
  prof_counts.live_used++;
  return true;
}

/* Removes e, moving later entries of its run back (no tombstones). */
static void live_remove(prof_live_t *e) {
  size_t i = (size_t)(e - live);
  for (size_t j = (i + 1) & (PROF_LIVE_SLOTS - 1); live[j].addr != 0; j = (j + 1) & (PROF_LIVE_SLOTS - 1)) {
    size_t home = live_slot(live[j].addr);
    /* live[j] may move to the hole at i if its home is not cyclically in (i, j]. */
    if (((j - home) & (PROF_LIVE_SLOTS - 1)) >= ((j - i) & (PROF_LIVE_SLOTS - 1))) {
      live[i] = live[j];
      i = j;
    }
  }
  live[i].addr = 0;
  prof_counts.live_used--;
}

/* Takes a live entry's counts off its stack. Under prof_lock. */
static void live_drop(prof_live_t *e) {
  double bytes = (double)e->size * e->scale;
  if (e->stack != NO_STACK) {
    prof_stack_t *st = &stacks[e->stack];
    st->inuse_objects -= e->scale;
    st->inuse_bytes -= bytes;
  }
  prof_counts.inuse -= bytes;
  atomic_store_explicit(&prof_counts.inuse_est, (uint64_t)(prof_counts.inuse > 0 ? prof_counts.inuse : 0),
                        memory_order_relaxed);
  if (e->big) atomic_fetch_sub_explicit(&prof_live_big, 1, memory_order_relaxed);
  live_remove(e);
}

static void record(void *p, size_t n, double scale, bool big, const uintptr_t *frames, uint32_t depth) {
  double bytes = (double)n * scale;
  uint32_t idx = stack_find(frames, depth);
  prof_live_t e = {(uintptr_t)p, idx, big, n, scale};
  prof_counts.samples++;
  if (idx == NO_STACK) prof_counts.stacks_dropped++;
  else {
    stacks[idx].alloc_objects += scale;
    stacks[idx].alloc_bytes += bytes;
  }
  if (!live_add(&e)) { /* not tracked: its free will not be seen, so not counted live */
    prof_counts.live_dropped++;
    return;
  }
  if (idx != NO_STACK) {
    stacks[idx].inuse_objects += scale;
    stacks[idx].inuse_bytes += bytes;
  }
  prof_counts.inuse += bytes;
  atomic_store_explicit(&prof_counts.inuse_est, (uint64_t)prof_counts.inuse, memory_order_relaxed);
  if (big) atomic_fetch_add_explicit(&prof_live_big, 1, memory_order_relaxed);
}

/* ---- the pool of sampled small and mid blocks (under prof_lock) -------------------- */
static void *pool_alloc(uint32_t c) {
  slab_t *s = pool_avail[c].head;
  if (s == NULL) {
    pthread_mutex_lock(&region_lock);
    s = span_alloc(class_units[c]);
    if (s != NULL) slab_init(s, c, OWNER_PROF);
    pthread_mutex_unlock(&region_lock);
    if (s == NULL) return NULL;
    stats_note_in_use();
    s->aux = 0;
    queue_push_front(&pool_avail[c], s);
  }
  if (s->free == NULL) slab_extend(s); /* on the avail list: it has room */
  block_t *b = s->free;
  s->free = block_next(b);
  b->free_tag = 0;
  s->used++;
  if (s->free == NULL && s->capacity >= s->reserved) {
    queue_remove(&pool_avail[c], s);
    queue_push_back(&pool_full[c], s);
    s->aux = 1;
  }
  return b;
}

static void pool_free(slab_t *s, block_t *b) {
  uint32_t c = s->class_idx;
  block_set_next(b, s->free);
  b->free_tag = block_free_tag(s);
  s->free = b;
  s->used--;
  if (s->aux) {
    queue_remove(&pool_full[c], s);
    queue_push_front(&pool_avail[c], s);
    s->aux = 0;
  }
  if (s->used == 0 && pool_avail[c].count > 1) { /* keep one empty slab per class */
    queue_remove(&pool_avail[c], s);
    pthread_mutex_lock(&region_lock);
    span_free(s, os_now_ms());
    pthread_mutex_unlock(&region_lock);
  }
}

void prof_free_block(void *p, slab_t *s) {
  pthread_mutex_lock(&prof_lock);
  prof_live_t *e = live != NULL ? live_find((uintptr_t)p) : NULL;
  if (e != NULL) live_drop(e);
  pool_free(s, p);
  pthread_mutex_unlock(&prof_lock);
}

void prof_forget(void *p) {
  pthread_mutex_lock(&prof_lock);
  prof_live_t *e = live_find((uintptr_t)p);
  if (e != NULL) live_drop(e);
  pthread_mutex_unlock(&prof_lock);
}

void *prof_record_small(uint32_t c, size_t n, double scale, const uintptr_t *frames, uint32_t depth) {
  pthread_mutex_lock(&prof_lock);
  void *p = pool_alloc(c);
  if (p != NULL) record(p, n, scale, false, frames, depth);
  pthread_mutex_unlock(&prof_lock);
  return p;
}

void prof_record_big(void *p, size_t n, double scale, const uintptr_t *frames, uint32_t depth) {
  pthread_mutex_lock(&prof_lock);
  record(p, n, scale, true, frames, depth);
  pthread_mutex_unlock(&prof_lock);
}

static int64_t round_value(double v) { return v < 0.5 ? 0 : (int64_t)(v + 0.5); }

size_t prof_snapshot(prof_sample_t *out) {
  size_t n = 0;
  pthread_mutex_lock(&prof_lock);
  for (size_t k = 0; stacks != NULL && k < prof_counts.stacks_used; k++) {
    const prof_stack_t *st = &stacks[prof_stack_order[k]];
    out[n].stack = st->frames;
    out[n].depth = st->depth;
    out[n].values[PROF_ALLOC_OBJECTS] = round_value(st->alloc_objects);
    out[n].values[PROF_ALLOC_SPACE] = round_value(st->alloc_bytes);
    out[n].values[PROF_INUSE_OBJECTS] = round_value(st->inuse_objects);
    out[n].values[PROF_INUSE_SPACE] = round_value(st->inuse_bytes);
    n++;
  }
  pthread_mutex_unlock(&prof_lock);
  return n;
}
