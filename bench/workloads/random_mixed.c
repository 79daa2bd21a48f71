/* random_mixed — one thread, a table of W slots; each step picks a slot at random: an
 * occupied slot is checked and freed, an empty one gets a new block of 16..1040 bytes,
 * stamped at both ends. About half the table is live at any time.
 *
 * usage: bench_random_mixed [OPS=10000000] [WORKING_SET=8192] [SEED=1] [--self-test-corrupt]
 * --self-test-corrupt flips one byte of the first block so the check must fail (exit 1);
 * the harness's tests use it to prove that a wrong result is reported.
 */
#include "bench_common.h"

enum { MIN_SIZE = 16, MAX_SIZE = 1040 };

static bool corrupt;

static void acquire(bench_block *b, bench_rng *rng, uint64_t n) {
  b->size = bench_rng_range(rng, MIN_SIZE, MAX_SIZE);
  b->p = bench_check_alloc(malloc(b->size), b->size);
  bench_stamp(b->p, b->size);
  if (corrupt && n == 0) ((unsigned char *)b->p)[0] ^= 0x5A;
}

int main(int argc, char **argv) {
  bench_init("random_mixed",
             "bench_random_mixed [OPS=10000000] [WORKING_SET=8192] [SEED=1] [--self-test-corrupt]");
  corrupt = bench_take_flag(&argc, argv, "--self-test-corrupt");
  bench_arg_count(argc, 3);
  uint64_t ops = bench_arg_u64(argc, argv, 1, 10000000);
  uint64_t slots = bench_arg_u64(argc, argv, 2, 8192);
  uint64_t seed = bench_arg_u64(argc, argv, 3, 1);
  bench_table_benchmark(ops, slots, seed, acquire, bench_free_stamped, "");
  return 0;
}
