/* 2 MiB ranges and huge pages: range.c and the collapse candidates that thp.c picks
 * from the regions. space.h's private part, included by it after region_t. */
#ifndef HAKMEM_RANGE_H
#define HAKMEM_RANGE_H

/* ---- region bitmaps (a bit per unit) ------------------------------------------- */
HAK_INLINE bool bit_get(const uint64_t *bits, size_t i) { return (bits[i >> 6] >> (i & 63)) & 1; }

HAK_INLINE void bits_set_range(uint64_t *bits, size_t from, size_t n, bool value) {
  for (size_t i = from; i < from + n; i++) {
    uint64_t m = (uint64_t)1 << (i & 63);
    if (value) bits[i >> 6] |= m;
    else bits[i >> 6] &= ~m;
  }
}

/* The first index >= from whose bit is `value`, or UNITS_PER_REGION. */
HAK_INLINE size_t next_bit(const uint64_t *bits, size_t from, bool value) {
  for (size_t w = from >> 6; w < UNITS_PER_REGION / 64; w++) {
    uint64_t word = value ? bits[w] : ~bits[w];
    if (w == from >> 6) word &= ~(uint64_t)0 << (from & 63);
    if (word) return w * 64 + (size_t)__builtin_ctzll(word);
  }
  return UNITS_PER_REGION;
}

/* Bits set in w, without the C library's __popcountdi2 (no -mpopcnt), which the link
 * would put after the cold code (CMakeLists.txt: the link order). */
HAK_INLINE size_t popcount64(uint64_t w) {
  w -= (w >> 1) & 0x5555555555555555ull;
  w = (w & 0x3333333333333333ull) + ((w >> 2) & 0x3333333333333333ull);
  w = (w + (w >> 4)) & 0x0f0f0f0f0f0f0f0full;
  return (size_t)((w * 0x0101010101010101ull) >> 56);
}

HAK_INLINE size_t count_bits(const uint64_t *bits, size_t from, size_t n) {
  size_t count = 0;
  for (size_t i = from; i < from + n;) {
    size_t w = i >> 6, lo = i & 63, take = 64 - lo < from + n - i ? 64 - lo : from + n - i;
    uint64_t mask = take == 64 ? ~(uint64_t)0 : (((uint64_t)1 << take) - 1) << lo;
    count += popcount64(bits[w] & mask);
    i += take;
  }
  return count;
}

/* ---- range.c: 2 MiB ranges (see region_t); caller holds region_lock --------- */
HAK_INLINE size_t range_of_unit(size_t u) { return u / RANGE_UNITS; }
/* A huge (or advised) range at least half in use: the timed purge passes it by. */
bool range_held(const region_t *r, size_t g);
void ranges_use(region_t *r, size_t from, size_t n, bool add); /* units in or out of spans */
void ranges_purged(region_t *r, size_t from, size_t n);        /* before purging them */
void ranges_note_purged(uintptr_t p, size_t n);                /* any lock: pages purged in a span */
/* range_thp.c (cold), under region_lock: */
extern bool thp_fault_ahead;                             /* new regions fault huge pages (thp.c sets it) */
void ranges_advise_new(region_t *r, size_t mapped);      /* a region just mapped */
size_t ranges_fault(region_t *r, size_t from, size_t n); /* a span taken in fault_ranges: units marked */
void ranges_fold_broken(region_t *r, uint32_t broken);

/* What ranges_note_purged saw, where it broke a huge page or an advised range. */
HAK_INLINE void ranges_fold(region_t *r) {
  if (__atomic_load_n(&r->broken_ranges, __ATOMIC_RELAXED) == 0) return;
  uint32_t broken = __atomic_exchange_n(&r->broken_ranges, 0, __ATOMIC_RELAXED);
  broken &= r->huge_ranges | r->advised_ranges;
  if (broken != 0) ranges_fold_broken(r, broken);
}
/* When free resident unit u may be purged: 0 never by the timed pass, else a time. */
uint64_t range_unit_due(const region_t *r, size_t u, uint64_t now_ms, long delay_ms);

/* Huge pages: the ranges for the purge thread to collapse (collapse: look for them) or
 * to advise back to small pages (`unadvise`), pinned; then what came of each. */
typedef struct region_range {
  region_t *region;
  uint32_t range;
  uint8_t purges; /* the range's purge count when picked */
  bool unadvise;
  bool fresh;          /* a fresh range to make huge before use (region_thp_fresh) */
  uint8_t used;        /* its units in spans when picked */
  uint16_t seen_pages; /* what the last look saw (region_t's range_seen_pages) */
  uint8_t seen_used;
  uint16_t pages; /* thp_do's: resident pages + 1 now (0: not asked) */
} region_range_t;
typedef enum { THP_COLLAPSED, THP_ADVISED, THP_NOT_DONE } region_thp_outcome_t;
size_t region_thp_candidates(uint32_t now_ms, bool collapse, region_range_t *out, size_t max);
/* Up to max fresh ranges (all units free, none resident), newest region first, pinned. */
size_t region_thp_fresh(region_range_t *out, size_t max);
void region_thp_done(const region_range_t *c, region_thp_outcome_t outcome, uint32_t now_ms);
bool region_thp_min_in_use(size_t bytes);             /* are at least `bytes` in spans? */
bool region_thp_still_dense(const region_range_t *c); /* takes region_lock */

#endif
