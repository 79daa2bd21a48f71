/* The probes slab_walk and span_walk share (walk.h). A probe runs in this process:
 * SIGABRT is caught and the handler jumps back (glibc's abort() lets a handler do so),
 * and the report is read from a pipe that stands in for stderr. hakmem reports a bad
 * pointer before it changes anything, so the heap is as it was; after a probe that is
 * not reported (which may have changed the heap), the walk stops. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <malloc.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "test_util.h"
#include "walk.h"

#pragma GCC diagnostic ignored "-Wpragmas"
#pragma GCC diagnostic ignored "-Wuse-after-free"
#pragma GCC diagnostic ignored "-Wfree-nonheap-object"

hak_heap_t *walk_probe_heap;
unsigned walk_probes, walk_failures;
static bool all_ops; /* WALK_ALL_OPS set: realloc and malloc_usable_size at every address */
static int real_stderr = -1;
static int report_fd = -1;   /* stands in for stderr during the walk: a pipe's end */
static int report_pipe = -1; /* its other end, read after each probe */
static sigjmp_buf probe_jump;
static volatile sig_atomic_t in_probe;
static const char *state_name = "";
static const char *const op_name[OPS] = {"free", "realloc", "malloc_usable_size", "free_sized",
                                         "hak_heap_realloc"};

static void vsay(const char *fmt, va_list ap) {
  char buf[512];
  int len = vsnprintf(buf, sizeof buf, fmt, ap);
  if (len > (int)sizeof buf - 1) len = sizeof buf - 1;
  if (write(real_stderr, buf, (size_t)len) < 0) _exit(2);
}

void say(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsay(fmt, ap);
  va_end(ap);
}

_Noreturn void walk_fatal(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsay(fmt, ap);
  va_end(ap);
  _exit(2);
}

static void on_abort(int sig) {
  (void)sig;
  if (in_probe) siglongjmp(probe_jump, 1);
  signal(SIGABRT, SIG_DFL);
  raise(SIGABRT);
}

void walk_init(void) {
  real_stderr = dup(2);
  int ends[2];
  if (real_stderr < 0 || pipe2(ends, O_NONBLOCK) != 0 || hak_stats_get == NULL) exit(2);
  report_pipe = ends[0], report_fd = ends[1];
  all_ops = getenv("WALK_ALL_OPS") != NULL;
  setvbuf(stdout, NULL, _IONBF, 0);
  struct sigaction sa = {0};
  sa.sa_handler = on_abort;
  sa.sa_flags = SA_NODEFER;
  sigaction(SIGABRT, &sa, NULL);
}

void walk_capture(void) {
  if (dup2(report_fd, 2) < 0) _exit(2);
}

uint64_t stat_of(const char *fmt, unsigned c) {
  char name[64];
  snprintf(name, sizeof name, fmt, c);
  uint64_t v = 0;
  if (hak_stats_get(name, &v) != 0) walk_fatal("walk: no figure %s\n", name);
  return v;
}

void walk_state(const char *name) { state_name = name; }

void walk_check(const walk_model_t *m, bool ok, const char *what) {
  if (ok) return;
  say("FAIL class %u (%zu bytes): state \"%s\" not reached: %s\n", m->c, m->size, state_name, what);
  _exit(1);
}

bool walk_in(const walk_model_t *m, const void *p, unsigned *k) {
  uintptr_t a = (uintptr_t)p;
  if (a < m->start || (a - m->start) % m->size || (a - m->start) / m->size >= m->count) return false;
  *k = (unsigned)((a - m->start) / m->size);
  return true;
}

bool walk_resident(uintptr_t from, uintptr_t to, bool any) {
  size_t page = 4096;
  from &= ~(uintptr_t)(page - 1);
  size_t n = (to - from + page - 1) / page;
  unsigned char v[4096];
  for (size_t done = 0; done < n;) {
    size_t k = n - done < sizeof v ? n - done : sizeof v;
    if (mincore((void *)(from + done * page), k * page, v) != 0) {
      if (errno != ENOMEM) walk_fatal("walk: mincore failed\n");
      memset(v, 0, k); /* unmapped: nothing resident */
    }
    for (size_t i = 0; i < k; i++)
      if ((v[i] & 1) == any) return any;
    done += k;
  }
  return !any;
}

static void do_op(enum walk_op op, void *q, size_t n) {
  switch (op) {
  case OP_FREE: free(tu_hide(q)); break;
  case OP_REALLOC: tu_hide(realloc(tu_hide(q), n)); break;
  case OP_USABLE: tu_hide((void *)(uintptr_t)malloc_usable_size(tu_hide(q))); break;
  case OP_FREE_SIZED: hak_free_sized(tu_hide(q), n); break;
  case OP_HEAP_REALLOC: tu_hide(hak_heap_realloc(walk_probe_heap, tu_hide(q), n)); break;
  default: break;
  }
}

/* True when op on q was reported, naming q, and aborted. */
static bool reported(enum walk_op op, void *q, size_t n, char *why, size_t why_len) {
  in_probe = 1;
  if (sigsetjmp(probe_jump, 0) == 0) {
    do_op(op, q, n);
    in_probe = 0;
    snprintf(why, why_len, "not reported");
    return false;
  }
  in_probe = 0;
  /* The jump left hak_heap_realloc with its heap still the thread's allocation heap. */
  if (op == OP_HEAP_REALLOC) hak_heap_set_default(NULL);
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

static void fail(const walk_model_t *m, enum walk_op op, uintptr_t q, const char *expect, const char *why) {
  say("FAIL class %u (%zu bytes), %s: %s(%#" PRIxPTR ") = block %+" PRIdPTR " offset %" PRIdPTR
      ": expected %s, %s\n",
      m->c, m->size, state_name, op_name[op], q, ((intptr_t)q - (intptr_t)m->start) / (intptr_t)m->size,
      ((intptr_t)q - (intptr_t)m->start) % (intptr_t)m->size, expect, why);
  walk_failures++;
}

bool probe_at(const walk_model_t *m, uintptr_t q, enum walk_op first, enum walk_op last) {
  unsigned k;
  bool live = walk_in(m, (void *)q, &k) && m->live[k];
  char why[320];
  for (enum walk_op op = first; op <= last; op++) {
    walk_probes++;
    if (!live) {
      if (!reported(op, (void *)q, m->n, why, sizeof why)) {
        fail(m, op, q, "a report", why);
        return walk_failures < MAX_FAILURES && op == OP_USABLE; /* the rest changed nothing */
      }
      continue;
    }
    /* A live block: its size; realloc to what it holds keeps it. (Never free it.) */
    if (op == OP_USABLE || op == OP_REALLOC) {
      in_probe = 1;
      if (sigsetjmp(probe_jump, 0) == 0) {
        bool ok =
            op == OP_USABLE ? malloc_usable_size((void *)q) >= m->n : realloc((void *)q, m->n) == (void *)q;
        in_probe = 0;
        if (!ok) fail(m, op, q, "the live block", "another answer");
      } else {
        in_probe = 0;
        fail(m, op, q, "the live block", "aborted");
        return false;
      }
    }
  }
  return true;
}

bool probe_range(const walk_model_t *m, uintptr_t from, uintptr_t to, size_t stride) {
  from &= ~(uintptr_t)15;
  for (uintptr_t q = from; q < to;) {
    unsigned k;
    bool near = q - from < 4096 || to - q <= 4096;
    uintptr_t off = q >= m->start ? (q - m->start) % m->size : 0;
    bool sampled = all_ops || near || off == 16 || off == (m->size / 2 & ~(size_t)15) || off == m->size - 16;
    if (walk_in(m, (void *)q, &k)) {
      if (!probe_at(m, q, OP_FREE, OPS - 1)) return false;
    } else if (!probe_at(m, q, OP_FREE, OP_FREE) || (sampled && !probe_at(m, q, OP_REALLOC, OP_USABLE))) {
      return false;
    }
    q += near || stride < 16 ? 16 : stride;
  }
  return true;
}

bool probe_model(const walk_model_t *m, const char *state) {
  walk_state(state);
  return probe_range(m, m->lo, m->hi, 16);
}
