/* memory_behaviour — does RSS fall back after a large working set is freed?
 *
 * 1. Allocate WORKING_SET_MIB MiB of blocks: 90% of them 16..1040 bytes, 10% log-uniform
 *    1 KiB..64 KiB, each stamped and with a word written in every page.
 * 2. Free them in random order, keeping every KEEP_EVERY-th one (0 keeps none).
 * 3. Go on for CONTINUE_MS milliseconds with small allocations: a ring of 1000 blocks of
 *    16..1040 bytes, each step freeing the oldest. No malloc_trim is called: the allocator
 *    must give memory back on its own.
 * RSS (from /proc/self/statm) is read after 1 (rss_peak_kib), after 2
 * (rss_after_free_kib) and after 3 (rss_after_continue_kib). Throughput is all mallocs and
 * frees of the three phases per second; the figures that matter are the RSS ones.
 *
 * usage: bench_memory_behaviour [WORKING_SET_MIB=512] [KEEP_EVERY=100] [CONTINUE_MS=300] [SEED=1]
 */
#include "bench_common.h"

enum { RING = 1000, SMALL_MIN = 16, SMALL_MAX = 1040, MEDIUM_MIN = 1024, MEDIUM_MAX = 65536 };

int main(int argc, char **argv) {
  bench_init("memory_behaviour",
             "bench_memory_behaviour [WORKING_SET_MIB=512] [KEEP_EVERY=100] "
             "[CONTINUE_MS=300] [SEED=1]");
  bench_arg_count(argc, 4);
  uint64_t working_set = bench_arg_u64(argc, argv, 1, 512) << 20;
  uint64_t keep_every = bench_arg_u64(argc, argv, 2, 100);
  double continue_seconds = (double)bench_arg_u64(argc, argv, 3, 300) / 1000.0;
  uint64_t seed = bench_arg_u64(argc, argv, 4, 1);
  bench_rng rng = bench_rng_make(seed, 0);
  uint64_t ops = 0;
  double start = bench_now();

  /* 1. the working set */
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
  ops += count;
  uint64_t rss_peak = bench_rss_kib();

  /* 2. free most of it, in random order */
  bench_blocks_shuffle(blocks, count, &rng);
  size_t kept = 0;
  for (size_t i = 0; i < count; i++) {
    if (keep_every != 0 && i % keep_every == 0) {
      blocks[kept++] = blocks[i];
    } else {
      bench_block_touched_free(&blocks[i]);
      ops++;
    }
  }
  uint64_t rss_after_free = bench_rss_kib();

  /* 3. carry on with small blocks */
  bench_block ring[RING];
  for (int i = 0; i < RING; i++)
    bench_block_touched_new(&ring[i], bench_rng_range(&rng, SMALL_MIN, SMALL_MAX));
  ops += RING;
  double continue_end = bench_now() + continue_seconds;
  for (uint64_t step = 0;; step++) {
    if (step % 1024 == 0 && bench_now() >= continue_end) break;
    bench_block *b = &ring[step % RING];
    bench_block_touched_free(b);
    bench_block_touched_new(b, bench_rng_range(&rng, SMALL_MIN, SMALL_MAX));
    ops += 2;
  }
  uint64_t rss_after_continue = bench_rss_kib();

  for (int i = 0; i < RING; i++) bench_block_touched_free(&ring[i]);
  for (size_t i = 0; i < kept; i++) bench_block_touched_free(&blocks[i]);
  ops += RING + kept;
  free(blocks);
  double seconds = bench_now() - start;

  bench_result(ops, seconds,
               " working_set_mib=%llu keep_every=%llu continue_ms=%.0f seed=%llu "
               "blocks=%zu kept=%zu rss_peak_kib=%llu rss_after_free_kib=%llu "
               "rss_after_continue_kib=%llu",
               (unsigned long long)(working_set >> 20), (unsigned long long)keep_every,
               continue_seconds * 1000.0, (unsigned long long)seed, count, kept, (unsigned long long)rss_peak,
               (unsigned long long)rss_after_free, (unsigned long long)rss_after_continue);
  return 0;
}
