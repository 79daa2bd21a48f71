/* Process-wide state that every layer may touch: the counters bumped on slow paths
 * (relaxed atomics, never on a malloc/free fast path) with the peak of committed
 * memory, which stats.c reports, and the per-process random keys. */

#include "base/base.h"

global_stats_t gstats;
remote_counter_t remote_counters[REMOTE_COUNTER_SHARDS];
/* The checker the process runs under, set at load (api/checkers.c). */
int checker_mode = CHECKER_NONE;

/* Random per process, set once by init.c: the mark on pages given back inside big free
 * blocks, and the hardened build's key for free-list links and size words. */
uintptr_t process_cookie = 0x9e3779b97f4a7c15ull;
uintptr_t list_key;
/* Random per process, set once by init.c before any block is freed: the hardened
 * build's key for free tags. */
uintptr_t tag_key;

/* 0 not started, 1 running, 2 done: written by init.c, read by whoever must not run
 * before the process is set up (the report, malloc_trim). */
_Atomic int init_state;

void stats_note_in_use(void) {
  size_t now = atomic_load_explicit(&gstats.committed_est, memory_order_relaxed) +
               atomic_load_explicit(&gstats.huge_mapped, memory_order_relaxed);
  size_t peak = atomic_load_explicit(&gstats.peak_in_use, memory_order_relaxed);
  while (now > peak && !atomic_compare_exchange_weak_explicit(&gstats.peak_in_use, &peak, now,
                                                              memory_order_relaxed, memory_order_relaxed)) {}
}

uint64_t stats_remote_total(bool blocks) {
  uint64_t sum = 0;
  for (size_t i = 0; i < REMOTE_COUNTER_SHARDS; i++) {
    remote_counter_t *c = &remote_counters[i];
    sum += atomic_load_explicit(blocks ? &c->blocks : &c->pushes, memory_order_relaxed) +
           atomic_load_explicit(&c->singles, memory_order_relaxed);
  }
  return sum;
}
