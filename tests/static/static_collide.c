/* static_collide: a program that defines, as its own globals, every name hakmem's objects
 * use internally (collide_names.sh writes them), linked with libhakmem.a. It must link,
 * and run on hakmem with its globals untouched: with the internal names global in the
 * archive, the link fails (multiple definitions), or the library's references bind to
 * the program's variables, and allocating writes into them. */
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hakmem.h"

extern unsigned char *const collide_names[];
extern const char *const collide_spelled[];
extern const size_t collide_count;

static int fail(const char *what) {
  fprintf(stderr, "FAIL: %s\n", what);
  return 1;
}

static void *churn(void *arg) {
  size_t n = (size_t)(uintptr_t)arg;
  void *keep[256];
  for (int round = 0; round < 20; round++) {
    for (size_t i = 0; i < 256; i++) {
      keep[i] = malloc(16 + (i * n) % 40000);
      if (keep[i] == NULL) return arg;
      memset(keep[i], (int)i, 16);
    }
    for (size_t i = 0; i < 256; i++) free(keep[i]);
  }
  return NULL;
}

int main(void) {
  if (collide_count < 50) return fail("fewer than 50 internal names: the list is wrong");
  pthread_t t[4];
  for (uintptr_t i = 0; i < 4; i++)
    if (pthread_create(&t[i], NULL, churn, (void *)(i + 1)) != 0) return fail("pthread_create");
  void *res = NULL;
  for (int i = 0; i < 4; i++) {
    pthread_join(t[i], &res);
    if (res != NULL) return fail("malloc returned NULL in a thread");
  }
  enum { BIG = 8 << 20 };
  char *big = malloc(BIG), *small = calloc(100, 10);
  if (big == NULL || small == NULL) return fail("malloc or calloc returned NULL");
  memset(big, 1, BIG);
  uint64_t in_use = 0;
  if (hak_stats_get("total.in_use", &in_use) != 0 || in_use < BIG)
    return fail("hakmem's total.in_use does not count the 8 MiB block: malloc is not hakmem's");
  if (malloc_usable_size(big) < BIG) return fail("malloc_usable_size below the request");
  free(big);
  free(small);
  size_t bad = 0;
  for (size_t i = 0; i < collide_count; i++) {
    const unsigned char *v = collide_names[i];
    int ok = 1;
    for (int j = 0; j < 64; j++) ok &= v[j] == (j < 8 ? 0x5a : 0);
    if (!ok) {
      fprintf(stderr, "the program's global %s was written by the library\n", collide_spelled[i]);
      bad++;
    }
  }
  if (bad != 0) return fail("the library wrote into the program's globals");
  printf("PASS: %zu internal names defined by the program; hakmem served it (in_use %llu)\n", collide_count,
         (unsigned long long)in_use);
  return 0;
}
