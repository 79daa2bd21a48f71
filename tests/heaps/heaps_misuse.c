/* heaps_misuse: misuse of heaps must end the process with hakmem's one-line report.
 *
 * Each case runs in a child, which must die by SIGABRT after printing one of the
 * expected lines on stderr: a handle that is not a heap (NULL, the stack, a block, the
 * inside of a heap, garbage), a destroyed or released heap used again, destroying the
 * thread's own heap, another thread's heap used, and a destroyed heap's block freed or
 * reallocated (small, large, huge, by its thread or another). Built twice: against the
 * default library and (HEAPS_MISUSE_SECURE) the hardened one, which must also catch
 * the cases where the memory or the handle was reused since, and a write to a destroyed
 * heap's block.
 *
 *   heaps_misuse              run every case, each in a child; exit 1 if any is missed
 *   heaps_misuse --child NAME run one case in this process (to debug it)
 */
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>

#include "test_util.h"

#pragma GCC diagnostic ignored "-Wpragmas"
#pragma GCC diagnostic ignored "-Wuse-after-free"
#pragma GCC diagnostic ignored "-Wfree-nonheap-object"

#ifndef HEAPS_MISUSE_SECURE
#define HEAPS_MISUSE_SECURE 0
#endif

#define DESTROYED "destroyed heap 0x"
#define FREE_GONE                                                         \
  "hakmem: free(): invalid pointer 0x", "hakmem: free(): double free 0x", \
      "hakmem: free(): block of a destroyed heap 0x"

static hak_heap_t *hide(hak_heap_t *h) { return tu_hide(h); }
static void use(void *p) { tu_hide(p); }

static hak_heap_t *destroyed_heap(bool used) {
  hak_heap_t *h = hak_heap_new();
  if (used) ((char *)hak_heap_malloc(h, 32))[0] = 1;
  hak_heap_destroy(h);
  return hide(h);
}

/* ---- the cases --------------------------------------------------------------------- */
static void destroy_twice(void) { hak_heap_destroy(destroyed_heap(true)); }
static void release_then_destroy(void) {
  hak_heap_t *h = hak_heap_new();
  hak_heap_release(h);
  hak_heap_destroy(hide(h));
}
static void malloc_destroyed(void) { use(hak_heap_malloc(destroyed_heap(true), 16)); }
static void malloc_destroyed_unused(void) { use(hak_heap_malloc(destroyed_heap(false), 16)); }
static void malloc_destroyed_large(void) { use(hak_heap_malloc(destroyed_heap(true), 1 << 20)); }
static void calloc_destroyed(void) { use(hak_heap_calloc(destroyed_heap(true), 1, 16)); }
static void realloc_destroyed(void) { use(hak_heap_realloc(destroyed_heap(true), NULL, 16)); }
static void aligned_destroyed(void) { use(hak_heap_aligned_alloc(destroyed_heap(true), 64, 64)); }
static void set_default_destroyed(void) { hak_heap_set_default(destroyed_heap(true)); }
static void stats_destroyed(void) {
  hak_heap_stats_t st;
  hak_heap_stats(destroyed_heap(true), &st);
}
static int visit_none(void *b, size_t n, void *a) {
  (void)b, (void)n, (void)a;
  return 0;
}
static void visit_destroyed(void) { hak_heap_visit(destroyed_heap(true), visit_none, NULL); }

static void not_heap_null(void) { use(hak_heap_malloc(hide(NULL), 16)); }
static void not_heap_stack(void) {
  char buf[8192] __attribute__((aligned(64)));
  memset(buf, 0, sizeof buf);
  use(hak_heap_malloc(hide((hak_heap_t *)buf), 16));
}
static void not_heap_block(void) { hak_heap_destroy(hide(malloc(8192))); }
static void not_heap_inside(void) {
  hak_heap_t *h = hak_heap_new();
  use(hak_heap_malloc(hide((hak_heap_t *)((char *)h + 64)), 16));
}
static void not_heap_garbage(void) { hak_heap_release(hide((hak_heap_t *)(uintptr_t)0x123450)); }
static void destroy_own_heap(void) { hak_heap_destroy(hide(hak_heap_get_default())); }

static hak_heap_t *g_heap;
static void *thread_malloc(void *arg) {
  (void)arg;
  use(hak_heap_malloc(g_heap, 16));
  return NULL;
}
static void *thread_destroy(void *arg) {
  (void)arg;
  hak_heap_destroy(g_heap);
  return NULL;
}
static void *thread_new_exit(void *arg) {
  (void)arg;
  g_heap = hak_heap_new();
  ((char *)hak_heap_malloc(g_heap, 100))[0] = 1;
  return NULL;
}
static void run(void *(*fn)(void *)) {
  pthread_t t;
  pthread_create(&t, NULL, fn, NULL);
  pthread_join(t, NULL);
}
static void other_thread_malloc(void) {
  g_heap = hak_heap_new();
  run(thread_malloc);
}
static void other_thread_destroy(void) {
  g_heap = hak_heap_new();
  run(thread_destroy);
}
static void exited_thread_heap(void) {
  run(thread_new_exit);
  use(hak_heap_malloc(hide(g_heap), 16));
}

static void *block_of_destroyed(size_t n) {
  hak_heap_t *h = hak_heap_new();
  void *p = hak_heap_malloc(h, n);
  for (int i = 0; i < 100; i++) use(hak_heap_malloc(h, n));
  memset(p, 1, n < 4096 ? n : 4096);
  hak_heap_destroy(h);
  return tu_hide(p);
}
static void free_after_destroy_64(void) { free(block_of_destroyed(64)); }
static void free_after_destroy_3000(void) { free(block_of_destroyed(3000)); }
static void free_after_destroy_large(void) { free(block_of_destroyed(1 << 20)); }
static void free_after_destroy_huge(void) { free(block_of_destroyed(40 << 20)); }
/* The thread is started before the heap is destroyed: starting one allocates (its TLS
 * block), which could reuse the destroyed heap's memory first. */
static void *g_block;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static void *thread_free(void *arg) {
  (void)arg;
  pthread_mutex_lock(&g_mu);
  while (g_block == NULL) pthread_cond_wait(&g_cv, &g_mu);
  pthread_mutex_unlock(&g_mu);
  free(g_block);
  return NULL;
}
static void free_after_destroy_other_thread(void) {
  pthread_t t;
  pthread_create(&t, NULL, thread_free, NULL);
  void *p = block_of_destroyed(64);
  pthread_mutex_lock(&g_mu);
  g_block = p;
  pthread_cond_signal(&g_cv);
  pthread_mutex_unlock(&g_mu);
  pthread_join(t, NULL);
}
static void free_twice_across_destroy(void) {
  hak_heap_t *h = hak_heap_new();
  void *p = hak_heap_malloc(h, 64);
  for (int i = 0; i < 100; i++) use(hak_heap_malloc(h, 64));
  free(p);
  hak_heap_destroy(h);
  free(tu_hide(p));
}
static void realloc_after_destroy(void) { tu_hide(realloc(block_of_destroyed(64), 200)); }

/* Hardened only: the handle or the memory was reused since. */
static void destroy_twice_after_new(void) {
  hak_heap_t *h = destroyed_heap(true);
  hak_heap_t *h2 = hak_heap_new();
  fprintf(stderr, "heaps_misuse: the new heap %s the destroyed one's structure\n",
          h2 == h ? "reuses" : "does not reuse");
  hak_heap_destroy(h);
}
static void malloc_after_new(void) {
  hak_heap_t *h = destroyed_heap(true);
  use(hak_heap_new());
  use(hak_heap_malloc(h, 16));
}
static void free_after_destroy_reused(void) {
  void *p = block_of_destroyed(64);
  hak_heap_t *h2 = hak_heap_new();
  for (int i = 0; i < 20000; i++) use(hak_heap_malloc(h2, 64));
  free(p);
}
/* The block's memory is resident and zero while it waits; a write to it is seen when
 * its slab is reused, after the next heap's destruction. */
static void write_after_destroy(void) {
  hak_heap_t *h = hak_heap_new();
  char *p = tu_hide(hak_heap_malloc(h, 64));
  memset(p, 1, 64);
  hak_heap_destroy(h);
  p[8] = 1;
  for (int i = 0; i < 4; i++) {
    hak_heap_t *g = hak_heap_new();
    use(hak_heap_malloc(g, 64));
    hak_heap_destroy(g);
  }
}

typedef struct misuse_case {
  const char *name;
  void (*fn)(void);
  bool secure_only;
  const char *expect[4];
} misuse_case_t;

static const misuse_case_t cases[] = {
    {"destroy_twice", destroy_twice, false, {"hakmem: hak_heap_destroy(): " DESTROYED}},
    {"release_then_destroy", release_then_destroy, false, {"hakmem: hak_heap_destroy(): " DESTROYED}},
    {"malloc_destroyed", malloc_destroyed, false, {"hakmem: hak_heap_malloc(): " DESTROYED}},
    {"malloc_destroyed_unused", malloc_destroyed_unused, false, {"hakmem: hak_heap_malloc(): " DESTROYED}},
    {"malloc_destroyed_large", malloc_destroyed_large, false, {"hakmem: hak_heap_malloc(): " DESTROYED}},
    {"calloc_destroyed", calloc_destroyed, false, {"hakmem: hak_heap_calloc(): " DESTROYED}},
    {"realloc_destroyed", realloc_destroyed, false, {"hakmem: hak_heap_realloc(): " DESTROYED}},
    {"aligned_destroyed", aligned_destroyed, false, {"hakmem: hak_heap_aligned_alloc(): " DESTROYED}},
    {"set_default_destroyed", set_default_destroyed, false, {"hakmem: hak_heap_set_default(): " DESTROYED}},
    {"stats_destroyed", stats_destroyed, false, {"hakmem: hak_heap_stats(): " DESTROYED}},
    {"visit_destroyed", visit_destroyed, false, {"hakmem: hak_heap_visit(): " DESTROYED}},
    {"not_heap_null", not_heap_null, false, {"hakmem: hak_heap_malloc(): not a heap 0x0"}},
    {"not_heap_stack", not_heap_stack, false, {"hakmem: hak_heap_malloc(): not a heap 0x"}},
    {"not_heap_block", not_heap_block, false, {"hakmem: hak_heap_destroy(): not a heap 0x"}},
    {"not_heap_inside", not_heap_inside, false, {"hakmem: hak_heap_malloc(): not a heap 0x"}},
    {"not_heap_garbage", not_heap_garbage, false, {"hakmem: hak_heap_release(): not a heap 0x"}},
    {"destroy_own_heap",
     destroy_own_heap,
     false,
     {"hakmem: hak_heap_destroy(): not a heap made by hak_heap_new 0x"}},
    {"other_thread_malloc",
     other_thread_malloc,
     false,
     {"hakmem: hak_heap_malloc(): heap of another thread 0x"}},
    {"other_thread_destroy",
     other_thread_destroy,
     false,
     {"hakmem: hak_heap_destroy(): heap of another thread 0x"}},
    {"exited_thread_heap", exited_thread_heap, false, {"hakmem: hak_heap_malloc(): " DESTROYED}},
    {"free_after_destroy_64", free_after_destroy_64, false, {FREE_GONE}},
    {"free_after_destroy_3000", free_after_destroy_3000, false, {FREE_GONE}},
    {"free_after_destroy_large", free_after_destroy_large, false, {FREE_GONE}},
    {"free_after_destroy_huge", free_after_destroy_huge, false, {FREE_GONE}},
    {"free_after_destroy_other_thread", free_after_destroy_other_thread, false, {FREE_GONE}},
    {"free_twice_across_destroy", free_twice_across_destroy, false, {FREE_GONE}},
    {"realloc_after_destroy",
     realloc_after_destroy,
     false,
     {"hakmem: realloc(): invalid pointer 0x", "hakmem: realloc(): double free 0x"}},
    {"destroy_twice_after_new", destroy_twice_after_new, true, {"hakmem: hak_heap_destroy(): " DESTROYED}},
    {"malloc_after_new", malloc_after_new, true, {"hakmem: hak_heap_malloc(): " DESTROYED}},
    {"free_after_destroy_reused", free_after_destroy_reused, true, {FREE_GONE}},
    {"write_after_destroy", write_after_destroy, true, {"hakmem: write to a destroyed heap's memory at 0x"}},
};
#define NCASES (sizeof cases / sizeof cases[0])

/* Runs case c in a child; true when it died by SIGABRT after one expected line. */
static bool run_case(const misuse_case_t *c) {
  int fds[2];
  REQUIRE(pipe(fds) == 0, "pipe");
  fflush(NULL);
  pid_t pid = fork();
  REQUIRE(pid >= 0, "fork");
  if (pid == 0) {
    dup2(fds[1], 2);
    close(fds[0]);
    c->fn();
    fprintf(stderr, "heaps_misuse: the case returned\n");
    _exit(0);
  }
  close(fds[1]);
  char out[4096];
  size_t len = 0;
  ssize_t r;
  while ((r = read(fds[0], out + len, sizeof out - 1 - len)) > 0) len += (size_t)r;
  out[len] = '\0';
  close(fds[0]);
  int status;
  waitpid(pid, &status, 0);
  bool aborted = WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
  bool said = false;
  for (int i = 0; i < 4 && c->expect[i]; i++) said |= strstr(out, c->expect[i]) != NULL;
  bool ok = aborted && said;
  printf("%s %-34s %s\n", ok ? "ok  " : "FAIL", c->name,
         ok        ? ""
         : aborted ? "aborted without the expected line"
                   : "did not abort");
  if (!ok) printf("     child's stderr: %s\n", out);
  return ok;
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--child") == 0) {
    for (size_t i = 0; i < NCASES; i++)
      if (strcmp(cases[i].name, argv[2]) == 0) cases[i].fn();
    return 0;
  }
  size_t failed = 0, ran = 0;
  for (size_t i = 0; i < NCASES; i++) {
    if (cases[i].secure_only && !HEAPS_MISUSE_SECURE) continue;
    ran++;
    failed += !run_case(&cases[i]);
  }
  printf("heaps_misuse%s: %zu cases, %zu missed\n", HEAPS_MISUSE_SECURE ? " (hardened)" : "", ran, failed);
  return failed ? 1 : 0;
}
