/* The lock-order checker of Debug builds (HAKMEM_LOCK_ORDER, base.h's lock hooks), in
 * the manner of jemalloc's witness. Every lock the library takes has a rank (the table
 * below; docs/design.md, "Lock order"), found from its name as written at the call site
 * ("&region_lock", "&h->lock") at the site's first call. A thread may wait for a lock
 * only while every lock it holds ranks lower, so no two threads can wait on each other:
 * a lock taken out of order aborts with one line naming both locks, their ranks and
 * where each was taken, whether or not this run would have deadlocked.
 *   - trylock never waits: it may take a lock in any order, which then counts as held;
 *   - a cond wait releases its lock and takes it back: the retaking is checked;
 *   - heap locks share a rank: two are held at once only in address order;
 *   - no lock is recursive: taking one the thread holds is a self-deadlock, reported;
 *   - a lock made anew (pthread_mutex_init: fork children) is held by no one.
 * The locks held are a thread-local stack of fixed size: nothing here allocates. Calls
 * nothing of hakmem's but error.c's writer. */
#include "base/base.h"

#if HAKMEM_LOCK_ORDER
#include <stdlib.h>
#include <string.h>

/* The ranks, in the order locks are taken; a lock's comment says what it covers. */
enum {
  RANK_PROF = 1, /* prof_lock (heap/prof_table.c): the profiler's tables and pool */
  RANK_HEAPS,    /* heaps_lock (heap/heap_lifecycle.c): the heap list, parked heaps */
  RANK_HEAP,     /* a heap's lock (block.h, hak_heap_t): its queues and caches */
  RANK_REGION,   /* region_lock (space/region.c): regions, the slab map, abandoned slabs */
  RANK_VG,       /* vg_lock (api/checkers.c): memcheck's table of hak_ blocks */
  RANK_UCACHE,   /* ucache_lock (profile/prof_unwind.c): the unwinder's spare caches */
};

static const struct lock_rank {
  const char *name; /* the identifier the call site ends with */
  bool member;      /* a struct's field ("->lock"), not a variable */
  bool by_address;  /* locks of this rank may nest, lower address first */
  int rank;
} lock_ranks[] = {
    {"prof_lock", false, false, RANK_PROF}, {"heaps_lock", false, false, RANK_HEAPS},
    {"lock", true, true, RANK_HEAP},        {"region_lock", false, false, RANK_REGION},
    {"vg_lock", false, false, RANK_VG},     {"ucache_lock", false, false, RANK_UCACHE},
};
#define NUM_RANKS (sizeof lock_ranks / sizeof lock_ranks[0])

#define HELD_MAX 16
typedef struct {
  pthread_mutex_t *m;
  lock_site_t *site; /* where it was taken */
} held_t;
static __thread held_t held[HELD_MAX];
static __thread int held_n;

/* The lock's expression in a site's text: what follows "file:line ". */
static const char *site_expr(const char *text) {
  for (const char *p = text; *p; p++) {
    if (*p != ':' || p[1] < '0' || p[1] > '9') continue;
    const char *q = p + 1;
    while (*q >= '0' && *q <= '9') q++;
    if (*q == ' ') return q + 1;
  }
  return text;
}

/* ---- the report: one line, built in a buffer, then abort ---------------------------- */
typedef struct {
  char buf[512];
  size_t at;
} line_t;

static void add(line_t *l, const char *s, size_t n) {
  for (size_t i = 0; i < n && l->at < sizeof l->buf - 1; i++) l->buf[l->at++] = s[i];
}
static void add_str(line_t *l, const char *s) { add(l, s, strlen(s)); }

/* "region_lock (rank 4)", the expression as written without its '&'. */
static void add_lock(line_t *l, const lock_site_t *s) {
  const char *e = site_expr(s->text);
  add_str(l, e[0] == '&' ? e + 1 : e);
  int rank = __atomic_load_n(&s->rank, __ATOMIC_RELAXED);
  char d[24];
  if (rank <= 0) {
    add_str(l, " (no rank)");
    return;
  }
  add_str(l, " (rank ");
  add(l, d, error_fmt_dec(d, (uint64_t)rank));
  add_str(l, ")");
}

/* "heap_user.c:335": the site's file without its folders, and line. */
static void add_where(line_t *l, const lock_site_t *s) {
  const char *e = site_expr(s->text), *f = s->text;
  for (const char *p = s->text; p < e; p++)
    if (*p == '/') f = p + 1;
  add(l, f, (size_t)(e > f + 1 ? e - 1 - f : 0));
}

/* "hakmem: lock order: <what> <lock> at <site><how>[<lock> taken at <site>]" */
static _Noreturn void report(const char *what, const lock_site_t *s, const held_t *h, const char *how) {
  line_t l = {.at = 0};
  add_str(&l, "hakmem: lock order: ");
  add_str(&l, what);
  add_str(&l, " ");
  add_lock(&l, s);
  add_str(&l, " at ");
  add_where(&l, s);
  add_str(&l, how);
  if (h != NULL) {
    add_lock(&l, h->site);
    add_str(&l, " taken at ");
    add_where(&l, h->site);
  }
  l.buf[l.at++] = '\n';
  error_write_stderr(l.buf, l.at);
  abort();
}

static const struct lock_rank *rank_of_expr(const char *e) {
  size_t n = strlen(e), k = n;
  while (k > 0 && (e[k - 1] == '_' || (e[k - 1] >= 'a' && e[k - 1] <= 'z') ||
                   (e[k - 1] >= 'A' && e[k - 1] <= 'Z') || (e[k - 1] >= '0' && e[k - 1] <= '9')))
    k--;
  bool member = (k >= 1 && e[k - 1] == '.') || (k >= 2 && e[k - 2] == '-' && e[k - 1] == '>');
  for (size_t i = 0; i < NUM_RANKS; i++)
    if (lock_ranks[i].member == member && strcmp(e + k, lock_ranks[i].name) == 0) return &lock_ranks[i];
  return NULL;
}

/* The site's rank, found at its first call; a lock missing from the table aborts. */
static int site_rank(lock_site_t *s) {
  int r = __atomic_load_n(&s->rank, __ATOMIC_RELAXED);
  if (r >= 0) return r;
  const struct lock_rank *k = rank_of_expr(site_expr(s->text));
  if (k == NULL) report("takes", s, NULL, ", a lock missing from lock_order.c's table of ranks");
  __atomic_store_n(&s->rank, k->rank, __ATOMIC_RELAXED);
  return k->rank;
}

static bool by_address(int rank) {
  for (size_t i = 0; i < NUM_RANKS; i++)
    if (lock_ranks[i].rank == rank) return lock_ranks[i].by_address;
  return false;
}

void lock_order_check(pthread_mutex_t *m, lock_site_t *s) {
  int r = site_rank(s);
  for (int i = held_n - 1; i >= 0; i--) {
    const held_t *h = &held[i];
    int hr = site_rank(h->site);
    if (h->m == m) report("takes", s, h, ", which this thread holds already: ");
    if (hr < r) continue;
    if (hr == r && by_address(r)) {
      if ((uintptr_t)h->m < (uintptr_t)m) continue;
      report("takes", s, h, " while holding one of its rank at a higher address: ");
    }
    report("takes", s, h, " while holding ");
  }
}

void lock_order_push(pthread_mutex_t *m, lock_site_t *s) {
  site_rank(s); /* a trylock's site is not checked, but must have a rank */
  if (held_n == HELD_MAX) report("takes", s, &held[held_n - 1], ", a 17th lock held, after ");
  held[held_n++] = (held_t){m, s};
}

/* The entry of m, taken out of the stack (the rest keep their order); NULL if none. */
static lock_site_t *take_out(pthread_mutex_t *m) {
  for (int i = held_n - 1; i >= 0; i--) {
    if (held[i].m != m) continue;
    lock_site_t *s = held[i].site;
    memmove(&held[i], &held[i + 1], (size_t)(held_n - 1 - i) * sizeof held[0]);
    held_n--;
    return s;
  }
  return NULL;
}

void lock_order_pop(pthread_mutex_t *m, lock_site_t *s) {
  if (take_out(m) == NULL && site_rank(s) >= 0)
    report("releases", s, NULL, ", which this thread does not hold");
}

void lock_order_forget(pthread_mutex_t *m) { take_out(m); }

lock_site_t *lock_order_wait(pthread_mutex_t *m, lock_site_t *s) {
  lock_site_t *took = take_out(m);
  if (took == NULL && site_rank(s) >= 0) report("waits on", s, NULL, ", which this thread does not hold");
  lock_order_check(m, s); /* the wait ends by taking m back */
  return took;
}
#endif
