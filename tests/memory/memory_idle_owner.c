/* Blocks freed by other threads come back to the OS while the thread that allocated
 * them is alive but idle.
 *
 * An owner thread allocates a working set of small blocks (three sizes, about 48 MiB),
 * hands them to the main thread and then waits on a condition variable, making no
 * further call into the allocator. The main thread writes and frees every block: each
 * free is a remote free into the idle owner's slabs. Then
 *
 *   memory_idle_owner continue   the main thread goes on with small allocations for
 *                                600 ms, with no malloc_trim (memory_idle_owner):
 *                                the owner counts as idle 110 ms after its last
 *                                deferred pass, a scan comes at most 100 ms later, and
 *                                the region purges the spans 100 ms after that
 *   memory_idle_owner trim       the main thread calls malloc_trim(0) once, which must
 *                                return 1 (memory_idle_owner_trim)
 *
 * Bound: RSS after <= baseline + 5 MiB, while the owner is still alive. (Its queue
 * heads, one slab per size, may stay: the owner's malloc pops them without a lock.)
 */
#include <malloc.h>
#include <pthread.h>

#include "memory_test.h"

#define WORKING_SET (48 * MiB)
#define CONTINUE_MS 600
#define RING 1000

static const size_t sizes[] = {64, 256, 1000};
enum { NSIZES = sizeof sizes / sizeof sizes[0] };

static void **blocks;
static size_t nblocks;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static bool allocated, may_exit;

static void *owner(void *arg) {
  (void)arg;
  size_t bytes = 0;
  while (bytes < WORKING_SET) {
    size_t size = sizes[nblocks % NSIZES];
    blocks[nblocks++] = mt_malloc_touched(size);
    bytes += size;
  }
  pthread_mutex_lock(&lock);
  allocated = true;
  pthread_cond_broadcast(&cond);
  while (!may_exit) pthread_cond_wait(&cond, &lock); /* idle, and alive */
  pthread_mutex_unlock(&lock);
  return NULL;
}

int main(int argc, char **argv) {
  bool trim = argc == 2 && strcmp(argv[1], "trim") == 0;
  if (argc != 2 || (!trim && strcmp(argv[1], "continue") != 0)) {
    fprintf(stderr, "usage: memory_idle_owner continue|trim\n");
    return 2;
  }
  size_t max_blocks = WORKING_SET / sizes[0] + 1;
  blocks = mt_scratch(max_blocks * sizeof *blocks);
  void *ring[RING] = {0};
  mt_warm_up();
  malloc_trim(0); /* what the warm-up left is not the workload's */
  size_t baseline = mt_rss("baseline");

  pthread_t t;
  if (pthread_create(&t, NULL, owner, NULL) != 0) mt_fail("pthread_create failed");
  pthread_mutex_lock(&lock);
  while (!allocated) pthread_cond_wait(&cond, &lock);
  pthread_mutex_unlock(&lock);
  size_t peak = mt_rss("working set written (owner idle)");
  mt_require_grew(baseline, peak, WORKING_SET * 9 / 10);

  for (size_t i = 0; i < nblocks; i++) {
    memset(blocks[i], 0x5a, sizes[i % NSIZES]);
    free(blocks[i]);
  }
  mt_rss("all freed by the main thread");

  if (trim) mt_trim_must_release();
  else mt_churn_ring(ring, RING, CONTINUE_MS, 0);
  size_t after = mt_rss(trim ? "after malloc_trim(0)" : "after 600 ms of small allocations");
  mt_print_info("allocator, at the end:");
  mt_require_at_most("RSS at the end, owner alive", after, baseline + 5 * MiB);

  pthread_mutex_lock(&lock);
  may_exit = true;
  pthread_cond_broadcast(&cond);
  pthread_mutex_unlock(&lock);
  pthread_join(t, NULL);
  for (int i = 0; i < RING; i++) free(ring[i]);
  mt_scratch_free(blocks, max_blocks * sizeof *blocks);
  printf("PASS\n");
  return 0;
}
