/* stress_ring: threads in a ring, each allocating blocks of 16..1040 bytes that the next
 * thread checks and frees, while it also allocates and frees blocks of its own in the
 * same slabs. So an owner's mallocs and frees run beside other threads' frees of its
 * blocks, all the time: the hardened build checks a block's neighbour at each of them,
 * and must never take a neighbour another thread is freeing for an overrun one.
 * Usage: stress_ring [seed] [blocks per thread] [threads]
 */
#include "stress_util.h"

enum { MAX_THREADS = 16, INBOX = 256, BATCH = 16, OWN = 64 };

/* One thread's inbox: a bounded ring that the previous thread fills. */
typedef struct inbox {
  pthread_mutex_t mu;
  tu_item ring[INBOX];
  size_t head, count;
} inbox;

typedef struct member {
  unsigned id;
  uint64_t blocks, received;
} member;

static inbox g_inbox[MAX_THREADS];
static unsigned g_threads;
static uint64_t g_seed;

/* Moves up to n items into `to`'s inbox; returns how many fitted. */
static size_t try_send(inbox *to, const tu_item *items, size_t n) {
  pthread_mutex_lock(&to->mu);
  size_t k = 0;
  for (; k < n && to->count < INBOX; k++, to->count++) to->ring[(to->head + to->count) % INBOX] = items[k];
  pthread_mutex_unlock(&to->mu);
  return k;
}

/* Checks and frees everything in the inbox; returns how many. */
static uint64_t drain(inbox *in) {
  tu_item got[INBOX];
  pthread_mutex_lock(&in->mu);
  size_t n = in->count;
  for (size_t i = 0; i < n; i++) got[i] = in->ring[(in->head + i) % INBOX];
  in->head = (in->head + n) % INBOX;
  in->count = 0;
  pthread_mutex_unlock(&in->mu);
  for (size_t i = 0; i < n; i++) tu_item_release("block from the previous thread", &got[i]);
  return n;
}

static void *run(void *arg) {
  member *me = arg;
  tu_rng r = tu_rng_make(g_seed, me->id + 1);
  inbox *mine = &g_inbox[me->id], *next = &g_inbox[(me->id + 1) % g_threads];
  tu_item own[OWN] = {{0}};
  tu_item batch[BATCH];
  for (uint64_t sent = 0; sent < me->blocks;) {
    size_t n = 0;
    for (; n < BATCH && sent + n < me->blocks; n++) {
      batch[n] = tu_item_make(tu_range(&r, 16, 1040), tu_rand(&r));
      tu_item *o = &own[tu_below(&r, OWN)]; /* a block of its own replaced */
      if (o->p != NULL) tu_item_release("block of its own", o);
      *o = tu_item_make(tu_range(&r, 16, 1040), tu_rand(&r));
    }
    for (size_t k = 0; k < n;) {
      k += try_send(next, batch + k, n - k);
      me->received += drain(mine); /* while the next thread is behind, free ours */
    }
    sent += n;
  }
  while (me->received < me->blocks) me->received += drain(mine);
  for (size_t i = 0; i < OWN; i++)
    if (own[i].p != NULL) tu_item_release("block of its own", &own[i]);
  return NULL;
}

int main(int argc, char **argv) {
  g_seed = tu_seed(argc, argv);
  uint64_t blocks = tu_arg_u64(argc, argv, 2, 500000);
  g_threads = (unsigned)tu_arg_u64(argc, argv, 3, 2);
  REQUIRE(g_threads >= 2 && g_threads <= MAX_THREADS, "threads must be 2..%d", MAX_THREADS);
  for (unsigned i = 0; i < g_threads; i++) pthread_mutex_init(&g_inbox[i].mu, NULL);
  member m[MAX_THREADS];
  pthread_t tid[MAX_THREADS];
  for (unsigned i = 0; i < g_threads; i++) m[i] = (member){i, blocks, 0};
  double t0 = tu_now();
  tu_start_threads(tid, g_threads, run, m, sizeof *m);
  tu_join_threads(tid, g_threads);
  for (unsigned i = 0; i < g_threads; i++)
    CHECK(m[i].received == blocks, "thread %u freed %" PRIu64 " blocks of %" PRIu64, i, m[i].received,
          blocks);
  printf("stress_ring: %u threads, %" PRIu64 " blocks each, %.2f s\n", g_threads, blocks, tu_now() - t0);
  return tu_finish("stress_ring");
}
