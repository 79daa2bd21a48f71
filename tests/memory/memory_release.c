/* Freed memory goes back to the OS.
 *
 *   memory_release trim    after freeing a 400 MiB working set, malloc_trim(0) returns 1
 *                          and RSS is back to the baseline (memory_trim)
 *   memory_release purge   the same without malloc_trim, run with HAKMEM_PURGE_DELAY_MS=0:
 *                          purging on the way must have done it (memory_purge_delay0)
 *
 * The working set mixes small blocks (16..1040 B) and large ones (64 KiB..1 MiB) in
 * about equal bytes, all written, then freed in a shuffled order.
 * Bound: RSS after <= baseline * 1.10 + 4 MiB.
 */
#include <malloc.h>

#include "memory_test.h"

#define WORKING_SET (400 * MiB)
#define MAX_BLOCKS ((size_t)1 << 20)

int main(int argc, char **argv) {
  bool trim = argc == 2 && strcmp(argv[1], "trim") == 0;
  if (argc != 2 || (!trim && strcmp(argv[1], "purge") != 0)) {
    fprintf(stderr, "usage: memory_release trim|purge\n");
    return 2;
  }
  mt_warm_up();
  if (trim) malloc_trim(0); /* what the warm-up left is not the workload's */
  size_t baseline = mt_rss("baseline");
  void **blocks = mt_scratch(MAX_BLOCKS * sizeof *blocks); /* unmapped before the end */

  tu_rng rng = tu_rng_make(42, 0);
  size_t n = 0, bytes = 0;
  while (bytes < WORKING_SET && n < MAX_BLOCKS) {
    /* One large block per thousand small ones gives about equal bytes of each. */
    size_t size = tu_below(&rng, 1000) == 0 ? tu_range(&rng, 64 * KiB, 1 * MiB) : tu_range(&rng, 16, 1040);
    blocks[n++] = mt_malloc_touched(size);
    bytes += size;
  }
  printf("allocated %zu blocks, %.1f MiB\n", n, mt_mib(bytes));
  size_t peak = mt_rss("working set written");
  mt_print_info("allocator, working set live:");
  mt_require_grew(baseline, peak, WORKING_SET * 9 / 10);

  for (size_t i = n - 1; i > 0; i--) { /* shuffle, then free in that order */
    size_t j = tu_below(&rng, i + 1);
    void *t = blocks[i];
    blocks[i] = blocks[j];
    blocks[j] = t;
  }
  for (size_t i = 0; i < n; i++) free(blocks[i]);
  mt_scratch_free(blocks, MAX_BLOCKS * sizeof *blocks);
  mt_rss("all freed");

  if (trim) {
    mt_trim_must_release();
  } else {
    for (int i = 0; i < 64; i++) free(mt_malloc_touched(16 + (size_t)i * 16));
  }
  size_t after = mt_rss(trim ? "after malloc_trim" : "after a few small mallocs");
  mt_print_info("allocator, at the end:");
  mt_require_at_most("RSS at the end", after, baseline + baseline / 10 + 4 * MiB);
  printf("PASS\n");
  return 0;
}
