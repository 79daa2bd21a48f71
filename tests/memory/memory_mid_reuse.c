/* The mid classes from 5 KiB up do not each keep memory of their own.
 *
 * classes: 2 MiB of 16 KiB blocks, every page written, are freed; then 2 MiB of 6 KiB
 *   blocks are allocated and written. Their slabs span one unit each, like the freed
 *   ones, so they take those back from the span cache and the region and write pages
 *   that are resident already. Bound: page faults while the 6 KiB blocks are written
 *   <= a quarter of their pages. When the 16 KiB slabs spanned two units, half the freed
 *   spans sat in the span cache where no 1-unit slab could take them: 301 faults for
 *   511 pages, against 45 now. Purging is off (HAKMEM_PURGE_DELAY_MS=-1, set by the
 *   test's environment), so that no timing decides what is still resident.
 * realloc: a buffer that realloc grows past 8 KiB moves once, to a span of its own, and
 *   then grows in place, 512 bytes a step, up to 60 KiB, its contents kept. With 16 KiB
 *   as the limit it moved to the 16 KiB class first, then again to a span.
 *
 * Usage: memory_mid_reuse classes|realloc
 */
#include <sys/resource.h>

#include "memory_test.h"

enum { WORKING_SET = 2 << 20, FIRST_SIZE = 16 << 10, SECOND_SIZE = 6 << 10 };
enum { GROW_FROM = (8 << 10) + 1, GROW_STEP = 512, GROW_TO = 60 << 10 };

static long minor_faults(void) {
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) != 0) mt_fail("getrusage failed");
  return ru.ru_minflt;
}

static void test_classes(void) {
  enum { FIRST_N = WORKING_SET / FIRST_SIZE, SECOND_N = WORKING_SET / SECOND_SIZE };
  void **blocks = mt_scratch(SECOND_N * sizeof *blocks);
  /* Not mt_warm_up: the pages of its big blocks, freed and never purged, would be
   * what the 16 KiB blocks reuse. */
  free(mt_malloc_touched(FIRST_SIZE));
  free(mt_malloc_touched(SECOND_SIZE));
  size_t baseline = mt_rss("baseline");
  for (size_t i = 0; i < FIRST_N; i++) blocks[i] = mt_malloc_touched(FIRST_SIZE);
  size_t peak = mt_rss("16 KiB blocks written");
  mt_require_grew(baseline, peak, WORKING_SET / 2);
  for (size_t i = 0; i < FIRST_N; i++) free(blocks[i]);
  long before = minor_faults();
  for (size_t i = 0; i < SECOND_N; i++) blocks[i] = mt_malloc_touched(SECOND_SIZE);
  long faults = minor_faults() - before;
  mt_rss("6 KiB blocks written");
  size_t page = tu_page(), pages = (size_t)SECOND_N * SECOND_SIZE / page;
  printf("%-34s %8ld for %zu pages of blocks\n", "page faults writing 6 KiB blocks", faults, pages);
  mt_print_info("allocator, at the end:");
  for (size_t i = 0; i < SECOND_N; i++) free(blocks[i]);
  mt_scratch_free(blocks, SECOND_N * sizeof *blocks);
  mt_require_at_most("memory faulted in for 6 KiB blocks", (size_t)faults * page, pages * page / 4);
}

static void test_realloc(void) {
  unsigned char *p = mt_malloc_touched(GROW_FROM - 1);
  for (size_t i = 0; i < GROW_FROM - 1; i++) p[i] = (unsigned char)(i * 31);
  size_t size = GROW_FROM - 1;
  unsigned char *home = NULL;
  for (size_t n = GROW_FROM; n <= GROW_TO; n += GROW_STEP) {
    unsigned char *q = realloc(p, n);
    if (q == NULL) mt_fail("realloc(%zu) returned NULL", n);
    for (size_t i = 0; i < size; i++)
      if (q[i] != (unsigned char)(i * 31)) mt_fail("realloc to %zu lost byte %zu", n, i);
    for (size_t i = size; i < n; i++) q[i] = (unsigned char)(i * 31);
    if (home == NULL) home = q;
    if (q != home) mt_fail("realloc to %zu bytes moved the buffer from %p to %p", n, (void *)home, (void *)q);
    p = q;
    size = n;
  }
  printf("realloc from %d to %d bytes kept the buffer at %p after its first move\n", GROW_FROM, GROW_TO,
         (void *)home);
  free(p);
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  if (strcmp(mode, "classes") == 0) test_classes();
  else if (strcmp(mode, "realloc") == 0) test_realloc();
  else mt_fail("usage: memory_mid_reuse classes|realloc");
  printf("ok\n");
  return 0;
}
