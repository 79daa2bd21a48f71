/* The whole API from several threads while OS calls fail (HAKMEM_FAULT, set by
 * run_faults.py), then the same without failures, then everything freed.
 *
 * Usage: fault_workload [seed] [threads] [steps]
 *
 * Checks, while calls fail: every NULL comes with errno = ENOMEM (posix_memalign: the
 * return value), a failed realloc leaves its block as it was, every block keeps its
 * pattern until freed, calloc's memory reads as zero (also after a purge: a refused
 * MADV_DONTNEED must not leave old data behind), heaps can be made, used and destroyed.
 * After `debug.faults` is set to 0: the same workload sees no NULL at all. At the end,
 * everything freed and trimmed: no live block counted, committed memory and the address
 * space back at the start's (plus what the kernel refused to unmap, reported as such).
 * Prints "faults=F calls=C nulls=N" for the driver. */
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>

#include "test_util.h"

enum { SLOTS = 192, MAX_THREADS = 8 };

typedef struct item {
  void *p;
  size_t n, usable;
  uint64_t seed;
  hak_heap_t *heap; /* the user heap it came from, or NULL */
  bool aligned;     /* freed with free, not free_sized */
} item_t;

typedef struct worker {
  pthread_t tid;
  uint64_t seed;
  unsigned steps;
  bool failures_allowed;
  unsigned long nulls;
  size_t live;
  item_t items[SLOTS];
  hak_heap_t *heap;
  struct worker *next; /* whose blocks this one frees at the end: cross-thread frees */
} worker_t;

static _Atomic unsigned long total_nulls;

/* Sizes from every tier: small, mid, large, and now and then huge. */
static size_t pick_size(tu_rng *r) {
  unsigned t = (unsigned)tu_below(r, 1000);
  if (t < 600) return tu_range(r, 1, 1024);
  if (t < 900) return tu_range(r, 1025, 128 << 10);
  if (t < 985) return tu_range(r, (128 << 10) + 1, 4 << 20);
  return tu_range(r, (32u << 20) + 1, 36u << 20); /* a mapping each: mmap, mremap, munmap */
}

/* A NULL: allowed only while failures are injected, and then with ENOMEM. */
static void null_seen(worker_t *w, const char *what, size_t n, int err) {
  w->nulls++;
  CHECK(w->failures_allowed, "%s(%zu) returned NULL with no failure injected (errno %d)", what, n, err);
  CHECK(err == ENOMEM, "%s(%zu) returned NULL with errno %d, not ENOMEM", what, n, err);
}

static void item_take(worker_t *w, item_t *it, void *p, size_t n, size_t align, hak_heap_t *h,
                      const char *what, bool zero) {
  size_t usable = malloc_usable_size(p);
  CHECK(usable >= n, "%s(%zu) = %p: usable size %zu", what, n, p, usable);
  CHECK(tu_aligned(p, align), "%s(%zu) = %p not %zu-aligned", what, n, p, align);
  if (zero) CHECK(tu_is_zero(p, n), "%s(%zu) = %p: not all zero", what, n, p);
  it->p = p;
  it->n = n;
  it->usable = usable;
  it->seed = tu_rand(&(tu_rng){w->seed ^ (uintptr_t)p});
  it->heap = h;
  it->aligned = align > 16;
  tu_fill_here(p, usable, it->seed);
  w->live += usable;
}

static void item_free(worker_t *w, item_t *it) {
  if (it->p == NULL) return;
  tu_verify_here("a live block", it->p, it->usable, it->seed);
  if ((it->n & 1) || it->aligned) free(it->p);
  else hak_free_sized(it->p, it->n);
  w->live -= it->usable;
  it->p = NULL;
}

static void heap_drop(worker_t *w) {
  if (w->heap == NULL) return;
  for (unsigned i = 0; i < SLOTS; i++) {
    item_t *it = &w->items[i];
    if (it->p && it->heap == w->heap) {
      tu_verify_here("a user heap's block", it->p, it->usable, it->seed);
      w->live -= it->usable;
      it->p = NULL;
    }
  }
  hak_heap_destroy(w->heap);
  w->heap = NULL;
}

static void step(worker_t *w, tu_rng *r) {
  item_t *it = &w->items[tu_below(r, SLOTS)];
  unsigned op = (unsigned)tu_below(r, 100);
  if (it->p && op < 45) {
    item_free(w, it);
    return;
  }
  if (it->p && op < 60) { /* realloc to another tier */
    size_t m = pick_size(r);
    errno = 0;
    void *q = realloc(it->p, m);
    if (q == NULL) {
      null_seen(w, "realloc", m, errno);
      tu_verify_here("a block after a failed realloc", it->p, it->usable, it->seed);
      return;
    }
    size_t keep = it->usable < m ? it->usable : m;
    tu_verify("a block realloc moved", q, keep, (uintptr_t)it->p, it->seed);
    w->live -= it->usable;
    /* kept in place, it stays in its heap; moved, it comes from the thread's own */
    item_take(w, it, q, m, 16, q == it->p ? it->heap : NULL, "realloc", false);
    return;
  }
  if (it->p) return;
  size_t n = pick_size(r), align = (size_t)16 << tu_below(r, 13); /* 16 .. 64 KiB */
  if (w->live + n > (80u << 20) && n > 4096) n = tu_range(r, 1, 4096);
  void *p = NULL;
  const char *what;
  hak_heap_t *h = NULL;
  bool zero = false;
  errno = 0;
  int err;
  switch (op % 8) {
  case 0:
    what = "calloc";
    zero = true;
    p = calloc(1, n);
    err = errno;
    break;
  case 1:
    what = "aligned_alloc";
    n = (n + align - 1) & ~(align - 1);
    p = aligned_alloc(align, n);
    err = errno;
    break;
  case 2:
    what = "posix_memalign";
    err = posix_memalign(&p, align, n);
    if (err) p = NULL;
    break;
  case 3:
    what = "memalign";
    p = memalign(align, n);
    err = errno;
    break;
  case 4:
    what = "hak_heap_malloc";
    if (w->heap == NULL) {
      w->heap = hak_heap_new();
      if (w->heap == NULL) {
        null_seen(w, "hak_heap_new", 0, errno);
        return;
      }
    }
    h = w->heap;
    p = hak_heap_malloc(h, n);
    err = errno;
    break;
  default:
    what = "malloc";
    p = malloc(n);
    err = errno;
    break;
  }
  if (p == NULL) {
    null_seen(w, what, n, err);
    return;
  }
  if (op % 8 > 3 || op % 8 == 0) align = 16;
  item_take(w, it, p, n, align, h, what, zero);
  if (tu_below(r, 400) == 0) heap_drop(w);
  if (tu_below(r, 800) == 0) malloc_trim(0);
}

/* A large block written, freed, purged and taken again by calloc: zero, whatever the
 * kernel did with the purge. */
static void calloc_after_purge(worker_t *w) {
  size_t n = 1u << 20;
  char *p = malloc(n);
  if (p == NULL) {
    null_seen(w, "malloc", n, errno);
    return;
  }
  memset(p, 0xa5, n);
  free(p);
  malloc_trim(0);
  errno = 0;
  char *q = calloc(1, n);
  if (q == NULL) {
    null_seen(w, "calloc", n, errno);
    return;
  }
  CHECK(tu_is_zero(q, n), "calloc(%zu) after a purge = %p: old data left", n, (void *)q);
  free(q);
}

static void *run(void *arg) {
  worker_t *w = arg;
  tu_rng r = tu_rng_make(w->seed, 7);
  for (unsigned i = 0; i < w->steps; i++) {
    step(w, &r);
    if (i % 500 == 0) calloc_after_purge(w);
  }
  heap_drop(w);
  atomic_fetch_add(&total_nulls, w->nulls);
  return NULL;
}

/* The blocks of each worker freed by the next one's thread. */
static void *free_next(void *arg) {
  worker_t *w = arg, *v = w->next;
  for (unsigned i = 0; i < SLOTS; i++) item_free(v, &v->items[i]);
  return NULL;
}

/* fn on each worker in a thread of its own; where the C library cannot make a thread
 * while calls fail (its stack or TLS is memory too), on this one. */
static void in_threads(worker_t *ws, unsigned threads, void *(*fn)(void *), bool failures) {
  bool made[MAX_THREADS];
  for (unsigned t = 0; t < threads; t++) {
    made[t] = pthread_create(&ws[t].tid, NULL, fn, &ws[t]) == 0;
    REQUIRE(made[t] || failures, "pthread_create with no failure injected");
    if (!made[t]) fn(&ws[t]);
  }
  for (unsigned t = 0; t < threads; t++)
    if (made[t]) pthread_join(ws[t].tid, NULL);
}

static void round_of(worker_t *ws, unsigned threads, uint64_t seed, unsigned steps, bool failures) {
  for (unsigned t = 0; t < threads; t++) {
    memset(&ws[t], 0, sizeof ws[t]);
    ws[t].seed = tu_mix64(seed + t);
    ws[t].steps = steps;
    ws[t].failures_allowed = failures;
    ws[t].next = &ws[(t + 1) % threads];
  }
  in_threads(ws, threads, run, failures);
  in_threads(ws, threads, free_next, failures);
}

static uint64_t stat(const char *name) {
  uint64_t v = 0;
  REQUIRE(hak_stats_get(name, &v) == 0, "hak_stats_get(%s)", name);
  return v;
}

int main(int argc, char **argv) {
  uint64_t seed = tu_seed(argc, argv);
  unsigned threads = (unsigned)tu_arg_u64(argc, argv, 2, 4),
           steps = (unsigned)tu_arg_u64(argc, argv, 3, 2000);
  REQUIRE(threads >= 1 && threads <= MAX_THREADS, "1 to %d threads", MAX_THREADS);
  static worker_t ws[MAX_THREADS];
  uint64_t zero = 0;
  bool debug = stat("build.debug") != 0;
  REQUIRE(hak_ctl_set("opt.region_cache", &zero, sizeof zero) == 0, "opt.region_cache");
  /* The start's figures, with the threads' stacks already cached by the C library. */
  REQUIRE(!debug || hak_ctl_set("debug.faults", &zero, sizeof zero) == 0, "debug.faults = 0");
  round_of(ws, threads, seed ^ 1, 1, false);
  printf("threads %u steps %u\n", threads, steps); /* stdout's buffer, before the start */
  malloc_trim(0);
  uint64_t committed0 = stat("total.committed"), in_use0 = stat("total.in_use");
  uint64_t small0 = stat("tier.small.live_blocks"), mid0 = stat("tier.mid.live_blocks");
  size_t vm0 = tu_vm_bytes();
  uint64_t starts0 = stat("purge.thread_starts");
  uint64_t one = 1;
  REQUIRE(!debug || hak_ctl_set("debug.faults", &one, sizeof one) == 0, "debug.faults = 1");

  round_of(ws, threads, seed, steps, true); /* failures allowed */
  uint64_t faults = stat("debug.faults"), calls = stat("debug.fault_calls");
  REQUIRE(!debug || hak_ctl_set("debug.faults", &zero, sizeof zero) == 0, "debug.faults = 0");
  unsigned long nulls = atomic_load(&total_nulls);
  printf("faults=%" PRIu64 " calls=%" PRIu64 " nulls=%lu\n", faults, calls, nulls);
  CHECK(nulls <= faults, "%lu NULLs from %" PRIu64 " failed OS calls", nulls, faults);

  round_of(ws, threads, seed + 99, steps, false); /* none now */
  malloc_trim(0);
  /* the C library's own buffers (stdio's, made on first use) may come after the start */
  CHECK(stat("total.in_use") <= in_use0 + 4096,
        "in use %" PRIu64 " after all was freed, %" PRIu64 " at the start", stat("total.in_use"), in_use0);
  uint64_t small = stat("tier.small.live_blocks"), mid = stat("tier.mid.live_blocks");
  CHECK(small <= small0 + 2 && mid <= mid0 + 1,
        "live blocks: small %" PRIu64 " mid %" PRIu64 " after all was freed, %" PRIu64 " and %" PRIu64
        " at the start",
        small, mid, small0, mid0);
  CHECK(stat("tier.large.live_bytes") == 0 && stat("tier.huge.mapped_bytes") == 0,
        "large %" PRIu64 " and huge %" PRIu64 " bytes live after all was freed",
        stat("tier.large.live_bytes"), stat("tier.huge.mapped_bytes"));
  /* Back at idle: committed memory within a region's worth of metadata of the start's. */
  uint64_t committed = stat("total.committed"), refused = stat("os.unmap_refused_bytes");
  CHECK(committed <= committed0 + (4u << 20), "committed %" PRIu64 " after trim, %" PRIu64 " at the start",
        committed, committed0);
  size_t vm = tu_vm_bytes();
  /* A purge thread started since (the first can start only once enough is committed):
   * its stack, 128 KiB and a guard page, stays mapped in the C library's cache of
   * stacks after it ends. */
  size_t stack = stat("purge.thread_starts") > starts0 ? (128u << 10) + (size_t)sysconf(_SC_PAGESIZE) : 0;
  CHECK(vm <= vm0 + refused + stack + (64u << 20),
        "address space %zu, %zu at the start, %" PRIu64 " refused unmaps, %zu of a purge thread's stack", vm,
        vm0, refused, stack);
  printf("small %" PRIu64 " mid %" PRIu64 " live blocks; committed %" PRIu64 " -> %" PRIu64
         "; vm %zu -> %zu\n",
         small, mid, committed0, committed, vm0, vm);
  return tu_finish("fault_workload");
}
