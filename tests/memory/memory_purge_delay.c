/* Freed memory kept for reuse goes back to the OS after the purge delay (the default,
 * 100 ms), without malloc_trim, while the program goes on with small allocations.
 *
 * The working set mixes large blocks (128 KiB..8 MiB, about 192 MiB in all) and two huge
 * blocks that fit a mapping of 64 MiB (which hakmem keeps after the free, for reuse),
 * all written and then freed; freed while they are below the peak of use, they stay
 * resident at first. Then a ring of small blocks is churned for 300 ms: of mixed sizes,
 * or with the argument "fixed" all of one size, so that every malloc finds the block
 * the free before it gave back and no class ever runs out of blocks (the purge must not
 * depend on malloc's refills).
 * Bound: RSS at the end <= baseline + 5 MiB.
 */
#include "memory_test.h"

#define LARGE_BYTES (192 * MiB)
#define MAX_BLOCKS 1024
#define CONTINUE_MS 300
#define RING 1000

int main(int argc, char **argv) {
  bool fixed = argc > 1 && strcmp(argv[1], "fixed") == 0;
  void **blocks = mt_scratch(MAX_BLOCKS * sizeof *blocks);
  mt_warm_up();
  size_t baseline = mt_rss("baseline");

  tu_rng rng = tu_rng_make(5, 0);
  size_t n = 0, bytes = 0;
  blocks[n++] = mt_malloc_touched(40 * MiB);
  blocks[n++] = mt_malloc_touched(33 * MiB);
  while (bytes < LARGE_BYTES && n < MAX_BLOCKS) {
    size_t size = tu_range(&rng, 128 * KiB, 8 * MiB);
    blocks[n++] = mt_malloc_touched(size);
    bytes += size;
  }
  size_t peak = mt_rss("working set written");
  mt_require_grew(baseline, peak, (LARGE_BYTES + 73 * MiB) * 9 / 10);
  for (size_t i = 0; i < n; i++) free(blocks[i]);
  mt_rss("all freed");

  void *ring[RING] = {0};
  mt_churn_ring(ring, RING, CONTINUE_MS, fixed ? 64 : 0);
  size_t after = mt_rss("after 300 ms of small allocations");
  mt_print_info("allocator, at the end:");
  mt_require_at_most("RSS at the end", after, baseline + 5 * MiB);
  for (int i = 0; i < RING; i++) free(ring[i]);
  mt_scratch_free(blocks, MAX_BLOCKS * sizeof *blocks);
  printf("PASS\n");
  return 0;
}
