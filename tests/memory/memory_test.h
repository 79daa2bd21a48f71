/* Helpers for the memory-behaviour tests: they measure resident memory (RSS, from
 * /proc/self/statm) around a workload and require it to stay within a bound.
 *
 * Figures are printed on stdout so the test log shows them. A failed bound prints
 * "FAIL: ..." and exits 1. Bookkeeping arrays come from mmap, not malloc, so that the
 * allocator's figures are its own; they are touched before the baseline is taken.
 */
#ifndef HAKMEM_TESTS_MEMORY_TEST_H
#define HAKMEM_TESTS_MEMORY_TEST_H

#include <inttypes.h>
#include <malloc.h>
#include <sys/mman.h>

#include "test_util.h"

#define MiB ((size_t)1 << 20)
#define KiB ((size_t)1 << 10)

static inline double mt_mib(size_t bytes) { return (double)bytes / (double)MiB; }

static inline void mt_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static inline void mt_fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("FAIL: ");
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
  fflush(stdout);
  exit(1);
}

/* Resident memory now, printed with `label`. */
static inline size_t mt_rss(const char *label) {
  size_t rss = tu_rss_bytes();
  if (rss == 0) mt_fail("cannot read /proc/self/statm");
  printf("%-34s RSS %8.1f MiB\n", label, mt_mib(rss));
  fflush(stdout);
  return rss;
}

/* Requires value <= bound; prints both either way. */
static inline void mt_require_at_most(const char *what, size_t value, size_t bound) {
  printf("%-34s %8.1f MiB (bound %.1f MiB): %s\n", what, mt_mib(value), mt_mib(bound),
         value <= bound ? "ok" : "TOO HIGH");
  fflush(stdout);
  if (value > bound) mt_fail("%s: %.1f MiB > %.1f MiB", what, mt_mib(value), mt_mib(bound));
}

/* The workload must really have been resident, or the later bound proves nothing. */
static inline void mt_require_grew(size_t baseline, size_t peak, size_t at_least) {
  if (peak < baseline + at_least) {
    mt_fail("RSS grew by only %.1f MiB during the workload, expected at least %.1f MiB",
            mt_mib(peak > baseline ? peak - baseline : 0), mt_mib(at_least));
  }
}

/* A zeroed array of `bytes` from mmap, touched so that it is resident already. */
static inline void *mt_scratch(size_t bytes) {
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) mt_fail("mmap of %zu bytes failed", bytes);
  memset(p, 0, bytes);
  return p;
}

static inline void mt_scratch_free(void *p, size_t bytes) { munmap(p, bytes); }

static inline void mt_print_info(const char *label);

/* malloc that fails the test on NULL, with the block written through. */
static inline void *mt_malloc_touched(size_t size) {
  void *p = malloc(size);
  if (p == NULL) {
    int err = errno;
    mt_rss("when malloc failed");
    mt_print_info("allocator, when malloc failed:");
    mt_fail("malloc(%zu) returned NULL, errno %d (%s)", size, err, strerror(err));
  }
  memset(p, 0xa5, size);
  return p;
}

/* malloc_trim(0) must say that it released memory. */
static inline void mt_trim_must_release(void) {
  int released = malloc_trim(0);
  printf("malloc_trim(0) returned %d\n", released);
  if (released != 1) mt_fail("malloc_trim(0) returned %d, expected 1", released);
}

/* Small allocations for `ms` milliseconds: each step frees a slot of the ring and fills
 * it again, with 16..1039 bytes, or `fixed` bytes when it is not 0. */
static inline void mt_churn_ring(void **ring, size_t slots, unsigned ms, size_t fixed) {
  double end = tu_now() + ms / 1000.0;
  for (size_t step = 0; tu_now() < end;) {
    for (int k = 0; k < 256; k++, step++) {
      free(ring[step % slots]);
      ring[step % slots] = mt_malloc_touched(fixed ? fixed : 16 + (step * 7919) % 1024);
    }
  }
}

/* A few blocks of each kind, so that the allocator's start-up memory is in the
 * baseline and not counted against the workload. */
static inline void mt_warm_up(void) {
  static const size_t sizes[] = {16, 64, 512, 1024, 4096, 32 * KiB, 256 * KiB, 2 * MiB};
  enum { N = sizeof sizes / sizeof sizes[0] };
  void *blocks[N];
  for (size_t i = 0; i < N; i++) blocks[i] = mt_malloc_touched(sizes[i]);
  for (size_t i = 0; i < N; i++) free(blocks[i]);
}

/* Prints hakmem's own figures, when the program runs on hakmem. */
static inline void mt_print_info(const char *label) {
  if (!tu_have_hakmem()) {
    printf("%-34s (not running on hakmem: no allocator figures)\n", label);
    return;
  }
  hak_info_t info;
  hak_get_info(&info);
  printf("%-34s in_use %.1f MiB, mapped %.1f MiB, committed %.1f MiB, released %.1f MiB\n", label,
         mt_mib(info.in_use), mt_mib(info.mapped), mt_mib(info.committed), mt_mib(info.released));
  uint64_t huge = 0, anon_huge = 0;
  hak_stats_get("thp.huge_bytes", &huge);
  FILE *f = fopen("/proc/self/smaps_rollup", "r");
  char line[256];
  while (f != NULL && fgets(line, sizeof line, f) != NULL)
    if (sscanf(line, "AnonHugePages: %" SCNu64 " kB", &anon_huge) == 1) break;
  if (f != NULL) fclose(f);
  printf("%-34s thp.huge_bytes %.1f MiB, AnonHugePages %.1f MiB\n", "", mt_mib(huge),
         mt_mib(anon_huge * 1024));
  fflush(stdout);
}

#endif
