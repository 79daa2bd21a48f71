/* Huge pages for huge blocks (src/space/thp_blocks.c): a huge block written densely
 * becomes huge pages, one written sparsely stays as resident as the program made it, and
 * free and realloc racing the purge thread's collapses keep every block intact.
 *
 *   memory_thp_blocks dense   a 96 MiB block, every byte written: >= 80% of it in huge
 *                             pages within 30 s; content kept; realloc'd to 200 MiB
 *                             (pages moved) and freed: thp.huge_bytes back to 0
 *   memory_thp_blocks sparse  a calloc'd 1 GiB block, one byte per 256 KiB written: after
 *                             3 s no huge page, RSS up by at most the pages written + 8 MiB
 *   memory_thp_blocks race    300 huge blocks of 34-100 MiB, a word per page written,
 *                             freed or realloc'd at once or up to 20 ms later, while
 *                             the purge thread collapses their ranges
 *   memory_thp_blocks big     in a heap past 32 MiB: a malloc'd 96 MiB block is in huge
 *                             pages as soon as it is written, with no collapse
 *                             (thp.blocks_faulted), kept through realloc to 160 MiB and
 *                             back to 64; a calloc'd 512 MiB one written sparsely gets
 *                             no huge page, RSS up by at most the pages written + 8 MiB
 *
 * Skipped (77) where THP is `never` or a probe collapse gets no huge page. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "thp_test.h"

/* A word every `stride` bytes (8: all of it; 4096: a word per page, which makes the
 * page resident as well). */
static void write_pattern(unsigned char *p, size_t n, unsigned seed, size_t stride) {
  for (size_t i = 0; i < n; i += stride) memcpy(p + i, &(uint64_t){i * 0x9e3779b97f4a7c15ull + seed}, 8);
}

static void check_pattern(const unsigned char *p, size_t n, unsigned seed, size_t stride, const char *when) {
  for (size_t i = 0; i < n; i += stride) {
    uint64_t v, want = i * 0x9e3779b97f4a7c15ull + seed;
    memcpy(&v, p + i, 8);
    if (v != want) mt_fail("%s: byte %zu of the block changed", when, i);
  }
}

static void print_thp(const char *label) {
  printf(
      "%-24s AnonHugePages %6.1f MiB, thp.huge_bytes %6.1f MiB, collapsed %llu (%llu in huge blocks), "
      "failures %llu\n",
      label, mt_mib(anon_huge()), mt_mib(stat_of("thp.huge_bytes")),
      (unsigned long long)stat_of("thp.collapsed"), (unsigned long long)stat_of("thp.blocks_collapsed"),
      (unsigned long long)stat_of("thp.collapse_failures"));
  fflush(stdout);
}

static int dense(void) {
  probe_or_skip();
  size_t n = (size_t)96 << 20;
  unsigned char *p = malloc(n);
  if (p == NULL) mt_fail("malloc(96 MiB) failed");
  write_pattern(p, n, 1, 8);
  double end = tu_now() + 30;
  while (anon_huge() < n * 8 / 10 && tu_now() < end) usleep(50 * 1000);
  size_t huge = anon_huge();
  printf("96 MiB block written: AnonHugePages %.1f MiB\n", mt_mib(huge));
  print_thp("dense block:"); /* before any verdict: what a failure needs to be read */
  if (huge < n * 8 / 10) mt_fail("only %.0f%% of the block in huge pages", 100.0 * (double)huge / (double)n);
  if (stat_of("thp.blocks_collapsed") * ((size_t)2 << 20) < n * 8 / 10)
    mt_fail("thp.blocks_collapsed does not count the block's huge pages");
  check_pattern(p, n, 1, 8, "after the collapses");
  unsigned char *q = realloc(p, (size_t)200 << 20); /* moves its pages (mremap) */
  if (q == NULL) mt_fail("realloc to 200 MiB failed");
  check_pattern(q, n, 1, 8, "after realloc");
  free(q);
  print_thp("freed:");
  if (stat_of("thp.huge_bytes") != 0) mt_fail("thp.huge_bytes still counts the freed block");
  printf("dense huge block: ok\n");
  return 0;
}

static int sparse(void) {
  probe_or_skip();
  mt_warm_up();
  size_t n = (size_t)1 << 30, step = 256 * KiB;
  size_t baseline = mt_rss("baseline");
  unsigned char *p = calloc(1, n);
  if (p == NULL) mt_fail("calloc(1 GiB) failed");
  for (size_t i = 0; i < n; i += step) p[i] = 1;
  usleep(3000 * 1000); /* many purge-thread passes */
  size_t rss = mt_rss("sparse block");
  print_thp("sparse block:");
  size_t written = n / step * 4 * KiB;
  mt_require_at_most("RSS growth of a sparse 1 GiB block", rss > baseline ? rss - baseline : 0,
                     written + 8 * MiB);
  if (anon_huge() != 0 || stat_of("thp.blocks_collapsed") != 0) mt_fail("a sparse block got huge pages");
  for (size_t i = 0; i < n; i += step)
    if (p[i] != 1 || p[i + 1] != 0) mt_fail("byte %zu of the sparse block changed", i);
  free(p);
  printf("sparse huge block: ok\n");
  return 0;
}

static int race(void) {
  probe_or_skip();
  uint64_t rng = 88172645463325252ull;
  for (unsigned round = 0; round < 300; round++) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    size_t n = ((size_t)34 << 20) + (size_t)(rng % 66) * MiB;
    unsigned char *p = malloc(n);
    if (p == NULL) mt_fail("malloc(%zu) failed in round %u", n, round);
    write_pattern(p, n, round, 4096);
    if (rng & 16) usleep((unsigned)(rng >> 40) % 20000); /* a collapse may start meanwhile */
    if (rng & 32) {
      size_t m = (rng & 64) ? n + ((size_t)8 << 20) : n - ((size_t)2 << 20);
      unsigned char *q = realloc(p, m);
      if (q == NULL) mt_fail("realloc(%zu) failed in round %u", m, round);
      check_pattern(q, m < n ? m : n, round, 4096, "after realloc");
      p = q;
    } else {
      check_pattern(p, n, round, 4096, "before free");
    }
    free(p);
  }
  print_thp("300 rounds:");
  printf("huge blocks racing collapses: ok\n");
  return 0;
}

static int big(void) {
  probe_or_skip();
  enum { SMALL = 64 };
  size_t count = ((size_t)48 << 20) / SMALL; /* 48 MiB of small blocks: a big heap */
  char **small = malloc(count * sizeof *small);
  if (small == NULL) mt_fail("malloc of the pointer table failed");
  for (size_t i = 0; i < count; i++)
    if ((small[i] = malloc(SMALL)) == NULL) mt_fail("malloc(%d) failed at block %zu", SMALL, i);
    else memset(small[i], (int)(i & 0x7f), SMALL);
  usleep(400 * 1000); /* purge-thread passes: the heap is known to be big */
  size_t n = (size_t)96 << 20, huge0 = anon_huge();
  uint64_t collapsed0 = stat_of("thp.blocks_collapsed"), faulted0 = stat_of("thp.blocks_faulted");
  unsigned char *p = malloc(n);
  if (p == NULL) mt_fail("malloc(96 MiB) failed");
  write_pattern(p, n, 7, 8);
  size_t grown = anon_huge() - huge0;
  uint64_t faulted = stat_of("thp.blocks_faulted") - faulted0;
  print_thp("96 MiB block written:");
  printf("%-24s AnonHugePages +%.1f MiB at once, %llu ranges faulted huge\n", "", mt_mib(grown),
         (unsigned long long)faulted);
  if (faulted < 47) mt_fail("only %llu of the block's 48 ranges advised", (unsigned long long)faulted);
  if (grown < n * 8 / 10) mt_fail("only %.1f MiB of the written 96 MiB in huge pages", mt_mib(grown));
  unsigned char *q = realloc(p, (size_t)160 << 20);
  if (q == NULL) mt_fail("realloc to 160 MiB failed");
  check_pattern(q, n, 7, 8, "after realloc to 160 MiB");
  write_pattern(q + n, (size_t)64 << 20, 8, 8);
  check_pattern(q + n, (size_t)64 << 20, 8, 8, "the grown part");
  p = realloc(q, (size_t)64 << 20);
  if (p == NULL) mt_fail("realloc to 64 MiB failed");
  check_pattern(p, (size_t)64 << 20, 7, 8, "after realloc to 64 MiB");
  usleep(400 * 1000);
  if (stat_of("thp.blocks_collapsed") != collapsed0) mt_fail("a block that faulted huge pages was collapsed");
  free(p);

  size_t m = (size_t)512 << 20, step = 256 * KiB, rss0 = tu_rss_bytes();
  /* The small heap's settled ranges may be collapsed meanwhile: those count in
   * thp.huge_bytes (regions' huge pages), the block's own would not. */
  huge0 = anon_huge();
  uint64_t regions0 = stat_of("thp.huge_bytes");
  collapsed0 = stat_of("thp.blocks_collapsed");
  unsigned char *c = calloc(1, m);
  if (c == NULL) mt_fail("calloc(512 MiB) failed");
  for (size_t i = 0; i < m; i += step) c[i] = 1;
  usleep(1000 * 1000);
  size_t rss = tu_rss_bytes() - rss0;
  print_thp("sparse calloc'd block:");
  mt_require_at_most("RSS growth of a sparse calloc'd 512 MiB block", rss, m / step * 4 * KiB + 8 * MiB);
  /* A collapse is seen by the kernel before its pass counts it: look again before failing. */
  int64_t own = 0;
  for (int look = 0; look < 10; look++) {
    own = ((int64_t)anon_huge() - (int64_t)huge0) - ((int64_t)stat_of("thp.huge_bytes") - (int64_t)regions0);
    if (own <= 0) break;
    usleep(200 * 1000);
  }
  if (own > 0) mt_fail("a sparse calloc'd block got %.1f MiB of huge pages", mt_mib((size_t)own));
  if (stat_of("thp.blocks_collapsed") != collapsed0) mt_fail("a sparse calloc'd block was collapsed");
  for (size_t i = 0; i < m; i += step)
    if (c[i] != 1 || c[i + 1] != 0) mt_fail("byte %zu of the sparse block changed", i);
  free(c);
  for (size_t i = 0; i < count; i++)
    if (small[i][0] != (char)(i & 0x7f) || small[i][SMALL - 1] != (char)(i & 0x7f))
      mt_fail("small block %zu changed", i);
  for (size_t i = 0; i < count; i++) free(small[i]);
  free(small);
  printf("huge blocks of a big heap: ok\n");
  return 0;
}

int main(int argc, char **argv) {
  thp_test_start();
  const char *mode = argc > 1 ? argv[1] : "dense";
  if (strcmp(mode, "dense") == 0) return dense();
  if (strcmp(mode, "sparse") == 0) return sparse();
  if (strcmp(mode, "race") == 0) return race();
  if (strcmp(mode, "big") == 0) return big();
  mt_fail("unknown mode %s", mode);
}
