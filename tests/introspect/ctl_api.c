/* ctl_api: hak_stats_get, hak_ctl_get, hak_ctl_set and hak_ctl_describe, for every name
 * of the table and for names and values that are wrong.
 *   - every name reads, through both calls, with the type its description gives;
 *   - what the figures say follows what the program does: blocks of each class, large
 *     and huge blocks, frees from another thread, threads that start and exit, trim;
 *   - every writable option takes its good values (read back, and in the text report)
 *     and refuses bad ones with -EINVAL; every other name refuses with -EPERM;
 *   - wrong names (unknown, truncated, a class out of range, very long), NULL
 *     arguments and wrong lengths give an error code, never a crash.
 * Run single-threaded apart from its own helper threads: figures are compared exactly.
 */
#include "test_util.h"

#include <limits.h>
#include <malloc.h>
#include <pthread.h>

static uint64_t get(const char *name) {
  uint64_t v = 0;
  int err = hak_stats_get(name, &v);
  REQUIRE(err == 0, "hak_stats_get(%s) = %d", name, err);
  return v;
}

static int64_t get_signed(const char *name) {
  int64_t v = 0;
  size_t len = sizeof v;
  int err = hak_ctl_get(name, &v, &len);
  REQUIRE(err == 0 && len == 8, "hak_ctl_get(%s) = %d, len %zu", name, err, len);
  return v;
}

static int set(const char *name, int64_t v) { return hak_ctl_set(name, &v, sizeof v); }

static char *class_name(char *buf, size_t len, uint64_t c, const char *field) {
  snprintf(buf, len, "class.%" PRIu64 ".%s", c, field);
  return buf;
}

/* ---- every name ------------------------------------------------------------------- */
static size_t names_checked;

static void check_one(const hak_ctl_desc_t *d, const char *name) {
  uint64_t u = 0;
  int64_t s = 0;
  size_t len = 0;
  CHECK(hak_ctl_get(name, NULL, &len) == 0 && len == 8, "%s: size query gave len %zu", name, len);
  len = 8;
  CHECK(hak_ctl_get(name, &s, &len) == 0, "%s: hak_ctl_get failed", name);
  int err = hak_stats_get(name, &u);
  if (d->is_signed) {
    CHECK(err == -EINVAL, "%s: hak_stats_get of a signed name gave %d, not -EINVAL", name, err);
  } else {
    CHECK(err == 0, "%s: hak_stats_get gave %d", name, err);
  }
  for (size_t bad = 0; bad <= 16; bad += 4) {
    if (bad == 8) continue;
    len = bad;
    CHECK(hak_ctl_get(name, &s, &len) == -EINVAL, "%s: length %zu accepted", name, bad);
  }
  CHECK(hak_ctl_get(name, &s, NULL) == -EINVAL, "%s: NULL length accepted", name);
  CHECK(hak_stats_get(name, NULL) == -EINVAL, "%s: NULL value accepted", name);
  CHECK(hak_ctl_set(name, &s, 4) == (d->writable ? -EINVAL : -EPERM), "%s: set with length 4", name);
  CHECK(hak_ctl_set(name, NULL, 8) == (d->writable ? -EINVAL : -EPERM), "%s: set from NULL", name);
  if (!d->writable) {
    CHECK(hak_ctl_set(name, &s, 8) == -EPERM, "%s: read-only name written", name);
  } else { /* writing back what is there changes nothing */
    CHECK(hak_ctl_set(name, &s, 8) == 0, "%s: writing back its own value failed", name);
  }
  names_checked++;
}

static void every_name(void) {
  const hak_ctl_desc_t *d;
  uint64_t classes = get("build.class_count");
  CHECK(classes >= 40 && classes <= 64, "build.class_count %" PRIu64, classes);
  size_t count = 0;
  for (size_t i = 0; (d = hak_ctl_describe(i)) != NULL; i++, count++) {
    CHECK(d->name && d->unit && d->doc && *d->doc, "entry %zu incomplete", i);
    for (size_t j = 0; j < i; j++)
      CHECK(strcmp(hak_ctl_describe(j)->name, d->name) != 0, "%s twice", d->name);
    const char *at = strstr(d->name, "<n>");
    if (at == NULL) {
      check_one(d, d->name);
      continue;
    }
    uint64_t probe; /* the pattern itself is no name */
    CHECK(hak_stats_get(d->name, &probe) == -ENOENT, "%s read as a name", d->name);
    for (uint64_t c = 0; c < classes; c++) {
      char name[128];
      snprintf(name, sizeof name, "%.*s%" PRIu64 "%s", (int)(at - d->name), d->name, c, at + 3);
      check_one(d, name);
    }
  }
  CHECK(count >= 40, "only %zu entries in the table", count);
  CHECK(hak_ctl_describe(count) == NULL && hak_ctl_describe((size_t)-1) == NULL, "past the table");
  printf("ctl_api: %zu entries, %zu names read and written\n", count, names_checked);
}

/* ---- wrong names and arguments ---------------------------------------------------- */
static void wrong_names(void) {
  static const char *const bad[] = {
      "",
      "total",
      "total.",
      ".total.in_use",
      "total.in_use.",
      "total.in_use.x",
      "total..in_use",
      "TOTAL.IN_USE",
      "total.in_use ",
      " total.in_use",
      "tier",
      "tier.small",
      "tier.small.",
      "tier.giant.live_bytes",
      "class",
      "class.",
      "class.5",
      "class.5.",
      "class..slabs",
      "class.51.slabs",
      "class.64.slabs",
      "class.-1.slabs",
      "class.01.slabs",
      "class.+1.slabs",
      "class.1a.slabs",
      "class.99999999999999999999999.slabs",
      "class.<n>.slabs",
      "class.5.slabs.x",
      "class.5.nope",
      "opt",
      "opt.purge_delay",
      "opt.PURGE_DELAY_MS",
      "HAKMEM_PURGE_DELAY_MS",
      "purge.madvise_calls\n",
      "threads.alive\t",
      "\xff\xfe",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    uint64_t v = 12345;
    int64_t s = 7;
    size_t len = 8;
    CHECK(hak_stats_get(bad[i], &v) == -ENOENT && v == 12345, "\"%s\" read", bad[i]);
    CHECK(hak_ctl_get(bad[i], &s, &len) == -ENOENT, "\"%s\" read by hak_ctl_get", bad[i]);
    CHECK(hak_ctl_get(bad[i], NULL, &len) == -ENOENT, "\"%s\" sized", bad[i]);
    CHECK(hak_ctl_set(bad[i], &s, 8) == -ENOENT, "\"%s\" written", bad[i]);
  }
  /* A long name, and one that only starts like a good one. */
  size_t n = 1 << 20;
  char *longname = malloc(n + 1);
  REQUIRE(longname != NULL, "malloc");
  memset(longname, 'a', n);
  longname[n] = '\0';
  uint64_t v;
  CHECK(hak_stats_get(longname, &v) == -ENOENT, "a 1 MiB name read");
  memcpy(longname, "total.in_use", 12);
  CHECK(hak_stats_get(longname, &v) == -ENOENT, "a 1 MiB name starting total.in_use read");
  memcpy(longname, "class.5.", 8);
  CHECK(hak_stats_get(longname, &v) == -ENOENT, "a 1 MiB class name read");
  free(longname);
  int64_t s = 0;
  size_t len = 8;
  CHECK(hak_stats_get(NULL, &v) == -EINVAL, "NULL name");
  CHECK(hak_ctl_get(NULL, &s, &len) == -EINVAL, "NULL name");
  CHECK(hak_ctl_set(NULL, &s, 8) == -EINVAL, "NULL name");
}

/* ---- options ---------------------------------------------------------------------- */
static bool report_says(const char *text) {
  char *out = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&out, &len);
  REQUIRE(f != NULL, "open_memstream");
  hak_stats_print(f);
  fclose(f);
  bool found = strstr(out, text) != NULL;
  free(out);
  return found;
}

static void options(void) {
  /* The defaults: the test runs with no HAKMEM_* set (CMakeLists.txt). */
  CHECK(get_signed("opt.purge_delay_ms") == 100, "purge delay %" PRId64, get_signed("opt.purge_delay_ms"));
  CHECK(get("opt.region_cache") == 2 && get("opt.thp") == 1 && get("opt.stats") == 0, "defaults");
  static const int64_t good_delays[] = {0, 1, 7, 100, 1000, INT32_MAX, -1, 100};
  for (size_t i = 0; i < sizeof good_delays / sizeof good_delays[0]; i++) {
    int64_t d = good_delays[i];
    CHECK(set("opt.purge_delay_ms", d) == 0, "purge delay %" PRId64 " refused", d);
    CHECK(get_signed("opt.purge_delay_ms") == d, "purge delay reads %" PRId64 ", set %" PRId64,
          get_signed("opt.purge_delay_ms"), d);
    void *p = malloc(300000); /* the allocator keeps working under each value */
    REQUIRE(p != NULL, "malloc");
    free(p);
  }
  CHECK(set("opt.purge_delay_ms", 7) == 0 && report_says("options: purge_delay_ms=7 "), "report after set");
  static const int64_t bad_delays[] = {-2, -100, INT64_MIN, (int64_t)INT32_MAX + 1, INT64_MAX};
  for (size_t i = 0; i < sizeof bad_delays / sizeof bad_delays[0]; i++)
    CHECK(set("opt.purge_delay_ms", bad_delays[i]) == -EINVAL, "purge delay %" PRId64 " accepted",
          bad_delays[i]);
  CHECK(get_signed("opt.purge_delay_ms") == 7, "a refused value changed the delay");
  CHECK(set("opt.purge_delay_ms", 100) == 0, "back to 100");

  CHECK(set("opt.region_cache", 0) == 0 && get("opt.region_cache") == 0, "region cache 0");
  CHECK(set("opt.region_cache", 1 << 20) == 0 && get("opt.region_cache") == 1 << 20, "region cache 2^20");
  CHECK(set("opt.region_cache", (1 << 20) + 1) == -EINVAL, "region cache 2^20 + 1 accepted");
  CHECK(set("opt.region_cache", -1) == -EINVAL, "region cache -1 accepted");
  CHECK(set("opt.region_cache", 5) == 0 && report_says("region_cache=5 "), "region cache in the report");
  CHECK(set("opt.region_cache", 2) == 0, "region cache back to 2");

  for (int64_t v = 0; v <= 2; v++)
    CHECK(set("opt.stats", v) == 0 && get("opt.stats") == (uint64_t)v, "stats %d", (int)v);
  CHECK(set("opt.stats", 3) == -EINVAL && set("opt.stats", -1) == -EINVAL, "stats 3 or -1 accepted");
  CHECK(set("opt.stats", 0) == 0, "stats back to 0");
  CHECK(set("opt.thp", 0) == -EPERM && get("opt.thp") == 1, "opt.thp written");
}

/* ---- figures follow the program ------------------------------------------------------ */
static void classes(void) {
  uint64_t classes = get("build.class_count");
  char name[64];
  uint64_t prev = 0;
  enum { K = 5 };
  for (uint64_t c = 0; c < classes; c++) {
    uint64_t size = get(class_name(name, sizeof name, c, "block_size"));
    CHECK(size > prev && size % 16 == 0, "class %" PRIu64 " block size %" PRIu64, c, size);
    prev = size;
    uint64_t live0 = get(class_name(name, sizeof name, c, "live_blocks"));
    void *p[K];
    for (int i = 0; i < K; i++) {
      p[i] = malloc(size);
      REQUIRE(p[i] != NULL, "malloc(%" PRIu64 ")", size);
      CHECK(malloc_usable_size(p[i]) == size, "class %" PRIu64 ": usable size %zu", c,
            malloc_usable_size(p[i]));
    }
    uint64_t live = get(class_name(name, sizeof name, c, "live_blocks"));
    CHECK(live == live0 + K, "class %" PRIu64 ": %" PRIu64 " live blocks, expected %" PRIu64, c, live,
          live0 + K);
    CHECK(get(class_name(name, sizeof name, c, "live_bytes")) == live * size, "class %" PRIu64 " live bytes",
          c);
    CHECK(get(class_name(name, sizeof name, c, "slabs")) >= 1, "class %" PRIu64 ": no slab", c);
    for (int i = 0; i < K; i++) free(p[i]);
    CHECK(get(class_name(name, sizeof name, c, "live_blocks")) == live0, "class %" PRIu64 " after free", c);
  }
  /* The tiers are sums of their classes, and the total adds large and huge blocks. */
  uint64_t small = 0, mid = 0, small_slabs = 0, mid_slabs = 0;
  for (uint64_t c = 0; c < classes; c++) {
    uint64_t bytes = get(class_name(name, sizeof name, c, "live_bytes"));
    uint64_t slabs = get(class_name(name, sizeof name, c, "slabs"));
    bool is_small = get(class_name(name, sizeof name, c, "block_size")) <= 1024;
    *(is_small ? &small : &mid) += bytes;
    *(is_small ? &small_slabs : &mid_slabs) += slabs;
  }
  CHECK(get("tier.small.live_bytes") == small && get("tier.mid.live_bytes") == mid, "tier bytes");
  CHECK(get("tier.small.slabs") == small_slabs && get("tier.mid.slabs") == mid_slabs, "tier slabs");
  hak_info_t info;
  hak_get_info(&info);
  uint64_t total = small + mid + get("tier.large.live_bytes") + get("tier.huge.mapped_bytes");
  CHECK(get("total.in_use") == total && info.in_use == total,
        "total.in_use %" PRIu64 ", info %zu, sum %" PRIu64, get("total.in_use"), info.in_use, total);
  CHECK(get("total.mapped") == info.mapped && get("total.committed") == info.committed, "mapped, committed");
  CHECK(get("total.peak_in_use") >= get("total.in_use"), "peak below in use");
}

static void large_and_huge(void) {
  uint64_t large0 = get("tier.large.live_bytes"), allocs0 = get("tier.large.allocs");
  void *l = malloc(1 << 20);
  REQUIRE(l != NULL, "malloc 1 MiB");
  CHECK(get("tier.large.live_bytes") >= large0 + (1 << 20) && get("tier.large.allocs") == allocs0 + 1,
        "large");
  free(l);
  CHECK(get("tier.large.live_bytes") == large0, "large after free");
  uint64_t huge0 = get("tier.huge.mapped_bytes"), hallocs0 = get("tier.huge.allocs");
  void *h = malloc((size_t)40 << 20);
  REQUIRE(h != NULL, "malloc 40 MiB");
  CHECK(
      get("tier.huge.mapped_bytes") >= huge0 + ((size_t)40 << 20) && get("tier.huge.allocs") == hallocs0 + 1,
      "huge");
  CHECK(get("total.mapped") >= ((size_t)40 << 20), "total.mapped without the huge block");
  free(h);
  CHECK(get("tier.huge.mapped_bytes") == huge0, "huge after free");
}

enum { REMOTE_BLOCKS = 1000 };
static void *blocks[REMOTE_BLOCKS];
static pthread_barrier_t barrier;

static void *free_them(void *arg) {
  (void)arg;
  for (int i = 0; i < REMOTE_BLOCKS; i++) free(blocks[i]);
  return NULL;
}

static void *hold_a_heap(void *arg) {
  (void)arg;
  void *p = malloc(64);           /* a heap of its own */
  pthread_barrier_wait(&barrier); /* main counts it alive */
  pthread_barrier_wait(&barrier);
  free(p);
  return NULL;
}

static void threads(void) {
  uint64_t pushes0 = get("remote.pushes"), rblocks0 = get("remote.blocks");
  for (int i = 0; i < REMOTE_BLOCKS; i++) REQUIRE((blocks[i] = malloc(48)) != NULL, "malloc");
  pthread_t t;
  REQUIRE(pthread_create(&t, NULL, free_them, NULL) == 0, "pthread_create");
  pthread_join(t, NULL);
  uint64_t pushes = get("remote.pushes") - pushes0, rblocks = get("remote.blocks") - rblocks0;
  CHECK(rblocks == REMOTE_BLOCKS, "%" PRIu64 " remote blocks, expected %d", rblocks, REMOTE_BLOCKS);
  CHECK(pushes >= REMOTE_BLOCKS / 32 && pushes <= REMOTE_BLOCKS, "%" PRIu64 " pushes", pushes);

  uint64_t alive0 = get("threads.alive"), exited0 = get("threads.exited");
  CHECK(alive0 >= 1, "threads.alive %" PRIu64 " in a running program", alive0);
  enum { N = 4 };
  pthread_t ts[N];
  pthread_barrier_init(&barrier, NULL, N + 1);
  for (int i = 0; i < N; i++) REQUIRE(pthread_create(&ts[i], NULL, hold_a_heap, NULL) == 0, "pthread_create");
  pthread_barrier_wait(&barrier);
  CHECK(get("threads.alive") == alive0 + N, "threads.alive %" PRIu64 ", expected %" PRIu64,
        get("threads.alive"), alive0 + N);
  pthread_barrier_wait(&barrier);
  for (int i = 0; i < N; i++) pthread_join(ts[i], NULL);
  pthread_barrier_destroy(&barrier);
  CHECK(get("threads.exited") == exited0 + N, "threads.exited %" PRIu64, get("threads.exited"));
  CHECK(get("threads.alive") == alive0, "threads.alive %" PRIu64 " after the joins", get("threads.alive"));
  CHECK(get("heaps.created") + get("heaps.taken_over") >= alive0 + N, "heaps created or taken over");
}

static void purging(void) {
  uint64_t calls0 = get("purge.madvise_calls"), bytes0 = get("purge.madvise_bytes");
  uint64_t passes0 = get("purge.passes"), released0 = get("total.released");
  enum { N = 64 };
  void *p[N];
  for (int i = 0; i < N; i++) {
    REQUIRE((p[i] = malloc(200000)) != NULL, "malloc");
    memset(p[i], 1, 200000);
  }
  for (int i = 0; i < N; i++) free(p[i]);
  malloc_trim(0);
  CHECK(get("purge.madvise_calls") > calls0 && get("purge.madvise_bytes") >= bytes0 + 200000,
        "madvise counts");
  CHECK(get("purge.passes") > passes0, "no purge pass counted for malloc_trim");
  CHECK(get("total.released") > released0, "nothing released");
  CHECK(get("total.released") == get("purge.returned_bytes") + get("purge.unmapped_bytes"),
        "released = purged + unmapped");
}

static void constants(void) {
  CHECK(get("slab_map.reserved") <= 1, "slab_map.reserved %" PRIu64, get("slab_map.reserved"));
  CHECK(get("build.debug") == 0 || get("build.debug") == 2, "build.debug %" PRIu64, get("build.debug"));
  CHECK(get("build.secure") <= 1 && get("build.valgrind") <= 1, "switches");
  /* Which allocator: this program is linked with the shared library, built for its libc. */
  uint64_t version = HAKMEM_VERSION_MAJOR * 10000 + HAKMEM_VERSION_MINOR * 100 + HAKMEM_VERSION_PATCH;
  CHECK(get("build.version") == version, "build.version %" PRIu64 ", not %" PRIu64, get("build.version"),
        version);
#ifdef __GLIBC__
  CHECK(get("build.musl") == 0, "build.musl %" PRIu64 " in a glibc program", get("build.musl"));
#else
  CHECK(get("build.musl") == 1, "build.musl %" PRIu64 " in a musl program", get("build.musl"));
#endif
  CHECK(get("build.shared") == 1, "build.shared %" PRIu64 " with libhakmem.so", get("build.shared"));
  CHECK(get("checker.memcheck") == 0 && get("checker.sanitizer") == 0, "a checker seen where there is none");
}

int main(void) {
  if (!tu_have_hakmem()) {
    printf("ctl_api: not running with hakmem; nothing to test\n");
    return 0;
  }
  options();
  every_name();
  wrong_names();
  classes();
  large_and_huge();
  threads();
  purging();
  constants();
  return tu_finish("ctl_api");
}
