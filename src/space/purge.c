/* Giving memory back: how much free memory stays resident for reuse, and when the rest
 * goes back to the OS. Free memory is of two kinds, free units of regions (region.c
 * tracks which may be resident and when each was freed) and freed huge mappings kept
 * whole for the next huge block of their size (the list below). Both are bounded by
 * one budget and purged after HAKMEM_PURGE_DELAY_MS, oldest first.
 *
 * Spans are taken and given back through span.c, never by calling region.c directly,
 * and span.c tells the budget of every change (purge_note_span_*). All of it runs under
 * region_lock. */

#include "space/space.h"

static size_t huge_used;       /* bytes of live huge mappings */
static size_t huge_kept_bytes; /* bytes of freed huge blocks kept resident */
static uint64_t next_purge_ms; /* earliest time a purge pass can find work */
static uint32_t clock_ms;      /* the latest time seen, for the age of free memory */

/* The highest use, and the biggest block (span or huge block) allocated, in the
 * current and in the previous window of PEAK_WINDOW_MS. */
#define PEAK_WINDOW_MS 1000
static size_t peak_now, peak_before;
static size_t biggest_now, biggest_before;
static uint64_t peak_window_ms;

static size_t in_use_bytes(void) { return region_used_units * UNIT_SIZE + huge_used; }
static size_t kept_bytes(void) { return region_dirty_units * UNIT_SIZE + huge_kept_bytes; }

static void note_peak(size_t block_bytes) {
  size_t used = in_use_bytes();
  if (used > peak_now) peak_now = used;
  if (block_bytes > biggest_now) biggest_now = block_bytes;
}

static void peak_window_tick(uint64_t now_ms) {
  if (now_ms - peak_window_ms < PEAK_WINDOW_MS) return;
  peak_before = peak_now;
  peak_now = in_use_bytes();
  biggest_before = biggest_now;
  biggest_now = 0;
  peak_window_ms = now_ms;
}

/* Free memory kept resident for reuse (until the purge delay) is bounded so that the
 * footprint, in use plus kept, stays under the recent peak of use: memory freed below
 * the peak is kept, because the peak is likely to come back. Besides, an eighth of the
 * memory in use may always be kept, and 8 MiB or the biggest recent block, whichever
 * is more: freed blocks leave holes that the next blocks seldom fill exactly, and a
 * program that churns blocks of tens of MiB without that slack would purge memory it
 * faults in again at once. Beyond that, freed memory is purged at once instead of
 * after the delay. */
static size_t dirty_budget(void) {
  size_t used = in_use_bytes(), peak = peak_now > peak_before ? peak_now : peak_before;
  size_t biggest = biggest_now > biggest_before ? biggest_now : biggest_before;
  size_t slack = biggest > ((size_t)8 << 20) ? biggest : (size_t)8 << 20;
  return (peak > used ? peak - used : 0) + slack + used / 8;
}

bool purge_budget_allows(size_t bytes) { return kept_bytes() + bytes <= dirty_budget(); }

/* The purge thread (purge_thread.c) sleeps here, on region_lock, until the pass is due;
 * a purge scheduled sooner than it planned to wake wakes it. */
static pthread_cond_t purge_cond = PTHREAD_COND_INITIALIZER;
static bool purge_waiting;
static uint64_t purge_wake_ms;
/* Set while the purge thread backs off (sleeps longer than the purge period): the next
 * sign of activity (a refill, a batch of cross-thread frees) wakes it early. */
_Atomic bool purge_napping;

/* Never blocks: a thread that is busy elsewhere under region_lock will be seen by the
 * purge thread soon anyway. (A thread must not sleep in the kernel while its heap is
 * half updated: see heap_trim_idle_locked.) */
void purge_wake(void) {
  if (!atomic_load_explicit(&purge_napping, memory_order_relaxed)) return;
  if (pthread_mutex_trylock(&region_lock) != 0) return; /* the next sign will do */
  bool wake = purge_waiting && atomic_exchange_explicit(&purge_napping, false, memory_order_relaxed);
  pthread_mutex_unlock(&region_lock);
  /* After the unlock: the futex call (and, on a busy machine, the purge thread running
   * at once) stays out of region_lock. The purge thread waits until it is signalled or
   * its deadline passes, so the signal cannot be lost. */
  if (wake) pthread_cond_signal(&purge_cond);
}

void purge_schedule(uint64_t due_ms) {
  if (next_purge_ms == 0 || due_ms < next_purge_ms) next_purge_ms = due_ms;
  if (purge_waiting && due_ms < purge_wake_ms) {
    purge_wake_ms = due_ms;
    pthread_cond_signal(&purge_cond);
  }
}

bool purge_wait(uint64_t max_ms) {
  bool woken = false;
  pthread_mutex_lock(&region_lock);
  uint64_t now = os_now_ms(), until = now + max_ms;
  if (next_purge_ms != 0 && next_purge_ms < until) until = next_purge_ms;
  if (until > now) {
    struct timespec deadline = os_monotonic_after((long)(until - now) * 1000000L);
    purge_waiting = true;
    purge_wake_ms = until;
    bool nap = max_ms > purge_period_ms();
    if (nap) atomic_store_explicit(&purge_napping, true, memory_order_relaxed);
    pthread_cond_clockwait(&purge_cond, &region_lock, CLOCK_MONOTONIC, &deadline);
    /* purge_wake clears the flag, under region_lock, before it signals */
    woken = nap && !atomic_exchange_explicit(&purge_napping, false, memory_order_relaxed);
    purge_waiting = false;
  }
  pthread_mutex_unlock(&region_lock);
  return woken;
}

/* ---- the purge thread's passes, seen by malloc_trim -----------------------------------
 * A pass holds memory out of every other thread's reach while it works: due runs taken
 * for purging, parked heaps being dissolved, idle heaps' slabs on their way back, ranges
 * being collapsed. A trim that runs meanwhile misses it, and it lands after the trim,
 * resident until a later pass (fault_sweep: 9-17 MB committed after malloc_trim). So
 * the count is odd while a pass runs, and heap_collect waits the pass out and looks
 * again. The wait holds no hakmem lock, so the pass never waits for the trimming thread. */
static _Atomic uint32_t bg_passes;
static _Atomic int bg_tid; /* the purge thread's: it never waits for itself */

void purge_bg_pass_mark(void) {
  if ((atomic_load_explicit(&bg_passes, memory_order_relaxed) & 1) == 0)
    atomic_store_explicit(&bg_tid, os_thread_id(), memory_order_relaxed);
  atomic_fetch_add_explicit(&bg_passes, 1, memory_order_acq_rel);
}

#define BG_WAIT_MAX_MS 1000 /* a pass of 24 collapses at 1-16 ms each, slower under load */
bool purge_bg_pass_wait(void) {
  uint32_t seq = atomic_load_explicit(&bg_passes, memory_order_acquire);
  if ((seq & 1) == 0 || atomic_load_explicit(&bg_tid, memory_order_relaxed) == os_thread_id()) return false;
  for (int i = 0; i < BG_WAIT_MAX_MS && atomic_load_explicit(&bg_passes, memory_order_acquire) == seq; i++)
    nanosleep(&(struct timespec){0, 1000000}, NULL);
  return true;
}

#if HAKMEM_DEBUG
/* debug.hold_purge_thread: the purge thread stops in its pass, with due memory taken out
 * of reach, until the ctl is set back to 0 (at most 10 s), so that a test can trim then. */
static _Atomic int bg_hold; /* 0 off, 1 asked, 2 the purge thread waits in its pass */

int purge_debug_hold(int set) {
  int off = 0;
  if (set == 1) atomic_compare_exchange_strong(&bg_hold, &off, 1);
  else if (set == 0) atomic_store(&bg_hold, 0);
  return atomic_load(&bg_hold);
}

static void bg_hold_here(void) {
  int expect = 1;
  if (atomic_load_explicit(&bg_hold, memory_order_relaxed) != 1 ||
      atomic_load_explicit(&bg_tid, memory_order_relaxed) != os_thread_id() ||
      !atomic_compare_exchange_strong(&bg_hold, &expect, 2))
    return;
  for (int i = 0; i < 10000 && atomic_load(&bg_hold) == 2; i++)
    nanosleep(&(struct timespec){0, 1000000}, NULL);
  atomic_store(&bg_hold, 0);
}
#else
int purge_debug_hold(int set) {
  (void)set;
  return 0;
}
#define bg_hold_here() ((void)0)
#endif

void purge_atfork_child(void) {
  pthread_cond_init(&purge_cond, NULL);
  atomic_store_explicit(&bg_passes, 0, memory_order_relaxed); /* no pass runs in the child */
  purge_waiting = false;
  atomic_store_explicit(&purge_napping, false, memory_order_relaxed);
}

/* ---- freed huge mappings kept for reuse ------------------------------------------
 * Freed huge blocks in mappings of up to HUGE_KEEP_MAX are kept, like free spans, for
 * the purge delay and within the budget, so that a program that frees and allocates
 * big blocks does not fault every page in again: the next huge block that needs a
 * mapping of the same size takes one. */
typedef struct huge_kept {
  uintptr_t base;
  size_t map_size;
  size_t resident; /* the bytes the block could have touched */
  uint64_t freed_ms;
} huge_kept_t;
static huge_kept_t huge_kept[HUGE_KEEP_SLOTS]; /* oldest first */
static uint32_t huge_kept_count;

/* Slot i leaves the list; the caller now owns its mapping. */
static huge_kept_t kept_take(uint32_t i) {
  huge_kept_t k = huge_kept[i];
  for (uint32_t j = i + 1; j < huge_kept_count; j++) huge_kept[j - 1] = huge_kept[j];
  huge_kept_count--;
  huge_kept_bytes -= k.resident;
  atomic_fetch_sub_explicit(&gstats.committed_est, k.resident, memory_order_relaxed);
  return k;
}

size_t purge_huge_in_use(void) { return __atomic_load_n(&huge_used, __ATOMIC_RELAXED); }

void purge_note_huge(ptrdiff_t in_use) {
  __atomic_store_n(&huge_used, huge_used + (size_t)in_use, __ATOMIC_RELAXED); /* limit.c reads it */
  note_peak(in_use > 0 ? (size_t)in_use : 0);
  if (in_use > 0 && opt.purge_delay_ms > 0) purge_to_budget();
}

bool purge_keep_huge(uintptr_t base, size_t map_size, size_t resident, uint64_t now, uintptr_t *evicted_base,
                     size_t *evicted_size) {
  long delay = opt.purge_delay_ms;
  *evicted_size = 0;
  if (delay == 0 || map_size > HUGE_KEEP_MAX || (delay > 0 && !purge_budget_allows(resident))) return false;
  if (huge_kept_count == HUGE_KEEP_SLOTS) {
    huge_kept_t old = kept_take(0);
    *evicted_base = old.base;
    *evicted_size = old.map_size;
  }
  huge_kept[huge_kept_count++] = (huge_kept_t){base, map_size, resident, now};
  huge_kept_bytes += resident;
  atomic_fetch_add_explicit(&gstats.committed_est, resident, memory_order_relaxed);
  if (delay > 0) purge_schedule(now + (uint64_t)delay);
  return true;
}

uintptr_t purge_take_huge(size_t map_size, size_t offset, size_t align) {
  for (uint32_t i = huge_kept_count; i-- > 0;) { /* the newest first */
    if (huge_kept[i].map_size == map_size && ((huge_kept[i].base + offset) & (align - 1)) == 0)
      return kept_take(i).base;
  }
  return 0;
}

/* Takes the kept huge blocks freed delay_ms ago or more into out[] (for the caller to
 * unmap); later ones lower *next_due. */
static uint32_t kept_take_due(uint64_t now_ms, long delay_ms, uint64_t *next_due, huge_kept_t *out) {
  uint32_t n = 0;
  for (uint32_t i = 0; i < huge_kept_count;) {
    uint64_t due = huge_kept[i].freed_ms + (uint64_t)delay_ms;
    if (now_ms < due) {
      if (*next_due == 0 || due < *next_due) *next_due = due;
      i++;
      continue;
    }
    out[n++] = kept_take(i);
  }
  return n;
}

static size_t kept_purge_due(uint64_t now_ms, long delay_ms, uint64_t *next_due) {
  huge_kept_t due[HUGE_KEEP_SLOTS];
  uint32_t n = kept_take_due(now_ms, delay_ms, next_due, due);
  size_t purged = 0;
  for (uint32_t i = 0; i < n; i++) {
    region_map_unmap(due[i].base, due[i].map_size);
    purged += due[i].resident;
  }
  return purged;
}

/* At least `bytes` of the oldest kept huge block, or all of it. */
static void kept_purge_oldest(size_t bytes) {
  huge_kept_t *k = &huge_kept[0];
  size_t page = os_page_size(), cut = (bytes + page - 1) & ~(page - 1);
  if (cut + page >= k->resident) { /* all of it (but the header page is left anyway) */
    huge_kept_t whole = kept_take(0);
    region_map_unmap(whole.base, whole.map_size);
    return;
  }
  /* Only the end: the block keeps its first pages for the next taker. */
  k->resident -= cut;
  os_purge((void *)(k->base + k->resident), cut);
  huge_kept_bytes -= cut;
  atomic_fetch_sub_explicit(&gstats.committed_est, cut, memory_order_relaxed);
  atomic_fetch_add_explicit(&gstats.purged_bytes, cut, memory_order_relaxed);
}

/* ---- the budget and the purge pass ----------------------------------------------- */
/* Over the budget, the free memory freed longest ago goes first: each step purges what
 * is still too much from the oldest resident free unit and its resident free
 * neighbours, or from the oldest kept huge block. It goes a sixteenth below the budget,
 * so that the next frees need no scan. */
void purge_to_budget(void) {
  if (kept_bytes() <= dirty_budget()) return;
  size_t budget = dirty_budget(), target = budget - budget / 16;
  while (kept_bytes() > target) {
    size_t excess = kept_bytes() - target;
    region_t *oldest = NULL;
    size_t at = 0;
    uint32_t age = 0;
    region_oldest_dirty(clock_ms, &oldest, &at, &age);
    if (huge_kept_count > 0 && (oldest == NULL || clock_ms - (uint32_t)huge_kept[0].freed_ms >= age)) {
      kept_purge_oldest(excess);
      continue;
    }
    if (oldest == NULL) return;
    region_purge_around(oldest, at, (excess + UNIT_SIZE - 1) >> UNIT_SHIFT);
  }
}

/* Has a pass with this delay anything to do now? (0: all free memory; < 0: none.) */
static bool pass_due(uint64_t now_ms, long delay_ms) {
  return delay_ms == 0 || (delay_ms > 0 && next_purge_ms != 0 && now_ms >= next_purge_ms);
}

bool purge_pass_due(uint64_t now_ms) { return pass_due(now_ms, opt.purge_delay_ms); }

/* Is memory waiting to be purged (read without the lock: the purge thread's own last
 * pass wrote it, and a free since can only make it nonzero)? */
bool purge_scheduled(void) { return __atomic_load_n(&next_purge_ms, __ATOMIC_RELAXED) != 0; }

size_t purge_pass(uint64_t now_ms, long delay_ms, bool release_regions) {
  if (!pass_due(now_ms, delay_ms)) return 0;
  atomic_fetch_add_explicit(&gstats.purge_passes, 1, memory_order_relaxed);
  uint64_t next_due = 0;
  clock_ms = (uint32_t)now_ms;
  size_t purged = region_purge_due(now_ms, delay_ms, release_regions, &next_due);
  purged += kept_purge_due(now_ms, delay_ms, &next_due);
  next_purge_ms = next_due;
  peak_window_tick(now_ms);
  return purged;
}

/* The pass of the purge thread and of deferred work: the same as purge_pass, but
 * region_lock is never held across a syscall, so that no malloc waits for the kernel's
 * freeing of pages (nor for its TLB shootdowns, which grow with the cores): the due memory
 * is taken out of reach under the lock, purged or unmapped without it, and given back
 * as clean free units. Returns the bytes given back. */
#define BACKGROUND_BATCH 64
size_t purge_pass_background(uint64_t now_ms) {
  long delay = opt.purge_delay_ms;
  if (delay < 0) return 0;
  size_t purged = 0;
  for (bool first = true;; first = false) {
    region_run_t runs[BACKGROUND_BATCH];
    region_t *gone[BACKGROUND_BATCH];
    huge_kept_t huge[HUGE_KEEP_SLOTS];
    size_t n_gone = 0;
    uint64_t next_due = 0;
    bool more;
    pthread_mutex_lock(&region_lock);
    if (first) {
      if (!pass_due(now_ms, delay)) {
        pthread_mutex_unlock(&region_lock);
        return 0;
      }
      atomic_fetch_add_explicit(&gstats.purge_passes, 1, memory_order_relaxed);
    }
    clock_ms = (uint32_t)now_ms;
    size_t n = region_take_due(now_ms, delay, runs, BACKGROUND_BATCH, gone, &n_gone, &next_due, &more);
    uint32_t n_huge = kept_take_due(now_ms, delay, &next_due, huge);
    if (!more) next_purge_ms = next_due;
    peak_window_tick(now_ms);
    pthread_mutex_unlock(&region_lock);
    if (n + n_gone + n_huge == 0) return purged;
    if (HAKMEM_DEBUG) bg_hold_here();
    for (size_t i = 0; i < n; i++) {
      os_purge((char *)runs[i].region + (size_t)runs[i].first * UNIT_SIZE, (size_t)runs[i].units * UNIT_SIZE);
      purged += (size_t)runs[i].units * UNIT_SIZE;
    }
    for (size_t i = 0; i < n_gone; i++) region_unmap_detached(gone[i]);
    for (uint32_t i = 0; i < n_huge; i++) {
      region_map_unmap(huge[i].base, huge[i].map_size);
      purged += huge[i].resident;
    }
    pthread_mutex_lock(&region_lock);
    region_return_purged(runs, n);
    pthread_mutex_unlock(&region_lock);
  }
}

/* ---- what spans do to the budget (span.c) -------------------------------------------- */
void purge_note_span_taken(size_t bytes, bool fresh) {
  note_peak(bytes);
  /* New pages were touched while older free ones stay resident: keep within budget. */
  if (fresh && opt.purge_delay_ms > 0) purge_to_budget();
}

void purge_note_span_freed(uint64_t freed_ms, uint64_t now_ms) {
  clock_ms = (uint32_t)now_ms;
  peak_window_tick(now_ms);
  if (opt.purge_delay_ms > 0) {
    purge_schedule(freed_ms + (uint64_t)opt.purge_delay_ms);
    purge_to_budget();
  }
}
