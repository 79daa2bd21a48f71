/* thread_churn — short-lived threads that leave their blocks behind.
 *
 * ROUNDS times, THREADS threads are started together. Thread i of a round allocates
 * BLOCKS_PER_THREAD blocks of 16..1040 bytes (stamped), frees every other one of its own
 * (same-thread frees), then checks and frees the blocks that thread i of the previous
 * round left behind (blocks of a thread that has exited), leaves its own remaining half
 * for the next round and exits. The main thread frees the last round's leftovers.
 * Throughput is allocations per second, thread start and exit included.
 *
 * usage: bench_thread_churn [ROUNDS=2000] [BLOCKS_PER_THREAD=1000] [SEED=1] [THREADS=2]
 */
#include "bench_common.h"

enum { MIN_SIZE = 16, MAX_SIZE = 1040 };

typedef struct {
  _Alignas(BENCH_LINE) bench_block *left; /* blocks left by the previous round's thread in this seat */
  size_t left_count;
  bench_rng rng;
} seat;

static uint64_t blocks_per_thread;

static void free_blocks(bench_block *blocks, size_t count) {
  for (size_t i = 0; i < count; i++) {
    bench_check_stamp(blocks[i].p, blocks[i].size);
    free(blocks[i].p);
  }
}

static void *churn_thread(void *arg) {
  seat *s = arg;
  size_t bytes = blocks_per_thread * sizeof(bench_block);
  bench_block *mine = bench_check_alloc(malloc(bytes), bytes);
  for (uint64_t i = 0; i < blocks_per_thread; i++) {
    mine[i].size = bench_rng_range(&s->rng, MIN_SIZE, MAX_SIZE);
    mine[i].p = bench_check_alloc(malloc(mine[i].size), mine[i].size);
    bench_stamp(mine[i].p, mine[i].size);
  }
  size_t kept = 0;
  for (uint64_t i = 0; i < blocks_per_thread; i++) {
    if (i % 2 == 0) {
      bench_check_stamp(mine[i].p, mine[i].size);
      free(mine[i].p);
    } else {
      mine[kept++] = mine[i];
    }
  }
  if (s->left != NULL) {
    free_blocks(s->left, s->left_count);
    free(s->left);
  }
  s->left = mine;
  s->left_count = kept;
  return NULL;
}

int main(int argc, char **argv) {
  bench_init("thread_churn",
             "bench_thread_churn [ROUNDS=2000] [BLOCKS_PER_THREAD=1000] [SEED=1] [THREADS=2]");
  bench_arg_count(argc, 4);
  uint64_t rounds = bench_arg_u64(argc, argv, 1, 2000);
  blocks_per_thread = bench_arg_u64(argc, argv, 2, 1000);
  uint64_t seed = bench_arg_u64(argc, argv, 3, 1);
  unsigned threads = bench_arg_threads(argc, argv, 4, 2);
  if (blocks_per_thread < 1) bench_usage("BLOCKS_PER_THREAD must be at least 1");

  seat *seats = bench_calloc_lines(threads, sizeof *seats);
  for (unsigned t = 0; t < threads; t++) seats[t].rng = bench_rng_make(seed, t);

  double start = bench_now();
  for (uint64_t r = 0; r < rounds; r++) bench_run_threads(threads, churn_thread, seats, sizeof *seats);
  for (unsigned t = 0; t < threads; t++) {
    if (seats[t].left != NULL) {
      free_blocks(seats[t].left, seats[t].left_count);
      free(seats[t].left);
    }
  }
  double seconds = bench_now() - start;

  free(seats);
  uint64_t ops = rounds * threads * blocks_per_thread;
  bench_result(ops, seconds,
               " threads=%u rounds=%llu blocks_per_thread=%llu seed=%llu "
               "threads_started=%llu",
               threads, (unsigned long long)rounds, (unsigned long long)blocks_per_thread,
               (unsigned long long)seed, (unsigned long long)(rounds * threads));
  return 0;
}
