/* Huge pages (src/thp.c): a dense heap becomes huge pages, a small one gets none, memory
 * goes back at idle in whole huge pages, the system's and the user's "no" is honoured, a
 * kernel without MADV_COLLAPSE still works, and fork keeps a huge-page heap correct.
 *
 *   memory_thp dense      >= 80% of committed memory in huge pages (AnonHugePages)
 *   memory_thp small      a process holding 4 MiB: AnonHugePages 0
 *   memory_thp idle       dense heap freed: back within 5 MiB, >= 3/4 of the huge pages
 *                         given back whole
 *   memory_thp off        no huge page (run with HAKMEM_THP=0, or `off-prctl`:
 *                         PR_SET_THP_DISABLE set by the program)
 *   memory_thp nocollapse HAKMEM_THP=test-no-collapse: collapses fail, the heap works
 *   memory_thp fork       a child writes a byte per page of the huge-page heap
 *   memory_thp fault      a heap past 32 MiB grows by 64 MiB more: that growth is in huge
 *                         pages as soon as it is written (ranges advised before use fault
 *                         them: thp.faulted), RSS no more than the data and a few ranges;
 *                         `fault-limit`, under a soft limit, and `fault-collapse`, with
 *                         HAKMEM_THP=collapse: no range advised
 *
 * The dense and idle modes need a kernel that can make huge pages at all: a probe
 * collapses a 2 MiB range of its own first, and the test is skipped (77) with a note
 * if THP is `never` or no huge page can be had. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "thp_test.h"
#define BLOCK 64
#define HEAP_BYTES ((size_t)96 << 20)
#define NBLOCKS (HEAP_BYTES / BLOCK)

static char **blocks;

static void fill(void) {
  if (blocks == NULL) blocks = mt_scratch(NBLOCKS * sizeof *blocks);
  for (size_t i = 0; i < NBLOCKS; i++) {
    blocks[i] = malloc(BLOCK);
    if (blocks[i] == NULL) mt_fail("malloc failed at block %zu", i);
    memset(blocks[i], (int)(i & 0x7f) | 1, BLOCK);
  }
}

static void verify(const char *when) {
  for (size_t i = 0; i < NBLOCKS; i++)
    for (size_t k = 0; k < BLOCK; k++)
      if (blocks[i][k] != (char)((i & 0x7f) | 1)) mt_fail("%s: block %zu byte %zu changed", when, i, k);
}

static void print_thp(const char *label) {
  printf(
      "%-28s AnonHugePages %6.1f MiB, thp.huge_bytes %6.1f MiB, committed %6.1f MiB; collapsed %llu, "
      "failures %llu, advised %llu, whole %llu, broken %llu\n",
      label, mt_mib(anon_huge()), mt_mib(stat_of("thp.huge_bytes")), mt_mib(stat_of("total.committed")),
      (unsigned long long)stat_of("thp.collapsed"), (unsigned long long)stat_of("thp.collapse_failures"),
      (unsigned long long)stat_of("thp.advised"), (unsigned long long)stat_of("thp.returned_whole"),
      (unsigned long long)stat_of("thp.broken"));
  fflush(stdout);
}

/* Waits up to `seconds` for the purge thread to collapse the heap: >= 80% of committed
 * memory in huge pages. Returns the share reached. */
static double wait_coverage(double seconds) {
  double end = tu_now() + seconds, share = 0;
  do {
    usleep(50 * 1000);
    share = (double)anon_huge() / (double)stat_of("total.committed");
  } while (share < 0.8 && tu_now() < end);
  return share;
}

static int dense(void) {
  probe_or_skip();
  fill();
  /* Generous on a loaded machine: the purge thread collapses 32 ranges per pass. */
  double share = wait_coverage(30);
  print_thp("dense heap:");
  verify("after the collapses");
  if (share < 0.8) mt_fail("only %.0f%% of committed memory in huge pages", share * 100);
  printf("coverage %.0f%%: ok\n", share * 100);
  return 0;
}

static int small(void) {
  char *b[64];
  for (int i = 0; i < 64; i++) b[i] = mt_malloc_touched(64 * KiB); /* 4 MiB */
  usleep(600 * 1000);                                              /* several purge periods */
  print_thp("small process:");
  if (anon_huge() != 0) mt_fail("a process holding 4 MiB has huge pages");
  for (int i = 0; i < 64; i++) free(b[i]);
  return 0;
}

static int idle(void) {
  probe_or_skip();
  mt_warm_up();
  blocks = mt_scratch(NBLOCKS * sizeof *blocks); /* the test's own, before the baseline */
  size_t baseline = mt_rss("baseline");
  fill();
  double share = wait_coverage(30);
  size_t peak = mt_rss("dense heap");
  print_thp("dense heap:");
  if (share < 0.8) mt_fail("only %.0f%% of committed memory in huge pages", share * 100);
  mt_require_grew(baseline, peak, HEAP_BYTES / 2);
  for (size_t i = 0; i < NBLOCKS; i++) free(blocks[i]);
  usleep(100 * 1000 + 1000 * 1000); /* the purge delay, and the purge thread's backoff */
  size_t after = mt_rss("idle");
  print_thp("idle:");
  mt_require_at_most("RSS at idle over the baseline", after > baseline ? after - baseline : 0, 5 * MiB);
  /* Whole, but for ranges a few blocks keep (a region's header, a heap's cached spans):
   * those, mostly free, are broken. */
  uint64_t collapsed = stat_of("thp.collapsed"), whole = stat_of("thp.returned_whole");
  if (whole * 4 < collapsed * 3)
    mt_fail("only %llu of %llu huge pages given back whole", (unsigned long long)whole,
            (unsigned long long)collapsed);
  if (anon_huge() > 2 * MiB) mt_fail("huge pages left at idle");
  return 0;
}

static int off(bool by_prctl) {
  if (by_prctl && prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0) != 0)
    mt_fail("PR_SET_THP_DISABLE: %s", strerror(errno));
  fill();
  usleep(4000 * 1000); /* as long as the dense heap needs (two looks 1 s apart), and more */
  print_thp(by_prctl ? "PR_SET_THP_DISABLE:" : "HAKMEM_THP=0:");
  if (anon_huge() != 0 || stat_of("thp.collapsed") != 0) mt_fail("huge pages despite the setting");
  verify("after the wait");
  return 0;
}

static int nocollapse(void) {
  fill();
  double end = tu_now() + 30;
  while (stat_of("thp.collapse_failures") == 0 && tu_now() < end) usleep(50 * 1000);
  print_thp("MADV_COLLAPSE failing:");
  if (stat_of("thp.collapse_failures") == 0 || stat_of("thp.advised") == 0)
    mt_fail("no collapse tried, or none left to khugepaged");
  if (stat_of("thp.collapsed") != 0) mt_fail("a collapse succeeded through the test switch");
  verify("after the failed collapses");
  for (size_t i = 0; i < NBLOCKS; i += 2) free(blocks[i]); /* purging across advised ranges */
  for (size_t i = 0; i < NBLOCKS; i += 2)
    blocks[i] = malloc(BLOCK), memset(blocks[i], (int)(i & 0x7f) | 1, BLOCK);
  verify("after reuse");
  return 0;
}

static char *grow_blocks[NBLOCKS];

/* `none`: the label of a run where no range may fault huge (a limit, HAKMEM_THP=collapse). */
static int fault(const char *none) {
  probe_or_skip();
  fill();             /* 96 MiB: past the 32 MiB that turns the advice on */
  usleep(400 * 1000); /* passes: the flag set, older regions' ranges advised */
  size_t huge0 = anon_huge(), rss0 = tu_rss_bytes();
  uint64_t faulted0 = stat_of("thp.faulted");
  size_t n = (64u << 20) / BLOCK;
  for (size_t i = 0; i < n; i++) {
    grow_blocks[i] = malloc(BLOCK);
    if (grow_blocks[i] == NULL) mt_fail("malloc failed at block %zu", i);
    memset(grow_blocks[i], 0x5a, BLOCK);
  }
  size_t grown = anon_huge() - huge0, rss = tu_rss_bytes() - rss0;
  uint64_t faulted = stat_of("thp.faulted") - faulted0;
  print_thp(none != NULL ? none : "grown by 64 MiB:");
  printf("%-28s AnonHugePages +%.1f MiB, RSS +%.1f MiB, %llu ranges faulted huge\n", "", mt_mib(grown),
         mt_mib(rss), (unsigned long long)faulted);
  if (none != NULL) {
    if (faulted != 0) mt_fail("%s %llu ranges advised", none, (unsigned long long)faulted);
  } else {
    if (faulted < 24) mt_fail("only %llu ranges of the 64 MiB faulted huge", (unsigned long long)faulted);
    if (grown < (48u << 20)) mt_fail("only %.1f MiB of the 64 MiB in huge pages", mt_mib(grown));
    /* 64 MiB of 64 B blocks with their slabs' gaps, and at most a few ranges ahead */
    if (rss > (76u << 20)) mt_fail("RSS grew by %.1f MiB for 64 MiB of blocks", mt_mib(rss));
  }
  for (size_t i = 0; i < n; i++)
    if (grow_blocks[i][0] != 0x5a || grow_blocks[i][BLOCK - 1] != 0x5a) mt_fail("block %zu changed", i);
  verify("after the growth");
  return 0;
}

static int fork_child(void) {
  probe_or_skip();
  fill();
  double share = wait_coverage(30);
  print_thp("before fork:");
  if (share < 0.8) mt_fail("only %.0f%% of committed memory in huge pages", share * 100);
  pid_t pid = fork();
  if (pid < 0) mt_fail("fork: %s", strerror(errno));
  if (pid == 0) {
    for (size_t i = 0; i < NBLOCKS; i += 4096 / BLOCK) blocks[i][0] ^= 0x40; /* a byte per page */
    for (size_t i = 0; i < NBLOCKS; i += 4096 / BLOCK) blocks[i][0] ^= 0x40;
    verify("in the child");
    for (size_t i = 0; i < NBLOCKS; i += 3) free(blocks[i]);
    for (size_t i = 0; i < NBLOCKS; i += 3)
      blocks[i] = malloc(BLOCK), memset(blocks[i], (int)(i & 0x7f) | 1, BLOCK);
    verify("in the child, after reuse");
    _exit(0);
  }
  int status;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    mt_fail("the child failed (status %d)", status);
  verify("in the parent");
  printf("fork: child correct, parent unchanged\n");
  return 0;
}

int main(int argc, char **argv) {
  thp_test_start();
  const char *mode = argc > 1 ? argv[1] : "dense";
  if (strcmp(mode, "dense") == 0) return dense();
  if (strcmp(mode, "small") == 0) return small();
  if (strcmp(mode, "idle") == 0) return idle();
  if (strcmp(mode, "off") == 0) return off(false);
  if (strcmp(mode, "off-prctl") == 0) return off(true);
  if (strcmp(mode, "nocollapse") == 0) return nocollapse();
  if (strcmp(mode, "fork") == 0) return fork_child();
  if (strcmp(mode, "fault") == 0) return fault(NULL);
  if (strcmp(mode, "fault-limit") == 0) return fault("grown under a soft limit:");
  if (strcmp(mode, "fault-collapse") == 0) return fault("grown, HAKMEM_THP=collapse:");
  mt_fail("unknown mode %s", mode);
}
