/* Memory goes back when the program goes quiet.
 *
 * A burst fills FILL bytes of mixed blocks (16 B .. 2 KiB), frees them all, and then the
 * program goes quiet; by the purge delay + 200 ms (of time the process could run: the
 * time its threads wait for a CPU on a busy machine moves the deadline), RSS must be back
 * within 5 MiB of the baseline taken before the burst, with the library's default settings:
 *   sleep    one thread; quiet = sleeping, no allocator call at all
 *   tick     one thread; quiet = one malloc+free of 32 bytes every millisecond, which
 *            never leaves the fast paths
 *   threads  8 threads each allocate an eighth of the set and block on a condition
 *            variable; the main thread frees every block (cross-thread frees) and sleeps
 *   own      8 threads each allocate an eighth of the set, free it themselves and block
 *   small    a program that never holds more than a few MiB: no thread of the
 *            library's ever appears in /proc/self/task
 * After the memory is back, the library's thread (if one was started) must end within
 * THREAD_END_MS: an idle process keeps no extra thread.
 */
#include "memory_test.h"

#include <dirent.h>
#include <pthread.h>

#define FILL ((size_t)512 * MiB)
#define THREADS 8
#define SLACK (5 * MiB)
#define THREAD_END_MS 3000

static long purge_delay_ms(void) {
  const char *v = getenv("HAKMEM_PURGE_DELAY_MS");
  return v ? atol(v) : 100;
}

static int task_count(void) {
  DIR *d = opendir("/proc/self/task");
  if (d == NULL) mt_fail("cannot open /proc/self/task");
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n;
}

/* The blocks of a share of the burst: sizes 16 .. 2048 from a fixed sequence. */
typedef struct share {
  void **blocks;
  size_t count;
  size_t bytes;
} share_t;

/* The arrays of block pointers come from mmap before the baseline is taken. */
#define CAP_PER_BYTE 256 /* the sizes average 1 KiB: a slot per 256 bytes is plenty */
static void **slots;

static void fill(share_t *s, size_t bytes, unsigned seed) {
  size_t cap = bytes / CAP_PER_BYTE;
  s->blocks = slots + (size_t)seed % THREADS * (FILL / THREADS / CAP_PER_BYTE);
  s->count = 0;
  s->bytes = 0;
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  while (s->bytes < bytes && s->count < cap) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    size_t n = 16 + x % 2033;
    s->blocks[s->count++] = mt_malloc_touched(n);
    s->bytes += n;
  }
}

static void free_all(share_t *s) {
  for (size_t i = 0; i < s->count; i++) free(s->blocks[i]);
}

/* ---- the threads variants -------------------------------------------------------- */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int filled, released;
static bool free_own;
static share_t shares[THREADS];

static void *worker(void *arg) {
  share_t *s = arg;
  fill(s, FILL / THREADS, (unsigned)(s - shares));
  if (free_own) free_all(s);
  pthread_mutex_lock(&lock);
  filled++;
  pthread_cond_broadcast(&cond);
  while (!released) pthread_cond_wait(&cond, &lock); /* quiet: blocked */
  pthread_mutex_unlock(&lock);
  return NULL;
}

/* ---- waiting quietly ------------------------------------------------------------- */
static void quiet_for(unsigned ms, bool tick) {
  double end = tu_now() + ms / 1000.0;
  while (tu_now() < end) {
    if (tick) {
      void *p = malloc(32);
      if (p == NULL) mt_fail("malloc(32) failed");
      ((volatile char *)p)[0] = 1;
      free(p);
    }
    usleep(1000);
  }
}

/* Nanoseconds this process's threads have spent runnable but waiting for a CPU
 * (/proc/self/task/TID/schedstat, its second field), or 0 where the kernel keeps none. */
static double run_delay_s(void) {
  DIR *d = opendir("/proc/self/task");
  if (d == NULL) return 0;
  unsigned long long sum = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char path[300];
    snprintf(path, sizeof path, "/proc/self/task/%s/schedstat", e->d_name);
    FILE *f = fopen(path, "r");
    unsigned long long run, delay;
    if (f == NULL) continue;
    if (fscanf(f, "%llu %llu", &run, &delay) == 2) sum += delay;
    fclose(f);
  }
  closedir(d);
  return sum / 1e9;
}

/* Waits quietly until `deadline`, printing RSS every 50 ms. */
static void quiet_until(double deadline, double freed_at, bool tick) {
  while (tu_now() < deadline) {
    double left = deadline - tu_now();
    quiet_for(left > 0.05 ? 50 : (unsigned)(left * 1000) + 1, tick);
    printf("  +%4.0f ms: RSS %.1f MiB\n", (tu_now() - freed_at) * 1000, mt_mib(tu_rss_bytes()));
  }
}

/* The most a busy machine may move the deadline: a purge thread that never runs fails. */
#define MOST_DELAY_S 10.0

/* RSS at the deadline (purge delay + 200 ms after the last free) must be within SLACK of
 * the baseline; the figures along the way are printed to show how it fell. The promise
 * is of time the process may run: where it is not back yet, the deadline moves by the
 * time its threads waited for a CPU meanwhile (the machine's load, not the library's
 * doing), as often as that time grows, up to MOST_DELAY_S, and says so. */
static void require_back(size_t baseline, double freed_at, bool tick) {
  double delay0 = run_delay_s(), moved = 0;
  double deadline = freed_at + (purge_delay_ms() + 200) / 1000.0;
  quiet_until(deadline, freed_at, tick);
  size_t rss = tu_rss_bytes();
  int moves = 0;
  while (rss > baseline + SLACK) {
    double waited = run_delay_s() - delay0;
    if (waited <= moved + 0.001 || waited > MOST_DELAY_S) break;
    printf(
        "  not back yet; its threads have waited %.0f ms for a CPU since the free: the "
        "deadline moves by %.0f ms\n",
        waited * 1000, (waited - moved) * 1000);
    deadline += waited - moved;
    moved = waited;
    moves++;
    quiet_until(deadline, freed_at, tick);
    rss = tu_rss_bytes();
  }
  printf(
      "deadline moved %d times, by %.0f ms in all, for the time the machine kept this "
      "process waiting\n",
      moves, moved * 1000);
  rss = mt_rss("at purge delay + 200 ms of time the process could run");
  mt_print_info("allocator:");
  mt_require_at_most("RSS above the baseline", rss > baseline ? rss - baseline : 0, SLACK);
}

/* The library's thread, once its work is done, must not linger. */
static void require_thread_ends(int expected) {
  double end = tu_now() + THREAD_END_MS / 1000.0;
  int n;
  while ((n = task_count()) > expected && tu_now() < end) usleep(10000);
  printf("threads in /proc/self/task: %d (expected %d)\n", n, expected);
  if (n > expected) mt_fail("%d threads %d ms after the memory went back", n, THREAD_END_MS);
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "sleep";
  mt_warm_up();
  slots = mt_scratch(FILL / CAP_PER_BYTE * sizeof(void *));
  size_t baseline = mt_rss("baseline");
  if (strcmp(mode, "small") == 0) {
    /* A few MiB, churned, then quiet: no thread may ever appear. */
    share_t s;
    for (int round = 0; round < 20; round++) {
      fill(&s, 3 * MiB, (unsigned)round);
      free_all(&s);
      if (task_count() != 1) mt_fail("a thread appeared in a program holding 3 MiB");
    }
    quiet_for((unsigned)purge_delay_ms() + 300, false);
    int n = task_count();
    printf("threads in /proc/self/task: %d\n", n);
    if (n != 1) mt_fail("%d threads in a program that never held more than 3 MiB", n);
    return 0;
  }
  if (strcmp(mode, "sleep") == 0 || strcmp(mode, "tick") == 0) {
    share_t s;
    fill(&s, FILL, 0);
    size_t peak = mt_rss("filled");
    mt_require_grew(baseline, peak, FILL / 2);
    free_all(&s);
    double freed_at = tu_now();
    require_back(baseline, freed_at, strcmp(mode, "tick") == 0);
    require_thread_ends(1);
    return 0;
  }
  if (strcmp(mode, "threads") == 0 || strcmp(mode, "own") == 0) {
    free_own = strcmp(mode, "own") == 0;
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
      if (pthread_create(&t[i], NULL, worker, &shares[i]) != 0) mt_fail("pthread_create");
    pthread_mutex_lock(&lock);
    while (filled < THREADS) pthread_cond_wait(&cond, &lock);
    pthread_mutex_unlock(&lock);
    size_t peak = mt_rss("filled");
    if (!free_own) mt_require_grew(baseline, peak, FILL / 2);
    if (!free_own)
      for (int i = 0; i < THREADS; i++) free_all(&shares[i]);
    double freed_at = tu_now();
    /* The workers' stacks are resident too: they count against the slack. */
    require_back(baseline, freed_at, false);
    pthread_mutex_lock(&lock);
    released = 1;
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&lock);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    require_thread_ends(1);
    return 0;
  }
  mt_fail("unknown mode %s", mode);
}
