/* producer_consumer — cross-thread free at a high rate.
 *
 * THREADS threads stand in a ring; thread i allocates blocks of 16..1040 bytes, stamps
 * them and sends them in batches of BATCH (the batch record is itself a malloc'd block) to
 * thread i+1, which checks and frees them. So with 2 or more threads every block and every
 * batch is freed by a thread other than the one that allocated it; with 1 thread the ring
 * closes on itself (same-thread free through a queue: the baseline). Each thread allocates
 * OPS_PER_THREAD blocks. Queues are lock-free single-producer single-consumer rings; a
 * thread that can neither send nor receive yields the CPU.
 *
 * usage: bench_producer_consumer [OPS_PER_THREAD=2000000] [BATCH=64] [SEED=1] [THREADS=2]
 */
#include <sched.h>
#include <stdatomic.h>

#include "bench_common.h"

enum { MIN_SIZE = 16, MAX_SIZE = 1040, QUEUE_BATCHES = 16 /* power of two */ };

typedef struct {
  uint64_t count;
  bench_block items[];
} batch;

/* One direction of the ring. head and tail sit on separate cache lines. */
typedef struct {
  atomic_size_t head; /* next slot to receive; written by the consumer */
  char pad1[64 - sizeof(atomic_size_t)];
  atomic_size_t tail; /* next slot to send; written by the producer */
  char pad2[64 - sizeof(atomic_size_t)];
  batch *slots[QUEUE_BATCHES];
} queue;

typedef struct {
  _Alignas(BENCH_LINE) queue *out, *in; /* a worker per cache line */
  bench_rng rng;
  uint64_t produced, consumed, idle_yields;
} worker;

static uint64_t ops_per_thread, batch_size;

static bool queue_send(queue *q, batch *b) {
  size_t tail = atomic_load_explicit(&q->tail, memory_order_relaxed);
  size_t head = atomic_load_explicit(&q->head, memory_order_acquire);
  if (tail - head == QUEUE_BATCHES) return false;
  q->slots[tail % QUEUE_BATCHES] = b;
  atomic_store_explicit(&q->tail, tail + 1, memory_order_release);
  return true;
}

static bool queue_full(queue *q) {
  return atomic_load_explicit(&q->tail, memory_order_relaxed) -
             atomic_load_explicit(&q->head, memory_order_acquire) ==
         QUEUE_BATCHES;
}

static batch *queue_receive(queue *q) {
  size_t head = atomic_load_explicit(&q->head, memory_order_relaxed);
  size_t tail = atomic_load_explicit(&q->tail, memory_order_acquire);
  if (head == tail) return NULL;
  batch *b = q->slots[head % QUEUE_BATCHES];
  atomic_store_explicit(&q->head, head + 1, memory_order_release);
  return b;
}

static batch *make_batch(worker *w, uint64_t count) {
  size_t bytes = sizeof(batch) + count * sizeof(bench_block);
  batch *b = bench_check_alloc(malloc(bytes), bytes);
  b->count = count;
  for (uint64_t i = 0; i < count; i++) {
    bench_block *it = &b->items[i];
    it->size = bench_rng_range(&w->rng, MIN_SIZE, MAX_SIZE);
    it->p = bench_check_alloc(malloc(it->size), it->size);
    bench_stamp(it->p, it->size);
  }
  return b;
}

static void free_batch(batch *b) {
  for (uint64_t i = 0; i < b->count; i++) {
    bench_check_stamp(b->items[i].p, b->items[i].size);
    free(b->items[i].p);
  }
  free(b);
}

static void *worker_thread(void *arg) {
  worker *w = arg;
  while (w->produced < ops_per_thread || w->consumed < ops_per_thread) {
    bool progress = false;
    if (w->produced < ops_per_thread && !queue_full(w->out)) {
      uint64_t left = ops_per_thread - w->produced;
      uint64_t count = left < batch_size ? left : batch_size;
      batch *b = make_batch(w, count);
      /* Once sent, b belongs to the receiver, which may free it at once. */
      if (!queue_send(w->out, b)) bench_fail("queue refused a batch it had room for");
      w->produced += count;
      progress = true;
    }
    batch *b = queue_receive(w->in);
    if (b != NULL) {
      w->consumed += b->count;
      free_batch(b);
      progress = true;
    }
    if (!progress) {
      w->idle_yields++;
      sched_yield();
    }
  }
  return NULL;
}

int main(int argc, char **argv) {
  bench_init("producer_consumer",
             "bench_producer_consumer [OPS_PER_THREAD=2000000] [BATCH=64] [SEED=1] [THREADS=2]");
  bench_arg_count(argc, 4);
  ops_per_thread = bench_arg_u64(argc, argv, 1, 2000000);
  batch_size = bench_arg_u64(argc, argv, 2, 64);
  uint64_t seed = bench_arg_u64(argc, argv, 3, 1);
  unsigned threads = bench_arg_threads(argc, argv, 4, 2);
  if (batch_size < 1) bench_usage("BATCH must be at least 1");

  queue *queues = NULL;
  if (posix_memalign((void **)&queues, 64, threads * sizeof *queues) != 0)
    bench_fail("cannot allocate the queues");
  memset(queues, 0, threads * sizeof *queues);
  worker *workers = bench_calloc_lines(threads, sizeof *workers);
  for (unsigned t = 0; t < threads; t++) {
    workers[t].out = &queues[t];
    workers[t].in = &queues[(t + threads - 1) % threads];
    workers[t].rng = bench_rng_make(seed, t);
  }

  double start = bench_now();
  bench_run_threads(threads, worker_thread, workers, sizeof *workers);
  double seconds = bench_now() - start;

  uint64_t ops = 0, yields = 0;
  for (unsigned t = 0; t < threads; t++) {
    if (workers[t].consumed != ops_per_thread)
      bench_fail("thread %u received %llu blocks, expected %llu", t, (unsigned long long)workers[t].consumed,
                 (unsigned long long)ops_per_thread);
    ops += workers[t].produced;
    yields += workers[t].idle_yields;
  }
  free(workers);
  free(queues);
  bench_result(ops, seconds, " threads=%u batch=%llu seed=%llu idle_yields=%llu", threads,
               (unsigned long long)batch_size, (unsigned long long)seed, (unsigned long long)yields);
  return 0;
}
