/* stress_idle_owner: slabs taken back from idle heaps while their owners wake up.
 *
 * THREADS threads stand in a ring. Each round, a thread allocates a batch of checked
 * items, hands half to the next thread's mailbox and keeps the rest, then checks and
 * frees what its own mailbox holds (remote frees into the other threads' slabs). One
 * round in three it then sleeps 12-40 ms, long enough to count as idle when the purge
 * delay is short (the test runs with HAKMEM_PURGE_DELAY_MS=5), so other threads' scans
 * take its emptied slabs while it sleeps, or try to just as it wakes and frees the
 * items it kept into the same slabs. Thread 0 also calls malloc_trim(0) every few
 * rounds, which scans every heap whose lock is free. Every item is checked before it
 * is freed; the Debug build also checks every slab it refills from.
 *
 * Usage: stress_idle_owner [seconds=3] [threads=4] [seed=1]
 */
#include "stress_util.h"

#include <unistd.h>

enum { MAX_THREADS = 16, BATCH = 1500, MAILBOX = 8 * BATCH };

typedef struct mailbox {
  pthread_mutex_t mu;
  tu_item items[MAILBOX];
  size_t count;
} mailbox;

static mailbox g_box[MAX_THREADS];
static unsigned g_threads;
static double g_end;
static uint64_t g_seed;

/* Small and mid sizes, where slabs are. */
static size_t item_size(tu_rng *r) {
  return tu_below(r, 10) < 8 ? tu_range(r, 1, 512) : tu_range(r, 513, 8192);
}

/* Hands over what fits; the rest is freed here. */
static void send(unsigned to, tu_item *items, size_t n) {
  mailbox *b = &g_box[to];
  pthread_mutex_lock(&b->mu);
  size_t room = MAILBOX - b->count, k = n < room ? n : room;
  memcpy(&b->items[b->count], items, k * sizeof *items);
  b->count += k;
  pthread_mutex_unlock(&b->mu);
  for (size_t i = k; i < n; i++) tu_item_release("not handed over", &items[i]);
}

static size_t receive(unsigned me, tu_item *out) {
  mailbox *b = &g_box[me];
  pthread_mutex_lock(&b->mu);
  size_t n = b->count;
  memcpy(out, b->items, n * sizeof *out);
  b->count = 0;
  pthread_mutex_unlock(&b->mu);
  return n;
}

static void *worker(void *arg) {
  unsigned me = (unsigned)(uintptr_t)arg;
  tu_rng r = tu_rng_make(g_seed, me);
  tu_item *batch = malloc(BATCH * sizeof *batch);
  tu_item *in = malloc(MAILBOX * sizeof *in);
  REQUIRE(batch != NULL && in != NULL, "worker arrays");
  uint64_t rounds = 0, sleeps = 0;
  while (tu_now() < g_end) {
    for (size_t i = 0; i < BATCH; i++) batch[i] = tu_item_make(item_size(&r), tu_rand(&r));
    send((me + 1) % g_threads, batch, BATCH / 2);
    size_t n = receive(me, in);
    for (size_t i = 0; i < n; i++) tu_item_release("handed over", &in[i]);
    if (tu_below(&r, 3) == 0) {
      usleep((useconds_t)tu_range(&r, 12000, 40000));
      sleeps++;
    }
    for (size_t i = BATCH / 2; i < BATCH; i++) tu_item_release("kept", &batch[i]);
    if (me == 0 && rounds % 8 == 7) malloc_trim(0);
    rounds++;
  }
  free(batch);
  free(in);
  printf("thread %u: %llu rounds, %llu sleeps\n", me, (unsigned long long)rounds, (unsigned long long)sleeps);
  return NULL;
}

int main(int argc, char **argv) {
  double seconds = argc > 1 ? atof(argv[1]) : 3.0;
  g_threads = argc > 2 ? (unsigned)atoi(argv[2]) : 4;
  g_seed = argc > 3 ? strtoull(argv[3], NULL, 10) : 1;
  REQUIRE(g_threads >= 2 && g_threads <= MAX_THREADS, "threads must be 2..%d", MAX_THREADS);
  for (unsigned i = 0; i < g_threads; i++) pthread_mutex_init(&g_box[i].mu, NULL);
  g_end = tu_now() + seconds;
  pthread_t t[MAX_THREADS];
  for (unsigned i = 0; i < g_threads; i++)
    REQUIRE(pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)i) == 0, "pthread_create");
  for (unsigned i = 0; i < g_threads; i++) pthread_join(t[i], NULL);
  /* What is still in the mailboxes, freed by the main thread. */
  for (unsigned i = 0; i < g_threads; i++)
    for (size_t k = 0; k < g_box[i].count; k++) tu_item_release("left over", &g_box[i].items[k]);
  printf("PASS\n");
  return 0;
}
