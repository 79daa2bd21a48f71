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
 *   memory_heap_handover successors
 *                                a lane as above, but its first thread runs alongside
 *                                another that allocates a block, keeps it and exits
 *                                first, so that thread's heap stays parked, always the
 *                                oldest. Each generation frees its predecessor's blocks
 *                                before it allocates, and a new thread takes over the
 *                                heap its frees went to before the oldest: the report
 *                                must count one such for every generation after the
 *                                first, and RSS must stay within baseline + 1.5 x the
 *                                working set. Taking the oldest instead alternates
 *                                between the two heaps, each holding a working set.
 *                                Run with a long purge delay, so that no parked heap is
 *                                dissolved meanwhile; with HAKMEM_PURGE_DELAY_MS=0
 *                                nothing is parked and the count must be 0.
 *   memory_heap_handover overlap as successors, but as in larson each generation starts
 *                                the next itself, and it exits (slowly, 300 us) only once
 *                                that one has freed its blocks: the new thread's first
 *                                malloc comes before its predecessor's heap is parked,
 *                                and it must wait for it. At least 3/4 of the
 *                                generations after the first must take over the heap
 *                                their frees went to (all of them, unless the machine
 *                                stalls the exiting thread: each wait in vain excuses
 *                                one), and RSS must stay within baseline + 2.5 x the
 *                                working set, + 1 for each wait in vain (a take-over
 *                                missed leaves a working set waiting in a parked heap). Not
 *                                waiting, a new thread almost never finds its
 *                                predecessor's heap parked.
 *   memory_heap_handover linger  64 generations, each starting the next and lingering
 *                                5 ms before it exits, so that each new thread would wait
 *                                for its predecessor in vain: once waits keep failing,
 *                                only one new thread in 16 may wait. At most 20 waits in
 *                                vain (64, one per generation, when every thread waits).
 *   memory_heap_handover cancel  a new thread first frees a block of a thread that
 *                                stays alive, whose heap is not exiting, so its first
 *                                malloc waits for that heap in vain; it is cancelled
 *                                meanwhile. malloc is not a cancellation point: it must
 *                                return, the thread be cancelled at its next one, and
 *                                other threads still start, allocate and trim (a lock
 *                                left held would hang them: the alarm ends the test).
 *   memory_heap_handover main    a new thread first frees a block of the main thread's
 *                                (a worker freeing the argument main allocated for it).
 *                                The main thread's heap is parked only if main calls
 *                                pthread_exit, so the worker's first malloc must not wait
 *                                for it: the report must count no wait. Waiting, it
 *                                would sleep a millisecond in vain. The same in a child
 *                                forked by another thread, which is the child's main
 *                                thread.
 *   memory_heap_handover trim    a thread allocates 32 MiB of small blocks, frees them
 *                                itself and exits, leaving its heap parked; the main
 *                                thread's malloc_trim(0) must return 1 and bring RSS
 *                                back to within baseline + 5 MiB.
 */
#include <malloc.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>

#include "memory_test.h"

#define WORKING_SET (8 * MiB)
#define GENERATIONS 40
#define TRIM_SET (32 * MiB)

static const size_t sizes[] = {64, 256, 1000};
enum { NSIZES = sizeof sizes / sizeof sizes[0] };

/* A lane's live blocks, left by its last thread for the next. */
typedef struct {
  void **blocks;
  size_t count;
} lane;

/* One thread of a lane: frees every block its predecessor left, then allocates as
 * many bytes again. */
static void *generation(void *arg) {
  lane *l = arg;
  for (size_t i = 0; i < l->count; i++) free(l->blocks[i]);
  size_t bytes = 0, n = 0;
  for (; bytes < WORKING_SET; n++) {
    l->blocks[n] = mt_malloc_touched(sizes[n % NSIZES]);
    bytes += sizes[n % NSIZES];
  }
  l->count = n;
  return NULL;
}

static void lane_init(lane *l) {
  l->blocks = mt_scratch((WORKING_SET / sizes[0] + 1) * sizeof *l->blocks);
  l->count = 0;
}

static void lane_free(lane *l) {
  for (size_t i = 0; i < l->count; i++) free(l->blocks[i]);
  l->count = 0;
}

static pthread_t start_thread(void *(*fn)(void *), void *arg) {
  pthread_t t;
  int err = pthread_create(&t, NULL, fn, arg);
  if (err != 0) mt_fail("pthread_create: %s", strerror(err));
  return t;
}

static void run_thread(void *(*fn)(void *), void *arg) { pthread_join(start_thread(fn, arg), NULL); }

/* The number the statistics report prints right before `label`. */
static unsigned long long report_figure(const char *label) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (f == NULL) mt_fail("open_memstream failed");
  hak_stats_print(f);
  fclose(f);
  const char *at = strstr(text, label);
  if (at == NULL) mt_fail("no \"%s\" figure in the statistics report:\n%s", label, text);
  while (at > text && at[-1] >= '0' && at[-1] <= '9') at--;
  unsigned long long n = strtoull(at, NULL, 10);
  free(text);
  return n;
}

#define TAKEN_OVER " taken over from exited threads"
#define TAKEN_BY_FREE " by a thread that had freed their blocks"
#define IN_VAIN " in vain"
#define WAITS " waits for one to be parked"

/* With HAKMEM_PURGE_DELAY_MS=0 exit gives everything back at once: no heap is parked. */
static bool heaps_parked_at_exit(void) {
  const char *delay = getenv("HAKMEM_PURGE_DELAY_MS");
  return delay == NULL || atol(delay) != 0;
}

static void require_taken(const char *what, unsigned long long taken, unsigned long long expected) {
  if (!heaps_parked_at_exit() ? taken != 0 : taken < expected)
    mt_fail("%llu heaps taken over%s (expected %s%llu)", taken, what,
            heaps_parked_at_exit() ? "at least " : "", heaps_parked_at_exit() ? expected : 0);
}

static void lanes(size_t baseline) {
  lane l;
  lane_init(&l);
  unsigned long long before = report_figure(TAKEN_OVER);
  size_t highest = baseline;
  for (int g = 0; g < GENERATIONS; g++) {
    run_thread(generation, &l);
    size_t rss = tu_rss_bytes();
    if (rss > highest) highest = rss;
  }
  unsigned long long taken = report_figure(TAKEN_OVER) - before;
  printf("%d generations, %llu heaps taken over, highest RSS %.1f MiB\n", GENERATIONS, taken,
         mt_mib(highest));
  require_taken("", taken, GENERATIONS - 1);
  mt_require_at_most("highest RSS", highest, baseline + 2 * WORKING_SET);
  lane_free(&l);
}

/* At least `expected` heaps taken over by a thread that had freed their blocks since
 * the report counted `before`, and (with heaps parked) RSS at most `bound`. */
static void require_successors(unsigned long long before, unsigned long long expected, size_t highest,
                               size_t bound) {
  unsigned long long taken = report_figure(TAKEN_BY_FREE) - before;
  printf(
      "%d generations, %llu heaps taken over by a thread that had freed their blocks, "
      "highest RSS %.1f MiB\n",
      GENERATIONS, taken, mt_mib(highest));
  require_taken(" by a thread that had freed their blocks", taken, expected);
  if (heaps_parked_at_exit()) mt_require_at_most("highest RSS", highest, bound);
}

static sem_t other_may_exit, first_allocated, first_may_exit;

static void *keep_one_block(void *arg) {
  *(void **)arg = mt_malloc_touched(64);
  sem_wait(&other_may_exit);
  return NULL;
}

static void *first_generation(void *arg) {
  generation(arg);
  sem_post(&first_allocated);
  sem_wait(&first_may_exit);
  return NULL;
}

static void successors(size_t baseline) {
  void *kept = NULL;
  lane l;
  lane_init(&l);
  sem_init(&other_may_exit, 0, 0);
  sem_init(&first_allocated, 0, 0);
  sem_init(&first_may_exit, 0, 0);
  unsigned long long before = report_figure(TAKEN_BY_FREE);
  /* Both alive at once, so two heaps; the other one is parked first. */
  pthread_t other = start_thread(keep_one_block, &kept);
  pthread_t first = start_thread(first_generation, &l);
  sem_wait(&first_allocated);
  sem_post(&other_may_exit);
  pthread_join(other, NULL);
  sem_post(&first_may_exit);
  pthread_join(first, NULL);
  size_t highest = tu_rss_bytes();
  for (int g = 1; g < GENERATIONS; g++) {
    run_thread(generation, &l);
    size_t rss = tu_rss_bytes();
    if (rss > highest) highest = rss;
  }
  require_successors(before, GENERATIONS - 1, highest, baseline + 3 * WORKING_SET / 2);
  lane_free(&l);
  free(kept);
}

/* The lane of `overlap`: each generation frees its predecessor's blocks, lets it exit,
 * allocates, starts the next generation and waits for it to have freed them. */
static sem_t predecessor_may_exit, lane_done;
static int generations_left;

static void *overlapping_generation(void *arg) {
  lane *l = arg;
  for (size_t i = 0; i < l->count; i++) free(l->blocks[i]);
  l->count = 0;
  if (generations_left < GENERATIONS) /* it exits while this thread allocates */
    sem_post(&predecessor_may_exit);
  generation(l); /* its malloc finds the predecessor's heap still live */
  if (--generations_left == 0) {
    sem_post(&lane_done);
    return NULL;
  }
  pthread_t next = start_thread(overlapping_generation, l);
  pthread_detach(next);
  sem_wait(&predecessor_may_exit);
  usleep(300); /* a slow exit: its successor's malloc surely comes before it is parked */
  return NULL;
}

/* Parks the heap of a thread that allocated one block; returns the block. */
static void *park_a_heap(void) {
  void *kept = NULL;
  sem_init(&other_may_exit, 0, 1);
  pthread_join(start_thread(keep_one_block, &kept), NULL);
  return kept;
}

static void overlap(size_t baseline) {
  unsigned long long before = report_figure(TAKEN_BY_FREE), in_vain_before = report_figure(IN_VAIN);
  /* Parked first, always the oldest: what a thread that did not wait would take. */
  void *kept = park_a_heap();
  lane l;
  lane_init(&l);
  sem_init(&predecessor_may_exit, 0, 0);
  sem_init(&lane_done, 0, 0);
  generations_left = GENERATIONS;
  pthread_detach(start_thread(overlapping_generation, &l));
  size_t highest = tu_rss_bytes();
  while (sem_trywait(&lane_done) != 0) {
    size_t rss = tu_rss_bytes();
    if (rss > highest) highest = rss;
    usleep(1000);
  }
  /* A take-over is missed only when the machine stalls the exiting thread past the new
   * one's wait, which the report counts as a wait in vain: each excuses one take-over and
   * the working set it leaves waiting in the parked heap. */
  unsigned long long in_vain = report_figure(IN_VAIN) - in_vain_before;
  unsigned long long expected = (GENERATIONS - 1) * 3 / 4;
  printf("%llu waits in vain (a stalled predecessor)\n", in_vain);
  require_successors(before, expected > in_vain ? expected - in_vain : 0, highest,
                     baseline + (5 + 2 * in_vain) * WORKING_SET / 2);
  lane_free(&l);
  free(kept);
}

/* linger: each generation frees its predecessor's block, allocates one, starts the next
 * and lingers before it exits. */
#define LINGER_GENERATIONS 64

static void *lingering_generation(void *arg) {
  free(arg);
  void *mine = mt_malloc_touched(256);
  if (--generations_left == 0) {
    free(mine);
    sem_post(&lane_done);
    return NULL;
  }
  pthread_detach(start_thread(lingering_generation, mine));
  usleep(5000);
  return NULL;
}

/* The bound on waits in vain follows heap_take_parked's moving score (out of 256, an
 * eighth of the way per wait, waits at full rate while it is at least 64): 11 failures in
 * a row from 256 bring it below 64, then one new thread in 16 probes (4 of 64
 * generations), and slack of 5. A wait that pays (on a loaded machine the predecessor
 * sometimes does exit within the wait) lifts the score by at most 24, which buys at most
 * 3 more failures at the full rate: each success adds 3 to the bound. */
static void linger(void) {
  sem_init(&lane_done, 0, 0);
  unsigned long long before = report_figure(IN_VAIN), waits_before = report_figure(WAITS);
  generations_left = LINGER_GENERATIONS;
  pthread_detach(start_thread(lingering_generation, mt_malloc_touched(256)));
  sem_wait(&lane_done);
  unsigned long long in_vain = report_figure(IN_VAIN) - before;
  unsigned long long paid = report_figure(WAITS) - waits_before - in_vain;
  unsigned long long bound = 20 + 3 * paid;
  printf("%d generations, %llu waits in vain, %llu waits that paid\n", LINGER_GENERATIONS, in_vain, paid);
  if (in_vain > bound)
    mt_fail("%llu waits in vain (at most %llu expected with %llu that paid)", in_vain, bound, paid);
}

/* cancel: the thread whose first malloc is cancelled while it waits. */
static sem_t cancel_may_come, keeper_gave, keeper_may_exit;
static _Atomic bool cancelled_malloc_returned;
static void *keeper_block;

/* A thread that lives through the test: its heap is never parked meanwhile. */
static void *keeper_thread(void *arg) {
  (void)arg;
  keeper_block = mt_malloc_touched(64);
  sem_post(&keeper_gave);
  sem_wait(&keeper_may_exit);
  return NULL;
}

static void *cancelled_thread(void *arg) {
  free(arg); /* a block of the keeper's heap */
  sem_post(&cancel_may_come);
  free(mt_malloc_touched(64)); /* waits for the keeper's heap, in vain */
  atomic_store(&cancelled_malloc_returned, true);
  for (;;) pause(); /* a cancellation point */
  return NULL;
}

static void *allocate_a_little(void *arg) {
  (void)arg;
  free(mt_malloc_touched(64));
  return NULL;
}

static void cancel(void) {
  alarm(20);
  sem_init(&cancel_may_come, 0, 0);
  sem_init(&keeper_gave, 0, 0);
  sem_init(&keeper_may_exit, 0, 0);
  pthread_t keeper = start_thread(keeper_thread, NULL);
  sem_wait(&keeper_gave);
  unsigned long long waits_before = report_figure(WAITS);
  pthread_t t = start_thread(cancelled_thread, keeper_block);
  sem_wait(&cancel_may_come);
  pthread_cancel(t);
  void *result = NULL;
  pthread_join(t, &result);
  if (result != PTHREAD_CANCELED) mt_fail("the thread was not cancelled");
  if (!atomic_load(&cancelled_malloc_returned)) mt_fail("the thread was cancelled inside malloc");
  /* Otherwise the test would not have tested a cancel during the wait. */
  if (heaps_parked_at_exit() && report_figure(WAITS) == waits_before)
    mt_fail("the thread's first malloc did not wait for the keeper's heap");
  run_thread(allocate_a_little, NULL);
  malloc_trim(0);
  sem_post(&keeper_may_exit);
  pthread_join(keeper, NULL);
  alarm(0);
  printf("the cancelled thread's malloc returned; other threads allocate and trim\n");
}

/* main: a worker's first free is of the main thread's block. */
static void *free_then_allocate(void *arg) {
  free(arg);
  free(mt_malloc_touched(64));
  return NULL;
}

static void main_heap_not_waited_for(const char *whose) {
  unsigned long long before = report_figure(WAITS);
  run_thread(free_then_allocate, mt_malloc_touched(64));
  unsigned long long waits = report_figure(WAITS) - before;
  printf("a worker freed a block of %s first: %llu waits for its heap\n", whose, waits);
  if (waits != 0) mt_fail("the worker waited for the heap of %s to be parked", whose);
}

/* Forks from a thread other than the main one; in the child, that thread is main. */
static void *fork_and_check(void *arg) {
  (void)arg;
  free(mt_malloc_touched(64)); /* this thread's heap */
  fflush(stdout);
  pid_t child = fork();
  if (child < 0) mt_fail("fork: %s", strerror(errno));
  if (child == 0) {
    main_heap_not_waited_for("the child's main thread (the parent's forking thread)");
    fflush(stdout);
    _exit(0);
  }
  int status = 0;
  if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    mt_fail("the forked child failed");
  return NULL;
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
  } else if (strcmp(mode, "successors") == 0) {
    successors(baseline);
  } else if (strcmp(mode, "overlap") == 0) {
    overlap(baseline);
  } else if (strcmp(mode, "linger") == 0) {
    linger();
  } else if (strcmp(mode, "cancel") == 0) {
    cancel();
  } else if (strcmp(mode, "main") == 0) {
    main_heap_not_waited_for("the main thread");
    run_thread(fork_and_check, NULL);
  } else if (strcmp(mode, "trim") == 0) {
    run_thread(allocate_free_exit, NULL);
    mt_require_grew(baseline, trim_peak, TRIM_SET / 2);
    mt_rss("after the thread exited");
    mt_trim_must_release();
    mt_require_at_most("RSS after malloc_trim", mt_rss("after malloc_trim"), baseline + 5 * MiB);
  } else {
    mt_fail("unknown mode %s (lanes, successors, overlap, linger, cancel, main or trim)", mode);
  }
  mt_print_info("allocator:");
  printf("ok\n");
  return 0;
}
