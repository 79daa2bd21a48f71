/* slab_walk: every 16-byte address of a slab against every state of the slab.
 *
 * For each size class, children forked from the same state each take a slab of the
 * class through some of its states, and probe every 16-byte address of the slab's span
 * at each: every block start with free, realloc, malloc_usable_size, free_sized and
 * hak_heap_realloc, every other address with free, and with realloc and
 * malloc_usable_size too those in the span's first and last 4 KiB and 16 bytes into,
 * halfway through and 16 bytes before the end of each block (every address with
 * WALK_ALL_OPS set; walk_probe.c), against a model of which blocks are out; a 16-byte
 * class's every address is a block start. A live block must give its
 * size (and realloc to its size must keep it); any other address must be reported
 * (hakmem's one line naming the pointer: invalid pointer or double free) and abort.
 * Each state is checked to have been reached (a figure or the page tables say so)
 * before it is probed, so no state can be skipped unseen. (The hardened build's
 * quarantine keeps up to 256 freed blocks: blocks of another class are freed to push
 * them out where the slab must empty.)
 *   walk      one child finds where the class's next fresh slab will lie (it allocates
 *             until the class's slab count goes up twice), a second takes that slab:
 *             fresh (one block out, the rest not carved), partly carved (a third out,
 *             every other one freed again), full, after remote frees (another thread
 *             frees half the live blocks), emptied (the rest freed; the remote frees
 *             not yet collected), purged (malloc_trim: the span's pages are gone)
 *   cached    the owner fills a slab and frees every block: the span leaves the class
 *             (to the heap's span cache, or to its region for spans over 2 units) with
 *             its pages resident; then purged
 *   abandoned a thread fills a slab, frees every other block and exits: its heap is
 *             parked, then dissolved (malloc_trim), the slab abandoned; another thread
 *             frees into it; a third adopts it and allocates from it
 *   user heap a user heap fills a slab, frees a third of it, and is destroyed: every
 *             former block must be reported; the thread's next heap takes the slab
 *             over (the default build's spare) and allocates from it
 *   slab_walk [FIRST_CLASS [LAST_CLASS]]
 * Exit status: 0 pass, 1 fail. */
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_util.h"
#include "walk.h"

#pragma GCC diagnostic ignored "-Wpragmas"
#pragma GCC diagnostic ignored "-Wuse-after-free"

#define QUARANTINE_MAX 256 /* blocks the hardened build's quarantine may keep, at most */

static walk_model_t slab;

static void model_span(walk_model_t *m) {
  m->lo = m->start & ~(UNIT - 1);
  m->hi = (m->start + (uintptr_t)m->count * m->size + UNIT - 1) & ~(UNIT - 1);
}

static void *heap_alloc(hak_heap_t *u, size_t n) { return u ? hak_heap_malloc(u, n) : malloc(n); }

/* Allocates until the class's slab count has gone up once: the last block is the first
 * of a fresh slab. */
static void *first_of_fresh_slab(hak_heap_t *u, unsigned c, size_t n) {
  uint64_t before = stat_of("class.%u.slabs", c);
  for (unsigned i = 0; i < 100000; i++) {
    void *p = heap_alloc(u, n);
    if (p == NULL) return NULL;
    if (stat_of("class.%u.slabs", c) > before) return p;
  }
  return NULL;
}

/* A fresh slab filled: every block from the first of a fresh slab to the one before
 * the next slab's first, all live. Returns the next slab's first block. */
static void *fill_slab(walk_model_t *m, hak_heap_t *u) {
  void *p = first_of_fresh_slab(u, m->c, m->n), *v[MAX_BLOCKS];
  uint64_t slabs = stat_of("class.%u.slabs", m->c);
  uintptr_t min = UINTPTR_MAX, max = 0;
  unsigned count = 0;
  while (p != NULL && stat_of("class.%u.slabs", m->c) == slabs && count < MAX_BLOCKS) {
    if ((uintptr_t)p < min) min = (uintptr_t)p;
    if ((uintptr_t)p > max) max = (uintptr_t)p;
    v[count++] = p;
    p = heap_alloc(u, m->n);
  }
  if (p == NULL || count == 0 || (max - min) % m->size != 0 || (max - min) / m->size + 1 != count)
    walk_fatal("slab_walk: class %u: the blocks of a fresh slab are not one run\n", m->c);
  m->start = min, m->count = count;
  model_span(m);
  for (unsigned i = 0; i < count; i++) {
    unsigned k = (unsigned)(((uintptr_t)v[i] - min) / m->size);
    m->live[k] = true, m->blocks[k] = v[i];
  }
  return p;
}

/* Frees the live blocks k of m with k % every == which (every 1: all of them). */
static void free_some(walk_model_t *m, unsigned every, unsigned which) {
  for (unsigned k = 0; k < m->count; k++)
    if (m->live[k] && k % every == which) free(m->blocks[k]), m->live[k] = false;
}

/* Hardened build: the blocks m's thread freed leave its quarantine (for blocks of
 * another class: the slots are picked at random). */
static void flush_quarantine(const walk_model_t *m) {
  size_t other = m->size > 256 ? 24 : 1000;
  for (int i = 0; MISUSE_BUILD && i < 32 * QUARANTINE_MAX; i++) free(tu_hide(malloc(other)));
}

static unsigned live_count(const walk_model_t *m) {
  unsigned n = 0;
  for (unsigned k = 0; k < m->count; k++) n += m->live[k];
  return n;
}

#define PROBE(state)                      \
  do {                                    \
    if (!probe_model(m, state)) _exit(1); \
  } while (0)

/* ---- the walk: a fresh slab through its states --------------------------------------- *
 * The thread that frees remotely is made before a child looks for its slab, in both
 * children: what pthread_create allocates is then the same in both. */
static int remote_go[2];
static pthread_t remote_thread;

static void *remote_main(void *arg) {
  char go;
  if (read(remote_go[0], &go, 1) != 1) return NULL;
  walk_model_t *m = arg;
  for (unsigned k = 0, seen = 0; k < m->count; k++)
    if (m->live[k] && seen++ % 2 == 0) free(m->blocks[k]), m->live[k] = false;
  return NULL;
}

static void start_remote(void *arg) {
  if (pipe(remote_go) != 0 || pthread_create(&remote_thread, NULL, remote_main, arg) != 0) _exit(2);
}

/* Child A: where the fresh slab lies. */
static void find_slab(walk_model_t *m, int out) {
  start_remote(NULL);
  hak_heap_new(); /* as walk() makes walk_probe_heap */
  fill_slab(m, NULL);
  uint64_t msg[2] = {m->start, m->count};
  if (write(out, msg, sizeof msg) != sizeof msg) _exit(2);
  _exit(0);
}

static void walk(walk_model_t *m) {
  unsigned c = m->c, k, count = m->count;
  size_t n = m->n;
  model_span(m);
  start_remote(m);
  walk_probe_heap = hak_heap_new();
  void *p = first_of_fresh_slab(NULL, c, n);
  if (p == NULL || !walk_in(m, p, &k))
    walk_fatal("slab_walk: class %u: the fresh slab is not where the first child found it\n", c);
  m->live[k] = true, m->blocks[k] = p;
  walk_capture();
  PROBE("fresh");

  unsigned want = count / 3, got = 1; /* a third out, every other one freed again */
  while (got < want) {
    p = malloc(n);
    if (p == NULL || !walk_in(m, p, &k) || m->live[k]) {
      free(p); /* not from this slab: not live either */
      break;
    }
    m->live[k] = true, m->blocks[k] = p, got++;
  }
  walk_state("partly carved");
  walk_check(m, got == want, "the blocks did not come from the slab");
  for (unsigned i = 0, seen = 0; i < count; i++)
    if (m->live[i] && seen++ % 2 == 1) free(m->blocks[i]), m->live[i] = false;
  PROBE("partly carved");

  uint64_t slabs = stat_of("class.%u.slabs", c); /* full: until the next slab starts */
  for (;;) {
    p = malloc(n);
    if (p == NULL) _exit(2);
    if (stat_of("class.%u.slabs", c) != slabs || !walk_in(m, p, &k)) {
      free(p); /* the next slab's first block: not live either */
      break;
    }
    m->live[k] = true, m->blocks[k] = p;
  }
  walk_state("full");
  /* (The hardened build's quarantine keeps some of the blocks freed.) */
  walk_check(m, live_count(m) + (MISUSE_BUILD ? QUARANTINE_MAX : 0) >= count, "blocks are not out");
  PROBE("full");

  uint64_t pushes = stat_of("remote.blocks", 0);
  if (write(remote_go[1], "g", 1) != 1 || pthread_join(remote_thread, NULL) != 0) _exit(2);
  walk_state("after remote frees");
  walk_check(m, stat_of("remote.blocks", 0) > pushes, "no remote free counted");
  PROBE("after remote frees");

  free_some(m, 1, 0);
  PROBE("emptied");

  slabs = stat_of("class.%u.slabs", c);
  uint64_t purged = stat_of("purge.madvise_bytes", 0);
  malloc_trim(0);
  walk_state("purged");
  walk_check(m, stat_of("class.%u.slabs", c) < slabs, "the slab is still the class's");
  walk_check(m, stat_of("purge.madvise_bytes", 0) > purged, "nothing purged");
  walk_check(m, !walk_resident(m->start, m->hi, true), "pages of the span are resident");
  PROBE("purged");
  _exit(walk_failures ? 1 : 0);
}

/* ---- cached: the owner frees every block ------------------------------------------- */
static void cached(walk_model_t *m) {
  walk_probe_heap = hak_heap_new();
  free(fill_slab(m, NULL));
  uint64_t slabs = stat_of("class.%u.slabs", m->c);
  walk_capture();
  PROBE("full, by its owner");
  free_some(m, 1, 0);
  flush_quarantine(m);
  const char *state = m->hi - m->lo <= 2 * UNIT ? "cached" : "in its region";
  walk_state(state);
  walk_check(m, stat_of("class.%u.slabs", m->c) == slabs - 1, "the slab is still the class's");
  walk_check(m, walk_resident(m->start, m->start + 1, true), "its first page is not resident");
  PROBE(state);
  malloc_trim(0);
  walk_state("purged from the cache");
  walk_check(m, !walk_resident(m->start, m->hi, true), "pages of the span are resident");
  PROBE("purged from the cache");
  _exit(walk_failures ? 1 : 0);
}

/* ---- abandoned: the owner exits with blocks out; another thread adopts the slab ---- */
static void *exiting_owner(void *arg) {
  walk_model_t *m = arg;
  free(fill_slab(m, NULL));
  free_some(m, 2, 1);
  return NULL;
}

static int adopt_go[2];
static bool adopted_ours;
static void *adopter(void *arg) {
  walk_model_t *m = arg;
  uint64_t adopted = stat_of("slabs.adopted", 0);
  unsigned k, want = live_count(m) / 2 + 1;
  for (unsigned i = 0; i < want; i++) {
    void *p = malloc(m->n);
    if (p == NULL) _exit(2);
    if (!walk_in(m, p, &k) || m->live[k]) break; /* kept: not the slab's */
    m->live[k] = true, m->blocks[k] = p;
    adopted_ours = i == 0 || adopted_ours;
  }
  adopted_ours = adopted_ours && stat_of("slabs.adopted", 0) > adopted;
  if (write(adopt_go[1], "a", 1) != 1) _exit(2);
  for (;;) pause(); /* alive until the child exits */
}

static void abandoned(walk_model_t *m) {
  walk_probe_heap = hak_heap_new();
  pthread_t t;
  uint64_t exited = stat_of("threads.exited", 0), dissolved = stat_of("heaps.dissolved", 0);
  if (pthread_create(&t, NULL, exiting_owner, m) != 0 || pthread_join(t, NULL) != 0) _exit(2);
  walk_capture();
  walk_state("owner exited");
  walk_check(m, stat_of("threads.exited", 0) > exited, "no thread exit counted");
  PROBE("owner exited");
  malloc_trim(0);
  walk_state("abandoned");
  walk_check(m, stat_of("heaps.dissolved", 0) > dissolved, "the owner's heap was not dissolved");
  PROBE("abandoned");
  free_some(m, 4, 0); /* by a thread that is not the owner */
  PROBE("abandoned, freed into");
  if (pipe(adopt_go) != 0 || pthread_create(&t, NULL, adopter, m) != 0) _exit(2);
  char done;
  if (read(adopt_go[0], &done, 1) != 1) _exit(2);
  walk_state("adopted");
  walk_check(m, adopted_ours, "another thread's first block did not come from the slab");
  PROBE("adopted");
  free_some(m, 3, 0); /* remote frees into the adopter's slab */
  PROBE("adopted, freed into");
  _exit(walk_failures ? 1 : 0);
}

/* ---- a destroyed user heap -------------------------------------------------------- */
static void user_heap(walk_model_t *m) {
  walk_probe_heap = hak_heap_new();
  hak_heap_t *u = hak_heap_new();
  if (u == NULL) _exit(2);
  free(fill_slab(m, u));
  free_some(m, 3, 1);
  walk_capture();
  PROBE("user heap");
  hak_heap_destroy(u);
  memset(m->live, 0, sizeof m->live);
  PROBE("destroyed heap");
  u = hak_heap_new();
  PROBE("destroyed heap, next heap made");
  void *p = hak_heap_malloc(u, m->n);
  unsigned k;
  bool ours = p != NULL && walk_in(m, p, &k);
  walk_state("destroyed heap, reused");
  walk_check(m, ours || MISUSE_BUILD, "the next heap's block is not from the destroyed heap's slab");
  if (ours) m->live[k] = true, m->blocks[k] = p;
  if (ours) PROBE("destroyed heap, reused");
  _exit(walk_failures ? 1 : 0);
}

/* Runs fn(m) in a child; false if it failed. */
static bool in_child(void (*fn)(walk_model_t *), walk_model_t *m, const char *what) {
  pid_t pid = fork();
  if (pid == 0) fn(m);
  int st = 0;
  waitpid(pid, &st, 0);
  if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return true;
  say("slab_walk: class %u (%zu bytes), %s: %s %d\n", m->c, m->size, what,
      WIFEXITED(st) ? "failed, status" : "killed by signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
  return false;
}

static void find_and_walk(walk_model_t *m) {
  int fds[2];
  if (pipe(fds) != 0) _exit(2);
  pid_t a = fork();
  if (a == 0) find_slab(m, fds[1]);
  uint64_t msg[2] = {0, 0};
  close(fds[1]);
  if (read(fds[0], msg, sizeof msg) != sizeof msg || msg[1] == 0) walk_fatal("slab_walk: no fresh slab\n");
  waitpid(a, NULL, 0);
  m->start = (uintptr_t)msg[0], m->count = (unsigned)msg[1];
  walk(m);
}

int main(int argc, char **argv) {
  walk_init();
  uint64_t classes = 0, delay = 3600000; /* nothing purged unless the walk asks */
  hak_stats_get("build.class_count", &classes);
  if (hak_ctl_set("opt.purge_delay_ms", &delay, sizeof delay) != 0) return 2;
  unsigned first = argc > 1 ? (unsigned)atoi(argv[1]) : 0;
  unsigned last = argc > 2 ? (unsigned)atoi(argv[2]) : (unsigned)classes - 1;
  int failed = 0;
  unsigned walked = 0;
  void (*const walks[])(walk_model_t *) = {find_and_walk, cached, abandoned, user_heap};
  const char *const names[] = {"walk", "cached", "abandoned", "user heap"};
  for (unsigned c = first; c <= last && c < classes; c++) {
    size_t size = stat_of("class.%u.block_size", c);
    if (size <= SECURE_TAIL) continue; /* the hardened build hands out none of 16 bytes */
    for (unsigned w = 0; w < sizeof walks / sizeof walks[0]; w++) {
      memset(&slab, 0, sizeof slab);
      slab.c = c, slab.size = size, slab.n = size - SECURE_TAIL;
      if (!in_child(walks[w], &slab, names[w])) failed = 1;
    }
    walked++;
  }
  say("slab_walk: %u classes walked, %s\n", walked, failed ? "FAILED" : "every probe as the model says");
  return failed;
}
