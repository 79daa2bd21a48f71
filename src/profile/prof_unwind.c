/* The heap profiler's stacks (profile.h: prof_unwind).
 *
 * libgcc's _Unwind_Backtrace reads .eh_frame, so it unwinds code built without frame
 * pointers (Debian's binaries). The shared library does not name libgcc_s as a
 * dependency, so that a process that never profiles does not map it (about 100 KiB
 * resident): the profiler's start loads it (HAKMEM_UNWIND_DLOPEN). It interprets each frame's call-frame program, though: about 3,000
 * instructions a frame, 15,000 for a short stack. So each thread keeps the last few
 * stacks it unwound, x86-64 only: for every frame, where its return address was stored
 * (the frame's CFA - 8) and what it was. A sample whose own CFA matches an entry's and
 * finds the same return address in every one of those slots has the same call chain (a
 * frame's CFA follows from its caller's CFA and return address, except in frames that
 * address their stack through a frame pointer, where a stale slot could match by chance
 * and give one sample a wrong stack); it is copied instead of unwound again: about 10
 * instructions a frame. Only slots of the same thread's stack above its current stack
 * pointer are read. A miss, or a stack through a signal frame, unwinds as before.
 *
 * The caches live in os_map memory, one per thread that took a sample, and go to a free
 * list at thread exit for the next thread, which keeps the entries only if its thread
 * descriptor, and so its stack, is where the last owner's was. */

#include "profile/profile.h"

/* Other C libraries (musl) load libgcc_s too, the static archive included: the libgcc_eh.a
 * of a glibc toolchain, which musl-gcc links with, calls glibc's _dl_find_object. A
 * static musl program, where dlopen always fails, then takes samples without stacks. */
#if !defined(HAKMEM_UNWIND_DLOPEN) && !defined(__GLIBC__)
#define HAKMEM_UNWIND_DLOPEN 1
#endif
#ifndef HAKMEM_UNWIND_DLOPEN
#define HAKMEM_UNWIND_DLOPEN 0 /* 1 in the shared libraries (CMakeLists.txt) */
#endif

#include <link.h>
#include <string.h>
#include <unwind.h>

static uintptr_t lib_lo, lib_hi; /* this library's code: leading frames to drop */

#if HAKMEM_UNWIND_DLOPEN
#include <dlfcn.h>
static __typeof__(&_Unwind_Backtrace) unwind_backtrace; /* NULL: no stacks */
static __typeof__(&_Unwind_GetIP) unwind_get_ip;
static __typeof__(&_Unwind_GetCFA) unwind_get_cfa;

static void unwind_load(void) {
  void *lib = dlopen("libgcc_s.so.1", RTLD_NOW);
  if (lib == NULL) return;
  unwind_get_ip = (__typeof__(&_Unwind_GetIP))dlsym(lib, "_Unwind_GetIP");
  unwind_get_cfa = (__typeof__(&_Unwind_GetCFA))dlsym(lib, "_Unwind_GetCFA");
  if (unwind_get_ip != NULL && unwind_get_cfa != NULL)
    unwind_backtrace = (__typeof__(&_Unwind_Backtrace))dlsym(lib, "_Unwind_Backtrace");
}
#else
#define unwind_backtrace _Unwind_Backtrace
#define unwind_get_ip _Unwind_GetIP
#define unwind_get_cfa _Unwind_GetCFA
static void unwind_load(void) {}
#endif

#define UCACHE_ENTRIES 8
#define UCACHE_FRAMES (PROF_MAX_DEPTH + 8)

typedef struct ucache_entry {
  uintptr_t cfa0;                /* prof_unwind's CFA when recorded; 0: unused */
  uint32_t frames;               /* pc[0 .. frames) */
  uint32_t skip;                 /* leading frames inside this library */
  uintptr_t slot[UCACHE_FRAMES]; /* where frame i's return address (pc[i + 1]) was */
  uintptr_t pc[UCACHE_FRAMES];
} ucache_entry_t;

typedef struct ucache {
  ucache_entry_t e[UCACHE_ENTRIES];
  pthread_t self; /* the thread whose stack its entries describe */
  uint32_t next;  /* round-robin victim */
  struct ucache *free_next;
} ucache_t;

static __thread ucache_t *ucache __attribute__((tls_model("initial-exec")));
static ucache_t *ucache_free;
static pthread_mutex_t ucache_lock = PTHREAD_MUTEX_INITIALIZER;

static int find_self(struct dl_phdr_info *info, size_t size, void *arg) {
  uintptr_t self = (uintptr_t)arg;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
    if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X) || self < lo || self >= lo + ph->p_memsz) continue;
    /* Linked into the program itself (the static library): the program's frames are not
     * ours, so none are dropped and stacks start inside the allocator. */
    if (info->dlpi_name == NULL || info->dlpi_name[0] == '\0') return 1;
    lib_lo = lo;
    lib_hi = lo + ph->p_memsz;
    return 1;
  }
  return 0;
}

void prof_unwind_init(void) {
  unwind_load();
  dl_iterate_phdr(find_self, (void *)(uintptr_t)&find_self);
}

struct unwind_state {
  ucache_entry_t *rec;
};

static _Unwind_Reason_Code unwind_step(struct _Unwind_Context *ctx, void *arg) {
  ucache_entry_t *r = ((struct unwind_state *)arg)->rec;
  uintptr_t ip = unwind_get_ip(ctx);
  if (ip == 0) return _URC_END_OF_STACK;
  if (r->frames == r->skip && ip >= lib_lo && ip < lib_hi) r->skip++; /* ours */
  /* In the callback for a frame, libgcc's CFA is its callee's: the return address into
   * this frame was stored just below it. */
  if (r->frames > 0) r->slot[r->frames - 1] = unwind_get_cfa(ctx) - sizeof(uintptr_t);
  r->pc[r->frames++] = ip;
  return r->frames - r->skip >= PROF_MAX_DEPTH || r->frames >= UCACHE_FRAMES ? _URC_END_OF_STACK
                                                                             : _URC_NO_REASON;
}

static uint32_t copy_out(const ucache_entry_t *r, uintptr_t *out) {
  uint32_t n = r->frames - r->skip;
  memcpy(out, r->pc + r->skip, n * sizeof *out);
  return n;
}

#if defined(__x86_64__)
static __thread bool ucache_failed __attribute__((tls_model("initial-exec")));

static ucache_t *cache_get(void) {
  if (ucache != NULL || ucache_failed) return ucache;
  pthread_mutex_lock(&ucache_lock);
  ucache_t *c = ucache_free;
  if (c != NULL) ucache_free = c->free_next;
  pthread_mutex_unlock(&ucache_lock);
  if (c == NULL) c = os_map(sizeof *c);
  ucache_failed = c == NULL;
  if (c == NULL) return NULL;
  /* A thread whose descriptor is where the last owner's was has its stack too: glibc
   * puts the descriptor at the top of the thread's stack, and a thread that takes over
   * a cached stack (thread churn) finds its entries still true. Else they go. */
  if (!pthread_equal(c->self, pthread_self())) {
    for (uint32_t i = 0; i < UCACHE_ENTRIES; i++) c->e[i].cfa0 = 0;
    c->self = pthread_self();
  }
  return ucache = c;
}

static bool entry_matches(const ucache_entry_t *r, uintptr_t cfa0) {
  if (r->cfa0 != cfa0 || r->frames == 0) return false;
  for (uint32_t i = 0; i + 1 < r->frames; i++)
    if (*(const uintptr_t *)r->slot[i] != r->pc[i + 1]) return false;
  return true;
}
#endif

HAK_NOINLINE uint32_t prof_unwind(uintptr_t *out) {
#if HAKMEM_UNWIND_DLOPEN
  if (unwind_backtrace == NULL) return 0; /* libgcc_s was not found */
#endif
#if defined(__x86_64__)
  uintptr_t cfa0 = (uintptr_t)__builtin_dwarf_cfa();
  ucache_t *c = cache_get();
  if (c != NULL) {
    for (uint32_t i = 0; i < UCACHE_ENTRIES; i++)
      if (entry_matches(&c->e[i], cfa0)) return copy_out(&c->e[i], out);
    ucache_entry_t *r = &c->e[c->next++ % UCACHE_ENTRIES];
    struct unwind_state u = {r};
    r->cfa0 = 0;
    r->frames = r->skip = 0;
    unwind_backtrace(unwind_step, &u);
    /* Every slot must lie above the last, on this stack: else never match it. */
    bool sane = r->frames > 1 && r->slot[0] + sizeof(uintptr_t) == cfa0;
    for (uint32_t i = 1; i + 1 < r->frames && sane; i++) sane = r->slot[i] > r->slot[i - 1];
    if (sane) r->cfa0 = cfa0;
    return copy_out(r, out);
  }
#endif
  ucache_entry_t r; /* no cache: unwound every time */
  struct unwind_state u = {&r};
  r.frames = r.skip = 0;
  unwind_backtrace(unwind_step, &u);
  return copy_out(&r, out);
}

void prof_unwind_atfork_child(void) { pthread_mutex_init(&ucache_lock, NULL); }

void prof_unwind_thread_exit(void) {
  ucache_t *c = ucache;
  if (c == NULL) return;
  ucache = NULL;
  pthread_mutex_lock(&ucache_lock);
  c->free_next = ucache_free;
  ucache_free = c;
  pthread_mutex_unlock(&ucache_lock);
}
