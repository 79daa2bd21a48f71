/* calloc — zeroed allocation, with memory that was dirty before.
 *
 * A table of WORKING_SET slots; each step picks a slot at random: an occupied slot is
 * freed, an empty one gets calloc(count, 16) with a log-uniform total of 16..MAX_SIZE
 * bytes. Every new block is checked to be all zero, then written all over with a non-zero
 * byte, so reused memory must really be cleared again. A calloc whose count * size
 * overflows must return NULL. Throughput is calloc+free operations per second.
 *
 * usage: bench_calloc [OPS=1000000] [WORKING_SET=256] [MAX_SIZE=65536] [SEED=1]
 */
#include "bench_common.h"

enum { ELEMENT = 16, DIRT = 0xA5 };

static void check_zero(const unsigned char *p, size_t size) {
  size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    uint64_t w;
    memcpy(&w, p + i, 8);
    if (w != 0) break;
  }
  for (; i < size; i++)
    if (p[i] != 0)
      bench_fail("calloc block %p of %zu bytes has byte %zu = 0x%02x", (const void *)p, size, i, p[i]);
}

static uint64_t max_size;

static void acquire(bench_block *b, bench_rng *rng, uint64_t n) {
  (void)n;
  size_t count = bench_rng_log_range(rng, ELEMENT, max_size) / ELEMENT;
  b->size = count * ELEMENT;
  b->p = bench_check_alloc(calloc(count, ELEMENT), b->size);
  check_zero(b->p, b->size);
  memset(b->p, DIRT, b->size);
}

static void release(bench_block *b) { free(b->p); }

int main(int argc, char **argv) {
  bench_init("calloc", "bench_calloc [OPS=1000000] [WORKING_SET=256] [MAX_SIZE=65536] [SEED=1]");
  bench_arg_count(argc, 4);
  uint64_t ops = bench_arg_u64(argc, argv, 1, 1000000);
  uint64_t slots = bench_arg_u64(argc, argv, 2, 256);
  max_size = bench_arg_u64(argc, argv, 3, 65536);
  uint64_t seed = bench_arg_u64(argc, argv, 4, 1);
  if (max_size < ELEMENT) bench_usage("MAX_SIZE must be at least 16");

  volatile size_t huge_count = SIZE_MAX / 2; /* volatile: not folded at compile time */
  void *overflow = calloc(huge_count, 4);
  if (overflow != NULL) bench_fail("calloc(SIZE_MAX / 2, 4) did not return NULL");
  char extra[64];
  snprintf(extra, sizeof extra, " max_size=%llu", (unsigned long long)max_size);
  bench_table_benchmark(ops, slots, seed, acquire, release, extra);
  return 0;
}
