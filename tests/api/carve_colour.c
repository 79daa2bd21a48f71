/* carve_colour: a fresh heap's first blocks of the tiny classes do not all sit at the
 * same offsets within a page, and a carve still hands out each of its blocks once.
 *
 * Every slab starts on a 64 KiB boundary. Without colouring, the first block each class
 * hands out is block 0 of its slab, so for the 20 tiny classes their offsets within a
 * page fall in 6 distinct cache lines (the slab's head gap is all that differs). With
 * each slab's carves starting at a block picked from its address, a simulation of
 * uniformly random picks gave at least 10 distinct lines in each of 1,000,000 runs (and
 * at least 11 in all but 5); this test asks for 10.
 *
 * Then the 64-byte class: its first carve is one page of 64 blocks, so the next 63
 * allocations must complete exactly those blocks, each once, whatever block the carve
 * listed first. Usage: carve_colour [seed] (the seed is printed, not used: the layout
 * depends only on the addresses the kernel gives).
 */
#include <malloc.h>
#include <pthread.h>

#include "test_util.h"

#define TINY_CLASSES 20
#define MIN_DISTINCT_LINES 10
#define CARVE_64 64 /* a carve is a page's worth of blocks: 4096 / 64 */

static size_t tiny_size(unsigned c) {
  if (c < 8) return 16 * (c + 1); /* 16 .. 128 */
  unsigned bit = 7 + (c - 8) / 4; /* 160 .. 1024, 4 per doubling */
  return ((size_t)1 << bit) + ((c - 8) % 4 + 1) * ((size_t)1 << (bit - 2));
}

static int cmp_addr(const void *a, const void *b) {
  uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
  return x < y ? -1 : x > y;
}

/* Runs in a new thread, so that its heap is new and every class starts a fresh slab. */
static void *first_blocks(void *arg) {
  (void)arg;
  void *first[TINY_CLASSES];
  bool line_seen[4096 / 64] = {false};
  unsigned distinct = 0, of_64 = TINY_CLASSES;
  for (unsigned c = 0; c < TINY_CLASSES; c++) {
    size_t n = tiny_size(c);
    first[c] = malloc(n);
    REQUIRE(first[c] != NULL, "malloc(%zu) failed", n);
    CHECK(malloc_usable_size(first[c]) == n, "malloc(%zu): usable size %zu, want the class size", n,
          malloc_usable_size(first[c]));
    unsigned line = (unsigned)(((uintptr_t)first[c] & 4095) >> 6);
    if (!line_seen[line]) distinct++;
    line_seen[line] = true;
    if (n == 64) of_64 = c;
  }
  printf("carve_colour: the first blocks of %u tiny classes lie in %u distinct lines of a page\n",
         TINY_CLASSES, distinct);
  CHECK(distinct >= MIN_DISTINCT_LINES, "%u distinct lines, want at least %u", distinct, MIN_DISTINCT_LINES);

  REQUIRE(of_64 < TINY_CLASSES, "no 64-byte class");
  uintptr_t carve[CARVE_64];
  carve[0] = (uintptr_t)first[of_64];
  for (unsigned i = 1; i < CARVE_64; i++) {
    carve[i] = (uintptr_t)malloc(64);
    REQUIRE(carve[i] != 0, "malloc(64) failed");
  }
  qsort(carve, CARVE_64, sizeof carve[0], cmp_addr);
  for (unsigned i = 1; i < CARVE_64; i++)
    CHECK(carve[i] - carve[i - 1] == 64,
          "blocks %u and %u of the first carve are %#" PRIxPTR " and %#" PRIxPTR
          ": want consecutive 64-byte blocks, each once",
          i - 1, i, carve[i - 1], carve[i]);
  CHECK((carve[0] & 4095) == 0, "the first carve starts at %#" PRIxPTR ", not on a page", carve[0]);
  for (unsigned i = 0; i < CARVE_64; i++) free((void *)carve[i]);
  for (unsigned c = 0; c < TINY_CLASSES; c++)
    if (c != of_64) free(first[c]);
  return NULL;
}

int main(int argc, char **argv) {
  tu_seed(argc, argv);
  if (!tu_have_hakmem()) {
    printf("carve_colour: not linked with hakmem, skipped\n");
    return 0;
  }
  pthread_t t;
  REQUIRE(pthread_create(&t, NULL, first_blocks, NULL) == 0, "pthread_create failed");
  REQUIRE(pthread_join(t, NULL) == 0, "pthread_join failed");
  return tu_finish("carve_colour");
}
