/* align_sweep: every power-of-two alignment from 8 bytes to 1 MiB, crossed with sizes
 * {1, 7, 16, 100, 1000, 4096, 65536, 1 MiB + 1, alignment - 1, alignment, alignment + 1},
 * through posix_memalign, aligned_alloc (any size, and the size rounded up to a multiple
 * of the alignment) and memalign.
 *
 * Each block must be aligned (and 16-aligned when larger than 8 bytes), have a usable size
 * >= the request, and keep a pattern written over its whole usable size while many others
 * are live; aligned_alloc blocks go back through free_aligned_sized where it exists.
 * Usage: align_sweep [seed]
 */
#include "block_window.h"

#define MiB ((size_t)1 << 20)

static tu_rng g_rng;
static tu_window g_window = {.cap = 256 * MiB, .rng = &g_rng};

static void *call_posix_memalign(size_t a, size_t n) {
  void *p = NULL;
  int rc = posix_memalign(&p, a, n);
  CHECK(rc == 0, "posix_memalign(%zu, %zu) returned %d", a, n, rc);
  return rc == 0 ? p : NULL;
}

static void sweep(size_t a) {
  const size_t sizes[] = {1, 7, 16, 100, 1000, 4096, 65536, MiB + 1, a - 1, a, a + 1};
  for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
    size_t n = sizes[s], rounded = (n + a - 1) & ~(a - 1);
    size_t need = a < 16 && n > 8 ? 16 : a;
    uint64_t seed = tu_rand(&g_rng);
    tu_window_put(&g_window,
                  tu_block_adopt("posix_memalign", call_posix_memalign(a, n), n, need, TU_FREE, seed));
    tu_window_put(&g_window, tu_block_adopt("aligned_alloc", aligned_alloc(a, n), n, need,
                                            TU_FREE_ALIGNED_SIZED, seed + 1));
    tu_window_put(&g_window, tu_block_adopt("aligned_alloc", aligned_alloc(a, rounded), rounded,
                                            a < 16 && rounded > 8 ? 16 : a, TU_FREE_ALIGNED_SIZED, seed + 2));
    tu_window_put(&g_window, tu_block_adopt("memalign", memalign(a, n), n, need, TU_FREE, seed + 3));
  }
}

int main(int argc, char **argv) {
  g_rng = tu_rng_make(tu_seed(argc, argv), 0);
  /* Every alignment in turn, then all of them mixed in a random order, four times over. */
  for (size_t a = 8; a <= MiB; a *= 2) sweep(a);
  tu_window_drain(&g_window);
  for (int round = 0; round < 4 * 18; round++) sweep((size_t)8 << tu_below(&g_rng, 18));
  tu_window_drain(&g_window);
  return tu_finish("align_sweep");
}
