/* The hardened build's checks (HAKMEM_SECURE=1, libhakmem-secure). In the default build
 * every function here is dead code that the optimiser drops.
 *
 * A hardened small block of class size S holding n bytes:
 *   [0, n) user data | [n, S-8) canary bytes | [S-8, S) size word = n ^ key ^ address
 * free() checks the block's canary and size word (overflow) and the size word of the
 * block before it (underflow), zeroes the data, and parks the block in a per-thread
 * quarantine. When it leaves the quarantine it must still be zero (write after free).
 * Large blocks sit between two inaccessible pages; malloc(0) blocks are inaccessible. */
#include "alloc_fast.h"

#include <errno.h>
#include <string.h>

/* ---- canary bytes and size words ----------------------------------------------- */
/* Canary bytes are in 0xC0..0xFF, so zeros, text and small numbers written past the end
 * always differ; they depend on the address mod 8 only, so one random word, made at
 * start-up, holds all eight. */
static uint64_t canary_w;

void secure_init(void) {
  for (unsigned i = 0; i < 8; i++)
    canary_w |= (uint64_t)(0xC0 | ((hak_list_key >> (i * 6)) & 0x3F)) << (8 * i);
}

static inline uint8_t canary_byte(uintptr_t a) { return (uint8_t)(canary_w >> (8 * (a & 7))); }
static inline uintptr_t *size_word(uintptr_t block, size_t S) { return (uintptr_t *)(block + S - 8); }
static inline size_t size_decode(const uintptr_t *w) { return *w ^ hak_list_key ^ (uintptr_t)w; }
static inline void size_encode(uintptr_t *w, size_t n) { *w = n ^ hak_list_key ^ (uintptr_t)w; }

/* Whole aligned words share one pattern: a word at a time, bytes only at the ends. */
static void canary_fill(uintptr_t from, uintptr_t to) {
  uintptr_t a = from;
  for (; a < to && (a & 7); a++) *(uint8_t *)a = canary_byte(a);
  uint64_t w = canary_w;
  for (; a + 8 <= to; a += 8) *(uint64_t *)a = w;
  for (; a < to; a++) *(uint8_t *)a = canary_byte(a);
}

static bool canary_intact(uintptr_t from, uintptr_t to) {
  uintptr_t a = from;
  for (; a < to && (a & 7); a++)
    if (*(const uint8_t *)a != canary_byte(a)) return false;
  uint64_t w = canary_w, diff = 0;
  for (; a + 8 <= to; a += 8) diff |= *(const uint64_t *)a ^ w;
  for (; a < to; a++)
    if (*(const uint8_t *)a != canary_byte(a)) return false;
  return diff == 0;
}

/* Are the n bytes at p (8-aligned) all zero? Four accumulators keep the loop short. */
static bool all_zero(const void *p, size_t n) {
  const uint64_t *w = p;
  size_t words = n / 8, i = 0;
  uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
  for (; i + 4 <= words; i += 4) {
    a0 |= w[i];
    a1 |= w[i + 1];
    a2 |= w[i + 2];
    a3 |= w[i + 3];
  }
  for (; i < words; i++) a0 |= w[i];
  for (size_t b = words * 8; b < n; b++) a0 |= ((const uint8_t *)p)[b];
  return (a0 | a1 | a2 | a3) == 0;
}

void *secure_arm(void *p, size_t n) {
  uintptr_t a = (uintptr_t)p;
  if (p == NULL || region_map_kind(a) != MAP_REGION) return p;
  hak_slab_t *s = region_slab_of(a);
  if (slab_owner(s) == OWNER_LARGE) return p;
  canary_fill(a + n, a + s->block_size - 8);
  size_encode(size_word(a, s->block_size), n);
  return p;
}

size_t secure_usable(void *p, hak_slab_t *s) {
  size_t n = size_decode(size_word((uintptr_t)p, s->block_size));
  if (n > s->block_size - SECURE_TAIL) hak_fatal_at("heap overflow detected", p);
  return n;
}

/* New blocks get a size word (so the block after them can check it) and join the
 * free list in random order. */
void secure_carve(hak_slab_t *s, uintptr_t first, uint32_t n) {
  static _Atomic uint64_t rng;
  uint64_t x = atomic_fetch_add_explicit(&rng, 0x9e3779b97f4a7c15ull, memory_order_relaxed) ^ hak_list_key;
  uint16_t order[UNIT_SIZE / 32];
  if (n > sizeof order / sizeof order[0]) n = sizeof order / sizeof order[0];
  for (uint32_t i = 0; i < n; i++) {
    order[i] = (uint16_t)i;
    size_encode(size_word(first + (uintptr_t)i * s->block_size, s->block_size), 0);
  }
  if (first == s->start) size_encode((uintptr_t *)(first - 8), 0); /* guard before block 0 */
  for (uint32_t i = n; i > 1; i--) { /* Fisher-Yates with splitmix64 */
    x += 0x9e3779b97f4a7c15ull;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    uint32_t j = (uint32_t)(z % i);
    uint16_t t = order[i - 1];
    order[i - 1] = order[j];
    order[j] = t;
  }
  for (uint32_t i = 0; i < n; i++) {
    hak_block_t *b = (hak_block_t *)(first + (uintptr_t)order[i] * s->block_size);
    block_set_next(b, s->free);
    s->free = b;
  }
}

/* ---- free and the quarantine ---------------------------------------------------- */
static void check_canaries(uintptr_t a, hak_slab_t *s, bool own_slab) {
  size_t S = s->block_size;
  size_t n = size_decode(size_word(a, S));
  if (n > S - SECURE_TAIL || !canary_intact(a + n, a + S - 8))
    hak_fatal_at("heap overflow detected", (void *)a);
  /* The word before the block is the previous block's size word (or the guard before
   * block 0): a write below our start shows there. Only in our own slabs: another
   * thread may be arming its neighbour right now (or was, when a fork froze it). */
  if (own_slab && size_decode((const uintptr_t *)(a - 8)) > S - SECURE_TAIL)
    hak_fatal_at("heap overflow detected", (void *)a);
}

/* The block left the quarantine: it must be as free() left it. Then free it for real. */
static void quarantine_release(void *p, bool check) {
  uintptr_t a = (uintptr_t)p;
  hak_slab_t *s = region_slab_of(a);
  if (!check) {
    ((hak_block_t *)p)->free_tag = 0;
    heap_free_slow(p, s);
    return;
  }
  size_t S = s->block_size;
  size_t n = size_decode(size_word(a, S));
  const uint64_t *w = p;
  bool clean = n <= S - SECURE_TAIL && w[0] == 0 && w[1] == free_tag_of(a) &&
               canary_intact(a + (n < 16 ? 16 : n), a + S - 8) &&
               (n <= 16 || all_zero((const char *)p + 16, n - 16));
  if (!clean) hak_fatal_at("write after free detected", p);
  ((hak_block_t *)p)->free_tag = 0;
  heap_free_slow(p, s);
}

/* check = false in a forked child for the other threads' heaps: a thread frozen in the
 * middle of free() may have left its last block half zeroed. */
void secure_quarantine_flush(hak_heap_t *h, bool check) {
  for (uint32_t i = 0; i < QUARANTINE_SLOTS; i++) {
    void *q = h->quarantine[i];
    h->quarantine[i] = NULL;
    if (q) quarantine_release(q, check);
  }
}

void secure_free(void *p) {
  uintptr_t a = (uintptr_t)p;
  unsigned kind = region_map_kind(a);
  if (kind == MAP_ZERO) return;
  if (kind != MAP_REGION) {
    free_outside_regions(p, "free");
    return;
  }
  hak_slab_t *s = region_slab_of(a);
  uintptr_t owner = free_checked(p, s);
  if (owner == OWNER_LARGE) return;
  hak_heap_t *h = hak_tls_heap;
  hak_block_t *b = p;
  uintptr_t tag = free_tag_of(a);
  check_canaries(a, s, (owner & ~SLAB_FULL) == (uintptr_t)h);
  size_t n = size_decode(size_word(a, s->block_size));
  memset(p, 0, n < 16 ? 16 : n);
  b->free_tag = tag;
  if (h == &hak_heap_empty) { /* a thread without a heap: no quarantine */
    b->free_tag = 0;
    heap_free_slow(p, s);
    return;
  }
  void *old = h->quarantine[h->quarantine_next];
  h->quarantine[h->quarantine_next] = p;
  h->quarantine_next = (h->quarantine_next + 1) % QUARANTINE_SLOTS;
  if (old) quarantine_release(old, true);
}

/* ---- guard pages and malloc(0) ---------------------------------------------------- */
static void protect(uintptr_t a, size_t len, bool accessible) {
  if (!os_protect((void *)a, len, accessible)) hak_fatal("mprotect failed for a guard page");
}

void secure_guard_large(hak_slab_t *s, bool on) {
  size_t page = os_page_size();
  protect(s->start - page, page, !on);
  protect(s->start + s->block_size, page, !on);
}

void secure_guard_region(void *region) {
  protect((uintptr_t)region + REGION_SIZE - UNIT_SIZE, UNIT_SIZE, false);
}

/* malloc(0) hands out distinct addresses in reserved, inaccessible chunks: any read or
 * write through such a pointer faults. */
void *secure_malloc_zero(void) {
  static uintptr_t next, end; /* under region_lock, which fork handles */
  pthread_mutex_lock(&region_lock);
  if (next + 16 > end) {
    void *chunk = os_map_aligned(REGION_SIZE, REGION_SIZE);
    if (chunk == NULL) {
      pthread_mutex_unlock(&region_lock);
      errno = ENOMEM;
      return NULL;
    }
    protect((uintptr_t)chunk, REGION_SIZE, false);
    region_map[(uintptr_t)chunk >> REGION_SHIFT] = MAP_ZERO;
    next = (uintptr_t)chunk;
    end = next + REGION_SIZE;
  }
  void *p = (void *)next;
  next += 16;
  pthread_mutex_unlock(&region_lock);
  return p;
}

void *secure_malloc(size_t n) {
  if (n == 0) return secure_malloc_zero();
  if (n >= (size_t)PTRDIFF_MAX - SECURE_TAIL) {
    errno = ENOMEM;
    return NULL;
  }
  return secure_arm(fast_malloc_raw(n + SECURE_TAIL), n);
}
