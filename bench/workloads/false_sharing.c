/* false_sharing — do small blocks of different threads share cache lines?
 *
 * Each of THREADS threads, ROUNDS times: allocates an OBJECT_SIZE block, zeroes it, then
 * WRITES times increments every byte of it, checks that every byte equals WRITES mod 256,
 * and frees it. Blocks written by different threads at once that share a cache line make
 * the lines bounce between cores and the writes slow.
 *   active:  each thread allocates its own blocks; an allocator that hands neighbouring
 *            small blocks to different threads causes the sharing.
 *   passive: the main thread first allocates one block per thread (neighbours, most
 *            likely) and hands them out; each thread frees the one it got before its
 *            loop, so an allocator that reuses a freed block for the freeing thread keeps
 *            the sharing alive.
 * Throughput is write passes (over a whole block) per second, all threads together.
 *
 * usage: bench_false_sharing MODE(active|passive) [ROUNDS=1000] [WRITES=10000]
 *                            [OBJECT_SIZE=8] [THREADS=2]
 */
#include "bench_common.h"

typedef struct {
  unsigned char *given; /* passive mode: the block handed over by the main thread */
  size_t given_size;
} worker;

static uint64_t rounds, writes, object_size;

static void *writer_thread(void *arg) {
  worker *w = arg;
  if (w->given != NULL) {
    bench_check_stamp(w->given, w->given_size);
    free(w->given);
  }
  for (uint64_t r = 0; r < rounds; r++) {
    volatile unsigned char *p = bench_check_alloc(malloc(object_size), object_size);
    for (size_t k = 0; k < object_size; k++) p[k] = 0;
    for (uint64_t i = 0; i < writes; i++)
      for (size_t k = 0; k < object_size; k++) p[k]++;
    for (size_t k = 0; k < object_size; k++)
      if (p[k] != (unsigned char)writes)
        bench_fail("byte %zu of a block holds %u after %llu increments", k, p[k], (unsigned long long)writes);
    free((void *)p);
  }
  return NULL;
}

int main(int argc, char **argv) {
  bench_init("false_sharing",
             "bench_false_sharing MODE(active|passive) [ROUNDS=1000] "
             "[WRITES=10000] [OBJECT_SIZE=8] [THREADS=2]");
  bench_arg_count(argc, 5);
  if (argc < 2 || (strcmp(argv[1], "active") != 0 && strcmp(argv[1], "passive") != 0))
    bench_usage("MODE must be active or passive");
  bool passive = strcmp(argv[1], "passive") == 0;
  rounds = bench_arg_u64(argc, argv, 2, 1000);
  writes = bench_arg_u64(argc, argv, 3, 10000);
  object_size = bench_arg_u64(argc, argv, 4, 8);
  unsigned threads = bench_arg_threads(argc, argv, 5, 2);
  if (object_size < 1) bench_usage("OBJECT_SIZE must be at least 1");

  worker *workers = bench_check_alloc(calloc(threads, sizeof *workers), threads * sizeof *workers);
  if (passive) {
    for (unsigned t = 0; t < threads; t++) {
      workers[t].given_size = object_size;
      workers[t].given = bench_check_alloc(malloc(object_size), object_size);
      bench_stamp(workers[t].given, object_size);
    }
  }

  double start = bench_now();
  bench_run_threads(threads, writer_thread, workers, sizeof *workers);
  double seconds = bench_now() - start;

  free(workers);
  bench_result(rounds * writes * threads, seconds,
               " mode=%s threads=%u rounds=%llu writes=%llu object_size=%llu", passive ? "passive" : "active",
               threads, (unsigned long long)rounds, (unsigned long long)writes,
               (unsigned long long)object_size);
  return 0;
}
