/* Large blocks that the program writes whole are faulted in at malloc, in one call;
 * blocks it leaves unwritten are not, but for the one block that a change of habit
 * makes hakmem guess wrong.
 *
 * 0. After a block left unwritten, one of 4 MiB written whole, then one of 8 MiB with
 *    one page written: one block is no habit, so the last is not prefaulted (barnes's
 *    tables).
 * 1. 12 blocks of 4 MiB, each written whole and kept (new memory every time): from the
 *    third on, each must be prefaulted (tier.large.prefaulted_bytes).
 * 2. 12 blocks of 8 MiB with one page written, kept: the first is prefaulted (the habit
 *    of step 1 predicts it wrong), no other; RSS grows by at most two blocks.
 * 3. Blocks written whole again: prefaulting comes back after the second.
 * The purge delay is long (the test's environment); nothing is freed until the end.
 */
#include <stdint.h>

#include "hakmem.h"
#include "memory_test.h"

enum { BLOCKS = 12 };

static uint64_t prefaulted(void) {
  uint64_t v = 0;
  size_t len = sizeof v;
  if (hak_ctl_get("tier.large.prefaulted_bytes", &v, &len) != 0 || len != sizeof v)
    mt_fail("hak_ctl_get(tier.large.prefaulted_bytes) failed");
  return v;
}

/* BLOCKS blocks of `size` with `write` bytes of each written; returns the bytes
 * prefaulted meanwhile. */
static uint64_t run(char **blocks, size_t size, size_t write, const char *label) {
  uint64_t before = prefaulted();
  for (int i = 0; i < BLOCKS; i++) {
    blocks[i] = malloc(size);
    if (blocks[i] == NULL) mt_fail("malloc(%zu) failed", size);
    memset(blocks[i], 0x5a, write);
  }
  uint64_t bytes = prefaulted() - before;
  printf("%-34s %8.1f MiB prefaulted\n", label, mt_mib(bytes));
  mt_rss(label);
  return bytes;
}

/* MADV_POPULATE_WRITE came with Linux 5.14: without it there is nothing to test. */
static bool kernel_populates(void) {
  size_t page = tu_page();
  void *p = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) mt_fail("mmap failed");
  bool ok = madvise(p, page, 23 /* MADV_POPULATE_WRITE */) == 0;
  munmap(p, page);
  return ok;
}

int main(void) {
  if (!kernel_populates()) {
    printf("SKIP: the kernel has no MADV_POPULATE_WRITE\n");
    return 77;
  }
  mt_warm_up();
  char *whole[BLOCKS], *touched[BLOCKS], *again[BLOCKS];
  size_t page = tu_page();
  /* the warm-up wrote its blocks whole: a block left unwritten ends that habit */
  char *reset = malloc(4 * MiB), *once = malloc(4 * MiB);
  if (reset == NULL || once == NULL) mt_fail("malloc(4 MiB) failed");
  reset[0] = 1;
  memset(once, 0x5a, 4 * MiB);
  uint64_t bytes = prefaulted();
  char *sparse = malloc(8 * MiB);
  if (sparse == NULL) mt_fail("malloc(8 MiB) failed");
  sparse[0] = 1;
  bytes = prefaulted() - bytes;
  printf("%-34s %8.1f MiB prefaulted\n", "8 MiB after one written block", mt_mib(bytes));
  mt_require_at_most("prefaulted after a single written block", bytes, 0);
  bytes = run(whole, 4 * MiB, 4 * MiB, "4 MiB blocks written whole");
  /* the first two teach; each later one is prefaulted but for its last pages (one
   * block's slack: a place with pages resident from the warm-up) */
  if (bytes < (BLOCKS - 3) * (4 * MiB - 4 * page))
    mt_fail("only %.1f MiB of %d written blocks prefaulted", mt_mib(bytes), BLOCKS);
  size_t before = mt_rss("before the unwritten blocks");
  bytes = run(touched, 8 * MiB, page, "8 MiB blocks, one page written");
  size_t after = tu_rss_bytes();
  mt_require_at_most("prefaulted, unwritten blocks", bytes, 8 * MiB);
  mt_require_at_most("RSS growth, unwritten blocks", after > before ? after - before : 0, 16 * MiB);
  bytes = run(again, 4 * MiB, 4 * MiB, "4 MiB blocks written whole again");
  if (bytes < (BLOCKS - 3) * (4 * MiB - 4 * page))
    mt_fail("prefaulting did not come back: %.1f MiB", mt_mib(bytes));
  for (int i = 0; i < BLOCKS; i++) {
    free(whole[i]);
    free(touched[i]);
    free(again[i]);
  }
  free(reset);
  free(once);
  free(sparse);
  printf("PASS\n");
  return 0;
}
