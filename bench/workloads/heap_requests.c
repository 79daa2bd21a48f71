/* heap_requests — per-request heaps: memory with a clear lifetime, dropped at once.
 *
 *   heap|malloc REQUESTS [BLOCKS=500] [MIN=16] [MAX=4096] [SEED=1]
 *       REQUESTS times: a request allocates BLOCKS blocks of log-uniform sizes in
 *       [MIN, MAX], stamps both ends of each, checks every stamp, and drops them all.
 *       heap: into a heap of its own, made with the preloaded allocator's heap API
 *       (hakmem's hak_heap_*, mimalloc's mi_heap_*, found with dlsym) and destroyed
 *       whole; an allocator without one does the malloc work instead and says so
 *       (api=malloc in the RESULT line, a note on stderr).
 *       malloc: with malloc, and free() of every block.
 *       One op is one block allocated (and dropped).
 *   destroy BLOCKS SIZE [ROUNDS=5]
 *       The cost of dropping a heap of BLOCKS blocks of SIZE bytes, against freeing them
 *       one by one: both timed, the best of ROUNDS (destroy_ns, free_ns, per block too).
 *       Needs a heap API.
 *
 * usage: bench_heap_requests heap|malloc REQUESTS [BLOCKS=500] [MIN=16] [MAX=4096] [SEED=1]
 *        bench_heap_requests destroy BLOCKS SIZE [ROUNDS=5]
 */
#include "bench_common.h"

static void stamp_all(void **blocks, const size_t *sizes, uint64_t n) {
  for (uint64_t i = 0; i < n; i++) bench_stamp(blocks[i], sizes[i]);
}

static void check_all(void **blocks, const size_t *sizes, uint64_t n) {
  for (uint64_t i = 0; i < n; i++) bench_check_stamp(blocks[i], sizes[i]);
}

static void run_requests(bool use_heap, const bench_heap_api *api, uint64_t requests, uint64_t blocks,
                         uint64_t min, uint64_t max, uint64_t seed) {
  void **p = bench_check_alloc(malloc(blocks * sizeof *p), blocks * sizeof *p);
  size_t *size = bench_check_alloc(malloc(blocks * sizeof *size), blocks * sizeof *size);
  bench_rng rng = bench_rng_make(seed, 0);
  double start = bench_now();
  for (uint64_t r = 0; r < requests; r++) {
    for (uint64_t i = 0; i < blocks; i++) size[i] = bench_rng_log_range(&rng, min, max);
    void *heap = use_heap ? api->make() : NULL;
    if (use_heap && heap == NULL) bench_fail("the heap API could not make a heap");
    for (uint64_t i = 0; i < blocks; i++)
      p[i] = bench_check_alloc(use_heap ? api->alloc(heap, size[i]) : malloc(size[i]), size[i]);
    stamp_all(p, size, blocks);
    check_all(p, size, blocks);
    if (use_heap) {
      api->destroy(heap);
    } else {
      for (uint64_t i = 0; i < blocks; i++) free(p[i]);
    }
  }
  double seconds = bench_now() - start;
  bench_result(requests * blocks, seconds, " api=%s requests=%llu blocks=%llu min=%llu max=%llu seed=%llu",
               use_heap ? api->name : "malloc", (unsigned long long)requests, (unsigned long long)blocks,
               (unsigned long long)min, (unsigned long long)max, (unsigned long long)seed);
  free(size);
  free(p);
}

static void run_destroy(const bench_heap_api *api, uint64_t blocks, uint64_t size, uint64_t rounds) {
  void **p = bench_check_alloc(malloc(blocks * sizeof *p), blocks * sizeof *p);
  double best_destroy = 1e30, best_free = 1e30;
  for (uint64_t r = 0; r < rounds; r++) {
    for (int how = 0; how < 2; how++) {
      void *heap = api->make();
      for (uint64_t i = 0; i < blocks; i++) {
        p[i] = bench_check_alloc(api->alloc(heap, size), size);
        memcpy(p[i], &i, sizeof i);
      }
      double start = bench_now();
      if (how == 0) {
        api->destroy(heap);
      } else {
        for (uint64_t i = 0; i < blocks; i++) free(p[i]);
      }
      double t = bench_now() - start;
      if (how == 1) api->destroy(heap);
      if (how == 0 && t < best_destroy) best_destroy = t;
      if (how == 1 && t < best_free) best_free = t;
    }
  }
  bench_result(blocks, best_destroy,
               " api=%s blocks=%llu size=%llu destroy_ns=%.0f free_ns=%.0f destroy_ns_per_block=%.3f"
               " free_ns_per_block=%.3f",
               api->name, (unsigned long long)blocks, (unsigned long long)size, best_destroy * 1e9,
               best_free * 1e9, best_destroy * 1e9 / (double)blocks, best_free * 1e9 / (double)blocks);
  free(p);
}

int main(int argc, char **argv) {
  bench_init("heap_requests",
             "bench_heap_requests heap|malloc REQUESTS [BLOCKS=500] [MIN=16] [MAX=4096] "
             "[SEED=1] | bench_heap_requests destroy BLOCKS SIZE [ROUNDS=5]");
  bench_heap_api api = {0};
  bool have_api = bench_heap_api_find(&api);
  if (argc >= 2 && strcmp(argv[1], "destroy") == 0) {
    bench_arg_count(argc, 4);
    if (argc < 4) bench_usage("destroy needs BLOCKS and SIZE");
    if (!have_api) bench_usage("the allocator has no heap API (hak_heap_* or mi_heap_*)");
    uint64_t blocks = bench_arg_u64(argc, argv, 2, 0), size = bench_arg_u64(argc, argv, 3, 0);
    if (blocks < 1 || size < 8) bench_usage("BLOCKS must be at least 1 and SIZE at least 8");
    run_destroy(&api, blocks, size, bench_arg_u64(argc, argv, 4, 5));
    return 0;
  }
  if (argc < 3 || (strcmp(argv[1], "heap") != 0 && strcmp(argv[1], "malloc") != 0))
    bench_usage("MODE must be heap, malloc or destroy");
  bench_arg_count(argc, 6);
  bool use_heap = strcmp(argv[1], "heap") == 0;
  if (use_heap && !have_api) {
    fprintf(stderr,
            "heap_requests: note: the allocator has no heap API that dlsym finds "
            "(hak_heap_*, mi_heap_*): malloc and free instead\n");
    use_heap = false;
  }
  uint64_t requests = bench_arg_u64(argc, argv, 2, 0), blocks = bench_arg_u64(argc, argv, 3, 500);
  uint64_t min = bench_arg_u64(argc, argv, 4, 16), max = bench_arg_u64(argc, argv, 5, 4096);
  if (blocks < 1 || min < 16 || max < min)
    bench_usage("BLOCKS must be at least 1, MIN at least 16 and MAX at least MIN");
  run_requests(use_heap, &api, requests, blocks, min, max, bench_arg_u64(argc, argv, 6, 1));
  return 0;
}
