/* Programs for valgrind's memcheck (run_memcheck.py): blocks of the hak_ functions must
 * be as visible to memcheck as malloc's. Each error case makes one mistake on the line
 * marked "MISTAKE: <case>", where memcheck must report it; "clean" uses the whole hak_
 * API, from several threads, and memcheck must report nothing.
 * Usage: mc_cases leak|overflow|use_after_free|uninitialised|double_free|clean
 */
#include "hakmem.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static volatile char sink;

static void leak(void) {
  char *p = hak_malloc(100); /* MISTAKE: leak */
  memset(p, 1, 100);
  p = NULL;
}

static void overflow(void) {
  char *p = hak_malloc(40);
  char *neighbour = hak_malloc(40);
  memset(p, 0, 40);
  p[40] = 1; /* MISTAKE: overflow */
  hak_free(neighbour);
  hak_free(p);
}

static void use_after_free(void) {
  char *p = hak_malloc(64);
  memset(p, 2, 64);
  hak_free(p);
  sink = p[10]; /* MISTAKE: use_after_free */
}

static void uninitialised(void) {
  char *p = hak_malloc(32);
  p[0] = 1;
  if (p[5] == 42) sink = 1; /* MISTAKE: uninitialised */
  hak_free(p);
}

static void double_free(void) {
  char *p = hak_calloc(4, 8);
  hak_free(p);
  hak_free(p); /* MISTAKE: double_free */
}

/* ---- clean: everything right ---------------------------------------------------------- */
enum { THREADS = 4, ROUNDS = 300 };
static void *handed[THREADS];

static void *worker(void *arg) {
  size_t id = (size_t)arg;
  void *keep[16] = {0};
  for (int i = 0; i < ROUNDS; i++) {
    size_t n = (size_t)(i * 37 + id * 11) % 3000 + 1;
    int k = i % 16;
    if (keep[k]) hak_free(keep[k]);
    keep[k] = (i % 3) ? hak_malloc(n) : hak_calloc(1, n);
    memset(keep[k], (int)i, n);
    if (i % 5 == 0) keep[k] = hak_realloc(keep[k], n * 2 + 1);
  }
  for (int k = 0; k < 16; k++) hak_free(keep[k]);
  /* A block to be freed by another thread. */
  handed[id] = hak_malloc(200);
  memset(handed[id], 3, 200);
  return NULL;
}

static void clean(void) {
  pthread_t t[THREADS];
  for (size_t i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, worker, (void *)i);
  for (size_t i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
  for (size_t i = 0; i < THREADS; i++) hak_free(handed[i]);

  char *z = hak_calloc(100, 10); /* calloc's memory is defined: zero */
  for (int i = 0; i < 1000; i++) sink = z[i] ? 1 : sink;
  z = hak_reallocarray(z, 300, 10);
  for (int i = 0; i < 1000; i++) sink = z[i] ? 1 : sink; /* the copy keeps them defined */
  memset(z + 1000, 0, 2000);
  if (hak_malloc_usable_size(z) < 3000) abort();
  hak_free(z);
  void *a = NULL;
  if (hak_posix_memalign(&a, 4096, 10000) != 0 || (size_t)a % 4096 != 0) abort();
  memset(a, 4, 10000);
  hak_free_aligned_sized(a, 4096, 10000);
  char *b = hak_aligned_alloc(64, 640);
  if ((size_t)b % 64 != 0) abort();
  memset(b, 5, 640);
  hak_free_sized(b, 640);
  hak_free(hak_memalign(256, 1));
  hak_free(hak_valloc(5000));
  hak_free(hak_pvalloc(5000));
  char *big = hak_malloc((size_t)40 << 20); /* huge */
  big[0] = big[(40 << 20) - 1] = 1;
  hak_free(big);
  char *large = hak_malloc(1 << 20);
  memset(large, 6, 1 << 20);
  large = hak_realloc(large, 3 << 20);
  hak_free(large);
  hak_free(NULL);
  if (hak_realloc(hak_malloc(10), 0) != NULL) abort();
  /* A block of the C library's malloc (memcheck's here) through the hak_ names. */
  char *m = malloc(50);
  memset(m, 7, 50);
  m = hak_realloc(m, 80);
  if (hak_malloc_usable_size(m) < 80) abort();
  hak_free(m);
  /* Many blocks at once: more than the quarantine keeps. */
  static void *many[20000];
  for (int i = 0; i < 20000; i++) many[i] = hak_malloc(16 + i % 200);
  for (int i = 0; i < 20000; i++) hak_free(many[i]);
  hak_malloc_trim(0);
  uint64_t v = 0;
  if (hak_stats_get("checker.memcheck", &v) != 0 || v != 1) {
    fprintf(stderr, "checker.memcheck reads %d\n", (int)v);
    exit(3);
  }
}

int main(int argc, char **argv) {
  const char *what = argc > 1 ? argv[1] : "clean";
  if (strcmp(what, "leak") == 0) leak();
  else if (strcmp(what, "overflow") == 0) overflow();
  else if (strcmp(what, "use_after_free") == 0) use_after_free();
  else if (strcmp(what, "uninitialised") == 0) uninitialised();
  else if (strcmp(what, "double_free") == 0) double_free();
  else if (strcmp(what, "clean") == 0) clean();
  else {
    fprintf(stderr, "usage: mc_cases leak|overflow|use_after_free|uninitialised|double_free|clean\n");
    return 2;
  }
  puts("mc_cases: done");
  return 0;
}
