/* A window of live, pattern-filled blocks for the sweep tests (C only).
 *
 * tu_block_adopt checks a fresh block (non-NULL, aligned, usable size >= request) and
 * writes a pattern over its whole usable size; tu_block_release verifies that pattern
 * and frees the block the way it was allocated. A window keeps many blocks live and
 * releases a random one for each new one, so a block that overlaps a neighbour shows up
 * as a broken pattern in one of the two.
 */
#ifndef HAKMEM_TEST_BLOCK_WINDOW_H
#define HAKMEM_TEST_BLOCK_WINDOW_H

#include <malloc.h>

#include "test_util.h"

/* How a block is freed. */
enum tu_free_how { TU_FREE, TU_FREE_SIZED, TU_FREE_ALIGNED_SIZED };

typedef struct tu_block {
  void *p;
  size_t n, usable, align;
  uint64_t seed;
  const char *from; /* the allocating call, for messages */
  enum tu_free_how how;
} tu_block;

static inline tu_block tu_block_adopt(const char *from, void *p, size_t n, size_t align, enum tu_free_how how,
                                      uint64_t seed) {
  tu_block b = {p, n, 0, align, seed, from, how};
  REQUIRE(p != NULL, "%s(size %zu, align %zu) returned NULL (errno %d)", from, n, align, errno);
  CHECK(tu_aligned(p, align), "%s(size %zu) = %p not %zu-aligned", from, n, p, align);
  b.usable = malloc_usable_size(p);
  CHECK(b.usable >= n, "%s(size %zu, align %zu) = %p: usable size %zu", from, n, align, p, b.usable);
  tu_fill_here(p, b.usable, seed);
  return b;
}

static inline void tu_block_release(tu_block *b) {
  if (!b->p) return;
  char what[96];
  snprintf(what, sizeof what, "%s(size %zu, align %zu) block, whole usable size", b->from, b->n, b->align);
  tu_verify_here(what, b->p, b->usable, b->seed);
  size_t usable = malloc_usable_size(b->p);
  CHECK(usable == b->usable, "malloc_usable_size(%p) changed from %zu to %zu while live", b->p, b->usable,
        usable);
  switch (b->how) {
  case TU_FREE: free(b->p); break;
  case TU_FREE_SIZED: tu_free_sized(b->p, b->n); break;
  case TU_FREE_ALIGNED_SIZED: tu_free_aligned_sized(b->p, b->align, b->n); break;
  }
  b->p = NULL;
}

enum { TU_WINDOW = 512 };

typedef struct tu_window {
  tu_block slot[TU_WINDOW];
  size_t live_bytes, cap; /* live usable bytes are kept under cap */
  tu_rng *rng;
} tu_window;

/* Adds b, first releasing random blocks: one always, more while over the cap. */
static inline void tu_window_put(tu_window *w, tu_block b) {
  for (;;) {
    size_t i = tu_below(w->rng, TU_WINDOW);
    if (w->slot[i].p) {
      w->live_bytes -= w->slot[i].usable;
      tu_block_release(&w->slot[i]);
    }
    if (w->live_bytes + b.usable <= w->cap || w->live_bytes == 0) {
      w->slot[i] = b;
      w->live_bytes += b.usable;
      return;
    }
  }
}

static inline void tu_window_drain(tu_window *w) {
  for (size_t i = 0; i < TU_WINDOW; i++) tu_block_release(&w->slot[i]);
  w->live_bytes = 0;
}

#endif /* HAKMEM_TEST_BLOCK_WINDOW_H */
