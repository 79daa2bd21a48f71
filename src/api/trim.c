/* malloc_trim: every free page that can safely be reached goes back to the OS now. The
 * hardened build first empties the calling thread's quarantine, so that its blocks can
 * go too; heap_collect (deferred.c) does the rest. */

#include "api/api.h"
#include "hakmem.h"

HAK_EXPORT int hak_malloc_trim(size_t pad) {
  (void)pad; /* hakmem keeps no top-of-heap pad: every free unit can go */
  if (atomic_load_explicit(&init_state, memory_order_acquire) != 2) return 0;
  hak_heap_t *h = tls_heap;
  if (HAKMEM_SECURE && h != &empty_heap) secure_quarantine_flush(h, true);
  return heap_collect(h, true) > 0;
}
