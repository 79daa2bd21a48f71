/* Size classes: 16-byte steps to 128 bytes, then 4 classes per doubling, tiny (<= 1 KiB)
 * and mid (<= 128 KiB) alike, so the space lost to rounding is < 25% above 128 bytes.
 * Each class's memory follows its own peak, and a heap holds about the sum of its
 * classes' peaks: fewer classes hold more blocks each, whose counts swing less in
 * proportion (docs/experiments.md has the measurements behind these choices). In the
 * doublings of MID_EIGHTHS a class at a power of two plus an eighth splits the first
 * step: programs allocate a power of two plus a small header (SQLite's 4104-byte page
 * buffers), which would otherwise lose a fifth of their block to rounding. */
#include "base/base.h"

#include <string.h>

uint32_t class_size[NUM_CLASSES];
uint8_t class_units[NUM_CLASSES];
uint16_t class_carve[NUM_CLASSES];
uint8_t class_of_direct[DIRECT_SLOTS];
uint8_t class_of_mid[MID_MAX / MID_SIZE_STEP];
uint32_t class_align[NUM_CLASSES];
uint8_t class_aligned_from[ALIGN_BITS_MAX + 1][NUM_CLASSES];
uint8_t aligned_direct[ALIGNED_DIRECT_BITS_MAX + 1][ALIGNED_DIRECT_MAX / 16];

_Static_assert(MID_CLASSES == 28 + __builtin_popcount(MID_EIGHTHS) &&
                   MID_DIRECT_CLASSES == 8 + __builtin_popcount(MID_EIGHTHS & 0xfffu),
               "class counts: 4 per doubling above 1 KiB, and one per bit of MID_EIGHTHS");

/* Lists the class sizes in order; returns how many. */
static unsigned class_sizes(uint32_t *out) {
  unsigned n = 0;
  for (uint32_t size = 16; size <= 128; size += 16) out[n++] = size;
  for (unsigned bit = 7; (1u << bit) < MID_MAX; bit++) {
    uint32_t base = 1u << bit;
    if (MID_EIGHTHS >> bit & 1) out[n++] = base + base / 8;
    for (uint32_t q = 1; q <= 4; q++) out[n++] = base + q * (base / 4);
  }
  return n;
}

/* Slabs carve a page's worth of blocks at a time: carving writes a link into every
 * block, so what is carved is resident, and first touch stays proportional to use.
 * Small blocks come at least 8 at a time (8 KiB of the largest): a thread cycling
 * through a few blocks takes the refill path once per round of the blocks it has, so
 * fewer would cost it instructions. Each class's last carve overshoots its peak by half
 * a carve on average, once per class and heap, so not more than 8. Mid blocks come a
 * page's worth or one at a time. */
#define EXTEND_BYTES 4096
#define EXTEND_MIN_BLOCKS 8

static uint32_t carve_blocks(uint32_t size) {
  uint32_t n = EXTEND_BYTES / size;
  if (size <= TINY_MAX && n < EXTEND_MIN_BLOCKS) return EXTEND_MIN_BLOCKS;
  return n > 1 ? n : 1;
}

/* Blocks end at the slab's end; the remainder is a gap before block 0. The hardened
 * build wants at least 16 bytes there, for the guard word block 0's check reads. */
size_t slab_gap(size_t units, uint32_t size) {
  size_t gap = (units * UNIT_SIZE) % size;
  if (HAKMEM_SECURE && gap < 16) gap += size;
  return gap;
}

/* Where malloc's fast paths pop, slabs hold many blocks: malloc pops only the head
 * slab's list, and frees refill only the slab they belong to, so the fewer slabs a class
 * spreads over, the more of its pops take a block freed a moment ago and still in cache:
 * - tiny classes, at least 256 blocks (up to 4 units, for 1 KiB);
 * - the tiny classes above 512 bytes, at least 512 blocks (8 units), since each of them
 *   spans 128 bytes of sizes;
 * - mid classes with a direct slot (up to 4 KiB, popped by aligned allocation), at least
 *   64 blocks (up to 4 units, for 4 KiB).
 * Carving stays lazy, but a slab of more blocks empties less often, so it holds memory
 * longer after a mass free. The other mid classes hold at least 4 blocks, so that up to
 * 16 KiB a slab is one unit: their emptied slabs then go to the span cache in the one
 * size that all of 5-16 KiB take, and reuse each other's resident pages. */
#define TINY_SLAB_BLOCKS 256
#define MID_DIRECT_SLAB_BLOCKS 64
#define MID_SLAB_BLOCKS 4

static unsigned slab_min_blocks(unsigned c) {
  if (c < TINY_CLASSES) return class_size[c] > 512 ? 2 * TINY_SLAB_BLOCKS : TINY_SLAB_BLOCKS;
  return c < TINY_CLASSES + MID_DIRECT_CLASSES ? MID_DIRECT_SLAB_BLOCKS : MID_SLAB_BLOCKS;
}

void size_class_init(void) {
  unsigned listed = class_sizes(class_size);
  HAK_ASSERT(listed == NUM_CLASSES);
  (void)listed;
  for (unsigned c = 0; c < NUM_CLASSES; c++) {
    uint32_t size = class_size[c];
    unsigned units = 1;
    while ((units * UNIT_SIZE) / size < slab_min_blocks(c)) units *= 2;
    HAK_ASSERT(units <= SLAB_MAX_UNITS);
    class_units[c] = (uint8_t)units;
    class_carve[c] = (uint16_t)carve_blocks(size);
    /* Blocks start after a head gap of (slab bytes mod size), so their alignment is the
     * lowest set bit of both the size and the gap. */
    size_t gap = slab_gap(units, size);
    uint32_t align = size & -size;
    if (gap && (gap & -gap) < align) align = (uint32_t)(gap & -gap);
    if (align > UNIT_SIZE) align = UNIT_SIZE; /* slabs start on a unit boundary */
    class_align[c] = align;
  }
  HAK_ASSERT(class_size[TINY_CLASSES - 1] == TINY_MAX && class_size[NUM_CLASSES - 1] == MID_MAX);
  for (unsigned bits = 0; bits <= ALIGN_BITS_MAX; bits++) {
    uint32_t next = NUM_CLASSES;
    for (unsigned c = NUM_CLASSES; c-- > 0;) {
      if (class_align[c] >= (1u << bits)) next = c;
      class_aligned_from[bits][c] = (uint8_t)next;
    }
  }
  unsigned c = 0;
  for (unsigned i = 0; i < DIRECT_SLOTS; i++) {
    size_t n = i == 0 ? 1 : (size_t)i * 16;
    while (class_size[c] < n) c++;
    class_of_direct[i] = (uint8_t)c;
  }
  for (unsigned i = TINY_MAX / MID_SIZE_STEP; i < MID_MAX / MID_SIZE_STEP; i++) {
    while (class_size[c] < (i + 1) * MID_SIZE_STEP) c++;
    HAK_ASSERT(class_size[c] % MID_SIZE_STEP == 0);
    class_of_mid[i] = (uint8_t)c;
  }
  /* The 4 KiB class is 4 KiB-aligned, so every request here has a class with a slot.
   * This runs at every process start, so it fills a class's run of size steps at a
   * time, and skips the steps below the alignment (a request is at least that big). */
  HAK_ASSERT(class_size[TINY_CLASSES + MID_DIRECT_CLASSES - 1] == ALIGNED_DIRECT_MAX);
  for (unsigned bits = 4; bits <= ALIGNED_DIRECT_BITS_MAX; bits++) {
    unsigned j = (1u << bits) / 16 - 1;
    for (c = size_to_class((size_t)(j + 1) * 16); j < ALIGNED_DIRECT_MAX / 16; c++) {
      uint32_t a = class_aligned_from[bits][c];
      HAK_ASSERT(a < TINY_CLASSES + MID_DIRECT_CLASSES);
      unsigned end = class_size[c] / 16;
      memset(&aligned_direct[bits][j], (int)class_direct_slot(a), end - j);
      j = end;
    }
  }
  /* Every class is 16-byte aligned: smaller alignments choose as 16 does. */
  for (unsigned bits = 0; bits < 4; bits++)
    memcpy(aligned_direct[bits], aligned_direct[4], sizeof aligned_direct[4]);
}
