/* Churning large blocks reuses the memory freed by the previous ones instead of
 * purging it and faulting it in again.
 *
 * 16 slots; each step picks one at random and frees its block, or gives it a new one of
 * log-uniform size between 64 KiB and 32 MiB with every page written (the benchmark
 * `large`). The purge delay is set long by the test's environment, so that only the
 * purge budget can give memory back during the churn. Freed holes seldom fit the next
 * block exactly: a budget that keeps too little slack over the peak purges memory that
 * the next blocks fault in again.
 * Bound: page faults during the churn <= 1.4x the pages of the RSS the churn added at
 * its peak (every page it touches once, plus some reuse misses). With 32 MiB regions
 * and a fixed 8 MiB of slack, hakmem took 2.9x; now 1.07x.
 */
#include <sys/resource.h>

#include "memory_test.h"

enum { SLOTS = 16, STEPS = 600 };

static long minor_faults(void) {
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) != 0) mt_fail("getrusage failed");
  return ru.ru_minflt;
}

static size_t log_uniform(tu_rng *rng, unsigned lo_bits, unsigned hi_bits) {
  unsigned bits = lo_bits + (unsigned)tu_below(rng, hi_bits - lo_bits + 1);
  size_t lo = (size_t)1 << bits, hi = (size_t)1 << hi_bits;
  size_t top = bits == hi_bits ? hi : 2 * lo - 1;
  return (size_t)tu_range(rng, lo, top);
}

int main(void) {
  mt_warm_up();
  size_t baseline = mt_rss("baseline");
  tu_rng rng = tu_rng_make(1, 0);
  char *blocks[SLOTS] = {0};
  size_t peak = baseline;
  long faults_before = minor_faults();
  for (int step = 0; step < STEPS; step++) {
    size_t i = (size_t)tu_below(&rng, SLOTS);
    if (blocks[i] != NULL) {
      free(blocks[i]);
      blocks[i] = NULL;
      continue;
    }
    blocks[i] = mt_malloc_touched(log_uniform(&rng, 16, 25));
    size_t rss = tu_rss_bytes();
    if (rss > peak) peak = rss;
  }
  long faults = minor_faults() - faults_before;
  for (size_t i = 0; i < SLOTS; i++) free(blocks[i]);
  printf("%-34s RSS %8.1f MiB\n", "peak during the churn", mt_mib(peak));
  mt_require_grew(baseline, peak, 64 * MiB);
  size_t page = tu_page();
  size_t peak_pages = (peak - baseline) / page;
  printf("%-34s %8ld (%.2f per page of peak growth)\n", "page faults during the churn", faults,
         (double)faults / (double)peak_pages);
  mt_print_info("allocator, at the end:");
  mt_require_at_most("memory faulted in during the churn", (size_t)faults * page,
                     peak_pages * page * 14 / 10);
  printf("PASS\n");
  return 0;
}
