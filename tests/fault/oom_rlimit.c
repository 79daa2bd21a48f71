/* Out of memory for real: an address-space limit (RLIMIT_AS) of what the process maps
 * now plus LIMIT_MIB, or (mode "hard") hakmem's own hard limit (limit.hard) of what it
 * has committed now plus LIMIT_MIB, then, tier by tier, four threads allocate until
 * NULL at once.
 * Every NULL must come with errno = ENOMEM (posix_memalign: its return value); then
 * each thread frees every other block and must allocate again, and every live block
 * must still hold its pattern. A realloc growing a block until NULL must leave the
 * block as it was. Under the hard limit, committed memory must never pass it, and
 * every NULL must be one the limit refused.
 *
 * Usage: oom_rlimit [seed] [limit MiB] [rlimit|hard] */
#include <malloc.h>
#include <pthread.h>
#include <sys/mman.h>

#include "test_util.h"

enum { THREADS = 4, MAX_BLOCKS = 1 << 20 };

typedef struct tier {
  const char *name;
  size_t size, align; /* align > 0: an aligned form */
  int kind;           /* 0 malloc, 1 calloc, 2 posix_memalign, 3 aligned_alloc, 4 user heap */
} tier_t;

static const tier_t tiers[] = {
    {"small malloc", 200, 0, 0},
    {"mid malloc", 24 << 10, 0, 0},
    {"large malloc", 1 << 20, 0, 0},
    {"huge malloc", 40u << 20, 0, 0},
    {"calloc", 300 << 10, 0, 1},
    {"posix_memalign", 5000, 4096, 2},
    {"aligned_alloc", 64 << 10, 64 << 10, 3},
    {"user heap", 3000, 0, 4},
};

typedef struct worker {
  pthread_t tid;
  const tier_t *t;
  void **blocks; /* mmap'd before the limit: no malloc of our own in the way */
  size_t count, nulls, again;
} worker_t;

/* A word at the start and one at the end of each block, from its address. */
static void mark(void *p, size_t n) {
  uint64_t *w = p;
  w[0] = tu_mix64((uintptr_t)p);
  memcpy((char *)p + n - 8, &w[0], 8);
}
static void check_mark(const char *what, void *p, size_t n) {
  uint64_t a = *(uint64_t *)p, b;
  memcpy(&b, (char *)p + n - 8, 8);
  CHECK(a == tu_mix64((uintptr_t)p) && b == a, "%s block %p (%zu): data changed", what, p, n);
}

static void *alloc_one(const tier_t *t, hak_heap_t *h, int *err) {
  void *p = NULL;
  errno = 0;
  switch (t->kind) {
  case 1: p = calloc(1, t->size); break;
  case 2:
    *err = posix_memalign(&p, t->align, t->size);
    if (*err) p = NULL;
    return p;
  case 3: p = aligned_alloc(t->align, t->size); break;
  case 4: p = hak_heap_malloc(h, t->size); break;
  default: p = malloc(t->size); break;
  }
  *err = errno;
  return p;
}

static void *fill_until_null(void *arg) {
  worker_t *w = arg;
  const tier_t *t = w->t;
  hak_heap_t *h = t->kind == 4 ? hak_heap_new() : NULL;
  REQUIRE(t->kind != 4 || h != NULL, "hak_heap_new before the memory ran out");
  for (;;) {
    int err = 0;
    void *p = w->count < MAX_BLOCKS ? alloc_one(t, h, &err) : NULL;
    if (p == NULL) {
      CHECK(w->count == MAX_BLOCKS || err == ENOMEM, "%s: NULL with errno %d, not ENOMEM", t->name, err);
      if (++w->nulls >= 3) break; /* three in a row: out of memory, not a passing miss */
      continue;
    }
    w->nulls = 0;
    if (t->align) CHECK(tu_aligned(p, t->align), "%s: %p not aligned", t->name, p);
    if (t->kind == 1) CHECK(tu_is_zero(p, t->size), "%s: %p not zero", t->name, p);
    mark(p, t->size);
    w->blocks[w->count++] = p;
  }
  /* Free every other block; allocation must work again, and nothing else moved. */
  for (size_t i = 0; i < w->count; i += 2) {
    check_mark(t->name, w->blocks[i], t->size);
    free(w->blocks[i]);
    w->blocks[i] = NULL;
  }
  for (size_t i = 0; i < w->count; i += 2) {
    int err = 0;
    void *p = alloc_one(t, h, &err);
    if (p == NULL) break; /* the other threads may have taken the room */
    mark(p, t->size);
    w->blocks[i] = p;
    w->again++;
  }
  for (size_t i = 0; i < w->count; i++) {
    if (w->blocks[i] == NULL) continue;
    check_mark(t->name, w->blocks[i], t->size);
    free(w->blocks[i]);
  }
  if (h) hak_heap_destroy(h);
  return NULL;
}

/* One block grown by realloc until NULL: the block must be intact after the NULL. */
static void realloc_growth(void) {
  size_t n = 4096;
  char *p = malloc(n);
  REQUIRE(p != NULL, "malloc(4096) before the growth");
  memset(p, 0x5a, n);
  for (;;) {
    errno = 0;
    char *q = realloc(p, n * 2);
    if (q == NULL) {
      CHECK(errno == ENOMEM, "realloc(%zu): NULL with errno %d", n * 2, errno);
      CHECK(tu_all_bytes(p, n, 0x5a), "realloc(%zu) failed and the block changed", n * 2);
      break;
    }
    p = q;
    memset(p + n, 0x5a, n);
    n *= 2;
  }
  printf("realloc growth: NULL at %zu MiB, the block intact\n", (n * 2) >> 20);
  free(p);
}

static uint64_t stat_of(const char *name) {
  uint64_t v = 0;
  REQUIRE(hak_stats_get(name, &v) == 0, "hak_stats_get(%s)", name);
  return v;
}

/* Under the hard limit: committed memory stayed under it (a new region's header pages
 * are counted after its first span is admitted), and it refused something. */
static uint64_t hard_limit, refused_before;
static void check_hard_limit(const char *what) {
  if (hard_limit == 0) return;
  uint64_t committed = stat_of("limit.committed"), refused = stat_of("limit.refused");
  CHECK(committed <= hard_limit + (64 << 10), "%s: %" PRIu64 " bytes committed past the hard limit %" PRIu64,
        what, committed, hard_limit);
  CHECK(refused > refused_before, "%s: the NULLs were not the hard limit's", what);
  refused_before = refused;
}

int main(int argc, char **argv) {
  tu_seed(argc, argv);
  size_t limit_mib = tu_arg_u64(argc, argv, 2, 512);
  bool hard = argc > 3 && strcmp(argv[3], "hard") == 0;
  static worker_t ws[THREADS];
  for (int i = 0; i < THREADS; i++) {
    ws[i].blocks = mmap(NULL, MAX_BLOCKS * sizeof(void *), PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    REQUIRE(ws[i].blocks != MAP_FAILED, "mmap for the block tables");
  }
  free(malloc(1)); /* hakmem set up (its reservations) before the limit */
  if (hard) {
    hard_limit = stat_of("limit.committed") + ((uint64_t)limit_mib << 20);
    REQUIRE(hak_ctl_set("limit.hard", &hard_limit, 8) == 0, "limit.hard = %" PRIu64, hard_limit);
    refused_before = stat_of("limit.refused");
  } else {
    REQUIRE(tu_limit_address_space(limit_mib << 20), "setrlimit");
  }
  for (size_t k = 0; k < sizeof tiers / sizeof tiers[0]; k++) {
    size_t total = 0, again = 0;
    for (int i = 0; i < THREADS; i++) {
      ws[i].t = &tiers[k];
      ws[i].count = ws[i].nulls = ws[i].again = 0;
      REQUIRE(pthread_create(&ws[i].tid, NULL, fill_until_null, &ws[i]) == 0, "pthread_create (%s)",
              tiers[k].name);
    }
    for (int i = 0; i < THREADS; i++) {
      pthread_join(ws[i].tid, NULL);
      total += ws[i].count;
      again += ws[i].again;
    }
    CHECK(again > 0, "%s: nothing could be allocated after freeing half", tiers[k].name);
    check_hard_limit(tiers[k].name);
    printf("%-15s %zu blocks until NULL (%zu MiB), %zu again after freeing half\n", tiers[k].name, total,
           total * tiers[k].size >> 20, again);
  }
  realloc_growth();
  check_hard_limit("realloc growth");
  void *p = malloc(100); /* and normal service afterwards */
  CHECK(p != NULL, "malloc(100) after it all");
  free(p);
  return tu_finish("oom_rlimit");
}
