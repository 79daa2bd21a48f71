/* Statistics: global figures kept on slow paths, per-class figures gathered on demand
 * by walking the heaps; the text report. Nothing here runs on a malloc/free fast path.
 * The same figures by name, and the report in JSON: ctl.c. */

#include "stats/stats.h"
#include "hakmem.h"

#include <malloc.h>
#include <stdarg.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* How many slab descriptors the walk reads per hold of a heap's lock, at most (plus the
 * rest of the class it is in): the owner's slow paths wait for the lock no longer. */
#define WALK_HOLD_SLABS 256

static size_t walk_queue(const slab_queue_t *q, const slab_t *pinned, uint32_t c, stats_walk_t *w) {
  size_t limit = q->count + 1, seen = 0;
  for (const slab_t *s = q->head; s != NULL && limit-- > 0; s = s->next, seen++) {
    /* Neither the pin nor frees waiting in the remote list are live blocks. */
    uintptr_t remote = atomic_load_explicit(&s->remote, memory_order_relaxed);
    uint32_t waiting = (uint32_t)(remote >> REMOTE_COUNT_SHIFT);
    uint32_t live = __atomic_load_n(&s->used, __ATOMIC_RELAXED) - (s == pinned);
    w->live[c] += live > waiting ? live - waiting : 0;
    w->slabs[c]++;
  }
  return seen;
}

/* The walk. Other threads keep running, so the figures are a snapshot, not an exact
 * count. Each heap's lists are read under its lock, which its owner holds whenever it
 * changes them (and which keeps their slabs from being given away), taken for
 * WALK_HOLD_SLABS slabs at a time; the counts and quarantine slots the owner also
 * writes on its fast paths are read as relaxed atomics. The abandoned lists belong to
 * region_lock, taken once per class. The heap list's lock is held throughout: a thread
 * that starts or exits meanwhile waits for the walk. */
void stats_walk(stats_walk_t *w, uint32_t first, uint32_t end) {
  memset(w, 0, sizeof *w);
  if (end > NUM_CLASSES) end = NUM_CLASSES;
  if (atomic_load_explicit(&init_state, memory_order_acquire) != 2 || first >= end) return;
  /* The caller's own frees into other heaps' slabs count as done: hand them over. */
  if (tls_heap != &empty_heap) heap_remote_flush(tls_heap);
  /* Quarantined blocks are freed, not reusable: subtracted once every heap is walked
   * (a heap's quarantine holds blocks of other heaps' slabs too). */
  uint64_t quarantined[NUM_CLASSES] = {0};
  pthread_mutex_lock(&heaps_lock);
  for (hak_heap_t *h = heaps_all; h != NULL; h = h->all_next) {
    for (uint32_t c = first; c < end;) {
      pthread_mutex_lock(&h->lock);
      for (size_t seen = 0; c < end && seen < WALK_HOLD_SLABS; c++) {
        seen += walk_queue(&h->queue[c], h->pinned[c], c, w);
        seen += walk_queue(&h->full[c], h->pinned[c], c, w);
      }
      pthread_mutex_unlock(&h->lock);
    }
    if (HAKMEM_SECURE) { /* freed, not reusable */
      pthread_mutex_lock(&h->lock);
      for (uint32_t i = 0; i < QUARANTINE_SLOTS; i++) {
        block_t *q = __atomic_load_n(&h->quarantine[i], __ATOMIC_RELAXED);
        if (q == NULL) continue;
        /* Its owner may have released it since: the figure may be stale. */
        uint32_t c = __atomic_load_n(&region_slab_of_racy((uintptr_t)q)->class_idx, __ATOMIC_RELAXED);
        if (c >= first && c < end) quarantined[c]++;
      }
      pthread_mutex_unlock(&h->lock);
    }
  }
  for (uint32_t c = first; c < end; c++) {
    pthread_mutex_lock(&region_lock);
    walk_queue(&heap_abandoned[c], NULL, c, w);
    pthread_mutex_unlock(&region_lock);
    w->live[c] = w->live[c] > quarantined[c] ? w->live[c] - quarantined[c] : 0;
  }
  pthread_mutex_unlock(&heaps_lock);
}

typedef struct totals {
  stats_walk_t w;
  size_t small_in_use, large_in_use, huge_mapped;
} totals_t;

static void gather(totals_t *t) {
  stats_walk(&t->w, 0, NUM_CLASSES);
  t->small_in_use = 0;
  for (unsigned c = 0; c < NUM_CLASSES; c++) t->small_in_use += t->w.live[c] * class_size[c];
  t->large_in_use = atomic_load_explicit(&gstats.large_in_use, memory_order_relaxed);
  t->huge_mapped = atomic_load_explicit(&gstats.huge_mapped, memory_order_relaxed);
}

static void info_of(const totals_t *t, hak_info_t *info) {
  info->in_use = t->small_in_use + t->large_in_use + t->huge_mapped;
  size_t peak = atomic_load_explicit(&gstats.peak_in_use, memory_order_relaxed);
  info->peak_in_use = peak > info->in_use ? peak : info->in_use;
  info->mapped = atomic_load_explicit(&gstats.region_bytes, memory_order_relaxed) + t->huge_mapped;
  info->committed = atomic_load_explicit(&gstats.committed_est, memory_order_relaxed) + t->huge_mapped;
  info->released = atomic_load_explicit(&gstats.purged_bytes, memory_order_relaxed) +
                   atomic_load_explicit(&gstats.released_bytes, memory_order_relaxed);
}

HAK_EXPORT void hak_get_info(hak_info_t *info) {
  totals_t t;
  gather(&t);
  info_of(&t, info);
}

#ifdef __GLIBC__ /* struct mallinfo2 is glibc's (2.33); musl has no mallinfo */
struct mallinfo2 stats_mallinfo2(void) {
  hak_info_t info;
  hak_get_info(&info);
  struct mallinfo2 mi;
  memset(&mi, 0, sizeof mi);
  size_t huge = atomic_load_explicit(&gstats.huge_mapped, memory_order_relaxed);
  mi.arena = info.mapped - huge;
  mi.hblkhd = huge;
  mi.uordblks = info.in_use > huge ? info.in_use - huge : 0;
  mi.fordblks = info.committed > info.in_use ? info.committed - info.in_use : 0;
  mi.usmblks = info.peak_in_use;
  return mi;
}
#endif

#define WHOLE_REPORT_FIRST (64u << 10)

void whole_report_open(whole_report_t *r, int fd) {
  r->fd = fd;
  r->len = 0;
  r->cap = WHOLE_REPORT_FIRST;
  r->at = mmap(NULL, r->cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (r->at == MAP_FAILED) r->at = NULL;
}

void whole_report_put(whole_report_t *r, const char *text, size_t n) {
  if (r->at != NULL && r->len + n > r->cap) {
    void *grown = mremap(r->at, r->cap, 2 * (r->len + n), MREMAP_MAYMOVE);
    if (grown != MAP_FAILED) {
      r->at = grown;
      r->cap = 2 * (r->len + n);
    } else { /* no memory for the rest: what is gathered goes now, the rest as it comes */
      error_write_fd(r->fd, r->at, r->len);
      munmap(r->at, r->cap);
      r->at = NULL;
    }
  }
  if (r->at == NULL) {
    error_write_fd(r->fd, text, n);
    return;
  }
  memcpy(r->at + r->len, text, n);
  r->len += n;
}

void whole_report_close(whole_report_t *r) {
  if (r->at == NULL) return;
  error_write_fd(r->fd, r->at, r->len);
  munmap(r->at, r->cap);
  r->at = NULL;
}

/* Where stderr's report goes: fd 2, or at exit the whole report for options_report_fd. */
static whole_report_t *report_whole;

/* printf into a stack buffer and write(2): no stdio buffers, no allocation. */
static void out(FILE *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void out(FILE *f, const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (n <= 0) return;
  if ((size_t)n >= sizeof buf) n = sizeof buf - 1;
  if (f == stderr && report_whole != NULL) {
    whole_report_put(report_whole, buf, (size_t)n);
  } else if (f == stderr) {
    error_write_fd(2, buf, (size_t)n);
  } else {
    fwrite(buf, 1, (size_t)n, f);
  }
}

static double mib(size_t b) { return (double)b / (1024.0 * 1024.0); }

void stats_print(FILE *f) {
  totals_t t;
  gather(&t);
  hak_info_t info;
  info_of(&t, &info);
  out(f, "hakmem stats (pid %d)\n", (int)getpid());
  out(f, "  build: hakmem %d.%d.%d, %s, %s, %s, %s\n", HAKMEM_VERSION_MAJOR, HAKMEM_VERSION_MINOR,
      HAKMEM_VERSION_PATCH, HAKMEM_SECURE ? "hardened" : "default", HAKMEM_DEBUG ? "debug" : "release",
      BUILD_MUSL ? "musl" : "glibc", BUILD_SHARED ? "shared library" : "static");
  out(f, "  %-8s %10s %12s %10s %12s\n", "class", "size", "live blocks", "slabs", "live bytes");
  for (unsigned c = 0; c < NUM_CLASSES; c++) {
    if (t.w.slabs[c] == 0) continue;
    out(f, "  %-8u %10u %12llu %10llu %12llu\n", c, class_size[c], (unsigned long long)t.w.live[c],
        (unsigned long long)t.w.slabs[c], (unsigned long long)(t.w.live[c] * class_size[c]));
  }
  out(f,
      "  tiers: small+mid %.2f MiB live, large %.2f MiB live (%llu allocated in all, %.2f MiB prefaulted), "
      "huge %.2f MiB mapped (%llu in all)\n",
      mib(t.small_in_use), mib(t.large_in_use), (unsigned long long)atomic_load(&gstats.large_allocs),
      mib(atomic_load(&gstats.large_prefaulted)), mib(t.huge_mapped),
      (unsigned long long)atomic_load(&gstats.huge_allocs));
  out(f,
      "  in use %.2f MiB, peak committed %.2f MiB, mapped %.2f MiB, committed %.2f MiB, returned to OS %.2f "
      "MiB (%.2f purged, %.2f unmapped)\n",
      mib(info.in_use), mib(info.peak_in_use), mib(info.mapped), mib(info.committed), mib(info.released),
      mib(atomic_load(&gstats.purged_bytes)), mib(atomic_load(&gstats.released_bytes)));
  out(f,
      "  limits: soft %.2f MiB, hard %.2f MiB (0: none), %llu give-backs, %llu allocations refused; resident "
      "anonymous memory (the kernel's count) %.2f MiB\n",
      mib((size_t)opt.limit_soft), mib((size_t)opt.limit_hard),
      (unsigned long long)atomic_load(&limit_give_backs), (unsigned long long)atomic_load(&limit_refused),
      mib(os_rss_anon()));
  uint64_t started = atomic_load(&gstats.threads_started);
  uint64_t exited = atomic_load(&gstats.threads_exited);
  out(f, "  remote frees: %llu blocks in %llu pushes\n", (unsigned long long)stats_remote_total(true),
      (unsigned long long)stats_remote_total(false));
  out(f,
      "  purging: %llu passes, %llu by the budget; %llu madvise calls over %.2f MiB; purge thread: %llu "
      "passes (%llu woken early), %llu idle heaps trimmed\n",
      (unsigned long long)atomic_load(&gstats.purge_passes),
      (unsigned long long)atomic_load(&gstats.purge_budget_runs),
      (unsigned long long)atomic_load(&os_purge_calls), mib(atomic_load(&os_purge_bytes)),
      (unsigned long long)purge_thread_count(PT_PASSES), (unsigned long long)purge_thread_count(PT_WOKEN),
      (unsigned long long)purge_thread_count(PT_TRIMS));
  out(f,
      "  huge pages: %.2f MiB, %llu ranges collapsed, %llu fresh ranges made huge, %llu faulted huge, "
      "%llu collapse failures, "
      "%llu left to khugepaged, %llu given back whole, %llu broken by purging; %llu of the collapsed in huge "
      "blocks, %llu of huge blocks faulted huge\n",
      mib(atomic_load(&gstats.thp_huge_bytes)), (unsigned long long)atomic_load(&gstats.thp_collapsed),
      (unsigned long long)atomic_load(&gstats.thp_fresh),
      (unsigned long long)atomic_load(&gstats.thp_faulted),
      (unsigned long long)atomic_load(&gstats.thp_failed),
      (unsigned long long)atomic_load(&gstats.thp_advised),
      (unsigned long long)atomic_load(&gstats.thp_returned_whole),
      (unsigned long long)atomic_load(&gstats.thp_broken),
      (unsigned long long)atomic_load(&gstats.thp_block_collapsed),
      (unsigned long long)atomic_load(&gstats.thp_block_faulted));
  out(f,
      "  threads: %llu alive, %llu exited; %llu heaps created, %llu taken over from exited threads (%llu by "
      "a thread that had freed their blocks; %llu waits for one to be parked, %llu in vain), %llu dissolved; "
      "%llu slabs adopted, %llu taken back from idle heaps\n",
      (unsigned long long)(started > exited ? started - exited : 0), (unsigned long long)exited,
      (unsigned long long)atomic_load(&gstats.heaps_created),
      (unsigned long long)atomic_load(&gstats.heaps_taken_over),
      (unsigned long long)atomic_load(&gstats.heaps_taken_by_free),
      (unsigned long long)atomic_load(&gstats.heap_waits),
      (unsigned long long)atomic_load(&gstats.heap_waits_in_vain),
      (unsigned long long)atomic_load(&gstats.heaps_dissolved),
      (unsigned long long)atomic_load(&gstats.slabs_adopted),
      (unsigned long long)atomic_load(&gstats.slabs_reclaimed_idle));
  bool map_reserved = __atomic_load_n(&slab_map_units, __ATOMIC_ACQUIRE) != 0;
  out(f, "  slab map: %s\n",
      map_reserved ? "reserved (free's fast path)" : "not reserved (every free asks the region header)");
  uint64_t short_maps = atomic_load(&gstats.short_mappings);
  if (short_maps != 0)
    out(f,
        "  address space: %llu regions or heap chunks mapped short of 64 MiB (an address-space "
        "limit, ulimit -v)\n",
        (unsigned long long)short_maps);
  out(f,
      "  options: purge_delay_ms=%ld region_cache=%ld thp=%s stats=%s background=%d prof=%d "
      "prof_rate=%ld prof_peak_step=%ld prof_leaks=%d prof_prefix=%s stats_file=%s limit_soft=%ld "
      "limit_hard=%ld limit_from_cgroup=%d\n",
      __atomic_load_n(&opt.purge_delay_ms, __ATOMIC_RELAXED),
      __atomic_load_n(&opt.region_cache, __ATOMIC_RELAXED),
      opt.thp_collapse_only ? "collapse"
      : opt.thp             ? "1"
                            : "0",
      __atomic_load_n(&opt.stats_json, __ATOMIC_RELAXED) ? "json"
      : __atomic_load_n(&opt.stats, __ATOMIC_RELAXED)    ? "1"
                                                         : "0",
      (int)opt.background, (int)opt.prof, opt.prof_rate, opt.prof_peak_step, (int)opt.prof_leaks,
      opt.prof_prefix ? opt.prof_prefix : "(default)", opt.stats_file ? opt.stats_file : "(stderr)",
      __atomic_load_n(&opt.limit_soft, __ATOMIC_RELAXED), __atomic_load_n(&opt.limit_hard, __ATOMIC_RELAXED),
      (int)opt.limit_from_cgroup);
  hak_prof_info_t prof;
  hak_prof_get_info(&prof);
  if (prof.table_bytes != 0)
    out(f,
        "  profiler: %s, rate %zu, %llu samples, %zu stacks, %zu live (%.2f MiB est.), %llu dropped; tables "
        "%.2f MiB mapped\n",
        prof.active ? "on" : "off", prof.rate, (unsigned long long)prof.samples, prof.stacks,
        prof.live_samples, mib(prof.live_bytes_estimate), (unsigned long long)prof.dropped,
        mib(prof.table_bytes));
}

/* HAKMEM_STATS=1: the text report at exit, where options_report_fd says. */
void stats_print_at_exit(void) {
  bool own_file;
  int fd = options_report_fd(&own_file);
  if (fd < 0) return;
  whole_report_t whole;
  whole_report_open(&whole, fd);
  report_whole = &whole;
  stats_print(stderr);
  report_whole = NULL;
  whole_report_close(&whole);
  options_report_done(fd);
}

HAK_EXPORT void hak_stats_print(FILE *f) { stats_print(f ? f : stderr); }
HAK_EXPORT void hak_malloc_stats(void) { stats_print(stderr); }
