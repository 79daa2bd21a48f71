/* stress_stats: the statistics report, hak_get_info and malloc_trim(0) called over and
 * over by one thread while others allocate and free. The report walks every heap's
 * slab lists while their owners change them, and trim takes slabs back from other heaps:
 * both must leave the workers' blocks intact and never see a count below zero.
 *
 * WORKERS threads each keep SLOTS checked blocks (mostly small, some large, a few huge
 * ones above 32 MiB) and replace them at random; one op in four instead swaps a block
 * with the shared exchange, so most of the frees of those happen on another thread. The
 * watcher thread loops until the workers are done: hak_get_info (its in_use must stay
 * below anything a count that went negative would give), the full report into
 * /dev/null, in text and JSON, a few figures by name, and malloc_trim(0). The workers go
 * on past their ops until the watcher has done MIN_ROUNDS rounds, so that the two overlap
 * however the machine schedules them. At the end, with every block freed, in_use must be
 * back near where it started.
 * Usage: stress_stats [seed] [workers=4] [ops per worker=60000]
 */
#include "stress_util.h"

#include <stdatomic.h>

enum { SLOTS = 256, EXCHANGE = 1024, HUGE_PER_MILLION = 20, MIN_ROUNDS = 2 };

static uint64_t g_seed, g_ops;
static _Atomic uint64_t g_rounds, g_extra_ops;
static tu_item *g_exchange[EXCHANGE];
static atomic_bool g_done;

/* Over 32 MiB: hakmem's huge tier, mapped and unmapped (or kept) per block. */
static size_t huge_size(tu_rng *r) { return tu_range(r, 33 * TU_MiB, 40 * TU_MiB); }

static void *worker(void *arg) {
  uint64_t id = (uint64_t)(uintptr_t)arg;
  tu_rng r = tu_rng_make(g_seed, id + 1);
  tu_item slots[SLOTS] = {{0}};
  uint64_t op;
  for (op = 0; op < g_ops || atomic_load_explicit(&g_rounds, memory_order_relaxed) < MIN_ROUNDS; op++) {
    tu_item *it = &slots[tu_below(&r, SLOTS)];
    if (tu_below(&r, 4) == 0) {
      /* Swap a boxed block with the exchange; free whatever comes back. */
      tu_item *box = malloc(sizeof *box);
      REQUIRE(box != NULL, "malloc(box) failed");
      *box = tu_item_make(tu_stress_size(&r, 1000), tu_rand(&r));
      tu_item *old = __atomic_exchange_n(&g_exchange[tu_below(&r, EXCHANGE)], box, __ATOMIC_ACQ_REL);
      if (old) tu_box_free("block taken from the exchange", old);
      continue;
    }
    if (it->p) tu_item_release("worker's block", it);
    size_t n = tu_below(&r, 1000000) < HUGE_PER_MILLION ? huge_size(&r) : tu_stress_size(&r, 2000);
    *it = tu_item_make(n, tu_rand(&r));
  }
  if (op > g_ops) atomic_fetch_add(&g_extra_ops, op - g_ops);
  for (size_t k = 0; k < SLOTS; k++)
    if (slots[k].p) tu_item_release("worker's block at the end", &slots[k]);
  return NULL;
}

/* Far above anything the workers hold at once (a few huge blocks and some MiB), far below
 * what a count that went below zero gives (about 2^64 blocks). */
#define IN_USE_BOUND ((size_t)64 << 30)

static void *watcher(void *arg) {
  (void)arg;
  FILE *devnull = fopen("/dev/null", "w");
  REQUIRE(devnull != NULL, "fopen(/dev/null): %s", strerror(errno));
  while (!atomic_load(&g_done)) {
    hak_info_t info;
    hak_get_info(&info);
    CHECK(info.in_use < IN_USE_BOUND, "hak_get_info in_use %zu during the run", info.in_use);
    hak_stats_print(devnull);
    /* The same figures by name and in JSON, walked and read while the workers run. */
    CHECK(hak_stats_json(devnull) == 0, "hak_stats_json failed");
    char name[64];
    snprintf(name, sizeof name, "class.%u.live_blocks", (unsigned)(atomic_load(&g_rounds) % 48));
    uint64_t v = 0;
    CHECK(hak_stats_get(name, &v) == 0 && v < IN_USE_BOUND / 16, "%s: %" PRIu64, name, v);
    CHECK(hak_stats_get("total.in_use", &v) == 0 && v < IN_USE_BOUND, "total.in_use %" PRIu64, v);
    CHECK(hak_stats_get("threads.alive", &v) == 0 && v <= 64 + 2, "threads.alive %" PRIu64, v);
    malloc_trim(0);
    atomic_fetch_add(&g_rounds, 1);
  }
  fclose(devnull);
  return NULL;
}

int main(int argc, char **argv) {
  g_seed = tu_seed(argc, argv);
  unsigned workers = (unsigned)tu_arg_u64(argc, argv, 2, 4);
  g_ops = tu_arg_u64(argc, argv, 3, 60000);
  if (!tu_have_hakmem()) {
    printf("stress_stats: not running with hakmem; nothing to test\n");
    return 0;
  }
  hak_info_t info0, info1;
  malloc_trim(0);
  hak_get_info(&info0);
  double t0 = tu_now();

  pthread_t wt, tids[64];
  REQUIRE(workers >= 1 && workers <= 64, "workers must be 1..64");
  REQUIRE(pthread_create(&wt, NULL, watcher, NULL) == 0, "pthread_create");
  for (unsigned i = 0; i < workers; i++)
    REQUIRE(pthread_create(&tids[i], NULL, worker, (void *)(uintptr_t)i) == 0, "pthread_create");
  for (unsigned i = 0; i < workers; i++) pthread_join(tids[i], NULL);
  atomic_store(&g_done, true);
  pthread_join(wt, NULL);
  size_t left = 0;
  for (size_t i = 0; i < EXCHANGE; i++)
    if (g_exchange[i]) tu_box_free("block left in the exchange", g_exchange[i]), left++;

  malloc_trim(0);
  hak_get_info(&info1);
  uint64_t rounds = atomic_load(&g_rounds);
  printf("stress_stats: %u workers x %" PRIu64 " ops (+%" PRIu64
         " waiting for the watcher) in %.2f s, %" PRIu64
         " rounds of report and trim alongside, %zu blocks left in the exchange; in_use %zu -> %zu\n",
         workers, g_ops, atomic_load(&g_extra_ops), tu_now() - t0, rounds, left, info0.in_use, info1.in_use);
  CHECK(rounds >= MIN_ROUNDS, "the watcher ran %" PRIu64 " rounds", rounds);
  CHECK(info1.in_use < info0.in_use + 4 * TU_MiB, "hak_get_info in_use %zu -> %zu with every block freed",
        info0.in_use, info1.in_use);
  return tu_finish("stress_stats");
}
