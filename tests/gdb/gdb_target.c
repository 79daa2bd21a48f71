/* The program check_gdb.py runs under gdb to test tools/gdb/hakmem_gdb.py: blocks of a
 * few classes, some freed by their owner and some by another thread, a full slab, a large
 * and a huge block. It writes what it holds to EXPECT_FILE, hakmem's stats report to
 * stderr, and stops in hakmem_gdb_stop (a breakpoint's place) with a worker thread
 * blocked and holding frees back.
 *
 * usage: gdb_target EXPECT_FILE [secure]
 * `secure` (the hardened library): more frees, so that some blocks leave the quarantine
 * for the slab's lists, whose links that build encodes. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hakmem.h"

#define SMALL_SIZE 40   /* a tiny class (48 bytes; 64 in the hardened build) */
#define N_SMALL 400     /* every fourth one stays live */
#define MID_SIZE 120000 /* the largest mid class: four blocks fill a slab */
#define N_MID 6
#define REMOTE_SIZE 200    /* freed by the worker thread: frees into another's slab */
#define LARGE_SIZE 1048699 /* a large block: a span of units */
#define FREED_LARGE_SIZE 300000
#define HUGE_SIZE (40u * 1024 * 1024 + 5) /* a mapping of its own */

/* Globals, so that gdb can name them: `hakmem ptr live_small`. */
void *small[N_SMALL], *mid[N_MID], **remote_blocks;
void *live_small, *freed_first, *freed_last, *large_block, *freed_large, *huge_block;
void *remote_first, *remote_last;
int n_remote, n_remote_freed;
static int static_int;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int stage; /* 1: the worker has freed; 2: main is done */

/* Frees main's blocks, then blocks with those frees still chained in its heap. */
static void *worker(void *arg) {
  (void)arg;
  void *own = malloc(64); /* a heap of its own, so its frees into main's slabs are chained */
  for (int i = 0; i < n_remote_freed; i++) free(remote_blocks[i]);
  pthread_mutex_lock(&lock);
  stage = 1;
  pthread_cond_broadcast(&cond);
  while (stage != 2) pthread_cond_wait(&cond, &lock);
  pthread_mutex_unlock(&lock);
  free(own);
  return NULL;
}

/* gdb stops here (`break hakmem_gdb_stop`). */
__attribute__((noinline)) void hakmem_gdb_stop(void) { __asm__ volatile("" ::: "memory"); }

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s EXPECT_FILE [secure]\n", argv[0]);
    return 2;
  }
  int secure = argc > 2 && strcmp(argv[2], "secure") == 0;
  /* One slab of the 224-byte class, 40 frees: two pushes of 18 and 4 held back. The
   * hardened build quarantines 256 frees per thread before any goes further. */
  n_remote = secure ? 340 : 60;
  n_remote_freed = secure ? 300 : 40;
  remote_blocks = malloc(sizeof(void *) * (size_t)n_remote);
  if (remote_blocks == NULL) return 1;
  for (int i = 0; i < n_remote; i++) remote_blocks[i] = malloc(REMOTE_SIZE);
  for (int i = 0; i < N_SMALL; i++) small[i] = malloc(SMALL_SIZE);
  for (int i = 0; i < N_MID; i++) mid[i] = malloc(MID_SIZE);
  large_block = malloc(LARGE_SIZE);
  freed_large = malloc(FREED_LARGE_SIZE);
  huge_block = malloc(HUGE_SIZE);
  for (int i = 0; i < N_SMALL; i++)
    if (i % 4 != 0) free(small[i]);
  live_small = small[4];
  freed_first = small[1];
  freed_last = small[N_SMALL - 1];
  remote_first = remote_blocks[0];
  remote_last = remote_blocks[n_remote_freed - 1];

  pthread_t t;
  if (pthread_create(&t, NULL, worker, NULL) != 0) return 1;
  pthread_mutex_lock(&lock);
  while (stage != 1) pthread_cond_wait(&cond, &lock);
  pthread_mutex_unlock(&lock);

  FILE *f = fopen(argv[1], "w");
  if (f == NULL) return 1;
  fprintf(f, "small_live %d\nmid_live %d\nremote_live %d\n", N_SMALL / 4, N_MID, n_remote - n_remote_freed);
  fprintf(f, "large_size %d\nhuge_size %u\nstatic %p\n", LARGE_SIZE, HUGE_SIZE, (void *)&static_int);
  fclose(f);
  /* Freed last: its span goes back to its region, where the allocations above (the
   * thread's, the file's) could have placed a slab. */
  free(freed_large);
  /* The report the checker compares `hakmem heap` with: stderr takes no allocation. */
  hak_stats_print(stderr);
  hakmem_gdb_stop();

  pthread_mutex_lock(&lock);
  stage = 2;
  pthread_cond_broadcast(&cond);
  pthread_mutex_unlock(&lock);
  pthread_join(t, NULL);
  return 0;
}
