/* Space overhead of small blocks: 1,000,000 live 32-byte blocks (30.5 MiB of payload)
 * must fit in at most 34 MiB of RSS above the baseline. */
#include "memory_test.h"

#define BLOCKS 1000000
#define BLOCK_SIZE 32

int main(void) {
  void **blocks = mt_scratch(BLOCKS * sizeof *blocks);
  mt_warm_up();
  size_t baseline = mt_rss("baseline");
  for (size_t i = 0; i < BLOCKS; i++) blocks[i] = mt_malloc_touched(BLOCK_SIZE);
  size_t live = mt_rss("1,000,000 blocks of 32 B live");
  mt_print_info("allocator:");
  size_t used = live > baseline ? live - baseline : 0;
  printf("%.2f bytes of RSS per 32-byte block\n", (double)used / BLOCKS);
  mt_require_grew(baseline, live, (size_t)BLOCKS * BLOCK_SIZE * 9 / 10);
  mt_require_at_most("RSS above the baseline", used, 34 * MiB);
  for (size_t i = 0; i < BLOCKS; i++) free(blocks[i]);
  mt_scratch_free(blocks, BLOCKS * sizeof *blocks);
  printf("PASS\n");
  return 0;
}
