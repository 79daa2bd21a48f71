/* White-box tests of the core data structures, linked against the static library's
 * internals (only the layers they name are pulled in: no malloc of hakmem's runs here).
 *
 *   unit_core classes   the size-class tables against their definitions, size by size
 *   unit_core region    spans taken and freed at random: bitmaps, counts and the unit
 *                       map agree; resident free units are reused first
 *   unit_core slabmap   the flat unit -> slab map follows the spans
 *   unit_core budget    free memory kept resident stays within the purge budget, and
 *                       the budget falls with the peak (times passed in, not waited for)
 *   unit_core remote    the remote word: blocks pushed by threads, counted in its top
 *                       bits, all collected back by the owner
 * Each prints what it checked and exits 1 at the first broken invariant. */
#include "block/block.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond, ...)                                                    \
  do {                                                                      \
    if (!(cond)) {                                                          \
      fprintf(stderr, "unit_core: %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                         \
      fputc('\n', stderr);                                                  \
      exit(1);                                                              \
    }                                                                       \
  } while (0)

static uint64_t rng = 0x243f6a8885a308d3ull;
static uint64_t next_random(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

/* ---- size classes ----------------------------------------------------------------- */
static void test_classes(void) {
  for (uint32_t c = 0; c < NUM_CLASSES; c++) {
    CHECK(class_size[c] % 16 == 0, "class %u: size %u", c, class_size[c]);
    CHECK(c == 0 || class_size[c] > class_size[c - 1], "class %u not above the one below", c);
    CHECK(c < TINY_CLASSES ? class_size[c] <= TINY_MAX : class_size[c] > TINY_MAX, "class %u", c);
    CHECK(c < TINY_CLASSES || class_size[c] % MID_SIZE_STEP == 0, "mid class %u", c);
    size_t bytes = (size_t)class_units[c] * UNIT_SIZE, gap = slab_gap(class_units[c], class_size[c]);
    CHECK(gap < class_size[c] && (bytes - gap) % class_size[c] == 0,
          "class %u: blocks end at the slab's end (gap %zu)", c, gap);
    CHECK((slab_gap(class_units[c], class_size[c]) & (class_align[c] - 1)) == 0,
          "class %u: block 0 aligned to %u", c, class_align[c]);
    CHECK(class_size[c] % class_align[c] == 0, "class %u: every block aligned", c);
    CHECK(class_carve[c] >= 1 && class_carve[c] <= (bytes - gap) / class_size[c], "class %u carve", c);
  }
  CHECK(class_size[NUM_CLASSES - 1] == MID_MAX, "the last class is MID_MAX");
  for (size_t n = 1; n <= MID_MAX; n++) {
    uint32_t c = size_to_class(n);
    CHECK(c < NUM_CLASSES && class_size[c] >= n && (c == 0 || class_size[c - 1] < n),
          "size %zu: class %u is not the smallest that fits", n, c);
    CHECK(n <= 128 || (class_size[c] - n) * 4 < n, "size %zu: more than a quarter lost", n);
    if (n <= TINY_MAX) CHECK(class_size[class_of_direct[(n + 15) >> 4]] >= n, "direct slot");
  }
  for (uint32_t bits = 5; bits <= ALIGN_BITS_MAX; bits++)
    for (uint32_t c = 0; c < NUM_CLASSES; c++) {
      uint32_t want = c;
      while (want < NUM_CLASSES && class_align[want] < (1u << bits)) want++;
      CHECK(class_aligned_from[bits][c] == want, "aligned_from[%u][%u] = %u, not %u", bits, c,
            class_aligned_from[bits][c], want);
    }
  for (uint32_t bits = 0; bits <= ALIGNED_DIRECT_BITS_MAX; bits++)
    for (size_t j = 0; j < ALIGNED_DIRECT_MAX / 16; j++) {
      size_t n = 16 * j + 16;
      if (n < (1u << bits)) continue; /* a request is at least its alignment (posix.c) */
      uint32_t c = size_to_class(n);
      while (c < NUM_CLASSES && class_align[c] < (1u << bits)) c++;
      CHECK(c < NUM_CLASSES && aligned_direct[bits][j] == class_direct_slot(c),
            "aligned_direct[%u][%zu]: slot %u, not class %u's", bits, j, aligned_direct[bits][j], c);
    }
  printf("classes: %d classes, sizes 1..%zu, aligned tables checked\n", NUM_CLASSES, MID_MAX);
}

/* ---- regions -------------------------------------------------------------------------- */
static size_t popcount_words(const uint64_t *w, const uint64_t *and_with, size_t n) {
  size_t c = 0;
  for (size_t i = 0; i < n; i++) c += (size_t)__builtin_popcountll(w[i] & (and_with ? and_with[i] : ~0ull));
  return c;
}

static bool unit_free(const region_t *r, size_t u) { return (r->free_bits[u >> 6] >> (u & 63)) & 1; }

static void check_region(const region_t *r) {
  size_t words = UNITS_PER_REGION / 64;
  CHECK(popcount_words(r->free_bits, NULL, words) == r->free_units, "free_units %u, bits %zu", r->free_units,
        popcount_words(r->free_bits, NULL, words));
  CHECK(popcount_words(r->free_bits, r->dirty_bits, words) == r->dirty_free_units, "dirty_free_units %u",
        r->dirty_free_units);
  for (size_t u = 0; u < REGION_HEADER_UNITS; u++) CHECK(!unit_free(r, u), "header unit %zu free", u);
}

static void check_span(const slab_t *s) {
  region_t *r = region_of((uintptr_t)s);
  CHECK(s == &r->slabs[s->unit_idx], "a span's descriptor is its first unit's");
  CHECK(s->unit_idx >= REGION_HEADER_UNITS &&
            s->unit_idx + s->units <= REGION_HEADER_UNITS + REGION_MAX_SPAN_UNITS,
        "span at %u+%u outside the region's units", s->unit_idx, s->units);
  for (size_t u = s->unit_idx; u < (size_t)s->unit_idx + s->units; u++) {
    CHECK(!unit_free(r, u), "unit %zu of a live span is free", u);
    CHECK(r->unit_map[u] == s, "unit %zu maps to another span", u);
    CHECK(region_slab_of((uintptr_t)r + (u << UNIT_SHIFT) + 123) == s, "region_slab_of");
  }
}

#define SPANS 64
static void test_region(void) {
  slab_t *live[SPANS] = {0};
  uint64_t now = 1000;
  pthread_mutex_lock(&region_lock);
  for (int step = 0; step < 4000; step++) {
    int i = (int)(next_random() % SPANS);
    if (live[i] == NULL) {
      size_t units = 1 + next_random() % (next_random() % 4 == 0 ? 64 : 8);
      live[i] = span_alloc(units);
      CHECK(live[i] != NULL && live[i]->units == units, "span_alloc(%zu)", units);
      live[i]->touched = (uint32_t)(units * UNIT_SIZE); /* as if written */
    } else {
      span_free(live[i], now++);
      live[i] = NULL;
    }
    for (int j = 0; j < SPANS; j++)
      if (live[j] != NULL) {
        check_span(live[j]);
        check_region(region_of((uintptr_t)live[j]));
      }
  }
  /* A span of a size just freed, resident, reuses resident units: no fresh pages. */
  for (int j = 0; j < SPANS; j++)
    if (live[j] != NULL) {
      size_t units = live[j]->units;
      span_free(live[j], now);
      bool fresh = true;
      live[j] = region_alloc_span(units, &fresh);
      CHECK(live[j] != NULL && !fresh, "%zu units just freed were not reused resident", units);
      purge_note_span_taken(units * UNIT_SIZE, fresh);
      check_span(live[j]);
    }
  for (int j = 0; j < SPANS; j++)
    if (live[j] != NULL) span_free(live[j], now);
  pthread_mutex_unlock(&region_lock);
  printf("region: 4000 random span operations, bitmaps, counts and unit map consistent\n");
}

/* ---- slab map -------------------------------------------------------------------------- */
static void test_slabmap(void) {
  pthread_mutex_lock(&region_lock);
  slab_t *s = span_alloc(5);
  CHECK(s != NULL, "span_alloc");
  if (slab_map_units == 0) {
    pthread_mutex_unlock(&region_lock);
    printf("slabmap: not reserved here (address-space limit): skipped\n");
    return;
  }
  uintptr_t base = slab_base(s);
  for (size_t u = 0; u < 5; u++)
    CHECK(slab_map_lookup(base + u * UNIT_SIZE + 8) == s, "unit %zu of the span", u);
  CHECK(slab_map_none(slab_map_lookup(0)), "address 0 finds the zero descriptor");
  CHECK(slab_owner(slab_map_lookup(0)) == OWNER_NONE, "the zero descriptor's owner");
  CHECK(slab_map_lookup(base + 5 * UNIT_SIZE) != s, "the unit past the span");
  span_free(s, 1);
  CHECK(slab_map_none(slab_map_lookup(base)), "a freed span's units find the zero descriptor");
  pthread_mutex_unlock(&region_lock);
  printf("slabmap: lookups follow a span taken and freed\n");
}

/* ---- the purge budget ----------------------------------------------------------------- */
static size_t kept(void) { return region_dirty_units * UNIT_SIZE; }

static void test_budget(void) {
  enum { N = 32 }; /* 1 MiB each */
  slab_t *s[N];
  opt.purge_delay_ms = 1000;
  pthread_mutex_lock(&region_lock);
  size_t kept0 = kept();
  uint64_t t = 10000000;
  for (int i = 0; i < N; i++) {
    s[i] = span_alloc(16);
    CHECK(s[i] != NULL, "span_alloc");
    s[i]->touched = 16 * UNIT_SIZE;
    CHECK(purge_budget_allows(0), "over the budget after a span was taken");
  }
  for (int i = 0; i < N; i++) {
    span_free(s[i], t);
    CHECK(purge_budget_allows(0), "over the budget after a span was freed");
  }
  /* Freed below the peak: all of it may stay, for the peak to come back. */
  CHECK(kept() >= kept0 + (size_t)N * 16 * UNIT_SIZE, "%zu bytes kept, not %d MiB more", kept(), N);
  /* Two peak windows later the peak is what is in use now: the rest goes, down to the
   * slack of 8 MiB, less a sixteenth. */
  for (uint64_t later = t + 1100; later <= t + 2200; later += 1100) {
    slab_t *one = span_alloc(1);
    one->touched = UNIT_SIZE;
    span_free(one, later);
    CHECK(purge_budget_allows(0), "over the budget after the window moved");
  }
  size_t slack = (size_t)8 << 20;
  CHECK(kept() <= slack + region_used_units * UNIT_SIZE / 8, "%zu bytes kept past the peak", kept());
  CHECK(kept() >= slack / 2, "%zu bytes kept: purged far below the budget", kept());
  pthread_mutex_unlock(&region_lock);
  printf("budget: 32 MiB freed below the peak kept; %zu KiB once the peak fell\n", kept() >> 10);
}

/* ---- the remote word ------------------------------------------------------------------- */
#define PUSHERS 4
typedef struct {
  slab_t *s;
  block_t **blocks;
  size_t n;
} pusher_t;

static void *push_blocks(void *arg) {
  pusher_t *p = arg;
  size_t i = 0;
  for (; i + 3 <= p->n; i += 3) { /* chains of 3, as remote_chain_flush pushes */
    block_set_next(p->blocks[i], p->blocks[i + 1]);
    block_set_next(p->blocks[i + 1], p->blocks[i + 2]);
    slab_remote_push(p->s, p->blocks[i], p->blocks[i + 2], 3);
  }
  for (; i < p->n; i++) slab_remote_push_one(p->s, p->blocks[i]);
  return NULL;
}

static void test_remote(void) {
  pthread_mutex_lock(&region_lock);
  slab_t *s = span_alloc(1);
  pthread_mutex_unlock(&region_lock);
  CHECK(s != NULL, "span_alloc");
  uint32_t c = size_to_class(64);
  slab_init(s, c, (uintptr_t)0x4000); /* owned by a heap that is only a number here */
  while (slab_extend(s)) {}
  size_t n = 0;
  block_t **all = calloc(s->capacity, sizeof *all);
  for (block_t *b = s->free; b != NULL; b = block_next(b)) all[n++] = b;
  CHECK(n == s->capacity, "%zu blocks listed, %u carved", n, s->capacity);
  s->free = NULL;
  s->used = (uint16_t)n; /* all of them out */
  pusher_t p[PUSHERS];
  pthread_t t[PUSHERS];
  for (int i = 0; i < PUSHERS; i++) {
    size_t from = n * i / PUSHERS, to = n * (i + 1) / PUSHERS;
    p[i] = (pusher_t){s, all + from, to - from};
    pthread_create(&t[i], NULL, push_blocks, &p[i]);
  }
  for (int i = 0; i < PUSHERS; i++) pthread_join(t[i], NULL);
  uintptr_t word = atomic_load(&s->remote);
  CHECK(word >> REMOTE_COUNT_SHIFT == n, "the remote word counts %zu, not %zu",
        (size_t)(word >> REMOTE_COUNT_SHIFT), n);
  size_t listed = 0;
  for (block_t *b = (block_t *)(word & REMOTE_LIST_MASK); b != NULL; b = block_next(b)) listed++;
  CHECK(listed == n, "%zu blocks on the remote list, %zu pushed", listed, n);
  CHECK(slab_collect(s) == n && s->used == 0 && atomic_load(&s->remote) == 0, "collect");
  size_t back = 0;
  for (block_t *b = s->free; b != NULL; b = block_next(b)) back++;
  CHECK(back == n, "%zu blocks back on the free list, %zu pushed", back, n);
  CHECK(slab_collect(s) == 0, "a second collect finds nothing");
  free(all);
  pthread_mutex_lock(&region_lock);
  span_free(s, 1);
  pthread_mutex_unlock(&region_lock);
  printf("remote: %zu blocks pushed by %d threads, counted and collected\n", n, PUSHERS);
}

int main(int argc, char **argv) {
  options_init();
  size_class_init();
  const char *what = argc > 1 ? argv[1] : "all";
  bool all = strcmp(what, "all") == 0;
  if (all || strcmp(what, "classes") == 0) test_classes();
  if (all || strcmp(what, "region") == 0) test_region();
  if (all || strcmp(what, "slabmap") == 0) test_slabmap();
  if (all || strcmp(what, "budget") == 0) test_budget();
  if (all || strcmp(what, "remote") == 0) test_remote();
  return 0;
}
