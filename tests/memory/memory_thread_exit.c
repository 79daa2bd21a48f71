/* Memory of exited threads is reused or returned: 10,000 short-lived threads, at most 8
 * at a time, each allocate about 256 KiB in mixed blocks, free half of them and exit;
 * the main thread frees the other half after the join. RSS at the end must be at most
 * 64 MiB above the baseline (it grows without bound if exited threads' memory is kept).
 */
#include <pthread.h>

#include "memory_test.h"

#define THREADS 10000
#define CONCURRENT 8
#define PER_THREAD (256 * KiB)
#define MAX_PER_THREAD 1024

typedef struct slot {
  uint64_t index; /* the thread's number: seeds its sizes */
  size_t kept;    /* blocks left for the main thread */
  void *blocks[MAX_PER_THREAD];
} slot_t;

static void *worker(void *arg) {
  slot_t *s = arg;
  tu_rng rng = tu_rng_make(7, s->index);
  size_t n = 0, bytes = 0;
  while (bytes < PER_THREAD && n < MAX_PER_THREAD) {
    size_t size = tu_below(&rng, 20) == 0 ? tu_range(&rng, 4 * KiB, 64 * KiB) : tu_range(&rng, 16, 1024);
    s->blocks[n++] = mt_malloc_touched(size);
    bytes += size;
  }
  s->kept = 0;
  for (size_t i = 0; i < n; i++) {
    if (i % 2) s->blocks[s->kept++] = s->blocks[i];
    else free(s->blocks[i]);
  }
  return NULL;
}

int main(void) {
  slot_t *slots = mt_scratch(CONCURRENT * sizeof *slots);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 128 * KiB);
  mt_warm_up();
  size_t baseline = mt_rss("baseline");
  double start = tu_now();
  size_t highest = baseline;
  for (uint64_t first = 0; first < THREADS; first += CONCURRENT) {
    pthread_t threads[CONCURRENT];
    for (int t = 0; t < CONCURRENT; t++) {
      slots[t].index = first + (uint64_t)t;
      int err = pthread_create(&threads[t], &attr, worker, &slots[t]);
      if (err != 0) mt_fail("pthread_create: %s", strerror(err));
    }
    for (int t = 0; t < CONCURRENT; t++) pthread_join(threads[t], NULL);
    for (int t = 0; t < CONCURRENT; t++) {
      for (size_t i = 0; i < slots[t].kept; i++) free(slots[t].blocks[i]);
    }
    if ((first + CONCURRENT) % 2000 == 0) {
      char label[64];
      snprintf(label, sizeof label, "after %" PRIu64 " threads", first + CONCURRENT);
      size_t rss = mt_rss(label);
      if (rss > highest) highest = rss;
    }
  }
  printf("%d threads in %.2f s\n", THREADS, tu_now() - start);
  size_t after = mt_rss("at the end");
  mt_print_info("allocator, at the end:");
  printf("highest RSS sampled: %.1f MiB above the baseline\n", mt_mib(highest - baseline));
  mt_require_at_most("RSS above the baseline", after > baseline ? after - baseline : 0, 64 * MiB);
  printf("PASS\n");
  return 0;
}
