/* The probes the walks share (walk_probe.c): an operation on an address, run in this
 * process with SIGABRT caught and hakmem's report read from a pipe that stands in for
 * stderr, checked against a model of which addresses are live blocks.
 *
 * A model is a run of `count` blocks of `size` bytes from `start` (a slab; a large or
 * huge block is a run of one), each live or not, and the range of addresses it covers
 * [lo, hi): every address in it that is not a live block's start must be reported. */
#ifndef HAKMEM_WALK_H
#define HAKMEM_WALK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hakmem.h"

#ifndef MISUSE_BUILD
#define MISUSE_BUILD 0
#endif
#define SECURE_TAIL (MISUSE_BUILD ? 16 : 0) /* hardened blocks end in 16 bytes of tail */
#define MAX_BLOCKS 8192                     /* a slab holds at most 4096 */
#define MAX_FAILURES 8                      /* per walk, then it stops */
#define UNIT ((uintptr_t)65536)             /* spans are whole 64 KiB units */

enum walk_op { OP_FREE, OP_REALLOC, OP_USABLE, OP_FREE_SIZED, OP_HEAP_REALLOC, OPS };

typedef struct {
  unsigned c;     /* the size class; for a large or huge block, its index in the walk */
  size_t size, n; /* block size (the stride of the run), bytes asked for */
  uintptr_t start;
  unsigned count;
  uintptr_t lo, hi; /* the addresses the walk probes */
  bool live[MAX_BLOCKS];
  void *blocks[MAX_BLOCKS];
} walk_model_t;

extern hak_heap_t *walk_probe_heap; /* hak_heap_realloc's heap: any one will do */
extern unsigned walk_probes, walk_failures;

void walk_init(void);    /* the SIGABRT handler and the report pipe */
void walk_capture(void); /* stderr goes to the pipe from here on */
void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
_Noreturn void walk_fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
uint64_t stat_of(const char *fmt, unsigned c);                     /* a figure by name; %u: c */
void walk_state(const char *name);                                 /* the state the next probes are in */
void walk_check(const walk_model_t *m, bool ok, const char *what); /* a state reached */

/* Probes q with ops first..last, against m. False once the walk should stop. */
bool probe_at(const walk_model_t *m, uintptr_t q, enum walk_op first, enum walk_op last);
/* Every block start with every op; every 16-byte address of [from, to) with free (every
 * `stride` bytes only, outside the first and last 4 KiB, with stride > 16), and those in
 * the first and last 4 KiB and 16 bytes into, halfway through and 16 bytes before the
 * end of each block with realloc and malloc_usable_size too (every address with
 * WALK_ALL_OPS set in the environment: three times as long). */
bool probe_range(const walk_model_t *m, uintptr_t from, uintptr_t to, size_t stride);
bool probe_model(const walk_model_t *m, const char *state);      /* all of [lo, hi) */
bool walk_in(const walk_model_t *m, const void *p, unsigned *k); /* a block start of m */
bool walk_resident(uintptr_t from, uintptr_t to, bool any);      /* mincore: any/all pages */

#endif
