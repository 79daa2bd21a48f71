/* The static empty heap that a thread uses until it has one of its own, and the
 * thread's two heap pointers: its own heap, which its slabs' owner words name, and the
 * heap malloc allocates from (the same, unless hak_heap_set_default chose a user heap).
 * Here, below the heap layer, because the block layer reads them too: a large block
 * comes from and goes back to the calling thread's span cache. */

#include "block/block.h"

/* The empty slab and heap make "no heap yet" look like "free list empty": the fast
 * path needs no initialisation check. */
slab_t empty_slab = {.owner = OWNER_NONE};
hak_heap_t empty_heap = {.direct = {[0 ... ALL_DIRECT_SLOTS - 1] = &empty_slab}};
__thread hak_heap_t *tls_heap __attribute__((tls_model("initial-exec"))) = &empty_heap;
__thread hak_heap_t *tls_alloc __attribute__((tls_model("initial-exec"))) = &empty_heap;
