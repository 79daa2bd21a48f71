/* The sampling heap profiler's internal interface (docs/profiling.md).
 *
 *   prof_symbols.c  names for return addresses (dynamic symbols, then the ELF .symtab of
 *                   the file on disk), and the leak report's text; no malloc
 *   prof_unwind.c   stacks: libgcc's _Unwind_Backtrace, cached per thread
 *   prof.c          sampling, the stack and live-block tables, the pool of sampled
 *                   blocks, the files (at exit, at peaks, on demand), fork
 *
 * The hooks: every allocation path subtracts its size from its heap's `prof_left`
 * (types.h); when that goes negative the path calls prof_sample(), which returns the
 * block when it sampled the allocation and NULL when the caller should allocate as
 * usual. A sampled small or mid block lives in a slab of the profiler's pool (owner word
 * OWNER_PROF), so its free reaches heap_free_slow and then prof_free_block(); a sampled
 * large or huge block is found in the live table by prof_free_large(). */
#ifndef HAKMEM_PROF_H
#define HAKMEM_PROF_H

#include "internal.h"
#include "prof_proto.h"

#pragma GCC visibility push(hidden)

/* One distinct call stack and what was allocated from it. Values are estimates (sums of
 * the samples' weights), exact integers in exact mode (HAKMEM_PROF_RATE=1). */
typedef struct prof_stack {
  uint64_t hash;  /* 0: slot unused */
  uint32_t depth;
  uint32_t pad;
  double alloc_objects, alloc_bytes, inuse_objects, inuse_bytes;
  uintptr_t frames[PROF_MAX_DEPTH]; /* return addresses, the allocating function first */
} prof_stack_t;

#define PROF_STACK_SLOTS ((size_t)1 << 14) /* distinct stacks; 3/4 of them usable */
#define PROF_LIVE_SLOTS ((size_t)1 << 20)  /* live sampled blocks; 3/4 usable */
#define NO_STACK UINT32_MAX

/* ---- prof_symbols.c ----------------------------------------------------------- */
/* Writes "name+0xoff (file)" for addr into buf (NUL-terminated, at most size bytes);
 * the name from dladdr, else from the .symtab of the mapped file, else "??". */
size_t prof_symbolize(uintptr_t addr, char *buf, size_t size);
/* The leak report on stderr: the stacks with live bytes, largest first, at most `max`. */
void prof_leak_report(const prof_stack_t *stacks, const uint32_t *order, size_t count, long rate,
                      size_t max);

/* ---- prof_unwind.c: the stack of the caller, leaf first (libgcc, cached) ------- */
void prof_unwind_init(void);          /* finds this library's code, whose frames are dropped */
uint32_t prof_unwind(uintptr_t *out); /* out: PROF_MAX_DEPTH entries; returns the depth */
void prof_unwind_thread_exit(void);   /* the thread's cache goes to the next thread */
void prof_unwind_atfork_child(void);

/* ---- prof_table.c: stacks, live blocks, the pool; all under prof_lock ---------- */
typedef struct prof_counts {
  size_t stacks_used, live_used;
  uint64_t samples, stacks_dropped, live_dropped;
  double inuse;                 /* estimated live bytes */
  _Atomic uint64_t inuse_est;   /* the same, read without the lock */
} prof_counts_t;
extern pthread_mutex_t prof_lock;
extern prof_counts_t prof_counts;
extern prof_stack_t *prof_stacks;
extern uint32_t *prof_stack_order; /* prof_counts.stacks_used indexes of used slots */
extern _Atomic size_t prof_live_big;  /* sampled large/huge blocks live: free looks them up */
bool prof_tables_init(void);          /* maps the tables once; false if it cannot */
size_t prof_table_bytes(void);        /* what they map */
/* A block of class c from the pool, recorded; NULL if out of memory. */
void *prof_record_small(uint32_t c, size_t n, double scale, const uintptr_t *frames, uint32_t depth);
void prof_record_big(void *p, size_t n, double scale, const uintptr_t *frames, uint32_t depth);
/* Every stack as a sample (out: PROF_STACK_SLOTS entries); returns how many. */
size_t prof_snapshot(prof_sample_t *out);
void prof_free_block(void *p, hak_slab_t *s); /* a free of a block in a pool slab */
void prof_forget(void *p); /* a large or huge block is freed: drop it if sampled */
hak_inline void prof_free_large(void *p) {
  if (hak_unlikely(atomic_load_explicit(&prof_live_big, memory_order_relaxed) != 0)) prof_forget(p);
}

/* ---- prof.c ------------------------------------------------------------------- */
extern _Atomic bool prof_on;      /* sampling now */
extern _Atomic bool prof_ever_on; /* started once: exit and thread exit have work */
void *prof_sample_on(hak_heap_t *h, size_t n, size_t align, bool zero);
/* Heap h's prof_left went negative on an allocation of n bytes (aligned to align, 0 for
 * malloc's 16; zeroed if zero): resets it and returns the sampled block, or NULL.
 * Inline, as is the next, so that a program not profiling never runs prof.c's code,
 * which the link puts with the cold code (CMakeLists.txt). */
hak_inline void *prof_sample(hak_heap_t *h, size_t n, size_t align, bool zero) {
  if (HAKMEM_SECURE || !atomic_load_explicit(&prof_on, memory_order_relaxed)) {
    h->prof_left = INT64_MAX;
    return NULL;
  }
  return prof_sample_on(h, n, align, zero);
}
/* large_alloc, counted and sampled like any other allocation. */
hak_inline void *prof_large_alloc(size_t n, size_t align, unsigned flags) { /* LARGE_ZERO... */
  hak_heap_t *h = hak_tls_heap;
  if (h != &hak_heap_empty && hak_unlikely((h->prof_left -= (int64_t)n) < 0)) {
    void *p = prof_sample(h, n, align, flags & LARGE_ZERO);
    if (p != NULL) return p;
  }
  return large_alloc(n, align, flags);
}
void prof_init(void); /* from the constructor, with HAKMEM_PROF=1 */
void prof_exit(void); /* from the destructor: the exit profile and the leak report */

#pragma GCC visibility pop

#endif
