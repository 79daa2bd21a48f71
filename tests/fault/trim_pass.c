/* malloc_trim while the purge thread is in the middle of a pass (Debug builds).
 *
 * A pass takes the memory due for purging out of every other thread's reach before it
 * purges it. A trim that runs meanwhile cannot purge that memory, and must not return
 * while it is held: it waits the pass out and looks again. Here the pass is held on
 * purpose (debug.hold_purge_thread) with 64 MiB of freed blocks due, a second thread
 * trims, and the pass is let go 200 ms later. The trim must end after the pass did, with
 * committed memory back at the start's (fault_sweep once saw 9-17 MB left after trim). */
#include <malloc.h>
#include <pthread.h>
#include <inttypes.h>
#include <time.h>

#include "test_util.h"

enum { BLOCK = 64 << 10, BLOCKS = 1024 }; /* 64 MiB of mid blocks */
#define HOLD_MS 200

static uint64_t stat(const char *name) {
  uint64_t v = 0;
  REQUIRE(hak_stats_get(name, &v) == 0, "hak_stats_get(%s)", name);
  return v;
}

static void hold(uint64_t v) {
  REQUIRE(hak_ctl_set("debug.hold_purge_thread", &v, sizeof v) == 0, "debug.hold_purge_thread = %" PRIu64, v);
}

static double trim_s;
static uint64_t committed_after;

static void *trimmer(void *arg) {
  (void)arg;
  double t0 = tu_now();
  malloc_trim(0);
  committed_after = stat("total.committed");
  trim_s = tu_now() - t0;
  return NULL;
}

int main(void) {
  REQUIRE(stat("build.debug") != 0, "a Debug build");
  static void *blocks[BLOCKS];
  malloc_trim(0);
  uint64_t committed0 = stat("total.committed");
  for (int i = 0; i < BLOCKS; i++) {
    blocks[i] = malloc(BLOCK);
    REQUIRE(blocks[i] != NULL, "malloc");
    memset(blocks[i], 0x5a, BLOCK);
  }
  REQUIRE(stat("purge.thread_starts") >= 1, "no purge thread started with 64 MiB committed");
  hold(1);
  for (int i = 0; i < BLOCKS; i++) free(blocks[i]);
  /* The freed memory is due a purge delay later; the thread stops in the pass that
   * takes it. */
  double t0 = tu_now();
  while (stat("debug.hold_purge_thread") != 2 && tu_now() - t0 < 10) usleep(1000);
  REQUIRE(stat("debug.hold_purge_thread") == 2, "the purge thread never reached its pass in 10 s");
  uint64_t held = stat("total.committed");
  printf("held: %.1f MiB committed, %.1f MiB at the start\n", held / 1048576.0, committed0 / 1048576.0);

  pthread_t t;
  REQUIRE(pthread_create(&t, NULL, trimmer, NULL) == 0, "pthread_create");
  nanosleep(&(struct timespec){0, HOLD_MS * 1000000L}, NULL);
  hold(0);
  pthread_join(t, NULL);
  printf("trim took %.0f ms; committed %.1f MiB after it\n", trim_s * 1000, committed_after / 1048576.0);
  CHECK(held > committed0 + (8u << 20),
        "only %" PRIu64 " bytes committed while held, %" PRIu64 " at the start: no test", held, committed0);
  CHECK(trim_s * 1000 >= HOLD_MS / 2, "trim returned after %.0f ms, while the pass was held for %d ms",
        trim_s * 1000, HOLD_MS);
  CHECK(committed_after <= committed0 + (4u << 20),
        "committed %" PRIu64 " after trim, %" PRIu64 " at the start", committed_after, committed0);
  return tu_finish("trim_pass");
}
