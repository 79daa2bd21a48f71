/* stats/: the report (text, JSON), the walk of the heaps, figures and options by name. */
#ifndef HAKMEM_STATS_H
#define HAKMEM_STATS_H

#include "heap/heap.h"

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
struct mallinfo2 hak_mallinfo2(void);
#endif

/* ---- ctl.c: figures and options by name ------------------------------------------ */
void ctl_ensure_init(void); /* the figures need the process set up */
/* Entry `index` of the table of names (hak_ctl_describe), for class cls. */
uint64_t ctl_value(size_t index, uint32_t cls, const stats_walk_t *w);

#pragma GCC visibility pop

#endif
