/* The slowest malloc calls: fills a heap of `mib` MiB with blocks of `size` bytes, each
 * malloc timed alone with the TSC, and each block written whole (as a program would, so
 * that its page faults land where a program's do). Prints the slowest call, the 99.99th
 * and 99.9th percentiles and the median, in cycles and in microseconds (the TSC's rate
 * measured against CLOCK_MONOTONIC over the run), and how many calls took over 100 us and
 * over 1 ms: on a shared VM the slowest call is often the host's doing, the counts less so. Only malloc's own time is counted; the
 * writes are outside the timed interval.
 *
 *   bench_malloc_tail [mib=1024] [size=256]
 *
 * Used for the design notes' "no stall on malloc" figures: the backend's huge pages on
 * and off (HAKMEM_THP), interleaved, several runs each. */
#include "bench_common.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The TSC where there is one; elsewhere the monotonic clock's nanoseconds. */
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
static inline uint64_t ticks(void) {
  _mm_lfence();
  uint64_t t = __rdtsc();
  _mm_lfence();
  return t;
}
#else
static inline uint64_t ticks(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
#endif

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 1024;
  size_t size = argc > 2 ? strtoul(argv[2], NULL, 10) : 256;
  size_t n = (mib << 20) / size;
  uint64_t *cycles = calloc(n, sizeof *cycles);
  void **blocks = calloc(n, sizeof *blocks);
  if (cycles == NULL || blocks == NULL) return 1;
  memset(cycles, 0, n * sizeof *cycles); /* the tables' own faults before the timed part */
  memset(blocks, 0, n * sizeof *blocks);
  double t0 = bench_now();
  uint64_t c0 = ticks();
  for (size_t i = 0; i < n; i++) {
    uint64_t a = ticks();
    void *p = malloc(size);
    uint64_t b = ticks();
    if (p == NULL) return 1;
    cycles[i] = b - a;
    memset(p, (int)i, size);
    blocks[i] = p;
  }
  double ghz = (double)(ticks() - c0) / (bench_now() - t0) / 1e9;
  size_t over_100us = 0, over_1ms = 0;
  for (size_t i = 0; i < n; i++) {
    over_100us += cycles[i] > ghz * 1e5;
    over_1ms += cycles[i] > ghz * 1e6;
  }
  qsort(cycles, n, sizeof *cycles, cmp_u64);
  uint64_t mx = cycles[n - 1], p9999 = cycles[n - 1 - n / 10000], p999 = cycles[n - 1 - n / 1000],
           med = cycles[n / 2];
  printf(
      "malloc_tail mib=%zu size=%zu calls=%zu tsc_ghz=%.3f max_cycles=%llu p99.99_cycles=%llu "
      "p99.9_cycles=%llu median_cycles=%llu max_us=%.1f p99.99_us=%.2f over_100us=%zu over_1ms=%zu\n",
      mib, size, n, ghz, (unsigned long long)mx, (unsigned long long)p9999, (unsigned long long)p999,
      (unsigned long long)med, mx / ghz / 1e3, p9999 / ghz / 1e3, over_100us, over_1ms);
  for (size_t i = 0; i < n; i++) free(blocks[i]);
  return 0;
}
