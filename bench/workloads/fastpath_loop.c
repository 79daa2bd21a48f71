/* fastpath_loop — the allocator's fast paths, for counting instructions under callgrind.
 *
 *   fixed SIZE ITERATIONS: ITERATIONS times malloc(SIZE), write a word, read it back,
 *       free: the same-size pair that a thread cache should serve in a few instructions.
 *   ring ITERATIONS [RING=1000] [SEED=1]: a ring of RING live blocks of 16..1040 bytes
 *       (sizes from a precomputed table, so the generator costs nothing per step); each
 *       step checks and frees the oldest block and allocates a new one in its place.
 * Running with ITERATIONS = 0 does everything but the loop (start-up, ring fill and
 * drain), so (instructions(N) - instructions(0)) / N is the cost of one malloc+free pair
 * plus a few instructions of loop and check.
 *
 * usage: bench_fastpath_loop fixed SIZE ITERATIONS
 *        bench_fastpath_loop ring ITERATIONS [RING=1000] [SEED=1]
 */
#include "bench_common.h"

enum { SIZE_TABLE = 1024 /* power of two */, RING_MIN = 16, RING_MAX = 1040 };

static void put_tag(void *p, uint64_t tag)
{
    memcpy(p, &tag, sizeof tag);
}

static void check_tag(const void *p, uint64_t tag)
{
    uint64_t got;
    memcpy(&got, p, sizeof got);
    if (got != tag)
        bench_fail("block %p holds %llx, expected %llx", p, (unsigned long long)got,
                   (unsigned long long)tag);
}

static void run_fixed(size_t size, uint64_t iterations)
{
    if (size < 8)
        bench_usage("SIZE must be at least 8");
    for (uint64_t i = 0; i < iterations; i++) {
        void *p = bench_check_alloc(malloc(size), size);
        put_tag(p, i);
        bench_escape(p);
        check_tag(p, i);
        free(p);
    }
}

static void run_ring(uint64_t iterations, uint64_t ring_size, uint64_t seed)
{
    if (ring_size < 1)
        bench_usage("RING must be at least 1");
    size_t sizes[SIZE_TABLE];
    bench_rng rng = bench_rng_make(seed, 0);
    for (int i = 0; i < SIZE_TABLE; i++)
        sizes[i] = bench_rng_range(&rng, RING_MIN, RING_MAX);
    void **ring = bench_check_alloc(malloc(ring_size * sizeof *ring), ring_size * sizeof *ring);
    uint64_t *tags = bench_check_alloc(malloc(ring_size * sizeof *tags), ring_size * sizeof *tags);
    for (uint64_t k = 0; k < ring_size; k++) {
        size_t size = sizes[k % SIZE_TABLE];
        ring[k] = bench_check_alloc(malloc(size), size);
        tags[k] = k;
        put_tag(ring[k], k);
    }
    uint64_t slot = 0;
    for (uint64_t i = 0; i < iterations; i++) {
        check_tag(ring[slot], tags[slot]);
        free(ring[slot]);
        size_t size = sizes[i % SIZE_TABLE];
        ring[slot] = bench_check_alloc(malloc(size), size);
        tags[slot] = i;
        put_tag(ring[slot], i);
        if (++slot == ring_size)
            slot = 0;
    }
    for (uint64_t k = 0; k < ring_size; k++) {
        check_tag(ring[k], tags[k]);
        free(ring[k]);
    }
    free(tags);
    free(ring);
}

int main(int argc, char **argv)
{
    bench_init("fastpath_loop", "bench_fastpath_loop fixed SIZE ITERATIONS | "
                                "bench_fastpath_loop ring ITERATIONS [RING=1000] [SEED=1]");
    if (argc >= 2 && strcmp(argv[1], "fixed") == 0) {
        bench_arg_count(argc, 3);
        if (argc != 4)
            bench_usage("fixed needs SIZE and ITERATIONS");
        size_t size = bench_arg_u64(argc, argv, 2, 0);
        uint64_t iterations = bench_arg_u64(argc, argv, 3, 0);
        double start = bench_now();
        run_fixed(size, iterations);
        bench_result(iterations, bench_now() - start, " mode=fixed size=%zu", size);
    } else if (argc >= 2 && strcmp(argv[1], "ring") == 0) {
        bench_arg_count(argc, 4);
        if (argc < 3)
            bench_usage("ring needs ITERATIONS");
        uint64_t iterations = bench_arg_u64(argc, argv, 2, 0);
        uint64_t ring_size = bench_arg_u64(argc, argv, 3, 1000);
        uint64_t seed = bench_arg_u64(argc, argv, 4, 1);
        double start = bench_now();
        run_ring(iterations, ring_size, seed);
        bench_result(iterations, bench_now() - start, " mode=ring ring=%llu seed=%llu",
                     (unsigned long long)ring_size, (unsigned long long)seed);
    } else {
        bench_usage("MODE must be fixed or ring");
    }
    return 0;
}
