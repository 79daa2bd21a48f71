/* OS memory: mmap, munmap, madvise, mremap, mprotect, the clock. Nothing else talks to the kernel
 * about memory, so every mapping hakmem makes is visible here. */

#include "base/base.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/mman.h>
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

/* ---- injected failures (Debug builds only) ---------------------------------------
 * One row per primitive: HAKMEM_FAULT (docs/memory-limits.md) makes the N-th call, a
 * run of calls from it, or each call with a probability, fail as the kernel would,
 * with the kernel's errno, without calling it. In a release build fault_hit is the
 * constant false and every line of it compiles away. A new primitive adds a row. */
#if HAKMEM_DEBUG
typedef struct fault_row {
  const char *name;
  int err;             /* what the kernel answers */
  uint64_t nth, count; /* fail calls nth .. nth+count-1 (1-based; 0: none) */
  uint32_t ppm;        /* and each call with this chance in a million */
  _Atomic uint64_t calls, failed;
} fault_row_t;
static fault_row_t fault_rows[OS_PRIM_COUNT] = {
    [OS_MMAP] = {.name = "mmap", .err = ENOMEM},
    [OS_MUNMAP] = {.name = "munmap", .err = ENOMEM},
    [OS_MREMAP] = {.name = "mremap", .err = ENOMEM},
    [OS_MPROTECT] = {.name = "mprotect", .err = ENOMEM},
    [OS_DONTNEED] = {.name = "dontneed", .err = EAGAIN},
    [OS_POPULATE] = {.name = "populate", .err = EINVAL}, /* kernels before 5.14 */
    [OS_HUGEPAGE] = {.name = "hugepage", .err = EINVAL}, /* kernels without THP */
};
static uint64_t fault_seed;
static _Atomic int fault_state; /* 0 not read yet, 1 off, 2 armed */

static uint64_t read_dec(const char **s) {
  uint64_t v = 0;
  while (**s >= '0' && **s <= '9') v = v * 10 + (uint64_t)(*(*s)++ - '0');
  return v;
}

static bool fault_wait; /* "wait": armed only when the program sets debug.faults = 1 */

/* "prim:N[+count][:p=PPM]" items joined by commas, prim a row's name or "all"; a
 * "seed=S" item seeds the chances, a "wait" item holds them back until the program
 * asks. Unknown text is reported and ignored. */
static void fault_parse(const char *s) {
  while (s != NULL && *s != '\0') {
    const char *item = s;
    size_t len = strcspn(item, ","), nlen = strcspn(item, ":,");
    s = item[len] ? item + len + 1 : item + len;
    if (len == 4 && memcmp(item, "wait", 4) == 0) {
      fault_wait = true;
      continue;
    }
    if (len > 5 && memcmp(item, "seed=", 5) == 0) {
      const char *v = item + 5;
      fault_seed = read_dec(&v);
      continue;
    }
    uint64_t nth = 0, count = 1, ppm = 0;
    const char *v = item + nlen;
    if (*v == ':') v++;
    if (*v >= '0' && *v <= '9') nth = read_dec(&v);
    if (*v == '+') {
      v++;
      count = read_dec(&v);
    }
    if (*v == ':' && v[1] == 'p' && v[2] == '=') {
      v += 3;
      ppm = read_dec(&v);
    }
    bool all = nlen == 3 && memcmp(item, "all", 3) == 0, found = all;
    for (int i = 0; i < OS_PRIM_COUNT; i++) {
      if (!all && (strlen(fault_rows[i].name) != nlen || memcmp(item, fault_rows[i].name, nlen) != 0))
        continue;
      fault_rows[i].nth = nth;
      fault_rows[i].count = count;
      fault_rows[i].ppm = (uint32_t)(ppm > 1000000 ? 1000000 : ppm);
      found = true;
    }
    if (!found || (*v != ',' && *v != '\0')) {
      static const char msg[] = "hakmem: HAKMEM_FAULT: ignoring an item it cannot read\n";
      error_write_stderr(msg, sizeof msg - 1);
    }
  }
}

static uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15u;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9u;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebu;
  return x ^ (x >> 31);
}

/* Does this call of primitive p fail? errno is set as the kernel would set it. */
static bool fault_hit(enum os_prim p) {
  int st = atomic_load_explicit(&fault_state, memory_order_acquire);
  if (st == 0) {
    int saved = errno;
    fault_parse(secure_getenv("HAKMEM_FAULT"));
    errno = saved;
    int expected = 0;
    atomic_compare_exchange_strong(&fault_state, &expected, fault_wait ? 1 : 2);
    st = atomic_load_explicit(&fault_state, memory_order_acquire);
  }
  fault_row_t *r = &fault_rows[p];
  uint64_t n = atomic_fetch_add_explicit(&r->calls, 1, memory_order_relaxed) + 1;
  if (st != 2) return false;
  bool fail = (r->nth != 0 && n >= r->nth && n - r->nth < r->count) ||
              (r->ppm != 0 && mix64(fault_seed ^ ((uint64_t)p << 56) ^ n) % 1000000 < r->ppm);
  if (!fail) return false;
  atomic_fetch_add_explicit(&r->failed, 1, memory_order_relaxed);
  errno = r->err;
  return true;
}

/* Off, or on again with the calls counted from here (the failures a test sets up
 * while it takes its bearings are not the ones it means). */
void os_fault_arm(bool on) {
  if (on) {
    fault_hit(OS_MMAP); /* the spec read, if it was not yet */
    for (int i = 0; i < OS_PRIM_COUNT; i++) {
      atomic_store_explicit(&fault_rows[i].calls, 0, memory_order_relaxed);
      atomic_store_explicit(&fault_rows[i].failed, 0, memory_order_relaxed);
    }
  }
  atomic_store_explicit(&fault_state, on ? 2 : 1, memory_order_release);
}

uint64_t os_fault_count(bool failed) {
  uint64_t sum = 0;
  for (int i = 0; i < OS_PRIM_COUNT; i++)
    sum += atomic_load_explicit(failed ? &fault_rows[i].failed : &fault_rows[i].calls, memory_order_relaxed);
  return sum;
}
#else
#define fault_hit(p) false
void os_fault_arm(bool on) {}
uint64_t os_fault_count(bool failed) { return 0; }
#endif

_Atomic uint64_t os_kept_bytes; /* refused munmaps' bytes, still mapped (given back) */

static void *map_anonymous_prot(size_t size, int prot, int flags) {
  if (fault_hit(OS_MMAP)) return NULL;
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

void *os_map_block(size_t size, size_t align, size_t offset) { return map_aligned(size, align, offset, 0); }

bool os_address_space_limited(void) {
  struct rlimit l;
  return getrlimit(RLIMIT_AS, &l) == 0 && l.rlim_cur != RLIM_INFINITY;
}

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000 /* Linux 4.17; older kernels take it as a hint */
#endif
/* Where over-mapping by `align` does not fit under the address-space limit (ulimit -v):
 * `size` bytes at an `align`-aligned address found without it. The kernel places
 * mappings top-down, so the aligned addresses just below the one it picks for `size`
 * bytes are usually free; a few are tried, each only if nothing is mapped there. */
#define MAP_PART_TRIES 16
void *os_map_aligned_part(size_t size, size_t align) {
  void *probe = map_anonymous(size, MAP_NORESERVE);
  if (probe == NULL) return NULL;
  os_unmap(probe, size);
  uintptr_t at = (uintptr_t)probe & ~(uintptr_t)(align - 1);
  for (int i = 0; i < MAP_PART_TRIES && at >= align; i++, at -= align) {
    if (fault_hit(OS_MMAP)) return NULL;
    void *p = mmap((void *)at, size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
    if (p == MAP_FAILED) {
      if (errno == EEXIST) continue; /* something is there: the next one down */
      return NULL;
    }
    note_mapped();
    if ((uintptr_t)p == at) return p;
    os_unmap(p, size); /* a kernel that took the address as a hint */
  }
  errno = ENOMEM;
  return NULL;
}

_Atomic uint64_t os_purge_calls, os_purge_bytes;

static bool purge_pages(void *p, size_t size) {
  int saved = errno;
  bool ok = !fault_hit(OS_DONTNEED) && madvise(p, size, MADV_DONTNEED) == 0;
  errno = saved;
  return ok;
}

/* The kernel refuses an munmap that would split a mapping past vm.max_map_count
 * (ENOMEM): the range stays mapped, its pages are given back, and it is counted
 * (os_kept_bytes) rather than reused, since no list holds it any more. Anything else
 * means a wrong range: a bug. */
void os_unmap(void *p, size_t size) {
  note_unmapping();
  int saved = errno;
  bool ok = !fault_hit(OS_MUNMAP) && munmap(p, size) == 0;
  if (!ok) {
    if (HAKMEM_DEBUG != 0 && errno != ENOMEM) error_fatal("munmap failed");
    purge_pages(p, size);
    atomic_fetch_add_explicit(&os_kept_bytes, size, memory_order_relaxed);
  }
  errno = saved;
}

void os_purge(void *p, size_t size) {
  /* MADV_DONTNEED rather than MADV_FREE: users and container limits read RSS, and
   * DONTNEED makes it fall at once; the pages read back as zero, which calloc uses.
   * Refused (EAGAIN), they are cleared instead, so that they read as zero all the same:
   * what was promised holds, only the memory stays resident. The range is writable
   * here: every caller purges memory it may write (guard pages are purged first). */
  if (!purge_pages(p, size)) memset(p, 0, size);
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
  int rc = fault_hit(OS_POPULATE) ? -1 : madvise(p, size, MADV_POPULATE_WRITE);
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
  if (!fault_hit(OS_HUGEPAGE)) madvise(p, size, enable ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  errno = saved;
}

/* The system's THP mode, read once: never (or no THP in this kernel), madvise, always.
 * Every process asks it when it maps its first region, so the file's name and the words
 * are immediates, not strings: a string would map the library's read-only data, unwind
 * tables and all (test memory_hot_text). */
static void put8(char *to, uint64_t v) { memcpy(to, &v, 8); }

os_thp_mode_t os_thp_mode(void) {
  static _Atomic int mode = -1;
  int m = atomic_load_explicit(&mode, memory_order_relaxed);
  if (m < 0) {
    int saved = errno;
    char path[48], buf[128];
    put8(path + 0, 0x72656b2f7379732full);  /* /sys/ker */
    put8(path + 8, 0x742f6d6d2f6c656eull);  /* nel/mm/t */
    put8(path + 16, 0x65726170736e6172ull); /* ranspare */
    put8(path + 24, 0x70656775685f746eull); /* nt_hugep */
    put8(path + 32, 0x62616e652f656761ull); /* age/enab */
    put8(path + 40, 0x000000000064656cull); /* led */
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t got = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
    if (fd >= 0) close(fd);
    m = OS_THP_NEVER; /* no THP in this kernel, or a mode not known: never */
    for (ssize_t i = 0; i + 1 < got; i++) {
      if (buf[i] != '[') continue;
      if (buf[i + 1] == 'a') m = OS_THP_ALWAYS;
      else if (buf[i + 1] == 'm') m = OS_THP_MADVISE;
      break;
    }
    atomic_store_explicit(&mode, m, memory_order_relaxed);
    errno = saved;
  }
  return (os_thp_mode_t)m;
}

/* Grows a mapping where it is, or (to != NULL) moves its pages to `to`, a mapping of
 * new_size bytes made for it. Pages move, nothing is copied. NULL on failure. */
void *os_remap(void *old, size_t old_size, size_t new_size, void *to) {
  if (fault_hit(OS_MREMAP)) return NULL;
  note_unmapping();
  void *p = to ? mremap(old, old_size, new_size, MREMAP_MAYMOVE | MREMAP_FIXED, to)
               : mremap(old, old_size, new_size, 0);
  if (p == MAP_FAILED) return NULL;
  note_mapped();
  return p;
}

bool os_protect(void *p, size_t size, bool accessible) {
  if (fault_hit(OS_MPROTECT)) return false;
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
  if (fault_hit(OS_MPROTECT)) return false;
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
size_t os_read_proc(const char *path, char *buf, size_t size) {
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
  end += error_fmt_dec(end, (uint64_t)tid);
  memcpy(path, "/proc/self/task/", sizeof "/proc/self/task/" - 1);
  memcpy(end, "/schedstat", sizeof "/schedstat");
  if (os_read_proc(path, buf, sizeof buf) == 0) return false;
  uint64_t ran = 0;
  for (const char *c = buf; *c >= '0' && *c <= '9'; c++) ran = ran * 10 + (uint64_t)(*c - '0');
  memcpy(end, "/stat", sizeof "/stat");
  if (os_read_proc(path, buf, sizeof buf) == 0) return false;
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
