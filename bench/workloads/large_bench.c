/* large — blocks of 64 KiB .. 32 MiB, every page touched.
 *
 * A table of WORKING_SET slots per thread; each step picks a slot at random: an occupied
 * slot is checked and freed, an empty one gets a block of log-uniform size in MIN..MAX
 * with one word written in every page (so page faults and the allocator's reuse or return
 * of memory to the OS show in the time, the faults and RSS). THREADS threads run tables
 * of their own, OPS/THREADS steps each, seeds SEED, SEED+1, ... Throughput is operations
 * per second; minor_faults counts the whole process's.
 *
 * usage: bench_large [OPS=4000] [WORKING_SET=16] [SEED=1] [MIN=65536] [MAX=33554432] [THREADS=1]
 */
#include "bench_common.h"

enum { PAGE = 4096 };

static uint64_t min_size, max_size;

static void acquire(bench_block *b, bench_rng *rng, uint64_t n) {
  (void)n;
  b->size = bench_rng_log_range(rng, min_size, max_size);
  b->p = bench_check_alloc(malloc(b->size), b->size);
  bench_touch(b->p, b->size, PAGE, bench_tag(b->p, b->size));
}

static void release(bench_block *b) {
  if (!bench_touch_ok(b->p, b->size, PAGE, bench_tag(b->p, b->size)))
    bench_fail("large block %p of %zu bytes was overwritten", b->p, b->size);
  free(b->p);
}

typedef struct {
  _Alignas(BENCH_LINE) uint64_t ops;
  uint64_t slots, seed, allocs;
} worker;

static void *run_worker(void *arg) {
  worker *w = arg;
  bench_rng rng = bench_rng_make(w->seed, 0);
  w->allocs = bench_table_run(w->ops, w->slots, &rng, acquire, release);
  return NULL;
}

int main(int argc, char **argv) {
  bench_init("large",
             "bench_large [OPS=4000] [WORKING_SET=16] [SEED=1] [MIN=65536] [MAX=33554432] [THREADS=1]");
  bench_arg_count(argc, 6);
  uint64_t ops = bench_arg_u64(argc, argv, 1, 4000);
  uint64_t slots = bench_arg_u64(argc, argv, 2, 16);
  uint64_t seed = bench_arg_u64(argc, argv, 3, 1);
  min_size = bench_arg_u64(argc, argv, 4, 65536);
  max_size = bench_arg_u64(argc, argv, 5, 33554432);
  unsigned threads = bench_arg_threads(argc, argv, 6, 1);
  if (min_size < 16 || max_size < min_size) bench_usage("need 16 <= MIN <= MAX");
  if (slots < 1) bench_usage("WORKING_SET must be at least 1");
  char extra[96];
  snprintf(extra, sizeof extra, " min=%llu max=%llu threads=%u", (unsigned long long)min_size,
           (unsigned long long)max_size, threads);
  if (threads == 1) { /* the single-threaded row as before: no thread started */
    bench_table_benchmark(ops, slots, seed, acquire, release, extra);
    return 0;
  }
  worker *w = bench_calloc_lines(threads, sizeof *w);
  uint64_t per = ops / threads > 0 ? ops / threads : 1;
  for (unsigned i = 0; i < threads; i++) w[i] = (worker){.ops = per, .slots = slots, .seed = seed + i};
  double start = bench_now();
  bench_run_threads(threads, run_worker, w, sizeof *w);
  double seconds = bench_now() - start;
  uint64_t allocs = 0;
  for (unsigned i = 0; i < threads; i++) allocs += w[i].allocs;
  free(w);
  bench_result(per * threads, seconds, " working_set=%llu seed=%llu allocs=%llu%s", (unsigned long long)slots,
               (unsigned long long)seed, (unsigned long long)allocs, extra);
  return 0;
}
