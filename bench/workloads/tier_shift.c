/* tier_shift — the working set moves from small and mid blocks to huge ones: does the
 * memory freed by the first phase stay resident while the second maps its own?
 *
 * For ROUNDS rounds:
 * 1. Allocate WORKING_SET_MIB MiB of blocks, 16..1040 bytes (90%) and log-uniform
 *    1 KiB..64 KiB (10%), a word written in every page, and free them all.
 * 2. At once (within any purge delay), allocate WORKING_SET_MIB MiB as huge blocks of
 *    HUGE_MIB MiB, written whole, check and free them.
 * An allocator that keeps freed memory resident for reuse (until a delay passes, or
 * within a budget) peaks at about twice the working set; one that gives it back before
 * mapping more (a soft memory limit under twice the set) peaks near the set.
 * rss_after_free_kib is read after the first round's step 1, rss_shift_kib after its
 * step 2's allocations; peak_rss_kib is the process's high-water mark. Throughput is
 * every malloc and free per second.
 *
 * usage: bench_tier_shift [WORKING_SET_MIB=256] [HUGE_MIB=64] [ROUNDS=3] [SEED=1]
 */
#include "bench_common.h"

enum { SMALL_MIN = 16, SMALL_MAX = 1040, MEDIUM_MIN = 1024, MEDIUM_MAX = 65536 };

int main(int argc, char **argv) {
  bench_init("tier_shift", "bench_tier_shift [WORKING_SET_MIB=256] [HUGE_MIB=64] [ROUNDS=3] [SEED=1]");
  bench_arg_count(argc, 4);
  uint64_t working_set = bench_arg_u64(argc, argv, 1, 256) << 20;
  size_t huge = (size_t)bench_arg_u64(argc, argv, 2, 64) << 20;
  uint64_t rounds = bench_arg_u64(argc, argv, 3, 3);
  bench_rng rng = bench_rng_make(bench_arg_u64(argc, argv, 4, 1), 0);
  if (huge == 0 || rounds == 0) bench_usage("HUGE_MIB and ROUNDS must be at least 1");
  size_t huge_count = (size_t)((working_set + huge - 1) / huge);
  bench_block *hs = bench_check_alloc(calloc(huge_count, sizeof *hs), huge_count * sizeof *hs);
  uint64_t ops = 0, rss_after_free = 0, rss_shift = 0;
  double start = bench_now();
  for (uint64_t round = 0; round < rounds; round++) {
    size_t count = 0, capacity = 1024, bytes = 0;
    bench_block *blocks = bench_check_alloc(malloc(capacity * sizeof *blocks), capacity * sizeof *blocks);
    while (bytes < working_set) {
      if (count == capacity) {
        capacity *= 2;
        blocks = bench_check_alloc(realloc(blocks, capacity * sizeof *blocks), capacity * sizeof *blocks);
      }
      size_t size = bench_rng_below(&rng, 10) == 0 ? bench_rng_log_range(&rng, MEDIUM_MIN, MEDIUM_MAX)
                                                   : bench_rng_range(&rng, SMALL_MIN, SMALL_MAX);
      bench_block_touched_new(&blocks[count++], size);
      bytes += size;
    }
    bench_blocks_shuffle(blocks, count, &rng);
    for (size_t i = 0; i < count; i++) bench_block_touched_free(&blocks[i]);
    free(blocks);
    ops += 2 * count;
    if (round == 0) rss_after_free = bench_rss_kib();
    for (size_t i = 0; i < huge_count; i++) {
      hs[i].size = huge;
      hs[i].p = bench_check_alloc(malloc(huge), huge);
      bench_fill(hs[i].p, 0, huge, bench_tag(hs[i].p, huge));
    }
    if (round == 0) rss_shift = bench_rss_kib();
    for (size_t i = 0; i < huge_count; i++) {
      if (bench_fill_mismatch(hs[i].p, 0, huge, bench_tag(hs[i].p, huge)) != huge)
        bench_fail("huge block %p was overwritten", hs[i].p);
      free(hs[i].p);
    }
    ops += 2 * huge_count;
  }
  free(hs);
  double seconds = bench_now() - start;
  bench_result(ops, seconds,
               " working_set_mib=%llu huge_mib=%zu rounds=%llu rss_after_free_kib=%llu "
               "rss_shift_kib=%llu",
               (unsigned long long)(working_set >> 20), huge >> 20, (unsigned long long)rounds,
               (unsigned long long)rss_after_free, (unsigned long long)rss_shift);
  return 0;
}
