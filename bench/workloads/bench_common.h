/* bench_common.h — the small toolkit every hakmem workload shares.
 *
 * Glossary:
 *   rng     a deterministic xorshift64* generator, seeded through splitmix64 from the
 *           command-line seed and a stream number (one stream per thread).
 *   stamp   a cheap signature written at both ends of a block (a tag derived from the
 *           block's address and size); checked before the block is freed.
 *   fill    a full byte pattern derived from a key and the offset, independent of the
 *           address, so it survives realloc; checked in full or in part.
 *   touch   one word written every `stride` bytes, to fault in the pages of large blocks.
 *   table   a slot table: each step picks a random slot, frees it if live, else fills it
 *           (bench_table_run; the pattern of random_mixed, aligned, calloc and large).
 *   heap api  an allocator's own heaps (make, allocate into, destroy whole), found at run
 *           time with dlsym: hakmem's hak_heap_*, mimalloc's mi_heap_* (bench_heap_api_find).
 *   RESULT  the one machine-readable line a workload prints on success:
 *           "RESULT workload=NAME ops=N seconds=S ops_per_sec=R peak_rss_kib=K minor_faults=F
 *           key=value ..." (peak_rss_kib: the process's VmHWM, its peak resident set;
 *           minor_faults: getrusage's ru_minflt for the whole process).
 *
 * A wrong result prints "FAIL workload=NAME: why" on stderr and exits with status 1; a bad
 * command line prints the usage and exits with status 2. Plain malloc/free only: the
 * allocator under test is chosen by LD_PRELOAD.
 */
#ifndef BENCH_COMMON_H
#define BENCH_COMMON_H

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

/* ---- identity, failure and usage ---------------------------------------------------- */

static const char *bench_name = "unknown";
static const char *bench_usage_text = "";

static inline void bench_init(const char *name, const char *usage) {
  bench_name = name;
  bench_usage_text = usage;
}

__attribute__((noreturn, format(printf, 1, 2))) static inline void bench_fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "FAIL workload=%s: ", bench_name);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(1);
}

__attribute__((noreturn)) static inline void bench_usage(const char *why) {
  fprintf(stderr, "%s: %s\nusage: %s\n", bench_name, why, bench_usage_text);
  exit(2);
}

/* A NULL from malloc and friends is a wrong result in every workload. */
static inline void *bench_check_alloc(void *p, size_t size) {
  if (p == NULL) bench_fail("allocation of %zu bytes returned NULL (errno %d)", size, errno);
  return p;
}

/* Keep the compiler from removing a malloc/free pair whose block looks unused. */
static inline void bench_escape(void *p) { __asm__ volatile("" : : "r"(p) : "memory"); }

/* ---- command line -------------------------------------------------------------------- */

/* Removes FLAG from argv wherever it stands; true if it was there. */
static inline bool bench_take_flag(int *argc, char **argv, const char *flag) {
  bool found = false;
  int out = 1;
  for (int i = 1; i < *argc; i++) {
    if (strcmp(argv[i], flag) == 0) found = true;
    else argv[out++] = argv[i];
  }
  argv[out] = NULL;
  *argc = out;
  return found;
}

/* Positional argument INDEX (1-based) as an unsigned integer, or DEFAULT if absent. */
static inline uint64_t bench_arg_u64(int argc, char **argv, int index, uint64_t dflt) {
  if (index >= argc) return dflt;
  char *end;
  errno = 0;
  unsigned long long v = strtoull(argv[index], &end, 0);
  if (errno != 0 || end == argv[index] || *end != '\0' || argv[index][0] == '-') bench_usage("bad number");
  return v;
}

static inline double bench_arg_double(int argc, char **argv, int index, double dflt) {
  if (index >= argc) return dflt;
  char *end;
  errno = 0;
  double v = strtod(argv[index], &end);
  if (errno != 0 || end == argv[index] || *end != '\0' || !(v >= 0)) bench_usage("bad number");
  return v;
}

static inline void bench_arg_count(int argc, int max_positional) {
  if (argc - 1 > max_positional) bench_usage("too many arguments");
}

/* ---- time ---------------------------------------------------------------------------- */

static inline double bench_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline void bench_sleep(double seconds) {
  struct timespec ts;
  ts.tv_sec = (time_t)seconds;
  ts.tv_nsec = (long)((seconds - (double)ts.tv_sec) * 1e9);
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

/* ---- deterministic randomness -------------------------------------------------------- */

typedef struct {
  uint64_t state;
} bench_rng;

static inline uint64_t bench_splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

static inline bench_rng bench_rng_make(uint64_t seed, uint64_t stream) {
  bench_rng r;
  r.state = bench_splitmix64(seed ^ bench_splitmix64(stream + 1));
  if (r.state == 0) r.state = 1;
  return r;
}

static inline uint64_t bench_rng_next(bench_rng *r) {
  uint64_t x = r->state;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  r->state = x;
  return x * 0x2545F4914F6CDD1Dull;
}

/* Uniform in [0, n), n > 0 (multiply-shift; the bias is far below anything we measure). */
static inline uint64_t bench_rng_below(bench_rng *r, uint64_t n) {
  return (uint64_t)(((unsigned __int128)bench_rng_next(r) * n) >> 64);
}

/* Uniform in [lo, hi]. */
static inline uint64_t bench_rng_range(bench_rng *r, uint64_t lo, uint64_t hi) {
  return lo + bench_rng_below(r, hi - lo + 1);
}

/* Log-uniform in [lo, hi]: every power-of-two band is equally likely. */
static inline uint64_t bench_rng_log_range(bench_rng *r, uint64_t lo, uint64_t hi) {
  unsigned lo_bits = 63u - (unsigned)__builtin_clzll(lo | 1);
  unsigned hi_bits = 63u - (unsigned)__builtin_clzll(hi | 1);
  unsigned bits = lo_bits + (unsigned)bench_rng_below(r, hi_bits - lo_bits + 1);
  uint64_t band_lo = (uint64_t)1 << bits;
  uint64_t band_hi = bits >= 63 ? UINT64_MAX : ((uint64_t)2 << bits) - 1;
  if (band_lo < lo) band_lo = lo;
  if (band_hi > hi) band_hi = hi;
  return bench_rng_range(r, band_lo, band_hi);
}

/* ---- blocks: a live block and its size ---------------------------------------------- */

typedef struct {
  void *p;
  size_t size;
} bench_block;

/* ---- slot table: the random alloc-or-free pattern ----------------------------------- */

/* Runs OPS steps over a table of SLOTS blocks, all empty at first: each step picks a slot
 * at random; an occupied one goes to release (which checks and frees it), an empty one to
 * acquire (which allocates it and sets p and size; n counts the acquires before it). At
 * the end every block still live is released. Returns the number of acquires. Inlined
 * with its callbacks, so the indirection costs nothing in the measured loop. */
__attribute__((always_inline)) static inline uint64_t bench_table_run(
    uint64_t ops, uint64_t slots, bench_rng *rng, void (*acquire)(bench_block *b, bench_rng *rng, uint64_t n),
    void (*release)(bench_block *b)) {
  bench_block *table = bench_check_alloc(calloc(slots, sizeof *table), slots * sizeof *table);
  uint64_t acquired = 0;
  for (uint64_t i = 0; i < ops; i++) {
    bench_block *b = &table[bench_rng_below(rng, slots)];
    if (b->p != NULL) {
      release(b);
      b->p = NULL;
    } else {
      acquire(b, rng, acquired++);
    }
  }
  for (uint64_t s = 0; s < slots; s++)
    if (table[s].p != NULL) release(&table[s]);
  free(table);
  return acquired;
}

/* ---- stamp: both ends of a block ----------------------------------------------------- */

static inline uint64_t bench_tag(const void *p, size_t size) {
  return bench_splitmix64((uint64_t)(uintptr_t)p ^ ((uint64_t)size << 48));
}

static inline void bench_stamp(void *p, size_t size) {
  uint64_t tag = bench_tag(p, size);
  uint64_t tail = ~tag;
  if (size >= 16) {
    memcpy(p, &tag, 8);
    memcpy((char *)p + size - 8, &tail, 8);
  } else {
    memcpy(p, &tag, size < 8 ? size : 8);
  }
}

static inline bool bench_stamp_ok(const void *p, size_t size) {
  uint64_t tag = bench_tag(p, size);
  uint64_t tail = ~tag;
  if (size >= 16) return memcmp(p, &tag, 8) == 0 && memcmp((const char *)p + size - 8, &tail, 8) == 0;
  return memcmp(p, &tag, size < 8 ? size : 8) == 0;
}

static inline void bench_check_stamp(const void *p, size_t size) {
  if (!bench_stamp_ok(p, size)) bench_fail("block %p of %zu bytes was overwritten", p, size);
}

/* A release for bench_table_run: check the stamp, then free. */
static inline void bench_free_stamped(bench_block *b) {
  bench_check_stamp(b->p, b->size);
  free(b->p);
}

/* ---- fill: a key-and-offset pattern (address independent) --------------------------- */

/* Byte i of a filled block is byte (i % 8) of word i / 8 of the pattern, so whole words
 * can be written and compared at once (x86-64 and other little-endian targets only). */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the fill pattern assumes little-endian");

static inline uint64_t bench_fill_word(uint64_t key, size_t word) {
  return key ^ (word * 0x9E3779B97F4A7C15ull);
}

static inline uint8_t bench_fill_byte(uint64_t key, size_t offset) {
  return (uint8_t)(bench_fill_word(key, offset / 8) >> (offset % 8 * 8));
}

/* Writes the pattern over bytes [from, to) of block p. */
static inline void bench_fill(void *p, size_t from, size_t to, uint64_t key) {
  uint8_t *b = p;
  size_t i = from;
  for (; i < to && i % 8 != 0; i++) b[i] = bench_fill_byte(key, i);
  for (; i + 8 <= to; i += 8) {
    uint64_t w = bench_fill_word(key, i / 8);
    memcpy(b + i, &w, 8);
  }
  for (; i < to; i++) b[i] = bench_fill_byte(key, i);
}

/* Returns the first offset in [from, to) that differs from the pattern, or `to`. */
static inline size_t bench_fill_mismatch(const void *p, size_t from, size_t to, uint64_t key) {
  const uint8_t *b = p;
  size_t i = from;
  for (; i < to && i % 8 != 0; i++)
    if (b[i] != bench_fill_byte(key, i)) return i;
  for (; i + 8 <= to; i += 8) {
    uint64_t w;
    memcpy(&w, b + i, 8);
    if (w != bench_fill_word(key, i / 8)) break;
  }
  for (; i < to; i++)
    if (b[i] != bench_fill_byte(key, i)) return i;
  return to;
}

/* ---- touch: one word every `stride` bytes, and the last word ------------------------- */

/* The strided words stop short of the last word so that the two never overlap. */

static inline void bench_touch(void *p, size_t size, size_t stride, uint64_t key) {
  char *b = p;
  for (size_t off = 0; off + 16 <= size; off += stride) {
    uint64_t v = key ^ off;
    memcpy(b + off, &v, 8);
  }
  if (size >= 8) {
    uint64_t v = ~key;
    memcpy(b + size - 8, &v, 8);
  }
}

static inline bool bench_touch_ok(const void *p, size_t size, size_t stride, uint64_t key) {
  const char *b = p;
  uint64_t v;
  for (size_t off = 0; off + 16 <= size; off += stride) {
    memcpy(&v, b + off, 8);
    if (v != (key ^ off)) return false;
  }
  if (size >= 8) {
    memcpy(&v, b + size - 8, 8);
    if (v != ~key) return false;
  }
  return true;
}

/* A block of `size` bytes with a word written in every page, so that all its pages are
 * resident; and its check and free (a workload failure if the words changed). */
/* Fisher-Yates: the blocks in a random order. */
static inline void bench_blocks_shuffle(bench_block *blocks, size_t n, bench_rng *rng) {
  for (size_t i = n; i > 1; i--) {
    size_t j = bench_rng_below(rng, i);
    bench_block t = blocks[i - 1];
    blocks[i - 1] = blocks[j];
    blocks[j] = t;
  }
}

enum { BENCH_PAGE = 4096 };

static inline void bench_block_touched_new(bench_block *b, size_t size) {
  b->size = size;
  b->p = bench_check_alloc(malloc(size), size);
  bench_touch(b->p, size, BENCH_PAGE, bench_tag(b->p, size));
}

static inline void bench_block_touched_free(bench_block *b) {
  if (!bench_touch_ok(b->p, b->size, BENCH_PAGE, bench_tag(b->p, b->size)))
    bench_fail("block %p of %zu bytes was overwritten", b->p, b->size);
  free(b->p);
  b->p = NULL;
}

/* ---- threads ------------------------------------------------------------------------- */

/* Runs fn(args + i * stride) on n threads and waits for them all. */
/* n zeroed elements of `size` bytes on 64-byte boundaries, for per-thread state that its
 * thread writes on every step: declare the struct's first member _Alignas(BENCH_LINE) so
 * that its size is whole cache lines. Otherwise neighbouring threads' counters and random
 * states share a line and the workload measures its own false sharing, which depends on
 * where the allocator happened to place the array, instead of the allocator. */
#define BENCH_LINE 64
static inline void *bench_calloc_lines(size_t n, size_t size) {
  void *p = NULL;
  if (size % BENCH_LINE != 0 || posix_memalign(&p, BENCH_LINE, n * size) != 0)
    bench_fail("cannot allocate %zu cache-line elements of %zu bytes", n, size);
  memset(p, 0, n * size);
  return p;
}

static inline void bench_run_threads(unsigned n, void *(*fn)(void *), void *args, size_t stride) {
  pthread_t *tids = bench_check_alloc(calloc(n, sizeof *tids), n * sizeof *tids);
  for (unsigned i = 0; i < n; i++) {
    int err = pthread_create(&tids[i], NULL, fn, (char *)args + i * stride);
    if (err != 0) bench_fail("pthread_create: %s", strerror(err));
  }
  for (unsigned i = 0; i < n; i++) pthread_join(tids[i], NULL);
  free(tids);
}

static inline unsigned bench_arg_threads(int argc, char **argv, int index, unsigned dflt) {
  uint64_t n = bench_arg_u64(argc, argv, index, dflt);
  if (n < 1 || n > 1024) bench_usage("threads must be 1..1024");
  return (unsigned)n;
}

/* ---- memory -------------------------------------------------------------------------- */

/* Resident set of this process in KiB, from /proc/self/statm. */
static inline uint64_t bench_rss_kib(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  unsigned long long size = 0, resident = 0;
  if (f == NULL) bench_fail("cannot open /proc/self/statm");
  int n = fscanf(f, "%llu %llu", &size, &resident);
  fclose(f);
  if (n != 2) bench_fail("cannot parse /proc/self/statm");
  return (uint64_t)resident * (uint64_t)sysconf(_SC_PAGESIZE) / 1024;
}

/* Peak resident set of this process in KiB: VmHWM from /proc/self/status. (A parent's
 * wait4 ru_maxrss would also count the parent's own memory at the time it forked us.) */
static inline uint64_t bench_peak_rss_kib(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  unsigned long long kib = 0;
  if (f == NULL) bench_fail("cannot open /proc/self/status");
  while (fgets(line, sizeof line, f) != NULL)
    if (sscanf(line, "VmHWM: %llu kB", &kib) == 1) break;
  fclose(f);
  return kib;
}

/* ---- heaps: the preloaded allocator's own heap API, if it has one -------------------- */

typedef struct {
  const char *name; /* "hak_heap" or "mi_heap" */
  void *(*make)(void);
  void *(*alloc)(void *heap, size_t size);
  void (*destroy)(void *heap);
  void *(*set_default)(void *heap); /* returns the previous default */
} bench_heap_api;

/* Looks the API up in the process (the preloaded allocator); false if it has none. */
static inline bool bench_heap_api_find(bench_heap_api *api) {
  static const char *names[][5] = {
      {"hak_heap", "hak_heap_new", "hak_heap_malloc", "hak_heap_destroy", "hak_heap_set_default"},
      {"mi_heap", "mi_heap_new", "mi_heap_malloc", "mi_heap_destroy", "mi_heap_set_default"},
  };
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    void *f[4];
    for (int k = 0; k < 4; k++) f[k] = dlsym(RTLD_DEFAULT, names[i][k + 1]);
    if (f[0] == NULL || f[1] == NULL || f[2] == NULL || f[3] == NULL) continue;
    api->name = names[i][0];
    api->make = (void *(*)(void))f[0];
    api->alloc = (void *(*)(void *, size_t))f[1];
    api->destroy = (void (*)(void *))f[2];
    api->set_default = (void *(*)(void *))f[3];
    return true;
  }
  return false;
}

/* ---- the result line ----------------------------------------------------------------- */

/* Minor page faults of this process so far (getrusage's ru_minflt, every thread). */
static inline uint64_t bench_minor_faults(void) {
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
  return (uint64_t)ru.ru_minflt;
}

/* Prints "RESULT workload=NAME ops=.. seconds=.. ops_per_sec=.. peak_rss_kib=..
 * minor_faults=.." then EXTRA (printf format of further " key=value" pairs, may be ""). */
__attribute__((format(printf, 3, 4))) static inline void bench_result(uint64_t ops, double seconds,
                                                                      const char *extra, ...) {
  va_list ap;
  printf("RESULT workload=%s ops=%llu seconds=%.6f ops_per_sec=%.6g peak_rss_kib=%llu minor_faults=%llu",
         bench_name, (unsigned long long)ops, seconds, seconds > 0 ? (double)ops / seconds : 0.0,
         (unsigned long long)bench_peak_rss_kib(), (unsigned long long)bench_minor_faults());
  va_start(ap, extra);
  vprintf(extra, ap);
  va_end(ap);
  putchar('\n');
  fflush(stdout);
}

/* ---- a whole slot-table workload ---------------------------------------------------- */

/* A whole slot-table workload: times bench_table_run from a fresh generator and prints
 * the RESULT line with working_set, seed and allocs, then EXTRA (" key=value" pairs). */
__attribute__((always_inline)) static inline void bench_table_benchmark(
    uint64_t ops, uint64_t slots, uint64_t seed, void (*acquire)(bench_block *b, bench_rng *rng, uint64_t n),
    void (*release)(bench_block *b), const char *extra) {
  if (slots < 1) bench_usage("WORKING_SET must be at least 1");
  bench_rng rng = bench_rng_make(seed, 0);
  double start = bench_now();
  uint64_t allocs = bench_table_run(ops, slots, &rng, acquire, release);
  double seconds = bench_now() - start;
  bench_result(ops, seconds, " working_set=%llu seed=%llu allocs=%llu%s", (unsigned long long)slots,
               (unsigned long long)seed, (unsigned long long)allocs, extra);
}

#endif /* BENCH_COMMON_H */
