/* slab_walk: every kind of pointer against every state of a slab.
 *
 * For each size class, one child process finds where the class's next fresh slab will
 * lie (it allocates until the class's slab count goes up twice: the blocks in between
 * are that slab's, all of them), and a second child, forked from the same state, takes
 * that same slab and walks it through its states:
 *   fresh          one block out, the rest not carved yet
 *   partly carved  a third of the blocks out, every other one of them freed again
 *   full           every block out but those freed (the hardened build's quarantine
 *                  keeps some of them)
 *   remote frees   half of the live blocks freed by another thread
 *   emptied        every block freed
 * At each state it probes every block start of the slab with free, realloc,
 * malloc_usable_size and free_sized (and hak_heap_realloc), and every 16-byte address
 * of the slab's first blocks with free, against a model of which blocks are out: a
 * live block must give its size (and realloc to its size must keep it); any other
 * address must be reported (hakmem's one line naming the pointer: invalid pointer or
 * double free) and abort. A probe that is not reported is a failure: with the invalid
 * free of a slot that carving had not reached, the next mallocs would hand that slot
 * out twice.
 *
 * A probe runs in this process: SIGABRT is caught and the handler jumps back (glibc's
 * abort() lets a handler do so), and the report is read from a pipe that stands in
 * for stderr. hakmem reports a bad pointer before it changes anything, so the heap is
 * as it was; after the first probe that is not reported, the class stops.
 *
 *   slab_walk [FIRST_CLASS [LAST_CLASS]]
 * Exit status: 0 pass, 1 fail. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <inttypes.h>
#include <malloc.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_util.h"

#pragma GCC diagnostic ignored "-Wpragmas"
#pragma GCC diagnostic ignored "-Wuse-after-free"
#pragma GCC diagnostic ignored "-Wfree-nonheap-object"

#ifndef MISUSE_BUILD
#define MISUSE_BUILD 0
#endif
#define SECURE_TAIL (MISUSE_BUILD ? 16 : 0) /* hardened blocks end in 16 bytes of tail */
#define MAX_BLOCKS 8192                     /* a slab holds at most 4096 */
#define MAX_FAILURES 8                      /* per class, then it stops */

static int real_stderr = -1;
static int report_fd = -1;   /* stands in for stderr during the walk: a pipe's end */
static int report_pipe = -1; /* its other end, read after each probe */
static sigjmp_buf probe_jump;
static volatile sig_atomic_t in_probe;
static int failures;

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  int len = vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (len > (int)sizeof buf - 1) len = sizeof buf - 1;
  if (write(real_stderr, buf, (size_t)len) < 0) _exit(2);
}

static void on_abort(int sig) {
  (void)sig;
  if (in_probe) siglongjmp(probe_jump, 1);
  signal(SIGABRT, SIG_DFL);
  raise(SIGABRT);
}

static uint64_t stat_of(const char *fmt, unsigned c) {
  char name[64];
  snprintf(name, sizeof name, fmt, c);
  uint64_t v = 0;
  if (hak_stats_get(name, &v) != 0) {
    say("slab_walk: no figure %s\n", name);
    _exit(2);
  }
  return v;
}

/* ---- the probes -------------------------------------------------------------------- */
enum op { OP_FREE, OP_REALLOC, OP_USABLE, OP_FREE_SIZED, OP_HEAP_REALLOC, OPS };
static const char *const op_name[OPS] = {"free", "realloc", "malloc_usable_size", "free_sized",
                                         "hak_heap_realloc"};
static hak_heap_t *probe_heap; /* hak_heap_realloc's heap: any one will do */

static void do_op(enum op op, void *q, size_t n) {
  switch (op) {
  case OP_FREE: free(tu_hide(q)); break;
  case OP_REALLOC: tu_hide(realloc(tu_hide(q), n)); break;
  case OP_USABLE: tu_hide((void *)(uintptr_t)malloc_usable_size(tu_hide(q))); break;
  case OP_FREE_SIZED: hak_free_sized(tu_hide(q), n); break;
  case OP_HEAP_REALLOC: tu_hide(hak_heap_realloc(probe_heap, tu_hide(q), n)); break;
  default: break;
  }
}

/* True when op on q was reported, naming q, and aborted. */
static bool reported(enum op op, void *q, size_t n, char *why, size_t why_len) {
  in_probe = 1;
  if (sigsetjmp(probe_jump, 0) == 0) {
    do_op(op, q, n);
    in_probe = 0;
    snprintf(why, why_len, "not reported");
    return false;
  }
  in_probe = 0;
  char buf[256] = {0};
  ssize_t got = read(report_pipe, buf, sizeof buf - 1);
  if (got < 0) got = 0;
  buf[got] = 0;
  char *nl = strchr(buf, '\n');
  if (nl) *nl = 0;
  char hex[32];
  snprintf(hex, sizeof hex, " 0x%" PRIxPTR, (uintptr_t)q);
  char *at = strstr(buf, hex);
  bool named = at != NULL && at[strlen(hex)] == 0;
  if (strncmp(buf, "hakmem: ", 8) == 0 && named &&
      (strstr(buf, "invalid pointer 0x") || strstr(buf, "double free 0x")))
    return true;
  snprintf(why, why_len, "aborted with \"%s\"", buf);
  return false;
}

/* ---- the model --------------------------------------------------------------------- */
typedef struct {
  unsigned c;
  size_t size, n; /* block size, bytes asked for */
  uintptr_t start;
  unsigned count;
  bool live[MAX_BLOCKS];
  void *blocks[MAX_BLOCKS];
} slab_t;

static const char *state_name;
static unsigned probes;

static void fail(const slab_t *s, enum op op, uintptr_t q, const char *expect, const char *why) {
  say("FAIL class %u (%zu bytes), %s: %s(%#" PRIxPTR ") = block %+" PRIdPTR " offset %" PRIuPTR
      ": expected %s, %s\n",
      s->c, s->size, state_name, op_name[op], q, (intptr_t)(q - s->start) / (intptr_t)s->size,
      (q - s->start) % s->size, expect, why);
  failures++;
}

/* Probes one address; false once the class should stop. */
static bool probe_at(const slab_t *s, uintptr_t q, enum op first, enum op last) {
  bool start = q >= s->start && (q - s->start) % s->size == 0 && (q - s->start) / s->size < s->count;
  bool live = start && s->live[(q - s->start) / s->size];
  char why[320];
  for (enum op op = first; op <= last; op++) {
    probes++;
    if (!live) {
      if (!reported(op, (void *)q, s->n, why, sizeof why)) {
        fail(s, op, q, "a report", why);
        return failures < MAX_FAILURES && op == OP_USABLE; /* the rest changed nothing */
      }
      continue;
    }
    /* A live block: its size; realloc to what it holds keeps it. (Never free it.) */
    if (op == OP_USABLE || op == OP_REALLOC) {
      in_probe = 1;
      if (sigsetjmp(probe_jump, 0) == 0) {
        bool ok =
            op == OP_USABLE ? malloc_usable_size((void *)q) >= s->n : realloc((void *)q, s->n) == (void *)q;
        in_probe = 0;
        if (!ok) fail(s, op, q, "the live block", "another answer");
      } else {
        in_probe = 0;
        fail(s, op, q, "the live block", "aborted");
        return false;
      }
    }
  }
  return true;
}

/* Every block start with every operation, and three offsets inside each block (16
 * bytes in, the middle, 16 bytes before its end) with free and malloc_usable_size;
 * every 16-byte address from 256 bytes before the first block to 4 KiB (or two blocks)
 * into the slab, and from as far before its end to 256 bytes past it, with free. */
static bool probe_slab(const slab_t *s, const char *state) {
  state_name = state;
  for (unsigned k = 0; k < s->count; k++) {
    uintptr_t b = s->start + k * s->size;
    if (!probe_at(s, b, OP_FREE, OPS - 1)) return false;
    uintptr_t inside[3] = {b + 16, b + (s->size / 2 & ~(size_t)15), b + s->size - 16};
    for (int i = 0; i < 3; i++)
      if (inside[i] > b && !probe_at(s, inside[i], OP_FREE, OP_USABLE)) return false;
  }
  size_t near = 2 * s->size < 4096 ? 2 * s->size : 4096;
  uintptr_t end = s->start + (uintptr_t)s->count * s->size;
  uintptr_t from = s->start >= 256 ? (s->start - 256) & ~(uintptr_t)15 : 0;
  for (uintptr_t q = from; q < s->start + near && q < end; q += 16)
    if ((q - s->start) % s->size != 0 && !probe_at(s, q, OP_FREE, OP_FREE)) return false;
  uintptr_t tail = end - near > s->start + near ? end - near : s->start + near;
  for (uintptr_t q = tail & ~(uintptr_t)15; q < end + 256; q += 16)
    if ((q < s->start || (q - s->start) % s->size != 0 || q >= end) && !probe_at(s, q, OP_FREE, OP_FREE))
      return false;
  return true;
}

static bool in_slab(const slab_t *s, void *p, unsigned *k) {
  uintptr_t a = (uintptr_t)p;
  if (a < s->start || (a - s->start) % s->size || (a - s->start) / s->size >= s->count) return false;
  *k = (unsigned)((a - s->start) / s->size);
  return true;
}

/* Allocates until the class's slab count has gone up once: the last block is the first
 * of a fresh slab. */
static void *first_of_fresh_slab(unsigned c, size_t n) {
  uint64_t before = stat_of("class.%u.slabs", c);
  for (unsigned i = 0; i < 100000; i++) {
    void *p = malloc(n);
    if (p == NULL) return NULL;
    if (stat_of("class.%u.slabs", c) > before) return p;
  }
  return NULL;
}

/* ---- the thread that frees remotely ------------------------------------------------ *
 * Made before a child looks for its slab, in both children: what pthread_create
 * allocates is then the same in both, and never a block of the slab walked. */
static int remote_go[2];
static pthread_t remote_thread;
static void *free_half(void *arg);

static void *remote_main(void *arg) {
  char go;
  if (read(remote_go[0], &go, 1) != 1) return NULL;
  return free_half(arg);
}

static void start_remote(void *arg) {
  if (pipe(remote_go) != 0 || pthread_create(&remote_thread, NULL, remote_main, arg) != 0) _exit(2);
}

/* ---- child A: where the fresh slab lies ---------------------------------------------- */
static void find_slab(unsigned c, size_t size, size_t n, int out) {
  start_remote(NULL);
  hak_heap_new(); /* as walk() makes probe_heap */
  uintptr_t min = UINTPTR_MAX, max = 0;
  unsigned count = 0;
  void *p = first_of_fresh_slab(c, n);
  uint64_t slabs = stat_of("class.%u.slabs", c);
  while (p != NULL && stat_of("class.%u.slabs", c) == slabs && count < MAX_BLOCKS) {
    uintptr_t a = (uintptr_t)p;
    if (a < min) min = a;
    if (a > max) max = a;
    count++;
    p = malloc(n);
  }
  uint64_t msg[2] = {min, count};
  if (p == NULL || count == 0 || (max - min) % size != 0 || (max - min) / size + 1 != count) msg[1] = 0;
  if (write(out, msg, sizeof msg) != sizeof msg) _exit(2);
  _exit(0);
}

static void *free_half(void *arg) {
  slab_t *s = arg;
  unsigned seen = 0;
  for (unsigned k = 0; k < s->count; k++) {
    if (!s->live[k]) continue;
    if (seen++ % 2 == 0) {
      free(s->blocks[k]);
      s->live[k] = false;
    }
  }
  return NULL;
}

/* ---- child B: the walk ------------------------------------------------------------- */
static slab_t slab;

static void walk(unsigned c, size_t size, size_t n, uintptr_t start, unsigned count) {
  slab_t *s = &slab;
  s->c = c, s->size = size, s->n = n, s->start = start, s->count = count;
  start_remote(s);
  probe_heap = hak_heap_new();
  void *p = first_of_fresh_slab(c, n);
  unsigned k;
  if (p == NULL || !in_slab(s, p, &k)) {
    say("slab_walk: class %u: the fresh slab is not where the first child found it\n", c);
    _exit(2);
  }
  s->live[k] = true, s->blocks[k] = p;
  if (dup2(report_fd, 2) < 0) _exit(2);
  if (!probe_slab(s, "fresh")) _exit(1);

  /* Partly carved: a third out, every other one of those freed again. */
  unsigned want = count / 3, got = 1;
  while (got < want) {
    p = malloc(n);
    if (p == NULL || !in_slab(s, p, &k) || s->live[k]) {
      free(p); /* not from this slab: not live either */
      break;
    }
    s->live[k] = true, s->blocks[k] = p, got++;
  }
  for (unsigned i = 0, seen = 0; i < count; i++)
    if (s->live[i] && seen++ % 2 == 1) free(s->blocks[i]), s->live[i] = false;
  if (!probe_slab(s, "partly carved")) _exit(1);

  /* Full: allocate until the next slab starts. */
  uint64_t slabs = stat_of("class.%u.slabs", c);
  for (;;) {
    p = malloc(n);
    if (p == NULL) _exit(2);
    if (stat_of("class.%u.slabs", c) != slabs || !in_slab(s, p, &k)) {
      free(p); /* the next slab's first block: not live either */
      break;
    }
    s->live[k] = true, s->blocks[k] = p;
  }
  if (!probe_slab(s, "full")) _exit(1);

  /* Remote frees: another thread frees half of the live blocks. */
  if (write(remote_go[1], "g", 1) != 1 || pthread_join(remote_thread, NULL) != 0) _exit(2);
  if (!probe_slab(s, "after remote frees")) _exit(1);

  /* Emptied. */
  for (unsigned i = 0; i < count; i++)
    if (s->live[i]) free(s->blocks[i]), s->live[i] = false;
  if (!probe_slab(s, "emptied")) _exit(1);
  if (getenv("SLAB_WALK_VERBOSE")) say("slab_walk: class %u: %u probes\n", c, probes);
  _exit(failures ? 1 : 0);
}

int main(int argc, char **argv) {
  real_stderr = dup(2);
  int ends[2];
  if (real_stderr < 0 || pipe2(ends, O_NONBLOCK) != 0 || hak_stats_get == NULL) return 2;
  report_pipe = ends[0], report_fd = ends[1];
  setvbuf(stdout, NULL, _IONBF, 0);
  struct sigaction sa = {0};
  sa.sa_handler = on_abort;
  sa.sa_flags = SA_NODEFER;
  sigaction(SIGABRT, &sa, NULL);
  uint64_t classes = 0;
  hak_stats_get("build.class_count", &classes);
  unsigned first = argc > 1 ? (unsigned)atoi(argv[1]) : 0;
  unsigned last = argc > 2 ? (unsigned)atoi(argv[2]) : (unsigned)classes - 1;
  int failed = 0;
  unsigned walked = 0;
  for (unsigned c = first; c <= last && c < classes; c++) {
    size_t size = stat_of("class.%u.block_size", c);
    if (size <= SECURE_TAIL) continue; /* the hardened build hands out none of 16 bytes */
    size_t n = size - SECURE_TAIL;
    int fds[2];
    if (pipe(fds) != 0) return 2;
    pid_t a = fork();
    if (a == 0) find_slab(c, size, n, fds[1]);
    uint64_t msg[2] = {0, 0};
    close(fds[1]);
    if (read(fds[0], msg, sizeof msg) != sizeof msg || msg[1] == 0) {
      say("slab_walk: class %u: could not find its fresh slab\n", c);
      failed = 1;
    }
    close(fds[0]);
    waitpid(a, NULL, 0);
    if (msg[1] == 0) continue;
    pid_t b = fork();
    if (b == 0) walk(c, size, n, (uintptr_t)msg[0], (unsigned)msg[1]);
    int st = 0;
    waitpid(b, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      say("slab_walk: class %u (%zu bytes, %u blocks): %s %d\n", c, size, (unsigned)msg[1],
          WIFEXITED(st) ? "failed, status" : "killed by signal",
          WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
      failed = 1;
    }
    walked++;
  }
  say("slab_walk: %u classes walked, %s\n", walked, failed ? "FAILED" : "every probe as the model says");
  return failed;
}
