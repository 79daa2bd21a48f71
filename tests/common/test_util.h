/* Shared helpers for hakmem's correctness tests (tests/api, tests/stress).
 *
 * Every test program is deterministic given a seed (argv[1], default fixed), reports each
 * failure with enough detail to replay it, and exits non-zero on any failure in every
 * build type: CHECK counts a failure and goes on, REQUIRE prints and aborts. Nothing here
 * uses assert().
 *
 * Usable from C (gnu11) and C++. Header-only: every function is static inline.
 */
#ifndef HAKMEM_TEST_UTIL_H
#define HAKMEM_TEST_UTIL_H

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hakmem.h"

/* The hak_ symbols are weak: under plain glibc they resolve to NULL and the
 * hakmem-specific checks are skipped. */
#pragma weak hak_malloc
#pragma weak hak_calloc
#pragma weak hak_realloc
#pragma weak hak_reallocarray
#pragma weak hak_free
#pragma weak hak_free_sized
#pragma weak hak_free_aligned_sized
#pragma weak hak_posix_memalign
#pragma weak hak_aligned_alloc
#pragma weak hak_memalign
#pragma weak hak_valloc
#pragma weak hak_pvalloc
#pragma weak hak_malloc_usable_size
#pragma weak hak_malloc_trim
#pragma weak hak_stats_print
#pragma weak hak_malloc_stats
#pragma weak hak_get_info

#ifdef __cplusplus
extern "C" {
#endif

/* glibc's extensions that hakmem defines everywhere and musl's <malloc.h> does not declare. */
#ifndef __GLIBC__
int malloc_trim(size_t pad);
void malloc_stats(void);
void *pvalloc(size_t size);
#endif

/* C23 sized frees: older glibc (2.36 here) lacks them, so they are weak too and the tests fall
 * back to free() when they are absent. */
#ifndef __cplusplus
void free_sized(void *p, size_t size) __attribute__((weak));
void free_aligned_sized(void *p, size_t alignment, size_t size) __attribute__((weak));

static inline void tu_free_sized(void *p, size_t size) {
  if (free_sized) free_sized(p, size);
  else free(p);
}
static inline void tu_free_aligned_sized(void *p, size_t alignment, size_t size) {
  if (free_aligned_sized) free_aligned_sized(p, alignment, size);
  else free(p);
}
#endif

/* True when the process is linked with hakmem (then malloc and friends are hakmem's). */
static inline bool tu_have_hakmem(void) { return hak_malloc != NULL && hak_get_info != NULL; }

/* ---- failure reporting ---- */

static unsigned tu_failures; /* updated atomically; read by tu_finish */
#define TU_MAX_REPORTS 100   /* failures printed in full; the rest are only counted */

static inline void tu_fail(const char *file, int line, const char *cond, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static inline void tu_fail(const char *file, int line, const char *cond, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  unsigned n = __atomic_add_fetch(&tu_failures, 1, __ATOMIC_RELAXED);
  if (n <= TU_MAX_REPORTS) fprintf(stderr, "FAIL %s:%d: %s: %s\n", file, line, cond, msg);
  if (n == TU_MAX_REPORTS) fprintf(stderr, "(further failures are counted, not printed)\n");
  fflush(stderr);
}

/* CHECK(cond, printf-format, args...): on false, report and count a failure, go on. */
#define CHECK(cond, ...)                                                               \
  do {                                                                                 \
    if (__builtin_expect(!(cond), 0)) tu_fail(__FILE__, __LINE__, #cond, __VA_ARGS__); \
  } while (0)

/* REQUIRE: like CHECK, but aborts: for states in which going on makes no sense
 * (corrupted memory, a NULL where a block is needed). */
#define REQUIRE(cond, ...)                             \
  do {                                                 \
    if (__builtin_expect(!(cond), 0)) {                \
      tu_fail(__FILE__, __LINE__, #cond, __VA_ARGS__); \
      abort();                                         \
    }                                                  \
  } while (0)

/* Prints the verdict and returns the exit status for main. */
static inline int tu_finish(const char *test) {
  unsigned n = __atomic_load_n(&tu_failures, __ATOMIC_RELAXED);
  if (n) {
    fprintf(stderr, "%s: %u check(s) FAILED\n", test, n);
    return 1;
  }
  printf("%s: all checks passed\n", test);
  return 0;
}

/* ---- arguments ---- */

/* argv[idx] as an unsigned number (decimal or 0x-hex), or dflt when absent. */
static inline uint64_t tu_arg_u64(int argc, char **argv, int idx, uint64_t dflt) {
  if (idx >= argc) return dflt;
  char *end;
  errno = 0;
  unsigned long long v = strtoull(argv[idx], &end, 0);
  if (errno || *end || end == argv[idx]) {
    fprintf(stderr, "bad argument %d: '%s' (want a number)\n", idx, argv[idx]);
    exit(2);
  }
  return v;
}

/* Every test takes the seed as argv[1] and prints it so a failure can be replayed. */
static inline uint64_t tu_seed(int argc, char **argv) {
  uint64_t seed = tu_arg_u64(argc, argv, 1, 0x6b616d6d65ULL);
  printf("%s: seed %" PRIu64 " (pass it as the first argument to replay)\n", argv[0], seed);
  fflush(stdout);
  return seed;
}

/* ---- deterministic PRNG (splitmix64) ---- */

typedef struct tu_rng {
  uint64_t s;
} tu_rng;

static inline uint64_t tu_mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static inline tu_rng tu_rng_make(uint64_t seed, uint64_t stream) {
  tu_rng r = {tu_mix64(seed ^ tu_mix64(stream + 0x9e3779b97f4a7c15ULL))};
  return r;
}

static inline uint64_t tu_rand(tu_rng *r) { return tu_mix64(r->s += 0x9e3779b97f4a7c15ULL); }

/* Uniform in [0, n); n > 0. */
static inline uint64_t tu_below(tu_rng *r, uint64_t n) {
  return (uint64_t)(((unsigned __int128)tu_rand(r) * n) >> 64);
}

/* Uniform in [lo, hi]. */
static inline uint64_t tu_range(tu_rng *r, uint64_t lo, uint64_t hi) { return lo + tu_below(r, hi - lo + 1); }

/* ---- content patterns ----
 * Byte i of a block is byte (i % 8) of word W(i / 8) = f(origin + 8*(i/8), seed), where
 * origin is the address the block had when it was filled. Keeping origin apart from the
 * current address lets a test check the part realloc preserved after the block moved. */

__attribute__((always_inline)) static inline uint64_t tu_pattern_word(uintptr_t addr, uint64_t seed) {
  uint64_t x = ((uint64_t)addr ^ seed) * 0x9e3779b97f4a7c15ULL;
  return x ^ (x >> 29) ^ seed;
}

static inline void tu_fill(void *p, size_t n, uintptr_t origin, uint64_t seed) {
  unsigned char *b = (unsigned char *)p;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w = tu_pattern_word(origin + i, seed);
    memcpy(b + i, &w, 8);
  }
  if (i < n) {
    uint64_t w = tu_pattern_word(origin + i, seed);
    memcpy(b + i, &w, n - i);
  }
}

/* Offset of the first byte that differs from the pattern, or SIZE_MAX if none does. */
static inline size_t tu_find_mismatch(const void *p, size_t n, uintptr_t origin, uint64_t seed) {
  const unsigned char *b = (const unsigned char *)p;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w = tu_pattern_word(origin + i, seed), got;
    memcpy(&got, b + i, 8);
    if (got != w) break;
  }
  for (; i < n; i++) {
    uint64_t w = tu_pattern_word(origin + (i & ~(size_t)7), seed);
    if (b[i] != (unsigned char)(w >> (8 * (i & 7)))) return i;
  }
  return SIZE_MAX;
}

/* Checks the pattern; on a mismatch reports `what`, the block and the first bad bytes,
 * counts a failure and returns false. */
static inline bool tu_verify(const char *what, const void *p, size_t n, uintptr_t origin, uint64_t seed) {
  size_t off = tu_find_mismatch(p, n, origin, seed);
  if (off == SIZE_MAX) return true;
  const unsigned char *b = (const unsigned char *)p;
  size_t bad = 0;
  for (size_t i = off; i < n; i++) {
    uint64_t w = tu_pattern_word(origin + (i & ~(size_t)7), seed);
    bad += b[i] != (unsigned char)(w >> (8 * (i & 7)));
  }
  char got[3 * 16 + 1] = "", want[3 * 16 + 1] = "";
  for (size_t i = off; i < n && i < off + 16; i++) {
    uint64_t w = tu_pattern_word(origin + (i & ~(size_t)7), seed);
    snprintf(got + 3 * (i - off), 4, "%02x ", b[i]);
    snprintf(want + 3 * (i - off), 4, "%02x ", (unsigned char)(w >> (8 * (i & 7))));
  }
  tu_fail(__FILE__, __LINE__, "pattern intact",
          "%s: block %p size %zu (filled at %p, seed %#" PRIx64
          "): first bad byte at "
          "offset %zu, %zu bad bytes; got [%s] want [%s]",
          what, p, n, (void *)origin, seed, off, bad, got, want);
  return false;
}

/* Fill and verify at the block's own address. */
static inline void tu_fill_here(void *p, size_t n, uint64_t seed) { tu_fill(p, n, (uintptr_t)p, seed); }
static inline bool tu_verify_here(const char *what, const void *p, size_t n, uint64_t seed) {
  return tu_verify(what, p, n, (uintptr_t)p, seed);
}

/* Whether every byte of p[0..n) equals c. */
static inline bool tu_all_bytes(const void *p, size_t n, unsigned char c) {
  const unsigned char *b = (const unsigned char *)p;
  for (size_t i = 0; i < n; i++)
    if (b[i] != c) return false;
  return true;
}

/* Whether p[0..n) is all zero (fast: compares against a zero page). */
static inline bool tu_is_zero(const void *p, size_t n) {
  static const unsigned char zero[4096] = {0};
  const unsigned char *b = (const unsigned char *)p;
  for (size_t i = 0; i < n; i += sizeof zero) {
    size_t len = n - i < sizeof zero ? n - i : sizeof zero;
    if (memcmp(b + i, zero, len) != 0) return false;
  }
  return true;
}

/* Whether p is a-aligned. The address goes through an empty asm first: headers declare
 * aligned_alloc and memalign with alloc_align, and an optimiser that trusts it folds the
 * very check a test is making. */
static inline bool tu_aligned(const void *p, size_t a) {
  uintptr_t v = (uintptr_t)p;
  __asm__ volatile("" : "+r"(v));
  return (v & (a - 1)) == 0;
}

/* Hides a value from the optimiser, so that sizes such as SIZE_MAX reach the allocator
 * at run time instead of drawing compile-time warnings or folding. */
static inline size_t tu_opaque(size_t n) {
  __asm__ volatile("" : "+r"(n));
  return n;
}

/* Hides a pointer's identity from the optimiser (and its use-after-realloc warnings):
 * for calls that are expected to fail and leave the block alone. */
static inline void *tu_hide(void *p) {
  __asm__ volatile("" : "+r"(p));
  return p;
}

/* Page size, cached. */
static inline size_t tu_page(void) {
  static size_t page;
  if (!page) page = (size_t)sysconf(_SC_PAGESIZE);
  return page;
}

/* ---- process figures ---- */

/* Field `field` (0 = total program size, 1 = resident) of /proc/self/statm, in bytes. */
static inline size_t tu_statm_bytes(int field) {
  FILE *f = fopen("/proc/self/statm", "r");
  if (!f) return 0;
  unsigned long v[2] = {0, 0};
  int got = fscanf(f, "%lu %lu", &v[0], &v[1]);
  fclose(f);
  if (got != 2) return 0;
  return (size_t)v[field] * (size_t)sysconf(_SC_PAGESIZE);
}
static inline size_t tu_rss_bytes(void) { return tu_statm_bytes(1); }
static inline size_t tu_vm_bytes(void) { return tu_statm_bytes(0); }

/* Limits this process's address space to what it maps now plus `extra` bytes. */
static inline bool tu_limit_address_space(size_t extra) {
  struct rlimit rl;
  rl.rlim_cur = rl.rlim_max = tu_vm_bytes() + extra;
  if (setrlimit(RLIMIT_AS, &rl) != 0) {
    perror("setrlimit(RLIMIT_AS)");
    return false;
  }
  return true;
}

static inline double tu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- child processes ---- */

/* Waits for child `pid` up to `timeout_s` seconds; kills it if it is still running then.
 * Returns true when it exited with status 0; otherwise reports `what` and returns false. */
static inline bool tu_wait_child(pid_t pid, const char *what, double timeout_s) {
  double deadline = tu_now() + timeout_s;
  int status;
  for (;;) {
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) {
      tu_fail(__FILE__, __LINE__, "waitpid", "%s: waitpid: %s", what, strerror(errno));
      return false;
    }
    if (tu_now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      tu_fail(__FILE__, __LINE__, "child finished", "%s: still running after %.0f s (deadlock?), killed",
              what, timeout_s);
      return false;
    }
    usleep(1000);
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return true;
  if (WIFSIGNALED(status))
    tu_fail(__FILE__, __LINE__, "child exit 0", "%s: killed by signal %d (%s)", what, WTERMSIG(status),
            strsignal(WTERMSIG(status)));
  else tu_fail(__FILE__, __LINE__, "child exit 0", "%s: exit status %d", what, WEXITSTATUS(status));
  return false;
}

/* Runs fn(arg) in a forked child; the child exits with fn's result (0 = passed, and
 * non-zero when one of its CHECKs failed). Returns true when the child passed. */
static inline bool tu_in_child(const char *what, int (*fn)(void *), void *arg, double timeout_s) {
  fflush(NULL);
  unsigned failures_before = __atomic_load_n(&tu_failures, __ATOMIC_RELAXED);
  pid_t pid = fork();
  if (pid < 0) {
    tu_fail(__FILE__, __LINE__, "fork", "%s: fork: %s", what, strerror(errno));
    return false;
  }
  if (pid == 0) {
    int rc = fn(arg);
    if (__atomic_load_n(&tu_failures, __ATOMIC_RELAXED) != failures_before) rc = 1;
    fflush(NULL);
    _exit(rc);
  }
  return tu_wait_child(pid, what, timeout_s);
}

#ifdef __cplusplus
}
#endif

#endif /* HAKMEM_TEST_UTIL_H */
