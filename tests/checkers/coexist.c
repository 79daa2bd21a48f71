/* One program for every checker and hakmem together (run_coexist.py): built plain, with
 * -fsanitize=address, thread or undefined, each with and without -lhakmem, and run with
 * and without LD_PRELOAD=libhakmem.so or under valgrind. The hak_ names are weak, so the
 * program also runs where hakmem is only preloaded, or absent.
 *   clean            the standard and the hak_ names, threads handing blocks over under
 *                    a lock; prints whose allocator serves malloc and hak_malloc
 *   malloc_overflow  writes past a malloc'd block, on the line marked MISTAKE
 *   hak_overflow     the same through hak_malloc
 *   race             two threads write one hak_malloc'd block unordered
 *   undefined        a signed overflow
 */
#include "hakmem.h"

#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#pragma weak hak_malloc
#pragma weak hak_free
#pragma weak hak_realloc
#pragma weak hak_stats_get
void free_sized(void *p, size_t size) __attribute__((weak)); /* C23; glibc 2.36 has none */
void *__libc_malloc(size_t n);
void __libc_free(void *p);

static volatile int sink;

static int have_hakmem(void) { return hak_malloc != NULL && hak_stats_get != NULL; }

static uint64_t figure(const char *name) {
  uint64_t v = 0;
  if (hak_stats_get(name, &v) != 0) return 0;
  return v;
}

/* Does hakmem's table count a block of this allocation? */
static const char *whose(void *(*alloc)(size_t)) {
  if (!have_hakmem()) return "not hakmem";
  uint64_t before = figure("tier.small.live_blocks");
  void *p = alloc(48);
  uint64_t after = figure("tier.small.live_blocks");
  if (alloc == malloc) free(p);
  else hak_free(p);
  return after > before ? "hakmem" : "not hakmem";
}

enum { HANDOVERS = 500 };
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static char *slot;

static void *taker(void *arg) {
  (void)arg;
  for (int got = 0; got < HANDOVERS; got++) {
    pthread_mutex_lock(&lock);
    while (slot == NULL) pthread_cond_wait(&changed, &lock);
    char *p = slot;
    slot = NULL;
    pthread_cond_signal(&changed);
    pthread_mutex_unlock(&lock);
    memset(p, 2, 64); /* then freed here and reused there: ordered by the lock */
    if (have_hakmem()) hak_free(p);
    else free(p);
  }
  return NULL;
}

static void clean(void) {
  pthread_t t;
  pthread_create(&t, NULL, taker, NULL);
  for (int handed = 0; handed < HANDOVERS; handed++) {
    char *p = have_hakmem() ? hak_malloc(64) : malloc(64);
    memset(p, 1, 64);
    pthread_mutex_lock(&lock);
    while (slot != NULL) pthread_cond_wait(&changed, &lock);
    slot = p;
    pthread_cond_signal(&changed);
    pthread_mutex_unlock(&lock);
  }
  pthread_join(t, NULL);
  /* Standard names, the ones checkers replace and the ones they may not. */
  char *a = malloc(10), *b = calloc(3, 7), *c = realloc(NULL, 30);
  a = realloc(a, 100);
  void *d = reallocarray(NULL, 10, 10), *e = NULL;
  d = reallocarray(d, 20, 10);
  if (posix_memalign(&e, 64, 100) != 0) abort();
  void *f = aligned_alloc(256, 512), *g = memalign(128, 10), *h = valloc(100), *i = pvalloc(100);
  void *j = __libc_malloc(40);
  sink = (int)malloc_usable_size(a) + b[20];
  free(a), free(b), free(c), free(d), free(e), free(f), free(g), free(h), free(i);
  __libc_free(j);
  if (free_sized) free_sized(malloc(24), 24);
  if (have_hakmem()) { /* blocks of either family freed by the other's names */
    void *m = malloc(33);
    m = hak_realloc(m, 66);
    hak_free(m);
  }
  printf("malloc: %s\nhak_malloc: %s\n", whose(malloc), have_hakmem() ? whose(hak_malloc) : "absent");
  if (have_hakmem())
    printf("checker.memcheck=%d checker.sanitizer=%d\n", (int)figure("checker.memcheck"),
           (int)figure("checker.sanitizer"));
}

static void malloc_overflow(void) {
  char *p = malloc(24);
  memset(p, 0, 24);
  p[24] = 1; /* MISTAKE: malloc_overflow */
  free(p);
}

static void hak_overflow(void) {
  char *p = hak_malloc(24);
  memset(p, 0, 24);
  p[24] = 1; /* MISTAKE: hak_overflow */
  hak_free(p);
}

static char *shared;
static void *racer(void *arg) {
  shared[0] = (char)(size_t)arg; /* MISTAKE: race */
  return NULL;
}

static void race(void) {
  shared = hak_malloc(16);
  pthread_t t1, t2;
  pthread_create(&t1, NULL, racer, (void *)1);
  pthread_create(&t2, NULL, racer, (void *)2);
  pthread_join(t1, NULL);
  pthread_join(t2, NULL);
  hak_free(shared);
}

static void undefined(int big) {
  int x = big + 1; /* MISTAKE: undefined */
  sink = x;
  char *p = malloc(32); /* and the allocator goes on working */
  free(p);
}

int main(int argc, char **argv) {
  const char *what = argc > 1 ? argv[1] : "clean";
  if (strcmp(what, "clean") == 0) clean();
  else if (strcmp(what, "malloc_overflow") == 0) malloc_overflow();
  else if (strcmp(what, "hak_overflow") == 0 && have_hakmem()) hak_overflow();
  else if (strcmp(what, "race") == 0 && have_hakmem()) race();
  else if (strcmp(what, "undefined") == 0) {
    undefined(argc > 2 ? atoi(argv[2]) : 2147483647);
    printf("malloc: %s\n", whose(malloc));
  } else {
    fprintf(stderr, "coexist: %s: unknown case, or no hakmem\n", what);
    return 2;
  }
  puts("coexist: done");
  return 0;
}
