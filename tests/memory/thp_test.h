/* Huge-page tests' helpers (memory_thp.c, memory_thp_blocks.c): AnonHugePages of the
 * process, a statistic by name, and a probe that skips (77) where the kernel makes no
 * huge page. */
#ifndef HAKMEM_TESTS_THP_TEST_H
#define HAKMEM_TESTS_THP_TEST_H
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memory_test.h"

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif
#define SKIP 77

static inline size_t anon_huge(void) {
  FILE *f = fopen("/proc/self/smaps_rollup", "r");
  if (f == NULL) mt_fail("cannot read /proc/self/smaps_rollup");
  char line[256];
  size_t kib = 0;
  while (fgets(line, sizeof line, f))
    if (strncmp(line, "AnonHugePages:", 14) == 0) kib = strtoull(line + 14, NULL, 10);
  fclose(f);
  return kib * KiB;
}

static inline uint64_t stat_of(const char *name) {
  uint64_t v = 0;
  if (hak_stats_get(name, &v) != 0) mt_fail("hak_stats_get(%s) failed", name);
  return v;
}

/* Can this machine make a huge page now? One aligned 2 MiB range of our own, written,
 * then MADV_COLLAPSE. */
static inline void probe_or_skip(void) {
  char mode[128] = "";
  FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
  if (f == NULL || fgets(mode, sizeof mode, f) == NULL || strstr(mode, "[never]")) {
    printf("SKIP: transparent huge pages are off here (%s)\n", f ? mode : "no sysfs file");
    exit(SKIP);
  }
  fclose(f);
  size_t two = (size_t)2 << 20;
  char *raw = mmap(NULL, 2 * two, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  char *p = (char *)(((uintptr_t)raw + two - 1) & ~(uintptr_t)(two - 1));
  memset(p, 1, two);
  size_t before = anon_huge();
  int rc = madvise(p, two, MADV_COLLAPSE);
  int err = errno;
  size_t after = anon_huge();
  munmap(raw, 2 * two);
  if (rc != 0 || after < before + two) {
    printf("SKIP: the kernel made no huge page for a probe (MADV_COLLAPSE: %s)\n",
           rc ? strerror(err) : "no AnonHugePages");
    exit(SKIP);
  }
}

/* Line-buffered output; skips (77) unless the process runs on hakmem. */
static inline void thp_test_start(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (!tu_have_hakmem()) {
    printf("SKIP: not running on hakmem\n");
    exit(SKIP);
  }
}

#endif
