/* The purge thread's life cycle: fork, exit, and a thread that cannot be created.
 *
 *   fork      two threads churn 48 MiB bursts, so the purge thread keeps working, while
 *             the main thread forks FORKS children: each child allocates and frees, and
 *             every 100th fills 64 MiB, frees it and must see its RSS fall back within
 *             the purge delay + 200 ms while it sleeps (its own purge thread); every child
 *             exits 0, half through exit() and half through _exit()
 *   exit      a thread calls exit(0) right after freeing 256 MiB, while the purge thread
 *             purges: the process must end with status 0 (ctest's timeout catches a hang)
 *   busy      one thread keeps 32 MiB of mixed blocks live and replaces them at random for
 *             BUSY_MS, taking slow paths all the time: the purge thread must keep to its
 *             period (at most BUSY_MAX_PASSES passes), not run a pass at every refill
 *   nothread  run with HAKMEM_BACKGROUND=test-fail: the thread cannot be created. After a
 *             burst, nothing is printed, and memory still goes back through the slow
 *             paths a program takes (here, a refill every millisecond)
 */
#include "memory_test.h"

#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/wait.h>

#define FORKS 1000

static atomic_bool stop;

static void burst(size_t bytes, size_t block) {
  size_t n = bytes / block;
  void **v = mt_scratch(n * sizeof *v);
  for (size_t i = 0; i < n; i++) v[i] = mt_malloc_touched(block);
  for (size_t i = 0; i < n; i++) free(v[i]);
  mt_scratch_free(v, n * sizeof *v);
}

static void *churner(void *arg) {
  size_t block = (size_t)(uintptr_t)arg;
  while (!atomic_load(&stop)) {
    burst(48 * MiB, block);
    usleep(2000);
  }
  return NULL;
}

static int threads_now(void) {
  DIR *d = opendir("/proc/self/task");
  int n = 0;
  for (struct dirent *e; d != NULL && (e = readdir(d)) != NULL;)
    if (e->d_name[0] != '.') n++;
  if (d) closedir(d);
  return n;
}

static long purge_delay_ms(void) {
  const char *v = getenv("HAKMEM_PURGE_DELAY_MS");
  return v ? atol(v) : 100;
}

/* A child: a little work, and now and then a burst whose memory must go back. */
static int child(int i) {
  void *p[64];
  for (int k = 0; k < 64; k++) p[k] = mt_malloc_touched(16 + (size_t)k * 40);
  for (int k = 0; k < 64; k++) free(p[k]);
  if (i % 100 == 0) {
    size_t base = tu_rss_bytes();
    burst(64 * MiB, 1024);
    usleep((useconds_t)(purge_delay_ms() + 200) * 1000);
    size_t rss = tu_rss_bytes();
    if (rss > base + 8 * MiB) {
      printf("child %d: RSS %.1f MiB after its burst, %.1f before\n", i, mt_mib(rss), mt_mib(base));
      return 3;
    }
  }
  return 0;
}

static int mode_fork(void) {
  pthread_t t[2];
  pthread_create(&t[0], NULL, churner, (void *)(uintptr_t)256);
  pthread_create(&t[1], NULL, churner, (void *)(uintptr_t)2048);
  usleep(100000);
  int bad = 0;
  for (int i = 0; i < FORKS; i++) {
    pid_t pid = fork();
    if (pid < 0) mt_fail("fork failed");
    if (pid == 0) {
      int rc = child(i);
      if (i % 2) exit(rc);
      _exit(rc);
    }
    int status;
    if (waitpid(pid, &status, 0) != pid) mt_fail("waitpid failed");
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      printf("child %d: status %#x\n", i, status);
      bad++;
    }
  }
  atomic_store(&stop, true);
  pthread_join(t[0], NULL);
  pthread_join(t[1], NULL);
  printf("%d forks, %d children failed\n", FORKS, bad);
  return bad ? 1 : 0;
}

static void *exiter(void *arg) {
  (void)arg;
  burst(256 * MiB, 512);
  usleep((useconds_t)purge_delay_ms() * 1000 + 2000); /* the purge thread is at work now */
  exit(0);
}

static _Noreturn void mode_exit(void) {
  pthread_t t;
  pthread_create(&t, NULL, exiter, NULL);
  for (;;) pause();
}

#define BUSY_MS 1000
#define BUSY_LIVE 32768
#define BUSY_MAX_PASSES 100 /* 20 at the default period: a pass every 50 ms while busy */

static uint64_t stat_now(const char *name) {
  uint64_t v = 0;
  if (hak_stats_get(name, &v) != 0) mt_fail("hak_stats_get(%s) failed", name);
  return v;
}

static int mode_busy(void) {
  void **live = mt_scratch(BUSY_LIVE * sizeof *live);
  uint64_t x = 88172645463325252ull;
  for (size_t i = 0; i < BUSY_LIVE; i++) live[i] = mt_malloc_touched(16 + i % 2032);
  usleep(100000); /* the purge thread starts and settles */
  uint64_t passes = stat_now("purge.thread_passes"), woken = stat_now("purge.thread_woken");
  double end = tu_now() + BUSY_MS / 1000.0;
  size_t ops = 0;
  while (tu_now() < end) {
    for (int k = 0; k < 1000; k++, ops++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      size_t i = (size_t)(x % BUSY_LIVE);
      free(live[i]);
      live[i] = mt_malloc_touched(16 + (size_t)(x >> 32) % 4096);
    }
  }
  passes = stat_now("purge.thread_passes") - passes;
  woken = stat_now("purge.thread_woken") - woken;
  printf("%zu replacements in %d ms: %llu purge thread passes, %llu of them woken early\n", ops, BUSY_MS,
         (unsigned long long)passes, (unsigned long long)woken);
  if (stat_now("purge.thread_starts") == 0) mt_fail("no purge thread started");
  for (size_t i = 0; i < BUSY_LIVE; i++) free(live[i]);
  mt_scratch_free(live, BUSY_LIVE * sizeof *live);
  if (passes > BUSY_MAX_PASSES) mt_fail("%llu passes > %d", (unsigned long long)passes, BUSY_MAX_PASSES);
  return 0;
}

static int mode_nothread(void) {
  mt_warm_up();
  size_t base = mt_rss("baseline");
  burst(256 * MiB, 1024);
  mt_rss("after the burst");
  /* Slow paths the program takes: a block of a new size class every millisecond. */
  void *keep[256] = {0};
  for (int i = 0; i < 256; i++) {
    keep[i] = mt_malloc_touched(1100 + (size_t)i * 300);
    usleep(1000);
  }
  size_t rss = mt_rss("after 256 ms of refills");
  for (int i = 0; i < 256; i++) free(keep[i]);
  int n = threads_now();
  printf("threads: %d\n", n);
  if (n != 1) mt_fail("a thread exists although it could not be created");
  mt_require_at_most("RSS above the baseline", rss > base ? rss - base : 0, 24 * MiB);
  return 0;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "fork";
  if (strcmp(mode, "fork") == 0) return mode_fork();
  if (strcmp(mode, "exit") == 0) mode_exit();
  if (strcmp(mode, "nothread") == 0) return mode_nothread();
  if (strcmp(mode, "busy") == 0) return mode_busy();
  mt_fail("unknown mode %s", mode);
}
