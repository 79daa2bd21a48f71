/* The code an ordinary program runs lies within the first 64 KiB of libhakmem's text,
 * so that only those pages of it become resident: the kernel maps the 64-KiB-aligned
 * 64 KiB around each fault in a file's pages (fault-around), and the link puts the cold
 * code after the hot (CMakeLists.txt). A program that calls the common entry points
 * (every size tier but huge, realloc through large blocks, aligned allocation, a second
 * thread that frees the first's blocks and exits, a heap of its own, fork) must leave no page resident past
 * the 64 KiB windows that the text's first 64 KiB overlaps (one window where the text
 * starts on a 64 KiB boundary, as it does when the library is mapped 2 MiB-aligned).
 * The read-only data after the text must stay untouched too: one read there maps its
 * whole segment, about 30 KiB with the unwind tables.
 * Release builds only: the layout is that of the -O2/-O3 split. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hakmem.h"
#include "memory_test.h"

static void *blocks[64];

static void *other_thread(void *arg) {
  (void)arg;
  for (int i = 0; i < 64; i++) {
    free(blocks[i]);
    blocks[i] = malloc((size_t)i * 40);
  }
  return NULL;
}

static void workload(void) {
  for (size_t n = 0; n <= 300000; n = n * 5 / 4 + 1) {
    char *p = malloc(n);
    if (n > 0) memset(p, 1, n);
    free(p);
    free(calloc(1, n));
  }
  char *r = NULL;
  for (size_t n = 16; n <= (size_t)1 << 20; n = n * 3 / 2) r = realloc(r, n);
  r = realloc(r, 16);
  free(r);
  void *a = NULL;
  if (posix_memalign(&a, 256, 1000) != 0) mt_fail("posix_memalign");
  free(a);
  free(aligned_alloc(4096, 8192));
  free(realloc(NULL, 10));
  for (int i = 0; i < 64; i++) blocks[i] = malloc((size_t)i * 24 + 1);
  if (malloc_usable_size(blocks[1]) == 0) mt_fail("malloc_usable_size");
  pthread_t t;
  if (pthread_create(&t, NULL, other_thread, NULL) != 0) mt_fail("pthread_create");
  pthread_join(t, NULL);
  for (int i = 0; i < 64; i++) free(blocks[i]);
  for (int round = 0; round < 2; round++) { /* a heap of its own, dropped whole, then released */
    hak_heap_t *h = hak_heap_new();
    if (h == NULL) mt_fail("hak_heap_new");
    for (size_t n = 16; n <= 200000; n = n * 3 / 2)
      if (hak_heap_malloc(h, n) == NULL) mt_fail("hak_heap_malloc");
    free(hak_heap_realloc(h, hak_heap_malloc(h, 100), 20000));
    if (round == 0) hak_heap_destroy(h);
    else hak_heap_release(h);
  }
  pid_t pid = fork();
  if (pid == 0) {
    free(malloc(100));
    _exit(0);
  }
  waitpid(pid, NULL, 0);
}

static size_t resident_pages(FILE *pagemap, unsigned long from, unsigned long to) {
  size_t pages = 0;
  for (unsigned long p = from; p < to; p += 4096) {
    uint64_t entry = 0;
    if (fseek(pagemap, (long)(p / 4096 * 8), SEEK_SET) != 0 || fread(&entry, 8, 1, pagemap) != 1)
      mt_fail("cannot read /proc/self/pagemap");
    pages += entry >> 63;
  }
  return pages;
}

/* Resident pages of the executable mapping of the file whose name contains `name`;
 * *past: those past the 64 KiB windows that its first 64 KiB overlaps; *after: those of
 * the mapping that follows it, the read-only data and unwind tables. */
static size_t resident_text(const char *name, size_t *mapped, size_t *past, size_t *after) {
  FILE *maps = fopen("/proc/self/maps", "r");
  FILE *pagemap = fopen("/proc/self/pagemap", "rb");
  if (maps == NULL || pagemap == NULL) mt_fail("cannot read /proc/self/maps or pagemap");
  char line[512];
  size_t pages = 0;
  bool next_is_data = false;
  *mapped = *past = *after = 0;
  while (fgets(line, sizeof line, maps) != NULL) {
    unsigned long from, to;
    char perm[8];
    if (sscanf(line, "%lx-%lx %7s", &from, &to, perm) != 3 || strstr(line, name) == NULL) continue;
    if (next_is_data && strcmp(perm, "r--p") == 0) {
      *after += resident_pages(pagemap, from, to);
      next_is_data = false;
      continue;
    }
    if (perm[2] != 'x') continue;
    next_is_data = true;
    *mapped += to - from;
    unsigned long hot_end = (from + 2 * 65536 - 1) & ~65535ul;
    for (unsigned long p = from; p < to; p += 4096) {
      uint64_t entry = 0;
      if (fseek(pagemap, (long)(p / 4096 * 8), SEEK_SET) != 0 || fread(&entry, 8, 1, pagemap) != 1)
        mt_fail("cannot read /proc/self/pagemap");
      pages += entry >> 63;
      if (p >= hot_end) *past += entry >> 63;
    }
  }
  fclose(maps);
  fclose(pagemap);
  return pages;
}

int main(void) {
  workload();
  size_t mapped = 0, past = 0, after = 0, pages = resident_text("libhakmem", &mapped, &past, &after);
  printf(
      "libhakmem text: %zu KiB mapped, %zu KiB resident, %zu KiB of it past the hot windows; "
      "%zu KiB of the read-only data after it\n",
      mapped / 1024, pages * 4, past * 4, after * 4);
  if (mapped == 0) mt_fail("libhakmem's text is not mapped: is the test linked to the shared library?");
  if (past > 0)
    mt_fail(
        "%zu KiB of libhakmem's text resident past the windows of its first 64 KiB: code an "
        "ordinary program runs lies there (see HAKMEM_COLD_SOURCES in CMakeLists.txt)",
        past * 4);
  if (after > 0)
    mt_fail(
        "%zu KiB of libhakmem's read-only data resident: code an ordinary program runs read a "
        "string or constant there, which maps its whole segment, unwind tables and all (see "
        "options.c; CMakeLists.txt: -fno-tree-vectorize)",
        after * 4);
  printf("ok\n");
  return 0;
}
