/* stats/: the report (text, JSON), the walk of the heaps, figures and options by name. */
#ifndef HAKMEM_STATS_H
#define HAKMEM_STATS_H

#include "heap/heap.h"
#include "hakmem.h"

#pragma GCC visibility push(hidden)

/* ---- which build: the build.* names and the report's build line -------------------- */
#define BUILD_VERSION (HAKMEM_VERSION_MAJOR * 10000 + HAKMEM_VERSION_MINOR * 100 + HAKMEM_VERSION_PATCH)
#ifdef __GLIBC__
#define BUILD_MUSL 0
#else
#define BUILD_MUSL 1 /* musl-gcc: the only other C library hakmem builds with */
#endif
#ifndef HAKMEM_SHARED
#define HAKMEM_SHARED 0 /* 1 in the shared libraries (CMakeLists.txt) */
#endif
#define BUILD_SHARED HAKMEM_SHARED

/* ---- stats.c: the report, read on demand ------------------------------------------ */
/* Live blocks and slabs of classes [first, end) (the rest stay zero), walking every heap
 * and the abandoned lists: a snapshot, as other threads keep allocating. */
typedef struct stats_walk {
  uint64_t live[NUM_CLASSES], slabs[NUM_CLASSES];
} stats_walk_t;
void stats_walk(stats_walk_t *w, uint32_t first, uint32_t end);
void stats_print(FILE *out);
void stats_print_at_exit(void); /* HAKMEM_STATS=1 */
/* A report at exit is gathered whole and written with one write(2): processes sharing a
 * file (a launcher's children) then each append one whole report, never pieces of several.
 * Mapped, not malloc'd: the report must not change the figures it reports. */
typedef struct whole_report {
  char *at;
  size_t len, cap;
  int fd;
} whole_report_t;
void whole_report_open(whole_report_t *r, int fd);
void whole_report_put(whole_report_t *r, const char *text, size_t n);
void whole_report_close(whole_report_t *r); /* writes it all, unmaps */
#ifdef __GLIBC__
struct mallinfo2 stats_mallinfo2(void);
#endif

/* ---- ctl_names.c: the table of names ------------------------------------------------
 * What each name reads (the figure) and which classes it needs walked. */
/* A row of related figures per line. */
/* clang-format off */
enum figure {
  F_IN_USE, F_PEAK, F_MAPPED, F_COMMITTED, F_RELEASED,
  F_SMALL_BLOCKS, F_SMALL_BYTES, F_SMALL_SLABS, F_MID_BLOCKS, F_MID_BYTES, F_MID_SLABS,
  F_LARGE_BYTES, F_LARGE_ALLOCS, F_LARGE_PREFAULTED, F_HUGE_BYTES, F_HUGE_ALLOCS,
  F_CLASS_SIZE, F_CLASS_BLOCKS, F_CLASS_SLABS, F_CLASS_BYTES,
  F_REMOTE_PUSHES, F_REMOTE_BLOCKS,
  F_PURGE_PASSES, F_PURGE_BUDGET, F_MADVISE_CALLS, F_MADVISE_BYTES, F_PURGED, F_UNMAPPED,
  F_PURGE_THREADS, F_PURGE_THREAD_PASSES, F_PURGE_THREAD_WOKEN, F_PURGE_THREAD_TRIMS,
  F_THP_BYTES, F_THP_COLLAPSED, F_THP_FRESH, F_THP_FAULTED, F_THP_FAILED, F_THP_ADVISED, F_THP_WHOLE, F_THP_BROKEN,
  F_THP_BLOCKS, F_THP_BLOCKS_FAULTED,
  F_THREADS_ALIVE, F_THREADS_EXITED,
  F_HEAPS_CREATED, F_HEAPS_TAKEN, F_HEAPS_BY_FREE, F_HEAP_WAITS, F_HEAP_WAITS_VAIN,
  F_HEAPS_DISSOLVED,
  F_SLABS_ADOPTED, F_SLABS_IDLE, F_SLAB_MAP,
  F_OPT_PURGE_DELAY, F_OPT_REGION_CACHE, F_OPT_THP, F_OPT_STATS, F_OPT_BACKGROUND,
  F_BUILD_SECURE, F_BUILD_DEBUG, F_BUILD_CLASSES, F_BUILD_VALGRIND, F_BUILD_VERSION, F_BUILD_MUSL,
  F_BUILD_SHARED, F_CHECKER_MEMCHECK, F_CHECKER_SANITIZER,
  F_OS_UNMAP_REFUSED, F_OS_RSS_ANON, F_LIMIT_SOFT, F_LIMIT_HARD, F_LIMIT_CGROUP, F_LIMIT_COMMITTED,
  F_LIMIT_GIVE_BACKS, F_LIMIT_REFUSED, F_DEBUG_FAULTS, F_DEBUG_FAULT_CALLS,
  F_DEBUG_HOLD_PURGE,
};

/* Which classes a figure needs walked. */
enum walk { W_NONE, W_ALL, W_SMALL, W_MID, W_CLASS };

/* clang-format on */
typedef struct ctl_entry {
  hak_ctl_desc_t d; /* first: hak_ctl_describe hands out its address */
  uint8_t figure, walk;
} ctl_entry_t;
/* The names, in the order of the JSON report. */
#define CLASS_PREFIX "class.<n>." /* the per-class names */
extern const ctl_entry_t ctl_table[];
extern const size_t ctl_table_size;

/* ---- ctl.c: figures and options by name ------------------------------------------ */
void ctl_ensure_init(void); /* the figures need the process set up */
/* Entry `index` of the table of names (hak_ctl_describe), for class cls. */
uint64_t ctl_value(size_t index, uint32_t cls, const stats_walk_t *w);

#pragma GCC visibility pop

#endif
