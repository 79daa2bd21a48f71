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

static bool is_class_entry(const ctl_entry_t *e) {
  return strncmp(e->d.name, CLASS_PREFIX, sizeof CLASS_PREFIX - 1) == 0;
}

HAK_EXPORT const hak_ctl_desc_t *hak_ctl_describe(size_t index) {
  return index < ctl_table_size ? &ctl_table[index].d : NULL;
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
    for (size_t i = 0; i < ctl_table_size; i++) {
      const char *entry_field = ctl_table[i].d.name + sizeof CLASS_PREFIX - 1;
      if (is_class_entry(&ctl_table[i]) && strcmp(entry_field, field) == 0) {
        *entry = &ctl_table[i];
        *cls = (uint32_t)c;
        return 0;
      }
    }
    return -ENOENT;
  }
  for (size_t i = 0; i < ctl_table_size; i++) {
    if (!is_class_entry(&ctl_table[i]) && strcmp(ctl_table[i].d.name, name) == 0) {
      *entry = &ctl_table[i];
      return 0;
    }
  }
  return -ENOENT;
}

/* ---- values --------------------------------------------------------------------- */
static uint64_t relaxed(_Atomic uint64_t *v) { return atomic_load_explicit(v, memory_order_relaxed); }
static uint64_t relaxed_size(_Atomic size_t *v) { return atomic_load_explicit(v, memory_order_relaxed); }
static void walk_for(const ctl_entry_t *e, uint32_t cls, stats_walk_t *w) {
  switch (e->walk) {
  case W_ALL: stats_walk(w, 0, NUM_CLASSES); break;
  case W_SMALL: stats_walk(w, 0, TINY_CLASSES); break;
  case W_MID: stats_walk(w, TINY_CLASSES, NUM_CLASSES); break;
  case W_CLASS: stats_walk(w, cls, cls + 1); break;
  default: break;
  }
}
typedef struct tier_sum {
  uint64_t blocks, bytes, slabs;
} tier_sum_t;
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
  return tier_sum(w, 0, NUM_CLASSES).bytes + relaxed_size(&gstats.large_in_use) +
         relaxed_size(&gstats.huge_mapped);
}

/* The value of e (for class cls), w holding the walk it needs. A signed value comes back
 * as its two's complement. */
static uint64_t value_of(const ctl_entry_t *e, uint32_t cls, const stats_walk_t *w) {
  global_stats_t *g = &gstats;
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
  case F_THP_FAULTED: return relaxed(&g->thp_faulted);
  case F_THP_FAILED: return relaxed(&g->thp_failed);
  case F_THP_ADVISED: return relaxed(&g->thp_advised);
  case F_THP_WHOLE: return relaxed(&g->thp_returned_whole);
  case F_THP_BROKEN: return relaxed(&g->thp_broken);
  case F_PURGE_THREAD_TRIMS: return purge_thread_count(PT_TRIMS);
  case F_THP_BLOCKS: return relaxed(&g->thp_block_collapsed);
  case F_THP_BLOCKS_FAULTED: return relaxed(&g->thp_block_faulted);
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
  case F_OPT_PURGE_DELAY: return (uint64_t)(int64_t)__atomic_load_n(&opt.purge_delay_ms, __ATOMIC_RELAXED);
  case F_OPT_REGION_CACHE: return (uint64_t)__atomic_load_n(&opt.region_cache, __ATOMIC_RELAXED);
  case F_OPT_THP: return opt.thp + opt.thp_collapse_only;
  case F_OPT_BACKGROUND: return opt.background;
  case F_OPT_STATS:
    return __atomic_load_n(&opt.stats_json, __ATOMIC_RELAXED) ? 2
           : __atomic_load_n(&opt.stats, __ATOMIC_RELAXED)    ? 1
                                                              : 0;
  case F_BUILD_SECURE: return HAKMEM_SECURE;
  case F_BUILD_DEBUG: return HAKMEM_DEBUG;
  case F_BUILD_CLASSES: return NUM_CLASSES;
  case F_BUILD_VALGRIND: return HAKMEM_VALGRIND;
  case F_BUILD_VERSION: return BUILD_VERSION;
  case F_BUILD_MUSL: return BUILD_MUSL;
  case F_BUILD_SHARED: return BUILD_SHARED;
  case F_CHECKER_MEMCHECK: return checker_mode == CHECKER_MEMCHECK;
  case F_CHECKER_SANITIZER: return checker_mode == CHECKER_SANITIZER;
  case F_OS_UNMAP_REFUSED: return relaxed(&os_kept_bytes);
  case F_OS_RSS_ANON: return os_rss_anon();
  case F_LIMIT_SOFT:
  case F_LIMIT_HARD:
  case F_LIMIT_CGROUP:
  case F_LIMIT_COMMITTED:
  case F_LIMIT_GIVE_BACKS:
  case F_LIMIT_REFUSED: return limit_value(e->figure - F_LIMIT_SOFT);
  case F_DEBUG_FAULTS: return os_fault_count(true);
  case F_DEBUG_FAULT_CALLS: return os_fault_count(false);
  case F_DEBUG_HOLD_PURGE: return (uint64_t)purge_debug_hold(-1);
  }
  return 0;
}

/* The figures need the process set up (the class table, the counters' first values). */
void ctl_ensure_init(void) {
  if (atomic_load_explicit(&init_state, memory_order_acquire) != 2) heap_get();
}

uint64_t ctl_value(size_t index, uint32_t cls, const stats_walk_t *w) {
  return index < ctl_table_size ? value_of(&ctl_table[index], cls, w) : 0;
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

HAK_EXPORT int hak_stats_get(const char *name, uint64_t *value) {
  if (value == NULL) return -EINVAL;
  uint64_t v;
  bool is_signed;
  int err = get_value(name, &v, &is_signed);
  if (err != 0) return err;
  if (is_signed) return -EINVAL; /* an int64_t: hak_ctl_get */
  *value = v;
  return 0;
}

HAK_EXPORT int hak_ctl_get(const char *name, void *out, size_t *len) {
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

HAK_EXPORT int hak_ctl_set(const char *name, const void *in, size_t len) {
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
    __atomic_store_n(&opt.purge_delay_ms, (long)v, __ATOMIC_RELAXED);
    purge_soon();
    purge_wake(); /* a purge thread backing off looks again now */
    return 0;
  case F_OPT_REGION_CACHE:
    if (u > ((uint64_t)1 << 20)) return -EINVAL;
    pthread_mutex_lock(&region_lock);
    __atomic_store_n(&opt.region_cache, (long)u, __ATOMIC_RELAXED);
    purge_schedule(os_now_ms());
    pthread_mutex_unlock(&region_lock);
    return 0;
  case F_OPT_STATS:
    if (u > 2) return -EINVAL;
    if (u != 0) options_keep_stderr(); /* where the report at exit goes */
    __atomic_store_n(&opt.stats, u == 1, __ATOMIC_RELAXED);
    __atomic_store_n(&opt.stats_json, u == 2, __ATOMIC_RELAXED);
    return 0;
  case F_LIMIT_SOFT:
  case F_LIMIT_HARD:
  case F_LIMIT_CGROUP: return limit_set(e->figure - F_LIMIT_SOFT, u);
  case F_DEBUG_FAULTS:
    if (u > 1) return -EINVAL;
    if (!HAKMEM_DEBUG) return u == 0 ? 0 : -EPERM; /* no failures to stop; none to arm */
    os_fault_arm(u == 1);
    return 0;
  case F_DEBUG_HOLD_PURGE:
    if (u > 1) return -EINVAL;
    if (!HAKMEM_DEBUG) return u == 0 ? 0 : -EPERM;
    purge_debug_hold((int)u);
    return 0;
  default: return -EPERM;
  }
}
