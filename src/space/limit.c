/* Memory limits (docs/memory-limits.md). Both compare committed memory counted as the
 * kernel counts resident pages (the region bytes that may be resident, committed_est,
 * plus the pages of live huge blocks up to their size, purge.c's huge_used: the tail of
 * a huge mapping past its block is never touched) with what an allocation would add:
 *   soft: beyond it, every free page the purge machinery holds (resident free units,
 *         freed huge blocks kept for reuse, empty regions beyond the cache) goes back
 *         before more is committed, and heaps give back their cached spans;
 *   hard: an allocation that would take committed memory past it fails (ENOMEM), after
 *         the same giving back.
 * Checked only where memory is committed: span_alloc and span_grow (span.c, under
 * region_lock, which covers every change of committed_est by a span) and a huge
 * mapping made or grown (huge.c, limit_admit_huge). A huge mapping is counted once it
 * is counted after it is made, so what is admitted for one stays counted here, as
 * pending, until its caller has counted it (limit_settle). What heaps hold (cached
 * spans, empty slabs, parked heaps of exited threads) is out of this layer's reach:
 * limit_give_back calls the heap layer's limit_reclaim (a malloc_trim) from paths that
 * hold no lock: near a limit, at most once per DEFERRED_PERIOD_MS for a span, before
 * every huge mapping, and always before an allocation refused at the hard limit is
 * tried once more. No fast path reads any of it. */

#include "space/space.h"

#include <errno.h>

_Atomic uint64_t limit_refused, limit_give_backs;
static _Atomic size_t pending; /* huge bytes admitted, not yet in huge_mapped */

static size_t load_limit(const long *v) { return (size_t)__atomic_load_n(v, __ATOMIC_RELAXED); }

size_t limit_committed(void) {
  return atomic_load_explicit(&gstats.committed_est, memory_order_relaxed) + purge_huge_in_use() +
         atomic_load_explicit(&pending, memory_order_relaxed);
}

/* The lower of the limits set, or 0: where giving back starts. */
static size_t limit_line(void) {
  size_t soft = load_limit(&opt.limit_soft), hard = load_limit(&opt.limit_hard);
  return soft != 0 && (hard == 0 || soft < hard) ? soft : hard;
}

bool limit_near_set(size_t bytes) {
  size_t line = limit_line();
  return line != 0 && limit_committed() + bytes > line;
}

bool limit_admit_set(size_t bytes) {
  size_t line = limit_line();
  if (HAK_LIKELY(line == 0) || limit_committed() + bytes <= line) return true;
  /* Every free unit purged, kept huge blocks unmapped: what is taken next is fresh, so
   * committed memory grows by `bytes` exactly. */
  if (purge_pass(os_now_ms(), 0, false) != 0)
    atomic_fetch_add_explicit(&limit_give_backs, 1, memory_order_relaxed);
  size_t hard = load_limit(&opt.limit_hard);
  if (hard == 0 || limit_committed() + bytes <= hard) return true;
  atomic_fetch_add_explicit(&limit_refused, 1, memory_order_relaxed);
  return false;
}

size_t limit_admit_huge(size_t bytes, bool *ok) {
  *ok = true;
  if (HAK_LIKELY(limit_line() == 0)) return 0;
  pthread_mutex_lock(&region_lock);
  *ok = limit_admit(bytes);
  if (*ok) atomic_fetch_add_explicit(&pending, bytes, memory_order_relaxed);
  pthread_mutex_unlock(&region_lock);
  return *ok ? bytes : 0;
}

void limit_settle(size_t held) {
  if (held != 0) atomic_fetch_sub_explicit(&pending, held, memory_order_relaxed);
}

void (*limit_reclaim)(void);
static _Atomic uint64_t next_reclaim_ms;

bool limit_give_back_set(size_t bytes, bool refused) {
  if (limit_reclaim == NULL || !limit_near(bytes)) return false;
  if (refused && load_limit(&opt.limit_hard) == 0) return false;
  /* A huge block costs more to fault in than a trim costs: never put off for one. */
  if (!refused && bytes < LARGE_MAX) {
    uint64_t now = os_now_ms(), due = atomic_load_explicit(&next_reclaim_ms, memory_order_relaxed);
    if (now < due ||
        !atomic_compare_exchange_strong_explicit(&next_reclaim_ms, &due, now + DEFERRED_PERIOD_MS,
                                                 memory_order_relaxed, memory_order_relaxed))
      return false;
  }
  limit_reclaim();
  atomic_fetch_add_explicit(&limit_give_backs, 1, memory_order_relaxed);
  return true;
}

/* memory.max less a sixteenth (at least 8 MiB, never below LIMIT_MIN): room for what
 * the cgroup counts and hakmem does not see, the program's stacks, text and page cache. */
bool limit_from_cgroup(void) {
  uint64_t max = os_cgroup_memory_max();
  if (max == 0) return false;
  uint64_t margin = max / 16 > ((uint64_t)8 << 20) ? max / 16 : (uint64_t)8 << 20;
  uint64_t soft = max > margin + LIMIT_MIN ? max - margin : LIMIT_MIN;
  if (soft > LIMIT_MAX) soft = LIMIT_MAX;
  uint64_t now = load_limit(&opt.limit_soft);
  if (now == 0 || soft < now) __atomic_store_n(&opt.limit_soft, (long)soft, __ATOMIC_RELAXED);
  return true;
}

/* hak_ctl_set of limit.soft (0), limit.hard (1), limit.from_cgroup (2): 0 or -EINVAL. A
 * limit below what is committed now gives back at once. */
int limit_set(int which, uint64_t v) {
  if (which == 2 ? v > 1 : !limit_value_ok(v)) return -EINVAL;
  if (which == 2) __atomic_store_n(&opt.limit_from_cgroup, v == 1 && limit_from_cgroup(), __ATOMIC_RELAXED);
  else __atomic_store_n(which == 0 ? &opt.limit_soft : &opt.limit_hard, (long)v, __ATOMIC_RELAXED);
  pthread_mutex_lock(&region_lock);
  limit_admit(0);
  pthread_mutex_unlock(&region_lock);
  return 0;
}

/* limit.soft, .hard, .from_cgroup, .committed, .give_backs, .refused, by index. */
uint64_t limit_value(int which) {
  switch (which) {
  case 0: return load_limit(&opt.limit_soft);
  case 1: return load_limit(&opt.limit_hard);
  case 2: return __atomic_load_n(&opt.limit_from_cgroup, __ATOMIC_RELAXED);
  case 3: return limit_committed();
  case 4: return atomic_load_explicit(&limit_give_backs, memory_order_relaxed);
  default: return atomic_load_explicit(&limit_refused, memory_order_relaxed);
  }
}
