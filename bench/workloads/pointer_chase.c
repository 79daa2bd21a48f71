/* pointer_chase — a large heap of small blocks, linked in random order and chased.
 *
 * usage: bench_pointer_chase BLOCKS=4400000 SIZE=48 STEPS=40000000 SEED=1
 *
 * Allocates BLOCKS blocks of SIZE bytes one malloc at a time (4.4M of 48 B: 201 MiB of
 * payload, more with the allocator's own layout), links them into one cycle in a
 * seeded random order (Fisher-Yates over an index array that is freed before the
 * chase), then follows the cycle for STEPS steps, adding each block's value to a
 * checksum and bumping a counter in the block (so its page is written). Nearly every
 * step lands on another page: the time goes to TLB and cache misses, which is what the
 * page size under the heap decides. Every block is then checked (its counter holds how
 * often the chase visited it, which depends on its place in the cycle alone) and freed.
 *
 * A large-heap program of the harness (bench/harness/bigheap.py), run through
 * exec_rusage like the real programs and measured by its CPU time: it prints
 * "checksum=... visits=..." lines that depend on the arguments alone, never on an
 * address, so every allocator must print the same text. A wrong count prints
 * "FAIL workload=pointer_chase: ..." and exits 1.
 */
#include "bench_common.h"

struct node {
  struct node *next;
  uint64_t value;
  uint64_t visits;
};

static struct node **allocate(size_t blocks, size_t size, bench_rng *rng) {
  struct node **all = malloc(blocks * sizeof *all);
  if (all == NULL) bench_fail("no memory for %zu block pointers", blocks);
  for (size_t i = 0; i < blocks; i++) {
    all[i] = malloc(size);
    if (all[i] == NULL) bench_fail("malloc(%zu) returned NULL at block %zu", size, i);
    memset(all[i], 0, size);
    all[i]->value = bench_rng_next(rng) >> 16;
  }
  return all;
}

/* Links all[] into one cycle in a random order; returns its first block. */
static struct node *link_randomly(struct node **all, size_t blocks, bench_rng *rng) {
  size_t *order = malloc(blocks * sizeof *order);
  if (order == NULL) bench_fail("no memory for the order of %zu blocks", blocks);
  for (size_t i = 0; i < blocks; i++) order[i] = i;
  for (size_t i = blocks - 1; i > 0; i--) {
    size_t j = bench_rng_below(rng, i + 1);
    size_t t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
  for (size_t i = 0; i < blocks; i++) all[order[i]]->next = all[order[(i + 1) % blocks]];
  struct node *first = all[order[0]];
  free(order);
  return first;
}

/* Visits per block: the cycle is walked STEPS times from its first block, so block k
 * of the cycle (0-based) is visited STEPS / BLOCKS times, plus once if k < STEPS % BLOCKS. */
static void check_and_free(struct node **all, struct node *first, size_t blocks, uint64_t steps) {
  struct node *n = first;
  for (size_t k = 0; k < blocks; k++, n = n->next) {
    uint64_t want = steps / blocks + (k < steps % blocks ? 1 : 0);
    if (n->visits != want)
      bench_fail("block %zu of the cycle was visited %llu times, expected %llu", k,
                 (unsigned long long)n->visits, (unsigned long long)want);
  }
  for (size_t i = 0; i < blocks; i++) free(all[i]);
  free(all);
}

int main(int argc, char **argv) {
  bench_init("pointer_chase", "BLOCKS=4400000 SIZE=48 STEPS=40000000 SEED=1");
  size_t blocks = (size_t)bench_arg_u64(argc, argv, 1, 4400000);
  size_t size = (size_t)bench_arg_u64(argc, argv, 2, 48);
  uint64_t steps = bench_arg_u64(argc, argv, 3, 40000000);
  uint64_t seed = bench_arg_u64(argc, argv, 4, 1);
  if (blocks < 2 || size < sizeof(struct node)) bench_usage("BLOCKS must be >= 2 and SIZE >= 24");

  bench_arg_count(argc, 4);
  bench_rng rng = bench_rng_make(seed, 0);
  struct node **all = allocate(blocks, size, &rng);
  struct node *n = link_randomly(all, blocks, &rng);
  struct node *first = n;
  uint64_t checksum = 0;
  for (uint64_t s = 0; s < steps; s++) {
    checksum = checksum * 31 + n->value;
    n->visits++;
    n = n->next;
  }
  printf("pointer_chase blocks=%zu size=%zu steps=%llu\n", blocks, size, (unsigned long long)steps);
  printf("checksum=%016llx\n", (unsigned long long)checksum);
  check_and_free(all, first, blocks, steps);
  printf("visits checked\n");
  return 0;
}
