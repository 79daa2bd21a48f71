/* The lock-order checker of Debug builds (src/base/lock_order.c), with the library's own
 * locks, taken in wrong orders planted here: each case runs in a child, which must abort
 * with the one line that names both locks, their ranks and the lines that took them.
 *
 *   unit_lock_order order    heaps_lock while holding region_lock
 *   unit_lock_order heaps    two heap locks in address order pass; the other way aborts
 *   unit_lock_order again    region_lock taken twice (a self-deadlock without the check)
 *   unit_lock_order trylock  a trylock out of order passes; the lock counts as held
 *   unit_lock_order wait     a cond wait retakes its lock: in order passes, not aborts
 *   unit_lock_order release  a lock released that the thread does not hold
 *   unit_lock_order init     a lock made anew (as fork children do) is held no more
 *   unit_lock_order unranked a lock missing from the table of ranks
 * Exits 1 when the child does anything else (with the checker compiled out, it runs on:
 * exits 0, or is stopped by an alarm where it would deadlock). */
#include "heap/heap.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

static int *at; /* shared with the child: the lines of its lock calls */
static hak_heap_t pair[2];
static pthread_mutex_t spare_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;

static void wait_past(void) {
  struct timespec past = {0, 0}; /* returns at once: ETIMEDOUT */
  at[0] = __LINE__, pthread_cond_clockwait(&cond, &heaps_lock, CLOCK_MONOTONIC, &past);
}

static void case_order(void) {
  at[1] = __LINE__, pthread_mutex_lock(&region_lock);
  at[0] = __LINE__, pthread_mutex_lock(&heaps_lock);
}

static void case_heaps(void) {
  for (int i = 0; i < 2; i++) pthread_mutex_init(&pair[i].lock, NULL);
  pthread_mutex_lock(&pair[0].lock);
  pthread_mutex_lock(&pair[1].lock);
  pthread_mutex_unlock(&pair[0].lock);
  pthread_mutex_unlock(&pair[1].lock);
  at[1] = __LINE__, pthread_mutex_lock(&pair[1].lock);
  at[0] = __LINE__, pthread_mutex_lock(&pair[0].lock);
}

static void case_again(void) {
  at[1] = __LINE__, pthread_mutex_lock(&region_lock);
  at[0] = __LINE__, pthread_mutex_lock(&region_lock);
}

static void case_trylock(void) {
  pthread_mutex_lock(&region_lock);
  at[1] = __LINE__ + 1; /* the trylock's line */
  if (pthread_mutex_trylock(&heaps_lock) != 0) exit(3);
  at[0] = __LINE__, pthread_mutex_lock(&prof_lock);
}

static void case_wait(void) {
  pthread_mutex_lock(&heaps_lock);
  wait_past();
  at[1] = __LINE__, pthread_mutex_lock(&region_lock);
  wait_past();
}

static void case_release(void) { at[0] = __LINE__, pthread_mutex_unlock(&region_lock); }

static void case_init(void) {
  pthread_mutex_lock(&region_lock);
  pthread_mutex_init(&region_lock, NULL);
  pthread_mutex_lock(&heaps_lock);
  pthread_mutex_unlock(&heaps_lock);
}

static void case_unranked(void) { at[0] = __LINE__, pthread_mutex_lock(&spare_lock); }

static const struct {
  const char *name;
  void (*run)(void);
  const char *expect; /* printf format of the line, with at[0] and at[1]; NULL: exits 0 */
} cases[] = {
    {"order", case_order,
     "hakmem: lock order: takes heaps_lock (rank 2) at unit_lock_order.c:%d while holding "
     "region_lock (rank 4) taken at unit_lock_order.c:%d\n"},
    {"heaps", case_heaps,
     "hakmem: lock order: takes pair[0].lock (rank 3) at unit_lock_order.c:%d while holding one of "
     "its rank at a higher address: pair[1].lock (rank 3) taken at unit_lock_order.c:%d\n"},
    {"again", case_again,
     "hakmem: lock order: takes region_lock (rank 4) at unit_lock_order.c:%d, which this thread "
     "holds already: region_lock (rank 4) taken at unit_lock_order.c:%d\n"},
    {"trylock", case_trylock,
     "hakmem: lock order: takes prof_lock (rank 1) at unit_lock_order.c:%d while holding "
     "heaps_lock (rank 2) taken at unit_lock_order.c:%d\n"},
    {"wait", case_wait,
     "hakmem: lock order: takes heaps_lock (rank 2) at unit_lock_order.c:%d while holding "
     "region_lock (rank 4) taken at unit_lock_order.c:%d\n"},
    {"release", case_release,
     "hakmem: lock order: releases region_lock (rank 4) at unit_lock_order.c:%d, which this thread "
     "does not hold\n"},
    {"init", case_init, NULL},
    {"unranked", case_unranked,
     "hakmem: lock order: takes spare_lock (no rank) at unit_lock_order.c:%d, a lock missing from "
     "lock_order.c's table of ranks\n"},
};

/* The child's stderr, and how it ended. */
static int run_child(void (*run)(void), char *out, size_t cap) {
  int fd[2];
  if (pipe(fd) != 0) exit(2);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fd[1], 2);
    close(fd[0]);
    alarm(20); /* where it would deadlock without the checker */
    run();
    _exit(0);
  }
  close(fd[1]);
  size_t n = 0;
  for (ssize_t r; n + 1 < cap && (r = read(fd[0], out + n, cap - 1 - n)) > 0;) n += (size_t)r;
  out[n] = '\0';
  close(fd[0]);
  int status;
  waitpid(pid, &status, 0);
  return status;
}

int main(int argc, char **argv) {
  at = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (argc != 2 || at == MAP_FAILED) return 2;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    if (strcmp(argv[1], cases[i].name) != 0) continue;
    char out[1024], want[512] = "";
    int status = run_child(cases[i].run, out, sizeof out);
    if (cases[i].expect != NULL) snprintf(want, sizeof want, cases[i].expect, at[0], at[1]);
    bool aborted = WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
    bool ok = cases[i].expect ? aborted && strcmp(out, want) == 0
                              : WIFEXITED(status) && WEXITSTATUS(status) == 0 && out[0] == '\0';
    bool sig = WIFSIGNALED(status);
    printf("unit_lock_order %s: the child %s %d; its stderr: %s", argv[1], sig ? "died of signal" : "exited",
           sig ? WTERMSIG(status) : WEXITSTATUS(status), out[0] ? out : "(nothing)\n");
    if (!ok && cases[i].expect) printf("unit_lock_order %s: FAILED, wanted an abort with: %s", argv[1], want);
    if (!ok && !cases[i].expect) printf("unit_lock_order %s: FAILED, wanted exit 0, no output\n", argv[1]);
    return ok ? 0 : 1;
  }
  return 2;
}
