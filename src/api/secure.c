/* The hardened build's checks (HAKMEM_SECURE=1, libhakmem-secure). The default build
 * compiles none of it: its callers' `if (HAKMEM_SECURE)` branches fold away, and the
 * CPU-feature check of the zero check (secure_zero.c) would otherwise bring in libgcc's
 * start-up constructor, which runs CPUID at every program's load.
 *
 * A hardened small block of class size S holding n bytes (n <= S - SECURE_TAIL):
 *   live: [0, n) data | [n, n+8) canary word | [n+8, S-8) zero | [S-8, S) size word
 *   free: [0, 8) link or 0 | [8, 16) free tag | [16, S-8) zero | [S-8, S) size word
 * The size word is n ^ key ^ address. free() checks the canary word, the zero bytes and
 * the size word (overflow) and the block below (underflow), zeroes [0, n+8) and parks
 * the block in a per-thread quarantine, which it leaves when seen still zero (else:
 * write after free). So malloc writes two words, and hands out zero memory. Carving
 * zeroes what an earlier use of the span wrote, so a block never handed out is zero
 * but for its link and tag too. While a free zeroes a block or a realloc moves its
 * canary word, its size word carries SIZE_BUSY, and the check of the block below (which
 * another thread may be running) leaves it unjudged. Large blocks: large.c, guard.c. */
#include "api/api.h"

#include <errno.h>
#include <string.h>

#if HAKMEM_SECURE

/* ---- canary words and size words ------------------------------------------------ */
/* Canary bytes are in 0xC0..0xFF, so a zero (a string's terminator), text or a small
 * number written past the end always differs; they depend on the address mod 8 only,
 * so one random word, made at start-up, holds all eight. */
static uint64_t canary_w;
static uint64_t canary_rot[8]; /* canary_w rotated right by 0..7 bytes (canary_at) */

void secure_init(void) {
  /* A size word's top bytes are the key's (sizes and addresses stay below 2^47), and its
   * top byte is the byte right below the next block. In 0xC0..0xFF like the canary bytes,
   * an underflow that writes a zero, text or a small number there always changes it (a
   * random top byte equalled the byte written one run in 256, and the write went unseen). */
  list_key |= (uintptr_t)0xC0C0 << 48;
  for (unsigned i = 0; i < 8; i++) canary_w |= (uint64_t)(0xC0 | ((list_key >> (i * 6)) & 0x3F)) << (8 * i);
  canary_rot[0] = canary_w;
  for (unsigned r = 1; r < 8; r++) canary_rot[r] = canary_w >> (8 * r) | canary_w << (64 - 8 * r);
  secure_zero_init();
}

/* Unaligned words: the canary word starts anywhere. */
static inline uint64_t load64(uintptr_t a) {
  uint64_t v;
  memcpy(&v, (const void *)a, 8);
  return v;
}
static inline void store64(uintptr_t a, uint64_t v) { memcpy((void *)a, &v, 8); }

/* In a size word while a free or resize changes its block: not judged by the check of
 * the block below (another thread's). */
#define SIZE_BUSY ((size_t)1 << 40)
/* A busy size word: SIZE_BUSY over a sane size (a corrupted word is almost never). */
static inline bool size_busy(size_t n, size_t S) {
  return (n & SIZE_BUSY) && (n & ~SIZE_BUSY) <= S - SECURE_TAIL;
}

/* The canary word as read from address a: byte i is the canary byte of a + i (the
 * word rotated by a mod 8 bytes, one of eight made at start-up). */
static inline uint64_t canary_at(uintptr_t a) { return canary_rot[a & 7]; }

/* Is the block at a, of slab s, as free() left it: link 0, its free tag, zero up to its
 * size word, and a sane size word? Blocks of up to 64 bytes a word a step, inline. */
static inline bool still_clean(uintptr_t a, const slab_t *s) {
  size_t S = s->block_size;
  if (secure_size_decode(secure_size_word(a, S)) > S - SECURE_TAIL) return false;
  const uint64_t *w = (const uint64_t *)a;
  uint64_t acc = w[0] | (w[1] ^ block_free_tag(s));
  if (HAK_LIKELY(S <= 64)) {
    for (uintptr_t p = a + 16; p < a + S - 8; p += 8) acc |= *(const uint64_t *)p;
    return acc == 0;
  }
  return acc == 0 && secure_all_zero(a + 16, a + S - 8);
}

/* Are the bytes between a live block's canary word and its size word, [n + 8, S - 8),
 * still zero, as arming and every resize leave them? A write there is an overflow that
 * passed over the canary word. Up to 64 bytes in at most eight loads, without a loop:
 * words from both ends, overlapping (under 8 bytes: the word that ends at S - 8, its
 * low bytes, the canary's and the data's, shifted out); more, the zero check. */
static inline bool slack_clean(uintptr_t a, size_t n, size_t S) {
  uintptr_t from = a + n + 8, to = a + S - 8;
  if (from >= to) return true;
  size_t len = to - from;
  if (len < 8) return load64(to - 8) >> (8 * (8 - len)) == 0;
  uint64_t acc = load64(from) | load64(to - 8);
  if (len <= 16) return acc == 0;
  acc |= load64(from + 8) | load64(to - 16);
  if (len <= 32) return acc == 0;
  if (HAK_LIKELY(len <= 64))
    return (acc | load64(from + 16) | load64(from + 24) | load64(to - 32) | load64(to - 24)) == 0;
  return acc == 0 && secure_all_zero(from, to);
}

/* Zero [a + from, a + to), whole words, without a call for up to 32 bytes. */
static inline void zero_range(uintptr_t a, size_t from, size_t to) {
  size_t len = to - from;
  if (HAK_LIKELY(len <= 32)) {
    store64(a + from, 0);
    store64(a + to - 8, 0);
    if (len > 16) {
      store64(a + from + 8, 0);
      store64(a + to - 16, 0);
    }
  } else {
    memset((void *)(a + from), 0, len);
  }
}

/* Only free blocks of two pages or more are purged (deferred.c), marked in [16, 24). */
static inline bool maybe_purged(uintptr_t a, size_t S) { return S >= 8192 && block_purged(a); }

/* Hands out the free block at a for n bytes: was = its size word's n (checked sane).
 * Every free block is zero but for its link and (purged) mark: one that has been
 * through free() and the quarantine (was > 0) was checked so; one never handed out
 * (was = 0) was cleared by carving (slab_extend), and one released unchecked was zeroed
 * by whoever released it (secure_free, secure_quarantine_flush). Debug builds check the
 * was = 0 case, which costs a pass over the block. Then the canary word after the data,
 * then the size word. */
static inline void arm_free_block(uintptr_t a, size_t n, size_t S, size_t was) {
  store64(a, 0);
  if (maybe_purged(a, S)) store64(a + 16, 0);
  if (HAKMEM_DEBUG && was == 0 && !secure_all_zero(a + 16, a + S - 8))
    error_fatal_at("hakmem bug: a new block is not zero", (void *)a);
  store64(a + n, canary_at(a + n));
  secure_size_encode(secure_size_word(a, S), n);
}

void *secure_arm(void *p, size_t n) {
  uintptr_t a = (uintptr_t)p;
  if (p == NULL || region_map_kind(a) != MAP_REGION) return p;
  slab_t *s = region_slab_of(a);
  if (slab_owner(s) == OWNER_LARGE) return p;
  size_t S = s->block_size, was = secure_size_decode(secure_size_word(a, S));
  if (was > S - SECURE_TAIL) error_fatal_at("heap overflow detected", p);
  arm_free_block(a, n, S, was);
  return p;
}

/* realloc within the block, from n1 to n2 bytes. Another thread may be checking this
 * block as the block below its own (check_below_full): it reads the size word, then the
 * canary word that size names, then both again. So the new canary word is written
 * before the size word names it, and the old one cleared only after. */
void *secure_resize(void *p, slab_t *s, size_t n1, size_t n2) {
  uintptr_t a = (uintptr_t)p;
  if (n2 == n1) return p;
  uintptr_t *w = secure_size_word(a, s->block_size);
  secure_size_encode(w, n1 | SIZE_BUSY); /* the slack is about to change */
  compiler_barrier();
  store64(a + n2, canary_at(a + n2));
  compiler_barrier();
  secure_size_encode(w, n2 | SIZE_BUSY);
  compiler_barrier();
  if (n2 > n1) {
    if (n2 > n1 + 8) memset((void *)(a + n1), 0, 8);
    else memset((void *)(a + n1), 0, n2 - n1);
  } else {
    memset((void *)(a + n2 + 8), 0, n1 - n2);
  }
  compiler_barrier();
  secure_size_encode(w, n2);
  return p;
}

size_t secure_usable(void *p, slab_t *s) {
  size_t n = secure_size_decode(secure_size_word((uintptr_t)p, s->block_size));
  if (n > s->block_size - SECURE_TAIL) error_fatal_at("heap overflow detected", p);
  return n;
}

/* ---- the block below ----------------------------------------------------------- */
/* Checked when a block at a of an owned slab s is allocated or freed: the block below
 * it must have a sane size word (block 0: the guard word before it) and, if live, its
 * canary word intact and every byte from there to its size word zero; if free or never
 * handed out, the bytes of its zero part within 32 bytes of a zero. An overrun of that
 * block, or of ours below our start, shows there. Only in our own slabs: no other
 * thread arms their blocks. */

/* Are the free block b's zero bytes in [a - 32, a - 8), above its link and tag (and
 * purged mark, in blocks of two pages or more), zero? */
static inline bool below_free_clean(uintptr_t a, uintptr_t b, size_t S) {
  uintptr_t from = b + (S >= 8192 ? 24 : 16);
  if (from < a - 32) from = a - 32;
  uint64_t acc = 0;
  for (uintptr_t p = from; p < a - 8; p += 8) acc |= *(const uint64_t *)p;
  return acc == 0;
}

/* The link word of b, a free block of s (or one never handed out): 0 (zeroed at free),
 * or next ^ key ^ b with next NULL or a carved block of s. A write over a free
 * neighbour's first word (25 to 32 bytes past or before an 8-byte block, whose class is
 * 32 bytes) shows here, before any list follows the link. */
static inline bool link_sane(uintptr_t b, const slab_t *s) {
  uintptr_t raw = __atomic_load_n((const uintptr_t *)b, __ATOMIC_RELAXED);
  uintptr_t next = raw ^ list_key ^ b;
  return raw == 0 || next == 0 || slab_is_carved_block(s, next);
}

/* Only canary bytes in a live block's slack: a resize in flight is moving its canary. */
static bool slack_is_canary(uintptr_t b, size_t n, size_t S) {
  for (uintptr_t x = b + n + 8; x < b + S - 8; x++) {
    uint8_t v = *(const uint8_t *)x;
    if (v != 0 && v != (uint8_t)canary_at(x)) return false;
  }
  return true;
}

HAK_NOINLINE static void check_below_full(uintptr_t a, const slab_t *s) {
  size_t S = s->block_size;
  const uintptr_t *w = (const uintptr_t *)(a - 8);
  if (a == s->start) { /* the guard word, and the gap's bytes near us zero */
    uintptr_t from = a - 32 > slab_base(s) ? a - 32 : slab_base(s);
    uint64_t acc = 0;
    for (uintptr_t p = from; p < a - 8; p += 8) acc |= *(const uint64_t *)p;
    if (secure_size_decode(w) > S - SECURE_TAIL || acc != 0)
      error_fatal_at("heap overflow detected", (void *)a);
    return;
  }
  uintptr_t b = a - S;
  if (b == s->start && secure_size_decode((const uintptr_t *)(b - 8)) > S - SECURE_TAIL)
    error_fatal_at("heap overflow detected", (void *)b); /* block 0's guard word, as above */
#if defined(__SANITIZE_THREAD__)
  /* The rest reads bytes that another thread may be writing, by design (and validates
   * what it read after): ThreadSanitizer builds check the size word only. */
  size_t t = secure_size_decode(w);
  if (t > S - SECURE_TAIL && !size_busy(t, S)) error_fatal_at("heap overflow detected", (void *)b);
  return;
#endif
  /* Its tag before its size word and canary word: a thread freeing it marks the size
   * word busy, then sets the tag, then zeroes; a resize marks it busy before it writes
   * the new canary word (x86 keeps the order of stores, and of loads). */
  bool is_free = __atomic_load_n(&((const block_t *)b)->free_tag, __ATOMIC_RELAXED) == block_free_tag(s);
  compiler_barrier();
  size_t n = secure_size_decode(w);
  if (size_busy(n, S)) return; /* being freed or resized: not judged */
  if (n > S - SECURE_TAIL) error_fatal_at("heap overflow detected", (void *)b);
  /* Never handed out, or released unjudged: its tag is the free tag or 0. */
  bool unused = n == 0 && ((const block_t *)b)->free_tag == 0;
  bool clean = is_free || unused ? below_free_clean(a, b, S) && link_sane(b, s)
                                 : n != 0 && load64(b + n) == canary_at(b + n) && slack_clean(b, n, S);
  if (HAK_LIKELY(clean)) return;
  /* Not what it should be, or another thread changed the block since we read its tag and
   * size word: its free or its realloc has begun. Both are read again after the bytes:
   * a block that has since become free, busy or another size is not judged, nor one
   * whose slack holds the canary word of a resize about to name it. */
  compiler_barrier();
  if ((__atomic_load_n(&((const block_t *)b)->free_tag, __ATOMIC_RELAXED) == block_free_tag(s)) != is_free ||
      secure_size_decode(w) != n)
    return;
  if (!is_free && n != 0 && load64(b + n) == canary_at(b + n) && slack_is_canary(b, n, S)) return;
  error_fatal_at("heap overflow detected", (void *)b);
}

/* The common cases inline, for a block below other than block 0: free or never handed
 * out (size word 0, tag 0 or the free tag) with its zero bytes near us zero, or live with its canary word intact
 * and its slack zero. Anything else, check_below_full judges. */
static inline void check_below(uintptr_t a, const slab_t *s) {
#if !defined(__SANITIZE_THREAD__)
  size_t S = s->block_size;
  uintptr_t b = a - S;
  size_t n = secure_size_decode((const uintptr_t *)(a - 8));
  if (HAK_LIKELY(b > s->start)) {
    uintptr_t tag = ((const block_t *)b)->free_tag;
    if (tag == block_free_tag(s) || (n == 0 && tag == 0)) {
      if (n <= S - SECURE_TAIL && below_free_clean(a, b, S) && link_sane(b, s)) return;
    } else if (n != 0 && n <= S - SECURE_TAIL && load64(b + n) == canary_at(b + n) && slack_clean(b, n, S)) {
      return;
    }
  }
#endif
  check_below_full(a, s);
}

/* Checked when a block at a of an owned slab s is freed: the block above it, if free
 * or never handed out, must have a sane link word, or a zero one if not carved yet (its
 * other bytes near us are the ones this block's own check and the block above's check
 * below read). A live block above starts with its data, which nothing can judge. The
 * order of check_below_full: its tag, then its size word (busy: not judged), then the
 * link, and a bad link is judged only if neither changed meanwhile. */
static inline void check_above(uintptr_t a, const slab_t *s) {
#if !defined(__SANITIZE_THREAD__)
  size_t S = s->block_size;
  uintptr_t c = a + S;
  if (!slab_is_carved_block(s, c)) {
    /* Not carved yet: zero where the span has not been written (carving clears the rest
     * as it reaches it). Past the slab's last block: the next span's, not judged here. */
    if (c < s->start + (uintptr_t)s->reserved * S && c >= slab_base(s) + s->touched && load64(c) != 0)
      error_fatal_at("heap overflow detected", (void *)c);
    return;
  }
  const uintptr_t *w = secure_size_word(c, S);
  uintptr_t tag = __atomic_load_n(&((const block_t *)c)->free_tag, __ATOMIC_RELAXED);
  compiler_barrier();
  size_t n = secure_size_decode(w);
  if ((tag != block_free_tag(s) && (n != 0 || tag != 0)) || size_busy(n, S)) return; /* live, or busy */
  if (HAK_LIKELY(link_sane(c, s))) return;
  compiler_barrier();
  if (__atomic_load_n(&((const block_t *)c)->free_tag, __ATOMIC_RELAXED) != tag || secure_size_decode(w) != n)
    return;
  error_fatal_at("heap overflow detected", (void *)c);
#else
  (void)a;
  (void)s;
#endif
}

/* ---- free and the quarantine ---------------------------------------------------- */
/* A block that skips the quarantine's check says 0 in its size word: nothing known. */
static void release_unchecked(void *p, slab_t *s) {
  secure_size_encode(secure_size_word((uintptr_t)p, s->block_size), 0);
  ((block_t *)p)->free_tag = 0;
  heap_free_slow(p, s);
}

/* A block leaves h's quarantine: checked, then freed as the fast path frees (its tag is
 * already in place) when it is h's and its slab not full, else as another heap's. A
 * user heap's block holds a reference on that heap while in quarantine (`user`). */
static void quarantine_release(hak_heap_t *h, block_t *old, hak_heap_t *user) {
  uintptr_t oa = (uintptr_t)old;
  slab_t *os = region_slab_of(oa);
  if (!still_clean(oa, os)) error_fatal_at("write after free detected", old);
  h->quarantine_bytes -= os->block_size;
  if (user != NULL && heap_user_block_release(old, os, h, user)) return;
  uintptr_t owner = tso_load(&os->owner);
  if (HAK_LIKELY(owner == (uintptr_t)h)) {
    if (slab_owner_push(os, &os->free, old) == 0) heap_slab_emptied(h, os);
    return;
  }
  /* Another thread's slab: that thread checks the block as its neighbours come and go,
   * and takes a block without its tag for live, so the tag stays on all the way. */
  if (HAK_LIKELY((owner > OWNER_CACHED || owner == OWNER_ABANDONED) &&
                 (owner & ~SLAB_FULL) != (uintptr_t)h)) {
    heap_remote_batch(h, os, old);
    return;
  }
  /* Ours but full, or no thread's: heap_free_other wants the tag off. Where a thread
   * may adopt the slab meanwhile, the size word says 0 (nothing known) first. */
  if ((owner & ~SLAB_FULL) != (uintptr_t)h) secure_size_encode(secure_size_word(oa, os->block_size), 0);
  compiler_barrier();
  old->free_tag = 0;
  heap_free_other(old, os, h);
}

/* check = false in a forked child for the other threads' heaps: a thread frozen in the
 * middle of free() may have left its last block half zeroed. */
void secure_quarantine_flush(hak_heap_t *h, bool check) {
  for (uint32_t i = 0; i < QUARANTINE_SLOTS; i++) {
    block_t *q = h->quarantine[i];
    hak_heap_t *user = h->quarantine_user[i];
    __atomic_store_n(&h->quarantine[i], NULL, __ATOMIC_RELAXED); /* heap_walk reads it */
    h->quarantine_user[i] = NULL;
    if (q == NULL) continue;
    if (check) {
      quarantine_release(h, q, user);
    } else {
      slab_t *qs = region_slab_of((uintptr_t)q);
      h->quarantine_bytes -= qs->block_size;
      if (user != NULL && heap_user_block_release(q, qs, h, user)) continue;
      /* Zero but for the link, tag and size word, as a block never handed out is. */
      memset((char *)q + 16, 0, qs->block_size - 24);
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
/* The slot quarantine_pick will give next. */
static inline uint32_t quarantine_peek(const hak_heap_t *h) {
  return (h->quarantine_rng * 1664525u + 1013904223u) >> (32 - 8);
}
_Static_assert(QUARANTINE_SLOTS == 256 || !HAKMEM_SECURE, "quarantine_pick gives 8 bits");

void secure_free(void *p) {
  uintptr_t a = (uintptr_t)p;
  unsigned kind = region_map_kind(a);
  if (HAK_UNLIKELY(kind != MAP_REGION)) {
    free_outside_regions(p, "free");
    return;
  }
  slab_t *s = region_slab_of(a);
  hak_heap_t *h = tls_heap;
  block_t *b = p;
  uintptr_t tag = block_free_tag(s);
  uintptr_t owner = slab_owner(s);
  /* The common case is checked inline; free_checked reports the rest (or frees a
   * large block). */
  if (HAK_UNLIKELY((owner & ~SLAB_FULL) != (uintptr_t)h || !slab_is_carved_block(s, a) ||
                   b->free_tag == tag)) {
    owner = free_checked(p, s);
    if (owner == OWNER_LARGE) return;
  }
  size_t S = s->block_size;
  size_t n = secure_size_decode(secure_size_word(a, S));
  if (n > S - SECURE_TAIL || load64(a + n) != canary_at(a + n) || !slack_clean(a, n, S))
    error_fatal_at("heap overflow detected", p);
  if ((owner & ~SLAB_FULL) == (uintptr_t)h) {
    check_below(a, s);
    check_above(a, s);
  }
  /* Busy, the tag, the zeros over the data and canary word, and n again: the block
   * above may be checking this one meanwhile (check_below_full's order). */
  uintptr_t *w = secure_size_word(a, S);
  secure_size_encode(w, n | SIZE_BUSY);
  compiler_barrier();
  __atomic_store_n(&b->free_tag, tag, __ATOMIC_RELAXED); /* check_below_full reads it */
  compiler_barrier();
  store64(a, 0);
  size_t z = (n + 15) & ~(size_t)7; /* n + 8 up to a word: [n + 8, S - 8) is zero already */
  if (z > 16) zero_range(a, 16, z);
  compiler_barrier();
  secure_size_encode(w, n);
  if (h == &empty_heap) { /* a thread without a heap: no quarantine */
    release_unchecked(p, s);
    return;
  }
  uint32_t i = quarantine_pick(h);
  block_t *old = h->quarantine[i];
  hak_heap_t *old_user = h->quarantine_user[i];
  h->quarantine_user[i] = slab_user_heap(s) != NULL ? heap_user_hold(s, p, "free") : NULL;
  __atomic_store_n(&h->quarantine[i], b, __ATOMIC_RELAXED); /* heap_walk reads it */
  h->quarantine_bytes += (uint32_t)S;
  if (old != NULL) quarantine_release(h, old, old_user);
  /* The block the next free will release, on its way into the cache meanwhile. */
  __builtin_prefetch(h->quarantine[quarantine_peek(h)], 1);
  /* Big blocks: more go, so that the quarantine holds a bounded amount of memory. */
  while (HAK_UNLIKELY(h->quarantine_bytes > QUARANTINE_BYTES)) {
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
  if (slab_owner(region_slab_of((uintptr_t)p)) == OWNER_LARGE) return memset(p, 0, n);
  return secure_arm(p, n); /* an armed block is zero */
}

void *secure_malloc(size_t n) {
  if (HAK_LIKELY(n - 1 < TINY_MAX - SECURE_TAIL)) { /* the fast path, plus arming */
    slab_t *s = tls_alloc->direct[(n + SECURE_TAIL + 15) >> 4];
    block_t *b = s->free;
    if (HAK_LIKELY(b != NULL)) {
      slab_pop(s, b);
      __builtin_prefetch(s->free, 1); /* the next malloc's block, whose link it reads */
      uintptr_t a = (uintptr_t)b;
      size_t S = s->block_size, was = secure_size_decode(secure_size_word(a, S));
      if (was > S - SECURE_TAIL) error_fatal_at("heap overflow detected", b); /* its own, overrun */
      check_below(a, s);
      arm_free_block(a, n, S, was);
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
