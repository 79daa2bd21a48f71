/* The hardened build's zero-on-free: what a program wrote into a block does not survive
 * its free. Run with libhakmem-secure preloaded (see tests/CMakeLists.txt); under the
 * default build it fails, which is how we know it can.
 *
 * It reads freed memory on purpose: small and mid blocks sit in the freeing thread's
 * quarantine, a freed large block is guarded (a read faults, which counts as zeroed: no
 * data can be read back), and a huge block in a mapping of up to 64 MiB is kept mapped
 * for reuse (for the purge delay, which the test sets to a minute, since the purge
 * thread unmaps it after that; its one resident page always fits the budget). The first
 * 16 bytes of a small block hold its free-list link and tag. */
#include <setjmp.h>

#include "test_util.h"

static sigjmp_buf on_fault;
static void fault_handler(int sig) { siglongjmp(on_fault, sig); }

static const unsigned char FILL = 0xA5;

/* Bytes [from, n) of the freed block p not zero; 0 if reading them faults. */
static __attribute__((noinline)) size_t count_nonzero(volatile unsigned char *q, size_t from, size_t n) {
  if (sigsetjmp(on_fault, 1) != 0) return 0; /* guarded: nothing to read back */
  size_t bad = 0;
  for (size_t i = from; i < n; i++) bad += q[i] != 0; /* freed on purpose: see the top */
  return bad;
}

/* Bytes [from, n) of the freed block p: how many are not zero. */
static size_t nonzero_after_free(size_t n, size_t from) {
  unsigned char *p = malloc(n);
  REQUIRE(p != NULL, "malloc(%zu)", n);
  memset(p, FILL, n);
  free(p);
  return count_nonzero(p, from, n);
}

int main(void) {
  signal(SIGSEGV, fault_handler);
  static const size_t small[] = {16, 24, 100, 1000, 1024, 4000, 20000, 100000};
  for (size_t i = 0; i < sizeof small / sizeof small[0]; i++) {
    size_t bad = nonzero_after_free(small[i], 16);
    CHECK(bad == 0, "%zu of %zu freed bytes still hold data", bad, small[i] - 16);
  }
  static const size_t large[] = {200 * 1024, 1 << 20, 5 << 20, 40 << 20};
  for (size_t i = 0; i < sizeof large / sizeof large[0]; i++) {
    size_t bad = nonzero_after_free(large[i], 0);
    CHECK(bad == 0, "%zu of %zu freed bytes still hold data", bad, large[i]);
  }
  return tu_finish("zero_on_free");
}
