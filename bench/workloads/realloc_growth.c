/* realloc_growth — buffers that grow by realloc, as vectors and strings do.
 *
 * Each round starts LIVE buffers at 16 bytes and grows them, interleaved at random, until
 * each reaches MAX_SIZE: a step picks an unfinished buffer and reallocs it to
 * old + 1 + random(old / 2 + 16) bytes (about x1.25 a step), writing the new bytes with
 * the buffer's pattern. Each step checks the first and last bytes that the buffer held
 * before (contents must be preserved by realloc, moved or not); a finished buffer is
 * checked in full, shrunk back to 16 bytes by realloc, checked again and freed.
 * Throughput is realloc calls per second.
 *
 * usage: bench_realloc_growth [ROUNDS=200] [MAX_SIZE=1048576] [LIVE=4] [SEED=1]
 */
#include "bench_common.h"

enum { START_SIZE = 16, EDGE = 16 };

typedef struct {
  unsigned char *p;
  size_t size;
  uint64_t key;
} buffer;

static void check_range(const buffer *b, size_t from, size_t to) {
  size_t bad = bench_fill_mismatch(b->p, from, to, b->key);
  if (bad != to) bench_fail("realloc lost byte %zu of a %zu-byte buffer at %p", bad, b->size, (void *)b->p);
}

static void resize(buffer *b, size_t size) {
  b->p = bench_check_alloc(realloc(b->p, size), size);
  if (size > b->size) bench_fill(b->p, b->size, size, b->key);
  b->size = size;
}

int main(int argc, char **argv) {
  bench_init("realloc_growth", "bench_realloc_growth [ROUNDS=200] [MAX_SIZE=1048576] [LIVE=4] [SEED=1]");
  bench_arg_count(argc, 4);
  uint64_t rounds = bench_arg_u64(argc, argv, 1, 200);
  uint64_t max_size = bench_arg_u64(argc, argv, 2, 1048576);
  uint64_t live = bench_arg_u64(argc, argv, 3, 4);
  uint64_t seed = bench_arg_u64(argc, argv, 4, 1);
  if (max_size < START_SIZE || live < 1) bench_usage("need MAX_SIZE >= 16 and LIVE >= 1");

  buffer *bufs = bench_check_alloc(calloc(live, sizeof *bufs), live * sizeof *bufs);
  bench_rng rng = bench_rng_make(seed, 0);
  uint64_t reallocs = 0;

  double start = bench_now();
  for (uint64_t r = 0; r < rounds; r++) {
    for (uint64_t i = 0; i < live; i++) {
      bufs[i].key = bench_rng_next(&rng);
      bufs[i].size = 0;
      bufs[i].p = NULL;
      resize(&bufs[i], START_SIZE);
    }
    uint64_t growing = live; /* bufs[0 .. growing) are unfinished */
    while (growing > 0) {
      uint64_t pick = bench_rng_below(&rng, growing);
      buffer *b = &bufs[pick];
      size_t old = b->size;
      size_t next = old + 1 + bench_rng_below(&rng, old / 2 + 16);
      resize(b, next < max_size ? next : max_size);
      reallocs++;
      check_range(b, 0, EDGE);
      check_range(b, old - EDGE, old);
      if (b->size == max_size) {
        check_range(b, 0, b->size);
        resize(b, START_SIZE);
        reallocs++;
        check_range(b, 0, START_SIZE);
        free(b->p);
        *b = bufs[--growing];
      }
    }
  }
  double seconds = bench_now() - start;

  free(bufs);
  bench_result(reallocs, seconds, " rounds=%llu max_size=%llu live=%llu seed=%llu",
               (unsigned long long)rounds, (unsigned long long)max_size, (unsigned long long)live,
               (unsigned long long)seed);
  return 0;
}
