/* OS memory: mmap, munmap, madvise, mremap, mprotect, the clock. Nothing else talks to the kernel
 * about memory, so every mapping hakmem makes is visible here. */

#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
/* The kernel orders an munmap before any later mmap that gets the same addresses back,
 * and hakmem's maps of the address space (region map, slab map) are rewritten across
 * such a reuse by whichever threads unmapped and mapped. ThreadSanitizer cannot see
 * that order, so it is told: every unmapping releases, every mapping acquires. */
static char mapping_order;
#define note_unmapping() __tsan_release(&mapping_order)
#define note_mapped() __tsan_acquire(&mapping_order)
#else
#define note_unmapping() ((void)0)
#define note_mapped() ((void)0)
#endif

static void *map_anonymous_prot(size_t size, int prot, int flags) {
  void *p = mmap(NULL, size, prot, MAP_PRIVATE | MAP_ANONYMOUS | flags, -1, 0);
  if (p == MAP_FAILED) return NULL;
  note_mapped();
  return p;
}

/* Never executable: heap memory is data. `flags`: MAP_NORESERVE for hakmem's own
 * reservations, which it touches lazily, or 0 for a block the program asked for, which
 * the kernel's overcommit policy may refuse as it would the C library's. */
static void *map_anonymous(size_t size, int flags) {
  return map_anonymous_prot(size, PROT_READ | PROT_WRITE, flags);
}

void *os_map(size_t size) { return map_anonymous(size, MAP_NORESERVE); }

/* `size` bytes whose byte at `offset` is aligned to `align`. Over-map by the alignment
 * and trim both ends; the kernel hands out addresses top-down, so the next call's first
 * try usually lands aligned already. */
static void *map_aligned(size_t size, size_t align, size_t offset, int flags) {
  void *p = map_anonymous(size, flags);
  if (p == NULL) return NULL;
  if ((((uintptr_t)p + offset) & (align - 1)) == 0) return p;
  os_unmap(p, size);
  size_t over = size + align;
  if (over < size) return NULL;
  char *raw = map_anonymous(over, flags);
  if (raw == NULL) return NULL;
  uintptr_t start = (((uintptr_t)raw + offset + align - 1) & ~(uintptr_t)(align - 1)) - offset;
  size_t head = start - (uintptr_t)raw;
  size_t tail = over - head - size;
  if (head) os_unmap(raw, head);
  if (tail) os_unmap((char *)start + size, tail);
  return (void *)start;
}

void *os_map_aligned(size_t size, size_t align) { return map_aligned(size, align, 0, MAP_NORESERVE); }

void *os_map_block(size_t size, size_t align, size_t offset) {
  return map_aligned(size, align, offset, 0);
}

void os_unmap(void *p, size_t size) {
  note_unmapping();
  if (munmap(p, size) != 0 && HAKMEM_DEBUG) hak_fatal("munmap failed");
}

_Atomic uint64_t os_purge_calls, os_purge_bytes;

void os_purge(void *p, size_t size) {
  /* MADV_DONTNEED rather than MADV_FREE: users and container limits read RSS, and
   * DONTNEED makes it fall at once; the pages read back as zero, which calloc uses. */
  int saved = errno;
  madvise(p, size, MADV_DONTNEED);
  errno = saved;
  atomic_fetch_add_explicit(&os_purge_calls, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&os_purge_bytes, size, memory_order_relaxed);
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif
static _Atomic bool populate_missing; /* the kernel refused it once: never asked again */

bool os_populate(void *p, size_t size) {
  if (atomic_load_explicit(&populate_missing, memory_order_relaxed)) return false;
  int saved = errno;
  int rc = madvise(p, size, MADV_POPULATE_WRITE);
  if (rc != 0 && errno == EINVAL) atomic_store_explicit(&populate_missing, true, memory_order_relaxed);
  errno = saved;
  return rc == 0;
}

bool os_page_resident(const void *p) {
  unsigned char v = 0;
  int saved = errno;
  int rc = mincore((void *)((uintptr_t)p & ~(os_page_size() - 1)), 1, &v);
  errno = saved;
  return rc == 0 && (v & 1);
}

void os_set_huge_pages(void *p, size_t size, bool enable) {
  int saved = errno;
  madvise(p, size, enable ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  errno = saved;
}

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25 /* Linux 6.1 */
#endif
#ifndef PR_GET_THP_DISABLE
#define PR_GET_THP_DISABLE 42
#endif

/* `never` in sysfs is read once (MADV_COLLAPSE would ignore it); the prctl, which a
 * program may set at any time (Redis does, at start-up), at every call. */
bool os_thp_allowed(void) {
  static _Atomic int never = -1;
  int saved = errno;
  int n = atomic_load_explicit(&never, memory_order_relaxed);
  if (n < 0) {
    char buf[128] = "";
    int fd = open("/sys/kernel/mm/transparent_hugepage/enabled", O_RDONLY | O_CLOEXEC);
    ssize_t got = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
    if (fd >= 0) close(fd);
    buf[got > 0 ? got : 0] = '\0';
    n = got <= 0 || strstr(buf, "[never]") != NULL; /* no THP in this kernel: never */
    atomic_store_explicit(&never, n, memory_order_relaxed);
  }
  bool allowed = !n && prctl(PR_GET_THP_DISABLE, 0, 0, 0, 0) == 0;
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
  /* MADV_COLLAPSE refuses a range advised MADV_NOHUGEPAGE: the advice is lifted for the
   * call and put back after, so that later faults there stay small (no compaction on a
   * fault) and the mapping's pieces merge again. */
  madvise(p, size, MADV_HUGEPAGE);
  int rc = fail ? (errno = EINVAL, -1) : madvise(p, size, MADV_COLLAPSE);
  if (rc != 0) how = errno == EINVAL ? OS_COLLAPSE_ADVISED : OS_COLLAPSE_FAILED;
  if (how != OS_COLLAPSE_ADVISED) madvise(p, size, MADV_NOHUGEPAGE);
  errno = saved;
  return how;
}

/* Grows a mapping where it is, or (to != NULL) moves its pages to `to`, a mapping of
 * new_size bytes made for it. Pages move, nothing is copied. NULL on failure. */
void *os_remap(void *old, size_t old_size, size_t new_size, void *to) {
  note_unmapping();
  void *p = to ? mremap(old, old_size, new_size, MREMAP_MAYMOVE | MREMAP_FIXED, to)
               : mremap(old, old_size, new_size, 0);
  if (p == MAP_FAILED) return NULL;
  note_mapped();
  return p;
}

bool os_protect(void *p, size_t size, bool accessible) {
  return mprotect(p, size, accessible ? PROT_READ | PROT_WRITE : PROT_NONE) == 0;
}

void *os_reserve_readonly(size_t size) {
  void *p = map_anonymous_prot(size, PROT_READ, MAP_NORESERVE);
  /* Left out of core dumps: gdb's gcore would otherwise write all of it, zeros and all. */
  if (p != NULL) {
    int saved = errno;
    madvise(p, size, MADV_DONTDUMP);
    errno = saved;
  }
  return p;
}

bool os_set_writable(void *p, size_t size, bool writable) {
  return mprotect(p, size, writable ? PROT_READ | PROT_WRITE : PROT_READ) == 0;
}

size_t os_page_size(void) {
  /* Threads may race to set it, with the same value. */
  static _Atomic size_t page;
  size_t p = atomic_load_explicit(&page, memory_order_relaxed);
  if (p == 0) {
    long v = sysconf(_SC_PAGESIZE);
    p = v > 0 ? (size_t)v : 4096;
    atomic_store_explicit(&page, p, memory_order_relaxed);
  }
  return p;
}

uint64_t os_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Reads a small /proc file whole, with no allocation; 0 on failure. */
static size_t read_proc(const char *path, char *buf, size_t size) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, size - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  return (size_t)n;
}

/* Is thread tid of this process asleep in the kernel (state S)? *mark gets the CPU time
 * it has run so far: the same mark, still asleep, later means it ran no instruction in
 * between. Its time is read before its state, so that a thread that was running when
 * the time was read (and so had its latest run not yet counted) is seen running. */
bool os_thread_asleep(int tid, uint64_t *mark) {
  char path[64], buf[512];
  char *end = path + sizeof "/proc/self/task/" - 1;
  end += hak_fmt_dec(end, (uint64_t)tid);
  memcpy(path, "/proc/self/task/", sizeof "/proc/self/task/" - 1);
  memcpy(end, "/schedstat", sizeof "/schedstat");
  if (read_proc(path, buf, sizeof buf) == 0) return false;
  uint64_t ran = 0;
  for (const char *c = buf; *c >= '0' && *c <= '9'; c++) ran = ran * 10 + (uint64_t)(*c - '0');
  memcpy(end, "/stat", sizeof "/stat");
  if (read_proc(path, buf, sizeof buf) == 0) return false;
  const char *paren = strrchr(buf, ')'); /* the name may hold spaces and parentheses */
  if (paren == NULL || paren[1] != ' ' || paren[2] != 'S') return false;
  *mark = ran;
  return true;
}

int os_thread_id(void) { return (int)syscall(SYS_gettid); }

struct timespec os_monotonic_after(long ns) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  t.tv_nsec += ns;
  t.tv_sec += t.tv_nsec / 1000000000L;
  t.tv_nsec %= 1000000000L;
  return t;
}

#if defined(__GLIBC__) && !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
/* What glibc's pthread_atfork does, called directly: the handlers go when the object
 * that registered them is unloaded (never for libhakmem.so, linked -z nodelete). */
extern int __register_atfork(void (*)(void), void (*)(void), void (*)(void), void *);
extern void *__dso_handle;
int os_atfork(void (*prepare)(void), void (*parent)(void), void (*child)(void)) {
  return __register_atfork(prepare, parent, child, __dso_handle);
}
#else
int os_atfork(void (*prepare)(void), void (*parent)(void), void (*child)(void)) {
  return pthread_atfork(prepare, parent, child);
}
#endif
