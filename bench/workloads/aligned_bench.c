/* aligned — aligned allocation with alignments 16..4096.
 *
 * A table of WORKING_SET slots; each step picks a slot at random: an occupied slot is
 * checked and freed, an empty one gets a block of 16..1040 bytes at a random power-of-two
 * alignment in 16..4096, alternately from posix_memalign and from aligned_alloc (whose
 * size is rounded up to a multiple of the alignment, as C11 asks). Every pointer is
 * checked to be aligned, and the block is stamped. Peak RSS shows the memory an allocator
 * wastes to align. Throughput is operations per second.
 *
 * usage: bench_aligned [OPS=2000000] [WORKING_SET=4096] [SEED=1]
 */
#include "bench_common.h"

enum { MIN_SIZE = 16, MAX_SIZE = 1040, MIN_ALIGN_BITS = 4, MAX_ALIGN_BITS = 12 };

static void *aligned_block(size_t alignment, size_t *size, bool use_posix) {
  void *p = NULL;
  if (use_posix) {
    int err = posix_memalign(&p, alignment, *size);
    if (err != 0) bench_fail("posix_memalign(%zu, %zu) failed: %s", alignment, *size, strerror(err));
  } else {
    *size = (*size + alignment - 1) / alignment * alignment;
    p = bench_check_alloc(aligned_alloc(alignment, *size), *size);
  }
  if ((uintptr_t)p % alignment != 0)
    bench_fail("%s(%zu, %zu) gave %p, not aligned", use_posix ? "posix_memalign" : "aligned_alloc", alignment,
               *size, p);
  return p;
}

static void acquire(bench_block *b, bench_rng *rng, uint64_t n) {
  size_t alignment = (size_t)1 << bench_rng_range(rng, MIN_ALIGN_BITS, MAX_ALIGN_BITS);
  b->size = bench_rng_range(rng, MIN_SIZE, MAX_SIZE);
  b->p = aligned_block(alignment, &b->size, n % 2 == 0);
  bench_stamp(b->p, b->size);
}

int main(int argc, char **argv) {
  bench_init("aligned", "bench_aligned [OPS=2000000] [WORKING_SET=4096] [SEED=1]");
  bench_arg_count(argc, 3);
  uint64_t ops = bench_arg_u64(argc, argv, 1, 2000000);
  uint64_t slots = bench_arg_u64(argc, argv, 2, 4096);
  uint64_t seed = bench_arg_u64(argc, argv, 3, 1);
  bench_table_benchmark(ops, slots, seed, acquire, bench_free_stamped, "");
  return 0;
}
