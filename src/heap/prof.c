/* The sampling heap profiler: which call stacks allocated what, and what is still live
 * (docs/profiling.md; the tables and pool are prof_table.c's).
 *
 * Sampling. Each heap counts down `prof_left` by every allocation's size; the allocation
 * that takes it below zero is sampled, and the next countdown is drawn from an
 * exponential distribution of mean HAKMEM_PROF_RATE bytes, so that no size or loop can
 * line up with the sampling points. A block of s bytes is then sampled with probability
 * 1 - exp(-s/R), and a sample stands for 1 / (1 - exp(-s/R)) blocks of s bytes: the
 * estimated totals are unbiased. Rate 1 samples every allocation with weight 1.
 *
 * Stacks come from prof_unwind.c (libgcc's unwinder, with a per-thread cache), before
 * prof_lock is taken; a thread-local flag keeps any allocation it, or the dynamic loader
 * under it, makes from being sampled in turn (such allocations are counted, not
 * sampled). Leading frames inside this library are dropped, so a stack starts at the
 * function that called malloc.
 *
 * Files are written with prof_write_file, which allocates nothing, outside prof_lock:
 * at exit, at each new peak of the estimated live bytes HAKMEM_PROF_PEAK_STEP above the
 * last one written, and on hak_prof_dump. */

#include "heap/heap.h"
#include "hakmem.h"

#include <errno.h>
#include <limits.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifndef __GLIBC__ /* strerrordesc_np is glibc's (2.32); musl's strerror takes no lock */
#define strerrordesc_np strerror
#endif

#define PROF_DEFAULT_PREFIX "hakmem-prof"

_Atomic bool prof_on;
static long prof_rate; /* 0: HAKMEM_PROF_RATE's, taken at the first start */
static uint64_t start_ns, peak_mark;
_Atomic bool prof_ever_on;
static _Atomic bool peak_writing, write_warned;
static _Atomic unsigned dump_seq;

static __thread bool prof_busy __attribute__((tls_model("initial-exec")));
static __thread uint64_t prof_rng __attribute__((tls_model("initial-exec")));

/* ---- numbers: no libm in the allocator --------------------------------------------- */
static double ln(double x) { /* x > 0 */
  union {
    double d;
    uint64_t u;
  } v = {x};
  int e = (int)((v.u >> 52) & 0x7ff) - 1023;
  v.u = (v.u & ~((uint64_t)0x7ff << 52)) | ((uint64_t)1023 << 52); /* mantissa in [1, 2) */
  double t = (v.d - 1) / (v.d + 1), t2 = t * t, sum = 0, term = t;
  for (int k = 1; k < 40; k += 2) {
    sum += term / k;
    term *= t2;
  }
  return e * 0.69314718055994530942 + 2 * sum;
}

/* 1 - exp(-x), x >= 0, accurate for small x too. */
static double one_minus_exp_neg(double x) {
  if (x < 1e-3) return x - x * x / 2 + x * x * x / 6;
  if (x > 40) return 1;
  int k = (int)(x / 0.69314718055994530942);
  double r = x - k * 0.69314718055994530942, term = 1, e = 1;
  for (int i = 1; i < 20; i++) {
    term *= -r / i;
    e += term;
  }
  while (k-- > 0) e *= 0.5; /* exp(-x) = 2^-k exp(-r) */
  return 1 - e;
}

static uint64_t rng_next(void) {
  if (prof_rng == 0) prof_rng = (process_cookie ^ (uintptr_t)&prof_rng) | 1;
  prof_rng ^= prof_rng >> 12;
  prof_rng ^= prof_rng << 25;
  prof_rng ^= prof_rng >> 27;
  return prof_rng * 0x2545F4914F6CDD1Dull;
}

/* Bytes to the next sample: exponential with mean prof_rate; 0 in exact mode. */
static int64_t next_interval(void) {
  if (prof_rate <= 1) return 0;
  double u = ((rng_next() >> 11) + 1) * (1.0 / 9007199254740992.0); /* (0, 1] */
  double d = -ln(u) * (double)prof_rate;
  return d > 4e18 ? (int64_t)4e18 : (int64_t)d;
}

static double sample_scale(size_t n) {
  if (prof_rate <= 1) return 1;
  return 1 / one_minus_exp_neg((double)n / (double)prof_rate);
}

/* ---- files ------------------------------------------------------------------------- */
static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Writes the tables as a profile to path; 0 or a negative errno. */
static int write_profile(const char *path) {
  if (prof_stacks == NULL) return -ENODATA;
  size_t map = PROF_STACK_SLOTS * sizeof(prof_sample_t);
  prof_sample_t *out = os_map(map);
  if (out == NULL) return -ENOMEM;
  size_t n = prof_snapshot(out);
  /* Stack entries never change once made, so the frames are read unlocked. */
  uint64_t now = now_ns();
  int rc = prof_write_file(path, out, n, prof_rate, start_ns, now > start_ns ? now - start_ns : 0);
  os_unmap(out, map);
  return rc;
}

/* prefix.pid.what.heap (what may be empty) into buf; false if it does not fit. */
static bool profile_path(char *buf, size_t size, const char *what) {
  const char *prefix = opt.prof_prefix ? opt.prof_prefix : PROF_DEFAULT_PREFIX;
  char pid[24];
  pid[error_fmt_dec(pid, (uint64_t)getpid())] = '\0';
  size_t lp = strlen(prefix), lq = strlen(pid), lw = strlen(what);
  if (lp + lq + lw + 8 > size) return false;
  memcpy(buf, prefix, lp);
  buf[lp] = '.';
  memcpy(buf + lp + 1, pid, lq);
  char *e = buf + lp + 1 + lq;
  if (lw) {
    *e++ = '.';
    memcpy(e, what, lw);
    e += lw;
  }
  memcpy(e, ".heap", 6);
  return true;
}

/* An automatic write (exit, peak): one line on failure, once per process; the default
 * file name is announced. */
static void write_auto(const char *what) {
  char path[4096];
  int rc = profile_path(path, sizeof path, what) ? write_profile(path) : -ENAMETOOLONG;
  if (rc < 0) {
    if (!atomic_exchange(&write_warned, true)) {
      const char *why = strerrordesc_np(-rc);
      error_write_str("hakmem: cannot write heap profile ");
      error_write_str(rc == -ENAMETOOLONG ? "(HAKMEM_PROF_PREFIX too long)" : path);
      error_write_str(": ");
      error_write_str(why ? why : "error");
      error_write_str("; the program goes on without it\n");
    }
  } else if (opt.prof_prefix == NULL && what[0] == '\0') {
    error_write_str("hakmem: heap profile written to ");
    error_write_str(path);
    error_write_str("\n");
  }
}

static void peak_check(void) {
  if (opt.prof_peak_step <= 0) return;
  uint64_t step = (uint64_t)opt.prof_peak_step;
  if (atomic_load_explicit(&prof_counts.inuse_est, memory_order_relaxed) < peak_mark + step) return;
  if (atomic_exchange(&peak_writing, true)) return;
  pthread_mutex_lock(&prof_lock);
  bool due = prof_counts.inuse >= (double)(peak_mark + step);
  if (due) peak_mark = (uint64_t)prof_counts.inuse;
  pthread_mutex_unlock(&prof_lock);
  if (due) write_auto("peak");
  atomic_store(&peak_writing, false);
}

/* ---- sampling ---------------------------------------------------------------------- */
void *prof_sample_on(hak_heap_t *h, size_t n, size_t align, bool zero) {
  if (prof_rate > 1 && h->prof_left + (int64_t)n == 0) {
    /* A countdown not started (a new heap, or profiling just started): starting it at 0
     * would sample every heap's first allocation. Draw it, and count this one. */
    h->prof_left = next_interval() - (int64_t)n;
    if (h->prof_left >= 0) return NULL;
  }
  h->prof_left = next_interval();
  if (prof_busy || n == 0) return NULL;
  prof_busy = true;
  uintptr_t frames[PROF_MAX_DEPTH];
  uint32_t depth = prof_unwind(frames);
  double scale = sample_scale(n);
  void *p = NULL;
  size_t need = n < align ? align : n;
  uint32_t c = NUM_CLASSES;
  if (need <= MID_MAX) {
    c = size_to_class(need);
    if (align > 16) c = c < NUM_CLASSES ? class_aligned_from[__builtin_ctzl(align)][c] : c;
  }
  if (c < NUM_CLASSES) {
    p = prof_record_small(c, n, scale, frames, depth);
    if (p != NULL && zero) memset(p, 0, n);
  } else {
    p = large_alloc(n, align, zero ? LARGE_ZERO : 0);
    if (p != NULL) prof_record_big(p, n, scale, frames, depth);
  }
  prof_busy = false;
  if (p != NULL) peak_check();
  return p;
}

/* ---- start, stop, exit, fork ------------------------------------------------------- */
/* Every heap's countdown restarts, so that heaps made before the start sample too. The
 * store races with the owner's own subtraction; at worst a heap starts a sample late. */
static void restart_heaps(void) {
  pthread_mutex_lock(&heaps_lock);
  for (hak_heap_t *h = heaps_all; h != NULL; h = h->all_next)
    __atomic_store_n(&h->prof_left, 0, __ATOMIC_RELAXED);
  pthread_mutex_unlock(&heaps_lock);
  hak_heap_t *self = tls_heap;
  if (self != &empty_heap) self->prof_left = 0;
}

static void atfork_prepare(void) { pthread_mutex_lock(&prof_lock); }
static void atfork_parent(void) { pthread_mutex_unlock(&prof_lock); }
static void atfork_child(void) {
  pthread_mutex_init(&prof_lock, NULL);
  prof_unwind_atfork_child();
  peak_mark = 0; /* the child's peaks, and its own files under its own pid */
  atomic_store(&write_warned, false);
  atomic_store(&peak_writing, false);
}

HAK_EXPORT int hak_prof_start(size_t rate) {
  if (HAKMEM_SECURE) return ENOTSUP;
  heap_get(); /* the process set-up, and this thread's heap */
  if (!prof_tables_init()) return ENOMEM;
  if (!atomic_load_explicit(&prof_ever_on, memory_order_relaxed)) {
    atomic_store_explicit(&prof_ever_on, true, memory_order_relaxed);
    start_ns = now_ns();
    prof_unwind_init();
    os_atfork(atfork_prepare, atfork_parent, atfork_child);
  }
  if (rate > 0) prof_rate = rate > (size_t)LONG_MAX ? LONG_MAX : (long)rate;
  if (prof_rate == 0) prof_rate = (long)opt.prof_rate;
  atomic_store(&prof_on, true);
  restart_heaps();
  return 0;
}

HAK_EXPORT void hak_prof_stop(void) { atomic_store(&prof_on, false); }

void prof_init(void) {
  if (!opt.prof) return;
  int rc = hak_prof_start(0);
  if (rc != 0) {
    error_write_str("hakmem: HAKMEM_PROF=1 but the profiler cannot start: ");
    error_write_str(strerrordesc_np(rc));
    error_write_str("\n");
  }
}

void prof_exit(void) {
  write_auto("");
  if (opt.prof_leaks) {
    bool busy = prof_busy;
    prof_busy = true; /* dladdr may allocate; that is not a sample */
    pthread_mutex_lock(&prof_lock);
    prof_leak_report(prof_stacks, prof_stack_order, prof_counts.stacks_used, prof_rate, 20);
    pthread_mutex_unlock(&prof_lock);
    prof_busy = busy;
  }
}

HAK_EXPORT int hak_prof_dump(const char *path) {
  char buf[4096];
  if (path == NULL) {
    char what[24];
    what[error_fmt_dec(what, atomic_fetch_add(&dump_seq, 1))] = '\0';
    if (!profile_path(buf, sizeof buf, what)) return ENAMETOOLONG;
    path = buf;
  }
  int rc = write_profile(path);
  return rc < 0 ? -rc : 0;
}

HAK_EXPORT void hak_prof_get_info(hak_prof_info_t *info) {
  pthread_mutex_lock(&prof_lock);
  info->active = atomic_load(&prof_on);
  info->rate = (size_t)(prof_rate != 0 ? prof_rate : opt.prof_rate);
  info->samples = prof_counts.samples;
  info->stacks = prof_counts.stacks_used;
  info->live_samples = prof_counts.live_used;
  info->dropped = prof_counts.stacks_dropped + prof_counts.live_dropped;
  info->live_bytes_estimate = prof_counts.inuse > 0 ? (size_t)prof_counts.inuse : 0;
  info->table_bytes = prof_table_bytes();
  pthread_mutex_unlock(&prof_lock);
}
