/* The purge thread: gives memory back when the program goes quiet.
 *
 * Everything else in hakmem returns memory on slow paths the program takes anyway; a
 * program that stops calling the allocator (a server waiting in epoll_wait, a batch tool
 * between phases) would keep what it freed. So once hakmem has committed
 * PURGE_THREAD_START_BYTES, a thread of its own sleeps until the purge pass is due (or
 * the purge period has passed), runs the pass without holding region_lock across a
 * syscall, dissolves parked heaps, takes back idle heaps' freed slabs and trims idle
 * heaps (heap_trim_idle_locked), and sleeps again, longer while there is nothing to do.
 * Once committed memory is below the threshold at two passes in a row, with nothing
 * waiting for its purge delay, it ends.
 *
 * It is started from a malloc slow path with no hakmem lock held, never recursively
 * (pthread_create's own allocations find the state STARTING), never in a vfork child
 * (whose process id is not ours), with every signal blocked so that the program's
 * handlers never run on it, and not at all with HAKMEM_BACKGROUND=0, a purge delay of
 * 0 or -1. If it cannot be created, the slow paths go on purging as before, and another
 * try waits PURGE_THREAD_RETRY_MS. A forked child starts its own when it needs one. */

#include "heap/heap.h"

#include <errno.h>
#include <signal.h>
#include <unistd.h>

#define PURGE_THREAD_START_BYTES ((size_t)8 << 20)
#define PURGE_THREAD_MAX_SLEEP_MS 1000
#define PURGE_THREAD_RETRY_MS 10000
#define PURGE_THREAD_STACK ((size_t)128 << 10)

enum { PT_NONE, PT_STARTING, PT_RUNNING, PT_FAILED };
static _Atomic int pt_state;
static _Atomic uint64_t pt_failed_ms;
static _Atomic uint64_t pt_started;          /* threads started, for the tests and the report */
static _Atomic uint64_t pt_passes, pt_woken; /* its passes; those a sign of activity began */
static _Atomic uint64_t pt_trims;            /* idle heaps whose heads it gave back */
static int pt_pid;                           /* the process the thread belongs to */
static uint32_t pt_pass;                     /* under heaps_lock */
static uint64_t pt_last_look;                /* the purge thread's last pass */

static size_t committed_now(void) {
  return atomic_load_explicit(&gstats.committed_est, memory_order_relaxed) +
         atomic_load_explicit(&gstats.huge_mapped, memory_order_relaxed);
}

/* Idle heaps, one at a time, each under its own lock: heaps_lock is held only to pick the
 * next one, so that threads starting and exiting never wait for a trim. Holding the
 * heap's lock is enough: it cannot be dissolved meanwhile, and a thread taking it over
 * waits for the lock before it uses it (heap_get), so the owner whose sleep the trim
 * proves stays the owner. */
static size_t trim_idle_heaps(uint64_t now) {
  size_t done = 0;
  slab_t *uncarved[NUM_CLASSES];
  pthread_mutex_lock(&heaps_lock);
  uint32_t pass = ++pt_pass;
  pthread_mutex_unlock(&heaps_lock);
  for (;;) {
    pthread_mutex_lock(&heaps_lock);
    hak_heap_t *h;
    for (h = heaps_all; h != NULL; h = h->all_next) {
      if (h->trim_pass == pass) continue;
      h->trim_pass = pass;
      if (pthread_mutex_trylock(&h->lock) != 0) continue;
      if (h->next_deferred_ms + purge_period_ms() <= now) break; /* idle: no deferred work */
      pthread_mutex_unlock(&h->lock);
    }
    if (h == NULL) {
      pthread_mutex_unlock(&heaps_lock);
      return done;
    }
    pthread_mutex_unlock(&heaps_lock);
    size_t n = heap_trim_idle_locked(h, now, uncarved);
    if (n) atomic_fetch_add_explicit(&pt_trims, 1, memory_order_relaxed);
    for (size_t i = 0; i < n; i++) {
      size_t bytes = (size_t)uncarved[i]->units * UNIT_SIZE;
      span_purge((void *)slab_base(uncarved[i]), bytes);
      done += bytes;
    }
    pthread_mutex_unlock(&h->lock);
  }
}

/* One pass; returns the bytes it gave back (or took from other heaps). */
static size_t purge_thread_pass(uint64_t now) {
  purge_bg_pass_mark(); /* malloc_trim waits for what the pass holds (purge.c) */
  size_t done = trim_idle_heaps(now);
  heap_dissolve_parked(now, false);
  done += heap_reclaim_idle(NULL, now, pt_last_look, false);
  pt_last_look = now;
  pthread_mutex_lock(&region_lock);
  heap_sweep_abandoned_locked(now, false);
  pthread_mutex_unlock(&region_lock);
  if (HAKMEM_SECURE) done += heap_dead_trim(now);
  done += purge_pass_background(now);
  /* After purging: a range emptied since is not worth a collapse. Collapses count as
   * work done, so that a growing heap is collapsed at the pass rate. */
  done += thp_pass_wanted() ? thp_pass(now) * HUGE_PAGE_SIZE : 0;
  purge_bg_pass_mark();
  return done;
}

static void *purge_thread_main(void *arg) {
  (void)arg;
  char name[] = "hakmem-purge"; /* built from immediates: no read of the read-only data */
  pthread_setname_np(pthread_self(), name);
  /* Half a period while it finds work: memory that other threads' frees emptied in an
   * idle heap is taken back within half a period, and purged a delay later. */
  uint64_t period = purge_period_ms() / 2, sleep_ms = period;
  uint64_t pushes = stats_remote_total(false);
  for (int low = 0; low < 2;) {
    bool woken = purge_wait(sleep_ms);
    uint64_t now = os_now_ms();
    atomic_fetch_add_explicit(&pt_passes, 1, memory_order_relaxed);
    if (woken) atomic_fetch_add_explicit(&pt_woken, 1, memory_order_relaxed);
    size_t done = purge_thread_pass(now);
    /* Back off while there is nothing to do and no thread frees into another's slabs
     * (the work that comes once the freeing ends); a purge scheduled sooner wakes it. A
     * sign of activity during a nap (purge_wake) ends the nap and the backoff: the next
     * sleeps are half periods, which no refill cuts short, so a program busy on its slow
     * paths wakes the thread once per backoff, not at every refill. */
    uint64_t now_pushes = stats_remote_total(false);
    bool active = now_pushes != pushes;
    pushes = now_pushes;
    sleep_ms = done || active || woken                    ? period
               : sleep_ms * 2 > PURGE_THREAD_MAX_SLEEP_MS ? PURGE_THREAD_MAX_SLEEP_MS
                                                          : sleep_ms * 2;
    /* Not while memory waits for its purge delay: no one else may ever purge it. */
    low = committed_now() < PURGE_THREAD_START_BYTES && !purge_scheduled() ? low + 1 : 0;
    /* Before it ends: heaps whose owner owes deferred work (a thread that only takes fast
     * paths, whose heads a fill left full of free blocks) are trimmed, not only those
     * idle for a period; what that gives back keeps it going until purged. */
    if (low == 2 && trim_idle_heaps(now + purge_period_ms()) != 0) low = 0;
  }
  atomic_store_explicit(&pt_state, PT_NONE, memory_order_release);
  return NULL;
}

static HAK_NOINLINE void purge_thread_start(void) {
  int expect = atomic_load_explicit(&pt_state, memory_order_relaxed);
  /* Another thread may have started one since purge_thread_poke looked. */
  if (expect == PT_STARTING || expect == PT_RUNNING) return;
  if (expect == PT_FAILED &&
      os_now_ms() - atomic_load_explicit(&pt_failed_ms, memory_order_relaxed) < PURGE_THREAD_RETRY_MS)
    return;
  if (!atomic_compare_exchange_strong(&pt_state, &expect, PT_STARTING)) return;
  if (pt_pid == 0) pt_pid = getpid();
  if (getpid() != pt_pid) { /* a vfork child shares our memory: never a thread there */
    atomic_store(&pt_state, expect);
    return;
  }
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, PURGE_THREAD_STACK);
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_t thread;
  /* pthread_create's own allocations (the new thread's TLS) are the thread's, not those
   * of a user heap that this malloc was made from (hak_heap_malloc). */
  hak_heap_t *alloc_heap = tls_alloc;
  tls_alloc = tls_heap;
  int rc = opt.background_fails ? EAGAIN : pthread_create(&thread, &attr, purge_thread_main, NULL);
  tls_alloc = alloc_heap;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  pthread_attr_destroy(&attr);
  if (rc == 0) {
    atomic_fetch_add_explicit(&pt_started, 1, memory_order_relaxed);
    int starting = PT_STARTING; /* it may have ended already */
    atomic_compare_exchange_strong(&pt_state, &starting, PT_RUNNING);
  } else {
    atomic_store_explicit(&pt_failed_ms, os_now_ms(), memory_order_relaxed);
    atomic_store_explicit(&pt_state, PT_FAILED, memory_order_release);
  }
}

void purge_thread_poke(void) {
  int state = atomic_load_explicit(&pt_state, memory_order_relaxed);
  if (HAK_LIKELY(state == PT_RUNNING || state == PT_STARTING)) {
    if (HAK_UNLIKELY(atomic_load_explicit(&purge_napping, memory_order_relaxed))) purge_wake();
    return;
  }
  if (!opt.background || opt.purge_delay_ms <= 0) return;
  if (committed_now() < PURGE_THREAD_START_BYTES) return;
  purge_thread_start();
}

uint64_t purge_thread_started(void) { return atomic_load_explicit(&pt_started, memory_order_relaxed); }

uint64_t purge_thread_count(purge_thread_count_t which) {
  _Atomic uint64_t *c = which == PT_PASSES ? &pt_passes : which == PT_WOKEN ? &pt_woken : &pt_trims;
  return atomic_load_explicit(c, memory_order_relaxed);
}

/* The child of fork has no purge thread; it starts its own when it needs one. */
void purge_thread_atfork_child(void) {
  atomic_store_explicit(&pt_state, PT_NONE, memory_order_relaxed);
  pt_pid = getpid();
  purge_atfork_child();
  thp_atfork_child();
  /* Cold code: only where a huge block lives (none can be pinned otherwise). */
  if (atomic_load_explicit(&gstats.huge_mapped, memory_order_relaxed) != 0) thp_blocks_atfork_child();
}
