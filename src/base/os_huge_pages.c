/* Huge pages, the purge thread's calls (space/thp.c): may this process have them, how
 * much of a range is resident, and a 2 MiB range made one huge page. Cold code: only a
 * process with a big heap runs it (CMakeLists.txt: HAKMEM_COLD_SOURCES). os_thp_mode,
 * which every process asks once, is os.c's. */

#include "base/base.h"

#include <errno.h>
#include <sys/mman.h>
#include <sys/prctl.h>

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25 /* Linux 6.1 */
#endif
#ifndef PR_GET_THP_DISABLE
#define PR_GET_THP_DISABLE 42
#endif

/* `never` in sysfs is read once (MADV_COLLAPSE would ignore it); the prctl, which a
 * program may set at any time (Redis does, at start-up), at every call. */
bool os_thp_allowed(void) {
  if (os_thp_mode() == OS_THP_NEVER) return false;
  int saved = errno;
  bool allowed = prctl(PR_GET_THP_DISABLE, 0, 0, 0, 0) == 0;
  errno = saved;
  return allowed;
}

size_t os_resident_pages(void *p, size_t size) {
  unsigned char vec[HUGE_PAGE_SIZE / 4096];
  size_t pages = size / os_page_size(), resident = 0;
  if (pages > sizeof vec) pages = sizeof vec;
  int saved = errno;
  if (mincore(p, pages * os_page_size(), vec) == 0)
    for (size_t i = 0; i < pages; i++) resident += vec[i] & 1;
  errno = saved;
  return resident;
}

os_collapse_t os_collapse(void *p, size_t size, bool fail) {
  int saved = errno;
  os_collapse_t how = OS_COLLAPSED;
  /* A range without advice (THP `madvise`: regions are left so) is collapsed as it is.
   * MADV_COLLAPSE refuses one advised MADV_NOHUGEPAGE (EINVAL, as a kernel without it
   * does): the advice is then lifted for the call and put back after, so that later
   * faults there stay small (no compaction on a fault) and the mapping's pieces merge
   * again. Changing the advice splits the mapping, and every fault in it waits for that,
   * which is why it is the second try. */
  int rc = fail ? (errno = EINVAL, -1) : madvise(p, size, MADV_COLLAPSE);
  if (rc != 0 && errno == EINVAL) {
    madvise(p, size, MADV_HUGEPAGE);
    rc = fail ? (errno = EINVAL, -1) : madvise(p, size, MADV_COLLAPSE);
    if (rc != 0) how = errno == EINVAL ? OS_COLLAPSE_ADVISED : OS_COLLAPSE_FAILED;
    if (how != OS_COLLAPSE_ADVISED) madvise(p, size, MADV_NOHUGEPAGE);
  } else if (rc != 0) {
    how = OS_COLLAPSE_FAILED;
  }
  errno = saved;
  return how;
}
