/* Statistics and control by name: one table of dotted names ("total.in_use",
 * "class.5.live_blocks", "opt.purge_delay_ms") from which hak_stats_get, hak_ctl_get,
 * hak_ctl_set, the JSON report and hak_ctl_describe (and through it the README's table
 * and the tests) all read; stats_json.c writes them as JSON. Counters are read without a
 * lock; per-class and total figures come from stats.c's walk, of the classes the name
 * needs. */

#include "stats/stats.h"
#include "hakmem.h"

#include <errno.h>
#include <limits.h>
#include <string.h>

enum figure {
  F_IN_USE, F_PEAK, F_MAPPED, F_COMMITTED, F_RELEASED,
  F_SMALL_BLOCKS, F_SMALL_BYTES, F_SMALL_SLABS, F_MID_BLOCKS, F_MID_BYTES, F_MID_SLABS,
  F_LARGE_BYTES, F_LARGE_ALLOCS, F_LARGE_PREFAULTED, F_HUGE_BYTES, F_HUGE_ALLOCS,
  F_CLASS_SIZE, F_CLASS_BLOCKS, F_CLASS_SLABS, F_CLASS_BYTES,
  F_REMOTE_PUSHES, F_REMOTE_BLOCKS,
  F_PURGE_PASSES, F_PURGE_BUDGET, F_MADVISE_CALLS, F_MADVISE_BYTES, F_PURGED, F_UNMAPPED,
  F_PURGE_THREADS, F_PURGE_THREAD_PASSES, F_PURGE_THREAD_WOKEN, F_PURGE_THREAD_TRIMS,
  F_THP_BYTES, F_THP_COLLAPSED, F_THP_FRESH, F_THP_FAILED, F_THP_ADVISED, F_THP_WHOLE, F_THP_BROKEN,
  F_THREADS_ALIVE, F_THREADS_EXITED,
  F_HEAPS_CREATED, F_HEAPS_TAKEN, F_HEAPS_BY_FREE, F_HEAP_WAITS, F_HEAP_WAITS_VAIN,
  F_HEAPS_DISSOLVED,
  F_SLABS_ADOPTED, F_SLABS_IDLE, F_SLAB_MAP,
  F_OPT_PURGE_DELAY, F_OPT_REGION_CACHE, F_OPT_THP, F_OPT_STATS, F_OPT_BACKGROUND,
  F_BUILD_SECURE, F_BUILD_DEBUG, F_BUILD_CLASSES, F_BUILD_VALGRIND, F_BUILD_VERSION, F_BUILD_MUSL,
  F_BUILD_SHARED, F_CHECKER_MEMCHECK, F_CHECKER_SANITIZER,
  F_OS_UNMAP_REFUSED, F_OS_RSS_ANON, F_LIMIT_SOFT, F_LIMIT_HARD, F_LIMIT_CGROUP, F_LIMIT_COMMITTED,
  F_LIMIT_GIVE_BACKS, F_LIMIT_REFUSED, F_DEBUG_FAULTS, F_DEBUG_FAULT_CALLS,
};

/* Which classes a figure needs walked. */
enum walk { W_NONE, W_ALL, W_SMALL, W_MID, W_CLASS };

typedef struct ctl_entry {
  hak_ctl_desc_t d; /* first: hak_ctl_describe hands out its address */
  uint8_t figure, walk;
} ctl_entry_t;

#define U 0 /* unsigned */
#define S 1 /* signed */
#define X 1 /* exact */
#define A 0 /* approximate */
#define RO 0
#define RW 1
#define CLASS_PREFIX "class.<n>."

/* The names, in the order of the JSON report. Names, units and meanings are an interface:
 * add, never rename. */
static const ctl_entry_t table[] = {
    {{"total.in_use", "bytes",
      "bytes in live blocks, counted by block size: small and mid blocks, large spans, huge "
      "mappings", U, A, RO}, F_IN_USE, W_ALL},
    {{"total.peak_in_use", "bytes",
      "highest committed memory seen, and at least total.in_use", U, A, RO}, F_PEAK, W_ALL},
    {{"total.mapped", "bytes",
      "address space mapped: regions and huge mappings", U, X, RO}, F_MAPPED, W_NONE},
    {{"total.committed", "bytes",
      "mapped and not given back: an upper bound on the memory hakmem keeps resident",
      U, A, RO}, F_COMMITTED, W_NONE},
    {{"total.released", "bytes",
      "given back to the OS so far, purged or unmapped (whole units: an upper bound)",
      U, A, RO}, F_RELEASED, W_NONE},
    {{"tier.small.live_blocks", "blocks",
      "live blocks of the small classes (up to 1 KiB)", U, A, RO}, F_SMALL_BLOCKS, W_SMALL},
    {{"tier.small.live_bytes", "bytes",
      "bytes of those blocks, by block size", U, A, RO}, F_SMALL_BYTES, W_SMALL},
    {{"tier.small.slabs", "slabs",
      "slabs of the small classes, in heaps and abandoned", U, A, RO}, F_SMALL_SLABS, W_SMALL},
    {{"tier.mid.live_blocks", "blocks",
      "live blocks of the mid classes (over 1 KiB, up to 128 KiB)", U, A, RO}, F_MID_BLOCKS, W_MID},
    {{"tier.mid.live_bytes", "bytes", "bytes of those blocks, by block size", U, A, RO}, F_MID_BYTES, W_MID},
    {{"tier.mid.slabs", "slabs",
      "slabs of the mid classes, in heaps and abandoned", U, A, RO}, F_MID_SLABS, W_MID},
    {{"tier.large.live_bytes", "bytes",
      "bytes of the spans of live large blocks (over 128 KiB, up to 32 MiB), whole 64 KiB units",
      U, X, RO}, F_LARGE_BYTES, W_NONE},
    {{"tier.large.allocs", "blocks", "large blocks allocated so far", U, X, RO}, F_LARGE_ALLOCS, W_NONE},
    {{"tier.large.prefaulted_bytes", "bytes",
      "bytes of large blocks faulted in at malloc, in one call, for a program seen to write them whole",
      U, X, RO}, F_LARGE_PREFAULTED, W_NONE},
    {{"tier.huge.mapped_bytes", "bytes",
      "bytes of the mappings of live huge blocks (over 32 MiB)", U, X, RO}, F_HUGE_BYTES, W_NONE},
    {{"tier.huge.allocs", "blocks", "huge blocks allocated so far", U, X, RO}, F_HUGE_ALLOCS, W_NONE},
    {{CLASS_PREFIX "block_size", "bytes", "block size of size class <n>", U, X, RO}, F_CLASS_SIZE, W_NONE},
    {{CLASS_PREFIX "live_blocks", "blocks",
      "live blocks of class <n> (blocks freed by other threads count until handed over)",
      U, A, RO}, F_CLASS_BLOCKS, W_CLASS},
    {{CLASS_PREFIX "slabs", "slabs",
      "slabs of class <n>, in heaps and abandoned", U, A, RO}, F_CLASS_SLABS, W_CLASS},
    {{CLASS_PREFIX "live_bytes", "bytes", "live_blocks times block_size", U, A, RO}, F_CLASS_BYTES, W_CLASS},
    {{"remote.pushes", "pushes",
      "batches of frees handed to another thread's slab, one atomic push each",
      U, X, RO}, F_REMOTE_PUSHES, W_NONE},
    {{"remote.blocks", "blocks",
      "blocks freed by a thread other than their slab's owner, in those pushes",
      U, X, RO}, F_REMOTE_BLOCKS, W_NONE},
    {{"purge.passes", "passes",
      "purge passes that ran: timed ones and malloc_trim's", U, X, RO}, F_PURGE_PASSES, W_NONE},
    {{"purge.budget_purges", "purges",
      "purges forced by the budget of free memory kept resident",
      U, X, RO}, F_PURGE_BUDGET, W_NONE},
    {{"purge.madvise_calls", "calls", "madvise(MADV_DONTNEED) calls", U, X, RO}, F_MADVISE_CALLS, W_NONE},
    {{"purge.madvise_bytes", "bytes", "bytes those calls covered", U, X, RO}, F_MADVISE_BYTES, W_NONE},
    {{"purge.returned_bytes", "bytes",
      "free memory purged without unmapping it (whole units: an upper bound)",
      U, A, RO}, F_PURGED, W_NONE},
    {{"purge.unmapped_bytes", "bytes",
      "resident memory given back by unmapping regions and huge blocks",
      U, A, RO}, F_UNMAPPED, W_NONE},
    {{"purge.thread_starts", "threads",
      "purge threads started (one at a time; it ends when memory is low)",
      U, X, RO}, F_PURGE_THREADS, W_NONE},
    {{"purge.thread_passes", "passes",
      "passes of the purge thread (each after a sleep)", U, X, RO}, F_PURGE_THREAD_PASSES, W_NONE},
    {{"purge.thread_woken", "passes",
      "of those, passes that a sign of activity started before the thread's sleep ended",
      U, X, RO}, F_PURGE_THREAD_WOKEN, W_NONE},
    {{"purge.thread_trims", "heaps",
      "idle heaps whose all-free queue heads the purge thread gave back",
      U, X, RO}, F_PURGE_THREAD_TRIMS, W_NONE},
    {{"thp.huge_bytes", "bytes",
      "region memory in huge pages hakmem collapsed and has not broken or given back since",
      U, A, RO}, F_THP_BYTES, W_NONE},
    {{"thp.collapsed", "ranges",
      "dense 2 MiB ranges the purge thread made huge pages (MADV_COLLAPSE)",
      U, X, RO}, F_THP_COLLAPSED, W_NONE},
    {{"thp.fresh", "ranges",
      "fresh 2 MiB ranges of a growing heap the purge thread made huge pages before their use",
      U, X, RO}, F_THP_FRESH, W_NONE},
    {{"thp.collapse_failures", "ranges",
      "collapses the kernel refused: no huge page free, or no MADV_COLLAPSE",
      U, X, RO}, F_THP_FAILED, W_NONE},
    {{"thp.advised", "ranges",
      "dense ranges left MADV_HUGEPAGE for khugepaged, on a kernel without MADV_COLLAPSE",
      U, X, RO}, F_THP_ADVISED, W_NONE},
    {{"thp.returned_whole", "pages",
      "huge pages given back whole: their range purged or unmapped at once",
      U, X, RO}, F_THP_WHOLE, W_NONE},
    {{"thp.broken", "pages",
      "huge pages broken by purging part of them: less than half in use, or for the budget",
      U, X, RO}, F_THP_BROKEN, W_NONE},
    {{"threads.alive", "threads",
      "threads that got a heap and have not exited", U, X, RO}, F_THREADS_ALIVE, W_NONE},
    {{"threads.exited", "threads",
      "threads that exited with a heap (parked for the next thread, or dissolved)",
      U, X, RO}, F_THREADS_EXITED, W_NONE},
    {{"heaps.created", "heaps", "heaps made new for a thread", U, X, RO}, F_HEAPS_CREATED, W_NONE},
    {{"heaps.taken_over", "heaps",
      "heaps of exited threads taken over by a new thread", U, X, RO}, F_HEAPS_TAKEN, W_NONE},
    {{"heaps.taken_by_free", "heaps",
      "of those, taken by a thread that had freed their blocks first",
      U, X, RO}, F_HEAPS_BY_FREE, W_NONE},
    {{"heaps.waits", "waits",
      "times a new thread waited for the heap of the blocks it freed to be parked",
      U, X, RO}, F_HEAP_WAITS, W_NONE},
    {{"heaps.waits_in_vain", "waits",
      "of those, waits that ended without the heap", U, X, RO}, F_HEAP_WAITS_VAIN, W_NONE},
    {{"heaps.dissolved", "heaps",
      "parked heaps dissolved: their slabs abandoned for any heap to adopt",
      U, X, RO}, F_HEAPS_DISSOLVED, W_NONE},
    {{"slabs.adopted", "slabs",
      "abandoned slabs adopted by a heap", U, X, RO}, F_SLABS_ADOPTED, W_NONE},
    {{"slabs.reclaimed_idle", "slabs",
      "slabs taken back from idle heaps once all their blocks came back",
      U, X, RO}, F_SLABS_IDLE, W_NONE},
    {{"slab_map.reserved", "0/1",
      "1: the slab map is reserved (free's fast path); 0: every free asks the region header",
      U, X, RO}, F_SLAB_MAP, W_NONE},
    {{"opt.purge_delay_ms", "ms",
      "HAKMEM_PURGE_DELAY_MS in force (-1: never); takes -1 or 0 .. 2^31-1",
      S, X, RW}, F_OPT_PURGE_DELAY, W_NONE},
    {{"opt.region_cache", "regions",
      "HAKMEM_REGION_CACHE in force; takes 0 .. 2^20", U, X, RW}, F_OPT_REGION_CACHE, W_NONE},
    {{"opt.thp", "0/1",
      "HAKMEM_THP in force; read-only: the purge thread collapses dense 2 MiB ranges",
      U, X, RO}, F_OPT_THP, W_NONE},
    {{"opt.background", "0/1",
      "HAKMEM_BACKGROUND in force; read-only: the purge thread is started only when needed",
      U, X, RO}, F_OPT_BACKGROUND, W_NONE},
    {{"opt.stats", "0/1/2",
      "HAKMEM_STATS in force: 0 no report at exit, 1 the text report, 2 JSON",
      U, X, RW}, F_OPT_STATS, W_NONE},
    {{"build.secure", "0/1", "1: the hardened library (libhakmem-secure)", U, X, RO}, F_BUILD_SECURE, W_NONE},
    {{"build.debug", "level",
      "debug level: 0 release, 2 debug build (invariant checks)", U, X, RO}, F_BUILD_DEBUG, W_NONE},
    {{"build.class_count", "classes",
      "number of size classes: class.0 .. class.<count-1>", U, X, RO}, F_BUILD_CLASSES, W_NONE},
    {{"build.valgrind", "0/1",
      "1: built with valgrind's memcheck.h, so hak_ blocks can be reported to memcheck",
      U, X, RO}, F_BUILD_VALGRIND, W_NONE},
    {{"build.version", "version", "the library's version, major * 10000 + minor * 100 + patch "
      "(0.1.0: 100)", U, X, RO}, F_BUILD_VERSION, W_NONE},
    {{"build.musl", "0/1", "1: built for musl (musl-gcc); 0: for glibc", U, X, RO}, F_BUILD_MUSL, W_NONE},
    {{"build.shared", "0/1", "1: the shared library, linked or preloaded; 0: the static archive (or the "
      "Rust crate) linked into the program", U, X, RO}, F_BUILD_SHARED, W_NONE},
    {{"checker.memcheck", "0/1",
      "1: running under valgrind's memcheck, which sees every hak_ block",
      U, X, RO}, F_CHECKER_MEMCHECK, W_NONE},
    {{"checker.sanitizer", "0/1",
      "1: a sanitizer's allocator serves malloc and the hak_ functions",
      U, X, RO}, F_CHECKER_SANITIZER, W_NONE},
    {{"os.unmap_refused_bytes", "bytes",
      "bytes the kernel refused to unmap (ENOMEM at vm.max_map_count): left mapped, their "
      "pages given back", U, X, RO}, F_OS_UNMAP_REFUSED, W_NONE},
    {{"os.rss_anon", "bytes", "resident anonymous memory of the process as the kernel counts it (RssAnon): the "
      "heap's resident pages, as memory.max counts them, and other anonymous memory", U, A, RO}, F_OS_RSS_ANON, W_NONE},
    {{"limit.soft", "bytes", "HAKMEM_LIMIT_SOFT, 0 none: past it, free memory goes back before more is committed; "
      "takes 0 or 2^20 .. 2^50", U, X, RW}, F_LIMIT_SOFT, W_NONE}, {{"limit.hard", "bytes", "HAKMEM_LIMIT_HARD, "
      "0 none: an allocation that would commit memory past it fails with ENOMEM; takes 0 or 2^20 .. 2^50",
      U, X, RW}, F_LIMIT_HARD, W_NONE},
    {{"limit.from_cgroup", "0/1", "1: limit.soft set just below the cgroup v2 memory.max (HAKMEM_LIMIT_FROM_CGROUP); "
      "takes 0, or 1: set it now (reads 0 where none bounds the process)", U, X, RW}, F_LIMIT_CGROUP, W_NONE},
    {{"limit.committed", "bytes", "what the limits compare, as the kernel counts resident pages: region memory that "
      "may be resident, live huge blocks' pages up to their size", U, A, RO}, F_LIMIT_COMMITTED, W_NONE},
    {{"limit.give_backs", "purges", "purges of all free memory that a limit forced", U, X, RO}, F_LIMIT_GIVE_BACKS, W_NONE},
    {{"limit.refused", "allocations", "allocations refused (ENOMEM) at the hard limit", U, X, RO}, F_LIMIT_REFUSED, W_NONE},
    {{"debug.faults", "calls",
      "OS calls failed on purpose (HAKMEM_FAULT, Debug builds; 0 elsewhere); takes 0: no "
      "more failures, 1: HAKMEM_FAULT's call numbers counted from now", U, X, RW}, F_DEBUG_FAULTS, W_NONE},
    {{"debug.fault_calls", "calls",
      "OS calls that HAKMEM_FAULT could have failed (Debug builds; 0 elsewhere)",
      U, X, RO}, F_DEBUG_FAULT_CALLS, W_NONE},
};
#define TABLE_SIZE (sizeof table / sizeof table[0])

static bool is_class_entry(const ctl_entry_t *e) {
  return strncmp(e->d.name, CLASS_PREFIX, sizeof CLASS_PREFIX - 1) == 0;
}

hak_export const hak_ctl_desc_t *hak_ctl_describe(size_t index) {
  return index < TABLE_SIZE ? &table[index].d : NULL;
}

/* ---- names ---------------------------------------------------------------------- */
/* "class.<digits>.<field>": the class, or -1. Digits without a leading zero. */
static int parse_class(const char *name, const char **field) {
  const char *p = name + 6; /* after "class." */
  if (*p < '0' || *p > '9' || (p[0] == '0' && p[1] >= '0' && p[1] <= '9')) return -1;
  int c = 0;
  for (; *p >= '0' && *p <= '9'; p++) {
    c = c * 10 + (*p - '0');
    if (c >= NUM_CLASSES) return -1;
  }
  if (*p != '.') return -1;
  *field = p + 1;
  return c;
}

static int lookup(const char *name, const ctl_entry_t **entry, uint32_t *cls) {
  if (name == NULL) return -EINVAL;
  *cls = 0;
  if (strncmp(name, "class.", 6) == 0) {
    const char *field;
    int c = parse_class(name, &field);
    if (c < 0) return -ENOENT;
    for (size_t i = 0; i < TABLE_SIZE; i++) {
      const char *entry_field = table[i].d.name + sizeof CLASS_PREFIX - 1;
      if (is_class_entry(&table[i]) && strcmp(entry_field, field) == 0) {
        *entry = &table[i];
        *cls = (uint32_t)c;
        return 0;
      }
    }
    return -ENOENT;
  }
  for (size_t i = 0; i < TABLE_SIZE; i++) {
    if (!is_class_entry(&table[i]) && strcmp(table[i].d.name, name) == 0) {
      *entry = &table[i];
      return 0;
    }
  }
  return -ENOENT;
}

/* ---- values --------------------------------------------------------------------- */
static uint64_t relaxed(_Atomic uint64_t *v) {
  return atomic_load_explicit(v, memory_order_relaxed);
}
static uint64_t relaxed_size(_Atomic size_t *v) {
  return atomic_load_explicit(v, memory_order_relaxed);
}
static void walk_for(const ctl_entry_t *e, uint32_t cls, stats_walk_t *w) {
  switch (e->walk) {
  case W_ALL: stats_walk(w, 0, NUM_CLASSES); break;
  case W_SMALL: stats_walk(w, 0, TINY_CLASSES); break;
  case W_MID: stats_walk(w, TINY_CLASSES, NUM_CLASSES); break;
  case W_CLASS: stats_walk(w, cls, cls + 1); break;
  default: break;
  }
}
typedef struct tier_sum { uint64_t blocks, bytes, slabs; } tier_sum_t;
static tier_sum_t tier_sum(const stats_walk_t *w, uint32_t first, uint32_t end) {
  tier_sum_t t = {0, 0, 0};
  for (uint32_t c = first; c < end; c++) {
    t.blocks += w->live[c];
    t.bytes += w->live[c] * class_size[c];
    t.slabs += w->slabs[c];
  }
  return t;
}

static uint64_t in_use(const stats_walk_t *w) {
  return tier_sum(w, 0, NUM_CLASSES).bytes + relaxed_size(&hak_gstats.large_in_use) +
         relaxed_size(&hak_gstats.huge_mapped);
}

/* The value of e (for class cls), w holding the walk it needs. A signed value comes back
 * as its two's complement. */
static uint64_t value_of(const ctl_entry_t *e, uint32_t cls, const stats_walk_t *w) {
  hak_global_stats_t *g = &hak_gstats;
  switch ((enum figure)e->figure) {
  case F_IN_USE: return in_use(w);
  case F_PEAK: {
    uint64_t peak = relaxed_size(&g->peak_in_use), now = in_use(w);
    return peak > now ? peak : now;
  }
  case F_MAPPED: return relaxed_size(&g->region_bytes) + relaxed_size(&g->huge_mapped);
  case F_COMMITTED: return relaxed_size(&g->committed_est) + relaxed_size(&g->huge_mapped);
  case F_RELEASED: return relaxed_size(&g->purged_bytes) + relaxed_size(&g->released_bytes);
  case F_SMALL_BLOCKS: return tier_sum(w, 0, TINY_CLASSES).blocks;
  case F_SMALL_BYTES: return tier_sum(w, 0, TINY_CLASSES).bytes;
  case F_SMALL_SLABS: return tier_sum(w, 0, TINY_CLASSES).slabs;
  case F_MID_BLOCKS: return tier_sum(w, TINY_CLASSES, NUM_CLASSES).blocks;
  case F_MID_BYTES: return tier_sum(w, TINY_CLASSES, NUM_CLASSES).bytes;
  case F_MID_SLABS: return tier_sum(w, TINY_CLASSES, NUM_CLASSES).slabs;
  case F_LARGE_BYTES: return relaxed_size(&g->large_in_use);
  case F_LARGE_ALLOCS: return relaxed(&g->large_allocs);
  case F_LARGE_PREFAULTED: return relaxed(&g->large_prefaulted);
  case F_HUGE_BYTES: return relaxed_size(&g->huge_mapped);
  case F_HUGE_ALLOCS: return relaxed(&g->huge_allocs);
  case F_CLASS_SIZE: return class_size[cls];
  case F_CLASS_BLOCKS: return w->live[cls];
  case F_CLASS_SLABS: return w->slabs[cls];
  case F_CLASS_BYTES: return w->live[cls] * class_size[cls];
  case F_REMOTE_PUSHES: return stats_remote_total(false);
  case F_REMOTE_BLOCKS: return stats_remote_total(true);
  case F_PURGE_PASSES: return relaxed(&g->purge_passes);
  case F_PURGE_BUDGET: return relaxed(&g->purge_budget_runs);
  case F_MADVISE_CALLS: return relaxed(&os_purge_calls);
  case F_MADVISE_BYTES: return relaxed(&os_purge_bytes);
  case F_PURGED: return relaxed_size(&g->purged_bytes);
  case F_UNMAPPED: return relaxed_size(&g->released_bytes);
  case F_PURGE_THREADS: return purge_thread_started();
  case F_PURGE_THREAD_PASSES: return purge_thread_count(PT_PASSES);
  case F_PURGE_THREAD_WOKEN: return purge_thread_count(PT_WOKEN);
  case F_THP_BYTES: return relaxed_size(&g->thp_huge_bytes);
  case F_THP_COLLAPSED: return relaxed(&g->thp_collapsed);
  case F_THP_FRESH: return relaxed(&g->thp_fresh);
  case F_THP_FAILED: return relaxed(&g->thp_failed);
  case F_THP_ADVISED: return relaxed(&g->thp_advised);
  case F_THP_WHOLE: return relaxed(&g->thp_returned_whole);
  case F_THP_BROKEN: return relaxed(&g->thp_broken);
  case F_PURGE_THREAD_TRIMS: return purge_thread_count(PT_TRIMS);
  case F_THREADS_ALIVE: {
    uint64_t exited = relaxed(&g->threads_exited), started = relaxed(&g->threads_started);
    return started > exited ? started - exited : 0;
  }
  case F_THREADS_EXITED: return relaxed(&g->threads_exited);
  case F_HEAPS_CREATED: return relaxed(&g->heaps_created);
  case F_HEAPS_TAKEN: return relaxed(&g->heaps_taken_over);
  case F_HEAPS_BY_FREE: return relaxed(&g->heaps_taken_by_free);
  case F_HEAP_WAITS: return relaxed(&g->heap_waits);
  case F_HEAP_WAITS_VAIN: return relaxed(&g->heap_waits_in_vain);
  case F_HEAPS_DISSOLVED: return relaxed(&g->heaps_dissolved);
  case F_SLABS_ADOPTED: return relaxed(&g->slabs_adopted);
  case F_SLABS_IDLE: return relaxed(&g->slabs_reclaimed_idle);
  case F_SLAB_MAP: return __atomic_load_n(&slab_map_units, __ATOMIC_ACQUIRE) != 0;
  case F_OPT_PURGE_DELAY:
    return (uint64_t)(int64_t)__atomic_load_n(&hak_opt.purge_delay_ms, __ATOMIC_RELAXED);
  case F_OPT_REGION_CACHE:
    return (uint64_t)__atomic_load_n(&hak_opt.region_cache, __ATOMIC_RELAXED);
  case F_OPT_THP: return hak_opt.thp;
  case F_OPT_BACKGROUND: return hak_opt.background;
  case F_OPT_STATS:
    return __atomic_load_n(&hak_opt.stats_json, __ATOMIC_RELAXED) ? 2
           : __atomic_load_n(&hak_opt.stats, __ATOMIC_RELAXED)    ? 1 : 0;
  case F_BUILD_SECURE: return HAKMEM_SECURE;
  case F_BUILD_DEBUG: return HAKMEM_DEBUG;
  case F_BUILD_CLASSES: return NUM_CLASSES;
  case F_BUILD_VALGRIND: return HAKMEM_VALGRIND;
  case F_BUILD_VERSION: return BUILD_VERSION;
  case F_BUILD_MUSL: return BUILD_MUSL;
  case F_BUILD_SHARED: return BUILD_SHARED;
  case F_CHECKER_MEMCHECK: return hak_checker == CHECKER_MEMCHECK;
  case F_CHECKER_SANITIZER: return hak_checker == CHECKER_SANITIZER;
  case F_OS_UNMAP_REFUSED: return relaxed(&os_kept_bytes);
  case F_OS_RSS_ANON: return os_rss_anon();
  case F_LIMIT_SOFT: case F_LIMIT_HARD: case F_LIMIT_CGROUP: case F_LIMIT_COMMITTED:
  case F_LIMIT_GIVE_BACKS: case F_LIMIT_REFUSED: return limit_value(e->figure - F_LIMIT_SOFT);
  case F_DEBUG_FAULTS: return os_fault_count(true);
  case F_DEBUG_FAULT_CALLS: return os_fault_count(false);
  }
  return 0;
}

/* The figures need the process set up (the class table, the counters' first values). */
void ctl_ensure_init(void) {
  if (atomic_load_explicit(&hak_init_state, memory_order_acquire) != 2) heap_get();
}

uint64_t ctl_value(size_t index, uint32_t cls, const stats_walk_t *w) {
  return index < TABLE_SIZE ? value_of(&table[index], cls, w) : 0;
}

static int get_value(const char *name, uint64_t *value, bool *is_signed) {
  const ctl_entry_t *e;
  uint32_t cls;
  int err = lookup(name, &e, &cls);
  if (err != 0) return err;
  ctl_ensure_init();
  stats_walk_t w;
  walk_for(e, cls, &w);
  *value = value_of(e, cls, &w);
  *is_signed = e->d.is_signed;
  return 0;
}

hak_export int hak_stats_get(const char *name, uint64_t *value) {
  if (value == NULL) return -EINVAL;
  uint64_t v;
  bool is_signed;
  int err = get_value(name, &v, &is_signed);
  if (err != 0) return err;
  if (is_signed) return -EINVAL; /* an int64_t: hak_ctl_get */
  *value = v;
  return 0;
}

hak_export int hak_ctl_get(const char *name, void *out, size_t *len) {
  if (len == NULL) return -EINVAL;
  const ctl_entry_t *e;
  uint32_t cls;
  int err = lookup(name, &e, &cls);
  if (err != 0) return err;
  if (out == NULL) {
    *len = sizeof(uint64_t);
    return 0;
  }
  if (*len != sizeof(uint64_t)) return -EINVAL;
  ctl_ensure_init();
  stats_walk_t w;
  walk_for(e, cls, &w);
  uint64_t v = value_of(e, cls, &w);
  memcpy(out, &v, sizeof v); /* an int64_t has the same bytes */
  return 0;
}

/* ---- options changed at run time -------------------------------------------------
 * The purge delay is one aligned word that slow paths read where they use it: each sees
 * the old value or the new one, and a purge pass is scheduled at once so that memory
 * kept under the old delay is looked at again. The region cache is read under
 * region_lock and written under it. The stats switches are read at exit only.
 * HAKMEM_THP is read once, at start-up, like the system's own THP mode: refused. */
static void purge_soon(void) {
  pthread_mutex_lock(&region_lock);
  purge_schedule(os_now_ms());
  pthread_mutex_unlock(&region_lock);
}

hak_export int hak_ctl_set(const char *name, const void *in, size_t len) {
  const ctl_entry_t *e;
  uint32_t cls;
  int err = lookup(name, &e, &cls);
  if (err != 0) return err;
  if (!e->d.writable) return -EPERM;
  if (in == NULL || len != sizeof(uint64_t)) return -EINVAL;
  uint64_t u;
  memcpy(&u, in, sizeof u);
  int64_t v = (int64_t)u;
  ctl_ensure_init(); /* set-up reads HAKMEM_* once: afterwards, so that it cannot undo this */
  switch ((enum figure)e->figure) {
  case F_OPT_PURGE_DELAY:
    if (v < -1 || v > INT32_MAX) return -EINVAL;
    __atomic_store_n(&hak_opt.purge_delay_ms, (long)v, __ATOMIC_RELAXED);
    purge_soon();
    purge_wake(); /* a purge thread backing off looks again now */
    return 0;
  case F_OPT_REGION_CACHE:
    if (u > ((uint64_t)1 << 20)) return -EINVAL;
    pthread_mutex_lock(&region_lock);
    __atomic_store_n(&hak_opt.region_cache, (long)u, __ATOMIC_RELAXED);
    purge_schedule(os_now_ms());
    pthread_mutex_unlock(&region_lock);
    return 0;
  case F_OPT_STATS:
    if (u > 2) return -EINVAL;
    if (u != 0) options_keep_stderr(); /* where the report at exit goes */
    __atomic_store_n(&hak_opt.stats, u == 1, __ATOMIC_RELAXED);
    __atomic_store_n(&hak_opt.stats_json, u == 2, __ATOMIC_RELAXED);
    return 0;
  case F_LIMIT_SOFT: case F_LIMIT_HARD: case F_LIMIT_CGROUP: return limit_set(e->figure - F_LIMIT_SOFT, u);
  case F_DEBUG_FAULTS:
    if (u > 1) return -EINVAL;
    if (!HAKMEM_DEBUG) return u == 0 ? 0 : -EPERM; /* no failures to stop; none to arm */
    os_fault_arm(u == 1);
    return 0;
  default:
    return -EPERM;
  }
}
