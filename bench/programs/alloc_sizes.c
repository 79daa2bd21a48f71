/* alloc_sizes.c — what a program asks malloc for, and what the allocator gives it.
 *
 * An analysis preload for bench/programs/FINDINGS.md, not part of the harness. Put it
 * before the allocator under study in LD_PRELOAD; it passes every call on and, at exit,
 * prints on stderr the peak of the live bytes the allocator reports usable
 * (malloc_usable_size), the bytes the program had requested at that moment, and the
 * request sizes below 64 KiB that account for the most bytes, with their usable size:
 *
 *   cc -O2 -shared -fPIC -o /tmp/alloc_sizes.so bench/programs/alloc_sizes.c -ldl
 *   LD_PRELOAD="/tmp/alloc_sizes.so build/release/libhakmem.so" sqlite3 ...
 *
 * Single-threaded programs only (no locking). Requests made while dlsym looks up the
 * next allocator come from a small static buffer and are never freed.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static void *(*next_malloc)(size_t);
static void (*next_free)(void *);
static void *(*next_calloc)(size_t, size_t);
static void *(*next_realloc)(void *, size_t);
static size_t (*next_usable)(void *);

/* Early requests, while dlsym itself allocates. */
static _Alignas(16) char early[1 << 16];
static size_t early_used;
static int resolving;

static void resolve(void) {
  if (next_malloc != NULL || resolving) return;
  resolving = 1;
  next_free = dlsym(RTLD_NEXT, "free");
  next_calloc = dlsym(RTLD_NEXT, "calloc");
  next_realloc = dlsym(RTLD_NEXT, "realloc");
  next_usable = dlsym(RTLD_NEXT, "malloc_usable_size");
  next_malloc = dlsym(RTLD_NEXT, "malloc");
  resolving = 0;
}

static int is_early(const void *p) {
  return (const char *)p >= early && (const char *)p < early + sizeof early;
}

static void *early_alloc(size_t n) {
  void *p = early + early_used;
  early_used += (n + 15) & ~(size_t)15;
  return early_used <= sizeof early ? p : NULL;
}

/* Live blocks: an open-addressing table from address to requested size. */
#define SLOTS (1u << 23)
#define TOMB ((uintptr_t)1)
static uintptr_t addr[SLOTS];
static uint32_t requested[SLOTS];
static long long live_requested, live_usable, peak_usable, requested_at_peak;
#define SIZES 65536
static long long count_of_size[SIZES];

static uint32_t slot_of(uintptr_t a) { return (uint32_t)((a >> 4) * 2654435761u) & (SLOTS - 1); }

static void track(void *p, size_t n) {
  if (p == NULL) return;
  uint32_t i = slot_of((uintptr_t)p);
  while (addr[i] != 0 && addr[i] != TOMB) i = (i + 1) & (SLOTS - 1);
  addr[i] = (uintptr_t)p;
  requested[i] = n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
  if (n < SIZES) count_of_size[n]++;
  live_requested += n;
  live_usable += next_usable(p);
  if (live_usable > peak_usable) {
    peak_usable = live_usable;
    requested_at_peak = live_requested;
  }
}

static void untrack(void *p) {
  for (uint32_t i = slot_of((uintptr_t)p); addr[i] != 0; i = (i + 1) & (SLOTS - 1)) {
    if (addr[i] == (uintptr_t)p) {
      live_requested -= requested[i];
      live_usable -= next_usable(p);
      addr[i] = TOMB;
      return;
    }
  }
}

void *malloc(size_t n) {
  resolve();
  if (next_malloc == NULL) return early_alloc(n);
  void *p = next_malloc(n);
  track(p, n);
  return p;
}

void *calloc(size_t count, size_t size) {
  resolve();
  if (next_calloc == NULL) return early_alloc(count * size); /* static memory is zero */
  void *p = next_calloc(count, size);
  track(p, count * size);
  return p;
}

void free(void *p) {
  resolve();
  if (p == NULL || is_early(p)) return;
  untrack(p);
  next_free(p);
}

void *realloc(void *p, size_t n) {
  resolve();
  if (p == NULL || is_early(p)) {
    void *q = malloc(n);
    if (q != NULL && p != NULL) {
      size_t rest = (size_t)(early + sizeof early - (char *)p);
      memcpy(q, p, n < rest ? n : rest);
    }
    return q;
  }
  untrack(p);
  void *q = next_realloc(p, n);
  track(q != NULL ? q : p, q != NULL ? n : next_usable(p));
  return q;
}

__attribute__((destructor)) static void report(void) {
  fprintf(stderr, "alloc_sizes: peak usable %.2f MiB live, requested at that moment %.2f MiB\n",
          peak_usable / 1048576.0, requested_at_peak / 1048576.0);
  for (int k = 0; k < 5; k++) {
    long long most = 0;
    size_t size = 0;
    for (size_t n = 1; n < SIZES; n++) {
      if (count_of_size[n] * (long long)n > most) {
        most = count_of_size[n] * (long long)n;
        size = n;
      }
    }
    if (size == 0) break;
    void *p = next_malloc(size);
    fprintf(stderr, "alloc_sizes: %zu bytes: %lld requests (%.1f MiB in all), usable %zu\n", size,
            count_of_size[size], most / 1048576.0, next_usable(p));
    next_free(p);
    count_of_size[size] = 0;
  }
}
