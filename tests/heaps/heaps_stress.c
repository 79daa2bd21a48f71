/* heaps_stress: owner threads fill heaps and hand half of each heap's blocks to freer
 * threads, which check and free them; then the owner destroys the heap (once every
 * handed-over block was freed: the frees may still wait in the freers' remote chains),
 * or releases it with blocks still in flight, or fills it through hak_heap_set_default
 * and plain malloc. The freers make and destroy heaps of their own meanwhile, and a
 * monitor thread reads the owners' heaps' statistics while they live. Every block is
 * pattern-checked before it is freed; the ThreadSanitizer build runs it too.
 * Usage: heaps_stress [seed] [rounds] [owners] [freers] [blocks]
 */
#include <sched.h>
#include <stdatomic.h>

#include "stress_util.h"

typedef struct msg {
  void *p;
  size_t n;
  uint64_t seed;
  _Atomic long *pending; /* the owner's count of handed-over blocks not yet freed */
} msg_t;

/* A bounded queue of messages. */
enum { QCAP = 4096 };
static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  msg_t ring[QCAP];
  size_t head, count;
  bool closed;
} q = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void q_push(msg_t m) {
  pthread_mutex_lock(&q.mu);
  while (q.count == QCAP) pthread_cond_wait(&q.cv, &q.mu);
  q.ring[(q.head + q.count++) % QCAP] = m;
  pthread_cond_broadcast(&q.cv);
  pthread_mutex_unlock(&q.mu);
}

static bool q_pop(msg_t *m) {
  pthread_mutex_lock(&q.mu);
  while (q.count == 0 && !q.closed) pthread_cond_wait(&q.cv, &q.mu);
  bool got = q.count > 0;
  if (got) {
    *m = q.ring[q.head];
    q.head = (q.head + 1) % QCAP;
    q.count--;
    pthread_cond_broadcast(&q.cv);
  }
  pthread_mutex_unlock(&q.mu);
  return got;
}

static uint64_t g_seed, g_rounds, g_blocks;

/* The heap each owner fills now, for the monitor; NULL before it goes. */
static struct {
  pthread_mutex_t mu;
  hak_heap_t *heap;
} g_live[16];
static _Atomic int g_owners_done;
static _Atomic uint64_t g_stats_read;

static void publish(uint64_t id, hak_heap_t *h) {
  pthread_mutex_lock(&g_live[id].mu);
  g_live[id].heap = h;
  pthread_mutex_unlock(&g_live[id].mu);
}

static void *monitor(void *arg) {
  unsigned owners = (unsigned)(uintptr_t)arg;
  while (atomic_load(&g_owners_done) < (int)owners) {
    for (unsigned i = 0; i < owners; i++) {
      pthread_mutex_lock(&g_live[i].mu);
      if (g_live[i].heap != NULL) {
        hak_heap_stats_t st;
        hak_heap_stats(g_live[i].heap, &st);
        CHECK(st.in_use <= st.reserved && st.reserved <= st.peak && st.blocks <= g_blocks,
              "heap stats: in_use %zu reserved %zu peak %zu blocks %zu", st.in_use, st.reserved, st.peak,
              st.blocks);
        atomic_fetch_add(&g_stats_read, 1);
      }
      pthread_mutex_unlock(&g_live[i].mu);
    }
    sched_yield();
  }
  return NULL;
}
static _Atomic uint64_t g_destroyed, g_released, g_freed_remote;

static size_t pick_size(tu_rng *r) {
  uint64_t x = tu_below(r, 1000);
  if (x < 2) return tu_range(r, 128 * TU_KiB, 2 * TU_MiB); /* a few large */
  if (x < 80) return tu_range(r, 1025, 16 * TU_KiB);
  return tu_range(r, 1, 1024);
}

static void *owner(void *arg) {
  uint64_t id = (uint64_t)(uintptr_t)arg;
  tu_rng r = tu_rng_make(g_seed, id);
  msg_t *kept = malloc(g_blocks * sizeof *kept);
  REQUIRE(kept != NULL, "kept");
  _Atomic long pending = 0;
  for (uint64_t round = 0; round < g_rounds; round++) {
    int mode = (int)(round % 4); /* 0, 3: destroy; 1: release; 2: destroy, via the default */
    hak_heap_t *h = hak_heap_new();
    REQUIRE(h != NULL, "hak_heap_new");
    publish(id, h);
    hak_heap_t *old = mode == 2 ? hak_heap_set_default(h) : NULL;
    size_t nkept = 0;
    for (uint64_t i = 0; i < g_blocks; i++) {
      size_t n = pick_size(&r);
      void *p = mode == 2 ? malloc(n) : hak_heap_malloc(h, n);
      REQUIRE(p != NULL, "allocation of %zu", n);
      if (i % 16 == 3) { /* grow some in place or by moving, within the heap */
        size_t m = n + tu_range(&r, 1, 3000);
        p = hak_heap_realloc(h, p, m);
        REQUIRE(p != NULL, "realloc to %zu", m);
        n = m;
      }
      msg_t m = {p, n, tu_rand(&r), &pending};
      tu_fill(p, n < 256 ? n : 256, (uintptr_t)p, m.seed);
      if (i % 2 == 0) {
        atomic_fetch_add(&pending, 1);
        q_push(m);
      } else if (i % 8 == 1) {
        tu_verify("block freed by its owner", p, n < 256 ? n : 256, (uintptr_t)p, m.seed);
        free(p);
      } else {
        kept[nkept++] = m;
      }
    }
    if (mode == 2) hak_heap_set_default(old);
    for (size_t i = 0; i < nkept; i++)
      if (!tu_verify("block kept by its owner", kept[i].p, kept[i].n < 256 ? kept[i].n : 256,
                     (uintptr_t)kept[i].p, kept[i].seed))
        abort();
    publish(id, NULL);
    if (mode == 1) { /* release: the blocks in flight and those kept stay valid */
      hak_heap_release(h);
      for (size_t i = 0; i < nkept; i++) free(kept[i].p);
      atomic_fetch_add(&g_released, 1);
      continue;
    }
    /* Destroy once every handed-over block has been freed (their frees may still wait
     * in the freers' remote chains: the heap's memory must not be reused under them). */
    while (atomic_load(&pending) != 0) sched_yield();
    hak_heap_destroy(h);
    atomic_fetch_add(&g_destroyed, 1);
  }
  while (atomic_load(&pending) != 0) sched_yield();
  free(kept);
  atomic_fetch_add(&g_owners_done, 1);
  return NULL;
}

static void *freer(void *arg) {
  tu_rng r = tu_rng_make(g_seed, 1000 + (uint64_t)(uintptr_t)arg);
  msg_t m;
  uint64_t k = 0;
  hak_heap_t *mine = hak_heap_new();
  while (q_pop(&m)) {
    if (!tu_verify("block freed by another thread", m.p, m.n < 256 ? m.n : 256, (uintptr_t)m.p, m.seed))
      abort();
    free(m.p);
    atomic_fetch_sub(m.pending, 1);
    atomic_fetch_add(&g_freed_remote, 1);
    /* A heap of the freer's own, made and destroyed now and then. */
    char *x = hak_heap_malloc(mine, pick_size(&r));
    x[0] = 1;
    if (++k % 500 == 0) {
      hak_heap_destroy(mine);
      mine = hak_heap_new();
    }
  }
  hak_heap_destroy(mine);
  return NULL;
}

int main(int argc, char **argv) {
  g_seed = tu_seed(argc, argv);
  g_rounds = tu_arg_u64(argc, argv, 2, 200);
  unsigned owners = (unsigned)tu_arg_u64(argc, argv, 3, 3);
  unsigned freers = (unsigned)tu_arg_u64(argc, argv, 4, 3);
  g_blocks = tu_arg_u64(argc, argv, 5, 2000);
  REQUIRE(owners >= 1 && owners <= 16 && freers >= 1 && freers <= 16, "1..16 owners and freers");
  pthread_t ot[16], ft[16], mt;
  double t0 = tu_now();
  for (unsigned i = 0; i < owners; i++) pthread_mutex_init(&g_live[i].mu, NULL);
  for (unsigned i = 0; i < freers; i++) pthread_create(&ft[i], NULL, freer, (void *)(uintptr_t)i);
  for (unsigned i = 0; i < owners; i++) pthread_create(&ot[i], NULL, owner, (void *)(uintptr_t)i);
  pthread_create(&mt, NULL, monitor, (void *)(uintptr_t)owners);
  for (unsigned i = 0; i < owners; i++) pthread_join(ot[i], NULL);
  pthread_join(mt, NULL);
  pthread_mutex_lock(&q.mu);
  q.closed = true;
  pthread_cond_broadcast(&q.cv);
  pthread_mutex_unlock(&q.mu);
  for (unsigned i = 0; i < freers; i++) pthread_join(ft[i], NULL);
  CHECK(g_destroyed + g_released == owners * g_rounds, "%llu destroyed + %llu released",
        (unsigned long long)g_destroyed, (unsigned long long)g_released);
  printf(
      "heaps_stress: %u owners x %llu heaps (%llu destroyed, %llu released), %llu blocks freed by "
      "other threads, %llu statistics read, %.2f s\n",
      owners, (unsigned long long)g_rounds, (unsigned long long)g_destroyed, (unsigned long long)g_released,
      (unsigned long long)g_freed_remote, (unsigned long long)g_stats_read, tu_now() - t0);
  /* What waited for the freers' chains is finished by the next heap made. */
  hak_heap_destroy(hak_heap_new());
  hak_info_t info;
  hak_get_info(&info);
  CHECK(info.in_use < 64 * TU_MiB, "in use after every heap went: %zu", info.in_use);
  return tu_finish("heaps_stress");
}
