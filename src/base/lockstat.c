/* Lock statistics for scaling studies, built with HAKMEM_LOCKSTAT=ON only (base.h).
 * Per lock class: acquisitions (lock and successful trylock), acquisitions that found the
 * lock taken (a failed trylock counts once, as does a lock that had to wait), time held
 * (acquire to unlock, cond waits excluded: total, and a log2 histogram for its median
 * and 90th percentile, which a holder preempted on a busy machine does not move) and time
 * waited; per call site, acquisitions and time held. Printed on stderr at exit. Calls
 * nothing of hakmem's but error.c's writer. */
#include "base/base.h"

#if defined(HAKMEM_LOCKSTAT) && HAKMEM_LOCKSTAT
#include <stdarg.h>
#include <string.h>
#include <x86intrin.h>

#undef pthread_mutex_lock
#undef pthread_mutex_trylock
#undef pthread_mutex_unlock
#undef pthread_cond_clockwait

enum { LS_REGION, LS_HEAPS, LS_HEAP, LS_OTHER, LS_CLASSES, LS_SITES = 128, LS_BUCKETS = 48 };
static const char *const ls_names[LS_CLASSES] = {"region_lock", "heaps_lock", "heap->lock", "other"};

typedef struct {
  _Atomic uint64_t acquired, contended, held_cycles, wait_cycles;
  _Atomic uint64_t hist[LS_BUCKETS];     /* holds of [2^i, 2^(i+1)) cycles */
  _Atomic uint64_t hist_sum[LS_BUCKETS]; /* and their cycles */
} ls_class_t;
static ls_class_t ls[LS_CLASSES];

typedef struct {
  const char *name;
  int cls;
  _Atomic uint64_t acquired, held_cycles;
} ls_site_t;
static ls_site_t ls_sites[LS_SITES];
static _Atomic int ls_nsites;

/* The locks this thread holds: where and when each was taken. */
typedef struct {
  pthread_mutex_t *m;
  uint64_t since;
  int site;
} ls_held_t;
static __thread ls_held_t ls_stack[8];
static __thread int ls_depth;

static void ls_add(_Atomic uint64_t *a, uint64_t v) { atomic_fetch_add_explicit(a, v, memory_order_relaxed); }

/* The site's number, given at its first call (a race gives two numbers: both count). */
static int ls_site(const char *name, int *id) {
  int i = __atomic_load_n(id, __ATOMIC_RELAXED);
  if (i >= 0) return i;
  i = atomic_fetch_add_explicit(&ls_nsites, 1, memory_order_relaxed);
  if (i >= LS_SITES) i = LS_SITES - 1; /* overflow lands on the last */
  int c = LS_OTHER;
  if (strstr(name, "region_lock")) c = LS_REGION;
  else if (strstr(name, "heaps_lock")) c = LS_HEAPS;
  else if (strstr(name, "->lock")) c = LS_HEAP;
  ls_sites[i].name = name;
  ls_sites[i].cls = c;
  __atomic_store_n(id, i, __ATOMIC_RELAXED);
  return i;
}

static void ls_push(pthread_mutex_t *m, int site) {
  ls_add(&ls[ls_sites[site].cls].acquired, 1);
  ls_add(&ls_sites[site].acquired, 1);
  if (ls_depth < 8) ls_stack[ls_depth] = (ls_held_t){m, __rdtsc(), site};
  ls_depth++;
}

int lockstat_lock(pthread_mutex_t *m, const char *name, int *id) {
  int s = ls_site(name, id);
  if (pthread_mutex_trylock(m) != 0) {
    uint64_t t = __rdtsc();
    int r = pthread_mutex_lock(m);
    if (r) return r;
    ls_add(&ls[ls_sites[s].cls].contended, 1);
    ls_add(&ls[ls_sites[s].cls].wait_cycles, __rdtsc() - t);
  }
  ls_push(m, s);
  return 0;
}

int lockstat_trylock(pthread_mutex_t *m, const char *name, int *id) {
  int s = ls_site(name, id);
  int r = pthread_mutex_trylock(m);
  if (r) ls_add(&ls[ls_sites[s].cls].contended, 1);
  else ls_push(m, s);
  return r;
}

/* The lock's hold ends: its time goes to its class and site. Returns the site, or -1. */
static int ls_pop(pthread_mutex_t *m) {
  int d = ls_depth < 8 ? ls_depth : 8, site = -1;
  for (int i = d - 1; i >= 0; i--) {
    if (ls_stack[i].m != m) continue;
    uint64_t held = __rdtsc() - ls_stack[i].since;
    site = ls_stack[i].site;
    ls_class_t *k = &ls[ls_sites[site].cls];
    ls_add(&k->held_cycles, held);
    ls_add(&ls_sites[site].held_cycles, held);
    int b = held ? 63 - __builtin_clzll(held) : 0;
    ls_add(&k->hist[b < LS_BUCKETS ? b : LS_BUCKETS - 1], 1);
    ls_add(&k->hist_sum[b < LS_BUCKETS ? b : LS_BUCKETS - 1], held);
    ls_stack[i] = ls_stack[d - 1];
    break;
  }
  if (ls_depth > 0) ls_depth--;
  return site;
}

int lockstat_unlock(pthread_mutex_t *m) {
  ls_pop(m);
  return pthread_mutex_unlock(m);
}

int lockstat_clockwait(pthread_cond_t *c, pthread_mutex_t *m, clockid_t clk, const struct timespec *t) {
  int site = ls_pop(m);
  int r = pthread_cond_clockwait(c, m, clk, t);
  if (site >= 0) {
    ls_push(m, site); /* the hold goes on, but is not a new acquisition */
    atomic_fetch_sub_explicit(&ls[ls_sites[site].cls].acquired, 1, memory_order_relaxed);
    atomic_fetch_sub_explicit(&ls_sites[site].acquired, 1, memory_order_relaxed);
  }
  return r;
}

static uint64_t ls_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
static uint64_t ls_t0_ns, ls_t0_tsc;

__attribute__((constructor)) static void ls_start(void) {
  ls_t0_ns = ls_ns();
  ls_t0_tsc = __rdtsc();
}

/* The hold at quantile q, in cycles: the geometric middle of its log2 bucket. */
static double ls_quantile(const ls_class_t *k, double q) {
  uint64_t n = 0, seen = 0;
  for (int b = 0; b < LS_BUCKETS; b++) n += k->hist[b];
  if (n == 0) return 0;
  for (int b = 0; b < LS_BUCKETS; b++) {
    seen += k->hist[b];
    if ((double)seen >= q * (double)n) return (double)(1ull << b) * 1.41421356;
  }
  return 0;
}

/* The mean hold of those under 2^20 cycles (a fraction of a millisecond): a holder
 * preempted for a time slice on a busy machine is left out; so is a rare slow hold. */
static double ls_trimmed_mean(const ls_class_t *k) {
  uint64_t n = 0, sum = 0;
  for (int b = 0; b < 20; b++) n += k->hist[b], sum += k->hist_sum[b];
  return n ? (double)sum / (double)n : 0;
}

static void ls_line(const char *fmt, ...) {
  char line[320];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (n > 0) error_write_stderr(line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

/* "lockstat CLASS acquired=N contended=N held_ns=N wait_ns=N p50_held_ns=N p90_held_ns=N
 * trim_held_ns=N" per class, then "lockstat_site CLASS SITE acquired=N held_ns=N" per site. */
__attribute__((destructor)) static void ls_report(void) {
  uint64_t ns = ls_ns() - ls_t0_ns, cyc = __rdtsc() - ls_t0_tsc;
  double f = cyc ? (double)ns / (double)cyc : 0; /* ns per cycle */
  for (int i = 0; i < LS_CLASSES; i++)
    ls_line(
        "lockstat %s acquired=%llu contended=%llu held_ns=%.0f wait_ns=%.0f p50_held_ns=%.0f "
        "p90_held_ns=%.0f trim_held_ns=%.0f\n",
        ls_names[i], (unsigned long long)ls[i].acquired, (unsigned long long)ls[i].contended,
        (double)ls[i].held_cycles * f, (double)ls[i].wait_cycles * f, ls_quantile(&ls[i], 0.5) * f,
        ls_quantile(&ls[i], 0.9) * f, ls_trimmed_mean(&ls[i]) * f);
  int n = ls_nsites < LS_SITES ? ls_nsites : LS_SITES;
  for (int i = 0; i < n; i++)
    if (ls_sites[i].acquired)
      ls_line("lockstat_site %s %s acquired=%llu held_ns=%.0f\n", ls_names[ls_sites[i].cls], ls_sites[i].name,
              (unsigned long long)ls_sites[i].acquired, (double)ls_sites[i].held_cycles * f);
}
#endif
