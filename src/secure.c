/* The hardened build's checks (HAKMEM_SECURE=1, libhakmem-secure). The default build
 * compiles none of it: its callers' `if (HAKMEM_SECURE)` branches fold away, and the
 * CPU-feature check below would otherwise bring in libgcc's start-up constructor, which
 * runs CPUID at every program's load.
 *
 * A hardened small block of class size S holding n bytes:
 *   [0, n) user data | [n, S-8) canary bytes | [S-8, S) size word = n ^ key ^ address
 * free() checks the block's canary and size word (overflow) and the block below
 * (underflow), zeroes the data and parks the block in a per-thread quarantine, which it
 * leaves still zero or reported (write after free). Large blocks: large.c, guard.c. */
#include "alloc_fast.h"

#include <errno.h>
#include <string.h>

#if HAKMEM_SECURE

/* ---- canary bytes and size words ----------------------------------------------- */
/* Canary bytes are in 0xC0..0xFF, so zeros, text and small numbers written past the end
 * always differ; they depend on the address mod 8 only, so one random word, made at
 * start-up, holds all eight. */
static uint64_t canary_w;
static uint64_t canary_rot[8]; /* canary_w rotated right by 0..7 bytes (canary_at) */
static bool use_avx2; /* per-byte work in 32-byte steps (secure_init) */
/* x86 builds also compile the per-byte loops for AVX2 and pick at start-up. */
#if defined(__x86_64__) || defined(__i386__)
#define SECURE_AVX2_VARIANTS 1
#else
#define SECURE_AVX2_VARIANTS 0
#endif

void secure_init(void) {
  /* A size word's top bytes are the key's (sizes and addresses stay below 2^47), and its
   * top byte is the byte right below the next block. In 0xC0..0xFF like the canary bytes,
   * an underflow that writes a zero, text or a small number there always changes it (a
   * random top byte equalled the byte written one run in 256, and the write went unseen). */
  hak_list_key |= (uintptr_t)0xC0C0 << 48;
  for (unsigned i = 0; i < 8; i++)
    canary_w |= (uint64_t)(0xC0 | ((hak_list_key >> (i * 6)) & 0x3F)) << (8 * i);
  canary_rot[0] = canary_w;
  for (unsigned r = 1; r < 8; r++) canary_rot[r] = canary_w >> (8 * r) | canary_w << (64 - 8 * r);
#if SECURE_AVX2_VARIANTS
  __builtin_cpu_init();
  use_avx2 = __builtin_cpu_supports("avx2");
#endif
}

/* Unaligned words: the gap after a block's data starts anywhere. */
static inline uint64_t load64(uintptr_t a) {
  uint64_t v;
  memcpy(&v, (const void *)a, 8);
  return v;
}
static inline void store64(uintptr_t a, uint64_t v) { memcpy((void *)a, &v, 8); }

/* The canary word as read from address a: byte i is the canary byte of a + i (the
 * word rotated by a mod 8 bytes, one of eight made at start-up). */
static inline uint64_t canary_at(uintptr_t a) { return canary_rot[a & 7]; }

/* ---- per-byte work: secure_bytes.h ------------------------------------------- */
#include "secure_bytes.h"

/* Is the block at a, S bytes of which n were asked for, as free() left it: zero up to
 * max(n, 16) but for its free tag (and, once released, its link), canaries after? */
hak_inline bool still_clean_body(uintptr_t a, const hak_slab_t *s) {
  size_t S = s->block_size;
  size_t n = secure_size_decode(secure_size_word(a, S));
  if (n > S - SECURE_TAIL) return false;
  size_t zeroed = n < 16 ? 16 : n;
  const uint64_t *w = (const uint64_t *)a;
  return w[0] == 0 && w[1] == block_free_tag(s) && all_zero_body(a + 16, a + zeroed) &&
         canary_intact_body(a + zeroed, a + S - 8);
}

hak_noinline static void canary_fill_base(uintptr_t from, uintptr_t to) { canary_fill_body(from, to); }
hak_noinline static bool canary_intact_base(uintptr_t from, uintptr_t to) {
  return canary_intact_body(from, to);
}
hak_noinline static bool still_clean_base(uintptr_t a, const hak_slab_t *s) { return still_clean_body(a, s); }
#if SECURE_AVX2_VARIANTS
hak_noinline __attribute__((target("avx2"))) static void canary_fill_avx2(uintptr_t from, uintptr_t to) {
  canary_fill_body(from, to);
}
hak_noinline __attribute__((target("avx2"))) static bool canary_intact_avx2(uintptr_t from, uintptr_t to) {
  return canary_intact_body(from, to);
}
hak_noinline __attribute__((target("avx2"))) static bool still_clean_avx2(uintptr_t a, const hak_slab_t *s) {
  return still_clean_body(a, s);
}
#else /* use_avx2 stays false */
#define canary_fill_avx2 canary_fill_base
#define canary_intact_avx2 canary_intact_base
#define still_clean_avx2 still_clean_base
#endif

static inline void canary_fill(uintptr_t from, uintptr_t to) {
  if (hak_likely(to - from <= 32)) canary_fill_short(from, to);
  else if (use_avx2) canary_fill_avx2(from, to);
  else canary_fill_base(from, to);
}
static inline bool canary_intact(uintptr_t from, uintptr_t to) {
  if (hak_likely(to - from <= 32)) return canary_intact_short(from, to);
  return use_avx2 ? canary_intact_avx2(from, to) : canary_intact_base(from, to);
}
/* Blocks of up to 64 bytes, inline and a word a step: [16, z) zero, z = max(n, 16), the
 * last word masked; [z, S - 8) canary bytes, the last word overlapping. */
static inline bool still_clean_small(uintptr_t a, const hak_slab_t *s) {
  size_t S = s->block_size;
  size_t n = secure_size_decode(secure_size_word(a, S));
  if (n > S - SECURE_TAIL) return false;
  uintptr_t z = a + (n < 16 ? 16 : n), end = a + S - 8;
  const uint64_t *w = (const uint64_t *)a;
  uint64_t acc = w[0] | (w[1] ^ block_free_tag(s));
  for (uintptr_t p = a + 16; p < z; p += 8) {
    uint64_t v = load64(p);
    if (p + 8 > z) v &= ((uint64_t)1 << (8 * (z - p))) - 1; /* little-endian: the first bytes */
    acc |= v;
  }
  for (uintptr_t p = z; p < end; p += 8) {
    uintptr_t q = p + 8 > end ? end - 8 : p;
    acc |= load64(q) ^ canary_at(q);
  }
  return acc == 0;
}

static inline bool still_clean(uintptr_t a, const hak_slab_t *s) {
  if (hak_likely(s->block_size <= 64)) return still_clean_small(a, s);
  return use_avx2 ? still_clean_avx2(a, s) : still_clean_base(a, s);
}

/* What a block's size word says about its bytes. Once free() and the quarantine's check
 * have seen the block, with n = the size it had: [16, k) is zero and [k, S - 8) holds
 * canary bytes, for k = max(n, 16). A live block has canary bytes in [k, S - 8) too.
 * Returns k, or 0 when nothing is known: a new block (size word 0), one released
 * unchecked, a corrupt size word. A purged block (block_purged) also has its mark in
 * [16, 24) and zeros where whole pages of the canary bytes were. */
static inline size_t block_known(uintptr_t a, size_t S) {
  size_t n = secure_size_decode(secure_size_word(a, S));
  if (n - 1 >= S - SECURE_TAIL) return 0;
  return n < 16 ? 16 : n;
}
/* Only free blocks of two pages or more are purged (deferred.c). */
static inline bool maybe_purged(uintptr_t a, size_t S) { return S >= 8192 && block_purged(a); }
static inline size_t canary_known(uintptr_t a, size_t S) {
  return maybe_purged(a, S) ? 0 : block_known(a, S);
}

/* Hands out the block at a for n bytes, k = canary_known before any change: canary bytes
 * from n on, where they are not there already, and the size word. */
static inline void arm_known(uintptr_t a, size_t n, size_t S, size_t k) {
  uintptr_t to = k ? (a + k + 7) & ~(uintptr_t)7 : a + S - 8; /* canary bytes from here */
  if (a + n < to) {
    if (to - (a + n) < 8) to += 8; /* canary_fill wants a word; k <= S - 16 leaves room */
    canary_fill(a + n, to);
  }
  secure_size_encode(secure_size_word(a, S), n);
}
static inline void arm_block(uintptr_t a, size_t n, size_t S) { arm_known(a, n, S, canary_known(a, S)); }

void *secure_arm(void *p, size_t n) {
  uintptr_t a = (uintptr_t)p;
  if (p == NULL || region_map_kind(a) != MAP_REGION) return p;
  hak_slab_t *s = region_slab_of(a);
  if (slab_owner(s) == OWNER_LARGE) return p;
  arm_block(a, n, s->block_size);
  return p;
}

size_t secure_usable(void *p, hak_slab_t *s) {
  size_t n = secure_size_decode(secure_size_word((uintptr_t)p, s->block_size));
  if (n > s->block_size - SECURE_TAIL) hak_fatal_at("heap overflow detected", p);
  return n;
}

/* ---- the block below ----------------------------------------------------------- */
/* Each byte of w either the canary's (c) or zero? (Bytes being zeroed by another
 * thread's free of the block are zero; an overrun writes anything else.) */
static inline bool canary_or_zero(uint64_t w, uint64_t c) {
  const uint64_t lo = 0x7f7f7f7f7f7f7f7full, hi = 0x8080808080808080ull;
  uint64_t x = w ^ c;
  uint64_t zx = ~(((x & lo) + lo) | x | lo), zw = ~(((w & lo) + lo) | w | lo); /* 0x80: zero byte */
  return (zx | zw) == hi;
}

/* Checked when a block at a of an owned slab s is allocated or freed: the block below
 * it must have a sane size word (or, for block 0, the guard word before it) and its
 * first canary word intact (and block 0 the guard word below it): an overrun of that
 * block by one byte, or of ours below our start, shows there. Only in our own slabs:
 * no other thread arms their blocks. */
hak_noinline static void check_below_full(uintptr_t a, const hak_slab_t *s) {
  size_t S = s->block_size;
  const uintptr_t *w = (const uintptr_t *)(a - 8);
  if (a == s->start) {
    if (secure_size_decode(w) > S - SECURE_TAIL) hak_fatal_at("heap overflow detected", (void *)a);
    return;
  }
  uintptr_t b = a - S;
  if (b == s->start && secure_size_decode((const uintptr_t *)(b - 8)) > S - SECURE_TAIL)
    hak_fatal_at("heap overflow detected", (void *)b); /* block 0's guard word, as above */
#if defined(__SANITIZE_THREAD__)
  /* The rest reads bytes that another thread may be writing, by design (and validates
   * what it read after): ThreadSanitizer builds check the size word only. */
  if (secure_size_decode(w) > S - SECURE_TAIL) hak_fatal_at("heap overflow detected", (void *)b);
  return;
#endif
  /* Its tag before its size word: a thread freeing it unchecked clears the size word
   * first (x86 keeps both orders). */
  bool is_free = __atomic_load_n(&((const hak_block_t *)b)->free_tag, __ATOMIC_RELAXED) == block_free_tag(s);
  hak_compiler_barrier();
  size_t n0 = secure_size_decode(w), n = n0;
  if (n > S - SECURE_TAIL) hak_fatal_at("heap overflow detected", (void *)b);
  if (n == 0) return;
  if (is_free) {
    if (maybe_purged(b, S)) return;
    if (n < 16) n = 16; /* a free block is zero to 16 bytes at least */
  } else if (n < 16) { /* another thread's free may be zeroing [n, 16) right now */
    if (hak_likely(canary_or_zero(load64(b + n), canary_at(b + n)))) return;
  } else if (hak_likely(load64(b + n) == canary_at(b + n))) {
    return;
  }
  if (is_free && load64(b + n) == canary_at(b + n)) return;
  /* Not what it should be, or another thread changed the block since we read its tag and
   * size word: its free wrote zeros, its tag and link over [n, 16), or its realloc grew
   * it in place and the program wrote past the old size. Both are read again, after the
   * canary word (x86 keeps the order of stores and of loads): a block that has since
   * become free or changed size is not judged. */
  hak_compiler_barrier();
  bool now_free = __atomic_load_n(&((const hak_block_t *)b)->free_tag, __ATOMIC_RELAXED) == block_free_tag(s);
  if (now_free != is_free || secure_size_decode(w) != n0) return;
  hak_fatal_at("heap overflow detected", (void *)b);
}

/* The common cases inline, for a block below other than block 0: never handed out (size
 * word 0), or of 16 bytes or more with its first canary word intact, free or not (free
 * leaves [n, S - 8) as it was). Anything else, check_below_full judges. */
static inline void check_below(uintptr_t a, const hak_slab_t *s) {
#if !defined(__SANITIZE_THREAD__)
  size_t S = s->block_size;
  uintptr_t b = a - S;
  size_t n = secure_size_decode((const uintptr_t *)(a - 8));
  if (hak_likely(b > s->start) &&
      (n == 0 || (n >= 16 && n <= S - SECURE_TAIL && load64(b + n) == canary_at(b + n))))
    return;
#endif
  check_below_full(a, s);
}

/* ---- free and the quarantine ---------------------------------------------------- */
/* At free: the first canary word after the data and the size word, which together see
 * any run off the end (the quarantine's check reads every byte later); and, in our own
 * slab, the block below. */
static inline void check_canaries(uintptr_t a, hak_slab_t *s, bool own_slab) {
  size_t S = s->block_size;
  size_t n = secure_size_decode(secure_size_word(a, S));
  if (n > S - SECURE_TAIL || load64(a + n) != canary_at(a + n))
    hak_fatal_at("heap overflow detected", (void *)a);
  if (own_slab) check_below(a, s);
}

/* Zero-on-free of [0, z), z >= 16, without a call for up to 32 bytes. */
static inline void zero_data(uintptr_t a, size_t z) {
  if (hak_likely(z <= 32)) {
    store64(a, 0);
    store64(a + 8, 0);
    store64(a + z - 16, 0);
    store64(a + z - 8, 0);
  } else {
    memset((void *)a, 0, z);
  }
}

/* A free block's size word also tells calloc what it need not clear: the quarantine's
 * check has seen [16, n) zero. A block that skips the check says 0 instead. */
static void release_unchecked(void *p, hak_slab_t *s) {
  secure_size_encode(secure_size_word((uintptr_t)p, s->block_size), 0);
  ((hak_block_t *)p)->free_tag = 0;
  heap_free_slow(p, s);
}

/* A block leaves h's quarantine: checked, then freed as the fast path frees (its tag is
 * already in place) when it is h's and its slab not full, else as another heap's. A
 * user heap's block holds a reference on that heap while in quarantine (`user`). */
static void quarantine_release(hak_heap_t *h, hak_block_t *old, hak_heap_t *user) {
  uintptr_t oa = (uintptr_t)old;
  hak_slab_t *os = region_slab_of(oa);
  if (!still_clean(oa, os)) hak_fatal_at("write after free detected", old);
  h->quarantine_bytes -= os->block_size;
  if (user != NULL && heap_user_block_release(old, os, h, user)) return;
  if (hak_likely(hak_tso_load(&os->owner) == (uintptr_t)h)) {
    if (slab_owner_push(os, &os->local_free, old) == 0) heap_slab_emptied(h, os);
    return;
  }
  old->free_tag = 0;
  heap_free_other(old, os, h);
}

/* check = false in a forked child for the other threads' heaps: a thread frozen in the
 * middle of free() may have left its last block half zeroed. */
void secure_quarantine_flush(hak_heap_t *h, bool check) {
  for (uint32_t i = 0; i < QUARANTINE_SLOTS; i++) {
    hak_block_t *q = h->quarantine[i];
    hak_heap_t *user = h->quarantine_user[i];
    __atomic_store_n(&h->quarantine[i], NULL, __ATOMIC_RELAXED); /* heap_walk reads it */
    h->quarantine_user[i] = NULL;
    if (q == NULL) continue;
    if (check) {
      quarantine_release(h, q, user);
    } else {
      hak_slab_t *qs = region_slab_of((uintptr_t)q);
      h->quarantine_bytes -= qs->block_size;
      if (user != NULL && heap_user_block_release(q, qs, h, user)) continue;
      release_unchecked(q, qs);
    }
  }
}

/* A slot picked at random (the top bits of a linear congruential sequence). */
static inline uint32_t quarantine_pick(hak_heap_t *h) {
  uint32_t x = h->quarantine_rng * 1664525u + 1013904223u;
  h->quarantine_rng = x;
  return x >> (32 - 8);
}
_Static_assert(QUARANTINE_SLOTS == 256 || !HAKMEM_SECURE, "quarantine_pick gives 8 bits");

void secure_free(void *p) {
  uintptr_t a = (uintptr_t)p;
  unsigned kind = region_map_kind(a);
  if (hak_unlikely(kind != MAP_REGION)) {
    free_outside_regions(p, "free");
    return;
  }
  hak_slab_t *s = region_slab_of(a);
  hak_heap_t *h = hak_tls_heap;
  hak_block_t *b = p;
  uintptr_t tag = block_free_tag(s);
  uintptr_t owner = slab_owner(s);
  /* The common case is checked inline; free_checked reports the rest (or frees a
   * large block). */
  if (hak_unlikely((owner & ~SLAB_FULL) != (uintptr_t)h || !slab_is_block_start(s, a) ||
                   b->free_tag == tag)) {
    owner = free_checked(p, s);
    if (owner == OWNER_LARGE) return;
  }
  size_t S = s->block_size;
  check_canaries(a, s, (owner & ~SLAB_FULL) == (uintptr_t)h);
  size_t n = secure_size_decode(secure_size_word(a, S));
  zero_data(a, n < 16 ? 16 : n);
  b->free_tag = tag;
  if (h == &hak_heap_empty) { /* a thread without a heap: no quarantine */
    release_unchecked(p, s);
    return;
  }
  uint32_t i = quarantine_pick(h);
  hak_block_t *old = h->quarantine[i];
  hak_heap_t *old_user = h->quarantine_user[i];
  h->quarantine_user[i] = slab_user_heap(s) != NULL ? heap_user_hold(s, p, "free") : NULL;
  __atomic_store_n(&h->quarantine[i], b, __ATOMIC_RELAXED); /* heap_walk reads it */
  h->quarantine_bytes += (uint32_t)S;
  if (old != NULL) quarantine_release(h, old, old_user);
  /* Big blocks: more go, so that the quarantine holds a bounded amount of memory. */
  while (hak_unlikely(h->quarantine_bytes > QUARANTINE_BYTES)) {
    i = quarantine_pick(h);
    old = h->quarantine[i];
    if (old == NULL || old == b) continue;
    old_user = h->quarantine_user[i];
    h->quarantine_user[i] = NULL;
    __atomic_store_n(&h->quarantine[i], NULL, __ATOMIC_RELAXED);
    quarantine_release(h, old, old_user);
  }
}

/* Past MID_MAX with the tail: a large block, which keeps n itself (its canaries are
 * large.c's). */
static void *secure_large(size_t n, bool zero) {
  if (heap_get() == NULL) {
    errno = ENOMEM;
    return NULL;
  }
  return large_alloc(n, 0, zero ? LARGE_ZERO : 0);
}

void *secure_calloc(size_t n) {
  if (n == 0) return zero_alloc();
  if (n > MID_MAX - SECURE_TAIL) return secure_large(n, true);
  void *p = fast_malloc_raw(n + SECURE_TAIL);
  if (p == NULL) return NULL;
  uintptr_t a = (uintptr_t)p;
  hak_slab_t *s = region_slab_of(a);
  if (slab_owner(s) == OWNER_LARGE) return memset(p, 0, n);
  size_t S = s->block_size;
  size_t k = block_known(a, S);
  bool purged = maybe_purged(a, S);
  if (k == 0) {
    memset(p, 0, n);
  } else {
    memset(p, 0, purged ? 24 : 16);
    if (n > k) memset((char *)p + k, 0, n - k);
  }
  arm_known(a, n, S, purged ? 0 : k);
  return p;
}

void *secure_malloc(size_t n) {
  if (hak_likely(n - 1 < TINY_MAX - SECURE_TAIL)) { /* the fast path, plus arming */
    hak_slab_t *s = hak_tls_alloc->direct[(n + SECURE_TAIL + 15) >> 4];
    hak_block_t *b = s->free;
    if (hak_likely(b != NULL)) {
      slab_pop(s, b);
      uintptr_t a = (uintptr_t)b;
      size_t S = s->block_size, was = secure_size_decode(secure_size_word(a, S));
      if (was > S - SECURE_TAIL) hak_fatal_at("heap overflow detected", b); /* its own, overrun */
      check_below(a, s);
      arm_known(a, n, S, was == 0 || maybe_purged(a, S) ? 0 : was < 16 ? 16 : was);
      return b;
    }
  }
  if (n == 0) return zero_alloc();
  if (n >= (size_t)PTRDIFF_MAX - SECURE_TAIL) {
    errno = ENOMEM;
    return NULL;
  }
  if (n > MID_MAX - SECURE_TAIL) return secure_large(n, false);
  return secure_arm(fast_malloc_raw(n + SECURE_TAIL), n);
}

#endif /* HAKMEM_SECURE */
