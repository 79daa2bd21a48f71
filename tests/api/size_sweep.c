/* size_sweep: every size 0..4096, then every boundary +-1 of the size steps (powers of
 * two and their 1.125/1.25/1.5/1.75 multiples) up to 64 MiB.
 *
 * Each block is checked for alignment (16, or 8 for requests <= 8) and usable size
 * (>= the request), and gets a pattern over its whole usable size at once. Many blocks
 * stay live together and each is verified only when it is freed, so a block whose real
 * extent is smaller than its reported usable size would clobber a neighbour, and the
 * neighbour's check would say so. Usage: size_sweep [seed]
 */
#include "block_window.h"

#define MiB ((size_t)1 << 20)

static tu_rng g_rng;
static tu_window g_window = {.cap = 320 * MiB, .rng = &g_rng};

/* malloc(n), checked and filled; half of the blocks go back through free_sized. */
static tu_block take(size_t n) {
  uint64_t seed = tu_rand(&g_rng);
  return tu_block_adopt("malloc", malloc(n), n, n <= 8 ? 8 : 16, seed & 1 ? TU_FREE_SIZED : TU_FREE, seed);
}

/* Every size 0..4096: in order, in a random order, and 32 of a kind live together. */
static void sweep_small(void) {
  enum { MAX = 4096, SAME = 32 };
  for (size_t n = 0; n <= MAX; n++) tu_window_put(&g_window, take(n));
  tu_window_drain(&g_window);

  static size_t order[MAX + 1];
  for (size_t n = 0; n <= MAX; n++) order[n] = n;
  for (size_t i = MAX; i > 0; i--) {
    size_t j = tu_below(&g_rng, i + 1), t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
  for (size_t i = 0; i <= MAX; i++) tu_window_put(&g_window, take(order[i]));
  tu_window_drain(&g_window);

  for (size_t n = 0; n <= MAX; n++) {
    tu_block same[SAME];
    for (int i = 0; i < SAME; i++) same[i] = take(n);
    for (int i = 0; i < SAME; i++) tu_block_release(&same[(i * 7) % SAME]);
  }
}

static int cmp_size(const void *a, const void *b) {
  size_t x = *(const size_t *)a, y = *(const size_t *)b;
  return x < y ? -1 : x > y;
}

/* Boundaries +-1 of 2^k x {1, 1.125, 1.25, 1.5, 1.75}, from 8 bytes to 64 MiB. */
static void sweep_boundaries(void) {
  static size_t sizes[30 * 5 * 3];
  size_t count = 0;
  for (size_t base = 8; base <= 64 * MiB; base *= 2) {
    const size_t steps[] = {base, base + base / 8, base + base / 4, base + base / 2,
                            base + base / 2 + base / 4};
    for (int s = 0; s < 5; s++)
      for (int d = -1; d <= 1; d++)
        if (steps[s] + d <= 64 * MiB + 1) sizes[count++] = steps[s] + (size_t)d;
  }
  qsort(sizes, count, sizeof *sizes, cmp_size);
  /* Up, then down again below 1 MiB (the large ones once: they cost the time). */
  for (int pass = 0; pass < 2; pass++) {
    for (size_t i = 0; i < count; i++) {
      size_t n = pass == 0 ? sizes[i] : sizes[count - 1 - i];
      if (pass == 1 && n >= MiB) continue;
      /* Several of a kind while they are small, so they sit side by side. */
      size_t copies = n >= MiB ? 1 : n >= 64 * 1024 ? 4 : 16;
      for (size_t c = 0; c < copies; c++) tu_window_put(&g_window, take(n));
    }
    tu_window_drain(&g_window);
  }
}

int main(int argc, char **argv) {
  g_rng = tu_rng_make(tu_seed(argc, argv), 0);
  double t0 = tu_now();
  sweep_small();
  double t1 = tu_now();
  sweep_boundaries();
  printf("size_sweep: sizes 0..4096 in %.2f s, boundaries to 64 MiB in %.2f s\n", t1 - t0, tu_now() - t1);
  return tu_finish("size_sweep");
}
