/* huge — blocks above 32 MiB, grown by realloc.
 *
 * OPS times: allocate a block of log-uniform size in MIN..MAX (default 33 MiB .. 256 MiB),
 * write one word every STRIDE bytes (default 64 KiB, every 16th page: huge blocks are
 * mapped and returned whole, the cost under test is the mapping, not the first touch of
 * each page), grow it by realloc to 1.5x (contents must survive; an allocator can move
 * the pages instead of copying them), write the new part, check everything and free it.
 * Two blocks are live at a time: each step frees the older one. Throughput is blocks per
 * second.
 *
 * usage: bench_huge [OPS=40] [SEED=1] [MIN=34603008] [MAX=268435456] [STRIDE=65536]
 */
#include "bench_common.h"

int main(int argc, char **argv) {
  bench_init("huge", "bench_huge [OPS=40] [SEED=1] [MIN=34603008] [MAX=268435456] [STRIDE=65536]");
  bench_arg_count(argc, 5);
  uint64_t ops = bench_arg_u64(argc, argv, 1, 40);
  uint64_t seed = bench_arg_u64(argc, argv, 2, 1);
  uint64_t min_size = bench_arg_u64(argc, argv, 3, 34603008);
  uint64_t max_size = bench_arg_u64(argc, argv, 4, 268435456);
  uint64_t stride = bench_arg_u64(argc, argv, 5, 65536);
  if (min_size < 16 || max_size < min_size || stride < 8)
    bench_usage("need 16 <= MIN <= MAX and STRIDE >= 8");

  bench_block live[2] = {{NULL, 0}, {NULL, 0}};
  bench_rng rng = bench_rng_make(seed, 0);
  uint64_t bytes = 0;

  double start = bench_now();
  for (uint64_t i = 0; i < ops; i++) {
    bench_block *b = &live[i % 2];
    if (b->p != NULL) {
      if (!bench_touch_ok(b->p, b->size, stride, seed))
        bench_fail("huge block %p of %zu bytes was overwritten", b->p, b->size);
      free(b->p);
    }
    size_t size = bench_rng_log_range(&rng, min_size, max_size);
    void *p = bench_check_alloc(malloc(size), size);
    bench_touch(p, size, stride, seed);
    size_t grown = size + size / 2;
    b->p = bench_check_alloc(realloc(p, grown), grown);
    if (!bench_touch_ok(b->p, size, stride, seed))
      bench_fail("realloc of a huge block from %zu to %zu bytes lost its contents", size, grown);
    b->size = grown;
    bench_touch(b->p, grown, stride, seed);
    bytes += grown;
  }
  for (int s = 0; s < 2; s++) free(live[s].p);
  double seconds = bench_now() - start;

  bench_result(ops, seconds, " seed=%llu min=%llu max=%llu stride=%llu bytes_allocated=%llu",
               (unsigned long long)seed, (unsigned long long)min_size, (unsigned long long)max_size,
               (unsigned long long)stride, (unsigned long long)bytes);
  return 0;
}
