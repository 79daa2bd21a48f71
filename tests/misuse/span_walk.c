/* span_walk: large and huge blocks through their states, every kind of address probed.
 *
 * For each size (large: over 128 KiB, a span of 64 KiB units; huge: over 32 MiB, a
 * mapping of its own), a child takes one block through its states: in use, freed (to
 * the span cache or its region; a huge one kept mapped; the hardened build's large
 * ones guarded and quarantined), reused (malloc of the same size hands the same block
 * out again), freed again, and purged (malloc_trim: its pages are gone)
 * (a huge mapping over 64 MiB is unmapped at free: its walk ends there). At each state
 * it probes the block's start with free, realloc, malloc_usable_size, free_sized and
 * hak_heap_realloc, and with free, realloc and malloc_usable_size every 16-byte
 * address of the header area before it (from its span's start, or 4 KiB), of its first
 * and last 4 KiB and up to its span's end past it, and every 4112th byte in between
 * (walk_probe.c), against the model: only a live block's start may be accepted.
 *   span_walk [INDEX]     (one size only)
 * Exit status: 0 pass, 1 fail. */
#define _GNU_SOURCE
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_util.h"
#include "walk.h"

#define STRIDE 4112 /* a page and 16 bytes: every offset in a page, in turn */
#define HUGE_MIN ((size_t)32 << 20)
#define REGION ((uintptr_t)64 << 20) /* huge mappings are in chunks of a region's size */
#define HUGE_KEEP ((size_t)64 << 20) /* freed huge mappings up to this are kept */
#define REUSE_TRIES 256              /* the hardened build's quarantine holds 16, evicted at random */

static walk_model_t block;

static const char *tier(const walk_model_t *m) {
  return m->n > HUGE_MIN ? "tier.huge.mapped_bytes" : "tier.large.live_bytes";
}

static bool probe_block(const walk_model_t *m, const char *state) {
  walk_state(state);
  return probe_range(m, m->lo, m->hi, STRIDE);
}

#define PROBE(state)                      \
  do {                                    \
    if (!probe_block(m, state)) _exit(1); \
  } while (0)

static void *get(walk_model_t *m) {
  void *p = malloc(m->n);
  if (p == NULL) walk_fatal("span_walk: malloc(%zu) failed\n", m->n);
  return p;
}

static void walk(walk_model_t *m) {
  walk_probe_heap = hak_heap_new();
  uint64_t before = stat_of(tier(m), 0);
  bool huge = m->n > HUGE_MIN;
  void *p = get(m);
  /* A huge block's header sits at the start of its 64 MiB chunk. An inaccessible page
   * goes at the start of the chunk before, so that a probe that reads it (as free of
   * the mapping's first byte did) faults whatever else the process has mapped; where
   * that chunk is taken, the block is kept and another one tried (mappings are placed
   * downwards). */
  for (int i = 0; huge && i < 8; i++, p = get(m)) {
    uintptr_t below = (((uintptr_t)p - 1) & ~(REGION - 1)) - REGION;
    if (mmap((void *)below, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0) ==
        (void *)below)
      break;
  }
  uintptr_t a = (uintptr_t)p;
  m->start = a, m->size = m->n, m->count = 1;
  m->live[0] = true, m->blocks[0] = p;
  /* The header area: from the span's start (large) or 4 KiB before (huge); past the
   * end, to the end of the last unit (large) or page (huge). */
  m->lo = huge ? a - 4096 : a & ~(UNIT - 1);
  m->hi = huge ? (a + m->n + 4095) & ~(uintptr_t)4095 : (a + m->n + UNIT - 1) & ~(UNIT - 1);
  if (!huge && m->hi - (a + m->n) > 4096) m->hi = (a + m->n + 4096 + 15) & ~(uintptr_t)15;
  walk_capture();
  walk_state("in use");
  uint64_t in_use = stat_of(tier(m), 0);
  walk_check(m, in_use > before, "the block is not counted in its tier");
  PROBE("in use");

  free(p), m->live[0] = false;
  walk_state("freed");
  walk_check(m, stat_of(tier(m), 0) < in_use, "the block is still counted in its tier");
  PROBE("freed");
  if (m->n + 4096 > HUGE_KEEP) { /* unmapped at free: no reuse, nothing left to purge */
    walk_state("unmapped");
    walk_check(m, !walk_resident(a, a + m->n, true), "pages of the block are resident");
    _exit(walk_failures ? 1 : 0);
  }

  void *q = NULL;
  for (int i = 0; i < REUSE_TRIES && q != p; i++) {
    if (q != NULL) free(q);
    q = get(m);
  }
  walk_state("reused");
  walk_check(m, q == p, "malloc of its size did not hand the block out again");
  m->live[0] = true;
  PROBE("reused");

  free(p), m->live[0] = false;
  uint64_t purged = stat_of("purge.madvise_bytes", 0) + stat_of("purge.unmapped_bytes", 0);
  malloc_trim(0);
  walk_state("purged");
  /* (The hardened build drops a large block's pages at free, as it guards them.) */
  walk_check(m,
             stat_of("purge.madvise_bytes", 0) + stat_of("purge.unmapped_bytes", 0) > purged ||
                 (MISUSE_BUILD && !huge),
             "nothing purged");
  walk_check(m, !walk_resident(a + 4096, a + m->n - 4096, true), "pages of the block are resident");
  PROBE("purged");
  _exit(walk_failures ? 1 : 0);
}

int main(int argc, char **argv) {
  walk_init();
  uint64_t delay = 3600000; /* nothing purged unless the walk asks */
  if (hak_ctl_set("opt.purge_delay_ms", &delay, sizeof delay) != 0) return 2;
  static const size_t sizes[] = {131073,          200000,           262144,
                                 1 << 20,         (8 << 20) + 100,  (31 << 20) + 4000,
                                 (33 << 20) + 16, (size_t)64 << 20, (96 << 20) + 4096};
  int failed = 0;
  unsigned only = argc > 1 ? (unsigned)atoi(argv[1]) : ~0u; /* one size, by its index */
  for (unsigned i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    if (only != ~0u && i != only) continue;
    memset(&block, 0, sizeof block);
    block.c = i, block.n = sizes[i] - SECURE_TAIL;
    pid_t pid = fork();
    if (pid == 0) walk(&block);
    int st = 0;
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      say("span_walk: %zu bytes: %s %d\n", sizes[i], WIFEXITED(st) ? "failed, status" : "killed by signal",
          WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
      failed = 1;
    }
  }
  say("span_walk: %zu sizes walked, %s\n", sizeof sizes / sizeof sizes[0],
      failed ? "FAILED" : "every probe as the model says");
  return failed;
}
