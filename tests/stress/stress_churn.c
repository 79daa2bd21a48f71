/* stress_churn: thread churn. 10,000 short-lived threads, run in batches of 8, each
 * allocate blocks of several sizes, free some themselves and leave the rest behind: some
 * go to a long-lived thread that only frees (it never allocates), the others are parked
 * and freed by the main thread a few batches later, long after their allocating thread
 * has exited.
 *
 * At the end the resident set must be bounded (200 MiB by default): memory held by exited
 * threads, or given back to them by remote frees, must be reusable. With hakmem the live
 * bytes (hak_get_info) must also come back to where they started.
 * Usage: stress_churn [seed] [threads] [batch] [RSS limit in MiB]
 */
#include "stress_util.h"

enum { PER_THREAD = 8, SMALL_EXTRA = 24, LAG = 4, MAX_BATCH = 64 };

/* Sizes of the blocks each thread leaves behind or frees: one of each range. */
static const size_t ranges[PER_THREAD][2] = {{1, 64},       {65, 300},       {301, 2000},      {2001, 8000},
                                             {8001, 50000}, {50001, 140000}, {140001, 300000}, {1, 1024}};

static uint64_t g_seed;
static tu_queue g_to_freer;
/* parked[b % LAG][i][k]: block k left by thread i of batch b, freed by main at b + LAG - 1. */
static tu_item g_parked[LAG][MAX_BATCH][PER_THREAD];

typedef struct churner {
  uint64_t index; /* thread number, 0..threads-1 */
  unsigned batch_slot, slot;
} churner;

static void *churn(void *arg) {
  churner *c = arg;
  tu_rng r = tu_rng_make(g_seed, c->index);
  /* Some small blocks that live and die here, to give the thread a warm cache. */
  tu_item extra[SMALL_EXTRA];
  for (int i = 0; i < SMALL_EXTRA; i++) extra[i] = tu_item_make(tu_range(&r, 1, 512), tu_rand(&r));
  tu_item mine[PER_THREAD];
  for (int k = 0; k < PER_THREAD; k++)
    mine[k] = tu_item_make(tu_range(&r, ranges[k][0], ranges[k][1]), tu_rand(&r));
  for (int i = 0; i < SMALL_EXTRA; i += 2) tu_item_release("thread's own block", &extra[i]);

  /* Each block: freed here, handed to the freer thread, or parked for main. */
  tu_item handed[PER_THREAD];
  size_t nhanded = 0;
  tu_item *parked = g_parked[c->batch_slot][c->slot];
  for (int k = 0; k < PER_THREAD; k++) {
    parked[k].p = NULL;
    switch (tu_below(&r, 3)) {
    case 0: tu_item_release("thread's own block", &mine[k]); break;
    case 1: handed[nhanded++] = mine[k]; break;
    default: parked[k] = mine[k]; break;
    }
  }
  if (nhanded) tu_queue_push(&g_to_freer, handed, nhanded);
  /* The other half of the extras exits with the thread, to the freer. */
  for (int i = 1; i < SMALL_EXTRA; i += 2) tu_queue_push(&g_to_freer, &extra[i], 1);
  return NULL;
}

/* Only frees blocks other threads allocated. */
static void *freer(void *arg) {
  *(uint64_t *)arg = tu_queue_release_all(&g_to_freer, "block handed to the freer");
  return NULL;
}

static void free_parked(unsigned batch_slot) {
  for (size_t i = 0; i < MAX_BATCH; i++)
    for (size_t k = 0; k < PER_THREAD; k++)
      if (g_parked[batch_slot][i][k].p)
        tu_item_release("parked block of an exited thread", &g_parked[batch_slot][i][k]);
}

int main(int argc, char **argv) {
  g_seed = tu_seed(argc, argv);
  uint64_t threads = tu_arg_u64(argc, argv, 2, 10000);
  unsigned batch = (unsigned)tu_arg_u64(argc, argv, 3, 8);
  size_t rss_limit = (size_t)tu_arg_u64(argc, argv, 4, 200) * TU_MiB;
  REQUIRE(batch >= 1 && batch <= MAX_BATCH, "batch must be 1..%d", MAX_BATCH);

  hak_info_t info0 = {0}, info1 = {0};
  if (tu_have_hakmem()) hak_get_info(&info0);
  size_t rss0 = tu_rss_bytes(), rss_max = rss0;
  double t0 = tu_now();

  tu_queue_init(&g_to_freer, 4096);
  uint64_t freed_by_freer = 0;
  pthread_t freer_tid;
  REQUIRE(pthread_create(&freer_tid, NULL, freer, &freed_by_freer) == 0, "pthread_create");

  churner cs[MAX_BATCH];
  pthread_t tids[MAX_BATCH];
  uint64_t started = 0;
  for (uint64_t b = 0; started < threads; b++) {
    unsigned slot = (unsigned)(b % LAG), n = 0;
    for (; n < batch && started < threads; n++, started++) {
      cs[n] = (churner){started, slot, n};
      int rc = pthread_create(&tids[n], NULL, churn, &cs[n]);
      REQUIRE(rc == 0, "pthread_create for thread %" PRIu64 ": %s", started, strerror(rc));
    }
    tu_join_threads(tids, n);
    free_parked((unsigned)((b + 1) % LAG)); /* left by batch b + 1 - LAG */
    if (b % 64 == 0) {
      size_t rss = tu_rss_bytes();
      if (rss > rss_max) rss_max = rss;
    }
  }
  for (unsigned s = 0; s < LAG; s++) free_parked(s);
  tu_queue_close(&g_to_freer);
  pthread_join(freer_tid, NULL);
  tu_queue_destroy(&g_to_freer);

  size_t rss1 = tu_rss_bytes();
  if (rss1 > rss_max) rss_max = rss1;
  printf("stress_churn: %" PRIu64 " threads in batches of %u in %.2f s; %" PRIu64
         " blocks freed by the freer thread; RSS %zu MiB at start, %zu MiB at most, %zu MiB at "
         "the end\n",
         threads, batch, tu_now() - t0, freed_by_freer, rss0 / TU_MiB, rss_max / TU_MiB, rss1 / TU_MiB);
  CHECK(rss_max < rss_limit,
        "RSS reached %zu MiB (limit %zu MiB): memory of exited threads is "
        "not reused",
        rss_max / TU_MiB, rss_limit / TU_MiB);
  if (tu_have_hakmem()) {
    hak_get_info(&info1);
    printf("stress_churn: hakmem in_use %zu -> %zu, mapped %zu MiB, committed %zu MiB\n", info0.in_use,
           info1.in_use, info1.mapped / TU_MiB, info1.committed / TU_MiB);
    CHECK(info1.in_use < info0.in_use + 4 * TU_MiB, "hak_get_info in_use %zu -> %zu with every block freed",
          info0.in_use, info1.in_use);
  }
  return tu_finish("stress_churn");
}
