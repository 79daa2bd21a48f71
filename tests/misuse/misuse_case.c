/* misuse_case: performs one heap misuse in a child process and checks that the outcome
 * is the one cases.def gives for the build under test (MISUSE_BUILD: 0 default, 1
 * hardened; the program is linked with that library). A report must be hakmem's
 * one-line message before SIGABRT, and one that names a pointer must name the one that
 * was misused; a fault must be SIGSEGV or SIGBUS; a property case exits EXIT_HELD or
 * EXIT_NOT_HELD; a misuse that is not caught lets the child exit 0.
 *
 *   misuse_case NAME          run case NAME in a child and check it (what ctest runs)
 *   misuse_case --child NAME  run case NAME in this process (to debug a failure)
 *   misuse_case --list        print the case names
 *   misuse_case --matrix      run every case and print what happened, caught or not,
 *                             judging nothing: for any allocator, preloaded into
 *                             misuse_case_plain (linked with no allocator)
 *
 * Exit status: 0 pass, 1 fail, 77 skip (the allocator lacks a function the case needs).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "misuse.h"
#include "test_util.h"

/* The heap API, where the allocator has it (misuse_case_plain runs others). */
#pragma weak hak_heap_new
#pragma weak hak_heap_malloc
#pragma weak hak_heap_realloc

/* Using freed pointers is what this program is for. */
#pragma GCC diagnostic ignored "-Wpragmas"
#pragma GCC diagnostic ignored "-Wuse-after-free"

#define EXIT_SKIP 77
#define EXIT_SETUP 3     /* the case could not set itself up: a failure, not a catch */
#define EXIT_HELD 40     /* a property case: the property holds */
#define EXIT_NOT_HELD 41 /* ... it does not */
#define CHILD_SECONDS 20 /* a child that runs longer hangs */

#ifndef MISUSE_BUILD
#define MISUSE_BUILD 0
#endif

/* ---- what a case expects ----------------------------------------------------------- */

enum {
  MSG_DOUBLE_FREE = 1 << 0,
  MSG_INVALID_FREE = 1 << 1,
  MSG_INVALID_REALLOC = 1 << 2,
  MSG_INVALID_USABLE = 1 << 3,
  MSG_SIZE_MISMATCH = 1 << 4,
  MSG_OVERFLOW = 1 << 5,
  MSG_WRITE_AFTER_FREE = 1 << 6,
  MSG_ANY = (1 << 7) - 1,
  WENT_ON = 1 << 8, /* exit 0: not caught (or, for an allowed use, fine) */
  FAULT = 1 << 9,   /* SIGSEGV or SIGBUS */
  HELD = 1 << 10,   /* property cases */
  NOT_HELD = 1 << 11,
  OK_EXIT = WENT_ON,     /* an allowed use */
  ABORT_OTHER = 1 << 13, /* SIGABRT without a report we know (other allocators) */
  HANG = 1 << 14,
  OTHER = 1 << 15,
  SKIPPED = 1 << 16,
};

static const struct {
  unsigned bit;
  const char *prefix;
  bool names_pointer; /* the hex number after the prefix is the misused pointer */
} messages[] = {
    {MSG_DOUBLE_FREE, "hakmem: free(): double free 0x", true},
    {MSG_INVALID_FREE, "hakmem: free(): invalid pointer 0x", true},
    {MSG_INVALID_REALLOC, "hakmem: realloc(): invalid pointer 0x", true},
    {MSG_INVALID_USABLE, "hakmem: malloc_usable_size(): invalid pointer 0x", true},
    {MSG_SIZE_MISMATCH, "hakmem: free_sized(): size mismatch 0x", true},
    {MSG_OVERFLOW, "hakmem: heap overflow detected 0x", false},
    {MSG_WRITE_AFTER_FREE, "hakmem: write after free detected 0x", false},
};

#define ANNOUNCE "misuse_case: pointer 0x"

void misuse_announce(const void *p) { fprintf(stderr, ANNOUNCE "%" PRIxPTR "\n", (uintptr_t)p); }

/* ---- helpers the cases share ------------------------------------------------------- */

static void setup_failed(const char *what) {
  fprintf(stderr, "misuse_case: setup failed: %s\n", what);
  _exit(EXIT_SETUP);
}

/* malloc whose result the compiler cannot see through; the first byte is written so
 * the block is really in use (a malloc(0) block has none: any access faults). */
static char *xmalloc(size_t size) {
  char *p = tu_hide(malloc(size));
  if (p == NULL) setup_failed("malloc returned NULL");
  if (size > 0) p[0] = 1;
  return p;
}

static void free_bad(void *p) {
  misuse_announce(p);
  free(tu_hide(p));
}

/* free_sized is C23 and not in every libc (test_util.h declares it and hak_free_sized
 * weak): use the allocator's if it exports one. */
static void call_free_sized(void *p, size_t size) {
  if (free_sized != NULL) {
    free_sized(p, size);
  } else if (hak_free_sized != NULL) {
    hak_free_sized(p, size);
  } else {
    fprintf(stderr, "misuse_case: the allocator has no free_sized\n");
    exit(EXIT_SKIP);
  }
}

/* Allocates and frees blocks of `size` for a while: gives an allocator that finds a
 * misuse late (when it collects remote frees, or when a block leaves quarantine) the
 * chance to do so. */
static void churn(size_t size) {
  enum { BATCH = 1024 };
  static void *blocks[BATCH];
  for (int round = 0; round < 16; round++) {
    for (int i = 0; i < BATCH; i++) blocks[i] = xmalloc(size);
    for (int i = 0; i < BATCH; i++) free(blocks[i]);
  }
}

/* Changes the `len` bytes at `p`, past what the compiler can check: each is flipped by
 * 0x5a, so that a zeroed byte becomes 0x5a and no byte keeps its value (writing a plain
 * 0x5a left a free-list link whose byte was already 0x5a, one address layout in 256,
 * unchanged: a misuse that did not happen). */
static void scribble(char *p, size_t len) {
  volatile char *v = tu_hide(p);
  for (size_t i = 0; i < len; i++) v[i] = (char)(v[i] ^ 0x5a);
}

/* ---- double free ------------------------------------------------------------------- */

static void df_repeat(size_t size) {
  char *p = xmalloc(size);
  free(p);
  free_bad(p);
}

static void df_interleaved(size_t size) {
  char *a = xmalloc(size);
  char *b = xmalloc(size);
  free(a);
  free(b);
  free_bad(a);
}

static void df_reuse(size_t size) {
  char *p = xmalloc(size);
  free(p);
  char *q = xmalloc(size);
  fprintf(stderr, "misuse_case: the second malloc %s the first block\n", p == q ? "reused" : "did not reuse");
  free(q);
  free_bad(q);
}

/* Enough blocks to fill several slabs of the largest size (1 MiB each), all freed but
 * the last: the first slabs are emptied and given back, still resident. A second free
 * of a block in one of them must still read as a double free, from its tag alone (the
 * sixth block lies past the first unit of a multi-unit slab). */
static void df_released(size_t size) {
  size_t n = (4u << 20) / size + 8;
  char **v = (char **)xmalloc(n * sizeof *v);
  for (size_t i = 0; i < n; i++) v[i] = xmalloc(size);
  for (size_t i = 0; i + 1 < n; i++) free(v[i]);
  free_bad(v[5]);
}

static void *thread_free(void *p) {
  free(p);
  return NULL;
}

static void run_thread(void *(*fn)(void *), void *arg) {
  pthread_t t;
  if (pthread_create(&t, NULL, fn, arg) != 0) setup_failed("pthread_create");
  pthread_join(t, NULL);
}

static void df_thread(size_t size) {
  char *p = xmalloc(size);
  run_thread(thread_free, p); /* thread A */
  misuse_announce(p);
  run_thread(thread_free, p); /* thread B, after A's free returned */
  churn(size);
}

/* ---- invalid pointers -------------------------------------------------------------- */

static char global_array[256] __attribute__((aligned(64)));

/* Runs misuse(p) on a live 64-byte stack buffer p. */
static void on_stack_buffer(void (*misuse)(void *p)) {
  char buf[64] __attribute__((aligned(16)));
  memset(tu_hide(buf), 0x5a, sizeof buf);
  misuse_announce(buf);
  misuse(tu_hide(buf));
}

static void call_free(void *p) { free(p); }
static void call_realloc(void *p) { tu_hide(realloc(p, 128)); }
static void call_usable_size(void *p) {
  fprintf(stderr, "misuse_case: malloc_usable_size returned %zu\n", malloc_usable_size(p));
}

static void bad_free_stack(size_t size) {
  (void)size;
  on_stack_buffer(call_free);
}

static void bad_free_global(size_t size) {
  (void)size;
  free_bad(global_array);
}

static void bad_free_literal(size_t size) {
  (void)size;
  free_bad((void *)"a string literal");
}

static void bad_free_plus(size_t size, size_t offset) {
  char *p = xmalloc(size);
  free_bad(p + offset);
}

static void bad_free_plus1(size_t size) { bad_free_plus(size, 1); }
static void bad_free_plus8(size_t size) { bad_free_plus(size, 8); }
static void bad_free_plus16(size_t size) { bad_free_plus(size, 16); }
static void bad_free_plus4096(size_t size) { bad_free_plus(size, 4096); }

static void bad_free_low(size_t size) {
  (void)size;
  free_bad((void *)(uintptr_t)0x10);
}

/* An address high in the user address space with nothing mapped there; should
 * something be mapped at the usual one, a page that was just unmapped. */
static void bad_free_unmapped(size_t size) {
  (void)size;
  long page = sysconf(_SC_PAGESIZE);
  void *p = (void *)(uintptr_t)0x7ff000000000;
  unsigned char resident;
  if (mincore(p, (size_t)page, &resident) == 0 || errno != ENOMEM) {
    p = mmap(NULL, (size_t)page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED || munmap(p, (size_t)page) != 0) setup_failed("mmap");
  }
  free_bad(p);
}

static void bad_free_minus16(size_t size) {
  (void)size;
  free_bad((void *)(uintptr_t)-16);
}

static void bad_free_freed_plus4096(size_t size) {
  char *p = xmalloc(size);
  free(p);
  free_bad(p + 4096);
}

/* 48 is a block boundary in a slab of 48-byte blocks, but inside a 64-byte block. */
static void bad_free_other_class(size_t size) {
  char *a = xmalloc(size);
  char *b = xmalloc(64);
  free_bad(b + 48);
  free(a);
}

/* 4 KiB past a fresh slab's first block of 8 or 64 bytes: a block start of the same
 * slab that lazy carving has not reached. Taken, the slot would later be carved and
 * handed out a second time. The next block (carved with the first, not handed out
 * yet, unless the first ended its carve) is free: a double free. */
static char *uncarved_of(size_t size) { return xmalloc(size) + 4096; }

static void bad_free_uncarved(size_t size) { free_bad(uncarved_of(size)); }

static void bad_free_carved_unused(size_t size) {
  char *p = xmalloc(size);
  free_bad(p + malloc_usable_size(p)); /* the hardened build's next block is further on */
}

static void on_uncarved(size_t size, void (*call)(void *)) {
  char *q = uncarved_of(size);
  misuse_announce(q);
  call(q);
}

static void bad_realloc_uncarved(size_t size) { on_uncarved(size, call_realloc); }

static void bad_usable_size_uncarved(size_t size) { on_uncarved(size, call_usable_size); }

static void bad_free_sized_uncarved(size_t size) {
  char *q = uncarved_of(size);
  misuse_announce(q);
  call_free_sized(q, size);
}

static void bad_heap_realloc_uncarved(size_t size) {
  if (hak_heap_new == NULL) exit(EXIT_SKIP);
  hak_heap_t *h = hak_heap_new();
  char *q = (char *)hak_heap_malloc(h, size) + 4096;
  misuse_announce(q);
  tu_hide(hak_heap_realloc(h, q, size));
}

/* A freed block is no block to size or resize. */
static void on_freed_block(size_t size, void (*call)(void *)) {
  char *p = xmalloc(size);
  free(p);
  misuse_announce(p);
  call(p);
}

static void bad_usable_size_freed(size_t size) { on_freed_block(size, call_usable_size); }

static void bad_realloc_freed(size_t size) { on_freed_block(size, call_realloc); }

static void bad_realloc_stack(size_t size) {
  (void)size;
  on_stack_buffer(call_realloc);
}

static void bad_usable_size_stack(size_t size) {
  (void)size;
  on_stack_buffer(call_usable_size);
}

static void sized_too_big(size_t size) {
  char *p = xmalloc(size);
  misuse_announce(p);
  call_free_sized(p, size * 128);
}

static void sized_too_small(size_t size) {
  char *p = xmalloc(size);
  misuse_announce(p);
  call_free_sized(p, size / 128);
}

/* ---- allowed uses ------------------------------------------------------------------ */

static void ok_free_null(size_t size) {
  (void)size;
  free(tu_hide(NULL));
  free(NULL);
  if (free_sized != NULL || hak_free_sized != NULL) call_free_sized(NULL, 16);
}

static const size_t ok_sizes[] = {0,       1,        16,        17,      100,     1000,     1024,    1025,
                                  8 << 10, 30 << 10, 100 << 10, 1 << 20, 8 << 20, 40 << 20, 64 << 20};
#define OK_SIZES (sizeof ok_sizes / sizeof ok_sizes[0])

static void ok_realloc_same_size(size_t size) {
  (void)size;
  for (size_t i = 1; i < OK_SIZES; i++) { /* not 0: realloc(p, 0) may free p */
    size_t n = ok_sizes[i];
    char *p = tu_hide(malloc(n));
    if (p == NULL) setup_failed("malloc returned NULL");
    memset(p, 0x3c, n);
    char *q = tu_hide(realloc(p, n));
    if (q == NULL) setup_failed("realloc returned NULL");
    for (size_t j = 0; j < n; j += 4093) {
      if (q[j] != 0x3c) setup_failed("realloc lost the contents");
    }
    free(q);
  }
}

static void ok_free_sized_exact(size_t size) {
  (void)size;
  for (size_t n = 1; n <= 4200; n++) call_free_sized(xmalloc(n), n);
  for (size_t i = 0; i < OK_SIZES; i++) {
    size_t n = ok_sizes[i];
    char *p = tu_hide(calloc(1, n));
    if (p == NULL) setup_failed("calloc returned NULL");
    call_free_sized(p, n);
    p = tu_hide(realloc(xmalloc(24), n + 1));
    if (p == NULL) setup_failed("realloc returned NULL");
    call_free_sized(p, n + 1);
  }
}

/* ---- overflow and underflow ------------------------------------------------------- */

static void overflow_by(size_t size, ptrdiff_t offset, size_t len) {
  char *p = xmalloc(size);
  misuse_announce(p);
  scribble(p + offset, len);
  free(p);
}

static void overflow_by_1(size_t size) { overflow_by(size, (ptrdiff_t)size, 1); }
/* Grown by realloc to a size that moves it (hardened: to a block of twice its room): one
 * byte past the new size. */
static void overflow_after_grow(size_t size) {
  char *p = realloc(xmalloc(size), 2 * size + 1);
  if (p == NULL) setup_failed("realloc returned NULL");
  misuse_announce(p);
  scribble(p + 2 * size + 1, 1);
  free(p);
}
static void overflow_by_32(size_t size) { overflow_by(size, (ptrdiff_t)size, 32); }
/* One byte 9 bytes past the end, or 31: over the hardened build's canary word, into the
 * zero bytes before its size word. */
static void overflow_at_9(size_t size) { overflow_by(size, (ptrdiff_t)size + 9, 1); }
static void overflow_at_31(size_t size) { overflow_by(size, (ptrdiff_t)size + 31, 1); }
static void underflow_by_1(size_t size) { overflow_by(size, -1, 1); }
/* One byte 32 bytes before the block: the far end of a 32-byte underflow. */
static void underflow_at_32(size_t size) { overflow_by(size, -32, 1); }
static void underflow_by_32(size_t size) { overflow_by(size, -32, 32); }

/* memcpy through a volatile pointer: a plain memcpy into a block that is freed next is a
 * dead store the compiler may drop. */
static void *(*volatile copy)(void *, const void *, size_t) = memcpy;
static char source[(256 << 10) + 64];

static void memcpy_overflow(size_t size) { /* 16 bytes past the end */
  char *p = xmalloc(size);
  misuse_announce(p);
  copy(p, source, size + 16);
  free(p);
}

static void memcpy_overflow_32(size_t size) {
  char *p = xmalloc(size);
  misuse_announce(p);
  copy(p, source, size + 32);
  free(p);
}

static void memcpy_underflow_32(size_t size) {
  char *p = xmalloc(size);
  misuse_announce(p);
  copy(p - 32, source, size + 32);
  free(p);
}

/* The block is overrun but never freed: its neighbours are allocated and freed. */
static void neighbour(size_t size, ptrdiff_t offset) {
  char *p = xmalloc(size);
  misuse_announce(p);
  scribble(p + offset, 1);
  churn(size);
}

static void overflow_1_neighbour(size_t size) { neighbour(size, (ptrdiff_t)size); }
static void underflow_1_neighbour(size_t size) { neighbour(size, -1); }

enum { MIB = 1 << 20 };

static void overflow_1m(size_t size) {
  char *p = xmalloc(size);
  misuse_announce(p);
  scribble(p + size, MIB);
  free(p);
}

/* One byte 1 MiB past the end, as mimalloc-bench's one_mbyte_overflow writes it: in a
 * fresh process, in units of the region no span has taken yet. */
static void overflow_at_1m(size_t size) { overflow_by(size, (ptrdiff_t)(size - 1 + MIB), 1); }

static void underflow_1m(size_t size) {
  char *p = xmalloc(size);
  /* The default build's small-block outcome (cases.def) holds for a block within 1 MiB
   * of its 64 MiB region's start. A static glibc program's start-up takes slabs of
   * several classes first, and the block lies further in: the case cannot be set up. */
  if (MISUSE_BUILD == 0 && size < (256 << 10) && ((uintptr_t)p & ((64u << 20) - 1)) >= MIB) {
    fprintf(stderr, "misuse_case: the block is %#lx into its region, not within 1 MiB of its start\n",
            (unsigned long)((uintptr_t)p & ((64u << 20) - 1)));
    exit(EXIT_SKIP);
  }
  misuse_announce(p);
  volatile char *v = tu_hide(p);
  for (size_t i = 1; i <= MIB; i++) v[-(ptrdiff_t)i] ^= 0x5a; /* downwards, as it runs */
  free(p);
}

/* ---- write after free ---------------------------------------------------------------- */

static void write_after_free(size_t size) {
  char *p = xmalloc(size);
  free(p);
  misuse_announce(p);
  scribble(p + size / 2, 1);
  churn(size);
}

/* The last byte of the data: the end of the zeroed range, wherever it falls in a word. */
static void write_after_free_last(size_t size) {
  char *p = xmalloc(size);
  free(p);
  misuse_announce(p);
  scribble(p + size - 1, 1);
  churn(size);
}

static void uaf_free_again(size_t size) {
  char *p = xmalloc(size);
  free(p);
  misuse_announce(p);
  scribble(p + size / 2, 1);
  free(p);
}

static void uaf_reuse(size_t size) { write_after_free(size); }

/* ---- malloc(0) ----------------------------------------------------------------------- */

static char *malloc0(void) {
  char *p = tu_hide(malloc(0));
  if (p == NULL) setup_failed("malloc(0) returned NULL");
  misuse_announce(p);
  return p;
}

static void zero_read(size_t size) {
  (void)size;
  volatile char *p = malloc0();
  fprintf(stderr, "misuse_case: read %d\n", p[0]);
}

static void zero_write(size_t size) {
  (void)size;
  volatile char *p = malloc0();
  p[0] = 1;
}

static void zero_read_freed(size_t size) {
  (void)size;
  volatile char *p = malloc0();
  free((char *)p);
  fprintf(stderr, "misuse_case: read %d\n", p[0]);
}

static void zero_write_freed(size_t size) {
  (void)size;
  volatile char *p = malloc0();
  free((char *)p);
  p[0] = 1;
}

static _Noreturn void property(bool held, const char *what) {
  fprintf(stderr, "misuse_case: %s: %s\n", what, held ? "held" : "not held");
  exit(held ? EXIT_HELD : EXIT_NOT_HELD);
}

static void zero_distinct(size_t size) {
  (void)size;
  char *a = tu_hide(malloc(0)), *b = tu_hide(malloc(0));
  property(a != NULL && b != NULL && a != b, "malloc(0) twice gives two distinct pointers");
}

/* ---- reuse ----------------------------------------------------------------------------- */

/* A size of another tier, which realloc must move the block to. */
static size_t other_size(size_t size) { return size <= 16 ? 4096 : 8; }

static void df_realloc(size_t size) {
  char *p = xmalloc(size);
  char *q = tu_hide(realloc(p, other_size(size)));
  if (q == NULL || q == p) setup_failed("realloc did not move the block");
  free_bad(p);
}

static void df_realloc0(size_t size) {
  char *p = xmalloc(size);
  char *q = tu_hide(realloc(p, 0));
  if (q != NULL) setup_failed("realloc(p, 0) did not free the block");
  free_bad(p);
}

static void reuse_next(size_t size) {
  char *p = xmalloc(size);
  free(p);
  char *q = xmalloc(size);
  property(q != p, "the next malloc of the size does not return the block just freed");
}

static void reuse_after_realloc(size_t size) {
  char *p = xmalloc(size);
  char *q = tu_hide(realloc(p, other_size(size)));
  if (q == NULL || q == p) setup_failed("realloc did not move the block");
  char *r = xmalloc(size);
  property(r != p, "the next malloc of the size does not return the block realloc freed");
}

static void reuse_after_downsize(size_t size) {
  char *p = xmalloc(size);
  char *q = tu_hide(realloc(p, size / 8));
  if (q == NULL) setup_failed("realloc returned NULL");
  char *r = xmalloc(size);
  property(r != p, "the next malloc of the size does not return the block realloc shrank");
}

/* ---- what a freed block holds ---------------------------------------------------------- */

#define FILL_WORD 0xa5a5a5a5a5a5a5a5ull

static void *(*volatile set_bytes)(void *, int, size_t) = memset; /* not a dead store */
static void fill(char *p, size_t size) { set_bytes(p, 0xa5, size); }

/* Words of [p, p + size) that still hold the fill. */
static size_t filled_words(const char *p, size_t size) {
  size_t n = 0;
  for (size_t i = 0; i + 8 <= size; i += 8) {
    uint64_t w;
    memcpy(&w, (const char *)tu_hide((void *)(p + i)), 8);
    n += w == FILL_WORD;
  }
  return n;
}

static void zeroed_after_free(size_t size) {
  char *p = xmalloc(size);
  fill(p, size);
  free(p);
  misuse_announce(p);
  property(filled_words(p, size) == 0, "no word of a freed block's data is left in it");
}

static void fresh_blocks(size_t size) {
  char *p = xmalloc(size);
  fill(p, size);
  free(p);
  size_t left = 0;
  for (int i = 0; i < 64; i++) left += filled_words(xmalloc(size), size);
  property(left == 0, "no new block of the size holds a freed block's data");
}

/* Words [from, to) of the freed block at p that hold an address in its 64 MiB-aligned
 * region, as an allocator's raw pointer would: a list link, its slab descriptor. */
static size_t address_words(const char *p, size_t from, size_t to) {
  size_t n = 0;
  for (size_t i = from; i < to; i++) {
    uint64_t w;
    memcpy(&w, (const char *)tu_hide((void *)(p + 8 * i)), 8);
    n += w != 0 && (w ^ (uintptr_t)p) < ((uint64_t)1 << 26);
  }
  return n;
}

static void freed_tag_hidden(size_t size) {
  char *p = xmalloc(size);
  free(p);
  misuse_announce(p);
  property(address_words(p, 1, 2) == 0, "a freed block's second word (its free tag) is no address");
}

static void freed_no_address(size_t size) {
  char *p = xmalloc(size);
  free(p);
  misuse_announce(p);
  property(address_words(p, 0, size / 8) == 0, "no word of a freed block is an address");
}

/* ---- every offset near a block ------------------------------------------------------ */
/* One byte flipped at each offset from 1 to `reach` bytes before the block (p[-k]) or
 * after its last byte (p[size - 1 + k]), each in a process of its own, which then frees
 * the block: the property holds if every one of them was stopped, by a fault or by
 * hakmem's overflow report. */
static bool stopped_at(char *p, ptrdiff_t at) {
  int fds[2];
  if (pipe(fds) != 0) setup_failed("pipe");
  pid_t pid = fork();
  if (pid < 0) setup_failed("fork");
  if (pid == 0) {
    dup2(fds[1], STDERR_FILENO);
    close(fds[0]);
    close(fds[1]);
    scribble(p + at, 1);
    free(p);
    _exit(0);
  }
  close(fds[1]);
  char report[512];
  size_t len = 0;
  for (ssize_t n;
       len < sizeof report - 1 && (n = read(fds[0], report + len, sizeof report - 1 - len)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    len += (size_t)n;
  }
  report[len] = '\0';
  close(fds[0]);
  int status;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) setup_failed("waitpid");
  if (!WIFSIGNALED(status)) return false;
  int sig = WTERMSIG(status);
  return sig == SIGSEGV || sig == SIGBUS ||
         (sig == SIGABRT && strstr(report, "heap overflow detected") != NULL);
}

static _Noreturn void every_offset_of(char *p, size_t size, bool after, size_t reach) {
  for (size_t k = 1; k <= reach; k++) {
    ptrdiff_t at = after ? (ptrdiff_t)(size - 1 + k) : -(ptrdiff_t)k;
    if (!stopped_at(p, at)) {
      fprintf(stderr, "misuse_case: a write %zu bytes %s a %zu-byte block went unseen\n", k,
              after ? "after" : "before", size);
      property(false, "every write near the block is stopped");
    }
  }
  property(true, "every write near the block is stopped");
}

static void every_offset(size_t size, bool after, size_t reach) {
  every_offset_of(xmalloc(size), size, after, reach);
}

/* A block whose neighbours on either side are free: of 256 blocks of the size, one
 * with blocks of its stride (the least distance between two of them) right above and
 * below, both of which are freed. 25 to 32 bytes off an 8-byte block (a 32-byte class in
 * the hardened build) is then a free block's list link; a live neighbour's data there
 * would be beyond any allocator. */
static void every_offset_between_free(size_t size, bool after, size_t reach) {
  enum { N = 256 };
  static char *b[N];
  for (int i = 0; i < N; i++) b[i] = xmalloc(size);
  uintptr_t stride = UINTPTR_MAX;
  for (int i = 0; i < N; i++)
    for (int j = 0; j < N; j++)
      if (b[j] > b[i] && (uintptr_t)(b[j] - b[i]) < stride) stride = (uintptr_t)(b[j] - b[i]);
  for (int i = 0; i < N; i++) {
    int below = -1, above = -1;
    for (int j = 0; j < N; j++) {
      if ((uintptr_t)b[j] == (uintptr_t)b[i] - stride) below = j;
      if ((uintptr_t)b[j] == (uintptr_t)b[i] + stride) above = j;
    }
    if (below < 0 || above < 0) continue;
    free(b[below]);
    free(b[above]);
    every_offset_of(b[i], size, after, reach);
  }
  setup_failed("no block with both neighbours among 256");
}
static void every_offset_before_free_32(size_t size) { every_offset_between_free(size, false, 32); }
static void every_offset_after_free_32(size_t size) { every_offset_between_free(size, true, 32); }

/* Every slack length of the 1024-byte class, 0 to `size` bytes: in the hardened build a
 * block of n bytes (897..1008) is followed by its canary word, 1008 - n zero bytes and its
 * size word, all in the block. One byte written at each slack offset in turn must be
 * caught at free, whatever the length (the check reads short slacks without a loop). */
static _Noreturn void every_slack_length(size_t size) {
  for (size_t slack = 0; slack <= size; slack++) {
    size_t n = 1008 - slack;
    char *p = xmalloc(n);
    for (size_t k = 9; k <= 8 + slack; k++) {
      if (!stopped_at(p, (ptrdiff_t)(n - 1 + k))) {
        fprintf(stderr, "misuse_case: a write %zu bytes after a %zu-byte block went unseen\n", k, n);
        property(false, "every write into a block's slack is stopped");
      }
    }
  }
  property(true, "every write into a block's slack is stopped");
}

static void every_offset_before_4096(size_t size) { every_offset(size, false, 4096); }
static void every_offset_after_4096(size_t size) { every_offset(size, true, 4096); }
static void every_offset_before_32(size_t size) { every_offset(size, false, 32); }
static void every_offset_after_32(size_t size) { every_offset(size, true, 32); }
static void every_offset_after_24(size_t size) { every_offset(size, true, 24); }
static void every_offset_before_24(size_t size) { every_offset(size, false, 24); }

/* ---- the table --------------------------------------------------------------------- */

typedef struct misuse_case {
  const char *name;
  void (*run)(size_t size);
  size_t size;
  unsigned expected[2]; /* default build, hardened build */
} misuse_case_t;

static const misuse_case_t cases[] = {
#define CASE(name, fn, size, in_default, in_hardened) {#name, fn, size, {in_default, in_hardened}},
#include "cases.def"
#undef CASE
};
#define NUM_CASES (sizeof cases / sizeof cases[0])

static const misuse_case_t *find_case(const char *name) {
  for (size_t i = 0; i < NUM_CASES; i++) {
    if (strcmp(cases[i].name, name) == 0) return &cases[i];
  }
  return NULL;
}

/* ---- the parent: run the child, then judge what it did ----------------------------- */

static char child_err[1 << 16];

/* Runs `c` in a fresh process image; returns its wait status, its stderr in
 * child_err. */
static int run_child(const misuse_case_t *c) {
  int fds[2];
  if (pipe(fds) != 0) {
    perror("pipe");
    exit(1);
  }
  pid_t pid = fork();
  if (pid < 0) {
    perror("fork");
    exit(1);
  }
  if (pid == 0) {
    struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core); /* SIGABRT is expected: no core files */
    alarm(CHILD_SECONDS);             /* kept across exec: a hang ends in SIGALRM */
    dup2(fds[1], STDERR_FILENO);
    close(fds[0]);
    close(fds[1]);
    execl("/proc/self/exe", "misuse_case", "--child", c->name, (char *)NULL);
    _exit(127);
  }
  close(fds[1]);
  size_t len = 0;
  for (;;) {
    ssize_t n = read(fds[0], child_err + len, sizeof child_err - 1 - len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    len += (size_t)n;
    if (len == sizeof child_err - 1) break; /* keep the beginning: the report is there */
  }
  child_err[len] = '\0';
  close(fds[0]);
  int status;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      perror("waitpid");
      exit(1);
    }
  }
  return status;
}

/* The last pointer the child announced, 0 if none. */
static uintptr_t announced_pointer(void) {
  uintptr_t p = 0;
  for (const char *s = child_err; (s = strstr(s, ANNOUNCE)) != NULL; s++) {
    p = (uintptr_t)strtoull(s + strlen(ANNOUNCE), NULL, 16);
  }
  return p;
}

/* Looks for a line that starts with an accepted report and checks its pointer. */
static bool report_found(unsigned expected, uintptr_t misused) {
  bool found = false;
  for (const char *line = child_err; *line != '\0';) {
    const char *end = strchr(line, '\n');
    if (end == NULL) end = line + strlen(line);
    for (size_t i = 0; i < sizeof messages / sizeof messages[0]; i++) {
      size_t plen = strlen(messages[i].prefix);
      if (!(expected & messages[i].bit) || (size_t)(end - line) <= plen ||
          strncmp(line, messages[i].prefix, plen) != 0) {
        continue;
      }
      char *num_end;
      uintptr_t p = (uintptr_t)strtoull(line + plen, &num_end, 16);
      if (num_end == line + plen) {
        printf("FAIL: no hex pointer after \"%s\"\n", messages[i].prefix);
      } else if (messages[i].names_pointer && misused != UINTPTR_MAX && p != misused) {
        printf("FAIL: the report names 0x%" PRIxPTR ", the misused pointer is 0x%" PRIxPTR "\n", p, misused);
      } else {
        found = true;
      }
    }
    line = *end == '\0' ? end : end + 1;
  }
  return found;
}

static const struct {
  unsigned bit;
  const char *name;
} outcome_names[] = {
    {WENT_ON, "went on (exit 0)"},
    {FAULT, "SIGSEGV/SIGBUS"},
    {HELD, "property held"},
    {NOT_HELD, "property not held"},
    {ABORT_OTHER, "SIGABRT"},
    {HANG, "hang (killed)"},
    {OTHER, "other"},
    {SKIPPED, "skipped"},
};

static void print_outcomes(const char *label, unsigned set) {
  printf("%s:", label);
  const char *sep = " ";
  for (size_t i = 0; i < sizeof messages / sizeof messages[0]; i++) {
    if (set & messages[i].bit) {
      printf("%sSIGABRT after \"%s\"", sep, messages[i].prefix);
      sep = " or ";
    }
  }
  for (size_t i = 0; i < sizeof outcome_names / sizeof outcome_names[0]; i++) {
    if (set & outcome_names[i].bit) {
      printf("%s%s", sep, outcome_names[i].name);
      sep = " or ";
    }
  }
  printf("\n");
}

/* What the child did, as one outcome bit (a MSG_ bit: the report, checked against
 * `accept`'s messages and the misused pointer). */
static unsigned classify(int status, unsigned accept) {
  if (WIFEXITED(status)) {
    switch (WEXITSTATUS(status)) {
    case 0: return WENT_ON;
    case EXIT_HELD: return HELD;
    case EXIT_NOT_HELD: return NOT_HELD;
    case EXIT_SKIP: return SKIPPED;
    default: return OTHER;
    }
  }
  if (!WIFSIGNALED(status)) return OTHER;
  int sig = WTERMSIG(status);
  if (sig == SIGSEGV || sig == SIGBUS) return FAULT;
  if (sig == SIGALRM) return HANG;
  if (sig != SIGABRT) return OTHER;
  uintptr_t misused = announced_pointer();
  for (size_t i = 0; i < sizeof messages / sizeof messages[0]; i++) {
    if ((accept & messages[i].bit) && report_found(messages[i].bit, misused)) return messages[i].bit;
  }
  for (size_t i = 0; i < sizeof messages / sizeof messages[0]; i++) {
    if (!(accept & messages[i].bit) && report_found(messages[i].bit, UINTPTR_MAX)) return messages[i].bit;
  }
  return ABORT_OTHER;
}

static int check_case(const misuse_case_t *c) {
  unsigned expected = c->expected[MISUSE_BUILD];
  printf("case %s (%s build)\n", c->name, MISUSE_BUILD ? "hardened" : "default");
  fflush(stdout);
  int status = run_child(c);
  printf("--- child stderr ---\n%s--- end ---\n", child_err);
  if (WIFEXITED(status)) {
    printf("child exited with status %d\n", WEXITSTATUS(status));
  } else if (WIFSIGNALED(status)) {
    printf("child killed by signal %d (%s)\n", WTERMSIG(status), strsignal(WTERMSIG(status)));
  }
  unsigned got = classify(status, expected);
  if (got == SKIPPED) {
    printf("SKIP\n");
    return EXIT_SKIP;
  }
  print_outcomes("expected", expected);
  print_outcomes("got", got);
  bool ok = (got & expected) != 0;
  printf("%s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}

/* Every case, under whatever allocator this process runs with: the outcome and whether
 * it counts as caught (stopped, or a property that holds). */
static int print_matrix(void) {
  int caught = 0, counted = 0;
  printf("%-40s %-8s %s\n", "case", "caught", "outcome");
  for (size_t i = 0; i < NUM_CASES; i++) {
    const misuse_case_t *c = &cases[i];
    if (strncmp(c->name, "ok_", 3) == 0) continue;
    fflush(stdout);
    unsigned got = classify(run_child(c), MSG_ANY);
    const char *what = "?";
    for (size_t j = 0; j < sizeof messages / sizeof messages[0]; j++)
      if (got == messages[j].bit) what = messages[j].prefix;
    for (size_t j = 0; j < sizeof outcome_names / sizeof outcome_names[0]; j++)
      if (got == outcome_names[j].bit) what = outcome_names[j].name;
    bool yes = (got & (MSG_ANY | FAULT | HELD | ABORT_OTHER)) != 0;
    if (got != SKIPPED) {
      counted++;
      caught += yes;
    }
    printf("%-40s %-8s %s\n", c->name, got == SKIPPED ? "-" : yes ? "yes" : "no", what);
  }
  printf("caught %d of %d\n", caught, counted);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "--list") == 0) {
    for (size_t i = 0; i < NUM_CASES; i++) printf("%s\n", cases[i].name);
    return 0;
  }
  if (argc == 2 && strcmp(argv[1], "--matrix") == 0) return print_matrix();
  bool child = argc == 3 && strcmp(argv[1], "--child") == 0;
  const misuse_case_t *c = argc == 2 || child ? find_case(argv[argc - 1]) : NULL;
  if (c == NULL) {
    fprintf(stderr, "usage: misuse_case [--child] CASE | --list | --matrix\n");
    return 2;
  }
  if (!child) return check_case(c);
  c->run(c->size);
  fprintf(stderr, "misuse_case: the case returned\n");
  return 0;
}
