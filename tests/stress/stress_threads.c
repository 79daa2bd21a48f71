/* stress_threads: many threads (default 8, more than this machine's cores) allocate
 * blocks of random sizes (mostly small, some up to 256 KiB, rarely up to 4 MiB) and hand
 * them to each other through a lock-free exchange: an array of slots swapped with atomic
 * exchange. Whoever takes a block out verifies its pattern (made from its address and a
 * per-block seed) and then frees it, reallocs it and publishes it again, or keeps it for a
 * while; so most frees and reallocs happen on threads other than the allocating one.
 * Usage: stress_threads [seed] [threads] [ops per thread]
 */
#include "stress_util.h"

enum { SLOTS = 4096, KEEP = 64 };

/* Published blocks, boxed (see tu_box_new). */
static tu_item *g_slots[SLOTS];

static uint64_t g_seed;
static uint64_t g_ops;

typedef struct worker {
  pthread_t tid;
  unsigned id;
  uint64_t allocs, taken_frees, taken_reallocs; /* taken: out of the exchange */
} worker;

static tu_item *box_new(tu_rng *r) { return tu_box_new(r, 200); }
static void box_free(tu_item *box) { tu_box_free("block taken from the exchange", box); }

/* Puts box into a random slot; whatever was there comes back to the caller. */
static tu_item *exchange(tu_rng *r, tu_item *box) {
  return __atomic_exchange_n(&g_slots[tu_below(r, SLOTS)], box, __ATOMIC_ACQ_REL);
}

static void *work(void *arg) {
  worker *w = arg;
  tu_rng r = tu_rng_make(g_seed, w->id + 1);
  tu_item *kept[KEEP] = {0}; /* blocks this thread holds for a while */
  for (uint64_t op = 0; op < g_ops; op++) {
    uint64_t x = tu_below(&r, 100);
    if (x < 55) {
      /* Publish a new block; deal with the one it displaces. */
      tu_item *old = exchange(&r, box_new(&r));
      w->allocs++;
      if (!old) continue;
      if (tu_below(&r, 4) == 0) {
        tu_item_realloc("block before realloc by a non-owner", old, tu_stress_size(&r, 200));
        w->taken_reallocs++;
        old = exchange(&r, old);
        if (!old) continue;
      }
      box_free(old);
      w->taken_frees++;
    } else if (x < 75) {
      /* Take one out and free it. */
      tu_item *old = exchange(&r, NULL);
      if (old) box_free(old), w->taken_frees++;
    } else if (x < 90) {
      /* Keep one (or a new one) for a while; the slot it replaces is freed. */
      size_t k = tu_below(&r, KEEP);
      if (kept[k]) box_free(kept[k]);
      kept[k] = exchange(&r, NULL);
      if (!kept[k]) kept[k] = box_new(&r), w->allocs++;
    } else {
      /* A burst of local allocations freed in a mixed order by this thread. */
      tu_item local[16];
      int n = (int)tu_range(&r, 1, 16);
      for (int i = 0; i < n; i++) local[i] = tu_item_make(tu_range(&r, 1, 512), tu_rand(&r));
      for (int i = 1; i < n; i += 2) tu_item_release("local block", &local[i]);
      for (int i = 0; i < n; i += 2) tu_item_release("local block", &local[i]);
      w->allocs += (uint64_t)n;
    }
  }
  for (size_t k = 0; k < KEEP; k++)
    if (kept[k]) box_free(kept[k]);
  return NULL;
}

int main(int argc, char **argv) {
  g_seed = tu_seed(argc, argv);
  unsigned nthreads = (unsigned)tu_arg_u64(argc, argv, 2, 8);
  g_ops = tu_arg_u64(argc, argv, 3, 80000);
  worker *ws = calloc(nthreads, sizeof *ws);
  REQUIRE(ws != NULL, "calloc failed");
  double t0 = tu_now();
  for (unsigned i = 0; i < nthreads; i++) {
    ws[i].id = i;
    int rc = pthread_create(&ws[i].tid, NULL, work, &ws[i]);
    REQUIRE(rc == 0, "pthread_create: %s", strerror(rc));
  }
  uint64_t allocs = 0, frees = 0, reallocs = 0;
  for (unsigned i = 0; i < nthreads; i++) {
    pthread_join(ws[i].tid, NULL);
    allocs += ws[i].allocs, frees += ws[i].taken_frees, reallocs += ws[i].taken_reallocs;
  }
  size_t left = 0;
  for (size_t i = 0; i < SLOTS; i++)
    if (g_slots[i]) box_free(g_slots[i]), left++;
  printf("stress_threads: %u threads x %" PRIu64 " ops in %.2f s: %" PRIu64 " blocks, %" PRIu64
         " freed and %" PRIu64 " realloc'd from the exchange, %zu left at the end\n",
         nthreads, g_ops, tu_now() - t0, allocs, frees, reallocs, left);
  free(ws);
  return tu_finish("stress_threads");
}
