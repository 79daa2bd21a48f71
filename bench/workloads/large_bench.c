/* large — blocks of 64 KiB .. 32 MiB, every page touched.
 *
 * A table of WORKING_SET slots; each step picks a slot at random: an occupied slot is
 * checked and freed, an empty one gets a block of log-uniform size in MIN..MAX with one
 * word written in every page (so page faults and the allocator's reuse or return of
 * memory to the OS show in the time and RSS). Throughput is operations per second.
 *
 * usage: bench_large [OPS=4000] [WORKING_SET=16] [SEED=1] [MIN=65536] [MAX=33554432]
 */
#include "bench_common.h"

enum { PAGE = 4096 };

static uint64_t min_size, max_size;

static void acquire(bench_block *b, bench_rng *rng, uint64_t n)
{
    (void)n;
    b->size = bench_rng_log_range(rng, min_size, max_size);
    b->p = bench_check_alloc(malloc(b->size), b->size);
    bench_touch(b->p, b->size, PAGE, bench_tag(b->p, b->size));
}

static void release(bench_block *b)
{
    if (!bench_touch_ok(b->p, b->size, PAGE, bench_tag(b->p, b->size)))
        bench_fail("large block %p of %zu bytes was overwritten", b->p, b->size);
    free(b->p);
}

int main(int argc, char **argv)
{
    bench_init("large", "bench_large [OPS=4000] [WORKING_SET=16] [SEED=1] [MIN=65536] [MAX=33554432]");
    bench_arg_count(argc, 5);
    uint64_t ops = bench_arg_u64(argc, argv, 1, 4000);
    uint64_t slots = bench_arg_u64(argc, argv, 2, 16);
    uint64_t seed = bench_arg_u64(argc, argv, 3, 1);
    min_size = bench_arg_u64(argc, argv, 4, 65536);
    max_size = bench_arg_u64(argc, argv, 5, 33554432);
    if (min_size < 16 || max_size < min_size)
        bench_usage("need 16 <= MIN <= MAX");
    char extra[80];
    snprintf(extra, sizeof extra, " min=%llu max=%llu", (unsigned long long)min_size,
             (unsigned long long)max_size);
    bench_table_benchmark(ops, slots, seed, acquire, release, extra);
    return 0;
}
