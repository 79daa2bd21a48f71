/* malloc_trim: give every free page that can safely be reached back to the OS now. */
#include "internal.h"
#include "hakmem.h"

hak_export int hak_malloc_trim(size_t pad) {
  (void)pad; /* hakmem keeps no top-of-heap pad: every free unit can go */
  if (atomic_load_explicit(&hak_init_state, memory_order_acquire) != 2) return 0;
  return heap_collect(hak_tls_heap, true) > 0;
}
