/* libFuzzer harness for the whole C API (tests/fuzz/README.md).
 *
 * Each input is a program: one opcode byte, then its operands, until the bytes run out.
 * The calls (malloc, calloc, realloc to every tier, reallocarray, the aligned forms,
 * sized frees, user heaps made, used and destroyed, hak_ctl_set and hak_ctl_get,
 * blocks handed to another thread to free, malloc_trim) are checked against a model of
 * the live blocks: each block's bytes are written when it is made and read back before
 * it goes (realloc: its kept prefix), usable sizes and alignments are what was asked,
 * calloc's memory reads as zero, and the calls that must fail fail as documented
 * (EINVAL for a bad alignment, ENOMEM for a size that cannot be) instead of aborting.
 * Any broken check aborts, which libFuzzer reports with the input. In the Debug build
 * the library's own invariant walks run under every call. Everything is freed at the
 * end of an input, so inputs are independent. */
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hakmem.h"

enum { SLOTS = 64, HEAPS = 4 };
#define LIVE_CAP ((size_t)192 << 20)

typedef struct slot {
  unsigned char *p;
  size_t n, usable;
  unsigned char tag;
  int heap; /* index into heaps[], or -1 */
  int how;  /* 0 free, 1 free_sized, 2 free_aligned_sized */
  size_t align;
} slot_t;

static slot_t slots[SLOTS];
static hak_heap_t *heaps[HEAPS];
static size_t live;

typedef struct input {
  const uint8_t *p, *end;
} input_t;

static unsigned take(input_t *in) { return in->p < in->end ? *in->p++ : 0; }
static unsigned take16(input_t *in) { return take(in) | take(in) << 8; }

#define FAIL(...)                              \
  do {                                         \
    fprintf(stderr, "fuzz_api: " __VA_ARGS__); \
    fputc('\n', stderr);                       \
    abort();                                   \
  } while (0)

/* A size in a tier the input picks: small, mid, large, and rarely huge. */
static size_t take_size(input_t *in) {
  unsigned t = take(in), v = take16(in);
  switch (t & 7) {
  case 0:
  case 1:
  case 2: return v % 1025; /* 0 .. 1 KiB */
  case 3:
  case 4: return 1024 + v * 2;                   /* mid: .. 129 KiB */
  case 5: return (128u << 10) + (size_t)v * 64;  /* large: .. 4.1 MiB */
  case 6: return (128u << 10) + (size_t)v * 128; /* large: .. 8.1 MiB */
  default: /* huge now and then (every page of one costs a fault), else tiny */
    return (t & 0xf0) == 0xf0 ? (32u << 20) + (size_t)v * 16 : v % 65;
  }
}

static size_t take_align(input_t *in) { return (size_t)1 << (take(in) % 17); /* 1 .. 64 KiB */ }

/* The bytes a block holds: its tag at the start, the end and every STRIDE bytes, all
 * of it when it is small (a full fill of a 32 MiB block per step would make fuzzing
 * slow, and so would a fault on each of its pages). */
#define STRIDE 65536
static void fill(unsigned char *p, size_t n, unsigned char tag) {
  if (n <= 4096) {
    memset(p, tag, n);
    return;
  }
  memset(p, tag, 256);
  memset(p + n - 256, tag, 256);
  for (size_t i = STRIDE; i + 1 < n; i += STRIDE) p[i] = tag;
}

/* Are the n bytes at p all c? memcmp against a page of c: the C library's loop, not
 * one the fuzzer's coverage instruments compare by compare. */
static bool all_bytes(const unsigned char *p, size_t n, unsigned char c) {
  static unsigned char page[4096];
  static int filled = -1;
  if (filled != c) {
    memset(page, c, sizeof page);
    filled = c;
  }
  for (size_t off = 0; off < n; off += sizeof page) {
    size_t len = n - off < sizeof page ? n - off : sizeof page;
    if (memcmp(p + off, page, len) != 0) return false;
  }
  return true;
}

static void verify(const unsigned char *p, size_t n, unsigned char tag, const char *what) {
  if (n <= 4096) {
    if (!all_bytes(p, n, tag)) FAIL("%s: %p (%zu) changed", what, (void *)p, n);
    return;
  }
  if (!all_bytes(p, 256, tag) || !all_bytes(p + n - 256, 256, tag))
    FAIL("%s: head or tail of %p (%zu) changed", what, (void *)p, n);
  for (size_t i = STRIDE; i + 1 < n; i += STRIDE)
    if (p[i] != tag) FAIL("%s: byte %zu of %p (%zu) changed", what, i, (void *)p, n);
}

/* calloc's memory: every byte (a purge that left old data behind shows here). */
static void verify_zero(const unsigned char *p, size_t n, const char *what) {
  if (!all_bytes(p, n, 0)) FAIL("%s: %p (%zu) is not all zero", what, (void *)p, n);
}

static void adopt(slot_t *s, void *p, size_t n, size_t align, int heap, int how, bool zero, unsigned char tag,
                  const char *what) {
  if (p == NULL) FAIL("%s(%zu, align %zu) returned NULL (errno %d)", what, n, align, errno);
  if (((uintptr_t)p & (align - 1)) != 0) FAIL("%s(%zu) = %p not %zu-aligned", what, n, p, align);
  if (((uintptr_t)p & 15) != 0 && n >= 16) FAIL("%s(%zu) = %p not 16-aligned", what, n, p);
  size_t usable = malloc_usable_size(p);
  if (usable < n) FAIL("%s(%zu) = %p: usable size %zu", what, n, p, usable);
  if (zero) verify_zero(p, n, what);
  s->p = p;
  s->n = n;
  s->usable = usable;
  s->tag = tag;
  s->heap = heap;
  s->how = how;
  s->align = align;
  fill(p, usable, tag);
  live += usable;
}

/* ---- another thread, which frees what it is handed ---------------------------- */
static pthread_mutex_t hand_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hand_cond = PTHREAD_COND_INITIALIZER;
static void *handed;
static size_t handed_n; /* 0: free, else free_sized with this size */

static void *freer(void *arg) {
  (void)arg;
  pthread_mutex_lock(&hand_lock);
  for (;;) {
    while (handed == NULL) pthread_cond_wait(&hand_cond, &hand_lock);
    if (handed_n == 0) free(handed);
    else hak_free_sized(handed, handed_n);
    handed = NULL;
    pthread_cond_broadcast(&hand_cond);
  }
  return NULL;
}

static void hand_over(void *p, size_t n) {
  static pthread_t tid;
  static bool started;
  if (!started) {
    if (pthread_create(&tid, NULL, freer, NULL) != 0) FAIL("pthread_create");
    started = true;
  }
  pthread_mutex_lock(&hand_lock);
  handed = p;
  handed_n = n;
  pthread_cond_broadcast(&hand_cond);
  while (handed != NULL) pthread_cond_wait(&hand_cond, &hand_lock);
  pthread_mutex_unlock(&hand_lock);
}

/* ---- the operations ---------------------------------------------------------------- */
static void release(slot_t *s, bool other_thread) {
  if (s->p == NULL) return;
  verify(s->p, s->usable, s->tag, "a block before free");
  size_t usable = malloc_usable_size(s->p);
  if (usable != s->usable) FAIL("usable size of %p went from %zu to %zu", (void *)s->p, s->usable, usable);
  if (other_thread && s->how != 2 && !(s->how == 1 && s->n == 0)) hand_over(s->p, s->how == 1 ? s->n : 0);
  else if (s->how == 1) hak_free_sized(s->p, s->n);
  else if (s->how == 2) hak_free_aligned_sized(s->p, s->align, s->n);
  else free(s->p);
  live -= s->usable;
  s->p = NULL;
}

static void heap_destroy(int h) {
  if (heaps[h] == NULL) return;
  for (int i = 0; i < SLOTS; i++) {
    if (slots[i].p && slots[i].heap == h) {
      verify(slots[i].p, slots[i].usable, slots[i].tag, "a heap's block before hak_heap_destroy");
      live -= slots[i].usable;
      slots[i].p = NULL;
    }
  }
  hak_heap_destroy(heaps[h]);
  heaps[h] = NULL;
}

static hak_heap_t *heap_for(int h) {
  if (heaps[h] == NULL) {
    heaps[h] = hak_heap_new();
    if (heaps[h] == NULL) FAIL("hak_heap_new: NULL (errno %d)", errno);
  }
  return heaps[h];
}

static void do_realloc(slot_t *s, size_t n, int heap, unsigned char tag) {
  int old_heap = s->heap;
  void *old = s->p;
  errno = 0;
  void *q = heap >= 0 ? hak_heap_realloc(heap_for(heap), s->p, n) : realloc(s->p, n);
  if (n == 0 && q == NULL) { /* realloc(p, 0) frees p (as glibc's does) */
    live -= s->usable;
    s->p = NULL;
    return;
  }
  if (q == NULL) FAIL("realloc(%p, %zu) returned NULL (errno %d)", old, n, errno);
  size_t keep = s->usable < n ? s->usable : n;
  if (keep > 0) {
    const unsigned char *c = q;
    size_t head = s->usable <= 4096 ? s->usable : 256; /* what fill wrote whole */
    if (!all_bytes(c, keep < head ? keep : head, s->tag))
      FAIL("realloc(%p, %zu) = %p lost its head", old, n, q);
    if (keep > 4096)
      for (size_t i = STRIDE; i + 1 < keep && i + 1 < s->usable; i += STRIDE)
        if (c[i] != s->tag) FAIL("realloc(%p, %zu) = %p lost byte %zu", old, n, q, i);
  }
  live -= s->usable;
  s->p = NULL;
  /* kept in place, it stays in its heap; moved, it comes from the heap asked */
  adopt(s, q, n, 16, q == old ? old_heap : heap, 0, false, tag, "realloc");
}

static void misuse_that_must_not_abort(unsigned what) {
  void *p = (void *)1;
  volatile size_t bad_align = 24 * (1 + (what >> 3) % 2); /* 24 or 48: not powers of two */
  switch (what % 8) {
  case 0:
    free(NULL);
    hak_free_sized(NULL, 0);
    break;
  case 1:
    errno = 0;
    if (malloc(SIZE_MAX - 4096) != NULL || errno != ENOMEM) FAIL("malloc(huge) not NULL/ENOMEM");
    break;
  case 2:
    errno = 0;
    if (calloc(SIZE_MAX / 2, 4) != NULL || errno != ENOMEM) FAIL("calloc overflow not NULL/ENOMEM");
    break;
  case 3:
    if (posix_memalign(&p, bad_align, 64) != EINVAL || p != (void *)1) FAIL("posix_memalign(24) not EINVAL");
    break;
  case 4:
    errno = 0;
    if (aligned_alloc(bad_align, 96) != NULL || errno != EINVAL) FAIL("aligned_alloc(48) not NULL/EINVAL");
    break;
  case 5: {
    errno = 0;
    if (reallocarray(NULL, SIZE_MAX / 8, 16) != NULL || errno != ENOMEM) FAIL("reallocarray overflow");
    break;
  }
  case 6: {
    uint64_t v = 0;
    size_t len = 8;
    if (hak_ctl_get("no.such.name", &v, &len) != -ENOENT) FAIL("hak_ctl_get(unknown) not -ENOENT");
    if (hak_ctl_set("total.in_use", &v, 8) != -EPERM) FAIL("hak_ctl_set(read-only) not -EPERM");
    if (hak_ctl_set("opt.stats", &v, 4) != -EINVAL) FAIL("hak_ctl_set(len 4) not -EINVAL");
    break;
  }
  default: {
    uint64_t big = 3;
    if (hak_ctl_set("opt.stats", &big, 8) != -EINVAL) FAIL("hak_ctl_set(opt.stats, 3) not -EINVAL");
    break;
  }
  }
}

static void do_ctl(unsigned what, unsigned v) {
  static const char *const names[] = {"opt.purge_delay_ms", "opt.region_cache"};
  int64_t val;
  const char *name = names[what & 1];
  if (what & 1) val = v % 5;                         /* regions */
  else val = (v % 4) == 0 ? -1 : (int64_t)(v % 300); /* ms, or never */
  if (hak_ctl_set(name, &val, sizeof val) != 0) FAIL("hak_ctl_set(%s, %lld)", name, (long long)val);
  int64_t back = 0;
  size_t len = sizeof back;
  if (hak_ctl_get(name, &back, &len) != 0 || back != val)
    FAIL("hak_ctl_get(%s) = %lld after setting %lld", name, (long long)back, (long long)val);
  uint64_t x;
  static const char *const figures[] = {"total.in_use", "total.committed", "total.mapped",
                                        "tier.large.live_bytes", "class.3.live_blocks"};
  if (hak_stats_get(figures[v % 5], &x) != 0) FAIL("hak_stats_get(%s)", figures[v % 5]);
}

static void step(input_t *in) {
  unsigned op = take(in) % 30, idx = take(in);
  slot_t *s = &slots[idx % SLOTS];
  unsigned char tag = (unsigned char)(idx * 37 + op + 1);
  int h = (int)(idx >> 6) % HEAPS;
  if (op >= 10 && op < 20) op += 10;
  bool on_block = op < 24 || op >= 28;                /* 20 .. 23, 28, 29: on a live block */
  if (op >= 20 && on_block && s->p == NULL) op %= 10; /* which it makes first */
  if (op < 10 && s->p != NULL) op = 20 + op % 4;      /* a slot in use: free or realloc it */
  size_t n = op < 10 || op == 22 || op == 23 ? take_size(in) : 0;
  if (op < 10 && live + n > LIVE_CAP) return;
  errno = 0;
  switch (op) {
  case 0: adopt(s, malloc(n), n, 1, -1, (n >> 1) & 1, false, tag, "malloc"); break;
  case 1: adopt(s, calloc(1, n), n, 1, -1, 0, true, tag, "calloc"); break;
  case 2: {
    size_t a = take_align(in);
    if (a < sizeof(void *)) a = sizeof(void *);
    void *p = NULL;
    int rc = posix_memalign(&p, a, n);
    if (rc != 0) FAIL("posix_memalign(%zu, %zu) = %d", a, n, rc);
    adopt(s, p, n, a, -1, 2, false, tag, "posix_memalign");
    break;
  }
  case 3: {
    size_t a = take_align(in);
    adopt(s, aligned_alloc(a, n), n, a, -1, 2, false, tag, "aligned_alloc");
    break;
  }
  case 4: {
    size_t a = take_align(in);
    adopt(s, memalign(a, n), n, a, -1, 0, false, tag, "memalign");
    break;
  }
  case 5: {
    size_t count = 1 + take(in) % 8;
    size_t m = n / count;
    adopt(s, reallocarray(NULL, count, m), count * m, 1, -1, 0, false, tag, "reallocarray");
    break;
  }
  case 6: adopt(s, hak_heap_malloc(heap_for(h), n), n, 1, h, 0, false, tag, "hak_heap_malloc"); break;
  case 7: adopt(s, hak_heap_calloc(heap_for(h), 1, n), n, 1, h, 0, true, tag, "hak_heap_calloc"); break;
  case 8: {
    size_t a = take_align(in);
    adopt(s, hak_heap_aligned_alloc(heap_for(h), a, n), n, a, h, 0, false, tag, "hak_heap_aligned_alloc");
    break;
  }
  case 9:
    adopt(s, n > 4096 ? valloc(n) : pvalloc(n), n, 4096, -1, 0, false, tag, n > 4096 ? "valloc" : "pvalloc");
    break;
  case 20: release(s, false); break;
  case 21: release(s, true); break;
  case 22: do_realloc(s, n, -1, tag); break;
  case 23: do_realloc(s, n, h, tag); break;
  case 24: heap_destroy(h); break;
  case 25: malloc_trim(take(in) & 1 ? 0 : 1 << 20); break;
  case 26: do_ctl(take(in), take16(in)); break;
  case 27: misuse_that_must_not_abort(take(in)); break;
  default: {
    size_t usable = malloc_usable_size(s->p);
    if (usable != s->usable) FAIL("usable size of %p went from %zu to %zu", (void *)s->p, s->usable, usable);
    verify(s->p, s->usable, s->tag, "a live block");
    break;
  }
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  input_t in = {data, data + size};
  while (in.p < in.end) step(&in);
  for (int i = 0; i < SLOTS; i++) release(&slots[i], false);
  for (int h = 0; h < HEAPS; h++) heap_destroy(h);
  if (live != 0) FAIL("model: %zu bytes still counted live", live);
  int64_t delay = 100, cache = 2; /* the defaults back for the next input */
  hak_ctl_set("opt.purge_delay_ms", &delay, sizeof delay);
  hak_ctl_set("opt.region_cache", &cache, sizeof cache);
  return 0;
}
