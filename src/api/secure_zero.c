/* The hardened build's zero check (secure.c's): are the bytes in [from, to) all zero?
 * Blocks are zeroed at free and checked when they leave the quarantine, so this reads
 * every freed byte once; it runs in 32-byte vectors, with AVX2 where the CPU has it. The
 * default build compiles none of it. */
#include "api/api.h"

#include <string.h>

#if HAKMEM_SECURE

static bool use_avx2; /* the zero check in 32-byte steps (secure_zero_init) */
/* x86 builds also compile the zero check for AVX2 and pick at start-up. */
#if defined(__x86_64__) || defined(__i386__)
#define SECURE_AVX2_VARIANTS 1
#else
#define SECURE_AVX2_VARIANTS 0
#endif

void secure_zero_init(void) {
#if SECURE_AVX2_VARIANTS
  __builtin_cpu_init();
  use_avx2 = __builtin_cpu_supports("avx2");
#endif
}

/* Unaligned words. */
static inline uint64_t load64(uintptr_t a) {
  uint64_t v;
  memcpy(&v, (const void *)a, 8);
  return v;
}

/* The zero check is written once, over 32-byte vectors, and compiled twice: for
 * baseline x86-64 (GCC splits each vector into two SSE2 halves) and for AVX2.
 * secure_zero_init picks one; a flag in a plain branch, not a writable code pointer, selects
 * it. */
typedef uint64_t v4_t __attribute__((vector_size(32)));

HAK_INLINE void v_load(v4_t *v, uintptr_t a) { memcpy(v, (const void *)a, 32); }
HAK_INLINE bool v_zero(const v4_t *v) { return ((*v)[0] | (*v)[1] | (*v)[2] | (*v)[3]) == 0; }

/* Are the bytes in [from, to) all zero? Four vectors a step, the last load overlapping. */
HAK_INLINE bool all_zero_body(uintptr_t from, uintptr_t to) {
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
  v4_t a0, a1 = {0, 0, 0, 0}, x, y;
  v_load(&a0, to - 32);
  for (; from + 128 <= to; from += 128) { /* four vectors a step */
    v4_t u, v;
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

HAK_NOINLINE static bool all_zero_base(uintptr_t from, uintptr_t to) { return all_zero_body(from, to); }
#if SECURE_AVX2_VARIANTS
HAK_NOINLINE __attribute__((target("avx2"))) static bool all_zero_avx2(uintptr_t from, uintptr_t to) {
  return all_zero_body(from, to);
}
#else /* use_avx2 stays false */
#define all_zero_avx2 all_zero_base
#endif

bool secure_all_zero(uintptr_t from, uintptr_t to) {
  return use_avx2 ? all_zero_avx2(from, to) : all_zero_base(from, to);
}

#endif /* HAKMEM_SECURE */
