/* api_basic: every C allocation entry point and its edge cases, with errno values.
 *
 * The semantics are glibc's, so the program also passes when linked without hakmem; the
 * few checks that hold only for hakmem run when its symbols are present (see
 * tu_have_hakmem). Usage: api_basic [seed]
 */
#include <malloc.h>
#include <stdlib.h>
#include <fcntl.h>
#include <sys/mman.h>

#include "test_util.h"

/* glibc's own names for its entry points; a program calling them must reach hakmem
 * when it replaces malloc. Not declared by any header. */
void *__libc_malloc(size_t);
void __libc_free(void *);
void *__libc_calloc(size_t, size_t);
void *__libc_realloc(void *, size_t);
void *__libc_memalign(size_t, size_t);
void *__libc_valloc(size_t);
void *__libc_pvalloc(size_t);

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

static uint64_t g_seed;

/* Expects `call` to fail with NULL and errno == err; `n` is printed for context. A block
 * returned anyway is freed so the run can go on. */
#define EXPECT_NULL(call, err, n)                                                                   \
  do {                                                                                              \
    errno = 0;                                                                                      \
    void *p_ = (call);                                                                              \
    int e_ = errno;                                                                                 \
    CHECK(p_ == NULL && e_ == (err), "%s with n=%#zx: got %p, errno %d (%s); want NULL, %s", #call, \
          (size_t)(n), p_, e_, strerror(e_), #err);                                                 \
    free(p_);                                                                                       \
  } while (0)

/* Checks that p is a usable block for a request of n bytes: non-NULL, aligned to 16
 * (8 for n <= 8), at least n usable bytes, all of them writable. */
static void check_block(const char *what, void *p, size_t n) {
  REQUIRE(p != NULL, "%s(%zu) returned NULL (errno %d)", what, n, errno);
  size_t align = n <= 8 ? 8 : 16;
  CHECK(tu_aligned(p, align), "%s(%zu) = %p not %zu-aligned", what, n, p, align);
  size_t usable = malloc_usable_size(p);
  CHECK(usable >= n, "%s(%zu) = %p: usable size %zu < %zu", what, n, p, usable, n);
  memset(p, 0xa5, usable);
}

static void test_malloc_zero_and_free_null(void) {
  enum { N = 64 };
  void *ps[N];
  for (int i = 0; i < N; i++) {
    ps[i] = malloc(0);
    check_block("malloc", ps[i], 0);
    for (int j = 0; j < i; j++) CHECK(ps[i] != ps[j], "malloc(0) returned %p twice", ps[i]);
  }
  for (int i = 0; i < N; i++) free(ps[i]);

  void *a = calloc(0, 0), *b = calloc(0, 5), *c = calloc(5, 0), *d = realloc(NULL, 0);
  check_block("calloc(0,0)", a, 0);
  check_block("calloc(0,5)", b, 0);
  check_block("calloc(5,0)", c, 0);
  check_block("realloc(NULL,0)", d, 0);
  CHECK(a != b && a != c && a != d && b != c && b != d && c != d, "zero-size blocks not unique: %p %p %p %p",
        a, b, c, d);
  free(a), free(b), free(c), free(d);

  free(NULL);
  free(NULL);
  if (free_sized) free_sized(NULL, 0), free_sized(NULL, 100);
  if (free_aligned_sized) free_aligned_sized(NULL, 64, 64);
  CHECK(malloc_usable_size(NULL) == 0, "malloc_usable_size(NULL) = %zu", malloc_usable_size(NULL));
}

static void test_alignment_and_usable_size(void) {
  static void *ps[2048];
  size_t k = 0;
  for (size_t n = 0; n <= 1024; n++) {
    ps[k] = malloc(n);
    check_block("malloc", ps[k], n);
    tu_fill_here(ps[k], n, g_seed + n);
    k++;
  }
  for (size_t n = 1025; n < 8 * MiB; n = n * 5 / 4 + 3) {
    ps[k] = malloc(n);
    check_block("malloc", ps[k], n);
    tu_fill_here(ps[k], n, g_seed + n);
    k++;
  }
  /* Every block got its pattern after all of them were live; none may overlap another. */
  size_t i = 0;
  for (size_t n = 0; n <= 1024; n++, i++) tu_verify_here("live block", ps[i], n, g_seed + n);
  for (size_t n = 1025; n < 8 * MiB; n = n * 5 / 4 + 3, i++)
    tu_verify_here("live block", ps[i], n, g_seed + n);
  for (i = 0; i < k; i++) free(ps[i]);
}

static const size_t calloc_sizes[] = {1,      8,      16,      24,          100,     256,   1000,
                                      1024,   1025,   4096,    8000,        32768,   65536, 131072,
                                      131073, 500000, 2 * MiB, 8 * MiB + 5, 33 * MiB};

/* calloc must zero memory that a previous block left dirty. */
static void test_calloc_zero(void) {
  enum { K = 16 };
  for (size_t s = 0; s < sizeof calloc_sizes / sizeof *calloc_sizes; s++) {
    size_t n = calloc_sizes[s];
    int count = n > MiB ? 2 : K, rounds = n > MiB ? 4 : 40;
    for (int r = 0; r < rounds; r++) {
      void *ps[K];
      for (int i = 0; i < count; i++) {
        ps[i] = malloc(n);
        REQUIRE(ps[i], "malloc(%zu) failed", n);
        memset(ps[i], 0xff, malloc_usable_size(ps[i]));
      }
      /* Half shrunk in place first: their dirty tails come back too. */
      for (int i = 0; i < count; i++) {
        if (i & 1) ps[i] = realloc(ps[i], n / 2 + 1);
        free(ps[i]);
      }
      for (int i = 0; i < count; i++) {
        ps[i] = (r + i) & 1 ? calloc(1, n) : calloc(n, 1);
        REQUIRE(ps[i], "calloc(%zu) failed", n);
        CHECK(tu_is_zero(ps[i], n), "calloc(%zu) = %p (round %d) not zeroed", n, ps[i], r);
        memset(ps[i], 0xff, n);
      }
      for (int i = 0; i < count; i++) free(ps[i]);
    }
  }
  /* Large calls, one dirty round first. */
  const size_t big[][2] = {{1, 64 * MiB}, {16, 4 * MiB}, {4096, 40000}, {40 * MiB, 1}};
  for (int i = 0; i < 4; i++) {
    size_t n = big[i][0] * big[i][1];
    void *d = malloc(n);
    REQUIRE(d, "malloc(%zu) failed", n);
    memset(d, 0xff, n);
    free(d);
    void *p = calloc(big[i][0], big[i][1]);
    REQUIRE(p, "calloc(%zu, %zu) failed", big[i][0], big[i][1]);
    CHECK(tu_aligned(p, 16), "calloc(%zu, %zu) = %p not 16-aligned", big[i][0], big[i][1], p);
    CHECK(malloc_usable_size(p) >= n, "calloc usable %zu < %zu", malloc_usable_size(p), n);
    CHECK(tu_is_zero(p, n), "calloc(%zu, %zu) = %p not zeroed", big[i][0], big[i][1], p);
    free(p);
  }
}

/* Blocks reused after malloc_trim gave back the pages inside them: calloc must still
 * clear them, and malloc'd ones must free cleanly (the hardened build reuses what a
 * block's last life left in it, unless its pages went back). */
static void test_reuse_after_trim(void) {
  enum { N = 24, BIG = 20000, SMALLER = 17000 };
  void *p[N];
  for (int r = 0; r < 3; r++) {
    for (int i = 0; i < N; i++) {
      p[i] = malloc(BIG);
      REQUIRE(p[i], "malloc(%d) failed", BIG);
      memset(p[i], 0x5a, BIG);
    }
    for (int i = 1; i < N; i++) free(p[i]); /* p[0] keeps the slab */
    malloc_trim(0);
    for (int i = 1; i < N; i++) {
      size_t n = SMALLER + (size_t)i;
      p[i] = i & 1 ? malloc(n) : calloc(1, n);
      REQUIRE(p[i], "allocation of %zu failed", n);
      if (!(i & 1)) CHECK(tu_is_zero(p[i], n), "calloc(%zu) = %p after trim not zeroed", n, p[i]);
      memset(p[i], 0x33, n);
    }
    for (int i = 0; i < N; i++) free(p[i]);
    malloc_trim(0);
  }
}

/* One realloc step from a block of n bytes (pattern from origin) to m bytes. */
static void *realloc_step(void *p, size_t n, uintptr_t *origin, size_t m, uint64_t seed) {
  void *q = realloc(p, m);
  REQUIRE(q, "realloc(%p, %zu -> %zu) failed (errno %d)", p, n, m, errno);
  CHECK(tu_aligned(q, 16), "realloc(%zu -> %zu) = %p not 16-aligned", n, m, q);
  CHECK(malloc_usable_size(q) >= m, "realloc(%zu -> %zu): usable %zu", n, m, malloc_usable_size(q));
  char what[64];
  snprintf(what, sizeof what, "realloc %zu -> %zu kept contents", n, m);
  tu_verify(what, q, n < m ? n : m, *origin, seed);
  tu_fill_here(q, m, seed);
  *origin = (uintptr_t)q;
  return q;
}

/* Contents survive realloc up and down across the tiny, mid, large and huge tiers. */
static void test_realloc_tiers(void) {
  const size_t chain[] = {1,       8,        15,           16,       17,        100,           1000,
                          1024,    1025,     4096,         65536,    128 * KiB, 128 * KiB + 1, MiB,
                          8 * MiB, 32 * MiB, 32 * MiB + 1, 48 * MiB, 100 * MiB};
  const int len = sizeof chain / sizeof *chain;
  uint64_t seed = g_seed ^ 0x7e;
  uintptr_t origin;
  void *p = realloc(NULL, chain[0]);
  check_block("realloc(NULL, n)", p, chain[0]);
  tu_fill_here(p, chain[0], seed);
  origin = (uintptr_t)p;
  size_t n = chain[0];
  for (int i = 1; i < len; i++, n = chain[i - 1]) p = realloc_step(p, n, &origin, chain[i], seed);
  for (int i = len - 2; i >= 0; i--, n = chain[i + 1]) p = realloc_step(p, n, &origin, chain[i], seed);
  p = realloc_step(p, n, &origin, n, seed); /* same size */

  /* Random jumps between tiers, with a neighbour kept live so in-place growth is tested
   * against a block in the way. */
  tu_rng rng = tu_rng_make(g_seed, 1);
  const size_t tier_max[] = {1024, 128 * KiB, 32 * MiB, 40 * MiB};
  for (int step = 0; step < 300; step++) {
    int tier = (int)tu_below(&rng, 16);
    tier = tier < 8 ? 0 : tier < 13 ? 1 : tier < 15 ? 2 : 3;
    size_t m = tu_range(&rng, tier == 3 ? 32 * MiB + 1 : 1, tier_max[tier]);
    void *neighbour = malloc(n);
    p = realloc_step(p, n, &origin, m, seed);
    n = m;
    free(neighbour);
  }
  free(p);
}

/* realloc(p, 0) frees p and returns NULL (glibc) or a unique block; either way no leak. */
static void test_realloc_zero(void) {
  void *p = malloc(100);
  REQUIRE(p, "malloc(100) failed");
  void *q = realloc(p, 0);
  if (q == NULL) {
    printf("api_basic: realloc(p, 0) frees p and returns NULL (as glibc)\n");
  } else {
    void *other = malloc(0);
    CHECK(other != q, "realloc(p, 0) returned %p, which malloc(0) returned too", q);
    printf("api_basic: realloc(p, 0) returns a unique block %p (glibc returns NULL)\n", q);
    free(other);
    free(q);
  }
  hak_info_t before = {0}, after = {0};
  if (tu_have_hakmem()) hak_get_info(&before);
  size_t rss0 = tu_rss_bytes();
  /* A leak here would be 200 MB of small blocks or 500 MiB of touched large ones. */
  for (int i = 0; i < 200000; i++) {
    p = malloc(1000);
    REQUIRE(p, "malloc(1000) failed");
    memset(p, 1, 1000);
    free(realloc(p, 0));
  }
  for (int i = 0; i < 500; i++) {
    p = malloc(MiB);
    REQUIRE(p, "malloc(1 MiB) failed");
    memset(p, 1, MiB);
    free(realloc(p, 0));
  }
  size_t rss1 = tu_rss_bytes();
  CHECK(rss1 < rss0 + 64 * MiB, "realloc(p, 0) leaks: RSS grew from %zu to %zu", rss0, rss1);
  if (tu_have_hakmem()) {
    hak_get_info(&after);
    CHECK(after.in_use < before.in_use + MiB, "realloc(p, 0) leaks: in_use %zu -> %zu", before.in_use,
          after.in_use);
  }
}

/* Sizes at or beyond PTRDIFF_MAX and overflowing products: NULL with ENOMEM, and the
 * block given to a failing realloc stays valid and unchanged. */
static void test_impossible_sizes(void) {
  const size_t sizes[] = {SIZE_MAX,        SIZE_MAX - 1,  SIZE_MAX / 2 + 1, PTRDIFF_MAX,
                          SIZE_MAX - 4095, SIZE_MAX - 16, SIZE_MAX - MiB,   SIZE_MAX / 2 + 4097};
  void *keep = malloc(1000);
  REQUIRE(keep, "malloc(1000) failed");
  tu_fill_here(keep, 1000, g_seed);
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    size_t s = tu_opaque(sizes[i]);
    EXPECT_NULL(malloc(s), ENOMEM, s);
    EXPECT_NULL(calloc(1, s), ENOMEM, s);
    EXPECT_NULL(calloc(s, 1), ENOMEM, s);
    EXPECT_NULL(realloc(NULL, s), ENOMEM, s);
    EXPECT_NULL(realloc(tu_hide(keep), s), ENOMEM, s);
    EXPECT_NULL(reallocarray(tu_hide(keep), s, 1), ENOMEM, s);
    EXPECT_NULL(reallocarray(NULL, 1, s), ENOMEM, s);
    EXPECT_NULL(aligned_alloc(64, s), ENOMEM, s);
    EXPECT_NULL(memalign(4096, s), ENOMEM, s);
    EXPECT_NULL(memalign(MiB, s), ENOMEM, s);
    EXPECT_NULL(valloc(s), ENOMEM, s);
    EXPECT_NULL(pvalloc(s), ENOMEM, s);
    void *out = &out;
    int rc = posix_memalign(&out, 64, s);
    CHECK(rc == ENOMEM, "posix_memalign(64, %#zx) returned %d, want ENOMEM", s, rc);
    if (rc == 0) free(out);
  }
  const size_t products[][2] = {{SIZE_MAX / 2 + 1, 2},    {(size_t)1 << 32, (size_t)1 << 32},
                                {SIZE_MAX, SIZE_MAX},     {3, SIZE_MAX / 3 + 1},
                                {PTRDIFF_MAX / 2 + 1, 2}, {65537, SIZE_MAX / 65536}};
  for (size_t i = 0; i < sizeof products / sizeof *products; i++) {
    size_t a = tu_opaque(products[i][0]), b = tu_opaque(products[i][1]);
    EXPECT_NULL(calloc(a, b), ENOMEM, a);
    EXPECT_NULL(calloc(b, a), ENOMEM, b);
    EXPECT_NULL(reallocarray(NULL, a, b), ENOMEM, a);
    EXPECT_NULL(reallocarray(tu_hide(keep), b, a), ENOMEM, b);
  }
  CHECK(malloc_usable_size(keep) >= 1000, "usable size of %p changed", keep);
  tu_verify_here("block after failed reallocs", keep, 1000, g_seed);
  free(keep);
  /* The largest power-of-two alignment with a small size. */
  void *out = &out;
  int rc = posix_memalign(&out, SIZE_MAX / 2 + 1, 1);
  CHECK(rc == ENOMEM, "posix_memalign(2^63, 1) returned %d, want ENOMEM", rc);
  if (rc == 0) free(out);
}

/* Exhausted memory under RLIMIT_AS, in a child: NULL with ENOMEM, then recovery. */
static int exhaustion_child(void *unused) {
  (void)unused;
  enum { MAX_BLOCKS = 4 << 20 };
  void **ps =
      mmap(NULL, MAX_BLOCKS * sizeof(void *), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(ps != MAP_FAILED, "mmap failed");
  void *keep = malloc(5000);
  REQUIRE(keep, "malloc(5000) failed");
  tu_fill_here(keep, 5000, g_seed);
  if (!tu_limit_address_space(GiB)) return 1;

  size_t n = tu_opaque((size_t)1 << 46);
  EXPECT_NULL(malloc(n), ENOMEM, n);
  EXPECT_NULL(malloc(2 * GiB), ENOMEM, 2 * GiB);
  EXPECT_NULL(calloc(1, (size_t)1 << 40), ENOMEM, (size_t)1 << 40);
  EXPECT_NULL(calloc((size_t)1 << 20, (size_t)1 << 20), ENOMEM, (size_t)1 << 40);
  EXPECT_NULL(realloc(tu_hide(keep), (size_t)1 << 40), ENOMEM, (size_t)1 << 40);
  EXPECT_NULL(realloc(tu_hide(keep), 2 * GiB), ENOMEM, 2 * GiB);
  EXPECT_NULL(aligned_alloc(4096, (size_t)1 << 40), ENOMEM, (size_t)1 << 40);
  EXPECT_NULL(memalign(MiB, 2 * GiB), ENOMEM, 2 * GiB);
  EXPECT_NULL(valloc((size_t)1 << 40), ENOMEM, (size_t)1 << 40);
  void *out = &out;
  int rc = posix_memalign(&out, 4096, (size_t)1 << 40);
  CHECK(rc == ENOMEM, "posix_memalign(4096, 2^40) under RLIMIT_AS returned %d", rc);
  tu_verify_here("block after failed realloc", keep, 5000, g_seed);

  /* Large blocks until the limit. */
  size_t k = 0;
  for (; k < 256; k++) {
    errno = 0;
    ps[k] = malloc(16 * MiB);
    if (!ps[k]) break;
  }
  CHECK(k < 256, "256 blocks of 16 MiB fit under a 1 GiB address-space limit");
  CHECK(errno == ENOMEM, "malloc(16 MiB) at the limit: errno %d (%s), want ENOMEM", errno, strerror(errno));
  for (size_t i = 0; i < k; i++) free(ps[i]);
  void *p = malloc(16 * MiB);
  CHECK(p != NULL, "malloc(16 MiB) fails after all 16 MiB blocks were freed (errno %d)", errno);
  free(p);
  malloc_trim(0);
  p = malloc(200 * MiB);
  CHECK(p != NULL, "malloc(200 MiB) fails after 16 MiB blocks were freed and trimmed (errno %d)", errno);
  free(p);

  /* Small blocks until the limit. */
  for (k = 0; k < MAX_BLOCKS; k++) {
    errno = 0;
    ps[k] = malloc(1000);
    if (!ps[k]) break;
  }
  CHECK(k < MAX_BLOCKS, "%d blocks of 1000 bytes fit under a 1 GiB limit", MAX_BLOCKS);
  CHECK(errno == ENOMEM, "malloc(1000) at the limit: errno %d (%s), want ENOMEM", errno, strerror(errno));
  errno = 0;
  void *z = calloc(1, 1000);
  CHECK(z == NULL && errno == ENOMEM, "calloc(1, 1000) at the limit: %p errno %d", z, errno);
  free(z);
  for (size_t i = 0; i < k; i++) free(ps[i]);
  p = malloc(1000);
  CHECK(p != NULL, "malloc(1000) fails after all small blocks were freed (errno %d)", errno);
  free(p);
  free(keep);
  return 0;
}

static void test_exhaustion(void) { tu_in_child("exhaustion under RLIMIT_AS", exhaustion_child, NULL, 60); }

static void test_posix_memalign(void) {
  const size_t bad[] = {0, 1, 2, 3, 4, 12, 24, 40, 48, 100, 4097, 3 * 4096, SIZE_MAX, SIZE_MAX / 2 + 2};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    void *sentinel = (void *)0x1234, *out = sentinel;
    int rc = posix_memalign(&out, tu_opaque(bad[i]), 64);
    CHECK(rc == EINVAL, "posix_memalign(align %#zx) returned %d, want EINVAL", bad[i], rc);
    CHECK(out == sentinel, "posix_memalign(align %#zx) changed *out to %p", bad[i], out);
    if (rc == 0) free(out);
  }
  for (size_t a = sizeof(void *); a <= MiB; a *= 2) {
    void *out = NULL;
    int rc = posix_memalign(&out, a, 0);
    CHECK(rc == 0, "posix_memalign(%zu, 0) returned %d", a, rc);
    CHECK(tu_aligned(out, a), "posix_memalign(%zu, 0) = %p misaligned", a, out);
    free(out);
    rc = posix_memalign(&out, a, 100);
    CHECK(rc == 0 && out && tu_aligned(out, a), "posix_memalign(%zu, 100): rc %d, %p", a, rc, out);
    if (rc == 0) memset(out, 1, malloc_usable_size(out)), free(out);
  }
}

/* Alignments past a region's 64 MiB, and the sizes of each tier (small, large, huge):
 * blocks of alignments above 64 MiB were aligned only to 64 MiB. Each block is written
 * at both ends and in the middle, and one is grown by realloc with its contents kept. */
static void test_huge_alignments(void) {
  const size_t sizes[] = {1, 3 * MiB + 1, 40 * MiB};
  for (size_t a = 2 * MiB; a <= GiB; a *= 2) {
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
      size_t n = sizes[s];
      void *p = NULL;
      int rc = posix_memalign(&p, a, n);
      char *blocks[3] = {rc == 0 ? p : NULL, aligned_alloc(a, n), memalign(a, n)};
      CHECK(rc == 0, "posix_memalign(%zu MiB, %zu) returned %d", a / MiB, n, rc);
      for (int k = 0; k < 3; k++) {
        char *b = blocks[k];
        REQUIRE(b != NULL, "alignment %zu MiB, size %zu: call %d returned NULL (errno %d)", a / MiB, n, k,
                errno);
        CHECK(tu_aligned(b, a), "alignment %zu MiB, size %zu: call %d gave %p", a / MiB, n, k, (void *)b);
        CHECK(malloc_usable_size(b) >= n, "alignment %zu MiB: usable %zu < %zu", a / MiB,
              malloc_usable_size(b), n);
        b[0] = 1, b[n / 2] = 2, b[n - 1] = 3;
      }
      if (a == 256 * MiB && n == 40 * MiB) {
        char *q = realloc(blocks[0], 100 * MiB);
        REQUIRE(q != NULL, "realloc of a 256 MiB-aligned block to 100 MiB failed");
        CHECK(q[0] == 1 && q[n / 2] == 2 && q[n - 1] == 3, "realloc lost an aligned block's bytes");
        q[100 * MiB - 1] = 4;
        blocks[0] = q;
      }
      for (int k = 0; k < 3; k++) free(blocks[k]);
    }
  }
}

/* A huge block the kernel's overcommit policy refuses as a plain private mapping (as the
 * C library maps one): malloc fails with ENOMEM too, rather than handing out address
 * space whose first use gets the process killed. Where the policy lets the mapping
 * through (overcommit_memory = 1), there is nothing to check. */
static void test_overcommit_refused(void) {
  const size_t n = (size_t)64 << 40; /* 64 TiB: more than RAM and swap on any test machine */
  void *m = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m != MAP_FAILED) {
    munmap(m, n);
    printf("  the kernel maps 64 TiB: overcommit refusal not checked\n");
    return;
  }
  size_t s = tu_opaque(n);
  EXPECT_NULL(malloc(s), ENOMEM, s);
  EXPECT_NULL(calloc(1, s), ENOMEM, s);
  EXPECT_NULL(realloc(NULL, s), ENOMEM, s);
  EXPECT_NULL(aligned_alloc(MiB, s), ENOMEM, s);
  void *grown = malloc(100);
  REQUIRE(grown != NULL, "malloc(100) failed");
  EXPECT_NULL(realloc(tu_hide(grown), s), ENOMEM, s);
  free(grown);
}

static void test_aligned_alloc_memalign(void) {
  for (size_t a = 1; a <= MiB; a *= 2) {
    void *p = aligned_alloc(a, a * 3), *q = memalign(a, 100);
    REQUIRE(p && q, "aligned_alloc(%zu, %zu) = %p, memalign(%zu, 100) = %p", a, a * 3, p, a, q);
    CHECK(tu_aligned(p, a) && tu_aligned(q, a), "alignment %zu: %p %p", a, p, q);
    CHECK(malloc_usable_size(p) >= a * 3 && malloc_usable_size(q) >= 100, "usable sizes %zu %zu",
          malloc_usable_size(p), malloc_usable_size(q));
    memset(p, 1, malloc_usable_size(p));
    memset(q, 1, malloc_usable_size(q));
    free(p);
    free(q);
  }
  /* glibc accepts alignments that are not powers of two (memalign rounds them up); hakmem
   * rejects them. */
  const size_t bad[] = {3, 24, 48, 100, 1000, 4095, 3 * 4096, SIZE_MAX};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    size_t a = tu_opaque(bad[i]);
    if (tu_have_hakmem()) {
      EXPECT_NULL(aligned_alloc(a, 96), EINVAL, a);
      EXPECT_NULL(memalign(a, 96), EINVAL, a);
    } else {
      free(aligned_alloc(a, 96));
      free(memalign(a, 96));
    }
  }
}

static void test_valloc_pvalloc(void) {
  const size_t page = tu_page();
  const size_t sizes[] = {1, 100, 4095, 4096, 4097, 100000, 5 * MiB + 3};
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    size_t n = sizes[i], rounded = (n + page - 1) & ~(page - 1);
    void *v = valloc(n), *pv = pvalloc(n);
    REQUIRE(v && pv, "valloc(%zu) = %p, pvalloc(%zu) = %p", n, v, n, pv);
    CHECK(tu_aligned(v, page), "valloc(%zu) = %p not page-aligned", n, v);
    CHECK(tu_aligned(pv, page), "pvalloc(%zu) = %p not page-aligned", n, pv);
    CHECK(malloc_usable_size(v) >= n, "valloc(%zu): usable %zu", n, malloc_usable_size(v));
    CHECK(malloc_usable_size(pv) >= rounded, "pvalloc(%zu): usable %zu < %zu", n, malloc_usable_size(pv),
          rounded);
    tu_fill_here(v, malloc_usable_size(v), g_seed);
    tu_fill_here(pv, malloc_usable_size(pv), g_seed + 1);
    tu_verify_here("valloc block", v, malloc_usable_size(v), g_seed);
    tu_verify_here("pvalloc block", pv, malloc_usable_size(pv), g_seed + 1);
    free(v);
    free(pv);
  }
  void *v = valloc(0);
  CHECK(v && tu_aligned(v, page), "valloc(0) = %p", v);
  free(v);
}

/* The C23 sized frees with the sizes the blocks were requested with. */
static void test_free_sized(void) {
  if (!free_sized || !free_aligned_sized) {
    printf("api_basic: free_sized/free_aligned_sized absent (older glibc): skipped\n");
    return;
  }
  for (size_t n = 0; n < 64 * MiB; n = n < 64 ? n + 1 : n * 3 / 2) {
    void *p = malloc(n);
    REQUIRE(p, "malloc(%zu) failed", n);
    memset(p, 2, n);
    free_sized(p, n);
    p = calloc(n, 1);
    REQUIRE(p, "calloc(%zu, 1) failed", n);
    free_sized(p, n);
    p = malloc(n / 2);
    REQUIRE(p, "malloc(%zu) failed", n / 2);
    p = realloc(p, n + 1);
    REQUIRE(p, "realloc(%zu) failed", n + 1);
    free_sized(p, n + 1);
  }
  for (size_t a = 1; a <= MiB; a *= 2) {
    const size_t sizes[] = {a, 3 * a, 1, 100, 5000};
    for (int i = 0; i < 5; i++) {
      void *p = aligned_alloc(a, sizes[i]);
      REQUIRE(p, "aligned_alloc(%zu, %zu) failed", a, sizes[i]);
      free_aligned_sized(p, a, sizes[i]);
    }
  }
}

static void test_reallocarray(void) {
  int *p = reallocarray(NULL, 10, sizeof(int));
  REQUIRE(p, "reallocarray(NULL, 10, 4) failed");
  CHECK(malloc_usable_size(p) >= 40, "reallocarray usable %zu", malloc_usable_size(p));
  for (int i = 0; i < 10; i++) p[i] = i * 7;
  p = reallocarray(p, 100000, sizeof(int));
  REQUIRE(p, "reallocarray(p, 100000, 4) failed");
  for (int i = 0; i < 10; i++) CHECK(p[i] == i * 7, "reallocarray lost element %d: %d", i, p[i]);
  for (int i = 0; i < 100000; i++) p[i] = i;
  p = reallocarray(p, 50, sizeof(int));
  REQUIRE(p, "reallocarray shrink failed");
  for (int i = 0; i < 50; i++) CHECK(p[i] == i, "reallocarray shrink lost element %d: %d", i, p[i]);
  size_t big = tu_opaque(SIZE_MAX / 4 + 1);
  EXPECT_NULL(reallocarray(tu_hide(p), big, sizeof(int)), ENOMEM, big);
  for (int i = 0; i < 50; i++) CHECK(p[i] == i, "failed reallocarray changed element %d", i);
  free(p);
}

#ifdef __GLIBC__ /* mallinfo and mallinfo2 are glibc's: musl has neither */
static void test_mallinfo(void) {
  struct mallinfo2 before = mallinfo2();
  enum { N = 100000, SIZE = 100 };
  void **ps = malloc(N * sizeof *ps);
  REQUIRE(ps, "malloc failed");
  for (int i = 0; i < N; i++) {
    ps[i] = malloc(SIZE);
    REQUIRE(ps[i], "malloc(%d) failed", SIZE);
    memset(ps[i], 3, SIZE);
  }
  struct mallinfo2 after = mallinfo2();
  CHECK(after.uordblks > 0, "mallinfo2().uordblks is 0 with 10 MB live");
  CHECK(after.uordblks >= before.uordblks + (size_t)N * SIZE * 9 / 10,
        "mallinfo2().uordblks %zu -> %zu after allocating %d x %d bytes", before.uordblks, after.uordblks, N,
        SIZE);
  CHECK(after.uordblks < ((size_t)1 << 40) && after.arena < ((size_t)1 << 40) &&
            after.fordblks < ((size_t)1 << 40) && after.hblkhd < ((size_t)1 << 40),
        "mallinfo2() fields absurd: arena %zu uordblks %zu fordblks %zu hblkhd %zu", after.arena,
        after.uordblks, after.fordblks, after.hblkhd);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  struct mallinfo old = mallinfo();
#pragma GCC diagnostic pop
  CHECK(old.uordblks != 0, "mallinfo().uordblks is 0 with 10 MB live");
  for (int i = 0; i < N; i++) free(ps[i]);
  free(ps);
}
#endif

/* Runs fn with stderr (fd 2) sent to a temporary file; returns how many bytes it wrote. */
static long capture_stderr(void (*fn)(void)) {
  fflush(stderr);
  FILE *tmp = tmpfile();
  REQUIRE(tmp, "tmpfile failed");
  int saved = dup(2);
  REQUIRE(saved >= 0 && dup2(fileno(tmp), 2) == 2, "dup/dup2 failed");
  fn();
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  long len = lseek(fileno(tmp), 0, SEEK_END);
  fclose(tmp);
  return len;
}

static void call_malloc_stats(void) { malloc_stats(); }
static void call_hak_stats_print(void) { hak_stats_print(stderr); }

static void test_stats_and_trim(void) {
  void *p = malloc(12345);
  long len = capture_stderr(call_malloc_stats);
  CHECK(len > 0, "malloc_stats() wrote nothing to stderr");
  free(p);
  void *ps[1000];
  for (int i = 0; i < 1000; i++) ps[i] = malloc((size_t)i * 64);
  for (int i = 0; i < 1000; i++) free(ps[i]);
  const size_t pads[] = {0, 4096, 64 * MiB};
  for (int i = 0; i < 3; i++) {
    int r = malloc_trim(pads[i]);
    CHECK(r == 0 || r == 1, "malloc_trim(%zu) returned %d", pads[i], r);
  }
  p = malloc(100);
  CHECK(p != NULL, "malloc after malloc_trim failed");
  free(p);
}

/* Another family's memalign, valloc and pvalloc (freed with free, so the same heap). */
static void check_memalign_valloc_pvalloc(const char *family, void *(*memalign_fn)(size_t, size_t),
                                          void *(*valloc_fn)(size_t), void *(*pvalloc_fn)(size_t)) {
  const size_t page = tu_page();
  void *p = memalign_fn(4096, 100);
  CHECK(p && tu_aligned(p, 4096), "%smemalign(4096, 100) = %p", family, p);
  free(p);
  p = valloc_fn(100);
  CHECK(p && tu_aligned(p, page), "%svalloc(100) = %p", family, p);
  free(p);
  p = pvalloc_fn(100);
  CHECK(p && tu_aligned(p, page) && malloc_usable_size(p) >= page, "%spvalloc(100) = %p", family, p);
  free(p);
}

/* glibc's __libc_* names must be the same allocator as malloc/free. */
static void test_libc_aliases(void) {
  void *p = __libc_malloc(100);
  check_block("__libc_malloc", p, 100);
  free(p);
  p = malloc(100);
  check_block("malloc", p, 100);
  __libc_free(p);
  p = __libc_calloc(10, 100);
  REQUIRE(p, "__libc_calloc failed");
  CHECK(tu_is_zero(p, 1000), "__libc_calloc memory not zero");
  tu_fill_here(p, 1000, g_seed);
  uintptr_t origin = (uintptr_t)p;
  p = __libc_realloc(p, 100000);
  REQUIRE(p, "__libc_realloc failed");
  tu_verify("__libc_realloc kept contents", p, 1000, origin, g_seed);
  free(p);
  check_memalign_valloc_pvalloc("__libc_", __libc_memalign, __libc_valloc, __libc_pvalloc);
}

/* hakmem only: the hak_ functions are the same allocator as the standard names. */
static void test_hakmem_api(void) {
  if (!tu_have_hakmem()) {
    printf("api_basic: hakmem symbols absent: hak_* checks skipped\n");
    return;
  }
  void *a = hak_malloc(0), *b = hak_malloc(0);
  CHECK(a && b && a != b, "hak_malloc(0) = %p, %p", a, b);
  free(a);
  hak_free(b);
  void *p = malloc(300);
  CHECK(hak_malloc_usable_size(p) == malloc_usable_size(p), "usable sizes differ: %zu vs %zu",
        hak_malloc_usable_size(p), malloc_usable_size(p));
  hak_free(p);
  p = hak_calloc(3, 100);
  CHECK(p && tu_is_zero(p, 300), "hak_calloc(3, 100) = %p", p);
  p = hak_realloc(p, 5000);
  REQUIRE(p, "hak_realloc failed");
  p = hak_reallocarray(p, 10, 1000);
  REQUIRE(p, "hak_reallocarray failed");
  hak_free_sized(p, 10000);
  size_t huge = tu_opaque(SIZE_MAX);
  EXPECT_NULL(hak_malloc(huge), ENOMEM, huge);
  EXPECT_NULL(hak_calloc(huge, 2), ENOMEM, huge);
  EXPECT_NULL(hak_aligned_alloc(24, 96), EINVAL, (size_t)24);
  EXPECT_NULL(hak_memalign(24, 96), EINVAL, (size_t)24);
  void *out = (void *)0x1234;
  CHECK(hak_posix_memalign(&out, 24, 96) == EINVAL && out == (void *)0x1234,
        "hak_posix_memalign(24) did not give EINVAL untouched");
  CHECK(hak_posix_memalign(&out, 4096, 96) == 0 && tu_aligned(out, 4096), "hak_posix_memalign");
  hak_free_aligned_sized(out, 4096, 96);
  p = hak_aligned_alloc(256, 512);
  CHECK(p && tu_aligned(p, 256), "hak_aligned_alloc(256) = %p", p);
  hak_free_aligned_sized(p, 256, 512);
  check_memalign_valloc_pvalloc("hak_", hak_memalign, hak_valloc, hak_pvalloc);

  hak_info_t i0, i1;
  hak_get_info(&i0);
  enum { N = 100000 };
  void **ps = malloc(N * sizeof *ps);
  REQUIRE(ps, "malloc failed");
  for (int i = 0; i < N; i++) ps[i] = malloc(100);
  hak_get_info(&i1);
  CHECK(i1.in_use >= i0.in_use + (size_t)N * 100 * 9 / 10, "hak_get_info in_use %zu -> %zu", i0.in_use,
        i1.in_use);
  CHECK(i1.peak_in_use >= i1.in_use, "peak_in_use %zu < in_use %zu", i1.peak_in_use, i1.in_use);
  CHECK(i1.mapped >= i1.committed, "mapped %zu < committed %zu", i1.mapped, i1.committed);
  CHECK(i1.committed >= (size_t)N * 100, "committed %zu < live bytes", i1.committed);
  for (int i = 0; i < N; i++) free(ps[i]);
  free(ps);
  int r = hak_malloc_trim(0);
  CHECK(r == 0 || r == 1, "hak_malloc_trim returned %d", r);
  CHECK(capture_stderr(call_hak_stats_print) > 0, "hak_stats_print(stderr) wrote nothing");
  CHECK(capture_stderr(hak_malloc_stats) > 0, "hak_malloc_stats() wrote nothing");
}

/* Runs one group of checks and says how long it took. */
#define RUN(test)                                               \
  do {                                                          \
    double t0_ = tu_now();                                      \
    test();                                                     \
    printf("api_basic: %-32s %.2f s\n", #test, tu_now() - t0_); \
  } while (0)

int main(int argc, char **argv) {
  g_seed = tu_seed(argc, argv);
  printf("api_basic: %s\n", tu_have_hakmem() ? "hakmem present" : "hakmem absent (glibc run)");
  RUN(test_malloc_zero_and_free_null);
  RUN(test_alignment_and_usable_size);
  RUN(test_calloc_zero);
  RUN(test_reuse_after_trim);
  RUN(test_realloc_tiers);
  RUN(test_realloc_zero);
  RUN(test_impossible_sizes);
  RUN(test_exhaustion);
  RUN(test_posix_memalign);
  RUN(test_aligned_alloc_memalign);
  RUN(test_huge_alignments);
  RUN(test_overcommit_refused);
  RUN(test_valloc_pvalloc);
  RUN(test_free_sized);
  RUN(test_reallocarray);
#ifdef __GLIBC__
  RUN(test_mallinfo);
#endif
  RUN(test_stats_and_trim);
  RUN(test_libc_aliases);
  RUN(test_hakmem_api);
  return tu_finish("api_basic");
}
