/* stress_fork: fork while 4 other threads allocate and free without pause.
 *
 * Each child must be able to use the allocator at once: it frees (after verifying) the
 * blocks the parent's threads had published, which belong to threads that do not exist in
 * the child; allocates and frees many sizes through every entry point; starts threads of
 * its own that allocate and free; and exits 0. A child that deadlocks is killed after 20 s
 * and counts as a failure. Half of the forks are made from a short-lived thread rather
 * than the main one. Usage: stress_fork [seed] [forks]
 */
#include "stress_util.h"

enum { WORKERS = 4, SLOTS = 256, CHILD_THREADS = 3 };

static uint64_t g_seed;
static int g_stop;
static tu_item *g_slots[SLOTS]; /* boxes published by the workers */
static uint64_t g_worker_ops[WORKERS];

/* Parent's workers: publish new blocks, free what they displace, keep a few locally. */
static void *worker(void *arg) {
  uint64_t id = (uint64_t)(uintptr_t)arg;
  tu_rng r = tu_rng_make(g_seed, id + 1);
  tu_item local[32] = {{0}};
  uint64_t ops = 0;
  while (!__atomic_load_n(&g_stop, __ATOMIC_RELAXED)) {
    tu_item *old = __atomic_exchange_n(&g_slots[tu_below(&r, SLOTS)], tu_box_new(&r, 100), __ATOMIC_ACQ_REL);
    if (old) tu_box_free("published block (parent)", old);
    size_t k = tu_below(&r, 32);
    if (local[k].p) tu_item_release("local block (parent)", &local[k]);
    local[k] = tu_item_make(tu_stress_size(&r, 100), tu_rand(&r));
    ops++;
  }
  for (size_t k = 0; k < 32; k++)
    if (local[k].p) tu_item_release("local block (parent)", &local[k]);
  __atomic_store_n(&g_worker_ops[id], ops, __ATOMIC_RELAXED);
  return NULL;
}

/* A thread started in the child. */
static void *child_thread(void *arg) {
  tu_rng r = tu_rng_make(g_seed, 1000 + (uint64_t)(uintptr_t)arg);
  tu_item items[64] = {{0}};
  for (int i = 0; i < 2000; i++) {
    size_t k = tu_below(&r, 64);
    if (items[k].p) tu_item_release("block of a thread in the child", &items[k]);
    items[k] = tu_item_make(tu_stress_size(&r, 100), tu_rand(&r));
  }
  for (size_t k = 0; k < 64; k++)
    if (items[k].p) tu_item_release("block of a thread in the child", &items[k]);
  return NULL;
}

static int child(void *arg) {
  uint64_t fork_no = (uint64_t)(uintptr_t)arg;
  /* The workers' published blocks: owners gone. */
  for (size_t i = 0; i < SLOTS; i++) {
    tu_item *box = __atomic_exchange_n(&g_slots[i], NULL, __ATOMIC_ACQ_REL);
    if (box) tu_box_free("block published before fork, freed in the child", box);
  }
  /* Many sizes, every entry point. */
  tu_rng r = tu_rng_make(g_seed, 500 + fork_no);
  for (size_t n = 0; n <= 4 * TU_MiB; n = n < 64 ? n + 1 : n * 2 + tu_below(&r, 64)) {
    tu_item it = tu_item_make(n, tu_rand(&r));
    tu_item_realloc("block in the child", &it, n / 2 + 1 + tu_below(&r, n + 1));
    tu_item_release("block in the child", &it);
    void *z = calloc(1, n);
    REQUIRE(z != NULL, "calloc(1, %zu) in the child failed", n);
    CHECK(tu_is_zero(z, n), "calloc(1, %zu) in the child not zeroed", n);
    free(z);
    void *a = aligned_alloc(4096, n + 1);
    CHECK(a != NULL && tu_aligned(a, 4096), "aligned_alloc(4096, %zu) in the child = %p", n + 1, a);
    free(a);
  }
  /* A huge block, touched at both ends only. */
  char *huge = malloc(48 * TU_MiB);
  REQUIRE(huge != NULL, "malloc(48 MiB) in the child failed");
  huge[0] = huge[48 * TU_MiB - 1] = 1;
  free(huge);
  pthread_t tids[CHILD_THREADS];
  for (uintptr_t i = 0; i < CHILD_THREADS; i++) {
    int rc = pthread_create(&tids[i], NULL, child_thread, (void *)i);
    REQUIRE(rc == 0, "pthread_create in the child: %s", strerror(rc));
  }
  tu_join_threads(tids, CHILD_THREADS);
  exit(0); /* through atexit handlers, as a real child would */
}

typedef struct fork_job {
  uint64_t fork_no;
  bool ok;
} fork_job;

static void *fork_from_thread(void *arg) {
  fork_job *job = arg;
  job->ok = tu_in_child("forked child (from a non-main thread)", child, (void *)(uintptr_t)job->fork_no, 20);
  return NULL;
}

int main(int argc, char **argv) {
  g_seed = tu_seed(argc, argv);
  uint64_t forks = tu_arg_u64(argc, argv, 2, 20);
  pthread_t workers[WORKERS];
  for (uintptr_t i = 0; i < WORKERS; i++) {
    int rc = pthread_create(&workers[i], NULL, worker, (void *)i);
    REQUIRE(rc == 0, "pthread_create: %s", strerror(rc));
  }
  double t0 = tu_now();
  uint64_t failed = 0;
  for (uint64_t f = 0; f < forks; f++) {
    usleep(10000 + (useconds_t)(f % 5) * 3000); /* let the workers get going */
    bool ok;
    if (f & 1) {
      fork_job job = {f, false};
      pthread_t t;
      REQUIRE(pthread_create(&t, NULL, fork_from_thread, &job) == 0, "pthread_create");
      pthread_join(t, NULL);
      ok = job.ok;
    } else {
      ok = tu_in_child("forked child (from the main thread)", child, (void *)(uintptr_t)f, 20);
    }
    if (!ok) fprintf(stderr, "stress_fork: fork #%" PRIu64 " failed\n", f), failed++;
  }
  __atomic_store_n(&g_stop, 1, __ATOMIC_RELAXED);
  tu_join_threads(workers, WORKERS);
  for (size_t i = 0; i < SLOTS; i++)
    if (g_slots[i]) tu_box_free("published block (parent, at the end)", g_slots[i]);
  uint64_t ops = 0;
  for (int i = 0; i < WORKERS; i++) ops += g_worker_ops[i];
  printf("stress_fork: %" PRIu64 " forks (%" PRIu64 " failed) in %.2f s while %d threads did %" PRIu64
         " allocations\n",
         forks, failed, tu_now() - t0, WORKERS, ops);
  return tu_finish("stress_fork");
}
