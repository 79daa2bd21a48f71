/* A thread that starts after another exited takes over the exited thread's heap.
 *
 *   memory_heap_handover lanes   one lane, as in larson: each of GENERATIONS threads in
 *                                turn frees every block its predecessor left (8 MiB of
 *                                64, 256 and 1000 B blocks), allocates as many again and
 *                                exits. The statistics report must count a heap taken
 *                                over for every generation after the first (none with
 *                                HAKMEM_PURGE_DELAY_MS=0, where exit gives everything
 *                                back at once), and RSS must stay within baseline + 2 x
 *                                the working set.
 *   memory_heap_handover trim    a thread allocates 32 MiB of small blocks, frees them
 *                                itself and exits, leaving its heap parked; the main
 *                                thread's malloc_trim(0) must return 1 and bring RSS
 *                                back to within baseline + 5 MiB.
 */
#include <malloc.h>
#include <pthread.h>

#include "memory_test.h"

#define WORKING_SET (8 * MiB)
#define GENERATIONS 40
#define TRIM_SET (32 * MiB)

static const size_t sizes[] = {64, 256, 1000};
enum { NSIZES = sizeof sizes / sizeof sizes[0] };

static void **blocks; /* the lane's live blocks */
static size_t nblocks;

static void *generation(void *arg) {
  (void)arg;
  for (size_t i = 0; i < nblocks; i++) free(blocks[i]);
  size_t bytes = 0, n = 0;
  for (; bytes < WORKING_SET; n++) {
    blocks[n] = mt_malloc_touched(sizes[n % NSIZES]);
    bytes += sizes[n % NSIZES];
  }
  nblocks = n;
  return NULL;
}

static void run_thread(void *(*fn)(void *), void *arg) {
  pthread_t t;
  int err = pthread_create(&t, NULL, fn, arg);
  if (err != 0) mt_fail("pthread_create: %s", strerror(err));
  pthread_join(t, NULL);
}

/* The "N taken over from exited threads" figure of the statistics report. */
static unsigned long long heaps_taken_over(void) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (f == NULL) mt_fail("open_memstream failed");
  hak_stats_print(f);
  fclose(f);
  const char *at = strstr(text, " taken over from exited threads");
  if (at == NULL) mt_fail("no \"taken over\" figure in the statistics report:\n%s", text);
  while (at > text && at[-1] >= '0' && at[-1] <= '9') at--;
  unsigned long long n = strtoull(at, NULL, 10);
  free(text);
  return n;
}

static void lanes(size_t baseline) {
  size_t most = WORKING_SET / sizes[0] + 1;
  blocks = mt_scratch(most * sizeof *blocks);
  unsigned long long before = heaps_taken_over();
  size_t highest = baseline;
  for (int g = 0; g < GENERATIONS; g++) {
    run_thread(generation, NULL);
    size_t rss = tu_rss_bytes();
    if (rss > highest) highest = rss;
  }
  unsigned long long taken = heaps_taken_over() - before;
  printf("%d generations, %llu heaps taken over, highest RSS %.1f MiB\n", GENERATIONS, taken,
         mt_mib(highest));
  const char *delay = getenv("HAKMEM_PURGE_DELAY_MS");
  unsigned long long expected = delay != NULL && atol(delay) == 0 ? 0 : GENERATIONS - 1;
  if (expected == 0 ? taken != 0 : taken < expected)
    mt_fail("%llu heaps taken over in %d generations (expected %s%llu)", taken, GENERATIONS,
            expected ? "at least " : "", expected);
  mt_require_at_most("highest RSS", highest, baseline + 2 * WORKING_SET);
  for (size_t i = 0; i < nblocks; i++) free(blocks[i]);
}

static size_t trim_peak;

static void *allocate_free_exit(void *arg) {
  (void)arg;
  size_t most = TRIM_SET / sizes[0] + 1, bytes = 0, n = 0;
  void **set = mt_scratch(most * sizeof *set);
  for (; bytes < TRIM_SET; n++) {
    set[n] = mt_malloc_touched(sizes[n % NSIZES]);
    bytes += sizes[n % NSIZES];
  }
  trim_peak = mt_rss("allocated");
  for (size_t i = 0; i < n; i++) free(set[i]);
  mt_scratch_free(set, most * sizeof *set);
  return NULL;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "lanes";
  if (!tu_have_hakmem()) {
    printf("not running on hakmem: nothing to test\n");
    return 0;
  }
  mt_warm_up();
  size_t baseline = mt_rss("baseline");
  if (strcmp(mode, "lanes") == 0) {
    lanes(baseline);
  } else if (strcmp(mode, "trim") == 0) {
    run_thread(allocate_free_exit, NULL);
    mt_require_grew(baseline, trim_peak, TRIM_SET / 2);
    mt_rss("after the thread exited");
    mt_trim_must_release();
    mt_require_at_most("RSS after malloc_trim", mt_rss("after malloc_trim"), baseline + 5 * MiB);
  } else {
    mt_fail("unknown mode %s (lanes or trim)", mode);
  }
  mt_print_info("allocator:");
  printf("ok\n");
  return 0;
}
