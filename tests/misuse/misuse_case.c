/* misuse_case: performs one heap misuse in a child process and checks that hakmem
 * caught it. The child must die by SIGABRT after printing hakmem's one-line report on
 * stderr, and a report that names a pointer must name the one that was misused.
 * The cases are listed in cases.def.
 *
 *   misuse_case NAME          run case NAME in a child and check it (what ctest runs)
 *   misuse_case --child NAME  run case NAME in this process (to debug a failure)
 *   misuse_case --list        print the case names
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

/* Using freed pointers is what this program is for. */
#pragma GCC diagnostic ignored "-Wpragmas"
#pragma GCC diagnostic ignored "-Wuse-after-free"

#define EXIT_SKIP 77
#define EXIT_SETUP 3 /* the case could not set itself up: a failure, not a catch */

/* ---- what a case expects ----------------------------------------------------------- */

enum {
  OK_EXIT = 0, /* no report: the child must exit 0 */
  MSG_DOUBLE_FREE = 1 << 0,
  MSG_INVALID_FREE = 1 << 1,
  MSG_INVALID_REALLOC = 1 << 2,
  MSG_INVALID_USABLE = 1 << 3,
  MSG_SIZE_MISMATCH = 1 << 4,
  MSG_OVERFLOW = 1 << 5,
  MSG_WRITE_AFTER_FREE = 1 << 6,
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

void misuse_announce(const void *p) {
  fprintf(stderr, ANNOUNCE "%" PRIxPTR "\n", (uintptr_t)p);
}

/* ---- helpers the cases share ------------------------------------------------------- */

static void setup_failed(const char *what) {
  fprintf(stderr, "misuse_case: setup failed: %s\n", what);
  _exit(EXIT_SETUP);
}

/* malloc whose result the compiler cannot see through; the first byte is written so
 * the block is really in use. */
static char *xmalloc(size_t size) {
  char *p = tu_hide(malloc(size));
  if (p == NULL) setup_failed("malloc returned NULL");
  p[0] = 1;
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

/* Writes `len` bytes at `p`, past what the compiler can check. */
static void scribble(char *p, size_t len) {
  volatile char *v = tu_hide(p);
  for (size_t i = 0; i < len; i++) v[i] = 0x5a;
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
  fprintf(stderr, "misuse_case: the second malloc %s the first block\n",
          p == q ? "reused" : "did not reuse");
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
  scribble(buf, sizeof buf);
  misuse_announce(buf);
  misuse(tu_hide(buf));
}

static void call_free(void *p) { free(p); }
static void call_realloc(void *p) { tu_hide(realloc(p, 128)); }
static void call_usable_size(void *p) {
  fprintf(stderr, "misuse_case: malloc_usable_size returned %zu\n", malloc_usable_size(p));
}

static void bad_free_stack(size_t size) { (void)size; on_stack_buffer(call_free); }

static void bad_free_global(size_t size) { (void)size; free_bad(global_array); }

static void bad_free_literal(size_t size) { (void)size; free_bad((void *)"a string literal"); }

static void bad_free_plus(size_t size, size_t offset) {
  char *p = xmalloc(size);
  free_bad(p + offset);
}

static void bad_free_plus1(size_t size) { bad_free_plus(size, 1); }
static void bad_free_plus8(size_t size) { bad_free_plus(size, 8); }
static void bad_free_plus16(size_t size) { bad_free_plus(size, 16); }
static void bad_free_plus4096(size_t size) { bad_free_plus(size, 4096); }

static void bad_free_low(size_t size) { (void)size; free_bad((void *)(uintptr_t)0x10); }

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

static void bad_free_minus16(size_t size) { (void)size; free_bad((void *)(uintptr_t)-16); }

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

static void bad_realloc_stack(size_t size) { (void)size; on_stack_buffer(call_realloc); }

static void bad_usable_size_stack(size_t size) { (void)size; on_stack_buffer(call_usable_size); }

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

static const size_t ok_sizes[] = {0,        1,       16,      17,       100,
                                  1000,     1024,    1025,    8 << 10,  30 << 10,
                                  100 << 10, 1 << 20, 8 << 20, 40 << 20, 64 << 20};
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

/* ---- hardened build only ----------------------------------------------------------- */

static void overflow_by(size_t size, ptrdiff_t offset, size_t len) {
  char *p = xmalloc(size);
  misuse_announce(p);
  scribble(p + offset, len);
  free(p);
}

static void overflow_by_1(size_t size) { overflow_by(size, (ptrdiff_t)size, 1); }
static void overflow_by_32(size_t size) { overflow_by(size, (ptrdiff_t)size, 32); }
static void underflow_by_1(size_t size) { overflow_by(size, -1, 1); }
static void underflow_by_32(size_t size) { overflow_by(size, -32, 32); }

static void memcpy_overflow(size_t size) {
  static char source[4096];
  /* Called through a volatile pointer: a plain memcpy into a block that is freed next
   * is a dead store the compiler may drop. */
  void *(*volatile copy)(void *, const void *, size_t) = memcpy;
  char *p = xmalloc(size);
  misuse_announce(p);
  copy(p, source, size + 16);
  free(p);
}

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

/* ---- the table --------------------------------------------------------------------- */

typedef struct misuse_case {
  const char *name;
  void (*run)(size_t size);
  size_t size;
  unsigned expected;
} misuse_case_t;

static const misuse_case_t cases[] = {
#define CASE(name, fn, size, expected) {#name, fn, size, expected},
#define SECURE CASE
#include "cases.def"
#undef CASE
#undef SECURE
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
      } else if (messages[i].names_pointer && p != misused) {
        printf("FAIL: the report names 0x%" PRIxPTR ", the misused pointer is 0x%" PRIxPTR
               "\n", p, misused);
      } else {
        found = true;
      }
    }
    line = *end == '\0' ? end : end + 1;
  }
  return found;
}

static void print_expected(unsigned expected) {
  printf("expected: SIGABRT after a line starting with");
  const char *sep = " ";
  for (size_t i = 0; i < sizeof messages / sizeof messages[0]; i++) {
    if (expected & messages[i].bit) {
      printf("%s\"%s\"", sep, messages[i].prefix);
      sep = " or ";
    }
  }
  printf("\n");
}

static int check_case(const misuse_case_t *c) {
  printf("case %s\n", c->name);
  fflush(stdout);
  int status = run_child(c);
  printf("--- child stderr ---\n%s--- end ---\n", child_err);
  if (WIFEXITED(status)) {
    printf("child exited with status %d\n", WEXITSTATUS(status));
  } else if (WIFSIGNALED(status)) {
    printf("child killed by signal %d (%s)\n", WTERMSIG(status), strsignal(WTERMSIG(status)));
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == EXIT_SKIP) {
    printf("SKIP\n");
    return EXIT_SKIP;
  }
  bool ok;
  if (c->expected == OK_EXIT) {
    printf("expected: exit status 0\n");
    ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  } else {
    print_expected(c->expected);
    bool found = report_found(c->expected, announced_pointer());
    bool aborted = WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
    if (!found) printf("FAIL: no accepted report on stderr\n");
    if (!aborted) printf("FAIL: the child was not killed by SIGABRT\n");
    ok = found && aborted;
  }
  printf("%s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "--list") == 0) {
    for (size_t i = 0; i < NUM_CASES; i++) printf("%s\n", cases[i].name);
    return 0;
  }
  bool child = argc == 3 && strcmp(argv[1], "--child") == 0;
  const misuse_case_t *c = argc == 2 || child ? find_case(argv[argc - 1]) : NULL;
  if (c == NULL) {
    fprintf(stderr, "usage: misuse_case [--child] CASE | --list\n");
    return 2;
  }
  if (!child) return check_case(c);
  c->run(c->size);
  fprintf(stderr, "misuse_case: the case returned\n");
  return 0;
}
