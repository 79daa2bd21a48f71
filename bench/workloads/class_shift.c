/* class_shift — the working set changes size class: is freed memory of one class reused
 * for another, or does the peak grow by the new bytes?
 *
 * 1. Fill WORKING_SET_MIB MiB with SMALL-byte blocks (64), each stamped.
 * 2. Free FREE_PCT percent of them (90), chosen at random: the small blocks left are
 *    scattered over every page of the fill.
 * 3. Allocate as many bytes as were freed in LARGE-byte blocks (4096), a word written in
 *    every page, then check and free everything.
 * RSS (from /proc/self/statm) is read after 1 (rss_fill_kib), 2 (rss_after_free_kib) and
 * 3 (rss_after_shift_kib); peak_rss_kib is the process's high-water mark. An allocator
 * that keeps each class's memory to itself ends at about fill + freed bytes; one that
 * returns or reuses the freed pages stays near the fill. Throughput is all mallocs and
 * frees per second; the figures that matter are the RSS ones.
 *
 * usage: bench_class_shift [WORKING_SET_MIB=256] [FREE_PCT=90] [SEED=1] [SMALL=64] [LARGE=4096]
 */
#include "bench_common.h"

int main(int argc, char **argv) {
  bench_init("class_shift",
             "bench_class_shift [WORKING_SET_MIB=256] [FREE_PCT=90] [SEED=1] "
             "[SMALL=64] [LARGE=4096]");
  bench_arg_count(argc, 5);
  uint64_t working_set = bench_arg_u64(argc, argv, 1, 256) << 20;
  uint64_t free_pct = bench_arg_u64(argc, argv, 2, 90);
  uint64_t seed = bench_arg_u64(argc, argv, 3, 1);
  uint64_t small = bench_arg_u64(argc, argv, 4, 64);
  uint64_t large = bench_arg_u64(argc, argv, 5, 4096);
  if (free_pct > 100) bench_usage("FREE_PCT must be at most 100");
  if (small < 16 || large < 16) bench_usage("SMALL and LARGE must be at least 16");
  bench_rng rng = bench_rng_make(seed, 0);
  double start = bench_now();

  /* 1. the fill */
  size_t count = working_set / small;
  bench_block *blocks = bench_check_alloc(malloc(count * sizeof *blocks), count * sizeof *blocks);
  for (size_t i = 0; i < count; i++) bench_block_touched_new(&blocks[i], small);
  uint64_t rss_fill = bench_rss_kib();

  /* 2. free a random FREE_PCT percent */
  bench_blocks_shuffle(blocks, count, &rng);
  size_t freed = (size_t)((unsigned __int128)count * free_pct / 100);
  for (size_t i = 0; i < freed; i++) bench_block_touched_free(&blocks[i]);
  uint64_t rss_after_free = bench_rss_kib();

  /* 3. the same bytes again, in the other class */
  size_t shifted = freed * small / large;
  bench_block *big = bench_check_alloc(malloc((shifted + 1) * sizeof *big), (shifted + 1) * sizeof *big);
  for (size_t i = 0; i < shifted; i++) bench_block_touched_new(&big[i], large);
  uint64_t rss_after_shift = bench_rss_kib();

  for (size_t i = 0; i < shifted; i++) bench_block_touched_free(&big[i]);
  for (size_t i = freed; i < count; i++) bench_block_touched_free(&blocks[i]);
  free(big);
  free(blocks);
  uint64_t ops = 2 * (count + shifted);
  double seconds = bench_now() - start;

  bench_result(ops, seconds,
               " working_set_mib=%llu free_pct=%llu seed=%llu small=%llu large=%llu "
               "rss_fill_kib=%llu rss_after_free_kib=%llu rss_after_shift_kib=%llu",
               (unsigned long long)(working_set >> 20), (unsigned long long)free_pct,
               (unsigned long long)seed, (unsigned long long)small, (unsigned long long)large,
               (unsigned long long)rss_fill, (unsigned long long)rss_after_free,
               (unsigned long long)rss_after_shift);
  return 0;
}
