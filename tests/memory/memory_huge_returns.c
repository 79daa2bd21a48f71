/* A huge block goes back to the OS when it is freed, without malloc_trim: a 256 MiB
 * block, written, then freed, leaves RSS at most 8 MiB above the baseline. */
#include "memory_test.h"

#define HUGE_BLOCK (256 * MiB)

int main(void) {
  mt_warm_up();
  size_t baseline = mt_rss("baseline");
  char *p = mt_malloc_touched(HUGE_BLOCK);
  size_t peak = mt_rss("256 MiB block written");
  mt_require_grew(baseline, peak, HUGE_BLOCK - 8 * MiB);
  free(p);
  size_t after = mt_rss("freed");
  mt_print_info("allocator, at the end:");
  mt_require_at_most("RSS after the free", after, baseline + 8 * MiB);
  printf("PASS\n");
  return 0;
}
