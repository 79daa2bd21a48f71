/* Huge pages for huge blocks (block/huge.c: over 32 MiB, a mapping each).
 *
 * A huge block's pages fault small, like the regions': a block the program writes only
 * in part (a calloc'd table touched sparsely) must stay as resident as the program made
 * it. Interpreters' big hash tables are such blocks, written densely soon after they
 * are allocated, and read at random for the rest of the run: their TLB misses are what
 * huge pages save. So live huge blocks are noted in a table, and the purge thread looks
 * at their 2 MiB ranges (mincore) and collapses each range that is dense: all its pages
 * resident, or 7/8 of them at two looks in a row. A collapse makes at most 1/8 more of
 * the range resident; a range the program never wrote stays as it is.
 *
 * A collapse copies 2 MiB, though, and on a VM costs 1-16 ms (huge-pages.md). So in a big
 * heap (thp_fault_ahead, as for the regions' new ranges: range_thp.c) a block from
 * malloc, written from its start by the program that asked for it, is advised
 * MADV_HUGEPAGE before its first byte is written and faults huge pages instead. A
 * calloc'd block is not advised: a table used sparsely is calloc's case.
 *
 * The table is under region_lock. The purge thread pins the blocks it looks at (pins,
 * under the lock) and collapses without the lock; freeing or resizing a block forgets
 * it first (thp_block_forget), and waits, on thp_block_cond, only while a pass has it
 * pinned, so that no collapse runs on a mapping that munmap or mremap changes. A block
 * past THP_BLOCK_SLOTS live ones, or ranges past its first THP_BLOCK_RANGES, get no
 * huge page. Allowed under a memory limit: a huge block's pages are admitted whole at
 * malloc. */

#include "space/space.h"

#define THP_BLOCK_SLOTS 64
#define THP_BLOCK_RANGES 1024 /* ranges looked at in a block: its first 2 GiB */
#define THP_BLOCK_LOOKS 256   /* ranges looked at in a pass (a mincore each) */
#define THP_BLOCK_BATCH 16    /* collapses in a pass (each copies up to 2 MiB) */
#define THP_BLOCK_FULL (HUGE_PAGE_SIZE / 4096)
#define THP_BLOCK_DENSE (THP_BLOCK_FULL * 7 / 8)

typedef struct thp_block {
  uintptr_t base;                        /* the mapping (0: a free slot); its ranges start here */
  bool faults_huge;                      /* advised MADV_HUGEPAGE: nothing to collapse */
  uint32_t ranges;                       /* whole ranges inside the block's bytes */
  uint32_t pins;                         /* passes looking at it now */
  uint32_t next;                         /* the range the next look starts at */
  uint32_t huge;                         /* ranges collapsed */
  uint64_t done[THP_BLOCK_RANGES / 64];  /* collapsed (purge thread, while pinned) */
  uint64_t dense[THP_BLOCK_RANGES / 64]; /* 7/8 resident at the last look */
} thp_block_t;

static thp_block_t blocks[THP_BLOCK_SLOTS];
static uint32_t blocks_live;
static pthread_cond_t thp_block_cond = PTHREAD_COND_INITIALIZER;

static bool bit_of(const uint64_t *w, size_t i) { return (w[i / 64] >> (i % 64)) & 1; }
static void bit_put(uint64_t *w, size_t i, bool on) {
  if (on) w[i / 64] |= (uint64_t)1 << (i % 64);
  else w[i / 64] &= ~((uint64_t)1 << (i % 64));
}

void thp_block_note(uintptr_t base, uintptr_t end, thp_block_how_t how) {
  if (!opt.thp || end < base + HUGE_PAGE_SIZE) return;
  size_t ranges = (end - base) / HUGE_PAGE_SIZE;
  pthread_mutex_lock(&region_lock);
  bool faults_huge = how == THP_BLOCK_AGAIN || (how == THP_BLOCK_IF_BIG && thp_fault_ahead);
  for (size_t i = 0; i < THP_BLOCK_SLOTS; i++) {
    if (blocks[i].base != 0) continue;
    blocks[i] = (thp_block_t){.base = base,
                              .faults_huge = faults_huge,
                              .ranges = (uint32_t)(ranges < THP_BLOCK_RANGES ? ranges : THP_BLOCK_RANGES)};
    blocks_live++;
    break;
  }
  pthread_mutex_unlock(&region_lock);
  /* Past the table's slots it is advised all the same: forget finds no entry, and its
   * resize advises no new range. The whole mapping (whole chunks, huge.c), so that it
   * stays one mapping for mremap: its last range faults huge only if the block's end
   * leaves it whole (no guard page there) and the program writes it. */
  if (!faults_huge) return;
  os_set_huge_pages((void *)base, align_up(end - base, REGION_SIZE), true);
  if (how == THP_BLOCK_IF_BIG)
    atomic_fetch_add_explicit(&gstats.thp_block_faulted, ranges, memory_order_relaxed);
}

bool thp_block_forget(uintptr_t base) {
  if (!opt.thp) return false;
  bool faults_huge = false;
  pthread_mutex_lock(&region_lock);
  for (size_t i = 0; blocks_live != 0 && i < THP_BLOCK_SLOTS; i++) {
    thp_block_t *b = &blocks[i];
    if (b->base != base) continue;
    while (b->pins != 0) pthread_cond_wait(&thp_block_cond, &region_lock); /* a collapse in flight */
    /* Its huge pages go with the mapping now (munmap, mremap or a kept mapping). */
    atomic_fetch_sub_explicit(&gstats.thp_huge_bytes, (size_t)b->huge * HUGE_PAGE_SIZE, memory_order_relaxed);
    faults_huge = b->faults_huge;
    b->base = 0;
    blocks_live--;
    break;
  }
  pthread_mutex_unlock(&region_lock);
  return faults_huge;
}

/* One pinned block: its next ranges looked at, the dense ones collapsed. */
static size_t look_at(thp_block_t *b, size_t *looks, size_t *batch) {
  size_t collapsed = 0;
  for (uint32_t k = 0; k < b->ranges && *looks != 0 && *batch != 0; k++) {
    uint32_t g = b->next;
    b->next = g + 1 < b->ranges ? g + 1 : 0;
    if (bit_of(b->done, g)) continue;
    (*looks)--;
    void *p = (void *)(b->base + (size_t)g * HUGE_PAGE_SIZE);
    size_t pages = os_resident_pages(p, HUGE_PAGE_SIZE);
    bool was_dense = bit_of(b->dense, g);
    bit_put(b->dense, g, pages >= THP_BLOCK_DENSE);
    if (pages < THP_BLOCK_FULL && !(pages >= THP_BLOCK_DENSE && was_dense)) continue;
    (*batch)--;
    os_collapse_t how = os_collapse(p, HUGE_PAGE_SIZE, false);
    if (how == OS_COLLAPSED) {
      bit_put(b->done, g, true);
      b->huge++;
      collapsed++;
      atomic_fetch_add_explicit(&gstats.thp_huge_bytes, HUGE_PAGE_SIZE, memory_order_relaxed);
      atomic_fetch_add_explicit(&gstats.thp_block_collapsed, 1, memory_order_relaxed);
      atomic_fetch_add_explicit(&gstats.thp_collapsed, 1, memory_order_relaxed);
      continue;
    }
    atomic_fetch_add_explicit(&gstats.thp_failed, 1, memory_order_relaxed);
    bit_put(b->dense, g, false); /* two looks again before the next try */
    /* No MADV_COLLAPSE: no advice left for khugepaged on a huge block (it would make
     * the block's later faults huge); the pass stops here. */
    if (how == OS_COLLAPSE_ADVISED) {
      os_set_huge_pages(p, HUGE_PAGE_SIZE, false);
      *batch = 0;
    }
  }
  return collapsed;
}

size_t thp_blocks_pass(void) {
  thp_block_t *mine[THP_BLOCK_SLOTS];
  size_t n = 0, collapsed = 0, looks = THP_BLOCK_LOOKS, batch = THP_BLOCK_BATCH;
  pthread_mutex_lock(&region_lock);
  for (size_t i = 0; blocks_live != 0 && i < THP_BLOCK_SLOTS; i++)
    if (blocks[i].base != 0 && !blocks[i].faults_huge && blocks[i].huge < blocks[i].ranges) {
      blocks[i].pins++;
      mine[n++] = &blocks[i];
    }
  pthread_mutex_unlock(&region_lock);
  if (n == 0) return 0;
  for (size_t i = 0; i < n; i++) collapsed += look_at(mine[i], &looks, &batch);
  pthread_mutex_lock(&region_lock);
  for (size_t i = 0; i < n; i++) mine[i]->pins--;
  pthread_cond_broadcast(&thp_block_cond);
  pthread_mutex_unlock(&region_lock);
  return collapsed;
}

/* A forked child has no pass in flight: the parent's pins are not its. */
void thp_blocks_atfork_child(void) {
  pthread_cond_init(&thp_block_cond, NULL);
  for (size_t i = 0; i < THP_BLOCK_SLOTS; i++) blocks[i].pins = 0;
}
