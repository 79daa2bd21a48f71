/* The library loaded with dlopen, used side by side with the C library's malloc through
 * its hak_ functions, then closed while threads that used it are still alive.
 *
 * A thread started before the dlopen and one started after it allocate and free through
 * hak_*, across threads too, and a C library block given to hak_free goes back to the C
 * library. Then dlclose, and the second thread exits, and the process forks: the thread-exit
 * hook and the fork handlers registered by the library must still be there. A library that
 * could be unmapped by dlclose left them pointing at unmapped code (SIGSEGV at the thread's
 * exit).
 *
 * usage: dlopen_library PATH-TO-LIBHAKMEM
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void *(*hmalloc)(size_t);
static void *(*hrealloc)(void *, size_t);
static void (*hfree)(void *);
static size_t (*husable)(void *);

static _Noreturn void fail(const char *what) {
  fprintf(stderr, "dlopen_library: FAIL: %s\n", what);
  exit(1);
}

enum { BLOCKS = 4000 };

static size_t size_of(unsigned i) {
  /* tiny, mid and large blocks: 1 byte up to 192 KiB */
  return (size_t)(i * 2654435761u % (i % 16 == 0 ? 196608u : 2048u)) + 1;
}

static void fill(unsigned char *p, size_t n, unsigned seed) {
  for (size_t k = 0; k + 1 < n; k += 61) p[k] = (unsigned char)(seed + k);
  p[n - 1] = (unsigned char)seed;
}

static void check(const unsigned char *p, size_t n, unsigned seed) {
  for (size_t k = 0; k + 1 < n; k += 61)
    if (p[k] != (unsigned char)(seed + k)) fail("a block lost its contents");
  if (p[n - 1] != (unsigned char)seed) fail("a block lost its last byte");
}

/* Allocates, writes, grows and frees blocks through the library; leaves `keep` blocks in
 * `out` for another thread to free. */
static void churn(unsigned seed, void **out, unsigned keep) {
  static __thread void *blocks[BLOCKS];
  for (unsigned i = 0; i < BLOCKS; i++) {
    size_t n = size_of(i + seed);
    unsigned char *p = hmalloc(n);
    if (p == NULL) fail("hak_malloc returned NULL");
    if (husable(p) < n) fail("hak_malloc_usable_size is below the size asked");
    fill(p, n, i + seed);
    blocks[i] = p;
  }
  for (unsigned i = 0; i < BLOCKS; i++) {
    size_t n = size_of(i + seed);
    check(blocks[i], n, i + seed);
    if (i % 3 == 0) {
      unsigned char *q = hrealloc(blocks[i], 2 * n);
      if (q == NULL) fail("hak_realloc returned NULL");
      check(q, n, i + seed);
      blocks[i] = q;
    }
  }
  for (unsigned i = 0; i < BLOCKS; i++) {
    if (i < keep) out[i] = blocks[i];
    else hfree(blocks[i]);
  }
}

static pthread_barrier_t go, closed;
static void *from_main[BLOCKS];

static void *early_thread(void *arg) {
  (void)arg;
  pthread_barrier_wait(&go);                                     /* the library is loaded now */
  for (unsigned i = 0; i < BLOCKS / 2; i++) hfree(from_main[i]); /* another thread's blocks */
  churn(7, NULL, 0);
  return NULL;
}

static void *late_thread(void *arg) {
  (void)arg;
  churn(13, NULL, 0);
  pthread_barrier_wait(&closed); /* exits after the dlclose */
  return NULL;
}

int main(int argc, char **argv) {
  if (argc != 2) fail("usage: dlopen_library PATH-TO-LIBHAKMEM");
  pthread_barrier_init(&go, NULL, 2);
  pthread_barrier_init(&closed, NULL, 2);
  pthread_t early, late;
  if (pthread_create(&early, NULL, early_thread, NULL) != 0) fail("pthread_create");

  void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    fail("dlopen failed");
  }
  hmalloc = (void *(*)(size_t))dlsym(lib, "hak_malloc");
  hrealloc = (void *(*)(void *, size_t))dlsym(lib, "hak_realloc");
  hfree = (void (*)(void *))dlsym(lib, "hak_free");
  husable = (size_t(*)(void *))dlsym(lib, "hak_malloc_usable_size");
  if (!hmalloc || !hrealloc || !hfree || !husable) fail("a hak_ function is missing");

  churn(1, from_main, BLOCKS);
  pthread_barrier_wait(&go);
  if (pthread_create(&late, NULL, late_thread, NULL) != 0) fail("pthread_create");
  for (unsigned i = BLOCKS / 2; i < BLOCKS; i++) hfree(from_main[i]);

  /* The process's own malloc is still the C library's; hak_free hands its blocks back. */
  char *libc_block = malloc(100);
  if (libc_block == NULL) fail("malloc returned NULL");
  memset(libc_block, 1, 100);
  hfree(libc_block);

  if (pthread_join(early, NULL) != 0) fail("pthread_join");
  if (dlclose(lib) != 0) fail("dlclose failed");

  pthread_barrier_wait(&closed); /* the late thread, which used the library, exits now */
  if (pthread_join(late, NULL) != 0) fail("pthread_join");
  pid_t pid = fork();
  if (pid < 0) fail("fork");
  if (pid == 0) _exit(0);
  int status;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    fail("the forked child did not exit cleanly");
  printf("ok: used from three threads, closed, thread exit and fork after the close\n");
  return 0;
}
