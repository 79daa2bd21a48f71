/* heaps_fork: fork with user heaps alive in several threads, some the default heap.
 *
 * The child keeps the forking thread's heaps: it allocates from them, frees their
 * blocks, destroys and releases them, and makes new ones (also in threads it starts).
 * Blocks of the other threads' heaps (threads that do not exist in the child) stay
 * valid and are freed safely. The parent goes on with every heap afterwards. Forks are
 * made from the main thread and from a thread that has a heap as its default.
 * Usage: heaps_fork [seed] [forks]
 */
#include <sched.h>
#include <stdatomic.h>

#include "stress_util.h"

enum { BLOCKS = 400 };

static uint64_t g_seed;

typedef struct shared {
  hak_heap_t *heap;     /* the worker's heap */
  void *blocks[BLOCKS]; /* its blocks, published for the other threads and the child */
  _Atomic int ready, stop;
} shared_t;

static void fill(void *p, size_t n, uint64_t k) { tu_fill(p, n, k, g_seed); }
static void check(const char *what, void *p, size_t n, uint64_t k) {
  if (!tu_verify(what, p, n, k, g_seed)) abort();
}

/* A worker: its own heap, its blocks published, then it keeps allocating and freeing
 * in that heap until told to stop (a fork may come at any time). */
static void *worker(void *arg) {
  shared_t *sh = arg;
  sh->heap = hak_heap_new();
  for (int i = 0; i < BLOCKS; i++) {
    sh->blocks[i] = hak_heap_malloc(sh->heap, 64);
    fill(sh->blocks[i], 64, (uint64_t)i);
  }
  atomic_store(&sh->ready, 1);
  tu_rng r = tu_rng_make(g_seed, 99);
  void *local[32] = {0};
  while (!atomic_load(&sh->stop)) {
    size_t k = tu_below(&r, 32);
    free(local[k]);
    local[k] = hak_heap_malloc(sh->heap, tu_range(&r, 1, 5000));
  }
  for (int k = 0; k < 32; k++) free(local[k]);
  return NULL;
}

static void *child_thread(void *arg) {
  (void)arg;
  for (int round = 0; round < 20; round++) {
    hak_heap_t *h = hak_heap_new();
    for (int i = 0; i < 300; i++) ((char *)hak_heap_malloc(h, (size_t)i * 13 + 1))[0] = 1;
    if (round % 2) hak_heap_destroy(h);
    else hak_heap_release(h);
  }
  return NULL;
}

typedef struct forker_state {
  hak_heap_t *mine;
  void *mine_blocks[BLOCKS];
  shared_t *other;
} forker_state_t;

static int in_child(void *arg) {
  forker_state_t *st = arg;
  /* The forking thread's heap: still its own. */
  for (int i = 0; i < BLOCKS; i += 2) {
    check("forker's heap block in the child", st->mine_blocks[i], 48, (uint64_t)i + 7);
    free(st->mine_blocks[i]);
  }
  for (int i = 0; i < 1000; i++) ((char *)hak_heap_malloc(st->mine, 100))[0] = 2;
  hak_heap_stats_t hs;
  hak_heap_stats(st->mine, &hs);
  /* (stdio may have put a buffer there: the heap was the default at the fork) */
  CHECK(hs.blocks >= BLOCKS / 2 + 1000 && hs.blocks <= BLOCKS / 2 + 1004,
        "child: forker's heap has %zu blocks", hs.blocks);
  /* Another thread's heap: its blocks are freed safely (remote pushes, never reused). */
  for (int i = 0; i < BLOCKS; i++) {
    check("other thread's heap block in the child", st->other->blocks[i], 64, (uint64_t)i);
    free(st->other->blocks[i]);
  }
  hak_heap_destroy(st->mine);
  pthread_t t[2];
  for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, child_thread, NULL);
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  hak_heap_t *h = hak_heap_new();
  hak_heap_set_default(h);
  for (int i = 0; i < 1000; i++) ((char *)malloc(200))[0] = 3;
  hak_heap_destroy(h);
  return 0;
}

static void fork_once(shared_t *other) {
  forker_state_t st = {hak_heap_new(), {0}, other};
  for (int i = 0; i < BLOCKS; i++) {
    st.mine_blocks[i] = hak_heap_malloc(st.mine, 48);
    fill(st.mine_blocks[i], 48, (uint64_t)i + 7);
  }
  hak_heap_t *old = hak_heap_set_default(st.mine);
  CHECK(tu_in_child("child of a thread with heaps", in_child, &st, 60), "child failed");
  hak_heap_set_default(old);
  /* The parent's heap is untouched by the child's work. */
  for (int i = 0; i < BLOCKS; i++)
    check("forker's heap block in the parent", st.mine_blocks[i], 48, (uint64_t)i + 7);
  hak_heap_destroy(st.mine);
}

static void *fork_thread(void *arg) {
  fork_once(arg);
  return NULL;
}

int main(int argc, char **argv) {
  g_seed = tu_seed(argc, argv);
  uint64_t forks = tu_arg_u64(argc, argv, 2, 12);
  static shared_t sh;
  pthread_t w;
  pthread_create(&w, NULL, worker, &sh);
  while (!atomic_load(&sh.ready)) sched_yield();
  for (uint64_t f = 0; f < forks; f++) {
    if (f % 2 == 0) {
      fork_once(&sh);
    } else {
      pthread_t t;
      pthread_create(&t, NULL, fork_thread, &sh);
      pthread_join(t, NULL);
    }
  }
  atomic_store(&sh.stop, 1);
  pthread_join(w, NULL);
  /* The worker exited with its heap alive: released, its blocks still valid. */
  for (int i = 0; i < BLOCKS; i++) {
    check("block of an exited thread's heap", sh.blocks[i], 64, (uint64_t)i);
    free(sh.blocks[i]);
  }
  return tu_finish("heaps_fork");
}
