/* Inaccessible memory: the hardened build's guard pages around large blocks, and, in
 * both builds, the home of malloc(0) blocks, where any access faults.
 *
 * Guard pages are PROT_NONE pages (mprotect), not the kernel's guard markers
 * (MADV_GUARD_INSTALL, Linux 6.13): those split no mapping, but a debugger cannot read
 * them either, and gdb's gcore then leaves out every 1 MiB of the region around one,
 * region headers included (docs/design.md, "Misuse"). */

#include "space/space.h"

#include <errno.h>

#if HAKMEM_SECURE
void guard_set(uintptr_t a, size_t len, bool on) {
  if (len == 0) return;
  if (on) os_purge((void *)a, len); /* guarded memory holds nothing: its pages go */
  secure_protect(a, len, !on);      /* after: a refused purge clears the pages instead */
}
#endif

/* ---- malloc(0) ---------------------------------------------------------------------- */
/* Blocks of no bytes: distinct addresses, ZERO_STEP apart, in region-sized chunks
 * mapped inaccessible (MAP_ZERO in the region map), never handed out twice. A chunk's
 * first ZERO_BITMAP bytes stay accessible and hold a bit per address, set while the
 * block is live, so that a second free, or a free of an address never handed out, is
 * reported. The bits of the bitmap's own addresses are never used: the first word holds
 * the chunk's next address instead. */
#define ZERO_STEP 16
#define ZERO_BITMAP (REGION_SIZE / ZERO_STEP / 8)

static uintptr_t zero_next, zero_end; /* under region_lock, which fork handles */

static _Atomic uint64_t *zero_bits(uintptr_t a) { return (_Atomic uint64_t *)(a & ~(uintptr_t)REGION_MASK); }

void *zero_alloc(void) {
  pthread_mutex_lock(&region_lock);
  if (zero_next + ZERO_STEP > zero_end) {
    uintptr_t chunk = (uintptr_t)os_map_aligned(REGION_SIZE, REGION_SIZE);
    if (chunk == 0 || !os_protect((void *)(chunk + ZERO_BITMAP), REGION_SIZE - ZERO_BITMAP, false)) {
      if (chunk) os_unmap((void *)chunk, REGION_SIZE);
      pthread_mutex_unlock(&region_lock);
      errno = ENOMEM;
      return NULL;
    }
    region_map[chunk >> REGION_SHIFT] = MAP_ZERO;
    zero_next = chunk + ZERO_BITMAP;
    zero_end = chunk + REGION_SIZE;
  }
  uintptr_t a = zero_next;
  zero_next += ZERO_STEP;
  _Atomic uint64_t *bits = zero_bits(a);
  atomic_store_explicit(&bits[0], zero_next, memory_order_relaxed);
  size_t i = (a & REGION_MASK) / ZERO_STEP;
  atomic_fetch_or_explicit(&bits[i / 64], (uint64_t)1 << (i % 64), memory_order_relaxed);
  pthread_mutex_unlock(&region_lock);
  return (void *)a;
}

/* Aborts unless p is a live malloc(0) block; with `release`, it is one no longer. */
void zero_check(void *p, const char *fn, bool release) {
  uintptr_t a = (uintptr_t)p, off = a & REGION_MASK;
  _Atomic uint64_t *bits = zero_bits(a);
  if (off % ZERO_STEP != 0 || off < ZERO_BITMAP) error_fatal_pointer("invalid pointer", fn, p);
  size_t i = off / ZERO_STEP;
  uint64_t bit = (uint64_t)1 << (i % 64), old;
  if (release) old = atomic_fetch_and_explicit(&bits[i / 64], ~bit, memory_order_relaxed);
  else old = atomic_load_explicit(&bits[i / 64], memory_order_relaxed);
  if (old & bit) return;
  bool handed_out = a < atomic_load_explicit(&bits[0], memory_order_relaxed);
  error_fatal_pointer(handed_out && release ? "double free" : "invalid pointer", fn, p);
}
