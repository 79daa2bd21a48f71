/* Lock statistics for scaling studies (docs/scaling.md): built only with the CMake option
 * HAKMEM_LOCKSTAT=ON, which defines HAKMEM_LOCKSTAT=1. Every pthread_mutex_lock/trylock/
 * unlock and cond wait in the library then goes through lockstat.c, which counts, per
 * lock class (the region lock, the heap-list lock, heap locks, others), acquisitions,
 * contended acquisitions, time held (total and its median) and waited, and per call site
 * the acquisitions and time held, and prints them at exit.
 * Release builds compile none of it. Included by internal.h after <pthread.h>. */
#ifndef HAKMEM_LOCKSTAT_H
#define HAKMEM_LOCKSTAT_H

#if defined(HAKMEM_LOCKSTAT) && HAKMEM_LOCKSTAT
#include <time.h>

#pragma GCC visibility push(hidden)
int hak_ls_lock(pthread_mutex_t *m, const char *site, int *id);
int hak_ls_trylock(pthread_mutex_t *m, const char *site, int *id);
int hak_ls_unlock(pthread_mutex_t *m);
int hak_ls_clockwait(pthread_cond_t *c, pthread_mutex_t *m, clockid_t clk, const struct timespec *t);
#pragma GCC visibility pop

/* A site (file:line) gets its number, and its lock class from its text ("&region_lock",
 * "&h->lock"), at its first call. */
#define HAK_LS_STR2(x) #x
#define HAK_LS_STR(x) HAK_LS_STR2(x)
#define pthread_mutex_lock(m) \
  ({ static int ls_site_ = -1; hak_ls_lock((m), __FILE__ ":" HAK_LS_STR(__LINE__) " " #m, &ls_site_); })
#define pthread_mutex_trylock(m) \
  ({ static int ls_site_ = -1; hak_ls_trylock((m), __FILE__ ":" HAK_LS_STR(__LINE__) " " #m, &ls_site_); })
#define pthread_mutex_unlock(m) hak_ls_unlock(m)
#define pthread_cond_clockwait(c, m, clk, t) hak_ls_clockwait((c), (m), (clk), (t))
#endif

#endif
