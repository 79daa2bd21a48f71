/* Allocation sites the profiler tests know the answers for (check_profiler.py).
 *
 *   sites    site_small allocates N blocks of 1000 bytes and frees them, site_big the
 *            same count of 4000 bytes (4x the bytes), site_leak 64 blocks of 3000 bytes
 *            it never frees, site_large 8 blocks of 256 KiB (large) freed, and
 *            site_calloc zeroed blocks that must read as zero. N is argv[2].
 *   threads  4 threads each allocate through site_small and site_big; a different
 *            thread frees every block, some after their allocating thread exited.
 *   fork     sites in the parent and a fork; the child leaks through site_child.
 *   dump     hak_prof_dump to argv[2] while blocks are live; prints its return value.
 *   peak     grows to 48 MiB live through site_peak, frees, exits.
 *   double_free  frees a (sampled) block twice: must abort with "double free".
 *
 * Built without frame pointers on purpose: the profiler must unwind through .eh_frame.
 * Every site stores its block before returning, so no call is a tail call. */
#include "hakmem.h"

#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))
static void *volatile sink;

NOINLINE void *site_small(void) {
  void *p = malloc(1000);
  sink = p;
  return p;
}
NOINLINE void *site_big(void) {
  void *p = malloc(4000);
  sink = p;
  return p;
}
NOINLINE void *site_leak(void) {
  void *p = malloc(3000);
  sink = p;
  return p;
}
NOINLINE void *site_large(void) {
  void *p = malloc(256 << 10);
  sink = p;
  return p;
}
NOINLINE void *site_child(void) {
  void *p = malloc(5000);
  sink = p;
  return p;
}
NOINLINE void *site_peak(void) {
  void *p = malloc(1 << 20);
  sink = p;
  return p;
}
NOINLINE void *site_calloc(void) {
  void *p = calloc(1, 2000);
  sink = p;
  return p;
}

static void *keep[64];

static int run_sites(long n) {
  for (long i = 0; i < n; i++) {
    void *a = site_small(), *b = site_big();
    memset(a, 1, 1000);
    memset(b, 2, 4000);
    void *c = site_calloc();
    for (int k = 0; k < 2000; k++)
      if (((unsigned char *)c)[k] != 0) {
        fprintf(stderr, "calloc block not zero\n");
        return 1;
      }
    memset(c, 3, 2000);
    /* realloc within the block and to a bigger one keep the data */
    c = realloc(c, 1500);
    c = realloc(c, 6000);
    if (((unsigned char *)c)[1499] != 3) {
      fprintf(stderr, "realloc lost data\n");
      return 1;
    }
    free(c);
    if (malloc_usable_size(a) < 1000 || malloc_usable_size(b) < 4000) {
      fprintf(stderr, "usable size too small\n");
      return 1;
    }
    free(a);
    free(b);
  }
  for (int i = 0; i < 64; i++) keep[i] = site_leak();
  for (int i = 0; i < 8; i++) free(site_large());
  return 0;
}

/* ---- threads: blocks allocated by one thread, freed by another ---------------------- */
#define PER_THREAD 2000
static void *blocks[4][2 * PER_THREAD];

static void *alloc_thread(void *arg) {
  void **out = arg;
  for (int i = 0; i < PER_THREAD; i++) {
    out[2 * i] = site_small();
    out[2 * i + 1] = site_big();
  }
  return NULL;
}

static void *free_thread(void *arg) {
  void **in = arg;
  for (int i = 0; i < 2 * PER_THREAD; i++) free(in[i]);
  return NULL;
}

static int run_threads(void) {
  pthread_t t[4];
  for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, alloc_thread, blocks[i]);
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL); /* the allocating threads exited */
  for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, free_thread, blocks[(i + 1) % 4]);
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < 64; i++) keep[i] = site_leak();
  return 0;
}

static int run_fork(long n) {
  run_sites(n);
  pid_t pid = fork();
  if (pid < 0) return 1;
  if (pid == 0) {
    for (int i = 0; i < 32; i++) keep[i] = site_child();
    exit(0); /* runs the destructors: the child writes its own profile */
  }
  int status;
  waitpid(pid, &status, 0);
  printf("child %d\n", (int)pid);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}

static int run_peak(void) {
  static void *big[48];
  for (int i = 0; i < 48; i++) big[i] = site_peak();
  for (int i = 0; i < 48; i++) free(big[i]);
  return 0;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "sites";
  long n = argc > 2 ? atol(argv[2]) : 1000;
  if (strcmp(mode, "sites") == 0) return run_sites(n);
  if (strcmp(mode, "threads") == 0) return run_threads();
  if (strcmp(mode, "fork") == 0) return run_fork(n);
  if (strcmp(mode, "peak") == 0) return run_peak();
  if (strcmp(mode, "double_free") == 0) { /* a sampled block keeps free's checks */
    void *p = site_small();
    free(p);
    free(p);
    return 0;
  }
  if (strcmp(mode, "dump") == 0) {
    run_sites(100);
    printf("dump %d\n", hak_prof_dump(argc > 2 ? argv[2] : NULL));
    hak_prof_info_t info;
    hak_prof_get_info(&info);
    printf("samples %llu stacks %zu live %zu table_bytes %zu\n", info.samples, info.stacks, info.live_samples,
           info.table_bytes);
    return 0;
  }
  fprintf(stderr, "unknown mode %s\n", mode);
  return 2;
}
