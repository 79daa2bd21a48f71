/* fastpath_loop — the allocator's fast paths, for counting instructions under callgrind.
 *
 *   fixed SIZE ITERATIONS: ITERATIONS times malloc(SIZE), write a word, read it back,
 *       free: the same-size pair that a thread cache should serve in a few instructions.
 *   ring ITERATIONS [RING=1000] [SEED=1]: a ring of RING live blocks of 16..1040 bytes
 *       (sizes from a precomputed table, so the generator costs nothing per step); each
 *       step checks and frees the oldest block and allocates a new one in its place.
 *   xthread SIZE ITERATIONS [BATCH=64] [FREER_MALLOCS=0]: a cross-thread pair. This
 *       thread mallocs BATCH blocks of SIZE and writes a word in each; a second thread
 *       checks and frees them; then the next batch. The two take turns through two
 *       pipes: a read runs the same instructions whether or not it has to wait, so
 *       the count repeats however the threads are scheduled; the hand-over costs a
 *       few instructions per batch, not per block. With FREER_MALLOCS=1 the freeing thread first mallocs a
 *       block of its own (kept to the end), as a thread that also allocates would: an
 *       allocator may give a thread that only frees less state than one that allocates.
 * Running with ITERATIONS = 0 does everything but the loop (start-up, ring fill and
 * drain, the freeing thread's start and end), so (instructions(N) - instructions(0)) / N is the cost of one malloc+free pair
 * plus a few instructions of loop and check.
 *
 * The same two loops through the allocator's own heaps (found with dlsym, see
 * bench_heap_api_find; a usage error without one), every block freed by free():
 *   heap fixed|ring ...: each malloc is the API's malloc from a heap made for the run;
 *   heapdefault fixed|ring ...: that heap is made the thread's default, and the loop
 *       calls plain malloc.
 *
 * usage: bench_fastpath_loop [heap|heapdefault] fixed SIZE ITERATIONS
 *        bench_fastpath_loop [heap|heapdefault] ring ITERATIONS [RING=1000] [SEED=1]
 *        bench_fastpath_loop xthread SIZE ITERATIONS [BATCH=64] [FREER_MALLOCS=0]
 */
#include <unistd.h>

#include "bench_common.h"

enum { SIZE_TABLE = 1024 /* power of two */, RING_MIN = 16, RING_MAX = 1040 };

/* The allocation the loops make: malloc, or (heap mode) the heap API's malloc from
 * `heap`. Each loop is compiled once per kind, so the malloc loops are unchanged. */
static bench_heap_api heap_api;
static void *heap;
/* (The loops copy the API's function and heap into locals: a call through a register
 * costs what a call to malloc through the PLT does.) */
#define ALLOC(size) (use_heap ? heap_alloc(the_heap, (size)) : malloc(size))
#define HEAP_LOCALS                                                \
  void *(*volatile heap_alloc_v)(void *, size_t) = heap_api.alloc; \
  void *(*heap_alloc)(void *, size_t) = heap_alloc_v;              \
  void *the_heap = heap;                                           \
  (void)heap_alloc;                                                \
  (void)the_heap

__attribute__((always_inline)) static inline void put_tag(void *p, uint64_t tag) {
  memcpy(p, &tag, sizeof tag);
}

__attribute__((always_inline)) static inline void check_tag(const void *p, uint64_t tag) {
  uint64_t got;
  memcpy(&got, p, sizeof got);
  if (got != tag)
    bench_fail("block %p holds %llx, expected %llx", p, (unsigned long long)got, (unsigned long long)tag);
}

__attribute__((always_inline)) static inline void run_fixed(size_t size, uint64_t iterations, bool use_heap) {
  HEAP_LOCALS;
  if (size < 8) bench_usage("SIZE must be at least 8");
  for (uint64_t i = 0; i < iterations; i++) {
    void *p = bench_check_alloc(ALLOC(size), size);
    put_tag(p, i);
    bench_escape(p);
    check_tag(p, i);
    free(p);
  }
}

__attribute__((always_inline)) static inline void run_ring(uint64_t iterations, uint64_t ring_size,
                                                           uint64_t seed, bool use_heap) {
  HEAP_LOCALS;
  if (ring_size < 1) bench_usage("RING must be at least 1");
  size_t sizes[SIZE_TABLE];
  bench_rng rng = bench_rng_make(seed, 0);
  for (int i = 0; i < SIZE_TABLE; i++) sizes[i] = bench_rng_range(&rng, RING_MIN, RING_MAX);
  void **ring = bench_check_alloc(malloc(ring_size * sizeof *ring), ring_size * sizeof *ring);
  uint64_t *tags = bench_check_alloc(malloc(ring_size * sizeof *tags), ring_size * sizeof *tags);
  for (uint64_t k = 0; k < ring_size; k++) {
    size_t size = sizes[k % SIZE_TABLE];
    ring[k] = bench_check_alloc(ALLOC(size), size);
    tags[k] = k;
    put_tag(ring[k], k);
  }
  uint64_t slot = 0;
  for (uint64_t i = 0; i < iterations; i++) {
    check_tag(ring[slot], tags[slot]);
    free(ring[slot]);
    size_t size = sizes[i % SIZE_TABLE];
    ring[slot] = bench_check_alloc(ALLOC(size), size);
    tags[slot] = i;
    put_tag(ring[slot], i);
    if (++slot == ring_size) slot = 0;
  }
  for (uint64_t k = 0; k < ring_size; k++) {
    check_tag(ring[k], tags[k]);
    free(ring[k]);
  }
  free(tags);
  free(ring);
}

/* xthread: the batch in flight, and whose turn it is (a byte in a pipe). */
static struct {
  int filled[2], emptied[2];
  void **blocks;
  uint64_t count; /* blocks in this batch; 0: no more batches */
  uint64_t first; /* the tag of blocks[0] */
  bool freer_mallocs;
} xt;

static void xthread_signal(int fd) {
  char byte = 0;
  if (write(fd, &byte, 1) != 1) bench_fail("write to a pipe: %s", strerror(errno));
}

static void xthread_wait(int fd) {
  char byte;
  ssize_t n;
  while ((n = read(fd, &byte, 1)) < 0 && errno == EINTR) {}
  if (n != 1) bench_fail("read from a pipe: %s", n < 0 ? strerror(errno) : "end of file");
}

static void *xthread_freer(void *arg) {
  (void)arg;
  void *own = xt.freer_mallocs ? bench_check_alloc(malloc(16), 16) : NULL;
  for (;;) {
    xthread_wait(xt.filled[0]);
    if (xt.count == 0) {
      free(own);
      return NULL;
    }
    for (uint64_t k = 0; k < xt.count; k++) {
      check_tag(xt.blocks[k], xt.first + k);
      free(xt.blocks[k]);
    }
    xthread_signal(xt.emptied[1]);
  }
}

__attribute__((noinline)) static void run_xthread(size_t size, uint64_t iterations, uint64_t batch,
                                                  bool freer_mallocs) {
  xt.freer_mallocs = freer_mallocs;
  if (size < 8) bench_usage("SIZE must be at least 8");
  if (batch < 1) bench_usage("BATCH must be at least 1");
  xt.blocks = bench_check_alloc(malloc(batch * sizeof *xt.blocks), batch * sizeof *xt.blocks);
  if (pipe(xt.filled) != 0 || pipe(xt.emptied) != 0) bench_fail("pipe: %s", strerror(errno));
  pthread_t freer;
  int err = pthread_create(&freer, NULL, xthread_freer, NULL);
  if (err != 0) bench_fail("pthread_create: %s", strerror(err));
  for (uint64_t i = 0; i < iterations; i += xt.count) {
    xt.count = iterations - i < batch ? iterations - i : batch;
    xt.first = i;
    for (uint64_t k = 0; k < xt.count; k++) {
      xt.blocks[k] = bench_check_alloc(malloc(size), size);
      put_tag(xt.blocks[k], i + k);
    }
    xthread_signal(xt.filled[1]);
    xthread_wait(xt.emptied[0]);
  }
  xt.count = 0;
  xthread_signal(xt.filled[1]);
  pthread_join(freer, NULL);
  free(xt.blocks);
}

int main(int argc, char **argv) {
  bench_init("fastpath_loop",
             "bench_fastpath_loop [heap|heapdefault] fixed SIZE ITERATIONS | "
             "bench_fastpath_loop [heap|heapdefault] ring ITERATIONS [RING=1000] [SEED=1] | "
             "bench_fastpath_loop xthread SIZE ITERATIONS [BATCH=64] [FREER_MALLOCS=0]");
  if (argc >= 2 && (strcmp(argv[1], "heap") == 0 || strcmp(argv[1], "heapdefault") == 0)) {
    if (!bench_heap_api_find(&heap_api))
      bench_usage("the allocator has no heap API (hak_heap_* or mi_heap_*)");
    heap = heap_api.make();
    if (strcmp(argv[1], "heapdefault") == 0) {
      heap_api.set_default(heap);
      heap = NULL; /* plain malloc, into the default heap */
    }
    argv[1] = argv[0];
    argv++;
    argc--;
  }
  if (argc >= 2 && strcmp(argv[1], "fixed") == 0) {
    bench_arg_count(argc, 3);
    if (argc != 4) bench_usage("fixed needs SIZE and ITERATIONS");
    size_t size = bench_arg_u64(argc, argv, 2, 0);
    uint64_t iterations = bench_arg_u64(argc, argv, 3, 0);
    double start = bench_now();
    if (heap != NULL) run_fixed(size, iterations, true);
    else run_fixed(size, iterations, false);
    bench_result(iterations, bench_now() - start, " mode=fixed size=%zu", size);
  } else if (argc >= 2 && strcmp(argv[1], "ring") == 0) {
    bench_arg_count(argc, 4);
    if (argc < 3) bench_usage("ring needs ITERATIONS");
    uint64_t iterations = bench_arg_u64(argc, argv, 2, 0);
    uint64_t ring_size = bench_arg_u64(argc, argv, 3, 1000);
    uint64_t seed = bench_arg_u64(argc, argv, 4, 1);
    double start = bench_now();
    if (heap != NULL) run_ring(iterations, ring_size, seed, true);
    else run_ring(iterations, ring_size, seed, false);
    bench_result(iterations, bench_now() - start, " mode=ring ring=%llu seed=%llu",
                 (unsigned long long)ring_size, (unsigned long long)seed);
  } else if (argc >= 2 && strcmp(argv[1], "xthread") == 0 && heap == NULL && !heap_api.make) {
    bench_arg_count(argc, 5);
    if (argc < 4) bench_usage("xthread needs SIZE and ITERATIONS");
    size_t size = bench_arg_u64(argc, argv, 2, 0);
    uint64_t iterations = bench_arg_u64(argc, argv, 3, 0);
    uint64_t batch = bench_arg_u64(argc, argv, 4, 64);
    uint64_t freer_mallocs = bench_arg_u64(argc, argv, 5, 0);
    if (freer_mallocs > 1) bench_usage("FREER_MALLOCS must be 0 or 1");
    double start = bench_now();
    run_xthread(size, iterations, batch, freer_mallocs != 0);
    bench_result(iterations, bench_now() - start, " mode=xthread size=%zu batch=%llu freer_mallocs=%llu",
                 size, (unsigned long long)batch, (unsigned long long)freer_mallocs);
  } else {
    bench_usage("MODE must be fixed, ring or xthread (xthread: not through a heap)");
  }
  return 0;
}
