/* The hardened build's per-byte work: canary fills and checks, the zero check.
 * Included by secure.c alone, after canary_w, canary_at, load64 and store64. */
#ifndef HAKMEM_SECURE_BYTES_H
#define HAKMEM_SECURE_BYTES_H

/* Canary fills and checks and the zero check are written once, over 32-byte vectors, and
 * compiled twice: for baseline x86-64 (GCC splits each vector into two SSE2 halves) and
 * for AVX2. secure_init picks one; a flag in a plain branch, not a writable code
 * pointer, selects it. Gaps of up to 32 bytes, the common case, stay inline. */
typedef uint64_t hak_v4 __attribute__((vector_size(32)));

hak_inline void v_load(hak_v4 *v, uintptr_t a) { memcpy(v, (const void *)a, 32); }
hak_inline void v_store(uintptr_t a, const hak_v4 *v) { memcpy((void *)a, v, 32); }
hak_inline bool v_zero(const hak_v4 *v) { return ((*v)[0] | (*v)[1] | (*v)[2] | (*v)[3]) == 0; }

/* [from, to) with `to` 8-aligned and at least 8 bytes (SECURE_TAIL sees to that): whole
 * words or vectors from `from`, the last one overlapping and ending at `to`, where the
 * canary word is canary_w itself. */
hak_inline void canary_fill_short(uintptr_t from, uintptr_t to) { /* to - from <= 32 */
  uint64_t w = canary_at(from);
  size_t len = to - from;
  if (len > 8) store64(from, w);
  if (len > 16) store64(from + 8, w);
  if (len > 24) store64(from + 16, w);
  store64(to - 8, canary_w);
}
hak_inline bool canary_intact_short(uintptr_t from, uintptr_t to) {
  uint64_t w = canary_at(from), diff = load64(to - 8) ^ canary_w;
  size_t len = to - from;
  if (len > 8) diff |= load64(from) ^ w;
  if (len > 16) diff |= load64(from + 8) ^ w;
  if (len > 24) diff |= load64(from + 16) ^ w;
  return diff == 0;
}
hak_inline void canary_fill_body(uintptr_t from, uintptr_t to) {
  if (to - from <= 32) {
    canary_fill_short(from, to);
    return;
  }
  uint64_t w = canary_at(from);
  hak_v4 v = {w, w, w, w}, last = {canary_w, canary_w, canary_w, canary_w};
  for (uintptr_t a = from; a + 32 < to; a += 32) v_store(a, &v);
  v_store(to - 32, &last);
}
hak_inline bool canary_intact_body(uintptr_t from, uintptr_t to) {
  if (to - from <= 32) return canary_intact_short(from, to);
  uint64_t w = canary_at(from);
  hak_v4 v = {w, w, w, w}, diff, x;
  v_load(&diff, to - 32);
  diff ^= (hak_v4){canary_w, canary_w, canary_w, canary_w};
  for (uintptr_t a = from; a + 32 < to; a += 32) {
    v_load(&x, a);
    diff |= x ^ v;
  }
  return v_zero(&diff);
}

/* Are the bytes in [from, to) all zero? Four vectors a step, the last load overlapping. */
hak_inline bool all_zero_body(uintptr_t from, uintptr_t to) {
  size_t len = to - from;
  if (len < 8) {
    uint64_t acc = 0;
    for (; from < to; from++) acc |= *(const uint8_t *)from;
    return acc == 0;
  }
  if (len < 32) {
    uint64_t acc = load64(from) | load64(to - 8);
    if (len > 16) acc |= load64(from + 8) | load64(to - 16);
    return acc == 0;
  }
  hak_v4 a0, a1 = {0, 0, 0, 0}, x, y;
  v_load(&a0, to - 32);
  for (; from + 128 <= to; from += 128) { /* four vectors a step */
    hak_v4 u, v;
    v_load(&x, from);
    v_load(&y, from + 32);
    v_load(&u, from + 64);
    v_load(&v, from + 96);
    a0 |= x | u;
    a1 |= y | v;
  }
  if (from + 64 <= to) {
    v_load(&x, from);
    v_load(&y, from + 32);
    a0 |= x;
    a1 |= y;
    from += 64;
  }
  if (from + 32 <= to) {
    v_load(&x, from);
    a0 |= x;
  }
  a0 |= a1;
  return v_zero(&a0);
}

#endif
