/* heaps_dead_secure: the hardened build's destroyed heaps (src/heap_dead.c), in a loop
 * of requests like bench heap_requests: each request's heap gets 500 blocks of
 * 16..4096 bytes, writes them whole and is destroyed.
 *   - every block a heap hands out reads zero past its first 16 bytes (which hold the
 *     free list's encoded link): nothing of an earlier request's data;
 *   - the requests reuse the destroyed heaps' memory resident: after a warm-up, fewer
 *     than 20 page faults a request (each request writes about 190 pages);
 *   - peak RSS stays within 8 MiB of the start (the queue holds at most 4 MiB);
 *   - idle, with the purge thread running (a 16 MiB block keeps it there), the queue's
 *     pages go back within 5 s.
 *
 *   heaps_dead_secure [SEED]
 */
#include <sys/resource.h>
#include <unistd.h>

#include "test_util.h"

#define BLOCKS 500

static long faults(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_minflt;
}

static void request(tu_rng *rng) {
  static unsigned char *p[BLOCKS];
  static size_t n[BLOCKS];
  hak_heap_t *h = hak_heap_new();
  REQUIRE(h != NULL, "hak_heap_new");
  for (int i = 0; i < BLOCKS; i++) {
    n[i] = (size_t)16 << tu_below(rng, 9); /* 16..4096 */
    n[i] += tu_below(rng, n[i]);
    if (n[i] > 4096) n[i] = 4096;
    p[i] = hak_heap_malloc(h, n[i]);
    REQUIRE(p[i] != NULL, "hak_heap_malloc");
    for (size_t j = 16; j < n[i]; j++) REQUIRE(p[i][j] == 0, "a block of a new heap holds old data");
  }
  for (int i = 0; i < BLOCKS; i++) memset(p[i], 0xA5, n[i]);
  hak_heap_destroy(h);
}

int main(int argc, char **argv) {
  tu_rng rng = tu_rng_make(tu_seed(argc, argv), 0);
  size_t start = tu_rss_bytes();
  for (int r = 0; r < 20; r++) request(&rng);
  long before = faults();
  for (int r = 0; r < 200; r++) request(&rng);
  long per = (faults() - before) / 200;
  size_t peak = tu_rss_bytes();
  printf("faults a request %ld, RSS %zu KiB at start, %zu after\n", per, start >> 10, peak >> 10);
  REQUIRE(per < 20, "destroyed heaps' memory is not reused resident");
  REQUIRE(peak < start + ((size_t)8 << 20), "destroyed heaps' memory holds too much RSS");

  unsigned char *big = malloc((size_t)16 << 20);
  REQUIRE(big != NULL, "malloc");
  memset(big, 1, (size_t)16 << 20);
  for (int r = 0; r < 4; r++) request(&rng);
  size_t busy = tu_rss_bytes(), idle = busy;
  for (int i = 0; i < 50 && idle + ((size_t)1 << 20) > busy; i++) {
    usleep(100000);
    idle = tu_rss_bytes();
  }
  printf("RSS %zu KiB after the requests, %zu idle\n", busy >> 10, idle >> 10);
  REQUIRE(idle + ((size_t)1 << 20) <= busy, "idle, the destroyed heaps' pages stay");
  free(big);
  printf("heaps_dead_secure: ok\n");
  return 0;
}
