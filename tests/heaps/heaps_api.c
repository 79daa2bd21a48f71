/* heaps_api: every hak_heap_ function and its edge cases, on one thread and across
 * threads: allocation with malloc's size classes, alignment and errno rules, the
 * default heap, statistics and the walk over live blocks, destroy (small, large and
 * huge blocks; memory back to the process), release, blocks other threads free before
 * a destroy, thread exit with heaps alive, many heaps at once.
 * Usage: heaps_api [seed]
 */
#include <malloc.h>
#include <pthread.h>

#include "test_util.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

static uint64_t g_seed;

/* Sizes across the tiers: tiny, mid, large, huge. */
static const size_t sizes[] = {
    0,    1,    8,    15,   16,       17,        100,       512,           1000,      1024,
    1025, 2000, 4096, 5000, 16 * KiB, 100 * KiB, 128 * KiB, 128 * KiB + 1, 300 * KiB, 2 * MiB};

/* Keeps a block the test does not look at again (it goes with its heap). */
static void keep(void *p) {
  REQUIRE(p != NULL, "allocation failed");
  ((char *)p)[0] = 1;
}

static size_t live_in(hak_heap_t *h, size_t *bytes) {
  hak_heap_stats_t st;
  hak_heap_stats(h, &st);
  if (bytes) *bytes = st.in_use;
  return st.blocks;
}

/* ---- visiting ---------------------------------------------------------------------- */
typedef struct seen {
  void **want;
  size_t n, found, stray;
} seen_t;

static int visit_mark(void *block, size_t size, void *arg) {
  seen_t *s = arg;
  for (size_t i = 0; i < s->n; i++) {
    if (s->want[i] == block) {
      s->found++;
      CHECK(size >= 1, "visited block %p with size %zu", block, size);
      return 0;
    }
  }
  s->stray++;
  return 0;
}

static int visit_stop(void *block, size_t size, void *arg) {
  (void)block;
  (void)size;
  return ++*(int *)arg == 3 ? 42 : 0;
}

static void test_basic(void) {
  hak_heap_t *h = hak_heap_new();
  REQUIRE(h != NULL, "hak_heap_new failed");
  size_t n = sizeof sizes / sizeof sizes[0];
  void *p[sizeof sizes / sizeof sizes[0]];
  for (size_t i = 0; i < n; i++) {
    p[i] = hak_heap_malloc(h, sizes[i]);
    REQUIRE(p[i] != NULL, "hak_heap_malloc(%zu) failed", sizes[i]);
    CHECK(tu_aligned(p[i], 16), "hak_heap_malloc(%zu) = %p not 16-aligned", sizes[i], p[i]);
    CHECK(malloc_usable_size(p[i]) >= sizes[i], "usable %zu < %zu", malloc_usable_size(p[i]), sizes[i]);
    tu_fill_here(p[i], sizes[i], g_seed + i);
  }
  /* The hardened library's malloc(0) blocks are in no heap (inaccessible addresses). */
  size_t in_heap = n - (malloc_usable_size(p[0]) == 0);
  CHECK(live_in(h, NULL) == in_heap, "stats count %zu blocks, want %zu", live_in(h, NULL), in_heap);
  seen_t s = {p, n, 0, 0};
  CHECK(hak_heap_visit(h, visit_mark, &s) == 0, "visit stopped early");
  CHECK(s.found == in_heap && s.stray == 0, "visit found %zu of %zu, %zu strays", s.found, in_heap, s.stray);
  int calls = 0;
  CHECK(hak_heap_visit(h, visit_stop, &calls) == 42 && calls == 3, "visit did not stop at 3 (%d)", calls);
  for (size_t i = 0; i < n; i++) tu_verify_here("heap block", p[i], sizes[i], g_seed + i);
  /* Freed by plain free: the stats and the walk see them go. */
  for (size_t i = 0; i < n; i += 2) free(p[i]);
  size_t left = n - (n + 1) / 2; /* p[0], of size 0, went */
  CHECK(live_in(h, NULL) == left, "after frees: %zu live, want %zu", live_in(h, NULL), left);
  void *odd[sizeof sizes / sizeof sizes[0]];
  size_t k = 0;
  for (size_t i = 1; i < n; i += 2) odd[k++] = p[i];
  seen_t s2 = {odd, k, 0, 0};
  hak_heap_visit(h, visit_mark, &s2);
  CHECK(s2.found == k && s2.stray == 0, "visit after frees: %zu of %zu, %zu strays", s2.found, k, s2.stray);
  hak_heap_destroy(h);
}

static void test_errno_and_forms(void) {
  hak_heap_t *h = hak_heap_new();
  errno = 0;
  CHECK(hak_heap_malloc(h, tu_opaque(SIZE_MAX)) == NULL && errno == ENOMEM, "malloc(SIZE_MAX): errno %d",
        errno);
  errno = 0;
  CHECK(hak_heap_malloc(h, tu_opaque(PTRDIFF_MAX)) == NULL && errno == ENOMEM, "malloc(PTRDIFF_MAX)");
  errno = 0;
  CHECK(hak_heap_calloc(h, tu_opaque(SIZE_MAX / 2), 3) == NULL && errno == ENOMEM, "calloc overflow");
  errno = 0;
  CHECK(hak_heap_aligned_alloc(h, 24, 64) == NULL && errno == EINVAL, "aligned_alloc(24): errno %d", errno);
  void *q = (void *)1;
  CHECK(hak_heap_posix_memalign(h, &q, 4, 64) == EINVAL && q == (void *)1, "posix_memalign(4)");
  errno = 0;
  CHECK(hak_heap_posix_memalign(h, &q, 64, tu_opaque(SIZE_MAX)) == ENOMEM && errno == 0,
        "posix_memalign(SIZE_MAX) must return ENOMEM and leave errno");
  /* Aligned blocks of every power of two to 64 KiB, some sizes each. */
  for (size_t a = 16; a <= 64 * KiB; a *= 2) {
    for (size_t n = 1; n <= 3 * a; n = n * 3 + 7) {
      void *x = hak_heap_aligned_alloc(h, a, n);
      REQUIRE(x != NULL, "aligned_alloc(%zu, %zu)", a, n);
      CHECK(tu_aligned(x, a), "aligned_alloc(%zu, %zu) = %p", a, n, x);
      void *y = NULL;
      CHECK(hak_heap_posix_memalign(h, &y, a, n) == 0 && tu_aligned(y, a), "posix_memalign(%zu, %zu)", a, n);
      memset(x, 0x5a, n);
      memset(y, 0xa5, n);
      if ((n & 1) == 0) free(x);
    }
  }
  /* calloc clears a reused block. */
  for (size_t n = 16; n <= 256 * KiB; n *= 4) {
    char *c = hak_heap_malloc(h, n);
    memset(c, 0xff, n);
    free(c);
    c = hak_heap_calloc(h, 1, n);
    REQUIRE(c != NULL, "calloc(%zu)", n);
    CHECK(tu_is_zero(c, n), "calloc(%zu) not zero", n);
  }
  /* realloc: NULL allocates from the heap; growth keeps the data; 0 frees. */
  size_t before = live_in(h, NULL);
  char *r = hak_heap_realloc(h, NULL, 40);
  REQUIRE(r != NULL, "realloc(NULL, 40)");
  CHECK(live_in(h, NULL) == before + 1, "realloc(NULL) did not allocate from the heap");
  tu_fill(r, 40, 1, g_seed);
  for (size_t n = 64; n <= 4 * MiB; n *= 3) {
    r = hak_heap_realloc(h, r, n);
    REQUIRE(r != NULL, "realloc to %zu", n);
    tu_verify("realloc kept prefix", r, 40, 1, g_seed);
  }
  CHECK(live_in(h, NULL) == before + 1, "the grown block left the heap: %zu live, want %zu", live_in(h, NULL),
        before + 1);
  CHECK(hak_heap_realloc(h, r, 0) == NULL, "realloc(p, 0) returns NULL");
  CHECK(live_in(h, NULL) == before, "realloc(p, 0) did not free");
  /* A default-heap block moved by hak_heap_realloc lands in the heap. */
  char *m = malloc(100);
  memset(m, 7, 100);
  m = hak_heap_realloc(h, m, 5000);
  CHECK(live_in(h, NULL) == before + 1 && tu_all_bytes(m, 100, 7), "moved block not in the heap");
  hak_heap_destroy(h);
}

static void test_default(void) {
  hak_heap_t *own = hak_heap_get_default();
  REQUIRE(own != NULL, "get_default");
  hak_heap_t *h = hak_heap_new();
  CHECK(hak_heap_set_default(h) == own, "set_default returns the previous default");
  CHECK(hak_heap_get_default() == h, "get_default after set");
  void *a = malloc(24), *b = calloc(3, 100), *c = NULL, *d = aligned_alloc(256, 256);
  CHECK(posix_memalign(&c, 64, 3000) == 0, "posix_memalign");
  void *e = realloc(NULL, 70000);
  void *big = malloc(3 * MiB);
  CHECK(live_in(h, NULL) == 6, "plain allocation went to the default heap: %zu", live_in(h, NULL));
  free(a);
  CHECK(live_in(h, NULL) == 5, "plain free of a default-heap block");
  /* Back to the thread's own heap; the heap's blocks stay where they are. */
  CHECK(hak_heap_set_default(NULL) == h, "set_default(NULL) returns the user heap");
  void *f = malloc(24);
  CHECK(live_in(h, NULL) == 5, "malloc after set_default(NULL) went to the user heap");
  free(f);
  hak_heap_set_default(h);
  hak_heap_destroy(h); /* the default: the thread's own comes back */
  CHECK(hak_heap_get_default() == own, "destroying the default restores the thread's own");
  void *g = malloc(24);
  REQUIRE(g != NULL, "malloc after destroying the default");
  free(g);
  (void)b, (void)c, (void)d, (void)e, (void)big;
}

static void test_release(void) {
  hak_heap_t *own = hak_heap_get_default();
  size_t own_before = live_in(own, NULL);
  hak_heap_t *h = hak_heap_new();
  enum { N = 3000 };
  static void *p[N];
  static size_t len[N];
  tu_rng r = tu_rng_make(g_seed, 7);
  for (int i = 0; i < N; i++) {
    size_t n = i % 100 == 0 ? tu_range(&r, 200 * KiB, 1 * MiB) : tu_range(&r, 1, 3000);
    p[i] = hak_heap_malloc(h, n);
    len[i] = n < 64 ? n : 64;
    tu_fill(p[i], len[i], (uintptr_t)i, g_seed);
  }
  hak_heap_release(h);
  CHECK(live_in(own, NULL) >= own_before + N - N / 100, "released blocks counted in the own heap: %zu",
        live_in(own, NULL));
  for (int i = 0; i < N; i++) {
    tu_verify("released block", p[i], len[i], (uintptr_t)i, g_seed);
    free(p[i]);
  }
}

/* Destroying returns the memory: the process's bytes in use fall back. */
static void test_destroy_returns(void) {
  hak_info_t before, during, after;
  hak_get_info(&before);
  hak_heap_t *h = hak_heap_new();
  for (int i = 0; i < 200000; i++) ((char *)hak_heap_malloc(h, 64))[0] = 1;
  for (int i = 0; i < 20; i++) memset(hak_heap_malloc(h, 1 * MiB), 1, 4096);
  memset(hak_heap_malloc(h, 40 * MiB), 1, 4096);
  hak_heap_stats_t st;
  hak_heap_stats(h, &st);
  CHECK(st.blocks == 200021, "blocks %zu", st.blocks);
  CHECK(st.in_use >= 200000 * 64 + 60 * MiB, "in_use %zu", st.in_use);
  CHECK(st.reserved >= st.in_use && st.peak >= st.reserved, "reserved %zu peak %zu", st.reserved, st.peak);
  hak_get_info(&during);
  CHECK(during.in_use >= before.in_use + 70 * MiB, "process in_use %zu -> %zu", before.in_use, during.in_use);
  hak_heap_destroy(h);
  hak_get_info(&after);
  CHECK(after.in_use < before.in_use + 2 * MiB, "in_use after destroy %zu (before %zu)", after.in_use,
        before.in_use);
}

/* The next heap after a destroy gets its slabs, those that wrote the most pages first:
 * one slab's worth of 4 KiB blocks (64) comes from the slab the first heap filled, not
 * from the one it had only begun, which would write pages of its own. Run first, with
 * no destroyed heap's slabs kept yet. (The hardened library keeps none: a destroyed
 * heap's slabs wait out of use, so that late frees into them are caught.) */
static void test_spare_written_first(void) {
  enum { FIRST = 100, SLAB = 64 };
  int64_t hardened = 0;
  size_t len = sizeof hardened;
  REQUIRE(hak_ctl_get("build.secure", &hardened, &len) == 0, "hak_ctl_get(build.secure)");
  if (hardened) return;
  void *first[FIRST];
  hak_heap_t *h = hak_heap_new();
  REQUIRE(h != NULL, "hak_heap_new");
  for (int i = 0; i < FIRST; i++) keep(first[i] = hak_heap_malloc(h, 4096));
  hak_heap_destroy(h);
  h = hak_heap_new();
  REQUIRE(h != NULL, "hak_heap_new");
  int reused = 0;
  for (int i = 0; i < SLAB; i++) {
    void *p = hak_heap_malloc(h, 4096);
    keep(p);
    for (int j = 0; j < SLAB; j++) reused += p == first[j];
  }
  CHECK(reused == SLAB, "%d of %d blocks from the first heap's full slab", reused, (int)SLAB);
  hak_heap_destroy(h);
}

/* ---- threads ------------------------------------------------------------------------ */
typedef struct handoff {
  void **blocks;
  size_t n;
  hak_heap_t *heap;
} handoff_t;

static void *free_them(void *arg) {
  handoff_t *ho = arg;
  for (size_t i = 0; i < ho->n; i++) {
    tu_verify("block freed by another thread", ho->blocks[i], 32, (uintptr_t)i, g_seed);
    free(ho->blocks[i]);
  }
  /* The frees may still sit in this thread's remote chains when the owner destroys. */
  void *mine = malloc(100);
  free(mine);
  return NULL;
}

static void test_cross_thread_then_destroy(void) {
  for (int round = 0; round < 20; round++) {
    hak_heap_t *h = hak_heap_new();
    handoff_t ho = {malloc(2000 * sizeof(void *)), 2000, h};
    for (size_t i = 0; i < ho.n; i++) {
      ho.blocks[i] = hak_heap_malloc(h, 32 + (i % 7) * 48);
      tu_fill(ho.blocks[i], 32, (uintptr_t)i, g_seed);
    }
    for (int i = 0; i < 500; i++) keep(hak_heap_malloc(h, 100));
    pthread_t t;
    pthread_create(&t, NULL, free_them, &ho);
    pthread_join(t, NULL);
    CHECK(live_in(h, NULL) >= 500, "live %zu", live_in(h, NULL));
    hak_heap_destroy(h);
    free(ho.blocks);
  }
  hak_heap_t *again = hak_heap_new(); /* finishes what waited */
  hak_heap_destroy(again);
}

static void *exit_with_heap(void *arg) {
  void **out = arg;
  hak_heap_t *h = hak_heap_new();
  hak_heap_set_default(h);
  for (int i = 0; i < 1000; i++) {
    out[i] = i % 2 ? hak_heap_malloc(h, 48) : malloc(300000 * (i % 10 == 0) + 48);
    tu_fill(out[i], 48, (uintptr_t)i, g_seed);
  }
  out[1000] = h;
  return NULL; /* exits with h alive and the default */
}

static void test_thread_exit(void) {
  void *blocks[1001];
  pthread_t t;
  pthread_create(&t, NULL, exit_with_heap, blocks);
  pthread_join(t, NULL);
  for (int i = 0; i < 1000; i++) {
    tu_verify("block of a heap whose thread exited", blocks[i], 48, (uintptr_t)i, g_seed);
    free(blocks[i]);
  }
}

/* Many heaps alive at once, interleaved; each counts only its own. */
static void test_many(void) {
  enum { HEAPS = 200 };
  static hak_heap_t *hs[HEAPS];
  for (int i = 0; i < HEAPS; i++) hs[i] = hak_heap_new();
  for (int k = 0; k < 50; k++)
    for (int i = 0; i < HEAPS; i++) keep(hak_heap_malloc(hs[i], 16 + (size_t)(i % 64) * 16));
  for (int i = 0; i < HEAPS; i++) CHECK(live_in(hs[i], NULL) == 50, "heap %d: %zu", i, live_in(hs[i], NULL));
  for (int i = 0; i < HEAPS; i++) {
    if (i % 2) hak_heap_destroy(hs[i]);
    else hak_heap_release(hs[i]);
  }
  for (int i = 0; i < 5000; i++) {
    hak_heap_t *h = hak_heap_new();
    keep(hak_heap_malloc(h, (size_t)i % 2000 + 1));
    hak_heap_destroy(h);
  }
}

int main(int argc, char **argv) {
  g_seed = tu_seed(argc, argv);
  test_spare_written_first();
  test_basic();
  test_errno_and_forms();
  test_default();
  test_release();
  test_destroy_returns();
  test_cross_thread_then_destroy();
  test_thread_exit();
  test_many();
  return tu_finish("heaps_api");
}
