/* Checkers: valgrind's memcheck and the sanitizers (AddressSanitizer, ThreadSanitizer and
 * the others that bring an allocator of their own). What runs is decided once, while the
 * dynamic linker relocates the library: every hak_ entry point, and every standard name
 * that the checkers do not replace, is an ifunc (HAK_CHECKED_ENTRY) that resolves either
 * to hakmem's own code, unchanged, or to its checked version here. So the fast paths carry
 * no test, and a program under no checker runs nothing of this file but the choice at load.
 *
 *   memcheck   replaces malloc, free, new, delete and most C names in hakmem itself.
 *              Blocks of the hak_ functions stay hakmem's and are reported to memcheck
 *              with client requests: a malloc-like block between redzones (a memcheck
 *              error where a program reads or writes them), undefined until written;
 *              at free a free-like block, kept inaccessible in a quarantine of 16 MiB
 *              before hakmem gets it back. Pointers hakmem did not hand out go to the
 *              process's free, realloc or malloc_usable_size: memcheck's.
 *   sanitizer  a runtime that intercepts malloc is in the process: the hak_ functions
 *              call the process's malloc and friends, the sanitizer's, which checks them.
 *              If hakmem's malloc comes first instead (libhakmem.so preloaded, or
 *              libhakmem.a linked into the program), the sanitizer cannot see the heap:
 *              set-up says so on stderr and the process exits with status 1.
 *
 * The standard names called here (malloc, free, ...) mean whichever the process uses:
 * the checker's (tools/check_layers.py names them). */

#include "api/api.h"
#include "hakmem.h"

#include <errno.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#if HAKMEM_VALGRIND
#include <valgrind/memcheck.h>
#endif

#if HAKMEM_CHECKERS

/* ---- which checker, decided at load ------------------------------------------------ */
/* Defined by the runtime of each sanitizer that replaces malloc; resolved at load. */
extern void __asan_init(void) __attribute__((weak));
extern void __tsan_init(void) __attribute__((weak));
extern void __msan_init(void) __attribute__((weak));
extern void __hwasan_init(void) __attribute__((weak));
extern void __lsan_init(void) __attribute__((weak));

static const char *sanitizer_loaded(void) {
  if (__asan_init != NULL) return "AddressSanitizer";
  if (__tsan_init != NULL) return "ThreadSanitizer";
  if (__msan_init != NULL) return "MemorySanitizer";
  if (__hwasan_init != NULL) return "HWAddressSanitizer";
  if (__lsan_init != NULL) return "LeakSanitizer";
  return NULL;
}

static int checker_decided = -1;
#if HAKMEM_VALGRIND
static uint64_t vg_probe, vg_probe_vbits; /* memcheck alone answers GET_VBITS with 1 */
#endif

/* Holds checker_decided's address once the library's relocations are done. */
static void *volatile relocated_probe = (void *)&checker_decided;

/* Called by the resolvers, while the libraries are being relocated: no call into libc,
 * no thread-local storage, no stack protector (a static program runs resolvers before
 * its TLS exists). Under valgrind, only memcheck tracks blocks: callgrind (make
 * perfcheck) and the other tools see hakmem as it is. Another library relocated before
 * this one (a sanitizer's runtime, when hakmem is preloaded) may bind to our names
 * before our weak references are: then the answer is CHECKER_UNKNOWN, not kept. */
HAK_RESOLVER_SAFE int checker_at_load(void) {
  int m = checker_decided;
  if (m >= 0) return m;
  if (relocated_probe != (void *)&checker_decided) return CHECKER_UNKNOWN;
  m = CHECKER_NONE;
#if HAKMEM_VALGRIND
  if (RUNNING_ON_VALGRIND && VALGRIND_GET_VBITS(&vg_probe, &vg_probe_vbits, sizeof vg_probe) == 1)
    m = CHECKER_MEMCHECK;
#endif
  if (m == CHECKER_NONE && sanitizer_loaded() != NULL) m = CHECKER_SANITIZER;
  checker_decided = m;
  checker_mode = m;
  /* Under a checker, no purge thread: it would show in the checker's reports (a thread
   * still running at exit, its stack "possibly lost") and memory use is not the point. */
  if (m != CHECKER_NONE) opt.background = false;
  return m;
}

/* Is the process's malloc this object's? (Its address, as the dynamic linker bound it,
 * inside our own image.) */
extern char __ehdr_start[] __attribute__((visibility("hidden")));
extern char _end[] __attribute__((visibility("hidden")));
static bool malloc_is_ours(void) {
  uintptr_t m = (uintptr_t)&malloc;
  return m >= (uintptr_t)__ehdr_start && m < (uintptr_t)_end;
}

/* Raw system calls: this may run inside the sanitizer's own start-up (the loader's
 * first malloc), before it can serve the libc calls it intercepts. */
static void say(const char *text) {
  size_t n = 0;
  while (text[n] != '\0') n++;
  syscall(SYS_write, 2, text, n);
}

void checkers_at_start(void) {
  if (checker_at_load() != CHECKER_SANITIZER || !malloc_is_ours()) return;
  /* e.g. "hakmem: ThreadSanitizer is loaded, but hakmem's malloc comes before its own" */
  say("hakmem: ");
  say(sanitizer_loaded());
  say(" is loaded, but hakmem's malloc comes before its own (libhakmem.so preloaded, or "
      "libhakmem.a linked in), so it cannot check the heap: link the program with -lhakmem "
      "instead, or run it without hakmem. Exiting.\n");
  syscall(SYS_exit_group, 1);
  _exit(1);
}

/* ---- memcheck: hak_ blocks as client blocks --------------------------------------- */
#if HAKMEM_VALGRIND
#define VG_REDZONE 16
/* Addresses kept here are stored xor'ed with this, so that the leak checker, which
 * scans all mapped memory for pointers, does not find the blocks through our table. */
#define VG_HIDE ((uintptr_t)0xa5a5000000000000ull)
#define VG_EMPTY 0
#define VG_GONE 1
#define VG_QUARANTINE_SLOTS 4096
#define VG_QUARANTINE_BYTES ((size_t)16 << 20)

typedef struct vg_block {
  uintptr_t user, raw; /* hidden; user VG_EMPTY: a free slot, VG_GONE: a deleted one */
  size_t size, span;   /* requested; bytes of the hakmem block marked inaccessible */
} vg_block_t;

typedef struct vg_freed {
  uintptr_t raw; /* hidden */
  size_t span;
} vg_freed_t;

static pthread_mutex_t vg_lock = PTHREAD_MUTEX_INITIALIZER;
static vg_block_t *vg_table;      /* open addressing, linear probing */
static size_t vg_cap, vg_filled;  /* slots; slots not VG_EMPTY */
static vg_freed_t *vg_quarantine; /* a ring of blocks freed, oldest at vg_q_first */
static size_t vg_q_first, vg_q_count, vg_q_bytes;

static size_t vg_slot(uintptr_t user, size_t cap) {
  return (size_t)(((user >> 4) * 0x9e3779b97f4a7c15ull) >> 20) & (cap - 1);
}

static bool vg_grow(void) {
  size_t cap = vg_cap ? vg_cap * 2 : 4096;
  vg_block_t *t = os_map(cap * sizeof *t);
  if (t == NULL) return false;
  for (size_t i = 0; i < vg_cap; i++) {
    if (vg_table[i].user == VG_EMPTY || vg_table[i].user == VG_GONE) continue;
    size_t j = vg_slot(vg_table[i].user ^ VG_HIDE, cap);
    while (t[j].user != VG_EMPTY) j = (j + 1) & (cap - 1);
    t[j] = vg_table[i];
  }
  if (vg_table != NULL) os_unmap(vg_table, vg_cap * sizeof *vg_table);
  vg_table = t;
  vg_cap = cap;
  size_t live = 0;
  for (size_t i = 0; i < cap; i++) live += t[i].user != VG_EMPTY;
  vg_filled = live;
  return true;
}

static bool vg_insert(uintptr_t user, uintptr_t raw, size_t size, size_t span) {
  pthread_mutex_lock(&vg_lock);
  bool ok = (vg_filled + 1) * 2 <= vg_cap || vg_grow();
  if (ok) {
    size_t j = vg_slot(user, vg_cap);
    while (vg_table[j].user != VG_EMPTY && vg_table[j].user != VG_GONE) j = (j + 1) & (vg_cap - 1);
    if (vg_table[j].user == VG_EMPTY) vg_filled++;
    vg_table[j] = (vg_block_t){user ^ VG_HIDE, raw ^ VG_HIDE, size, span};
  }
  pthread_mutex_unlock(&vg_lock);
  return ok;
}

/* The block at user, if hakmem handed it out here; with `take`, it leaves the table. */
static bool vg_find(uintptr_t user, vg_block_t *out, bool take) {
  bool found = false;
  pthread_mutex_lock(&vg_lock);
  size_t j = vg_cap ? vg_slot(user, vg_cap) : 0;
  for (size_t n = 0; n < vg_cap; j = (j + 1) & (vg_cap - 1), n++) {
    if (vg_table[j].user == VG_EMPTY) break;
    if (vg_table[j].user != (user ^ VG_HIDE)) continue;
    *out = vg_table[j];
    out->raw ^= VG_HIDE;
    if (take) vg_table[j].user = VG_GONE;
    found = true;
    break;
  }
  pthread_mutex_unlock(&vg_lock);
  return found;
}

/* Bytes of the hakmem block at raw, asked as `asked`, that no access may touch. */
static size_t vg_span(void *raw, size_t asked) {
  if (HAKMEM_SECURE) return asked; /* its canary and size word follow */
  uintptr_t a = (uintptr_t)raw;
  switch (region_map_kind(a)) {
  case MAP_REGION: return region_slab_of(a)->block_size;
  case MAP_HUGE: return huge_usable(raw, "malloc");
  default: return asked;
  }
}

/* A block out of the quarantine goes back to hakmem, zeroed (no stale pointer in it
 * keeps another block "reachable" for the leak checker) and defined. */
static void vg_release(uintptr_t raw, size_t span) {
  VALGRIND_MAKE_MEM_UNDEFINED(raw, span);
  memset((void *)raw, 0, span);
  /* hakmem's own checks (the hardened build's look at the neighbouring blocks) read
   * memory memcheck holds inaccessible: not the program's errors. */
  VALGRIND_DISABLE_ERROR_REPORTING;
  fast_free((void *)raw);
  VALGRIND_ENABLE_ERROR_REPORTING;
}

static void *vg_alloc(size_t n, size_t align, bool zero) {
  if (align < 16) align = 16;
  if (n >= (size_t)PTRDIFF_MAX - align - 2 * VG_REDZONE) {
    errno = ENOMEM;
    return NULL;
  }
  size_t total = n + 2 * VG_REDZONE + (align - 16); /* hakmem's blocks are 16-aligned */
  VALGRIND_DISABLE_ERROR_REPORTING;                 /* as in vg_release */
  void *raw = fast_malloc(total);
  VALGRIND_ENABLE_ERROR_REPORTING;
  if (raw == NULL) return NULL;
  uintptr_t user = ((uintptr_t)raw + VG_REDZONE + align - 1) & ~(uintptr_t)(align - 1);
  size_t span = vg_span(raw, total);
  VALGRIND_MAKE_MEM_NOACCESS(raw, span);
  VALGRIND_MALLOCLIKE_BLOCK(user, n, VG_REDZONE, 0);
  if (zero) memset((void *)user, 0, n);
  if (!vg_insert(user, (uintptr_t)raw, n, span)) {
    VALGRIND_FREELIKE_BLOCK(user, VG_REDZONE);
    vg_release((uintptr_t)raw, span);
    errno = ENOMEM;
    return NULL;
  }
  return (void *)user;
}

/* Frees p if hakmem handed it out here; false if it did not. */
static bool vg_free(void *p) {
  vg_block_t b;
  if (!vg_find((uintptr_t)p, &b, true)) return false;
  VALGRIND_FREELIKE_BLOCK(p, VG_REDZONE);
  vg_freed_t out[4];
  size_t n_out = 0;
  pthread_mutex_lock(&vg_lock);
  if (vg_quarantine == NULL) vg_quarantine = os_map(VG_QUARANTINE_SLOTS * sizeof *vg_quarantine);
  if (vg_quarantine == NULL) {
    out[n_out++] = (vg_freed_t){b.raw, b.span};
  } else {
    while (n_out < 3 && vg_q_count > 0 &&
           (vg_q_count == VG_QUARANTINE_SLOTS || vg_q_bytes + b.span > VG_QUARANTINE_BYTES)) {
      vg_freed_t *old = &vg_quarantine[vg_q_first];
      out[n_out++] = (vg_freed_t){old->raw ^ VG_HIDE, old->span};
      vg_q_bytes -= old->span;
      vg_q_first = (vg_q_first + 1) % VG_QUARANTINE_SLOTS;
      vg_q_count--;
    }
    if (vg_q_count < VG_QUARANTINE_SLOTS) {
      size_t at = (vg_q_first + vg_q_count++) % VG_QUARANTINE_SLOTS;
      vg_quarantine[at] = (vg_freed_t){b.raw ^ VG_HIDE, b.span};
      vg_q_bytes += b.span;
    } else {
      out[n_out++] = (vg_freed_t){b.raw, b.span};
    }
  }
  pthread_mutex_unlock(&vg_lock);
  for (size_t i = 0; i < n_out; i++) vg_release(out[i].raw, out[i].span);
  return true;
}

/* A sized free whose size could not have given this block: as hakmem reports it. */
static void vg_check_size(void *p, const vg_block_t *b, size_t n, size_t align, const char *fn) {
  if (n <= b->size && (n * 2 >= b->size || b->size <= 16 || b->size <= 2 * align)) return;
  VALGRIND_PRINTF_BACKTRACE("hakmem: %s(): size %zu does not fit the block %p of %zu bytes\n", fn, n, p,
                            b->size);
  error_fatal_pointer("size mismatch", fn, p);
}

#define MEMCHECK (checker_mode == CHECKER_MEMCHECK)
void checkers_atfork(bool prepare) {
  if (!MEMCHECK) return;
  if (prepare) pthread_mutex_lock(&vg_lock);
  else pthread_mutex_unlock(&vg_lock);
}
#else
#define MEMCHECK 0
static void *vg_alloc(size_t n, size_t align, bool zero) {
  (void)n, (void)align, (void)zero;
  return NULL;
}
void checkers_atfork(bool prepare) { (void)prepare; }
#endif

/* ---- the checked hak_ functions ------------------------------------------------------ */
static bool pow2(size_t a) { return a != 0 && (a & (a - 1)) == 0; }
static bool valid_posix_align(size_t a) { return pow2(a) && a % sizeof(void *) == 0; }

void *checked_hak_malloc(size_t n) { return MEMCHECK ? vg_alloc(n, 16, false) : malloc(n); }

void checked_hak_free(void *p) {
  if (p == NULL) return;
#if HAKMEM_VALGRIND
  if (MEMCHECK && vg_free(p)) return;
#endif
  free(p); /* not ours: memcheck reports what is wrong with it */
}

void *checked_hak_calloc(size_t count, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(count, size, &total)) {
    errno = ENOMEM;
    return NULL;
  }
  return MEMCHECK ? vg_alloc(total, 16, true) : calloc(count, size);
}

void *checked_hak_realloc(void *p, size_t n) {
#if HAKMEM_VALGRIND
  vg_block_t b;
  if (MEMCHECK && (p == NULL || vg_find((uintptr_t)p, &b, false))) {
    if (p == NULL) return vg_alloc(n, 16, false);
    if (n == 0) {
      vg_free(p);
      return NULL;
    }
    void *q = vg_alloc(n, 16, false);
    if (q == NULL) return NULL;
    memcpy(q, p, b.size < n ? b.size : n);
    vg_free(p);
    return q;
  }
#endif
  return realloc(p, n);
}

void *checked_hak_reallocarray(void *p, size_t count, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(count, size, &total)) {
    errno = ENOMEM;
    return NULL;
  }
  return checked_hak_realloc(p, total);
}

size_t checked_hak_malloc_usable_size(void *p) {
#if HAKMEM_VALGRIND
  vg_block_t b;
  if (MEMCHECK && p != NULL && vg_find((uintptr_t)p, &b, false)) return b.size;
#endif
  return malloc_usable_size(p);
}

/* The process's aligned allocation for any power of two, as hakmem allows it. */
static void *aligned(size_t align, size_t n) {
  if (MEMCHECK) return vg_alloc(n, align, false);
  void *p;
  int err = posix_memalign(&p, align < sizeof(void *) ? sizeof(void *) : align, n);
  if (err != 0) {
    errno = err;
    return NULL;
  }
  return p;
}

int checked_hak_posix_memalign(void **out, size_t align, size_t n) {
  if (!valid_posix_align(align)) return EINVAL;
  if (!MEMCHECK) return posix_memalign(out, align, n);
  int saved = errno;
  void *p = vg_alloc(n, align, false);
  errno = saved;
  if (p == NULL) return ENOMEM;
  *out = p;
  return 0;
}

void *checked_hak_aligned_alloc(size_t align, size_t n) {
  if (!pow2(align)) {
    errno = EINVAL;
    return NULL;
  }
  return aligned(align, n);
}

void *checked_hak_memalign(size_t align, size_t n) { return checked_hak_aligned_alloc(align, n); }

void *checked_hak_valloc(size_t n) { return aligned(os_page_size(), n); }

void *checked_hak_pvalloc(size_t n) {
  size_t page = os_page_size(), rounded = (n + page - 1) & ~(page - 1);
  if (rounded < n) {
    errno = ENOMEM;
    return NULL;
  }
  return aligned(page, rounded ? rounded : page);
}

static void sized_free(void *p, size_t n, size_t align, const char *fn) {
  if (p == NULL) return;
#if HAKMEM_VALGRIND
  vg_block_t b;
  if (MEMCHECK && vg_find((uintptr_t)p, &b, false)) {
    vg_check_size(p, &b, n, align, fn);
    vg_free(p);
    return;
  }
#endif
  (void)n, (void)align, (void)fn;
  free(p);
}

void checked_hak_free_sized(void *p, size_t n) { sized_free(p, n, 16, "free_sized"); }
void checked_hak_free_aligned_sized(void *p, size_t align, size_t n) {
  sized_free(p, n, align, "free_sized");
}

/* ---- standard names the checkers leave to hakmem ------------------------------------
 * Under a checker, malloc and the other names it replaces are its own; these few reach
 * hakmem's definitions, and go on to the names it does replace. */
static void *process_aligned(size_t align, size_t n) {
  void *p;
  int err = posix_memalign(&p, align, n);
  if (err != 0) {
    errno = err;
    return NULL;
  }
  return p;
}

static void *process_pvalloc(size_t n) {
  size_t page = os_page_size(), rounded = (n + page - 1) & ~(page - 1);
  if (rounded < n) {
    errno = ENOMEM;
    return NULL;
  }
  return process_aligned(page, rounded ? rounded : page);
}

void *checked___libc_malloc(size_t n) { return malloc(n); }
void checked___libc_free(void *p) { free(p); }
void *checked___libc_calloc(size_t c, size_t n) { return calloc(c, n); }
void *checked___libc_realloc(void *p, size_t n) { return realloc(p, n); }
void *checked___libc_memalign(size_t a, size_t n) { return memalign(a, n); }
void *checked___libc_valloc(size_t n) { return valloc(n); }
void *checked___libc_pvalloc(size_t n) { return process_pvalloc(n); }
void *checked_pvalloc(size_t n) { return process_pvalloc(n); }
int checked___posix_memalign(void **out, size_t a, size_t n) { return posix_memalign(out, a, n); }
void checked_free_sized(void *p, size_t n) {
  (void)n;
  free(p);
}
void checked_free_aligned_sized(void *p, size_t a, size_t n) {
  (void)a, (void)n;
  free(p);
}
void *checked_reallocarray(void *p, size_t c, size_t n) {
  size_t total;
  if (__builtin_mul_overflow(c, n, &total)) {
    errno = ENOMEM;
    return NULL;
  }
  return realloc(p, total);
}

/* ---- start-up ----------------------------------------------------------------------- */
static void note(const char *a, const char *b, const char *c) {
  error_write_stderr(a, strlen(a));
  error_write_stderr(b, strlen(b));
  error_write_stderr(c, strlen(c));
}

/* One line at start-up, saying whose allocator is in use. */
__attribute__((constructor)) static void checkers_announce(void) {
  switch (checker_at_load()) {
#if HAKMEM_VALGRIND
  case CHECKER_MEMCHECK:
    note("hakmem: under valgrind's memcheck: malloc and new are memcheck's, ",
         "and the blocks of the hak_ functions are reported to it", "\n");
    break;
#endif
  case CHECKER_SANITIZER:
    note("hakmem: ", sanitizer_loaded(), " is loaded: its allocator serves malloc and the hak_ functions\n");
    break;
  default: break;
  }
}

#else /* !HAKMEM_CHECKERS: hakmem itself is built with a sanitizer, which sees it all */
int checker_at_load(void) { return CHECKER_NONE; }
void checkers_at_start(void) {}
void checkers_atfork(bool prepare) { (void)prepare; }
#endif
