/* The soft limit gives free memory back before more is committed. With purging off
 * (opt.purge_delay_ms = -1) freed memory stays resident: the test frees a working set
 * of small, mid and large blocks, then maps huge blocks, first without a limit (the
 * control: the freed memory is still resident, RSS above the limit to be), then with
 * limit.soft set: the freed memory must have gone back, committed memory and the
 * kernel's RSS count of the process under the limit, and the data of the live blocks
 * intact. Then the same from four threads, each with its own freed memory.
 *
 * Usage: limit_soft [seed] */
#include <malloc.h>
#include <pthread.h>

#include "test_util.h"

#define MIB ((size_t)1 << 20)
enum { WORKING_MIB = 96, HUGE_MIB = 40, SOFT_MIB = 80, THREADS = 4 };

static uint64_t stat_of(const char *name) {
  uint64_t v = 0;
  REQUIRE(hak_stats_get(name, &v) == 0, "hak_stats_get(%s)", name);
  return v;
}

static void set(const char *name, int64_t v) {
  REQUIRE(hak_ctl_set(name, &v, 8) == 0, "hak_ctl_set(%s, %" PRId64 ")", name, v);
}

/* mib MiB in blocks of three tiers, every page written, then all freed. */
static void churn(size_t mib) {
  static const size_t sizes[] = {200, 24 << 10, 1 << 20};
  size_t each = mib * MIB / 3, n[3], total = 0;
  for (size_t k = 0; k < 3; k++) total += n[k] = each / sizes[k];
  void **blocks = malloc(total * sizeof *blocks);
  REQUIRE(blocks != NULL, "malloc of the table");
  for (size_t k = 0, at = 0; k < 3; k++) {
    for (size_t i = 0; i < n[k]; i++, at++) {
      blocks[at] = malloc(sizes[k]);
      REQUIRE(blocks[at] != NULL, "malloc(%zu)", sizes[k]);
      memset(blocks[at], (int)i, sizes[k]);
    }
  }
  for (size_t i = 0; i < total; i++) free(blocks[i]);
  free(blocks);
}

/* A huge block written whole, holding its pattern. */
static unsigned char *huge_block(unsigned char fill) {
  unsigned char *p = malloc(HUGE_MIB * MIB);
  REQUIRE(p != NULL, "malloc(%d MiB)", HUGE_MIB);
  memset(p, fill, HUGE_MIB * MIB);
  return p;
}

static void *thread_churn(void *arg) {
  churn(WORKING_MIB / THREADS);
  return arg;
}

int main(int argc, char **argv) {
  tu_seed(argc, argv);
  set("opt.purge_delay_ms", -1); /* nothing goes back but what a limit or a trim sends */
  size_t soft = SOFT_MIB * MIB;

  /* The control: no limit, the freed memory stays. */
  churn(WORKING_MIB);
  unsigned char *a = huge_block(1);
  uint64_t committed_free = stat_of("limit.committed"), rss_free = stat_of("os.rss_anon");
  printf("no limit: committed %" PRIu64 " MiB, RSS %" PRIu64 " MiB\n", committed_free >> 20, rss_free >> 20);
  CHECK(committed_free > soft && rss_free > soft,
        "without a limit, freed memory did not stay resident (committed %" PRIu64 ", RSS %" PRIu64 ")",
        committed_free, rss_free);
  free(a);
  malloc_trim(0);

  /* The soft limit: before the huge block is mapped, the freed memory goes back. */
  set("limit.soft", (int64_t)soft);
  uint64_t give_backs = stat_of("limit.give_backs");
  churn(WORKING_MIB);
  a = huge_block(2);
  uint64_t committed = stat_of("limit.committed"), rss = stat_of("os.rss_anon");
  printf("soft limit %d MiB: committed %" PRIu64 " MiB, RSS %" PRIu64 " MiB\n", SOFT_MIB, committed >> 20,
         rss >> 20);
  CHECK(committed <= soft, "committed %" PRIu64 " past the soft limit %zu", committed, soft);
  CHECK(rss <= soft, "RSS %" PRIu64 " past the soft limit %zu", rss, soft);
  CHECK(stat_of("limit.give_backs") > give_backs, "no give-back counted");
  CHECK(tu_all_bytes(a, HUGE_MIB * MIB, 2), "the huge block changed");

  /* Four threads, each leaving freed memory in its own heap; then a second huge block. */
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++)
    REQUIRE(pthread_create(&t[i], NULL, thread_churn, NULL) == 0, "pthread_create");
  for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
  unsigned char *b = huge_block(3);
  committed = stat_of("limit.committed");
  rss = stat_of("os.rss_anon");
  printf("four threads, two huge blocks: committed %" PRIu64 " MiB, RSS %" PRIu64 " MiB\n", committed >> 20,
         rss >> 20);
  CHECK(committed <= soft + HUGE_MIB * MIB, "committed %" PRIu64 ": freed memory kept past the soft limit",
        committed);
  CHECK(rss <= soft + HUGE_MIB * MIB, "RSS %" PRIu64 ": freed memory kept past the soft limit", rss);
  CHECK(tu_all_bytes(a, HUGE_MIB * MIB, 2) && tu_all_bytes(b, HUGE_MIB * MIB, 3), "a huge block changed");
  free(a);
  free(b);
  return tu_finish("limit_soft");
}
