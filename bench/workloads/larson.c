/* larson — a server-like pattern of long-lived blocks that change hands between threads.
 *
 * There are THREADS lanes, each an array of BLOCKS_PER_THREAD live blocks, first filled
 * by the main thread. One thread works a lane at a time: each step checks and frees a
 * random victim and replaces it with a new block of MIN..MAX bytes, stamped. After ROUNDS
 * passes over the array (ROUNDS x BLOCKS_PER_THREAD steps) the thread starts a new thread
 * on the same lane and exits, so the successor frees blocks its predecessor allocated.
 * After SECONDS the lanes stop; throughput is the replacement steps per second.
 *
 * usage: bench_larson [SECONDS=1] [MIN=8] [MAX=1000] [BLOCKS_PER_THREAD=1000] [ROUNDS=100]
 *                     [SEED=4141] [THREADS=2]
 */
#include <stdatomic.h>

#include "bench_common.h"

typedef struct {
  _Alignas(BENCH_LINE) bench_block *blocks; /* a lane per cache line (see bench_calloc_lines) */
  bench_rng rng;
  uint64_t ops;         /* steps done on this lane, by all its threads */
  uint64_t generations; /* threads that have worked this lane */
} lane;

static uint64_t min_size, max_size, blocks_per_lane, steps_per_generation;
static atomic_bool stop;

static pthread_mutex_t done_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t done_cond = PTHREAD_COND_INITIALIZER;
static unsigned lanes_done;

static void *lane_thread(void *arg);

static void start_lane_thread(lane *l) {
  pthread_t tid;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  int err = pthread_create(&tid, &attr, lane_thread, l);
  pthread_attr_destroy(&attr);
  if (err != 0) bench_fail("pthread_create: %s", strerror(err));
}

static void new_block(bench_block *b, bench_rng *rng) {
  b->size = bench_rng_range(rng, min_size, max_size);
  b->p = bench_check_alloc(malloc(b->size), b->size);
  bench_stamp(b->p, b->size);
}

static void *lane_thread(void *arg) {
  lane *l = arg;
  l->generations++;
  for (uint64_t step = 0; step < steps_per_generation; step++) {
    if ((step & 63) == 0 && atomic_load_explicit(&stop, memory_order_relaxed)) break;
    bench_block *b = &l->blocks[bench_rng_below(&l->rng, blocks_per_lane)];
    bench_check_stamp(b->p, b->size);
    free(b->p);
    new_block(b, &l->rng);
    l->ops++;
  }
  if (!atomic_load_explicit(&stop, memory_order_relaxed)) {
    start_lane_thread(l); /* hand the lane over; this thread ends */
    return NULL;
  }
  pthread_mutex_lock(&done_lock);
  lanes_done++;
  pthread_cond_signal(&done_cond);
  pthread_mutex_unlock(&done_lock);
  return NULL;
}

int main(int argc, char **argv) {
  bench_init("larson",
             "bench_larson [SECONDS=1] [MIN=8] [MAX=1000] [BLOCKS_PER_THREAD=1000] "
             "[ROUNDS=100] [SEED=4141] [THREADS=2]");
  bench_arg_count(argc, 7);
  double seconds_arg = bench_arg_double(argc, argv, 1, 1.0);
  min_size = bench_arg_u64(argc, argv, 2, 8);
  max_size = bench_arg_u64(argc, argv, 3, 1000);
  blocks_per_lane = bench_arg_u64(argc, argv, 4, 1000);
  uint64_t rounds = bench_arg_u64(argc, argv, 5, 100);
  uint64_t seed = bench_arg_u64(argc, argv, 6, 4141);
  unsigned threads = bench_arg_threads(argc, argv, 7, 2);
  if (min_size < 1 || max_size < min_size || blocks_per_lane < 1 || rounds < 1)
    bench_usage("need 1 <= MIN <= MAX, BLOCKS_PER_THREAD >= 1, ROUNDS >= 1");
  steps_per_generation = rounds * blocks_per_lane;

  lane *lanes = bench_calloc_lines(threads, sizeof *lanes);
  for (unsigned t = 0; t < threads; t++) {
    lane *l = &lanes[t];
    l->rng = bench_rng_make(seed, t);
    l->blocks =
        bench_check_alloc(calloc(blocks_per_lane, sizeof *l->blocks), blocks_per_lane * sizeof *l->blocks);
    for (uint64_t i = 0; i < blocks_per_lane; i++) new_block(&l->blocks[i], &l->rng);
  }

  double start = bench_now();
  for (unsigned t = 0; t < threads; t++) start_lane_thread(&lanes[t]);
  bench_sleep(seconds_arg);
  atomic_store(&stop, true);
  pthread_mutex_lock(&done_lock);
  while (lanes_done < threads) pthread_cond_wait(&done_cond, &done_lock);
  pthread_mutex_unlock(&done_lock);
  double seconds = bench_now() - start;

  uint64_t ops = 0, generations = 0;
  for (unsigned t = 0; t < threads; t++) {
    lane *l = &lanes[t];
    ops += l->ops;
    generations += l->generations;
    for (uint64_t i = 0; i < blocks_per_lane; i++) {
      bench_check_stamp(l->blocks[i].p, l->blocks[i].size);
      free(l->blocks[i].p);
    }
    free(l->blocks);
  }
  free(lanes);
  bench_result(ops, seconds,
               " threads=%u min=%llu max=%llu blocks_per_thread=%llu rounds=%llu "
               "seed=%llu generations=%llu",
               threads, (unsigned long long)min_size, (unsigned long long)max_size,
               (unsigned long long)blocks_per_lane, (unsigned long long)rounds, (unsigned long long)seed,
               (unsigned long long)generations);
  return 0;
}
