/* stress_producer_consumer: producer threads allocate and fill blocks, consumer threads
 * verify and free them; 1,000,000 blocks in all pass through a bounded queue, so nearly
 * every free is a remote free to a thread that is still allocating.
 * Usage: stress_producer_consumer [seed] [blocks] [producers] [consumers]
 */
#include "stress_util.h"

enum { MAX_THREADS = 64, BATCH = 32 };

static uint64_t g_seed;
static tu_queue g_queue;

typedef struct role {
  uint64_t id, count; /* producers: blocks to make; consumers: blocks freed */
} role;

static void *produce(void *arg) {
  role *me = arg;
  tu_rng r = tu_rng_make(g_seed, me->id + 1);
  tu_item batch[BATCH];
  for (uint64_t done = 0; done < me->count;) {
    size_t n = 0;
    for (; n < BATCH && done < me->count; n++, done++) {
      /* Mostly small, a few mid-sized. */
      size_t size = tu_below(&r, 64) ? tu_range(&r, 1, 512) : tu_range(&r, 513, 64 * 1024);
      batch[n] = tu_item_make(size, tu_rand(&r));
    }
    tu_queue_push(&g_queue, batch, n);
  }
  return NULL;
}

static void *consume(void *arg) {
  role *me = arg;
  me->count = tu_queue_release_all(&g_queue, "block from a producer");
  return NULL;
}

int main(int argc, char **argv) {
  g_seed = tu_seed(argc, argv);
  uint64_t blocks = tu_arg_u64(argc, argv, 2, 1000000);
  unsigned producers = (unsigned)tu_arg_u64(argc, argv, 3, 4);
  unsigned consumers = (unsigned)tu_arg_u64(argc, argv, 4, 4);
  REQUIRE(producers >= 1 && consumers >= 1 && producers <= MAX_THREADS && consumers <= MAX_THREADS,
          "producers and consumers must be 1..%d", MAX_THREADS);
  tu_queue_init(&g_queue, 1024);
  role prod[MAX_THREADS], cons[MAX_THREADS];
  pthread_t ptid[MAX_THREADS], ctid[MAX_THREADS];
  for (unsigned i = 0; i < producers; i++) prod[i] = (role){i, blocks / producers + (i < blocks % producers)};
  for (unsigned i = 0; i < consumers; i++) cons[i] = (role){i, 0};
  double t0 = tu_now();
  tu_start_threads(ctid, consumers, consume, cons, sizeof *cons);
  tu_start_threads(ptid, producers, produce, prod, sizeof *prod);
  tu_join_threads(ptid, producers);
  tu_queue_close(&g_queue);
  tu_join_threads(ctid, consumers);
  tu_queue_destroy(&g_queue);
  uint64_t freed = 0;
  for (unsigned i = 0; i < consumers; i++) freed += cons[i].count;
  CHECK(freed == blocks, "consumers freed %" PRIu64 " blocks of %" PRIu64, freed, blocks);
  printf("stress_producer_consumer: %" PRIu64 " blocks, %u producers, %u consumers, %.2f s\n", blocks,
         producers, consumers, tu_now() - t0);
  return tu_finish("stress_producer_consumer");
}
